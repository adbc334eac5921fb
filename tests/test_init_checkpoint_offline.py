"""A built-in experiment whose default `task.init_checkpoint` is remote (TFM's gs:// buckets)
stops `lite-train` with one line, exit 2, before any model is built, when that checkpoint
cannot be read: no network is needed, `tf.io.gfile.exists` is made to fail as offline."""

import logging as std_logging
import sys
import time

import pytest
import tensorflow as tf

import lite_launcher as ll
from lite_launcher.commands import train as main_lib
from lite_launcher.core import train_utils

train_utils.load_builtin_registrations()
REMOTE_DEFAULTS = sorted(name for name in train_utils.known_experiments()
                         if "://" in str(getattr(ll.get_exp_config(name).task,
                                                 "init_checkpoint", None) or ""))
OFFLINE = tf.errors.FailedPreconditionError(
    None, None, "Error executing an HTTP request: libcurl code 6 meaning 'Could not resolve "
    "host name'")


def lite_train(monkeypatch, capsys, experiment, model_dir, *extra):
    built = []
    monkeypatch.setattr(ll.Task, "build_model", lambda self: built.append(1))
    monkeypatch.setattr(sys, "argv", ["lite-train", "--experiment", experiment, "--mode",
                                      "train", "--model_dir", str(model_dir), *extra])
    start = time.monotonic()
    with pytest.raises(SystemExit) as exit_request:
        main_lib.run()
    std_logging.disable(std_logging.NOTSET)  # the driver silences logging for its exit
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    return exit_request.value.code, lines, time.monotonic() - start, built


def test_the_remote_defaults_are_tfms_segmentation_checkpoints():
    assert len(REMOTE_DEFAULTS) >= 5, REMOTE_DEFAULTS
    assert "mnv2_deeplabv3_pascal" in REMOTE_DEFAULTS


@pytest.mark.parametrize("experiment", REMOTE_DEFAULTS)
def test_an_unreachable_default_init_checkpoint_is_one_line_and_exit_2(
        experiment, monkeypatch, capsys, tmp_path):
    def offline(path):
        raise OFFLINE

    monkeypatch.setattr(tf.io.gfile, "exists", offline)
    code, lines, seconds, built = lite_train(monkeypatch, capsys, experiment, tmp_path / "m")
    default = ll.get_exp_config(experiment).task.init_checkpoint
    assert code == 2, lines[-10:]
    assert lines[-1] == (
        f"lite-train: error: task.init_checkpoint {default} cannot be read: it cannot be "
        f"reached (no network?): FailedPreconditionError: {OFFLINE.message}. Start from "
        f"scratch with --params_override task.init_checkpoint=null, or give a local "
        f"checkpoint path."), lines[-1]
    assert not any("Traceback" in line for line in lines) and not built
    assert seconds < 10


def test_a_missing_remote_object_and_a_hung_probe_are_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(tf.io.gfile, "exists", lambda path: False)
    code, lines, _, built = lite_train(
        monkeypatch, capsys, "mnv2_deeplabv3_pascal", tmp_path / "m",
        "--params_override", "task.init_checkpoint=gs://lite-test-unreachable/ckpt-1")
    assert code == 2 and not built
    assert lines[-1].startswith("lite-train: error: task.init_checkpoint "
                                "gs://lite-test-unreachable/ckpt-1 cannot be read: no such "
                                "object. Start from scratch with --params_override"), lines[-1]
    monkeypatch.setattr(train_utils, "INIT_CHECKPOINT_PROBE_S", 0.2)
    monkeypatch.setattr(tf.io.gfile, "exists", lambda path: time.sleep(5))
    code, lines, seconds, built = lite_train(monkeypatch, capsys, "mnv2_deeplabv3_pascal",
                                             tmp_path / "m2")
    assert code == 2 and not built and seconds < 5
    assert "cannot be read: no answer within 0.2 s (no network?)." in lines[-1], lines[-1]
