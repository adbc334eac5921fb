"""Vision models (TFM's official/vision/modeling/): `backbones/`, `decoders/`, `heads/`,
`layers/`, the model classes and the model `factory`. The names of the former `modeling.py`
(the classification model and builder, the backbone factory, the shared layers) resolve here on
first use."""

from lite_launcher.vision import reexport

__getattr__ = reexport(__name__, ("lite_launcher.vision.modeling.factory",
                                  "lite_launcher.vision.modeling.backbones.factory",
                                  "lite_launcher.vision.modeling.layers.nn_layers"))
