"""TFM's convnet zoo through `lite-train`: one YAML per family, written in the layout of TFM's
experiment YAMLs (tests/vision/data), loaded under its TFM experiment and run for 2 training
steps and 1 evaluation step on small JPEG TFRecords at 32x32; and TFM's
imagenet_mobilenetv3.5_avg_tpu.yaml refused with one line, as TFM refuses it."""

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
from digits_images import write_digit_folders  # noqa: E402
from test_modes import read_scalars, subprocess_env  # noqa: E402
from tfm_yaml import scaled_learning_rate_override  # noqa: E402
from cli import lite_train_command, run_lite_train_in_process  # noqa: E402

DATA = os.path.join(HERE, "data")
TIMEOUT = 600
BATCH = 4
# An untrained 1001-way classifier's cross-entropy is ~ln(1001) = 6.9; a validation loss far
# above it means the evaluation's logits blew up (issue 34: 1e5 and more, or NaN).
MAX_VALIDATION_LOSS = 3 * np.log(1001)

ZOO = "tests/vision/test_vision_zoo_train.py::test_tfm_zoo_yaml_trains_two_steps_and_evaluates"
ONE_STEP = "tests/vision/test_vision_zoo_train.py::test_tfm_zoo_yaml_trains_one_step_in_process"
# (YAML, TFM experiment, overrides a CPU run needs beyond the common ones, backbone keys the
# params.yaml must show from the YAML).
FAMILIES = [
    ("imagenet_mobilenetv1_tpu.yaml", "mobilenet_imagenet", "",
     {"type": "mobilenet", "mobilenet": {"model_id": "MobileNetV1"}}),
    pytest.param(
        "imagenet_mobilenetv4_conv_small_tpu.yaml", "mobilenet_imagenet", "",
        {"type": "mobilenet", "mobilenet": {"model_id": "MobileNetV4ConvSmall"}},
        marks=pytest.mark.release(sibling=ZOO + "[imagenet_mobilenetv1_tpu]")),  # ~18 s
    pytest.param(
        "imagenet_mobilenetv3.5_avgseg_tpu.yaml", "mobilenet_imagenet", "",
        {"type": "mobilenet", "mobilenet": {"model_id": "MobileNetMultiAVGSeg"}},
        marks=pytest.mark.release(sibling=ZOO + "[imagenet_mobilenetv1_tpu]")),  # ~28 s
    # ResNet-50 in place of the YAML's 101 keeps the CPU test short; every other option of
    # the YAML (output stride, multigrid, stem v1, SE, stochastic depth) is kept.
    pytest.param(
        "imagenet_resnet101_deeplab_tpu.yaml", "resnet_imagenet",
        ",task.model.backbone.dilated_resnet.model_id=50",
        {"type": "dilated_resnet", "dilated_resnet": {
            "model_id": 50, "output_stride": 16, "multigrid": [1, 2, 4], "stem_type": "v1",
            "se_ratio": 0.25, "stochastic_depth_drop_rate": 0.2}},
        marks=pytest.mark.release(sibling=ONE_STEP + "[dilated_resnet]")),  # ~20 s
    # The YAML's norm_momentum 0.0 makes the BN statistics those of the last training batch:
    # from 4 images at 32x32 (1x1 in the last block group) they are degenerate, and the
    # evaluation's logits reached 1e5 or NaN (issue 34; TFM computes the same). TFM's default
    # momentum keeps them near their initial values for the 2 steps.
    pytest.param(
        "imagenet_resnetrs50_i160.yaml", "resnet_rs_imagenet",
        ",task.model.norm_activation.norm_momentum=0.99",
        {"type": "resnet", "resnet": {"model_id": 50, "stem_type": "v1", "se_ratio": 0.25,
                                      "resnetd_shortcut": True, "replace_stem_max_pool": True}},
        marks=pytest.mark.release(sibling=ONE_STEP + "[resnet_rs]")),  # the longest (~32 s)
]


def lite_train(*args):
    return subprocess.run(lite_train_command(*args),
                          cwd=ROOT, env=subprocess_env(), capture_output=True, text=True,
                          timeout=TIMEOUT)


@pytest.fixture(scope="module")
def small_records(tmp_path_factory):
    """(train glob, validation glob): 40 digits per split (every class) as 32x32 JPEG TFRecords."""
    from lite_launcher.vision import make_tfrecords
    root = tmp_path_factory.mktemp("zoo_jpeg")
    globs = []
    for split in ("train", "validation"):
        folder = str(root / f"{split}_images")
        write_digit_folders(folder, split, limit=40)
        prefix = str(root / split)
        assert make_tfrecords.main(["--image_dir", folder, "--output_prefix", prefix,
                                    "--num_shards", "1"]) == 0
        globs.append(prefix + "-*-of-*")
    return globs


def cpu_override(yaml_path, records, steps, deterministic_ops=True):
    """The YAML unchanged; then what a CPU run needs: no TPU / bfloat16, a small input and
    batch with the learning rate scaled to it, deterministic ops (the same run each time)
    unless told otherwise, `steps` training steps, then 1 evaluation step."""
    train, validation = records
    return (
        "runtime.distribution_strategy=off,runtime.mixed_precision_dtype=float32,"
        f"runtime.enable_xla=false,runtime.deterministic_ops={str(deterministic_ops).lower()},"
        "task.train_data.dtype=float32,"
        "task.validation_data.dtype=float32,task.model.input_size=[32,32,3],"
        f"task.train_data.input_path='{train}',task.validation_data.input_path='{validation}',"
        f"task.train_data.global_batch_size={BATCH},"
        f"task.validation_data.global_batch_size={BATCH},"
        f"trainer.train_steps={steps},trainer.steps_per_loop={steps},"
        f"trainer.summary_interval={steps},trainer.checkpoint_interval={steps},"
        f"trainer.validation_interval={steps},trainer.validation_steps=1,"
        + scaled_learning_rate_override(yaml_path, BATCH))


def _subset(expected, actual):
    for key, value in expected.items():
        if isinstance(value, dict):
            _subset(value, actual[key])
        else:
            assert actual[key] == value, key


@pytest.mark.parametrize("yaml_name, experiment, extra, backbone", FAMILIES,
                         ids=[getattr(f, "values", f)[0].split(".yaml")[0] for f in FAMILIES])
def test_tfm_zoo_yaml_trains_two_steps_and_evaluates(small_records, tmp_path, yaml_name,
                                                     experiment, extra, backbone):
    train, validation = small_records
    model_dir = tmp_path / "model"
    yaml_path = os.path.join(DATA, yaml_name)
    # The driver in this process (no TensorFlow start-up); deterministic ops would stay on in
    # it for every later test, and no assertion here needs the same run each time.
    result = run_lite_train_in_process(
        "--experiment", experiment, "--config_file", yaml_path,
        "--mode", "train_and_eval", "--model_dir", model_dir, "--params_override",
        cpu_override(yaml_path, small_records, steps=2, deterministic_ops=False) + extra)
    assert result.returncode == 0, (result.stderr[-2000:], result.logged[-2000:])
    with open(model_dir / "params.yaml") as f:
        params = yaml.safe_load(f)
    _subset(backbone, params["task"]["model"]["backbone"])
    assert params["task"]["model"]["num_classes"] == 1001
    # Losses first: non-finite logits explain any odd metric below.
    losses = read_scalars(str(model_dir / "train"))["training_loss"]
    assert sorted(losses) == [2] and np.isfinite(losses[2])
    validation_scalars = read_scalars(str(model_dir / "validation"))
    assert sorted(validation_scalars["validation_loss"]) == [2]
    assert 0.0 < validation_scalars["validation_loss"][2] < MAX_VALIDATION_LOSS
    assert sorted(validation_scalars["accuracy"]) == [2]
    assert 0.0 <= validation_scalars["accuracy"][2] <= validation_scalars["top_5_accuracy"][2]
    assert os.path.exists(model_dir / "ckpt-2.index")
    if experiment == "resnet_rs_imagenet":
        # TFM's resnet_rs_imagenet default: EMA over all weights (the YAML sets the decay only).
        assert params["trainer"]["optimizer_config"]["ema"] == {
            **params["trainer"]["optimizer_config"]["ema"], "average_decay": 0.9999,
            "trainable_weights_only": False}
        assert params["runtime"]["enable_xla"] is False


# A dilated ResNet with one bottleneck per group but the last (three: one per multigrid rate)
# at 8-16 filters, under a model_id of its own (TFM's 50 has 16 bottlenecks of 64-512 filters:
# the release YAML run keeps it); the tracing time is the layer count's.
NARROW_DILATED_RESNET = (14, [("bottleneck", 8, 1), ("bottleneck", 8, 1), ("bottleneck", 16, 1),
                              ("bottleneck", 16, 3)])


@pytest.mark.parametrize("yaml_name, experiment, extra", [
    ("imagenet_resnet101_deeplab_tpu.yaml", "resnet_imagenet",
     f",task.model.backbone.dilated_resnet.model_id={NARROW_DILATED_RESNET[0]}"),
    # ResNet-10 in place of the YAML's 50 (the tracing time is the layer count's); every
    # ResNet-RS option of the YAML and the experiment's EMA are kept.
    ("imagenet_resnetrs50_i160.yaml", "resnet_rs_imagenet",
     ",task.model.norm_activation.norm_momentum=0.99,task.model.backbone.resnet.model_id=10"),
], ids=["dilated_resnet", "resnet_rs"])
def test_tfm_zoo_yaml_trains_one_step_in_process(small_records, tmp_path, monkeypatch, yaml_name,
                                                 experiment, extra):
    """The release YAML runs' config and `run_experiment`, in this process and for one step:
    the YAML's backbone (every dilated ResNet option of the YAML, output stride 16 and
    multigrid included, on a narrow dilated ResNet; ResNet-RS options on a ResNet-10, with
    the experiment's EMA) trains: nearly every weight changes, all stay finite, the
    checkpoint is written."""
    import lite_launcher as ll
    import tensorflow as tf
    from lite_launcher.core import train_lib
    from lite_launcher.vision.configs import backbones
    from lite_launcher.vision.modeling.backbones import resnet_deeplab

    model_id, specs = NARROW_DILATED_RESNET  # lite's tables, as for TFM's narrow checkpoint
    monkeypatch.setitem(resnet_deeplab.DILATED_RESNET_SPECS, model_id, specs)
    monkeypatch.setattr(backbones, "DILATED_RESNET_MODEL_IDS",
                        backbones.DILATED_RESNET_MODEL_IDS + (model_id,))

    yaml_path = os.path.join(DATA, yaml_name)
    config = ll.override_config(ll.get_exp_config(experiment), [yaml_path],
                                cpu_override(yaml_path, small_records, steps=1) + extra
                                # The warmup's first rate is 0: without it the step moves.
                                + ",trainer.optimizer_config.warmup.type=null")
    task = ll.get_task(config.task, logging_dir=str(tmp_path))
    model = task.build_model()
    before = [w.numpy() for w in model.trainable_weights]
    model, _ = train_lib.run_experiment(
        distribution_strategy=tf.distribute.get_strategy(), task=task, mode="train",
        params=config, model_dir=str(tmp_path / "model"))
    assert all(np.isfinite(w.numpy()).all() for w in model.trainable_weights)
    assert tf.train.latest_checkpoint(str(tmp_path / "model")).endswith("ckpt-1")
    changed = [np.abs(a - b.numpy()).max() > 0 for a, b in zip(before, model.trainable_weights)]
    assert len(changed) > 50 and np.mean(changed) > 0.9, (len(changed), np.mean(changed))


def test_tfm_yaml_with_norm_activation_under_losses_is_refused_with_one_line(tmp_path):
    # TFM's imagenet_mobilenetv3.5_avg_tpu.yaml: TFM 2.20 refuses it too (no such key). The
    # driver in this process: the exit code and its stderr are the process's.
    result = run_lite_train_in_process("--experiment", "mobilenet_imagenet", "--config_file",
                        os.path.join(DATA, "imagenet_mobilenetv3.5_avg_tpu.yaml"),
                        "--mode", "train", "--model_dir", tmp_path / "model")
    assert result.returncode == 2
    errors = [l for l in result.stderr.splitlines() if l.startswith("lite-train: error:")]
    assert len(errors) == 1 and "task.losses.norm_activation" in errors[0], result.stderr
    assert result.stderr.strip().splitlines()[-1] == errors[0]
    assert not os.path.exists(tmp_path / "model" / "params.yaml")


def test_list_experiments_lists_resnet_rs_imagenet():
    result = lite_train("--list_experiments")
    assert result.returncode == 0
    assert "resnet_rs_imagenet" in result.stdout.split()
