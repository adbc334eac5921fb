"""TFM-written Mask R-CNN / Cascade R-CNN checkpoints load into lite's MaskRCNNTask: RPN
outputs, class and box outputs, post-NMS detections and masks equal TFM's on a fixed image;
'backbone' / 'decoder' read only their part; the task's serving function, and `lite-export`
(release), serve TFM's detections and masks.

The checkpoints and TFM's outputs on them come from TFM 2.20 itself
(data/make_tfm_maskrcnn_checkpoints.py): TFM's maskrcnn_resnetfpn_coco shrunk (ResNet-50 at
1/16 width, 3 classes, 128x128) and a cascade variant, every variable random, saved as TFM's
Trainer saves.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import yaml

import lite_launcher as ll

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data", "tfm_checkpoints", "maskrcnn")
if not os.path.exists(os.path.join(DATA, "index.json")):
    pytest.skip("no TFM Mask R-CNN checkpoints (run data/make_tfm_maskrcnn_checkpoints.py)",
                allow_module_level=True)
with open(os.path.join(DATA, "index.json")) as _f:
    INDEX = json.load(_f)
MODELS = sorted(INDEX["models"])
LEVELS = ["2", "3", "4", "5", "6"]


def params_for(name, **task):
    entry = INDEX["models"][name]
    params = ll.get_exp_config(entry["experiment"])
    params.task.model.override(entry["model"], is_strict=True)
    params.task.override(task, is_strict=True)
    return params


def reference(name):
    return np.load(os.path.join(DATA, name, "reference.npz"))


def relative_error(actual, expected):
    return np.abs(np.asarray(actual) - expected).max() / np.abs(expected).mean()


def run(model, ref):
    return model(ref["images"], image_shape=ref["image_shape"], training=False)


def assert_detections_equal(outputs, ref, box_atol=1e-3):
    """Counts and classes exact; scores within 1e-4, boxes (pixels) within `box_atol`, masks
    (probabilities) within 1e-4, of the first `num_detections` rows."""
    count = int(ref["num_detections"][0])
    assert count > 1
    assert int(np.asarray(outputs["num_detections"])[0]) == count
    np.testing.assert_array_equal(
        np.asarray(outputs["detection_classes"])[0, :count].astype(np.int64),
        ref["detection_classes"][0, :count].astype(np.int64))
    np.testing.assert_allclose(np.asarray(outputs["detection_scores"])[0, :count],
                               ref["detection_scores"][0, :count], atol=1e-4)
    np.testing.assert_allclose(np.asarray(outputs["detection_boxes"])[0, :count],
                               ref["detection_boxes"][0, :count], atol=box_atol)
    np.testing.assert_allclose(np.asarray(outputs["detection_masks"])[0, :count],
                               ref["detection_masks"][0, :count], atol=1e-4)


@pytest.fixture(scope="module", params=MODELS)
def restored(request):
    """(name, task, model restored with init_checkpoint_modules 'all', its outputs before)."""
    name = request.param
    task = ll.get_task(params_for(name, init_checkpoint=os.path.join(DATA, name),
                                  init_checkpoint_modules="all").task)
    model = task.build_model()
    before = run(model, reference(name))
    task.initialize(model)
    return name, task, model, before


def test_all_restores_tfm_outputs_detections_and_masks(restored):
    name, _, model, before = restored
    ref = reference(name)
    assert model.count_params() == INDEX["models"][name]["params"]
    assert relative_error(before["rpn_scores"]["3"], ref["rpn_scores_3"]) > 1e-2
    outputs = run(model, ref)
    for level in LEVELS:
        assert relative_error(outputs["rpn_scores"][level], ref[f"rpn_scores_{level}"]) <= 1e-4
        assert relative_error(outputs["rpn_boxes"][level], ref[f"rpn_boxes_{level}"]) <= 1e-4
    assert relative_error(outputs["cls_outputs"], ref["cls_outputs"]) <= 1e-4
    assert relative_error(outputs["box_outputs"], ref["box_outputs"]) <= 1e-4
    assert_detections_equal(outputs, ref)


def test_serving_function_serves_tfms_detections_and_masks(restored):
    """The task's `tflite` signature (images already preprocessed, TFM's input there) on
    TFM's image: TFM's detections and masks (the in-process sibling of the lite-export
    test)."""
    name, task, model, _ = restored
    ref = reference(name)
    fn, spec = task.build_serving_fn(model, "tflite", batch_size=1)
    assert spec.shape.as_list() == [1, 128, 128, 3]
    served = fn(tf.constant(ref["images"]))
    assert served["detection_masks"].shape[2:] == (28, 28)
    assert_detections_equal(served, ref)


def _values(module):
    return [v.numpy() for v in module.weights]


@pytest.mark.parametrize("module", ["backbone", "decoder"])
def test_one_module_reads_only_its_part(module):
    """'backbone' / 'decoder' read TFM's weights of that part alone (equal to the 'all'
    restore's); every other part keeps its initial values."""
    name = "maskrcnn_resnet50_fpn"
    full_task = ll.get_task(params_for(name, init_checkpoint=os.path.join(DATA, name)).task)
    full = full_task.build_model()
    full_task.initialize(full)
    task = ll.get_task(params_for(name, init_checkpoint=os.path.join(DATA, name),
                                  init_checkpoint_modules=module).task)
    model = task.build_model()
    other = "decoder" if module == "backbone" else "backbone"
    rest = _values(getattr(model, other)) + _values(model.rpn_head) + _values(model.mask_head)
    task.initialize(model)
    for mine, tfms in zip(_values(getattr(model, module)), _values(getattr(full, module))):
        np.testing.assert_array_equal(mine, tfms)
    after = _values(getattr(model, other)) + _values(model.rpn_head) + _values(model.mask_head)
    for before, now in zip(rest, after):
        np.testing.assert_array_equal(before, now)


@pytest.mark.release(sibling="tests/vision/test_maskrcnn_checkpoint.py::"
                             "test_serving_function_serves_tfms_detections_and_masks")
def test_lite_export_of_a_tfm_checkpoint_serves_tfms_detections_and_masks(tmp_path):
    """`lite-export --input_type tflite` of the TFM checkpoint, loaded with TensorFlow alone,
    serves TFM's detections and masks."""
    sys.path.insert(0, os.path.dirname(HERE))
    from test_modes import ROOT, subprocess_env  # pylint: disable=import-outside-toplevel

    name = "maskrcnn_resnet50_fpn"
    override = tmp_path / "override.yaml"
    override.write_text(yaml.safe_dump({
        "runtime": {"mixed_precision_dtype": "float32", "enable_xla": False},
        "task": {"init_checkpoint": "", "model": INDEX["models"][name]["model"]}}))
    export_dir = tmp_path / "export"
    result = subprocess.run(
        [sys.executable, "-m", "lite_launcher.export", "--experiment",
         INDEX["models"][name]["experiment"], "--params_override", str(override),
         "--checkpoint_path", os.path.join(DATA, name), "--export_dir", str(export_dir),
         "--input_type", "tflite", "--batch_size", "1"],
        cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    ref = reference(name)
    served = tf.saved_model.load(str(export_dir)).signatures["serving_default"](
        inputs=tf.constant(ref["images"]))
    assert_detections_equal({key: value.numpy() for key, value in served.items()}, ref)
