"""The per-call fast paths of the inner loops give the same results as the plain paths.

`loops.DirectCall` (a traced `tf.function` called through its ConcreteFunction) and the
Trainer's fused inner loop (`train_step` loop + `train_loop_end` in one graph call) are speed
changes only: these tests pin that they compute exactly what the plain calls compute.
"""

import gc
import os
import sys
import threading
import time
import weakref

import keras
import numpy as np
import pytest
import tensorflow as tf

import lite_launcher as ll
from lite_launcher.core.base_trainer import fuses_train_loop_end
from lite_launcher.core.train_lib import create_trainer
from lite_launcher.orbit import loops
from lite_launcher.orbit.controller import Controller

import tiny


def _strategy(replicas):
    if replicas == 1:
        return tf.distribute.get_strategy()
    # The project's factory: raw MirroredStrategy objects on CPUs use collective ops whose keys
    # clash between strategy objects in one process (see strategy.py).
    return ll.get_distribution_strategy("mirrored", devices=["/device:CPU:0", "/device:CPU:1"])


def _numpy_logs(logs):
    return {k: float(np.asarray(v)) for k, v in logs.items()}


class SeparateLoopEnd(ll.Trainer):
    """Overrides train_loop_end (same behaviour), which turns the fused loop off."""

    def train_loop_end(self):
        return super().train_loop_end()


@pytest.mark.parametrize("replicas", [1, 2])
def test_fused_loop_end_gives_the_logs_and_weights_of_separate_calls(replicas):
    strategy = _strategy(replicas)
    results = []
    for trainer_cls in (ll.Trainer, SeparateLoopEnd):
        trainer = tiny.make_trainer(trainer_cls=trainer_cls, strategy=strategy)
        with strategy.scope():
            logs = [_numpy_logs(trainer.train(tf.constant(n))) for n in (6, 1, 4)]
        assert trainer._train_loop_fused == (trainer_cls is ll.Trainer)
        assert int(trainer.global_step.numpy()) == 11
        results.append((logs, [w.numpy() for w in trainer.model.weights]))
    (fused_logs, fused_weights), (plain_logs, plain_weights) = results
    assert set(fused_logs[0]) == {"accuracy", "training_loss", "learning_rate"}
    for fused, plain in zip(fused_logs, plain_logs):
        assert fused == pytest.approx(plain, rel=1e-6)
    for a, b in zip(fused_weights, plain_weights):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    # The loop end reset the metrics: a 1-step loop reports that step alone.
    assert fused_logs[1]["accuracy"] in (0.0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1.0)


def test_fused_loop_is_not_used_where_hooks_must_run_as_written():
    assert not fuses_train_loop_end(
        tiny.make_trainer(tiny.make_config(train_tf_while_loop=False)))
    trainer = tiny.make_trainer()
    assert fuses_train_loop_end(trainer)
    calls = []
    trainer.train_loop_end = lambda: calls.append(1) or {}
    assert not fuses_train_loop_end(trainer)
    assert trainer.train(2) == {} and calls == [1]


def test_direct_call_traces_once_and_follows_a_new_iterator():
    traces = []
    total = tf.Variable(0, dtype=tf.int64)

    @tf.function
    def consume(iterator, num_steps):
        traces.append(1)
        for _ in tf.range(num_steps):
            total.assign_add(tf.cast(next(iterator), tf.int64))
        return total.read_value()

    call = loops.DirectCall(consume)
    iterator = iter(tf.data.Dataset.range(100))
    for n in (1, 2, 3):
        call(iterator, tf.constant(n, tf.int32))
    assert len(traces) == 1
    assert int(total.numpy()) == sum(range(6))  # elements 0..5
    # A new iterator of the same type: the kept graph (no retrace), reading the new iterator.
    other = iter(tf.data.Dataset.range(1000, 1100))
    assert int(call(other, tf.constant(2, tf.int32))) == sum(range(6)) + 1000 + 1001
    assert len(traces) == 1 and call.flat
    call.forget_iterator()
    assert not call.flat
    # Another argument dtype goes through the tf.function, which traces for it.
    assert int(call(other, tf.constant(1, tf.int64))) == sum(range(6)) + 1000 + 1001 + 1002
    assert len(traces) == 2
    # Another element type: a new trace, not the kept graph.
    int32s = iter(tf.data.Dataset.range(5).map(lambda x: tf.cast(x, tf.int32)))
    assert int(call(int32s, tf.constant(2, tf.int32))) == sum(range(6)) + 3003 + 0 + 1
    assert len(traces) == 3
    call.reset()
    assert int(call(int32s, tf.constant(1, tf.int32))) == sum(range(6)) + 3003 + 1 + 2


def test_direct_call_passes_plain_functions_and_python_values_through():
    seen = []
    call = loops.DirectCall(lambda iterator, n: seen.append((next(iterator), n)) or n)
    iterator = iter([10, 11])
    assert call(iterator, 3) == 3 and call(iterator, 4) == 4
    assert seen == [(10, 3), (11, 4)]


def test_train_dataset_replaced_with_another_batch_shape():
    trainer = tiny.make_trainer()
    trainer.train(3)
    x, y = tiny.make_data()
    trainer.train_dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(
        4, drop_remainder=True)
    logs = trainer.train(5)
    assert int(trainer.global_step.numpy()) == 8
    assert np.isfinite(float(logs["training_loss"]))


@pytest.mark.parametrize("replicas", [1, 2])
def test_python_eval_loop_through_the_traced_graph_matches_eager(replicas):
    strategy = _strategy(replicas)
    results = []
    for eval_tf_function in (False, True):
        config = tiny.make_config(eval_tf_function=eval_tf_function)
        trainer = tiny.make_trainer(config, strategy=strategy)
        with strategy.scope():
            # 64 examples in batches of 8: 8 steps; -1 runs to the end of the data.
            results.append([_numpy_logs(trainer.evaluate(n)) for n in (3, -1, 8)])
    eager, traced = results
    for a, b in zip(eager, traced):
        assert a == pytest.approx(b, rel=1e-6)
    # The model does not change: the full evaluations agree with each other.
    assert traced[1] == pytest.approx(traced[2], rel=1e-6)
    # Accuracy over all 64 examples, computed with numpy from the model.
    x, y = tiny.make_data()
    logits = trainer.model(x, training=False).numpy()
    assert traced[1]["accuracy"] == pytest.approx(float(np.mean(logits.argmax(-1) == y)))
    assert traced[1]["validation_loss"] == pytest.approx(float(np.mean(
        keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True))), rel=1e-5)


def test_direct_call_uses_the_flat_call_for_iterators_of_each_strategy():
    for strategy in (_strategy(1), _strategy(2)):
        dataset = strategy.experimental_distribute_dataset(
            tf.data.Dataset.range(100).batch(4, drop_remainder=True))
        total = tf.Variable(0, dtype=tf.int64)

        @tf.function
        def step(iterator):
            batch = next(iterator)
            strategy.run(lambda x: total.assign_add(tf.reduce_sum(x)), args=(batch,))

        call = loops.DirectCall(step)
        iterator = iter(dataset)
        for _ in range(3):
            call(iterator)
        assert call.flat
        # Batches 0..3, 4..7, 8..11 summed once each, on one or two replicas.
        assert int(total.numpy()) == sum(range(12))


# How long a test waits for the release thread to reach its objects. The thread is one queue:
# an earlier test's Mirrored iterator may be ahead, its destruction waiting out tf.data's
# autotuning sleep (up to a minute), so the wait is generous; it ends as soon as they are gone.
RELEASE_DEADLINE_S = 180


def test_release_in_background_destroys_the_object_on_another_thread():
    destroyed = []
    done = threading.Event()

    class Probe:
        def __del__(self):
            destroyed.append(threading.current_thread().name)
            done.set()

    for _ in range(3):
        done.clear()
        holder = [Probe()]
        loops.release_in_background(holder)
        assert holder == []
        assert done.wait(RELEASE_DEADLINE_S)
    assert destroyed == ["lite_launcher_release"] * 3


def test_evaluation_iterators_are_released_after_each_evaluation():
    trainer = tiny.make_trainer()
    made = []
    dataset = trainer.eval_dataset

    class Recording:
        """Stands for the eval dataset; records weak references to the iterators made."""

        def __iter__(self):
            iterator = iter(dataset)
            made.append(weakref.ref(iterator))
            return iterator

    trainer.eval_dataset = Recording()
    for _ in range(3):
        assert 0.0 <= float(trainer.evaluate(2)["accuracy"]) <= 1.0
    deadline = time.monotonic() + RELEASE_DEADLINE_S
    while any(ref() is not None for ref in made) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(made) == 3 and all(ref() is None for ref in made)


@pytest.mark.parametrize("replicas", [1, 2])
def test_a_dropped_trainers_training_iterator_is_destroyed_on_the_release_thread(replicas):
    # Under MirroredStrategy the training iterator's destruction may wait out its autotuning
    # thread's sleep (4.5-21 s seen); dropping a Trainer, or replacing its training dataset,
    # must not wait for it. Each iterator's Python object is destroyed on the release thread.
    strategy = _strategy(replicas)
    trainer = tiny.make_trainer(strategy=strategy)
    destroyed = {}

    class Recording:
        """Stands for the training dataset; records the thread that destroys each iterator."""

        def __init__(self, name, dataset):
            self.name, self.dataset = name, dataset

        def __iter__(self):
            iterator = iter(self.dataset)
            weakref.finalize(iterator, lambda: destroyed.setdefault(
                self.name, threading.current_thread().name))
            return iterator

    dataset = trainer.train_dataset
    trainer.train_dataset = Recording("replaced", dataset)
    with strategy.scope():
        trainer.train(tf.constant(3))
        trainer.train_dataset = Recording("dropped", dataset)
        trainer.train(tf.constant(2))
    assert int(trainer.global_step.numpy()) == 5
    del trainer
    gc.collect()
    deadline = time.monotonic() + RELEASE_DEADLINE_S
    while len(destroyed) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert destroyed == {"replaced": "lite_launcher_release", "dropped": "lite_launcher_release"}


# The step after the fused loop (issue 55): read in the loop's own graph call, so that the
# Controller need not read the variable after each loop.

class OverridesTrain(ll.Trainer):
    """Moves the step after the base loop: the step the loop read is not the one it ends at."""

    def train(self, num_steps):
        logs = super().train(num_steps)
        self.global_step.assign_add(100)
        return logs


@pytest.mark.parametrize("replicas", [1, 2])
def test_fused_loop_reports_the_step_it_ended_at(replicas):
    strategy = _strategy(replicas)
    trainer = tiny.make_trainer(strategy=strategy)
    assert trainer.last_train_step is None  # nothing trained yet
    with strategy.scope():
        for n, expected in ((6, 6), (1, 7), (4, 11)):
            trainer.train(tf.constant(n))
            assert trainer.last_train_step == expected == int(trainer.global_step.numpy())


def test_no_step_is_reported_where_the_loop_does_not_end_the_call():
    for trainer_cls in (SeparateLoopEnd, OverridesTrain):
        trainer = tiny.make_trainer(trainer_cls=trainer_cls)
        trainer.train(tf.constant(3))
        assert trainer.last_train_step is None, trainer_cls
    trainer = tiny.make_trainer(tiny.make_config(train_tf_while_loop=False))
    trainer.train(3)
    assert trainer.last_train_step is None


def _counted_reads(monkeypatch):
    reads = []
    read = Controller._read_step

    def counted(self):
        reads.append(int(self.global_step.numpy()))
        return read(self)

    monkeypatch.setattr(Controller, "_read_step", counted)
    return reads


def test_the_controller_reads_the_step_only_after_actions_that_may_move_it(monkeypatch):
    reads = _counted_reads(monkeypatch)
    trainer = tiny.make_trainer()
    controller = Controller(global_step=trainer.global_step, trainer=trainer,
                            steps_per_loop=3)
    controller.train(9)
    # One read when the call starts, none after the three loops (the Trainer reported them).
    assert reads == [0] and int(trainer.global_step.numpy()) == 9

    # An action that moves the step back once: read after each loop's actions, and followed.
    reads.clear()
    moved = []

    def move_back(output):
        if not moved:
            moved.append(trainer.global_step.assign_add(-3))

    controller = Controller(global_step=trainer.global_step, trainer=trainer,
                            steps_per_loop=3, train_actions=[move_back])
    controller.train(15)
    # Loops end at 12 (moved to 9), 12, 15: a read at the start and after every loop's actions.
    assert reads == [9, 9, 12, 15]
    assert int(trainer.global_step.numpy()) == 15


_WRITES = ("AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp")


def test_lite_step_runs_no_more_ops_than_the_raw_loop_and_one_write_more():
    """The profile of issue 55: lite's `mlp_tiny` step against the raw loop's
    (benchmarks/raw_loop.py: same model, loss, SGD update, accuracy and loss metrics) in their
    `tf.while_loop` bodies. lite's extra work per step is the global step's increment alone."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "benchmarks"))
    import inner_loop  # noqa: E402  pylint: disable=import-outside-toplevel
    import raw_loop  # noqa: E402  pylint: disable=import-outside-toplevel
    import workloads as bench_workloads  # noqa: E402  pylint: disable=import-outside-toplevel

    one = tf.constant(1, tf.int32)
    loop, iterator, _ = raw_loop.build_train_loop(bench_workloads.get("mlp_tiny"))
    loop(iterator, one)
    raw = inner_loop.while_body_ops(loop.get_concrete_function(iterator, one))["body"]

    params = ll.get_exp_config("mlp_tiny")
    trainer = create_trainer(params, ll.get_task(params.task), train=True, evaluate=False)
    trainer.train(one)
    train_loop = trainer._train_loop
    lite = inner_loop.while_body_ops(
        train_loop.loop_fn.get_concrete_function(train_loop.iterator, one))["body"]

    assert sum(lite.values()) <= sum(raw.values()), (lite, raw)
    assert sum(lite.get(op, 0) for op in _WRITES) == sum(raw.get(op, 0) for op in _WRITES) + 1
    for op in ("MatMul", "BiasAddGrad", "SparseSoftmaxCrossEntropyWithLogits", "IteratorGetNext"):
        assert lite[op] == raw[op], op
