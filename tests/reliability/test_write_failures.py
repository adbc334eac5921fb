"""Writes that fail mid-run: summaries stop with one warning and training goes on; a checkpoint
write that fails is one line, exit 1, the newest complete checkpoint intact, and no temporary
file (`checkpoint.tmp<hex>`, `ckpt-N_temp/`) left behind.

Two ways to fail, each one `lite-train` run of the mock experiment:
- a file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored: "File too large", no root needed) of 3400
  bytes (above params.yaml's ~3.1 KB, written first), in a process of its own (the limit is the
  process's): the event file reaches it first, then the checkpoint state file, which grows by
  one line per kept checkpoint;
- a full disk: a 40 KiB tmpfs ("No space left on device"), mounted only where this process may
  mount (root in a container that allows it; skipped elsewhere), the driver run in this
  process: the event file fills it, then a later checkpoint (every 150 steps) cannot be written.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from lite_launcher.checkpointing import checkpoints
import tensorflow as tf

from cli import run_lite_train_in_process
from reliability_utils import (ERROR_PREFIX, REPO_ROOT, checkpoint_global_step,
                               lite_train_command, logged_train_steps, read_checkpoint,
                               subprocess_env)

pytestmark = pytest.mark.slow

_TRAIN_TAG = "training_loss"


def _run(args, file_size_limit=None):
    prefix = []
    if file_size_limit is not None:
        prefix = [sys.executable, "-c",
                  "import os, resource, signal, sys; "
                  "signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
                  f"resource.setrlimit(resource.RLIMIT_FSIZE, ({file_size_limit}, "
                  f"{file_size_limit})); os.execv(sys.argv[1], sys.argv[1:])"]
    # Pipes, not files: the limit applies to every file the process writes.
    return subprocess.run(prefix + lite_train_command(args), capture_output=True, text=True,
                          timeout=240, env=subprocess_env(), cwd=REPO_ROOT)


def _train(model_dir, **trainer):
    override = ",".join(f"trainer.{key}={value}" for key, value in trainer.items())
    return ["--experiment=mock", "--mode=train", f"--model_dir={model_dir}",
            f"--params_override={override}"]


def _summary_steps(summary_dir, tag):
    """Steps of `tag` in the event files of `summary_dir`, up to a record cut short by the
    failed write (TensorBoard reads them so too)."""
    steps = []
    for path in tf.io.gfile.glob(os.path.join(summary_dir, "events.out.tfevents.*")):
        try:
            for event in tf.compat.v1.train.summary_iterator(path):
                steps += [event.step for value in event.summary.value if value.tag == tag]
        except tf.errors.DataLossError:
            pass
    return steps


def _debris(model_dir):
    """Temporary files of interrupted writes anywhere under model_dir."""
    found = []
    for root, dirs, files in os.walk(model_dir):
        found += [os.path.join(root, d) for d in dirs if d.endswith("_temp")]
        found += [os.path.join(root, f) for f in files if ".tmp" in f or "tempstate" in f]
    return found


def _check_failed_checkpoint_write(returncode, stderr, model_dir, cause):
    """Exit code 1 and one error line on `stderr`, last, naming model_dir and `cause`; returns
    the step of the checkpoint it names as the latest, after checking that it reads and that a
    restart would resume from it."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert returncode == 1, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert [line for line in lines if line.startswith(ERROR_PREFIX)] == [lines[-1]]
    assert lines[-1].startswith(f"{ERROR_PREFIX}Could not write the checkpoint of step "), lines[-1]
    assert f" to {model_dir}: " in lines[-1] and cause in lines[-1], lines[-1]
    latest = re.search(r"\(latest: (\S+)\)", lines[-1]).group(1)
    assert not _debris(model_dir), _debris(model_dir)
    step = int(re.search(r"ckpt-(\d+)$", latest).group(1))
    assert checkpoint_global_step(latest) == step
    read_checkpoint(latest)  # every tensor reads
    assert checkpoints.prepare_model_dir(model_dir) == latest
    return step


def _check_summaries_stopped_once(log, summary_dir, cause):
    warnings = re.findall(rf"Could not write summaries to {re.escape(summary_dir)} \(\w+Error: "
                          rf"[^)]*{cause}\); no more summaries are written there, and the run "
                          r"goes on", log)
    assert len(warnings) == 1, log[-3000:]
    assert log.count("Could not write summaries") == 1


def test_a_file_size_limit_stops_the_summaries_and_then_a_failed_state_write_leaves_no_debris(
        tmp_path):
    model_dir = str(tmp_path / "model")
    completed = _run(_train(model_dir, train_steps=1000, steps_per_loop=5, summary_interval=5,
                            checkpoint_interval=5, max_to_keep=300), file_size_limit=3400)
    _check_summaries_stopped_once(completed.stderr, os.path.join(model_dir, "train"),
                                  "File too large")
    latest_step = _check_failed_checkpoint_write(completed.returncode, completed.stderr,
                                                 model_dir, "File too large")
    # Training went on for many checkpoints after the summaries stopped.
    last_summary = max(_summary_steps(os.path.join(model_dir, "train"), _TRAIN_TAG))
    assert latest_step >= last_summary + 50, (last_summary, latest_step)
    assert max(logged_train_steps(completed.stderr)) == latest_step


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A 40 KiB tmpfs mounted at tmp_path/disk (skips where mounting is not permitted)."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40k", "tmpfs",
                              str(mount_point)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield str(mount_point)
    finally:
        subprocess.run(["umount", str(mount_point)], capture_output=True)


def test_a_full_disk_stops_the_summaries_and_then_a_failed_checkpoint_leaves_no_debris(
        tiny_tmpfs):
    model_dir = os.path.join(tiny_tmpfs, "model")
    # Checkpoints every 150 steps keep taking space after the summaries stopped, so one of them
    # meets the full disk whatever the event file's last buffered write left free.
    completed = run_lite_train_in_process(*_train(
        model_dir, train_steps=600, steps_per_loop=1, summary_interval=1,
        checkpoint_interval=150, max_to_keep=100))
    _check_summaries_stopped_once(completed.logged, os.path.join(model_dir, "train"),
                                  "No space left on device")
    # In this process the driver's stderr holds its own lines only: the error line alone.
    assert len(completed.stderr.splitlines()) == 1, completed.stderr
    latest = _check_failed_checkpoint_write(completed.returncode, completed.stderr, model_dir,
                                            "No space left on device")
    failed = int(re.search(r"Could not write the checkpoint of step (\d+)",
                           completed.stderr).group(1))
    assert latest < failed <= 600, (latest, failed)
    assert max(logged_train_steps(completed.logged)) == failed  # trained on until that save
    assert "Traceback" not in completed.logged
