"""TFM's mobile SpineNet backbone (`backbone.type: spinenet_mobile`): SpineNet's
scale-permuted wiring (`spinenet.scale_permuted_network`) on MobileNet's inverted bottleneck
blocks with squeeze-excitation, resampled by depthwise convolutions (arXiv 2010.11426).

The architecture is data: `SPINENET_MOBILE_BLOCK_SPECS`, the per-level widths
`FILTER_SIZE_MAP` and the per-`model_id` sizes `SCALING_MAP`. Blocks above `max_level` are built
at `max_level`, as TFM's.
"""

from __future__ import annotations

import math
from typing import Dict, Sequence

import keras

from lite_launcher.vision.configs import backbones as backbone_configs
from lite_launcher.vision.modeling.backbones.factory import register_backbone_builder
from lite_launcher.vision.modeling.backbones.mobilenet import InvertedBottleneckBlock
from lite_launcher.vision.modeling.backbones.spinenet import (
    BLOCK_GROUP_OP_LAYERS, add_pairwise, conv_norm, level_endpoints, scale_permuted_network,
    tfm_depth, upsample)
from lite_launcher.vision.modeling.layers.nn_layers import NormSettings

# Filters of a block at each level (level 0: the stem convolution).
FILTER_SIZE_MAP = {0: 8, 1: 16, 2: 24, 3: 40, 4: 80, 5: 112, 6: 112, 7: 112}

# (level, block kind, (input offset 0, input offset 1), is output) of each block after the two
# stem blocks (levels 1 and 2); every block is an inverted bottleneck ('mbconv').
SPINENET_MOBILE_BLOCK_SPECS = (
    (2, "mbconv", (0, 1), False),
    (2, "mbconv", (1, 2), False),
    (4, "mbconv", (1, 2), False),
    (3, "mbconv", (3, 4), False),
    (4, "mbconv", (3, 5), False),
    (6, "mbconv", (4, 6), False),
    (4, "mbconv", (4, 6), False),
    (5, "mbconv", (7, 8), False),
    (7, "mbconv", (7, 9), False),
    (5, "mbconv", (9, 10), False),
    (5, "mbconv", (9, 11), False),
    (4, "mbconv", (6, 11), True),
    (3, "mbconv", (5, 11), True),
    (5, "mbconv", (8, 13), True),
    (7, "mbconv", (6, 15), True),
    (6, "mbconv", (13, 15), True),
)

# model_id -> (endpoints_num_filters, filter_size_scale, block_repeats).
SCALING_FIELDS = ("endpoints_num_filters", "filter_size_scale", "block_repeats")
SCALING_MAP: Dict[str, Dict[str, float]] = {
    model_id: dict(zip(SCALING_FIELDS, sizes)) for model_id, sizes in {
        "49": (48, 1.0, 1),
        "49S": (40, 0.65, 1),
        "49XS": (24, 0.6, 1),
    }.items()}

STEM_STRIDES = (1, 2)  # the two stem blocks: level 1, then level 2


def build_spinenet_mobile_model(input_shape, settings: NormSettings, min_level: int = 3,
                                max_level: int = 7, endpoints_num_filters: int = 48,
                                se_ratio: float = 0.2, block_repeats: int = 1,
                                filter_size_scale: float = 1.0, expand_ratio: int = 6,
                                init_stochastic_depth_rate: float = 0.0,
                                use_keras_upsampling_2d: bool = False,
                                block_specs: Sequence[tuple] = SPINENET_MOBILE_BLOCK_SPECS,
                                name: str = "backbone") -> keras.Model:
    """Mobile SpineNet as a Functional model {str(level): features}, min_level..max_level,
    with the sizes given (TFM's `SpineNetMobile` constructor's arguments)."""
    inputs = keras.Input(shape=tuple(input_shape))
    input_width = input_shape[1] or 2 ** max(spec[0] for spec in block_specs)

    def filters_of(level):
        return int(FILTER_SIZE_MAP[level] * filter_size_scale)

    def block_group(x, filters, kind, drop_rate, block_name, strides=1):
        del kind  # every block is an inverted bottleneck
        for repeat in range(block_repeats):
            x = InvertedBottleneckBlock(
                in_filters=x.shape[-1], out_filters=filters, expand_ratio=expand_ratio,
                strides=strides if repeat == 0 else 1, se_ratio=se_ratio,
                se_gating_activation="hard_sigmoid", stochastic_depth_drop_rate=drop_rate,
                activation=settings.activation, settings=settings,
                name=f"{block_name}_{repeat}")(x)
        return tfm_depth(x, BLOCK_GROUP_OP_LAYERS)

    def resample(x, width, kind, target_width, target_filters, target_kind):
        del kind, target_kind
        while width > target_width:
            x = settings.act()(settings.norm()(settings.depthwise(3, 2)(x)))
            width /= 2
        if width < target_width:
            x = upsample(x, target_width // width, keras_layer=use_keras_upsampling_2d)
        return conv_norm(x, settings, target_filters, activate=False)

    x = conv_norm(inputs, settings, filters_of(0), kernel_size=3, strides=2)
    stem = []
    for i, strides in enumerate(STEM_STRIDES):
        x = block_group(x, filters_of(i + 1), "mbconv", None, f"stem_block_{i + 1}", strides)
        stem.append((x, int(math.ceil(input_width / 2 ** (i + 1))), "mbconv"))
    blocks = scale_permuted_network(
        stem, block_specs, input_width, filters_of, resample, block_group, settings,
        init_drop_rate=init_stochastic_depth_rate, max_level=max_level, fuse=add_pairwise)
    return keras.Model(inputs, level_endpoints(blocks, min_level, max_level,
                                               endpoints_num_filters, settings), name=name)


@register_backbone_builder("spinenet_mobile")
def build_spinenet_mobile(input_shape, config: backbone_configs.SpineNetMobile,
                          settings: NormSettings, name: str = "backbone") -> keras.Model:
    """TFM's mobile SpineNet-`model_id` as a Functional model {str(level): features}."""
    config.validate()
    return build_spinenet_mobile_model(
        input_shape, settings, min_level=config.min_level, max_level=config.max_level,
        se_ratio=config.se_ratio, expand_ratio=config.expand_ratio,
        use_keras_upsampling_2d=config.use_keras_upsampling_2d,
        init_stochastic_depth_rate=config.stochastic_depth_drop_rate, name=name,
        **SCALING_MAP[str(config.model_id)])
