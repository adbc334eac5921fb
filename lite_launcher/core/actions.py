"""Actions run by the Controller after each train loop or evaluation (TFM's actions.py).

An action is any callable taking the loop's output dict (Orbit's contract): `train_actions`
run after each train loop with its logs (`"training_loss"`, ...), `eval_actions` after each
evaluation with the eval logs. `get_train_actions` / `get_eval_actions` build TFM's set from
the config:

- `EMACheckpointing` (eval): saves the moving-average weights to `model_dir/ema_checkpoints`
  when the optimizer keeps an EMA.
- `ConditionalAction(RecoveryCondition, RecoveryAction)` (train): on a NaN or exploding loss,
  restores the last checkpoint, at most `trainer.recovery_max_trials` times, then fails.
- `PreemptionCheckpointAction` (train): on SIGTERM, saves a checkpoint at the end of the
  current train loop and exits with `PREEMPTION_EXIT_CODE`; the restarted job resumes there.
"""

from __future__ import annotations

import math
import os
import signal
import threading
from typing import Any, Callable, List, Mapping, Optional, Sequence, Union

import gin
import numpy as np
import tensorflow as tf
from absl import logging

from lite_launcher.checkpointing import checkpoints
from lite_launcher.common.errors import TrainingDivergedError
from lite_launcher.core.base_config import ConfigError

Output = Optional[Mapping[str, Any]]
Action = Callable[[Output], Any]

# Exit status after a preemption checkpoint: 128 + SIGTERM, what a shell reports for a
# process ended by SIGTERM, so schedulers treat it as "terminated, restart me".
PREEMPTION_EXIT_CODE = 128 + signal.SIGTERM

EMA_CHECKPOINT_SUBDIR = "ema_checkpoints"
EMA_CHECKPOINT_NAME = "average_weights"



def _as_int(value) -> int:
    if isinstance(value, (tf.Tensor, tf.Variable)):
        value = value.numpy()
    return int(value)


class ConditionalAction:
    """Runs `action` (one callable or a sequence) when `condition(output)` is true."""

    def __init__(self, condition: Callable[[Output], Any],
                 action: Union[Action, Sequence[Action]]):
        self.condition = condition
        self.action = action

    def __call__(self, output: Output) -> None:
        if not self.condition(output):
            return
        actions = self.action if isinstance(self.action, (list, tuple)) else [self.action]
        for action in actions:
            action(output)


# ---------------------------------------------------------------------------
# EMA checkpoints.
# ---------------------------------------------------------------------------


class EMACheckpointing:
    """Eval action: saves a checkpoint holding the EMA weights in place of the model weights.

    Each call swaps every model variable with its moving average, saves `checkpoint` with a
    `CheckpointManager` under `export_dir/ema_checkpoints` (prefix "average_weights",
    numbered by the global step), and swaps back, which restores the weights bit for bit.
    Saving at evaluation time rather than every train loop keeps the cost down.
    """

    def __init__(self, export_dir: str, optimizer, checkpoint: tf.train.Checkpoint,
                 max_to_keep: int = 1, *, variables: Optional[Sequence[tf.Variable]] = None,
                 global_step=None, strategy=None):
        """Creates the action.

        Args:
          export_dir: the model dir; checkpoints go to `export_dir/ema_checkpoints`.
          optimizer: a Keras 3 optimizer built with `use_ema=True`.
          checkpoint: the checkpoint to save (it must track the model).
          max_to_keep: how many EMA checkpoints to keep.
          variables: the model variables to swap with their averages; None (TFM's call):
            every variable the optimizer was built with, i.e. all it averages.
          global_step: numbers the checkpoints; None: `optimizer.iterations`.
          strategy: decides which worker writes (chief only); None: the current strategy.
        """
        from lite_launcher import optimization  # pylint: disable=import-outside-toplevel
        if not optimization.has_ema(optimizer):
            raise ConfigError(
                "EMACheckpointing needs an optimizer with EMA (Keras `use_ema=True`, "
                "optimizer_config.ema in the config).")
        self._optimizer = optimizer
        self._variables = list(variables) if variables is not None else None
        self._checkpoint = checkpoint
        self._max_to_keep = max_to_keep
        self._global_step = global_step if global_step is not None else optimizer.iterations
        self._strategy = strategy
        self._directory = os.path.join(export_dir, EMA_CHECKPOINT_SUBDIR)
        self._checkpoint_manager = None

    @property
    def directory(self) -> str:
        return self._directory

    def _manager(self, directory: str) -> tf.train.CheckpointManager:
        if directory != self._directory:  # a non-chief worker's throwaway directory
            return checkpoints.CheckpointManager(self._checkpoint, directory, max_to_keep=1,
                                                 checkpoint_name=EMA_CHECKPOINT_NAME)
        if self._checkpoint_manager is None:
            self._checkpoint_manager = checkpoints.CheckpointManager(
                self._checkpoint, directory, max_to_keep=self._max_to_keep,
                checkpoint_name=EMA_CHECKPOINT_NAME)
        return self._checkpoint_manager

    def _averaged_variables(self, optimization) -> List[tf.Variable]:
        if self._variables is not None:
            return self._variables
        # Read at save time: the optimizer may be built after this action is made.
        inner = optimization.unwrap_loss_scale(self._optimizer)
        built = getattr(inner, "_trainable_variables", None)  # Keras 3: the build() list
        if built is None:
            raise RuntimeError(
                f"EMACheckpointing cannot find the variables {type(inner).__name__} was built "
                f"with; pass variables=model.trainable_variables.")
        return list(built)

    def _swap(self, optimization):
        variables = self._averaged_variables(optimization)
        # Cross-replica context of the training strategy: every replica's copy is swapped.
        if self._strategy is not None:
            with self._strategy.scope():
                optimization.swap_ema_weights(self._optimizer, variables)
        else:
            optimization.swap_ema_weights(self._optimizer, variables)

    def __call__(self, output: Output = None) -> Optional[str]:
        """Saves the EMA checkpoint; returns its path (None on non-chief workers)."""
        from lite_launcher import optimization  # pylint: disable=import-outside-toplevel
        step = _as_int(self._global_step)
        path = None
        self._swap(optimization)
        try:
            with checkpoints.worker_save_dir(self._directory, self._strategy) as directory:
                manager = self._manager(directory)
                saved = checkpoints.save(manager, step)
                manager.sync()
                if directory == self._directory:
                    path = saved
        finally:
            # Swap back even if saving failed: training must go on with the model weights.
            self._swap(optimization)
        if path:
            logging.info("Saved the EMA weights at step %d to %s.", step, path)
        return path


# ---------------------------------------------------------------------------
# Recovery from a diverged loss.
# ---------------------------------------------------------------------------


def _loss_value(loss) -> float:
    """A loss of any shape (scalar, `[1]` as TFM's tests pass it, a list) as one float.

    NaN when any element is NaN, else the largest element: the loss diverged if any part did.
    """
    if isinstance(loss, (tf.Tensor, tf.Variable)):
        loss = loss.numpy()
    if isinstance(loss, (float, np.floating)):  # The Controller's case: one check per loop.
        return float(loss)
    values = np.asarray(loss, dtype=np.float64)
    if values.size == 0:
        raise ValueError("RecoveryCondition got an empty 'training_loss'; it needs at least one "
                         "value.")
    return float("nan") if np.isnan(values).any() else float(values.max())


class RecoveryCondition:
    """True when the last train loop's loss diverged and a recovery should run.

    Diverged means: `output["training_loss"]` (any shape: any NaN element, or the largest
    element, decides) is NaN (at any step), or above
    `loss_upper_bound` once `global_step >= recovery_begin_steps` (TFM's rule). Each hit counts
    one trial; the hit that makes the count exceed `recovery_max_trials` raises RuntimeError
    instead of returning True (so `recovery_max_trials=0` fails at the first hit).
    """

    def __init__(self, global_step, loss_upper_bound: float, recovery_begin_steps: int = 0,
                 recovery_max_trials: int = 3):
        self.global_step = global_step
        self.loss_upper_bound = loss_upper_bound
        self.recovery_begin_steps = recovery_begin_steps
        self.recovery_max_trials = recovery_max_trials
        self.recover_counter = 0

    def __call__(self, output: Output) -> bool:
        if not output or "training_loss" not in output:
            raise KeyError(
                f"RecoveryCondition needs 'training_loss' in the train loop output; got keys "
                f"{sorted(output or {})}.")
        loss = _loss_value(output["training_loss"])
        # The step is read only when the loss looks bad: one host read less per healthy loop.
        if math.isnan(loss):
            reason = f"the training loss is NaN at step {_as_int(self.global_step)}"
        elif loss <= self.loss_upper_bound:
            return False
        else:
            step = _as_int(self.global_step)
            if step < self.recovery_begin_steps:
                return False
            reason = (f"the training loss {loss} at step {step} exceeds "
                      f"trainer.loss_upper_bound ({self.loss_upper_bound})")
        self.recover_counter += 1
        if self.recover_counter > self.recovery_max_trials:
            raise TrainingDivergedError(
                f"Training diverged: {reason}; this is divergence {self.recover_counter} and "
                f"trainer.recovery_max_trials is {self.recovery_max_trials}. Lower the learning "
                f"rate, or raise trainer.recovery_max_trials / trainer.loss_upper_bound.")
        logging.warning("%s: recovering (trial %d of %d).", reason, self.recover_counter,
                        self.recovery_max_trials)
        return True


class RecoveryAction:
    """Restores the latest checkpoint of `checkpoint_manager` (weights, optimizer, step).

    The global step goes back to the checkpoint's step, so the following train loops redo
    the steps since then.
    """

    def __init__(self, checkpoint_manager: tf.train.CheckpointManager):
        self.checkpoint_manager = checkpoint_manager

    def __call__(self, output: Output = None) -> Optional[str]:
        path = self.checkpoint_manager.latest_checkpoint
        if path is None:
            logging.warning("No checkpoint in %s to recover from; training goes on as is.",
                            self.checkpoint_manager.directory)
            return None
        # The checkpoint may hold objects (e.g. an input iterator) restored elsewhere.
        checkpoints.restore(self.checkpoint_manager.checkpoint, path, expect_partial=True)
        logging.warning("Recovered the model from checkpoint %s.", path)
        return path


# ---------------------------------------------------------------------------
# Preemption: checkpoint on SIGTERM, then exit.
# ---------------------------------------------------------------------------


def _multi_worker_resolver(strategy):
    """The strategy's cluster resolver if it describes a worker cluster TF can coordinate."""
    resolver = getattr(strategy, "cluster_resolver", None) if strategy is not None else None
    if resolver is None:
        return None
    try:
        jobs = resolver.cluster_spec().as_dict()
    except Exception:  # pylint: disable=broad-except
        return None
    # PreemptionCheckpointHandler supports neither parameter servers nor a local cluster.
    if not jobs or "ps" in jobs:
        return None
    return resolver


class PreemptionCheckpointAction:
    """Train action: after SIGTERM, checkpoint at the end of the train loop and exit.

    The SIGTERM handler only sets a flag; the train loop in progress finishes, then this
    action saves `checkpoint_manager.save(checkpoint_number=global_step)`, waits for an async
    save to finish, and raises `SystemExit(exit_code)` (default `PREEMPTION_EXIT_CODE`, 143).
    Restarting the job resumes from that checkpoint.

    In a multi-worker cluster (the strategy has a cluster resolver) TF's
    `tf.distribute.experimental.PreemptionCheckpointHandler` is used instead, as TFM does: it
    agrees with all workers on the step to save at, so every worker saves and exits together.
    (It adds a counter variable to the checkpoint and restores the latest checkpoint when
    created.) The checkpoint manager must then be one each worker may save with.

    Signal handlers can only be installed from the main thread; elsewhere the action logs
    that and does nothing. Call `close()` (or use it as a context manager) to put the previous
    SIGTERM handler back.
    """

    def __init__(self, checkpoint_manager: tf.train.CheckpointManager, global_step, *,
                 strategy=None, exit_code: int = PREEMPTION_EXIT_CODE):
        self._checkpoint_manager = checkpoint_manager
        self._global_step = global_step
        self._exit_code = exit_code
        self._preempted = False
        self._handler = None
        self._previous_sigterm = None
        self._installed = False
        if threading.current_thread() is not threading.main_thread():
            logging.warning("PreemptionCheckpointAction: not on the main thread, so no SIGTERM "
                            "handler can be installed; preemption checkpoints are off.")
            return
        self._previous_sigterm = signal.getsignal(signal.SIGTERM)
        self._installed = True
        resolver = _multi_worker_resolver(strategy)
        if resolver is not None:
            config = tf.distribute.experimental.TerminationConfig(exit_fn=self._exit)
            self._handler = tf.distribute.experimental.PreemptionCheckpointHandler(
                resolver, checkpoint_manager, termination_config=config)
            logging.info("Preemption checkpoints: using PreemptionCheckpointHandler.")
        else:
            signal.signal(signal.SIGTERM, self._on_sigterm)
            logging.info("Preemption checkpoints: on SIGTERM, save and exit with code %d.",
                         exit_code)

    def _on_sigterm(self, signum, frame):  # pylint: disable=unused-argument
        # Only set a flag, and take no lock (not a threading.Event): a signal handler may run
        # between any two bytecodes, also of itself when SIGTERMs come fast, and a nested
        # handler waiting for a lock its own thread holds would never return.
        self._preempted = True

    def _exit(self):
        if self._handler is not None:
            # PreemptionCheckpointHandler calls this once every worker has saved (it logs no
            # step): say which, so each worker's log shows the step the cluster agreed on.
            logging.warning("Preempted (SIGTERM in the cluster): this worker saved its "
                            "checkpoint at step %d; exiting with code %d.",
                            _as_int(self._global_step), self._exit_code)
        raise SystemExit(self._exit_code)

    @property
    def preempted(self) -> bool:
        """Whether SIGTERM was received (single-worker mode)."""
        return self._preempted

    @property
    def exit_code(self) -> int:
        return self._exit_code

    def __call__(self, output: Output = None) -> None:
        if self._handler is not None:
            # Saves and calls `_exit` when any worker was preempted; else returns.
            checkpoints.save_if_preempted(self._handler, self._global_step)
            return
        if not self._preempted:
            return
        step = _as_int(self._global_step)
        # check_interval=False: an on-demand save must not wait for checkpoint_interval.
        path = checkpoints.save(self._checkpoint_manager, step, check_interval=False)
        self._checkpoint_manager.sync()
        logging.warning("Preempted (SIGTERM): saved %s at step %d; exiting with code %d.",
                        path, step, self._exit_code)
        self._exit()

    def close(self) -> None:
        """Puts back the SIGTERM handler that was installed before this action."""
        if not self._installed:
            return
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM,
                          self._previous_sigterm if self._previous_sigterm is not None
                          else signal.SIG_DFL)
            self._installed = False
        self._handler = None

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


# ---------------------------------------------------------------------------
# TFM's wiring.
# ---------------------------------------------------------------------------


@gin.configurable
def get_eval_actions(params, trainer, model_dir: str) -> List[Action]:
    """Eval actions for a run: EMA checkpointing when the optimizer keeps an EMA."""
    from lite_launcher import optimization  # pylint: disable=import-outside-toplevel
    actions = []
    if model_dir and optimization.has_ema(trainer.optimizer):
        actions.append(EMACheckpointing(
            export_dir=model_dir, optimizer=trainer.optimizer, checkpoint=trainer.checkpoint,
            max_to_keep=params.trainer.max_to_keep,
            variables=trainer.model.trainable_variables, global_step=trainer.global_step,
            strategy=trainer.strategy))
    return actions


@gin.configurable
def get_train_actions(params, trainer, model_dir: str,
                      checkpoint_manager: Optional[tf.train.CheckpointManager]) -> List[Action]:
    """Train actions for a run, in order: loss recovery, then preemption checkpoints.

    - `trainer.recovery_max_trials >= 0`: `ConditionalAction(RecoveryCondition,
      RecoveryAction)`.
    - `trainer.preemption_on_demand_checkpoint` and a checkpoint manager:
      `PreemptionCheckpointAction` (call its `close()` when the run ends).
    """
    del model_dir  # TFM's signature; nothing here writes outside the checkpoint manager.
    config = params.trainer
    actions = []
    if config.recovery_max_trials >= 0:
        if checkpoint_manager is None and config.recovery_max_trials > 0:
            raise ConfigError(
                f"trainer.recovery_max_trials ({config.recovery_max_trials}) > 0 needs "
                f"checkpoints to recover from: set a model_dir, or recovery_max_trials to 0 "
                f"(fail on divergence) or -1 (no check).")
        condition = RecoveryCondition(
            global_step=trainer.global_step, loss_upper_bound=config.loss_upper_bound,
            recovery_begin_steps=config.recovery_begin_steps,
            recovery_max_trials=config.recovery_max_trials)
        actions.append(ConditionalAction(
            condition=condition,
            action=RecoveryAction(checkpoint_manager) if checkpoint_manager else []))
    if config.preemption_on_demand_checkpoint:
        if checkpoint_manager is None:
            logging.warning("trainer.preemption_on_demand_checkpoint is on but there is no "
                            "checkpoint manager (model_dir): no preemption checkpoints.")
        else:
            actions.append(PreemptionCheckpointAction(
                checkpoint_manager, trainer.global_step,
                strategy=getattr(trainer, "strategy", None)))
    return actions
