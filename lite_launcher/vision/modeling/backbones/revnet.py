"""TFM's reversible ResNet (`backbone.type: revnet`), RevNet-38 / 56 / 104, as TFM 2.20's
`official.vision.modeling.backbones.RevNet` builds it.

Stem: 7x7 stride-2 convolution + BN + activation (the config's norm / activation) and a 3x3
max pool. Then one group of reversible blocks per row of `REVNET_SPECS` (strides 1, then 2),
each block `ReversibleBlock`: the input split in two halves along the channels,
`z1 = x1 + f(x2)`, `y2 = x2 + g(z1)`, output `[z1, y2]`, where f and g are residual inner
blocks (two 3x3 convolutions, or a 1x1 / 3x3 / 1x1 bottleneck with 4x the filters), the
halves average-pooled and zero-padded where f changes the stride or width. As in TFM, the
inner blocks use TFM's default BatchNormalization (momentum 0.99, epsilon 0.001) and ReLU
whatever the config says; only the L2 regulariser reaches them.

Backpropagation is TFM's (the RevNet paper's Algorithm 1): a block that keeps its shape
recomputes its input from its output in the backward pass instead of keeping f's and g's
activations; the first block of a group (strided or wider) differentiates its recorded
forward pass.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from lite_launcher.vision.configs import backbones as backbone_configs
from lite_launcher.vision.modeling.backbones.factory import register_backbone_builder
from lite_launcher.vision.modeling.layers.nn_layers import (
    ChainBlock, NormSettings, SettingsBlock, get_activation, register_serializable)

# (inner block kind, filters, repeats) of each block group, by model_id (TFM's REVNET_SPECS).
REVNET_SPECS = {
    38: [("residual", 32, 3), ("residual", 64, 3), ("residual", 112, 3)],
    56: [("bottleneck", 128, 2), ("bottleneck", 256, 2), ("bottleneck", 512, 3),
         ("bottleneck", 832, 2)],
    104: [("bottleneck", 128, 2), ("bottleneck", 256, 2), ("bottleneck", 512, 11),
          ("bottleneck", 832, 2)],
}


class _Inner(ChainBlock):
    """What the two inner blocks share: [BN + act] first (`batch_norm_first`), then
    convolutions with BN + act between them and none after the last."""

    def __init__(self, filters: int, strides: int, batch_norm_first: bool = True,
                 settings=None, **kwargs):
        super().__init__(settings, filters=filters, strides=strides,
                         batch_norm_first=batch_norm_first, **kwargs)
        s = self._settings
        self.strides = strides
        self._norm0 = s.norm(name="norm0") if batch_norm_first else None
        self._act = get_activation(s.activation)
        self._convs_and_norms = self._make(filters, strides, s)

    def _make(self, filters, strides, settings):
        raise NotImplementedError

    def _chain(self):
        return (self._norm0,) + self._convs_and_norms

    def call(self, inputs, training=None):
        x = inputs
        if self._norm0 is not None:
            x = self._act(self._norm0(x, training=training))
        layers = self._convs_and_norms
        for conv, norm in zip(layers[0::2], layers[1::2]):
            x = self._act(norm(conv(x), training=training))
        return layers[-1](x)


@register_serializable
class ResidualInner(_Inner):
    """f / g of RevNet-38: 3x3 (strided) and 3x3 convolutions (TFM's ResidualInner)."""

    def _make(self, filters, strides, settings):
        # Attributes in TFM's order (its checkpoints list the sub-layers so).
        self._conv1 = settings.conv(filters, 3, strides, name="conv1")
        self._norm1 = settings.norm(name="norm1")
        self._conv2 = settings.conv(filters, 3, name="conv2")
        return (self._conv1, self._norm1, self._conv2)


@register_serializable
class BottleneckResidualInner(_Inner):
    """f / g of RevNet-56 / 104: 1x1 (strided), 3x3 and 1x1 (4x filters) convolutions (TFM's
    BottleneckResidualInner)."""

    def _make(self, filters, strides, settings):
        self._conv1 = settings.conv(filters, 1, strides, name="conv1")
        self._norm1 = settings.norm(name="norm1")
        self._conv2 = settings.conv(filters, 3, name="conv2")
        self._norm2 = settings.norm(name="norm2")
        self._conv3 = settings.conv(filters * 4, 1, name="conv3")
        return (self._conv1, self._norm1, self._conv2, self._norm2, self._conv3)


INNER_BLOCKS = {"residual": ResidualInner, "bottleneck": BottleneckResidualInner}


def downsample_to(x, channels: int, strides: int):
    """`x` average-pooled by `strides` and zero-padded to `channels` (half the padding before
    the channels, half after), as the shortcut of a reversible half (TFM's
    `_maybe_downsample`)."""
    if strides > 1:
        x = tf.nn.avg_pool2d(x, strides, strides, "VALID")
    missing = channels - x.shape[-1]
    if missing > 0:
        x = tf.pad(x, [[0, 0], [0, 0], [0, 0], [missing // 2, missing // 2]])
    return x


@register_serializable
class ReversibleBlock(SettingsBlock):
    """`y = [z1, y2]`, `z1 = x1 + f(x2)`, `y2 = x2 + g(z1)` on the channel halves of `x`
    (TFM's ReversibleLayer with f and g `INNER_BLOCKS[inner]`).

    `manual_grads` (TFM's): where the block keeps its shape, the backward pass recomputes
    `x` from `y` (`x2 = y2 - g(z1)`, `x1 = z1 - f(x2)`) and differentiates f and g on the
    recomputed values, so no activation inside the block is kept for it; the moving
    statistics the recomputation updates are put back as the forward pass left them. False:
    TensorFlow's own gradient of the forward pass (the same values).
    """

    def __init__(self, inner: str, filters: int, strides: int, batch_norm_first: bool,
                 manual_grads: bool = True, settings=None, **kwargs):
        super().__init__(settings, inner=inner, filters=filters, strides=strides,
                         batch_norm_first=batch_norm_first, manual_grads=manual_grads,
                         **kwargs)
        block = INNER_BLOCKS[inner]
        # f before g: TFM's order.
        self._f = block(filters, strides, batch_norm_first, settings=self._settings, name="f")
        self._g = block(filters, 1, batch_norm_first, settings=self._settings, name="g")
        self._strides = strides
        self._manual_grads = manual_grads

    @staticmethod
    def _half(input_shape):
        return tuple(input_shape[:-1]) + (input_shape[-1] // 2,)

    def build(self, input_shape):
        half = self._half(input_shape)
        self._f.build(half)
        self._g.build(self._f.compute_output_shape(half))

    def compute_output_shape(self, input_shape):
        f_shape = self._f.compute_output_shape(self._half(input_shape))
        return tuple(f_shape[:-1]) + (2 * f_shape[-1],)

    def _forward(self, x, training):
        x1, x2 = tf.split(x, 2, axis=-1)
        f_x2 = self._f(x2, training=training)
        z1 = f_x2 + downsample_to(x1, f_x2.shape[-1], self._strides)
        g_z1 = self._g(z1, training=training)
        y2 = downsample_to(x2, g_z1.shape[-1], self._strides) + g_z1
        return z1, y2

    def _reversible(self, inputs) -> bool:
        return (self._manual_grads and self._strides == 1
                and tuple(self.compute_output_shape(inputs.shape))[-1] == inputs.shape[-1])

    def call(self, inputs, training=None):
        if not self._reversible(inputs):
            return tf.concat(self._forward(inputs, training), axis=-1)
        return self._reversible_call(inputs, training)

    def _reversible_call(self, inputs, training):
        statistics = list(self._f.non_trainable_variables) + list(
            self._g.non_trainable_variables)

        @tf.custom_gradient
        def reversible(x):
            z1, y2 = self._forward(x, training)
            # What the recomputation's BatchNormalization updates must be put back to.
            saved = [tf.identity(v.value) for v in statistics]

            def grad_fn(dy, variables=None):
                variables = list(variables or [])
                dy1, dy2 = tf.split(dy, 2, axis=-1)
                z1_value, y2_value = tf.stop_gradient(z1), tf.stop_gradient(y2)
                with tf.GradientTape() as g_tape:
                    g_tape.watch(z1_value)
                    g_z1 = self._g(z1_value, training=training)
                x2 = y2_value - g_z1
                with tf.GradientTape() as f_tape:
                    f_tape.watch(x2)
                    f_x2 = self._f(x2, training=training)
                g_grads = g_tape.gradient(g_z1, [z1_value] + variables,
                                          output_gradients=dy2)
                dz1 = dy1 + g_grads[0]
                f_grads = f_tape.gradient(f_x2, [x2] + variables, output_gradients=dz1)
                dx = tf.concat([dz1, dy2 + f_grads[0]], axis=-1)
                variable_grads = [
                    f if g is None else g if f is None else f + g
                    for f, g in zip(f_grads[1:], g_grads[1:])]
                for variable, value in zip(statistics, saved):
                    variable.assign(value)
                return dx, variable_grads

            return tf.concat([z1, y2], axis=-1), grad_fn

        return reversible(inputs)


@register_backbone_builder("revnet")
def build_revnet(input_shape, config: backbone_configs.RevNet, settings: NormSettings,
                 name: str = "backbone") -> keras.Model:
    """TFM's RevNet as a Functional model whose outputs are {'2': ..., }: one level per
    block group."""
    config.validate()
    return build_revnet_model(input_shape, REVNET_SPECS[config.model_id], settings, name=name)


def build_revnet_model(input_shape, specs, settings: NormSettings,
                       name: str = "backbone") -> keras.Model:
    """The RevNet of block-group `specs` ([(inner kind, filters, repeats)])."""
    for kind, filters, _ in specs:
        if filters % 2 or kind not in INNER_BLOCKS:
            raise ValueError(f"RevNet block group ({kind!r}, {filters}): the inner block must "
                             f"be one of {', '.join(INNER_BLOCKS)} and the filters even.")
    # TFM builds the inner blocks with its norm defaults and ReLU; only the regulariser and
    # trainability come from the model.
    inner_settings = NormSettings(kernel_regularizer=settings.kernel_regularizer,
                                  trainable=settings.trainable)
    inputs = keras.Input(shape=tuple(input_shape))
    x = settings.conv(specs[0][1], 7, 2, name="stem_conv")(inputs)
    x = settings.act()(settings.norm(name="stem_norm")(x))
    x = keras.layers.MaxPooling2D(3, 2, padding="same")(x)
    endpoints = {}
    for i, (kind, filters, repeats) in enumerate(specs):
        for j in range(repeats):
            x = ReversibleBlock(kind, filters // 2, strides=(2 if i and not j else 1),
                                batch_norm_first=(i != 0 and j == 0),
                                settings=inner_settings,
                                name=f"revblock_group_{i + 2}_{j}")(x)
        endpoints[str(i + 2)] = x
    return keras.Model(inputs, endpoints, name=name)
