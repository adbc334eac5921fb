"""Tests for the checkpoint home (lite_launcher.checkpointing.checkpoints) itself.

The Controller's use of it (saving, the continuous-eval watch, the record of evaluated steps,
shape mismatches) is tested through the Controller in test_controller.py; start-time
recovery in tests/reliability/.
"""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from lite_launcher.checkpointing import checkpoints
from lite_launcher.core import actions
from lite_launcher.orbit.controller import Controller


class CountingEvaluator:
    def __init__(self, kernel):
        self.kernel = kernel
        self.kernels_seen = []

    def evaluate(self, num_steps):
        self.kernels_seen.append(float(self.kernel.numpy()[0, 0]))
        return {}


def _model_and_checkpoint():
    inputs = keras.Input((1,))
    model = keras.Model(inputs, keras.layers.Dense(1, use_bias=False,
                                                   kernel_initializer="zeros")(inputs))
    global_step = tf.Variable(0, dtype=tf.int64, trainable=False)
    return model, global_step, tf.train.Checkpoint(model=model, global_step=global_step)


def _save_steps(directory, steps):
    """Checkpoints `ckpt-<s>` with kernel == s and global_step == s, written by a plain TF
    manager (as a training job beside the tested one would)."""
    model, global_step, checkpoint = _model_and_checkpoint()
    manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=None)
    for step in steps:
        model.weights[0].assign([[float(step)]])
        global_step.assign(step)
        manager.save(checkpoint_number=step)


def test_every_restore_of_the_runtime_goes_through_restore(tmp_path, monkeypatch):
    # The seam a reader of other checkpoint formats hooks into: the manager's restore at
    # start, an explicit restore, each checkpoint of continuous evaluation and loss recovery.
    model_dir = str(tmp_path / "model")
    _save_steps(model_dir, [10, 20])
    restored = []
    original = checkpoints.restore

    def recording_restore(checkpoint, path, **kwargs):
        restored.append(os.path.basename(path))
        return original(checkpoint, path, **kwargs)

    monkeypatch.setattr(checkpoints, "restore", recording_restore)
    model, global_step, checkpoint = _model_and_checkpoint()
    manager = checkpoints.build_manager(checkpoint, model_dir, model_dir, resume=False,
                                        max_to_keep=None)
    evaluator = CountingEvaluator(model.weights[0])
    controller = Controller(global_step=global_step, evaluator=evaluator,
                            checkpoint_manager=manager)
    assert restored == ["ckpt-20"] and int(global_step.numpy()) == 20
    controller.restore_checkpoint(os.path.join(model_dir, "ckpt-10"))
    assert restored[-1] == "ckpt-10" and int(global_step.numpy()) == 10
    controller.evaluate_continuously(timeout=0.05, poll_interval=0.01, evaluate_all=True)
    assert restored[-2:] == ["ckpt-10", "ckpt-20"]
    assert evaluator.kernels_seen == [10.0, 20.0]
    assert actions.RecoveryAction(manager)() == os.path.join(model_dir, "ckpt-20")
    assert restored[-1] == "ckpt-20"


def test_a_non_writers_manager_saves_aside_and_restores_the_writers_checkpoint(tmp_path):
    model_dir, scratch = str(tmp_path / "model"), str(tmp_path / "scratch")
    _save_steps(model_dir, [10, 30])
    model, global_step, checkpoint = _model_and_checkpoint()
    manager = checkpoints.build_manager(checkpoint, model_dir, scratch, resume=False,
                                        max_to_keep=5, step_counter=global_step,
                                        checkpoint_interval=10)
    assert manager.restore_or_initialize() == os.path.join(model_dir, "ckpt-30")
    np.testing.assert_array_equal(model.weights[0].numpy(), [[30.0]])
    # The next save is due an interval after the restored step, as on the writer.
    assert not checkpoints.save_due(manager, 35) and checkpoints.save_due(manager, 40)
    global_step.assign(40)
    path = checkpoints.save(manager, 40)
    assert os.path.dirname(path) == scratch
    assert tf.train.latest_checkpoint(model_dir).endswith("ckpt-30")  # the writer's, untouched
    global_step.assign(50)
    checkpoints.save(manager, 50)
    # A throwaway copy: one is enough (max_to_keep=1, whatever the writer keeps).
    assert sorted(os.listdir(scratch)) == [
        "checkpoint", "ckpt-50.data-00000-of-00001", "ckpt-50.index"]


def test_remove_deletes_exactly_one_checkpoints_files(tmp_path):
    _save_steps(str(tmp_path), [1, 2])
    checkpoints.remove(str(tmp_path / "ckpt-1"))
    names = sorted(os.listdir(tmp_path))
    assert not [n for n in names if n.startswith("ckpt-1.")]
    assert [n for n in names if n.startswith("ckpt-2.")] == [
        "ckpt-2.data-00000-of-00001", "ckpt-2.index"]


def test_write_state_makes_latest_checkpoint_find_the_named_one(tmp_path):
    _save_steps(str(tmp_path), [1, 2])
    checkpoints.write_state(str(tmp_path), "ckpt-1", ["ckpt-1"])
    assert tf.train.latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-1")
    state = tf.train.get_checkpoint_state(str(tmp_path))
    assert list(state.all_model_checkpoint_paths) == [str(tmp_path / "ckpt-1")]


class _FailingManager:
    """A CheckpointManager stand-in whose save fails with `error`."""

    def __init__(self, directory, error):
        self.directory, self.latest_checkpoint, self._error = directory, None, error

    def save(self, **kwargs):
        raise self._error


def test_a_save_failing_on_a_lost_cluster_task_is_not_reported_as_a_storage_error(tmp_path):
    # A ps killed during a parameter-server save: the error names the task, and the driver's
    # cluster handling must see it (it names the task); a storage failure stays one line
    # about the directory.
    lost_ps = tf.errors.UnavailableError(
        None, None, "recvmsg:Connection reset by peer Additional GRPC error information from "
        "remote target /job:ps/replica:0/task:0/device:CPU:0 [Op:__inference_save]")
    with pytest.raises(tf.errors.UnavailableError):
        checkpoints.save(_FailingManager(str(tmp_path), lost_ps), 50)
    full_disk = tf.errors.ResourceExhaustedError(
        None, None, "{{function_node __inference_save_fn}} /job:localhost/replica:0/task:0/"
        "device:CPU:0 ckpt-301_temp/part-00000-of-00001: No space left on device [Op:SaveV2]")
    with pytest.raises(checkpoints.CheckpointWriteError, match="step 50 .*No space left"):
        checkpoints.save(_FailingManager(str(tmp_path), full_disk), 50)
