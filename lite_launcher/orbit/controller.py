"""The outer loop: when to train, evaluate, checkpoint and write summaries (Orbit's Controller).

The Controller knows two duck-typed interfaces and nothing else:

- a trainer: `trainer.train(num_steps) -> Optional[dict]` runs `num_steps` training steps
  (the inner loop) and advances the global step by `num_steps`. Optionally it also has
  `global_step` (the Controller's variable) and `last_train_step`, the int value of that
  variable its last `train` call ended at, or None: read inside the loop's own graph call, it
  spares the Controller a host read of the variable after each inner loop;
- an evaluator: `evaluator.evaluate(num_steps) -> Optional[dict]` runs one evaluation of
  `num_steps` steps, or until the data ends when `num_steps == -1`.

`num_steps` is always passed as a scalar `tf.int32` tensor so that a `tf.function` inner loop
traces once. Returned dicts map names to scalars (Python numbers, NumPy values, tensors) or to
nested dicts (written as summary sub-directories).

Between inner loops the Controller calls the actions, logs one line, writes the loop's output
(and `steps_per_second`) to the training summaries and saves a checkpoint when the checkpoint
manager's `checkpoint_interval` is due, as Orbit does (a manager without a truthy interval
saves nothing); how is `lite_launcher.checkpointing.checkpoints`' business. Per-loop host work
is small: a global-step read (none when the trainer reports `last_train_step`; one more after
train actions, which may move the step), summaries queued for one compiled write (see
`summaries`), one writer entry per call, flushes at checkpoints, evaluations and a call's end,
nothing formatted unless logged.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Iterable, Optional, Union

import numpy as np
import tensorflow as tf
from absl import logging

from lite_launcher.checkpointing import checkpoints
from lite_launcher.common.errors import CheckpointWriteError  # noqa: F401  (re-exported)
from lite_launcher.orbit.summaries import (Lazy, StepTimer, SummaryManager, default_writer,
                                     flush_quietly, format_eta, format_values, scalar,
                                     to_values)

Output = Dict[str, Any]
Action = Callable[[Output], None]

_MAX_CACHED_STEP_TENSORS = 64


def _is_positive_int(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, np.integer)) and value >= 1


def _check_positive_int(name: str, value) -> None:
    if not _is_positive_int(value):
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
            if not callable(steps_per_loop) and not _is_positive_int(steps_per_loop):
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
        self._checkpoint_options = checkpoints.save_options(enable_async_checkpointing)
        self._last_saved_step: Optional[int] = None

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
            checkpoints.create_save_counter(checkpoint_manager.checkpoint, self.strategy)
            with checkpoints.unreadable_latest_tolerated(checkpoint_manager,
                                                         only_evaluates=trainer is None):
                self.restore_checkpoint()

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
            flush_quietly(self.summary_manager)
            raise
        self.summary_manager.flush()
        self._sync_checkpoints()
        return output

    def _train_to(self, steps: int, current: int):
        """The loops of `train`: (last output or None, global step)."""
        output = None
        timer = StepTimer(self.global_step, current)
        write_summaries = self.summary_manager.write_summaries
        # Our manager takes the step the loop already read (Orbit's interface has no `step`).
        pass_step = isinstance(self.summary_manager, SummaryManager)
        with default_writer(self.summary_manager, self.global_step):
            while current < steps:
                num_steps = min(self._loop_size(current), steps - current)
                output, current = self._train_loop(num_steps, current)
                steps_per_second = timer.steps_per_second(current)
                eta = timer.eta(current, steps, steps_per_second)
                logging.info("train | step: %6d | steps/sec: %8.1f | ETA: %s | %s",
                             current, steps_per_second, Lazy(format_eta, eta),
                             Lazy(format_values, dict(output)))  # Snapshot: formatted later.
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
        with default_writer(self.eval_summary_manager, self.global_step):
            raw_output = self.evaluator.evaluate(self._steps_tensor(steps))
        elapsed = time.perf_counter() - start
        raw_output = raw_output if raw_output is not None else {}
        for action in self.eval_actions:
            action(raw_output)
        output = to_values(raw_output)
        if steps > 0:
            output["steps_per_second"] = steps / elapsed if elapsed > 0 else float("inf")
        logging.info(" eval | step: %6d | eval time: %.1f sec | %s", current, elapsed,
                     Lazy(format_values, dict(output)))
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

        A loop over `checkpoints.new_checkpoints` (as Orbit's over `checkpoints_iterator`):
        first the latest existing checkpoint, then each new one; the waiting, the timeouts and
        the skipping are its policy (see there). Each checkpoint is restored by
        `checkpoints.restore_for_evaluation` (a pruned one is skipped, another failure retried
        once, then skipped with a warning), then evaluated.

        Args:
          steps: Evaluation steps per checkpoint (-1: until the data ends).
          timeout: Seconds to wait for a new checkpoint (None: forever).
          timeout_fn: Called when `timeout` passes (True: stop; False: wait on, as TFM: a
            preempted trainer may resume) and after each evaluation (True: stop).
          stop_at_step: Return right after evaluating a checkpoint whose step is at least this.
          evaluate_all: Evaluate every checkpoint in step order, not only the newest, and
            record evaluated steps in the evaluation summary directory
            (`checkpoints.EVALUATED_CHECKPOINTS_FILE`), so a restarted evaluator skips them.
          poll_interval: Seconds between looks at the directory while waiting.
          max_wait: Return (logging why) after this many seconds without a new checkpoint,
            whatever `timeout_fn` says. None: no limit (as TFM).

        Returns:
          The output of the last evaluation, or None if nothing was evaluated.
        """
        self._require("evaluator", "evaluate_continuously")
        self._require("checkpoint_manager", "evaluate_continuously")
        evaluated = (checkpoints.EvaluatedCheckpoints(self._eval_summary_dir)
                     if evaluate_all else None)
        output = None
        for path in checkpoints.new_checkpoints(
                self.checkpoint_manager.directory, timeout=timeout, timeout_fn=timeout_fn,
                evaluated=evaluated, poll_interval=poll_interval, max_wait=max_wait,
                target_step=stop_at_step):
            if not checkpoints.restore_for_evaluation(self.checkpoint_manager.checkpoint, path,
                                                      strategy=self.strategy,
                                                      retry_after=poll_interval):
                continue
            output = self.evaluate(steps)
            step = checkpoints.checkpoint_number(path)
            if step is None:
                step = self._read_step()
            if evaluated is not None:
                evaluated.add(step)
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
        # Under the strategy's scope: variables created on restore belong to it.
        if checkpoint_path is not None:
            checkpoints.restore(manager.checkpoint, checkpoint_path, strategy=self.strategy)
        else:
            checkpoint_path = checkpoints.restore_or_initialize(manager, self.strategy)
        if checkpoint_path is None:
            logging.info("No checkpoint in %s: starting from the initial values (init_fn of the "
                         "checkpoint manager called if it has one).", manager.directory)
            return None
        step = self._read_step()
        self._last_saved_step = step
        logging.info("Restored checkpoint %s (global step %d).", checkpoint_path, step)
        return checkpoint_path

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

    def _step_after_train(self) -> int:
        # The step a trainer read in its own graph call (the module docstring), when it
        # reads this controller's step variable; else one host read.
        trainer = self.trainer
        reported = getattr(trainer, "last_train_step", None)
        if reported is None or getattr(trainer, "global_step", None) is not self.global_step:
            return self._read_step()
        return int(reported)

    def _loop_size(self, current: int) -> int:
        size = self._steps_per_loop
        if callable(size):
            size = size(current)
            if not _is_positive_int(size):
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
        # Only the loop records under the interval's predicate (actions record as outside).
        with tf.summary.record_if(self._record_predicate):
            raw_output = self.trainer.train(self._steps_tensor(num_steps))
        step = self._step_after_train()
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
        return to_values(raw_output), step

    def _checkpoint_due(self, current: int) -> bool:
        manager = self.checkpoint_manager
        return manager is not None and checkpoints.save_due(manager, current)

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
        path = checkpoints.save(manager, current, check_interval=check_interval,
                                options=self._checkpoint_options)
        if path is not None:
            self._last_saved_step = current
            logging.info("Saved checkpoint %s.", path)
            if self.trainer is not None:
                self.summary_manager.flush()  # Summaries on disk up to the saved step.
        return path

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
