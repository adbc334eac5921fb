"""Decodes detection records whose classes are names (`image/object/class/text`) through a
label map file (TFM's official/vision/dataloaders/tf_example_label_map_decoder).

The label map is TFM's format: a `.csv` file of `id,name` rows, e.g.

    1,person
    2,bicycle

With validation on (the default), a record naming a class the map lacks fails as a bad
record naming its source_id and the class text (TFM's decoder gives it class -1).
"""

from __future__ import annotations

import csv
from typing import Dict, Optional

import tensorflow as tf

from lite_launcher.common.errors import BAD_RECORD_MARKER, ConfigError
from lite_launcher.vision.dataloaders import tf_example_decoder
from lite_launcher.vision.dataloaders.utils import record_assert


def read_label_map(label_map: str) -> Dict[str, int]:
    """{class name: id} of a `.csv` label map of `id,name` rows; ConfigError naming the file
    (and the row) when it is not one."""
    if not label_map.endswith(".csv"):
        raise ConfigError(f"label map {label_map!r} must be a .csv file of `id,name` rows.")
    if not tf.io.gfile.exists(label_map):
        raise ConfigError(f"label map {label_map!r} does not exist.")
    name_to_id = {}
    with tf.io.gfile.GFile(label_map, "r") as f:
        for number, row in enumerate(csv.reader(f, delimiter=","), start=1):
            if len(row) != 2 or not row[0].strip().lstrip("-").isdigit():
                raise ConfigError(f"label map {label_map!r} row {number} is {row!r}; each row "
                                  f"must be `id,name`.")
            name_to_id[row[1]] = int(row[0])
    return name_to_id


class TfExampleDecoderLabelMap(tf_example_decoder.TfExampleDecoder):
    """`TfExampleDecoder` whose class ids come from `image/object/class/text` looked up in
    `label_map` (a `.csv` of `id,name` rows). Other arguments as `TfExampleDecoder`'s."""

    def __init__(self, label_map: str, include_mask: bool = False,
                 regenerate_source_id: bool = False,
                 mask_binarize_threshold: Optional[float] = None, validate: bool = True):
        super().__init__(include_mask=include_mask, regenerate_source_id=regenerate_source_id,
                         mask_binarize_threshold=mask_binarize_threshold, validate=validate)
        self._keys_to_features["image/object/class/text"] = tf.io.VarLenFeature(tf.string)
        name_to_id = read_label_map(label_map)
        self._name_to_id_table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                keys=tf.constant(list(name_to_id), dtype=tf.string),
                values=tf.constant(list(name_to_id.values()), dtype=tf.int64)),
            default_value=-1)

    def _classes_field(self) -> str:
        return "image/object/class/text"

    def _decode_classes(self, parsed):
        return self._name_to_id_table.lookup(parsed["image/object/class/text"])

    def _checks(self, source_id, boxes, classes, parsed, masks, height, width):
        checks = super()._checks(source_id, boxes, classes, parsed, masks, height, width)
        if self._validate:
            texts = parsed["image/object/class/text"]
            checks.append(record_assert(
                tf.reduce_all(classes >= 0),
                [BAD_RECORD_MARKER, "record", source_id, "names classes",
                 tf.boolean_mask(texts, classes < 0), "in image/object/class/text that the "
                 "label map lacks: add them to it."]))
        return checks


__all__ = ["TfExampleDecoderLabelMap", "read_label_map"]
