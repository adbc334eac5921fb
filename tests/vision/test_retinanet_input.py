"""lite's RetinaNet parser against TFM 2.20's on one fixed decoded record
(data/tfm_retinanet_input_reference.npz, made by data/make_tfm_retinanet_input_reference.py in
TFM's venv), and its one-line refusals."""

import os
import sys

import numpy as np
import pytest
import tensorflow as tf

from lite_launcher.common import errors
from lite_launcher.common.errors import BAD_RECORD_MARKER, ConfigError
from lite_launcher.vision.dataloaders import retinanet_input
from lite_launcher.vision.ops import augment, box_ops, preprocess_ops

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "data"))
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


# ----- aug_type ssd_random_crop: TFM's SSD crop (data/make_tfm_ssd_crop_reference.py) ------

import make_tfm_ssd_crop_reference as ssd  # noqa: E402  pylint: disable=wrong-import-position

SSD_REF = dict(np.load(os.path.join(os.path.dirname(REFERENCE), "tfm_ssd_crop_reference.npz")))


def test_ssd_crop_box_pieces_equal_tfm():
    _, boxes, crop_box = ssd.inputs()
    np.testing.assert_allclose(box_ops.bbox_intersection_over_area(boxes[None], crop_box),
                               SSD_REF["ioa"], atol=1e-6)
    np.testing.assert_allclose(augment.filter_boxes_by_ioa(boxes, crop_box,
                                                           ssd.MIN_BOX_OVERLAP),
                               SSD_REF["filtered"], atol=1e-6)
    np.testing.assert_allclose(
        augment.crop_normalized_boxes(boxes, tf.constant(ssd.IMAGE_SIZE),
                                      tf.constant(ssd.CROP_SIZE), tf.constant(ssd.CROP_OFFSET)),
        SSD_REF["cropped"], atol=1e-6)
    # Only box 1 overlaps the crop by >= 0.4 of its area.
    assert SSD_REF["filtered"][:, 0].tolist() == pytest.approx([0, 0.3, 0, 0, 0])


def _find_crop(image, crop):
    """(top, left) where `crop` lies in `image`."""
    h, w = crop.shape[:2]
    for top in range(image.shape[0] - h + 1):
        for left in range(image.shape[1] - w + 1):
            if np.array_equal(image[top:top + h, left:left + w], crop):
                return top, left
    raise AssertionError(f"the {h}x{w} output is no crop of the image")


def test_ssd_random_crop_crops_the_image_and_moves_the_boxes_with_it():
    """Each drawn crop (TF's sample_distorted_bounding_box: its draws differ between TF
    versions, so not compared with TFM's) is a window of the image covering >= 0.5 of some
    box, and the boxes are TFM's pieces applied to that window."""
    image, boxes, _ = ssd.inputs()
    crop = augment.SSDRandomCrop(
        params=[dict(min_object_covered=0.5, min_box_overlap=0.6, prob_to_apply=1.0)])
    height, width = ssd.IMAGE_SIZE
    clipped = np.clip(boxes, 0, 1)
    shapes = set()
    for seed in range(6):
        tf.random.set_seed(seed)
        new_image, new_boxes = (t.numpy() for t in crop.distort_with_boxes(
            tf.constant(image), tf.constant(boxes)))
        top, left = _find_crop(image, new_image)
        h, w = new_image.shape[:2]
        shapes.add((h, w))
        window = np.array([[[top / height, left / width, (top + h) / height,
                             (left + w) / width]]], np.float32)
        ioa = box_ops.bbox_intersection_over_area(clipped[None], window).numpy()[0, :, 0]
        # TF's kernel measures min_object_covered on the boxes cut to whole pixels.
        pixel_boxes = np.floor(clipped * [height, width, height, width]).astype(np.float32)
        pixel_window = np.array([[[top, left, top + h, left + w]]], np.float32)
        covered = box_ops.bbox_intersection_over_area(pixel_boxes[None], pixel_window)
        assert covered.numpy().max() >= 0.5, (ioa, covered)
        kept = clipped * (ioa >= 0.6)[:, None]
        want = augment.crop_normalized_boxes(kept, tf.constant(ssd.IMAGE_SIZE),
                                             tf.constant([h, w]), tf.constant([top, left]))
        np.testing.assert_allclose(new_boxes, want, atol=1e-6)
    assert len(shapes) >= 3  # the seeds do draw different crops
    never = augment.SSDRandomCrop(params=[dict(min_object_covered=0.5, min_box_overlap=0.6,
                                               prob_to_apply=0.0)])
    same_image, same_boxes = never.distort_with_boxes(tf.constant(image), tf.constant(boxes))
    np.testing.assert_array_equal(same_image, image)
    np.testing.assert_array_equal(same_boxes, boxes)  # not even clipped, as TFM's


def _parse_recording_the_augmenter(monkeypatch, augmenter_class, aug_type, seed):
    """(image, labels) of the training parser with `aug_type` on `_record()` under `seed`, and
    the (image, boxes) its augmenter (of `augmenter_class`) handed on."""
    handed_on = []
    distort = augmenter_class.distort_with_boxes

    def recorded(self, image, boxes):
        handed_on.append(distort(self, image, boxes))
        return handed_on[-1]

    monkeypatch.setattr(augmenter_class, "distort_with_boxes", recorded)
    parser = retinanet_input.Parser(**PARSER_ARGS, num_classes=6, aug_type=aug_type)
    tf.random.set_seed(seed)
    image, labels = parser.parse_fn(True)(_record())
    (augmented_image, augmented_boxes), = handed_on
    assert augmented_boxes.shape == (3, 4)  # after the crowd box is skipped
    return image, labels, augmented_image, augmented_boxes


def _assert_plain_parser_gives(image, labels, augmented_image, augmented_boxes):
    """As TFM, the augmenter runs after crowds are skipped and before normalising, flipping and
    resizing: the parser's output is the plain parser's on the augmented record."""
    record, keep = _record(), [0, 1, 3]
    plain = retinanet_input.Parser(**PARSER_ARGS, num_classes=6)
    want_image, want_labels = plain.parse_fn(True)(dict(
        record, image=augmented_image, groundtruth_boxes=augmented_boxes,
        groundtruth_classes=tf.gather(record["groundtruth_classes"], keep),
        groundtruth_is_crowd=tf.zeros([3], tf.bool)))
    np.testing.assert_allclose(image, want_image, atol=1e-6)
    for key in ("cls_targets", "box_targets", "image_info"):
        tf.nest.map_structure(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6),
                              labels[key], want_labels[key])


def test_parser_with_ssd_random_crop_trains_on_the_cropped_boxes(monkeypatch):
    from lite_launcher.vision.configs.common import Augmentation

    aug_type = Augmentation(type="ssd_random_crop")
    aug_type.ssd_random_crop.override({"ssd_random_crop_params": [
        {"min_object_covered": 0.5, "min_box_overlap": 0.5, "prob_to_apply": 1.0}]})
    image, labels, crop_image, crop_boxes = _parse_recording_the_augmenter(
        monkeypatch, augment.SSDRandomCrop, aug_type, seed=3)
    assert crop_image.shape[:2] != (48, 64)
    _assert_plain_parser_gives(image, labels, crop_image, crop_boxes)


# ----- aug_type autoaug / randaug: TFM's box-aware policies (ops: test_box_augment.py) -----

@pytest.mark.parametrize("kind", ["autoaug", "randaug"])
def test_parser_with_box_aware_policies_keeps_valid_boxes_and_shapes(monkeypatch, kind):
    """AutoAugment 'detection_v0' / RandAugment.build_for_detection in the training parser:
    the boxes it hands on stay in [0, 1] and ordered, one per instance, the image keeps its
    shape and dtype, and over a few draws both the image and the boxes change."""
    from lite_launcher.vision.configs.common import Augmentation

    aug_type = Augmentation(type=kind)
    aug_type.autoaug.augmentation_name = "detection_v0"
    aug_type.randaug.override({"num_layers": 2, "magnitude": 8, "translate_const": 12})
    record = _record()
    original_boxes = record["groundtruth_boxes"].numpy()[[0, 1, 3]]
    changed_image = moved_boxes = False
    for seed in range(4):
        image, labels, augmented_image, boxes = _parse_recording_the_augmenter(
            monkeypatch, augment.AutoAugment if kind == "autoaug" else augment.RandAugment,
            aug_type, seed)
        monkeypatch.undo()
        boxes = boxes.numpy()
        assert augmented_image.shape == (48, 64, 3) and augmented_image.dtype == tf.uint8
        assert image.shape == (64, 64, 3)
        assert ((boxes >= 0) & (boxes <= 1)).all()
        assert (boxes[:, :2] <= boxes[:, 2:]).all()
        changed_image |= not np.array_equal(augmented_image, record["image"])
        moved_boxes |= not np.allclose(boxes, original_boxes, atol=1e-6)
        if seed == 0:
            _assert_plain_parser_gives(image, labels, augmented_image, boxes)
    assert changed_image and moved_boxes


def test_retinanet_config_accepts_every_aug_type_and_names_a_bad_policy():
    import lite_launcher as ll

    config = ll.get_exp_config("retinanet_resnetfpn_coco")
    for kind in ("ssd_random_crop", "autoaug", "randaug"):
        config.task.train_data.override({"parser": {"aug_type": {"type": kind}}})
        config.validate()
    aug_type = config.task.train_data.parser.aug_type
    aug_type.override({"type": "autoaug", "autoaug": {"augmentation_name": "detection_v1"}})
    with pytest.raises(ValueError, match="augmentation_name 'detection_v1' is unknown"):
        retinanet_input.Parser(**PARSER_ARGS, aug_type=aug_type)
