"""SIGTERM (preemption): a checkpoint at the current step, exit 143, and the next start resumes.

Periodic checkpoints are effectively off (only the first loop's save happens), so the
checkpoint found after the SIGTERM can only be the on-demand one.
"""

from __future__ import annotations

import os
import signal

import pytest
import tensorflow as tf

from reliability_utils import (FAST_DIGITS, checkpoint_global_step, checkpoint_numbers,
                               logged_train_steps, override_json, read_checkpoint, read_text,
                               restored_checkpoints, run_lite_train, start_lite_train,
                               stop_if_running, wait_for)

pytestmark = pytest.mark.slow

PREEMPTION_EXIT_CODE = 143  # 128 + SIGTERM


def _args(model_dir, train_steps):
    flat = {**FAST_DIGITS, "trainer.train_steps": train_steps,
            "trainer.checkpoint_interval": 1_000_000}
    return ["--experiment", "digits_mlp", "--mode", "train", "--model_dir", model_dir,
            "--params_override", override_json(flat)]


def test_sigterm_checkpoints_the_current_step_and_the_restart_resumes_from_it(tmp_path):
    model_dir = str(tmp_path / "model")
    log_path = str(tmp_path / "preempted.log")
    process = start_lite_train(_args(model_dir, 10 ** 7), log_path)
    try:
        wait_for(lambda: process.poll() is not None
                 or max(logged_train_steps(read_text(log_path)) or [0]) >= 50,
                 timeout=180, interval=0.02, what="50 training steps")
        assert process.poll() is None, read_text(log_path)[-3000:]
        process.send_signal(signal.SIGTERM)
        returncode = process.wait(timeout=120)
    finally:
        stop_if_running(process)
    log = read_text(log_path)
    assert returncode == PREEMPTION_EXIT_CODE, log[-3000:]

    # The loop running at SIGTERM finished (it is not logged), then its step was saved.
    step = max(logged_train_steps(log)) + 10
    latest = tf.train.latest_checkpoint(model_dir)
    assert latest == os.path.join(model_dir, f"ckpt-{step}")
    assert f"Preempted (SIGTERM): saved {latest} at step {step}" in log
    assert checkpoint_global_step(latest) == step
    assert checkpoint_numbers(model_dir) == [10, step]  # the first loop's save, the on-demand one
    read_checkpoint(latest)

    completed = run_lite_train(_args(model_dir, step + 20))
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert restored_checkpoints(completed.stderr) == [(latest, step)]
    assert logged_train_steps(completed.stderr) == [step + 10, step + 20]
    final = os.path.join(model_dir, f"ckpt-{step + 20}")
    assert tf.train.latest_checkpoint(model_dir) == final
    assert checkpoint_global_step(final) == step + 20
