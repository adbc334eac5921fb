"""The segmentation head and its feature fusions (TFM's heads/segmentation_heads.py and the
fusion layers of layers/nn_layers.py).

`SegmentationHead` reads the decoder's `level` features, optionally fused first:
- 'deeplabv3plus': the backbone's `low_level` endpoint through a 1x1 convolution to
  `low_level_num_filters` (+ norm, activation), the decoder features resized bilinearly to it
  and concatenated ('deeplabv3plus_sum_to_merge': added);
- 'pyramid_fusion': every decoder level resized to `level` and summed;
- 'panoptic_fpn_fusion': Panoptic FPN's per-level 3x3 convolutions + GroupNorm(32) +
  upsampling to `level`, summed.
Then `num_convs` x (3x3 conv, or depthwise 3x3 + 1x1 with `use_depthwise_convolution`) with
norm and activation, nearest upsampling by `upsample_factor`, and the `num_classes` classifier.
"""

from __future__ import annotations

from typing import Optional

import keras
import tensorflow as tf

from lite_launcher.vision.modeling.layers.nn_layers import (
    NormSettings, build_in_call_order, output_shape_through, register_serializable)


def _pick(features, key):
    """features[str(key)] of a {level: ...} dict (tensors or shapes); a lone one as it is."""
    return features[str(key)] if isinstance(features, dict) else features


def _normal():
    return keras.initializers.RandomNormal(stddev=0.01)


def _resize(x, size):
    """Bilinear resize in float32 (TFM's), back in x's dtype."""
    return tf.cast(tf.image.resize(tf.cast(x, tf.float32), size, method="bilinear"), x.dtype)


def pyramid_feature_fusion(features: dict, target_level: int):
    """The sum of every level of `features` resized to `target_level` (TFM's)."""
    levels = {int(k): v for k, v in features.items()}
    target = levels[target_level]
    size = tf.shape(target)[1:3]
    return tf.add_n([feat if level == target_level else _resize(feat, size)
                     for level, feat in sorted(levels.items())])


def build_panoptic_fpn_fusion(min_level: int = 2, max_level: int = 5, target_level: int = 2,
                              num_filters: int = 128, num_fpn_filters: int = 256,
                              activation: str = "relu", kernel_regularizer=None,
                              name: str = "panoptic_fpn_fusion") -> keras.Model:
    """Panoptic FPN's semantic fusion as a Functional model (TFM's PanopticFPNFusion): level l
    gets max(1, l - target) x (3x3 conv, GroupNorm(32), activation, 2x nearest upsampling
    unless at the target), and the levels are summed."""
    if target_level > max_level:
        raise ValueError(f"target_level ({target_level}) must be <= max_level ({max_level}).")
    act = keras.activations.get(activation)
    inputs = {str(level): keras.Input(shape=(None, None, num_fpn_filters), name=str(level))
              for level in range(min_level, max_level + 1)}
    upscaled = []
    for level in range(min_level, max_level + 1):
        x = inputs[str(level)]
        for i in range(max(1, level - target_level)):
            x = keras.layers.Conv2D(num_filters, 3, padding="same",
                                    kernel_initializer=keras.initializers.VarianceScaling(),
                                    kernel_regularizer=kernel_regularizer,
                                    name=f"conv_l{level}_{i}")(x)
            x = keras.layers.GroupNormalization(groups=32, name=f"norm_l{level}_{i}")(x)
            x = keras.layers.Activation(act)(x)
            if level != target_level:
                x = keras.layers.UpSampling2D(2, interpolation="nearest")(x)
        upscaled.append(x)
    fused = upscaled[0] if len(upscaled) == 1 else keras.layers.Add()(upscaled)
    return keras.Model(inputs, fused, name=name)


@register_serializable
class SegmentationHead(keras.layers.Layer):
    """TFM's SegmentationHead: `((backbone_features, decoder_features))` -> logits at the
    resolution of `level` (or of `low_level` with a DeepLab v3+ fusion) x upsample_factor.

    Args:
      num_classes: classifier filters.
      level: the decoder level read (and the fusions' target).
      num_convs, num_filters: the convolutions before the classifier.
      use_depthwise_convolution: depthwise 3x3 + 1x1 instead of each 3x3.
      prediction_kernel_size: the classifier's kernel size.
      upsample_factor: nearest upsampling before the classifier (1: none).
      feature_fusion: None, 'deeplabv3plus', 'deeplabv3plus_sum_to_merge', 'pyramid_fusion'
        or 'panoptic_fpn_fusion'.
      low_level, low_level_num_filters: the backbone endpoint fused by DeepLab v3+ and its
        reduced width.
      decoder_min_level, decoder_max_level, num_decoder_filters: the decoder levels and width
        Panoptic FPN fusion reads.
      logit_activation: None, 'sigmoid' or 'softmax' on the classifier.
      settings: normalisation, activation and kernel regulariser.
    """

    def __init__(self, num_classes: int, level, num_convs: int = 2, num_filters: int = 256,
                 use_depthwise_convolution: bool = False, prediction_kernel_size: int = 1,
                 upsample_factor: int = 1, feature_fusion: Optional[str] = None,
                 decoder_min_level=None, decoder_max_level=None, low_level=2,
                 low_level_num_filters: int = 48, num_decoder_filters: int = 256,
                 logit_activation: Optional[str] = None,
                 settings: Optional[NormSettings] = None, **kwargs):
        super().__init__(**kwargs)
        self._settings = s = NormSettings.of(settings)
        self._args = dict(num_classes=num_classes, level=level, num_convs=num_convs,
                          num_filters=num_filters,
                          use_depthwise_convolution=use_depthwise_convolution,
                          prediction_kernel_size=prediction_kernel_size,
                          upsample_factor=upsample_factor, feature_fusion=feature_fusion,
                          decoder_min_level=decoder_min_level,
                          decoder_max_level=decoder_max_level, low_level=low_level,
                          low_level_num_filters=low_level_num_filters,
                          num_decoder_filters=num_decoder_filters,
                          logit_activation=logit_activation)
        self._act = keras.activations.get(s.activation)
        regularizer = s.kernel_regularizer
        if feature_fusion in ("deeplabv3plus", "deeplabv3plus_sum_to_merge"):
            self.dlv3p_conv = keras.layers.Conv2D(
                low_level_num_filters, 1, padding="same", use_bias=False,
                kernel_initializer=_normal(), kernel_regularizer=regularizer,
                name="segmentation_head_deeplabv3p_fusion_conv")
            self.dlv3p_norm = s.norm(name="segmentation_head_deeplabv3p_fusion_norm")
        elif feature_fusion == "panoptic_fpn_fusion":
            self.panoptic_fpn_fusion = build_panoptic_fpn_fusion(
                min_level=int(decoder_min_level), max_level=int(decoder_max_level),
                target_level=int(level), num_filters=num_filters,
                num_fpn_filters=num_decoder_filters, activation=s.activation,
                kernel_regularizer=regularizer)
        for i in range(num_convs):
            if use_depthwise_convolution:
                setattr(self, f"depthwise_conv_{i}", keras.layers.DepthwiseConv2D(
                    3, padding="same", use_bias=False, depthwise_initializer=_normal(),
                    depthwise_regularizer=regularizer,
                    name=f"segmentation_head_depthwise_conv_{i}"))
                setattr(self, f"depthwise_norm_{i}",
                        s.norm(name=f"segmentation_head_depthwise_norm_{i}"))
            setattr(self, f"conv_{i}", keras.layers.Conv2D(
                num_filters, 1 if use_depthwise_convolution else 3, padding="same",
                use_bias=False, kernel_initializer=_normal(), kernel_regularizer=regularizer,
                name=f"segmentation_head_conv_{i}"))
            setattr(self, f"norm_{i}", s.norm(name=f"segmentation_head_norm_{i}"))
        self.classifier = keras.layers.Conv2D(
            num_classes, prediction_kernel_size, padding="same", activation=logit_activation,
            kernel_initializer=_normal(), bias_initializer="zeros",
            kernel_regularizer=regularizer, name="segmentation_output")

    # ----- shapes: `build` and `compute_output_shape` follow `call` without running it ------
    # (Keras 3 otherwise traces `call` once to build the head and again for its output shape.)

    def _tower(self):
        """The layers after the fusion, in `call`'s order."""
        layers = []
        for i in range(self._args["num_convs"]):
            if self._args["use_depthwise_convolution"]:
                layers += [getattr(self, f"depthwise_conv_{i}"),
                           getattr(self, f"depthwise_norm_{i}")]
            layers += [getattr(self, f"conv_{i}"), getattr(self, f"norm_{i}")]
        return layers

    def _head_shape(self, input_shape, through):
        """The head's output shape, `through(shape, layers)` taking each step's layers (building
        them on the way or only following the shapes)."""
        backbone_shapes, decoder_shapes = input_shape
        args = self._args
        fusion = args["feature_fusion"]
        shape = tuple(_pick(decoder_shapes, args["level"]))
        if fusion in ("deeplabv3plus", "deeplabv3plus_sum_to_merge"):
            low = through(tuple(_pick(backbone_shapes, args["low_level"])),
                          [self.dlv3p_conv, self.dlv3p_norm])
            channels = shape[-1] + low[-1] if fusion == "deeplabv3plus" else low[-1]
            shape = tuple(low[:-1]) + (channels,)
        elif fusion == "panoptic_fpn_fusion":
            shape = tuple(shape[:-1]) + (args["num_filters"],)
        shape = through(shape, self._tower())
        factor = args["upsample_factor"]
        if factor > 1:
            shape = (shape[0],) + tuple(None if d is None else d * factor
                                        for d in shape[1:3]) + (shape[3],)
        return through(shape, [self.classifier])

    def build(self, input_shape):
        """Builds every sub-layer in `call`'s order on the shapes `call` would give it."""
        self._head_shape(input_shape, build_in_call_order)

    def compute_output_shape(self, input_shape):
        return self._head_shape(input_shape, output_shape_through)

    # ----- call --------------------------------------------------------------------------

    def _fused(self, backbone_output, decoder_output, training):
        args = self._args
        fusion = args["feature_fusion"]
        if fusion in ("deeplabv3plus", "deeplabv3plus_sum_to_merge"):
            x = _pick(decoder_output, args["level"])
            y = _pick(backbone_output, args["low_level"])
            y = self._act(self.dlv3p_norm(self.dlv3p_conv(y), training=training))
            x = tf.cast(_resize(x, tf.shape(y)[1:3]), y.dtype)
            return tf.concat([x, y], axis=-1) if fusion == "deeplabv3plus" else x + y
        if fusion == "pyramid_fusion":
            if not isinstance(decoder_output, dict):
                raise ValueError("pyramid_fusion needs the decoder's {level: features} dict.")
            return pyramid_feature_fusion(decoder_output, int(args["level"]))
        if fusion == "panoptic_fpn_fusion":
            levels = range(int(args["decoder_min_level"]), int(args["decoder_max_level"]) + 1)
            return self.panoptic_fpn_fusion({str(l): decoder_output[str(l)] for l in levels},
                                            training=training)
        return _pick(decoder_output, args["level"])

    def call(self, inputs, training=None):
        backbone_output, decoder_output = inputs
        x = self._fused(backbone_output, decoder_output, training)
        tower = self._tower()
        for conv, norm in zip(tower[::2], tower[1::2]):  # (depthwise,) conv, norm, activation
            x = self._act(norm(conv(x), training=training))
        factor = self._args["upsample_factor"]
        if factor > 1:
            x = tf.repeat(tf.repeat(x, factor, axis=1), factor, axis=2)  # nearest
        return self.classifier(x)

    def get_config(self):
        return {**super().get_config(), **self._args, "settings": self._settings.get_config()}
