"""Helpers for writing TF Example features and sharded TFRecord files (TFM's official/vision/
data/tfrecord_lib, same names and record layout).

Differences from TFM's: the shards of `write_tf_record_dataset` appear all together or not at
all (each is written to a temporary file and renamed once every record was written), and
worker processes are used only when `multiple_processes` is a positive number (and then
spawned, not forked, since forking a process that has loaded TensorFlow can hang).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import multiprocessing
from typing import Callable, Iterable, Optional

import numpy as np
import tensorflow as tf
from absl import logging

from lite_launcher.common import atomic_write

LOG_EVERY = 100

_VALUE_TYPES = ("int64", "int64_list", "float", "float_list", "bytes", "bytes_list")


def convert_to_feature(value, value_type: Optional[str] = None) -> tf.train.Feature:
    """A `tf.train.Feature` of an int, float or bytes value or a list of them.

    Args:
      value: the value, or a list of values (NumPy arrays go through `value_type`).
      value_type: one of 'int64', 'float', 'bytes' and their '_list' forms; None infers it
        from the (first) value, '_list' when `value` is a list.
    """
    if value_type is None:
        element = value[0] if isinstance(value, list) else value
        if isinstance(element, bytes):
            value_type = "bytes"
        elif isinstance(element, (int, np.integer)):
            value_type = "int64"
        elif isinstance(element, (float, np.floating)):
            value_type = "float"
        else:
            raise ValueError(f"Cannot convert type {type(element)} to a feature: give int, "
                             f"float or bytes values (or a value_type).")
        if isinstance(value, list):
            value_type += "_list"
    if value_type not in _VALUE_TYPES:
        raise ValueError(f"Unknown value_type {value_type!r}; one of {', '.join(_VALUE_TYPES)}.")
    if value_type == "bytes":
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
    if value_type == "bytes_list":
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=value))
    if value_type.startswith("int64"):
        values = [value] if value_type == "int64" else np.asarray(value).astype(
            np.int64).reshape(-1)
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    values = [value] if value_type == "float" else np.asarray(value).astype(
        np.float32).reshape(-1)
    return tf.train.Feature(float_list=tf.train.FloatList(value=values))


def image_info_to_feature_dict(height: int, width: int, filename: str, image_id,
                               encoded_str: bytes, encoded_format: str) -> dict:
    """The `image/*` features of one image: height, width, filename, source_id (`image_id`
    as text), key/sha256 (of the encoded bytes), encoded and format."""
    return {
        "image/height": convert_to_feature(height),
        "image/width": convert_to_feature(width),
        "image/filename": convert_to_feature(filename.encode("utf8")),
        "image/source_id": convert_to_feature(str(image_id).encode("utf8")),
        "image/key/sha256": convert_to_feature(
            hashlib.sha256(encoded_str).hexdigest().encode("utf8")),
        "image/encoded": convert_to_feature(encoded_str),
        "image/format": convert_to_feature(encoded_format.encode("utf8")),
    }


def read_image(image_path: str) -> np.ndarray:
    """The decoded pixels of an image file ([h, w] or [h, w, c] uint8)."""
    pixels = tf.io.decode_image(tf.io.read_file(image_path), expand_animations=False).numpy()
    return pixels[..., 0] if pixels.shape[-1] == 1 else pixels


def encode_mask_as_png(mask: np.ndarray) -> bytes:
    """A 2-D uint8 mask as a 1-channel PNG."""
    mask = np.asarray(mask, np.uint8)
    return tf.io.encode_png(mask[..., None]).numpy()


def write_tf_record_dataset(output_path: str, annotation_iterator: Iterable,
                            process_func: Callable, num_shards: int,
                            multiple_processes: Optional[int] = None,
                            unpack_arguments: bool = True) -> int:
    """Writes `process_func`'s examples round-robin into
    `output_path-%05d-of-%05d.tfrecord` shards; returns the number of skipped annotations.

    Args:
      output_path: the shards' path prefix.
      annotation_iterator: the items to convert, one per record.
      process_func: item -> (tf.train.Example, number of annotations skipped); called as
        `process_func(*item)` when `unpack_arguments`, else `process_func(item)`.
      num_shards: how many shard files.
      multiple_processes: worker processes to convert with; None or 0 converts in this
        process (TFM's None means one per CPU).
      unpack_arguments: see `process_func`.
    """
    paths = [f"{output_path}-{i:05d}-of-{num_shards:05d}.tfrecord" for i in range(num_shards)]
    skipped = 0
    with contextlib.ExitStack() as stack:
        if multiple_processes:
            pool = stack.enter_context(
                multiprocessing.get_context("spawn").Pool(processes=multiple_processes))
            mapper = pool.starmap if unpack_arguments else pool.imap
        else:
            mapper = itertools.starmap if unpack_arguments else map
        # Renamed into place only after every shard is complete (exceptions remove them).
        temporaries = [stack.enter_context(atomic_write.atomic_path(p)) for p in paths]
        writers = [stack.enter_context(tf.io.TFRecordWriter(t)) for t in temporaries]
        for index, (example, num_skipped) in enumerate(mapper(process_func,
                                                              annotation_iterator)):
            if index % LOG_EVERY == 0:
                logging.info("On image %d", index)
            skipped += num_skipped
            writers[index % num_shards].write(example.SerializeToString())
    logging.info("Finished writing, skipped %d annotations.", skipped)
    return skipped


def check_and_make_dir(directory: str) -> None:
    """Creates `directory` (and its parents) if it does not exist."""
    if not tf.io.gfile.isdir(directory):
        tf.io.gfile.makedirs(directory)


__all__ = ["convert_to_feature", "image_info_to_feature_dict", "read_image",
           "encode_mask_as_png", "write_tf_record_dataset", "check_and_make_dir"]
