"""The blocks of the 3D (video) networks: TFM's official/vision/modeling/layers/nn_blocks_3d.py.

- `SelfGating`: S3D-G's feature gating (global average over time and space, a 1x1x1
  convolution with bias, a sigmoid that scales each channel).
- `SqueezeExcitation3D`: the shared `SqueezeExcitation` on clips (TFM's `use_3d_input=True`:
  pooled over time and space; its 1x1 kernels are Conv2D-shaped, as TFM's checkpoints hold
  them).
- `BottleneckBlock3D`: temporal (k x 1 x 1) -> spatial (1 x 3 x 3, strided) -> 1x1x1 expansion
  to 4x filters, each with BatchNormalization; then self-gating, squeeze-excitation and
  stochastic depth on the branch; the shortcut is projected (1x1x1 strided conv + BN) when the
  input width is not 4x filters, max-pooled when only the strides differ, else the input.
- `conv3d`: a `keras.layers.Conv3D` with a backbone's `NormSettings` (initializer, L2).

The blocks create their sub-layers in `build`, in the order TFM's assign theirs (so a TFM
checkpoint's object graph pairs with them), and build them on `call`'s shapes without calling.
"""

from __future__ import annotations

import math
from typing import Optional

import keras

from lite_launcher.vision.modeling.layers.nn_layers import (
    NormSettings, SettingsBlock, SqueezeExcitation, StochasticDepth, add_residual,
    build_in_call_order, get_activation, register_serializable)


def conv3d(settings: NormSettings, filters: int, kernel_size, strides=1, use_bias=False,
           padding: str = "same", name: Optional[str] = None) -> keras.layers.Conv3D:
    """A Conv3D with `settings`' kernel initializer and regularizer (TFM's backbone convs)."""
    return keras.layers.Conv3D(
        filters, kernel_size, strides=strides, padding=padding, use_bias=use_bias,
        kernel_initializer=keras.initializers.get(settings.kernel_initializer),
        kernel_regularizer=settings.kernel_regularizer, name=name)


def _pooled(input_shape):
    return (input_shape[0], 1, 1, 1, input_shape[-1])


@register_serializable
class SelfGating(keras.layers.Layer):
    """Scales each channel of a clip by `sigmoid(W · mean over time and space + b)` (S3D-G,
    TFM's SelfGating: W is a 1x1x1 Conv3D of `filters`, initialised N(0, 0.01) truncated,
    without BN, activation or regularizer)."""

    def __init__(self, filters: int, **kwargs):
        super().__init__(**kwargs)
        self.filters = filters
        self.transformer_w = keras.layers.Conv3D(
            filters, 1, use_bias=True,
            kernel_initializer=keras.initializers.TruncatedNormal(mean=0.0, stddev=0.01),
            name="transformer_w")

    def build(self, input_shape):
        self.transformer_w.build(_pooled(input_shape))

    def call(self, inputs):
        x = keras.ops.mean(inputs, axis=(1, 2, 3), keepdims=True)
        return keras.ops.sigmoid(self.transformer_w(x)) * inputs

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "filters": self.filters}


@register_serializable
class SqueezeExcitation3D(SqueezeExcitation):
    """`SqueezeExcitation` of a clip: pooled over time, height and width. The 1x1 convolutions
    are the shared layer's Conv2Ds (TFM's are Conv2D too), applied to the pooled vector."""

    def build(self, input_shape):
        pooled = (input_shape[0], 1, 1, input_shape[-1])
        self._reduce.build(pooled)
        self._expand.build(self._reduce.compute_output_shape(pooled))

    def call(self, inputs):
        x = keras.ops.mean(inputs, axis=(1, 2, 3), keepdims=True)[:, 0]
        x = self._activation(self._reduce(x))
        return keras.ops.expand_dims(self._gating(self._expand(x)), 1) * inputs


def _strided(size, stride):
    return None if size is None else math.ceil(size / stride)


@register_serializable
class BottleneckBlock3D(SettingsBlock):
    """TFM's 3D bottleneck block (see the module docstring), its output 4 x `filters` wide."""

    def __init__(self, filters: int, temporal_kernel_size: int, temporal_strides: int,
                 spatial_strides: int, stochastic_depth_drop_rate: float = 0.0,
                 se_ratio: Optional[float] = None, use_self_gating: bool = False,
                 settings=None, **kwargs):
        super().__init__(settings, filters=filters, temporal_kernel_size=temporal_kernel_size,
                         temporal_strides=temporal_strides, spatial_strides=spatial_strides,
                         stochastic_depth_drop_rate=stochastic_depth_drop_rate,
                         se_ratio=se_ratio, use_self_gating=use_self_gating, **kwargs)
        self.filters = filters
        self.temporal_kernel_size = temporal_kernel_size
        self.temporal_strides = temporal_strides
        self.spatial_strides = spatial_strides
        self.se_ratio = se_ratio
        self.use_self_gating = use_self_gating
        self._drop = (StochasticDepth(stochastic_depth_drop_rate)
                      if stochastic_depth_drop_rate else None)
        self._act = get_activation(self._settings.activation)

    def _strides(self):
        return (self.temporal_strides, self.spatial_strides, self.spatial_strides)

    def build(self, input_shape):
        settings, out_filters = self._settings, 4 * self.filters
        self.shortcut_conv = self.shortcut_norm = self.shortcut_pool = None
        if input_shape[-1] != out_filters:
            self.shortcut_conv = conv3d(settings, out_filters, 1, self._strides(),
                                        padding="valid", name="shortcut_conv")
            self.shortcut_norm = settings.norm(name="shortcut_norm")
        elif self._strides() != (1, 1, 1):
            self.shortcut_pool = keras.layers.MaxPooling3D(1, self._strides(),
                                                           name="shortcut_pool")
        self.temporal_conv = conv3d(settings, self.filters, (self.temporal_kernel_size, 1, 1),
                                    (self.temporal_strides, 1, 1), name="temporal_conv")
        self.temporal_norm = settings.norm(name="temporal_norm")
        self.spatial_conv = conv3d(settings, self.filters, (1, 3, 3),
                                   (1, self.spatial_strides, self.spatial_strides),
                                   name="spatial_conv")
        self.spatial_norm = settings.norm(name="spatial_norm")
        self.expand_conv = conv3d(settings, out_filters, 1, name="expand_conv")
        self.expand_norm = settings.norm(name="expand_norm")
        # TFM assigns squeeze-excitation before self-gating (checkpoint order), though the
        # call gates first.
        self.squeeze_excitation = (
            SqueezeExcitation3D(out_filters, out_filters, self.se_ratio, settings=settings,
                                name="se")
            if self.se_ratio and 0 < self.se_ratio <= 1 else None)
        self.self_gating = (SelfGating(out_filters, name="self_gating")
                            if self.use_self_gating else None)
        build_in_call_order(input_shape, self._shortcut())
        build_in_call_order(input_shape, self._branch())

    def _shortcut(self):
        return [self.shortcut_pool, self.shortcut_conv, self.shortcut_norm]

    def _branch(self):
        return [self.temporal_conv, self.temporal_norm, self.spatial_conv, self.spatial_norm,
                self.expand_conv, self.expand_norm, self.self_gating, self.squeeze_excitation]

    def compute_output_shape(self, input_shape):
        batch, frames, height, width = input_shape[:4]
        return (batch, _strided(frames, self.temporal_strides),
                _strided(height, self.spatial_strides), _strided(width, self.spatial_strides),
                4 * self.filters)

    def call(self, inputs, training=None):
        shortcut = inputs
        for layer in self._shortcut():
            if layer is not None:
                shortcut = layer(shortcut, training=training)
        x = self._act(self.temporal_norm(self.temporal_conv(inputs), training=training))
        x = self._act(self.spatial_norm(self.spatial_conv(x), training=training))
        x = self.expand_norm(self.expand_conv(x), training=training)
        if self.self_gating is not None:
            x = self.self_gating(x)
        if self.squeeze_excitation is not None:
            x = self.squeeze_excitation(x)
        return self._act(add_residual(x, shortcut, self._drop, training))
