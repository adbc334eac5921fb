"""kill -9 at random points, including in the middle of a checkpoint write.

Two chains of restarts run side by side (one model_dir each). In each trial a `lite-train`
process resumes the chain's model_dir, trains (a checkpoint every 10 steps, max_to_keep 2)
and is killed with SIGKILL either a random time after training started or the moment a
checkpoint write is seen in progress (new files in a `ckpt-N_temp` directory). After every
kill the newest checkpoint listed in model_dir must be complete (every tensor readable, its
global step equal to its number), and the next process must resume from exactly the newest
complete checkpoint on disk (that one, or a newer one whose state-file update the kill cut
off). A last process per chain trains 20 more steps and finishes.
"""

from __future__ import annotations

import concurrent.futures
import os
import random
import signal
import time

import pytest
import tensorflow as tf

from reliability_utils import (FAST_DIGITS, checkpoint_global_step, logged_train_steps,
                               override_json, read_checkpoint, read_text, restored_checkpoints,
                               run_lite_train, start_lite_train, stop_if_running, wait_for)

pytestmark = pytest.mark.slow

# Two chains of five kills: ten trials, half of them aimed at a checkpoint write.
CHAIN_KINDS = (("time", "write", "time", "write", "time"),
               ("write", "time", "write", "time", "write"))
NEVER_DONE = 10 ** 7


def _args(model_dir, train_steps):
    flat = {**FAST_DIGITS, "trainer.train_steps": train_steps, "trainer.max_to_keep": 2}
    return ["--experiment", "digits_mlp", "--mode", "train", "--model_dir", model_dir,
            "--params_override", override_json(flat)]


def _write_marks(model_dir):
    """(path, mtime) of every file in a `ckpt-N_temp` directory: the traces of a write.

    A finished write removes the files it made there, so a mark that appears during a trial
    and is still there after the kill means the kill interrupted that write. Files left by
    earlier kills keep their names and mtimes.
    """
    marks = set()
    try:
        names = os.listdir(model_dir)
    except FileNotFoundError:
        return marks
    for name in names:
        if not name.endswith("_temp"):
            continue
        directory = os.path.join(model_dir, name)
        try:
            for file_name in os.listdir(directory):
                path = os.path.join(directory, file_name)
                marks.add((path, os.stat(path).st_mtime_ns))
        except FileNotFoundError:  # removed by the writer as we looked
            continue
    return marks


def _readable(path):
    """The global step of a checkpoint whose every tensor reads, else None."""
    try:
        tensors = read_checkpoint(path)
    except (tf.errors.OpError, ValueError):
        return None
    return int(tensors["global_step/.ATTRIBUTES/VARIABLE_VALUE"])


def _check_complete(model_dir):
    """The checkpoint a restart must resume from (None if none) and its step.

    The newest listed checkpoint must be complete (every tensor reads, step == number). A kill
    between a finished write and the state-file update leaves a newer complete checkpoint on
    disk; the restart resumes from that one (no finished step is thrown away).
    """
    listed = tf.train.latest_checkpoint(model_dir)
    if listed is not None:
        step = _readable(listed)
        assert step is not None and listed.endswith(f"ckpt-{step}"), (listed, step)
    numbers = sorted((int(name[len("ckpt-"):-len(".index")]) for name in os.listdir(model_dir)
                      if name.startswith("ckpt-") and name.endswith(".index")), reverse=True)
    for number in numbers:
        path = os.path.join(model_dir, f"ckpt-{number}")
        if _readable(path) == number:
            assert listed is None or number >= _readable(listed), (path, listed)
            return path, number
    assert listed is None, listed
    return None, 0


def _expected_restore(log, latest, step):
    if latest is None:
        assert "No checkpoint in" in log and not restored_checkpoints(log)
    else:
        assert restored_checkpoints(log) == [(latest, step)]


def _run_chain(model_dir, kinds, seed):
    rng = random.Random(seed)
    trials = []
    latest, step = None, 0
    for index, kind in enumerate(kinds):
        log_path = f"{model_dir}.trial{index}.log"
        marks_before = _write_marks(model_dir)
        process = start_lite_train(_args(model_dir, NEVER_DONE), log_path)
        try:
            # Until the first train loop of this process has ended (tracing is done).
            wait_for(lambda: process.poll() is not None
                     or logged_train_steps(read_text(log_path)),
                     timeout=180, interval=0.02, what="training to start")
            assert process.poll() is None, read_text(log_path)[-3000:]
            if kind == "write":
                wait_for(lambda: _write_marks(model_dir) - marks_before, timeout=60,
                         interval=0.0005, what="a checkpoint write")
            else:
                time.sleep(rng.uniform(0.0, 1.5))
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=60)
        finally:
            stop_if_running(process)
        assert process.returncode == -signal.SIGKILL
        log = read_text(log_path)
        # This process resumed from what the previous kill left behind.
        _expected_restore(log, latest, step)
        partial_write = bool(_write_marks(model_dir) - marks_before)
        new_latest, new_step = _check_complete(model_dir)
        assert new_step >= step
        trials.append(dict(kind=kind, partial_write=partial_write, step=new_step,
                           logged=max(logged_train_steps(log))))
        latest, step = new_latest, new_step
    # The last restart finishes 20 steps later.
    target = step + 20
    completed = run_lite_train(_args(model_dir, target))
    assert completed.returncode == 0, completed.stderr[-3000:]
    _expected_restore(completed.stderr, latest, step)
    final = tf.train.latest_checkpoint(model_dir)
    assert final == os.path.join(model_dir, f"ckpt-{target}")
    assert checkpoint_global_step(final) == target
    read_checkpoint(final)
    return trials


@pytest.mark.release(sibling="tests/reliability/test_kill_restart.py::"
                             "test_a_trainer_start_removes_leftovers_of_an_interrupted_checkpoint_write")
def test_kill_9_at_random_points_always_resumes_from_the_last_complete_checkpoint(tmp_path):
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(CHAIN_KINDS)) as pool:
        futures = [pool.submit(_run_chain, str(tmp_path / f"chain{i}"), kinds, seed=i)
                   for i, kinds in enumerate(CHAIN_KINDS)]
        trials = [trial for future in futures for trial in future.result()]
    assert len(trials) >= 10
    # Kills really landed inside checkpoint writes (their temp files were left behind); a
    # kill can rarely miss a write that ends within the same millisecond.
    writes = [t for t in trials if t["kind"] == "write"]
    assert sum(t["partial_write"] for t in writes) >= len(writes) - 2, trials
    # Training made progress across the kills: checkpoints were written and resumed from.
    assert sum(t["step"] > 0 for t in trials) >= 5, trials


def test_a_trainer_start_removes_leftovers_of_an_interrupted_checkpoint_write(tmp_path):
    import lite_launcher as ll
    import tensorflow as tf

    model_dir = tmp_path / "model"
    leftover = model_dir / "ckpt-5_temp"
    leftover.mkdir(parents=True)
    (leftover / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"half written")
    keep = model_dir / "notes_temp"  # not a checkpoint's: left alone
    keep.mkdir()
    params = ll.get_exp_config("mock")
    params.override({"trainer": {"train_steps": 4, "steps_per_loop": 2, "summary_interval": 2,
                                 "checkpoint_interval": 2}})
    strategy = tf.distribute.get_strategy()
    task = ll.get_task(params.task, logging_dir=str(model_dir))
    ll.run_experiment(distribution_strategy=strategy, task=task, mode="train", params=params,
                      model_dir=str(model_dir), save_summary=False)
    assert not leftover.exists()
    assert keep.exists()
    assert tf.train.latest_checkpoint(str(model_dir)).endswith("ckpt-4")
