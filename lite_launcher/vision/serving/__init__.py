"""Serving signatures (TFM's official/vision/serving/): `export_base` and one module per family.
The names of the former `serving.py` (image classification's) resolve here on first use."""

from lite_launcher.vision import reexport

__getattr__ = reexport(__name__, ("lite_launcher.vision.serving.image_classification",))
