"""End to end through `lite-train`: digits as JPEG TFRecords, ResNet-18 learns them (release);
the TFM ResNet-50 YAML runs train_and_eval on a few such TFRecords (in this process)."""

import os
import subprocess
import sys

import numpy as np
import pytest
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
from digits_images import digits_tfrecords  # noqa: E402
from test_modes import read_scalars, subprocess_env  # noqa: E402
from tfm_yaml import scaled_learning_rate_override  # noqa: E402
from cli import lite_train_command, run_lite_train_in_process

TFM_YAML = os.path.join(HERE, "data", "imagenet_resnet50_gpu.yaml")
TIMEOUT = 600
STEPS = 150
YAML_RUN = "tests/vision/test_vision_train.py::test_resnet_imagenet_tfm_yaml_train_and_eval"


def lite_train(*args):
    result = subprocess.run(lite_train_command(*args),
                            cwd=ROOT, env=subprocess_env(), capture_output=True, text=True,
                            timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


@pytest.fixture(scope="module")
def digits_records(tmp_path_factory):
    """(train glob, validation glob): the shipped digits as 32x32 RGB JPEG TFRecord shards."""
    return digits_tfrecords(str(tmp_path_factory.mktemp("digits_jpeg")), num_shards=2)


@pytest.fixture(scope="module")
def few_digits_records(tmp_path_factory):
    """(train glob, validation glob): the first 64 and 40 digits (every class), one shard each."""
    return digits_tfrecords(str(tmp_path_factory.mktemp("few_digits")), num_shards=1,
                            limits=(64, 40))


@pytest.mark.release(sibling=YAML_RUN + "[resnet18]")
def test_resnet18_learns_digits_from_jpeg_tfrecords(digits_records, tmp_path):
    train, validation = digits_records
    overrides = {
        "runtime": {"distribution_strategy": "off"},
        "task": {
            "model": {"num_classes": 10, "input_size": [32, 32, 3],
                      "backbone": {"type": "resnet", "resnet": {"model_id": 18}},
                      "norm_activation": {"norm_momentum": 0.9}},
            # Digits must not be mirrored or cut; the pipeline is otherwise TFM's.
            "train_data": {"input_path": train, "global_batch_size": 32,
                           "aug_rand_hflip": False, "aug_crop": False, "seed": 0,
                           "shuffle_buffer_size": 1500},
            "validation_data": {"input_path": validation, "global_batch_size": 99,
                                "aug_crop": False, "drop_remainder": False}},
        # A cosine decay to 0 ends on settled weights and BN statistics: 0.98-1.0 validation
        # accuracy over seeds at 150-200 steps (a constant rate ended anywhere in 0.87-0.95).
        "trainer": {"train_steps": STEPS, "steps_per_loop": 50, "summary_interval": 50,
                    "checkpoint_interval": STEPS, "validation_interval": STEPS,
                    "optimizer_config": {
                        "optimizer": {"type": "adam"},
                        "learning_rate": {"type": "cosine", "cosine": {
                            "initial_learning_rate": 0.002, "decay_steps": STEPS}}}}}
    override_file = tmp_path / "digits.yaml"
    override_file.write_text(yaml.safe_dump(overrides))
    model_dir = tmp_path / "model"
    lite_train("--experiment", "image_classification", "--mode", "train_and_eval",
               "--model_dir", model_dir, "--params_override", override_file)
    validation_scalars = read_scalars(str(model_dir / "validation"))
    assert sorted(validation_scalars["accuracy"]) == [STEPS]
    assert validation_scalars["accuracy"][STEPS] > 0.9
    assert validation_scalars["top_5_accuracy"][STEPS] >= validation_scalars["accuracy"][STEPS]
    losses = read_scalars(str(model_dir / "train"))["training_loss"]
    assert sorted(losses) == list(range(50, STEPS + 1, 50)) and losses[STEPS] < losses[50]


@pytest.mark.parametrize("model_id", [
    pytest.param(18, id="resnet18"),
    # The YAML's ResNet-50 itself: tracing its train step is most of a ~45 s run.
    pytest.param(50, id="resnet50", marks=pytest.mark.release(sibling=YAML_RUN + "[resnet18]"))])
def test_resnet_imagenet_tfm_yaml_train_and_eval(few_digits_records, tmp_path, model_id):
    train, validation = few_digits_records
    model_dir = tmp_path / "model"
    # The YAML unchanged but for the suite case's ResNet-18 (the same code, a third of the
    # layers); then what a CPU run needs: no GPUs / XLA, a small input and batch with the
    # learning rate scaled to it, one loop of 2 steps and so one checkpoint (the first loop
    # always saves; ResNet-50's is ~200 MB). In this process, so runtime.deterministic_ops
    # (which would outlive the run) stays off: the assertions below hold for any run.
    run = run_lite_train_in_process(
        "--experiment", "resnet_imagenet", "--config_file", TFM_YAML,
        "--mode", "train_and_eval", "--model_dir", model_dir, "--params_override",
        "runtime.distribution_strategy=off,runtime.num_gpus=0,runtime.enable_xla=false,"
        "runtime.mixed_precision_dtype=float32,task.train_data.dtype=float32,"
        "task.validation_data.dtype=float32,task.model.input_size=[32,32,3],"
        + ("" if model_id == 50 else f"task.model.backbone.resnet.model_id={model_id},") +
        f"task.train_data.input_path='{train}',task.validation_data.input_path='{validation}',"
        "task.train_data.global_batch_size=8,task.validation_data.global_batch_size=8,"
        "trainer.train_steps=2,trainer.steps_per_loop=2,trainer.summary_interval=2,"
        "trainer.checkpoint_interval=2,trainer.validation_interval=2,trainer.validation_steps=2,"
        + scaled_learning_rate_override(TFM_YAML, 8))
    assert run.returncode == 0, run.stderr[-4000:]
    with open(model_dir / "params.yaml") as f:
        params = yaml.safe_load(f)
    # From the YAML ...
    assert params["task"]["losses"]["label_smoothing"] == 0.1
    assert params["task"]["model"]["backbone"]["resnet"]["model_id"] == model_id
    stepwise = params["trainer"]["optimizer_config"]["learning_rate"]["stepwise"]
    assert stepwise["boundaries"] == [18750, 37500, 50000]
    # (The YAML's 0.8 / 0.08 / ... for 2,048 images, scaled to the batch of 8.)
    assert stepwise["values"] == pytest.approx([v * 8 / 2048 for v in (0.8, 0.08, 0.008, 0.0008)])
    # ... and from resnet_imagenet's defaults.
    assert params["task"]["model"]["num_classes"] == 1001
    assert params["task"]["losses"]["l2_weight_decay"] == 1e-4
    # Losses first: non-finite logits explain any odd metric below.
    losses = read_scalars(str(model_dir / "train"))["training_loss"]
    assert sorted(losses) == [2] and np.isfinite(losses[2])
    validation_scalars = read_scalars(str(model_dir / "validation"))
    assert sorted(validation_scalars["validation_loss"]) == [2]
    # ~ln(1001) = 6.9 for a barely trained 1001-way classifier; far above: blown-up logits.
    assert 0.0 < validation_scalars["validation_loss"][2] < 3 * np.log(1001)
    assert sorted(validation_scalars["accuracy"]) == [2]
    assert 0.0 <= validation_scalars["accuracy"][2] <= validation_scalars["top_5_accuracy"][2]
    assert sorted(name for name in os.listdir(model_dir) if name.endswith(".index")) == [
        "ckpt-2.index"]
