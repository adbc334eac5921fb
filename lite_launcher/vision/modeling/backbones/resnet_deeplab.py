"""TFM's dilated ResNet (`backbone.type: dilated_resnet`, TFM's resnet_deeplab.DilatedResNet).

DeepLab v3's ResNet: the block groups past `output_stride` keep their resolution and dilate
their 3x3 convolutions instead (rate 2, then doubling per group); the last group is repeated
`last_stage_repeats` times, its blocks' rates scaled by `multigrid`. Stem v1 here has TFM's
64-64-128 filters. Endpoints: levels 2 .. log2(output_stride), the last one holding the final
feature map (TFM's numbering).
"""

from __future__ import annotations

import math

import keras

from lite_launcher.vision.configs import backbones as backbone_configs
from lite_launcher.vision.modeling.backbones.factory import register_backbone_builder
from lite_launcher.vision.modeling.backbones.resnet import (
    BLOCKS, RESNET_SPECS, build_from_plan, stem)
from lite_launcher.vision.modeling.layers.nn_layers import NormSettings, get_stochastic_depth_rate

# (block kind, filters, repeats) by model_id: TFM's resnet_deeplab.RESNET_SPECS, the same
# groups as the plain ResNet's for these depths.
DILATED_RESNET_SPECS = {model_id: RESNET_SPECS[model_id] for model_id in (50, 101, 152, 200)}

STEM_V1 = ((64, 2), (64, 1), (128, 1))


def stem_kwargs(config: backbone_configs.DilatedResNet) -> dict:
    """The `stem` arguments of `config`."""
    return dict(stem_type=config.stem_type, v1_filters=STEM_V1,
                replace_max_pool_filters=64 if config.replace_stem_max_pool else 0)


def block_plan(config: backbone_configs.DilatedResNet):
    """[(level or None, name, block class, keyword arguments)] of every block, in order; the
    dilated groups have no level of their own (the last map is the final endpoint)."""
    specs = DILATED_RESNET_SPECS[config.model_id]
    normal_groups = int(math.log2(config.output_stride)) - 2
    num_groups = 4 + config.last_stage_repeats
    plan = []
    dilation = 1
    for i in range(3 + config.last_stage_repeats):
        dilated = i > normal_groups
        kind, filters, repeats = specs[min(i, 3)]
        multigrid = (config.multigrid if dilated and i >= 3 and config.multigrid
                     else [1] * repeats)
        if dilated:
            dilation *= 2
        drop_rate = get_stochastic_depth_rate(config.stochastic_depth_drop_rate, i + 2,
                                              num_groups)
        for j in range(repeats):
            level = i + 2 if not dilated and j == repeats - 1 else None
            plan.append((level, f"block_group_l{i + 2}_{j}", BLOCKS[kind], dict(
                filters=filters, strides=(2 if j == 0 and 0 < i and not dilated else 1),
                use_projection=(j == 0), se_ratio=config.se_ratio,
                resnetd_shortcut=config.resnetd_shortcut,
                stochastic_depth_drop_rate=drop_rate, dilation_rate=dilation * multigrid[j])))
    return plan


@register_backbone_builder("dilated_resnet")
def build_dilated_resnet(input_shape, config: backbone_configs.DilatedResNet,
                         settings: NormSettings, name: str = "backbone") -> keras.Model:
    """The dilated ResNet as a Functional model {level: feature map}."""
    config.validate()
    inputs = keras.Input(shape=tuple(input_shape))
    x = stem(inputs, settings=settings, **stem_kwargs(config))
    final_level = int(math.log2(config.output_stride))
    return build_from_plan(inputs, x, block_plan(config), settings, final_level=final_level,
                           name=name)
