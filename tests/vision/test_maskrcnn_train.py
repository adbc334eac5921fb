"""Mask R-CNN end to end: drawn shapes with COCO polygons -> create_coco_tf_record
--include_masks -> `lite-train --experiment maskrcnn_resnetfpn_coco --mode train_and_eval` (a
narrow ResNet-18 FPN at 64x64, levels 2-5, a few steps) -> TFM's seven training losses, the
box and mask COCO numbers (against `annotation.json` written from the validation records, as
TFM's task does without an annotation file) and a checkpoint -> `lite-export` of it serving
`detection_masks`. The learning run (release) reaches box AP50 >= 0.5 and mask AP50 >= 0.4."""

import os
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import learning_run  # noqa: E402
from cli import lite_train_command, run_lite_train, run_lite_train_in_process  # noqa: E402
from detection_images import (  # noqa: E402
    assert_batch_served_as_alone, detection_tfrecords, write_override)
from test_modes import read_scalars  # noqa: E402
import release_siblings  # noqa: E402

pytest.importorskip("pycocotools")

EXPERIMENT = "maskrcnn_resnetfpn_coco"
SIZE = 64
STEPS = 2
COCO_NAMES = ["AP", "AP50", "AP75", "APs", "APm", "APl", "ARmax1", "ARmax10", "ARmax100",
              "ARs", "ARm", "ARl"]
LOSS_NAMES = ["total_loss", "rpn_score_loss", "rpn_box_loss", "frcnn_cls_loss",
              "frcnn_box_loss", "mask_loss", "model_loss"]
# TFM's experiment shrunk for a CPU: ResNet-18 at 1/4 width, 64x64, levels 2-5 with one
# square anchor per place (12..96 px), narrow heads, fewer proposals / ROIs / masks, no
# pretrained backbone (TFM's is on GCS), float32 without XLA (TFM: bfloat16 with XLA).
OVERRIDE = {
    "runtime": {"distribution_strategy": "off", "mixed_precision_dtype": "float32",
                "enable_xla": False},
    "task": {
        "init_checkpoint": "",
        "model": {
            "num_classes": 3, "input_size": [SIZE, SIZE, 3], "min_level": 2, "max_level": 5,
            "anchor": {"num_scales": 1, "aspect_ratios": [1.0], "anchor_size": 3.0},
            "backbone": {"resnet": {"model_id": 18, "depth_multiplier": 0.25}},
            "decoder": {"fpn": {"num_filters": 16}},
            "rpn_head": {"num_filters": 16},
            "detection_head": {"num_convs": 0, "num_filters": 16, "fc_dims": 64},
            "mask_head": {"num_convs": 1, "num_filters": 16},
            "roi_generator": {"pre_nms_top_k": 200, "num_proposals": 64,
                              "test_pre_nms_top_k": 200, "test_num_proposals": 32},
            "roi_sampler": {"num_sampled_rois": 32},
            "mask_sampler": {"num_sampled_masks": 8},
            "detection_generator": {"pre_nms_top_k": 200, "max_num_detections": 10}},
        "train_data": {"global_batch_size": 4, "dtype": "float32",
                       "parser": {"rpn_batch_size_per_im": 64, "max_num_instances": 8,
                                  "mask_crop_size": 28, "aug_rand_hflip": True}},
        "validation_data": {"global_batch_size": 4, "dtype": "float32",
                            "parser": {"max_num_instances": 8, "mask_crop_size": 28}}},
    "trainer": {"train_steps": STEPS, "steps_per_loop": STEPS, "summary_interval": STEPS,
                "checkpoint_interval": STEPS, "validation_interval": STEPS,
                "validation_steps": 1,
                "optimizer_config": {"warmup": {"type": None},
                                     "learning_rate": {"type": "constant",
                                                       "constant": {"learning_rate": 0.01}}}},
}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return detection_tfrecords(str(tmp_path_factory.mktemp("shapes")), train_count=8,
                               eval_count=8, size=SIZE, masks=True)


@pytest.fixture(scope="module")
def trained(data, tmp_path_factory):
    """lite-train train_and_eval without an annotation file (the task writes one)."""
    root = str(tmp_path_factory.mktemp("maskrcnn"))
    # Levels 3-4 only and a ResNet-10: fewer ops to trace (the learning run keeps 2-5 and 18).
    override = write_override(OVERRIDE, data, root, **{
        "task.annotation_file": "", "task.model.min_level": 3, "task.model.max_level": 4,
        "task.model.backbone.resnet.model_id": 10})
    model_dir = os.path.join(root, "model")
    monkeypatch = pytest.MonkeyPatch()
    try:
        code = run_lite_train(monkeypatch, "--experiment", EXPERIMENT, "--mode",
                              "train_and_eval", "--model_dir", model_dir, "--params_override",
                              override)
    finally:
        monkeypatch.undo()
    assert code == 0
    return root, model_dir, override


def test_lite_train_maskrcnn_logs_tfms_losses_box_and_mask_ap_and_writes_a_checkpoint(
        trained, data):
    import json

    _, model_dir, _ = trained
    train = read_scalars(os.path.join(model_dir, "train"))
    for name in LOSS_NAMES:
        assert sorted(train[name]) == [STEPS], name
        assert np.isfinite(train[name][STEPS]) and train[name][STEPS] >= 0, name
    # model_loss is the weighted sum of the five (TFM's weights: all 1); total adds the L2
    # (TFM's experiment: 4e-5).
    parts = sum(train[name][STEPS] for name in LOSS_NAMES[1:6])
    assert train["model_loss"][STEPS] == pytest.approx(parts, rel=1e-5)
    assert train["total_loss"][STEPS] > train["model_loss"][STEPS]
    assert train["mask_loss"][STEPS] > 0.1  # sigmoid cross-entropy of an untrained head
    validation = read_scalars(os.path.join(model_dir, "validation"))
    for name in COCO_NAMES + ["mask_" + n for n in COCO_NAMES]:
        value = validation[name][STEPS]
        assert 0.0 <= value <= 1.0 or value == -1.0, (name, value)
    # Every drawn shape is 12..30 px wide: no large ground truth, box or mask.
    assert validation["APl"][STEPS] == validation["mask_APl"][STEPS] == -1.0
    assert validation["validation_loss"][STEPS] == 0.0  # TFM's: no loss in evaluation
    assert tf.train.latest_checkpoint(model_dir).endswith(f"ckpt-{STEPS}")
    # The ground truths the evaluator read: the validation records' images, boxes and masks.
    with open(os.path.join(model_dir, "annotation.json")) as f:
        written = json.load(f)
    with open(data["validation_json"]) as f:
        drawn = json.load(f)
    assert sorted(i["id"] for i in written["images"]) == [i["id"] for i in drawn["images"]]
    assert len(written["annotations"]) == len(drawn["annotations"])
    assert all("counts" in a["segmentation"] for a in written["annotations"])


@pytest.mark.release(sibling="tests/vision/test_maskrcnn_checkpoint.py::"
                             "test_all_then_the_serving_function_give_tfms_detections_and_"
                             "masks")
def test_lite_export_serves_detection_masks(trained):
    from lite_launcher.commands import export
    import lite_launcher as ll

    root, model_dir, override = trained
    config = ll.override_config(ll.get_exp_config(EXPERIMENT), [override])
    export_dir = os.path.join(root, "export")
    export.export_saved_model(config, model_dir, export_dir, input_type="image_tensor")
    serve = tf.saved_model.load(export_dir).signatures["serving_default"]
    image = np.random.default_rng(0).integers(0, 256, (1, SIZE, SIZE, 3)).astype(np.uint8)
    served = serve(inputs=tf.constant(image))
    assert set(served) == {"detection_boxes", "detection_scores", "detection_classes",
                           "num_detections", "detection_masks", "image_info"}
    # One 28x28 mask (mask_roi_aligner.crop_size 14, upsampled 2x) per detection slot.
    assert served["detection_masks"].shape == (1, 10, 28, 28)
    # The same checkpoint's Keras model on the same (64x64: not resized) image.
    model = ll.get_task(config.task).build_model()
    tf.train.Checkpoint(model=model).read(
        tf.train.latest_checkpoint(model_dir)).expect_partial().assert_existing_objects_matched()
    normalized = (image - np.array([123.675, 116.28, 103.53])) / [58.395, 57.12, 57.375]
    outputs = model(tf.constant(normalized, tf.float32), training=False)
    count = int(outputs["num_detections"][0])
    assert int(served["num_detections"][0]) == count
    np.testing.assert_allclose(served["detection_masks"].numpy()[0, :count],
                               outputs["detection_masks"].numpy()[0, :count], atol=1e-4)
    np.testing.assert_allclose(served["detection_boxes"].numpy()[0, :count],
                               outputs["detection_boxes"].numpy()[0, :count], atol=1e-3)
    # A batch of two images serves each as it serves alone.
    other = np.random.default_rng(1).integers(0, 256, (1, SIZE, SIZE, 3)).astype(np.uint8)
    assert_batch_served_as_alone(serve, tf.constant(np.concatenate([image, other])),
                                 [tf.constant(image), tf.constant(other)], [10, 10])


# ----- learning: box and mask AP50 on held-out drawn shapes -----------------------------------

LEARNING_STEPS = 300


@pytest.mark.release(sibling="tests/vision/test_maskrcnn_train.py::"
                             "test_lite_train_maskrcnn_logs_tfms_losses_box_and_mask_ap_and_"
                             "writes_a_checkpoint")
def test_maskrcnn_learns_the_drawn_shapes_and_their_masks(tmp_path, monkeypatch):
    """300 steps on 64 drawn images with masks reach box AP50 >= 0.5 and mask AP50 >= 0.4 on
    16 held-out ones, where the untrained model (evaluated first, step 0) is below 0.05
    (box and mask AP50 1.000 in the run filed as benchmarks/results/2026-12-06-6635907-
    learning-maskrcnn.json, 134 s; with LITE_LEARNING_RUN_OUT set the run writes its numbers
    there, learning_run.py)."""
    started = time.monotonic()
    data = detection_tfrecords(str(tmp_path / "shapes"), train_count=64, eval_count=16,
                               size=SIZE, masks=True)
    override = write_override(OVERRIDE, data, str(tmp_path), **{
        "task.train_data.global_batch_size": 8,
        "task.train_data.parser.aug_rand_hflip": False,
        "trainer.train_steps": LEARNING_STEPS, "trainer.steps_per_loop": 50,
        "trainer.summary_interval": 50, "trainer.checkpoint_interval": LEARNING_STEPS,
        "trainer.validation_interval": LEARNING_STEPS, "trainer.validation_steps": -1,
        "trainer.optimizer_config.learning_rate.constant.learning_rate": 0.02})
    model_dir = tmp_path / "model"
    # Each run in its own process: in this one, the weights' initial values would depend on
    # how many random ops the file's earlier in-process runs made (TensorFlow derives op seeds
    # from a process-wide counter), and the AP thresholds on which tests ran before.
    del monkeypatch
    for mode in ("eval", "train_and_eval"):
        result = subprocess.run(lite_train_command(
            "--experiment", EXPERIMENT, "--mode", mode, "--model_dir", model_dir,
            "--params_override", override), capture_output=True, text=True, timeout=1800)
        assert result.returncode == 0, result.stderr[-4000:]
    validation = read_scalars(str(model_dir / "validation"))
    print({name: validation[name] for name in ("AP50", "AP", "mask_AP50", "mask_AP")})
    learning_run.record("tests/vision/test_maskrcnn_train.py::test_maskrcnn_learns_the_drawn_"
                        "shapes_and_their_masks", validation, LEARNING_STEPS,
                        time.monotonic() - started)
    assert validation["AP50"][0] < 0.05 and validation["mask_AP50"][0] < 0.05
    assert validation["AP50"][LEARNING_STEPS] >= 0.5, validation["AP50"]
    assert validation["mask_AP50"][LEARNING_STEPS] >= 0.4, validation["mask_AP50"]


# ----- records without masks: the Faster R-CNN path of the Mask R-CNN task --------------------

@pytest.fixture(scope="module")
def box_data(tmp_path_factory):
    """Drawn shapes converted without --include_masks: boxes only, no image/object/mask."""
    return detection_tfrecords(str(tmp_path_factory.mktemp("boxes")), train_count=4,
                               eval_count=4, size=SIZE)


def _box_only_override(box_data, root, **changes):
    # One train step, one eval step, one level (3; the mask test keeps 3-4): the shortest run
    # that trains and evaluates.
    return write_override(OVERRIDE, box_data, root, **{
        "task.model.min_level": 3, "task.model.max_level": 3, "trainer.train_steps": 1,
        "trainer.steps_per_loop": 1, "trainer.summary_interval": 1,
        "trainer.checkpoint_interval": 1, "trainer.validation_interval": 1, **changes})


# ~16 s: `release`; its sibling runs the box-only model and task (TFM's weights, a step
# and an evaluation through the task's own steps).
@pytest.mark.release(sibling=release_siblings.FASTER_RCNN_SIBLING)
def test_include_mask_false_trains_and_evaluates_boxes_on_records_without_masks(
        box_data, tmp_path):
    override = _box_only_override(box_data, str(tmp_path), **{"task.model.include_mask": False})
    model_dir = tmp_path / "model"
    run = run_lite_train_in_process("--experiment", EXPERIMENT, "--mode", "train_and_eval",
                                    "--model_dir", model_dir, "--params_override", override)
    assert run.returncode == 0, run.stderr
    train = read_scalars(str(model_dir / "train"))
    for name in LOSS_NAMES[:5]:
        assert np.isfinite(train[name][1]) and train[name][1] > 0, name
    # TFM's task without masks: the mask loss is the constant 0, still logged.
    assert train["mask_loss"][1] == 0.0
    assert train["model_loss"][1] == pytest.approx(
        sum(train[name][1] for name in LOSS_NAMES[1:5]), rel=1e-5)
    validation = read_scalars(str(model_dir / "validation"))
    for name in COCO_NAMES:
        assert 0.0 <= validation[name][1] <= 1.0 or validation[name][1] == -1.0, name
    assert validation["APl"][1] == -1.0  # no drawn shape is large: a real COCO summary
    assert not any(name.startswith("mask_") for name in validation)


def test_include_mask_true_on_records_without_masks_is_refused_in_one_line(box_data, tmp_path):
    """TFM fails deep in its parser (`indices[0] = 0 is not in [0, 0)` training, `box_index
    has incompatible shape` evaluating); lite names the field and both ways out, before
    tracing anything (the decoder's own check, per record, is test_detection_data's)."""
    override = _box_only_override(box_data, str(tmp_path))
    model_dir = tmp_path / "model"
    run = run_lite_train_in_process("--experiment", EXPERIMENT, "--mode", "train",
                                    "--model_dir", model_dir, "--params_override", override)
    assert run.returncode == 2
    line = run.stderr.strip()
    assert "\n" not in line, line
    first_file = box_data["train"].replace("*", "00000")
    assert line.startswith("lite-train: error: task.model.include_mask is true but the first "
                           f"record of {first_file} has boxes and no image/object/mask"), line
    assert "--include_masks" in line and "task.model.include_mask: false" in line, line
    assert tf.train.latest_checkpoint(str(model_dir)) is None
