"""Decoding and NMS of a detector's outputs, as TFM's `modeling/layers/detection_generator.py`:
`MultilevelDetectionGenerator` (one-stage, per-level anchors) and `DetectionGenerator`
(two-stage: per-class or class-agnostic boxes on ROIs, softmax scores, cascade box weights).

The NMS versions, all equal to TFM's on the same inputs (ties included):

| nms_version | per class, per image                              | suppression          |
|-------------|---------------------------------------------------|----------------------|
| `v1`        | top `pre_nms_top_k`, `tf.image` NMS (soft NMS with `soft_nms_sigma`) | IoU > t |
| `v2`        | top `pre_nms_top_k`, score filter, tiled sorted NMS (`ops.nms`); or class-agnostic on each anchor's best class with `use_class_agnostic_nms` | IoU >= t |
| `batched`   | `tf.image.combined_non_max_suppression`           | IoU > t              |

Class 0 is the implicit background: scores are sigmoids of the logits with class 0 dropped,
and the returned classes are shifted back by one. `v1` runs one NMS per (image, class) pair
inside a single `tf.map_fn`, so the batch may be dynamic.
"""

import contextlib

import keras
import tensorflow as tf

from lite_launcher.vision.modeling.layers.nn_layers import Float32Layer
from lite_launcher.vision.modeling.layers.nn_layers import register_serializable
from lite_launcher.vision.ops import box_ops
from lite_launcher.vision.ops import nms

NMS_VERSIONS = ("v1", "v2", "batched")


def _per_class_candidates(boxes, scores, pre_nms_top_k):
    """Top-k candidates of every (image, class): scores [B, N, C] and boxes [B, N, 1 or C, 4]
    -> (boxes [B, C, k, 4], scores [B, C, k], indices [B, C, k]), k = min(N, pre_nms_top_k)."""
    num_anchors = scores.shape[1]
    num_classes = scores.shape[2]
    top_scores, indices = tf.nn.top_k(tf.transpose(scores, [0, 2, 1]),
                                      k=min(num_anchors, pre_nms_top_k))
    boxes = tf.transpose(boxes, [0, 2, 1, 3])  # [B, 1 or C, N, 4]
    if boxes.shape[1] == 1:
        top_boxes = tf.gather(boxes[:, 0], indices, axis=1, batch_dims=1)
    else:
        top_boxes = tf.gather(boxes[:, :num_classes], indices, axis=2, batch_dims=2)
    return top_boxes, top_scores, indices


def _merge_classes(boxes, scores, classes, max_num_detections, extras=()):
    """Per-class results [B, C, D, ...] -> the best `max_num_detections` of each image over
    all classes, class-major on ties (the order TFM concatenates the classes in)."""
    batch_size = tf.shape(scores)[0]
    flat = lambda t: tf.reshape(t, tf.concat([[batch_size, -1], tf.shape(t)[3:]], axis=0))
    scores, order = tf.nn.top_k(flat(scores), k=max_num_detections, sorted=True)
    pick = lambda t: tf.gather(flat(t), order, axis=1, batch_dims=1)
    return (pick(boxes), scores, pick(classes)) + tuple(pick(t) for t in extras)


def generate_detections_v1(boxes, scores, attributes=None, pre_nms_top_k=5000,
                           pre_nms_score_threshold=0.05, nms_iou_threshold=0.5,
                           max_num_detections=100, soft_nms_sigma=None):
    """Per-class `tf.image` NMS (or soft NMS when `soft_nms_sigma` is not None).

    Args:
      boxes: [B, N, 1 or C, 4] decoded boxes; scores: [B, N, C] probabilities.
      attributes: optional dict name -> [B, N, 1 or C, size], gathered with the boxes.

    Returns:
      `(boxes [B, D, 4], scores [B, D], classes [B, D] int32 (0-based), num_detections [B],
      attributes dict name -> [B, D, size])`, D = max_num_detections. Padding slots have
      score -1; as in TFM, their boxes are the class's best box for plain NMS and zeros for
      soft NMS.
    """
    attributes = attributes or {}
    top_boxes, top_scores, indices = _per_class_candidates(boxes, scores, pre_nms_top_k)
    top_attributes = {name: _per_class_candidates(values, scores, pre_nms_top_k)[0]
                      for name, values in attributes.items()}
    batch_size = tf.shape(scores)[0]
    num_classes = scores.shape[2]
    num_candidates = top_scores.shape[2]
    flat = lambda t: tf.reshape(t, tf.concat([[-1, num_candidates], tf.shape(t)[3:]], axis=0))

    def nms_one(args):
        boxes_i, scores_i = args[0], args[1]
        if soft_nms_sigma is None:
            selected, num_valid = tf.image.non_max_suppression_padded(
                boxes_i, scores_i, max_num_detections, iou_threshold=nms_iou_threshold,
                score_threshold=pre_nms_score_threshold, pad_to_max_output_size=True)
            valid = tf.range(max_num_detections) < num_valid
            nms_scores = tf.where(valid, tf.gather(scores_i, selected), -1.0)
            nms_boxes = tf.gather(boxes_i, selected)
            pad_attributes = lambda t: t
        else:
            selected, soft_scores, num_valid = tf.raw_ops.NonMaxSuppressionV5(
                boxes=boxes_i, scores=scores_i, max_output_size=max_num_detections,
                iou_threshold=nms_iou_threshold, score_threshold=pre_nms_score_threshold,
                soft_nms_sigma=soft_nms_sigma, pad_to_max_output_size=True)
            valid = tf.range(max_num_detections) < num_valid
            nms_scores = tf.where(valid, soft_scores, -1.0)
            pad_attributes = lambda t: tf.where(valid[:, None], t, tf.zeros_like(t))
            nms_boxes = pad_attributes(tf.gather(boxes_i, selected))
        return (nms_boxes, nms_scores) + tuple(pad_attributes(tf.gather(a, selected))
                                               for a in args[2:])

    inputs = (flat(tf.cast(top_boxes, tf.float32)), flat(tf.cast(top_scores, tf.float32)))
    inputs += tuple(flat(top_attributes[name]) for name in attributes)
    signature = (tf.TensorSpec([max_num_detections, 4], tf.float32),
                 tf.TensorSpec([max_num_detections], tf.float32))
    signature += tuple(tf.TensorSpec([max_num_detections, top_attributes[name].shape[-1]],
                                     top_attributes[name].dtype) for name in attributes)
    results = tf.map_fn(nms_one, inputs, fn_output_signature=signature)
    unflat = lambda t: tf.reshape(
        t, tf.concat([[batch_size, num_classes, max_num_detections], tf.shape(t)[2:]], 0))
    classes = tf.broadcast_to(tf.range(num_classes)[None, :, None],
                              [batch_size, num_classes, max_num_detections])
    merged = _merge_classes(unflat(results[0]), unflat(results[1]), classes,
                            max_num_detections, tuple(unflat(r) for r in results[2:]))
    nms_boxes, nms_scores, nms_classes = merged[:3]
    num_detections = tf.reduce_sum(tf.cast(nms_scores > -1, tf.int32), axis=1)
    return (nms_boxes, nms_scores, nms_classes, num_detections,
            dict(zip(attributes, merged[3:])))


def generate_detections_v2(boxes, scores, pre_nms_top_k=5000, pre_nms_score_threshold=0.05,
                           nms_iou_threshold=0.5, max_num_detections=100,
                           use_class_agnostic_nms=False):
    """Batched tiled NMS (`ops.nms`); per class, or once per image on each anchor's best
    class with `use_class_agnostic_nms`. Inputs and outputs as `generate_detections_v1`
    (without attributes); padding slots have score 0, a zero box and class 0."""
    if use_class_agnostic_nms:
        return _generate_detections_v2_class_agnostic(
            boxes, scores, pre_nms_top_k, pre_nms_score_threshold, nms_iou_threshold,
            max_num_detections)
    top_boxes, top_scores, _ = _per_class_candidates(boxes, scores, pre_nms_top_k)
    batch_size = tf.shape(scores)[0]
    num_classes = scores.shape[2]
    num_candidates = top_scores.shape[2]
    top_boxes, top_scores = box_ops.filter_boxes_by_scores(top_boxes, top_scores,
                                                           pre_nms_score_threshold)
    nms_scores, nms_boxes = nms.sorted_non_max_suppression_padded(
        tf.reshape(top_scores, [-1, num_candidates]),
        tf.reshape(top_boxes, [-1, num_candidates, 4]), max_num_detections, nms_iou_threshold)
    nms_scores = tf.reshape(nms_scores, [batch_size, num_classes, max_num_detections])
    nms_boxes = tf.reshape(nms_boxes, [batch_size, num_classes, max_num_detections, 4])
    classes = tf.broadcast_to(tf.range(num_classes)[None, :, None], tf.shape(nms_scores))
    nms_boxes, nms_scores, nms_classes = _merge_classes(nms_boxes, nms_scores, classes,
                                                        max_num_detections)
    num_detections = tf.reduce_sum(tf.cast(nms_scores > 0.0, tf.int32), axis=1)
    return nms_boxes, nms_scores, nms_classes, num_detections


def _generate_detections_v2_class_agnostic(boxes, scores, pre_nms_top_k,
                                           pre_nms_score_threshold, nms_iou_threshold,
                                           max_num_detections):
    best_scores, best_classes = tf.nn.top_k(scores, k=1, sorted=True)
    if boxes.shape[2] > 1:
        boxes = tf.gather(boxes, best_classes, axis=2, batch_dims=2)
    best_scores, best_classes = best_scores[..., 0], best_classes[..., 0]
    top_scores, order = tf.nn.top_k(best_scores, k=min(scores.shape[1], pre_nms_top_k))
    top_classes, top_boxes = box_ops.gather_instances(order, best_classes, boxes[:, :, 0])
    selected, num_detections = tf.image.non_max_suppression_padded(
        boxes=tf.cast(top_boxes, tf.float32), scores=tf.cast(top_scores, tf.float32),
        max_output_size=max_num_detections, iou_threshold=nms_iou_threshold,
        score_threshold=pre_nms_score_threshold, pad_to_max_output_size=True,
        sorted_input=True)
    valid = tf.range(max_num_detections)[None, :] < num_detections[:, None]
    nms_boxes, nms_scores, nms_classes = box_ops.gather_instances(
        selected, tf.cast(top_boxes, tf.float32), tf.cast(top_scores, tf.float32), top_classes)
    return (nms_boxes * tf.cast(valid[..., None], nms_boxes.dtype),
            nms_scores * tf.cast(valid, nms_scores.dtype),
            nms_classes * tf.cast(valid, nms_classes.dtype), num_detections)


def generate_detections_batched(boxes, scores, pre_nms_score_threshold, nms_iou_threshold,
                                max_num_detections):
    """`tf.image.combined_non_max_suppression` (not TPU-compatible); outputs as v2's."""
    nms_boxes, nms_scores, nms_classes, num_detections = tf.image.combined_non_max_suppression(
        boxes, scores, max_output_size_per_class=max_num_detections,
        max_total_size=max_num_detections, iou_threshold=nms_iou_threshold,
        score_threshold=pre_nms_score_threshold, pad_per_class=False, clip_boxes=False)
    return nms_boxes, nms_scores, tf.cast(nms_classes, tf.int32), num_detections


def _nms_config(apply_nms, pre_nms_top_k, pre_nms_score_threshold, nms_iou_threshold,
                max_num_detections, nms_version, use_cpu_nms, soft_nms_sigma,
                use_class_agnostic_nms=None):
    """The NMS settings both generators share, in TFM's config order, checked: one-line
    errors for settings that cannot work together."""
    if nms_version not in NMS_VERSIONS:
        raise ValueError(f"nms_version {nms_version!r} is not supported; use one of "
                         f"{', '.join(NMS_VERSIONS)}")
    if use_class_agnostic_nms and nms_version != "v2":
        raise ValueError(f"use_class_agnostic_nms needs nms_version 'v2'; got {nms_version!r}")
    if soft_nms_sigma is not None and nms_version != "v1":
        raise ValueError(f"soft_nms_sigma needs nms_version 'v1'; got {nms_version!r}")
    for name, value in (("pre_nms_top_k", pre_nms_top_k),
                        ("max_num_detections", max_num_detections)):
        if int(value) < 1:
            raise ValueError(f"{name} ({value}) must be a positive integer")
    return {"apply_nms": apply_nms, "pre_nms_top_k": pre_nms_top_k,
            "pre_nms_score_threshold": pre_nms_score_threshold,
            "nms_iou_threshold": nms_iou_threshold, "max_num_detections": max_num_detections,
            "nms_version": nms_version, "use_cpu_nms": use_cpu_nms,
            "soft_nms_sigma": soft_nms_sigma}


def _run_nms(config, boxes, scores, attributes=None):
    """The NMS `config["nms_version"]` names, with a generator's settings: boxes
    [B, N, 1 or C, 4], scores [B, N, C] -> (boxes, scores, classes (0-based), num_detections,
    attributes dict (v1 only, else empty))."""
    version = config["nms_version"]
    device = tf.device("cpu:0") if config["use_cpu_nms"] else contextlib.nullcontext()
    with device:
        if version == "v1":
            return generate_detections_v1(
                boxes, scores, attributes, config["pre_nms_top_k"],
                config["pre_nms_score_threshold"], config["nms_iou_threshold"],
                config["max_num_detections"], config["soft_nms_sigma"])
        if version == "v2":
            results = generate_detections_v2(
                boxes, scores, config["pre_nms_top_k"], config["pre_nms_score_threshold"],
                config["nms_iou_threshold"], config["max_num_detections"],
                bool(config.get("use_class_agnostic_nms")))
        else:
            results = generate_detections_batched(
                boxes, scores, config["pre_nms_score_threshold"], config["nms_iou_threshold"],
                config["max_num_detections"])
    return results + ({},)


@register_serializable
class MultilevelDetectionGenerator(keras.layers.Layer):
    """Turns a one-stage detector's per-level outputs into final detections.

    Called as `layer(raw_boxes, raw_scores, anchor_boxes, image_shape, raw_attributes=None)`
    with dicts keyed by `str(level)`: raw_boxes [B, h_l, w_l, A * 4] (encoded), raw_scores
    [B, h_l, w_l, A * num_classes] (logits, class 0 = background), anchor_boxes
    [B, h_l, w_l, A * 4] (or broadcastable), image_shape [B, 2] (boxes are clipped to it;
    None skips clipping). raw_attributes: optional dict name -> per-level
    [B, h_l, w_l, A * size] (v1 only).

    Returns a dict: with `apply_nms`, `detection_boxes` [B, D, 4], `detection_scores`
    [B, D], `detection_classes` [B, D] (int32, 1-based), `num_detections` [B],
    `detection_attributes` (dict); without it, or with `return_decoded`, also
    `decoded_boxes` [B, N, 1, 4], `decoded_box_scores` [B, N, num_classes - 1] and
    `decoded_box_attributes` (dict name -> [B, N, 1, size]).
    """

    def __init__(self, apply_nms=True, pre_nms_top_k=5000, pre_nms_score_threshold=0.05,
                 nms_iou_threshold=0.5, max_num_detections=100, nms_version="v1",
                 use_cpu_nms=False, soft_nms_sigma=None, return_decoded=None,
                 use_class_agnostic_nms=None, box_coder_weights=None, **kwargs):
        config = _nms_config(apply_nms, pre_nms_top_k, pre_nms_score_threshold,
                             nms_iou_threshold, max_num_detections, nms_version, use_cpu_nms,
                             soft_nms_sigma, use_class_agnostic_nms)
        super().__init__(**kwargs)
        self._config_dict = {
            **config, "return_decoded": return_decoded,
            "use_class_agnostic_nms": use_class_agnostic_nms,
            "box_coder_weights": None if box_coder_weights is None else list(box_coder_weights),
        }

    def _decode(self, raw_boxes, raw_scores, anchor_boxes, image_shape, raw_attributes):
        """Levels min..max concatenated: boxes [B, N, 1, 4], scores [B, N, C - 1],
        attributes name -> [B, N, 1, size]."""
        levels = sorted(int(level) for level in raw_boxes)
        all_boxes, all_scores = [], []
        all_attributes = {name: [] for name in raw_attributes or {}}
        for level in levels:
            key = str(level)
            level_boxes = raw_boxes[key]
            batch_size = tf.shape(level_boxes)[0]
            _, height, width, coords = level_boxes.shape.as_list()
            num_anchors = height * width * (coords // 4)
            num_classes = raw_scores[key].shape[-1] // (coords // 4)
            scores = tf.sigmoid(tf.reshape(raw_scores[key], [batch_size, num_anchors,
                                                             num_classes]))
            all_scores.append(scores[:, :, 1:])
            anchors = tf.reshape(anchor_boxes[key], [batch_size, num_anchors, 4])
            decoded = box_ops.decode_boxes(tf.reshape(level_boxes, [batch_size, num_anchors, 4]),
                                           anchors, self._config_dict["box_coder_weights"])
            if image_shape is not None:
                decoded = box_ops.clip_boxes(decoded, tf.expand_dims(image_shape, axis=1))
            all_boxes.append(decoded)
            for name, values in (raw_attributes or {}).items():
                size = values[key].shape[-1] // (coords // 4)
                all_attributes[name].append(tf.reshape(values[key],
                                                       [batch_size, num_anchors, size]))
        attributes = {name: tf.concat(parts, axis=1)[:, :, None]
                      for name, parts in all_attributes.items()}
        return tf.concat(all_boxes, axis=1)[:, :, None], tf.concat(all_scores, axis=1), attributes

    def call(self, raw_boxes, raw_scores, anchor_boxes, image_shape, raw_attributes=None):
        config = self._config_dict
        boxes, scores, attributes = self._decode(raw_boxes, raw_scores, anchor_boxes,
                                                 image_shape, raw_attributes)
        decoded = {"decoded_boxes": boxes, "decoded_box_scores": scores,
                   "decoded_box_attributes": attributes}
        if not config["apply_nms"]:
            return decoded
        version = config["nms_version"]
        if raw_attributes and version != "v1":
            raise ValueError(f"attribute heads need nms_version 'v1'; got {version!r}")
        nms_boxes, nms_scores, nms_classes, num_detections, nms_attributes = _run_nms(
            config, boxes, scores, attributes)
        return {
            **(decoded if config["return_decoded"] else {}),
            "num_detections": num_detections,
            "detection_boxes": nms_boxes,
            "detection_classes": nms_classes + 1,  # back to 1-based: 0 is the background
            "detection_scores": nms_scores,
            "detection_attributes": nms_attributes,
        }

    def get_config(self):
        return {**super().get_config(), **self._config_dict}


@register_serializable
class DetectionGenerator(Float32Layer):
    """Turns a two-stage detector's box head outputs into final detections, as TFM's
    `DetectionGenerator` (its default NMS is `v2`).

    Called as `layer(raw_boxes, raw_scores, anchor_boxes, image_shape, regression_weights=None,
    bbox_per_class=True)`: raw_boxes [B, K, num_classes * 4] (per-class regressions), or
    [B, K, 4] with `bbox_per_class=False` (class-agnostic boxes, as Cascade R-CNN's heads
    predict); raw_scores [B, K, num_classes] logits (class 0 = background); anchor_boxes
    [B, K, 4] the ROIs; image_shape [B, 2] (boxes are clipped to it; None skips clipping);
    regression_weights: the box coder's [wy, wx, wh, ww] (a cascade stage's).

    Scores are the softmax of the logits (sigmoid with `use_sigmoid_probability`), background
    dropped. Returns, with `apply_nms`, `detection_boxes` [B, D, 4], `detection_scores`
    [B, D], `detection_classes` [B, D] (int32, 1-based) and `num_detections` [B]; without it
    `decoded_boxes` [B, K, num_classes - 1 (or 1), 4] and `decoded_box_scores`
    [B, K, num_classes - 1].
    """

    def __init__(self, apply_nms=True, pre_nms_top_k=5000, pre_nms_score_threshold=0.05,
                 nms_iou_threshold=0.5, max_num_detections=100, nms_version="v2",
                 use_cpu_nms=False, soft_nms_sigma=None, use_sigmoid_probability=False,
                 **kwargs):
        config = _nms_config(apply_nms, pre_nms_top_k, pre_nms_score_threshold,
                             nms_iou_threshold, max_num_detections, nms_version, use_cpu_nms,
                             soft_nms_sigma)
        super().__init__(**kwargs)
        self._config_dict = {**config, "use_sigmoid_probability": use_sigmoid_probability}

    def call(self, raw_boxes, raw_scores, anchor_boxes, image_shape, regression_weights=None,
             bbox_per_class=True):
        config = self._config_dict
        if config["use_sigmoid_probability"]:
            scores = tf.sigmoid(raw_scores)
        else:
            scores = tf.nn.softmax(raw_scores, axis=-1)
        batch_size = tf.shape(scores)[0]
        num_locations, num_classes = scores.shape[1], scores.shape[-1]
        scores = scores[:, :, 1:]
        if bbox_per_class:
            raw_boxes = tf.reshape(raw_boxes, [batch_size, num_locations, num_classes, 4])[:, :, 1:]
            anchor_boxes = tf.broadcast_to(anchor_boxes[:, :, None], tf.shape(raw_boxes))
        else:
            raw_boxes, anchor_boxes = raw_boxes[:, :, None], anchor_boxes[:, :, None]
        boxes = box_ops.decode_boxes(raw_boxes, anchor_boxes, weights=regression_weights)
        if image_shape is not None:
            boxes = box_ops.clip_boxes(boxes, image_shape[:, None, None])
        if not config["apply_nms"]:
            return {"decoded_boxes": boxes, "decoded_box_scores": scores}
        nms_boxes, nms_scores, nms_classes, num_detections, _ = _run_nms(config, boxes, scores)
        return {
            "num_detections": num_detections,
            "detection_boxes": nms_boxes,
            "detection_classes": nms_classes + 1,  # back to 1-based: 0 is the background
            "detection_scores": nms_scores,
        }
