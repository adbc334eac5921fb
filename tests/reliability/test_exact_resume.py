"""Exact resume: N steps, a new process, N more == 2N steps straight, bit for bit.

digits_mlp with `runtime.deterministic_ops` (deterministic TF ops, fixed seeds) and a shuffled,
repeated training set (1,500 examples, batch 64: an epoch is 23 steps, so N = 30 stops mid-way
through the second epoch). One process trains 2N steps straight, saving the iterator; its
checkpoint of step N, copied into a fresh model_dir, is what a new process resumes from. Only
with `trainer.checkpoint_train_iterator` does the resumed run see the same batches; without it
(a third process: the `release` control) the resumed run starts the input pipeline over (the
iterator state in the checkpoint is not read) and ends with other weights, which shows the
test can tell the difference.
"""

from __future__ import annotations

import os
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

import lite_launcher as ll
from reliability_utils import (FAST_DIGITS, checkpoint_global_step, override_json,
                               read_checkpoint, restored_checkpoints, run_lite_train)

N = 30

# Bookkeeping that legitimately differs between one save history and another.
_NOT_STATE = ("save_counter/.ATTRIBUTES/VARIABLE_VALUE", "_CHECKPOINTABLE_OBJECT_GRAPH")


def _train(model_dir, steps, checkpoint_iterator):
    flat = {**FAST_DIGITS, "trainer.train_steps": steps, "runtime.deterministic_ops": True,
            "trainer.checkpoint_train_iterator": checkpoint_iterator,
            "trainer.max_to_keep": 10}  # the straight run's ckpt-N stays to be resumed from
    completed = run_lite_train(["--experiment", "digits_mlp", "--mode", "train",
                                "--model_dir", model_dir,
                                "--params_override", override_json(flat)])
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed.stderr


def _state(model_dir, step):
    prefix = os.path.join(model_dir, f"ckpt-{step}")
    assert tf.train.latest_checkpoint(model_dir) == prefix
    return {k: v for k, v in read_checkpoint(prefix).items() if k not in _NOT_STATE}


def _resume_from(source, model_dir, step):
    """A fresh model_dir holding only `source`'s checkpoint of `step`, listed as the latest."""
    os.makedirs(model_dir)
    for suffix in (".index", ".data-00000-of-00001"):
        shutil.copy(os.path.join(source, f"ckpt-{step}{suffix}"), model_dir)
    tf.compat.v1.train.update_checkpoint_state(model_dir, os.path.join(model_dir, f"ckpt-{step}"))


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """The model dir of 2N steps straight, its ckpt-N kept to be resumed from."""
    model_dir = str(tmp_path_factory.mktemp("exact_resume") / "straight")
    _train(model_dir, 2 * N, True)
    return model_dir


def _resumed_run(straight, model_dir, checkpoint_iterator):
    """straight's ckpt-N resumed to 2N in a new process; returns (model_dir, its log)."""
    _resume_from(straight, model_dir, N)
    return model_dir, _train(model_dir, 2 * N, checkpoint_iterator)


@pytest.fixture(scope="module")
def runs(straight):
    """straight's ckpt-N resumed to 2N with the iterator restored."""
    resumed, log = _resumed_run(straight, os.path.join(os.path.dirname(straight), "resumed"),
                                True)
    return dict(straight=straight, resumed=resumed, logs={"resumed": log})


@pytest.mark.slow
def test_resumed_run_equals_straight_run_bit_for_bit(runs):
    straight = _state(runs["straight"], 2 * N)
    resumed = _state(runs["resumed"], 2 * N)
    # The second process really resumed from step N rather than starting over, with
    # deterministic ops.
    assert restored_checkpoints(runs["logs"]["resumed"]) == [
        (os.path.join(runs["resumed"], f"ckpt-{N}"), N)]
    assert "Deterministic ops on (runtime.deterministic_ops)" in runs["logs"]["resumed"]
    assert sorted(straight) == sorted(resumed)
    names = sorted(straight)
    # Weights, Adam's two slots per weight, the optimizer's step and the global step.
    assert "global_step/.ATTRIBUTES/VARIABLE_VALUE" in names
    assert "optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE" in names
    slots = [n for n in names if n.startswith("optimizer/_variables/")]
    weights = [n for n in names if n.startswith("optimizer/_trainable_variables/")]
    assert len(weights) == 4 and len(slots) >= 2 * len(weights)
    for name in names:
        np.testing.assert_array_equal(resumed[name], straight[name], err_msg=name)
    assert int(straight["global_step/.ATTRIBUTES/VARIABLE_VALUE"]) == 2 * N
    assert int(straight["optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE"]) == 2 * N
    assert checkpoint_global_step(os.path.join(runs["resumed"], f"ckpt-{2 * N}")) == 2 * N


@pytest.mark.slow
@pytest.mark.release(sibling="tests/reliability/test_exact_resume.py::"
                             "test_resumed_run_equals_straight_run_bit_for_bit")
def test_without_the_iterator_in_the_checkpoint_the_input_restarts_and_weights_differ(
        straight, tmp_path):
    """The control of the bit-for-bit test: the same resume, the iterator not restored."""
    restarted_dir, log = _resumed_run(straight, str(tmp_path / "restarted_input"), False)
    restarted = _state(restarted_dir, 2 * N)
    expected = _state(straight, 2 * N)
    assert restored_checkpoints(log) == [(os.path.join(restarted_dir, f"ckpt-{N}"), N)]
    assert int(restarted["global_step/.ATTRIBUTES/VARIABLE_VALUE"]) == 2 * N
    weights = [n for n in expected if n.startswith("optimizer/_trainable_variables/")]
    assert any(not np.array_equal(expected[n], restarted[n]) for n in weights)


def test_iterator_checkpoint_under_a_distribution_strategy_is_a_clear_config_error():
    config = ll.ExperimentConfig()
    config.trainer.checkpoint_train_iterator = True
    config.task.train_data.global_batch_size = 4
    strategy = ll.get_distribution_strategy("mirrored", devices=["/cpu:0", "/cpu:1"])

    class _Task(ll.Task):
        def build_inputs(self, params, input_context=None):
            x = np.zeros((8, 2), np.float32)
            return tf.data.Dataset.from_tensor_slices((x, x[:, 0])).repeat().batch(2)

    with strategy.scope():
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        with pytest.raises(ll.ConfigError, match="checkpoint_train_iterator.*MirroredStrategy"):
            ll.Trainer(config, _Task(config.task), model, keras.optimizers.SGD(0.1),
                       evaluate=False)
