"""TFM's 3D ResNet and 3D ResNet-RS backbones (`backbone.type: resnet_3d` / `resnet_3d_rs`),
with TFM's layers and parameter counts (official/vision/modeling/backbones/resnet_3d.py).

A clip [batch, frames, height, width, channels] goes through a stem (v0: one 7x7 convolution
of `stem_conv_temporal_kernel_size` frames; v1: ResNet-D's three 3x3), a 3x3 max pool (3 frames
when it strides in time), then four groups of `BottleneckBlock3D` (RESNET_SPECS), each with
its own temporal stride and kernel sizes, self-gating in its last block, squeeze-excitation
and stochastic depth (scaled by the group, as TFM). Endpoints '2'..'5': each group's output.
"""

from __future__ import annotations

import keras

from lite_launcher.vision.configs import backbones_3d as configs
from lite_launcher.vision.modeling.backbones.factory import register_backbone_builder
from lite_launcher.vision.modeling.layers.nn_blocks_3d import BottleneckBlock3D, conv3d
from lite_launcher.vision.modeling.layers.nn_layers import (
    NormSettings, get_stochastic_depth_rate)

# (block kind, filters, repeats) of the four block groups, by model_id (TFM's RESNET_SPECS).
RESNET_SPECS = {
    model_id: [("bottleneck3d", filters, repeats)
               for filters, repeats in zip((64, 128, 256, 512), group_repeats)]
    for model_id, group_repeats in configs.RESNET_3D_REPEATS.items()}
BLOCKS = {"bottleneck3d": BottleneckBlock3D}

# (filters, kernel height/width, temporal kernel: 'stem' = the config's, 1) of the stems.
STEMS = {"v0": ((64, 7, "stem"),), "v1": ((32, 3, "stem"), (32, 3, 1), (64, 3, 1))}


def stem(inputs, config: configs.ResNet3D, settings: NormSettings):
    """TFM's 3D stem: the convolutions of `STEMS[stem_type]` (the first strided 2 in space and
    `stem_conv_temporal_stride` in time), each with BN and the activation, then the max
    pool."""
    x = inputs
    for i, (filters, size, temporal) in enumerate(STEMS[config.stem_type]):
        first = i == 0
        kernel = (config.stem_conv_temporal_kernel_size if temporal == "stem" else temporal,
                  size, size)
        strides = (config.stem_conv_temporal_stride, 2, 2) if first else (1, 1, 1)
        x = conv3d(settings, filters, kernel, strides, name=f"stem_conv{i}")(x)
        x = settings.act()(settings.norm(name=f"stem_norm{i}")(x))
    pool_stride = config.stem_pool_temporal_stride
    return keras.layers.MaxPooling3D(
        (1 if pool_stride == 1 else 3, 3, 3), (pool_stride, 2, 2), padding="same",
        name="stem_pool")(x)


def block_plan(config: configs.ResNet3D, repeat_kernel_sizes: bool = False):
    """[(level, name, block class, keyword arguments)] of every block, in order;
    `repeat_kernel_sizes` as `ResNet3D.kernel_sizes` (True for `resnet_3d_rs`)."""
    plan = []
    for i, (kind, filters, repeats) in enumerate(RESNET_SPECS[config.model_id]):
        level, spec = i + 2, config.block_specs[i]
        drop_rate = get_stochastic_depth_rate(config.stochastic_depth_drop_rate, level, 5)
        sizes = config.kernel_sizes(i, repeat_kernel_sizes)
        for j in range(repeats):
            plan.append((level, f"block_group_l{level}_{j}", BLOCKS[kind], dict(
                filters=filters, temporal_kernel_size=sizes[j],
                temporal_strides=spec.temporal_strides if j == 0 else 1,
                spatial_strides=2 if i > 0 and j == 0 else 1,
                stochastic_depth_drop_rate=drop_rate, se_ratio=config.se_ratio,
                # Self-gating in the group's last block only (TFM's).
                use_self_gating=spec.use_self_gating and j == repeats - 1)))
    return plan


def build_resnet3d_model(input_shape, config: configs.ResNet3D, settings: NormSettings,
                         repeat_kernel_sizes: bool = False,
                         name: str = "backbone") -> keras.Model:
    """The 3D ResNet of `config` as a Functional model {'2': ..., '5': ...}."""
    config.check("task.model.backbone." + ("resnet_3d_rs" if repeat_kernel_sizes
                                           else "resnet_3d"), repeat_kernel_sizes)
    inputs = keras.Input(shape=tuple(input_shape))
    x = stem(inputs, config, settings)
    endpoints = {}
    for level, block_name, block_cls, kwargs in block_plan(config, repeat_kernel_sizes):
        x = block_cls(settings=settings, name=block_name, **kwargs)(x)
        endpoints[str(level)] = x
    return keras.Model(inputs, endpoints, name=name)


@register_backbone_builder("resnet_3d")
def build_resnet3d(input_shape, config: configs.ResNet3D, settings: NormSettings,
                   name: str = "backbone") -> keras.Model:
    """TFM's `resnet_3d`: one temporal kernel size per block, as `block_specs` gives them."""
    return build_resnet3d_model(input_shape, config, settings, False, name)


@register_backbone_builder("resnet_3d_rs")
def build_resnet3d_rs(input_shape, config: configs.ResNet3D, settings: NormSettings,
                      name: str = "backbone") -> keras.Model:
    """TFM's `resnet_3d_rs`: each group's temporal kernel sizes repeated over its blocks."""
    return build_resnet3d_model(input_shape, config, settings, True, name)
