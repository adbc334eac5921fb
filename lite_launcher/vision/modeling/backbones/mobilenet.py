"""TFM's MobileNet backbone (`backbone.type: mobilenet`): V1, V2, V3 Large / Small,
MultiAVG / MultiAVGSeg and the MobileNetV4 models (ConvSmall, ConvMedium, ConvLarge,
ConvMediumSeg, HybridMedium, HybridLarge with multi-query attention), as TFM 2.20's
`official.vision.modeling.backbones.MobileNet` builds them.

A model is a table of block specs (`BLOCK_SPECS`, at the top), decoded with the width
multiplier (`filter_size_scale`) and built block by block, each `block_fn` by its entry of
`BLOCK_BUILDERS` (the blocks are built from the shared layers of `layers.py`):

- `convbn`: convolution [+ BN] + activation.
- `depsepconv`: depthwise 3x3 + BN + act, pointwise + BN + act (V1).
- `invertedbottleneck` / `fused_ib`: expand 1x1 (or a fused kxk) -> depthwise -> [SE] ->
  project 1x1, residual when shapes match.
- `uib`: MobileNetV4's universal inverted bottleneck (optional start / middle / end depthwise
  convolutions, layer scale).
- `mhsa`: MobileNetV4's multi-head self-attention with multi-query attention (shared key /
  value, optional key / value downsampling), layer scale.
- `gpooling`: global average pooling (keeps the 1x1 map).

Endpoints are TFM's: each `is_output` block's map under the next level ('2', '3', ...), the
final map under one level more (so '6' for V2 / V3 at output stride 32). `output_stride` turns
later strides into dilation (atrous convolution); `output_intermediate_endpoints` adds an
inverted bottleneck's depthwise output as '<level>/depthwise'. L2 regularisation goes on
convolution kernels and not on depthwise kernels or attention projections, as in TFM.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import keras
import tensorflow as tf

from lite_launcher.vision.configs import backbones as backbone_configs
from lite_launcher.vision.modeling.backbones.factory import register_backbone_builder
from lite_launcher.vision.modeling.layers.nn_layers import (
    ChainBlock, LayerScale, NormSettings, SettingsBlock, SqueezeExcitation, StochasticDepth,
    add_residual, build_in_call_order, get_activation, get_stochastic_depth_rate,
    make_divisible, output_shape_through, register_serializable, round_filters)


@dataclasses.dataclass
class BlockSpec:
    """One block of a MobileNet (the fields and defaults of TFM's mobilenet.BlockSpec)."""

    block_fn: str = "convbn"
    kernel_size: Optional[int] = 3
    strides: Optional[int] = 1
    filters: Optional[float] = 32
    use_bias: Optional[bool] = False
    use_normalization: Optional[bool] = True
    activation: Optional[str] = "relu6"
    expand_ratio: Optional[float] = 6.0
    se_ratio: Optional[float] = None
    use_depthwise: Optional[bool] = True
    use_residual: Optional[bool] = True
    is_output: bool = True
    middle_dw_downsample: Optional[bool] = True
    start_dw_kernel_size: Optional[int] = 0
    middle_dw_kernel_size: Optional[int] = 0
    end_dw_kernel_size: Optional[int] = 0
    use_layer_scale: bool = False
    use_multi_query: bool = False
    use_downsampling: bool = False
    downsampling_dw_kernel_size: int = 3
    num_heads: int = 8
    key_dim: int = 64
    value_dim: int = 64
    query_h_strides: int = 1
    query_w_strides: int = 1
    kv_strides: int = 1


def _table(schema, *rows):
    """Block specs from rows of values for the fields named in `schema`."""
    names = schema.split()
    return [BlockSpec(**dict(zip(names, row))) for row in rows]


# ----- block-spec tables ------------------------------------------------------------------

_V1 = "block_fn kernel_size strides filters is_output"
_V2 = "block_fn kernel_size strides filters expand_ratio is_output"
_V3 = ("block_fn kernel_size strides filters activation se_ratio expand_ratio "
       "use_normalization use_bias is_output")
_MULTI = ("block_fn kernel_size strides filters activation expand_ratio use_normalization "
          "use_bias is_output")
_V4 = ("block_fn activation kernel_size start_dw_kernel_size middle_dw_kernel_size "
       "middle_dw_downsample strides filters expand_ratio is_output")
_POOL = BlockSpec(block_fn="gpooling", kernel_size=None, strides=None, filters=None,
                  is_output=False)

MNV1_BLOCK_SPECS = _table(
    _V1,
    ("convbn", 3, 2, 32, False),
    ("depsepconv", 3, 1, 64, False),
    ("depsepconv", 3, 2, 128, False), ("depsepconv", 3, 1, 128, True),
    ("depsepconv", 3, 2, 256, False), ("depsepconv", 3, 1, 256, True),
    ("depsepconv", 3, 2, 512, False), *[("depsepconv", 3, 1, 512, False)] * 4,
    ("depsepconv", 3, 1, 512, True),
    ("depsepconv", 3, 2, 1024, False), ("depsepconv", 3, 1, 1024, True))

MNV2_BLOCK_SPECS = _table(
    _V2,
    ("convbn", 3, 2, 32, None, False),
    ("invertedbottleneck", 3, 1, 16, 1., False),
    ("invertedbottleneck", 3, 2, 24, 6., False), ("invertedbottleneck", 3, 1, 24, 6., True),
    ("invertedbottleneck", 3, 2, 32, 6., False),
    *[("invertedbottleneck", 3, 1, 32, 6., False)], ("invertedbottleneck", 3, 1, 32, 6., True),
    ("invertedbottleneck", 3, 2, 64, 6., False), *[("invertedbottleneck", 3, 1, 64, 6., False)] * 3,
    *[("invertedbottleneck", 3, 1, 96, 6., False)] * 2, ("invertedbottleneck", 3, 1, 96, 6., True),
    ("invertedbottleneck", 3, 2, 160, 6., False),
    *[("invertedbottleneck", 3, 1, 160, 6., False)] * 2,
    ("invertedbottleneck", 3, 1, 320, 6., True),
    ("convbn", 1, 1, 1280, None, False))

_IB = "invertedbottleneck"
MNV3Large_BLOCK_SPECS = _table(
    _V3,
    ("convbn", 3, 2, 16, "hard_swish", None, None, True, False, False),
    (_IB, 3, 1, 16, "relu", None, 1., None, False, False),
    (_IB, 3, 2, 24, "relu", None, 4., None, False, False),
    (_IB, 3, 1, 24, "relu", None, 3., None, False, True),
    (_IB, 5, 2, 40, "relu", 0.25, 3., None, False, False),
    (_IB, 5, 1, 40, "relu", 0.25, 3., None, False, False),
    (_IB, 5, 1, 40, "relu", 0.25, 3., None, False, True),
    (_IB, 3, 2, 80, "hard_swish", None, 6., None, False, False),
    (_IB, 3, 1, 80, "hard_swish", None, 2.5, None, False, False),
    (_IB, 3, 1, 80, "hard_swish", None, 2.3, None, False, False),
    (_IB, 3, 1, 80, "hard_swish", None, 2.3, None, False, False),
    (_IB, 3, 1, 112, "hard_swish", 0.25, 6., None, False, False),
    (_IB, 3, 1, 112, "hard_swish", 0.25, 6., None, False, True),
    (_IB, 5, 2, 160, "hard_swish", 0.25, 6., None, False, False),
    (_IB, 5, 1, 160, "hard_swish", 0.25, 6., None, False, False),
    (_IB, 5, 1, 160, "hard_swish", 0.25, 6., None, False, True),
    ("convbn", 1, 1, 960, "hard_swish", None, None, True, False, False),
    ("gpooling", None, None, None, None, None, None, None, None, False),
    ("convbn", 1, 1, 1280, "hard_swish", None, None, False, True, False))

MNV3Small_BLOCK_SPECS = _table(
    _V3,
    ("convbn", 3, 2, 16, "hard_swish", None, None, True, False, False),
    (_IB, 3, 2, 16, "relu", 0.25, 1, None, False, True),
    (_IB, 3, 2, 24, "relu", None, 72. / 16, None, False, False),
    (_IB, 3, 1, 24, "relu", None, 88. / 24, None, False, True),
    (_IB, 5, 2, 40, "hard_swish", 0.25, 4., None, False, False),
    (_IB, 5, 1, 40, "hard_swish", 0.25, 6., None, False, False),
    (_IB, 5, 1, 40, "hard_swish", 0.25, 6., None, False, False),
    (_IB, 5, 1, 48, "hard_swish", 0.25, 3., None, False, False),
    (_IB, 5, 1, 48, "hard_swish", 0.25, 3., None, False, True),
    (_IB, 5, 2, 96, "hard_swish", 0.25, 6., None, False, False),
    (_IB, 5, 1, 96, "hard_swish", 0.25, 6., None, False, False),
    (_IB, 5, 1, 96, "hard_swish", 0.25, 6., None, False, True),
    ("convbn", 1, 1, 576, "hard_swish", None, None, True, False, False),
    ("gpooling", None, None, None, None, None, None, None, None, False),
    ("convbn", 1, 1, 1024, "hard_swish", None, None, False, True, False))


def _multi_avg(last_stage_filters, last_stage_ratios, head_filters, head_is_output):
    """MobileNetMultiAVG and its segmentation variant (halved last stage, 448-filter head)."""
    f, r = last_stage_filters, last_stage_ratios
    return _table(
        _MULTI,
        ("convbn", 3, 2, 32, "relu", None, True, False, False),
        (_IB, 3, 2, 32, "relu", 3., True, False, False),
        (_IB, 3, 1, 32, "relu", 2., True, False, True),
        (_IB, 5, 2, 64, "relu", 5., True, False, False),
        (_IB, 3, 1, 64, "relu", 3., True, False, False),
        (_IB, 3, 1, 64, "relu", 2., True, False, False),
        (_IB, 3, 1, 64, "relu", 3., True, False, True),
        (_IB, 5, 2, 128, "relu", 6., True, False, False),
        *[(_IB, 3, 1, 128, "relu", 3., True, False, False)] * 3,
        (_IB, 3, 1, 160, "relu", 6., True, False, False),
        (_IB, 3, 1, 160, "relu", 4., True, False, True),
        (_IB, 3, 2, 192, "relu", 6., True, False, False),
        (_IB, 5, 1, f, "relu", r[0], True, False, False),
        (_IB, 5, 1, f, "relu", r[1], True, False, False),
        (_IB, 5, 1, f, "relu", r[2], True, False, True),
        ("convbn", 1, 1, head_filters, "relu", None, True, False, head_is_output),
        ("gpooling", None, None, None, None, None, None, None, False),
        ("convbn", 1, 1, 1280, "relu", None, True, False, False))


MNMultiAVG_BLOCK_SPECS = _multi_avg(192, (4., 4., 4.), 960, False)
MNMultiAVG_SEG_BLOCK_SPECS = _multi_avg(96, (2., 4., 4.), 448, True)

MNV4ConvSmall_BLOCK_SPECS = _table(
    _V4,
    ("convbn", "relu", 3, None, None, False, 2, 32, None, False),
    ("convbn", "relu", 3, None, None, False, 2, 32, None, False),
    ("convbn", "relu", 1, None, None, False, 1, 32, None, True),
    ("convbn", "relu", 3, None, None, False, 2, 96, None, False),
    ("convbn", "relu", 1, None, None, False, 1, 64, None, True),
    ("uib", "relu", None, 5, 5, True, 2, 96, 3.0, False),
    *[("uib", "relu", None, 0, 3, True, 1, 96, 2.0, False)] * 4,
    ("uib", "relu", None, 3, 0, True, 1, 96, 4.0, True),
    ("uib", "relu", None, 3, 3, True, 2, 128, 6.0, False),
    ("uib", "relu", None, 5, 5, True, 1, 128, 4.0, False),
    ("uib", "relu", None, 0, 5, True, 1, 128, 4.0, False),
    ("uib", "relu", None, 0, 5, True, 1, 128, 3.0, False),
    ("uib", "relu", None, 0, 3, True, 1, 128, 4.0, False),
    ("uib", "relu", None, 0, 3, True, 1, 128, 4.0, True),
    ("convbn", "relu", 1, None, None, False, 1, 960, None, False),
    ("gpooling", None, None, None, None, None, None, None, None, False),
    ("convbn", "relu", 1, None, None, False, 1, 1280, None, False))

MNV4ConvLarge_BLOCK_SPECS = _table(
    _V4,
    ("convbn", "relu", 3, None, None, False, 2, 24, None, False),
    ("fused_ib", "relu", 3, None, None, False, 2, 48, 4.0, True),
    ("uib", "relu", None, 3, 5, True, 2, 96, 4.0, False),
    ("uib", "relu", None, 3, 3, True, 1, 96, 4.0, True),
    ("uib", "relu", None, 3, 5, True, 2, 192, 4.0, False),
    *[("uib", "relu", None, 3, 3, True, 1, 192, 4.0, False)] * 3,
    ("uib", "relu", None, 3, 5, True, 1, 192, 4.0, False),
    *[("uib", "relu", None, 5, 3, True, 1, 192, 4.0, False)] * 5,
    ("uib", "relu", None, 3, 0, True, 1, 192, 4.0, True),
    ("uib", "relu", None, 5, 5, True, 2, 512, 4.0, False),
    *[("uib", "relu", None, 5, 5, True, 1, 512, 4.0, False)] * 3,
    ("uib", "relu", None, 5, 0, True, 1, 512, 4.0, False),
    ("uib", "relu", None, 5, 3, True, 1, 512, 4.0, False),
    *[("uib", "relu", None, 5, 0, True, 1, 512, 4.0, False)] * 2,
    ("uib", "relu", None, 5, 3, True, 1, 512, 4.0, False),
    ("uib", "relu", None, 5, 5, True, 1, 512, 4.0, False),
    *[("uib", "relu", None, 5, 0, True, 1, 512, 4.0, False)] * 2,
    ("uib", "relu", None, 5, 0, True, 1, 512, 4.0, True),
    ("convbn", "relu", 1, None, None, False, 1, 960, None, False),
    ("gpooling", None, None, None, None, None, None, None, None, False),
    ("convbn", "relu", 1, None, None, False, 1, 1280, None, False))


def _v4(activation="relu", layer_scale=False):
    """Spec makers for the MobileNetV4 tables written block by block (TFM's helpers)."""

    def convbn(kernel_size, strides, filters, output=False):
        return BlockSpec("convbn", kernel_size=kernel_size, strides=strides, filters=filters,
                         activation=activation, is_output=output)

    def fused_ib(kernel_size, strides, filters, output=False):
        return BlockSpec("fused_ib", kernel_size=kernel_size, strides=strides, filters=filters,
                         expand_ratio=4.0, activation=activation, is_output=output)

    def uib(start, middle, strides, filters, expand_ratio=4.0, output=False):
        return BlockSpec("uib", start_dw_kernel_size=start, middle_dw_kernel_size=middle,
                         strides=strides, filters=filters, expand_ratio=expand_ratio,
                         activation=activation, use_layer_scale=layer_scale, is_output=output)

    return convbn, fused_ib, uib


def _mhsa(filters, key_dim, num_heads, kv_strides):
    return BlockSpec("mhsa", activation="relu", filters=filters, key_dim=key_dim,
                     value_dim=key_dim, kv_strides=kv_strides, num_heads=num_heads,
                     use_layer_scale=True, use_multi_query=True, is_output=False)


def _conv_medium(seg: bool):
    # The segmentation variant keeps TFM's default relu6 and halves the last stage.
    convbn, fused_ib, uib = _v4(activation="relu6" if seg else "relu")
    f = 128 if seg else 256
    stage4 = ([uib(3, 0, 1, 160, 4.0), uib(3, 0, 1, 160, 4.0, output=True)] if seg else
              [uib(3, 0, 1, 160, 4.0), uib(0, 0, 1, 160, 2.0), uib(3, 0, 1, 160, 4.0, True)])
    stage5 = ([uib(5, 5, 2, 256, 6.0), uib(5, 5, 1, f, 4.0), uib(3, 5, 1, f, 4.0),
               uib(3, 5, 1, f, 4.0)]
              + ([uib(3, 0, 1, f, 4.0), uib(3, 5, 1, f, 2.0), uib(5, 5, 1, f, 4.0),
                  uib(5, 0, 1, f, 2.0)] if seg else
                 [uib(0, 0, 1, f, 4.0), uib(3, 0, 1, f, 4.0), uib(3, 5, 1, f, 2.0),
                  uib(5, 5, 1, f, 4.0), uib(0, 0, 1, f, 4.0), uib(0, 0, 1, f, 4.0),
                  uib(5, 0, 1, f, 2.0, output=True)]))
    return [convbn(3, 2, 32), fused_ib(3, 2, 48, output=True),
            uib(3, 5, 2, 80, 4.0), uib(3, 3, 1, 80, 2.0, output=True),
            uib(3, 5, 2, 160, 6.0), uib(3, 3, 1, 160, 4.0), uib(3, 3, 1, 160, 4.0),
            uib(3, 5, 1, 160, 4.0), uib(3, 3, 1, 160, 4.0), *stage4, *stage5,
            convbn(1, 1, 448 if seg else 960, output=seg), _POOL, convbn(1, 1, 1280)]


def _hybrid_medium():
    convbn, fused_ib, uib = _v4(layer_scale=True)
    a24, a12 = _mhsa(160, 64, 4, 2), _mhsa(256, 64, 4, 1)
    return [convbn(3, 2, 32), fused_ib(3, 2, 48, output=True),
            uib(3, 5, 2, 80, 4.0), uib(3, 3, 1, 80, 2.0, output=True),
            uib(3, 5, 2, 160, 6.0), uib(0, 0, 1, 160, 2.0), uib(3, 3, 1, 160, 4.0),
            uib(3, 5, 1, 160, 4.0), a24, uib(3, 3, 1, 160, 4.0), a24, uib(3, 0, 1, 160, 4.0),
            a24, uib(3, 3, 1, 160, 4.0), a24, uib(3, 0, 1, 160, 4.0, output=True),
            uib(5, 5, 2, 256, 6.0), uib(5, 5, 1, 256, 4.0), uib(3, 5, 1, 256, 4.0),
            uib(3, 5, 1, 256, 4.0), uib(0, 0, 1, 256, 2.0), uib(3, 5, 1, 256, 2.0),
            uib(0, 0, 1, 256, 2.0), uib(0, 0, 1, 256, 4.0), a12, uib(3, 0, 1, 256, 4.0), a12,
            uib(5, 5, 1, 256, 4.0), a12, uib(5, 0, 1, 256, 4.0), a12,
            uib(5, 0, 1, 256, 4.0, output=True),
            convbn(1, 1, 960), _POOL, convbn(1, 1, 1280)]


def _hybrid_large():
    convbn, fused_ib, uib = _v4(activation="gelu", layer_scale=True)
    a24, a12 = _mhsa(192, 48, 8, 2), _mhsa(512, 64, 8, 1)
    return [convbn(3, 2, 24), fused_ib(3, 2, 48, output=True),
            uib(3, 5, 2, 96), uib(3, 3, 1, 96, output=True),
            uib(3, 5, 2, 192), *[uib(3, 3, 1, 192)] * 3, uib(3, 5, 1, 192),
            uib(5, 3, 1, 192), uib(5, 3, 1, 192),
            a24, uib(5, 3, 1, 192), a24, uib(5, 3, 1, 192), a24, uib(5, 3, 1, 192), a24,
            uib(3, 0, 1, 192, output=True),
            uib(5, 5, 2, 512), *[uib(5, 5, 1, 512)] * 3, uib(5, 0, 1, 512), uib(5, 3, 1, 512),
            uib(5, 0, 1, 512), uib(5, 0, 1, 512), uib(5, 3, 1, 512), uib(5, 5, 1, 512),
            a12, uib(5, 0, 1, 512), a12, uib(5, 0, 1, 512), a12, uib(5, 0, 1, 512), a12,
            uib(5, 0, 1, 512, output=True),
            convbn(1, 1, 960), _POOL, convbn(1, 1, 1280)]


BLOCK_SPECS = {
    "MobileNetV1": MNV1_BLOCK_SPECS,
    "MobileNetV2": MNV2_BLOCK_SPECS,
    "MobileNetV3Large": MNV3Large_BLOCK_SPECS,
    "MobileNetV3Small": MNV3Small_BLOCK_SPECS,
    "MobileNetMultiAVG": MNMultiAVG_BLOCK_SPECS,
    "MobileNetMultiAVGSeg": MNMultiAVG_SEG_BLOCK_SPECS,
    "MobileNetV4ConvSmall": MNV4ConvSmall_BLOCK_SPECS,
    "MobileNetV4ConvMedium": _conv_medium(seg=False),
    "MobileNetV4ConvLarge": MNV4ConvLarge_BLOCK_SPECS,
    "MobileNetV4ConvMediumSeg": _conv_medium(seg=True),
    "MobileNetV4HybridMedium": _hybrid_medium(),
    "MobileNetV4HybridLarge": _hybrid_large(),
}


def decode_block_specs(model_id: str, filter_size_scale: float):
    """The model's specs with filters scaled, as TFM's block_spec_decoder (divisor 8, 1 for
    V1; the last layer keeps its width for multipliers below 1, except in V1)."""
    specs = [dataclasses.replace(s) for s in BLOCK_SPECS[model_id]]
    divisor = 1 if model_id == "MobileNetV1" else 8
    if model_id != "MobileNetV1" and filter_size_scale < 1.0:
        specs[-1].filters /= filter_size_scale
    for spec in specs:
        if spec.filters:
            spec.filters = round_filters(spec.filters, filter_size_scale, divisor, min_depth=8)
    return specs


# ----- blocks -------------------------------------------------------------------------------
# Each block is a `ChainBlock`: `_chain()` lists what its `call` runs, so Keras builds it and
# infers its output without tracing `call` (absent sublayers are None attributes).


@register_serializable
class Conv2DBNBlock(ChainBlock):
    """Convolution [+ BatchNormalization] + activation (TFM's Conv2DBNBlock)."""

    def __init__(self, filters, kernel_size=3, strides=1, use_bias=False, activation="relu6",
                 use_normalization=True, settings=None, **kwargs):
        super().__init__(settings, filters=filters, kernel_size=kernel_size, strides=strides,
                         use_bias=use_bias, activation=activation,
                         use_normalization=use_normalization, **kwargs)
        s = self._settings
        self._conv = s.conv(filters, kernel_size, strides, use_bias=use_bias, name="conv")
        self._norm = s.norm(name="norm") if use_normalization else None
        self._act = s.act(activation)

    def _chain(self):
        return (self._conv, self._norm, self._act)

    def call(self, inputs, training=None):
        x = self._conv(inputs)
        if self._norm is not None:
            x = self._norm(x, training=training)
        return self._act(x)


@register_serializable
class DepthwiseSeparableConvBlock(ChainBlock):
    """Depthwise kxk + BN + act, then pointwise 1x1 + BN + act (MobileNetV1's block)."""

    def __init__(self, filters, kernel_size=3, strides=1, dilation_rate=1, activation="relu6",
                 settings=None, **kwargs):
        super().__init__(settings, filters=filters, kernel_size=kernel_size, strides=strides,
                         dilation_rate=dilation_rate, activation=activation, **kwargs)
        s = self._settings
        self._depthwise = s.depthwise(kernel_size, strides, dilation_rate, name="depthwise")
        self._norm0 = s.norm(name="norm0")
        self._pointwise = s.conv(filters, 1, name="pointwise")
        self._norm1 = s.norm(name="norm1")
        self._act = get_activation(activation)

    def _chain(self):
        return (self._depthwise, self._norm0, self._pointwise, self._norm1)

    def call(self, inputs, training=None):
        x = self._act(self._norm0(self._depthwise(inputs), training=training))
        return self._act(self._norm1(self._pointwise(x), training=training))


@register_serializable
class InvertedBottleneckBlock(ChainBlock):
    """Expand (1x1, or kxk strided when fused) -> depthwise kxk -> [SE] -> project 1x1, with a
    residual (and stochastic depth) when input and output shapes match (TFM's block)."""

    def __init__(self, in_filters, out_filters, expand_ratio, strides, kernel_size=3,
                 se_ratio=None, stochastic_depth_drop_rate=None, activation="relu",
                 se_inner_activation="relu", se_gating_activation="sigmoid",
                 expand_se_in_filters=False, dilation_rate=1, divisible_by=1,
                 use_depthwise=True, use_residual=True, output_intermediate_endpoints=False,
                 settings=None, **kwargs):
        super().__init__(
            settings, in_filters=in_filters, out_filters=out_filters, expand_ratio=expand_ratio,
            strides=strides, kernel_size=kernel_size, se_ratio=se_ratio,
            stochastic_depth_drop_rate=stochastic_depth_drop_rate, activation=activation,
            se_inner_activation=se_inner_activation, se_gating_activation=se_gating_activation,
            expand_se_in_filters=expand_se_in_filters, dilation_rate=dilation_rate,
            divisible_by=divisible_by, use_depthwise=use_depthwise, use_residual=use_residual,
            output_intermediate_endpoints=output_intermediate_endpoints, **kwargs)
        s = self._settings
        expand_filters = make_divisible(in_filters * expand_ratio, divisible_by)
        self._expand = self._expand_norm = None
        if expand_ratio > 1:  # TFM skips (and never builds) the expansion at ratio 1
            self._expand = s.conv(expand_filters, 1 if use_depthwise else kernel_size,
                                  1 if use_depthwise else strides, name="expand")
            self._expand_norm = s.norm(name="expand_norm")
        self._act = get_activation(activation)
        self._depthwise = self._depthwise_norm = None
        if use_depthwise:
            self._depthwise = s.depthwise(kernel_size, strides, dilation_rate, name="depthwise")
            self._depthwise_norm = s.norm(name="depthwise_norm")
        self._se = None
        if se_ratio and 0 < se_ratio <= 1:
            self._se = SqueezeExcitation(
                expand_filters if expand_se_in_filters else in_filters, expand_filters,
                se_ratio, divisible_by=divisible_by, activation=se_inner_activation,
                gating_activation=se_gating_activation, settings=s, name="se")
        self._project = s.conv(out_filters, 1, name="project")
        self._project_norm = s.norm(name="project_norm")
        self._residual = use_residual and in_filters == out_filters and strides == 1
        self._drop = (StochasticDepth(stochastic_depth_drop_rate)
                      if self._residual and stochastic_depth_drop_rate else None)
        self._intermediate = output_intermediate_endpoints

    def _chain(self):
        return (self._expand, self._expand_norm, self._depthwise, self._depthwise_norm,
                self._se, self._project, self._project_norm, self._drop)

    def _endpoint_shapes(self, input_shape):
        if self._depthwise is None:
            return {}
        return {"depthwise": output_shape_through(input_shape, self._chain()[:4])}

    def call(self, inputs, training=None):
        endpoints = {}
        x = inputs
        if self._expand is not None:
            x = self._act(self._expand_norm(self._expand(x), training=training))
        if self._depthwise is not None:
            x = self._act(self._depthwise_norm(self._depthwise(x), training=training))
            endpoints["depthwise"] = x
        if self._se is not None:
            x = self._se(x)
        x = self._project_norm(self._project(x), training=training)
        if self._residual:
            x = add_residual(x, inputs, self._drop, training)
        return (x, endpoints) if self._intermediate else x


@register_serializable
class UniversalInvertedBottleneckBlock(ChainBlock):
    """MobileNetV4's UIB: [start depthwise + BN] -> expand 1x1 + BN + act -> [middle depthwise
    + BN + act] -> project 1x1 + BN -> [end depthwise + BN] -> [layer scale], residual when
    shapes match. The stride is taken by the middle (or the start) depthwise."""

    def __init__(self, in_filters, out_filters, expand_ratio, strides,
                 middle_dw_downsample=True, start_dw_kernel_size=0, middle_dw_kernel_size=3,
                 end_dw_kernel_size=0, stochastic_depth_drop_rate=None, activation="relu",
                 dilation_rate=1, divisible_by=1, use_residual=True, use_layer_scale=False,
                 layer_scale_init_value=1e-5, output_intermediate_endpoints=False,
                 settings=None, **kwargs):
        super().__init__(
            settings, in_filters=in_filters, out_filters=out_filters, expand_ratio=expand_ratio,
            strides=strides, middle_dw_downsample=middle_dw_downsample,
            start_dw_kernel_size=start_dw_kernel_size,
            middle_dw_kernel_size=middle_dw_kernel_size, end_dw_kernel_size=end_dw_kernel_size,
            stochastic_depth_drop_rate=stochastic_depth_drop_rate, activation=activation,
            dilation_rate=dilation_rate, divisible_by=divisible_by, use_residual=use_residual,
            use_layer_scale=use_layer_scale, layer_scale_init_value=layer_scale_init_value,
            output_intermediate_endpoints=output_intermediate_endpoints, **kwargs)
        if strides > 1 and not (middle_dw_kernel_size if middle_dw_downsample
                                else start_dw_kernel_size):
            raise ValueError("UniversalInvertedBottleneckBlock: the stride needs the depthwise "
                             "convolution that takes it (middle or start).")
        s = self._settings
        self._start = self._middle = self._end = self._scale = None
        self._start_norm = self._middle_norm = self._end_norm = None
        if start_dw_kernel_size:
            self._start = s.depthwise(start_dw_kernel_size,
                                      1 if middle_dw_downsample else strides, dilation_rate,
                                      name="start_dw")
            self._start_norm = s.norm(name="start_dw_norm")
        self._expand = s.conv(make_divisible(in_filters * expand_ratio, divisible_by), 1,
                              name="expand")
        self._expand_norm = s.norm(name="expand_norm")
        self._act = get_activation(activation)
        if middle_dw_kernel_size:
            self._middle = s.depthwise(middle_dw_kernel_size,
                                       strides if middle_dw_downsample else 1, dilation_rate,
                                       name="middle_dw")
            self._middle_norm = s.norm(name="middle_dw_norm")
        self._project = s.conv(out_filters, 1, name="project")
        self._project_norm = s.norm(name="project_norm")
        if end_dw_kernel_size:
            self._end = s.depthwise(end_dw_kernel_size, 1, dilation_rate, name="end_dw")
            self._end_norm = s.norm(name="end_dw_norm")
        if use_layer_scale:
            self._scale = LayerScale(layer_scale_init_value, name="layer_scale")
        self._residual = use_residual and in_filters == out_filters and strides == 1
        self._drop = (StochasticDepth(stochastic_depth_drop_rate)
                      if self._residual and stochastic_depth_drop_rate else None)
        self._intermediate = output_intermediate_endpoints

    def _chain(self):
        return (self._start, self._start_norm, self._expand, self._expand_norm, self._middle,
                self._middle_norm, self._project, self._project_norm, self._end,
                self._end_norm, self._scale, self._drop)

    def call(self, inputs, training=None):
        x = inputs
        if self._start is not None:
            x = self._start_norm(self._start(x), training=training)
        x = self._act(self._expand_norm(self._expand(x), training=training))
        if self._middle is not None:
            x = self._act(self._middle_norm(self._middle(x), training=training))
        x = self._project_norm(self._project(x), training=training)
        if self._end is not None:
            x = self._end_norm(self._end(x), training=training)
        if self._scale is not None:
            x = self._scale(x)
        if self._residual:
            x = add_residual(x, inputs, self._drop, training)
        return (x, {}) if self._intermediate else x


@register_serializable
class MultiQueryAttention(SettingsBlock):
    """Multi-query attention over the pixels of a square feature map: `num_heads` query
    projections, one shared key and one shared value projection (optionally computed on a
    map downsampled by a strided depthwise convolution + BN, `kv_strides`), and an output
    projection back to the input channels. Queries may be average-pooled by
    `query_h_strides` x `query_w_strides` (then the output is upsampled bilinearly)."""

    def __init__(self, num_heads, key_dim, value_dim, query_h_strides=1, query_w_strides=1,
                 kv_strides=1, dw_kernel_size=3, settings=None, **kwargs):
        super().__init__(settings, num_heads=num_heads, key_dim=key_dim, value_dim=value_dim,
                         query_h_strides=query_h_strides, query_w_strides=query_w_strides,
                         kv_strides=kv_strides, dw_kernel_size=dw_kernel_size, **kwargs)
        s = self._settings
        self._query_pool = self._key_dw = self._value_dw = None
        self._query_norm = self._key_norm = self._value_norm = None
        if query_h_strides > 1 or query_w_strides > 1:
            strides = (query_h_strides, query_w_strides)
            self._query_pool = keras.layers.AveragePooling2D(strides, padding="same")
            self._query_norm = s.norm(name="query_norm")
            self._upsample = keras.layers.UpSampling2D(strides, interpolation="bilinear")
        if kv_strides > 1:
            self._key_dw = s.depthwise(dw_kernel_size, kv_strides, name="key_dw")
            self._key_norm = s.norm(name="key_dw_norm")
            self._value_dw = s.depthwise(dw_kernel_size, kv_strides, name="value_dw")
            self._value_norm = s.norm(name="value_dw_norm")

    def build(self, input_shape):
        channels, heads = input_shape[-1], self._args["num_heads"]
        key_dim, value_dim = self._args["key_dim"], self._args["value_dim"]
        # Unregularised projections, as TFM's attention layers.
        self._query = self.add_weight(name="query", shape=(channels, heads * key_dim),
                                      initializer="glorot_uniform")
        self._key = self.add_weight(name="key", shape=(channels, key_dim),
                                    initializer="glorot_uniform")
        self._value = self.add_weight(name="value", shape=(channels, value_dim),
                                      initializer="glorot_uniform")
        self._output = self.add_weight(name="output", shape=(heads * value_dim, channels),
                                       initializer="glorot_uniform")
        # Then the sublayers, in `call`'s order (the upsampling has no state).
        for path in ((self._query_pool, self._query_norm), (self._key_dw, self._key_norm),
                     (self._value_dw, self._value_norm)):
            build_in_call_order(input_shape, path)

    def compute_output_shape(self, input_shape):
        return input_shape

    def _pixels(self, x):
        shape = tf.shape(x)
        return tf.reshape(x, [shape[0], shape[1] * shape[2], x.shape[-1]])

    def call(self, inputs, training=None):
        heads, key_dim = self._args["num_heads"], self._args["key_dim"]
        q = inputs
        if self._query_pool is not None:
            q = self._query_norm(self._query_pool(q), training=training)
        q_shape = tf.shape(q)
        q = tf.reshape(tf.matmul(self._pixels(q), self._query),
                       [q_shape[0], -1, heads, key_dim])
        k = v = inputs
        if self._key_dw is not None:
            k = self._key_norm(self._key_dw(k), training=training)
            v = self._value_norm(self._value_dw(v), training=training)
        k = tf.matmul(self._pixels(k), self._key)
        v = tf.matmul(self._pixels(v), self._value)
        logits = tf.einsum("blhk,bpk->blhp", q, k) / tf.sqrt(tf.cast(key_dim, q.dtype))
        o = tf.einsum("blhp,bpv->blhv", tf.nn.softmax(logits), v)
        o = tf.reshape(o, [q_shape[0], q_shape[1], q_shape[2], -1])
        if self._query_pool is not None:
            o = self._upsample(o)
        return tf.einsum("bhwc,cd->bhwd", o, self._output)


@register_serializable
class MultiHeadSelfAttentionBlock(ChainBlock):
    """MobileNetV4's attention block: BN -> multi-query attention -> [layer scale] ->
    [stochastic depth] + residual."""

    def __init__(self, num_heads=8, key_dim=64, value_dim=64, query_h_strides=1,
                 query_w_strides=1, kv_strides=1, downsampling_dw_kernel_size=3,
                 stochastic_depth_drop_rate=None, use_residual=True, use_layer_scale=True,
                 layer_scale_init_value=1e-5, output_intermediate_endpoints=False,
                 settings=None, **kwargs):
        super().__init__(
            settings, num_heads=num_heads, key_dim=key_dim, value_dim=value_dim,
            query_h_strides=query_h_strides, query_w_strides=query_w_strides,
            kv_strides=kv_strides, downsampling_dw_kernel_size=downsampling_dw_kernel_size,
            stochastic_depth_drop_rate=stochastic_depth_drop_rate, use_residual=use_residual,
            use_layer_scale=use_layer_scale, layer_scale_init_value=layer_scale_init_value,
            output_intermediate_endpoints=output_intermediate_endpoints, **kwargs)
        s = self._settings
        self._norm = s.norm(name="input_norm")
        self._attention = MultiQueryAttention(
            num_heads, key_dim, value_dim, query_h_strides, query_w_strides, kv_strides,
            downsampling_dw_kernel_size, settings=s, name="attention")
        self._scale = LayerScale(layer_scale_init_value, name="layer_scale") if (
            use_layer_scale) else None
        self._drop = (StochasticDepth(stochastic_depth_drop_rate)
                      if use_residual and stochastic_depth_drop_rate else None)
        self._residual = use_residual
        self._intermediate = output_intermediate_endpoints

    def _chain(self):
        return (self._norm, self._attention, self._scale, self._drop)

    def call(self, inputs, training=None):
        x = self._attention(self._norm(inputs, training=training), training=training)
        if self._scale is not None:
            x = self._scale(x)
        if self._residual:
            x = add_residual(x, inputs, self._drop, training)
        return (x, {}) if self._intermediate else x


# ----- the backbone -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class BlockPlacement:
    """What the backbone's loop decides for the block at `index`, besides its spec."""

    index: int
    in_filters: int
    strides: int  # the spec's own stride (a convbn keeps it past the output stride)
    layer_strides: int  # the stride, 1 past the output stride
    layer_rate: int  # the dilation that replaces the stride past the output stride
    rate: int  # the running dilation
    drop_rate: float  # the block's rate on the stochastic-depth schedule
    flat_drop_rate: float  # the configured rate (attention blocks take it unscheduled, as TFM)
    divisible_by: int
    intermediate: bool  # output_intermediate_endpoints
    settings: NormSettings


def _name(spec: BlockSpec, at: BlockPlacement) -> str:
    return f"{spec.block_fn}_{at.index}"


def _convbn(spec: BlockSpec, at: BlockPlacement):
    # TFM's convbn keeps its own stride even past the output stride.
    return Conv2DBNBlock(int(spec.filters), spec.kernel_size, at.strides,
                         use_bias=bool(spec.use_bias), activation=spec.activation,
                         use_normalization=bool(spec.use_normalization),
                         settings=at.settings, name=_name(spec, at))


def _depthwise_separable(spec: BlockSpec, at: BlockPlacement):
    return DepthwiseSeparableConvBlock(int(spec.filters), spec.kernel_size, at.layer_strides,
                                       dilation_rate=at.layer_rate, activation=spec.activation,
                                       settings=at.settings, name=_name(spec, at))


def _bottleneck_arguments(spec: BlockSpec, at: BlockPlacement) -> dict:
    """The arguments the inverted bottleneck and the UIB share."""
    use_rate = at.layer_rate if at.layer_rate > 1 and spec.kernel_size != 1 else at.rate
    return dict(in_filters=at.in_filters, out_filters=int(spec.filters),
                expand_ratio=spec.expand_ratio, strides=at.layer_strides,
                stochastic_depth_drop_rate=at.drop_rate, activation=spec.activation,
                dilation_rate=use_rate, divisible_by=at.divisible_by,
                use_residual=bool(spec.use_residual),
                output_intermediate_endpoints=at.intermediate, settings=at.settings,
                name=_name(spec, at))


def _inverted_bottleneck(spec: BlockSpec, at: BlockPlacement):
    """`invertedbottleneck`, and `fused_ib` (no depthwise: the expansion takes the kernel)."""
    return InvertedBottleneckBlock(
        kernel_size=spec.kernel_size, se_ratio=spec.se_ratio,
        se_gating_activation="hard_sigmoid", expand_se_in_filters=True,
        use_depthwise=spec.block_fn == "invertedbottleneck" and bool(spec.use_depthwise),
        **_bottleneck_arguments(spec, at))


def _universal_inverted_bottleneck(spec: BlockSpec, at: BlockPlacement):
    return UniversalInvertedBottleneckBlock(
        middle_dw_downsample=bool(spec.middle_dw_downsample),
        start_dw_kernel_size=spec.start_dw_kernel_size or 0,
        middle_dw_kernel_size=spec.middle_dw_kernel_size or 0,
        end_dw_kernel_size=spec.end_dw_kernel_size or 0,
        use_layer_scale=spec.use_layer_scale, **_bottleneck_arguments(spec, at))


def _multi_head_self_attention(spec: BlockSpec, at: BlockPlacement):
    return MultiHeadSelfAttentionBlock(
        num_heads=spec.num_heads, key_dim=spec.key_dim, value_dim=spec.value_dim,
        query_h_strides=spec.query_h_strides, query_w_strides=spec.query_w_strides,
        kv_strides=spec.kv_strides, downsampling_dw_kernel_size=spec.downsampling_dw_kernel_size,
        stochastic_depth_drop_rate=at.flat_drop_rate, use_residual=bool(spec.use_residual),
        use_layer_scale=spec.use_layer_scale, output_intermediate_endpoints=at.intermediate,
        settings=at.settings, name=_name(spec, at))


def _global_pooling(spec: BlockSpec, at: BlockPlacement):
    return keras.layers.GlobalAveragePooling2D(keepdims=True, name=f"pool_{at.index}")


# block_fn -> fn(spec, placement) -> the block's layer (TFM's block_fn names, as ResNet's BLOCKS).
BLOCK_BUILDERS = {
    "convbn": _convbn,
    "depsepconv": _depthwise_separable,
    "invertedbottleneck": _inverted_bottleneck,
    "fused_ib": _inverted_bottleneck,
    "uib": _universal_inverted_bottleneck,
    "mhsa": _multi_head_self_attention,
    "gpooling": _global_pooling,
}


@register_backbone_builder("mobilenet")
def build_mobilenet(input_shape, config: backbone_configs.MobileNet, settings: NormSettings,
                    name: str = "backbone") -> keras.Model:
    """TFM's MobileNet `config.model_id` as a Functional model {level: feature map}."""
    config.validate()
    specs = decode_block_specs(config.model_id, config.filter_size_scale)
    divisible_by = 1 if config.model_id == "MobileNetV1" else 8
    output_stride = config.output_stride
    intermediate = config.output_intermediate_endpoints
    inputs = keras.Input(shape=tuple(input_shape))
    net, endpoints, level = inputs, {}, 2
    current_stride, rate = 1, 1
    for index, spec in enumerate(specs):
        strides = spec.strides or 1
        if output_stride is not None and current_stride == output_stride:
            # Past the requested output stride: stride 1, and later layers dilate instead.
            layer_stride, layer_rate = 1, rate
            rate *= strides
        else:
            layer_stride, layer_rate = strides, 1
            current_stride *= strides
        if config.flat_stochastic_depth_drop_rate:
            drop_rate = config.stochastic_depth_drop_rate
        else:
            drop_rate = get_stochastic_depth_rate(config.stochastic_depth_drop_rate, index + 1,
                                                  len(specs))
        if spec.block_fn not in BLOCK_BUILDERS:
            raise ValueError(f"Unknown MobileNet block {spec.block_fn!r} (block {index}).")
        placement = BlockPlacement(
            index=index, in_filters=int(net.shape[-1]), strides=strides,
            layer_strides=layer_stride, layer_rate=layer_rate, rate=rate, drop_rate=drop_rate,
            flat_drop_rate=config.stochastic_depth_drop_rate, divisible_by=divisible_by,
            intermediate=intermediate, settings=settings)
        net = BLOCK_BUILDERS[spec.block_fn](spec, placement)(net)
        block_endpoints = {}
        if intermediate and isinstance(net, (tuple, list)):
            net, block_endpoints = net
        if spec.is_output:
            endpoints[str(level)] = net
            for key, tensor in block_endpoints.items():
                endpoints[f"{level}/{key}"] = tensor
            if current_stride != output_stride:
                level += 1
    # TFM's output_specs: the endpoints a decoder reads, not the final map added next.
    output_specs = {key: tuple(tensor.shape) for key, tensor in endpoints.items()}
    if str(level) in endpoints:
        level += 1
    endpoints[str(level)] = net
    model = keras.Model(inputs, endpoints, name=name)
    model.output_specs = output_specs
    return model
