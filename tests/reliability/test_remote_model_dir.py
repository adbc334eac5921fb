"""A model_dir on a non-local file system (gs://, s3://, hdfs://), tried with TensorFlow's
in-memory `ram://` file system, in one process through the driver's `run()`.

One chain of five `run()` calls on ram:// model_dirs (so `run()` is also shown callable again
in one process): train, a resume of it, train_and_eval, eval, continuous_eval. After each, every
file of the run is in ram:// (listed with `tf.io.gfile.walk`) and nothing was created on local
disk (the working directory stays empty). Plus: a readability probe that cannot decide (the
file system fails, not the checkpoint) does not refuse a checkpoint.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import uuid

import pytest
import tensorflow as tf

from lite_launcher.checkpointing import checkpoints
from lite_launcher.commands import train as main_lib

_OVERRIDE = ("trainer.steps_per_loop=5,trainer.summary_interval=5,trainer.checkpoint_interval=5,"
             "trainer.validation_steps=1,trainer.validation_interval=5,"
             "trainer.continuous_eval_timeout=1")
_NOT_LOCKED = "is not on a local file system, so it is not locked"
_EVENTS = re.compile(r"events\.out\.tfevents\.[^/]+$")


def _ram_files(root):
    """Every file under the ram:// directory `root`, relative to it (event files as
    '<dir>/events')."""
    files = set()
    for directory, _, names in tf.io.gfile.walk(root):
        relative = directory[len(root):].strip("/")
        for name in names:
            path = f"{relative}/{name}" if relative else name
            files.add(_EVENTS.sub("events", path))
    return files


def _checkpoint_files(*numbers):
    return {f"ckpt-{n}.{suffix}" for n in numbers for suffix in ("index",
                                                                 "data-00000-of-00001")}


@pytest.fixture
def driver(tmp_path, monkeypatch, caplog):
    """Calls `main.run()` with argv in an empty working directory; returns its exit code."""
    monkeypatch.chdir(tmp_path)
    caplog.set_level(logging.INFO, logger="absl")
    sigterm = signal.getsignal(signal.SIGTERM)
    root = f"ram://lite_{uuid.uuid4().hex}"

    def run(*args):
        monkeypatch.setattr(sys, "argv", ["lite-train", *args])
        caplog.clear()
        with pytest.raises(SystemExit) as exit_info:
            main_lib.run()
        return exit_info.value.code or 0

    yield root, run
    signal.signal(signal.SIGTERM, sigterm)  # the driver ignores SIGTERM once it exits
    for name in ("experiment", "mode", "model_dir", "params_override"):
        main_lib.FLAGS[name].unparse()
    if tf.io.gfile.exists(root):
        tf.io.gfile.rmtree(root)
    assert os.listdir(tmp_path) == [], "something was created on local disk"


def _messages(caplog, level=logging.WARNING):
    return [r.getMessage() for r in caplog.records if r.levelno >= level]


def test_every_mode_on_a_ram_model_dir_writes_there_only(driver, caplog, tmp_path):
    root, run = driver
    model_dir, other = f"{root}/trained", f"{root}/evaluated"

    # train: 10 steps; the driver says once that the URL model_dir is not locked.
    assert run("--experiment=mock", "--mode=train", f"--model_dir={model_dir}",
               f"--params_override=trainer.train_steps=10,{_OVERRIDE}") == 0
    assert [m for m in _messages(caplog) if _NOT_LOCKED in m] == [
        f"model_dir {model_dir} {_NOT_LOCKED}: a second trainer on it would not be refused "
        f"(run one trainer per model_dir; evaluators may share it)."]
    assert _ram_files(model_dir) == {"checkpoint", "params.yaml", "operative_config.train.gin",
                                     "train/events", *_checkpoint_files(5, 10)}
    assert os.listdir(tmp_path) == []

    # A run() with a bad input in between: one line, exit 2, and it silences nothing after.
    assert run("--experiment=mock", "--mode=trian", f"--model_dir={model_dir}") == 2

    # resume: another run() in this process continues from ckpt-10 (the probe reads it).
    assert run("--experiment=mock", "--mode=train", f"--model_dir={model_dir}",
               f"--params_override=trainer.train_steps=20,{_OVERRIDE}") == 0
    info = _messages(caplog, logging.INFO)
    assert f"Restored checkpoint {model_dir}/ckpt-10 (global step 10)." in info
    trained_steps = [int(m.split()[3]) for m in info if re.match(r"train \| step: +\d+ \| st", m)]
    assert trained_steps == [15, 20]
    assert not [m for m in _messages(caplog) if "cannot be restored" in m or "corrupt" in m]
    assert _ram_files(model_dir) == {"checkpoint", "params.yaml", "operative_config.train.gin",
                                     "train/events", *_checkpoint_files(5, 10, 15, 20)}
    reader = tf.compat.v1.train.NewCheckpointReader(f"{model_dir}/ckpt-20")
    assert reader.get_tensor("global_step/.ATTRIBUTES/VARIABLE_VALUE") == 20

    # train_and_eval in another ram:// model_dir.
    assert run("--experiment=mock", "--mode=train_and_eval", f"--model_dir={other}",
               f"--params_override=trainer.train_steps=10,{_OVERRIDE}") == 0
    assert _ram_files(other) == {"checkpoint", "params.yaml",
                                 "operative_config.train_and_eval.gin", "train/events",
                                 "validation/events", *_checkpoint_files(5, 10)}

    # eval, then continuous_eval, of the trained model_dir: evaluation summaries only.
    assert run("--experiment=mock", "--mode=eval", f"--model_dir={model_dir}",
               f"--params_override=trainer.train_steps=20,{_OVERRIDE}") == 0
    assert run("--experiment=mock", "--mode=continuous_eval", f"--model_dir={model_dir}",
               f"--params_override=trainer.train_steps=20,{_OVERRIDE}") == 0
    assert any(re.match(r" eval \| step: +20 \| eval time", m)
               for m in _messages(caplog, logging.INFO))
    assert _ram_files(model_dir) == {"checkpoint", "params.yaml", "operative_config.train.gin",
                                     "train/events", "validation/events",
                                     *_checkpoint_files(5, 10, 15, 20)}
    assert len(tf.io.gfile.glob(f"{model_dir}/validation/events.out.tfevents.*")) == 2
    assert os.listdir(tmp_path) == []


def test_a_probe_that_cannot_decide_does_not_refuse_a_checkpoint(tmp_path, monkeypatch,
                                                                  caplog):
    model_dir = str(tmp_path)
    checkpoint = tf.train.Checkpoint(v=tf.Variable(3.0))
    manager = tf.train.CheckpointManager(checkpoint, model_dir, max_to_keep=5)
    manager.save(checkpoint_number=1)
    manager.save(checkpoint_number=2)
    before = sorted(os.listdir(model_dir))

    def unavailable(**kwargs):
        raise tf.errors.UnavailableError(None, None, "the store did not answer")

    # Reading tensors fails as on a remote store that is briefly unreachable.
    monkeypatch.setattr(tf.raw_ops, "RestoreV2", unavailable)
    caplog.set_level(logging.WARNING, logger="absl")
    resumed = checkpoints.prepare_model_dir(model_dir)
    assert resumed == os.path.join(model_dir, "ckpt-2")
    assert sorted(os.listdir(model_dir)) == before  # nothing moved aside
    assert checkpoints.unreadable_reason(os.path.join(model_dir, "ckpt-2")) is None
    assert any(m.startswith(f"Cannot tell whether checkpoint {model_dir}/ckpt-2 reads "
                            "(UnavailableError: the store did not answer)")
               for m in _messages(caplog))
