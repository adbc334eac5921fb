"""Shared helpers of the reliability tests: run `lite-train`, snapshot directories, read
checkpoints, read summaries.

Subprocesses run `python -m lite_launcher.commands.train` (the `lite-train` entry point) with the repository
on PYTHONPATH, so the tests do not depend on the console script being installed.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence

import keras
import numpy as np
import tensorflow as tf

import lite_launcher as ll
import lite_launcher.common.registry_imports  # noqa: F401  (the built-ins, for registry.get_exp_config)
import cli

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ERROR_PREFIX = "lite-train: error: "

# digits_mlp made quick: 10-step loops, a checkpoint every loop, no distribution strategy.
FAST_DIGITS = {
    "trainer.steps_per_loop": 10,
    "trainer.summary_interval": 10,
    "trainer.checkpoint_interval": 10,
    "runtime.distribution_strategy": "off",
}

_RESTORED = re.compile(r"Restored checkpoint (\S+) \(global step (\d+)\)")
_TRAIN_STEP = re.compile(r"train \| step:\s+(\d+) \| steps/sec")


def nested(flat: Dict[str, object]) -> Dict[str, object]:
    """{'a.b': 1} -> {'a': {'b': 1}}."""
    result: Dict[str, object] = {}
    for key, value in flat.items():
        node = result
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return result


def override_json(flat: Dict[str, object]) -> str:
    """A JSON `--params_override` from a dict of dotted keys.

    JSON rather than `a.b=v` pairs, whose YAML values turn `off` into False.
    """
    return json.dumps(nested(flat))


def subprocess_env() -> Dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # One intra-op thread pool per process is plenty for these tiny models on 2 cores.
    env.setdefault("TF_NUM_INTRAOP_THREADS", "1")
    env.setdefault("TF_NUM_INTEROP_THREADS", "2")
    return env


def lite_train_command(args: Sequence[str]) -> List[str]:
    return cli.lite_train_command(*args)


def run_lite_train(args: Sequence[str], timeout: float = 180, cwd: Optional[str] = None,
                   **popen_kwargs) -> subprocess.CompletedProcess:
    """Runs `lite-train args` to completion; returns the CompletedProcess (text output)."""
    return subprocess.run(lite_train_command(args), capture_output=True, text=True,
                          timeout=timeout, env=subprocess_env(), cwd=cwd or REPO_ROOT,
                          **popen_kwargs)


def start_lite_train(args: Sequence[str], log_path: str) -> subprocess.Popen:
    """Starts `lite-train args` with stdout and stderr going to `log_path`."""
    log = open(log_path, "w")
    try:
        return subprocess.Popen(lite_train_command(args), stdout=log, stderr=subprocess.STDOUT,
                                env=subprocess_env(), cwd=REPO_ROOT)
    finally:
        log.close()  # The child holds its own descriptor.


def stop_if_running(process: subprocess.Popen) -> None:
    """Kills and reaps `process` if it is still running (a test's `finally` clean-up)."""
    if process.poll() is None:
        process.kill()
        process.wait()


def read_text(path: str) -> str:
    with open(path, errors="replace") as f:
        return f.read()


def wait_for(predicate: Callable[[], object], timeout: float, interval: float = 0.01,
             what: str = "condition"):
    """Polls `predicate` until it returns something truthy; returns that value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def restored_checkpoints(log: str):
    """[(path, step)] of the driver's 'Restored checkpoint ... (global step N)' lines."""
    return [(path.rstrip("."), int(step)) for path, step in _RESTORED.findall(log)]


def logged_train_steps(log: str) -> List[int]:
    """Global steps of the controller's 'train | step: N | steps/sec' lines."""
    return [int(step) for step in _TRAIN_STEP.findall(log)]


def snapshot(path: str) -> Optional[Dict[str, tuple]]:
    """Every file and directory under `path` with its size, mtime and SHA-256 (None if absent)."""
    if not os.path.lexists(path):
        return None
    if not os.path.isdir(path):
        return {".": _file_entry(path)}
    entries = {}
    for root, dirs, files in os.walk(path):
        for name in dirs:
            full = os.path.join(root, name)
            entries[os.path.relpath(full, path) + "/"] = ("dir", os.stat(full).st_mtime_ns)
        for name in files:
            full = os.path.join(root, name)
            entries[os.path.relpath(full, path)] = _file_entry(full)
    entries["./"] = ("dir", os.stat(path).st_mtime_ns)
    return entries


def _file_entry(path: str) -> tuple:
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    stat = os.stat(path)
    return stat.st_size, stat.st_mtime_ns, digest


def checkpoint_numbers(model_dir: str) -> List[int]:
    """Numbers of the complete-looking `ckpt-N.index` files in `model_dir`, sorted."""
    numbers = []
    for path in glob.glob(os.path.join(model_dir, "ckpt-*.index")):
        match = re.search(r"ckpt-(\d+)\.index$", path)
        if match:
            numbers.append(int(match.group(1)))
    return sorted(numbers)


def read_checkpoint(prefix: str) -> Dict[str, np.ndarray]:
    """Every tensor of a checkpoint except variant ones (iterator states) as NumPy arrays.

    Reading every tensor checks that the data files are complete.
    """
    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(name)
            for name, dtype in reader.get_variable_to_dtype_map().items()
            if dtype != tf.variant}


def checkpoint_global_step(prefix: str) -> int:
    return int(tf.train.load_checkpoint(prefix).get_tensor(
        "global_step/.ATTRIBUTES/VARIABLE_VALUE"))


def summary_steps(summary_dir: str, tag: str) -> List[int]:
    """The steps of every scalar summary `tag` in the event files of `summary_dir`, in order."""
    steps = []
    for path in sorted(glob.glob(os.path.join(summary_dir, "events.out.tfevents.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == tag:
                    steps.append(int(event.step))
    return steps


NUM_FEATURES, NUM_CLASSES = 4, 3


@dataclasses.dataclass
class PoisonTaskConfig(ll.TaskConfig):
    """Training steps number `poison_from` to `poison_to` (1-based, counting every executed
    step, redone ones included) have their loss multiplied by `factor`."""

    poison_from: int = 0
    poison_to: int = 0
    factor: float = float("nan")


class PoisonTask(ll.Task):
    """A seeded linear classifier on fixed random data whose loss can be poisoned."""

    def __init__(self, params, logging_dir=None, name=None):
        super().__init__(params, logging_dir=logging_dir, name=name)
        self.executed_steps = tf.Variable(0, dtype=tf.int64, trainable=False)

    def build_model(self):
        return keras.Sequential([keras.Input((NUM_FEATURES,)), keras.layers.Dense(
            NUM_CLASSES, kernel_initializer=keras.initializers.GlorotUniform(seed=3))])

    def build_inputs(self, params, input_context=None):
        rng = np.random.default_rng(0)
        x = rng.normal(size=(64, NUM_FEATURES)).astype("float32")
        y = rng.integers(0, NUM_CLASSES, 64).astype("int32")
        dataset = tf.data.Dataset.from_tensor_slices((x, y))
        if params.is_training:
            dataset = dataset.repeat()
        return dataset.batch(8, drop_remainder=bool(params.is_training))

    def build_losses(self, labels, model_outputs, aux_losses=None):
        return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
            labels, model_outputs, from_logits=True))

    def train_step(self, inputs, model, optimizer, metrics=None):
        features, labels = inputs
        step = self.executed_steps.assign_add(1)
        config = self.task_config
        poisoned = tf.logical_and(step >= config.poison_from, step <= config.poison_to)
        factor = tf.where(poisoned, tf.constant(config.factor, tf.float32), 1.0)
        with tf.GradientTape() as tape:
            loss = self.build_losses(labels, model(features, training=True)) * factor
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return {self.loss: loss}


def poison_params(trainer: Optional[Dict[str, object]] = None, **task) -> "ll.ExperimentConfig":
    """A PoisonTask experiment: SGD 0.1, 40 steps in loops of 5, a checkpoint every loop
    (max_to_keep 20), loss_upper_bound 1000, recovery_max_trials 3; `trainer` overrides."""
    params = ll.ExperimentConfig(task=PoisonTaskConfig(**task))
    params.task.train_data.override({"is_training": True, "global_batch_size": 8})
    params.task.validation_data.override({"is_training": False, "global_batch_size": 8})
    params.trainer.override({
        "optimizer_config": {"optimizer": {"type": "sgd"},
                             "learning_rate": {"type": "constant",
                                               "constant": {"learning_rate": 0.1}}},
        "train_steps": 40, "steps_per_loop": 5, "summary_interval": 5,
        "checkpoint_interval": 5, "max_to_keep": 20, "loss_upper_bound": 1000.0,
        "recovery_max_trials": 3, **(trainer or {})})
    return params


def run_poison_task(params, model_dir: str, mode: str = "train"):
    """`run_experiment` of a PoisonTask under the default strategy; returns (model, task)."""
    strategy = tf.distribute.get_strategy()
    with strategy.scope():
        task = PoisonTask(params.task)
    model, _ = ll.run_experiment(distribution_strategy=strategy, task=task, mode=mode,
                                 params=params, model_dir=model_dir)
    return model, task


def train_mock(model_dir: str, train_steps: int, **trainer) -> None:
    """Trains the `mock` experiment in-process (checkpoint every 10 steps, max_to_keep 10)."""
    from lite_launcher.core import registry

    params = registry.get_exp_config("mock")
    params.trainer.override({"train_steps": train_steps, "steps_per_loop": 10,
                             "summary_interval": 10, "checkpoint_interval": 10,
                             "max_to_keep": 10, **trainer}, is_strict=True)
    strategy = tf.distribute.get_strategy()
    with strategy.scope():
        task = registry.get_task(params.task, logging_dir=model_dir)
    ll.run_experiment(distribution_strategy=strategy, task=task, mode="train", params=params,
                      model_dir=model_dir)
