"""Writes tfm_retinanet_input_reference.npz: TFM 2.20's RetinaNet parser
(official.vision.dataloaders.retinanet_input.Parser) on one decoded record this script defines.

Run once with TFM 2.20 (tf-models-official 2.20, tensorflow 2.20, tf_keras):

    /work/tfm_venv/bin/python tests/vision/data/make_tfm_retinanet_input_reference.py

The record (a decoded dict, as `TfExampleDecoder.decode` returns it) is rebuilt by
tests/vision/test_retinanet_input.py from `make_record()`'s recipe, kept in step by hand: a
48x64 uint8 image from NumPy's RandomState(7), four boxes (the third a crowd). Parsed for
evaluation and for training with no random augmentation (no flip, no jitter: deterministic),
both with crowd skipping on. Keys: `<mode>/<output path>`, e.g. `eval/cls_targets/3`,
`eval/groundtruths/boxes`, `train/image`.
"""

import os

import numpy as np
import tensorflow as tf

from official.vision.dataloaders import retinanet_input

HERE = os.path.dirname(os.path.abspath(__file__))

PARSER_ARGS = dict(output_size=[40, 56], min_level=3, max_level=5, num_scales=2,
                   aspect_ratios=[0.5, 1.0, 2.0], anchor_size=3.0, match_threshold=0.5,
                   unmatched_threshold=0.4, aug_rand_hflip=False, aug_scale_min=1.0,
                   aug_scale_max=1.0, skip_crowd_during_training=True, max_num_instances=6,
                   dtype="float32", pad=True, keep_aspect_ratio=True)


def make_record():
  """The decoded record (NumPy values)."""
  image = np.random.RandomState(7).randint(0, 256, size=(48, 64, 3)).astype(np.uint8)
  boxes = np.array([[0.10, 0.05, 0.60, 0.40], [0.30, 0.50, 0.90, 0.95],
                    [0.00, 0.00, 1.00, 1.00], [0.55, 0.20, 0.80, 0.45]], np.float32)
  return {
      "source_id": np.bytes_(b"417"),
      "image": image,
      "height": np.int64(48),
      "width": np.int64(64),
      "groundtruth_classes": np.array([3, 1, 2, 5], np.int64),
      "groundtruth_is_crowd": np.array([False, False, True, False]),
      "groundtruth_area": np.array([520.0, 810.0, 3072.0, 150.0], np.float32),
      "groundtruth_boxes": boxes,
  }


def flatten(prefix, value, out):
  if isinstance(value, dict):
    for key, item in value.items():
      flatten(f"{prefix}/{key}", item, out)
  else:
    out[prefix] = np.asarray(value)


def main():
  parser = retinanet_input.Parser(**PARSER_ARGS)
  record = {k: tf.constant(v) for k, v in make_record().items()}
  out = {}
  for mode, is_training in (("eval", False), ("train", True)):
    image, labels = parser.parse_fn(is_training)(dict(record))
    flatten(f"{mode}/image", image.numpy(), out)
    flatten(mode, tf.nest.map_structure(lambda t: t.numpy(), labels), out)
  path = os.path.join(HERE, "tfm_retinanet_input_reference.npz")
  np.savez_compressed(path, **out)
  print(f"wrote {path}: {len(out)} arrays")


if __name__ == "__main__":
  main()
