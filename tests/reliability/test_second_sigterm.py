"""SIGTERM after SIGTERM while the preemption checkpoint is saved: the save completes and the
exit code is the 143 the log announces."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest
import tensorflow as tf

from reliability_utils import (checkpoint_global_step, logged_train_steps, read_checkpoint,
                               read_text, start_lite_train, stop_if_running, wait_for)

pytestmark = pytest.mark.slow


def test_sigterms_during_the_preemption_save_still_exit_143_with_the_checkpoint(tmp_path):
    model_dir = str(tmp_path / "model")
    log_path = str(tmp_path / "train.log")
    process = start_lite_train([
        "--experiment=mock", "--mode=train", f"--model_dir={model_dir}",
        "--params_override=trainer.train_steps=1000000000,trainer.steps_per_loop=100,"
        "trainer.summary_interval=100,trainer.checkpoint_interval=1000000000"], log_path)
    try:
        wait_for(lambda: process.poll() is not None or logged_train_steps(read_text(log_path)),
                 timeout=240, what="a training loop")
        assert process.poll() is None, read_text(log_path)[-3000:]
        # A SIGTERM every 2 ms until the process ends: the first asks for the preemption save,
        # the others arrive while it saves and while the process exits.
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
    saved = re.findall(r"Preempted \(SIGTERM\): saved (\S+) at step (\d+); exiting with code "
                       r"143\.", log)
    assert len(saved) == 1, log[-3000:]
    assert returncode == 143, log[-3000:]
    path, step = saved[0][0], int(saved[0][1])
    assert tf.train.latest_checkpoint(model_dir) == path == os.path.join(model_dir, f"ckpt-{step}")
    assert checkpoint_global_step(path) == step
    read_checkpoint(path)  # complete: every tensor reads
    assert "Traceback" not in log
