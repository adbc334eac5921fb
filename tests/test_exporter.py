"""Tests for lite_launcher.core.exporter: the best checkpoint is the one with the best metric."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
import keras

from lite_launcher.core import exporter as exporter_lib
from lite_launcher.core.base_config import ConfigError
from lite_launcher.core.config_definitions import ExperimentConfig


def _tiny_setup():
    """A Dense model, a step variable and a checkpoint of both."""
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    step = tf.Variable(0, dtype=tf.int64)
    checkpoint = tf.train.Checkpoint(model=model, global_step=step)
    return model, step, checkpoint


def _set_weights(model, value):
    model.set_weights([np.full(w.shape, value, np.float32) for w in model.get_weights()])


def _restored_kernel(path):
    model, step, checkpoint = _tiny_setup()
    checkpoint.read(path).assert_existing_objects_matched()
    return model.get_weights()[0], int(step.numpy())


def _run_evals(exporter, metrics, key="accuracy"):
    """Simulates evaluations at steps 10, 20, ...; weights are filled with the step."""
    model, step, checkpoint = _tiny_setup()
    exported = []
    for i, value in enumerate(metrics):
        current = 10 * (i + 1)
        step.assign(current)
        _set_weights(model, current)
        logs = {key: tf.constant(value), "loss": np.float32(1.0 / current),
                "image": np.zeros((2, 4, 4, 3))}
        exported.append(exporter.maybe_export_checkpoint(checkpoint, logs, step))
    return exported


@pytest.mark.parametrize("comp, metrics, best_step, best_value, exported", [
    ("higher", [0.5, 0.7, 0.6, 0.9, 0.9], 40, 0.9, [True, True, False, True, False]),
    ("lower", [0.5, 0.7, 0.3, 0.4, 0.2], 50, 0.2, [True, False, True, False, True]),
])
def test_exports_the_best_checkpoint(tmp_path, comp, metrics, best_step, best_value, exported):
    export_dir = str(tmp_path / "best")
    exporter = exporter_lib.BestCheckpointExporter(export_dir, "accuracy", comp)

    assert _run_evals(exporter, metrics) == exported

    kernel, step = _restored_kernel(exporter.best_ckpt_path)
    assert step == best_step
    np.testing.assert_array_equal(kernel, np.full((3, 2), best_step, np.float32))
    # Named as TFM's CheckpointManager numbers it: the checkpoint's saves so far.
    assert exporter.best_ckpt_path == os.path.join(export_dir, f"best_ckpt-{sum(exported)}")
    # Only one checkpoint is kept, and TF's state file points at it.
    assert tf.train.latest_checkpoint(export_dir) == exporter.best_ckpt_path
    assert len(tf.io.gfile.glob(os.path.join(export_dir, "best_ckpt-*.index"))) == 1

    with open(os.path.join(export_dir, "info.json")) as f:
        info = json.load(f)
    assert info == pytest.approx(
        {"accuracy": best_value, "loss": 1.0 / best_step, "best_ckpt_global_step": best_step})
    assert "image" not in info  # only scalar logs are recorded
    assert exporter.best_ckpt_logs == info
    assert not [p for p in os.listdir(export_dir) if ".tmp" in p]


def test_restart_reads_the_record_and_keeps_the_better_checkpoint(tmp_path):
    export_dir = str(tmp_path / "best")
    first = exporter_lib.BestCheckpointExporter(export_dir, "accuracy", "higher")
    _run_evals(first, [0.5, 0.8])  # best: step 20
    best_path = first.best_ckpt_path

    second = exporter_lib.BestCheckpointExporter(export_dir, "accuracy", "higher")
    assert second.best_ckpt_logs["accuracy"] == pytest.approx(0.8)
    assert second.best_ckpt_logs["best_ckpt_global_step"] == 20
    assert second.best_ckpt_path == best_path

    # Worse evaluations after the restart do not replace the best.
    assert _run_evals(second, [0.6, 0.7, 0.79]) == [False, False, False]
    kernel, step = _restored_kernel(second.best_ckpt_path)
    assert step == 20
    np.testing.assert_array_equal(kernel, np.full((3, 2), 20, np.float32))
    with open(os.path.join(export_dir, "info.json")) as f:
        assert json.load(f)["best_ckpt_global_step"] == 20

    # A better one does, and the old files go. (A new checkpoint object: its first save is
    # number 1, as with TFM.)
    assert best_path == os.path.join(export_dir, "best_ckpt-2")
    assert _run_evals(second, [0.1, 0.1, 0.95]) == [False, False, True]
    assert second.best_ckpt_path == os.path.join(export_dir, "best_ckpt-1")
    assert _restored_kernel(second.best_ckpt_path)[1] == 30
    assert not tf.io.gfile.glob(os.path.join(export_dir, "best_ckpt-2*"))


def test_missing_metric_names_the_metric_and_available_keys(tmp_path):
    exporter = exporter_lib.BestCheckpointExporter(str(tmp_path), "acc", "higher")
    _, step, checkpoint = _tiny_setup()
    with pytest.raises(ConfigError) as error:
        exporter.maybe_export_checkpoint(
            checkpoint, {"accuracy": 0.5, "coco": {"AP": 0.1}}, step)
    message = str(error.value)
    assert "'acc'" in message
    assert "accuracy" in message and "coco|AP" in message
    assert "best_checkpoint_eval_metric" in message
    assert not os.path.exists(os.path.join(str(tmp_path), "info.json"))


@pytest.mark.parametrize("metric_name", ["coco|AP", "coco/AP"])
def test_nested_metric_name(tmp_path, metric_name):
    export_dir = str(tmp_path / "best")
    exporter = exporter_lib.BestCheckpointExporter(export_dir, metric_name, "higher")
    model, step, checkpoint = _tiny_setup()
    results = []
    for current, ap in [(1, 0.3), (2, 0.1), (3, 0.4)]:
        step.assign(current)
        _set_weights(model, current)
        logs = {"coco": {"AP": ap, "AR": 1.0}, "loss": 2.0}
        results.append(exporter.maybe_export_checkpoint(checkpoint, logs, step))
    assert results == [True, False, True]
    with open(os.path.join(export_dir, "info.json")) as f:
        info = json.load(f)
    assert info == {"coco": {"AP": 0.4, "AR": 1.0}, "loss": 2.0, "best_ckpt_global_step": 3}
    # The nested record is read back after a restart.
    again = exporter_lib.BestCheckpointExporter(export_dir, metric_name, "higher")
    assert again.maybe_export_checkpoint(checkpoint, {"coco": {"AP": 0.35}}, 4) is False


def test_flat_key_containing_separator_wins(tmp_path):
    exporter = exporter_lib.BestCheckpointExporter(str(tmp_path), "validation/accuracy", "higher")
    _, _, checkpoint = _tiny_setup()
    assert exporter.maybe_export_checkpoint(checkpoint, {"validation/accuracy": 0.5}, 1)
    assert not exporter.maybe_export_checkpoint(checkpoint, {"validation/accuracy": 0.4}, 2)


def test_nan_metric_never_wins(tmp_path):
    exporter = exporter_lib.BestCheckpointExporter(str(tmp_path), "loss", "lower")
    _, _, checkpoint = _tiny_setup()
    assert exporter.maybe_export_checkpoint(checkpoint, {"loss": float("nan")}, 1)
    assert exporter.maybe_export_checkpoint(checkpoint, {"loss": 5.0}, 2)
    assert not exporter.maybe_export_checkpoint(checkpoint, {"loss": float("nan")}, 3)
    assert exporter.best_ckpt_logs["best_ckpt_global_step"] == 2


def test_bad_metric_comp_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="'best'.*'higher' or 'lower'"):
        exporter_lib.BestCheckpointExporter(str(tmp_path), "accuracy", "best")


def test_failed_export_keeps_the_old_record(tmp_path, monkeypatch):
    export_dir = str(tmp_path)
    exporter = exporter_lib.BestCheckpointExporter(export_dir, "accuracy", "higher")
    _run_evals(exporter, [0.5])  # best: step 10

    def crash(*args, **kwargs):
        raise OSError("disk full")

    model, step, checkpoint = _tiny_setup()
    monkeypatch.setattr(checkpoint, "write", crash)
    with pytest.raises(OSError):
        exporter.maybe_export_checkpoint(checkpoint, {"accuracy": 0.9}, 20)
    assert exporter.best_ckpt_logs["best_ckpt_global_step"] == 10
    restarted = exporter_lib.BestCheckpointExporter(export_dir, "accuracy", "higher")
    assert restarted.best_ckpt_logs["best_ckpt_global_step"] == 10
    assert restarted.best_ckpt_path == os.path.join(export_dir, "best_ckpt-1")


def test_non_chief_worker_writes_nothing_to_export_dir(tmp_path):
    class NonChiefExtended:
        should_checkpoint = False

    class NonChiefStrategy:
        extended = NonChiefExtended()

    export_dir = str(tmp_path / "best")
    exporter = exporter_lib.BestCheckpointExporter(export_dir, "accuracy", "higher",
                                                   strategy=NonChiefStrategy())
    assert _run_evals(exporter, [0.5, 0.4, 0.6]) == [True, False, True]
    assert os.listdir(export_dir) == []
    assert exporter.best_ckpt_logs["best_ckpt_global_step"] == 30


def _params(**trainer):
    params = ExperimentConfig()
    params.override({"trainer": trainer})
    return params


def test_maybe_create_best_ckpt_exporter(tmp_path):
    model_dir = str(tmp_path)
    assert exporter_lib.maybe_create_best_ckpt_exporter(_params(), model_dir) is None
    assert exporter_lib.maybe_create_best_ckpt_exporter(
        _params(best_checkpoint_export_subdir="best"), model_dir) is None
    exporter = exporter_lib.maybe_create_best_ckpt_exporter(
        _params(best_checkpoint_export_subdir="best", best_checkpoint_eval_metric="loss",
                best_checkpoint_metric_comp="lower"), model_dir)
    assert isinstance(exporter, exporter_lib.BestCheckpointExporter)
    assert exporter.export_dir == os.path.join(model_dir, "best")
    assert (exporter.metric_name, exporter.metric_comp) == ("loss", "lower")
    assert os.path.isdir(os.path.join(model_dir, "best"))


def test_record_of_another_metric_is_replaced(tmp_path):
    export_dir = str(tmp_path)
    _run_evals(exporter_lib.BestCheckpointExporter(export_dir, "accuracy", "higher"), [0.9])
    switched = exporter_lib.BestCheckpointExporter(export_dir, "top5", "higher")
    assert switched.best_ckpt_logs is None
    _, _, checkpoint = _tiny_setup()
    assert switched.maybe_export_checkpoint(checkpoint, {"top5": 0.1}, 50)
    assert tf.train.latest_checkpoint(export_dir) == os.path.join(export_dir, "best_ckpt-1")
    assert len(tf.io.gfile.glob(os.path.join(export_dir, "best_ckpt-*.index"))) == 1
    assert _restored_kernel(switched.best_ckpt_path)[1] == 0  # this checkpoint's step
    with open(os.path.join(export_dir, "info.json")) as f:
        assert json.load(f) == {"top5": 0.1, "best_ckpt_global_step": 50.0}


def test_best_checkpoint_number_counts_the_regular_saves_too(tmp_path):
    # TFM's exporter saves the trainer's checkpoint with a CheckpointManager: the number is
    # the checkpoint's save counter, which the run's regular checkpoints advance as well.
    model, step, checkpoint = _tiny_setup()
    manager = tf.train.CheckpointManager(checkpoint, str(tmp_path / "model"), max_to_keep=5)
    for current in (10, 20):
        step.assign(current)
        manager.save(checkpoint_number=current)
    exporter = exporter_lib.BestCheckpointExporter(str(tmp_path / "best"), "accuracy", "higher")
    assert exporter.maybe_export_checkpoint(checkpoint, {"accuracy": 0.5}, step)
    assert exporter.best_ckpt_path == str(tmp_path / "best" / "best_ckpt-3")
    step.assign(30)
    manager.save(checkpoint_number=30)
    assert exporter.maybe_export_checkpoint(checkpoint, {"accuracy": 0.6}, step)
    assert exporter.best_ckpt_path == str(tmp_path / "best" / "best_ckpt-5")
    assert sorted(os.listdir(tmp_path / "best")) == [
        "best_ckpt-5.data-00000-of-00001", "best_ckpt-5.index", "checkpoint", "info.json"]
    # The regular checkpoints keep their step numbers and their state file.
    assert manager.checkpoints == [str(tmp_path / "model" / f"ckpt-{s}") for s in (10, 20, 30)]
    assert _restored_kernel(exporter.best_ckpt_path)[1] == 30


def test_export_best_eval_metric_writes_scalar_logs_as_floats(tmp_path):
    exporter = exporter_lib.BestCheckpointExporter(str(tmp_path), "coco|AP", "higher")
    exporter.export_best_eval_metric(
        {"coco": {"AP": tf.constant(0.25), "image": tf.zeros([4, 4, 1])}, "count": 3}, 100)
    with open(tmp_path / "info.json") as f:
        text = f.read()
    assert json.loads(text) == {"coco": {"AP": 0.25}, "count": 3.0,
                                "best_ckpt_global_step": 100.0}
    assert '"best_ckpt_global_step": 100.0' in text  # a float, as TFM writes it
    assert exporter.best_ckpt_logs is None  # writing the record does not change the best
