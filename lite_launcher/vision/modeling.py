"""The classification model, the backbone factory, and the layers the backbone families share.

Each backbone family lives in its own module, as TFM's `official/vision/modeling/backbones/`:
`resnet.py` (ResNet, ResNet-RS), `resnet_deeplab.py` (dilated ResNet), `mobilenet.py`
(MobileNet V1 / V2 / V3 / MultiAVG / V4). A family registers one builder for its
`backbone.type` with `register_backbone_builder`; `BACKBONE_MODULES` says which module to
import for a type, so a family is loaded only when a model needs it.

- `build_classification_model`: backbone -> [BN] -> global average pool -> dropout -> dense,
  as TFM's ClassificationModel; `model.backbone` and `model.checkpoint_items` as TFM's.
- Shared layers: `NormSettings` (what every convolution / BatchNormalization of a backbone
  shares), `FusedBatchNormalization` and `L2KernelRegularizer` (tf_keras's fused kernels, see
  their docstrings), `StochasticDepth`, `SqueezeExcitation`; TFM's `make_divisible` /
  `round_filters`.

Every layer has `get_config` (and `from_config` where its arguments are not plain values), so
`model.save("m.keras")` / `keras.models.load_model` and `keras.models.clone_model` round-trip.
Layers follow the global Keras dtype policy, so `mixed_float16` / `mixed_bfloat16` work; the
logits come out in the policy's compute dtype (the task casts them to float32).
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Dict, Optional

import keras
import tensorflow as tf

from lite_launcher.vision import configs

# backbone.type -> the module whose import registers its builder.
BACKBONE_MODULES = {
    "resnet": "lite_launcher.vision.resnet",
    "dilated_resnet": "lite_launcher.vision.resnet_deeplab",
    "mobilenet": "lite_launcher.vision.mobilenet",
    "vit": "lite_launcher.vision.vit",
}
_BACKBONE_BUILDERS: Dict[str, Callable[..., keras.Model]] = {}

_PACKAGE = "lite_launcher"


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


def make_divisible(value: float, divisor: int, min_value: Optional[float] = None,
                   round_down_protect: bool = True) -> int:
    """`value` rounded to a multiple of `divisor` (TFM's nn_layers.make_divisible): at least
    `min_value` (default `divisor`) and, with `round_down_protect`, never 10% below `value`."""
    min_value = min_value or divisor
    new_value = max(min_value, int(value + divisor / 2) // divisor * divisor)
    if round_down_protect and new_value < 0.9 * value:
        new_value += divisor
    return int(new_value)


def round_filters(filters: int, multiplier: float, divisor: int = 8,
                  min_depth: Optional[int] = None) -> int:
    """`filters` scaled by a width multiplier and made divisible (TFM's round_filters)."""
    if not multiplier:
        return filters
    return make_divisible(filters * multiplier, divisor, min_value=min_depth)


def get_stochastic_depth_rate(init_rate: float, i: int, n: int) -> float:
    """The drop rate of block `i` of `n`: `init_rate * i / n` (TFM's)."""
    if not 0 <= init_rate <= 1:
        raise ValueError(f"stochastic depth rate ({init_rate}) must be within [0, 1].")
    return init_rate * float(i) / n


class NormSettings:
    """What every BatchNormalization / Conv2D of a backbone shares.

    `kernel_regularizer` goes on Conv2D kernels only, never on depthwise kernels (TFM's
    `regularize_depthwise=False`).
    """

    def __init__(self, momentum=0.99, epsilon=1e-3, synchronized=False, trainable=True,
                 activation="relu", kernel_initializer="VarianceScaling",
                 kernel_regularizer=None):
        self.momentum = momentum
        self.epsilon = epsilon
        self.synchronized = synchronized
        self.trainable = trainable
        self.activation = activation
        self.kernel_initializer = kernel_initializer
        self.kernel_regularizer = kernel_regularizer

    def get_config(self) -> Dict[str, Any]:
        """Plain values (the regularizer serialised), for the layers' `get_config`."""
        return {"momentum": self.momentum, "epsilon": self.epsilon,
                "synchronized": self.synchronized, "trainable": self.trainable,
                "activation": self.activation,
                "kernel_initializer": _serialize(self.kernel_initializer),
                "kernel_regularizer": _serialize(self.kernel_regularizer)}

    @classmethod
    def from_config(cls, config) -> "NormSettings":
        config = dict(config)
        if isinstance(config.get("kernel_regularizer"), dict):
            config["kernel_regularizer"] = keras.regularizers.deserialize(
                config["kernel_regularizer"])
        if isinstance(config.get("kernel_initializer"), dict):
            config["kernel_initializer"] = keras.initializers.deserialize(
                config["kernel_initializer"])
        return cls(**config)

    @classmethod
    def of(cls, value) -> "NormSettings":
        """`value` itself, its config dict, or the defaults for None."""
        if isinstance(value, cls):
            return value
        return cls.from_config(value) if value else cls()

    def replace(self, **changes) -> "NormSettings":
        """A copy with `changes` applied."""
        return NormSettings(**{**vars(self), **changes})

    def norm(self, name=None):
        return FusedBatchNormalization(
            axis=-1, momentum=self.momentum, epsilon=self.epsilon,
            synchronized=self.synchronized, trainable=self.trainable, name=name)

    def conv(self, filters, kernel_size, strides=1, use_bias=False, dilation_rate=1,
             name=None):
        return keras.layers.Conv2D(
            filters, kernel_size, strides=strides, padding="same", use_bias=use_bias,
            dilation_rate=dilation_rate,
            kernel_initializer=keras.initializers.get(self.kernel_initializer),
            kernel_regularizer=self.kernel_regularizer, name=name)

    def depthwise(self, kernel_size, strides=1, dilation_rate=1, name=None):
        # Unregularised, as TFM's depthwise convolutions.
        return keras.layers.DepthwiseConv2D(
            kernel_size, strides=strides, padding="same", use_bias=False,
            dilation_rate=dilation_rate,
            depthwise_initializer=keras.initializers.get(self.kernel_initializer), name=name)

    def act(self, activation=None, name=None):
        return keras.layers.Activation(activation or self.activation, name=name)


def _serialize(value):
    if value is None or isinstance(value, str):
        return value
    return keras.saving.serialize_keras_object(value)


# What tf.nn.fused_batch_norm takes: channels-last inputs in these dtypes (statistics, scale and
# offset in float32). Any epsilon, as tf_keras: TFM's ResNets (norm_epsilon 1e-5) run fused.
_FUSED_BN_INPUT_DTYPES = ("float32", "float16", "bfloat16")


@keras.saving.register_keras_serializable(package=_PACKAGE)
class FusedBatchNormalization(keras.layers.BatchNormalization):
    """`keras.layers.BatchNormalization` computed by TensorFlow's fused kernel where it applies.

    Keras 3 normalises with `moments` plus about a dozen element-wise ops (and as many in the
    gradient); tf_keras, which TFM's models use, runs one `FusedBatchNormV3` forward and one
    fused gradient for 4-D channels-last inputs. This layer does the same for 4-D inputs with
    `axis=-1` and dtype float32 / float16 / bfloat16, without a mask, renorm or synchronized
    statistics, whatever the epsilon (as tf_keras); anything else is Keras's own computation.
    The outputs are Keras's (the batch's biased variance normalises); the moving variance is
    updated with the unbiased (n / (n - 1)) batch variance, as tf_keras's fused path (TFM)
    updates it.
    """

    def _fusable(self, inputs, mask) -> bool:
        return (mask is None and not self.renorm and not self.synchronized
                and len(inputs.shape) == 4 and self.axis in (-1, 3)
                and keras.backend.standardize_dtype(inputs.dtype) in _FUSED_BN_INPUT_DTYPES)

    def call(self, inputs, training=None, mask=None):
        if not self._fusable(inputs, mask):
            return super().call(inputs, training=training, mask=mask)
        channels = inputs.shape[-1]
        scale = self.gamma if self.scale else tf.ones([channels], tf.float32)
        offset = self.beta if self.center else tf.zeros([channels], tf.float32)
        is_training = bool(training and self.trainable)  # Keras's rule: frozen BN infers
        outputs, mean, variance = tf.compat.v1.nn.fused_batch_norm(
            inputs, scale, offset, mean=self.moving_mean, variance=self.moving_variance,
            epsilon=self.epsilon, data_format="NHWC", is_training=is_training,
            # The kernel folds the batch statistics into the moving ones itself.
            exponential_avg_factor=(1.0 - self.momentum) if is_training else 1.0)
        if is_training:
            self.moving_mean.assign(mean)
            self.moving_variance.assign(variance)
        return keras.ops.cast(outputs, self.compute_dtype)


@keras.saving.register_keras_serializable(package=_PACKAGE)
class L2KernelRegularizer(keras.regularizers.L2):
    """`l2 * sum(x ** 2)`, computed as `2 * l2 * tf.nn.l2_loss(x)`: one op, and a one-op
    gradient, where Keras 3's `L2` runs Square + Sum forward and Tile + Mul backward per kernel
    (tf_keras, and so TFM, used `l2_loss`). The value is Keras's `L2` up to float rounding."""

    def __call__(self, x):
        return 2.0 * tf.cast(self.l2, x.dtype) * tf.nn.l2_loss(x)


@keras.saving.register_keras_serializable(package=_PACKAGE)
class StochasticDepth(keras.layers.Layer):
    """Drops the whole residual branch of an example with probability `drop_rate` in training."""

    def __init__(self, drop_rate: float, **kwargs):
        super().__init__(**kwargs)
        self.drop_rate = drop_rate

    def call(self, inputs, training=None):
        if not training or not self.drop_rate:
            return inputs
        keep = 1.0 - self.drop_rate
        shape = [tf.shape(inputs)[0]] + [1] * (len(inputs.shape) - 1)
        mask = tf.floor(keep + tf.random.uniform(shape, dtype=inputs.dtype))
        return inputs / keep * mask

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "drop_rate": self.drop_rate}


@keras.saving.register_keras_serializable(package=_PACKAGE)
class SqueezeExcitation(keras.layers.Layer):
    """Channel gating (TFM's nn_layers.SqueezeExcitation): pool -> 1x1 conv to
    `make_divisible(in_filters * se_ratio)` filters (`activation`) -> 1x1 conv to `out_filters`
    (`gating_activation`) -> scale the input."""

    def __init__(self, in_filters: int, out_filters: int, se_ratio: float,
                 divisible_by: int = 1, round_down_protect: bool = True,
                 activation: str = "relu", gating_activation: str = "sigmoid",
                 settings: Optional[NormSettings] = None, **kwargs):
        super().__init__(**kwargs)
        self._settings = NormSettings.of(settings)
        self._args = dict(in_filters=in_filters, out_filters=out_filters, se_ratio=se_ratio,
                          divisible_by=divisible_by, round_down_protect=round_down_protect,
                          activation=activation, gating_activation=gating_activation)
        reduced = make_divisible(max(1, int(in_filters * se_ratio)), divisor=divisible_by,
                                 round_down_protect=round_down_protect)
        self._reduce = self._settings.conv(reduced, 1, use_bias=True, name="se_reduce")
        self._expand = self._settings.conv(out_filters, 1, use_bias=True, name="se_expand")
        self._activation = keras.activations.get(activation)
        self._gating = keras.activations.get(gating_activation)

    def build(self, input_shape):
        pooled = (input_shape[0], 1, 1, input_shape[-1])
        self._reduce.build(pooled)
        self._expand.build(self._reduce.compute_output_shape(pooled))

    def compute_output_shape(self, input_shape):
        return input_shape

    def call(self, inputs):
        x = keras.ops.mean(inputs, axis=(1, 2), keepdims=True)
        x = self._activation(self._reduce(x))
        return self._gating(self._expand(x)) * inputs

    def get_config(self):
        return {**super().get_config(), **self._args, "settings": self._settings.get_config()}


@keras.saving.register_keras_serializable(package=_PACKAGE)
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
            kernel_initializer=_serialize(kernel_initializer),
            kernel_regularizer=_serialize(kernel_regularizer),
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
