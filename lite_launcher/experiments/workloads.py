"""The benchmark workloads `mlp_tiny`, `cnn_small` and `mock`, as registered experiments.

Each serves one fixed batch made with `numpy.random.default_rng(seed)` repeated forever, so
input cost is ~0 and a run measures the training loop. `make_workload_batch` and
`build_workload_model` are public so that a raw-loop baseline uses the very same batch and
model.

mlp_tiny   float32 [32], Dense(64, relu) -> Dense(10); batch 64; SGD lr 0.01.
cnn_small  float32 [32, 32, 3], Conv2D(32, 3, same, relu) -> Conv2D(64, 3, strides 2, same,
           relu) -> GlobalAveragePooling2D -> Dense(10); batch 128; SGD lr 0.01, momentum 0.9.
mock       float32 [2], Dense(1, bias init ones), loss = mean of the output (TFM's MockTask);
           batch 2; SGD lr 0.01.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

import keras
import numpy as np
import tensorflow as tf

from lite_launcher.core.base_config import ConfigError
from lite_launcher.core.base_task import Task
from lite_launcher.core.config_definitions import DataConfig, ExperimentConfig, TaskConfig, TrainerConfig
from lite_launcher.core.input_reader import per_replica_batch_size
from lite_launcher.core.registry import register_config_factory, register_task_cls
from lite_launcher.experiments.digits import sparse_cross_entropy_loss

NUM_CLASSES = 10


@dataclasses.dataclass(frozen=True)
class WorkloadSpec:
    """The fixed facts of one workload."""

    input_shape: Tuple[int, ...]
    global_batch_size: int
    momentum: float
    learning_rate: float = 0.01
    # Default run length: a few seconds on 2 CPU cores (benchmarks set their own).
    train_steps: int = 1000


WORKLOADS = {
    "mlp_tiny": WorkloadSpec(input_shape=(32,), global_batch_size=64, momentum=0.0),
    "cnn_small": WorkloadSpec(input_shape=(32, 32, 3), global_batch_size=128, momentum=0.9,
                              train_steps=200),
    "mock": WorkloadSpec(input_shape=(2,), global_batch_size=2, momentum=0.0),
}


def _check_name(name: str) -> WorkloadSpec:
    if name not in WORKLOADS:
        raise ConfigError(
            f"Unknown workload {name!r}; valid workloads: {', '.join(sorted(WORKLOADS))}.")
    return WORKLOADS[name]


def make_workload_batch(name: str, batch_size: int,
                        seed: int = 0) -> Tuple[np.ndarray, np.ndarray]:
    """The fixed batch of workload `name`: (inputs float32 [batch, ...], labels int32 in [0, 10)).

    Drawn from `numpy.random.default_rng(seed)`: standard-normal inputs first, then labels.
    """
    spec = _check_name(name)
    rng = np.random.default_rng(seed)
    inputs = rng.standard_normal((batch_size,) + spec.input_shape, dtype=np.float32)
    labels = rng.integers(0, NUM_CLASSES, size=(batch_size,), dtype=np.int32)
    return inputs, labels


def build_workload_model(name: str, seed: int = 0) -> keras.Model:
    """The Functional model of workload `name`, kernels Glorot-uniform seeded `seed`, `seed+1`..."""
    spec = _check_name(name)
    seeds = iter(range(seed, seed + 100))

    def init():
        return keras.initializers.GlorotUniform(seed=next(seeds))

    inputs = keras.Input(shape=spec.input_shape, dtype="float32", name="inputs")
    if name == "mlp_tiny":
        x = keras.layers.Dense(64, activation="relu", kernel_initializer=init(),
                               name="dense_0")(inputs)
        outputs = keras.layers.Dense(NUM_CLASSES, kernel_initializer=init(), name="logits")(x)
    elif name == "cnn_small":
        x = keras.layers.Conv2D(32, 3, padding="same", activation="relu",
                                kernel_initializer=init(), name="conv_0")(inputs)
        x = keras.layers.Conv2D(64, 3, strides=2, padding="same", activation="relu",
                                kernel_initializer=init(), name="conv_1")(x)
        x = keras.layers.GlobalAveragePooling2D()(x)
        outputs = keras.layers.Dense(NUM_CLASSES, kernel_initializer=init(), name="logits")(x)
    else:  # mock, as TFM's MockTask
        outputs = keras.layers.Dense(1, kernel_initializer=init(),
                                     bias_initializer=keras.initializers.Ones(),
                                     name="dense_0")(inputs)
    return keras.Model(inputs, outputs, name=name)


@dataclasses.dataclass
class WorkloadTaskConfig(TaskConfig):
    """A benchmark workload. `workload` picks the model and input shape; `seed` the batch and
    initial weights. The batch size is `train_data.global_batch_size` /
    `validation_data.global_batch_size`."""

    workload: str = "mlp_tiny"
    seed: int = 0

    def _validate(self):
        _check_name(self.workload)


@register_task_cls(WorkloadTaskConfig)
class WorkloadTask(Task):
    """Serves one fixed batch forever; loss: sparse cross-entropy (`mock`: the mean output);
    metric: accuracy."""

    def build_model(self) -> keras.Model:
        return build_workload_model(self.task_config.workload, seed=self.task_config.seed)

    def build_inputs(self, params: DataConfig,
                     input_context: Optional[tf.distribute.InputContext] = None):
        if params.global_batch_size < 1:
            raise ConfigError(
                f"global_batch_size ({params.global_batch_size}) must be a positive integer.")
        batch_size = per_replica_batch_size(params.global_batch_size, input_context)
        batch = make_workload_batch(self.task_config.workload, batch_size,
                                    seed=self.task_config.seed)
        return tf.data.Dataset.from_tensors(batch).repeat()

    def build_losses(self, labels, model_outputs, aux_losses=None) -> tf.Tensor:
        if self.task_config.workload == "mock":
            loss = tf.reduce_mean(tf.cast(model_outputs, tf.float32))
            if aux_losses:
                loss += tf.add_n([tf.cast(l, tf.float32) for l in aux_losses])
            return loss
        return sparse_cross_entropy_loss(labels, model_outputs, aux_losses)

    def build_metrics(self, training: bool = True):
        del training
        return [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]


def _workload_experiment(name: str) -> ExperimentConfig:
    spec = WORKLOADS[name]
    batch = spec.global_batch_size
    task = WorkloadTaskConfig(
        workload=name,
        train_data=DataConfig(global_batch_size=batch, is_training=True),
        validation_data=DataConfig(global_batch_size=batch, is_training=False))
    # Checkpoint, summary and validation intervals beyond the run, so they are not measured.
    never = 1_000_000
    trainer = TrainerConfig(
        train_steps=spec.train_steps,
        steps_per_loop=100,
        summary_interval=never,
        checkpoint_interval=never,
        validation_interval=never,
        validation_steps=100,
    )
    sgd = {"momentum": spec.momentum} if spec.momentum else {}
    trainer.optimizer_config.override({
        "optimizer": {"type": "sgd", "sgd": sgd},
        "learning_rate": {"type": "constant", "constant": {"learning_rate": spec.learning_rate}},
    })
    config = ExperimentConfig(task=task, trainer=trainer)
    # The benchmarks measure the training loop on one device, with the default strategy.
    config.runtime.distribution_strategy = "off"
    return config


@register_config_factory("mlp_tiny")
def mlp_tiny() -> ExperimentConfig:
    """Benchmark workload mlp_tiny: Dense(64, relu) -> Dense(10) on float32 [32], batch 64."""
    return _workload_experiment("mlp_tiny")


@register_config_factory("cnn_small")
def cnn_small() -> ExperimentConfig:
    """Benchmark workload cnn_small: two convs + pooling on float32 [32, 32, 3], batch 128."""
    return _workload_experiment("cnn_small")


@register_config_factory("mock")
def mock() -> ExperimentConfig:
    """Benchmark workload mock (TFM's MockTask): Dense(1) on float32 [2], loss = mean output."""
    return _workload_experiment("mock")
