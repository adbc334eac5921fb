"""The outer loop: when to train, evaluate, checkpoint and write summaries (Orbit's Controller).

The Controller knows two duck-typed interfaces and nothing else:

- a trainer: `trainer.train(num_steps) -> Optional[dict]` runs `num_steps` training steps
  (the inner loop) and advances the global step by `num_steps`;
- an evaluator: `evaluator.evaluate(num_steps) -> Optional[dict]` runs one evaluation of
  `num_steps` steps, or until the data ends when `num_steps == -1`.

`num_steps` is always passed as a scalar `tf.int32` tensor so that a `tf.function` inner loop
traces once. Returned dicts map names to scalars (Python numbers, NumPy values, tensors) or to
nested dicts (written as summary sub-directories).

Between inner loops the Controller calls the actions, logs one line, writes the loop's
output (and `steps_per_second`) to the training summaries and saves a checkpoint when the
checkpoint manager's `checkpoint_interval` is due, as Orbit does: a manager without a (truthy)
interval saves nothing. `summary_interval` only governs the summaries a trainer writes inside
its steps. Per-loop host work is kept small: the global step is read once per loop, the
summaries are one compiled graph call (see `summaries`), writers are flushed at checkpoints,
evaluations and the end of a call rather than every loop, and nothing is formatted unless
it is logged.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Union

import numpy as np
import tensorflow as tf
from absl import logging

from lite_launcher.base_config import ConfigError
from lite_launcher import atomic_write
from lite_launcher import checkpoint_recovery
from lite_launcher.errors import CheckpointWriteError  # noqa: F401  (re-exported)
from lite_launcher.summaries import SummaryManager, scalar

Output = Dict[str, Any]
Action = Callable[[Output], None]

# Name of the record of evaluated checkpoint steps kept by `evaluate_continuously(
# evaluate_all=True)` in the evaluation summary directory.
EVALUATED_CHECKPOINTS_FILE = "evaluated_checkpoints.json"

_CHECKPOINT_NUMBER = re.compile(r"-(\d+)$")
_MAX_CACHED_STEP_TENSORS = 64

# What restoring a deleted or partly written checkpoint raises: NotFoundError, DataLossError,
# OutOfRangeError, ... (all OpError), and IndexError ("Read less bytes than requested") from the
# checkpoint reader on a truncated data file. Shape or structure mismatches (ValueError) are
# the user's mistake and still raise.
_UNREADABLE_CHECKPOINT_ERRORS = (tf.errors.OpError, IndexError)

# How Keras 3 and TensorFlow word a restore into a variable of another shape.
_KERAS_SHAPE_MISMATCH = re.compile(
    r"variable\.shape=(\([^)]*\)), Received: value\.shape=(\([^)]*\))"
    r".*?<Variable path=([^,>\s]+)", re.DOTALL)
_TF_SHAPE_MISMATCH = re.compile(
    r"incompatible tensor with shape (\([^)]*\)) when attempting to restore variable with "
    r"shape (\([^)]*\)) and name (\S+?)\.?(?:\s|$)")



def _shape_mismatch(error: ValueError, checkpoint_path: Optional[str]) -> Optional[ConfigError]:
    """A one-line ConfigError naming the variable and both shapes, if `error` is a mismatch."""
    message = str(error)
    match = _KERAS_SHAPE_MISMATCH.search(message)
    if match:
        model_shape, checkpoint_shape, name = match.groups()
    else:
        match = _TF_SHAPE_MISMATCH.search(message)
        if not match:
            return None
        checkpoint_shape, model_shape, name = match.groups()
        name = re.sub(r":\d+$", "", name)  # "dense/kernel:0" -> "dense/kernel"
    return ConfigError(
        f"Checkpoint {checkpoint_path} does not fit the model: variable {name} has shape "
        f"{checkpoint_shape} in the checkpoint but {model_shape} in the model. The model_dir "
        f"was written by a different model: use a new model_dir, or the model config it was "
        f"trained with.")


def _to_values(output: Mapping) -> Dict[str, Any]:
    """Returns a copy of `output` with tensors and variables replaced by NumPy values."""
    values = {}
    for name, value in output.items():
        if isinstance(value, Mapping):
            values[name] = _to_values(value)
        elif tf.is_tensor(value) or isinstance(value, tf.Variable):
            values[name] = value.numpy()
        else:
            values[name] = value
    return values


def _format_number(value) -> str:
    if isinstance(value, (float, np.floating)):
        return f"{float(value):.6g}"
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return _format_number(value.item())
    return str(value)


def _format_values(values: Mapping) -> str:
    parts = []
    for name, value in values.items():
        if isinstance(value, Mapping):
            parts.append(f"{name}: {{{_format_values(value)}}}")
        else:
            parts.append(f"{name}: {_format_number(value)}")
    return ", ".join(parts)


class _Lazy:
    """Formats on `str()`, so a log line skipped by the log level costs no formatting."""

    __slots__ = ("_fn", "_arg")

    def __init__(self, fn, arg):
        self._fn = fn
        self._arg = arg

    def __str__(self):
        return self._fn(self._arg)


def _format_eta(seconds: float) -> str:
    if not np.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}"


def checkpoint_number(path: str) -> Optional[int]:
    """The number a `CheckpointManager` put at the end of `path` (`.../ckpt-1200` -> 1200)."""
    match = _CHECKPOINT_NUMBER.search(os.path.basename(path))
    return int(match.group(1)) if match else None


def _fix_keras_variables_for_async_checkpoint() -> None:
    """Makes Keras 3 variables work with async checkpointing (idempotent).

    Keras 3.15's TF `Variable._copy_trackable_to_cpu` makes a new `tf.Variable` on every call.
    The async checkpoint helper calls it inside a `tf.function` from the second save on, which
    fails ("tf.function only supports singleton tf.Variables created on the first call").
    Mapping the Keras variable to the CPU copy of its underlying variable saves the same values
    and creates nothing. Private Keras API: `test_async_checkpointing_*` pins it.
    """
    try:
        from keras.src.backend.tensorflow import core as keras_tf_core
    except ImportError:
        return
    variable_cls = getattr(keras_tf_core, "Variable", None)
    if (variable_cls is None or "_copy_trackable_to_cpu" not in variable_cls.__dict__
            or getattr(variable_cls, "_lite_launcher_async_copy", False)):
        return

    def _copy_trackable_to_cpu(self, object_map):
        self.value._copy_trackable_to_cpu(object_map)
        object_map[self] = object_map[self.value]

    variable_cls._copy_trackable_to_cpu = _copy_trackable_to_cpu
    variable_cls._lite_launcher_async_copy = True


class StepTimer:
    """Measures steps per second of a global step between successive calls.

    `steps_per_second(current_step)` takes the step when the caller already has it (the
    Controller reads the global step once per loop); without it the variable is read.
    """

    def __init__(self, global_step, current_step: Optional[int] = None):
        self._global_step = global_step
        self.start(current_step)

    def start(self, current_step: Optional[int] = None) -> None:
        """Restarts the measurement from `current_step` (default: the global step now)."""
        if current_step is None:
            current_step = int(self._global_step.numpy())
        self.last_step = current_step
        self.last_time = time.perf_counter()

    def steps_per_second(self, current_step: Optional[int] = None, restart: bool = True) -> float:
        """Steps per second since the last `start` (or call with `restart=True`)."""
        if current_step is None:
            current_step = int(self._global_step.numpy())
        now = time.perf_counter()
        elapsed = now - self.last_time
        rate = (current_step - self.last_step) / elapsed if elapsed > 0 else float("inf")
        if restart:
            self.last_step = current_step
            self.last_time = now
        return rate


def _check_positive_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} ({value!r}) must be a positive integer.")


class Controller:
    """Runs the outer loop of training and evaluation around a trainer and an evaluator.

    Four outer loops, as in Orbit: `train` (up to a global step), `evaluate` (once),
    `train_and_evaluate` (interleaved) and `evaluate_continuously` (each new checkpoint of a
    training job).

    On construction, when a `checkpoint_manager` is given, the latest checkpoint in its
    directory is restored (or its `init_fn` called when there is none). An unreadable latest
    checkpoint raises, except for an evaluation-only controller, which warns.

    Args (keyword-only):
      global_step: The integer `tf.Variable` the trainer advances by one per step.
      trainer: Object with `train(num_steps) -> Optional[dict]` (the inner training loop).
      evaluator: Object with `evaluate(num_steps) -> Optional[dict]`.
      strategy: The `tf.distribute.Strategy` to restore checkpoints under (default: current).
      train_actions: Callables called with each inner training loop's raw output.
      eval_actions: Callables called with each evaluation's raw output.
      steps_per_loop: Steps per inner training loop: an int, or a callable taking the global
        step (int) and returning one. Required with a trainer.
      checkpoint_manager: A `tf.train.CheckpointManager`. Checkpoints are written every
        `checkpoint_interval` steps (its `step_counter` is the global step) and at the end of
        `train` / `train_and_evaluate`; without an interval, or with 0, no checkpoint is written
        by the outer loops (as in Orbit), though `save_checkpoint()` still saves on request.
      enable_async_checkpointing: Save checkpoints in a background thread; `train` and
        `train_and_evaluate` wait for pending saves before returning.
      summary_interval: Summaries written inside `trainer.train` are recorded only at steps
        that are multiples of this (a multiple of an int `steps_per_loop`); None: none are
        recorded. The Controller's own summaries (each loop's output and `steps_per_second`)
        are written after every inner loop whenever there is a summary directory.
      summary_dir: Directory of training summaries (None: no training summaries).
      eval_summary_dir: Directory of evaluation summaries (default: `summary_dir`).
      summary_manager: Writes training summaries instead of one made from `summary_dir`.
      eval_summary_manager: Writes evaluation summaries instead of one made from
        `eval_summary_dir`.
    """

    def __init__(
        self,
        *,
        global_step: tf.Variable,
        trainer=None,
        evaluator=None,
        strategy: Optional[tf.distribute.Strategy] = None,
        train_actions: Optional[Iterable[Action]] = None,
        eval_actions: Optional[Iterable[Action]] = None,
        steps_per_loop: Optional[Union[int, Callable[[int], int]]] = None,
        checkpoint_manager: Optional[tf.train.CheckpointManager] = None,
        enable_async_checkpointing: bool = False,
        summary_interval: Optional[int] = None,
        summary_dir: Optional[str] = None,
        eval_summary_dir: Optional[str] = None,
        summary_manager=None,
        eval_summary_manager=None,
    ):
        if trainer is None and evaluator is None:
            raise ValueError("Controller needs a trainer or an evaluator (both are None).")
        if trainer is not None and not callable(getattr(trainer, "train", None)):
            raise ValueError(f"trainer ({trainer!r}) has no train(num_steps) method.")
        if evaluator is not None and not callable(getattr(evaluator, "evaluate", None)):
            raise ValueError(f"evaluator ({evaluator!r}) has no evaluate(num_steps) method.")
        if not isinstance(global_step, tf.Variable):
            raise ValueError(
                f"global_step ({global_step!r}) must be a tf.Variable (e.g. an int64 variable "
                "the trainer increments).")
        if trainer is not None:
            if steps_per_loop is None:
                raise ValueError("steps_per_loop is required when a trainer is given.")
            if not callable(steps_per_loop) and (
                    isinstance(steps_per_loop, bool)
                    or not isinstance(steps_per_loop, (int, np.integer)) or steps_per_loop < 1):
                raise ValueError(
                    f"steps_per_loop ({steps_per_loop!r}) must be a positive integer or a "
                    "callable of the global step.")
        if summary_interval is not None:
            _check_positive_int("summary_interval", summary_interval)
            if (trainer is not None and not callable(steps_per_loop)
                    and summary_interval % steps_per_loop != 0):
                raise ValueError(
                    f"summary_interval ({summary_interval}) must be a multiple of "
                    f"steps_per_loop ({steps_per_loop}).")

        self.trainer = trainer
        self.evaluator = evaluator
        self.strategy = strategy or tf.distribute.get_strategy()
        self.global_step = global_step
        self.train_actions = tuple(train_actions or ())
        self.eval_actions = tuple(eval_actions or ())
        self._steps_per_loop = steps_per_loop
        self.summary_interval = None if summary_interval is None else int(summary_interval)

        self.checkpoint_manager = checkpoint_manager
        self._checkpoint_options = (
            tf.train.CheckpointOptions(enable_async=True) if enable_async_checkpointing else None)
        self._last_saved_step: Optional[int] = None
        if enable_async_checkpointing:
            _fix_keras_variables_for_async_checkpoint()

        self.summary_manager = summary_manager or SummaryManager(
            summary_dir, scalar, global_step=global_step)
        self._eval_summary_dir = eval_summary_dir or summary_dir
        if eval_summary_manager is not None:
            self.eval_summary_manager = eval_summary_manager
        elif trainer is not None and self._eval_summary_dir == summary_dir:
            # Same directory: one writer, or two writers would race on one event file name.
            self.eval_summary_manager = self.summary_manager
        else:
            self.eval_summary_manager = SummaryManager(
                self._eval_summary_dir, scalar, global_step=global_step)

        # Summaries written outside a Controller call (e.g. by actions) get the global step.
        tf.summary.experimental.set_step(global_step)

        if self.summary_interval is not None:
            interval = self.summary_interval
            # A tensor predicate: evaluated at each summary op, also inside a tf.function.
            self._record_predicate = lambda: tf.equal(global_step % interval, 0)
        else:
            self._record_predicate = False
        self._step_tensors: Dict[int, tf.Tensor] = {}

        if checkpoint_manager is not None:
            self._create_save_counter()
            try:
                self.restore_checkpoint()
            except _UNREADABLE_CHECKPOINT_ERRORS as error:
                if trainer is not None:
                    raise  # Training on from a broken state would overwrite good checkpoints.
                # An evaluator restores each checkpoint it evaluates: a broken latest one (being
                # deleted or written) must not stop it from starting.
                logging.warning("Could not restore the latest checkpoint in %s (%s: %s); "
                                "continuing, as this controller only evaluates.",
                                checkpoint_manager.directory, type(error).__name__,
                                (str(error).strip().splitlines() or [""])[0])

    # ----------------------------------------------------------------------------------------
    # Outer loops.

    def train(self, steps: int, checkpoint_at_completion: bool = True) -> Optional[Output]:
        """Trains until the global step reaches `steps` (an absolute step, as in Orbit).

        Runs inner loops of `min(steps_per_loop, steps - global_step)` steps. After each loop:
        train actions, one log line, the output written to the training summaries, a checkpoint
        when `checkpoint_interval` is due. Saves a checkpoint at the end when
        `checkpoint_at_completion` and the manager has an interval, flushes the summaries and
        waits for asynchronous saves before returning (also when a loop raises). A loop that
        advances the global step by a different number of steps logs a warning; one that does
        not advance it at all raises RuntimeError.

        Returns:
          The last inner loop's output as NumPy values plus `steps_per_second`, or None when
          no step was run.
        """
        self._require("trainer", "train")
        steps = int(steps)
        current = self._read_step()
        logging.info("train | step: %6d | training until step %d...", current, steps)
        try:
            output, current = self._train_to(steps, current)
            if checkpoint_at_completion:
                self._maybe_save(current)
        except BaseException:
            self._flush_train_summaries_quietly()
            raise
        self.summary_manager.flush()
        self._sync_checkpoints()
        return output

    def _train_to(self, steps: int, current: int):
        """The loops of `train`: returns (last output or None, global step)."""
        output = None
        timer = StepTimer(self.global_step, current)
        first_loop_end = None  # (step, time) after the first loop, which includes tracing.
        write_summaries = self.summary_manager.write_summaries
        # Our manager takes the step the loop already read (Orbit's interface has no `step`).
        pass_step = isinstance(self.summary_manager, SummaryManager)
        while current < steps:
            num_steps = min(self._loop_size(current), steps - current)
            output, current = self._train_loop(num_steps, current)
            steps_per_second = timer.steps_per_second(current)
            if first_loop_end is None:
                first_loop_end = (current, time.perf_counter())
                rate = steps_per_second
            else:
                done = current - first_loop_end[0]
                rate = done / max(time.perf_counter() - first_loop_end[1], 1e-12)
            eta = (steps - current) / rate if rate > 0 else float("inf")
            logging.info("train | step: %6d | steps/sec: %8.1f | ETA: %s | %s",
                         current, steps_per_second, _Lazy(_format_eta, eta),
                         _Lazy(_format_values, dict(output)))  # Snapshot: formatted later.
            output["steps_per_second"] = steps_per_second
            if pass_step:
                write_summaries(output, step=current)
            else:
                write_summaries(output)
            if self._checkpoint_due(current):
                self._save(current, check_interval=True)
        return output, current

    def evaluate(self, steps: int = -1) -> Output:
        """Runs one evaluation of `steps` steps (-1: until the evaluation data ends).

        Eval actions get the raw output; summaries go to the evaluation summary directory at
        the current global step. `steps_per_second` is added when `steps > 0`.

        Returns:
          The evaluation output as NumPy values (empty dict when the evaluator returns None).
        """
        self._require("evaluator", "evaluate")
        if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or not (
                steps > 0 or steps == -1):
            raise ValueError(f"evaluation steps ({steps!r}) must be a positive integer or -1 "
                             "(evaluate until the data ends).")
        steps = int(steps)
        current = self._read_step()
        if steps > 0:
            logging.info(" eval | step: %6d | running %d steps of evaluation...", current, steps)
        else:
            logging.info(" eval | step: %6d | running complete evaluation...", current)
        start = time.perf_counter()
        with _default_writer(self.eval_summary_manager, self.global_step):
            raw_output = self.evaluator.evaluate(self._steps_tensor(steps))
        elapsed = time.perf_counter() - start
        raw_output = raw_output if raw_output is not None else {}
        for action in self.eval_actions:
            action(raw_output)
        output = _to_values(raw_output)
        if steps > 0:
            output["steps_per_second"] = steps / elapsed if elapsed > 0 else float("inf")
        logging.info(" eval | step: %6d | eval time: %.1f sec | %s", current, elapsed,
                     _Lazy(_format_values, dict(output)))
        self.eval_summary_manager.write_summaries(output)
        self.eval_summary_manager.flush()
        if self.trainer is not None and self.summary_manager is not self.eval_summary_manager:
            self.summary_manager.flush()  # Training curves up to date at each evaluation.
        return output

    def train_and_evaluate(self, train_steps: int, eval_steps: int = -1,
                           eval_interval: Optional[int] = None) -> Optional[Output]:
        """Trains to `train_steps`, evaluating every `eval_interval` steps and at the end.

        As in Orbit, evaluations come every `eval_interval` steps counted from the global step
        at the call (a run resumed at step 7 with an interval of 6 evaluates at 13, 19, ...),
        a training loop being cut short where needed, and once more at `train_steps`. Without
        an interval (None or 0) it evaluates once, after training. When the global step is
        already at `train_steps` it does nothing. Then, as `train` does, it saves a checkpoint
        (when the manager has an interval) and waits for asynchronous saves.

        Returns:
          The last evaluation's output, or None when nothing was trained.
        """
        self._require("trainer", "train_and_evaluate")
        self._require("evaluator", "train_and_evaluate")
        if eval_interval is not None and eval_interval != 0:
            _check_positive_int("eval_interval", eval_interval)
        train_steps = int(train_steps)
        current = self._read_step()
        interval = int(eval_interval or max(train_steps - current, 1))
        output = None
        while current < train_steps:
            self.train(min(train_steps, current + interval), checkpoint_at_completion=False)
            output = self.evaluate(eval_steps)
            current = self._read_step()
        self._maybe_save(current)
        self.summary_manager.flush()
        self._sync_checkpoints()
        return output

    def evaluate_continuously(
        self,
        steps: int = -1,
        timeout: Optional[float] = None,
        timeout_fn: Optional[Callable[[], bool]] = None,
        stop_at_step: Optional[int] = None,
        evaluate_all: bool = False,
        poll_interval: float = 1.0,
        max_wait: Optional[float] = None,
    ) -> Optional[Output]:
        """Evaluates the checkpoints of `checkpoint_manager.directory` as they appear.

        Follows `tf.train.checkpoints_iterator`: first the latest existing checkpoint, then each
        new latest one, polling every `poll_interval` seconds. After `timeout` seconds without
        a new checkpoint it returns, unless `timeout_fn` is given and returns False (then it
        logs how long it has waited and for which step, and keeps waiting: a preempted trainer
        may come back); `timeout_fn` is also called after each evaluation and ends the loop
        when it returns True. `timeout=None` waits forever. `max_wait` bounds the wait.

        Args:
          steps: Evaluation steps per checkpoint (-1: until the data ends).
          timeout: Seconds to wait for a new checkpoint.
          timeout_fn: See above.
          stop_at_step: Return right after evaluating a checkpoint whose step is at least this.
          evaluate_all: Evaluate every checkpoint in step order, not only the newest, and
            record evaluated steps in `EVALUATED_CHECKPOINTS_FILE` in the evaluation summary
            directory, so a restarted evaluator skips them.
          poll_interval: Seconds between looks at the directory while waiting.
          max_wait: Return (logging why) after this many seconds without a new checkpoint,
            whatever `timeout_fn` says. None: no limit (as TFM).

        Each restore stands alone. A checkpoint deleted before it could be restored (pruned by
        the trainer's `max_to_keep`) is skipped and reported as pruned; one that fails to
        restore for another reason is retried once, then skipped with a warning naming it and
        its error.

        Returns:
          The output of the last evaluation, or None if nothing was evaluated.
        """
        self._require("evaluator", "evaluate_continuously")
        self._require("checkpoint_manager", "evaluate_continuously")
        directory = self.checkpoint_manager.directory
        record_path = None
        evaluated_steps: set = set()
        if evaluate_all:
            if self._eval_summary_dir:
                record_path = os.path.join(self._eval_summary_dir, EVALUATED_CHECKPOINTS_FILE)
                evaluated_steps = _read_evaluated_steps(record_path)
                if evaluated_steps:
                    logging.info("%d checkpoint steps already evaluated (recorded in %s): "
                                 "skipping them.", len(evaluated_steps), record_path)
            else:
                logging.warning("No evaluation summary directory: evaluated checkpoint steps are "
                                "not recorded and a restarted evaluator evaluates them again.")
        output = None
        for path in self._new_checkpoints(directory, timeout, timeout_fn, evaluate_all,
                                          evaluated_steps, poll_interval, max_wait,
                                          stop_at_step):
            if not _restore_for_evaluation(self.checkpoint_manager.checkpoint, self.strategy,
                                           path, retry_after=poll_interval):
                continue
            output = self.evaluate(steps)
            step = checkpoint_number(path)
            if step is None:
                step = self._read_step()
            if evaluate_all:
                evaluated_steps.add(step)
                if record_path is not None:
                    _write_evaluated_steps(record_path, evaluated_steps)
            if stop_at_step is not None and step >= stop_at_step:
                logging.info("Evaluated checkpoint at step %d >= stop_at_step %d: done.", step,
                             stop_at_step)
                break
            # Asked only after an evaluation: after a skipped checkpoint the restored state
            # (e.g. the global step timeout_fn reads) may belong to another checkpoint.
            if timeout_fn is not None and timeout_fn():
                logging.info("timeout_fn() is True: no more checkpoints expected.")
                break
        return output

    # ----------------------------------------------------------------------------------------
    # Checkpoints.

    def restore_checkpoint(self, checkpoint_path: Optional[str] = None) -> Optional[str]:
        """Restores `checkpoint_path`, or the latest checkpoint (init_fn when there is none).

        Returns:
          The path restored, or None when no checkpoint was restored.
        """
        self._require("checkpoint_manager", "restore_checkpoint")
        manager = self.checkpoint_manager
        with self.strategy.scope():  # Variables created on restore belong to the strategy.
            try:
                if checkpoint_path is not None:
                    manager.checkpoint.restore(checkpoint_path)
                else:
                    checkpoint_path = manager.restore_or_initialize()
            except ValueError as error:
                mismatch = _shape_mismatch(error, checkpoint_path or manager.latest_checkpoint)
                if mismatch is None:
                    raise
                raise mismatch from error
        if checkpoint_path is None:
            logging.info("No checkpoint in %s: starting from the initial values (init_fn of the "
                         "checkpoint manager called if it has one).", manager.directory)
            return None
        step = self._read_step()
        self._last_saved_step = step
        logging.info("Restored checkpoint %s (global step %d).", checkpoint_path, step)
        return checkpoint_path

    def _create_save_counter(self) -> None:
        """Creates the checkpoint's `save_counter` now, before any restore.

        Otherwise `tf.train.Checkpoint.restore` creates it after reading and fills it from the
        *oldest* restore queued for it: after a restore that failed part-way (a checkpoint
        pruned or broken while it was read), the next restore of another checkpoint would read
        the failed one's files again, and fail with its error (an evaluator then skipped an
        intact checkpoint, naming the previous one).
        """
        checkpoint = self.checkpoint_manager.checkpoint
        if isinstance(checkpoint, tf.train.Checkpoint):
            with self.strategy.scope():  # As a save or a restore would create it.
                checkpoint.save_counter  # pylint: disable=pointless-statement  (creates it)

    def save_checkpoint(self) -> Optional[str]:
        """Saves a checkpoint now, numbered by the global step (not waiting for async saves).

        Returns:
          The checkpoint path, or None when one was already saved at this step.
        """
        self._require("checkpoint_manager", "save_checkpoint")
        return self._save(self._read_step(), check_interval=False)

    @property
    def steps_per_loop(self) -> Optional[int]:
        """Steps of the next inner training loop (calls a callable `steps_per_loop`)."""
        if self._steps_per_loop is None:
            return None
        return self._loop_size(self._read_step())

    # ----------------------------------------------------------------------------------------
    # Internals.

    def _read_step(self) -> int:
        # `value()` is one read op; `numpy()` on the variable adds an identity op (a copy).
        return int(self.global_step.value().numpy())

    def _loop_size(self, current: int) -> int:
        size = self._steps_per_loop
        if callable(size):
            size = size(current)
            if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
                raise ValueError(f"steps_per_loop({current}) returned {size!r}: it must return a "
                                 "positive integer.")
        return int(size)

    def _steps_tensor(self, num_steps: int) -> tf.Tensor:
        # A cached int32 tensor: no host-to-tensor conversion per loop and no retracing.
        tensor = self._step_tensors.get(num_steps)
        if tensor is None:
            tensor = tf.constant(num_steps, tf.int32)
            if len(self._step_tensors) < _MAX_CACHED_STEP_TENSORS:
                self._step_tensors[num_steps] = tensor
        return tensor

    def _train_loop(self, num_steps: int, current: int):
        """Runs one inner loop; returns (output as NumPy values, global step after it)."""
        with _default_writer(self.summary_manager, self.global_step), \
                tf.summary.record_if(self._record_predicate):
            raw_output = self.trainer.train(self._steps_tensor(num_steps))
        step = self._read_step()
        if step <= current:
            # Not an off-by-some trainer but a stuck one: looping on would never end.
            raise RuntimeError(
                f"trainer.train({num_steps}) did not advance global_step (it stayed at "
                f"{current}, then {step}): the trainer must increment the controller's "
                "global_step once per step.")
        if step != current + num_steps:
            logging.warning(
                "trainer.train(%d) did not advance global_step by %d: it went from %d to %d "
                "(expected %d).", num_steps, num_steps, current, step, current + num_steps)
        raw_output = raw_output if raw_output is not None else {}
        if self.train_actions:
            for action in self.train_actions:
                action(raw_output)
            # An action may move the step (loss recovery restores a checkpoint): checkpoint
            # numbers and summaries must follow the restored step.
            step = self._read_step()
        return _to_values(raw_output), step

    def _checkpoint_due(self, current: int) -> bool:
        manager = self.checkpoint_manager
        if manager is None:
            return False
        interval = manager.checkpoint_interval
        if not interval:  # None or 0: Orbit's outer loop saves nothing.
            return False
        # The manager's own rule (saves when no checkpoint was saved or restored yet), read
        # here so that `save` is called only when it will write.
        last = getattr(manager, "_last_checkpoint_step", None)
        return last is None or (current != last and current >= last + interval)

    def _maybe_save(self, current: int) -> Optional[str]:
        """The checkpoint at the end of an outer loop: only with a manager with an interval."""
        manager = self.checkpoint_manager
        if manager is None or not manager.checkpoint_interval:
            return None
        return self._save(current, check_interval=False)

    def _save(self, current: int, check_interval: bool) -> Optional[str]:
        manager = self.checkpoint_manager
        if manager is None or current == self._last_saved_step:
            return None
        try:
            path = manager.save(checkpoint_number=current, check_interval=check_interval,
                                options=self._checkpoint_options)
        except (tf.errors.OpError, OSError) as error:
            detail = " ".join((getattr(error, "message", None) or str(error)).split())
            # No `ckpt-N_temp/` or `checkpoint.tmp<hex>` left behind by the failed write.
            try:
                checkpoint_recovery.remove_interrupted_writes(manager.directory)
            except (tf.errors.OpError, OSError) as cleanup_error:
                logging.warning("Could not remove the debris of the failed checkpoint write "
                                "in %s: %s", manager.directory, cleanup_error)
            raise CheckpointWriteError(
                f"Could not write the checkpoint of step {current} to {manager.directory}: "
                f"{detail}. Earlier checkpoints are intact (latest: "
                f"{manager.latest_checkpoint}); free space or fix permissions, then restart "
                f"to resume from it.") from error
        if path is not None:
            self._last_saved_step = current
            logging.info("Saved checkpoint %s.", path)
            if self.trainer is not None:
                self.summary_manager.flush()  # Summaries on disk up to the saved step.
        return path

    def _flush_train_summaries_quietly(self) -> None:
        """Flushes on the way out of a failed loop; a flush error must not hide the first one
        (e.g. a full disk: the CheckpointWriteError says which directory)."""
        try:
            self.summary_manager.flush()
        except Exception as error:  # pylint: disable=broad-except
            logging.warning("Could not write the last training summaries: %s: %s",
                            type(error).__name__, error)

    # Orbit's internal names: Controller subclasses ported from Orbit call them.
    def _maybe_save_checkpoint(self, check_interval: bool = True) -> bool:
        """Orbit's rule: saves only with a manager with an interval (and, if asked, when due)."""
        current = self._read_step()
        if check_interval and not self._checkpoint_due(current):
            return False
        return self._maybe_save(current) is not None

    def _sync_on_async_checkpointing(self) -> None:
        """Waits for asynchronous checkpoint saves (Orbit's name)."""
        self._sync_checkpoints()

    def _sync_checkpoints(self) -> None:
        if self.checkpoint_manager is not None and self._checkpoint_options is not None:
            self.checkpoint_manager.sync()

    def _require(self, attribute: str, method: str) -> None:
        if getattr(self, attribute) is None:
            raise ValueError(f"Controller.{method}() needs `{attribute}`: pass {attribute}= to "
                             "Controller(...).")

    def _new_checkpoints(self, directory: str, timeout, timeout_fn, evaluate_all: bool,
                         evaluated_steps: set, poll_interval: float, max_wait=None,
                         target_step=None) -> Iterator[str]:
        """Yields checkpoint paths to evaluate, as `tf.train.checkpoints_iterator` would."""
        tried = set()  # Paths already yielded (evaluated or skipped) in this call.
        newest_seen = None  # Number of the newest checkpoint yielded.
        while True:
            pending = _pending_checkpoints(directory, evaluate_all, tried, evaluated_steps)
            if not pending:
                logging.info("Waiting for a new checkpoint in %s (timeout %s)...", directory,
                             "none" if timeout is None else f"{timeout:g} s")
                wait_start = time.monotonic()
                next_timeout = None if timeout is None else wait_start + timeout
                while not pending:
                    now = time.monotonic()
                    waited = now - wait_start
                    if max_wait is not None and waited >= max_wait:
                        logging.warning(
                            "Stopping continuous evaluation: no new checkpoint in %s for %.0f s "
                            "(max_wait %g s, --continuous_eval_max_wait_s); newest step seen: "
                            "%s, target step: %s.", directory, waited, max_wait,
                            newest_seen, target_step)
                        return
                    if next_timeout is not None and now >= next_timeout:
                        if timeout_fn is None:
                            logging.info("No new checkpoint in %s after %g s: done.", directory,
                                         timeout)
                            return
                        if timeout_fn():
                            logging.info("timeout_fn() is True: no more checkpoints expected.")
                            return
                        # TFM's rule: below the target step, wait on (the trainer may resume).
                        logging.warning(
                            "No new checkpoint in %s for %.0f s; newest step seen: %s, target "
                            "step: %s. Still waiting: the trainer may resume (e.g. after a "
                            "preemption); --continuous_eval_max_wait_s sets a limit.",
                            directory, waited, newest_seen, target_step)
                        next_timeout = now + timeout
                    limits = [poll_interval]
                    if next_timeout is not None:
                        limits.append(next_timeout - now)
                    if max_wait is not None:
                        limits.append(wait_start + max_wait - now)
                    time.sleep(max(0.0, min(limits)))
                    pending = _pending_checkpoints(directory, evaluate_all, tried,
                                                   evaluated_steps)
            for path in pending:
                tried.add(path)
                number = checkpoint_number(path)
                if number is not None and (newest_seen is None or number > newest_seen):
                    newest_seen = number
                yield path


def _default_writer(summary_manager, step):
    """The manager's writer as the default one for summaries written inside the block.

    Ours stops its summaries (one warning) when the flush on leaving fails; another
    (Orbit-interface) manager's writer is used as is.
    """
    if isinstance(summary_manager, SummaryManager):
        return summary_manager.as_default(step=step)
    return summary_manager.summary_writer().as_default(step=step)


def _restore_for_evaluation(checkpoint, strategy, path: str, retry_after: float) -> bool:
    """Restores `path` for an evaluation; False (after a warning) when it cannot be restored.

    Each call stands alone: whether `path` was pruned is judged from `path`'s own files, and
    a failure other than pruning is retried once, so an earlier checkpoint's failure never
    decides this one's fate.
    """
    for attempt in (1, 2):
        if not tf.io.gfile.exists(path + ".index"):
            logging.warning("Skipping checkpoint %s: it was pruned (deleted by the trainer's "
                            "max_to_keep) before it could be evaluated.", path)
            return False
        try:
            with strategy.scope():
                logging.info("restoring model from %s...", path)
                checkpoint.restore(path).expect_partial()
            return True
        except ValueError as error:
            mismatch = _shape_mismatch(error, path)
            if mismatch is None:
                raise
            raise mismatch from error
        except _UNREADABLE_CHECKPOINT_ERRORS as error:
            reason = f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0]}"
            if not tf.io.gfile.exists(path + ".index"):
                logging.warning("Skipping checkpoint %s: it was pruned (deleted by the "
                                "trainer's max_to_keep) while it was being restored (%s).",
                                path, reason)
                return False
            if attempt == 1:
                logging.warning("Could not restore checkpoint %s (%s); retrying once.", path,
                                reason)
                time.sleep(retry_after)
            else:
                logging.warning("Skipping checkpoint %s: it could not be restored twice (%s).",
                                path, reason)
    return False


def _pending_checkpoints(directory: str, evaluate_all: bool, tried: set,
                         evaluated_steps: set) -> List[str]:
    """Checkpoints to evaluate next: the newest untried one, or all unevaluated in step order."""
    if not evaluate_all:
        latest = tf.train.latest_checkpoint(directory)
        return [latest] if latest is not None and latest not in tried else []
    state = tf.train.get_checkpoint_state(directory)
    if state is None:
        return []
    pending = []
    for path in state.all_model_checkpoint_paths:
        if path in tried:
            continue
        number = checkpoint_number(path)
        if number is not None and number in evaluated_steps:
            continue
        pending.append(path)
    # Unnumbered checkpoints keep the state file's (oldest first) order, after numbered ones.
    pending.sort(key=lambda p: (checkpoint_number(p) is None, checkpoint_number(p) or 0))
    return pending


def _read_evaluated_steps(path: str) -> set:
    if not tf.io.gfile.exists(path):
        return set()
    try:
        with tf.io.gfile.GFile(path, "r") as f:
            return {int(step) for step in json.load(f)["evaluated_steps"]}
    except (ValueError, KeyError, TypeError) as error:
        logging.warning("Ignoring unreadable record of evaluated checkpoints %s (%s): every "
                        "checkpoint will be evaluated.", path, error)
        return set()


def _write_evaluated_steps(path: str, steps: set) -> None:
    tf.io.gfile.makedirs(os.path.dirname(path))
    # Write then rename, so a killed evaluator never leaves a half-written record.
    atomic_write.write_text(path, json.dumps({"evaluated_steps": sorted(steps)}))
