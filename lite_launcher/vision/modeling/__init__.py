"""Vision models (TFM's official/vision/modeling/): `backbones/`, `decoders/`, `heads/`,
`layers/`, each family's model with its builder, and `factory` (what the builders share). The
names of the former `modeling.py` (the classification model and builder, the backbone factory,
the shared layers) resolve here on first use."""

from lite_launcher.vision import reexport

__getattr__ = reexport(__name__, ("lite_launcher.vision.modeling.classification_model",
                                  "lite_launcher.vision.modeling.backbones.factory",
                                  "lite_launcher.vision.modeling.layers.nn_layers"))
