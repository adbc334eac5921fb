"""Writes tfm_maskrcnn_reference.npz: TFM 2.20's Mask R-CNN parser
(official.vision.dataloaders.maskrcnn_input.Parser) and Mask R-CNN losses
(official.vision.losses.maskrcnn_losses, and MaskRCNNTask.build_losses) on inputs this script
defines.

Run once with TFM 2.20 (tf-models-official 2.20, tensorflow 2.20, tf_keras):

    /work/tfm_venv/bin/python tests/vision/data/make_tfm_maskrcnn_reference.py

Inputs, rebuilt by tests/vision/test_maskrcnn_data.py from the same recipes (kept in step by
hand):
- `make_record()`: a decoded record (as `TfExampleDecoder.decode` with include_mask returns
  it): a 48x64 uint8 image from NumPy's RandomState(11), four objects (the third a crowd,
  the fourth a tall thin box), each with a float 0/1 mask (an ellipse in its box). Parsed
  for training (no flip, no jitter) and for evaluation, with the PARSERS' arguments. The RPN
  sampling batch (4096) exceeds the 2,295 anchors, so every positive and negative anchor is
  kept and TFM's random sampling draws nothing: the targets are deterministic.
- `loss_inputs()`: a fixed batch of RPN, Fast R-CNN (two cascade stages) and mask outputs
  and targets from RandomState(5).

- `make_example()`: `make_record()` as a serialized TF Example (PNG image and masks), written
  to one TFRecord file: TFM's `coco_utils.scan_and_generator_annotation_file` (with masks)
  writes its COCO JSON (`annotation/json`), and TFM's `COCOEvaluator` (include_mask, that
  annotation file) scores `detections()` (boxes and 14x14 masks from the eval parse, shifted
  and blurred) against it (`annotation/metric/<name>`).

Keys: `parser/<case>/<output path>` (e.g. `parser/train_mask/rpn_score_targets/3`,
`parser/eval_mask/groundtruths/masks`), `loss/<name>` scalars, `annotation/...`.
"""

import json
import os
import tempfile

import numpy as np
import tensorflow as tf

from official.vision.configs import maskrcnn as maskrcnn_config
from official.vision.dataloaders import maskrcnn_input
from official.vision.evaluation import coco_evaluator
from official.vision.evaluation import coco_utils
from official.vision.losses import maskrcnn_losses
from official.vision.tasks import maskrcnn as maskrcnn_task

HERE = os.path.dirname(os.path.abspath(__file__))

BASE_ARGS = dict(output_size=[80, 80], min_level=2, max_level=5, num_scales=1,
                 aspect_ratios=[0.5, 1.0, 2.0], anchor_size=3.0, rpn_match_threshold=0.6,
                 rpn_unmatched_threshold=0.3, rpn_batch_size_per_im=4096, rpn_fg_fraction=0.5,
                 aug_rand_hflip=False, aug_rand_vflip=False, aug_scale_min=1.0,
                 aug_scale_max=1.0, skip_crowd_during_training=True, max_num_instances=6,
                 mask_crop_size=14, dtype="float32")
PARSERS = {
    "train_mask": dict(BASE_ARGS, include_mask=True, outer_boxes_scale=1.25),
    "train_box": dict(BASE_ARGS, include_mask=False),
    "train_crowds_kept": dict(BASE_ARGS, include_mask=True, skip_crowd_during_training=False),
    "eval_mask": dict(BASE_ARGS, include_mask=True),
}


def make_record():
  """The decoded record (NumPy values)."""
  image = np.random.RandomState(11).randint(0, 256, size=(48, 64, 3)).astype(np.uint8)
  boxes = np.array([[0.10, 0.05, 0.60, 0.40], [0.30, 0.50, 0.90, 0.95],
                    [0.00, 0.00, 1.00, 1.00], [0.20, 0.42, 0.85, 0.50]], np.float32)
  y, x = np.mgrid[0:48, 0:64] + 0.5
  masks = []
  for ymin, xmin, ymax, xmax in boxes * [48, 64, 48, 64]:
    cy, cx, ry, rx = (ymin + ymax) / 2, (xmin + xmax) / 2, (ymax - ymin) / 2, (xmax - xmin) / 2
    masks.append((((y - cy) / ry) ** 2 + ((x - cx) / rx) ** 2 <= 1.0).astype(np.float32))
  return {
      "source_id": np.bytes_(b"902"),
      "image": image,
      "height": np.int64(48),
      "width": np.int64(64),
      "groundtruth_classes": np.array([3, 1, 2, 5], np.int64),
      "groundtruth_is_crowd": np.array([False, False, True, False]),
      "groundtruth_area": np.array([520.0, 810.0, 3072.0, 150.0], np.float32),
      "groundtruth_boxes": boxes,
      "groundtruth_instance_masks": np.stack(masks),
  }


def make_example():
  """make_record() as a serialized tf.train.Example in TFM's detection format."""
  record = make_record()

  def feature(kind, values):
    if kind == "bytes":
      return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
    if kind == "int64":
      return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    return tf.train.Feature(float_list=tf.train.FloatList(value=values))

  boxes = record["groundtruth_boxes"]
  features = {
      "image/encoded": feature("bytes", [tf.io.encode_png(record["image"]).numpy()]),
      "image/height": feature("int64", [48]), "image/width": feature("int64", [64]),
      "image/source_id": feature("bytes", [record["source_id"]]),
      "image/object/class/label": feature("int64", record["groundtruth_classes"].tolist()),
      "image/object/is_crowd": feature("int64", [int(c) for c in
                                                 record["groundtruth_is_crowd"]]),
      "image/object/area": feature("float", record["groundtruth_area"].tolist()),
      "image/object/mask": feature("bytes", [
          tf.io.encode_png(m[..., None].astype(np.uint8)).numpy()
          for m in record["groundtruth_instance_masks"]]),
  }
  for i, key in enumerate(("ymin", "xmin", "ymax", "xmax")):
    features[f"image/object/bbox/{key}"] = feature("float", boxes[:, i].tolist())
  return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()


def detections(eval_labels):
  """Fixed detections of the eval parse (batch of 1): the ground truths shifted by a few
  pixels of the parsed image, one spurious box, masks blurred crops; scores decreasing."""
  groundtruths = eval_labels["groundtruths"]
  scale = eval_labels["image_info"][2, 0]
  boxes = groundtruths["boxes"][:4] * scale + np.array(
      [[1.0, -2.0, 1.0, 0.0], [0.0, 3.0, -2.0, 3.0], [-1.0, 0.0, 0.0, 1.0],
       [2.0, 0.0, 1.0, 1.0]], np.float32)
  masks = groundtruths["masks"][:4]
  masks = 0.5 * masks + 0.25 * np.roll(masks, 1, axis=2) + 0.25 * np.roll(masks, 2, axis=1)
  boxes = np.concatenate([boxes, [[40.0, 10.0, 55.0, 30.0]]]).astype(np.float32)
  masks = np.concatenate([masks, np.full((1, 14, 14), 0.7)]).astype(np.float32)
  return {
      "source_id": np.array([902], np.int64),
      "image_info": eval_labels["image_info"][None],
      "num_detections": np.array([5], np.int32),
      "detection_boxes": boxes[None],
      "detection_classes": np.array([[3, 1, 2, 5, 1]], np.int32),
      "detection_scores": np.array([[0.9, 0.8, 0.7, 0.6, 0.5]], np.float32),
      "detection_masks": masks[None],
  }


def annotation_section(out):
  with tempfile.TemporaryDirectory() as tmp:
    records = os.path.join(tmp, "eval.tfrecord")
    with tf.io.TFRecordWriter(records) as writer:
      writer.write(make_example())
    annotation_file = os.path.join(tmp, "annotation.json")
    coco_utils.scan_and_generator_annotation_file(records, "tfrecord", 1, True,
                                                  annotation_file)
    with open(annotation_file) as f:
      out["annotation/json"] = np.array(f.read())
    parser = maskrcnn_input.Parser(**PARSERS["eval_mask"])
    record = {k: tf.constant(v) for k, v in make_record().items()}
    _, labels = parser.parse_fn(is_training=False)(record)
    labels = tf.nest.map_structure(lambda t: t.numpy(), labels)
    predictions = detections(labels)
    for key, value in predictions.items():
      out[f"annotation/detections/{key}"] = value
    evaluator = coco_evaluator.COCOEvaluator(annotation_file=annotation_file,
                                             include_mask=True)
    evaluator.update_state(None, {k: tf.constant(v) for k, v in predictions.items()})
    for key, value in evaluator.result().items():
      out[f"annotation/metric/{key}"] = value


def loss_inputs():
  """The fixed batch (NumPy values): model outputs and targets for every loss."""
  rng = np.random.RandomState(5)
  batch, rois, classes, masks, mask_size = 2, 6, 5, 3, 7

  def normal(*shape):
    return rng.normal(size=shape).astype(np.float32)

  out = {}
  for level, side in (("2", 8), ("3", 4)):
    out[f"rpn_scores/{level}"] = normal(batch, side, side, 3)
    out[f"rpn_score_targets/{level}"] = rng.randint(-1, 2, size=(batch, side, side, 3)).astype(
        np.int32)
    out[f"rpn_boxes/{level}"] = normal(batch, side, side, 12)
    targets = 0.3 * normal(batch, side, side, 3, 4)
    targets[rng.uniform(size=(batch, side, side, 3)) < 0.6] = 0.0  # unmatched anchors
    out[f"rpn_box_targets/{level}"] = targets.reshape(batch, side, side, 12)
  for stage in ("", "_1", "_2"):
    out[f"class_outputs{stage}"] = normal(batch, rois, classes)
    out[f"class_targets{stage}"] = rng.randint(0, classes, size=(batch, rois)).astype(np.int32)
    out[f"box_outputs{stage}"] = normal(batch, rois, classes * 4)
    out[f"box_targets{stage}"] = 0.5 * normal(batch, rois, 4)
  out["box_outputs_agnostic"] = normal(batch, rois, 4)
  out["mask_outputs"] = 2.0 * normal(batch, masks, mask_size, mask_size)
  out["mask_targets"] = (rng.uniform(size=(batch, masks, mask_size, mask_size)) > 0.5).astype(
      np.float32)
  out["mask_class_targets"] = np.array([[2, 0, 4], [1, 3, 0]], np.int32)
  out["aux_losses"] = np.array([0.25, 0.125], np.float32)
  return out


def flatten(prefix, value, out):
  if isinstance(value, dict):
    for key, item in value.items():
      flatten(f"{prefix}/{key}", item, out)
  else:
    out[prefix] = np.asarray(value)


def parser_section(out):
  record = {k: tf.constant(v) for k, v in make_record().items()}
  for case, args in PARSERS.items():
    parser = maskrcnn_input.Parser(**args)
    image, labels = parser.parse_fn(is_training=case.startswith("train"))(record)
    flatten(f"parser/{case}", {"image": image, **labels}, out)


def levels(inputs, name):
  return {level: tf.constant(inputs[f"{name}/{level}"]) for level in ("2", "3")}


def task_losses(inputs, cascade, **losses):
  """MaskRCNNTask.build_losses on the fixed batch (`cascade`: the extra stages' IoUs)."""
  config = maskrcnn_config.MaskRCNNTask(
      model=maskrcnn_config.MaskRCNN(
          num_classes=5, include_mask=True,
          roi_sampler=maskrcnn_config.ROISampler(cascade_iou_thresholds=cascade)),
      losses=maskrcnn_config.Losses(**losses))
  task = maskrcnn_task.MaskRCNNTask(config)
  outputs = {k: tf.constant(v) for k, v in inputs.items() if "/" not in k}
  outputs["rpn_scores"] = levels(inputs, "rpn_scores")
  outputs["rpn_boxes"] = levels(inputs, "rpn_boxes")
  labels = {"rpn_score_targets": levels(inputs, "rpn_score_targets"),
            "rpn_box_targets": levels(inputs, "rpn_box_targets")}
  return task.build_losses(outputs, labels, aux_losses=[tf.constant(v)
                                                        for v in inputs["aux_losses"]])


def loss_section(out):
  inputs = loss_inputs()
  t = {k: tf.constant(v) for k, v in inputs.items() if "/" not in k}
  rpn_scores, rpn_score_targets = levels(inputs, "rpn_scores"), levels(inputs,
                                                                       "rpn_score_targets")
  rpn_boxes, rpn_box_targets = levels(inputs, "rpn_boxes"), levels(inputs, "rpn_box_targets")
  out["loss/rpn_score"] = maskrcnn_losses.RpnScoreLoss(256)(rpn_scores, rpn_score_targets)
  out["loss/rpn_score_per_im_6"] = maskrcnn_losses.RpnScoreLoss(6)(rpn_scores,
                                                                   rpn_score_targets)
  out["loss/rpn_box"] = maskrcnn_losses.RpnBoxLoss(1.0 / 9.0)(rpn_boxes, rpn_box_targets)
  out["loss/rpn_box_delta_0.5"] = maskrcnn_losses.RpnBoxLoss(0.5)(rpn_boxes, rpn_box_targets)
  cls = (t["class_outputs"], t["class_targets"])
  out["loss/frcnn_class"] = maskrcnn_losses.FastrcnnClassLoss()(*cls)
  out["loss/frcnn_class_weighted"] = maskrcnn_losses.FastrcnnClassLoss()(
      *cls, [0.5, 1.0, 2.0, 1.5, 1.0])
  out["loss/frcnn_class_binary"] = maskrcnn_losses.FastrcnnClassLoss(
      use_binary_cross_entropy=True)(*cls, [0.5, 1.0, 2.0, 1.5, 1.0])
  out["loss/frcnn_class_top_k_0.5"] = maskrcnn_losses.FastrcnnClassLoss(top_k_percent=0.5)(
      *cls)
  out["loss/frcnn_box"] = maskrcnn_losses.FastrcnnBoxLoss(1.0)(
      t["box_outputs"], t["class_targets"], t["box_targets"])
  out["loss/frcnn_box_delta_0.2"] = maskrcnn_losses.FastrcnnBoxLoss(0.2)(
      t["box_outputs"], t["class_targets"], t["box_targets"])
  out["loss/frcnn_box_agnostic"] = maskrcnn_losses.FastrcnnBoxLoss(
      1.0, class_agnostic_bbox_pred=True)(t["box_outputs_agnostic"], t["class_targets"],
                                          t["box_targets"])
  out["loss/mask"] = maskrcnn_losses.MaskrcnnLoss()(t["mask_outputs"], t["mask_targets"],
                                                     t["mask_class_targets"])
  runs = {"default": (None, {}),
          "cascade": ([0.6, 0.7], dict(rpn_box_weight=2.0, frcnn_class_weight=0.5,
                                       mask_weight=3.0, loss_weight=0.5,
                                       frcnn_huber_loss_delta=0.5,
                                       frcnn_class_use_binary_cross_entropy=True))}
  for name, (cascade, losses) in runs.items():
    for key, value in task_losses(inputs, cascade, **losses).items():
      out[f"loss/task_{name}/{key}"] = value


def main():
  out = {}
  parser_section(out)
  loss_section(out)
  annotation_section(out)
  out = {k: np.asarray(v) for k, v in out.items()}
  path = os.path.join(HERE, "tfm_maskrcnn_reference.npz")
  np.savez_compressed(path, **out)
  print(f"wrote {path}: {len(out)} arrays, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
  main()
