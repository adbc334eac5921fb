"""Keeps the checkpoint with the best evaluation metric (TFM's `BestCheckpointExporter`).

After each evaluation the Trainer hands the eval logs to `BestCheckpointExporter`. When the
chosen metric beats the best seen so far, the current checkpoint is written to
`<model_dir>/<best_checkpoint_export_subdir>/best_ckpt-<N>` and its metrics to `info.json`
in the same directory. The record is read back on restart, so a resumed run keeps comparing
against the best of the earlier runs.

On disk (TFM's layout and names):
    info.json          the best evaluation's scalar metrics + "best_ckpt_global_step"
    best_ckpt-<N>.*    the best checkpoint; N is the checkpoint's `save_counter` after this
                       save, as TFM's `CheckpointManager(..., checkpoint_name="best_ckpt")`
                       numbers it (the first export of a fresh checkpoint is `best_ckpt-1`;
                       regular saves of the same checkpoint count too)
    checkpoint         state file, so `tf.train.latest_checkpoint(dir)` finds the best one

Order of writes (a crash at any point leaves a consistent best): the new checkpoint files,
then `info.json` (replaced atomically; this is the commit), then the state file, then the
old checkpoint's files are deleted. (When N names the current best already, e.g. the export
of another `tf.train.Checkpoint` object, its files are overwritten in place, as in TFM.)
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Dict, List, Mapping, Optional

import numpy as np
import tensorflow as tf
from absl import logging

from lite_launcher.checkpointing import checkpoints
from lite_launcher.common import atomic_write
from lite_launcher.common import distribute_utils as strategy_lib
from lite_launcher.core.base_config import ConfigError

BEST_CHECKPOINT_NAME = "best_ckpt"
INFO_FILENAME = "info.json"
STEP_KEY = "best_ckpt_global_step"
# Separators accepted in a nested metric name: TFM's "|" and the "/" of summary paths.
_NESTED_SEPARATORS = ("|", "/")


def _scalar(value) -> Optional[float]:
    """Returns `value` as a Python float if it is a one-element number, else None."""
    if isinstance(value, (tf.Tensor, tf.Variable)):
        value = value.numpy()
    try:
        array = np.asarray(value)
    except Exception:  # pylint: disable=broad-except
        return None
    if array.size != 1 or not (np.issubdtype(array.dtype, np.number)
                               or array.dtype == np.bool_):
        return None
    return float(array.reshape(()))


def _scalar_logs(logs: Mapping[str, Any]) -> Dict[str, Any]:
    """The nested dict of `logs` with only its scalar leaves, as floats (images etc. dropped)."""
    kept = {}
    for key, value in logs.items():
        if isinstance(value, Mapping):
            nested = _scalar_logs(value)
            if nested:
                kept[key] = nested
        else:
            number = _scalar(value)
            if number is not None:
                kept[key] = number
    return kept


def _leaf_paths(logs: Mapping[str, Any], prefix: str = "") -> List[str]:
    paths = []
    for key, value in logs.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            paths.extend(_leaf_paths(value, path + "|"))
        else:
            paths.append(path)
    return paths


def _find_metric(logs: Mapping[str, Any], metric_name: str):
    """Looks up `metric_name` in `logs`: a top-level key, or a nested path "a|b" / "a/b".

    Returns a sentinel `_MISSING` if absent.
    """
    if metric_name in logs:
        return logs[metric_name]
    for separator in _NESTED_SEPARATORS:
        if separator not in metric_name:
            continue
        node = logs
        for part in metric_name.split(separator):
            if not isinstance(node, Mapping) or part not in node:
                node = _MISSING
                break
            node = node[part]
        if node is not _MISSING and not isinstance(node, Mapping):
            return node
    return _MISSING


_MISSING = object()


# ---------------------------------------------------------------------------
# The exporter.
# ---------------------------------------------------------------------------


class BestCheckpointExporter:
    """Keeps the checkpoint whose evaluation has the best `metric_name`.

    Call `maybe_export_checkpoint` after each evaluation, on every worker (in multi-worker
    training all workers take part in the save; only the chief writes to `export_dir`).
    """

    def __init__(self, export_dir: str, metric_name: str, metric_comp: str, strategy=None):
        """Creates the exporter and reads back an earlier run's record from `export_dir`.

        Args:
          export_dir: directory for the best checkpoint and `info.json`.
          metric_name: the eval log to compare. For nested logs give the path with "|" (as
            TFM) or "/" between levels, e.g. "coco|AP" or "coco/AP"; a top-level key that
            contains the separator itself is matched first.
          metric_comp: "higher" or "lower": which direction is better.
          strategy: the distribution strategy that decides which worker writes (chief only).
            None: the strategy current when `maybe_export_checkpoint` is called.
        """
        if not export_dir:
            raise ConfigError("BestCheckpointExporter needs a non-empty export_dir.")
        if not metric_name:
            raise ConfigError("BestCheckpointExporter needs a metric_name "
                              "(trainer.best_checkpoint_eval_metric).")
        if metric_comp not in ("higher", "lower"):
            raise ConfigError(
                f"trainer.best_checkpoint_metric_comp {metric_comp!r} must be 'higher' or "
                f"'lower'.")
        self._export_dir = export_dir
        self._metric_name = metric_name
        self._metric_comp = metric_comp
        self._strategy = strategy
        tf.io.gfile.makedirs(export_dir)
        self._best_ckpt_logs = self._load_record()

    # ----- record ------------------------------------------------------------
    def _load_record(self) -> Optional[Dict[str, Any]]:
        path = self.best_ckpt_logs_path
        if not tf.io.gfile.exists(path):
            return None
        try:
            with tf.io.gfile.GFile(path, "r") as f:
                record = json.loads(f.read())
        except (ValueError, tf.errors.OpError) as e:
            logging.warning("Ignoring unreadable best-checkpoint record %s: %s", path, e)
            return None
        if not isinstance(record, dict) or _scalar(
                _find_metric(record, self._metric_name)) is None:
            # Another metric was tracked before: its best says nothing about this one.
            logging.warning(
                "Best-checkpoint record %s has no metric %r; the next evaluation replaces it.",
                path, self._metric_name)
            return None
        logging.info("Read the best-checkpoint record %s: %s = %s at step %s.", path,
                     self._metric_name, _find_metric(record, self._metric_name),
                     record.get(STEP_KEY))
        return record

    def _metric_value(self, logs: Mapping[str, Any]) -> float:
        value = _find_metric(logs, self._metric_name)
        if value is _MISSING:
            raise ConfigError(
                f"Best-checkpoint metric {self._metric_name!r} is not in the evaluation logs "
                f"(available: {', '.join(sorted(_leaf_paths(logs))) or 'none'}); set "
                f"trainer.best_checkpoint_eval_metric to one of them (nested: 'a|b').")
        number = _scalar(value)
        if number is None:
            raise ConfigError(
                f"Best-checkpoint metric {self._metric_name!r} must be a scalar number, got "
                f"{value!r}.")
        return number

    def _is_better(self, new_value: float, old_value: float) -> bool:
        # NaN is the worst value: it never wins, and anything else beats it.
        if math.isnan(new_value):
            return False
        if math.isnan(old_value):
            return True
        if self._metric_comp == "higher":
            return new_value > old_value
        return new_value < old_value

    # ----- export ------------------------------------------------------------
    def maybe_export_checkpoint(self, checkpoint: tf.train.Checkpoint,
                                eval_logs: Mapping[str, Any], global_step,
                                write_logs: bool = True) -> bool:
        """Exports `checkpoint` as the best if `eval_logs` beat the best so far.

        Args:
          checkpoint: the `tf.train.Checkpoint` to write.
          eval_logs: the evaluation's logs (possibly nested dicts of numbers / tensors).
          global_step: the step the logs belong to (int, tensor or variable).
          write_logs: whether to write `info.json` (TFM's flag; the state stays in memory
            otherwise and is lost on restart).

        Returns:
          True if the checkpoint was exported.

        Raises:
          ConfigError: `metric_name` is not in `eval_logs`, or not a number.
        """
        step = int(_scalar(global_step))  # for the log lines
        new_value = self._metric_value(eval_logs)
        if self._best_ckpt_logs is not None:
            old_value = self._metric_value(self._best_ckpt_logs)
            if not self._is_better(new_value, old_value):
                logging.info("[BestCheckpointExporter] %s = %s at step %d does not beat %s.",
                             self._metric_name, new_value, step, old_value)
                return False
            logging.info("[BestCheckpointExporter] %s = %s at step %d beats %s: exporting.",
                         self._metric_name, new_value, step, old_value)
        record = self._record(eval_logs, step)
        self._export(checkpoint, record, write_logs)
        self._best_ckpt_logs = record
        return True

    @staticmethod
    def _record(eval_logs: Mapping[str, Any], global_step) -> Dict[str, Any]:
        # As TFM: the scalar logs with every number a float, the step included.
        record = _scalar_logs(eval_logs)
        record[STEP_KEY] = float(_scalar(global_step))
        return record

    def export_best_eval_metric(self, eval_logs: Mapping[str, Any], global_step) -> None:
        """Writes `eval_logs` (their scalar leaves) and `global_step` to `info.json` (TFM's API).

        Non-scalar logs (images, ...) are left out; every number is written as a float. Only
        the chief writes.
        """
        if strategy_lib.should_write(self._strategy):
            atomic_write.write_text(
                self.best_ckpt_logs_path,
                json.dumps(self._record(eval_logs, global_step), indent=4) + "\n")

    def _export(self, checkpoint, record, write_logs):
        # The number TFM's CheckpointManager.save() would give: the checkpoint's save counter,
        # incremented (on every worker, so that all agree on the name).
        number = int(checkpoint.save_counter.assign_add(1).numpy())
        name = f"{BEST_CHECKPOINT_NAME}-{number}"
        with checkpoints.worker_save_dir(self._export_dir, self._strategy) as directory:
            checkpoints.write(checkpoint, os.path.join(directory, name))
        if directory != self._export_dir:  # not the writer: its copy is thrown away
            return
        prefix = os.path.join(self._export_dir, name)
        if write_logs:
            atomic_write.write_text(self.best_ckpt_logs_path,
                                    json.dumps(record, indent=4) + "\n")
        # The state file makes `tf.train.latest_checkpoint(export_dir)` return the best one.
        checkpoints.write_state(self._export_dir, name, [name])
        # Earlier bests (and leftovers of an interrupted export) are stale now.
        for index_file in tf.io.gfile.glob(
                os.path.join(self._export_dir, f"{BEST_CHECKPOINT_NAME}-*.index")):
            old_prefix = index_file[:-len(".index")]
            if old_prefix != prefix:
                checkpoints.remove(old_prefix)
        logging.info("[BestCheckpointExporter] exported %s.", prefix)

    # ----- properties --------------------------------------------------------
    @property
    def export_dir(self) -> str:
        return self._export_dir

    @property
    def metric_name(self) -> str:
        return self._metric_name

    @property
    def metric_comp(self) -> str:
        return self._metric_comp

    @property
    def best_ckpt_logs(self) -> Optional[Dict[str, Any]]:
        """The record of the best evaluation (scalar logs + "best_ckpt_global_step"), or None."""
        return self._best_ckpt_logs

    @property
    def best_ckpt_logs_path(self) -> str:
        """Path of `info.json`."""
        return os.path.join(self._export_dir, INFO_FILENAME)

    @property
    def best_ckpt_path(self) -> Optional[str]:
        """Prefix of the best checkpoint (for `Checkpoint.restore`), or None if none yet."""
        return tf.train.latest_checkpoint(self._export_dir)


def maybe_create_best_ckpt_exporter(params, data_dir: str,
                                    strategy=None) -> Optional[BestCheckpointExporter]:
    """Returns a `BestCheckpointExporter` if the config asks for one, else None.

    Enabled by `trainer.best_checkpoint_export_subdir` and `trainer.best_checkpoint_eval_metric`
    (both non-empty) and a non-empty `data_dir` (the model dir); the checkpoint goes to
    `data_dir/best_checkpoint_export_subdir`.
    """
    trainer = params.trainer
    export_subdir = trainer.best_checkpoint_export_subdir
    metric_name = trainer.best_checkpoint_eval_metric
    if not export_subdir:
        return None
    if not metric_name:
        logging.warning(
            "trainer.best_checkpoint_export_subdir is %r but trainer.best_checkpoint_eval_metric "
            "is empty: no best checkpoint is exported. Set the metric to enable it.",
            export_subdir)
        return None
    if not data_dir:
        logging.warning("No model_dir: the best checkpoint (%r) is not exported.", export_subdir)
        return None
    export_dir = os.path.join(data_dir, export_subdir)
    logging.info("Exporting the best checkpoint by %s (%s) to %s.", metric_name,
                 trainer.best_checkpoint_metric_comp, export_dir)
    return BestCheckpointExporter(export_dir, metric_name,
                                  trainer.best_checkpoint_metric_comp, strategy=strategy)
