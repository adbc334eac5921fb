"""The checkpoint lifecycle, in one place: where a process saves, how a checkpoint is written,
restored, watched for and recovered.

The Controller schedules (it decides *when* to save, restore and evaluate); this module does
the work and owns every policy about checkpoint files:

- **Where.** `worker_save_dir`: only the writer of a multi-worker job saves into the real
  directory; the others save into a throwaway one (every worker must take part in a save).
  `build_manager` makes the trainer's `CheckpointManager` for a model_dir accordingly.
- **Writing.** `save` (a manager's numbered save, when `save_due` says; a failed write
  becomes `CheckpointWriteError` and leaves no debris), `save_options` (asynchronous saves,
  Keras 3 variables made fit for them), `save_if_preempted`, `write` / `save_to` /
  `write_state` (a checkpoint outside a manager: the best checkpoint, an export's weights),
  `remove` (a checkpoint's files).
- **Restoring.** `restore` is the one function through which the runtime reads a checkpoint
  into objects (the managers built here, the Controller, the evaluator's watch, loss
  recovery): a shape mismatch becomes a one-line `ConfigError`. A reader of other checkpoint
  formats hooks in there. `read_weights` reads pretrained weights into parts of a model
  (`task.init_checkpoint`: a lite checkpoint, or a TFM-written one through `tfm_checkpoint`).
  `restore_for_evaluation` adds the evaluator's skip-and-retry policy,
  `unreadable_latest_tolerated` an evaluator's start beside a broken newest checkpoint.
- **Watching.** `new_checkpoints` yields the checkpoints a continuous evaluator should
  evaluate next, as `tf.train.checkpoints_iterator` does, with the waiting, timeout and
  skipping policy; `EvaluatedCheckpoints` is the record of steps already evaluated.
- **Recovering.** `prepare_model_dir` runs when the chief trainer starts in a model_dir whose
  newest checkpoint may be broken (see "Recovering" below); `unreadable_reason` probes one.

Only this module creates `tf.train.CheckpointManager`s, saves or writes checkpoints and
deletes checkpoint files (`tests/test_architecture.py` pins it). Every path operation goes
through `tf.io.gfile`, so this works on any file system TensorFlow supports (gs://, ...).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
import time
from typing import Callable, Container, Dict, Iterator, List, Optional, Tuple

import tensorflow as tf
from absl import logging

from lite_launcher.checkpointing import tfm_checkpoint
from lite_launcher.common import atomic_write
from lite_launcher.common import keras_adapter
from lite_launcher.common import tf_adapter
from lite_launcher.common.distribute_utils import should_write
from lite_launcher.common.errors import CheckpointWriteError, NoReadableCheckpointError
from lite_launcher.core.base_config import ConfigError

STATE_FILE = "checkpoint"
CORRUPT_SUBDIR = "corrupt"
# Name of the record of evaluated checkpoint steps kept by a continuous evaluator that
# evaluates every checkpoint, in its evaluation summary directory.
EVALUATED_CHECKPOINTS_FILE = "evaluated_checkpoints.json"

_CHECKPOINT_NUMBER = re.compile(r"-(\d+)$")
_CHECKPOINT_FILE = re.compile(r"^ckpt-(\d+)\.(index|data-\d+-of-\d+)$")

# What restoring a deleted or partly written checkpoint raises: NotFoundError, DataLossError,
# OutOfRangeError, ... (all OpError), and IndexError ("Read less bytes than requested") from the
# checkpoint reader on a truncated data file. Shape or structure mismatches (ValueError) are
# the user's mistake and still raise.
UNREADABLE_CHECKPOINT_ERRORS = (tf.errors.OpError, IndexError)

# How Keras 3 and TensorFlow word a restore into a variable of another shape.
_KERAS_SHAPE_MISMATCH = re.compile(
    r"variable\.shape=(\([^)]*\)), Received: value\.shape=(\([^)]*\))"
    r".*?<Variable path=([^,>\s]+)", re.DOTALL)
_TF_SHAPE_MISMATCH = re.compile(
    r"incompatible tensor with shape (\([^)]*\)) when attempting to restore variable with "
    r"shape (\([^)]*\)) and name (\S+?)\.?(?:\s|$)")


def checkpoint_number(path: str) -> Optional[int]:
    """The number a `CheckpointManager` put at the end of `path` (`.../ckpt-1200` -> 1200)."""
    match = _CHECKPOINT_NUMBER.search(os.path.basename(path))
    return int(match.group(1)) if match else None


# ---------------------------------------------------------------------------------------------
# Where a process saves, and its manager.
# ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def worker_save_dir(directory: str, strategy: Optional[tf.distribute.Strategy] = None):
    """Yields where this process saves for a write meant for `directory`.

    Every worker of a multi-worker strategy must take part in a save, but only the writer
    (`strategy.should_write`) saves into `directory`; the others get a private temporary
    directory, deleted when the block ends.
    """
    if should_write(strategy):
        yield directory
        return
    scratch = tempfile.mkdtemp(prefix="lite_launcher_worker_")
    try:
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


class CheckpointManager(tf.train.CheckpointManager):
    """A `tf.train.CheckpointManager` whose restore goes through `restore`.

    With `restore_directory` (a non-chief worker's manager) it saves into its own (throwaway)
    `directory` but restores the newest checkpoint of `restore_directory`: on a restart every
    worker must resume from the same (the chief's) checkpoint, or their steps and collective
    operations no longer line up.
    """

    def __init__(self, checkpoint, directory: str, *, restore_directory: Optional[str] = None,
                 **kwargs):
        super().__init__(checkpoint, directory, **kwargs)
        self._restore_directory = restore_directory

    def restore_or_initialize(self) -> Optional[str]:
        latest = (self.latest_checkpoint if self._restore_directory is None
                  else tf.train.latest_checkpoint(self._restore_directory))
        if latest is None:
            return super().restore_or_initialize()  # init_fn
        restore(self.checkpoint, latest)
        if self.checkpoint_interval is not None:
            # As the base class does after a restore, so that the next save is due
            # `checkpoint_interval` steps on (for every worker alike: a save is collective).
            tf_adapter.set_last_checkpoint_step(self, int(self._step_counter.numpy()))
        return latest


class TfmResumingCheckpointManager(CheckpointManager):
    """The manager of a model_dir whose latest checkpoint TFM wrote: `restore_or_initialize`
    maps it onto the checkpoint's `model`, `optimizer` and `global_step`
    (`tfm_checkpoint.resume`). TFM's checkpoint files are kept as they are: they are marked
    preserved in the `checkpoint` state file, so `max_to_keep` never deletes them, and lite's
    checkpoints are written beside them."""

    def __init__(self, checkpoint, directory, **kwargs):
        self._tfm_latest = preserve_tfm_checkpoints(directory)
        if self._tfm_latest and kwargs.get("checkpoint_interval") is not None:
            # The interval counts from TFM's last save, as after a lite checkpoint's restore.
            kwargs.setdefault("last_checkpoint_step",
                              tfm_checkpoint.tfm_global_step(self._tfm_latest))
        super().__init__(checkpoint, directory, **kwargs)

    def restore_or_initialize(self):
        latest = self.latest_checkpoint
        if latest is None or latest != self._tfm_latest:
            return super().restore_or_initialize()
        objects = self.checkpoint
        tfm_checkpoint.resume(latest, getattr(objects, "model"),
                              getattr(objects, "optimizer", None),
                              getattr(objects, "global_step", None))
        return latest


def build_manager(checkpoint, model_dir: str, save_directory: str, *, resume: bool,
                  max_to_keep: Optional[int], **kwargs) -> CheckpointManager:
    """The trainer's manager of `model_dir`, saving into `save_directory` (`worker_save_dir`).

    The writer's manager keeps `max_to_keep` checkpoints in model_dir; with `resume` (a
    training chief, holding the model_dir lock) `prepare_model_dir` runs first, so that it
    resumes from the newest checkpoint that reads. Another worker's manager keeps one
    throwaway checkpoint and restores the writer's. `kwargs` go to `tf.train.CheckpointManager`.
    """
    if save_directory == model_dir:
        if resume:
            prepare_model_dir(model_dir)
        # A model_dir TFM wrote resumes too (lite's checkpoints are written beside TFM's).
        return TfmResumingCheckpointManager(checkpoint, model_dir, max_to_keep=max_to_keep,
                                            **kwargs)
    return CheckpointManager(checkpoint, save_directory, restore_directory=model_dir,
                             max_to_keep=1, **kwargs)


def create_save_counter(checkpoint, strategy: Optional[tf.distribute.Strategy] = None) -> None:
    """Creates a `tf.train.Checkpoint`'s `save_counter` now, before any restore.

    Otherwise `tf.train.Checkpoint.restore` creates it after reading and fills it from the
    *oldest* restore queued for it: after a restore that failed part-way (a checkpoint pruned
    or broken while it was read), the next restore of another checkpoint would read the
    failed one's files again, and fail with its error (an evaluator then skipped an intact
    checkpoint, naming the previous one).
    """
    if isinstance(checkpoint, tf.train.Checkpoint):
        with (strategy or tf.distribute.get_strategy()).scope():  # As a save would create it.
            checkpoint.save_counter  # pylint: disable=pointless-statement  (creates it)


# ---------------------------------------------------------------------------------------------
# Writing.
# ---------------------------------------------------------------------------------------------


# Another task of a cluster in an op error's message: "/job:ps/replica:0/task:0" (a local
# error names "/job:localhost/...", which is not one).
_CLUSTER_TASK = re.compile(r"/job:(?:ps|worker|chief)/(?:replica:\d+/)?task:\d+")


def save(manager: tf.train.CheckpointManager, step: int, *, check_interval: bool = True,
         options: Optional[tf.train.CheckpointOptions] = None) -> Optional[str]:
    """`manager.save(checkpoint_number=step)`; returns the path (None: not due).

    Raises:
      CheckpointWriteError: the write failed (a full disk, no permission). What it left
        behind is removed; earlier checkpoints are intact. An op error naming a cluster task
        (the ps holding the variables died) is raised as it is, after the same clean-up.
    """
    try:
        return manager.save(checkpoint_number=step, check_interval=check_interval,
                            options=options)
    except (tf.errors.OpError, OSError) as error:
        detail = " ".join((getattr(error, "message", None) or str(error)).split())
        # No `ckpt-N_temp/` or `checkpoint.tmp<hex>` left behind by the failed write.
        try:
            remove_interrupted_writes(manager.directory)
        except (tf.errors.OpError, OSError) as cleanup_error:
            logging.warning("Could not remove the debris of the failed checkpoint write "
                            "in %s: %s", manager.directory, cleanup_error)
        if isinstance(error, tf.errors.OpError) and _CLUSTER_TASK.search(error.message or ""):
            # The variables' task (a killed ps) failed, not the storage: the driver's cluster
            # handling names the lost task (seen: a ps killed during a parameter-server save).
            raise
        raise CheckpointWriteError(
            f"Could not write the checkpoint of step {step} to {manager.directory}: "
            f"{detail}. Earlier checkpoints are intact (latest: "
            f"{manager.latest_checkpoint}); free space or fix permissions, then restart "
            f"to resume from it.") from error


def save_due(manager: tf.train.CheckpointManager, step: int) -> bool:
    """Whether `save(manager, step)` with `check_interval` will write (Orbit's outer-loop rule).

    Never without a (truthy) `checkpoint_interval`; else the manager's own rule: when nothing
    was saved or restored yet, or `checkpoint_interval` steps after the last one.
    """
    interval = manager.checkpoint_interval
    if not interval:  # None or 0: Orbit's outer loop saves nothing.
        return False
    last = tf_adapter.last_checkpoint_step(manager)  # the manager's own record
    return last is None or (step != last and step >= last + interval)


def save_if_preempted(handler, step) -> None:
    """Has a `tf.distribute.experimental.PreemptionCheckpointHandler` save if preempted.

    When any worker was preempted every worker saves at `step` (whatever the manager's
    `checkpoint_interval`: a save on demand) and the handler's `exit_fn` runs; else nothing.
    """
    handler.save_checkpoint_if_preempted(checkpoint_number=step, check_interval=False)


def write(checkpoint, file_prefix: str) -> str:
    """Writes `checkpoint` to `file_prefix` exactly (no number, no state file)."""
    return checkpoint.write(file_prefix)


def save_to(checkpoint, file_prefix: str) -> str:
    """Saves `checkpoint` as `file_prefix-<N>` with a state file (`tf.train.Checkpoint.save`)."""
    return checkpoint.save(file_prefix)


def checkpoint_files(prefix: str) -> List[str]:
    """The files of the checkpoint `prefix` (its .index and .data-* shards)."""
    return [p for p in tf.io.gfile.glob(prefix + ".*")
            if p == prefix + ".index" or p.startswith(prefix + ".data-")]


def remove(prefix: str) -> None:
    """Deletes the files of the checkpoint `prefix`."""
    for path in checkpoint_files(prefix):
        tf.io.gfile.remove(path)


def save_options(enable_async: bool) -> Optional[tf.train.CheckpointOptions]:
    """The options of `save`: asynchronous saves (Keras 3 variables made fit for them) or None."""
    if not enable_async:
        return None
    enable_async_saves()
    return tf.train.CheckpointOptions(enable_async=True)


def enable_async_saves() -> None:
    """Makes Keras 3 variables work with async checkpointing (idempotent; the private Keras
    part is `keras_adapter.enable_async_saves`)."""
    keras_adapter.enable_async_saves()


# ---------------------------------------------------------------------------------------------
# Restoring.
# ---------------------------------------------------------------------------------------------


def shape_mismatch(error: ValueError, checkpoint_path: Optional[str]) -> Optional[ConfigError]:
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


@contextlib.contextmanager
def shape_mismatch_as_config_error(checkpoint_path: Optional[str]):
    """Turns a shape mismatch raised inside the block into `shape_mismatch`'s ConfigError."""
    try:
        yield
    except ValueError as error:
        mismatch = shape_mismatch(error, checkpoint_path)
        if mismatch is None:
            raise
        raise mismatch from error


def restore(checkpoint, path: str, *, strategy: Optional[tf.distribute.Strategy] = None,
            expect_partial: bool = False):
    """Restores the checkpoint `path` into `checkpoint`; returns the load status.

    The one place lite reads a checkpoint into objects. Under `strategy.scope()` when one is
    given (variables a restore creates belong to it). `expect_partial`: objects of the
    checkpoint that `checkpoint` does not hold (e.g. an input iterator) are not warned about.

    Raises:
      ConfigError: a variable's shape in the checkpoint differs from the model's.
    """
    scope = strategy.scope() if strategy is not None else contextlib.nullcontext()
    with scope, shape_mismatch_as_config_error(path):
        status = checkpoint.restore(path)
    return status.expect_partial() if expect_partial else status


def resolve(path: str, what: str = "task.init_checkpoint") -> str:
    """A checkpoint prefix from a prefix or a directory (its latest checkpoint)."""
    if tf.io.gfile.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if not latest:
            raise ConfigError(f"{what} directory {path!r} holds no checkpoint.")
        return latest
    if not tf.io.gfile.exists(path + ".index"):
        raise ConfigError(f"{what} {path!r} does not exist: it is neither a checkpoint "
                          f"directory nor a checkpoint prefix.")
    return path


def read_weights(items: Dict[str, object], path: str, *, what: str = "task.init_checkpoint",
                 averages: bool = False) -> Tuple[str, bool]:
    """Reads the checkpoint `path` (a prefix, or a directory: its latest) into `items`, the
    parts of a model by the names the checkpoint keeps them under ({'model': model},
    {'backbone': ..., 'decoder': ...}), as TFM's tasks' `initialize`: other objects of the
    checkpoint (optimizer, global step) are ignored, and every variable of the parts must be
    found. A TFM-written checkpoint is mapped onto them by `tfm_checkpoint` (`averages`: its
    EMA averages for the trainable weights, where it holds them).

    Returns (the prefix read, whether it was TFM-written).

    Raises:
      ConfigError: no such checkpoint, or it does not fit the parts (one line, naming them).
      NoReadableCheckpointError: its files cannot be read (truncated, corrupt).
    """
    prefix = resolve(path, what)
    parts = ", ".join(sorted(items))
    if tfm_checkpoint.is_tfm_checkpoint(prefix):
        try:
            count = tfm_checkpoint.load_items(items, prefix, averages=averages)
        except ConfigError as e:
            raise ConfigError(f"{what} {prefix!r} (a TFM checkpoint) does not fit the model's "
                              f"{parts} weights: {e}") from e
        logging.info("Restored %s weights (%d variables) from the TFM checkpoint %s", parts,
                     count, prefix)
        return prefix, True
    try:
        tf.train.Checkpoint(**items).read(prefix).expect_partial() \
            .assert_existing_objects_matched()
    except (AssertionError, ValueError) as e:
        # Unmatched variables or a shape mismatch: the checkpoint is of another model.
        detail = " ".join(str(e).split())[:300]
        raise ConfigError(f"{what} {prefix!r} does not fit the model's {parts} weights: "
                          f"{detail}") from e
    except Exception as e:  # pylint: disable=broad-except
        # Truncated or corrupt files (TF raises OpErrors, IndexErrors, ...): as the checkpoint
        # recovery of a run, any other failure means it does not read (exit 1).
        text = str(getattr(e, "message", None) or e or type(e).__name__)
        raise NoReadableCheckpointError(f"{what} {prefix!r} cannot be read: "
                                        f"{text.splitlines()[0]}") from e
    logging.info("Restored %s weights from %s", parts, prefix)
    return prefix, False


def restore_or_initialize(manager: tf.train.CheckpointManager,
                          strategy: Optional[tf.distribute.Strategy] = None) -> Optional[str]:
    """`manager.restore_or_initialize()` under `strategy.scope()`, shape mismatches explained.

    Returns:
      The path restored, or None when there was none (the manager's `init_fn` was called).
    """
    with (strategy or tf.distribute.get_strategy()).scope(), \
            shape_mismatch_as_config_error(manager.latest_checkpoint):
        return manager.restore_or_initialize()


@contextlib.contextmanager
def unreadable_latest_tolerated(manager: tf.train.CheckpointManager, *, only_evaluates: bool):
    """Around the restore of the latest checkpoint when a controller starts.

    A trainer must not go on from a broken state (it would overwrite good checkpoints): the
    error raises. An evaluator restores each checkpoint it evaluates, so a broken latest one
    (being deleted or written) must not stop it from starting: a warning, and it goes on.
    """
    try:
        yield
    except UNREADABLE_CHECKPOINT_ERRORS as error:
        if not only_evaluates:
            raise
        logging.warning("Could not restore the latest checkpoint in %s (%s); continuing, as "
                        "this controller only evaluates.", manager.directory,
                        _first_error_line(error))


def _first_error_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0]}"


def restore_for_evaluation(checkpoint, path: str, *, strategy=None,
                           retry_after: float = 1.0) -> bool:
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
            logging.info("restoring model from %s...", path)
            restore(checkpoint, path, strategy=strategy, expect_partial=True)
            return True
        except UNREADABLE_CHECKPOINT_ERRORS as error:
            reason = _first_error_line(error)
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


# ---------------------------------------------------------------------------------------------
# Watching a training job's directory (continuous evaluation).
# ---------------------------------------------------------------------------------------------


class EvaluatedCheckpoints:
    """The steps of the checkpoints already evaluated, kept in `EVALUATED_CHECKPOINTS_FILE`.

    A restarted evaluator reads it and skips those steps. Without a directory the record is
    kept in memory only (a warning says so).
    """

    def __init__(self, directory: Optional[str]):
        self.path = os.path.join(directory, EVALUATED_CHECKPOINTS_FILE) if directory else None
        self.steps = set()
        if self.path is None:
            logging.warning("No evaluation summary directory: evaluated checkpoint steps are "
                            "not recorded and a restarted evaluator evaluates them again.")
        elif tf.io.gfile.exists(self.path):
            self.steps = self._read()
            if self.steps:
                logging.info("%d checkpoint steps already evaluated (recorded in %s): "
                             "skipping them.", len(self.steps), self.path)

    def _read(self) -> set:
        try:
            with tf.io.gfile.GFile(self.path, "r") as f:
                return {int(step) for step in json.load(f)["evaluated_steps"]}
        except (ValueError, KeyError, TypeError) as error:
            logging.warning("Ignoring unreadable record of evaluated checkpoints %s (%s): every "
                            "checkpoint will be evaluated.", self.path, error)
            return set()

    def __contains__(self, step) -> bool:
        return step in self.steps

    def add(self, step: int) -> None:
        """Records `step` (on disk at once: an evaluator may be killed any time)."""
        self.steps.add(step)
        if self.path is not None:
            tf.io.gfile.makedirs(os.path.dirname(self.path))
            # Write then rename, so a killed evaluator never leaves a half-written record.
            atomic_write.write_text(self.path,
                                    json.dumps({"evaluated_steps": sorted(self.steps)}))


def _pending_checkpoints(directory: str, every_checkpoint: bool, tried: set,
                         evaluated: Container[int]) -> List[str]:
    """Checkpoints to evaluate next: the newest untried one, or all unevaluated in step order."""
    if not every_checkpoint:
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
        if number is not None and number in evaluated:
            continue
        pending.append(path)
    # Unnumbered checkpoints keep the state file's (oldest first) order, after numbered ones.
    pending.sort(key=lambda p: (checkpoint_number(p) is None, checkpoint_number(p) or 0))
    return pending


def new_checkpoints(directory: str, *, timeout: Optional[float] = None,
                    timeout_fn: Optional[Callable[[], bool]] = None,
                    evaluated: Optional[Container[int]] = None, poll_interval: float = 1.0,
                    max_wait: Optional[float] = None,
                    target_step: Optional[int] = None) -> Iterator[str]:
    """Yields the checkpoints of `directory` to evaluate, as `tf.train.checkpoints_iterator`.

    Without `evaluated`: first the latest existing checkpoint, then each new latest one.
    With `evaluated` (the steps already evaluated, e.g. an `EvaluatedCheckpoints`): every
    checkpoint of the state file in step order, skipping those steps. Each path is yielded
    once per call.

    While nothing is new it polls every `poll_interval` seconds. After `timeout` seconds
    (None: never) it stops, unless `timeout_fn` is given and returns False: then it logs how
    long it has waited, the newest step seen and `target_step`, and waits on (TFM's rule: a
    preempted trainer may resume); `timeout_fn()` True stops it. `max_wait` seconds without a
    new checkpoint stop it whatever `timeout_fn` says (None: no limit, as TFM).
    """
    every_checkpoint = evaluated is not None
    evaluated = evaluated if evaluated is not None else ()
    tried = set()  # Paths already yielded (evaluated or skipped) in this call.
    newest_seen = None  # Number of the newest checkpoint yielded.
    while True:
        pending = _pending_checkpoints(directory, every_checkpoint, tried, evaluated)
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
                pending = _pending_checkpoints(directory, every_checkpoint, tried, evaluated)
        for path in pending:
            tried.add(path)
            number = checkpoint_number(path)
            if number is not None and (newest_seen is None or number > newest_seen):
                newest_seen = number
            yield path


# ---------------------------------------------------------------------------------------------
# Recovering: a trainer's start in a model_dir whose newest checkpoint may be broken.
#
# A checkpoint write can be cut short (kill -9, a full disk), a file truncated or flipped on
# storage, the `checkpoint` state file left empty. `prepare_model_dir` runs once when the chief
# trainer starts, holding the model_dir lock, before its manager reads the directory:
#
# - removes `ckpt-<N>_temp/` folders and `checkpoint.tmp*` files left by an interrupted
#   checkpoint write (`remove_interrupted_writes`; `save` also calls it when a write fails,
#   so an exit on a full disk leaves none);
# - reads the checkpoints on disk, newest first, every tensor (so a truncated data file, a
#   missing index or a checksum mismatch shows), until one reads: that is the one to resume;
# - moves each newer checkpoint that does not read into `model_dir/corrupt/<time>/` (never
#   deleting it), with one warning naming each and why. Moving them is needed: training resumes
#   at an older step and would write new checkpoints with those numbers over them. A probe that
#   cannot decide (the file system failed to answer, not the checkpoint to read) moves nothing:
#   training resumes from that checkpoint and its restore decides;
# - rewrites the `checkpoint` state file when it is unreadable (the bad one is moved aside too)
#   or does not name the checkpoint to resume (e.g. a newer complete checkpoint whose state-file
#   update failed), so the manager continues from the newest checkpoint that reads.
#
# When checkpoints exist and none reads, `NoReadableCheckpointError` (the driver exits 1 with
# one line naming model_dir and the files tried) and nothing is moved.
# ---------------------------------------------------------------------------------------------


def _first_line(error: BaseException, limit: int = 200) -> str:
    text = (getattr(error, "message", None) or str(error)).strip()
    # TF's eager-op decorations say nothing about the file.
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*|\s*\[Op:\w+\]", "", text)
    line = text.splitlines()[0] if text else ""
    line = f"{type(error).__name__}: {line}"
    return line if len(line) <= limit else line[:limit - 3] + "..."


# Errors that tell nothing about a checkpoint's bytes: the file system could not answer (an
# operation it does not implement, a network hiccup, a timeout, no permission). A probe that
# fails with one of them cannot decide, and must not move a checkpoint that may well be good.
_UNDECIDED_ERRORS = (tf.errors.UnimplementedError, tf.errors.UnavailableError,
                     tf.errors.DeadlineExceededError, tf.errors.AbortedError,
                     tf.errors.CancelledError, tf.errors.PermissionDeniedError,
                     tf.errors.ResourceExhaustedError)


def _probe(prefix: str) -> Tuple[Optional[str], bool]:
    """(why `prefix` does not read or None, whether the probe could decide)."""
    if not tf.io.gfile.exists(prefix + ".index"):
        return "its .index file is missing", True
    try:
        # The reader of the prefix itself: `tf.train.load_checkpoint` first asks whether the
        # prefix is a directory, which some file systems (ram://) answer yes for a prefix of
        # file names, and then looks for a `checkpoint` file in it.
        reader = tf.compat.v1.train.NewCheckpointReader(prefix)
        dtypes = reader.get_variable_to_dtype_map()
        if not dtypes:
            return "it holds no tensors", True
        with tf.device("CPU:0"):
            for name, dtype in dtypes.items():
                # RestoreV2 reads any dtype, variants (input iterator states) included.
                tf.raw_ops.RestoreV2(prefix=prefix, tensor_names=[name],
                                     shape_and_slices=[""], dtypes=[dtype])
    except _UNDECIDED_ERRORS as error:
        return _first_line(error), False
    except (tf.errors.OpError, IndexError) as error:  # IndexError: a truncated data file
        return _first_line(error), True
    except Exception as error:  # pylint: disable=broad-except  (the probe's own limits)
        return _first_line(error), False
    return None, True


def unreadable_reason(prefix: str) -> Optional[str]:
    """Why the checkpoint `prefix` cannot be restored, or None when every tensor reads.

    Reads each tensor once (checksums included), one at a time to bound memory. None also
    when the probe cannot decide (the file system, not the checkpoint, failed to answer).
    """
    reason, decided = _probe(prefix)
    return reason if decided else None


def _checkpoints_on_disk(model_dir: str) -> Dict[int, List[str]]:
    """{number: [file paths]} of the `ckpt-N.*` files in model_dir."""
    files: Dict[int, List[str]] = {}
    for name in tf.io.gfile.listdir(model_dir):
        match = _CHECKPOINT_FILE.match(name)
        if match:
            files.setdefault(int(match.group(1)), []).append(os.path.join(model_dir, name))
    return files


def _read_state(model_dir: str) -> Tuple[Optional[object], Optional[str]]:
    """(CheckpointState or None, why it is unreadable or None)."""
    path = os.path.join(model_dir, STATE_FILE)
    if not tf.io.gfile.exists(path):
        return None, None
    try:
        with tf.io.gfile.GFile(path, "r") as f:
            text = f.read()
        if not text.strip():
            return None, "it is empty"
        # Returns None (after logging) for text that does not parse.
        state = tf.compat.v1.train.get_checkpoint_state(model_dir)
    except Exception as error:  # pylint: disable=broad-except
        return None, _first_line(error)
    if state is None or not state.model_checkpoint_path:
        return None, "it does not parse as a checkpoint state"
    return state, None


def remove_interrupted_writes(directory: str) -> None:
    """Deletes what a checkpoint write cut short leaves in `directory`.

    TF writes a checkpoint's shards into `ckpt-<N>_temp/` before moving them into place, and
    the state file as `checkpoint.tmp<hex>` before renaming it; a write that is killed or
    fails (a full disk) leaves them behind for good. Only the chief trainer of a model_dir
    writes checkpoints (it holds the lock), so when it starts, or when its own write has
    just failed (`save`), any such file is debris.
    """
    for leftover in tf.io.gfile.glob(os.path.join(directory, "ckpt-*_temp")):
        if tf.io.gfile.isdir(leftover):
            logging.warning("Removing %s, left by an interrupted checkpoint write.", leftover)
            tf.io.gfile.rmtree(leftover)
    for leftover in tf.io.gfile.glob(os.path.join(directory, STATE_FILE + ".tmp*")):
        logging.warning("Removing %s, left by an interrupted write of the checkpoint state "
                        "file.", leftover)
        tf.io.gfile.remove(leftover)


def _new_incident_dir(model_dir: str) -> str:
    """A new `model_dir/corrupt/<UTC time>-pid<pid>[-n]` path: one per start that moves files."""
    base = os.path.join(model_dir, CORRUPT_SUBDIR,
                        time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f"-pid{os.getpid()}")
    path, suffix = base, 1
    while tf.io.gfile.exists(path):
        suffix += 1
        path = f"{base}-{suffix}"
    return path


def _move_aside(paths: List[str], destination: str) -> None:
    tf.io.gfile.makedirs(destination)
    for path in paths:
        tf.io.gfile.rename(path, os.path.join(destination, os.path.basename(path)))


def write_state(directory: str, latest: str, kept: List[str],
                timestamps: Tuple[float, ...] = (),
                last_preserved_timestamp: Optional[float] = None) -> None:
    """Writes `directory`'s `checkpoint` state file as a CheckpointManager would.

    A text proto naming the `latest` checkpoint and the `kept` ones (names relative to
    `directory`, oldest first), written then renamed: `tf.train.latest_checkpoint` finds
    `latest`, and a crash never leaves half a file.
    """
    lines = [f'model_checkpoint_path: "{latest}"']
    lines += [f'all_model_checkpoint_paths: "{name}"' for name in kept]
    lines += [f"all_model_checkpoint_timestamps: {t!r}" for t in timestamps]
    if last_preserved_timestamp is not None:
        # CheckpointManager never deletes the checkpoints saved before this time.
        lines.append(f"last_preserved_timestamp: {last_preserved_timestamp!r}")
    atomic_write.write_text(os.path.join(directory, STATE_FILE), "\n".join(lines) + "\n")


def preserve_tfm_checkpoints(directory: str) -> Optional[str]:
    """The latest checkpoint of `directory` when TFM wrote it, after marking every checkpoint
    the state file lists as preserved (older than `last_preserved_timestamp`); else None."""
    state = tf.train.get_checkpoint_state(directory)
    if state is None or not state.model_checkpoint_path:
        return None
    latest = state.model_checkpoint_path
    if not os.path.isabs(latest) and "://" not in latest:
        latest = os.path.join(directory, latest)
    if not tf.io.gfile.exists(latest + ".index"):
        return None
    try:
        written_by_tfm = tfm_checkpoint.is_tfm_checkpoint(latest)
    except (ValueError, IndexError, tf.errors.OpError):
        # Unreadable here (truncated, or a file system TensorFlow's C++ reader cannot open):
        # the manager's own restore decides, with its recovery of broken checkpoints.
        return None
    if not written_by_tfm:
        return None
    timestamps = list(state.all_model_checkpoint_timestamps)
    newest = max(timestamps + [state.last_preserved_timestamp])
    if newest > state.last_preserved_timestamp:
        write_state(directory, state.model_checkpoint_path,
                                list(state.all_model_checkpoint_paths), tuple(timestamps),
                                last_preserved_timestamp=newest)
    return latest


def prepare_model_dir(model_dir: str) -> Optional[str]:
    """Makes the newest readable checkpoint of `model_dir` the one its manager resumes from.

    Call with the model_dir lock held, before building the trainer's CheckpointManager.

    Returns:
      The checkpoint prefix to resume from, or None when model_dir has no checkpoint.

    Raises:
      NoReadableCheckpointError: checkpoints exist and none reads.
    """
    if not tf.io.gfile.isdir(model_dir):
        return None
    remove_interrupted_writes(model_dir)
    on_disk = _checkpoints_on_disk(model_dir)
    state, state_problem = _read_state(model_dir)
    listed = {}
    if state is not None:
        for path in list(state.all_model_checkpoint_paths) + [state.model_checkpoint_path]:
            match = re.search(r"ckpt-(\d+)$", path)
            if match:
                listed[int(match.group(1))] = path
    numbers = sorted(set(on_disk) | set(listed), reverse=True)
    if not numbers:
        if state_problem:
            logging.warning("Checkpoint state file %s is unreadable (%s) and model_dir has no "
                            "checkpoint: starting from scratch.",
                            os.path.join(model_dir, STATE_FILE), state_problem)
        return None

    skipped: List[Tuple[int, str]] = []
    resume = None
    for number in numbers:
        prefix = os.path.join(model_dir, f"ckpt-{number}")
        reason, decided = (_probe(prefix) if number in on_disk
                           else ("listed in the checkpoint state file but missing on disk", True))
        if not decided:
            logging.warning("Cannot tell whether checkpoint %s reads (%s): resuming from it; "
                            "its restore decides.", prefix, reason)
        if reason is None or not decided:
            resume = number
            break
        skipped.append((number, reason))
    if resume is None:
        tried = "; ".join(f"ckpt-{n} ({why})" for n, why in skipped)
        raise NoReadableCheckpointError(
            f"No checkpoint in model_dir {model_dir} can be restored; tried {tried}. "
            f"Restore the files from a backup, or start in a new model_dir.")

    resume_prefix = os.path.join(model_dir, f"ckpt-{resume}")
    moved_to = None
    if skipped or state_problem:
        moved_to = _new_incident_dir(model_dir)
    if skipped:
        _move_aside([path for number, _ in skipped for path in on_disk.get(number, [])],
                    moved_to)
        logging.warning(
            "Skipping %d newer checkpoint(s) of %s that cannot be restored: %s. Resuming from "
            "ckpt-%d, the newest that reads; the skipped files were moved to %s (kept, out of "
            "the way of the new checkpoints).", len(skipped), model_dir,
            "; ".join(f"ckpt-{n}: {why}" for n, why in skipped), resume, moved_to)

    state_latest = (re.search(r"ckpt-(\d+)$", state.model_checkpoint_path)
                    if state is not None else None)
    if state_problem is None and state_latest and int(state_latest.group(1)) == resume:
        return resume_prefix
    if state_problem is not None:
        _move_aside([os.path.join(model_dir, STATE_FILE)], moved_to)
    # The manager's list: what remains on disk up to the resumed checkpoint, oldest first.
    kept = sorted(n for n in on_disk if n <= resume
                  and tf.io.gfile.exists(os.path.join(model_dir, f"ckpt-{n}.index")))
    if state is not None and state_problem is None:
        kept = [n for n in kept if n in listed or n == resume]
    timestamps = [tf.io.gfile.stat(os.path.join(model_dir, f"ckpt-{n}.index")).mtime_nsec / 1e9
                  for n in kept]  # The manager's keep_checkpoint_every_n_hours reads them.
    write_state(model_dir, f"ckpt-{resume}", [f"ckpt-{n}" for n in kept], timestamps)
    if state_problem is not None:
        logging.warning("Checkpoint state file %s was unreadable (%s): rebuilt it from the "
                        "checkpoints on disk (latest: ckpt-%d); the old file was moved to %s.",
                        os.path.join(model_dir, STATE_FILE), state_problem, resume, moved_to)
    else:
        logging.warning("The checkpoint state file of %s named ckpt-%s; it now names ckpt-%d, "
                        "the newest checkpoint that reads.", model_dir,
                        state_latest.group(1) if state_latest else "?", resume)
    return resume_prefix
