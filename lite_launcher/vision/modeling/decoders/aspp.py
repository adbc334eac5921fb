"""TFM's ASPP decoder (official/vision/modeling/decoders/aspp.py, DeepLab v3).

`ASPP`: atrous spatial pyramid pooling on one backbone level: a 1x1 branch, one 3x3 branch
  per dilation rate (depthwise 3x3 + 1x1 with `use_depthwise_convolution`), an image-pooling
  branch (global average pooling, or average pooling of `pool_kernel_size / 2**level`)
  resized back, concatenated and projected by a 1x1 convolution (then dropout). Outputs
  {level: features} (or the tensor with `output_tensor`), as TFM's.

Sub-layers are attributes of their layer (not list items), so that `tf.train.Checkpoint`
tracks every variable.
"""

from __future__ import annotations

from typing import Optional, Sequence

import keras
import tensorflow as tf

from lite_launcher.core.base_config import ConfigError
from lite_launcher.vision.modeling.layers.nn_layers import (
    NormSettings, get_activation, register_serializable, variance_scaling)


@register_serializable
class ASPP(keras.layers.Layer):
    """Atrous spatial pyramid pooling on backbone level `level` (TFM's decoders.ASPP with
    layers.deeplab.SpatialPyramidPooling, `spp_layer_version` 'v1', or nn_layers', 'v2').

    The versions have the same weights. 'v2' also regularises and initialises the depthwise
    kernels as the others, resizes the pooled branch with `interpolation` and needs a fixed
    input size; 'v1' resizes bilinearly to the input's (dynamic) size.

    Args:
      level: the backbone endpoint (level) to read.
      dilation_rates: one 3x3 atrous branch per rate (none: only the 1x1 and pooling ones).
      num_filters: filters of every branch and of the projection.
      pool_kernel_size: [height, width] in input pixels (divided by 2**level), or None for
        global average pooling.
      dropout_rate: dropout after the projection.
      settings: normalisation, activation, kernel regulariser of the convolutions.
    """

    def __init__(self, level: int, dilation_rates: Sequence[int], num_filters: int = 256,
                 pool_kernel_size: Optional[Sequence[int]] = None, dropout_rate: float = 0.0,
                 use_depthwise_convolution: bool = False, spp_layer_version: str = "v1",
                 output_tensor: bool = False, interpolation: str = "bilinear",
                 settings: Optional[NormSettings] = None, **kwargs):
        super().__init__(**kwargs)
        if spp_layer_version not in ("v1", "v2"):
            raise ConfigError(f"task.model.decoder.aspp.spp_layer_version "
                              f"{spp_layer_version!r} must be 'v1' or 'v2'.")
        self._settings = NormSettings.of(settings)
        self._args = dict(level=level, dilation_rates=list(dilation_rates),
                          num_filters=num_filters,
                          pool_kernel_size=list(pool_kernel_size) if pool_kernel_size else None,
                          dropout_rate=dropout_rate,
                          use_depthwise_convolution=use_depthwise_convolution,
                          spp_layer_version=spp_layer_version, output_tensor=output_tensor,
                          interpolation=interpolation)
        s = self._settings.replace(kernel_initializer=variance_scaling())
        self._act = get_activation(s.activation)
        self._num_branches = 2 + len(dilation_rates)
        self.branch_0_conv = s.conv(num_filters, 1, name="aspp_conv_0")
        self.branch_0_norm = s.norm(name="aspp_norm_0")
        for i, rate in enumerate(dilation_rates, start=1):
            kernel_size = 3
            if use_depthwise_convolution:
                if spp_layer_version == "v2":
                    depthwise = keras.layers.DepthwiseConv2D(
                        3, padding="same", dilation_rate=rate, use_bias=False,
                        depthwise_initializer=variance_scaling(),
                        depthwise_regularizer=s.kernel_regularizer, name=f"aspp_depthwise_{i}")
                else:  # TFM's v1: the depthwise kernel keeps Keras's defaults
                    depthwise = keras.layers.DepthwiseConv2D(
                        3, padding="same", dilation_rate=rate, use_bias=False,
                        name=f"aspp_depthwise_{i}")
                setattr(self, f"branch_{i}_depthwise", depthwise)
                kernel_size = 1
            setattr(self, f"branch_{i}_conv",
                    s.conv(num_filters, kernel_size, dilation_rate=rate, name=f"aspp_conv_{i}"))
            setattr(self, f"branch_{i}_norm", s.norm(name=f"aspp_norm_{i}"))
        pooled = self._num_branches - 1
        self._pool_size = None
        if pool_kernel_size:
            self._pool_size = tuple(int(p // 2 ** level) for p in pool_kernel_size)
            self.pool = keras.layers.AveragePooling2D(self._pool_size, name="aspp_pool")
        self.pool_conv = s.conv(num_filters, 1, name=f"aspp_conv_{pooled}")
        self.pool_norm = s.norm(name=f"aspp_norm_{pooled}")
        self.projection_conv = s.conv(num_filters, 1, name="aspp_projection_conv")
        self.projection_norm = s.norm(name="aspp_projection_norm")
        self.dropout = keras.layers.Dropout(dropout_rate, name="aspp_dropout")
        self._static_size = None

    def build(self, input_shape):
        if isinstance(input_shape, dict):
            input_shape = input_shape[str(self._args["level"])]
        if self._args["spp_layer_version"] == "v2":
            if input_shape[1] is None or input_shape[2] is None:
                raise ConfigError(
                    "task.model.decoder.aspp.spp_layer_version 'v2' needs a fixed input size "
                    "(task.model.input_size [height, width, 3]); use 'v1' for any size.")
            self._static_size = (int(input_shape[1]), int(input_shape[2]))

    def _branch(self, i, x, training):
        depthwise = getattr(self, f"branch_{i}_depthwise", None)
        if depthwise is not None:
            x = depthwise(x)
        x = getattr(self, f"branch_{i}_conv")(x)
        return self._act(getattr(self, f"branch_{i}_norm")(x, training=training))

    def call(self, inputs, training=None):
        level = str(self._args["level"])
        features = inputs[level] if isinstance(inputs, dict) else inputs
        results = [self._branch(i, features, training) for i in range(self._num_branches - 1)]
        if self._pool_size is None:
            pooled = tf.reduce_mean(features, axis=[1, 2], keepdims=True)
        else:
            pooled = self.pool(features)
        pooled = self._act(self.pool_norm(self.pool_conv(pooled), training=training))
        if self._static_size is not None:
            size, method = self._static_size, self._args["interpolation"]
        else:
            size, method = tf.shape(features)[1:3], "bilinear"
        pooled = tf.image.resize(tf.cast(pooled, tf.float32), size, method=method)
        results.append(tf.cast(pooled, features.dtype))
        x = tf.concat(results, axis=-1)
        x = self._act(self.projection_norm(self.projection_conv(x), training=training))
        x = self.dropout(x, training=training)
        return x if self._args["output_tensor"] else {level: x}

    def get_config(self):
        return {**super().get_config(), **self._args, "settings": self._settings.get_config()}


def build_aspp_decoder(input_specs, model_config, settings: NormSettings) -> ASPP:
    """TFM's `build_aspp_decoder`: ASPP from `model_config.decoder.aspp`."""
    del input_specs  # ASPP reads its level from the backbone's features when called
    config = model_config.decoder.aspp
    return ASPP(level=config.level, dilation_rates=config.dilation_rates,
                num_filters=config.num_filters, pool_kernel_size=config.pool_kernel_size,
                dropout_rate=config.dropout_rate,
                use_depthwise_convolution=config.use_depthwise_convolution,
                spp_layer_version=config.spp_layer_version,
                output_tensor=config.output_tensor, settings=settings, name="decoder")
