"""Backbones and the classification model, as Keras 3 layers (channels-last).

- `ResNet`: TFM's ResNet / ResNet-RS family by `model_id` (stem v0/v1, SE, stochastic depth,
  ResNet-D shortcut, stem max-pool replacement, depth multiplier), with the same layers and
  parameter counts as TFM's `official.vision.modeling.backbones.ResNet`.
- `build_mobilenet`: MobileNet V2 / V3 from `keras.applications` (weights=None).
- `build_classification_model`: backbone -> [BN] -> global average pool -> dropout -> dense,
  as TFM's ClassificationModel; `model.backbone` and `model.checkpoint_items` as TFM's.

Layers follow the global Keras dtype policy, so `mixed_float16` / `mixed_bfloat16` work; the
logits come out in the policy's compute dtype (the task casts them to float32).
"""

from __future__ import annotations

from typing import Dict, Optional

import keras
import tensorflow as tf

from lite_launcher.vision import configs

# (block kind, filters, repeats) of the four block groups, by model_id (TFM's RESNET_SPECS).
RESNET_SPECS = {
    10: [("residual", 64, 1), ("residual", 128, 1), ("residual", 256, 1), ("residual", 512, 1)],
    18: [("residual", 64, 2), ("residual", 128, 2), ("residual", 256, 2), ("residual", 512, 2)],
    26: [("residual", 64, 3), ("residual", 128, 3), ("residual", 256, 3), ("residual", 512, 3)],
    34: [("residual", 64, 3), ("residual", 128, 4), ("residual", 256, 6), ("residual", 512, 3)],
    50: [("bottleneck", 64, 3), ("bottleneck", 128, 4), ("bottleneck", 256, 6),
         ("bottleneck", 512, 3)],
    101: [("bottleneck", 64, 3), ("bottleneck", 128, 4), ("bottleneck", 256, 23),
          ("bottleneck", 512, 3)],
    152: [("bottleneck", 64, 3), ("bottleneck", 128, 8), ("bottleneck", 256, 36),
          ("bottleneck", 512, 3)],
    200: [("bottleneck", 64, 3), ("bottleneck", 128, 24), ("bottleneck", 256, 36),
          ("bottleneck", 512, 3)],
    270: [("bottleneck", 64, 4), ("bottleneck", 128, 29), ("bottleneck", 256, 53),
          ("bottleneck", 512, 4)],
    350: [("bottleneck", 64, 4), ("bottleneck", 128, 36), ("bottleneck", 256, 72),
          ("bottleneck", 512, 4)],
    420: [("bottleneck", 64, 4), ("bottleneck", 128, 44), ("bottleneck", 256, 87),
          ("bottleneck", 512, 4)],
}


class NormSettings:
    """What every BatchNormalization / Conv2D of a backbone shares."""

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

    def norm(self, name=None):
        return keras.layers.BatchNormalization(
            axis=-1, momentum=self.momentum, epsilon=self.epsilon,
            synchronized=self.synchronized, trainable=self.trainable, name=name)

    def conv(self, filters, kernel_size, strides=1, use_bias=False, name=None):
        return keras.layers.Conv2D(
            filters, kernel_size, strides=strides, padding="same", use_bias=use_bias,
            kernel_initializer=keras.initializers.get(self.kernel_initializer),
            kernel_regularizer=self.kernel_regularizer, name=name)

    def act(self, name=None):
        return keras.layers.Activation(self.activation, name=name)


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

    def get_config(self):
        return {**super().get_config(), "drop_rate": self.drop_rate}


class SqueezeExcitation(keras.layers.Layer):
    """Channel gating: pool -> 1x1 conv (reduced, activation) -> 1x1 conv (sigmoid) -> scale."""

    def __init__(self, filters: int, se_ratio: float, settings: NormSettings, **kwargs):
        super().__init__(**kwargs)
        reduced = _make_divisible(max(1, int(filters * se_ratio)), divisor=1)
        self._reduce = settings.conv(reduced, 1, use_bias=True, name="se_reduce")
        self._expand = settings.conv(filters, 1, use_bias=True, name="se_expand")
        self._activation = keras.activations.get(settings.activation)

    def build(self, input_shape):
        pooled = (input_shape[0], 1, 1, input_shape[-1])
        self._reduce.build(pooled)
        self._expand.build(self._reduce.compute_output_shape(pooled))

    def compute_output_shape(self, input_shape):
        return input_shape

    def call(self, inputs):
        x = keras.ops.mean(inputs, axis=(1, 2), keepdims=True)
        x = self._activation(self._reduce(x))
        return keras.ops.sigmoid(self._expand(x)) * inputs


def _make_divisible(value, divisor, min_value=None):
    min_value = min_value or divisor
    new_value = max(min_value, int(value + divisor / 2) // divisor * divisor)
    if new_value < 0.9 * value:  # never round down by more than 10%
        new_value += divisor
    return int(new_value)


class _Block(keras.layers.Layer):
    """Shared parts of the residual and bottleneck blocks (shortcut, SE, stochastic depth).

    Sublayers are plain attributes, never lists: tf.train.Checkpoint does not see layers that
    Keras 3 tracks only inside a list, so their weights would be missing from checkpoints.
    """

    expansion = 1

    def __init__(self, filters: int, strides: int, use_projection: bool, settings: NormSettings,
                 se_ratio: float = 0.0, resnetd_shortcut: bool = False,
                 stochastic_depth_drop_rate: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        out_filters = filters * self.expansion
        shortcut = []
        if use_projection:
            if resnetd_shortcut and self.expansion > 1:
                # ResNet-D: average-pool, then a stride-1 projection (TFM: bottlenecks only).
                shortcut = [keras.layers.AveragePooling2D(2, strides, padding="same"),
                            settings.conv(out_filters, 1, name="shortcut_conv")]
            else:
                shortcut = [settings.conv(out_filters, 1, strides, name="shortcut_conv")]
            shortcut.append(settings.norm(name="shortcut_norm"))
        branch = self._make_branch(filters, strides, settings)
        if se_ratio and 0 < se_ratio <= 1:
            branch.append(SqueezeExcitation(out_filters, se_ratio, settings, name="se"))
        self._shortcut_names = self._attach("shortcut", shortcut)
        self._branch_names = self._attach("branch", branch)
        self._drop = (StochasticDepth(stochastic_depth_drop_rate)
                      if stochastic_depth_drop_rate else None)
        self._out_act = keras.activations.get(settings.activation)

    def _attach(self, prefix, layers):
        names = []
        for i, layer in enumerate(layers):
            names.append(f"{prefix}_{i}")
            setattr(self, names[-1], layer)
        return tuple(names)

    @property
    def _shortcut(self):
        return [getattr(self, n) for n in self._shortcut_names]

    @property
    def _branch(self):
        return [getattr(self, n) for n in self._branch_names]

    def _make_branch(self, filters, strides, settings):
        raise NotImplementedError

    def build(self, input_shape):
        for chain in (self._shortcut, self._branch):
            shape = input_shape
            for layer in chain:
                layer.build(shape)
                shape = layer.compute_output_shape(shape)

    def compute_output_shape(self, input_shape):
        shape = input_shape
        for layer in self._branch:
            shape = layer.compute_output_shape(shape)
        return shape

    def call(self, inputs, training=None):
        shortcut = inputs
        for layer in self._shortcut:
            shortcut = layer(shortcut, training=training)
        x = inputs
        for layer in self._branch:
            x = layer(x, training=training)
        if self._drop is not None:
            x = self._drop(x, training=training)
        return self._out_act(x + shortcut)


class ResidualBlock(_Block):
    """Two 3x3 convolutions with BN (ResNet-18/34)."""

    def _make_branch(self, filters, strides, settings):
        return [settings.conv(filters, 3, strides, name="conv1"), settings.norm(name="norm1"),
                settings.act(), settings.conv(filters, 3, name="conv2"),
                settings.norm(name="norm2")]


class BottleneckBlock(_Block):
    """1x1 -> 3x3 (strided) -> 1x1 (x4 filters) convolutions with BN (ResNet-50 and deeper)."""

    expansion = 4

    def _make_branch(self, filters, strides, settings):
        return [settings.conv(filters, 1, name="conv1"), settings.norm(name="norm1"),
                settings.act(), settings.conv(filters, 3, strides, name="conv2"),
                settings.norm(name="norm2"), settings.act(),
                settings.conv(filters * 4, 1, name="conv3"), settings.norm(name="norm3")]


def build_resnet(input_shape, config: configs.ResNet, settings: NormSettings,
                 name: str = "backbone") -> keras.Model:
    """TFM's ResNet as a Functional model whose outputs are {'2': ..., '5': ...} (levels)."""
    config.validate()
    multiplier = config.depth_multiplier
    stem_multiplier = multiplier if config.scale_stem else 1.0
    inputs = keras.Input(shape=tuple(input_shape))
    if config.stem_type == "v0":
        x = settings.conv(int(64 * stem_multiplier), 7, 2, name="stem_conv")(inputs)
        x = settings.act()(settings.norm(name="stem_norm")(x))
    else:  # v1: the ResNet-D stem, three 3x3 convolutions
        x = inputs
        for i, (filters, strides) in enumerate([(32, 2), (32, 1), (64, 1)]):
            x = settings.conv(int(filters * stem_multiplier), 3, strides, name=f"stem_conv{i}")(x)
            x = settings.act()(settings.norm(name=f"stem_norm{i}")(x))
    if config.replace_stem_max_pool:
        x = settings.conv(int(64 * multiplier), 3, 2, name="stem_pool_conv")(x)
        x = settings.act()(settings.norm(name="stem_pool_norm")(x))
    else:
        x = keras.layers.MaxPooling2D(3, 2, padding="same")(x)

    endpoints = {}
    for i, (kind, filters, repeats) in enumerate(RESNET_SPECS[config.model_id]):
        block_cls = ResidualBlock if kind == "residual" else BottleneckBlock
        level = i + 2
        # TFM scales the drop rate linearly with the group: init_rate * level / 5.
        drop_rate = config.stochastic_depth_drop_rate * level / 5
        for j in range(repeats):
            x = block_cls(
                int(filters * multiplier), strides=(2 if i > 0 and j == 0 else 1),
                use_projection=(j == 0), settings=settings, se_ratio=config.se_ratio,
                resnetd_shortcut=config.resnetd_shortcut, stochastic_depth_drop_rate=drop_rate,
                name=f"block_group_l{level}_{j}")(x)
        endpoints[str(level)] = x
    return keras.Model(inputs, endpoints, name=name)


def build_mobilenet(input_shape, config: configs.MobileNet, settings: NormSettings,
                    name: str = "backbone") -> keras.Model:
    """MobileNet V2 / V3 (Large, Small) from keras.applications, without top and weights.

    Its BatchNormalization layers take `settings`' momentum and epsilon, and its convolution
    kernels the L2 regularizer. V3 ends, as TFM's, with global pooling and a 1x1 convolution
    with bias (1280 / 1024 filters) and hard-swish, which keras.applications counts as its top;
    so parameter counts equal TFM's (V2 2,257,984; V3Large 4,226,432; V3Small 1,529,968).
    Outputs {'5': last feature map} (a single level).
    """
    config.validate()
    common = dict(input_shape=tuple(input_shape), alpha=config.filter_size_scale,
                  include_top=False, weights=None)
    if config.model_id == "MobileNetV2":
        net = keras.applications.MobileNetV2(**common)
    else:
        builder = getattr(keras.applications, config.model_id)
        net = builder(include_preprocessing=False, **common)
    features = net.outputs[0]
    if config.model_id != "MobileNetV2":
        last = 1280 if config.model_id == "MobileNetV3Large" else 1024
        if config.filter_size_scale > 1.0:  # TFM keeps the last width unless it grows
            last = _make_divisible(last * config.filter_size_scale, 8)
        x = keras.layers.GlobalAveragePooling2D(keepdims=True)(features)
        x = settings.conv(last, 1, use_bias=True, name="last_conv")(x)
        features = keras.layers.Activation("hard_swish")(x)
    for layer in net.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.momentum, layer.epsilon = settings.momentum, settings.epsilon
            layer.trainable = settings.trainable
        if settings.kernel_regularizer is not None and not isinstance(layer, keras.Model):
            for variable in layer.trainable_weights:
                if variable.name.endswith("kernel"):  # conv / depthwise / dense kernels
                    variable.regularizer = settings.kernel_regularizer
    return keras.Model(net.inputs, {"5": features}, name=name)


def _endpoint_rank(key: str):
    """The head reads the highest level; a named endpoint ('pre_logits') ranks above levels
    and named ones compare as strings, as TFM's max(endpoints.keys())."""
    return (1, key) if not key.isdigit() else (0, int(key))


class ClassificationModel(keras.Model):
    """backbone -> [BN] -> global average pooling -> dropout -> dense logits (TFM's head)."""

    def __init__(self, backbone: keras.Model, num_classes: int, input_shape,
                 dropout_rate: float = 0.0, kernel_initializer="random_uniform",
                 kernel_regularizer=None, add_head_batch_norm: bool = False,
                 norm_settings: Optional[NormSettings] = None, **kwargs):
        inputs = keras.Input(shape=tuple(input_shape), name="image")
        endpoints = backbone(inputs)
        x = endpoints[max(endpoints, key=_endpoint_rank)] if isinstance(
            endpoints, dict) else endpoints
        if add_head_batch_norm:
            x = (norm_settings or NormSettings()).norm(name="head_norm")(x)
        if len(x.shape) == 3:  # a token sequence (ViT's encoded_tokens)
            x = keras.layers.GlobalAveragePooling1D()(x)
        else:
            x = keras.layers.GlobalAveragePooling2D()(x)
        x = keras.layers.Dropout(dropout_rate)(x)
        logits = keras.layers.Dense(num_classes, kernel_initializer=kernel_initializer,
                                    kernel_regularizer=kernel_regularizer, name="logits")(x)
        super().__init__(inputs=inputs, outputs=logits, **kwargs)
        self._backbone = backbone

    @property
    def backbone(self) -> keras.Model:
        """The backbone (restored alone by `init_checkpoint_modules: backbone`)."""
        return self._backbone

    @property
    def checkpoint_items(self) -> Dict[str, keras.Model]:
        """Saved in checkpoints besides the model, as TFM's: `backbone`."""
        return {"backbone": self._backbone}


def build_classification_model(model_config: configs.ImageClassificationModel,
                               l2_weight_decay: float = 0.0) -> ClassificationModel:
    """The classifier `model_config` describes; L2 on kernels as TFM (l2(decay / 2))."""
    regularizer = keras.regularizers.L2(l2_weight_decay / 2.0) if l2_weight_decay else None
    norm = model_config.norm_activation
    backbone_config = model_config.backbone
    settings = NormSettings(
        momentum=norm.norm_momentum, epsilon=norm.norm_epsilon, synchronized=norm.use_sync_bn,
        activation=norm.activation, kernel_regularizer=regularizer,
        trainable=(backbone_config.resnet.bn_trainable if backbone_config.type == "resnet"
                   else True))
    input_shape = list(model_config.input_size)
    if backbone_config.type == "resnet":
        backbone = build_resnet(input_shape, backbone_config.resnet, settings)
    elif backbone_config.type == "mobilenet":
        backbone = build_mobilenet(input_shape, backbone_config.mobilenet, settings)
    elif backbone_config.type == "vit":
        from lite_launcher.vision import vit  # vit imports this module's StochasticDepth
        backbone = vit.build_vit(input_shape, backbone_config.vit, regularizer)
    else:
        raise configs.ConfigError(
            f"task.model.backbone.type {backbone_config.type!r} must be 'resnet' or "
            f"'mobilenet'.")
    head_settings = NormSettings(momentum=norm.norm_momentum, epsilon=norm.norm_epsilon,
                                 synchronized=norm.use_sync_bn)
    return ClassificationModel(
        backbone, model_config.num_classes, input_shape,
        dropout_rate=model_config.dropout_rate,
        kernel_initializer=model_config.kernel_initializer,
        kernel_regularizer=regularizer, add_head_batch_norm=model_config.add_head_batch_norm,
        norm_settings=head_settings, name="classification_model")
