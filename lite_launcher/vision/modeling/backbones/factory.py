"""The backbone factory (TFM's official/vision/modeling/backbones/factory.py).

Each backbone family lives in its own module of this folder, as TFM's: `resnet` (ResNet,
ResNet-RS), `resnet_deeplab` (dilated ResNet), `mobilenet` (MobileNet V1 / V2 / V3 / MultiAVG /
V4) and `vit` (ViT, DeiT), all built from the shared layers of `modeling.layers`. A family
registers one builder for its `backbone.type` with `register_backbone_builder`;
`BACKBONE_MODULES` says which module to import for a type, so a family is loaded only when a
model needs it.
"""

from __future__ import annotations

import importlib
from typing import Callable, Dict

import keras

from lite_launcher.core.base_config import ConfigError
from lite_launcher.vision.configs.backbones import Backbone
from lite_launcher.vision.modeling.layers.nn_layers import NormSettings

# backbone.type -> the module whose import registers its builder.
BACKBONE_MODULES = {
    "resnet": "lite_launcher.vision.modeling.backbones.resnet",
    "dilated_resnet": "lite_launcher.vision.modeling.backbones.resnet_deeplab",
    "mobilenet": "lite_launcher.vision.modeling.backbones.mobilenet",
    "vit": "lite_launcher.vision.modeling.backbones.vit",
    "spinenet": "lite_launcher.vision.modeling.backbones.spinenet",
    "spinenet_mobile": "lite_launcher.vision.modeling.backbones.spinenet_mobile",
    "mobiledet": "lite_launcher.vision.modeling.backbones.mobiledet",
}
_BACKBONE_BUILDERS: Dict[str, Callable[..., keras.Model]] = {}


def register_backbone_builder(backbone_type: str):
    """Decorator: `fn(input_shape, family_config, settings) -> keras.Model` builds the
    backbone for `backbone.type == backbone_type` (TFM's factory.register_backbone_builder)."""

    def decorator(fn):
        _BACKBONE_BUILDERS[backbone_type] = fn
        return fn

    return decorator


def output_specs(backbone: keras.Model) -> Dict[str, tuple]:
    """{level: shape with batch} of the endpoints a decoder reads (TFM's
    `backbone.output_specs`): every endpoint, except MobileNet's final map (the family sets
    `output_specs` on the models it builds)."""
    specs = getattr(backbone, "output_specs", None)
    if specs is None:
        specs = {key: tuple(tensor.shape) for key, tensor in backbone.output.items()}
    return dict(specs)


def build_backbone(input_shape, backbone_config: Backbone,
                   settings: NormSettings) -> keras.Model:
    """The backbone `backbone_config` chooses, as a Functional model {level: feature map}."""
    backbone_type = backbone_config.type
    if backbone_type not in _BACKBONE_BUILDERS and backbone_type in BACKBONE_MODULES:
        importlib.import_module(BACKBONE_MODULES[backbone_type])
    if backbone_type not in _BACKBONE_BUILDERS:
        raise ConfigError(
            f"task.model.backbone.type {backbone_type!r} must be one of "
            f"{', '.join(sorted(set(BACKBONE_MODULES) | set(_BACKBONE_BUILDERS)))}.")
    return _BACKBONE_BUILDERS[backbone_type](list(input_shape), backbone_config.get(), settings)
