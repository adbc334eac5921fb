"""lite's COCO evaluator against TFM 2.20's on the same detections and ground truths
(data/tfm_coco_reference.json, made by data/make_tfm_coco_reference.py in TFM's venv)."""

import base64
import json
import os
import sys

import numpy as np
import pytest

from lite_launcher.common.errors import ConfigError
from lite_launcher.vision.evaluation import coco_evaluator, coco_utils

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from missing_module import block_import  # noqa: E402

pytest.importorskip("pycocotools")

REFERENCE = os.path.join(os.path.dirname(__file__), "data", "tfm_coco_reference.json")
with open(REFERENCE) as _f:
    REF = json.load(_f)
EVAL = REF["evaluator"]


def _batches(include_mask):
    """The reference's batches as NumPy dicts (GT masks as PNG bytes)."""
    batches = []
    for batch in EVAL["inputs"]:
        gt = {k: (np.array([[base64.b64decode(m) for m in row] for row in v], dtype=object)
                  if k == "masks" else np.asarray(v))
              for k, v in batch["groundtruths"].items()}
        pred = {k: np.asarray(v) for k, v in batch["predictions"].items()}
        for key in ("detection_boxes", "detection_scores", "image_info", "detection_masks"):
            pred[key] = pred[key].astype(np.float32)
        for key in ("boxes", "areas"):
            gt[key] = gt[key].astype(np.float32)
        if not include_mask:
            gt.pop("masks")
            pred.pop("detection_masks")
        batches.append((gt, pred))
    return batches


def _evaluate(batches, as_tensors=False, **kwargs):
    evaluator = coco_evaluator.COCOEvaluator(**kwargs)
    for gt, pred in batches:
        if as_tensors:
            import tensorflow as tf  # pylint: disable=import-outside-toplevel
            gt = {k: tf.constant(v) for k, v in gt.items()}
            pred = {k: tf.constant(v) for k, v in pred.items()}
        evaluator.update_state(gt, pred)
    return evaluator.result()


def _assert_equal_numbers(lite, tfm):
    assert sorted(lite) == sorted(tfm)
    for key, value in tfm.items():
        assert float(lite[key]) == pytest.approx(value, abs=1e-7), key


def test_numbers_from_accumulated_groundtruths_equal_tfms_with_per_category():
    lite = _evaluate(_batches(False), as_tensors=True, annotation_file=None,
                     include_mask=False, per_category_metrics=True)
    tfm = EVAL["runs"]["groundtruths_per_category"]
    _assert_equal_numbers(lite, tfm)
    # Sanity of the fixture: crowds, empty image and wrong classes keep AP off 0 and 1.
    assert 0.5 < tfm["AP"] < 0.8 and tfm["Precision mAP ByCategory/2"] != tfm["AP"]


def test_groundtruth_counts_shaped_as_the_parser_gives_them_give_the_same_numbers():
    """The RetinaNet parser's `num_detections` is TFM's `tf.shape(classes)`: [B, 1] once
    batched (TFM's tutorial, annotation_file '', failed here on it)."""
    batches = _batches(False)
    for gt, _ in batches:
        gt["num_detections"] = gt["num_detections"].reshape([-1, 1])
    lite = _evaluate(batches, as_tensors=True, annotation_file=None, include_mask=False,
                     per_category_metrics=True)
    _assert_equal_numbers(lite, EVAL["runs"]["groundtruths_per_category"])


def test_numbers_from_an_annotation_file_equal_tfms_and_name_categories(tmp_path):
    path = tmp_path / "instances.json"
    path.write_text(json.dumps(EVAL["annotation_json"]))
    lite = _evaluate(_batches(False), annotation_file=str(path), include_mask=False,
                     per_category_metrics=True)
    _assert_equal_numbers(lite, EVAL["runs"]["annotation_file_per_category"])
    assert "Precision mAP ByCategory/circle" in lite


def test_max_num_eval_detections_names_and_limits_recall_as_tfm():
    lite = _evaluate(_batches(False), annotation_file=None, include_mask=False,
                     max_num_eval_detections=4)
    _assert_equal_numbers(lite, EVAL["runs"]["max_detections_4"])
    assert lite["AP"] == -1.0  # pycocotools reads AP at maxDets 100 only


def test_mask_numbers_equal_tfms():
    lite = _evaluate(_batches(True), annotation_file=None, include_mask=True,
                     per_category_metrics=True)
    _assert_equal_numbers(lite, EVAL["runs"]["masks_per_category"])
    assert "mask_AP" in lite and "mask Precision mAP ByCategory/3" in lite


def test_result_resets_the_states():
    evaluator = coco_evaluator.COCOEvaluator(annotation_file=None, include_mask=False)
    gt, pred = _batches(False)[0]
    evaluator.update_state(gt, pred)
    first = evaluator.result()
    evaluator.update_state(gt, pred)
    assert evaluator.result()["AP"] == first["AP"]  # not the two copies together


@pytest.mark.parametrize("case", REF["paste"], ids=lambda c: str(c["box"]))
def test_mask_paste_equals_tfms_opencv_paste(case):
    y, x = np.mgrid[0:8, 0:8] + 0.5  # the script's detection_mask(k)
    r = np.sqrt(((y - 4) / 4) ** 2 + ((x - 4) / (4 - case["k"] * 0.4)) ** 2)
    mask = np.clip(1.3 - r, 0.0, 1.0).astype(np.float32)
    pasted = coco_utils.paste_instance_masks(mask[None], np.asarray([case["box"]]),
                                             case["height"], case["width"])[0]
    size = case["height"] * case["width"]
    expected = np.unpackbits(np.frombuffer(base64.b64decode(case["pasted_packbits"]),
                                           np.uint8))[:size].reshape(pasted.shape)
    np.testing.assert_array_equal(pasted, expected)
    assert expected.any() or case["box"][2] < 3


def test_missing_key_is_named():
    gt, pred = _batches(False)[0]
    pred.pop("image_info")
    evaluator = coco_evaluator.COCOEvaluator(annotation_file=None, include_mask=False)
    with pytest.raises(ValueError, match="`image_info` in predictions"):
        evaluator.update_state(gt, pred)


def test_missing_annotation_file_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="annotation_file .*nope.json' does not exist"):
        coco_evaluator.COCOEvaluator(annotation_file=str(tmp_path / "nope.json"),
                                     include_mask=False)


def test_without_pycocotools_the_evaluator_names_the_extra(monkeypatch):
    block_import(monkeypatch, "pycocotools")
    with pytest.raises(coco_utils.MissingExtraError) as error:
        coco_evaluator.COCOEvaluator(annotation_file=None, include_mask=False)
    message = str(error.value)
    assert "\n" not in message and "pip install 'lite_launcher[detection]'" in message
    assert isinstance(error.value, ConfigError)  # the driver's one line, exit code 2
