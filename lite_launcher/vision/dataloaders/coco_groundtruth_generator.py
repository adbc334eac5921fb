"""COCO ground truths read back from detection records: TFM's `COCOGroundtruthGenerator` and
`scan_and_generator_annotation_file` (in TFM's evaluation/coco_utils.py; here beside the
decoder they use, since evaluation/ stands below dataloaders/).

A Mask R-CNN evaluation without `annotation_file` needs the full-image masks, which the parser
crops away: the task writes an annotation JSON from the validation records once, as TFM's
does, and the COCO evaluator reads it.
"""

from __future__ import annotations

import tensorflow as tf

from lite_launcher.core.input_reader import match_files, pick_dataset_fn
from lite_launcher.vision.dataloaders import tf_example_decoder
from lite_launcher.vision.evaluation import coco_utils
from lite_launcher.vision.ops import box_ops


class COCOGroundtruthGenerator:
    """Called, a dataset of one-image batches of ground truths from the records of
    `file_pattern` (their first `num_examples`; all when negative): `source_id`, `height`,
    `width`, `num_detections`, `boxes` (original-image pixels), `classes`, `is_crowds`,
    `areas`, and with `include_mask` `masks` (the records' PNG bytes)."""

    def __init__(self, file_pattern, file_type: str, num_examples: int, include_mask: bool,
                 regenerate_source_id: bool = False):
        self._file_pattern = file_pattern
        self._dataset_fn = pick_dataset_fn(file_type)
        self._num_examples = num_examples
        self._include_mask = include_mask
        self._decoder = tf_example_decoder.TfExampleDecoder(
            include_mask=include_mask, regenerate_source_id=regenerate_source_id)

    @tf.autograph.experimental.do_not_convert  # graph-safe as written; saves the conversion
    def _parse_single_example(self, example):
        decoded = self._decoder.decode(example)
        groundtruths = {
            "source_id": tf.strings.to_number(decoded["source_id"], tf.int64),
            "height": decoded["height"],
            "width": decoded["width"],
            "num_detections": tf.shape(decoded["groundtruth_classes"])[0],
            "boxes": box_ops.denormalize_boxes(decoded["groundtruth_boxes"],
                                               tf.shape(decoded["image"])[0:2]),
            "classes": decoded["groundtruth_classes"],
            "is_crowds": decoded["groundtruth_is_crowd"],
            "areas": decoded["groundtruth_area"],
        }
        if self._include_mask:
            groundtruths["masks"] = decoded["groundtruth_instance_masks_png"]
        return groundtruths

    def __call__(self) -> tf.data.Dataset:
        # One file after another, in order, so the JSON lists images in the records' order.
        dataset = tf.data.Dataset.from_tensor_slices(match_files(self._file_pattern))
        dataset = dataset.flat_map(self._dataset_fn).take(self._num_examples)
        return dataset.map(self._parse_single_example).batch(1)


def scan_and_generator_annotation_file(file_pattern, file_type: str, num_samples: int,
                                       include_mask: bool, annotation_file: str,
                                       regenerate_source_id: bool = False) -> None:
    """Writes the COCO annotation JSON of the records of `file_pattern` (TFM's name)."""
    coco_utils.generate_annotation_file(
        COCOGroundtruthGenerator(file_pattern, file_type, num_samples, include_mask,
                                 regenerate_source_id), annotation_file)
