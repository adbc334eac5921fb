"""Mask R-CNN data and losses: lite's parser and losses against TFM 2.20's
(data/tfm_maskrcnn_reference.npz, made by data/make_tfm_maskrcnn_reference.py in TFM's venv),
and create_coco_tf_record --include_masks on RLE and on bad masks (one line, exit 2, nothing
written)."""

import base64
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from lite_launcher.common.errors import ConfigError
from lite_launcher.vision.data import create_coco_tf_record, tfrecord_lib
from lite_launcher.vision.dataloaders import maskrcnn_input
from lite_launcher.vision.losses import maskrcnn_losses
from lite_launcher.vision.ops import preprocess_ops

HERE = os.path.dirname(os.path.abspath(__file__))
REF = dict(np.load(os.path.join(HERE, "data", "tfm_maskrcnn_reference.npz")))
with open(os.path.join(HERE, "data", "tfm_coco_reference.json")) as _f:
    CONVERTER = json.load(_f)["converter"]

# As make_tfm_maskrcnn_reference.BASE_ARGS / PARSERS.
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
LEVELS = ("2", "3", "4", "5")


def _record():
    """The reference's decoded record (as make_record() there)."""
    image = np.random.RandomState(11).randint(0, 256, size=(48, 64, 3)).astype(np.uint8)
    boxes = np.array([[0.10, 0.05, 0.60, 0.40], [0.30, 0.50, 0.90, 0.95],
                      [0.00, 0.00, 1.00, 1.00], [0.20, 0.42, 0.85, 0.50]], np.float32)
    y, x = np.mgrid[0:48, 0:64] + 0.5
    masks = []
    for ymin, xmin, ymax, xmax in boxes * [48, 64, 48, 64]:
        cy, cx = (ymin + ymax) / 2, (xmin + xmax) / 2
        ry, rx = (ymax - ymin) / 2, (xmax - xmin) / 2
        masks.append((((y - cy) / ry) ** 2 + ((x - cx) / rx) ** 2 <= 1.0).astype(np.float32))
    return {
        "source_id": tf.constant(b"902"), "image": tf.constant(image),
        "height": tf.constant(48, tf.int64), "width": tf.constant(64, tf.int64),
        "groundtruth_classes": tf.constant([3, 1, 2, 5], tf.int64),
        "groundtruth_is_crowd": tf.constant([False, False, True, False]),
        "groundtruth_area": tf.constant([520.0, 810.0, 3072.0, 150.0], tf.float32),
        "groundtruth_boxes": tf.constant(boxes),
        "groundtruth_instance_masks": tf.constant(np.stack(masks)),
    }


def _flatten(prefix, value, out):
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(f"{prefix}/{key}", item, out)
    else:
        out[prefix] = np.asarray(value)


def _parse(case, **overrides):
    parser = maskrcnn_input.Parser(**{**PARSERS[case], **overrides})
    image, labels = parser.parse_fn(case.startswith("train"))(_record())
    out = {}
    _flatten(f"parser/{case}", {"image": image.numpy(), **tf.nest.map_structure(
        lambda t: t.numpy(), labels)}, out)
    return out


def _flat(outputs, case, name):
    return np.concatenate([outputs[f"parser/{case}/{name}/{level}"].ravel()
                           for level in LEVELS])


# ----- parser --------------------------------------------------------------------------------

@pytest.mark.parametrize("case", sorted(PARSERS))
def test_parser_outputs_equal_tfm(case):
    got = _parse(case)
    expected = {k: v for k, v in REF.items() if k.startswith(f"parser/{case}/")}
    assert sorted(got) == sorted(expected)
    for key, want in expected.items():
        np.testing.assert_allclose(got[key], want, rtol=1e-5, atol=1e-5, err_msg=key)
    if case == "train_mask":  # the crowd is no target: 3 objects, 3 masks of 14x14
        assert list(got[f"parser/{case}/gt_classes"]) == [3, 1, 5, -1, -1, -1]
        masks = got[f"parser/{case}/gt_masks"]
        assert masks.shape == (6, 14, 14) and (masks[3:] == -1).all()
        assert 0.3 < masks[:3].mean() < 0.8  # ellipses inside grown boxes
        assert (_flat(got, case, "rpn_score_targets") == 1).sum() >= 3
    if case == "eval_mask":
        assert got[f"parser/{case}/image"].shape == (96, 96, 3)  # 60x80 padded to 32s
        assert got[f"parser/{case}/groundtruths/num_detections"] == 4


def test_rpn_sampling_keeps_the_batch_and_the_foreground_fraction():
    tf.random.set_seed(1)
    got = _parse("train_box", rpn_batch_size_per_im=16, rpn_fg_fraction=0.25)
    scores = _flat(got, "train_box", "rpn_score_targets")
    everything = _flat(REF, "train_box", "rpn_score_targets")  # TFM: all anchors sampled
    positives, negatives = scores == 1, scores == 0
    assert 0 < positives.sum() <= 4 and positives.sum() + negatives.sum() == 16
    assert (everything[positives] == 1).all() and (everything[negatives] == 0).all()
    # Box targets do not depend on the sampling.
    np.testing.assert_allclose(_flat(got, "train_box", "rpn_box_targets"),
                               _flat(REF, "train_box", "rpn_box_targets"), atol=1e-5)


def test_horizontal_flip_mirrors_image_boxes_and_masks_together():
    expected = {k: v for k, v in REF.items() if k.startswith("parser/train_mask/")}
    width = 80.0  # the scaled image's width (image_info[1, 1])
    mirrored_boxes = expected["parser/train_mask/gt_boxes"][:, [0, 3, 2, 1]] * [1, -1, 1, -1]
    mirrored_boxes[:3] += [0, width, 0, width]
    outcomes = set()
    tf.random.set_seed(5)
    for _ in range(6):
        got = _parse("train_mask", aug_rand_hflip=True)
        boxes, masks = got["parser/train_mask/gt_boxes"], got["parser/train_mask/gt_masks"]
        if np.allclose(boxes, expected["parser/train_mask/gt_boxes"], atol=1e-4):
            outcomes.add("kept")
            np.testing.assert_allclose(masks, expected["parser/train_mask/gt_masks"],
                                       atol=1e-4)
        else:
            outcomes.add("flipped")
            np.testing.assert_allclose(boxes[:3], mirrored_boxes[:3], atol=1e-4)
            np.testing.assert_allclose(masks[:3], expected["parser/train_mask/gt_masks"][
                :3, :, ::-1], atol=1e-4)
            image = got["parser/train_mask/image"]
            np.testing.assert_allclose(image[:60, :80], expected["parser/train_mask/image"][
                :60, :80][:, ::-1], atol=1e-4)
    assert outcomes == {"kept", "flipped"}


def test_vertical_flip_of_boxes_and_masks():
    image = tf.reshape(tf.range(2 * 3 * 1, dtype=tf.float32), [2, 3, 1])
    masks = tf.constant([[[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]])
    boxes = tf.constant([[0.0, 0.0, 0.5, 0.25]])
    image2, boxes2, masks2 = preprocess_ops.random_flip_with_boxes_and_masks(
        image, boxes, masks, prob=1.0, vertical=True)
    np.testing.assert_array_equal(image2.numpy()[..., 0], [[3, 4, 5], [0, 1, 2]])
    np.testing.assert_array_equal(masks2.numpy(), [[[0, 0, 0], [1, 0, 0]]])
    np.testing.assert_allclose(boxes2.numpy(), [[0.5, 0.0, 1.0, 0.25]])


def test_outer_boxes_scale_below_one_is_refused():
    with pytest.raises(ConfigError, match=r"outer_boxes_scale \(0.9\) must be >= 1.0"):
        maskrcnn_input.Parser(**PARSERS["train_mask"] | {"outer_boxes_scale": 0.9})


# ----- losses --------------------------------------------------------------------------------

def _loss_inputs():
    """The reference's fixed batch (as loss_inputs() there)."""
    rng = np.random.RandomState(5)
    batch, rois, classes, masks, mask_size = 2, 6, 5, 3, 7

    def normal(*shape):
        return rng.normal(size=shape).astype(np.float32)

    out = {}
    for level, side in (("2", 8), ("3", 4)):
        out[f"rpn_scores/{level}"] = normal(batch, side, side, 3)
        out[f"rpn_score_targets/{level}"] = rng.randint(-1, 2, size=(batch, side, side, 3)
                                                        ).astype(np.int32)
        out[f"rpn_boxes/{level}"] = normal(batch, side, side, 12)
        targets = 0.3 * normal(batch, side, side, 3, 4)
        targets[rng.uniform(size=(batch, side, side, 3)) < 0.6] = 0.0
        out[f"rpn_box_targets/{level}"] = targets.reshape(batch, side, side, 12)
    for stage in ("", "_1", "_2"):
        out[f"class_outputs{stage}"] = normal(batch, rois, classes)
        out[f"class_targets{stage}"] = rng.randint(0, classes, size=(batch, rois)).astype(
            np.int32)
        out[f"box_outputs{stage}"] = normal(batch, rois, classes * 4)
        out[f"box_targets{stage}"] = 0.5 * normal(batch, rois, 4)
    out["box_outputs_agnostic"] = normal(batch, rois, 4)
    out["mask_outputs"] = 2.0 * normal(batch, masks, mask_size, mask_size)
    out["mask_targets"] = (rng.uniform(size=(batch, masks, mask_size, mask_size)) > 0.5
                           ).astype(np.float32)
    out["mask_class_targets"] = np.array([[2, 0, 4], [1, 3, 0]], np.int32)
    out["aux_losses"] = np.array([0.25, 0.125], np.float32)
    return out


INPUTS = _loss_inputs()
T = {k: tf.constant(v) for k, v in INPUTS.items() if "/" not in k}


def _levels(name):
    return {level: tf.constant(INPUTS[f"{name}/{level}"]) for level in ("2", "3")}


LOSSES = {
    "rpn_score": lambda: maskrcnn_losses.RpnScoreLoss(256)(
        _levels("rpn_scores"), _levels("rpn_score_targets")),
    "rpn_score_per_im_6": lambda: maskrcnn_losses.RpnScoreLoss(6)(
        _levels("rpn_scores"), _levels("rpn_score_targets")),
    "rpn_box": lambda: maskrcnn_losses.RpnBoxLoss(1.0 / 9.0)(
        _levels("rpn_boxes"), _levels("rpn_box_targets")),
    "rpn_box_delta_0.5": lambda: maskrcnn_losses.RpnBoxLoss(0.5)(
        _levels("rpn_boxes"), _levels("rpn_box_targets")),
    "frcnn_class": lambda: maskrcnn_losses.FastrcnnClassLoss()(
        T["class_outputs"], T["class_targets"]),
    "frcnn_class_weighted": lambda: maskrcnn_losses.FastrcnnClassLoss()(
        T["class_outputs"], T["class_targets"], [0.5, 1.0, 2.0, 1.5, 1.0]),
    "frcnn_class_binary": lambda: maskrcnn_losses.FastrcnnClassLoss(
        use_binary_cross_entropy=True)(T["class_outputs"], T["class_targets"],
                                       [0.5, 1.0, 2.0, 1.5, 1.0]),
    "frcnn_class_top_k_0.5": lambda: maskrcnn_losses.FastrcnnClassLoss(top_k_percent=0.5)(
        T["class_outputs"], T["class_targets"]),
    "frcnn_box": lambda: maskrcnn_losses.FastrcnnBoxLoss(1.0)(
        T["box_outputs"], T["class_targets"], T["box_targets"]),
    "frcnn_box_delta_0.2": lambda: maskrcnn_losses.FastrcnnBoxLoss(0.2)(
        T["box_outputs"], T["class_targets"], T["box_targets"]),
    "frcnn_box_agnostic": lambda: maskrcnn_losses.FastrcnnBoxLoss(
        1.0, class_agnostic_bbox_pred=True)(T["box_outputs_agnostic"], T["class_targets"],
                                            T["box_targets"]),
    "mask": lambda: maskrcnn_losses.MaskrcnnLoss()(
        T["mask_outputs"], T["mask_targets"], T["mask_class_targets"]),
}


def test_each_loss_equals_tfms():
    for name, loss in LOSSES.items():
        expected = REF[f"loss/{name}"]
        assert float(loss()) == pytest.approx(float(expected), rel=1e-6, abs=1e-6), name
    assert REF["loss/frcnn_class_weighted"] != REF["loss/frcnn_class"]  # the options matter
    assert REF["loss/frcnn_box_agnostic"] != REF["loss/frcnn_box"]


@pytest.mark.parametrize("run, kwargs", [
    ("default", {}),
    ("cascade", dict(cascade_iou_thresholds=[0.6, 0.7], rpn_box_weight=2.0,
                     frcnn_class_weight=0.5, mask_weight=3.0, loss_weight=0.5,
                     frcnn_huber_loss_delta=0.5, frcnn_class_use_binary_cross_entropy=True)),
])
def test_task_losses_equal_tfms_build_losses(run, kwargs):
    outputs = dict(T, rpn_scores=_levels("rpn_scores"), rpn_boxes=_levels("rpn_boxes"))
    labels = {"rpn_score_targets": _levels("rpn_score_targets"),
              "rpn_box_targets": _levels("rpn_box_targets")}
    got = maskrcnn_losses.maskrcnn_losses(outputs, labels, aux_losses=list(INPUTS[
        "aux_losses"]), **kwargs)
    expected = {k.split("/")[-1]: v for k, v in REF.items()
                if k.startswith(f"loss/task_{run}/")}
    assert sorted(got) == sorted(expected)
    for key, value in expected.items():
        assert float(got[key]) == pytest.approx(float(value), rel=1e-6), key


def test_disallowed_mask_classes_do_not_train():
    kept = maskrcnn_losses.zero_out_disallowed_class_ids(T["mask_class_targets"], [2, 3])
    np.testing.assert_array_equal(kept.numpy(), [[2, 0, 0], [0, 3, 0]])


def test_class_weights_of_the_wrong_length_are_named():
    with pytest.raises(ValueError, match="class_weights has 2 values; give one per class"):
        maskrcnn_losses.FastrcnnClassLoss()(T["class_outputs"], T["class_targets"], [1.0, 1.0])


# ----- converter -----------------------------------------------------------------------------

def _write_coco(tmp_path, annotations=None):
    image_dir = tmp_path / "images"
    image_dir.mkdir()
    for name, data in CONVERTER["images"].items():
        (image_dir / name).write_bytes(base64.b64decode(data))
    coco = dict(CONVERTER["object_annotations"])
    if annotations is not None:
        coco["annotations"] = annotations
    instances = tmp_path / "instances.json"
    instances.write_text(json.dumps(coco))
    return image_dir, instances


def _convert(tmp_path, annotations=None):
    image_dir, instances = _write_coco(tmp_path, annotations)
    (tmp_path / "out").mkdir()
    code = create_coco_tf_record.main([
        f"--image_dir={image_dir}", f"--object_annotations_file={instances}",
        f"--output_file_prefix={tmp_path / 'out' / 'coco'}", "--num_shards=2",
        "--include_masks"])
    return code, sorted(os.listdir(tmp_path / "out"))


def _record_masks(path, source_id):
    for raw in tf.data.TFRecordDataset(sorted(str(p) for p in path.glob("coco-*"))):
        example = tf.train.Example.FromString(raw.numpy())
        if example.features.feature["image/source_id"].bytes_list.value[0] == source_id:
            return [tf.io.decode_png(m).numpy()[..., 0]
                    for m in example.features.feature["image/object/mask"].bytes_list.value]
    raise AssertionError(f"no record {source_id}")


def test_compressed_and_non_crowd_rle_give_tfms_mask(tmp_path):
    from pycocotools import mask as mask_api  # pylint: disable=import-outside-toplevel
    annotations = [dict(a) for a in CONVERTER["object_annotations"]["annotations"]]
    crowd = annotations[4]  # image 2's crowd: uncompressed RLE in TFM's reference
    compressed = mask_api.frPyObjects(crowd["segmentation"], 10, 10)
    annotations[4] = dict(crowd, segmentation={"size": [10, 10],
                                               "counts": compressed["counts"].decode()})
    annotations.append(dict(crowd, id=7, iscrowd=0))  # RLE on a non-crowd object
    code, files = _convert(tmp_path, annotations)
    assert code == 0 and len(files) == 2
    masks = _record_masks(tmp_path / "out", b"2")
    tfm_shards = CONVERTER["shards"]["include_masks=True"]
    tfm_masks = [rec["image/object/mask"][1] for shard in tfm_shards.values() for rec in shard
                 if rec["image/source_id"][1] == [base64.b64encode(b"2").decode()]][0]
    expected = tf.io.decode_png(base64.b64decode(tfm_masks[0])).numpy()[..., 0]
    assert expected.sum() == 30  # the reference crowd's 30 pixels
    np.testing.assert_array_equal(masks[0], expected)
    np.testing.assert_array_equal(masks[2], expected)


BAD_MASKS = {
    "missing": (lambda a: {k: v for k, v in a.items() if k != "segmentation"},
                "annotation 1 of image 'img1.png' (id 1) has no 'segmentation'"),
    "rle_size": (lambda a: dict(a, segmentation={"size": [10, 10], "counts": [0, 100]}),
                 "annotation 1 of image 'img1.png' (id 1) has an RLE mask of size 10x10 but "
                 "the image is 12x16"),
    "polygon_outside": (lambda a: dict(a, segmentation=[[2.0, 1.0, 30.0, 1.0, 10.0, 7.5]]),
                        "annotation 1 of image 'img1.png' (id 1) has a polygon outside the "
                        "12x16 image (x 2..30, y 1..7.5)"),
}


@pytest.mark.parametrize("case", sorted(BAD_MASKS))
def test_a_bad_mask_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, case):
    change, message = BAD_MASKS[case]
    annotations = [dict(a) for a in CONVERTER["object_annotations"]["annotations"]]
    annotations[0] = change(annotations[0])
    code, files = _convert(tmp_path, annotations)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and files == []
    assert err.startswith("create_coco_tf_record: error: --include_masks: " + message), err


def test_an_annotation_whose_box_is_skipped_needs_no_mask(tmp_path):
    annotations = [dict(a) for a in CONVERTER["object_annotations"]["annotations"]]
    annotations[2].pop("segmentation")  # its box is empty: TFM skips the annotation
    code, files = _convert(tmp_path, annotations)
    assert code == 0 and len(files) == 2
    assert len(_record_masks(tmp_path / "out", b"1")) == 2


# ----- mask evaluation from records ------------------------------------------------------------

def _example():
    """The reference's make_example(): _record() as a TF Example with PNG image and masks."""
    record = {k: v.numpy() for k, v in _record().items()}
    feature = tfrecord_lib.convert_to_feature
    boxes = record["groundtruth_boxes"]
    features = {
        "image/encoded": feature([tf.io.encode_png(record["image"]).numpy()]),
        "image/height": feature([48]), "image/width": feature([64]),
        "image/source_id": feature([record["source_id"]]),
        "image/object/class/label": feature(record["groundtruth_classes"].tolist()),
        "image/object/is_crowd": feature([int(c) for c in record["groundtruth_is_crowd"]]),
        "image/object/area": feature(record["groundtruth_area"].tolist()),
        "image/object/mask": feature([tf.io.encode_png(m[..., None].astype(np.uint8)).numpy()
                                      for m in record["groundtruth_instance_masks"]]),
    }
    for i, key in enumerate(("ymin", "xmin", "ymax", "xmax")):
        features[f"image/object/bbox/{key}"] = feature(boxes[:, i].tolist())
    return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()


def test_annotation_file_from_records_and_mask_numbers_equal_tfms(tmp_path):
    pytest.importorskip("pycocotools")
    # pylint: disable=import-outside-toplevel
    from lite_launcher.vision.dataloaders import coco_groundtruth_generator
    from lite_launcher.vision.evaluation import coco_evaluator
    records = tmp_path / "eval.tfrecord"
    with tf.io.TFRecordWriter(str(records)) as writer:
        writer.write(_example())
    annotation_file = tmp_path / "annotation.json"
    coco_groundtruth_generator.scan_and_generator_annotation_file(
        str(records), "tfrecord", 1, True, str(annotation_file))
    lite, tfm = json.loads(annotation_file.read_text()), json.loads(str(REF["annotation/json"]))
    assert lite["images"] == tfm["images"] == [{"id": 902, "height": 48, "width": 64}]
    assert sorted(c["id"] for c in lite["categories"]) == [1, 2, 3, 5]
    assert sorted(c["id"] for c in tfm["categories"]) == [1, 2, 3, 5]
    assert len(lite["annotations"]) == len(tfm["annotations"]) == 4
    for ours, theirs in zip(lite["annotations"], tfm["annotations"]):
        assert ours.pop("bbox") == pytest.approx(theirs.pop("bbox"), abs=1e-5)
        assert ours == theirs  # segmentation RLE, area, crowd, class, ids

    evaluator = coco_evaluator.COCOEvaluator(annotation_file=str(annotation_file),
                                             include_mask=True)
    detections = {k.split("/")[-1]: v for k, v in REF.items()
                  if k.startswith("annotation/detections/")}
    evaluator.update_state(None, detections)
    metrics = evaluator.result()
    expected = {k.split("/")[-1]: float(v) for k, v in REF.items()
                if k.startswith("annotation/metric/")}
    assert sorted(metrics) == sorted(expected)
    for key, value in expected.items():
        assert float(metrics[key]) == pytest.approx(value, abs=1e-7), key
    assert expected["mask_AP75"] != expected["AP75"]  # the masks are scored, not the boxes
