"""TFM's MobileDet backbones (`backbone.type: mobiledet`; arXiv 2004.14525): MobileDetCPU,
MobileDetDSP, MobileDetEdgeTPU and MobileDetGPU, a chain of blocks whose output blocks are the
endpoints '1', '2', ... (one per stride).

The architecture is data: `MOBILEDET_SPECS` holds each model's activation, squeeze-excitation
ratio and block rows. The blocks are MobileNet's (`Conv2DBNBlock`, `InvertedBottleneckBlock`,
fused when it has no depthwise convolution) and the Tucker block here (`TuckerConvBlock`).
Filters scale by `filter_size_scale`, rounded to multiples of 8 without TFM's round-down
protection (min 8).
"""

from __future__ import annotations

from typing import Dict, Tuple

import keras

from lite_launcher.core.base_config import ConfigError
from lite_launcher.vision.configs import backbones as backbone_configs
from lite_launcher.vision.modeling.backbones.factory import register_backbone_builder
from lite_launcher.vision.modeling.backbones.mobilenet import (
    Conv2DBNBlock, InvertedBottleneckBlock)
from lite_launcher.vision.modeling.layers.nn_layers import (
    ChainBlock, NormSettings, StochasticDepth, add_residual, make_divisible,
    register_serializable)

DIVISIBLE_BY = 8
MIN_DEPTH = 8

# model_id -> (activation, se_ratio of the inverted bottlenecks, rows). A row:
# (block, kernel size, strides, filters, expansion, use_residual, is_output), where block is
# 'convbn', 'ib' (inverted bottleneck), 'fused_ib' (its expansion takes the kernel, no
# depthwise) or 'tucker', whose expansion is (input, output) compression ratios.
MOBILEDET_SPECS: Dict[str, Tuple[str, float, tuple]] = {
    "MobileDetCPU": ("hard_swish", 0.25, (
        ("convbn", 3, 2, 16, None, None, False),
        ("ib", 3, 1, 8, 1.0, False, True),
        ("ib", 3, 2, 16, 4.0, False, True),
        ("ib", 3, 2, 32, 8.0, False, False),
        ("ib", 3, 1, 32, 4.0, True, False),
        ("ib", 3, 1, 32, 4.0, True, False),
        ("ib", 3, 1, 32, 4.0, True, True),
        ("ib", 5, 2, 72, 8.0, False, False),
        ("ib", 3, 1, 72, 8.0, True, False),
        ("ib", 5, 1, 72, 4.0, True, False),
        ("ib", 3, 1, 72, 4.0, True, False),
        ("ib", 3, 1, 72, 8.0, False, False),
        ("ib", 3, 1, 72, 8.0, True, False),
        ("ib", 3, 1, 72, 8.0, True, False),
        ("ib", 3, 1, 72, 8.0, True, True),
        ("ib", 5, 2, 104, 8.0, False, False),
        ("ib", 5, 1, 104, 4.0, True, False),
        ("ib", 5, 1, 104, 4.0, True, False),
        ("ib", 3, 1, 104, 4.0, True, False),
        ("ib", 3, 1, 144, 8.0, False, True),
    )),
    "MobileDetDSP": ("relu6", None, (
        ("convbn", 3, 2, 32, None, None, False),
        ("ib", 3, 1, 24, 1.0, False, True),
        ("fused_ib", 3, 2, 32, 4.0, False, False),
        ("fused_ib", 3, 1, 32, 4.0, True, False),
        ("ib", 3, 1, 32, 4.0, True, False),
        ("tucker", 3, 1, 32, (0.25, 0.75), True, True),
        ("fused_ib", 3, 2, 64, 8.0, False, False),
        ("ib", 3, 1, 64, 4.0, True, False),
        ("fused_ib", 3, 1, 64, 4.0, True, False),
        ("fused_ib", 3, 1, 64, 4.0, True, True),
        ("fused_ib", 3, 2, 120, 8.0, False, False),
        ("ib", 3, 1, 120, 4.0, True, False),
        ("ib", 3, 1, 120, 8.0, True, False),
        ("ib", 3, 1, 120, 8.0, True, False),
        ("fused_ib", 3, 1, 144, 8.0, False, False),
        ("ib", 3, 1, 144, 8.0, True, False),
        ("ib", 3, 1, 144, 8.0, True, False),
        ("ib", 3, 1, 144, 8.0, True, True),
        ("ib", 3, 2, 160, 4.0, False, False),
        ("ib", 3, 1, 160, 4.0, True, False),
        ("fused_ib", 3, 1, 160, 4.0, False, False),
        ("tucker", 3, 1, 160, (0.75, 0.75), True, False),
        ("ib", 3, 1, 240, 8.0, False, True),
    )),
    "MobileDetEdgeTPU": ("relu6", None, (
        ("convbn", 3, 2, 32, None, None, False),
        ("tucker", 3, 1, 16, (0.25, 0.75), False, True),
        ("fused_ib", 3, 2, 16, 8.0, False, False),
        ("fused_ib", 3, 1, 16, 4.0, True, False),
        ("fused_ib", 3, 1, 16, 8.0, True, False),
        ("fused_ib", 3, 1, 16, 4.0, True, True),
        ("fused_ib", 5, 2, 40, 8.0, False, False),
        ("fused_ib", 3, 1, 40, 4.0, True, False),
        ("fused_ib", 3, 1, 40, 4.0, True, False),
        ("fused_ib", 3, 1, 40, 4.0, True, True),
        ("ib", 3, 2, 72, 8.0, False, False),
        ("ib", 3, 1, 72, 8.0, True, False),
        ("fused_ib", 3, 1, 72, 4.0, True, False),
        ("fused_ib", 3, 1, 72, 4.0, True, False),
        ("ib", 5, 1, 96, 8.0, False, False),
        ("ib", 5, 1, 96, 8.0, True, False),
        ("ib", 3, 1, 96, 8.0, True, False),
        ("ib", 3, 1, 96, 8.0, True, True),
        ("ib", 5, 2, 120, 8.0, False, False),
        ("ib", 3, 1, 120, 8.0, True, False),
        ("ib", 5, 1, 120, 4.0, True, False),
        ("ib", 3, 1, 120, 8.0, True, False),
        ("ib", 5, 1, 384, 8.0, False, True),
    )),
    "MobileDetGPU": ("relu6", None, (
        ("convbn", 3, 2, 32, None, None, False),
        ("tucker", 3, 1, 16, (0.25, 0.25), False, True),
        ("fused_ib", 3, 2, 32, 8.0, False, False),
        ("tucker", 3, 1, 32, (0.25, 0.25), True, False),
        ("tucker", 3, 1, 32, (0.25, 0.25), True, False),
        ("tucker", 3, 1, 32, (0.25, 0.25), True, True),
        ("fused_ib", 3, 2, 64, 8.0, False, False),
        ("fused_ib", 3, 1, 64, 8.0, True, False),
        ("fused_ib", 3, 1, 64, 8.0, True, False),
        ("fused_ib", 3, 1, 64, 4.0, True, True),
        ("fused_ib", 3, 2, 128, 8.0, False, False),
        ("fused_ib", 3, 1, 128, 4.0, True, False),
        ("fused_ib", 3, 1, 128, 4.0, True, False),
        ("fused_ib", 3, 1, 128, 4.0, True, False),
        ("fused_ib", 3, 1, 128, 8.0, False, False),
        ("fused_ib", 3, 1, 128, 8.0, True, False),
        ("fused_ib", 3, 1, 128, 8.0, True, False),
        ("fused_ib", 3, 1, 128, 8.0, True, True),
        ("fused_ib", 3, 2, 128, 4.0, False, False),
        ("fused_ib", 3, 1, 128, 4.0, True, False),
        ("fused_ib", 3, 1, 128, 4.0, True, False),
        ("fused_ib", 3, 1, 128, 4.0, True, False),
        ("ib", 3, 1, 384, 8.0, False, True),
    )),
}


@register_serializable
class TuckerConvBlock(ChainBlock):
    """TFM's Tucker block (a generalised bottleneck): 1x1 compression of the input to
    `input_compression_ratio` x in_filters -> kxk (strided) convolution to
    `output_compression_ratio` x out_filters -> 1x1 to `out_filters`, BN after each (activation
    after the first two), with a residual when shapes allow. Compressed widths are rounded to
    `divisible_by` without round-down protection, as TFM's."""

    def __init__(self, in_filters, out_filters, input_compression_ratio,
                 output_compression_ratio, strides, kernel_size=3,
                 stochastic_depth_drop_rate=None, activation="relu", divisible_by=1,
                 use_residual=True, settings=None, **kwargs):
        super().__init__(
            settings, in_filters=in_filters, out_filters=out_filters,
            input_compression_ratio=input_compression_ratio,
            output_compression_ratio=output_compression_ratio, strides=strides,
            kernel_size=kernel_size, stochastic_depth_drop_rate=stochastic_depth_drop_rate,
            activation=activation, divisible_by=divisible_by, use_residual=use_residual,
            **kwargs)
        s = self._settings
        self._compress = s.conv(make_divisible(in_filters * input_compression_ratio,
                                               divisible_by, round_down_protect=False), 1,
                                name="compress")
        self._compress_norm = s.norm(name="compress_norm")
        self._conv = s.conv(make_divisible(out_filters * output_compression_ratio,
                                           divisible_by, round_down_protect=False),
                            kernel_size, strides, name="conv")
        self._conv_norm = s.norm(name="conv_norm")
        self._project = s.conv(out_filters, 1, name="project")
        self._project_norm = s.norm(name="project_norm")
        self._act = s.act(activation)
        self._residual = use_residual and in_filters == out_filters and strides == 1
        self._drop = (StochasticDepth(stochastic_depth_drop_rate)
                      if self._residual and stochastic_depth_drop_rate else None)

    def _chain(self):
        return (self._compress, self._compress_norm, self._conv, self._conv_norm,
                self._project, self._project_norm)

    def call(self, inputs, training=None):
        x = self._act(self._compress_norm(self._compress(inputs), training=training))
        x = self._act(self._conv_norm(self._conv(x), training=training))
        x = self._project_norm(self._project(x), training=training)
        return add_residual(x, inputs, self._drop, training) if self._residual else x


def scaled_filters(filters: int, filter_size_scale: float) -> int:
    """`filters` x `filter_size_scale`, a multiple of 8 (at least 8), rounded to the nearest
    without round-down protection (TFM's MobileDet)."""
    return make_divisible(filters * filter_size_scale, DIVISIBLE_BY, min_value=MIN_DEPTH,
                          round_down_protect=False)


def _check_se_width(expand_filters: int, se_ratio: float, filter_size_scale: float) -> None:
    """TFM rounds MobileDet's squeeze-excitation width without round-down protection; lite's
    inverted bottleneck protects. The two agree for every width TFM's models have at common
    scales; refuse a scale where they would not."""
    squeezed = max(1, int(expand_filters * se_ratio))
    if (make_divisible(squeezed, DIVISIBLE_BY)
            != make_divisible(squeezed, DIVISIBLE_BY, round_down_protect=False)):
        raise ConfigError(
            f"task.model.backbone.mobiledet.filter_size_scale ({filter_size_scale}) gives a "
            f"squeeze-excitation width lite rounds otherwise than TFM; use another scale "
            f"(e.g. 0.5, 0.75, 1.0).")


def _block(row, in_filters, activation, se_ratio, filter_size_scale, settings, name):
    kind, kernel_size, strides, filters, expansion, use_residual, _ = row
    filters = scaled_filters(filters, filter_size_scale)
    common = dict(strides=strides, kernel_size=kernel_size, activation=activation,
                  settings=settings, name=name)
    if kind == "convbn":
        return Conv2DBNBlock(filters, **common)
    if kind == "tucker":
        return TuckerConvBlock(in_filters, filters, *expansion, divisible_by=DIVISIBLE_BY,
                               use_residual=use_residual, **common)
    if se_ratio:
        _check_se_width(make_divisible(in_filters * expansion, DIVISIBLE_BY), se_ratio,
                        filter_size_scale)
    return InvertedBottleneckBlock(
        in_filters, filters, expansion, se_ratio=se_ratio, se_inner_activation=activation,
        se_gating_activation="sigmoid", expand_se_in_filters=True,
        divisible_by=DIVISIBLE_BY, use_depthwise=kind == "ib", use_residual=use_residual,
        **common)


@register_backbone_builder("mobiledet")
def build_mobiledet(input_shape, config: backbone_configs.MobileDet, settings: NormSettings,
                    name: str = "backbone") -> keras.Model:
    """TFM's MobileDet-`model_id` as a Functional model {'1': ..., '5': ...}: the output
    blocks, in order. The activation is the model's own (TFM's builder passes no
    `norm_activation.activation`)."""
    config.validate()
    activation, se_ratio, rows = MOBILEDET_SPECS[config.model_id]
    inputs = keras.Input(shape=tuple(input_shape))
    x, endpoints = inputs, {}
    for i, row in enumerate(rows):
        block_name = f"block_group_{row[0]}_{i}"
        x = _block(row, x.shape[-1], activation, se_ratio, config.filter_size_scale, settings,
                   block_name)(x)
        if row[-1]:
            endpoints[str(len(endpoints) + 1)] = x
    return keras.Model(inputs, endpoints, name=name)
