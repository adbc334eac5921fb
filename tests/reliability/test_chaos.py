"""Chaos: second trainers at random moments, and newest checkpoints broken at random.

Randomness is seeded; the seed is printed and in every failure message. Set LITE_CHAOS_SEED to
replay a run. Nothing depends on timing: events are ordered by polling files and exit codes.

- Lock trials (10, one chain of `lite-train` processes on one model_dir): a challenger starts at
  a random moment while a trainer runs (it must be refused, naming the trainer's pid), or, in
  some trials, the trainer is preempted (SIGTERM) and two trainers are started for the same
  model_dir at random offsets (exactly one wins; it resumes from the preemption checkpoint).
  After the last trial, a final run reaches train_steps.
- Corruption trials (in-process `run_experiment`): the newest checkpoint is broken one of
  four ways (missing .index, flipped bytes, truncated .data, empty state file) at random
  offsets; the restart must resume from the newest checkpoint that reads (judged independently
  by reading every tensor), warn when that is not the newest, and train on to train_steps.
  The suite's run has four trials, each way once in a random order; the release run has ten,
  the ways after the first four drawn at random.
"""

from __future__ import annotations

import logging
import os
import random
import re
import signal
import socket
import time

import pytest
import tensorflow as tf

from reliability_utils import (ERROR_PREFIX, checkpoint_global_step, checkpoint_numbers,
                               logged_train_steps, read_checkpoint, read_text,
                               restored_checkpoints, run_lite_train, start_lite_train,
                               stop_if_running, train_mock, wait_for)

pytestmark = pytest.mark.slow

TRIALS = 10
SEED = int(os.environ.get("LITE_CHAOS_SEED", random.SystemRandom().randrange(2 ** 32)))
print(f"chaos seed: {SEED} (LITE_CHAOS_SEED={SEED} replays it)")

_LOCK_OVERRIDE = ("trainer.steps_per_loop=100,trainer.summary_interval=100,"
                  "trainer.checkpoint_interval=100,trainer.max_to_keep=3")


def _train_args(model_dir, train_steps):
    return ["--experiment=mock", "--mode=train", f"--model_dir={model_dir}",
            f"--params_override=trainer.train_steps={train_steps},{_LOCK_OVERRIDE}"]


def _refusal(model_dir, holder_pid):
    return (f"{ERROR_PREFIX}model_dir {model_dir} is in use by another trainer (pid "
            f"{holder_pid} on host {socket.gethostname()})")


def _training(process, log_path):
    """True once `process` logged a training loop; raises if it ended."""
    if process.poll() is not None:
        raise AssertionError(f"seed {SEED}: trainer ended with {process.returncode}:\n"
                             f"{read_text(log_path)[-3000:]}")
    return bool(logged_train_steps(read_text(log_path)))


@pytest.mark.release(sibling="tests/reliability/test_model_dir_lock.py::"
                             "test_a_second_trainer_is_refused_evaluators_are_not_and_kill_9_leaves_no_stale_lock")
def test_second_trainers_at_random_moments_never_run_beside_the_first(tmp_path):
    rng = random.Random(SEED)
    model_dir = str(tmp_path / "model")
    restart_trials = set(rng.sample(range(TRIALS), 2))
    logs = iter(str(tmp_path / f"trainer{i}.log") for i in range(100))
    log_path = next(logs)
    trainer = start_lite_train(_train_args(model_dir, 10 ** 9), log_path)
    processes = [trainer]
    try:
        for trial in range(TRIALS):
            wait_for(lambda: _training(trainer, log_path), timeout=240,
                     what=f"seed {SEED} trial {trial}: a training loop")
            if trial not in restart_trials:
                time.sleep(rng.uniform(0.0, 1.0))  # a random moment of its training
                challenger = run_lite_train(_train_args(model_dir, 10 ** 9), timeout=240)
                assert challenger.returncode == 2, f"seed {SEED}: {challenger.stderr[-3000:]}"
                assert challenger.stderr.startswith(_refusal(model_dir, trainer.pid)), (
                    f"seed {SEED}: {challenger.stderr}")
                assert trainer.poll() is None
                continue
            # Preempt the trainer, then a restarted job and a duplicate of it race.
            trainer.send_signal(signal.SIGTERM)
            assert trainer.wait(timeout=240) == 143, f"seed {SEED}: {read_text(log_path)}"
            saved = re.findall(r"Preempted \(SIGTERM\): saved (\S+) at step (\d+)",
                               read_text(log_path))
            assert len(saved) == 1, f"seed {SEED}: {read_text(log_path)[-3000:]}"
            newest = (saved[0][0], int(saved[0][1]))
            racers = []
            for _ in range(2):
                racer_log = next(logs)
                racers.append((start_lite_train(_train_args(model_dir, 10 ** 9), racer_log),
                               racer_log))
                processes.append(racers[-1][0])
                time.sleep(rng.uniform(0.0, 0.5))
            loser = wait_for(lambda: next((r for r in racers if r[0].poll() is not None), None),
                             timeout=240, what=f"seed {SEED}: the losing racer")
            (winner, winner_log), = [r for r in racers if r is not loser]
            assert loser[0].returncode == 2, f"seed {SEED}: {read_text(loser[1])[-3000:]}"
            # Both racers may pass the driver's early check (neither held the lock yet); the
            # experiment runner's lock then refuses the later one, after TensorFlow loaded: its
            # last line, the only error line.
            loser_lines = [line for line in read_text(loser[1]).splitlines() if line.strip()]
            assert loser_lines[-1].startswith(_refusal(model_dir, winner.pid)), (
                f"seed {SEED}: {read_text(loser[1])}")
            assert [line for line in loser_lines if line.startswith(ERROR_PREFIX)] == [
                loser_lines[-1]], f"seed {SEED}: {read_text(loser[1])}"
            trainer, log_path = winner, winner_log
            wait_for(lambda: _training(trainer, log_path), timeout=240,
                     what=f"seed {SEED}: the winner's training")
            # The winner resumed from the preemption checkpoint: no rollback.
            assert restored_checkpoints(read_text(log_path)) == [newest], f"seed {SEED}"
        trainer.send_signal(signal.SIGTERM)
        assert trainer.wait(timeout=240) == 143
    finally:
        for process in processes:
            stop_if_running(process)

    # A resumed run reaches train_steps; the state file never pointed back.
    latest = max(checkpoint_numbers(model_dir))
    assert tf.train.latest_checkpoint(model_dir) == os.path.join(model_dir, f"ckpt-{latest}")
    final = run_lite_train(_train_args(model_dir, latest + 100), timeout=240)
    assert final.returncode == 0, f"seed {SEED}: {final.stderr[-3000:]}"
    assert restored_checkpoints(final.stderr) == [(os.path.join(model_dir, f"ckpt-{latest}"),
                                                   latest)]
    assert tf.train.latest_checkpoint(model_dir) == os.path.join(model_dir,
                                                                 f"ckpt-{latest + 100}")
    assert checkpoint_global_step(os.path.join(model_dir, f"ckpt-{latest + 100}")) == latest + 100


def _reads(prefix):
    """The independent judge: every (non-variant) tensor of the checkpoint reads."""
    try:
        read_checkpoint(prefix)
        return True
    except Exception:  # pylint: disable=broad-except
        return False


def _break_newest(model_dir, newest, way, rng):
    prefix = os.path.join(model_dir, f"ckpt-{newest}")
    data = prefix + ".data-00000-of-00001"
    if way == "missing_index":
        os.remove(prefix + ".index")
    elif way == "truncated_data":
        os.truncate(data, rng.randrange(0, os.path.getsize(data)))
    elif way == "flipped_bytes":
        with open(data, "r+b") as f:
            content = bytearray(f.read())
            start = rng.randrange(0, len(content) - 8)
            content[start:start + 8] = bytes(b ^ 0xFF for b in content[start:start + 8])
            f.seek(0)
            f.write(content)
    else:  # empty_state_file
        open(os.path.join(model_dir, "checkpoint"), "w").close()


_WAYS = ("missing_index", "flipped_bytes", "truncated_data", "empty_state_file")
_CORRUPTION = "tests/reliability/test_chaos.py::" \
    "test_a_newest_checkpoint_broken_at_random_is_never_a_silent_rollback"


@pytest.mark.parametrize("trials", [
    len(_WAYS), pytest.param(TRIALS, marks=pytest.mark.release(sibling=f"{_CORRUPTION}[4]"))])
def test_a_newest_checkpoint_broken_at_random_is_never_a_silent_rollback(tmp_path, caplog,
                                                                         trials):
    rng = random.Random(SEED + 1)
    caplog.set_level(logging.INFO)
    model_dir = str(tmp_path / "model")
    train_mock(model_dir, 20, max_to_keep=100)
    ways = rng.sample(_WAYS, len(_WAYS)) + [rng.choice(_WAYS)
                                            for _ in range(trials - len(_WAYS))]
    for trial, way in enumerate(ways):
        newest = max(checkpoint_numbers(model_dir))
        _break_newest(model_dir, newest, way, rng)
        readable = [n for n in checkpoint_numbers(model_dir)
                    if _reads(os.path.join(model_dir, f"ckpt-{n}"))]
        expected = max(readable)
        context = f"seed {SEED + 1} trial {trial} ({way} on ckpt-{newest})"

        caplog.clear()
        train_mock(model_dir, newest + 20, max_to_keep=100)
        log = caplog.text
        assert f"Restored checkpoint {os.path.join(model_dir, f'ckpt-{expected}')} (global step "\
               f"{expected})" in log, context
        if expected < newest:  # never silent
            assert re.search(rf"Skipping \d+ newer checkpoint\(s\) .*ckpt-{newest}: ", log), context
        if way == "empty_state_file":
            assert "was unreadable (it is empty): rebuilt it" in log, context
        final = os.path.join(model_dir, f"ckpt-{newest + 20}")
        assert tf.train.latest_checkpoint(model_dir) == final, context
        assert checkpoint_global_step(final) == newest + 20, context
        state = tf.train.get_checkpoint_state(model_dir)
        numbers = [int(p.rsplit("-", 1)[1]) for p in state.all_model_checkpoint_paths]
        assert numbers == sorted(numbers) and numbers[-1] == newest + 20, context
