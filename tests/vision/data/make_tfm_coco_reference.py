"""Writes tfm_coco_reference.json: TFM 2.20's COCO evaluator, detection decoder and COCO
converter on inputs this script defines (and stores in the JSON, so the tests rebuild them).

Run once with TFM 2.20 (tf-models-official 2.20, tensorflow 2.20, tf_keras, pycocotools):

    /work/tfm_venv/bin/python tests/vision/data/make_tfm_coco_reference.py

Sections of the JSON:
- `evaluator`: ground truths and predictions in batches (`inputs`) and, per run (with and
  without an annotation file, a smaller `max_num_eval_detections`, masks), the numbers of
  `official.vision.evaluation.coco_evaluator.COCOEvaluator.result()`. TFM reads per-category
  numbers from `COCOeval.category_stats`, which stock pycocotools (2.0.11 here) does not set,
  so TFM returns none; for the `per_category` runs the script gives TFM's evaluator a COCOeval
  that sets `category_stats` from pycocotools itself (one evaluation per category id, as the
  patched pycocotools of the TF Object Detection API reports them) and records TFM's keys.
- `paste`: `official.vision.ops.mask_ops.paste_instance_masks` on fixed masks and boxes.
- `decoder`: serialized TF Examples (base64) and what TFM's `TfExampleDecoder` /
  `TfExampleDecoderLabelMap` (label map CSV stored beside) decode from them per option set.
- `converter`: a tiny COCO JSON, its images (PNG, base64) and captions, and the features of
  every record `official.vision.data.create_coco_tf_record` writes (2 shards, with and without
  `include_masks`).
"""

import base64
import copy
import io
import json
import os
import sys
import tempfile

import numpy as np
from PIL import Image
import tensorflow as tf
from pycocotools import cocoeval

from official.vision.data import create_coco_tf_record
from official.vision.dataloaders import tf_example_decoder
from official.vision.dataloaders import tf_example_label_map_decoder
from official.vision.evaluation import coco_evaluator
from official.vision.ops import mask_ops

HERE = os.path.dirname(os.path.abspath(__file__))


def b64(data: bytes) -> str:
  return base64.b64encode(data).decode("ascii")


def png(array) -> bytes:
  out = io.BytesIO()
  Image.fromarray(np.asarray(array, np.uint8)).save(out, format="PNG")
  return out.getvalue()


def ellipse(height, width, box):
  """A 0/1 uint8 [height, width] ellipse inscribed in the yxyx pixel box."""
  y, x = np.mgrid[0:height, 0:width] + 0.5
  cy, cx = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
  ry, rx = max((box[2] - box[0]) / 2, 0.5), max((box[3] - box[1]) / 2, 0.5)
  return (((y - cy) / ry) ** 2 + ((x - cx) / rx) ** 2 <= 1).astype(np.uint8)


# ----- evaluator ---------------------------------------------------------------------------

# (source_id, height, width, [(ymin, xmin, ymax, xmax, class, is_crowd, area_factor)])
IMAGES = [
    (1, 200, 300, [(10, 20, 60, 90, 1, 0, 0.8), (100, 150, 190, 290, 2, 0, 0.9),
                   (0, 0, 200, 300, 1, 1, 0.5), (150, 10, 165, 30, 3, 0, 1.0)]),
    (2, 256, 256, [(5, 5, 30, 30, 3, 0, 1.0), (50, 60, 250, 250, 1, 0, 0.7),
                   (40, 10, 90, 40, 2, 0, 0.8)]),
    (3, 150, 400, [(20, 30, 120, 200, 2, 0, 0.75), (0, 200, 150, 400, 2, 1, 0.6),
                   (60, 250, 80, 270, 1, 0, 1.0)]),
    (4, 320, 240, []),
    (5, 100, 100, [(10, 10, 40, 45, 3, 0, 1.0), (50, 50, 95, 95, 3, 0, 0.85)]),
]
# Per image: (scale_y, scale_x) of the model's input and detections in ORIGINAL pixels
# (ymin, xmin, ymax, xmax, class, score); the script scales them into the model's space.
SCALES = {1: (0.5, 0.5), 2: (1.25, 1.25), 3: (0.8, 0.64), 4: (1.0, 1.0), 5: (2.0, 2.0)}
DETECTIONS = {
    1: [(12, 22, 58, 88, 1, 0.95), (105, 145, 185, 285, 2, 0.85), (100, 150, 190, 290, 1, 0.3),
        (148, 12, 166, 31, 3, 0.6), (20, 20, 100, 100, 1, 0.45), (50, 200, 80, 240, 2, 0.2)],
    2: [(6, 4, 31, 29, 3, 0.9), (60, 70, 240, 240, 1, 0.88), (42, 12, 88, 38, 2, 0.5),
        (40, 10, 90, 40, 3, 0.4), (0, 0, 0, 0, 0, 0.0), (0, 0, 0, 0, 0, 0.0)],
    3: [(25, 35, 115, 195, 2, 0.7), (10, 210, 140, 390, 2, 0.65), (61, 251, 79, 269, 1, 0.55),
        (30, 40, 110, 190, 2, 0.35), (62, 255, 85, 275, 1, 0.25), (0, 0, 0, 0, 0, 0.0)],
    4: [(10, 10, 100, 100, 1, 0.8), (200, 100, 300, 200, 2, 0.3), (0, 0, 0, 0, 0, 0.0),
        (0, 0, 0, 0, 0, 0.0), (0, 0, 0, 0, 0, 0.0), (0, 0, 0, 0, 0, 0.0)],
    5: [(11, 9, 41, 44, 3, 0.99), (52, 48, 96, 93, 3, 0.75), (50, 50, 95, 95, 2, 0.7),
        (10, 10, 40, 45, 3, 0.1), (0, 0, 0, 0, 0, 0.0), (0, 0, 0, 0, 0, 0.0)],
}
BATCHES = [[1, 2], [3, 4], [5]]
CATEGORY_NAMES = {1: "circle", 2: "square", 3: "triangle"}
MASK_SIZE = 8


def detection_mask(k):
  """A fixed soft [MASK_SIZE, MASK_SIZE] mask for the k-th detection of an image."""
  y, x = np.mgrid[0:MASK_SIZE, 0:MASK_SIZE] + 0.5
  r = np.sqrt(((y - MASK_SIZE / 2) / (MASK_SIZE / 2)) ** 2
              + ((x - MASK_SIZE / 2) / (MASK_SIZE / 2 - k * 0.4)) ** 2)
  return np.clip(1.3 - r, 0.0, 1.0).astype(np.float32)


def evaluator_batches():
  """[(groundtruths, predictions)] as numpy dicts (GT masks as PNG bytes)."""
  by_id = {i[0]: i for i in IMAGES}
  batches = []
  for ids in BATCHES:
    max_gt = max(1, max(len(by_id[i][3]) for i in ids))
    gt = {"source_id": [], "height": [], "width": [], "num_detections": [], "boxes": [],
          "classes": [], "is_crowds": [], "areas": [], "masks": []}
    pred = {"source_id": [], "image_info": [], "num_detections": [], "detection_boxes": [],
            "detection_classes": [], "detection_scores": [], "detection_masks": []}
    for i in ids:
      _, h, w, objects = by_id[i]
      pad = max_gt - len(objects)
      gt["source_id"].append(i)
      gt["height"].append(h)
      gt["width"].append(w)
      gt["num_detections"].append(len(objects))
      gt["boxes"].append([list(o[:4]) for o in objects] + [[0, 0, 0, 0]] * pad)
      gt["classes"].append([o[4] for o in objects] + [0] * pad)
      gt["is_crowds"].append([o[5] for o in objects] + [0] * pad)
      gt["areas"].append([(o[2] - o[0]) * (o[3] - o[1]) * o[6] for o in objects] + [0] * pad)
      gt["masks"].append([png(ellipse(h, w, o[:4])) for o in objects] + [b""] * pad)
      sy, sx = SCALES[i]
      dets = DETECTIONS[i]
      pred["source_id"].append(i)
      pred["image_info"].append([[h, w], [round(h * sy), round(w * sx)], [sy, sx], [0, 0]])
      pred["num_detections"].append(sum(1 for d in dets if d[5] > 0))
      pred["detection_boxes"].append([[d[0] * sy, d[1] * sx, d[2] * sy, d[3] * sx]
                                      for d in dets])
      pred["detection_classes"].append([d[4] for d in dets])
      pred["detection_scores"].append([d[5] for d in dets])
      pred["detection_masks"].append([detection_mask(k) for k in range(len(dets))])
    gt_np = {k: np.asarray(v, dtype=object if k == "masks" else None) for k, v in gt.items()}
    gt_np["boxes"] = gt_np["boxes"].astype(np.float32)
    gt_np["areas"] = gt_np["areas"].astype(np.float32)
    pred_np = {k: np.asarray(v) for k, v in pred.items()}
    for key in ("detection_boxes", "detection_scores", "image_info", "detection_masks"):
      pred_np[key] = pred_np[key].astype(np.float32)
    batches.append((gt_np, pred_np))
  return batches


def annotation_json():
  """The ground truths as a COCO annotation file (names, plus an image nothing predicts)."""
  images, annotations = [], []
  for source_id, h, w, objects in IMAGES + [(6, 50, 50, [(5, 5, 20, 20, 1, 0, 1.0)])]:
    images.append({"id": source_id, "height": h, "width": w,
                   "file_name": f"{source_id}.jpg"})
    for o in objects:
      annotations.append({
          "id": len(annotations) + 1, "image_id": source_id, "category_id": o[4],
          "iscrowd": o[5], "bbox": [o[1], o[0], o[3] - o[1], o[2] - o[0]],
          "area": (o[2] - o[0]) * (o[3] - o[1]) * o[6]})
  return {"images": images, "annotations": annotations,
          "categories": [{"id": i, "name": n} for i, n in CATEGORY_NAMES.items()]}


STOCK_COCOEVAL = cocoeval.COCOeval


class COCOevalWithCategoryStats(STOCK_COCOEVAL):
  """pycocotools' COCOeval that also sets `category_stats` [12, num categories] (what TFM's
  per-category metrics read): each category's 12 numbers by pycocotools alone."""

  def summarize(self):
    super().summarize()
    per_category = []
    for category_id in self.params.catIds:
      one = STOCK_COCOEVAL(self.cocoGt, self.cocoDt, self.params.iouType)
      one.params.imgIds = list(self.params.imgIds)
      one.params.maxDets = list(self.params.maxDets)
      one.params.catIds = [category_id]
      one.evaluate()
      one.accumulate()
      one.summarize()
      per_category.append(one.stats)
    self.category_stats = np.asarray(per_category).T


def tensors(batch):
  """TFM's update_state takes tensors (it calls .numpy())."""
  return {k: tf.constant(v) for k, v in batch.items()}


def run_evaluator(batches, annotation_file=None, include_mask=False, per_category=False,
                  max_num_eval_detections=100):
  if per_category:
    coco_evaluator.cocoeval.COCOeval = COCOevalWithCategoryStats
  try:
    evaluator = coco_evaluator.COCOEvaluator(
        annotation_file=annotation_file, include_mask=include_mask,
        per_category_metrics=per_category, max_num_eval_detections=max_num_eval_detections)
    for gt, pred in batches:
      gt = dict(gt)
      if not include_mask:
        gt.pop("masks")
        pred = {k: v for k, v in pred.items() if k != "detection_masks"}
      evaluator.update_state(tensors(gt), tensors(pred))
    return {k: float(v) for k, v in evaluator.result().items()}
  finally:
    coco_evaluator.cocoeval.COCOeval = STOCK_COCOEVAL


def plain_per_category_keys(batches):
  """The keys stock pycocotools gives TFM's per_category_metrics run (none are added)."""
  return sorted(run_evaluator_plain(batches))


def run_evaluator_plain(batches):
  evaluator = coco_evaluator.COCOEvaluator(annotation_file=None, include_mask=False,
                                           per_category_metrics=True)
  for gt, pred in batches:
    gt = {k: v for k, v in gt.items() if k != "masks"}
    pred = {k: v for k, v in pred.items() if k != "detection_masks"}
    evaluator.update_state(tensors(gt), tensors(pred))
  return evaluator.result()


def evaluator_section(tmp):
  batches = evaluator_batches()
  annotation_file = os.path.join(tmp, "instances.json")
  with open(annotation_file, "w") as f:
    json.dump(annotation_json(), f)

  def jsonable(batch):
    out = {}
    for k, v in batch.items():
      out[k] = ([[b64(m) for m in row] for row in v] if k == "masks" else v.tolist())
    return out

  return {
      "inputs": [{"groundtruths": jsonable(gt), "predictions": jsonable(pred)}
                 for gt, pred in batches],
      "annotation_json": annotation_json(),
      "stock_pycocotools_per_category_keys": plain_per_category_keys(batches),
      "runs": {
          "groundtruths_per_category": run_evaluator(batches, per_category=True),
          "annotation_file_per_category": run_evaluator(
              batches, annotation_file=annotation_file, per_category=True),
          "max_detections_4": run_evaluator(batches, max_num_eval_detections=4),
          "masks": run_evaluator(batches, include_mask=True),
          "masks_per_category": run_evaluator(batches, include_mask=True, per_category=True),
      },
  }


# ----- mask pasting ------------------------------------------------------------------------

PASTE_CASES = [
    # (mask index k, xywh box, image height, image width)
    (0, [10.0, 5.0, 20.0, 12.0], 30, 40),
    (1, [3.4, 7.7, 9.3, 15.2], 30, 40),
    (2, [-4.0, -3.0, 15.0, 10.0], 30, 40),
    (0, [30.5, 20.25, 14.0, 14.0], 30, 40),
    (3, [0.0, 0.0, 2.0, 1.0], 30, 40),
]


def paste_section():
  out = []
  for k, box, h, w in PASTE_CASES:
    pasted = mask_ops.paste_instance_masks(detection_mask(k)[None],
                                           np.asarray([box], np.float32), h, w)[0]
    out.append({"k": k, "box": box, "height": h, "width": w,
                "pasted_packbits": b64(np.packbits(pasted.astype(bool)).tobytes())})
  return out


# ----- decoder -----------------------------------------------------------------------------


def feature(kind, values):
  if kind == "bytes":
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
  if kind == "int64":
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
  return tf.train.Feature(float_list=tf.train.FloatList(value=values))


def decoder_records():
  """name -> serialized tf.Example."""
  rng = np.random.RandomState(0)
  image = rng.randint(0, 256, size=(6, 8, 3)).astype(np.uint8)
  mask_a = np.zeros((6, 8), np.uint8)
  mask_a[1:4, 2:6] = 1
  mask_b = (np.arange(48).reshape(6, 8) * 5).astype(np.uint8)  # graded, for the threshold
  full = {
      "image/encoded": feature("bytes", [png(image)]),
      "image/height": feature("int64", [6]), "image/width": feature("int64", [8]),
      "image/source_id": feature("bytes", [b"101"]),
      "image/object/bbox/ymin": feature("float", [0.1, 0.0]),
      "image/object/bbox/xmin": feature("float", [0.2, 0.5]),
      "image/object/bbox/ymax": feature("float", [0.6, 1.0]),
      "image/object/bbox/xmax": feature("float", [0.7, 0.75]),
      "image/object/class/label": feature("int64", [3, 7]),
      "image/object/class/text": feature("bytes", [b"dog", b"cat"]),
      "image/object/is_crowd": feature("int64", [0, 1]),
      "image/object/area": feature("float", [12.5, 3.0]),
      "image/object/mask": feature("bytes", [png(mask_a), png(mask_b)]),
  }
  sparse = {  # no area, is_crowd, size or source id: TFM derives them
      "image/encoded": feature("bytes", [png(image[:5, :7])]),
      "image/source_id": feature("bytes", [b""]),
      "image/object/bbox/ymin": feature("float", [0.2]),
      "image/object/bbox/xmin": feature("float", [0.1]),
      "image/object/bbox/ymax": feature("float", [0.8]),
      "image/object/bbox/xmax": feature("float", [0.5]),
      "image/object/class/label": feature("int64", [2]),
      "image/object/class/text": feature("bytes", [b"bird"]),
  }
  empty = {  # an image without objects (COCO has them)
      "image/encoded": feature("bytes", [png(image[:4, :4])]),
      "image/height": feature("int64", [4]), "image/width": feature("int64", [4]),
      "image/source_id": feature("bytes", [b"7"]),
  }
  return {name: tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString()
          for name, f in (("full", full), ("sparse", sparse), ("empty", empty))}


DECODER_OPTIONS = {
    "default": {},
    "include_mask": {"include_mask": True},
    "mask_threshold": {"include_mask": True, "mask_binarize_threshold": 100.0},
    "regenerate_source_id": {"regenerate_source_id": True},
}
LABEL_MAP_CSV = "3,dog\n7,cat\n2,bird\n"


def decoded_json(decoded):
  out = {}
  for k, v in decoded.items():
    v = v.numpy()
    if isinstance(v, bytes):
      out[k] = b64(v)
    elif v.dtype == object:
      out[k] = [b64(x) for x in v.ravel()]
    else:
      out[k] = {"dtype": str(v.dtype), "shape": list(v.shape), "values": v.ravel().tolist()}
  return out


def decoder_section(tmp):
  records = decoder_records()
  label_map = os.path.join(tmp, "label_map.csv")
  with open(label_map, "w") as f:
    f.write(LABEL_MAP_CSV)
  outputs = {}
  for option, kwargs in DECODER_OPTIONS.items():
    decoder = tf_example_decoder.TfExampleDecoder(**kwargs)
    outputs[option] = {name: decoded_json(decoder.decode(tf.constant(r)))
                       for name, r in records.items()}
  label_decoder = tf_example_label_map_decoder.TfExampleDecoderLabelMap(label_map)
  outputs["label_map"] = {name: decoded_json(label_decoder.decode(tf.constant(r)))
                          for name, r in records.items() if name != "empty"}
  return {"records": {k: b64(v) for k, v in records.items()}, "options": DECODER_OPTIONS,
          "label_map_csv": LABEL_MAP_CSV, "outputs": outputs}


# ----- converter ---------------------------------------------------------------------------


def converter_inputs():
  rng = np.random.RandomState(1)
  sizes = {1: (12, 16), 2: (10, 10), 3: (8, 12)}
  images = {f"img{i}.png": png(rng.randint(0, 256, size=(h, w, 3))) for i, (h, w) in
            sizes.items()}
  crowd_mask = np.zeros((10, 10), np.uint8)
  crowd_mask[2:7, 3:9] = 1
  counts, previous, run = [], 0, 0  # column-major uncompressed RLE
  for value in crowd_mask.ravel(order="F"):
    if value != previous:
      counts.append(run)
      previous, run = value, 0
    run += 1
  counts.append(run)
  coco = {
      "images": [{"id": i, "file_name": f"img{i}.png", "height": h, "width": w}
                 for i, (h, w) in sizes.items()],
      "categories": [{"id": 1, "name": "circle"}, {"id": 5, "name": "square"}],
      "annotations": [
          {"id": 1, "image_id": 1, "category_id": 1, "iscrowd": 0, "area": 30.5,
           "bbox": [2.0, 1.0, 8.0, 6.5],
           "segmentation": [[2.0, 1.0, 10.0, 1.0, 10.0, 7.5, 2.0, 7.5]]},
          {"id": 2, "image_id": 1, "category_id": 5, "iscrowd": 0, "area": 12.0,
           "bbox": [9.0, 6.0, 6.0, 5.0],
           "segmentation": [[9.0, 6.0, 15.0, 6.0, 12.0, 11.0],
                            [10.0, 8.0, 11.0, 8.0, 11.0, 9.0]]},
          {"id": 3, "image_id": 1, "category_id": 5, "iscrowd": 0, "area": 0.0,
           "bbox": [3.0, 3.0, 0.0, 4.0], "segmentation": [[3.0, 3.0, 3.0, 7.0, 3.0, 5.0]]},
          {"id": 4, "image_id": 1, "category_id": 1, "iscrowd": 0, "area": 40.0,
           "bbox": [10.0, 2.0, 8.0, 5.0],
           "segmentation": [[10.0, 2.0, 16.0, 2.0, 16.0, 7.0]]},
          {"id": 5, "image_id": 2, "category_id": 1, "iscrowd": 1, "area": 30.0,
           "bbox": [3.0, 2.0, 6.0, 5.0],
           "segmentation": {"size": [10, 10], "counts": counts}},
          {"id": 6, "image_id": 2, "category_id": 5, "iscrowd": 0, "area": 9.0,
           "bbox": [0.0, 0.0, 3.0, 3.0], "segmentation": [[0.0, 0.0, 3.0, 0.0, 3.0, 3.0,
                                                           0.0, 3.0]]},
      ],
  }
  captions = {"images": coco["images"],
              "annotations": [{"id": 1, "image_id": 1, "caption": "a circle and a square"},
                              {"id": 2, "image_id": 3, "caption": "nothing here"},
                              {"id": 3, "image_id": 1, "caption": "two shapes"}]}
  return images, coco, captions


def features_json(example):
  out = {}
  for key, value in sorted(example.features.feature.items()):
    kind = value.WhichOneof("kind")
    values = list(getattr(value, kind).value)
    out[key] = [kind, [b64(v) for v in values] if kind == "bytes_list" else values]
  return out


def converter_section(tmp):
  images, coco, captions = converter_inputs()
  image_dir = os.path.join(tmp, "images")
  os.makedirs(image_dir)
  for name, data in images.items():
    with open(os.path.join(image_dir, name), "wb") as f:
      f.write(data)
  annotations = os.path.join(tmp, "instances.json")
  caption_file = os.path.join(tmp, "captions.json")
  with open(annotations, "w") as f:
    json.dump(coco, f)
  with open(caption_file, "w") as f:
    json.dump(captions, f)
  create_coco_tf_record.FLAGS(["create_coco_tf_record", "--num_processes=0"])
  shards = {}
  for include_masks in (False, True):
    prefix = os.path.join(tmp, f"out_masks{int(include_masks)}", "coco")
    os.makedirs(os.path.dirname(prefix))
    create_coco_tf_record._create_tf_record_from_coco_annotations(  # pylint: disable=protected-access
        annotations, [image_dir], prefix, 2, object_annotations_file=annotations,
        caption_annotations_file=caption_file, include_masks=include_masks)
    files = sorted(os.listdir(os.path.dirname(prefix)))
    per_shard = {}
    for name in files:
      records = tf.data.TFRecordDataset(os.path.join(os.path.dirname(prefix), name))
      per_shard[name] = [features_json(tf.train.Example.FromString(r.numpy()))
                         for r in records]
    shards[f"include_masks={include_masks}"] = per_shard
  lists, skipped = create_coco_tf_record.coco_annotations_to_lists(
      coco["annotations"][:4], {1: "circle", 5: "square"}, 12, 16, include_masks=False)
  return {"images": {k: b64(v) for k, v in images.items()}, "object_annotations": coco,
          "caption_annotations": captions, "shards": shards,
          "coco_annotations_to_lists": {
              "data": {k: [b64(x) if isinstance(x, bytes) else x for x in v]
                       for k, v in lists.items()}, "num_skipped": skipped}}


def main():
  with tempfile.TemporaryDirectory() as tmp:
    reference = {
        "versions": {"tensorflow": tf.__version__,
                     "pycocotools": __import__("importlib.metadata").metadata.version(
                         "pycocotools")},
        "evaluator": evaluator_section(tmp),
        "paste": paste_section(),
        "decoder": decoder_section(tmp),
        "converter": converter_section(tmp),
    }
  path = os.path.join(HERE, "tfm_coco_reference.json")
  with open(path, "w") as f:
    json.dump(reference, f, indent=None, separators=(",", ":"))
    f.write("\n")
  print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
  sys.exit(main())
