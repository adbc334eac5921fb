"""Cascade R-CNN and Faster R-CNN (`include_mask: false`) in the suite, each on its own branch
of lite's two-stage task: a TFM-written checkpoint restored through `init_checkpoint` serves
TFM's detections (values within tests/vision/fp32_noise.py's bounds), then an evaluation and a
training step on drawn shapes through the task's own steps.

- Cascade: three detection stages (the stage loop, each later stage's ROIs decoded from the
  stage before, the class ensemble of the three at inference), restored from TFM's
  `cascadercnn_resnet50_fpn` checkpoint (ResNet-50 at 1/16 width, 128x128, written by
  data/make_tfm_maskrcnn_checkpoints.py in TFM 2.20's venv).
- Faster R-CNN: the box-only model (no mask sampler, aligner or head) and task (no mask loss,
  box COCO numbers only, records without masks), given the weights of TFM's Mask R-CNN
  checkpoint (read into a Mask R-CNN, its box parts copied): its box detections are TFM's
  (the mask branch never feeds the boxes). (TFM's 'all' would read that checkpoint into the
  box-only model directly, leaving the mask head unread; lite's structural TFM reader refuses
  a checkpoint with more layers than the model.)

The full-size experiments, the small variants' TFM counts and the driver's box-only run are
`release` tests naming these as their siblings."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import lite_launcher as ll

from detection_images import detection_tfrecords  # tests/vision is on sys.path
from fp32_noise import assert_detections_equal

pytest.importorskip("pycocotools")

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data", "tfm_checkpoints", "maskrcnn")
with open(os.path.join(DATA, "index.json")) as _f:
    INDEX = json.load(_f)
SIZE = INDEX["input_size"]
COCO_NAMES = ("AP", "AP50", "AP75", "APs", "APm", "APl", "ARmax1", "ARmax10", "ARmax100",
              "ARs", "ARm", "ARl")
BOX_LOSSES = ("rpn_score_loss", "rpn_box_loss", "frcnn_cls_loss", "frcnn_box_loss")


def _shapes(tmp_path, masks):
    """Drawn shapes at the checkpoints' 128x128 (with `masks`: their polygons)."""
    return detection_tfrecords(str(tmp_path / "shapes"), train_count=4, eval_count=2,
                               size=SIZE, masks=masks)


def _params(name, shapes, init_checkpoint=True, **model):
    """TFM's checkpoint `name`'s experiment and model (`model` overrides on top), restored
    whole by `init_checkpoint` (unless not `init_checkpoint`); float32, one device, training
    batches of one, evaluation batches of two, COCO against the drawn shapes."""
    entry = INDEX["models"][name]
    params = ll.get_exp_config(entry["experiment"])
    params.task.model.override(entry["model"], is_strict=True)
    params.task.model.override(model, is_strict=True)
    params.override({
        "runtime": {"distribution_strategy": "off", "mixed_precision_dtype": "float32",
                    "enable_xla": False},
        "task": {"init_checkpoint": os.path.join(DATA, name) if init_checkpoint else "",
                 "init_checkpoint_modules": "all",
                 "annotation_file": shapes["validation_json"],
                 "train_data": {"input_path": shapes["train"], "global_batch_size": 1,
                                "dtype": "float32", "parser": {"rpn_batch_size_per_im": 64}},
                 "validation_data": {"input_path": shapes["validation"],
                                     "global_batch_size": 2, "dtype": "float32"}},
        "trainer": {"optimizer_config": {
            "warmup": {"type": None},
            "learning_rate": {"type": "constant", "constant": {"learning_rate": 0.01}}}}},
        is_strict=True)
    params.validate()
    return params


def _serve(task, model, reference):
    """The task's serving function (TFM's preprocessed image in): TFM's detections on TFM's
    image."""
    fn, _ = task.build_serving_fn(model, "tflite", batch_size=1)
    served = {key: value.numpy() for key, value in fn(tf.constant(reference["images"])).items()}
    assert_detections_equal(served, reference)
    return served


# The step runs eagerly: tracing this ResNet-50's training graph costs ~20 CPU-seconds, an
# eager step ~3 (one step: each further one adds as much and runs the same code). The stage
# loop is Python in both; the driver's graph path of the same task runs in
# test_maskrcnn_train.py.
def _train_one_step(task, model, params):
    """One of the task's training steps on the drawn shapes: its loss metrics."""
    optimizer = task.create_optimizer(params.trainer.optimizer_config, params.runtime)
    metrics = task.build_metrics(training=True)
    batches = iter(task.build_inputs(params.task.train_data))
    task.train_step(next(batches), model, optimizer, metrics)
    assert int(optimizer.iterations) == 1
    return {metric.name: float(metric.result()) for metric in metrics}


def _evaluate(task, model, params):
    """One evaluation of the validation records through the task's steps: (the COCO numbers,
    the detections the evaluator was given)."""
    task.build_metrics(training=False)
    state, detections = None, []
    for inputs in task.build_inputs(params.task.validation_data):
        outputs = task.validation_step(inputs, model)
        detections.append({key: value.numpy() for key, value in
                           outputs[task.coco_metric.name][1].items()})
        state = task.aggregate_logs(state, outputs)
    return task.reduce_aggregated_logs(state), detections


def _assert_real_detections(detections, num_classes):
    """Detections that exist: some per image, boxes inside the 128x128 image, classes of the
    model's, scores sorted and above the generator's threshold."""
    for batch in detections:
        counts = batch["num_detections"]
        assert (counts > 0).all(), counts
        for i, count in enumerate(counts):
            boxes = batch["detection_boxes"][i, :count]
            scores = batch["detection_scores"][i, :count]
            assert (boxes >= 0).all() and (boxes <= SIZE).all(), boxes
            assert (boxes[:, 2:] >= boxes[:, :2]).all(), boxes
            assert ((batch["detection_classes"][i, :count] >= 1)
                    & (batch["detection_classes"][i, :count] < num_classes)).all()
            assert (np.diff(scores) <= 0).all() and (scores >= 0.3).all(), scores


def _assert_coco_numbers(numbers, masks=False):
    """The twelve COCO box numbers (and with `masks` the twelve mask ones, else none)."""
    names = COCO_NAMES + tuple("mask_" + name for name in COCO_NAMES if masks)
    assert sorted(numbers) == sorted(names)
    for name in names:
        assert 0.0 <= numbers[name] <= 1.0 or numbers[name] == -1.0, (name, numbers[name])


def test_cascade_rcnn_serves_tfms_detections_then_trains_its_three_stages_and_evaluates(
        tmp_path):
    name = "cascadercnn_resnet50_fpn"
    params = _params(name, _shapes(tmp_path, masks=True))
    reference = np.load(os.path.join(DATA, name, "reference.npz"))
    task = ll.get_task(params.task, logging_dir=str(tmp_path))
    model = task.build_model()
    task.initialize(model)
    _serve(task, model, reference)
    assert len(model.detection_head) == 3
    # The scores are the three stages' mean (the last stage's alone give other detections:
    # the check above fails with `cascade_class_ensemble: false`).
    outputs = model(reference["images"], image_shape=reference["image_shape"], training=False)
    np.testing.assert_allclose(
        outputs["cls_outputs"], np.mean([outputs["class_outputs"], outputs["class_outputs_1"],
                                         outputs["class_outputs_2"]], axis=0), atol=1e-6)
    # The evaluation runs on TFM's weights, before the training steps: a training step with the
    # ROI sampler's unseeded draws may leave an image below the score threshold.
    numbers, detections = _evaluate(task, model, params)
    _assert_coco_numbers(numbers, masks=True)
    _assert_real_detections(detections, params.task.model.num_classes)
    heads = [[w.numpy() for w in head.trainable_weights] for head in model.detection_head]
    step_logs = _train_one_step(task, model, params)
    for loss in BOX_LOSSES + ("total_loss", "model_loss"):
        assert np.isfinite(step_logs[loss]) and step_logs[loss] > 0, (loss, step_logs)
    # Every stage's head learned (a stage the loop skipped would keep TFM's weights).
    for stage, (before, head) in enumerate(zip(heads, model.detection_head)):
        moved = max(np.abs(b - w.numpy()).max() for b, w in zip(before, head.trainable_weights))
        assert moved > 1e-4, stage


def test_faster_rcnn_serves_tfms_box_detections_then_trains_and_evaluates_boxes(tmp_path):
    name = "maskrcnn_resnet50_fpn"
    shapes = _shapes(tmp_path, masks=False)
    params = _params(name, shapes, init_checkpoint=False,
                     include_mask=False, mask_head=None, mask_sampler=None,
                     mask_roi_aligner=None)
    reference = np.load(os.path.join(DATA, name, "reference.npz"))
    task = ll.get_task(params.task, logging_dir=str(tmp_path))
    model = task.build_model()
    # TFM's Mask R-CNN weights, read into a Mask R-CNN by lite's TFM reader, then its box
    # parts copied into the box-only model.
    with_masks = _params(name, shapes)
    donor = ll.get_task(with_masks.task).build_model()
    ll.get_task(with_masks.task).initialize(donor)
    for part, module in model.checkpoint_items.items():
        donor_part = donor.checkpoint_items[part]
        donor_weights = sum((m.weights for m in donor_part), []) if isinstance(
            donor_part, list) else donor_part.weights
        weights = sum((m.weights for m in module), []) if isinstance(
            module, list) else module.weights
        assert len(weights) == len(donor_weights), part
        for weight, value in zip(weights, donor_weights):
            weight.assign(value)
    boxes_only = {key: reference[key] for key in reference.files if key != "detection_masks"}
    served = _serve(task, model, boxes_only)
    assert "detection_masks" not in served and model.mask_head is None
    assert sorted(model.checkpoint_items) == ["backbone", "decoder", "detection_head",
                                              "rpn_head"]
    # The evaluation runs on TFM's weights, before the training steps: a training step with the
    # ROI sampler's unseeded draws may leave an image below the score threshold.
    numbers, detections = _evaluate(task, model, params)
    _assert_coco_numbers(numbers)
    _assert_real_detections(detections, params.task.model.num_classes)
    step_logs = _train_one_step(task, model, params)
    for loss in BOX_LOSSES:
        assert np.isfinite(step_logs[loss]) and step_logs[loss] > 0, (loss, step_logs)
    assert step_logs["mask_loss"] == 0.0  # TFM's task without masks: the constant 0
    assert step_logs["model_loss"] == pytest.approx(
        sum(step_logs[loss] for loss in BOX_LOSSES), rel=1e-5)
