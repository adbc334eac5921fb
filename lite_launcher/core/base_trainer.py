"""`Trainer`: what one train / eval step is, as TFM's base_trainer.Trainer, on Keras 3.

Its one job: the trainer's state (model, optimizer, global step, metrics, checkpoint), the
overridable hooks, and the two step policies (`xla_train_step`: what XLA compiles;
`fuses_train_loop_end`: whether the loop end joins the loop's graph call). How `num_steps`
steps run (loop shape, graph calls, iterators, parameter-server scheduling) is `loops.py`'s,
which repeats the step it is handed; checkpoint schedules, summaries and the outer loop are the
Controller's, which calls only `train(num_steps)` and `evaluate(num_steps)`.

Train:  train_loop_begin() -> TrainLoop.run: train_step(iterator) x num_steps
        -> train_loop_end() -> logs   (train_step -> task.train_step -> optimizer update)
Eval:   eval_begin() -> EvalLoop.run: eval_step(iterator) [+ eval_reduce(state, outputs)]
        x num_steps -> eval_end(aggregated_logs) -> logs
"""

from __future__ import annotations

import inspect
from typing import Any, Dict, Optional, Tuple

import gin
import keras
import tensorflow as tf
from absl import logging

from lite_launcher import optimization
from lite_launcher.common import autograph_policy
from lite_launcher.core.base_task import Task
from lite_launcher.core.config_definitions import validate_for_trainer
from lite_launcher.orbit import loops


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
        # After the values: a constant count (a scalar's size) would otherwise be added in a
        # traced step whose input fetch failed at the end of the data, as happens to TFM's
        # eval_step ported as written (it has no `after_inputs`).
        with tf.control_dependencies([total]):
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

    reset_states = reset_state  # TFM's (tf_keras) name, called by trainers ported from TFM


def with_tfm_reset_states(metric):
    """Gives a Keras 3 metric TFM's `reset_states()` (tf_keras's name of `reset_state()`), on
    this instance only, so trainer code ported from TFM runs; returns the metric."""
    if not hasattr(metric, "reset_states") and hasattr(metric, "reset_state"):
        metric.reset_states = metric.reset_state
    return metric


def model_defined_metrics(model) -> list:
    """`model.metrics` without what `model.compile` adds (its `loss` tracker, compile metrics
    and per-output loss trackers): only the metrics the model itself defines.

    A model compiled with its optimizer (as TFM's ranking driver does) would otherwise bring
    a `loss` of Keras's own into the trainer's logs, which no step updates. Keras 3 has no
    public accessor for the compile trackers, so they are read from its attributes.
    """
    metrics = list(getattr(model, "metrics", None) or [])
    if not getattr(model, "compiled", False):
        return metrics
    compiled = [getattr(model, "_loss_tracker", None), getattr(model, "_compile_metrics", None)]
    compiled += list(getattr(getattr(model, "_compile_loss", None), "metrics", None) or [])
    compiled_ids = {id(m) for m in compiled if m is not None}
    return [m for m in metrics if id(m) not in compiled_ids]


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


def _non_empty(inputs) -> tf.Tensor:
    """0.0 when a replica's batch is empty, else 1.0 (also when it holds no tensors)."""
    tensors = [t for t in tf.nest.flatten(inputs) if tf.is_tensor(t)]
    if not tensors:
        return tf.constant(1.0)
    return tf.cast(tf.size(tensors[0]) > 0, tf.float32)


def _is_async(strategy) -> bool:
    return isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy)


def _convnet_on_cpu_only(model) -> bool:
    """A model with 2-D/3-D convolution kernels (rank >= 4) and no GPU or TPU to run it on."""
    if model is None or tf.config.list_logical_devices("GPU") or \
            tf.config.list_logical_devices("TPU"):
        return False
    return any(len(v.shape) >= 4 for v in model.trainable_variables)


def xla_train_step(task: Task, strategy: tf.distribute.Strategy, *, enable_xla: bool,
                   default_strategy: bool, model=None):
    """The function a train step calls in place of `task.train_step`: the one XLA choice.

    Chosen once, when the Trainer is built.

    | strategy (enable_xla=true)      | compiled with XLA                                |
    |---------------------------------|--------------------------------------------------|
    | any, a convnet, CPU only        | nothing (warning): XLA:CPU convolutions measured |
    |                                 | 4-6x slower than TF's oneDNN kernels             |
    | default (no strategy)           | the whole `task.train_step`                      |
    | mirrored / multi-worker         | `task.compute_gradients` (forward + backward);   |
    |                                 | `task.apply_update` runs outside it              |
    |   ... task overrides train_step | nothing (warning): it cannot be split            |
    | parameter_server                | nothing (warning)                                |

    With `enable_xla` false nothing is compiled (`task.train_step` itself). Why: under a
    distribution strategy the update is a cross-replica synchronisation point (`merge_call`)
    that XLA cannot compile, so only the gradients are; XLA cannot read variables that live on
    parameter-server tasks. Unlike TFM (GPU only), XLA also applies on CPU, so it is testable.
    """
    if not enable_xla:
        return task.train_step
    if _is_async(strategy):
        logging.warning("runtime.enable_xla has no effect with the parameter_server "
                        "strategy: XLA cannot access variables on the ps tasks.")
        return task.train_step
    if _convnet_on_cpu_only(model):
        # benchmarks/README.md: ResNet-18 / ResNet-50 / MobileNetV2 training steps under
        # XLA:CPU (Eigen convolutions) against TF's own (oneDNN) kernels. The same holds
        # under a one-device or mirrored strategy on CPUs (TFM's tutorials use one).
        logging.warning("runtime.enable_xla: not compiling %s's convolutions for the CPU "
                        "(no GPU or TPU): XLA:CPU trains convnets several times slower "
                        "than TensorFlow's own kernels.", getattr(model, "name", "the model"))
        return task.train_step
    if default_strategy:
        return tf.function(autograph_policy.for_tracing(task.train_step), jit_compile=True)
    if type(task).train_step is not Task.train_step:
        logging.warning(
            "runtime.enable_xla: %s overrides Task.train_step, which cannot be XLA-compiled "
            "under %s; it runs without XLA. Override compute_gradients / apply_update "
            "instead to compile the forward and backward pass.", type(task).__name__,
            type(strategy).__name__)
        return task.train_step
    compute_gradients = tf.function(autograph_policy.for_tracing(task.compute_gradients),
                                    jit_compile=True)

    def split_train_step(inputs, model, optimizer, metrics=None):
        grads, loss, outputs = compute_gradients(inputs, model, optimizer)
        return task.apply_update(inputs, grads, loss, outputs, model=model,
                                 optimizer=optimizer, metrics=metrics)

    return split_train_step


def fuses_train_loop_end(trainer: "Trainer") -> bool:
    """Whether the loop end runs in the inner loop's graph call: the one place it is decided.

    Fused means the metric reads and resets of the base `train_loop_end` (and the learning
    rate) follow the `tf.while_loop` in the same `tf.function`, which saves one function call
    per inner loop and returns the same logs; `Trainer.train` then returns those logs and does
    not call `train_loop_end`. Decided on the first `train()`, after any hook set on the
    instance. The rule:

    | train_tf_while_loop | strategy         | train_loop_end / create_train_loop_fn | fused |
    |---------------------|------------------|----------------------------------------|-------|
    | false               | any              | any                                    | no    |
    | true                | parameter_server | any                                    | no    |
    | true                | other            | Trainer's own                          | yes   |
    | true                | other            | overridden (class or instance)         | no    |

    Why not the others: a Python loop has no graph to fuse into; under parameter servers the
    loop runs on a worker and the metrics are read on the chief after `join()`. An overriding
    `train_loop_end` is a hook documented to run eagerly after each loop: it may read (and
    reset) the metrics itself, which a fused end would already have reset, and any Python in
    it (logging, `.numpy()`, counters) would run once at trace time if it were traced. An
    overriding `create_train_loop_fn` builds its own loop, run as written.
    """
    cls = type(trainer)
    return (trainer.config.trainer.train_tf_while_loop and not trainer._is_async
            and cls.create_train_loop_fn is Trainer.create_train_loop_fn
            and cls.train_loop_end is Trainer.train_loop_end
            and "create_train_loop_fn" not in vars(trainer)
            and "train_loop_end" not in vars(trainer))


def build_metrics(task, model) -> Tuple[list, list]:
    """(train metrics, validation metrics): the task's and the model's own, with TFM's
    `reset_states` name."""
    model_metrics = model_defined_metrics(model)
    return tuple([with_tfm_reset_states(m) for m in
                  list(task.build_metrics(training=training)) + model_metrics]
                 for training in (True, False))


def build_checkpoint(global_step, model, optimizer, train_loop, strategy, *,
                     save_iterator: bool) -> tf.train.Checkpoint:
    """The trainer's checkpoint: step, model, optimizer, the model's `checkpoint_items`, and
    with `save_iterator` the train iterator (made now: it must exist before a restore)."""
    items = dict(getattr(model, "checkpoint_items", None) or {})
    if save_iterator:
        items["train_iterator"] = train_loop.make_saveable_iterator(type(strategy).__name__)
    return tf.train.Checkpoint(global_step=global_step, model=model, optimizer=optimizer,
                               **items)


def metric_results(metrics, reset: bool = False) -> Dict[str, Any]:
    """{name: result} of `metrics`, each reset after its read with `reset`."""
    logs = {}
    for metric in metrics:
        logs[metric.name] = metric.result()
        if reset:
            metric.reset_state()
    return logs


def merge_passthrough(passthrough_logs, logs) -> Dict[str, Any]:
    """An eval step's logs with the host-side passthrough logs; the model's win a clash."""
    clash = set(logs) & set(passthrough_logs)
    if clash:
        logging.warning("Passthrough log keys %s clash with model log keys; the model's "
                        "values are kept.", sorted(clash))
    return {**passthrough_logs, **logs}


class _AsyncTrainer:
    """The parameter-server part of the Trainer, as TFM's `_AsyncTrainer`: the coordinator."""

    def init_async(self):
        """Creates a `ClusterCoordinator` when the strategy is a ParameterServerStrategy."""
        self._is_async = _is_async(self._strategy)
        self._coordinator = None
        if self._is_async:
            self._coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(
                self._strategy)

    def coordinator_for_async(self):
        """The `ClusterCoordinator` of an async (parameter-server) run (TFM's API)."""
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


@gin.configurable  # as TFM's: a gin file may set its arguments
class Trainer(_AsyncTrainer):
    """Runs a `Task`'s train and validation steps; TFM's `base_trainer.Trainer` on Keras 3.

    Build it inside `strategy.scope()`: the strategy is taken from
    `tf.distribute.get_strategy()`. Override any hook (`train_step`, `eval_step`,
    `next_train_inputs`, `next_eval_inputs`, `train_loop_begin`, `train_loop_end`,
    `eval_begin`, `eval_end`, `eval_reduce`, `create_train_loop_fn`, `create_eval_loop_fn`)
    to customise one part. How the steps of one call run (loop shape, graph calls, iterators,
    parameter-server scheduling) is `loops.py`'s job.

    Args:
      config: an `ExperimentConfig` (needs `trainer` and `task`).
      task: the `Task`.
      model: the `keras.Model` built by `task.build_model()`.
      optimizer: a Keras optimizer; for several, a `keras.optimizers.MultiOptimizer` (each
        inner optimizer is checkpointed and logs its own learning rate). A dict/list of
        optimizers is checkpointed and logged too, but `Task.apply_update` cannot know which
        variables each one trains: override it (or `train_step`) to apply them.
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
        validate_for_trainer(config, parameter_servers=_is_async(self._strategy),
                             builds_train_data=train and train_dataset is None,
                             builds_validation_data=evaluate and validation_dataset is None)
        self._config = config
        self._task = task
        self._model = model
        self._optimizer = optimizer
        self._checkpoint_exporter = checkpoint_exporter
        # As TFM's (which sets TPU XLA options here): passed to every `strategy.run` of
        # `train_step`, so a subclass may set other `tf.distribute.RunOptions`.
        self._runtime_options = tf.distribute.RunOptions()
        trainer_config = config.trainer

        self.init_async()
        self._global_step = create_global_step()
        optimization.create_optimizer_variables(optimizer, model)
        if self._is_async:  # concurrent workers lose Keras 3's read-then-write step counts
            optimization.make_step_counts_atomic(optimizer)
        self._xla_train_step = xla_train_step(
            task, self._strategy, enable_xla=bool(getattr(config.runtime, "enable_xla", False)),
            default_strategy=not tf.distribute.has_strategy(), model=model)

        # Exact means: parameter-server workers update them concurrently.
        self._train_loss = ExactMean("training_loss")
        self._validation_loss = ExactMean("validation_loss")
        self._train_metrics, self._validation_metrics = build_metrics(task, model)

        if train and train_dataset is None:
            train_dataset = self.distribute_dataset(task.build_inputs, config.task.train_data)
        if evaluate and validation_dataset is None:
            validation_dataset = self.distribute_dataset(task.build_inputs,
                                                         config.task.validation_data)
        self._train_loop = loops.TrainLoop(
            train_dataset, tensor_num_steps=trainer_config.train_tf_while_loop)
        self._train_loop_fused = False  # decided on the first train()
        self._last_train_step: Optional[int] = None
        self._train_loop_end_fn = None
        self._eval_loop = loops.EvalLoop(
            in_graph=trainer_config.eval_tf_while_loop or self._is_async,
            scheduled=self._is_async)
        self._eval_loop_fns = {}  # has_state -> loop_fn
        self._eval_dataset = validation_dataset

        self._checkpoint = build_checkpoint(
            self._global_step, model, optimizer, self._train_loop, self._strategy,
            save_iterator=trainer_config.checkpoint_train_iterator and train_dataset is not None)

    # Read-only views of the trainer's state, named as TFM's.
    strategy = property(lambda self: self._strategy)
    config = property(lambda self: self._config)
    task = property(lambda self: self._task)
    model = property(lambda self: self._model)
    optimizer = property(lambda self: self._optimizer)
    global_step = property(lambda self: self._global_step)
    checkpoint = property(lambda self: self._checkpoint)
    checkpoint_exporter = property(lambda self: self._checkpoint_exporter)
    train_loss = property(lambda self: self._train_loss)
    validation_loss = property(lambda self: self._validation_loss)
    train_metrics = property(lambda self: self._train_metrics)
    validation_metrics = property(lambda self: self._validation_metrics)
    optimizers = property(lambda self: optimization.optimizers_by_name(self._optimizer),
                          doc="The optimizer(s) by name: {'': opt} for one.")

    @property
    def train_dataset(self):
        return self._train_loop.dataset

    @train_dataset.setter
    def train_dataset(self, dataset):
        """Replaces the training dataset; the old iterator (and its position) is dropped."""
        self._train_loop.set_dataset(dataset)

    @property
    def eval_dataset(self):
        return self._eval_dataset

    @eval_dataset.setter
    def eval_dataset(self, dataset):
        self._eval_dataset = dataset

    validation_dataset = eval_dataset

    def initialize(self):
        """Called by the checkpoint manager when model_dir has no checkpoint."""
        self._task.initialize(self._model)

    def has_ema(self) -> bool:
        opt = self._optimizer
        return isinstance(opt, keras.optimizers.Optimizer) and optimization.has_ema(opt)

    def swap_weights(self):
        """Swaps model weights with their moving averages (exact: twice restores them)."""
        if not self.has_ema():
            raise ValueError("swap_weights() needs an optimizer with EMA (optimizer_config.ema).")
        with self._strategy.scope():
            optimization.swap_ema_weights(self._optimizer, self._model.trainable_variables)

    # ----------------------------------------------------------------- train
    def train(self, num_steps):
        """Runs `train_step` `num_steps` times and returns `train_loop_end()`'s logs.

        `num_steps` may be an int or a scalar int32 tensor (a tensor never retraces). The
        `TrainLoop` (loops.py) only repeats the loop function it is given; what one step does
        is `train_step`, below.
        """
        self._last_train_step = None
        self.train_loop_begin()
        if self._train_loop.loop_fn is None:
            self._train_loop_fused = fuses_train_loop_end(self)
            self._train_loop.set_loop_fn(
                loops.make_train_loop(self._step_for_tracing(self.train_step),
                                      use_tf_function=True,
                                      use_tf_while_loop=True, end_fn=self._fused_loop_end)
                if self._train_loop_fused else self.create_train_loop_fn())
        outputs = self._train_loop.run(num_steps)
        if not self._train_loop_fused:
            return self.train_loop_end()
        logs, step = outputs
        self._last_train_step = int(step.numpy())  # a copy of a returned value: no op
        return logs

    @property
    def last_train_step(self) -> Optional[int]:
        """The global step the last `train` call ended at, read in that call's own graph call
        (the fused inner loop's); None when it was not read there (a loop that is not fused,
        or a subclass that overrides `train`, which may move the step after it).

        The Controller uses it in place of reading the step variable after each inner loop:
        one eager op less per loop, the first after the graph call and the dearest (issue 55).
        """
        if type(self).train is not Trainer.train or "train" in vars(self):
            return None
        return self._last_train_step

    def create_train_loop_fn(self):
        """Builds `loop_fn(iterator, num_steps)` from `train_step` (Orbit's hook; see loops)."""
        trainer_config = self._config.trainer
        return loops.make_train_loop(self._step_for_tracing(self.train_step),
                                     use_tf_function=trainer_config.train_tf_function,
                                     use_tf_while_loop=trainer_config.train_tf_while_loop,
                                     coordinator=self._coordinator)

    def _step_for_tracing(self, step):
        # Traced unconverted when this trainer and its task are lite_launcher's own classes
        # (autograph_policy); a user's subclass of either is converted, as under TFM.
        return autograph_policy.for_tracing(step, self._task)

    def train_loop_begin(self):
        """Called eagerly before each inner train loop. The base does nothing."""

    @_not_converted
    def next_train_inputs(self, iterator):
        """Fetches the next training inputs (host side; traced inside the loop function)."""
        return next(iterator)

    def train_step(self, iterator):
        """One training step: next inputs, then the task step on each replica.

        Runs in cross-replica context (traced when `train_tf_function`). The per-replica step
        calls `task.train_step` (task.py; XLA-compiled as `xla_train_step` above says when
        `runtime.enable_xla`), which applies the optimizer update, then updates `train_loss`
        and increments `global_step`.
        """

        def step_fn(inputs):
            logs = self._xla_train_step(inputs, model=self._model, optimizer=self._optimizer,
                                        metrics=self._train_metrics)
            self._train_loss.update_state(logs[self._task.loss])
            self._global_step.assign_add(1)

        inputs = self.next_train_inputs(iterator)
        self._strategy.run(after_inputs(step_fn), args=(inputs,), options=self._runtime_options)

    @_not_converted
    def _fused_loop_end(self):
        # The step after the loop (ordered after its writes by the function's automatic
        # control dependencies), returned with the logs: no host read of the variable.
        return self._loop_end_logs(), self._global_step.value()

    # Metric results and the learning rate: graph-safe without AutoGraph (issue 31).
    @_not_converted
    def _loop_end_logs(self):
        logs = metric_results(self._train_metrics + [self._train_loss], reset=True)
        for name, optimizer in self.optimizers.items():
            key = f"{name}_learning_rate" if name else "learning_rate"
            logs[key] = optimization.learning_rate_value(optimizer)
        return logs

    def train_loop_end(self) -> Dict[str, Any]:
        """Called eagerly after each inner loop: every train metric (then reset),
        `training_loss` and `learning_rate` at the step trained next; with several optimizers
        one `<name>_learning_rate` each (TFM's RankingTrainer's `<OptimizerClass>_<i>_...`)."""
        self.join()
        if self._is_async or not self._config.trainer.train_tf_function:
            return self._loop_end_logs()
        if self._train_loop_end_fn is None:
            # One graph call reads and resets every metric: far cheaper than one eager op each.
            self._train_loop_end_fn = tf.function(self._loop_end_logs)
        return self._train_loop_end_fn()

    # ------------------------------------------------------------------ eval
    def evaluate(self, num_steps):
        """Runs `num_steps` eval steps (-1: until the dataset ends); returns `eval_end()`'s logs.

        Each evaluation reads the validation set from the top (a new iterator).
        """
        self._eval_loop.check_num_steps(num_steps)
        state = self.eval_begin()
        has_state = state is not None
        if has_state not in self._eval_loop_fns:
            self._eval_loop_fns[has_state] = self.create_eval_loop_fn(has_state)
        state = self._eval_loop.run(self._eval_loop_fns[has_state], self.eval_dataset,
                                    num_steps, state=state, reduce_fn=self.eval_reduce)
        return self.eval_end() if state is None else self.eval_end(state)

    def create_eval_loop_fn(self, has_state: bool):
        """Builds `loop_fn(iterator, num_steps, state=None, reduce_fn=None)` (Orbit's hook).

        Under parameter servers the evaluation is one scheduled `tf.while_loop` closure on a
        worker (see `loops.make_eval_loop`); `eval_end` joins it.
        """
        if self._is_async and (type(self._task).aggregate_logs is not Task.aggregate_logs
                               or type(self).eval_reduce is not Trainer.eval_reduce):
            logging.warning(
                "With the parameter_server strategy the evaluation runs on a worker as one "
                "tf.while_loop: eval_reduce / %s.aggregate_logs are not called (as in TFM).",
                type(self._task).__name__)
        trainer_config = self._config.trainer
        return loops.make_eval_loop(self._step_for_tracing(self.eval_step), has_state=has_state,
                                    use_tf_function=trainer_config.eval_tf_function,
                                    use_tf_while_loop=trainer_config.eval_tf_while_loop,
                                    coordinator=self._coordinator)

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
        return merge_passthrough(passthrough_logs, logs)

    def eval_reduce(self, state=None, step_outputs=None):
        """Folds one step's outputs into the state via `task.aggregate_logs`."""
        return self._task.aggregate_logs(state, step_outputs)

    def eval_end(self, aggregated_logs=None) -> Dict[str, Any]:
        """Validation metrics, `validation_loss` (when reported), task-reduced logs, best export.

        The best-checkpoint export happens before EMA weights are swapped back, so the exported
        checkpoint holds the averaged weights that were evaluated.
        """
        self.join()
        logs = metric_results(self._validation_metrics)
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
