"""Exact resume: N steps, a new process, N more == 2N steps straight, bit for bit.

digits_mlp with `runtime.deterministic_ops` (deterministic TF ops, fixed seeds) and a shuffled,
repeated training set (1,500 examples, batch 64: an epoch is 23 steps, so N = 30 stops mid-way
through the second epoch). One process trains 2N steps straight, saving the iterator; its
checkpoint of step N, copied into fresh model_dirs, is what two new processes resume from (three
processes in all). Only with `trainer.checkpoint_train_iterator` does the resumed run see the
same batches; without it the resumed run starts the input pipeline over (the iterator state in
the checkpoint is not read) and ends with other weights, which shows the test can tell the
difference.
"""

from __future__ import annotations

import concurrent.futures
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
def runs(tmp_path_factory):
    """Three model dirs: 2N straight; its ckpt-N resumed to 2N with the iterator restored, and
    without it."""
    root = tmp_path_factory.mktemp("exact_resume")
    straight, resumed, restarted = (str(root / name) for name in
                                    ("straight", "resumed", "restarted_input"))
    _train(straight, 2 * N, True)
    for model_dir in (resumed, restarted):
        _resume_from(straight, model_dir, N)
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        second = {"resumed": pool.submit(_train, resumed, 2 * N, True),
                  "restarted": pool.submit(_train, restarted, 2 * N, False)}
        logs = {name: f.result() for name, f in second.items()}
    return dict(straight=straight, resumed=resumed, restarted=restarted, logs=logs)


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
def test_without_the_iterator_in_the_checkpoint_the_input_restarts_and_weights_differ(runs):
    straight = _state(runs["straight"], 2 * N)
    restarted = _state(runs["restarted"], 2 * N)
    assert restored_checkpoints(runs["logs"]["restarted"]) == [
        (os.path.join(runs["restarted"], f"ckpt-{N}"), N)]
    assert int(restarted["global_step/.ATTRIBUTES/VARIABLE_VALUE"]) == 2 * N
    weights = [n for n in straight if n.startswith("optimizer/_trainable_variables/")]
    assert any(not np.array_equal(straight[n], restarted[n]) for n in weights)


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
