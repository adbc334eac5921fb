"""A broken newest checkpoint: the restart resumes from the newest one that reads.

One in-process run writes ckpt-10..50 (mock experiment); each row copies that model_dir,
breaks it, and restarts `lite-train` to step 60: the driver's `main.run()` in this process for
the rows that resume, a real `lite-train` process for the one that must exit 1 (an exit code
and a last stderr line are what only a process shows). The four ways of the issue: a missing
.index, flipped bytes, a truncated .data, an empty state file.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import shutil
from typing import Callable, List, Optional

import pytest
import tensorflow as tf

from cli import run_lite_train_in_process
from reliability_utils import (ERROR_PREFIX, checkpoint_global_step, checkpoint_numbers,
                               read_checkpoint, restored_checkpoints, run_lite_train, snapshot,
                               train_mock)

pytestmark = pytest.mark.slow


def _args(model_dir, train_steps):
    return ["--experiment=mock", "--mode=train", f"--model_dir={model_dir}",
            f"--params_override=trainer.train_steps={train_steps},trainer.steps_per_loop=10,"
            "trainer.summary_interval=10,trainer.checkpoint_interval=10,trainer.max_to_keep=10"]


def _truncate(path):
    os.truncate(path, os.path.getsize(path) // 2)


def _flip_bytes(path):
    with open(path, "r+b") as f:
        data = bytearray(f.read())
        middle = len(data) // 2
        data[middle:middle + 8] = bytes(b ^ 0xFF for b in data[middle:middle + 8])
        f.seek(0)
        f.write(data)


def _data(model_dir, number):
    return os.path.join(model_dir, f"ckpt-{number}.data-00000-of-00001")


def _state_file(model_dir):
    return os.path.join(model_dir, "checkpoint")


def _leave_a_half_written_state_file(model_dir):
    with open(_state_file(model_dir) + ".tmp5f1c0ffee", "w") as f:
        f.write('model_checkpoint_path: "ckpt-3')


def _break_the_three_newest(model_dir):
    os.remove(os.path.join(model_dir, "ckpt-50.index"))
    _flip_bytes(_data(model_dir, 40))
    _truncate(_data(model_dir, 30))


def _empty_the_state_file(model_dir):
    open(_state_file(model_dir), "w").close()
    _leave_a_half_written_state_file(model_dir)


def _lose_the_state_update(model_dir):
    """As after a full disk while the state file was written: ckpt-50 is complete but the
    state file still names ckpt-40, and the temporary state file is left half-written."""
    with open(_state_file(model_dir)) as f:
        text = f.read()
    with open(_state_file(model_dir), "w") as f:
        f.write(text.replace('"ckpt-50"', '"ckpt-40"', 1).replace(
            'all_model_checkpoint_paths: "ckpt-50"\n', ""))
    assert tf.train.latest_checkpoint(model_dir).endswith("ckpt-40")
    _leave_a_half_written_state_file(model_dir)


@dataclasses.dataclass
class Row:
    name: str
    breaks: Callable[[str], None]
    resumed: Optional[int]  # the step resumed from; None: the run must refuse (exit 1)
    expected: List[str]  # texts of the one warning (or of the error line)
    moved: List[str] = dataclasses.field(default_factory=list)  # files moved to corrupt/


ROWS = [
    Row("missing_index_flipped_bytes_truncated_data", _break_the_three_newest, 20,
        ["Skipping 3 newer checkpoint(s)", "ckpt-50: its .index file is missing",
         "ckpt-40: DataLossError", "ckpt-30: OutOfRangeError: Read less bytes than requested",
         "Resuming from ckpt-20"],
        ["ckpt-50.data-00000-of-00001", "ckpt-40.index", "ckpt-40.data-00000-of-00001",
         "ckpt-30.index", "ckpt-30.data-00000-of-00001"]),
    Row("empty_state_file", _empty_the_state_file, 50,
        ["was unreadable (it is empty): rebuilt it", "latest: ckpt-50"], ["checkpoint"]),
    Row("state_update_lost_on_a_full_disk", _lose_the_state_update, 50,
        ["named ckpt-40; it now names ckpt-50"]),
    Row("none_reads", lambda d: [_truncate(_data(d, n)) for n in range(10, 60, 10)], None,
        ["No checkpoint in model_dir", "tried ckpt-50 (OutOfRangeError", "ckpt-40 (",
         "ckpt-10 (", "Read less bytes"]),
]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """{row name: (model_dir, its snapshot before the restart, the restart's outcome with
    `returncode`, `stderr` and, in-process, `logged`)}."""
    root = tmp_path_factory.mktemp("fallback")
    base = str(root / "base")
    train_mock(base, 50)  # the checkpoints _args' restart expects: every 10 steps, 10 kept
    assert checkpoint_numbers(base) == [10, 20, 30, 40, 50]
    outcomes = {}
    for row in ROWS:
        model_dir = str(root / row.name)
        shutil.copytree(base, model_dir)
        row.breaks(model_dir)
        before = snapshot(model_dir)
        restart = (run_lite_train(_args(model_dir, 60)) if row.resumed is None
                   else run_lite_train_in_process(*_args(model_dir, 60)))
        outcomes[row.name] = model_dir, before, restart
    return outcomes


@pytest.mark.parametrize("row", [r for r in ROWS if r.resumed is not None], ids=lambda r: r.name)
def test_the_restart_resumes_from_the_newest_checkpoint_that_reads(results, row):
    model_dir, _, completed = results[row.name]
    log = completed.logged
    assert completed.returncode == 0, (completed.stderr + log)[-3000:]
    assert ERROR_PREFIX not in completed.stderr and "Traceback" not in completed.stderr + log
    # Never silent: the one warning names what was skipped or rebuilt, and why.
    warnings = [line for line in log.splitlines() if all(text in line for text in row.expected)]
    assert len(warnings) == 1, log[-3000:]
    assert restored_checkpoints(log) == [(os.path.join(model_dir, f"ckpt-{row.resumed}"),
                                          row.resumed)]
    # Training went on from there to step 60, with a checkpoint every 10 steps.
    final = os.path.join(model_dir, "ckpt-60")
    assert tf.train.latest_checkpoint(model_dir) == final
    assert checkpoint_global_step(final) == 60
    listed = tf.train.get_checkpoint_state(model_dir).all_model_checkpoint_paths
    assert [os.path.basename(p) for p in listed] == [f"ckpt-{n}" for n in range(10, 70, 10)]
    for number in checkpoint_numbers(model_dir):
        read_checkpoint(os.path.join(model_dir, f"ckpt-{number}"))  # every one reads
    # Bad files are kept, moved aside (one folder per incident), never deleted.
    moved = glob.glob(os.path.join(model_dir, "corrupt", "*", "*"))
    assert sorted(os.path.basename(p) for p in moved) == sorted(row.moved)
    assert not glob.glob(os.path.join(model_dir, "checkpoint.tmp*"))


def test_when_no_checkpoint_reads_it_is_one_line_exit_1_and_nothing_is_touched(results):
    model_dir, before, completed = results["none_reads"]
    assert completed.returncode == 1, completed.stderr[-3000:]
    lines = [line for line in completed.stderr.splitlines() if line.strip()]
    assert "Traceback" not in completed.stderr
    assert lines[-1].startswith(ERROR_PREFIX)
    assert all(text in lines[-1] for text in ROWS[-1].expected + [model_dir]), lines[-1]
    assert snapshot(model_dir) == before


def test_a_full_disk_while_the_state_file_is_written_names_the_checkpoint_the_restart_uses(
        tmp_path, monkeypatch, caplog):
    """The checkpoint of step 20 is written, then the disk fills while the state file is: the
    error names ckpt-20 as the latest, the half-written temporary state file is removed
    before the exit, and the restart resumes from ckpt-20. (The failure is injected where
    TensorFlow writes the state file; everything else is real.)"""
    import logging

    from tensorflow.python.checkpoint import checkpoint_management

    from lite_launcher.orbit.controller import CheckpointWriteError

    model_dir = str(tmp_path / "model")
    real_write = checkpoint_management.file_io.atomic_write_string_to_file

    def write_state(filename, contents, overwrite=True):
        if tf.io.gfile.exists(os.path.join(model_dir, "ckpt-20.index")):
            with open(filename + ".tmp0123abcd", "w") as f:
                f.write(contents[: len(contents) // 2])  # the disk filled up mid-write
            raise tf.errors.ResourceExhaustedError(None, None, "No space left on device")
        return real_write(filename, contents, overwrite)

    monkeypatch.setattr(checkpoint_management.file_io, "atomic_write_string_to_file",
                        write_state)
    caplog.set_level(logging.INFO)
    with pytest.raises(CheckpointWriteError) as raised:
        train_mock(model_dir, 30)
    message = str(raised.value)
    assert "No space left on device" in message
    assert f"latest: {os.path.join(model_dir, 'ckpt-20')}" in message
    assert tf.train.latest_checkpoint(model_dir).endswith("ckpt-10")  # the stale state file
    # Removed by the failed save itself: an exit on a full disk leaves no temporary file.
    assert "checkpoint.tmp0123abcd, left by an interrupted write" in caplog.text
    assert not glob.glob(os.path.join(model_dir, "checkpoint.tmp*"))

    monkeypatch.setattr(checkpoint_management.file_io, "atomic_write_string_to_file",
                        real_write)
    caplog.clear()
    train_mock(model_dir, 30)
    log = caplog.text
    assert f"Restored checkpoint {os.path.join(model_dir, 'ckpt-20')} (global step 20)" in log
    assert tf.train.latest_checkpoint(model_dir) == os.path.join(model_dir, "ckpt-30")
    assert checkpoint_global_step(os.path.join(model_dir, "ckpt-30")) == 30
