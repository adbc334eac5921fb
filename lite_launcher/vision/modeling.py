"""The classification model and the backbone factory (TFM's classification_model.py and
backbones/factory.py).

Each backbone family lives in its own module, as TFM's `official/vision/modeling/backbones/`:
`resnet.py` (ResNet, ResNet-RS), `resnet_deeplab.py` (dilated ResNet), `mobilenet.py`
(MobileNet V1 / V2 / V3 / MultiAVG / V4) and `vit.py` (ViT, DeiT), all built from the shared
layers of `layers.py`. A family registers one builder for its `backbone.type` with
`register_backbone_builder`; `BACKBONE_MODULES` says which module to import for a type, so a
family is loaded only when a model needs it.

- `build_classification_model`: backbone -> [BN] -> global average pool -> dropout -> dense,
  as TFM's ClassificationModel; `model.backbone` and `model.checkpoint_items` as TFM's.
- The shared layers (`NormSettings`, `FusedBatchNormalization`, `L2KernelRegularizer`,
  `StochasticDepth`, `SqueezeExcitation`, `LayerScale`, `make_divisible`, ...) live in
  `layers.py` and are importable from here too.

Every layer has `get_config` (and `from_config` where its arguments are not plain values), so
`model.save("m.keras")` / `keras.models.load_model` and `keras.models.clone_model` round-trip.
Layers follow the global Keras dtype policy, so `mixed_float16` / `mixed_bfloat16` work; the
logits come out in the policy's compute dtype (the task casts them to float32).
"""

from __future__ import annotations

import importlib
from typing import Callable, Dict, Optional

import keras

from lite_launcher.vision import configs
# The shared layers, importable from here as before layers.py held them.
from lite_launcher.vision.layers import (  # noqa: F401
    FusedBatchNormalization, L2KernelRegularizer, LayerScale, NormSettings, SettingsBlock,
    SqueezeExcitation, StochasticDepth, get_stochastic_depth_rate, make_divisible,
    register_serializable, round_filters, serialize_value)

# backbone.type -> the module whose import registers its builder.
BACKBONE_MODULES = {
    "resnet": "lite_launcher.vision.resnet",
    "dilated_resnet": "lite_launcher.vision.resnet_deeplab",
    "mobilenet": "lite_launcher.vision.mobilenet",
    "vit": "lite_launcher.vision.vit",
}
_BACKBONE_BUILDERS: Dict[str, Callable[..., keras.Model]] = {}

def register_backbone_builder(backbone_type: str):
    """Decorator: `fn(input_shape, family_config, settings) -> keras.Model` builds the
    backbone for `backbone.type == backbone_type` (TFM's factory.register_backbone_builder)."""

    def decorator(fn):
        _BACKBONE_BUILDERS[backbone_type] = fn
        return fn

    return decorator


def build_backbone(input_shape, backbone_config: configs.Backbone,
                   settings: "NormSettings") -> keras.Model:
    """The backbone `backbone_config` chooses, as a Functional model {level: feature map}."""
    backbone_type = backbone_config.type
    if backbone_type not in _BACKBONE_BUILDERS and backbone_type in BACKBONE_MODULES:
        importlib.import_module(BACKBONE_MODULES[backbone_type])
    if backbone_type not in _BACKBONE_BUILDERS:
        raise configs.ConfigError(
            f"task.model.backbone.type {backbone_type!r} must be one of "
            f"{', '.join(sorted(set(BACKBONE_MODULES) | set(_BACKBONE_BUILDERS)))}.")
    return _BACKBONE_BUILDERS[backbone_type](list(input_shape), backbone_config.get(), settings)


@register_serializable
class ClassificationModel(keras.Model):
    """backbone -> [BN] -> global average pooling -> dropout -> dense logits (TFM's head)."""

    def __init__(self, backbone: keras.Model, num_classes: int, input_shape,
                 dropout_rate: float = 0.0, kernel_initializer="random_uniform",
                 kernel_regularizer=None, add_head_batch_norm: bool = False,
                 norm_settings: Optional[NormSettings] = None, **kwargs):
        norm_settings = NormSettings.of(norm_settings)
        inputs = keras.Input(shape=tuple(input_shape), name="image")
        endpoints = backbone(inputs)
        # TFM's head reads the endpoint with the largest key, compared as strings (the last
        # feature map; ViT's named 'pre_logits' / 'encoded_tokens' sort above the levels).
        x = endpoints[max(endpoints)] if isinstance(endpoints, dict) else endpoints
        if add_head_batch_norm:
            x = norm_settings.norm(name="head_norm")(x)
        if len(x.shape) == 3:  # a token sequence (ViT's encoded_tokens)
            x = keras.layers.GlobalAveragePooling1D()(x)
        else:
            x = keras.layers.GlobalAveragePooling2D()(x)
        x = keras.layers.Dropout(dropout_rate)(x)
        logits = keras.layers.Dense(num_classes, kernel_initializer=kernel_initializer,
                                    kernel_regularizer=kernel_regularizer, name="logits")(x)
        super().__init__(inputs=inputs, outputs=logits, **kwargs)
        self._backbone = backbone
        self._head_config = dict(
            num_classes=num_classes, input_shape=list(input_shape), dropout_rate=dropout_rate,
            kernel_initializer=serialize_value(kernel_initializer),
            kernel_regularizer=serialize_value(kernel_regularizer),
            add_head_batch_norm=add_head_batch_norm, norm_settings=norm_settings.get_config())

    @property
    def backbone(self) -> keras.Model:
        """The backbone (restored alone by `init_checkpoint_modules: backbone`)."""
        return self._backbone

    @property
    def checkpoint_items(self) -> Dict[str, keras.Model]:
        """Saved in checkpoints besides the model, as TFM's: `backbone`."""
        return {"backbone": self._backbone}

    def get_config(self):
        return {"name": self.name, "trainable": self.trainable,
                "backbone": keras.saving.serialize_keras_object(self._backbone),
                **self._head_config}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(
            config["backbone"], custom_objects=custom_objects)
        for key, deserialize in (("kernel_regularizer", keras.regularizers.deserialize),
                                 ("kernel_initializer", keras.initializers.deserialize)):
            if isinstance(config.get(key), dict):
                config[key] = deserialize(config[key])
        trainable = config.pop("trainable", True)
        model = cls(**config)
        model.trainable = trainable
        return model


def build_classification_model(model_config: configs.ImageClassificationModel,
                               l2_weight_decay: float = 0.0) -> ClassificationModel:
    """The classifier `model_config` describes; L2 on kernels as TFM (l2(decay / 2))."""
    regularizer = L2KernelRegularizer(l2_weight_decay / 2.0) if l2_weight_decay else None
    norm = model_config.norm_activation
    settings = NormSettings(
        momentum=norm.norm_momentum, epsilon=norm.norm_epsilon, synchronized=norm.use_sync_bn,
        activation=norm.activation, kernel_regularizer=regularizer)
    input_shape = list(model_config.input_size)
    backbone = build_backbone(input_shape, model_config.backbone, settings)
    head_settings = NormSettings(momentum=norm.norm_momentum, epsilon=norm.norm_epsilon,
                                 synchronized=norm.use_sync_bn)
    return ClassificationModel(
        backbone, model_config.num_classes, input_shape,
        dropout_rate=model_config.dropout_rate,
        kernel_initializer=model_config.kernel_initializer,
        kernel_regularizer=regularizer, add_head_batch_norm=model_config.add_head_batch_norm,
        norm_settings=head_settings, name="classification_model")
