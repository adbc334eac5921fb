"""TFM's NAS-FPN decoder (official/vision/modeling/decoders/nasfpn.py, `decoder.type: nasfpn`).

The backbone's levels min_level..max_level are brought to `num_filters` channels (a 1x1
convolution + BN where the width differs; levels above the backbone's max-pooled from the one
below), then `num_repeats` times the searched cell of `NASFPN_BLOCK_SPECS` (TFM's): each block
resamples two earlier feature maps to its level (max pool down, nearest-neighbour up), merges
them by a sum or a global attention (`feat0 + feat1 * sigmoid(max over space of feat0)`, feat0
the coarser), adds the same-level maps no block has read yet when it is an output block, then
activation -> 3x3 convolution (separable with `use_separable_conv`) -> BN. The cell's last
blocks are the next pyramid. As in TFM, with num_filters other than 256 every map a block
reads first goes through a 1x1 convolution + BN to 256 channels (`CELL_INPUT_WIDTH`).

Weights are created in TFM's order of creation. TFM's decoder is a tf_keras Functional model
whose checkpoint lists its layers in graph order instead, so the module registers its layers
with `tfm_checkpoint.register_creation_order`: a TFM-written checkpoint pairs them by the
numbers tf_keras gave their names.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import keras
import tensorflow as tf

from lite_launcher.checkpointing import tfm_checkpoint
from lite_launcher.core.base_config import ConfigError
from lite_launcher.vision.modeling.layers.nn_layers import (
    NormSettings, SettingsBlock, get_activation, register_serializable)

# (level, combine_fn, (input offset 0, input offset 1), is_output) of the searched cell.
NASFPN_BLOCK_SPECS: Tuple[Tuple[int, str, Tuple[int, int], bool], ...] = (
    (4, "attention", (1, 3), False),
    (4, "sum", (1, 5), False),
    (3, "sum", (0, 6), True),
    (4, "sum", (6, 7), True),
    (5, "attention", (7, 8), True),
    (7, "attention", (6, 9), True),
    (6, "attention", (9, 10), True),
)

# The levels of the cell's last five blocks.
CELL_LEVELS = sorted(spec[0] for spec in NASFPN_BLOCK_SPECS[-5:])

# TFM resamples a cell's inputs to its `_resample_feature_map` default of 256 channels whatever
# num_filters (a 1x1 convolution + BN where they differ); the cell's 3x3 convolutions take
# them back to num_filters.
CELL_INPUT_WIDTH = 256

# The sub-layer names (see register_creation_order).
tfm_checkpoint.register_creation_order(r"nasfpn_(conv|norm)_\d+")


def _fpn_initializer():
    # TFM's NAS-FPN convolutions: He normal over fan-out, untruncated.
    return keras.initializers.VarianceScaling(scale=2.0, mode="fan_out",
                                              distribution="untruncated_normal")


def _resample(x, input_level: int, target_level: int):
    """`x` of `input_level` at `target_level`: max-pooled down or nearest-upsampled."""
    if input_level < target_level:
        stride = 2 ** (target_level - input_level)
        return tf.nn.max_pool2d(x, stride, stride, "SAME")
    if input_level > target_level:
        scale = 2 ** (input_level - target_level)
        return tf.repeat(tf.repeat(x, scale, axis=1), scale, axis=2)
    return x


@register_serializable
class NASFPN(SettingsBlock):
    """NAS-FPN over {str(level): features} of the backbone (`input_specs`: level -> shape with
    batch); outputs {str(level): features} for min_level..max_level, `num_filters` wide."""

    def __init__(self, input_specs: Dict[str, Sequence[Optional[int]]], min_level: int = 3,
                 max_level: int = 7, num_filters: int = 256, num_repeats: int = 5,
                 use_separable_conv: bool = False, settings=None, **kwargs):
        input_specs = {str(k): list(v) for k, v in input_specs.items()}
        super().__init__(settings, input_specs=input_specs, min_level=min_level,
                         max_level=max_level, num_filters=num_filters,
                         num_repeats=num_repeats, use_separable_conv=use_separable_conv,
                         **kwargs)
        levels = sorted(int(k) for k in input_specs if k.isdigit())
        if not levels or levels[0] > min_level:
            raise ConfigError(f"task.model.min_level ({min_level}) is below the backbone's "
                              f"lowest level ({levels[0] if levels else None}); NAS-FPN needs "
                              f"the backbone to reach it.")
        self._levels = range(min_level, max_level + 1)
        # A cell's outputs are its last blocks, one per level: TFM fails on other levels too
        # (a KeyError when the next cell reads its inputs).
        if sorted(spec[0] for spec in NASFPN_BLOCK_SPECS[-len(self._levels):]) != list(
                self._levels):
            raise ConfigError(
                f"task.model: NAS-FPN's searched cell outputs levels {CELL_LEVELS[0]}.."
                f"{CELL_LEVELS[-1]}, not min_level..max_level ({min_level}..{max_level}); "
                f"set min_level {CELL_LEVELS[0]} and max_level {CELL_LEVELS[-1]}.")
        self._act = get_activation(self._settings.activation)
        self._convs = 0
        # The input pyramid: (level read, its level, conv index or None), TFM's order.
        self._stem: List[Tuple[Optional[int], int, Optional[int]]] = []
        for level in self._levels:
            if str(level) in input_specs:
                channels = input_specs[str(level)][-1]
                self._stem.append((level, level, self._add_conv(1, num_filters)
                                   if channels != num_filters else None))
            else:
                # From the level below, already num_filters wide.
                self._stem.append((None, level - 1, None))
        self._cells = [self._plan_cell() for _ in range(num_repeats)]

    def _resample_conv(self, channels: int) -> Optional[int]:
        """A cell's 1x1 convolution + BN to `CELL_INPUT_WIDTH` channels, where needed."""
        return self._add_conv(1, CELL_INPUT_WIDTH) if channels != CELL_INPUT_WIDTH else None

    def _plan_cell(self):
        """One cell's blocks, their convolutions created in TFM's order: per block (offset 0,
        its conv, offset 1, its conv, level, combine, [(an unread same-level map's offset, its
        conv)], the block's 3x3 conv). Which maps an output block adds is TFM's counting of
        the maps no block has read."""
        width = self._args["num_filters"]
        levels = list(self._levels)
        reads = [0] * len(levels)
        blocks = []
        for level, combine, (in0, in1), is_output in NASFPN_BLOCK_SPECS:
            for offset in (in0, in1):
                if offset >= len(levels):
                    raise ConfigError(f"NAS-FPN input offset {offset} is beyond the "
                                      f"{len(levels)} maps built so far.")
            reads[in0] += 1
            conv0 = self._resample_conv(width)
            reads[in1] += 1
            conv1 = self._resample_conv(width)
            added = []
            if is_output:
                for j, feat_level in enumerate(levels):
                    if reads[j] == 0 and feat_level == level:
                        reads[j] += 1
                        added.append((j, self._resample_conv(width)))
            blocks.append((in0, conv0, in1, conv1, level, combine, tuple(added),
                           self._add_conv(3, width)))
            levels.append(level)
            reads.append(0)
        return blocks

    def _add_conv(self, kernel_size: int, filters: int) -> int:
        """Creates convolution `i` and its BN (attributes, in creation order); returns i."""
        i = self._convs
        config = self._args
        regularizer = self._settings.kernel_regularizer
        if config["use_separable_conv"]:
            conv = keras.layers.SeparableConv2D(
                filters, kernel_size, padding="same",
                depthwise_initializer=_fpn_initializer(),
                pointwise_initializer=_fpn_initializer(), depthwise_regularizer=regularizer,
                pointwise_regularizer=regularizer, name=f"nasfpn_conv_{i}")
        else:
            conv = keras.layers.Conv2D(
                filters, kernel_size, padding="same",
                kernel_initializer=_fpn_initializer(), kernel_regularizer=regularizer,
                name=f"nasfpn_conv_{i}")
        setattr(self, f"_conv_{i}", conv)
        setattr(self, f"_norm_{i}", self._settings.norm(name=f"nasfpn_norm_{i}"))
        self._convs += 1
        return i

    def _conv_norm(self, i: int, x, training):
        return getattr(self, f"_norm_{i}")(getattr(self, f"_conv_{i}")(x), training=training)

    def _build_conv(self, i: Optional[int], shape) -> None:
        if i is not None:
            conv = getattr(self, f"_conv_{i}")
            conv.build(shape)
            getattr(self, f"_norm_{i}").build(conv.compute_output_shape(shape))

    def build(self, input_shape):
        # Every convolution in creation order: the stem's read the backbone's widths, a
        # cell's resampling ones num_filters, its 3x3 ones CELL_INPUT_WIDTH.
        for read, _, conv in self._stem:
            self._build_conv(conv, tuple(input_shape[str(read)]) if read is not None else None)
        narrow = (None, None, None, self._args["num_filters"])
        wide = (None, None, None, CELL_INPUT_WIDTH)
        for cell in self._cells:
            for _, conv0, _, conv1, _, _, added, conv in cell:
                self._build_conv(conv0, narrow)
                self._build_conv(conv1, narrow)
                for _, added_conv in added:
                    self._build_conv(added_conv, narrow)
                self._build_conv(conv, wide)

    def compute_output_shape(self, input_shape):
        # Each level keeps the size the input pyramid gives it (levels above the backbone's
        # max-pooled by 2, rounding up as SAME padding does).
        shapes = {}
        for read, read_level, _ in self._stem:
            if read is not None:
                shape = tuple(input_shape[str(read)])
            else:
                below = shapes[str(read_level)]
                shape = (below[0],) + tuple(None if d is None else -(-d // 2)
                                            for d in below[1:3]) + (None,)
            shapes[str(read if read is not None else read_level + 1)] = (
                shape[:3] + (self._args["num_filters"],))
        return shapes

    def _global_attention(self, feat0, feat1):
        return feat0 + feat1 * tf.sigmoid(tf.reduce_max(feat0, axis=[1, 2], keepdims=True))

    def _resampled(self, x, conv: Optional[int], input_level: int, target_level: int,
                   training):
        if conv is not None:
            x = self._conv_norm(conv, x, training)
        return _resample(x, input_level, target_level)

    def _cell(self, feats, cell, training):
        levels = list(self._levels)
        for in0, conv0, in1, conv1, level, combine, added, conv in cell:
            node0 = self._resampled(feats[in0], conv0, levels[in0], level, training)
            node1 = self._resampled(feats[in1], conv1, levels[in1], level, training)
            if combine == "sum":
                x = node0 + node1
            elif levels[in0] >= levels[in1]:
                x = self._global_attention(node0, node1)
            else:
                x = self._global_attention(node1, node0)
            for j, added_conv in added:
                x = x + self._resampled(feats[j], added_conv, levels[j], level, training)
            feats.append(self._conv_norm(conv, self._act(x), training))
            levels.append(level)
        last = dict(zip(levels[-len(self._levels):], feats[-len(self._levels):]))
        return [last[level] for level in self._levels]

    def call(self, inputs, training=None):
        feats = []
        for read, read_level, conv in self._stem:
            x = inputs[str(read)] if read is not None else feats[-1]
            if conv is not None:
                x = self._conv_norm(conv, x, training)
            target = read if read is not None else read_level + 1
            feats.append(_resample(x, read_level, target))
        for cell in self._cells:
            feats = self._cell(feats, cell, training)
        return {str(level): feat for level, feat in zip(self._levels, feats)}


def build_nasfpn_decoder(input_specs: Dict[str, tuple], model_config,
                         settings: NormSettings) -> NASFPN:
    """TFM's `build_nasfpn_decoder`: NAS-FPN from `model_config.decoder.nasfpn` over the
    model's min_level .. max_level."""
    config = model_config.decoder.nasfpn
    decoder = NASFPN(input_specs, model_config.min_level, model_config.max_level,
                     num_filters=config.num_filters, num_repeats=config.num_repeats,
                     use_separable_conv=config.use_separable_conv, settings=settings,
                     name="decoder")
    # Built now (its variables exist before the model's first call, as a Functional
    # decoder's do).
    decoder.build({level: tuple(shape) for level, shape in input_specs.items()})
    return decoder
