"""`run_experiment`: one experiment in one of the five modes (TFM's `official.core.train_lib`).

Flow: build the Trainer in `strategy.scope()` (unless one is passed) -> a CheckpointManager on
model_dir -> a Controller with the actions -> run the mode -> optional post-evaluation.

A driver ported from TFM imports this module before parsing gin, as TFM's: importing it
registers every gin configurable lite has, TFM's names (`Trainer`, `create_trainer`,
`get_train_actions`, `get_eval_actions`, `build_optimizer`, `run_experiment`), so that bindings
such as `create_trainer.trainer_cls = @CustomTrainer` find them.
"""

from __future__ import annotations

import contextlib
import os
import sys
import weakref
from typing import Any, List, Mapping, Optional, Tuple

import gin
import tensorflow as tf
from absl import logging

from lite_launcher.checkpointing import checkpoints
from lite_launcher.common import distribute_utils as strategy_lib
from lite_launcher.common import model_dir_lock
from lite_launcher.core import actions
from lite_launcher.core import exporter as exporter_lib
from lite_launcher.core import model_dir_files
from lite_launcher.core.base_config import ConfigError, validate_once
from lite_launcher.core.base_trainer import Trainer
from lite_launcher.core.modes import check_mode, mode_trains
from lite_launcher.optimization import optimizer_factory  # noqa: F401  (gin: build_optimizer)
from lite_launcher.orbit.controller import Controller

@gin.configurable  # as TFM's: a gin file may swap `trainer_cls`
def create_trainer(params, task, train: bool, evaluate: bool, checkpoint_exporter=None,
                   trainer_cls=Trainer) -> Trainer:
    """Builds model and optimizer from the task and wraps them in a Trainer.

    Call inside `strategy.scope()`.
    """
    model = task.build_model()
    optimizer = task.create_optimizer(params.trainer.optimizer_config, params.runtime)
    return trainer_cls(params, task, model=model, optimizer=optimizer, train=train,
                       evaluate=evaluate, checkpoint_exporter=checkpoint_exporter)


@contextlib.contextmanager
def _closed_on_error(stack: contextlib.ExitStack):
    """Closes `stack` (telling its contexts the error) when the block raises."""
    try:
        yield
    except BaseException:
        stack.__exit__(*sys.exc_info())
        raise


class ExperimentRunner:
    """Builds the trainer, checkpoint manager and controller for one run; `run()` executes it.

    Subclass and override a `_build_*` / `_maybe_build_*` method to change one component (e.g.
    a custom checkpoint manager), as with TFM's OrbitExperimentRunner.
    """

    def __init__(self, distribution_strategy, task, mode: str, params, model_dir: str,
                 run_post_eval: bool = False, save_summary: bool = True,
                 train_actions: Optional[List] = None, eval_actions: Optional[List] = None,
                 trainer: Optional[Trainer] = None, controller_cls=Controller,
                 summary_manager=None, eval_summary_manager=None,
                 enable_async_checkpointing: bool = False,
                 continuous_eval_max_wait_s: Optional[float] = None,
                 write_run_config: bool = False):
        check_mode(mode)
        # The runtime trusts a validated config: checked here for callers that built it in code;
        # the driver's config (checked by parse_configuration, unchanged since) is not re-run.
        validate_once(params)
        if not model_dir:
            raise ConfigError("model_dir must be set (--model_dir=DIR).")
        self.strategy = distribution_strategy or tf.distribute.get_strategy()
        self._params = params
        self._model_dir = model_dir
        self._mode = mode
        self._run_post_eval = run_post_eval
        # lite-train's files: params.yaml before the mode runs, the gin config after it.
        self._write_run_config = write_run_config
        self._continuous_eval_max_wait_s = continuous_eval_max_wait_s
        # What the run holds until `run()` ends: model_dir's lock, a non-writer worker's
        # throwaway checkpoint directory. Closed if construction fails, or when a runner that
        # never ran is collected.
        self._run_scope = contextlib.ExitStack()
        weakref.finalize(self, self._run_scope.close)
        self._actions: List = []
        self._ran = False
        # One trainer per model_dir, and this is the one place that locks it (the driver and
        # a forked driver calling `run_experiment` both come through here): the chief of a
        # training mode locks it, in one context, before anything (checkpoint clean-up,
        # restore) reads or writes there; evaluators never lock. A run refused while being
        # built leaves no directory it created behind.
        self._owns_model_dir = mode_trains(mode) and strategy_lib.should_write(self.strategy)
        with _closed_on_error(self._run_scope):
            if self._owns_model_dir:
                self._run_scope.enter_context(model_dir_lock.locked(model_dir))
            # A trainer passed in (the forked-driver path) is used as is.
            evaluates = ("eval" in mode) or run_post_eval
            # Refused before training (these checks need the strategy).
            params.trainer.validate_for_strategy(
                parameter_servers=isinstance(self.strategy,
                                             tf.distribute.experimental.ParameterServerStrategy),
                evaluates=evaluates)
            self._trainer = trainer or self._build_trainer(
                task, train=mode_trains(mode), evaluate=evaluates)
            self._checkpoint_manager = self._maybe_build_checkpoint_manager()
            self._summary_manager = summary_manager
            self._eval_summary_manager = eval_summary_manager
            self._controller = self._build_controller(
                trainer=self._trainer if mode_trains(mode) else None,
                evaluator=self._trainer,
                save_summary=save_summary,
                train_actions=train_actions,
                eval_actions=eval_actions,
                controller_cls=controller_cls,
                enable_async_checkpointing=enable_async_checkpointing)

    @property
    def owns_model_dir(self) -> bool:
        """Whether this runner holds model_dir's lock: the chief of a training mode, which
        alone writes checkpoints, summaries and (`write_run_config`) params.yaml there."""
        return self._owns_model_dir

    @property
    def params(self):
        return self._params

    @property
    def model_dir(self) -> str:
        return self._model_dir

    @property
    def trainer(self) -> Trainer:
        return self._trainer

    @property
    def checkpoint_manager(self) -> Optional[tf.train.CheckpointManager]:
        return self._checkpoint_manager

    @property
    def controller(self) -> Controller:
        return self._controller

    def _build_trainer(self, task, train: bool, evaluate: bool) -> Trainer:
        with self.strategy.scope():
            return create_trainer(self._params, task, train=train, evaluate=evaluate,
                                  checkpoint_exporter=self._build_best_checkpoint_exporter())

    def _build_best_checkpoint_exporter(self):
        return exporter_lib.maybe_create_best_ckpt_exporter(self._params, self._model_dir)

    def _maybe_build_checkpoint_manager(self) -> Optional[tf.train.CheckpointManager]:
        if not self._trainer.checkpoint:
            return None
        options = dict(step_counter=self._trainer.global_step,
                       checkpoint_interval=self._params.trainer.checkpoint_interval,
                       init_fn=self._trainer.initialize)
        # Non-chief workers must take part in saving (variables sync on read) but their files
        # are thrown away; a training chief resumes from the newest checkpoint that reads.
        directory = self._run_scope.enter_context(
            checkpoints.worker_save_dir(self._model_dir, self.strategy))
        return checkpoints.build_manager(
            self._trainer.checkpoint, self._model_dir, directory,
            resume=mode_trains(self._mode), max_to_keep=self._params.trainer.max_to_keep,
            **options)

    def _summary_dirs(self, save_summary: bool):
        # Only the chief writes summaries: other workers' event files would duplicate its curves.
        if not save_summary or not strategy_lib.should_write(self.strategy):
            return None, None
        return (os.path.join(self._model_dir, "train"),
                os.path.join(self._model_dir, self._params.trainer.validation_summary_subdir))

    def _build_controller(self, trainer, evaluator, save_summary=True, train_actions=None,
                          eval_actions=None, controller_cls=Controller,
                          enable_async_checkpointing=False) -> Controller:
        train_actions = list(train_actions or [])
        eval_actions = list(eval_actions or [])
        if trainer is not None:
            train_actions += actions.get_train_actions(
                self._params, trainer, self._model_dir,
                checkpoint_manager=self._checkpoint_manager)
        if evaluator is not None:
            eval_actions += actions.get_eval_actions(self._params, evaluator, self._model_dir)
        self._actions = train_actions + eval_actions
        summary_dir, eval_summary_dir = self._summary_dirs(save_summary)
        return controller_cls(
            strategy=self.strategy,
            trainer=trainer,
            evaluator=evaluator,
            global_step=self._trainer.global_step,
            steps_per_loop=self._params.trainer.steps_per_loop,
            checkpoint_manager=self._checkpoint_manager,
            enable_async_checkpointing=enable_async_checkpointing,
            summary_dir=summary_dir,
            eval_summary_dir=eval_summary_dir,
            summary_interval=self._params.trainer.summary_interval if save_summary else None,
            train_actions=train_actions,
            eval_actions=eval_actions,
            summary_manager=self._summary_manager,
            eval_summary_manager=self._eval_summary_manager)

    def run(self) -> Tuple[Any, Mapping[str, Any]]:
        """Runs the mode; returns `(model, eval_logs)` (eval_logs only with a post-eval).

        A runner runs once: model_dir's lock, taken when it was built, goes when `run()` ends.
        """
        if self._ran:
            raise RuntimeError("ExperimentRunner.run() runs once (model_dir's lock went with "
                               "the first run); build a new runner to run again.")
        self._ran = True
        trainer_config = self._params.trainer
        logging.info("Running mode %s in %s", self._mode, self._model_dir)
        # Closed last in, first out: the actions (e.g. the preemption action restores the
        # previous SIGTERM handler), then the scratch directory, then the lock.
        self._run_scope.callback(self._close_actions)
        with self._run_scope:
            if self._write_run_config:
                logging.info("Final experiment parameters:\n%s", self._params.to_yaml())
            if self._owns_model_dir and self._write_run_config:
                # Once restore has passed: a run refused there leaves model_dir as it was.
                model_dir_files.serialize_config(self._params, self._model_dir)
            with self.strategy.scope():
                if self._mode in ("train", "train_and_post_eval"):
                    self._controller.train(steps=trainer_config.train_steps)
                elif self._mode == "train_and_eval":
                    self._controller.train_and_evaluate(
                        train_steps=trainer_config.train_steps,
                        eval_steps=trainer_config.validation_steps,
                        eval_interval=trainer_config.validation_interval)
                elif self._mode == "eval":
                    self._controller.evaluate(steps=trainer_config.validation_steps)
                elif self._mode == "continuous_eval":
                    self._run_continuous_eval()
            eval_logs = {}
            if self._run_post_eval or self._mode == "train_and_post_eval":
                with self.strategy.scope():
                    eval_logs = self._controller.evaluate(steps=trainer_config.validation_steps)
            if self._owns_model_dir and self._write_run_config:
                model_dir_files.save_gin_config(self._mode, self._model_dir)
            return self._trainer.model, eval_logs

    def _close_actions(self) -> None:
        for action in self._actions:
            close = getattr(action, "close", None)
            if callable(close):
                close()

    def _run_continuous_eval(self):
        trainer_config = self._params.trainer
        global_step = self._trainer.global_step

        def timeout_fn():
            return int(global_step.numpy()) >= trainer_config.train_steps

        self._controller.evaluate_continuously(
            steps=trainer_config.validation_steps,
            timeout=trainer_config.continuous_eval_timeout,
            timeout_fn=timeout_fn,
            stop_at_step=trainer_config.train_steps,
            evaluate_all=trainer_config.continuous_eval_all_checkpoints,
            max_wait=self._continuous_eval_max_wait_s)


@gin.configurable
def run_experiment(distribution_strategy, task, mode: str, params, model_dir: str,
                   run_post_eval: bool = False, save_summary: bool = True,
                   train_actions: Optional[List] = None, eval_actions: Optional[List] = None,
                   trainer: Optional[Trainer] = None, controller_cls=Controller,
                   summary_manager=None, eval_summary_manager=None,
                   enable_async_checkpointing: bool = False,
                   continuous_eval_max_wait_s: Optional[float] = None
                   ) -> Tuple[Any, Mapping[str, Any]]:
    """Runs one experiment in `mode` and returns `(model, eval_logs)`.

    Modes: train, train_and_post_eval, train_and_eval, eval, continuous_eval. `eval_logs` holds
    the post-evaluation metrics with `run_post_eval` / `train_and_post_eval`, else `{}`.
    Pass `trainer=` (built inside `strategy.scope()`) to run a custom Trainer subclass.
    `continuous_eval_max_wait_s`: in continuous_eval, stop after this many seconds without a
    new checkpoint even below `train_steps` (default: wait on, as TFM).
    """
    runner = ExperimentRunner(
        distribution_strategy=distribution_strategy, task=task, mode=mode, params=params,
        model_dir=model_dir, run_post_eval=run_post_eval, save_summary=save_summary,
        train_actions=train_actions, eval_actions=eval_actions, trainer=trainer,
        controller_cls=controller_cls, summary_manager=summary_manager,
        eval_summary_manager=eval_summary_manager,
        enable_async_checkpointing=enable_async_checkpointing,
        continuous_eval_max_wait_s=continuous_eval_max_wait_s)
    return runner.run()


# TFM's name of the runner `run_experiment` builds.
OrbitExperimentRunner = ExperimentRunner
