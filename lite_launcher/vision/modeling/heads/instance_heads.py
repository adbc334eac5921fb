"""The per-ROI heads of the two-stage detectors (TFM's
official/vision/modeling/heads/instance_heads.py): `DetectionHead` (class logits and box
offsets of each ROI) and `MaskHead` (mask logits of each ROI, of its class).

Both read ROI features [B, N, h, w, C] (N ROIs per image), run their 3x3 convolutions on the
B * N crops, and keep TFM's initialisers: VarianceScaling(2, fan_out, untruncated normal) for
convolutions (depthwise and pointwise alike when separable), VarianceScaling(1/3, fan_out,
uniform) for the detection head's fully connected layers, N(0, 0.01) / N(0, 0.001) for its
class / box predictors, zero biases; the kernel regulariser on every kernel (separable ones
too). The layers carry TFM's names ('detection-conv_0', 'detection-fc-bn_0', 'mask-logits',
...), created in TFM's order, so TFM's weights map onto them by layer name or position.
"""

from __future__ import annotations

from typing import Optional

import keras

from lite_launcher.vision.modeling.layers.nn_layers import (
    NormSettings, SettingsBlock, get_activation, register_serializable)


def _conv_initializer():
    return keras.initializers.VarianceScaling(scale=2.0, mode="fan_out",
                                              distribution="untruncated_normal")


def _conv(settings: NormSettings, separable: bool, filters: int, kernel_size: int,
          name: str) -> keras.layers.Layer:
    """TFM's head convolution: 'same' padding for 3x3, 'valid' for 1x1."""
    regularizer = settings.kernel_regularizer
    common = dict(padding="same" if kernel_size > 1 else "valid", bias_initializer="zeros",
                  name=name)
    if separable:
        return keras.layers.SeparableConv2D(
            filters, kernel_size, depthwise_initializer=_conv_initializer(),
            pointwise_initializer=_conv_initializer(), depthwise_regularizer=regularizer,
            pointwise_regularizer=regularizer, **common)
    return keras.layers.Conv2D(filters, kernel_size, kernel_initializer=_conv_initializer(),
                               kernel_regularizer=regularizer, **common)


def _flat_rois(roi_features):
    """[B, N, h, w, C] -> [B * N, h, w, C], and (N, h, w) (N, h, w static)."""
    _, num_rois, height, width, channels = roi_features.shape
    return keras.ops.reshape(roi_features, (-1, height, width, channels)), (num_rois, height,
                                                                           width)


class _ROIHead(SettingsBlock):
    """What both heads share: a symbolic build on the ROI features' shape, and the tower of
    3x3 convolutions, norms and activation over the flattened ROIs."""

    def _build_tower(self, prefix, norm_prefix, num_convs, num_filters, separable):
        # TFM's order: all convolutions, then all norms.
        for i in range(num_convs):
            setattr(self, f"conv_{i}", _conv(self._settings, separable, num_filters, 3,
                                             f"{prefix}-conv_{i}"))
        for i in range(num_convs):
            setattr(self, f"conv_norm_{i}", self._settings.norm(name=f"{norm_prefix}_{i}"))

    def _tower(self, x, training):
        activation = get_activation(self._settings.activation)
        for i in range(self._args["num_convs"]):
            x = getattr(self, f"conv_{i}")(x)
            x = getattr(self, f"conv_norm_{i}")(x, training=training)
            x = activation(x)
        return x


@register_serializable
class DetectionHead(_ROIHead):
    """TFM's DetectionHead: `head(roi_features)` with roi_features [B, N, h, w, C] returns
    `(classes, boxes)`: [B, N, num_classes] logits and [B, N, 4 * num_classes] box offsets
    ([B, N, 4] with `class_agnostic_bbox_pred`).

    Args:
      num_classes: classes, background (0) included.
      num_convs, num_filters: 3x3 convolutions (+ BatchNormalization, activation) per ROI.
      use_separable_conv: separable convolutions.
      num_fcs, fc_dims: fully connected layers (+ BatchNormalization, activation) on the
        flattened ROI features.
      class_agnostic_bbox_pred: one box per ROI.
      settings: normalisation (synchronized or not), activation and the kernel regulariser.
    """

    def __init__(self, num_classes: int, num_convs: int = 0, num_filters: int = 256,
                 use_separable_conv: bool = False, num_fcs: int = 2, fc_dims: int = 1024,
                 class_agnostic_bbox_pred: bool = False,
                 settings: Optional[NormSettings] = None, **kwargs):
        super().__init__(settings, num_classes=num_classes, num_convs=num_convs,
                         num_filters=num_filters, use_separable_conv=use_separable_conv,
                         num_fcs=num_fcs, fc_dims=fc_dims,
                         class_agnostic_bbox_pred=class_agnostic_bbox_pred, **kwargs)
        self._build_tower("detection", "detection-conv-bn", num_convs, num_filters,
                          use_separable_conv)
        regularizer = self._settings.kernel_regularizer
        for i in range(num_fcs):
            setattr(self, f"fc_{i}", keras.layers.Dense(
                fc_dims, kernel_initializer=keras.initializers.VarianceScaling(
                    scale=1 / 3.0, mode="fan_out", distribution="uniform"),
                kernel_regularizer=regularizer, name=f"detection-fc_{i}"))
        for i in range(num_fcs):
            setattr(self, f"fc_norm_{i}", self._settings.norm(name=f"detection-fc-bn_{i}"))
        self.classifier = keras.layers.Dense(
            num_classes, kernel_initializer=keras.initializers.RandomNormal(stddev=0.01),
            bias_initializer="zeros", kernel_regularizer=regularizer, name="detection-scores")
        self.box_regressor = keras.layers.Dense(
            4 if class_agnostic_bbox_pred else 4 * num_classes,
            kernel_initializer=keras.initializers.RandomNormal(stddev=0.001),
            bias_initializer="zeros", kernel_regularizer=regularizer, name="detection-boxes")

    def build(self, input_shape):
        """Builds every sub-layer by a symbolic call on [B, N, h, w, C]."""
        self.built = True  # the symbolic call below must not build again
        self(keras.KerasTensor(tuple(input_shape)))

    def call(self, roi_features, training=None):
        x, (num_rois, height, width) = _flat_rois(roi_features)
        x = self._tower(x, training)
        x = keras.ops.reshape(x, (-1, num_rois, height * width * x.shape[-1]))
        activation = get_activation(self._settings.activation)
        for i in range(self._args["num_fcs"]):
            x = getattr(self, f"fc_{i}")(x)
            x = getattr(self, f"fc_norm_{i}")(x, training=training)
            x = activation(x)
        return self.classifier(x), self.box_regressor(x)


@register_serializable
class MaskHead(_ROIHead):
    """TFM's MaskHead: `head([roi_features, roi_classes])` with roi_features [B, N, h, w, C]
    and roi_classes [B, N] returns mask logits [B, N, h * f, w * f] (f = upsample_factor):
    each ROI's own class's channel, or the one channel with `class_agnostic`.

    Args:
      num_classes: classes, background (0) included.
      upsample_factor: the transposed convolution's kernel and stride (>= 1).
      num_convs, num_filters: 3x3 convolutions (+ BatchNormalization, activation) per ROI.
      use_separable_conv: separable convolutions (the 1x1 logits too).
      class_agnostic: one mask channel for every class.
      settings: normalisation, activation and the kernel regulariser (TFM's factory builds
        the mask head's norms unsynchronised).
    """

    def __init__(self, num_classes: int, upsample_factor: int = 2, num_convs: int = 4,
                 num_filters: int = 256, use_separable_conv: bool = False,
                 class_agnostic: bool = False, settings: Optional[NormSettings] = None,
                 **kwargs):
        super().__init__(settings, num_classes=num_classes, upsample_factor=upsample_factor,
                         num_convs=num_convs, num_filters=num_filters,
                         use_separable_conv=use_separable_conv, class_agnostic=class_agnostic,
                         **kwargs)
        self._build_tower("mask", "mask-conv-bn", num_convs, num_filters, use_separable_conv)
        self.deconv = keras.layers.Conv2DTranspose(
            num_filters, upsample_factor, strides=upsample_factor, padding="valid",
            kernel_initializer=_conv_initializer(), bias_initializer="zeros",
            kernel_regularizer=self._settings.kernel_regularizer, name="mask-upsampling")
        self.deconv_norm = self._settings.norm(name="mask-deconv-bn")
        self.mask_regressor = _conv(self._settings, use_separable_conv,
                                    1 if class_agnostic else num_classes, 1, "mask-logits")

    def build(self, input_shape):
        """Builds every sub-layer by a symbolic call on ([B, N, h, w, C], [B, N])."""
        features_shape, classes_shape = input_shape
        self.built = True  # the symbolic call below must not build again
        self([keras.KerasTensor(tuple(features_shape)),
              keras.KerasTensor(tuple(classes_shape), dtype="int32")])

    def call(self, inputs, training=None):
        roi_features, roi_classes = inputs
        x, (num_rois, height, width) = _flat_rois(roi_features)
        x = self._tower(x, training)
        x = self.deconv(x)
        x = self.deconv_norm(x, training=training)
        x = get_activation(self._settings.activation)(x)
        logits = self.mask_regressor(x)
        factor = self._args["upsample_factor"]
        size = (height * factor, width * factor)
        if self._args["class_agnostic"]:
            return keras.ops.reshape(logits, (-1, num_rois) + size)
        logits = keras.ops.reshape(logits, (-1, num_rois) + size + (self._args["num_classes"],))
        # Each ROI's channel of its class: a one-hot selection sums one logit with zeros,
        # so it equals a gather exactly.
        selection = keras.ops.one_hot(keras.ops.cast(roi_classes, "int32"),
                                      self._args["num_classes"], dtype=logits.dtype)
        return keras.ops.sum(logits * selection[:, :, None, None, :], axis=-1)


def build_detection_heads(model_config, settings: NormSettings):
    """TFM's factory calls of `DetectionHead` for a `MaskRCNN` model config: one head, then
    one per cascade IoU threshold (`detection_head_1`, ...)."""
    config = model_config.detection_head
    return [DetectionHead(
        num_classes=model_config.num_classes, num_convs=config.num_convs,
        num_filters=config.num_filters, use_separable_conv=config.use_separable_conv,
        num_fcs=config.num_fcs, fc_dims=config.fc_dims,
        class_agnostic_bbox_pred=config.class_agnostic_bbox_pred, settings=settings,
        name="detection_head" if stage == 0 else f"detection_head_{stage}")
        for stage in range(model_config.cascade_stages())]


def build_mask_head(model_config, settings: NormSettings) -> MaskHead:
    """TFM's factory call of `MaskHead` for a `MaskRCNN` model config (its norms
    unsynchronised, as TFM's factory passes no `use_sync_bn`)."""
    config = model_config.mask_head
    return MaskHead(num_classes=model_config.num_classes,
                    upsample_factor=config.upsample_factor, num_convs=config.num_convs,
                    num_filters=config.num_filters,
                    use_separable_conv=config.use_separable_conv,
                    class_agnostic=config.class_agnostic,
                    settings=settings.replace(synchronized=False), name="mask_head")
