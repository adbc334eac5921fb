"""One trainer per model_dir: a second trainer exits 2 naming the holder; evaluators share it;
a killed trainer leaves no stale lock."""

from __future__ import annotations

import os
import signal
import socket

import pytest
import tensorflow as tf

import lite_launcher as ll
from cli import run_lite_train_in_process
from lite_launcher.common import model_dir_lock
from lite_launcher.core import registry
from reliability_utils import (ERROR_PREFIX, checkpoint_numbers, logged_train_steps, read_text,
                               restored_checkpoints, run_lite_train, snapshot, start_lite_train,
                               wait_for)

pytestmark = pytest.mark.slow

_OVERRIDE = ("trainer.steps_per_loop=100,trainer.summary_interval=100,"
             "trainer.checkpoint_interval=100,trainer.max_to_keep=3")


def _train(model_dir, train_steps):
    return ["--experiment=mock", "--mode=train", f"--model_dir={model_dir}",
            f"--params_override=trainer.train_steps={train_steps},{_OVERRIDE}"]


def test_a_second_trainer_is_refused_evaluators_are_not_and_kill_9_leaves_no_stale_lock(
        tmp_path):
    model_dir = str(tmp_path / "model")
    log_path = str(tmp_path / "first.log")
    first = start_lite_train(_train(model_dir, 10 ** 9), log_path)
    try:
        # The `checkpoint` state file, not a ckpt-N.index: the state file is written after the
        # checkpoint's files, and a restart resumes from what it names.
        wait_for(lambda: first.poll() is not None or tf.train.latest_checkpoint(model_dir),
                 timeout=240, what="the first trainer's first checkpoint")
        assert first.poll() is None, read_text(log_path)[-3000:]
        # Stopped, it still holds the lock (and its pid) but leaves the CPU to the rest.
        first.send_signal(signal.SIGSTOP)
        params_before = snapshot(os.path.join(model_dir, "params.yaml"))

        second = run_lite_train(_train(model_dir, 10 ** 9))
        assert second.returncode == 2, second.stderr[-3000:]
        # Refused before TensorFlow loads: one line and nothing else.
        assert second.stderr.splitlines() == [
            f"{ERROR_PREFIX}model_dir {model_dir} is in use by another trainer (pid "
            f"{first.pid} on host {socket.gethostname()}); two trainers would overwrite each "
            f"other's checkpoints. Wait for it to end or stop it, or train in another model_dir "
            f"(evaluation modes may share it)."]
        assert snapshot(os.path.join(model_dir, "params.yaml")) == params_before

        # An evaluator takes no lock and is not refused (the driver, in this process).
        evaluation = run_lite_train_in_process("--experiment=mock", "--mode=eval",
                                               f"--model_dir={model_dir}",
                                               "--params_override=trainer.validation_steps=2")
        assert evaluation.returncode == 0, (evaluation.stderr + evaluation.logged)[-3000:]
        assert "in use by another trainer" not in evaluation.stderr + evaluation.logged

        # In-process (run_experiment), the same refusal, before anything is built.
        params = registry.get_exp_config("mock")
        with pytest.raises(model_dir_lock.ModelDirLockedError, match=f"pid {first.pid}"):
            ll.run_experiment(distribution_strategy=tf.distribute.get_strategy(),
                              task=registry.get_task(params.task), mode="train", params=params,
                              model_dir=model_dir)
    finally:
        if first.poll() is None:
            first.send_signal(signal.SIGKILL)
        first.wait(timeout=60)
    assert first.returncode == -signal.SIGKILL

    # The OS dropped the lock with the killed process: the next trainer (the driver, in this
    # process) resumes at once.
    # What a restart resumes from: the state file's checkpoint. Stopped by SIGSTOP between a
    # checkpoint's files and the state file's update (likelier on a loaded machine), the newest
    # ckpt-N.index is one checkpoint ahead of it.
    latest = int(tf.train.latest_checkpoint(model_dir).rsplit("-", 1)[1])
    resumed = run_lite_train_in_process(*_train(model_dir, latest + 100))
    assert resumed.returncode == 0, (resumed.stderr + resumed.logged)[-3000:]
    assert restored_checkpoints(resumed.logged) == [(os.path.join(model_dir, f"ckpt-{latest}"),
                                                     latest)]
    assert logged_train_steps(resumed.logged) == [latest + 100]
    assert max(checkpoint_numbers(model_dir)) == latest + 100
    assert not model_dir_lock.held(model_dir)  # run_experiment's refusal kept no hold


def test_refuse_if_held_answers_without_taking_the_lock(tmp_path):
    # The driver's early answer (before TensorFlow loads): another process's lock refuses,
    # this process's own does not, and asking takes nothing.
    import subprocess  # pylint: disable=import-outside-toplevel
    import sys  # pylint: disable=import-outside-toplevel

    held_elsewhere, free = tmp_path / "held", tmp_path / "free"
    held_elsewhere.mkdir()
    free.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); "
         "fcntl.flock(fd, fcntl.LOCK_EX); print('locked', flush=True); sys.stdin.read()",
         str(held_elsewhere)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(model_dir_lock.ModelDirLockedError, match=f"pid {holder.pid} on"):
            model_dir_lock.refuse_if_held(str(held_elsewhere))
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    model_dir_lock.refuse_if_held(str(held_elsewhere))  # its holder is gone
    model_dir_lock.refuse_if_held(str(free))
    assert not model_dir_lock.held(str(free))  # asking took no lock
    assert model_dir_lock.hold(str(free))
    try:
        model_dir_lock.refuse_if_held(str(free))  # this process's own hold
    finally:
        model_dir_lock.release(str(free))
    model_dir_lock.refuse_if_held(str(tmp_path / "not_yet"))  # nothing there to hold
