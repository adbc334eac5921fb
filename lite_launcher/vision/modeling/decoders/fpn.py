"""TFM's FPN decoder (official/vision/modeling/decoders/fpn.py).

`build_fpn`: the feature pyramid network over levels min_level .. max_level (lateral 1x1,
top-down nearest upsampling summed or concatenated, 3x3 smoothing, strided 3x3 for the levels
above the backbone's, one BatchNormalization per level), a Functional model. TFM's
`use_keras_layer` changes nothing here (the upsampling and sums are Keras layers either way).
"""

from __future__ import annotations

from typing import Dict, Optional

import keras

from lite_launcher.core.base_config import ConfigError
from lite_launcher.vision.modeling.layers.nn_layers import (
    NormSettings, get_activation, variance_scaling)


def build_fpn(input_specs: Dict[str, tuple], min_level: int = 3, max_level: int = 7,
              num_filters: int = 256, fusion_type: str = "sum",
              use_separable_conv: bool = False, settings: Optional[NormSettings] = None,
              name: str = "decoder") -> keras.Model:
    """TFM's FPN as a Functional model: {level: features} of the backbone levels
    `input_specs` (level -> shape with batch) in, {level: features} min..max_level out."""
    settings = NormSettings.of(settings)
    levels = sorted(int(k) for k in input_specs if str(k).isdigit())
    if not levels or levels[0] > min_level:
        raise ConfigError(f"task.model.min_level ({min_level}) is below the backbone's lowest "
                          f"level ({levels[0] if levels else None}); FPN needs the backbone to "
                          f"reach it.")
    if fusion_type not in ("sum", "concat"):
        raise ConfigError(f"task.model.decoder.fpn.fusion_type {fusion_type!r} must be 'sum' "
                          f"or 'concat'.")
    act = get_activation(settings.activation)

    def conv(filters, kernel_size, strides=1, conv_name=None):
        kwargs = dict(strides=strides, padding="same", name=conv_name)
        if use_separable_conv:
            # TFM hands SeparableConv2D `kernel_*` arguments, which it ignores: its separable
            # FPN keeps Keras's Glorot initializers and has no L2.
            return keras.layers.SeparableConv2D(filters, kernel_size, **kwargs)
        return keras.layers.Conv2D(filters, kernel_size, kernel_initializer=variance_scaling(),
                                   kernel_regularizer=settings.kernel_regularizer, **kwargs)

    inputs = {str(level): keras.Input(shape=tuple(input_specs[str(level)][1:]),
                                      name=str(level))
              for level in levels}
    backbone_max = min(levels[-1], max_level)
    lateral = {level: conv(num_filters, 1, conv_name=f"lateral_{level}")(inputs[str(level)])
               for level in range(min_level, backbone_max + 1)}
    feats = {backbone_max: lateral[backbone_max]}
    for level in range(backbone_max - 1, min_level - 1, -1):
        upsampled = keras.layers.UpSampling2D(2, interpolation="nearest")(feats[level + 1])
        if fusion_type == "sum":
            feats[level] = keras.layers.Add()([upsampled, lateral[level]])
        else:
            feats[level] = keras.layers.Concatenate(axis=-1)([upsampled, lateral[level]])
    for level in range(min_level, backbone_max + 1):
        feats[level] = conv(num_filters, 3, conv_name=f"post_hoc_{level}")(feats[level])
    for level in range(backbone_max + 1, max_level + 1):
        x = feats[level - 1]
        if level > backbone_max + 1:
            x = keras.layers.Activation(act)(x)
        feats[level] = conv(num_filters, 3, strides=2, conv_name=f"coarser_{level}")(x)
    outputs = {str(level): settings.norm(name=f"norm_{level}")(feats[level])
               for level in range(min_level, max_level + 1)}
    # Levels the pyramid does not read stay inputs, so the backbone's dict is passed whole.
    return keras.Model(inputs, outputs, name=name)


def build_fpn_decoder(input_specs: Dict[str, tuple], model_config,
                      settings: NormSettings) -> keras.Model:
    """TFM's `build_fpn_decoder`: FPN from `model_config.decoder.fpn` over the model's
    min_level .. max_level."""
    config = model_config.decoder.fpn
    return build_fpn(input_specs, model_config.min_level, model_config.max_level,
                     num_filters=config.num_filters, fusion_type=config.fusion_type,
                     use_separable_conv=config.use_separable_conv, settings=settings)
