"""Faults during training: a NaN or exploding loss, and a disk that fills up.

Loss faults run in-process through `run_experiment` with a task that poisons chosen training
steps (counted by the task itself, so a step redone after a recovery is clean). The disk test
runs `lite-train` with a file-size limit (RLIMIT_FSIZE) below the size of one checkpoint: the
write fails in the middle like on a full disk, portably and without root.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import lite_launcher as ll
from lite_launcher.core import registry
from reliability_utils import (ERROR_PREFIX, FAST_DIGITS, REPO_ROOT, checkpoint_numbers,
                               lite_train_command, nested, override_json, poison_params,
                               read_checkpoint, run_poison_task, snapshot, subprocess_env)
from cli import run_lite_train_in_process


def _weights(prefix):
    tensors = read_checkpoint(prefix)
    return [v for k, v in tensors.items() if k.startswith("model/") or "_trainable_var" in k]


def _check_checkpoints_are_good(model_dir):
    """Every checkpoint holds the step of its name and finite weights; returns the numbers."""
    numbers = checkpoint_numbers(model_dir)
    for number in numbers:
        prefix = os.path.join(model_dir, f"ckpt-{number}")
        tensors = read_checkpoint(prefix)
        assert int(tensors["global_step/.ATTRIBUTES/VARIABLE_VALUE"]) == number, prefix
        assert all(np.all(np.isfinite(w)) for w in _weights(prefix)), prefix
    return numbers


def _messages(caplog, text):
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


@pytest.mark.parametrize("factor,reason", [(float("nan"), "the training loss is NaN at step 25"),
                                           (1e9, "exceeds trainer.loss_upper_bound (1000.0)")],
                         ids=["nan", "loss_upper_bound"])
def test_a_diverged_loop_is_recovered_from_the_last_checkpoint_and_training_finishes(
        tmp_path, caplog, factor, reason):
    caplog.set_level(logging.INFO)
    model_dir = str(tmp_path)
    # Executed step 23 lies in the loop of steps 21-25; its redo runs as steps 26-30.
    model, task = run_poison_task(poison_params(poison_from=23, poison_to=23, factor=factor),
                                  model_dir)

    recoveries = _messages(caplog, "recovering (trial")
    assert len(recoveries) == 1 and reason in recoveries[0]
    assert "recovering (trial 1 of 3)" in recoveries[0]
    assert _messages(caplog, "Recovered the model from checkpoint") == [
        f"Recovered the model from checkpoint {os.path.join(model_dir, 'ckpt-20')}."]
    # Five steps were redone after the recovery.
    assert int(task.executed_steps.numpy()) == 45
    assert all(np.all(np.isfinite(w.numpy())) for w in model.weights)
    assert _check_checkpoints_are_good(model_dir) == list(range(5, 45, 5))


def test_divergence_beyond_recovery_max_trials_stops_with_a_clear_error(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    model_dir = str(tmp_path)
    with pytest.raises(RuntimeError) as raised:
        run_poison_task(poison_params(trainer={"recovery_max_trials": 2}, poison_from=23,
                                      poison_to=10 ** 6), model_dir)
    message = str(raised.value)
    assert "Training diverged: the training loss is NaN at step 25" in message
    assert "divergence 3" in message and "trainer.recovery_max_trials is 2" in message
    recoveries = _messages(caplog, "recovering (trial")
    assert [r.split(": ")[-1] for r in recoveries] == ["recovering (trial 1 of 2).",
                                                       "recovering (trial 2 of 2)."]
    # Nothing diverged reached the disk: the last good checkpoint is still the latest.
    assert _check_checkpoints_are_good(model_dir) == [5, 10, 15, 20]
    good = tf.train.latest_checkpoint(model_dir)
    assert good == os.path.join(model_dir, "ckpt-20")


def _fast_digits_params(train_steps):
    params = registry.get_exp_config("digits_mlp")
    params.override(nested({**FAST_DIGITS, "trainer.train_steps": train_steps}), is_strict=True)
    return params


@pytest.mark.slow
def test_a_full_disk_is_a_clear_error_naming_the_path_and_the_last_checkpoint_survives(
        tmp_path):
    model_dir = str(tmp_path / "model")
    params = _fast_digits_params(train_steps=10)
    strategy = tf.distribute.get_strategy()
    with strategy.scope():
        task = registry.get_task(params.task, logging_dir=model_dir)
    ll.run_experiment(distribution_strategy=strategy, task=task, mode="train", params=params,
                      model_dir=model_dir)
    good = os.path.join(model_dir, "ckpt-10")
    data_size = os.path.getsize(good + ".data-00000-of-00001")
    assert data_size > 64_000
    before = {name: entry for name, entry in snapshot(model_dir).items()
              if name.startswith("ckpt-10") or name == "checkpoint"}

    # Files may not grow beyond 64 KB (writes past it fail with EFBIG, SIGXFSZ ignored).
    limit = ("import os, resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
             "resource.setrlimit(resource.RLIMIT_FSIZE, (64000, 64000)); "
             "os.execv(sys.argv[1], sys.argv[1:])")
    command = [sys.executable, "-c", limit] + lite_train_command(
        ["--experiment", "digits_mlp", "--mode", "train", "--model_dir", model_dir,
         "--params_override", override_json({**FAST_DIGITS, "trainer.train_steps": 30})])
    completed = subprocess.run(command, capture_output=True, text=True, timeout=180,
                               env=subprocess_env(), cwd=REPO_ROOT)

    lines = [line for line in completed.stderr.splitlines() if line.strip()]
    assert completed.returncode == 1, completed.stderr[-3000:]
    assert "Traceback" not in completed.stderr
    assert lines[-1].startswith(ERROR_PREFIX)
    assert f"Could not write the checkpoint of step 20 to {model_dir}" in lines[-1]
    assert "File too large" in lines[-1]
    assert f"latest: {good}" in lines[-1]
    # The last good checkpoint is untouched, still the latest, and complete.
    after = {name: entry for name, entry in snapshot(model_dir).items()
             if name.startswith("ckpt-10") or name == "checkpoint"}
    assert after == before
    # The failed write's temporary files are gone (TF leaves `ckpt-20_temp/` behind).
    assert not [name for name in os.listdir(model_dir)
                if name.endswith("_temp") or ".tmp" in name], os.listdir(model_dir)
    assert tf.train.latest_checkpoint(model_dir) == good
    assert int(read_checkpoint(good)["global_step/.ATTRIBUTES/VARIABLE_VALUE"]) == 10


@pytest.mark.slow
def test_divergence_through_lite_train_is_one_line_exit_1(tmp_path):
    # mock's loss starts near 1: a bound of -1 makes the first loop a divergence, and with
    # recovery_max_trials 0 the run stops at once. The driver's whole path in this process
    # (`main.run()` from flag parsing to the exit code): no TensorFlow start-up.
    result = run_lite_train_in_process(
        "--experiment=mock", "--mode=train", f"--model_dir={tmp_path / 'm'}",
        "--params_override=trainer.loss_upper_bound=-1.0,trainer.recovery_max_trials=0,"
        "trainer.train_steps=10,trainer.steps_per_loop=5,trainer.summary_interval=5")
    assert result.returncode == 1, (result.stderr + result.logged)[-2000:]
    assert "Traceback" not in result.stderr
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("lite-train: error: Training diverged")
    assert "recovery_max_trials is 0" in last_line
