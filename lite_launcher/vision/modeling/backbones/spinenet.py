"""TFM's SpineNet backbone (`backbone.type: spinenet`): a scale-permuted network whose blocks
read two earlier blocks at any level, resampled to their own (arXiv 1912.05027).

The architecture is data: `SPINENET_BLOCK_SPECS` (TFM's NAS-found block order), the per-level
widths `FILTER_SIZE_MAP` and the per-`model_id` sizes `SCALING_MAP`. The blocks are ResNet's
(`resnet.ResidualBlock`, `resnet.BottleneckBlock`). `scale_permuted_network` and
`level_endpoints` are the wiring mobile SpineNet (`spinenet_mobile.py`) shares: it gives its own
resampling and blocks.
"""

from __future__ import annotations

import math
from typing import Callable, Dict, Optional, Sequence, Tuple

import keras

from lite_launcher.vision.configs import backbones as backbone_configs
from lite_launcher.vision.modeling.backbones.factory import register_backbone_builder
from lite_launcher.vision.modeling.backbones.resnet import BLOCKS
from lite_launcher.vision.modeling.layers.nn_layers import (
    NormSettings, get_stochastic_depth_rate)

# Filters of a block at each level (bottlenecks output 4x as many).
FILTER_SIZE_MAP = {1: 32, 2: 64, 3: 128, 4: 256, 5: 256, 6: 256, 7: 256}

# (level, block kind, (input offset 0, input offset 1), is output) of each block after the two
# stem blocks; offsets index every block built so far, the stem blocks first.
SPINENET_BLOCK_SPECS: Tuple[Tuple[int, str, Tuple[int, int], bool], ...] = (
    (2, "bottleneck", (0, 1), False),
    (4, "residual", (0, 1), False),
    (3, "bottleneck", (2, 3), False),
    (4, "bottleneck", (2, 4), False),
    (6, "residual", (3, 5), False),
    (4, "bottleneck", (3, 5), False),
    (5, "residual", (6, 7), False),
    (7, "residual", (6, 8), False),
    (5, "bottleneck", (8, 9), False),
    (5, "bottleneck", (8, 10), False),
    (4, "bottleneck", (5, 10), True),
    (3, "bottleneck", (4, 10), True),
    (5, "bottleneck", (7, 12), True),
    (7, "bottleneck", (5, 14), True),
    (6, "bottleneck", (12, 14), True),
    (2, "bottleneck", (2, 13), True),
)

# model_id -> (endpoints_num_filters, filter_size_scale, resample_alpha, block_repeats).
SCALING_FIELDS = ("endpoints_num_filters", "filter_size_scale", "resample_alpha",
                  "block_repeats")
SCALING_MAP: Dict[str, Dict[str, float]] = {
    model_id: dict(zip(SCALING_FIELDS, sizes)) for model_id, sizes in {
        "49S": (128, 0.65, 0.5, 1),
        "49": (256, 1.0, 0.5, 1),
        "96": (256, 1.0, 0.5, 2),
        "143": (256, 1.0, 1.0, 3),
        "143L": (256, 1.3, 1.0, 3),  # SpineNet-143 1.3x wider
        "190": (512, 1.3, 1.0, 4),
    }.items()}

STEM_BLOCKS = 2  # level-2 bottleneck blocks after the stem, the first two of the network


def conv_norm(x, settings: NormSettings, filters: int, kernel_size: int = 1, strides: int = 1,
              activate: bool = True):
    """Conv2D (no bias) -> BatchNormalization [-> the activation]."""
    x = settings.norm()(settings.conv(filters, kernel_size, strides)(x))
    return settings.act()(x) if activate else x


def tfm_depth(x, layers: int):
    """`x` through `layers` Identity layers, where TFM's graph has that many weightless layers
    (tf_keras op layers) that lite's has not.

    Why: a Functional model orders its layers by their depth from the outputs (Keras 3 as
    tf_keras), and a TFM checkpoint numbers the layers in that order; with the same depths,
    lite's layers come in TFM's order and its checkpoints pair by structure.
    """
    for _ in range(layers):
        x = keras.layers.Identity()(x)
    return x


# Weightless layers on the longest path of TFM's `nearest_upsampling` (shape, slice, reshape,
# tile, reshape) beyond the one UpSampling2D lite uses, and after each block group
# (tf.identity / a linear Activation naming the group).
UPSAMPLING_OP_LAYERS = 4
BLOCK_GROUP_OP_LAYERS = 1


def upsample(x, scale: int, keras_layer: bool = False):
    """Nearest-neighbour upsampling by an integer `scale`: TFM's `nearest_upsampling`
    (reshape and tile; `keras_layer`: its UpSampling2D form), the same values either way."""
    if not keras_layer:
        x = tfm_depth(x, UPSAMPLING_OP_LAYERS)
    return keras.layers.UpSampling2D(size=(scale, scale), interpolation="nearest")(x)


def add_all(tensors):
    """The sum of `tensors` in one layer (TFM's SpineNet: tf.add_n)."""
    return keras.layers.Add()(list(tensors))


def add_pairwise(tensors):
    """The sum of `tensors` as a chain of two-input Add layers (TFM's mobile SpineNet)."""
    total = tensors[0]
    for tensor in tensors[1:]:
        total = keras.layers.Add()([total, tensor])
    return total


def scale_permuted_network(stem: Sequence[Tuple[object, int, str]], block_specs: Sequence[tuple],
                           input_width: int, filters_of: Callable[[int], int],
                           resample: Callable, block_group: Callable, settings: NormSettings,
                           init_drop_rate: float = 0.0, max_level: Optional[int] = None,
                           fuse: Callable = add_all) -> Dict[str, object]:
    """Builds the blocks of `block_specs` on the `stem` blocks ((tensor, width, kind) each)
    and returns the output blocks {str(level): tensor}.

    Each block resamples its two parents to its own level (`resample(tensor, width, kind,
    target width, target filters, target kind)`), sums them with `fuse` (and, for an output
    block, every earlier block nobody reads yet whose width and channels match), applies the
    activation and runs `block_group(x, filters, kind, drop rate, name)`; block i of n drops its residual
    branch at `init_drop_rate * i / n`. With `max_level`, blocks above it are built at
    `max_level` (mobile SpineNet's rule). A later output at a level replaces an earlier one,
    as in TFM.
    """
    net = [list(block) for block in stem]  # [tensor, width, kind, times read]
    for block in net:
        block.append(0)
    endpoints = {}
    for i, (level, kind, inputs, is_output) in enumerate(block_specs):
        if max_level is not None:
            level = min(level, max_level)
        target_width = int(math.ceil(input_width / 2 ** level))
        filters = filters_of(level)
        parents = []
        for parent in inputs:
            tensor, width, parent_kind, _ = net[parent]
            parents.append(resample(tensor, width, parent_kind, target_width, filters, kind))
            net[parent][3] += 1
        if is_output:
            for block in net:
                tensor, _, _, read = block
                if (read == 0 and tensor.shape[2] == target_width
                        and tensor.shape[3] == parents[0].shape[3]):
                    parents.append(tensor)
                    block[3] += 1
        x = settings.act()(fuse(parents))
        drop_rate = get_stochastic_depth_rate(init_drop_rate, i + 1, len(block_specs))
        x = block_group(x, filters, kind, drop_rate, f"scale_permuted_block_{i + 1}")
        net.append([x, target_width, kind, 0])
        if is_output:
            endpoints[str(level)] = x
    return endpoints


def level_endpoints(blocks: Dict[str, object], min_level: int, max_level: int, filters: int,
                    settings: NormSettings) -> Dict[str, object]:
    """{str(level): 1x1 conv -> BN -> activation of that level's output block}, min..max."""
    return {str(level): conv_norm(blocks[str(level)], settings, filters)
            for level in range(min_level, max_level + 1)}


def build_spinenet_model(input_shape, settings: NormSettings, min_level: int = 3,
                         max_level: int = 7, endpoints_num_filters: int = 256,
                         resample_alpha: float = 0.5, block_repeats: int = 1,
                         filter_size_scale: float = 1.0, init_stochastic_depth_rate: float = 0.0,
                         block_specs: Sequence[tuple] = SPINENET_BLOCK_SPECS,
                         name: str = "backbone") -> keras.Model:
    """SpineNet as a Functional model {str(level): features}, min_level..max_level, with the
    sizes given (TFM's `SpineNet` constructor's arguments; `SCALING_MAP` holds each id's)."""
    inputs = keras.Input(shape=tuple(input_shape))
    input_width = input_shape[1] or 2 ** max(spec[0] for spec in block_specs)

    def block_group(x, filters, kind, drop_rate, block_name):
        block = BLOCKS[kind]
        for repeat in range(block_repeats):
            # TFM projects the shortcut whenever the first block changes the channels.
            use_projection = repeat == 0 and x.shape[-1] != filters * block.expansion
            x = block(filters=filters, strides=1, use_projection=use_projection,
                      stochastic_depth_drop_rate=drop_rate, settings=settings,
                      name=f"{block_name}_{repeat}")(x)
        return tfm_depth(x, BLOCK_GROUP_OP_LAYERS)

    def resample(x, width, kind, target_width, target_filters, target_kind):
        # Squeeze to alpha x the parent block's own filters (a bottleneck outputs 4x them).
        in_filters = x.shape[-1] / BLOCKS[kind].expansion
        squeezed = int(in_filters * resample_alpha)
        x = conv_norm(x, settings, squeezed)
        if width > target_width:
            x = conv_norm(x, settings, squeezed, kernel_size=3, strides=2)
            width /= 2
            while width > target_width:
                x = keras.layers.MaxPooling2D(3, 2, padding="same")(x)
                width /= 2
        elif width < target_width:
            x = upsample(x, target_width // width)
        return conv_norm(x, settings, target_filters * BLOCKS[target_kind].expansion,
                         activate=False)

    x = conv_norm(inputs, settings, 64, kernel_size=7, strides=2)
    x = keras.layers.MaxPooling2D(3, 2, padding="same")(x)
    stem = []
    for i in range(STEM_BLOCKS):
        x = block_group(x, int(FILTER_SIZE_MAP[2] * filter_size_scale), "bottleneck", 0.0,
                        f"stem_block_{i + 1}")
        stem.append((x, int(math.ceil(input_width / 4)), "bottleneck"))
    blocks = scale_permuted_network(
        stem, block_specs, input_width,
        lambda level: int(FILTER_SIZE_MAP[level] * filter_size_scale), resample, block_group,
        settings, init_drop_rate=init_stochastic_depth_rate)
    return keras.Model(inputs, level_endpoints(blocks, min_level, max_level,
                                               endpoints_num_filters, settings), name=name)


@register_backbone_builder("spinenet")
def build_spinenet(input_shape, config: backbone_configs.SpineNet, settings: NormSettings,
                   name: str = "backbone") -> keras.Model:
    """TFM's SpineNet-`model_id` as a Functional model {str(level): features}."""
    config.validate()
    return build_spinenet_model(
        input_shape, settings, min_level=config.min_level, max_level=config.max_level,
        init_stochastic_depth_rate=config.stochastic_depth_drop_rate,
        name=name, **SCALING_MAP[str(config.model_id)])
