"""COCO-format conversions for the COCO evaluator (TFM's official/vision/evaluation/coco_utils).

Ground truths and detections arrive as lists of per-batch NumPy arrays (TFM's layout) and
leave as COCO annotation dicts that pycocotools evaluates. pycocotools is an optional extra,
imported on first use through `import_pycocotools`, which turns its absence into one line
naming the extra. `COCOWrapper` (a `pycocotools.coco.COCO`) is therefore built on first access.
"""

from __future__ import annotations

import copy
from typing import Dict, List, Optional

import numpy as np

from lite_launcher.common import errors
from lite_launcher.common.errors import MissingExtraError
from lite_launcher.vision.configs import retinanet as retinanet_configs

INSTALL_HINT = "pip install 'lite_launcher[detection]'"


def import_pycocotools():
    """(pycocotools.coco, pycocotools.cocoeval, pycocotools.mask); `MissingExtraError` in one
    line naming the extra if pycocotools is not installed."""
    return tuple(errors.import_extra(f"pycocotools.{name}",
                                     retinanet_configs.PYCOCOTOOLS_PURPOSE, "detection")
                 for name in ("coco", "cocoeval", "mask"))


def _make_coco_wrapper_class():
    coco, _, mask_api = import_pycocotools()

    class COCOWrapper(coco.COCO):
        """pycocotools' COCO ground truth built from a JSON file or an in-memory dataset, with
        `loadRes` taking a list of prediction dicts (TFM's COCOWrapper).

        Args:
          eval_type: 'box' (prediction areas from their boxes) or 'mask' (from their RLEs).
          annotation_file: a COCO annotation JSON; exactly one of it and `gt_dataset`.
          gt_dataset: a COCO-format dict (`convert_groundtruths_to_coco_dataset`).
        """

        def __init__(self, eval_type="box", annotation_file=None, gt_dataset=None):
            if bool(annotation_file) == bool(gt_dataset):
                raise ValueError("COCOWrapper: give exactly one of annotation_file and "
                                 "gt_dataset.")
            if eval_type not in ("box", "mask"):
                raise ValueError(f"COCOWrapper: eval_type {eval_type!r} must be 'box' or "
                                 f"'mask'.")
            coco.COCO.__init__(self, annotation_file=annotation_file)
            self._eval_type = eval_type
            if gt_dataset:
                self.dataset = gt_dataset
                self.createIndex()

        def loadRes(self, predictions):  # pylint: disable=invalid-name  (pycocotools' name)
            """A COCO object of `predictions` (dicts with image_id, category_id, score, bbox
            [x, y, w, h] and, for masks, an RLE `segmentation`) over this ground truth's images
            and categories. ValueError if a prediction names an image the ground truth lacks."""
            known = set(self.getImgIds())
            unknown = {p["image_id"] for p in predictions} - known
            if unknown:
                raise ValueError(f"predictions name image ids {sorted(unknown)[:5]} that the "
                                 f"ground truth does not hold.")
            result = coco.COCO()
            result.dataset["images"] = copy.deepcopy(self.dataset["images"])
            result.dataset["categories"] = copy.deepcopy(self.dataset["categories"])
            annotations = copy.deepcopy(predictions)
            for ann in annotations:
                x, y, w, h = ann["bbox"]
                if self._eval_type == "box":
                    ann["area"] = w * h
                    # pycocotools reads a polygon from every annotation: the box's corners.
                    ann["segmentation"] = [[x, y, x, y + h, x + w, y + h, x + w, y]]
                else:
                    ann["area"] = mask_api.area(ann["segmentation"])
            result.dataset["annotations"] = annotations
            result.createIndex()
            return result

    return COCOWrapper


_LAZY = {}


def __getattr__(name):
    # `COCOWrapper` subclasses pycocotools' COCO, so it exists only once pycocotools imports.
    if name == "COCOWrapper":
        if name not in _LAZY:
            _LAZY[name] = _make_coco_wrapper_class()
        return _LAZY[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def yxyx_to_xywh(boxes: np.ndarray) -> np.ndarray:
    """[..., 4] boxes (ymin, xmin, ymax, xmax) -> (xmin, ymin, width, height)."""
    boxes = np.asarray(boxes)
    if boxes.shape[-1] != 4:
        raise ValueError(f"boxes have last dimension {boxes.shape[-1]}; it must be 4.")
    return np.stack([boxes[..., 1], boxes[..., 0], boxes[..., 3] - boxes[..., 1],
                     boxes[..., 2] - boxes[..., 0]], axis=-1)


def _resize_bilinear(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """OpenCV's `cv2.resize(image, (width, height))` (INTER_LINEAR) for a float32 2-D array:
    half-pixel centres, edges repeated; NumPy only, so OpenCV is no dependency."""

    def taps(out_size, in_size):
        position = ((np.arange(out_size) + 0.5) * (in_size / out_size) - 0.5).astype(np.float32)
        low = np.floor(position).astype(np.int64)
        frac = (position - low).astype(np.float32)
        frac[low < 0] = 0.0
        low = np.maximum(low, 0)
        frac[low >= in_size - 1] = 0.0
        low = np.minimum(low, in_size - 1)
        return low, np.minimum(low + 1, in_size - 1), frac

    y0, y1, fy = taps(height, image.shape[0])
    x0, x1, fx = taps(width, image.shape[1])
    fx = fx[None, :]
    rows0 = image[y0][:, x0] * (1 - fx) + image[y0][:, x1] * fx
    rows1 = image[y1][:, x0] * (1 - fx) + image[y1][:, x1] * fx
    return rows0 * (1 - fy[:, None]) + rows1 * fy[:, None]


def paste_instance_masks(masks: np.ndarray, detected_boxes: np.ndarray, image_height: int,
                         image_width: int) -> np.ndarray:
    """Pastes [N, mh, mw] box-relative masks onto [N, image_height, image_width] uint8 0/1
    canvases (TFM's `mask_ops.paste_instance_masks`, Detectron's recipe).

    `detected_boxes` are [N, 4] (x, y, width, height) in image pixels. Each mask is padded by
    one zero pixel (so the resize does not smear its border outwards), its box grown to match
    the padding and truncated to integers, the mask resized bilinearly to the box and
    thresholded at 0.5, and the part inside the image written.
    """
    masks = np.asarray(masks, np.float32)
    boxes = np.asarray(detected_boxes, np.float64)
    _, mask_height, mask_width = masks.shape
    scale = max((mask_width + 2.0) / mask_width, (mask_height + 2.0) / mask_height)
    centre_x = boxes[:, 0] + boxes[:, 2] * 0.5
    centre_y = boxes[:, 1] + boxes[:, 3] * 0.5
    half_w, half_h = boxes[:, 2] * 0.5 * scale, boxes[:, 3] * 0.5 * scale
    grown = np.stack([centre_x - half_w, centre_y - half_h, centre_x + half_w,
                      centre_y + half_h], axis=-1).astype(np.int32)
    pasted = np.zeros((len(masks), image_height, image_width), np.uint8)
    padded = np.zeros((mask_height + 2, mask_width + 2), np.float32)
    for i, (mask, (x0, y0, x1, y1)) in enumerate(zip(masks, grown)):
        padded[1:-1, 1:-1] = mask
        w, h = max(x1 - x0 + 1, 1), max(y1 - y0 + 1, 1)
        resized = (_resize_bilinear(padded, h, w) > 0.5).astype(np.uint8)
        left, right = min(max(x0, 0), image_width), min(max(x1 + 1, 0), image_width)
        top, bottom = min(max(y0, 0), image_height), min(max(y1 + 1, 0), image_height)
        pasted[i, top:bottom, left:right] = resized[top - y0:bottom - y0, left - x0:right - x0]
    return pasted


def _image_id(value) -> int:
    """A source id (int, or bytes / str of digits, as records hold it) as COCO's int id."""
    if isinstance(value, (bytes, np.bytes_)):
        value = value.decode()
    return int(value)


def convert_predictions_to_coco_annotations(predictions: Dict[str, List[np.ndarray]]
                                            ) -> List[dict]:
    """Per-batch detections -> COCO result dicts (TFM's function of the same name).

    `predictions` maps `source_id` [B], `detection_boxes` [B, K, 4] (ymin, xmin, ymax, xmax in
    original-image pixels), `detection_classes` [B, K], `detection_scores` [B, K] and optionally
    `detection_masks` [B, K, mh, mw] (with `image_info` [B, 4, 2] for the image size) to lists
    with one array per batch. Every one of the K slots becomes a result, as in TFM (padded
    slots score 0). The inputs are not modified.
    """
    _, _, mask_api = import_pycocotools()
    results = []
    with_masks = "detection_masks" in predictions
    for i, source_ids in enumerate(predictions["source_id"]):
        boxes = yxyx_to_xywh(predictions["detection_boxes"][i])
        classes = predictions["detection_classes"][i]
        scores = predictions["detection_scores"][i]
        mask_boxes = (yxyx_to_xywh(predictions["detection_outer_boxes"][i])
                      if "detection_outer_boxes" in predictions else boxes)
        for j, source_id in enumerate(source_ids):
            if with_masks:
                info = predictions["image_info"][i][j]
                pasted = paste_instance_masks(predictions["detection_masks"][i][j],
                                              mask_boxes[j], int(info[0, 0]), int(info[0, 1]))
                rles = [mask_api.encode(np.asfortranarray((m > 0).astype(np.uint8)))
                        for m in pasted]
            for k in range(classes.shape[1]):
                ann = {"image_id": _image_id(source_id), "category_id": int(classes[j, k]),
                       "bbox": [float(v) for v in boxes[j, k]],
                       "score": float(scores[j, k])}
                if with_masks:
                    ann["segmentation"] = rles[k]
                results.append(ann)
    for number, ann in enumerate(results, start=1):
        ann["id"] = number
    return results


def _decode_png_mask(data) -> np.ndarray:
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    if hasattr(data, "numpy"):
        data = data.numpy()
    return tf.io.decode_png(data, channels=1).numpy()[..., 0]


def convert_groundtruths_to_coco_dataset(groundtruths: Dict[str, List[np.ndarray]],
                                         label_map: Optional[Dict[int, str]] = None) -> dict:
    """Per-batch ground truths -> a COCO dataset dict (TFM's function of the same name).

    Required keys (lists with one array per batch): `source_id` [B], `height` [B], `width`
    [B], `num_detections` [B] (or [B, 1]), `boxes` [B, K, 4] (ymin, xmin, ymax, xmax in pixels), `classes`
    [B, K]. Optional: `is_crowds` [B, K], `areas` [B, K] (else from the box, or the mask),
    `masks` [B, K] of PNG bytes. The first `num_detections` of each image's K are used.
    `label_map` (id -> name) names the categories; without it they are the ids present.
    """
    images, annotations = [], []
    for i, source_ids in enumerate(groundtruths["source_id"]):
        boxes = np.asarray(groundtruths["boxes"][i], np.float64)
        max_instances = np.asarray(groundtruths["classes"][i]).shape[1]
        for j, source_id in enumerate(source_ids):
            image_id = _image_id(source_id)
            images.append({"id": image_id, "height": int(groundtruths["height"][i][j]),
                           "width": int(groundtruths["width"][i][j])})
            # [B] or, as the RetinaNet parser gives it (TFM's `tf.shape(classes)`), [B, 1].
            count = int(np.reshape(groundtruths["num_detections"][i][j], [-1])[0])
            for k in range(min(count, max_instances)):
                ymin, xmin, ymax, xmax = (float(v) for v in boxes[j, k])
                ann = {"image_id": image_id,
                       "iscrowd": (int(groundtruths["is_crowds"][i][j, k])
                                   if "is_crowds" in groundtruths else 0),
                       "category_id": int(groundtruths["classes"][i][j, k]),
                       "bbox": [xmin, ymin, xmax - xmin, ymax - ymin],
                       "area": (float(groundtruths["areas"][i][j, k])
                                if "areas" in groundtruths
                                else (xmax - xmin) * (ymax - ymin))}
                if "masks" in groundtruths:
                    _, _, mask_api = import_pycocotools()
                    binary = (_decode_png_mask(groundtruths["masks"][i][j, k]) > 0)
                    rle = mask_api.encode(np.asfortranarray(binary.astype(np.uint8) * 255))
                    rle["counts"] = (rle["counts"].decode()
                                     if isinstance(rle["counts"], bytes) else rle["counts"])
                    ann["segmentation"] = rle
                    if "areas" not in groundtruths:
                        ann["area"] = mask_api.area(rle)
                annotations.append(ann)
    for number, ann in enumerate(annotations, start=1):
        ann["id"] = number
    if label_map:
        categories = [{"id": i, "name": label_map[i]} for i in label_map]
    else:
        categories = [{"id": i} for i in sorted({a["category_id"] for a in annotations})]
    return {"images": images, "categories": categories, "annotations": annotations}


def generate_annotation_file(groundtruth_generator, annotation_file: str) -> None:
    """Writes (atomically) the COCO annotation JSON of every ground-truth batch that
    `groundtruth_generator()` yields (dicts of [B, ...] arrays or tensors with the keys of
    `convert_groundtruths_to_coco_dataset`), as TFM's function of the same name."""
    import json  # pylint: disable=import-outside-toplevel
    from lite_launcher.common import atomic_write  # pylint: disable=import-outside-toplevel
    groundtruths: Dict[str, list] = {}
    for batch in groundtruth_generator():
        for key, value in batch.items():
            groundtruths.setdefault(key, []).append(
                value.numpy() if hasattr(value, "numpy") else np.asarray(value))
    dataset = convert_groundtruths_to_coco_dataset(groundtruths)
    atomic_write.write_text(annotation_file, json.dumps(dataset, default=_json_number))


def _json_number(value):
    """NumPy scalars (pycocotools' mask areas) as JSON numbers."""
    return value.item()


__all__ = ["MissingExtraError", "INSTALL_HINT", "import_pycocotools", "COCOWrapper",
           "yxyx_to_xywh", "paste_instance_masks", "convert_predictions_to_coco_annotations",
           "convert_groundtruths_to_coco_dataset", "generate_annotation_file"]
