"""Tests for the outer loop (lite_launcher.orbit.controller) and SummaryManager."""

import glob
import json
import logging
import os
import threading
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from lite_launcher.checkpointing import checkpoints
from lite_launcher.checkpointing.checkpoints import checkpoint_number
from lite_launcher.orbit import summaries
from lite_launcher.orbit.controller import Controller, StepTimer
from lite_launcher.orbit.summaries import SummaryManager


# ------------------------------------------------------------------------------------------
# Helpers.

def make_step():
    return tf.Variable(0, dtype=tf.int64, trainable=False)


class FakeTrainer:
    """Advances the global step by `num_steps` (`short_once` fewer on the first call).

    With `inner_summary`, writes `inner_step` = global step after every step, inside train(),
    as a real trainer's step would.
    """

    def __init__(self, global_step, short_once=0, inner_summary=False, output=None):
        self.global_step = global_step
        self.calls = []
        self.short_once = short_once
        self.inner_summary = inner_summary
        self.output = output

    def train(self, num_steps):
        assert isinstance(num_steps, tf.Tensor) and num_steps.dtype == tf.int32
        n = int(num_steps)
        self.calls.append(n)
        for _ in range(n - (self.short_once if len(self.calls) == 1 else 0)):
            self.global_step.assign_add(1)
            if self.inner_summary:
                summaries.scalar("inner_step", tf.cast(self.global_step, tf.float32))
        if self.output is not None:
            return self.output(self)
        return {"loss": tf.constant(float(self.global_step.numpy()) / 10.0)}


class FakeEvaluator:
    """Returns the global step (and optional weight sum) it sees, recording calls."""

    def __init__(self, global_step, model=None):
        self.global_step = global_step
        self.model = model
        self.calls = []
        self.steps_seen = []

    def evaluate(self, num_steps):
        assert isinstance(num_steps, tf.Tensor) and num_steps.dtype == tf.int32
        self.calls.append(int(num_steps))
        step = int(self.global_step.numpy())
        self.steps_seen.append(step)
        output = {"seen_step": np.float32(step)}
        if self.model is not None:
            output["kernel_sum"] = tf.reduce_sum(self.model.weights[0])
        return output


def make_model():
    """A tiny functional model whose kernel starts at zeros."""
    inputs = keras.Input((3,))
    outputs = keras.layers.Dense(2, kernel_initializer="zeros", use_bias=False)(inputs)
    return keras.Model(inputs, outputs)


class ModelTrainer(FakeTrainer):
    """Adds 1 to every kernel entry per step, so a checkpoint at step s has kernel == s."""

    def __init__(self, global_step, model):
        super().__init__(global_step)
        self.model = model

    def train(self, num_steps):
        n = int(num_steps)
        self.calls.append(n)
        kernel = self.model.weights[0]
        for _ in range(n):
            kernel.assign(kernel + 1.0)
            self.global_step.assign_add(1)
        return {"kernel_mean": tf.reduce_mean(kernel)}


def make_manager(directory, global_step, model, max_to_keep=None, interval=None, init_fn=None):
    checkpoint = tf.train.Checkpoint(model=model, global_step=global_step)
    return tf.train.CheckpointManager(
        checkpoint, directory, max_to_keep=max_to_keep,
        step_counter=global_step if interval else None, checkpoint_interval=interval,
        init_fn=init_fn)


def read_scalars(directory):
    """{tag: [(step, value), ...]} from every event file directly in `directory`."""
    result = {}
    for path in sorted(glob.glob(os.path.join(directory, "events.out.tfevents.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                number = float(tf.make_ndarray(value.tensor))
                result.setdefault(value.tag, []).append((event.step, number))
    return result


def saved_steps(directory):
    return sorted(checkpoint_number(p[:-len(".index")])
                  for p in glob.glob(os.path.join(directory, "ckpt-*.index")))


@pytest.fixture
def absl_info(caplog):
    caplog.set_level(logging.INFO, logger="absl")
    return caplog


def messages(caplog, level=logging.WARNING):
    return [r.getMessage() for r in caplog.records if r.levelno >= level]


# ------------------------------------------------------------------------------------------
# Construction.

@pytest.mark.parametrize("kwargs, message", [
    (dict(), "needs a trainer or an evaluator"),
    (dict(trainer="T", steps_per_loop=0), r"steps_per_loop \(0\) must be a positive integer"),
    (dict(trainer="T", steps_per_loop=2.5), r"steps_per_loop \(2.5\) must be a positive"),
    (dict(trainer="T"), "steps_per_loop is required"),
    (dict(trainer="T", steps_per_loop=4, summary_interval=6),
     r"summary_interval \(6\) must be a multiple of steps_per_loop \(4\)"),
    (dict(trainer="T", steps_per_loop=4, summary_interval=-4),
     r"summary_interval \(-4\) must be a positive integer"),
])
def test_constructor_rejects_bad_arguments(kwargs, message):
    global_step = make_step()
    if kwargs.get("trainer") == "T":
        kwargs["trainer"] = FakeTrainer(global_step)
    with pytest.raises(ValueError, match=message):
        Controller(global_step=global_step, **kwargs)


def test_constructor_rejects_non_variable_step_and_objects_without_methods():
    with pytest.raises(ValueError, match=r"global_step \(3\) must be a tf.Variable"):
        Controller(global_step=3, evaluator=FakeEvaluator(make_step()))
    with pytest.raises(ValueError, match="has no train"):
        Controller(global_step=make_step(), trainer=object(), steps_per_loop=1)
    with pytest.raises(ValueError, match="has no evaluate"):
        Controller(global_step=make_step(), evaluator=object())


def test_methods_require_their_component():
    global_step = make_step()
    evaluator_only = Controller(global_step=global_step, evaluator=FakeEvaluator(global_step))
    with pytest.raises(ValueError, match=r"train\(\) needs `trainer`"):
        evaluator_only.train(5)
    with pytest.raises(ValueError, match="needs `checkpoint_manager`"):
        evaluator_only.evaluate_continuously(timeout=0)


def test_constructor_restores_latest_checkpoint_or_calls_init_fn(tmp_path, absl_info):
    global_step, model = make_step(), make_model()
    init_calls = []
    manager = make_manager(str(tmp_path), global_step, model,
                           init_fn=lambda: init_calls.append(1))
    Controller(global_step=global_step, trainer=ModelTrainer(global_step, model),
               steps_per_loop=5, checkpoint_manager=manager)
    assert init_calls == [1]
    assert any("No checkpoint in" in m for m in messages(absl_info, logging.INFO))

    model.weights[0].assign(np.full((3, 2), 7.0))
    global_step.assign(7)
    manager.save(checkpoint_number=7)

    step2, model2 = make_step(), make_model()
    manager2 = make_manager(str(tmp_path), step2, model2, init_fn=lambda: init_calls.append(2))
    Controller(global_step=step2, trainer=ModelTrainer(step2, model2), steps_per_loop=5,
               checkpoint_manager=manager2)
    assert init_calls == [1]
    assert int(step2.numpy()) == 7
    np.testing.assert_array_equal(model2.weights[0].numpy(), np.full((3, 2), 7.0))


def test_unreadable_latest_checkpoint_raises_for_a_trainer_and_warns_for_an_evaluator(
        tmp_path, absl_info):
    writer = CheckpointWriter(str(tmp_path))
    path = writer.save(10)
    with open(path + ".index", "r+b") as f:
        f.truncate(10)
    global_step, model = make_step(), make_model()
    with pytest.raises(tf.errors.OpError):
        Controller(global_step=global_step, trainer=ModelTrainer(global_step, model),
                   steps_per_loop=1, checkpoint_manager=make_manager(str(tmp_path), global_step,
                                                                     model))
    make_eval_controller(str(tmp_path))
    assert any("Could not restore the latest checkpoint" in m for m in messages(absl_info))


# ------------------------------------------------------------------------------------------
# train.

def test_train_runs_loops_up_to_the_absolute_target_with_a_short_last_loop(absl_info):
    global_step = make_step()
    trainer = FakeTrainer(global_step)
    seen = []
    controller = Controller(global_step=global_step, trainer=trainer, steps_per_loop=4,
                            train_actions=[lambda out: seen.append(float(out["loss"]))])
    output = controller.train(10)
    assert trainer.calls == [4, 4, 2]
    assert int(global_step.numpy()) == 10
    np.testing.assert_allclose(seen, [0.4, 0.8, 1.0], rtol=1e-6)
    np.testing.assert_allclose(output["loss"], 1.0, rtol=1e-6)
    assert output["steps_per_second"] > 0
    # The target is absolute: training to 10 again runs nothing; to 13 runs 3 steps.
    assert controller.train(10) is None
    lines = [m for m in messages(absl_info, logging.INFO) if m.startswith("train | step:      4")]
    assert len(lines) == 1 and "| steps/sec:" in lines[0] and "| ETA: 0:00:00 |" in lines[0]
    assert lines[0].endswith("| loss: 0.4")
    controller.train(13)
    assert trainer.calls == [4, 4, 2, 3]


def test_callable_steps_per_loop_gets_the_global_step():
    global_step = make_step()
    trainer = FakeTrainer(global_step)
    asked = []

    def steps_per_loop(step):
        asked.append(step)
        return 1 if step < 2 else 5

    controller = Controller(global_step=global_step, trainer=trainer,
                            steps_per_loop=steps_per_loop)
    controller.train(9)
    assert asked == [0, 1, 2, 7]
    assert trainer.calls == [1, 1, 5, 2]

    bad = Controller(global_step=global_step, trainer=trainer, steps_per_loop=lambda s: 0)
    with pytest.raises(ValueError, match=r"steps_per_loop\(9\) returned 0"):
        bad.train(12)


def test_warns_when_trainer_does_not_advance_global_step(absl_info):
    global_step = make_step()
    trainer = FakeTrainer(global_step, short_once=1)
    controller = Controller(global_step=global_step, trainer=trainer, steps_per_loop=4)
    controller.train(6)
    warnings = [m for m in messages(absl_info) if "did not advance global_step" in m]
    assert warnings == ["trainer.train(4) did not advance global_step by 4: it went from 0 to 3 "
                        "(expected 4)."]
    # The loop goes on from the step actually reached.
    assert trainer.calls == [4, 3]
    assert int(global_step.numpy()) == 6


def test_raises_when_trainer_does_not_advance_global_step_at_all():
    global_step = make_step()
    controller = Controller(global_step=global_step, trainer=FakeTrainer(global_step, 2),
                            steps_per_loop=2)
    with pytest.raises(RuntimeError, match=r"trainer.train\(2\) did not advance global_step"):
        controller.train(6)


class ReportingTrainer(FakeTrainer):
    """Reports the step each train call ended at (`last_train_step`), as lite's Trainer does
    when its loop reads it in the loop's own graph call; `lie` is added to the report."""

    def __init__(self, global_step, lie=0, **kwargs):
        super().__init__(global_step, **kwargs)
        self.lie = lie
        self.last_train_step = None

    def train(self, num_steps):
        output = super().train(num_steps)
        self.last_train_step = int(self.global_step.numpy()) + self.lie
        return output


def _count_reads(monkeypatch):
    reads = []
    read = Controller._read_step
    monkeypatch.setattr(Controller, "_read_step", lambda self: reads.append(1) or read(self))
    return reads


def test_a_reported_step_replaces_the_read_after_each_loop(monkeypatch):
    reads = _count_reads(monkeypatch)
    global_step = make_step()
    controller = Controller(global_step=global_step, trainer=ReportingTrainer(global_step),
                            steps_per_loop=4)
    assert controller.train(12) is not None
    assert len(reads) == 1  # when the call starts; none after the loops
    # The controller goes by the report: a trainer that reports one step more than it ran
    # is trusted, and ends one loop early.
    reads.clear()
    lying = ReportingTrainer(global_step, lie=1)
    Controller(global_step=global_step, trainer=lying, steps_per_loop=4).train(20)
    assert lying.calls == [4, 3] and len(reads) == 1


def test_a_step_reported_for_another_variable_is_not_used(monkeypatch):
    reads = _count_reads(monkeypatch)
    global_step = make_step()
    trainer = ReportingTrainer(make_step(), lie=1000)
    trainer.train(tf.constant(4))  # its own step: 4, reported 1004
    # The controller's step is another variable: read after each loop, the report ignored.
    controller = Controller(global_step=global_step, trainer=trainer, steps_per_loop=4)
    with pytest.raises(RuntimeError, match=r"did not advance global_step"):
        controller.train(8)
    assert len(reads) == 2


def test_a_reported_step_that_did_not_advance_still_raises():
    global_step = make_step()
    controller = Controller(global_step=global_step, steps_per_loop=2,
                            trainer=ReportingTrainer(global_step, short_once=2))
    with pytest.raises(RuntimeError, match=r"trainer.train\(2\) did not advance global_step"):
        controller.train(6)


def test_checkpoints_saved_at_interval_and_pruned_to_max_to_keep(tmp_path):
    global_step, model = make_step(), make_model()
    manager = make_manager(str(tmp_path), global_step, model, max_to_keep=2, interval=10)
    saved = []
    original_save = manager.save

    def recording_save(**kwargs):
        path = original_save(**kwargs)
        if path:
            saved.append(checkpoint_number(path))
        return path

    manager.save = recording_save
    controller = Controller(global_step=global_step, trainer=ModelTrainer(global_step, model),
                            steps_per_loop=5, checkpoint_manager=manager)
    controller.train(42)
    # The manager's rule: the first loop saves (nothing saved yet), then every >= 10 steps;
    # 42 is saved at completion.
    assert saved == [5, 15, 25, 35, 42]
    assert saved_steps(str(tmp_path)) == [35, 42]

    # A new process restores step 42 with the kernel trained 42 times.
    step2, model2 = make_step(), make_model()
    manager2 = make_manager(str(tmp_path), step2, model2, max_to_keep=2, interval=10)
    Controller(global_step=step2, trainer=ModelTrainer(step2, model2), steps_per_loop=5,
               checkpoint_manager=manager2)
    assert int(step2.numpy()) == 42
    np.testing.assert_array_equal(model2.weights[0].numpy(), np.full((3, 2), 42.0))


def test_no_completion_checkpoint_when_not_asked_and_no_duplicate_save(tmp_path):
    global_step, model = make_step(), make_model()
    manager = make_manager(str(tmp_path), global_step, model, interval=10)
    controller = Controller(global_step=global_step, trainer=ModelTrainer(global_step, model),
                            steps_per_loop=10, checkpoint_manager=manager)
    controller.train(25, checkpoint_at_completion=False)
    assert saved_steps(str(tmp_path)) == [10, 20]
    assert controller.save_checkpoint().endswith("ckpt-25")
    assert controller.save_checkpoint() is None  # already saved at 25
    assert saved_steps(str(tmp_path)) == [10, 20, 25]


@pytest.mark.parametrize("interval", [None, 0])
def test_without_a_checkpoint_interval_the_outer_loops_save_nothing(tmp_path, interval):
    # Orbit saves only when the manager's checkpoint_interval is truthy: not every loop, not at
    # the end of train or train_and_evaluate.
    global_step, model = make_step(), make_model()
    checkpoint = tf.train.Checkpoint(model=model, global_step=global_step)
    manager = tf.train.CheckpointManager(checkpoint, str(tmp_path), max_to_keep=None,
                                         step_counter=global_step, checkpoint_interval=interval)
    controller = Controller(global_step=global_step, trainer=ModelTrainer(global_step, model),
                            evaluator=FakeEvaluator(global_step), steps_per_loop=3,
                            checkpoint_manager=manager)
    controller.train(9)
    controller.train_and_evaluate(15, eval_interval=3)
    assert int(global_step.numpy()) == 15
    assert saved_steps(str(tmp_path)) == []
    # An explicit request still saves.
    assert controller.save_checkpoint().endswith("ckpt-15")
    assert saved_steps(str(tmp_path)) == [15]


def test_async_checkpointing_is_synced_before_train_returns(tmp_path):
    global_step, model = make_step(), make_model()
    manager = make_manager(str(tmp_path), global_step, model, interval=10)
    sync_calls = []
    original_sync = manager.sync

    def recording_sync():
        sync_calls.append(int(global_step.numpy()))
        original_sync()

    manager.sync = recording_sync
    controller = Controller(global_step=global_step, trainer=ModelTrainer(global_step, model),
                            steps_per_loop=10, checkpoint_manager=manager,
                            enable_async_checkpointing=True)
    options = controller._checkpoint_options
    assert options is not None and options.enable_async
    controller.train(30)
    assert sync_calls == [30]
    assert saved_steps(str(tmp_path)) == [10, 20, 30]
    # Every asynchronously written checkpoint holds the values of its step (Keras variables
    # included: Keras 3.15 breaks from the second async save without the controller's fix).
    for step in (10, 20, 30):
        reader = tf.train.load_checkpoint(str(tmp_path / f"ckpt-{step}"))
        keys = reader.get_variable_to_shape_map()
        kernel = [k for k in keys if "kernel" in k]
        step_key = [k for k in keys if k.startswith("global_step/")]
        np.testing.assert_array_equal(reader.get_tensor(kernel[0]), np.full((3, 2), step))
        assert reader.get_tensor(step_key[0]) == step

    evaluator = FakeEvaluator(global_step)
    both = Controller(global_step=global_step, trainer=ModelTrainer(global_step, model),
                      evaluator=evaluator, steps_per_loop=10, checkpoint_manager=manager,
                      enable_async_checkpointing=True)
    both.train_and_evaluate(40, eval_interval=10)
    assert sync_calls[-1] == 40 and len(sync_calls) >= 2
    assert saved_steps(str(tmp_path))[-1] == 40


# ------------------------------------------------------------------------------------------
# Summaries.

class GraphTrainer:
    """A `tf.function` inner loop over `tf.range(num_steps)` writing a summary per step."""

    def __init__(self, global_step):
        self.global_step = global_step
        self.calls = []

    @tf.function
    def _loop(self, num_steps):
        for _ in tf.range(num_steps):
            self.global_step.assign_add(1)
            summaries.scalar("inner_step", tf.cast(self.global_step, tf.float32))
        return {"loss": tf.cast(self.global_step, tf.float32) / 10.0}

    def train(self, num_steps):
        self.calls.append(int(num_steps))
        return self._loop(num_steps)


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "tf_function"])
def test_train_summaries_follow_summary_interval_inside_and_outside_the_trainer(
        tmp_path, graph):
    global_step = make_step()
    trainer = GraphTrainer(global_step) if graph else FakeTrainer(global_step,
                                                                  inner_summary=True)
    controller = Controller(global_step=global_step, trainer=trainer, steps_per_loop=2,
                            summary_interval=4, summary_dir=str(tmp_path / "train"))
    controller.train(10)
    scalars = read_scalars(str(tmp_path / "train"))
    # Inside a tf.range loop the tag gets the loop's name scope ("while/"), as tf.summary does.
    inner = scalars["while/inner_step" if graph else "inner_step"]
    # Inner summaries only at multiples of 4; the controller's after every loop (Orbit).
    assert inner == [(4, 4.0), (8, 8.0)]
    assert scalars["loss"] == [(s, pytest.approx(s / 10)) for s in (2, 4, 6, 8, 10)]
    assert [s for s, _ in scalars["steps_per_second"]] == [2, 4, 6, 8, 10]
    assert all(v > 0 for _, v in scalars["steps_per_second"])
    if graph:  # One trace for loops of 2 steps, none more: num_steps is an int32 tensor.
        assert trainer._loop.experimental_get_tracing_count() == 1


def test_without_summary_interval_controller_summaries_every_loop_and_none_inside(tmp_path):
    global_step = make_step()
    trainer = FakeTrainer(global_step, inner_summary=True)
    controller = Controller(global_step=global_step, trainer=trainer, steps_per_loop=2,
                            summary_dir=str(tmp_path))
    controller.train(6)
    scalars = read_scalars(str(tmp_path))
    assert "inner_step" not in scalars
    assert [s for s, _ in scalars["loss"]] == [2, 4, 6]
    np.testing.assert_allclose([v for _, v in scalars["loss"]], [0.2, 0.4, 0.6], rtol=1e-6)


def tensorboard_scalars(directory):
    """{tag: [(step, float32 value, plugin name), ...]} read with TensorBoard's own loader."""
    from tensorboard.backend.event_processing import event_accumulator

    accumulator = event_accumulator.EventAccumulator(
        directory, size_guidance={event_accumulator.TENSORS: 0})
    accumulator.Reload()
    result = {}
    for tag in accumulator.Tags()["tensors"]:
        plugin = accumulator.SummaryMetadata(tag).plugin_data.plugin_name
        result[tag] = [(event.step, tf.make_ndarray(event.tensor_proto), plugin)
                       for event in accumulator.Tensors(tag)]
    return result


def test_queued_summaries_read_back_like_eager_ones(tmp_path):
    # The default manager queues dicts of scalars and writes them in one graph call; a manager
    # with a wrapped summary_fn writes each value eagerly with `scalar`, as before (and as
    # Orbit does). TensorBoard must read the same tags, steps, values and plugin back.
    global_step = make_step()
    compiled = SummaryManager(str(tmp_path / "compiled"), global_step=global_step)
    eager = SummaryManager(str(tmp_path / "eager"),
                           lambda name, value, step: summaries.scalar(name, value, step=step),
                           global_step=global_step)
    rows = [
        {"loss": np.float32(0.25), "accuracy": np.float64(1 / 3), "count": np.int64(7),
         "steps_per_second": 1234.5678, "flag": True, "learning_rate": tf.constant(1e-3),
         "val": {"accuracy": np.float32(0.75)}},
        {"loss": np.float32(np.nan), "accuracy": np.float64(2 / 3), "count": np.int64(-3),
         "steps_per_second": 1e30, "flag": False, "learning_rate": tf.constant(5e-4),
         "val": {"accuracy": np.float32(0.5)}},
    ]
    for step, row in zip((3, 7), rows):
        global_step.assign(step)
        compiled.write_summaries(row)
        eager.write_summaries(row)
        with tf.name_scope("outer"):  # Tags follow the caller's name scope, as eager ones do.
            compiled.write_summaries({"scoped": 2.0 * step})
            eager.write_summaries({"scoped": 2.0 * step})
    assert compiled._compiled and not eager._compiled  # the two paths were really taken
    compiled.flush()
    eager.flush()
    for sub in ("", "val"):
        got = tensorboard_scalars(str(tmp_path / "compiled" / sub))
        want = tensorboard_scalars(str(tmp_path / "eager" / sub))
        assert sorted(got) == sorted(want)
        assert set(want) == ({"loss", "accuracy", "count", "steps_per_second", "flag",
                              "learning_rate", "outer/scoped"} if not sub else {"accuracy"})
        for tag in want:
            assert [(s, p) for s, _, p in got[tag]] == [(s, p) for s, _, p in want[tag]], tag
            assert [s for s, _, _ in want[tag]] == [3, 7]
            for (_, value, _), (_, expected, plugin) in zip(got[tag], want[tag]):
                assert plugin == "scalars" and value.dtype == expected.dtype == np.float32
                np.testing.assert_array_equal(value, expected, err_msg=tag)
    assert tensorboard_scalars(str(tmp_path / "compiled"))["count"][1][1] == -3.0


def test_queued_rows_are_written_as_one_event_per_row(tmp_path):
    # The batch writer encodes a row's scalars into one Summary (one write op per row, not one
    # per value): TensorBoard reads them as above; on disk, one event per step.
    manager = SummaryManager(str(tmp_path))
    for step in (1, 2, 3):
        manager.write_summaries({"loss": 0.5 * step, "accuracy": 0.25, "rate": 1e-3}, step=step)
    manager.flush()
    events = [event for path in glob.glob(os.path.join(str(tmp_path), "events.out.tfevents.*"))
              for event in tf.compat.v1.train.summary_iterator(path) if event.summary.value]
    assert [event.step for event in events] == [1, 2, 3]
    assert [[value.tag for value in event.summary.value] for event in events] == [
        ["loss", "accuracy", "rate"]] * 3
    np.testing.assert_array_equal(
        [float(tf.make_ndarray(event.summary.value[0].tensor)) for event in events],
        [0.5, 1.0, 1.5])


def test_the_training_writer_is_entered_once_per_train_call(tmp_path, monkeypatch):
    # Leaving `as_default` flushes the writer (an eager op): once per train call, not per loop.
    from lite_launcher.orbit import controller as controller_module

    entered = []
    original = controller_module.default_writer

    def counting(manager, step):
        entered.append(manager)
        return original(manager, step)

    monkeypatch.setattr(controller_module, "default_writer", counting)
    global_step = make_step()
    controller = Controller(global_step=global_step, trainer=FakeTrainer(global_step, inner_summary=True),
                            steps_per_loop=1, summary_interval=1, summary_dir=str(tmp_path))
    controller.train(5)
    assert len(entered) == 1 and int(global_step.numpy()) == 5
    # What the trainer wrote inside its steps is on disk when train returns.
    assert [s for s, _ in read_scalars(str(tmp_path))["inner_step"]] == [1, 2, 3, 4, 5]


def test_train_summaries_are_queued_and_written_at_checkpoints_and_at_the_end(
        tmp_path, monkeypatch):
    monkeypatch.setattr(summaries, "FLUSH_SECONDS", 1e9)  # no timed write in this test
    global_step, model = make_step(), make_model()
    manager = make_manager(str(tmp_path / "ckpt"), global_step, model, interval=4)
    on_disk = []  # Steps of `kernel_mean` on disk when each loop's action runs.

    def look(_):
        on_disk.append([s for s, _ in read_scalars(str(tmp_path / "train")).get(
            "kernel_mean", [])])

    controller = Controller(global_step=global_step, trainer=ModelTrainer(global_step, model),
                            steps_per_loop=1, checkpoint_manager=manager, train_actions=[look],
                            summary_dir=str(tmp_path / "train"))
    flushed_at = []
    original_flush = controller.summary_manager.flush

    def recording_flush():
        flushed_at.append(int(global_step.numpy()))
        original_flush()

    controller.summary_manager.flush = recording_flush
    controller.train(7)
    # Not every loop: after the checkpoints at 1 (first loop), 5 and 7 (the end), and once on
    # the way out.
    assert saved_steps(str(tmp_path / "ckpt")) == [1, 5, 7]
    assert flushed_at == [1, 5, 7, 7]
    assert on_disk == [[], [1], [1], [1], [1], [1, 2, 3, 4, 5], [1, 2, 3, 4, 5]]
    assert [s for s, _ in read_scalars(str(tmp_path / "train"))["kernel_mean"]] == [
        1, 2, 3, 4, 5, 6, 7]

    # A loop that raises: what was written before it is on disk all the same.
    class Failing(ModelTrainer):
        def train(self, num_steps):
            if int(self.global_step.numpy()) >= 9:
                raise RuntimeError("boom")
            return super().train(num_steps)

    failing = Controller(global_step=global_step, trainer=Failing(global_step, model),
                         steps_per_loop=1, summary_dir=str(tmp_path / "train2"))
    with pytest.raises(RuntimeError, match="boom"):
        failing.train(12)
    assert [s for s, _ in read_scalars(str(tmp_path / "train2"))["kernel_mean"]] == [8, 9]


def test_a_failing_summary_flush_does_not_hide_the_error_of_the_loop(tmp_path, absl_info):
    global_step = make_step()

    class Failing(FakeTrainer):
        def train(self, num_steps):
            if int(self.global_step.numpy()) >= 2:
                raise RuntimeError("the loop failed")
            return super().train(num_steps)

    class BrokenDisk(SummaryManager):
        def flush(self):
            raise tf.errors.ResourceExhaustedError(None, None, "disk full")

    controller = Controller(global_step=global_step, trainer=Failing(global_step),
                            steps_per_loop=1,
                            summary_manager=BrokenDisk(str(tmp_path), global_step=global_step))
    with pytest.raises(RuntimeError, match="the loop failed"):
        controller.train(5)
    assert any("disk full" in m for m in messages(absl_info))
    # Without an error in the loop, the flush error is the error.
    global_step.assign(0)
    controller.trainer = FakeTrainer(global_step)
    with pytest.raises(tf.errors.ResourceExhaustedError):
        controller.train(2)


@pytest.mark.parametrize("failure", ["directory_blocked_by_a_file", "disk_full_on_write"])
def test_summaries_that_cannot_be_written_stop_with_one_warning_and_training_goes_on(
        tmp_path, absl_info, failure):
    global_step, model = make_step(), make_model()
    blocker = tmp_path / "blocker"
    blocker.write_text("a regular file where the summary directory's parent should be\n")
    summary_dir = str(blocker / "train")
    summary_fn = summaries.scalar
    if failure == "disk_full_on_write":
        summary_dir = str(tmp_path / "train")
        calls = []

        def summary_fn(name, value, step=None):  # the third write finds the disk full
            calls.append(name)
            if len(calls) >= 3:
                raise tf.errors.ResourceExhaustedError(None, None, f"{summary_dir}/events: No "
                                                       "space left on device")
            return summaries.scalar(name, value, step=step)

    manager = SummaryManager(summary_dir, summary_fn, global_step=global_step)
    controller = Controller(global_step=global_step, trainer=ModelTrainer(global_step, model),
                            steps_per_loop=2, summary_manager=manager,
                            checkpoint_manager=make_manager(str(tmp_path / "ckpt"), global_step,
                                                            model, interval=4))
    controller.train(10)
    assert int(global_step.numpy()) == 10
    assert saved_steps(str(tmp_path / "ckpt")) == [2, 6, 10]  # checkpoints go on
    stopped = [m for m in messages(absl_info) if m.startswith("Could not write summaries")]
    assert len(stopped) == 1, stopped
    expected = ("FailedPreconditionError" if failure == "directory_blocked_by_a_file"
                else "ResourceExhaustedError")
    assert stopped[0].startswith(f"Could not write summaries to {summary_dir} ({expected}: ")
    assert not manager.enabled and isinstance(manager.failure, tf.errors.OpError)
    if failure == "disk_full_on_write":
        assert len(calls) == 3  # nothing written after the failure
        assert [step for step, _ in read_scalars(summary_dir)["kernel_mean"]] == [2]


@pytest.mark.parametrize("flush_seconds, max_pending, batches", [
    (0.0, 1000, [[1], [1, 2], [1, 2, 3], [1, 2, 3, 4]]),  # timer due at every write
    (1e9, 2, [[], [1, 2], [1, 2], [1, 2, 3, 4]]),  # a batch every 2 rows
])
def test_queued_summaries_are_written_on_the_timer_and_in_bounded_batches(
        tmp_path, monkeypatch, flush_seconds, max_pending, batches):
    monkeypatch.setattr(summaries, "FLUSH_SECONDS", flush_seconds)
    monkeypatch.setattr(summaries, "MAX_PENDING", max_pending)
    manager = SummaryManager(str(tmp_path), global_step=make_step())
    on_disk = []
    for step in (1, 2, 3, 4):
        manager.write_summaries({"x": float(step)}, step=step)
        on_disk.append([s for s, _ in read_scalars(str(tmp_path)).get("x", [])])
    assert on_disk == batches
    # A write that cannot be queued (a custom summary_fn's eager path keeps call order).
    manager.write_summaries({"x": 5.0}, step=5)
    manager._summary_fn = lambda name, value, step: summaries.scalar(name, value, step=step)
    manager.write_summaries({"x": 6.0}, step=6)
    manager.flush()
    assert read_scalars(str(tmp_path))["x"] == [(s, float(s)) for s in range(1, 7)]


def test_nested_outputs_are_written_to_subdirectories(tmp_path):
    global_step = make_step()
    trainer = FakeTrainer(global_step, output=lambda t: {
        "loss": 1.5, "val_a": {"accuracy": np.float32(0.25)}, "val_b": {"accuracy": 0.75}})
    controller = Controller(global_step=global_step, trainer=trainer, steps_per_loop=3,
                            summary_dir=str(tmp_path))
    controller.train(3)
    assert read_scalars(str(tmp_path))["loss"] == [(3, 1.5)]
    assert read_scalars(str(tmp_path / "val_a")) == {"accuracy": [(3, 0.25)]}
    assert read_scalars(str(tmp_path / "val_b")) == {"accuracy": [(3, 0.75)]}


def test_summary_manager_is_lazy_and_a_noop_without_directory(tmp_path):
    global_step = make_step()
    directory = tmp_path / "eval"
    manager = SummaryManager(str(directory), global_step=global_step)
    assert not directory.exists()
    manager.flush()
    assert not directory.exists()
    global_step.assign(3)
    manager.write_summaries({"x": 2.0, "sub": {"y": 1.0}})
    manager.flush()
    assert read_scalars(str(directory)) == {"x": [(3, 2.0)]}
    assert read_scalars(str(directory / "sub")) == {"y": [(3, 1.0)]}

    disabled = SummaryManager(None, global_step=global_step)
    disabled.write_summaries({"x": 1.0})
    disabled.flush()
    assert not disabled.enabled
    with disabled.summary_writer().as_default():
        assert not summaries.scalar("z", 1.0, step=0)


def test_trainer_process_does_not_create_the_eval_summary_dir(tmp_path):
    global_step = make_step()
    controller = Controller(global_step=global_step, trainer=FakeTrainer(global_step),
                            evaluator=FakeEvaluator(global_step), steps_per_loop=2,
                            summary_dir=str(tmp_path / "train"),
                            eval_summary_dir=str(tmp_path / "eval"))
    controller.train(4)
    assert (tmp_path / "train").exists() and not (tmp_path / "eval").exists()
    controller.evaluate(2)
    assert read_scalars(str(tmp_path / "eval"))["seen_step"] == [(4, 4.0)]


# ------------------------------------------------------------------------------------------
# evaluate / train_and_evaluate.

@pytest.mark.parametrize("steps", [0, -2, 1.5, True])
def test_evaluate_rejects_bad_steps(steps):
    global_step = make_step()
    controller = Controller(global_step=global_step, evaluator=FakeEvaluator(global_step))
    with pytest.raises(ValueError, match=r"evaluation steps .* must be a positive integer or -1"):
        controller.evaluate(steps)


def test_evaluate_output_actions_and_summaries(tmp_path):
    global_step = make_step()
    global_step.assign(12)
    evaluator = FakeEvaluator(global_step)
    seen = []
    controller = Controller(global_step=global_step, evaluator=evaluator,
                            eval_actions=[seen.append], eval_summary_dir=str(tmp_path))
    output = controller.evaluate(5)
    assert evaluator.calls == [5]
    assert output["seen_step"] == 12.0 and output["steps_per_second"] > 0
    assert len(seen) == 1 and "steps_per_second" not in seen[0]
    complete = controller.evaluate()
    assert evaluator.calls == [5, -1]
    assert "steps_per_second" not in complete
    scalars = read_scalars(str(tmp_path))
    assert scalars["seen_step"] == [(12, 12.0), (12, 12.0)]
    assert [s for s, _ in scalars["steps_per_second"]] == [12]


def test_train_and_evaluate_evaluates_at_exact_multiples_and_at_the_end():
    global_step = make_step()
    trainer, evaluator = FakeTrainer(global_step), FakeEvaluator(global_step)
    controller = Controller(global_step=global_step, trainer=trainer, evaluator=evaluator,
                            steps_per_loop=4)
    output = controller.train_and_evaluate(15, eval_steps=3, eval_interval=6)
    assert trainer.calls == [4, 2, 4, 2, 3]
    assert evaluator.steps_seen == [6, 12, 15]
    assert evaluator.calls == [3, 3, 3]
    assert output["seen_step"] == 15.0

    # Resumed at 7: every eval_interval steps counted from the restart, as in Orbit.
    global_step.assign(7)
    trainer.calls.clear()
    evaluator.steps_seen.clear()
    controller.train_and_evaluate(20, eval_interval=6)
    assert evaluator.steps_seen == [13, 19, 20]
    assert trainer.calls == [4, 2, 4, 2, 1]

    # Already trained: nothing at all, no evaluation.
    assert controller.train_and_evaluate(20) is None
    assert controller.train_and_evaluate(20, eval_interval=6) is None
    assert evaluator.steps_seen == [13, 19, 20]
    assert trainer.calls == [4, 2, 4, 2, 1]


def test_train_and_evaluate_without_interval_evaluates_once():
    global_step = make_step()
    evaluator = FakeEvaluator(global_step)
    controller = Controller(global_step=global_step, trainer=FakeTrainer(global_step),
                            evaluator=evaluator, steps_per_loop=5)
    controller.train_and_evaluate(12)
    assert evaluator.steps_seen == [12]


# ------------------------------------------------------------------------------------------
# evaluate_continuously.

class CheckpointWriter:
    """A 'training job' with its own variables that saves checkpoints at given steps."""

    def __init__(self, directory, max_to_keep=None):
        self.global_step, self.model = make_step(), make_model()
        self.manager = make_manager(directory, self.global_step, self.model,
                                    max_to_keep=max_to_keep)

    def save(self, step):
        self.global_step.assign(step)
        self.model.weights[0].assign(np.full((3, 2), float(step)))
        return self.manager.save(checkpoint_number=step)


def make_eval_controller(directory, eval_summary_dir=None):
    global_step, model = make_step(), make_model()
    evaluator = FakeEvaluator(global_step, model)
    manager = make_manager(directory, global_step, model)
    controller = Controller(global_step=global_step, evaluator=evaluator,
                            checkpoint_manager=manager, eval_summary_dir=eval_summary_dir)
    return controller, evaluator


def test_evaluate_continuously_follows_a_training_job_and_stops_at_step(tmp_path, absl_info):
    directory = str(tmp_path / "ckpt")
    writer = CheckpointWriter(directory)
    writer.save(10)
    controller, evaluator = make_eval_controller(directory)
    sums = []
    controller.eval_actions = (lambda out: sums.append(float(out["kernel_sum"])),)

    def train_job():
        for step in (20, 30):
            # Wait until the evaluator has evaluated the previous checkpoint.
            deadline = time.monotonic() + 20
            while len(evaluator.steps_seen) < step // 10 - 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            writer.save(step)

    thread = threading.Thread(target=train_job)
    thread.start()
    start = time.monotonic()
    output = controller.evaluate_continuously(steps=2, timeout=60, stop_at_step=30,
                                              poll_interval=0.02)
    elapsed = time.monotonic() - start
    thread.join()
    assert evaluator.steps_seen == [10, 20, 30]
    np.testing.assert_allclose(sums, [60.0, 120.0, 180.0])  # 6 kernel entries * step
    assert output["seen_step"] == 30.0
    assert elapsed < 20, "returned at stop_at_step, not after the 60 s timeout"
    info = messages(absl_info, logging.INFO)
    assert any(m.startswith(f"Waiting for a new checkpoint in {directory} (timeout 60 s)")
               for m in info)


def test_evaluate_continuously_returns_after_timeout_and_uses_timeout_fn(tmp_path):
    directory = str(tmp_path)
    writer = CheckpointWriter(directory)
    writer.save(5)
    controller, evaluator = make_eval_controller(directory)
    start = time.monotonic()
    output = controller.evaluate_continuously(timeout=0.2, poll_interval=0.05)
    assert 0.2 <= time.monotonic() - start < 5
    assert evaluator.steps_seen == [5] and output["seen_step"] == 5.0

    # timeout_fn is also asked after each evaluation: True there ends without waiting.
    calls = []
    controller.evaluate_continuously(timeout=30, timeout_fn=lambda: calls.append(1) or True,
                                     poll_interval=0.05)
    assert evaluator.steps_seen == [5, 5] and calls == [1]

    # timeout_fn False keeps waiting after a timeout; a new checkpoint then gets evaluated.
    calls.clear()

    def timeout_fn():
        calls.append(1)
        if len(calls) == 2:  # 1: after evaluating step 5; 2: after the first timeout.
            writer.save(6)
        return len(calls) >= 3

    evaluator.steps_seen.clear()
    controller.evaluate_continuously(timeout=0.1, timeout_fn=timeout_fn, poll_interval=0.02)
    assert evaluator.steps_seen == [5, 6]
    assert len(calls) == 3


def test_evaluate_continuously_skips_a_truncated_checkpoint(tmp_path, absl_info):
    directory = str(tmp_path)
    writer = CheckpointWriter(directory)
    path = writer.save(10)
    for data_file in glob.glob(path + ".data-*"):
        with open(data_file, "r+b") as f:
            f.truncate(os.path.getsize(data_file) // 2)
    controller, evaluator = make_eval_controller(directory)  # restoring at init fails...
    timer = threading.Timer(0.3, writer.save, args=(20,))
    timer.start()
    output = controller.evaluate_continuously(timeout=10, stop_at_step=20, poll_interval=0.02)
    timer.join()
    assert evaluator.steps_seen == [20]
    assert output["kernel_sum"] == pytest.approx(120.0)
    assert any(m.startswith(f"Skipping checkpoint {path}: it could not be restored")
               for m in messages(absl_info))


def test_a_restore_that_failed_part_way_does_not_make_the_next_restore_read_its_files(
        tmp_path, absl_info):
    # The evaluator starts while ckpt-10 is broken after its object graph (its kernel bytes
    # flipped), so its first restore fails part-way; then the trainer writes ckpt-20 and
    # prunes ckpt-10 (max_to_keep=1). Restoring ckpt-20 must read ckpt-20's files only.
    directory = str(tmp_path)
    writer = CheckpointWriter(directory, max_to_keep=1)
    first = writer.save(10)
    (data_file,) = glob.glob(first + ".data-*")
    with open(data_file, "rb") as f:
        data = f.read()
    kernel = np.full((3, 2), 10.0, np.float32).tobytes()
    assert data.count(kernel) == 1
    with open(data_file, "wb") as f:
        f.write(data.replace(kernel, bytes(len(kernel))))
    controller, evaluator = make_eval_controller(directory)
    assert any(m.startswith(f"Could not restore the latest checkpoint in {directory}")
               for m in messages(absl_info))
    second = writer.save(20)
    assert not glob.glob(first + ".*")  # pruned
    absl_info.clear()
    output = controller.evaluate_continuously(timeout=10, stop_at_step=20, poll_interval=0.01)
    assert evaluator.steps_seen == [20]
    assert output["kernel_sum"] == pytest.approx(120.0)
    # Restored at the first attempt, and no message about ckpt-20 names ckpt-10.
    warnings = messages(absl_info)
    assert not [m for m in warnings if second in m], warnings


def test_evaluate_all_skips_a_deleted_checkpoint_and_records_steps_for_a_restart(
        tmp_path, absl_info):
    ckpt_dir, eval_dir = str(tmp_path / "ckpt"), str(tmp_path / "eval")
    writer = CheckpointWriter(ckpt_dir)
    for step in (10, 20, 30):
        writer.save(step)
    # Listed in the checkpoint state but deleted, as max_to_keep does between list and restore.
    for name in glob.glob(os.path.join(ckpt_dir, "ckpt-20.*")):
        os.remove(name)
    controller, evaluator = make_eval_controller(ckpt_dir, eval_summary_dir=eval_dir)
    evaluator.steps_seen.clear()
    output = controller.evaluate_continuously(timeout=0.1, poll_interval=0.02,
                                              evaluate_all=True)
    assert evaluator.steps_seen == [10, 30]
    assert output["seen_step"] == 30.0
    assert any("Skipping checkpoint" in m and "ckpt-20" in m for m in messages(absl_info))
    record = os.path.join(eval_dir, checkpoints.EVALUATED_CHECKPOINTS_FILE)
    with open(record) as f:
        assert json.load(f) == {"evaluated_steps": [10, 30]}
    assert read_scalars(eval_dir)["seen_step"] == [(10, 10.0), (30, 30.0)]

    # A restarted evaluator evaluates only the new checkpoint.
    writer.save(40)
    controller2, evaluator2 = make_eval_controller(ckpt_dir, eval_summary_dir=eval_dir)
    evaluator2.steps_seen.clear()
    controller2.evaluate_continuously(timeout=0.1, poll_interval=0.02, evaluate_all=True)
    assert evaluator2.steps_seen == [40]
    with open(record) as f:
        assert json.load(f) == {"evaluated_steps": [10, 30, 40]}


def test_evaluate_all_evaluates_every_checkpoint_not_only_the_newest(tmp_path):
    writer = CheckpointWriter(str(tmp_path))
    for step in (1, 2, 3):
        writer.save(step)
    controller, evaluator = make_eval_controller(str(tmp_path))
    evaluator.steps_seen.clear()
    controller.evaluate_continuously(timeout=0.05, poll_interval=0.01)
    assert evaluator.steps_seen == [3]  # default: newest only, as checkpoints_iterator
    evaluator.steps_seen.clear()
    controller.evaluate_continuously(timeout=0.05, poll_interval=0.01, evaluate_all=True,
                                     stop_at_step=2)
    assert evaluator.steps_seen == [1, 2]


# ------------------------------------------------------------------------------------------
# Small pieces.

def test_step_timer_and_checkpoint_number():
    global_step = make_step()
    timer = StepTimer(global_step)
    time.sleep(0.05)
    global_step.assign(10)
    rate = timer.steps_per_second()
    assert 10 / 1.0 < rate <= 10 / 0.05
    assert timer.last_step == 10
    assert checkpoint_number("/a/b/ckpt-1200") == 1200
    assert checkpoint_number("/a/b/model") is None
