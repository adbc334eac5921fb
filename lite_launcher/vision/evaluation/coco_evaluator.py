"""The COCO detection metric through pycocotools (TFM's official/vision/evaluation/
coco_evaluator.COCOEvaluator, same interface and numbers).

    evaluator = COCOEvaluator(annotation_file=None, include_mask=False)
    for groundtruths, predictions in eval_batches:
        evaluator.update_state(groundtruths, predictions)   # NumPy arrays or tensors
    metrics = evaluator.result()   # {'AP': ..., 'AP50': ..., ..., 'ARl': ...}; states reset

pycocotools is an optional extra: constructing the evaluator without it raises
`coco_utils.MissingExtraError`, one line naming `pip install 'lite_launcher[detection]'`.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import tempfile
from typing import Dict, Optional

import numpy as np
from absl import logging

from lite_launcher.common.errors import ConfigError
from lite_launcher.vision.evaluation import coco_utils

# pycocotools' 12 summary numbers, in the order of `COCOeval.stats`.
_STAT_NAMES = ("AP", "AP50", "AP75", "APs", "APm", "APl", "ARmax1", "ARmax10", "ARmax{}",
               "ARs", "ARm", "ARl")
# TFM's per-category names of the same 12 numbers (`<name>/<category>`).
_PER_CATEGORY_NAMES = (
    "Precision mAP ByCategory", "Precision mAP ByCategory@50IoU",
    "Precision mAP ByCategory@75IoU", "Precision mAP ByCategory (small)",
    "Precision mAP ByCategory (medium)", "Precision mAP ByCategory (large)",
    "Recall AR@1 ByCategory", "Recall AR@10 ByCategory", "Recall AR@100 ByCategory",
    "Recall AR (small) ByCategory", "Recall AR (medium) ByCategory",
    "Recall AR (large) ByCategory")


def _to_numpy(value):
    """A tensor / array / per-replica tuple of them as one NumPy array (tuples concatenated
    along the batch, as TFM merges replicas' outputs)."""
    if isinstance(value, (tuple, list)):
        return np.concatenate([_to_numpy(v) for v in value], axis=0)
    if hasattr(value, "numpy"):
        value = value.numpy()
    return np.asarray(value)


def _local_copy(annotation_file: str) -> str:
    """`annotation_file`, copied to a local temporary file first if it is a URL (gs://...)."""
    if "://" not in annotation_file:
        if not os.path.isfile(annotation_file):
            raise ConfigError(f"annotation_file {annotation_file!r} does not exist; give the "
                              f"COCO annotation JSON of the eval set, or leave it empty to "
                              f"evaluate against the eval data's ground truths.")
        return annotation_file
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    handle, local = tempfile.mkstemp(suffix=".json")
    os.close(handle)
    tf.io.gfile.copy(annotation_file, local, overwrite=True)
    atexit.register(os.remove, local)
    return local


class COCOEvaluator:
    """Accumulates detections (and, without an annotation file, ground truths) over eval
    batches and computes the COCO numbers with pycocotools (TFM's COCOEvaluator).

    Args:
      annotation_file: the COCO annotation JSON of the eval set; None or '' to build the
        ground truth from what `update_state` receives.
      include_mask: also evaluate `detection_masks` against ground-truth `masks`; the
        numbers are then repeated with a `mask_` prefix.
      need_rescale_bboxes: divide `detection_boxes` by `image_info[:, 2]` (the model input's
        scale), bringing them back to original-image pixels.
      per_category_metrics: also return TFM's per-category numbers
        (`Precision mAP ByCategory/<category>`, ...; the category's name when the annotation
        file names it, else its id). TFM 2.20 reads these from `COCOeval.category_stats`,
        which stock pycocotools does not set (TFM then returns none); here they are
        pycocotools' own numbers for each category alone.
      max_num_eval_detections: detections per image pycocotools keeps (its third `maxDets`;
        also names `ARmax<N>`).
    """

    def __init__(self, annotation_file: Optional[str], include_mask: bool,
                 include_keypoint: bool = False, need_rescale_bboxes: bool = True,
                 per_category_metrics: bool = False, max_num_eval_detections: int = 100):
        coco_utils.import_pycocotools()  # refuse now, not after the first eval epoch
        if include_keypoint:
            raise ConfigError("COCOEvaluator: keypoint evaluation (include_keypoint) is not "
                              "supported; set it to False.")
        if isinstance(max_num_eval_detections, bool) or not isinstance(
                max_num_eval_detections, int) or max_num_eval_detections < 1:
            raise ConfigError(f"max_num_eval_detections ({max_num_eval_detections!r}) must be "
                              f"a positive integer.")
        self._annotation_file = annotation_file or None
        self._include_mask = include_mask
        self._need_rescale_bboxes = need_rescale_bboxes
        self._per_category_metrics = per_category_metrics
        self.max_num_eval_detections = max_num_eval_detections
        self._coco_gt = None
        if self._annotation_file:
            with _quiet():
                self._coco_gt = coco_utils.COCOWrapper(
                    eval_type=self._eval_type, annotation_file=_local_copy(annotation_file))
        names = [n.format(max_num_eval_detections) for n in _STAT_NAMES]
        self._metric_names = names + (["mask_" + n for n in names] if include_mask else [])
        self._required_prediction_fields = ["source_id", "num_detections",
                                            "detection_classes", "detection_scores",
                                            "detection_boxes"]
        if need_rescale_bboxes:
            self._required_prediction_fields.append("image_info")
        self._required_groundtruth_fields = ["source_id", "height", "width", "classes",
                                             "boxes"]
        if include_mask:
            self._required_prediction_fields.append("detection_masks")
            self._required_groundtruth_fields.append("masks")
        self.reset_states()

    @property
    def name(self) -> str:
        return "coco_metric"

    @property
    def _eval_type(self) -> str:
        return "mask" if self._include_mask else "box"

    def reset_states(self) -> None:
        """Forgets the accumulated detections (and ground truths)."""
        self._predictions: Dict[str, list] = {}
        self._groundtruths: Dict[str, list] = {}

    def update_state(self, groundtruths, predictions) -> None:
        """Adds one batch.

        Args:
          groundtruths: dict of [B, ...] arrays or tensors (ignored with an annotation file):
            `source_id`, `height`, `width`, `num_detections`, `boxes` [B, K, 4] (ymin, xmin,
            ymax, xmax in original-image pixels), `classes` [B, K]; optional `is_crowds`,
            `areas` [B, K], and `masks` [B, K] (PNG bytes) with include_mask.
          predictions: dict of [B, ...] arrays or tensors: `source_id`, `num_detections`,
            `detection_boxes` [B, K, 4] (the model input's pixels when rescaling),
            `detection_classes`, `detection_scores` [B, K], `image_info` [B, 4, 2] when
            rescaling, `detection_masks` [B, K, mh, mw] with include_mask.

        Raises:
          ValueError: a required key is missing.
        """
        predictions = {k: _to_numpy(v) for k, v in predictions.items()}
        for key in self._required_prediction_fields:
            if key not in predictions:
                raise ValueError(f"Missing the required key `{key}` in predictions!")
        if self._need_rescale_bboxes:
            # image_info row 2 is (scale_y, scale_x): divide y's by the first, x's by the second.
            scale = np.tile(predictions["image_info"][:, 2:3, :], (1, 1, 2))
            for key in ("detection_boxes", "detection_outer_boxes"):
                if key in predictions:
                    predictions[key] = predictions[key].astype(np.float32) / scale
        for key, value in predictions.items():
            self._predictions.setdefault(key, []).append(value)
        if self._annotation_file:
            return
        if not groundtruths:
            raise ValueError("COCOEvaluator without an annotation_file needs the ground "
                             "truths of every batch.")
        groundtruths = {k: _to_numpy(v) for k, v in groundtruths.items()}
        for key in self._required_groundtruth_fields:
            if key not in groundtruths:
                raise ValueError(f"Missing the required key `{key}` in groundtruths!")
        for key, value in groundtruths.items():
            self._groundtruths.setdefault(key, []).append(value)

    def result(self) -> Dict[str, np.float32]:
        """The COCO numbers of everything added since the last reset; then resets."""
        metrics = self.evaluate()
        self.reset_states()
        return metrics

    def evaluate(self) -> Dict[str, np.float32]:
        """The COCO numbers of everything added since the last reset (states kept)."""
        _, cocoeval, _ = coco_utils.import_pycocotools()
        if not self._predictions:
            raise ValueError("COCOEvaluator.evaluate: no predictions were added "
                             "(update_state was never called since the last reset).")
        with _quiet():
            coco_gt = self._coco_gt or coco_utils.COCOWrapper(
                eval_type=self._eval_type,
                gt_dataset=coco_utils.convert_groundtruths_to_coco_dataset(
                    self._groundtruths))
            coco_predictions = coco_utils.convert_predictions_to_coco_annotations(
                self._predictions)
            coco_dt = coco_gt.loadRes(coco_predictions)
        image_ids = [ann["image_id"] for ann in coco_predictions]
        evaluations = [self._run(cocoeval.COCOeval(coco_gt, coco_dt, iouType="bbox"),
                                 image_ids, self.max_num_eval_detections)]
        if self._include_mask:
            # TFM keeps pycocotools' default maxDets for masks.
            evaluations.append(self._run(cocoeval.COCOeval(coco_gt, coco_dt, iouType="segm"),
                                         image_ids, None))
        stats = np.concatenate([e.stats for e in evaluations])
        metrics = {name: stats[i].astype(np.float32)
                   for i, name in enumerate(self._metric_names)}
        if self._per_category_metrics:
            for evaluation, prefix in zip(evaluations, ("", "mask ")):
                metrics.update(self._per_category(evaluation, coco_gt, prefix))
        return metrics

    @staticmethod
    def _run(coco_eval, image_ids, max_detections):
        coco_eval.params.imgIds = image_ids
        if max_detections is not None:
            coco_eval.params.maxDets[2] = max_detections
        with _quiet():
            coco_eval.evaluate()
            coco_eval.accumulate()
            coco_eval.summarize()
        return coco_eval

    def _per_category(self, coco_eval, coco_gt, prefix: str) -> Dict[str, np.float32]:
        """TFM's per-category keys: pycocotools' `summarize` run on each category's slice of
        the accumulated precision / recall (so the numbers are pycocotools' own)."""
        accumulated, overall = coco_eval.eval, coco_eval.stats
        metrics = {}
        try:
            for index, category_id in enumerate(coco_eval.params.catIds):
                coco_eval.eval = dict(accumulated)
                coco_eval.eval["precision"] = accumulated["precision"][:, :, index:index + 1]
                coco_eval.eval["recall"] = accumulated["recall"][:, index:index + 1]
                with _quiet():
                    coco_eval.summarize()
                display = (coco_gt.cats[category_id].get("name", category_id)
                           if self._annotation_file else category_id)
                for name, value in zip(_PER_CATEGORY_NAMES, coco_eval.stats):
                    metrics[f"{prefix}{name}/{display}"] = np.float32(value)
        finally:
            coco_eval.eval, coco_eval.stats = accumulated, overall
        return metrics


@contextlib.contextmanager
def _quiet():
    """pycocotools prints its progress and tables: they go to the log at debug level."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        yield
    if buffer.getvalue():
        logging.debug("pycocotools:\n%s", buffer.getvalue().rstrip())


__all__ = ["COCOEvaluator"]
