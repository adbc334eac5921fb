"""lite's RetinaNet parser against TFM 2.20's on one fixed decoded record
(data/tfm_retinanet_input_reference.npz, made by data/make_tfm_retinanet_input_reference.py in
TFM's venv), and its one-line refusals."""

import os

import numpy as np
import pytest
import tensorflow as tf

from lite_launcher import errors
from lite_launcher.errors import BAD_RECORD_MARKER, ConfigError
from lite_launcher.vision.dataloaders import retinanet_input
from lite_launcher.vision.ops import preprocess_ops

REFERENCE = os.path.join(os.path.dirname(__file__), "data",
                         "tfm_retinanet_input_reference.npz")
REF = dict(np.load(REFERENCE))

# As make_tfm_retinanet_input_reference.PARSER_ARGS.
PARSER_ARGS = dict(output_size=[40, 56], min_level=3, max_level=5, num_scales=2,
                   aspect_ratios=[0.5, 1.0, 2.0], anchor_size=3.0, match_threshold=0.5,
                   unmatched_threshold=0.4, aug_rand_hflip=False, aug_scale_min=1.0,
                   aug_scale_max=1.0, skip_crowd_during_training=True, max_num_instances=6,
                   dtype="float32", pad=True, keep_aspect_ratio=True)


def _record(classes=(3, 1, 2, 5)):
    """The reference's decoded record (as make_record() there)."""
    image = np.random.RandomState(7).randint(0, 256, size=(48, 64, 3)).astype(np.uint8)
    boxes = np.array([[0.10, 0.05, 0.60, 0.40], [0.30, 0.50, 0.90, 0.95],
                      [0.00, 0.00, 1.00, 1.00], [0.55, 0.20, 0.80, 0.45]], np.float32)
    return {
        "source_id": tf.constant(b"417"), "image": tf.constant(image),
        "height": tf.constant(48, tf.int64), "width": tf.constant(64, tf.int64),
        "groundtruth_classes": tf.constant(classes, tf.int64),
        "groundtruth_is_crowd": tf.constant([False, False, True, False]),
        "groundtruth_area": tf.constant([520.0, 810.0, 3072.0, 150.0], tf.float32),
        "groundtruth_boxes": tf.constant(boxes),
    }


def _flatten(prefix, value, out):
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(f"{prefix}/{key}", item, out)
    else:
        out[prefix] = np.asarray(value)


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_parser_outputs_equal_tfm(mode):
    parser = retinanet_input.Parser(**PARSER_ARGS, num_classes=6)
    image, labels = parser.parse_fn(mode == "train")(_record())
    got = {f"{mode}/image": image.numpy()}
    _flatten(mode, tf.nest.map_structure(lambda t: t.numpy(), labels), got)
    expected = {k: v for k, v in REF.items() if k.startswith(mode + "/")}
    assert sorted(got) == sorted(expected)
    for key, want in expected.items():
        np.testing.assert_allclose(got[key], want, rtol=1e-5, atol=1e-5, err_msg=key)
    if mode == "train":  # the crowd box (class 2) is no target; the other three are
        classes = np.concatenate([got[f"train/cls_targets/{l}"].ravel() for l in (3, 4, 5)])
        assert set(classes[classes >= 0]) == {1, 3, 5}
    else:
        assert got["eval/groundtruths/source_id"] == 417
        assert got["eval/image"].shape == (64, 64, 3)  # 40x56 padded to multiples of 32


def test_flip_mirrors_boxes_with_image():
    tf.random.set_seed(3)
    image = tf.reshape(tf.range(2 * 4 * 3, dtype=tf.float32), [2, 4, 3])
    boxes = tf.constant([[0.0, 0.1, 0.5, 0.3]])
    flips = []
    for _ in range(12):
        flipped, flipped_boxes = preprocess_ops.random_horizontal_flip_with_boxes(image, boxes)
        mirrored = bool(np.array_equal(flipped.numpy(), image.numpy()[:, ::-1]))
        np.testing.assert_allclose(flipped_boxes.numpy(),
                                   [[0.0, 0.7, 0.5, 0.9]] if mirrored else boxes.numpy(),
                                   atol=1e-6)
        flips.append(mirrored)
    assert any(flips) and not all(flips)


def test_padding_helpers():
    assert preprocess_ops.compute_padded_size([40, 56], 32) == [64, 64]
    assert preprocess_ops.compute_padded_size([640, 640], 128) == [640, 640]
    padded = preprocess_ops.clip_or_pad_to_fixed_size(tf.constant([[1, 2], [3, 4]]), 3, -1)
    np.testing.assert_array_equal(padded.numpy(), [[1, 2], [3, 4], [-1, -1]])
    cut = preprocess_ops.clip_or_pad_to_fixed_size(tf.constant([5, 6, 7]), 2)
    np.testing.assert_array_equal(cut.numpy(), [5, 6])


def test_class_id_beyond_num_classes_names_the_record():
    parser = retinanet_input.Parser(**PARSER_ARGS, num_classes=4)
    dataset = tf.data.Dataset.from_tensors(_record()).map(parser.parse_eval_data)
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        next(iter(dataset))
    # What lite-train prints (exit code 2): one line naming the record and the fix.
    line = str(errors.input_record_error(str(info.value)))
    assert line.startswith(BAD_RECORD_MARKER) and "\n" not in line
    assert "record 417 has class ids 5 in image/object/class/label, outside 0 .. 3" in line
    assert "num_classes 4" in line


def test_aug_type_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="aug_type 'randaug'.*not supported"):
        retinanet_input.Parser(**PARSER_ARGS, aug_type=type("A", (), {"type": "randaug"})())
