"""Mixed precision + XLA + MirroredStrategy on a convnet (issue 52): Keras 3 users crash in
loss scaling there (keras#18666, #20763, #21366: `LossScaleOptimizer.apply` calls `merge_call`
inside a `jit_compile`d train step). Lite compiles only `Task.compute_gradients` under a
mirrored strategy and applies the update, loss scaling included, outside XLA
(`core.base_trainer.xla_train_step`); on a machine without GPU or TPU it compiles no convnet.

Both paths, through the driver's runner, mirrored over two logical CPUs (tests/conftest.py) on
`digits_cnn` with `runtime: {mixed_precision_dtype, enable_xla: true, distribution_strategy:
mirrored}`: as this CPU machine configures it (no XLA, a warning; float16), and as a GPU
machine does (the CPU rule patched off: XLA-compiled forward and backward of the
convolutions), both float16 with dynamic loss scaling, the dtype of the crashes (bfloat16
needs no loss scaling; test_distribution.py trains with it). Four steps: finite losses, the
global step and the optimizer's applied steps at 4, the weights moved and finite, the loss
scale kept at its initial value (no step skipped)."""

import logging
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

import lite_launcher as ll
from lite_launcher.core import base_trainer
from lite_launcher.core.train_lib import ExperimentRunner

import xla_checks

STEPS = 4


@pytest.fixture(autouse=True)
def float32_policy_after_each_test():
    """Mixed precision is global Keras state: every test leaves the float32 policy behind."""
    yield
    keras.mixed_precision.set_global_policy("float32")


def _run(model_dir, dtype):
    """digits_cnn, `STEPS` steps of 2 per loop, mirrored over the two logical CPUs, as the
    driver runs it: (trainer, the training losses logged, the initial weights)."""
    params = ll.get_exp_config("digits_cnn")
    params.override({
        "runtime": {"mixed_precision_dtype": dtype, "enable_xla": True,
                    "distribution_strategy": "mirrored"},
        "trainer": {"train_steps": STEPS, "steps_per_loop": 2, "summary_interval": 2,
                    "checkpoint_interval": STEPS, "validation_interval": STEPS}},
        is_strict=True)
    params.validate()
    devices = [d.name for d in tf.config.list_logical_devices("CPU")][:2]
    assert len(devices) == 2, "tests/conftest.py sets up two logical CPUs"
    strategy = ll.get_distribution_strategy("mirrored", devices=devices)
    ll.set_mixed_precision_policy(dtype)  # before the model is built, as main.py does
    with strategy.scope():
        task = ll.get_task(params.task)
    runner = ExperimentRunner(distribution_strategy=strategy, task=task, mode="train",
                              params=params, model_dir=str(model_dir))
    trainer = runner.trainer
    initial = [w.numpy() for w in trainer.model.trainable_weights]
    losses = []
    train = trainer.train

    def train_and_keep_the_loss(num_steps):
        logs = train(num_steps)
        losses.append(float(logs["training_loss"]))
        return logs

    trainer.train = train_and_keep_the_loss
    runner.run()
    return trainer, losses, initial


def _assert_trained(trainer, losses, initial, dtype):
    assert trainer.strategy.num_replicas_in_sync == 2
    assert len(losses) == STEPS // 2 and all(math.isfinite(loss) for loss in losses), losses
    assert 1.0 < losses[0] < 3.0  # ten classes, untrained: near ln(10)
    assert int(trainer.global_step.numpy()) == STEPS
    optimizer = trainer.optimizer
    scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    assert scaled == (dtype == "float16")
    inner = optimizer.inner_optimizer if scaled else optimizer
    assert int(inner.iterations.numpy()) == STEPS  # no step skipped for a non-finite gradient
    if scaled:
        assert float(optimizer.dynamic_scale.numpy()) == 2.0 ** 15  # Keras's initial scale
    conv = trainer.model.trainable_weights[0]
    assert len(conv.shape) == 4 and conv.dtype == "float32"
    for weight in trainer.model.trainable_weights:
        assert np.all(np.isfinite(weight.numpy())), weight.path
    assert np.abs(conv.numpy() - initial[0]).max() > 1e-5


def test_as_configured_on_a_cpu_the_convnet_trains_mirrored_without_xla(tmp_path, caplog):
    dtype = "float16"
    with caplog.at_level(logging.WARNING):
        trainer, losses, initial = _run(tmp_path, dtype)
    assert "not compiling" in caplog.text and "XLA:CPU" in caplog.text
    assert xla_checks.xla_compiled_calls(trainer) == []
    _assert_trained(trainer, losses, initial, dtype)


# ~24 s with its teardown; the suite runs the same mirrored float16 loss-scaled step on the
# CPU's configuration (XLA skipped there), the sibling below.
@pytest.mark.release(sibling="tests/test_mixed_precision_xla_mirrored.py::"
                             "test_as_configured_on_a_cpu_the_convnet_trains_mirrored_without_xla")
def test_as_on_a_gpu_the_convnets_gradients_compile_and_the_scaled_update_runs_outside(
        tmp_path, monkeypatch):
    dtype = "float16"
    monkeypatch.setattr(base_trainer, "_convnet_on_cpu_only", lambda model: False)
    trainer, losses, initial = _run(tmp_path, dtype)
    compiled = xla_checks.xla_compiled_calls(trainer)
    assert compiled and all("compute_gradients" in name for name in compiled), compiled
    _assert_trained(trainer, losses, initial, dtype)
