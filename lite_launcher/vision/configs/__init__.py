"""Vision configs (TFM's official/vision/configs/); the names of the former `configs.py`
(classification configs, backbones, common configs) resolve here on first use."""

from lite_launcher.vision import reexport

__getattr__ = reexport(__name__, ("lite_launcher.vision.configs.image_classification",))
