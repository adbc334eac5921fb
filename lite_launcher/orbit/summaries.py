"""TensorBoard summary writing for the Controller: one lazily created writer per directory.

`SummaryManager(summary_dir)` writes a (possibly nested) dict of scalars with
`write_summaries`; a nested dict goes to a sub-directory named by its key, so that TensorBoard
shows one curve per sub-directory (e.g. one per evaluation dataset). With `summary_dir=None`
every write is a no-op and `summary_writer()` is a no-op writer.

Writers, and so directories on disk, are created on first use only: a training process that
never evaluates does not create the evaluation directory.

`scalar` writes a TensorBoard scalar without the `tensorboard` package, which TensorFlow 2.21
no longer installs (`tf.summary.scalar` then raises `TBNotInstalledError`). Trainers can call
it inside their steps (also in a `tf.function`) instead of `tf.summary.scalar`.

Cost: the Controller writes the training outputs after every inner loop, as Orbit does. An
eager `scalar` costs several eager ops per value and a `writer.as_default()` block one more to
flush: ~1 ms for a loop's outputs on a small CPU, more than a whole short loop; even one
compiled graph call per loop costs about as much as the loop's own. So a dict of real scalars
written with the default `scalar` is queued (its values and step, a few microseconds), and the
queue is written by one compiled graph call (traced once per set of names) when `flush()` is
called, when `FLUSH_SECONDS` have passed since the last write, or at `MAX_PENDING` rows. The
events hold the same tags, steps and values as eager `scalar` writes (one event per row: a
`Summary` of its values, which TensorBoard reads as it reads one value per event); their wall
time is that of the batch write, at most `FLUSH_SECONDS` late. The Controller flushes at
checkpoints, evaluations and the end of each train call (also when it raises).

A summary directory that cannot be written (a full disk, a file-size limit, no permission, a
store that fails) does not end the run: the first failed write or flush logs one warning
naming the directory and the error, and the manager writes nothing more (`enabled` turns
False, `summary_writer()` gives the no-op writer). Summaries are a record of the run, not its
state: checkpoints, which a restart needs, are written (or fail loudly) as before.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import tensorflow as tf
from absl import logging

from tensorflow.core.framework import summary_pb2

from lite_launcher.common import tf_adapter

SummaryFn = Callable[..., Any]

# What TensorBoard's scalar plugin expects: a float32 scalar tagged with plugin "scalars"
# (its plugin data, version 0, serializes to empty content).
_SCALAR_METADATA = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))

# Queued rows are written at least this often (seconds) and in batches of at most MAX_PENDING.
FLUSH_SECONDS = 1.0
MAX_PENDING = 1000
# Compiled writers kept per manager (one per set of written names): outputs whose names change
# at every call would otherwise trace forever; beyond this they are written eagerly.
_MAX_COMPILED_WRITERS = 16
# What a file system that cannot take more raises from a summary write or flush: ENOSPC
# (ResourceExhausted), EFBIG (OutOfRange), EACCES, a file where a directory should be
# (FailedPrecondition), a vanished directory, a failing remote store. A malformed value
# (InvalidArgument) is the caller's mistake and still raises.
WRITE_ERRORS = (tf.errors.ResourceExhaustedError, tf.errors.OutOfRangeError,
                tf.errors.PermissionDeniedError, tf.errors.FailedPreconditionError,
                tf.errors.NotFoundError,
                tf.errors.DataLossError, tf.errors.UnavailableError,
                tf.errors.DeadlineExceededError, tf.errors.AbortedError, tf.errors.UnknownError,
                OSError)


# TensorBoard's image plugin: the tensor is [width, height, png, png, ...] (plugin data
# version 0 serialises to empty content).
_IMAGE_METADATA = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="images"))


def image(name: str, data, step=None, max_outputs: int = 3):
    """Writes a batch of images `[k, h, w, c]` (c: 1, 3 or 4; floats in [0, 1] or uint8) as a
    TensorBoard image summary, the record of `tf.summary.image`, without `tensorboard`.

    Returns:
      A boolean (tensor): True if written.
    """
    with tf.summary.experimental.summary_scope(name, "image_summary",
                                               values=[data, max_outputs, step]) as (tag, _):
        images = tf.image.convert_image_dtype(tf.convert_to_tensor(data), tf.uint8,
                                              saturate=True)[:max_outputs]
        encoded = tf.map_fn(tf.image.encode_png, images, fn_output_signature=tf.string)
        shape = tf.shape(images)
        dimensions = tf.stack([tf.as_string(shape[2]), tf.as_string(shape[1])])
        return tf.summary.write(tag=tag, tensor=tf.concat([dimensions, encoded], axis=0),
                                step=step, metadata=_IMAGE_METADATA)


def image_or_scalar(name: str, data, step=None):
    """A `summary_fn` writing outputs named `image/...` as images, others as scalars (TFM's
    `ImageScalarSummaryManager` rule)."""
    if str(name).startswith("image/"):
        return image(name, data, step=step, max_outputs=20)
    return scalar(name, data, step=step)


def maybe_build_eval_summary_manager(params, model_dir: str):
    """TFM's vision `summary_manager.maybe_build_eval_summary_manager`: for a task config
    with `allow_image_summary: true`, a `SummaryManager` on the evaluation directory that
    writes `image/...` outputs as images (for `run_experiment(eval_summary_manager=)`);
    otherwise None (`run_experiment` then writes scalars, its default)."""
    if not getattr(params.task, "allow_image_summary", False):
        return None
    return SummaryManager(os.path.join(model_dir, params.trainer.validation_summary_subdir),
                          summary_fn=image_or_scalar)


def scalar(name: str, data, step=None):
    """Writes `data` as a TensorBoard scalar to the default summary writer.

    The same record as `tf.summary.scalar` (plugin "scalars", float32), honouring
    `tf.summary.record_if` and name scopes, without needing the `tensorboard` package.

    Args:
      name: Summary name (the tag, prefixed by active name scopes).
      data: A real numeric scalar (Python number, NumPy value or tensor).
      step: The step; None uses `tf.summary.experimental.get_step()`.

    Returns:
      A boolean (tensor): True if written, False with no default writer or not recording.
    """
    with tf.summary.experimental.summary_scope(name, "scalar_summary",
                                               values=[data, step]) as (tag, _):
        return tf.summary.write(tag=tag, tensor=tf.cast(data, tf.float32), step=step,
                                metadata=_SCALAR_METADATA)


class SummaryManager:
    """Writes dicts of values as summaries under `summary_dir` at the global step.

    Orbit's `SummaryManager` interface (`summary_writer`, `write_summaries`, `flush`). Written
    scalars reach the event files at `flush()` at the latest (see the module docstring).

    Args:
      summary_dir: Root directory of the event files, or None to disable writing.
      summary_fn: Called as `summary_fn(name, value, step=step)` for each leaf value
        (default `scalar` of this module, the TensorBoard scalar format).
      global_step: The step of written summaries (a `tf.Variable` or int). When None, the step
        set with `tf.summary.experimental.set_step` at write time is used.
    """

    def __init__(self, summary_dir: Optional[str], summary_fn: SummaryFn = scalar,
                 global_step=None):
        self._summary_dir = None if summary_dir is None else os.fspath(summary_dir)
        self._summary_fn = summary_fn
        self._global_step = global_step
        self._writers: Dict[str, Any] = {}
        self._noop_writer = None
        self._compiled: Dict[Tuple, Callable] = {}  # names -> batch writer
        self._pending_names: Optional[Tuple] = None
        self._pending_values: List[List[Any]] = []
        self._pending_steps: List[int] = []
        self._last_write = time.monotonic()
        self._failure: Optional[BaseException] = None  # The write error that stopped it.

    @property
    def summary_dir(self) -> Optional[str]:
        return self._summary_dir

    @property
    def enabled(self) -> bool:
        """Whether summaries are written to disk (a `summary_dir` was given, and no write to
        it has failed)."""
        return self._summary_dir is not None and self._failure is None

    @property
    def failure(self) -> Optional[BaseException]:
        """The write error that stopped this manager's summaries, or None."""
        return self._failure

    def _stop(self, error: BaseException) -> None:
        """After a failed write or flush: one warning; from now on every write is dropped."""
        if self._failure is None:
            logging.warning(
                "Could not write summaries to %s (%s); no more summaries are written there, "
                "and the run goes on (checkpoints are written as before).", self._summary_dir,
                _write_error_detail(error, self._summary_dir))
        self._failure = error
        self._pending_names, self._pending_values, self._pending_steps = None, [], []
        self._writers.clear()
        self._compiled.clear()

    @contextlib.contextmanager
    def _stop_on_write_error(self):
        try:
            yield
        except WRITE_ERRORS as error:
            self._stop(error)

    @contextlib.contextmanager
    def as_default(self, step=None):
        """`summary_writer().as_default(step)` for the summaries written inside the block.

        Leaving the block flushes the writer; a flush that fails stops this manager's
        summaries (one warning) instead of raising. An error of the block itself propagates.
        """
        finished = False
        try:
            with self.summary_writer().as_default(step=step):
                yield
                finished = True
        except WRITE_ERRORS as error:
            if not finished:
                raise
            self._stop(error)

    def summary_writer(self, relative_path: str = ""):
        """Returns the writer for `summary_dir/relative_path`, creating it on first call.

        Without a `summary_dir` this is a no-op writer: summaries written while it is the
        default writer are dropped.
        """
        writer = self._writers.get(relative_path)
        if writer is not None:
            return writer
        if self.enabled:
            with self._stop_on_write_error():  # Creating it makes its directory.
                writer = tf.summary.create_file_writer(
                    os.path.join(self._summary_dir, relative_path))
                self._writers[relative_path] = writer
                return writer
        if self._noop_writer is None:
            self._noop_writer = tf.summary.create_noop_writer()
        return self._noop_writer

    def write_summaries(self, summary_dict: Mapping, step: Optional[int] = None) -> None:
        """Writes each leaf of `summary_dict` with `summary_fn`; nested dicts become sub-dirs.

        `{"loss": 0.5, "val": {"accuracy": 0.9}}` writes `loss` in `summary_dir` and `accuracy`
        in `summary_dir/val`. Does nothing without a `summary_dir`. With the default
        `summary_fn`, a dict of real scalars is queued and written in a batch (always
        recorded; on disk after `flush()`); anything else is written at once.

        Args:
          summary_dict: The values to write.
          step: The step to write them at (an int the caller already has, which saves reading
            the step variable); default: the manager's `global_step` now.
        """
        if not self.enabled:
            return
        if self._summary_fn is scalar and self._queue(summary_dict, step):
            return
        self._write_pending()  # Keeps the events in call order.
        if not self.enabled:
            return
        if step is None:
            step = self._global_step
            if step is None:
                step = tf.summary.experimental.get_step()
        with self._stop_on_write_error():
            self._write(summary_dict, "", step)

    def _queue(self, summary_dict: Mapping, step: Optional[int]) -> bool:
        """Queues a dict of real scalars; False (nothing queued) if it is not one."""
        leaves: List[Tuple[str, str]] = []
        values: List[Any] = []
        if not _collect_scalars(summary_dict, "", leaves, values):
            return False
        if not leaves:
            return True
        if step is None:
            step = self._global_step
            if step is None:
                step = tf.summary.experimental.get_step()
            if step is None:
                return False  # The eager path raises its "No step set" error.
            if tf.is_tensor(step) or isinstance(step, tf.Variable):
                step = step.numpy()
        scope = tf.get_current_name_scope()  # The tag `scalar` would give, as in eager mode.
        if scope:
            leaves = [(path, f"{scope}/{tag}") for path, tag in leaves]
        names = tuple(leaves)
        if names != self._pending_names:
            self._write_pending()
            if not self.enabled:
                return True  # Dropped: a write failed and summaries stopped.
            if names not in self._compiled and len(self._compiled) >= _MAX_COMPILED_WRITERS:
                return False
            self._pending_names = names
        self._pending_values.append(values)
        self._pending_steps.append(int(step))
        if (len(self._pending_steps) >= MAX_PENDING
                or time.monotonic() - self._last_write >= FLUSH_SECONDS):
            self._write_pending()
        return True

    def _write_pending(self) -> None:
        """Writes the queued rows in one graph call (which also flushes their writers)."""
        if not self._pending_steps or not self.enabled:
            self._pending_values, self._pending_steps = [], []
            return
        with self._stop_on_write_error():
            names = self._pending_names
            write = self._compiled.get(names)
            if write is None:
                write = self._compiled[names] = self._compile(names)
            values = tf.constant(np.array(self._pending_values, dtype=np.float32))
            steps = tf.constant(np.array(self._pending_steps, dtype=np.int64))
            self._pending_values, self._pending_steps = [], []
            write([values, steps])
            self._last_write = time.monotonic()

    def _compile(self, names: Tuple[Tuple[str, str], ...]) -> Callable:
        """Returns `write([values, steps])`: row r's `values[r, i]` as `names[i]` at `steps[r]`.

        Each row of a writer is one event holding its scalars (a `Summary` with one value per
        tag, each as `scalar` writes it: a float32 tensor tagged "scalars"). The protos of all
        rows are encoded at once (`tf.io.encode_proto`), so the per-row loop is one write op:
        a `tf.summary.write` per value cost ~20 us each, more than the loop it records.
        """
        by_writer: Dict[str, List[Tuple[int, str]]] = {}
        for index, (path, tag) in enumerate(names):
            by_writer.setdefault(path, []).append((index, tag))
        targets = [(self.summary_writer(path), [i for i, _ in tags], [t for _, t in tags])
                   for path, tags in by_writer.items()]
        metadata = _SCALAR_METADATA.SerializeToString()

        def write(values, steps):
            rows = tf.shape(steps)[0]
            # The caller decides what to write: an enclosing record_if at trace time must not
            # be frozen into the graph.
            with tf.summary.record_if(True):
                for writer, indices, tags in targets:
                    protos = _encode_scalar_rows(tf.gather(values, indices, axis=1), tags,
                                                 metadata)
                    with writer.as_default():  # Flushes this writer on exit.

                        def write_row(row, protos=protos):
                            tf.summary.experimental.write_raw_pb(protos[row], step=steps[row])
                            return (row + 1,)

                        tf.while_loop(lambda row: row < rows, write_row, (tf.constant(0),))

        concrete = tf.function(write, autograph=False).get_concrete_function(
            tf.TensorSpec([None, len(names)], tf.float32), tf.TensorSpec([None], tf.int64))
        # The flat call skips binding Python arguments to the signature (private, as
        # loops.DirectCall uses it; the public call keeps a TF change working).
        return tf_adapter.flat_call(concrete) or (lambda inputs: concrete(*inputs))

    def _write(self, summary_dict: Mapping, relative_path: str, step) -> None:
        leaves = []
        for name, value in summary_dict.items():
            if isinstance(value, Mapping):
                self._write(value, os.path.join(relative_path, str(name)), step)
            else:
                leaves.append((name, value))
        if leaves:
            with self.summary_writer(relative_path).as_default():
                for name, value in leaves:
                    self._summary_fn(name, value, step=step)

    def flush(self) -> None:
        """Writes the queued summaries and flushes every writer created so far."""
        self._write_pending()
        with self._stop_on_write_error():
            for writer in list(self._writers.values()):
                writer.flush()


def _encode_scalar_rows(values: tf.Tensor, tags: List[str], metadata: bytes) -> tf.Tensor:
    """Serialized `Summary` protos, one per row of `values` ([rows, len(tags)], float32).

    Value j of a row is tagged `tags[j]` and holds a scalar float32 `TensorProto` with the
    scalars plugin's `metadata`: what `scalar` writes, for a whole batch in three ops.
    """
    rows, width = tf.shape(values)[0], len(tags)
    count = rows * width
    one = tf.ones([count, 1], tf.int32)
    tensors = tf.io.encode_proto(  # dtype DT_FLOAT (1), a scalar shape, the value
        sizes=tf.concat([one, one, one], axis=1),
        values=[tf.fill([count, 1], 1), tf.fill([count, 1], b""), tf.reshape(values, [-1, 1])],
        field_names=["dtype", "tensor_shape", "float_val"],
        message_type="tensorflow.TensorProto")
    per_value = [rows, width, 1]
    summary_values = tf.io.encode_proto(
        sizes=tf.ones([rows, width, 3], tf.int32),
        values=[tf.broadcast_to(tf.reshape(tf.constant(tags), [1, width, 1]), per_value),
                tf.reshape(tensors, per_value), tf.fill(per_value, metadata)],
        field_names=["tag", "tensor", "metadata"], message_type="tensorflow.Summary.Value")
    return tf.io.encode_proto(sizes=tf.fill([rows, 1], width), values=[summary_values],
                              field_names=["value"], message_type="tensorflow.Summary")


def _write_error_detail(error: BaseException, directory: Optional[str]) -> str:
    """The line of a write error that names the file and the cause (e.g. '...; File too
    large'), without TF's graph-execution preamble."""
    text = getattr(error, "message", None) or str(error)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    named = [line for line in lines if directory and directory in line]
    detail = (named or lines or [""])[0]
    return f"{type(error).__name__}: {detail}"



# Leaf types written as they are; anything else is checked (a 0-d array, a tensor, ...).
_PLAIN_SCALARS = (float, int, np.floating, np.integer, np.bool_)


def _collect_scalars(summary_dict: Mapping, relative_path: str, leaves: list,
                     values: list) -> bool:
    """Appends (relative_path, name) and the value of each leaf; False if one is no real scalar."""
    for name, value in summary_dict.items():
        if not isinstance(value, _PLAIN_SCALARS):  # bool is an int
            if isinstance(value, Mapping):
                if not _collect_scalars(value, os.path.join(relative_path, str(name)), leaves,
                                        values):
                    return False
                continue
            if tf.is_tensor(value) or isinstance(value, tf.Variable):
                if not hasattr(value, "numpy"):
                    return False  # A symbolic tensor: only the eager path can write it.
                value = value.numpy()
            if not (isinstance(value, (np.ndarray, np.generic)) and value.ndim == 0
                    and value.dtype.kind in "biuf"):
                return False
        leaves.append((relative_path, str(name)))
        values.append(value)
    return True


# ---------------------------------------------------------------------------------------------
# Loop outputs in the log and the writers (the Controller's per-loop lines).
# ---------------------------------------------------------------------------------------------


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
        self._first_end = None  # (step, time) after the first loop, which includes tracing.

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

    def eta(self, current_step: int, target_step: int, steps_per_second: float) -> float:
        """Seconds to `target_step`, at the rate since the first loop's end (its tracing left
        out; for the first loop, `steps_per_second`)."""
        now = time.perf_counter()
        if self._first_end is None:
            self._first_end = (current_step, now)
            rate = steps_per_second
        else:
            rate = (current_step - self._first_end[0]) / max(now - self._first_end[1], 1e-12)
        return (target_step - current_step) / rate if rate > 0 else float("inf")


def to_values(output: Mapping) -> Dict[str, Any]:
    """Returns a copy of `output` with tensors and variables replaced by NumPy values."""
    values = {}
    for name, value in output.items():
        if isinstance(value, Mapping):
            values[name] = to_values(value)
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


def format_values(values: Mapping) -> str:
    """A (nested) dict of values as one log line's text: `name: value, ...`."""
    parts = []
    for name, value in values.items():
        if isinstance(value, Mapping):
            parts.append(f"{name}: {{{format_values(value)}}}")
        else:
            parts.append(f"{name}: {_format_number(value)}")
    return ", ".join(parts)


class Lazy:
    """Formats on `str()`, so a log line skipped by the log level costs no formatting."""

    __slots__ = ("_fn", "_arg")

    def __init__(self, fn, arg):
        self._fn = fn
        self._arg = arg

    def __str__(self):
        return self._fn(self._arg)


def format_eta(seconds: float) -> str:
    """`seconds` as `H:MM:SS` (`?` when not finite)."""
    if not np.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}"


def default_writer(summary_manager, step):
    """The manager's writer as the default one for summaries written inside the block.

    Ours stops its summaries (one warning) when the flush on leaving fails; another
    (Orbit-interface) manager's writer is used as is.
    """
    if isinstance(summary_manager, SummaryManager):
        return summary_manager.as_default(step=step)
    return summary_manager.summary_writer().as_default(step=step)


def flush_quietly(summary_manager) -> None:
    """Flushes on the way out of a failed loop; a flush error must not hide the first one
    (e.g. a full disk: the CheckpointWriteError says which directory)."""
    try:
        summary_manager.flush()
    except Exception as error:  # pylint: disable=broad-except
        logging.warning("Could not write the last training summaries: %s: %s",
                        type(error).__name__, error)
