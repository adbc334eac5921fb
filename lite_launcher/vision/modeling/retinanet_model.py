"""TFM's RetinaNetModel (official/vision/modeling/retinanet_model.py): backbone -> decoder (FPN,
or none for the identity decoder) -> `RetinaNetHead` -> `MultilevelDetectionGenerator`;
`build_retinanet` builds it from a `RetinaNet` config (TFM's factory function).

The call convention is TFM's: `model(images, image_shape=None, anchor_boxes=None,
output_intermediate_features=False, training=None)`.
- training: {'cls_outputs', 'box_outputs'} (dicts keyed by `str(level)`), plus
  'attribute_outputs' ({name: {str(level): ...}}) with attribute heads.
- inference: the same raw outputs, and the detection generator's: with NMS
  `detection_boxes` [B, D, 4] (yxyx, pixels of the input), `detection_scores` [B, D],
  `detection_classes` [B, D] (1-based), `num_detections` [B] (+ `decoded_boxes`,
  `decoded_box_scores` with `return_decoded`); without NMS only the decoded ones;
  with attribute heads `attribute_outputs` and `detection_attributes`. The anchors are the
  model's fixed ones, else `anchor_boxes`, else generated from the images' static size.
  `image_shape` ([B, 2], the unpadded image sizes) clips the boxes; None: no clipping.
- `output_intermediate_features`: also `backbone_{level}` and `decoder_{level}`.

Raw outputs follow the Keras dtype policy (bfloat16 under mixed precision); the detection
generator computes in float32.
"""

from __future__ import annotations

from typing import Dict, Mapping, Optional, Sequence

import keras
import tensorflow as tf

from lite_launcher.vision.configs.retinanet import RetinaNet
from lite_launcher.vision.modeling.backbones.factory import build_backbone, output_specs
from lite_launcher.vision.modeling.decoders.factory import build_decoder
from lite_launcher.vision.modeling.factory import (decoder_inputs, feature_specs,
                                                  model_from_config, norm_settings)
from lite_launcher.vision.modeling.heads.dense_prediction_heads import build_retinanet_head
from lite_launcher.vision.modeling.layers.detection_generator import (
    MultilevelDetectionGenerator)
from lite_launcher.vision.modeling.layers.nn_layers import register_serializable
from lite_launcher.vision.ops import anchor


def _float32(tree):
    return tf.nest.map_structure(lambda t: tf.cast(t, tf.float32), tree)


@register_serializable
class RetinaNetModel(keras.Model):
    """TFM's RetinaNetModel: see the module docstring for the call and its outputs.

    Args:
      backbone: images -> {str(level): features}.
      decoder: {str(level): features} -> {str(level): features} over min..max_level, or
        None (the head reads the backbone's levels).
      head: a `RetinaNetHead`.
      detection_generator: a `MultilevelDetectionGenerator`.
      anchor_boxes: fixed inference anchors {str(level): [h_l, w_l, 4 * A]}, or None.
      min_level, max_level, num_scales, aspect_ratios, anchor_size: the anchors generated
        when neither fixed nor passed to the call.
    """

    def __init__(self, backbone: keras.Model, decoder: Optional[keras.layers.Layer],
                 head: keras.layers.Layer, detection_generator: keras.layers.Layer,
                 anchor_boxes: Optional[Mapping[str, tf.Tensor]] = None,
                 min_level: Optional[int] = None, max_level: Optional[int] = None,
                 num_scales: Optional[int] = None,
                 aspect_ratios: Optional[Sequence[float]] = None,
                 anchor_size: Optional[float] = None, **kwargs):
        super().__init__(**kwargs)
        self._backbone = backbone
        self._decoder = decoder
        self._head = head
        self._detection_generator = detection_generator
        self._anchor_boxes = None if anchor_boxes is None else {
            str(k): tf.convert_to_tensor(v, tf.float32) for k, v in anchor_boxes.items()}
        self._anchor_config = dict(
            min_level=min_level, max_level=max_level, num_scales=num_scales,
            aspect_ratios=None if aspect_ratios is None else list(aspect_ratios),
            anchor_size=anchor_size)

    def build(self, input_shape):
        """Builds the head on the symbolic features of the (Functional) backbone and decoder,
        without tracing them again (a Keras 3 subclassed model must be built before a
        checkpoint restores into it)."""
        del input_shape  # the backbone's own input fixes the features' shapes
        if not self._head.built:
            self._head(self.feature_specs())
        self.built = True

    def feature_specs(self) -> Dict[str, keras.KerasTensor]:
        """{str(level): symbolic features} the head reads: the decoder's outputs (the
        backbone's with no decoder)."""
        return feature_specs(self._backbone, self._decoder)

    def _anchors(self, images, anchor_boxes):
        """{str(level): [B, h_l, w_l, 4 * A]}: the fixed, the given or generated anchors."""
        if self._anchor_boxes is not None:
            return anchor.tile_to_batch(self._anchor_boxes, images)
        if anchor_boxes is not None:
            return anchor_boxes
        return anchor.batch_multilevel_boxes(images, **self._anchor_config)

    def call(self, images, image_shape=None, anchor_boxes=None,
             output_intermediate_features: bool = False, training=None):
        outputs = {}
        features = self._backbone(images, training=training)
        if output_intermediate_features:
            outputs.update({f"backbone_{k}": v for k, v in features.items()})
        if self._decoder is not None:
            features = self._decoder(decoder_inputs(self._decoder, features),
                                     training=training)
        if output_intermediate_features:
            outputs.update({f"decoder_{k}": v for k, v in features.items()})
        scores, boxes, attributes = self._head(features, training=training)
        outputs.update(cls_outputs=scores, box_outputs=boxes)
        if attributes:
            outputs["attribute_outputs"] = attributes
        if training:
            return outputs
        primary = images[0] if isinstance(images, (list, tuple)) else images
        anchors = self._anchors(primary, anchor_boxes)
        if image_shape is not None:
            image_shape = tf.cast(image_shape, tf.float32)
        results = self._detection_generator(_float32(boxes), _float32(scores),
                                            _float32(anchors), image_shape,
                                            _float32(attributes) or None)
        config = self._detection_generator.get_config()
        if config["apply_nms"]:
            for key in ("detection_boxes", "detection_scores", "detection_classes",
                        "num_detections"):
                outputs[key] = results[key]
        if not config["apply_nms"] or config["return_decoded"]:
            outputs.update(decoded_boxes=results["decoded_boxes"],
                           decoded_box_scores=results["decoded_box_scores"])
            if results.get("decoded_box_attributes") is not None:
                outputs["decoded_box_attributes"] = results["decoded_box_attributes"]
        if attributes and config["apply_nms"]:
            outputs["detection_attributes"] = results["detection_attributes"]
        return outputs

    @property
    def backbone(self) -> keras.Model:
        return self._backbone

    @property
    def decoder(self) -> Optional[keras.layers.Layer]:
        return self._decoder

    @property
    def head(self) -> keras.layers.Layer:
        return self._head

    @property
    def detection_generator(self) -> keras.layers.Layer:
        return self._detection_generator

    @property
    def anchor_boxes(self) -> Optional[Dict[str, tf.Tensor]]:
        """The fixed inference anchors, or None."""
        return self._anchor_boxes

    @property
    def checkpoint_items(self) -> Dict[str, keras.layers.Layer]:
        """Saved in checkpoints besides the model, as TFM's: backbone, decoder (when there is
        one) and head; `init_checkpoint_modules` restores them by these names."""
        items = {"backbone": self._backbone, "head": self._head}
        if self._decoder is not None:
            items["decoder"] = self._decoder
        return items

    def get_config(self):
        serialize = keras.saving.serialize_keras_object
        anchors = None if self._anchor_boxes is None else {
            k: v.numpy().tolist() for k, v in self._anchor_boxes.items()}
        return {"name": self.name, "trainable": self.trainable,
                "backbone": serialize(self._backbone),
                "decoder": serialize(self._decoder) if self._decoder is not None else None,
                "head": serialize(self._head),
                "detection_generator": serialize(self._detection_generator),
                "anchor_boxes": anchors, **self._anchor_config}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        return model_from_config(cls, config, ("backbone", "decoder", "head",
                                               "detection_generator"), custom_objects)


def build_retinanet(model_config: RetinaNet, l2_weight_decay: float = 0.0,
                    backbone: Optional[keras.Model] = None,
                    decoder: Optional[keras.layers.Layer] = None,
                    num_anchors_per_location: Optional[int] = None,
                    anchor_boxes: Optional[Mapping[str, tf.Tensor]] = None) -> RetinaNetModel:
    """TFM's `factory.build_retinanet` for `model_config` at its `input_size`, the L2 of
    `l2_weight_decay` on every kernel (TFM's task passes l2(decay / 2)); `backbone`,
    `decoder`, `num_anchors_per_location` and fixed `anchor_boxes` as TFM's arguments. The
    model comes back built (every weight created)."""
    settings = norm_settings(model_config, l2_weight_decay)
    input_shape = list(model_config.input_size)
    if backbone is None:
        backbone = build_backbone(input_shape, model_config.backbone, settings)
    if decoder is None:
        decoder = build_decoder(output_specs(backbone), model_config, settings)
    head = build_retinanet_head(model_config, settings, num_anchors_per_location)
    generator_config = model_config.detection_generator
    detection_generator = MultilevelDetectionGenerator(
        apply_nms=generator_config.apply_nms, pre_nms_top_k=generator_config.pre_nms_top_k,
        pre_nms_score_threshold=generator_config.pre_nms_score_threshold,
        nms_iou_threshold=generator_config.nms_iou_threshold,
        max_num_detections=generator_config.max_num_detections,
        nms_version=generator_config.nms_version, use_cpu_nms=generator_config.use_cpu_nms,
        soft_nms_sigma=generator_config.soft_nms_sigma,
        return_decoded=generator_config.return_decoded,
        use_class_agnostic_nms=generator_config.use_class_agnostic_nms,
        box_coder_weights=generator_config.box_coder_weights, dtype="float32",
        name="detection_generator")
    anchor_config = {} if anchor_boxes is not None else dict(
        num_scales=model_config.anchor.num_scales,
        aspect_ratios=model_config.anchor.aspect_ratios,
        anchor_size=model_config.anchor.anchor_size)
    model = RetinaNetModel(backbone, decoder, head, detection_generator,
                           anchor_boxes=anchor_boxes, min_level=model_config.min_level,
                           max_level=model_config.max_level, name="retinanet_model",
                           **anchor_config)
    model.build([None] + input_shape)
    return model
