"""TFM parity: official/core/base_trainer_test.py restated on lite_launcher.Trainer.

TFM runs each scenario under the default strategy, a TPU strategy and a one-GPU strategy; here
the default strategy and a one-device strategy on the CPU (and 2-replica MirroredStrategy
where a count depends on the replicas). The parameter-server scenarios run in one fresh
process (`async_scenarios.py`) whose results three tests share.
"""

import functools
import json
import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import lite_launcher as ll
from lite_launcher.core import base_trainer
from lite_launcher.core import exporter as exporter_lib
from mock_task import MockTask, mock_config

ROOT = pathlib.Path(__file__).resolve().parents[2]
STRATEGIES = {
    "default": lambda: tf.distribute.get_strategy(),
    "one_device": lambda: tf.distribute.OneDeviceStrategy("/cpu:0"),
    "mirrored": lambda: tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]),
}


def create_test_trainer(config, model_dir=None, task=None):
    """TFM's TrainerTest.create_test_trainer: MockTask, its optimizer, the best exporter."""
    task = task or MockTask(config.task)
    return ll.Trainer(
        config, task, model=task.build_model(),
        optimizer=task.create_optimizer(config.trainer.optimizer_config, config.runtime),
        checkpoint_exporter=exporter_lib.maybe_create_best_ckpt_exporter(config, model_dir))


@pytest.mark.parametrize("strategy_name", ["default", "one_device"])
def test_trainer_train(strategy_name):
    """Restates base_trainer_test.TrainerTest.test_trainer_train."""
    with STRATEGIES[strategy_name]().scope():
        trainer = create_test_trainer(mock_config())
        logs = trainer.train(tf.convert_to_tensor(5, dtype=tf.int32))
    assert "training_loss" in logs and "learning_rate" in logs
    assert float(logs["learning_rate"]) == pytest.approx(0.1)  # TFM's constant default
    assert int(trainer.global_step.numpy()) == 5


@pytest.mark.parametrize("strategy_name", ["default", "one_device"])
def test_trainer_passing_datasets(strategy_name):
    """Restates base_trainer_test.TrainerTest.test_trainer_passing_datasets: datasets passed in,
    the config's data sections set to None."""
    strategy = STRATEGIES[strategy_name]()
    config = mock_config()
    with strategy.scope():
        task = MockTask(config.task)
        train_dataset = base_trainer.distribute_dataset(strategy, task.build_inputs,
                                                      config.task.train_data)
        validation_dataset = base_trainer.distribute_dataset(strategy, task.build_inputs,
                                                           config.task.validation_data)
        config.task.train_data = None
        config.task.validation_data = None
        trainer = ll.Trainer(
            config, task, model=task.build_model(),
            optimizer=task.create_optimizer(config.trainer.optimizer_config, config.runtime),
            train_dataset=train_dataset, validation_dataset=validation_dataset)
    logs = trainer.train(tf.convert_to_tensor(5, dtype=tf.int32))
    assert "training_loss" in logs and "learning_rate" in logs
    logs = trainer.evaluate(tf.convert_to_tensor(5, dtype=tf.int32))
    assert "validation_loss" in logs


@functools.lru_cache(maxsize=None)
def async_results():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    env.pop("TF_CONFIG", None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    process = subprocess.run(
        [sys.executable, str(pathlib.Path(__file__).with_name("async_scenarios.py"))],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert process.returncode == 0, process.stderr[-3000:]
    return json.loads(process.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_base_async_trainer():
    """Restates base_trainer_test.TrainerTest.test_base_async_trainer: hooks that count steps
    in ps variables; train(10) counts 10 (split over the workers), evaluate(11) counts 11."""
    results = async_results()
    assert results["coordinator"] == "ClusterCoordinator"
    assert results["train_steps"] == 10
    assert results["eval_steps"] == 11


@pytest.mark.slow
def test_async_trainer_train():
    """Restates base_trainer_test.TrainerTest.test_async_trainer_train."""
    assert {"training_loss", "learning_rate"} <= set(async_results()["train_logs"])


@pytest.mark.slow
def test_async_trainer_validate():
    """Restates base_trainer_test.TrainerTest.test_async_trainer_validate (eval_tf_while_loop):
    `acc` and `validation_loss` are reported; 5 steps were evaluated."""
    results = async_results()
    assert {"acc", "validation_loss"} <= set(results["eval_logs"])
    assert results["validation_loss_count"] == 5.0
    assert results["validation_loss"] == pytest.approx(1.0)  # zeros in, bias 1 out
    # As in TFM, an evaluation with a reduce state (eval_begin returning one) is refused.
    assert "stateful evaluation" in results["stateful_error"]


@pytest.mark.parametrize("strategy_name", ["default", "one_device", "mirrored"])
def test_trainer_validate(strategy_name):
    """Restates base_trainer_test.TrainerTest.test_trainer_validate: the task's aggregated
    `counter` is one per replica step."""
    strategy = STRATEGIES[strategy_name]()
    with strategy.scope():
        trainer = create_test_trainer(mock_config())
        logs = trainer.evaluate(tf.convert_to_tensor(5, dtype=tf.int32))
    assert logs["counter"] == 5.0 * strategy.num_replicas_in_sync
    assert "validation_loss" in logs


class MockTaskWithoutValidationLoss(MockTask):

    def validation_step(self, inputs, model, metrics=None):
        logs = super().validation_step(inputs, model)
        del logs[self.loss]
        return logs


@pytest.mark.parametrize("strategy_name", ["default", "one_device", "mirrored"])
def test_trainer_validate_without_loss(strategy_name):
    """Restates base_trainer_test.TrainerTest.test_trainer_validate_without_loss."""
    strategy = STRATEGIES[strategy_name]()
    with strategy.scope():
        config = mock_config()
        trainer = create_test_trainer(config, task=MockTaskWithoutValidationLoss(config.task))
        logs = trainer.evaluate(tf.convert_to_tensor(5, dtype=tf.int32))
    assert logs["counter"] == 5.0 * strategy.num_replicas_in_sync
    assert "validation_loss" not in logs


@pytest.mark.parametrize("mixed_precision_dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("loss_scale", [None, "dynamic", 128, 256])
def test_configure_optimizer(mixed_precision_dtype, loss_scale):
    """Restates base_trainer_test.TrainerTest.test_configure_optimizer. Keras 3's
    LossScaleOptimizer has no `dynamic` attribute: a fixed scale is lite's
    FixedLossScaleOptimizer (a LossScaleOptimizer subclass)."""
    config = mock_config()
    config.runtime.override({"mixed_precision_dtype": mixed_precision_dtype,
                             "loss_scale": loss_scale})
    trainer = create_test_trainer(config)
    optimizer = trainer.optimizer
    if mixed_precision_dtype == "float16":
        assert isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
        fixed = type(optimizer).__name__ == "FixedLossScaleOptimizer"
        assert fixed == (loss_scale not in (None, "dynamic"))
        if fixed:
            assert float(optimizer.initial_scale) == loss_scale
    else:
        assert isinstance(optimizer, keras.optimizers.SGD)
    logs = trainer.train(tf.convert_to_tensor(5, dtype=tf.int32))
    assert "training_loss" in logs
    assert np.isfinite(float(logs["training_loss"]))


def test_export_best_ckpt(tmp_path):
    """Restates base_trainer_test.TrainerTest.test_export_best_ckpt."""
    config = mock_config(best_checkpoint_export_subdir="best_ckpt",
                         best_checkpoint_eval_metric="acc")
    trainer = create_test_trainer(config, model_dir=str(tmp_path))
    trainer.train(tf.convert_to_tensor(1, dtype=tf.int32))
    trainer.evaluate(tf.convert_to_tensor(1, dtype=tf.int32))
    assert (tmp_path / "best_ckpt" / "info.json").exists()
    # TFM's name for the first export of a fresh checkpoint.
    assert tf.train.latest_checkpoint(str(tmp_path / "best_ckpt")) == str(
        tmp_path / "best_ckpt" / "best_ckpt-1")


def test_model_with_compiled_loss():
    """Restates base_trainer_test.TrainerTest.test_model_with_compiled_loss: a model compiled
    with a Keras loss still trains with the task's loss."""
    config = mock_config()
    task = MockTask(config.task)
    model = task.build_model()
    model.compile(loss=keras.losses.CategoricalCrossentropy())
    trainer = ll.Trainer(config, task, model=model,
                         optimizer=task.create_optimizer(config.trainer.optimizer_config))
    logs = trainer.train(tf.convert_to_tensor(5, dtype=tf.int32))
    assert "training_loss" in logs
    # Inputs are zeros: the output is the bias, 1.0, 0.9, ... over the 5 steps (SGD at 0.1 on
    # a loss whose gradient is 1), so their mean is 0.8 (the compiled loss plays no part).
    assert float(logs["training_loss"]) == pytest.approx(0.8, rel=1e-5)
