"""SIGTERM (preemption): a checkpoint at the current step, exit 143, and the next start resumes.

Periodic checkpoints are effectively off (only the first loop's save happens), so the
checkpoint found after the SIGTERM can only be the on-demand one. A SIGTERM is sent every
2 ms until the process ends: the first asks for the preemption save, the others arrive while
it saves and while the process exits, and change nothing (one save, exit 143). The preempted
trainer is a real process (the signals are the subject); the restart runs the driver in this
process.
"""

from __future__ import annotations

import os
import re
import signal
import time

import pytest
import tensorflow as tf

from cli import run_lite_train_in_process
from reliability_utils import (FAST_DIGITS, checkpoint_global_step, checkpoint_numbers,
                               logged_train_steps, override_json, read_checkpoint, read_text,
                               restored_checkpoints, start_lite_train, stop_if_running, wait_for)

pytestmark = pytest.mark.slow

PREEMPTION_EXIT_CODE = 143  # 128 + SIGTERM


def _args(model_dir, train_steps):
    flat = {**FAST_DIGITS, "trainer.train_steps": train_steps,
            "trainer.checkpoint_interval": 1_000_000}
    return ["--experiment", "digits_mlp", "--mode", "train", "--model_dir", model_dir,
            "--params_override", override_json(flat)]


def test_sigterms_checkpoint_the_current_step_once_exit_143_and_the_restart_resumes(tmp_path):
    model_dir = str(tmp_path / "model")
    log_path = str(tmp_path / "preempted.log")
    process = start_lite_train(_args(model_dir, 10 ** 7), log_path)
    try:
        wait_for(lambda: process.poll() is not None
                 or max(logged_train_steps(read_text(log_path)) or [0]) >= 50,
                 timeout=180, interval=0.02, what="50 training steps")
        assert process.poll() is None, read_text(log_path)[-3000:]
        sent = 0
        while process.poll() is None and sent < 50_000:
            process.send_signal(signal.SIGTERM)
            sent += 1
            time.sleep(0.002)
        returncode = process.wait(timeout=120)
    finally:
        stop_if_running(process)
    log = read_text(log_path)
    assert sent > 1
    assert returncode == PREEMPTION_EXIT_CODE, log[-3000:]
    assert "Traceback" not in log

    # The loop running at the first SIGTERM finished (it is not logged), then its step was saved.
    step = max(logged_train_steps(log)) + 10
    latest = tf.train.latest_checkpoint(model_dir)
    assert latest == os.path.join(model_dir, f"ckpt-{step}")
    assert re.findall(r"Preempted \(SIGTERM\): saved (\S+) at step (\d+); exiting with code "
                      r"143\.", log) == [(latest, str(step))], log[-3000:]
    assert checkpoint_global_step(latest) == step
    assert checkpoint_numbers(model_dir) == [10, step]  # the first loop's save, the on-demand one
    read_checkpoint(latest)

    completed = run_lite_train_in_process(*_args(model_dir, step + 20))
    assert completed.returncode == 0, (completed.stderr + completed.logged)[-3000:]
    assert restored_checkpoints(completed.logged) == [(latest, step)]
    assert logged_train_steps(completed.logged) == [step + 10, step + 20]
    final = os.path.join(model_dir, f"ckpt-{step + 20}")
    assert tf.train.latest_checkpoint(model_dir) == final
    assert checkpoint_global_step(final) == step + 20
