"""The zoo YAMLs of EfficientNet, RevNet and NAS-FPN (tests/vision/data/zoo_*.yaml, written as
TFM's experiment YAMLs and config tests name these pieces) load under their TFM experiment and
train two steps through `lite-train` (the driver in this process) on small CPU inputs: the
YAML's backbone / decoder reaches params.yaml, the loss is finite, the checkpoint is written
(the segmentation run also evaluates)."""

import os
import sys

import numpy as np
import pytest
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
from cli import run_lite_train_in_process  # noqa: E402
from test_modes import read_scalars  # noqa: E402
from test_vision_zoo_train import (  # noqa: E402,F401  (small_records: a fixture)
    _subset, cpu_override, small_records)
from detection_images import detection_tfrecords, write_override  # noqa: E402
from shapes_images import shapes_tfrecords  # noqa: E402

DATA = os.path.join(HERE, "data")
SIZE = 64
# NAS-FPN's levels 3..7 need an input of 128: RetinaNet pads to a multiple of 2 ** 7, and a
# cell's upsampling from level 7 must land on level 5's size.
PYRAMID_SIZE = 128
_CLASSIFICATION = ("tests/vision/test_tfm_zoo_train.py::"
                   "test_zoo_classification_yaml_trains_two_steps[revnet]")
_RETINANET = "tests/vision/test_tfm_zoo_train.py::test_nasfpn_retinanet_yaml_trains_two_steps"


def _check_run(result, model_dir, section, expected):
    assert result.returncode == 0, (result.stderr[-2000:], result.logged[-2000:])
    with open(os.path.join(model_dir, "params.yaml")) as f:
        params = yaml.safe_load(f)
    _subset(expected, params["task"]["model"][section])
    losses = read_scalars(os.path.join(model_dir, "train"))
    name = "training_loss" if "training_loss" in losses else "total_loss"
    assert sorted(losses[name]) == [2] and np.isfinite(losses[name][2])
    assert os.path.exists(os.path.join(model_dir, "ckpt-2.index"))
    return params


@pytest.mark.parametrize("yaml_name, experiment, extra, backbone", [
    # B0 at 32x32 (the YAML's SE, stochastic depth and swish kept).
    # (~60 s on the loaded 2-core machine: B0's 16 blocks to trace; EfficientNet's blocks and
    # a TFM checkpoint of a narrow one are checked in the suite by test_tfm_zoo.)
    pytest.param("zoo_imagenet_efficientnet_b0.yaml", "resnet_imagenet", "",
                 {"type": "efficientnet", "efficientnet": {
                     "model_id": "b0", "se_ratio": 0.25, "stochastic_depth_drop_rate": 0.2}},
                 id="efficientnet_b0",
                 marks=pytest.mark.release(sibling=_CLASSIFICATION)),
    # RevNet-38 for the YAML's 56 (the tracing time is the layer count's): both kinds of
    # reversible block are pinned against TFM in test_tfm_zoo.
    pytest.param("zoo_imagenet_revnet56.yaml", "revnet_imagenet",
                 ",task.model.backbone.revnet.model_id=38",
                 {"type": "revnet", "revnet": {"model_id": 38}}, id="revnet"),
])
def test_zoo_classification_yaml_trains_two_steps(small_records, tmp_path, yaml_name,
                                                  experiment, extra, backbone):
    yaml_path = os.path.join(DATA, yaml_name)
    model_dir = str(tmp_path / "model")
    result = run_lite_train_in_process(
        "--experiment", experiment, "--config_file", yaml_path, "--mode", "train",
        "--model_dir", model_dir, "--params_override",
        cpu_override(yaml_path, small_records, steps=2, deterministic_ops=False) + extra)
    params = _check_run(result, model_dir, "backbone", backbone)
    assert params["task"]["model"]["add_head_batch_norm"] is (experiment == "revnet_imagenet")


# A CPU's RetinaNet / segmentation: ResNet-10, 128x128, a one-cell NAS-FPN at the YAML's 256
# filters (fewer layers to trace than TFM's 256-channel resampling of narrower cells; several
# cells are pinned against TFM in test_tfm_zoo), the YAML's separable flag kept, float32.
CPU = {"runtime": {"distribution_strategy": "off", "mixed_precision_dtype": "float32"},
       "task": {"init_checkpoint": "",
                "model": {"input_size": [SIZE, SIZE, 3],
                          "backbone": {"resnet": {"model_id": 10}},
                          "decoder": {"nasfpn": {"num_repeats": 1}}},
                "train_data": {"global_batch_size": 2, "dtype": "float32"},
                "validation_data": {"global_batch_size": 2, "dtype": "float32"}},
       "trainer": {"train_steps": 2, "steps_per_loop": 2, "summary_interval": 2,
                   "checkpoint_interval": 2, "validation_interval": 2, "validation_steps": 1,
                   "optimizer_config": {"warmup": {"type": None}, "learning_rate": {
                       "type": "constant", "constant": {"learning_rate": 0.001}}}}}


def test_nasfpn_retinanet_yaml_trains_two_steps(tmp_path):
    pytest.importorskip("pycocotools")
    data = detection_tfrecords(str(tmp_path / "data"), train_count=4, eval_count=2, size=SIZE)
    cpu = {**CPU, "task": {**CPU["task"], "model": {
        **CPU["task"]["model"], "num_classes": 3,
        "input_size": [PYRAMID_SIZE, PYRAMID_SIZE, 3],
        "head": {"num_convs": 1, "num_filters": 32},
        "anchor": {"num_scales": 1, "aspect_ratios": [1.0], "anchor_size": 3.0}}}}
    override = write_override(cpu, data, str(tmp_path))
    model_dir = str(tmp_path / "model")
    result = run_lite_train_in_process(
        "--experiment", "retinanet_resnetfpn_coco", "--config_file",
        os.path.join(DATA, "zoo_coco_nasfpn_retinanet.yaml"), "--mode", "train",
        "--model_dir", model_dir, "--params_override", override)
    _check_run(result, model_dir, "decoder", {"type": "nasfpn", "nasfpn": {
        "num_filters": 256, "num_repeats": 1, "use_separable_conv": False}})


@pytest.mark.release(sibling=_RETINANET)
def test_nasfpn_segmentation_yaml_trains_two_steps(tmp_path):
    train, validation = shapes_tfrecords(str(tmp_path / "data"), train_count=4, eval_count=2,
                                         size=SIZE)
    size = [PYRAMID_SIZE, PYRAMID_SIZE]
    cpu = {**CPU, "task": {**CPU["task"], "model": {**CPU["task"]["model"], "num_classes": 3,
                                                    "input_size": size + [3]},
                           "train_data": {**CPU["task"]["train_data"], "input_path": train,
                                          "output_size": size},
                           "validation_data": {**CPU["task"]["validation_data"],
                                               "input_path": validation,
                                               "output_size": size}}}
    override = tmp_path / "override.yaml"
    override.write_text(yaml.safe_dump(cpu))
    model_dir = str(tmp_path / "model")
    result = run_lite_train_in_process(
        "--experiment", "seg_resnetfpn_pascal", "--config_file",
        os.path.join(DATA, "zoo_seg_nasfpn.yaml"), "--mode", "train_and_eval",
        "--model_dir", model_dir, "--params_override", override)
    _check_run(result, model_dir, "decoder", {"type": "nasfpn", "nasfpn": {
        "num_filters": 256, "num_repeats": 1, "use_separable_conv": True}})
    validation = read_scalars(os.path.join(model_dir, "validation"))
    assert 0.0 <= validation["mean_iou"][2] <= 1.0
