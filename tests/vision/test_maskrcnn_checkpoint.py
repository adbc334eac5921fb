"""A TFM-written Mask R-CNN checkpoint through lite's MaskRCNNTask: `init_checkpoint` with
'all' (TFM's checkpoint items, the detection heads as a list) then the task's serving
function give TFM's detections and masks on a fixed image; 'backbone' / 'decoder' read only
their part; `lite-export` of the checkpoint (release) serves TFM's detections and masks.
(The model restored from TFM's whole `model` object: test_maskrcnn_model.py.)

The checkpoints and TFM's outputs on them come from TFM 2.20 itself
(data/make_tfm_maskrcnn_checkpoints.py): TFM's maskrcnn_resnetfpn_coco shrunk (ResNet-50 at
1/16 width, 3 classes, 128x128), every variable random, saved as TFM's Trainer saves.
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

from fp32_noise import assert_detections_equal  # tests/vision is on sys.path

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data", "tfm_checkpoints", "maskrcnn")
with open(os.path.join(DATA, "index.json")) as _f:
    INDEX = json.load(_f)
NAME = "maskrcnn_resnet50_fpn"


def params_for(**task):
    entry = INDEX["models"][NAME]
    params = ll.get_exp_config(entry["experiment"])
    params.task.model.override(entry["model"], is_strict=True)
    params.task.override(dict(init_checkpoint=os.path.join(DATA, NAME), **task),
                         is_strict=True)
    return params


REFERENCE = np.load(os.path.join(DATA, NAME, "reference.npz"))




@pytest.fixture(scope="module")
def restored():
    """(task, model restored with init_checkpoint_modules 'all', its detections before)."""
    task = ll.get_task(params_for(init_checkpoint_modules="all").task)
    model = task.build_model()
    before = model(REFERENCE["images"], image_shape=REFERENCE["image_shape"], training=False)
    task.initialize(model)
    return task, model, before


def test_all_then_the_serving_function_give_tfms_detections_and_masks(restored):
    """The task's `tflite` signature (images already preprocessed: TFM's normalised image)
    of the model restored with 'all' (the in-process sibling of the lite-export test)."""
    task, model, before = restored
    assert model.count_params() == INDEX["models"][NAME]["params"]
    assert np.abs(before["cls_outputs"] - REFERENCE["cls_outputs"]).max() > 1e-2
    fn, spec = task.build_serving_fn(model, "tflite", batch_size=1)
    assert spec.shape.as_list() == [1, 128, 128, 3]
    served = fn(tf.constant(REFERENCE["images"]))
    assert served["detection_masks"].shape[2:] == (28, 28)
    np.testing.assert_allclose(served["image_info"][0], [[128, 128], [128, 128], [1, 1],
                                                         [0, 0]])
    assert_detections_equal(served, REFERENCE)


def _values(module):
    return [v.numpy() for v in module.weights]


def test_backbone_or_decoder_reads_only_its_part(restored):
    """'backbone' / 'decoder' read TFM's weights of that part alone (equal to the 'all'
    restore's); every other part keeps its initial values. One model for both: the backbone
    is put back to its initial values before the 'decoder' restore."""
    _, full, _ = restored
    task = ll.get_task(params_for(init_checkpoint_modules="backbone").task)
    model = task.build_model()
    initial = {part: _values(getattr(model, part))
               for part in ("backbone", "decoder", "rpn_head", "mask_head")}
    for module, other in (("backbone", "decoder"), ("decoder", "backbone")):
        if module == "decoder":
            task = ll.get_task(params_for(init_checkpoint_modules=module).task)
            for variable, value in zip(model.backbone.weights, initial["backbone"]):
                variable.assign(value)
        task.initialize(model)
        for mine, tfms in zip(_values(getattr(model, module)),
                              _values(getattr(full, module))):
            np.testing.assert_array_equal(mine, tfms)
        for part in (other, "rpn_head", "mask_head"):
            for before, now in zip(initial[part], _values(getattr(model, part))):
                np.testing.assert_array_equal(before, now)


@pytest.mark.release(sibling="tests/vision/test_maskrcnn_checkpoint.py::"
                             "test_all_then_the_serving_function_give_tfms_detections_and_"
                             "masks")
def test_lite_export_of_a_tfm_checkpoint_serves_tfms_detections_and_masks(tmp_path):
    """`lite-export --input_type tflite` of the TFM checkpoint, loaded with TensorFlow alone,
    serves TFM's detections and masks."""
    sys.path.insert(0, os.path.dirname(HERE))
    from test_modes import ROOT, subprocess_env  # pylint: disable=import-outside-toplevel

    override = tmp_path / "override.yaml"
    override.write_text(yaml.safe_dump({
        "runtime": {"mixed_precision_dtype": "float32", "enable_xla": False},
        "task": {"init_checkpoint": "", "model": INDEX["models"][NAME]["model"]}}))
    export_dir = tmp_path / "export"
    result = subprocess.run(
        [sys.executable, "-m", "lite_launcher.commands.export", "--experiment",
         INDEX["models"][NAME]["experiment"], "--params_override", str(override),
         "--checkpoint_path", os.path.join(DATA, NAME), "--export_dir", str(export_dir),
         "--input_type", "tflite", "--batch_size", "1"],
        cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    served = tf.saved_model.load(str(export_dir)).signatures["serving_default"](
        inputs=tf.constant(REFERENCE["images"]))
    assert_detections_equal({key: value.numpy() for key, value in served.items()}, REFERENCE)
