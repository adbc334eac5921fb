"""Stand-ins for the notebook-only modules TFM's Colab tutorials import (matplotlib.pyplot,
IPython.display), which are not lite's: they record what the notebook would show."""

import numpy as np


class Pyplot:
    """matplotlib.pyplot as the tutorials call it: keeps the images, titles and histogram
    values it is given; every other call (figure, subplot, axis, suptitle, show) does nothing."""

    def __init__(self):
        self.shown, self.titles, self.hists = [], [], []

    def imshow(self, image):
        self.shown.append(np.array(image))

    def title(self, text, **kwargs):
        del kwargs  # colour
        self.titles.append(text)

    def hist(self, values):
        self.hists.append(np.asarray(values))

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


class Display:
    """IPython.display: `Javascript(text)` returns the text."""

    @staticmethod
    def Javascript(text):  # pylint: disable=invalid-name
        return text
