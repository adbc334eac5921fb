"""TFM's EfficientNet backbone (`backbone.type: efficientnet`), b0 to b7, as TFM 2.20's
`official.vision.modeling.backbones.EfficientNet` builds it.

B0's seven block groups (`EN_B0_BLOCK_SPECS`, TFM's table) are scaled by the model id's width
and depth (`SCALING_MAP`): filters by `round_filters` (multiples of 8), repeats rounded up.
Every block is MobileNet's inverted bottleneck (`mobilenet.InvertedBottleneckBlock`, TFM's
`nn_blocks.InvertedBottleneckBlock`) with the config's `se_ratio` (squeezed from the block's
input width, ReLU inside, sigmoid gate) and, on its residual branch, the config's
`stochastic_depth_drop_rate`: TFM gives every block the same rate.

Endpoints: each `is_output` group's last map under levels '2'..'5'; the 1x1 head convolution
(1280 filters scaled) under '6', which a decoder does not read (`output_specs`, as TFM's).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Dict, List

import keras

from lite_launcher.vision.configs import backbones as backbone_configs
from lite_launcher.vision.modeling.backbones.factory import register_backbone_builder
from lite_launcher.vision.modeling.backbones.mobilenet import InvertedBottleneckBlock
from lite_launcher.vision.modeling.layers.nn_layers import (
    NormSettings, get_stochastic_depth_rate, round_filters)

# (block_fn, repeats, kernel_size, strides, expand_ratio, in_filters, out_filters, is_output)
# of B0's block groups (TFM's EN_B0_BLOCK_SPECS).
EN_B0_BLOCK_SPECS = (
    ("mbconv", 1, 3, 1, 1, 32, 16, False),
    ("mbconv", 2, 3, 2, 6, 16, 24, True),
    ("mbconv", 2, 5, 2, 6, 24, 40, True),
    ("mbconv", 3, 3, 2, 6, 40, 80, False),
    ("mbconv", 3, 5, 1, 6, 80, 112, True),
    ("mbconv", 4, 5, 2, 6, 112, 192, False),
    ("mbconv", 1, 3, 1, 6, 192, 320, True),
)

# model_id -> (width_scale, depth_scale), TFM's SCALING_MAP.
SCALING_MAP: Dict[str, Dict[str, float]] = {
    "b0": dict(width_scale=1.0, depth_scale=1.0),
    "b1": dict(width_scale=1.0, depth_scale=1.1),
    "b2": dict(width_scale=1.1, depth_scale=1.2),
    "b3": dict(width_scale=1.2, depth_scale=1.4),
    "b4": dict(width_scale=1.4, depth_scale=1.8),
    "b5": dict(width_scale=1.6, depth_scale=2.2),
    "b6": dict(width_scale=1.8, depth_scale=2.6),
    "b7": dict(width_scale=2.0, depth_scale=3.1),
}

# block_fn -> the block class (TFM's EfficientNet knows one).
BLOCKS = {"mbconv": InvertedBottleneckBlock}

STEM_FILTERS = 32
HEAD_FILTERS = 1280


@dataclasses.dataclass
class BlockGroupSpec:
    """One block group, scaled (TFM's efficientnet.BlockSpec)."""

    block_fn: str
    block_repeats: int
    kernel_size: int
    strides: int
    expand_ratio: float
    in_filters: int
    out_filters: int
    is_output: bool


def round_repeats(repeats: int, multiplier: float) -> int:
    """`repeats` scaled by the depth multiplier, rounded up (TFM's round_repeats)."""
    if not multiplier:
        return repeats
    return int(math.ceil(multiplier * repeats))


def decode_block_specs(width_scale: float, depth_scale: float) -> List[BlockGroupSpec]:
    """B0's groups with filters and repeats scaled."""
    return [BlockGroupSpec(fn, round_repeats(repeats, depth_scale), kernel, strides, expand,
                           round_filters(in_f, width_scale), round_filters(out_f, width_scale),
                           is_output)
            for fn, repeats, kernel, strides, expand, in_f, out_f, is_output
            in EN_B0_BLOCK_SPECS]


def build_efficientnet_model(input_shape, settings: NormSettings, width_scale: float = 1.0,
                             depth_scale: float = 1.0, se_ratio: float = 0.0,
                             stochastic_depth_drop_rate: float = 0.0,
                             se_inner_activation: str = "relu",
                             name: str = "backbone") -> keras.Model:
    """TFM's EfficientNet at `width_scale` / `depth_scale` as a Functional model whose outputs
    are {'2': ..., '6': ...}; `output_specs` holds levels '2'..'5'."""
    # TFM's EfficientNet: one rate for every block, not a schedule over the depth.
    drop_rate = get_stochastic_depth_rate(stochastic_depth_drop_rate, 1, 1)
    inputs = keras.Input(shape=tuple(input_shape))
    x = settings.conv(round_filters(STEM_FILTERS, width_scale), 3, 2, name="stem_conv")(inputs)
    x = settings.act()(settings.norm(name="stem_norm")(x))
    endpoints = {}
    level = 2
    for i, spec in enumerate(decode_block_specs(width_scale, depth_scale)):
        block_cls = BLOCKS[spec.block_fn]
        for j in range(spec.block_repeats):
            # The first block of a group changes width and stride, the others repeat it.
            x = block_cls(
                in_filters=spec.in_filters if j == 0 else spec.out_filters,
                out_filters=spec.out_filters, expand_ratio=spec.expand_ratio,
                strides=spec.strides if j == 0 else 1, kernel_size=spec.kernel_size,
                se_ratio=se_ratio, stochastic_depth_drop_rate=drop_rate,
                activation=settings.activation, se_inner_activation=se_inner_activation,
                settings=settings, name=f"block_group_{i}_{j}")(x)
        if spec.is_output:
            endpoints[str(level)] = x
            level += 1
    output_specs = {key: tuple(tensor.shape) for key, tensor in endpoints.items()}
    x = settings.conv(round_filters(HEAD_FILTERS, width_scale), 1, name="head_conv")(x)
    endpoints[str(level)] = settings.act()(settings.norm(name="head_norm")(x))
    model = keras.Model(inputs, endpoints, name=name)
    model.output_specs = output_specs
    return model


@register_backbone_builder("efficientnet")
def build_efficientnet(input_shape, config: backbone_configs.EfficientNet,
                       settings: NormSettings, name: str = "backbone") -> keras.Model:
    """TFM's `build_efficientnet`: the model id's scaling, the config's SE ratio and drop
    rate, the model's norm / activation settings."""
    config.validate()
    return build_efficientnet_model(
        input_shape, settings, se_ratio=config.se_ratio,
        stochastic_depth_drop_rate=config.stochastic_depth_drop_rate,
        name=name, **SCALING_MAP[config.model_id])
