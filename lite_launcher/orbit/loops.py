"""Orbit's runner layer: run a step function `num_steps` times, and nothing else.

The Trainer says what one step is (`Trainer.train_step` / `eval_step`) and hands it to this
module, which says how `num_steps` of them run: the loop's shape, its graph calls, the
iterators it reads, and (under a `ParameterServerStrategy`) how the steps are scheduled on the
workers. It calls nothing of the Trainer's but the functions it is given. The objects the
Trainer holds are `TrainLoop` (one iterator across calls) and `EvalLoop` (a new iterator per
evaluation).

Three loop shapes, chosen by the loop options (`use_tf_function`, `use_tf_while_loop`):
- `python_loop(step_fn)`: a Python loop calling `step_fn` (eager, or a `tf.function` step);
  `num_steps == -1` runs until the iterator is exhausted.
- `while_loop(step_fn)`: a loop over `tf.range(num_steps)`, meant to be wrapped in one
  `tf.function`, so a whole inner loop is one graph call.
- `while_loop_with_state(step_fn)`: the same, also folding the step outputs into a state with a
  `reduce_fn` (shape invariants relaxed, so a state may grow along the loop).

`num_steps` must be a tensor for the `tf.range` loops: a Python int would retrace the
surrounding `tf.function` for every distinct value.

Calling a `tf.function` costs a dispatch: it binds the arguments, looks up its trace from
their types and casts them to the trace's signature on every call, ~0.2 ms on a 2-core machine
with an iterator argument, more than a small step. Loops that call the same function many
times with arguments of the same types (`python_loop`'s steps, `DirectCall`) call the traced
graph directly with the same tensors after the first call; the graph run is the same.
"""

from __future__ import annotations

import os
import queue
import threading
import weakref
from typing import Any, Callable, List, Optional

import tensorflow as tf
from absl import logging

from lite_launcher.common import tf_adapter
from lite_launcher.core.base_config import ConfigError

StepFn = Callable[[Any], Any]
ReduceFn = Callable[[Any, Any], Any]


@tf.autograph.experimental.do_not_convert  # a check on Python types: nothing to convert
def _require_tensor(num_steps) -> None:
    if not isinstance(num_steps, tf.Tensor):
        raise ValueError(
            f"num_steps ({num_steps!r}) must be a scalar tf.Tensor for a tf.while_loop inner "
            f"loop: a Python value retraces the tf.function for every distinct value.")


def is_tf_function(fn) -> bool:
    """Whether `fn` is a `tf.function` (a polymorphic function that traces on demand)."""
    return isinstance(fn, tf.types.experimental.PolymorphicFunction)


def _all_tensors(args) -> bool:
    return all(isinstance(a, tf.Tensor) for a in args)


def _signature(args):
    return tuple((a.dtype, a.shape) for a in args)


def _flat_iterator_inputs(concrete, iterator, args):
    """The iterator's tensors for the graph's flat call (`tf_adapter.flat_call`), or None to
    use the public call.

    The public `ConcreteFunction.__call__` re-binds the arguments and casts the iterator to its
    type spec on every call (~0.1 ms on a 2-core machine); the flat call passes the same
    tensors to the same graph. It is private TensorFlow API, so it is used only when it has
    the signature this was written against and the graph's inputs match the flat arguments.
    """
    if tf_adapter.flat_call(concrete) is None:
        return None
    flat = tf.nest.flatten(iterator, expand_composites=True)
    tensors = flat + list(args)
    inputs = list(concrete.inputs)
    if len(inputs) - len(concrete.captured_inputs) != len(tensors):
        return None
    if any(not tf.is_tensor(t) or t.dtype != i.dtype for t, i in zip(tensors, inputs)):
        return None
    return flat


def _type_spec(value):
    try:
        return tf.type_spec_from_value(value)
    except (TypeError, ValueError):
        return None


class IteratorRefs:
    """Every reference a loop keeps to its iterator: the iterator it owns (`TrainLoop`), the
    one its `DirectCall` last called, and that iterator's flat tensors. One object, so that
    `release_iterators` can take them all at once."""

    __slots__ = ("owned", "called", "flat")

    def __init__(self):
        self.owned = self.called = self.flat = None


def release_iterators(refs: IteratorRefs) -> None:
    """Empties `refs` and destroys what it held on the release thread (`release_in_background`).

    A training iterator under MirroredStrategy (TensorFlow's MultiDeviceIterator) waits, when
    destroyed, for its tf.data autotuning thread, which may be sleeping out a period that
    grows as the iterator ages: seen 4.5-21 s for iterators of 6-20 s. A dropped Trainer, or a
    replaced training dataset, need not wait for it.
    """
    held = (refs.owned, refs.called, refs.flat)
    refs.owned = refs.called = refs.flat = None
    if any(ref is not None for ref in held):
        holder = [held]
        del held
        release_in_background(holder)


class DirectCall:
    """Calls `fn(iterator, *tensors)`, skipping the `tf.function` dispatch once it has traced.

    The first call goes through `fn` (tracing as usual). Later calls with argument
    dtypes/shapes seen before and an iterator of the same type spec (the same object, or a new
    iterator over the same kind of dataset, which `fn` would look up to the same trace) run the
    kept `ConcreteFunction` with the same tensors, without re-binding the arguments; anything
    else goes through `fn` again. A plain Python `fn`, or non-tensor arguments, are always
    called as they are. `forget_iterator()` drops the reference to the last iterator (and
    keeps the trace); `reset()` drops both. The iterator and its tensors are kept in `refs`
    (an `IteratorRefs`, given by the `TrainLoop` that owns the iterator, or one of its own).
    """

    def __init__(self, fn, refs: Optional["IteratorRefs"] = None):
        self.fn = fn
        self._direct = is_tf_function(fn)
        self._refs = refs if refs is not None else IteratorRefs()
        self.reset()

    def reset(self) -> None:
        self._concrete = None
        self._signature = None
        self._spec = None
        self.forget_iterator()

    def forget_iterator(self) -> None:
        self._refs.called = None
        self._refs.flat = None
        self._flat_caller = None

    @property
    def flat(self) -> bool:
        """Whether the kept graph is called with flat tensors (the fastest path)."""
        return self._refs.flat is not None

    def __call__(self, iterator, *args):
        concrete = self._concrete
        refs = self._refs
        if (concrete is not None and iterator is refs.called and _all_tensors(args)
                and _signature(args) == self._signature):
            if refs.flat is not None:
                return self._flat_caller(refs.flat + list(args))
            return concrete(iterator, *args)
        if not self._direct or not _all_tensors(args):
            return self.fn(iterator, *args)
        signature = _signature(args)
        if (concrete is not None and signature == self._signature
                and self._spec is not None and _type_spec(iterator) == self._spec):
            flat = _flat_iterator_inputs(concrete, iterator, args)
            if flat is not None:
                refs.called, refs.flat = iterator, flat
                self._flat_caller = tf_adapter.flat_call(concrete)
                return self._flat_caller(flat + list(args))
        outputs = self.fn(iterator, *args)
        # Looked up after the call, so it is the trace that call made or used.
        concrete = self.fn.get_concrete_function(iterator, *args)
        self._concrete, refs.called, self._signature = concrete, iterator, signature
        self._spec = _type_spec(iterator)
        refs.flat = _flat_iterator_inputs(concrete, iterator, args)
        self._flat_caller = tf_adapter.flat_call(concrete) if refs.flat else None
        return outputs


_release_queue: Optional[queue.SimpleQueue] = None
_release_lock = threading.Lock()


def _release_forever(items: queue.SimpleQueue) -> None:
    while True:
        obj, handed_over = items.get()
        handed_over.wait()  # the caller's last reference is gone: this drop destroys it
        del obj, handed_over


def _forget_release_thread() -> None:
    # A forked child has the queue but not the thread.
    global _release_queue
    _release_queue = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_release_thread)


def release_in_background(holder: List[Any]) -> None:
    """Takes the one object out of `holder` and destroys it on a daemon thread.

    For objects whose destruction waits: destroying a tf.data iterator stops its autotuning
    thread and waits for an optimisation pass in progress, now and then tens of milliseconds
    on a busy 2-core machine, and an evaluation need not wait for its spent iterator. The
    caller must hold no other reference (hence the holder); the object is then destroyed on
    the thread exactly as it would have been on the caller's.
    """
    global _release_queue
    with _release_lock:
        if _release_queue is None:
            _release_queue = queue.SimpleQueue()
            threading.Thread(target=_release_forever, args=(_release_queue,), daemon=True,
                             name="lite_launcher_release").start()
        items = _release_queue
    obj = holder.pop()
    handed_over = threading.Event()
    items.put((obj, handed_over))
    del obj
    handed_over.set()


def python_loop(step_fn: StepFn):
    """Returns `loop_fn(iterator, num_steps, state=None, reduce_fn=None)` driven by Python.

    With `num_steps == -1` it runs until `step_fn` raises `StopIteration` or
    `tf.errors.OutOfRangeError` (the dataset is exhausted) and returns normally. A
    `tf.function` `step_fn` is called through its traced graph after the first step.
    """

    # Kept across calls (an evaluation makes a new iterator of the same type each time); it
    # forgets each call's iterator when the call returns, so that it is not kept alive.
    call = DirectCall(step_fn)

    def loop_fn(iterator, num_steps, state=None, reduce_fn: Optional[ReduceFn] = None):
        num_steps = int(num_steps)
        step = 0
        try:
            # Under async_scope, errors of remote/async eager ops surface at the scope's end.
            with tf.experimental.async_scope():
                while num_steps == -1 or step < num_steps:
                    outputs = call(iterator)
                    if reduce_fn is not None:
                        state = reduce_fn(state, outputs)
                    step += 1
        except (StopIteration, tf.errors.OutOfRangeError):
            tf.experimental.async_clear_error()
            if num_steps != -1:
                logging.warning("The dataset ended after %d of %d steps.", step, num_steps)
            else:
                logging.info("The dataset iterator is exhausted after %d steps.", step)
        finally:
            call.forget_iterator()
        return state

    return loop_fn


def while_loop(step_fn: StepFn):
    """Returns `loop_fn(iterator, num_steps)` looping over `tf.range(num_steps)`.

    Wrap the result in `tf.function`; step outputs are discarded.
    """

    def loop_fn(iterator, num_steps):
        _require_tensor(num_steps)
        for _ in tf.range(num_steps):
            # An empty name scope keeps op names short and stable across steps.
            with tf.name_scope(""):
                step_fn(iterator)

    return loop_fn


def _relaxed_shape(value):
    if not tf.is_tensor(value):
        return None
    shape = value.shape
    if shape.rank:
        return tf.TensorShape([None] * shape.rank)
    return shape


def while_loop_with_state(step_fn: StepFn):
    """Returns `loop_fn(iterator, num_steps, state, reduce_fn)` over `tf.range(num_steps)`.

    `state = reduce_fn(state, step_fn(iterator))` each step; the state's structure must stay the
    same, but its tensors may change shape (e.g. concatenating per-step outputs).
    """

    def loop_fn(iterator, num_steps, state, reduce_fn: ReduceFn):
        _require_tensor(num_steps)
        for _ in tf.range(num_steps):
            # AutoGraph takes loop options only from the loop body's first statement: anything
            # before it (even the relaxed shapes) stops the loop's conversion.
            tf.autograph.experimental.set_loop_options(
                shape_invariants=[(state, tf.nest.map_structure(_relaxed_shape, state))])
            with tf.name_scope(""):
                state = reduce_fn(state, step_fn(iterator))
        return state

    return loop_fn


def split_steps(num_steps: int, parts: int):
    """`num_steps` split into at most `parts` positive chunks differing by at most one."""
    parts = max(1, min(parts, num_steps))
    base, extra = divmod(num_steps, parts)
    return [base + 1 if i < extra else base for i in range(parts)] if num_steps > 0 else []


def _num_workers(strategy) -> int:
    """The worker tasks of a parameter-server strategy's cluster (1 when unknown)."""
    resolver = tf_adapter.cluster_resolver(strategy)
    if resolver is None:
        return 1
    return max(1, resolver.cluster_spec().num_tasks("worker"))


def make_train_loop(step_fn: StepFn, *, use_tf_function: bool, use_tf_while_loop: bool,
                    end_fn: Optional[Callable[[], Any]] = None, coordinator=None):
    """Builds the training loop `loop_fn(iterator, num_steps)` for the given options.

    With `use_tf_while_loop` the loop is one `tf.function` whatever `use_tf_function` says (a
    config that asks for a while loop without tf.function is refused by
    `TrainerConfig.validate_loop_options`); otherwise a Python loop calls `step_fn`, as a
    `tf.function` when `use_tf_function`.

    `end_fn` (only with `use_tf_while_loop`, not with a coordinator): called in the same graph
    after the loop, and `loop_fn` returns its result, so that an inner loop and the reads that
    follow it (metric results) are one graph call.

    With a `ClusterCoordinator` (parameter servers) `loop_fn` schedules the steps on the
    workers, split into one closure per worker (`split_steps`) so that every worker trains
    concurrently (TFM's one closure per loop keeps all but one idle), and returns at once;
    `coordinator.join()` waits for them.
    """
    if end_fn is not None and (not use_tf_while_loop or coordinator is not None):
        raise ValueError("end_fn needs use_tf_while_loop=True and no coordinator (one graph "
                         "call for loop and end).")
    if use_tf_while_loop:
        loop = while_loop(step_fn)
        if end_fn is None:
            loop_fn = tf.function(loop)
        else:
            def loop_then_end(iterator, num_steps):
                loop(iterator, num_steps)
                return end_fn()

            loop_fn = tf.function(loop_then_end)
    else:
        loop_fn = python_loop(tf.function(step_fn) if use_tf_function else step_fn)
    if coordinator is None:
        return loop_fn
    num_workers = _num_workers(coordinator.strategy)

    def scheduled_loop_fn(iterator, num_steps):
        for chunk in split_steps(int(num_steps), num_workers):
            steps = tf.constant(chunk, tf.int32) if use_tf_while_loop else chunk
            coordinator.schedule(loop_fn, args=(iterator, steps))

    return scheduled_loop_fn


def make_eval_loop(step_fn: StepFn, *, use_tf_function: bool, use_tf_while_loop: bool,
                   has_state: bool, coordinator=None):
    """Builds the eval loop `loop_fn(iterator, num_steps, state=None, reduce_fn=None)`.

    The `tf.while_loop` variants (one `tf.function`, as in `make_train_loop`) need a fixed
    `num_steps` (not -1).

    With a `ClusterCoordinator` (parameter servers) the whole evaluation is one
    `tf.while_loop` in a `tf.function` (whatever `use_tf_while_loop` says: the coordinator
    schedules only `tf.function`s), scheduled as one closure, so that it reads the validation
    set from the top as one device would; `coordinator.join()` waits for it. As in TFM, a
    stateful evaluation is not supported there (`reduce_fn` is not called).
    """
    if coordinator is not None:
        if has_state:
            raise ValueError(
                "A stateful evaluation (eval_begin returning a state) is not supported "
                "with the parameter_server strategy: keep eval state in metrics.")
        scheduled = tf.function(while_loop(step_fn))

        def scheduled_loop_fn(iterator, num_steps, state=None, reduce_fn=None):
            del reduce_fn
            coordinator.schedule(scheduled, args=(iterator, num_steps))
            return state

        return scheduled_loop_fn
    if use_tf_while_loop:
        if has_state:
            return tf.function(while_loop_with_state(step_fn))
        loop = tf.function(while_loop(step_fn))

        def stateless(iterator, num_steps, state=None, reduce_fn=None):
            del reduce_fn
            loop(iterator, num_steps)
            return state

        return stateless
    if use_tf_function:
        step_fn = tf.function(step_fn)
    return python_loop(step_fn)


def make_iterator(dataset):
    """An iterator over `dataset` (a dataset, distributed dataset, or a nest of them)."""
    return tf.nest.map_structure(iter, dataset)


class TrainLoop:
    """Runs a training loop function over one iterator that lives across calls.

    Orbit's `StandardTrainer.train` without the hooks: `run(num_steps)` makes the iterator on
    first use (it continues where the previous call stopped), converts `num_steps` to a tensor
    for a `tf.while_loop` (so a new value never retraces) and calls the loop function through
    `DirectCall`. The loop function (`make_train_loop`, or one a Trainer subclass builds in
    `create_train_loop_fn`) is given once, with `set_loop_fn`, before the first run.

    Args:
      dataset: what the iterator reads (replace it with `set_dataset`).
      tensor_num_steps: whether the loop function takes `num_steps` as a scalar int32 tensor.
    """

    def __init__(self, dataset, *, tensor_num_steps: bool):
        self._tensor_num_steps = tensor_num_steps
        self._call: Optional[DirectCall] = None
        self._dataset = dataset
        self._refs = IteratorRefs()
        # When the loop is garbage (its Trainer dropped), its iterator goes to the release
        # thread instead of being destroyed wherever the loop was collected. Not at exit: the
        # process is ending anyway.
        weakref.finalize(self, release_iterators, self._refs).atexit = False

    @property
    def loop_fn(self):
        """The loop function `loop_fn(iterator, num_steps)` (None until set)."""
        return self._call.fn if self._call is not None else None

    def set_loop_fn(self, loop_fn: Callable) -> None:
        """Sets the loop function every later `run` calls."""
        self._call = DirectCall(loop_fn, self._refs)  # (which forgets the last call's refs)

    @property
    def iterator(self):
        """The iterator the next run continues (None until made)."""
        return self._refs.owned

    def make_iterator(self):
        """Makes the iterator now (so that a checkpoint can track it) and returns it."""
        if self._refs.owned is None:
            self._refs.owned = make_iterator(self._dataset)
        return self._refs.owned

    def make_saveable_iterator(self, strategy_name: str):
        """`make_iterator()`, refused with a one-line ConfigError when it cannot be saved."""
        iterator = self.make_iterator()
        if not all(tf_adapter.is_trackable(it) for it in tf.nest.flatten(iterator)):
            # tf.distribute's iterators (any strategy but the default) cannot be saved.
            raise ConfigError(
                f"trainer.checkpoint_train_iterator needs a tf.data iterator that can be "
                f"saved, but the {strategy_name} input iterator cannot: set "
                f"runtime.distribution_strategy to 'off' or "
                f"trainer.checkpoint_train_iterator to false.")
        return iterator

    @property
    def dataset(self):
        return self._dataset

    def set_dataset(self, dataset) -> None:
        """Replaces the dataset; the old iterator (and its position) is dropped, on the release
        thread."""
        self._dataset = dataset
        release_iterators(self._refs)
        if self._call is not None:
            self._call.reset()

    def run(self, num_steps):
        """Runs `num_steps` steps (an int or a scalar int32 tensor); returns `loop_fn`'s output."""
        if self._call is None:
            raise RuntimeError("TrainLoop.run needs a loop function: call set_loop_fn first.")
        iterator = self.make_iterator()
        if self._tensor_num_steps and not isinstance(num_steps, tf.Tensor):
            num_steps = tf.constant(num_steps, dtype=tf.int32)
        return self._call(iterator, num_steps)


class EvalLoop:
    """Runs an evaluation loop function over a new iterator per evaluation.

    Orbit's `StandardEvaluator.evaluate` without the hooks: each `run` reads the validation set
    from the top, with the loop function it is given (`make_eval_loop`, or one a Trainer
    subclass builds in `create_eval_loop_fn`). A spent iterator is destroyed on a background
    thread (`release_in_background`), except under parameter servers, where the scheduled loop
    may still be reading it.

    Args:
      in_graph: whether the loop functions are `tf.while_loop`s (a fixed, tensor `num_steps`).
      scheduled: whether they schedule on a `ClusterCoordinator` (parameter servers).
    """

    def __init__(self, *, in_graph: bool, scheduled: bool):
        self._in_graph = in_graph
        self._scheduled = scheduled

    def check_num_steps(self, num_steps) -> None:
        """Refuses -1 (until the dataset ends) for a loop of a fixed length: call before
        anything that must be undone when the evaluation does not run."""
        if self._in_graph and int(num_steps) == -1:
            if self._scheduled:
                raise ValueError(
                    "evaluate(-1) (until the dataset ends) is not supported with the "
                    "parameter_server strategy: set trainer.validation_steps > 0.")
            raise ValueError(
                "evaluate(-1) (until the dataset ends) is not supported with "
                "eval_tf_while_loop=True: set validation_steps > 0 or "
                "eval_tf_while_loop=False.")

    def run(self, loop_fn, dataset, num_steps, state=None,
            reduce_fn: Optional[ReduceFn] = None):
        """Runs `loop_fn` for `num_steps` steps (-1: until the dataset ends) from the top of
        `dataset`. Returns the final state (`state` folded with `reduce_fn` over the outputs).
        """
        self.check_num_steps(num_steps)
        # The only reference to this evaluation's iterator, so it can be handed over below.
        iterators = [make_iterator(dataset)]
        if self._in_graph and not isinstance(num_steps, tf.Tensor):
            num_steps = tf.constant(num_steps, dtype=tf.int32)
        if self._in_graph and state is None:
            loop_fn(iterators[0], num_steps)
        else:
            state = loop_fn(iterators[0], num_steps, state=state, reduce_fn=reduce_fn)
        if not self._scheduled:
            release_in_background(iterators)
        return state
