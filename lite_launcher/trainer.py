"""`Trainer`: TFM's base_trainer semantics (with Orbit's StandardTrainer/StandardEvaluator) on Keras 3.

The Trainer executes steps through overridable hooks and knows nothing about checkpoint
schedules, summaries or the outer loop (that is the Controller's job). The Controller only calls
`train(num_steps)` and `evaluate(num_steps)`.

Train:  train_loop_begin() -> loop of train_step(iterator) -> train_loop_end() -> logs
Eval:   eval_begin() -> loop of eval_step(iterator) [+ eval_reduce(state, outputs)]
        -> eval_end(aggregated_logs) -> logs
"""

from __future__ import annotations

import inspect
from typing import Any, Dict, Optional

import gin
import keras
import tensorflow as tf
from absl import logging

from lite_launcher import loops
from lite_launcher import optimization
from lite_launcher.base_config import ConfigError
from lite_launcher.task import Task


def create_global_step() -> tf.Variable:
    """The step counter: int64, aggregated by taking the first replica's value.

    A plain `tf.Variable` (not a Keras variable) because its `assign_add` is atomic, which
    keeps the count exact when parameter-server workers update it concurrently.
    """
    return tf.Variable(0, dtype=tf.int64, name="global_step", trainable=False,
                       aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)


# Framework code with no tensor-dependent Python control flow and no call into user code is
# not converted by AutoGraph: converting is the largest part of tracing the first step (each
# function's source is parsed and rewritten), and the traced graph is the same either way.
# Methods that call user hooks (train_step, eval_step, ...) stay converted, so that user code
# they call is converted as TFM's would be.
_not_converted = tf.autograph.experimental.do_not_convert


class ExactMean:
    """A running mean whose updates are atomic: exact under parameter servers.

    Keras 3 `Metric.update_state` is read-then-write (`assign(self + v)`): workers updating it
    concurrently lose updates. This one keeps `total` and `count` in plain `tf.Variable`s, whose
    `assign_add` is atomic. Under mirrored strategies they are sync-on-read (each replica adds
    to its own copy; reading sums them), like a Keras `Mean`. Not a `keras.metrics.Metric`.
    """

    def __init__(self, name: str, dtype=tf.float32):
        self.name = name
        self.dtype = tf.as_dtype(dtype)
        options = dict(dtype=self.dtype, trainable=False,
                       synchronization=tf.VariableSynchronization.ON_READ,
                       aggregation=tf.VariableAggregation.SUM)
        self.total = tf.Variable(0, name=f"{name}_total", **options)
        self.count = tf.Variable(0, name=f"{name}_count", **options)

    @property
    def variables(self):
        return [self.total, self.count]

    @_not_converted
    def update_state(self, values, sample_weight=None):
        """Adds `values` (any shape; optionally weighted) to the mean."""
        values = tf.cast(values, self.dtype)
        if sample_weight is None:
            total, count = tf.reduce_sum(values), tf.cast(tf.size(values), self.dtype)
        else:
            weights = tf.broadcast_to(tf.cast(sample_weight, self.dtype), tf.shape(values))
            total, count = tf.reduce_sum(values * weights), tf.reduce_sum(weights)
        self.total.assign_add(total)
        self.count.assign_add(count)

    @_not_converted
    def result(self) -> tf.Tensor:
        return tf.math.divide_no_nan(tf.convert_to_tensor(self.total),
                                     tf.convert_to_tensor(self.count))

    @_not_converted
    def reset_state(self):
        for variable in self.variables:
            variable.assign(tf.zeros([], self.dtype))


def _accepts_input_context(fn) -> bool:
    try:
        return "input_context" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def distribute_dataset(strategy: tf.distribute.Strategy, dataset_or_fn, *args, **kwargs):
    """Makes a distributed dataset from a dataset or a dataset function.

    A function that takes an `input_context` argument receives the strategy's
    `tf.distribute.InputContext` (one call per input pipeline); `input_options` in `kwargs` is
    passed to the strategy as `tf.distribute.InputOptions`.
    """
    strategy = strategy or tf.distribute.get_strategy()
    input_options = kwargs.pop("input_options", None)
    if isinstance(dataset_or_fn, tf.data.Dataset):
        return strategy.experimental_distribute_dataset(dataset_or_fn, input_options)
    if not callable(dataset_or_fn):
        raise ValueError(
            f"distribute_dataset needs a tf.data.Dataset or a function returning one, got "
            f"{type(dataset_or_fn).__name__}.")

    def dataset_fn(input_context):
        call_kwargs = dict(kwargs)
        if _accepts_input_context(dataset_or_fn):
            call_kwargs["input_context"] = input_context
        return dataset_or_fn(*args, **call_kwargs)

    return strategy.distribute_datasets_from_function(dataset_fn, input_options)


def after_inputs(step_fn):
    """Wraps a per-replica step so that every op in it waits for the inputs.

    Without it, ops that do not read the data (Keras 3 `Mean` counts a scalar as a constant 1,
    `global_step += 1`) still run in a traced step whose input fetch failed at the end of a
    finite dataset, and over-count by one.
    """

    def wrapped(inputs):
        tensors = [t for t in tf.nest.flatten(inputs, expand_composites=True) if tf.is_tensor(t)]
        with tf.control_dependencies(tensors):
            return step_fn(inputs)

    return wrapped


def split_steps(num_steps: int, parts: int):
    """`num_steps` split into at most `parts` positive chunks differing by at most one."""
    parts = max(1, min(parts, num_steps))
    base, extra = divmod(num_steps, parts)
    return [base + 1 if i < extra else base for i in range(parts)] if num_steps > 0 else []


def _num_workers(strategy) -> int:
    """The worker tasks of a parameter-server strategy's cluster (1 when unknown)."""
    # ParameterServerStrategy keeps its resolver private (TF 2.21: `cluster_resolver` is None).
    resolver = strategy.cluster_resolver or getattr(strategy, "_cluster_resolver", None)
    if resolver is None:
        return 1
    return max(1, resolver.cluster_spec().num_tasks("worker"))


def _non_empty(inputs) -> tf.Tensor:
    """0.0 when a replica's batch is empty, else 1.0 (also when it holds no tensors)."""
    tensors = [t for t in tf.nest.flatten(inputs) if tf.is_tensor(t)]
    if not tensors:
        return tf.constant(1.0)
    return tf.cast(tf.size(tensors[0]) > 0, tf.float32)


def _is_async(strategy) -> bool:
    return isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy)


@gin.configurable  # as TFM's: a gin file may set its arguments
class Trainer:
    """Runs a `Task`'s train and validation steps; TFM's `base_trainer.Trainer` on Keras 3.

    Build it inside `strategy.scope()`: the strategy is taken from
    `tf.distribute.get_strategy()`. Override any hook (`train_step`, `eval_step`,
    `next_train_inputs`, `next_eval_inputs`, `train_loop_begin`, `train_loop_end`,
    `eval_begin`, `eval_end`, `eval_reduce`) to customise one part.

    Args:
      config: an `ExperimentConfig` (needs `trainer` and `task`).
      task: the `Task`.
      model: the `keras.Model` built by `task.build_model()`.
      optimizer: a Keras optimizer (or a dict/list of them for multi-optimizer subclasses).
      train: whether this trainer trains (builds the train dataset when not given).
      evaluate: whether it evaluates (builds the validation dataset when not given).
      train_dataset / validation_dataset: datasets or distributed datasets to use instead of
        `task.build_inputs(config.task.train_data / validation_data)`.
      checkpoint_exporter: a `BestCheckpointExporter` called at the end of each evaluation.
    """

    def __init__(self, config, task, model, optimizer, train: bool = True,
                 evaluate: bool = True, train_dataset=None, validation_dataset=None,
                 checkpoint_exporter=None):
        self._strategy = tf.distribute.get_strategy()
        self._is_default_strategy = not tf.distribute.has_strategy()
        self._validate_params(config, check_train_data=train_dataset is None and train,
                              check_validation_data=validation_dataset is None and evaluate)
        self._config = config
        self._task = task
        self._model = model
        self._optimizer = optimizer
        self._checkpoint_exporter = checkpoint_exporter
        self._runtime_options = tf.distribute.RunOptions()
        trainer_config = config.trainer

        self.init_async()
        self._global_step = create_global_step()
        self._build_optimizer_slots()

        checkpoint_items = dict(getattr(model, "checkpoint_items", None) or {})
        self._checkpoint = tf.train.Checkpoint(
            global_step=self._global_step, model=model, optimizer=optimizer, **checkpoint_items)

        # Exact means: parameter-server workers update them concurrently.
        self._train_loss = ExactMean("training_loss")
        self._validation_loss = ExactMean("validation_loss")
        model_metrics = list(getattr(model, "metrics", None) or [])
        self._train_metrics = list(task.build_metrics(training=True)) + model_metrics
        self._validation_metrics = list(task.build_metrics(training=False)) + model_metrics

        self._train_options = dict(use_tf_function=trainer_config.train_tf_function,
                                   use_tf_while_loop=trainer_config.train_tf_while_loop)
        self._eval_options = dict(use_tf_function=trainer_config.eval_tf_function,
                                  use_tf_while_loop=trainer_config.eval_tf_while_loop)
        if trainer_config.train_tf_while_loop and not trainer_config.train_tf_function:
            raise ConfigError(
                "trainer.train_tf_while_loop=true needs trainer.train_tf_function=true.")
        if trainer_config.eval_tf_while_loop and not trainer_config.eval_tf_function:
            raise ConfigError(
                "trainer.eval_tf_while_loop=true needs trainer.eval_tf_function=true.")
        if self._is_async and not (trainer_config.train_tf_function
                                   and trainer_config.eval_tf_function):
            # ClusterCoordinator.schedule only runs tf.functions on the workers.
            raise ConfigError(
                "The parameter_server strategy needs trainer.train_tf_function=true and "
                "trainer.eval_tf_function=true.")

        self._train_loop_fn = None
        # Calls the train loop function (through its traced graph once traced); and whether
        # that function also runs `_loop_end_logs` (see `_fuses_loop_end`).
        self._train_loop_call = None
        self._train_loop_fused = False
        self._eval_loop_fn = None
        self._eval_loop_has_state = None
        self._train_iter = None
        self._eval_iter = None
        self._train_loop_end_fn = None
        self._xla_train_step = None

        if train and train_dataset is None:
            train_dataset = self.distribute_dataset(task.build_inputs, config.task.train_data)
        if evaluate and validation_dataset is None:
            validation_dataset = self.distribute_dataset(task.build_inputs,
                                                         config.task.validation_data)
        self._train_dataset = train_dataset
        self._eval_dataset = validation_dataset

        if getattr(trainer_config, "checkpoint_train_iterator", False) and train_dataset is not None:
            if self._is_async:
                raise ConfigError(
                    "trainer.checkpoint_train_iterator is not supported with the "
                    "parameter_server strategy (per-worker iterators cannot be saved).")
            # The iterator must exist before the checkpoint is restored, so it is made here.
            self._train_iter = tf.nest.map_structure(iter, train_dataset)
            if not all(isinstance(iterator, tf.__internal__.tracking.Trackable)
                       for iterator in tf.nest.flatten(self._train_iter)):
                # tf.distribute's iterators (any strategy but the default) cannot be saved.
                raise ConfigError(
                    f"trainer.checkpoint_train_iterator needs a tf.data iterator that can be "
                    f"saved, but the {type(self._strategy).__name__} input iterator cannot: "
                    f"set runtime.distribution_strategy to 'off' or "
                    f"trainer.checkpoint_train_iterator to false.")
            self._checkpoint = tf.train.Checkpoint(
                global_step=self._global_step, model=model, optimizer=optimizer,
                train_iterator=self._train_iter, **checkpoint_items)

    # ------------------------------------------------------------------ setup
    @staticmethod
    def _validate_params(config, check_train_data: bool, check_validation_data: bool):
        for attribute in ("trainer", "task"):
            if getattr(config, attribute, None) is None:
                raise ConfigError(
                    f"The trainer requires the configuration to have a `{attribute}` section; "
                    f"got {type(config).__name__} without it.")
        if check_train_data and getattr(config.task, "train_data", None) is None:
            raise ConfigError(
                "The trainer needs `task.train_data` to build the training dataset (or pass "
                "train_dataset=, or train=False).")
        if check_validation_data and getattr(config.task, "validation_data", None) is None:
            raise ConfigError(
                "The trainer needs `task.validation_data` to build the validation dataset (or "
                "pass validation_dataset=, or evaluate=False).")

    def _build_optimizer_slots(self):
        # Under MirroredStrategy, slot variables must be created eagerly in the strategy scope
        # before the first tf.function step (see KERAS3_NOTES.md).
        trainable = self._model.trainable_variables if self._model is not None else []
        if not trainable:
            return
        for optimizer in self.optimizers.values():
            if isinstance(optimizer, keras.optimizers.Optimizer) and not optimizer.built:
                optimizer.build(trainable)
            # ema.trainable_weights_only: false also averages BatchNorm statistics.
            optimization.average_non_trainable_variables(optimizer,
                                                         self._model.non_trainable_variables)

    # -------------------------------------------------------------- async (PS)
    def init_async(self):
        """Creates a `ClusterCoordinator` when the strategy is a ParameterServerStrategy."""
        self._is_async = _is_async(self._strategy)
        self._coordinator = None
        if self._is_async:
            self._coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(
                self._strategy)

    def coordinator_for_async(self):
        """The `ClusterCoordinator` of an async (parameter-server) run."""
        if not self._coordinator:
            raise ValueError("No coordinator: this trainer does not run a ParameterServerStrategy.")
        return self._coordinator

    def join(self):
        """Waits for all scheduled steps of an async run; a no-op otherwise."""
        if self._is_async:
            self._coordinator.join()

    def distribute_dataset(self, dataset_or_fn, *args, **kwargs):
        """A distributed dataset for this trainer's strategy (per-worker under PS)."""
        if self._is_async:
            def per_worker_dataset_fn():
                return distribute_dataset(self._strategy, dataset_or_fn, *args, **kwargs)
            return self._coordinator.create_per_worker_dataset(tf.function(per_worker_dataset_fn))
        return distribute_dataset(self._strategy, dataset_or_fn, *args, **kwargs)

    # -------------------------------------------------------------- properties
    @property
    def strategy(self):
        return self._strategy

    @property
    def config(self):
        return self._config

    @property
    def task(self):
        return self._task

    @property
    def model(self):
        return self._model

    @property
    def optimizer(self):
        return self._optimizer

    @property
    def optimizers(self) -> Dict[str, Any]:
        """The optimizer(s) by name: `{"": opt}` for one, the dict/list entries for several."""
        opt = self._optimizer
        if opt is None:
            return {}
        if isinstance(opt, dict):
            return dict(opt)
        if isinstance(opt, (list, tuple)):
            return {getattr(o, "name", None) or f"optimizer_{i}": o for i, o in enumerate(opt)}
        return {"": opt}

    @property
    def global_step(self):
        return self._global_step

    @property
    def checkpoint(self):
        return self._checkpoint

    @property
    def checkpoint_exporter(self):
        return self._checkpoint_exporter

    @property
    def train_loss(self):
        return self._train_loss

    @property
    def validation_loss(self):
        return self._validation_loss

    @property
    def train_metrics(self):
        return self._train_metrics

    @property
    def validation_metrics(self):
        return self._validation_metrics

    @property
    def train_dataset(self):
        return self._train_dataset

    @train_dataset.setter
    def train_dataset(self, dataset):
        """Replaces the training dataset; the old iterator (and its position) is dropped."""
        self._train_dataset = dataset
        self._train_iter = None
        if self._train_loop_call is not None:
            self._train_loop_call.reset()

    @property
    def eval_dataset(self):
        return self._eval_dataset

    @eval_dataset.setter
    def eval_dataset(self, dataset):
        """Replaces the evaluation dataset."""
        self._eval_dataset = dataset
        self._eval_iter = None

    validation_dataset = eval_dataset

    def initialize(self):
        """Called by the checkpoint manager when model_dir has no checkpoint."""
        self._task.initialize(self._model)

    # ------------------------------------------------------------------- EMA
    def has_ema(self) -> bool:
        opt = self._optimizer
        return isinstance(opt, keras.optimizers.Optimizer) and optimization.has_ema(opt)

    def swap_weights(self):
        """Swaps model weights with their moving averages (call twice to swap back).

        Exact (plain `assign`s, cross-replica context), so two swaps restore bit for bit.
        """
        if not self.has_ema():
            raise ValueError("swap_weights() needs an optimizer with EMA (optimizer_config.ema).")
        with self._strategy.scope():
            optimization.swap_ema_weights(self._optimizer, self._model.trainable_variables)

    # ----------------------------------------------------------------- train
    def create_train_loop_fn(self):
        """Builds `loop_fn(iterator, num_steps)` from `train_step` and the trainer options.

        Under parameter servers `loop_fn` schedules the steps on the `ClusterCoordinator`, split
        into one closure per worker (`split_steps`), and returns at once; `join()` waits.
        """
        loop_fn = loops.make_train_loop(self.train_step, **self._train_options)
        if self._is_async:
            num_workers = _num_workers(self._strategy)
            use_tensor = self._train_options["use_tf_while_loop"]

            def async_loop_fn(iterator, num_steps):
                # The loop's steps are split into one closure per worker, so that every worker
                # trains concurrently (one closure per loop, as in TFM, keeps all but one idle).
                for chunk in split_steps(int(num_steps), num_workers):
                    steps = tf.constant(chunk, tf.int32) if use_tensor else chunk
                    self._coordinator.schedule(loop_fn, args=(iterator, steps))
            return async_loop_fn
        return loop_fn

    def _fuses_loop_end(self) -> bool:
        """Whether an inner loop and the base `train_loop_end` run as one graph call.

        With a tf.while_loop (not under parameter servers) the metric reads and resets of
        `train_loop_end` follow the loop in the same `tf.function`, which saves one function
        call per inner loop and returns the same logs. Not done when a subclass (or instance)
        overrides `create_train_loop_fn` or `train_loop_end`: those then run as written.
        """
        cls = type(self)
        return (self._train_options["use_tf_while_loop"] and not self._is_async
                and cls.create_train_loop_fn is Trainer.create_train_loop_fn
                and cls.train_loop_end is Trainer.train_loop_end
                and "create_train_loop_fn" not in vars(self)
                and "train_loop_end" not in vars(self))

    def train(self, num_steps):
        """Runs `num_steps` training steps and returns `train_loop_end()`'s logs.

        `num_steps` may be an int or a scalar int32 tensor (a tensor never retraces).
        """
        self.train_loop_begin()
        if self._train_loop_fn is None:
            self._train_loop_fused = self._fuses_loop_end()
            if self._train_loop_fused:
                self._train_loop_fn = loops.make_train_loop(
                    self.train_step, **self._train_options, end_fn=self._loop_end_logs)
            else:
                self._train_loop_fn = self.create_train_loop_fn()
            self._train_loop_call = loops.DirectCall(self._train_loop_fn)
        if self._train_iter is None:
            self._train_iter = tf.nest.map_structure(iter, self.train_dataset)
        if self._train_options["use_tf_while_loop"] and not isinstance(num_steps, tf.Tensor):
            num_steps = tf.constant(num_steps, dtype=tf.int32)
        logs = self._train_loop_call(self._train_iter, num_steps)
        if self._train_loop_fused:
            return logs
        return self.train_loop_end()

    def train_loop_begin(self):
        """Called eagerly before each inner train loop. The base does nothing."""

    @_not_converted
    def next_train_inputs(self, iterator):
        """Fetches the next training inputs (host side; traced inside the loop function)."""
        return next(iterator)

    @_not_converted
    def _task_train_step(self):
        """The task's train step, XLA-compiled when `runtime.enable_xla` is set.

        Under the default strategy the whole `task.train_step` is compiled. Under any other
        strategy the update is a cross-replica synchronisation point that XLA cannot compile
        (a `merge_call` RuntimeError), so only `task.compute_gradients` is compiled and
        `task.apply_update` runs outside it. A task that overrides `train_step` itself then
        runs without XLA (a warning says so); override `compute_gradients` / `apply_update`
        instead to keep XLA. Under parameter servers nothing is compiled (with a warning): XLA
        cannot read variables that live on another task.
        """
        task = self._task
        if not getattr(self._config.runtime, "enable_xla", False):
            return task.train_step
        if self._xla_train_step is not None:
            return self._xla_train_step
        if self._is_async:
            logging.warning("runtime.enable_xla has no effect with the parameter_server "
                            "strategy: XLA cannot access variables on the ps tasks.")
            self._xla_train_step = task.train_step
        elif self._is_default_strategy:
            # Unlike TFM (GPU only), XLA also applies on CPU so the path can be tested.
            self._xla_train_step = tf.function(task.train_step, jit_compile=True)
        elif type(task).train_step is not Task.train_step:
            logging.warning(
                "runtime.enable_xla: %s overrides Task.train_step, which cannot be XLA-compiled "
                "under %s; it runs without XLA. Override compute_gradients / apply_update "
                "instead to compile the forward and backward pass.", type(task).__name__,
                type(self._strategy).__name__)
            self._xla_train_step = task.train_step
        else:
            compute_gradients = tf.function(task.compute_gradients, jit_compile=True)

            def split_train_step(inputs, model, optimizer, metrics=None):
                grads, loss, outputs = compute_gradients(inputs, model, optimizer)
                return task.apply_update(inputs, grads, loss, outputs, model=model,
                                         optimizer=optimizer, metrics=metrics)

            self._xla_train_step = split_train_step
        return self._xla_train_step

    def train_step(self, iterator):
        """One training step: next inputs, then the task step on each replica.

        Runs in cross-replica context (traced when `train_tf_function`). The per-replica step
        updates `train_loss` and increments `global_step`.
        """
        task_train_step = self._task_train_step()

        def step_fn(inputs):
            logs = task_train_step(inputs, model=self._model, optimizer=self._optimizer,
                                   metrics=self._train_metrics)
            self._train_loss.update_state(logs[self._task.loss])
            self._global_step.assign_add(1)

        inputs = self.next_train_inputs(iterator)
        self._strategy.run(after_inputs(step_fn), args=(inputs,), options=self._runtime_options)

    def _loop_end_logs(self):
        logs = {}
        for metric in self._train_metrics + [self._train_loss]:
            logs[metric.name] = metric.result()
            metric.reset_state()
        for name, optimizer in self.optimizers.items():
            key = f"{name}_learning_rate" if name else "learning_rate"
            logs[key] = optimization.learning_rate_value(optimizer)
        return logs

    def train_loop_end(self) -> Dict[str, Any]:
        """Called eagerly after each inner loop: metric results (then reset) and learning rate.

        Returns every train metric, `training_loss` and `learning_rate` (one
        `<name>_learning_rate` per optimizer when there are several).
        """
        self.join()
        if self._is_async or not self._train_options["use_tf_function"]:
            return self._loop_end_logs()
        if self._train_loop_end_fn is None:
            # One graph call reads and resets every metric: far cheaper than one eager op each.
            self._train_loop_end_fn = tf.function(self._loop_end_logs)
        return self._train_loop_end_fn()

    # ------------------------------------------------------------------ eval
    def create_eval_loop_fn(self, has_state: bool):
        """Builds `loop_fn(iterator, num_steps, state=None, reduce_fn=None)` for evaluation.

        Under parameter servers the whole evaluation is one `tf.while_loop` in a `tf.function`
        (whatever `eval_tf_while_loop` says: the coordinator schedules only `tf.function`s),
        scheduled as one closure, so that it reads the validation set from the top as one
        device would; `eval_end` joins it and reads the metrics on the ps tasks. As in TFM, a
        stateful evaluation (`eval_begin` returning a state) is not supported there.
        """
        if self._is_async:
            if has_state:
                raise ValueError(
                    "A stateful evaluation (eval_begin returning a state) is not supported "
                    "with the parameter_server strategy: keep eval state in metrics.")
            if (type(self._task).aggregate_logs is not Task.aggregate_logs
                    or type(self).eval_reduce is not Trainer.eval_reduce):
                logging.warning(
                    "With the parameter_server strategy the evaluation runs on a worker as one "
                    "tf.while_loop: eval_reduce / %s.aggregate_logs are not called (as in TFM).",
                    type(self._task).__name__)
            loop_fn = tf.function(loops.while_loop(self.eval_step))

            def async_loop_fn(iterator, num_steps, state=None, reduce_fn=None):
                del reduce_fn
                self._coordinator.schedule(loop_fn, args=(iterator, num_steps))
                return state
            return async_loop_fn
        return loops.make_eval_loop(self.eval_step, has_state=has_state, **self._eval_options)

    def _eval_loop_in_graph(self) -> bool:
        """Whether the eval loop is a tf.while_loop (fixed step count, tensor `num_steps`)."""
        return self._eval_options["use_tf_while_loop"] or self._is_async

    def evaluate(self, num_steps):
        """Runs `num_steps` eval steps (-1: until the dataset ends); returns `eval_end()`'s logs.

        The eval iterator is made anew for each evaluation, so each one starts at the top of
        the validation set.
        """
        if self._eval_loop_in_graph() and int(num_steps) == -1:
            if self._is_async:
                raise ValueError(
                    "evaluate(-1) (until the dataset ends) is not supported with the "
                    "parameter_server strategy: set trainer.validation_steps > 0.")
            raise ValueError(
                "evaluate(-1) (until the dataset ends) is not supported with "
                "eval_tf_while_loop=True: set validation_steps > 0 or eval_tf_while_loop=False.")
        state = self.eval_begin()
        has_state = state is not None
        if self._eval_loop_fn is None or self._eval_loop_has_state != has_state:
            self._eval_loop_fn = self.create_eval_loop_fn(has_state)
            self._eval_loop_has_state = has_state
        # The only reference to this evaluation's iterator, so it can be handed over below.
        eval_iters = [tf.nest.map_structure(iter, self.eval_dataset)]
        if self._eval_loop_in_graph() and not isinstance(num_steps, tf.Tensor):
            num_steps = tf.constant(num_steps, dtype=tf.int32)
        if self._eval_loop_in_graph() and not has_state:
            self._eval_loop_fn(eval_iters[0], num_steps)
        else:
            state = self._eval_loop_fn(eval_iters[0], num_steps, state=state,
                                       reduce_fn=self.eval_reduce)
        if not self._is_async:
            # Spent: destroyed on a background thread (see loops.release_in_background).
            loops.release_in_background(eval_iters)
        if state is None:
            return self.eval_end()
        return self.eval_end(state)

    def eval_begin(self):
        """Resets validation metrics and swaps in EMA weights. Returns the initial reduce state."""
        for metric in self._validation_metrics + [self._validation_loss]:
            metric.reset_state()
        if self.has_ema():
            self.swap_weights()
        return None

    @_not_converted
    def next_eval_inputs(self, iterator):
        """Returns `(inputs, passthrough_logs)`.

        `passthrough_logs` stay on the host and are merged into the step outputs handed to
        `eval_reduce` / `task.aggregate_logs` (model outputs win on a key clash).
        """
        return next(iterator), {}

    def eval_step(self, iterator):
        """One eval step; returns the task's logs (per-replica values as tuples) + passthrough."""

        def step_fn(inputs):
            logs = self._task.validation_step(inputs, model=self._model,
                                              metrics=self._validation_metrics)
            if self._task.loss in logs:
                # The last batch of a finite dataset can leave a replica with no examples:
                # its loss is not a sample of the validation loss.
                self._validation_loss.update_state(logs[self._task.loss],
                                                   sample_weight=_non_empty(inputs))
            return logs

        inputs, passthrough_logs = self.next_eval_inputs(iterator)
        outputs = self._strategy.run(after_inputs(step_fn), args=(inputs,))
        logs = tf.nest.map_structure(self._strategy.experimental_local_results, outputs)
        clash = set(logs) & set(passthrough_logs)
        if clash:
            logging.warning("Passthrough log keys %s clash with model log keys; the model's "
                            "values are kept.", sorted(clash))
        return {**passthrough_logs, **logs}

    def eval_reduce(self, state=None, step_outputs=None):
        """Folds one step's outputs into the state via `task.aggregate_logs`."""
        return self._task.aggregate_logs(state, step_outputs)

    def eval_end(self, aggregated_logs=None) -> Dict[str, Any]:
        """Validation metrics, `validation_loss` (when reported), task-reduced logs, best export.

        The best-checkpoint export happens before EMA weights are swapped back, so the exported
        checkpoint holds the averaged weights that were evaluated.
        """
        self.join()
        logs = {}
        for metric in self._validation_metrics:
            logs[metric.name] = metric.result()
        if int(self._validation_loss.count.numpy()) != 0:
            logs[self._validation_loss.name] = self._validation_loss.result()
        else:
            logging.info("The task did not report a validation loss.")
        if aggregated_logs:
            logs.update(self._task.reduce_aggregated_logs(aggregated_logs,
                                                          global_step=self._global_step))
        if self._checkpoint_exporter:
            self._checkpoint_exporter.maybe_export_checkpoint(
                self._checkpoint, logs, int(self._global_step.numpy()))
            metric_name = self._config.trainer.best_checkpoint_eval_metric
            logs["best_" + metric_name] = self._checkpoint_exporter.best_ckpt_logs[metric_name]
        if self.has_ema():
            self.swap_weights()
        return logs
