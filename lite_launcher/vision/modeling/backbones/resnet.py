"""TFM's ResNet / ResNet-RS backbone (`backbone.type: resnet`), with TFM's layers and counts.

Options as TFM's `official.vision.modeling.backbones.ResNet`: stem v0 (7x7) or v1 (three 3x3,
ResNet-D), stem max-pool replacement, squeeze-excitation, stochastic depth (scaled by the block
group), ResNet-D shortcuts, depth multiplier, trainable BatchNormalization. The residual and
bottleneck blocks here are also the dilated ResNet's (`resnet_deeplab.py`).
"""

from __future__ import annotations

import keras

from lite_launcher.vision.configs import backbones as backbone_configs
from lite_launcher.vision.modeling.backbones.factory import register_backbone_builder
from lite_launcher.vision.modeling.layers.nn_layers import (
    NormSettings, SettingsBlock, SqueezeExcitation, StochasticDepth, add_residual,
    build_in_call_order, get_activation, get_stochastic_depth_rate, output_shape_through,
    register_serializable)

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

# (filters, strides) of the v1 stem's three 3x3 convolutions.
STEM_V1 = ((32, 2), (32, 1), (64, 1))


class _ShortcutBlock(SettingsBlock):
    """What the residual and bottleneck blocks share: the shortcut (projected when
    `use_projection`, ResNet-D style with `resnetd_shortcut`), the optional squeeze-excitation
    closing the branch, stochastic depth and the activation after the sum. A subclass gives
    the branch (`_make_branch`) and its `expansion` of the filters.

    The shortcut and branch layers are attributes `shortcut_<i>` / `branch_<i>` (see
    SettingsBlock: never lists).
    """

    expansion = 1

    def __init__(self, filters: int, strides: int, use_projection: bool,
                 settings=None, se_ratio: float = 0.0, resnetd_shortcut: bool = False,
                 stochastic_depth_drop_rate: float = 0.0, dilation_rate: int = 1, **kwargs):
        super().__init__(settings, filters=filters, strides=strides,
                         use_projection=use_projection, se_ratio=se_ratio,
                         resnetd_shortcut=resnetd_shortcut,
                         stochastic_depth_drop_rate=stochastic_depth_drop_rate,
                         dilation_rate=dilation_rate, **kwargs)
        settings = self._settings
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
        branch = self._make_branch(filters, strides, dilation_rate, settings)
        if se_ratio and 0 < se_ratio <= 1:
            # TFM's blocks gate with a ReLU squeeze whatever the block's activation.
            branch.append(SqueezeExcitation(out_filters, out_filters, se_ratio,
                                            settings=settings, name="se"))
        self._shortcut_names = self._attach("shortcut", shortcut)
        self._branch_names = self._attach("branch", branch)
        self._drop = (StochasticDepth(stochastic_depth_drop_rate)
                      if stochastic_depth_drop_rate else None)
        self._out_act = get_activation(settings.activation)

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

    def _make_branch(self, filters, strides, dilation_rate, settings):
        raise NotImplementedError

    def build(self, input_shape):
        for chain in (self._shortcut, self._branch):
            build_in_call_order(input_shape, chain)

    def compute_output_shape(self, input_shape):
        return output_shape_through(input_shape, self._branch)

    def call(self, inputs, training=None):
        shortcut = inputs
        for layer in self._shortcut:
            shortcut = layer(shortcut, training=training)
        x = inputs
        for layer in self._branch:
            x = layer(x, training=training)
        return self._out_act(add_residual(x, shortcut, self._drop, training))


@register_serializable
class ResidualBlock(_ShortcutBlock):
    """Two 3x3 convolutions with BN (ResNet-18/34)."""

    def _make_branch(self, filters, strides, dilation_rate, settings):
        return [settings.conv(filters, 3, strides, dilation_rate=dilation_rate, name="conv1"),
                settings.norm(name="norm1"), settings.act(),
                settings.conv(filters, 3, dilation_rate=dilation_rate, name="conv2"),
                settings.norm(name="norm2")]


@register_serializable
class BottleneckBlock(_ShortcutBlock):
    """1x1 -> 3x3 (strided, dilated) -> 1x1 (x4 filters) convolutions with BN (ResNet-50+)."""

    expansion = 4

    def _make_branch(self, filters, strides, dilation_rate, settings):
        return [settings.conv(filters, 1, name="conv1"), settings.norm(name="norm1"),
                settings.act(),
                settings.conv(filters, 3, strides, dilation_rate=dilation_rate, name="conv2"),
                settings.norm(name="norm2"), settings.act(),
                settings.conv(filters * 4, 1, name="conv3"), settings.norm(name="norm3")]


BLOCKS = {"residual": ResidualBlock, "bottleneck": BottleneckBlock}


def stem(inputs, stem_type: str, settings: NormSettings, v1_filters=STEM_V1,
         v0_filters: int = 64, replace_max_pool_filters: int = 0):
    """TFM's stem: v0 (7x7 stride 2) or v1 (three 3x3), then a 3x3 max pool, or a strided 3x3
    convolution with `replace_max_pool_filters` filters in its place."""
    if stem_type == "v0":
        x = settings.conv(v0_filters, 7, 2, name="stem_conv")(inputs)
        x = settings.act()(settings.norm(name="stem_norm")(x))
    else:
        x = inputs
        for i, (filters, strides) in enumerate(v1_filters):
            x = settings.conv(filters, 3, strides, name=f"stem_conv{i}")(x)
            x = settings.act()(settings.norm(name=f"stem_norm{i}")(x))
    if replace_max_pool_filters:
        x = settings.conv(replace_max_pool_filters, 3, 2, name="stem_pool_conv")(x)
        return settings.act()(settings.norm(name="stem_pool_norm")(x))
    return keras.layers.MaxPooling2D(3, 2, padding="same")(x)


def stem_kwargs(config: backbone_configs.ResNet) -> dict:
    """The `stem` arguments of `config` (filters scaled by the depth multiplier)."""
    multiplier = config.depth_multiplier
    stem_multiplier = multiplier if config.scale_stem else 1.0
    return dict(stem_type=config.stem_type,
                v1_filters=[(int(f * stem_multiplier), s) for f, s in STEM_V1],
                v0_filters=int(64 * stem_multiplier),
                replace_max_pool_filters=(int(64 * multiplier) if config.replace_stem_max_pool
                                          else 0))


def block_plan(config: backbone_configs.ResNet):
    """[(level, name, block class, keyword arguments)] of every block, in order."""
    plan = []
    for i, (kind, filters, repeats) in enumerate(RESNET_SPECS[config.model_id]):
        level = i + 2
        # TFM scales the drop rate linearly with the group: level 2..5 of 5.
        drop_rate = get_stochastic_depth_rate(config.stochastic_depth_drop_rate, level, 5)
        for j in range(repeats):
            plan.append((level, f"block_group_l{level}_{j}", BLOCKS[kind], dict(
                filters=int(filters * config.depth_multiplier),
                strides=(2 if i > 0 and j == 0 else 1), use_projection=(j == 0),
                se_ratio=config.se_ratio, resnetd_shortcut=config.resnetd_shortcut,
                stochastic_depth_drop_rate=drop_rate)))
    return plan


def build_from_plan(inputs, x, plan, settings: NormSettings, final_level=None,
                    name: str = "backbone") -> keras.Model:
    """The blocks of `plan` on `x`; endpoints: each level's last block (and the last block
    under `final_level` when given)."""
    endpoints = {}
    for level, block_name, block_cls, kwargs in plan:
        x = block_cls(settings=settings, name=block_name, **kwargs)(x)
        if level is not None:
            endpoints[str(level)] = x
    if final_level is not None:
        endpoints[str(final_level)] = x
    return keras.Model(inputs, endpoints, name=name)


@register_backbone_builder("resnet")
def build_resnet(input_shape, config: backbone_configs.ResNet, settings: NormSettings,
                 name: str = "backbone") -> keras.Model:
    """TFM's ResNet as a Functional model whose outputs are {'2': ..., '5': ...} (levels)."""
    config.validate()
    settings = settings.replace(trainable=config.bn_trainable)
    inputs = keras.Input(shape=tuple(input_shape))
    x = stem(inputs, settings=settings, **stem_kwargs(config))
    return build_from_plan(inputs, x, block_plan(config), settings, name=name)
