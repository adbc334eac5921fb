"""Handwritten-digit classification on the UCI digits set shipped with the package.

Registers the experiments `digits_mlp` (the one to run first) and `digits_cnn`. Both run
offline in seconds on a CPU and reach > 90% validation accuracy with their defaults.

The data (1,797 8x8 images, pixels 0..16, CC BY 4.0, see data/DIGITS_LICENSE.txt) is split
once with a fixed permutation into 1,500 training and 297 validation examples. By default the
task reads the arrays shipped in `data/digits.npz`; with `input_path` set it reads TFRecord
files of `tf.train.Example`s such as `write_digits_tfrecord` writes.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import List, Optional, Tuple

import keras
import numpy as np
import tensorflow as tf

from lite_launcher.core.base_config import ConfigError
from lite_launcher.core.base_task import Task
from lite_launcher.core.config_definitions import Config, DataConfig, ExperimentConfig, TaskConfig, TrainerConfig
from lite_launcher.core.input_reader import InputReader, pick_dataset_fn
from lite_launcher.core.registry import register_config_factory, register_task_cls

DATA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "digits.npz")
NUM_EXAMPLES = 1797
NUM_CLASSES = 10
IMAGE_SIZE = 8
MAX_PIXEL = 16
NUM_TRAIN = 1500
NUM_VALIDATION = NUM_EXAMPLES - NUM_TRAIN
SPLIT_SEED = 0
SPLITS = ("train", "validation")


@functools.lru_cache(maxsize=1)
def _load_raw() -> Tuple[np.ndarray, np.ndarray]:
    with np.load(DATA_PATH) as data:
        images, labels = data["images"], data["labels"]
    images.setflags(write=False)
    labels.setflags(write=False)
    return images, labels


def load_digits() -> Tuple[np.ndarray, np.ndarray]:
    """All 1,797 examples in file order: images float32 [N, 8, 8] in [0, 1], labels int32."""
    images, labels = _load_raw()
    return images.astype(np.float32) / MAX_PIXEL, labels.astype(np.int32)


def split_indices(split: str) -> np.ndarray:
    """Indices into `load_digits()` of `split` ('train': 1,500, 'validation': 297).

    A fixed permutation (numpy `default_rng(SPLIT_SEED)`) cut in two, so the splits are
    disjoint and identical on every machine.
    """
    if split not in SPLITS:
        raise ConfigError(f"Unknown digits split {split!r}; valid splits: {', '.join(SPLITS)}.")
    order = np.random.default_rng(SPLIT_SEED).permutation(NUM_EXAMPLES)
    return order[:NUM_TRAIN] if split == "train" else order[NUM_TRAIN:]


def load_digits_split(split: str) -> Tuple[np.ndarray, np.ndarray]:
    """`load_digits()` restricted to `split` ('train' or 'validation')."""
    images, labels = load_digits()
    index = split_indices(split)
    return images[index], labels[index]


def write_digits_tfrecord(path: str, split: str = "train", num_shards: int = 1) -> List[str]:
    """Writes `split` as TFRecord files of `tf.train.Example`s; returns the file names.

    Each example holds `image` (the 64 raw uint8 pixels, 0..16, as bytes) and `label` (int64).
    With `num_shards` > 1 the examples are dealt round-robin into files named
    `{path}-00000-of-0000N`; otherwise the one file is `path`.
    """
    if num_shards < 1:
        raise ConfigError(f"num_shards ({num_shards}) must be >= 1.")
    raw_images, raw_labels = _load_raw()
    index = split_indices(split)
    if num_shards == 1:
        paths = [path]
    else:
        paths = [f"{path}-{i:05d}-of-{num_shards:05d}" for i in range(num_shards)]
    parent = os.path.dirname(path)
    if parent:
        tf.io.gfile.makedirs(parent)
    writers = [tf.io.TFRecordWriter(p) for p in paths]
    try:
        for position, i in enumerate(index):
            example = tf.train.Example(features=tf.train.Features(feature={
                "image": tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[raw_images[i].tobytes()])),
                "label": tf.train.Feature(
                    int64_list=tf.train.Int64List(value=[int(raw_labels[i])])),
            }))
            writers[position % num_shards].write(example.SerializeToString())
    finally:
        for writer in writers:
            writer.close()
    return paths


_FEATURES = {
    "image": tf.io.FixedLenFeature([], tf.string),
    "label": tf.io.FixedLenFeature([], tf.int64),
}


def decode_digits_example(serialized: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """Parses one serialized digits `tf.train.Example` into (image float32 [8, 8], label int32)."""
    parsed = tf.io.parse_single_example(serialized, _FEATURES)
    pixels = tf.io.decode_raw(parsed["image"], tf.uint8)
    image = tf.reshape(tf.cast(pixels, tf.float32) / MAX_PIXEL, [IMAGE_SIZE, IMAGE_SIZE])
    return image, tf.cast(parsed["label"], tf.int32)


# ---------------------------------------------------------------------------
# Configs
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class DigitsModelConfig(Config):
    """The digits classifier.

    kind 'mlp': Flatten -> Dense(h, relu) for h in hidden_sizes -> Dense(10).
    kind 'cnn': Conv2D(f, 3x3, same, relu) for f in conv_filters (the first with stride 1,
    the others with stride 2) -> Flatten -> Dense(h, relu) for h in hidden_sizes -> Dense(10).
    Kernels are Glorot-uniform with seeds `seed`, `seed + 1`, ... layer by layer.
    """

    kind: str = "mlp"
    hidden_sizes: List[int] = dataclasses.field(default_factory=lambda: [128])
    conv_filters: List[int] = dataclasses.field(default_factory=lambda: [16, 32])
    seed: int = 0

    def _validate(self):
        if self.kind not in ("mlp", "cnn"):
            raise ConfigError(f"task.model.kind {self.kind!r} must be 'mlp' or 'cnn'.")
        if any(h < 1 for h in self.hidden_sizes):
            raise ConfigError(
                f"task.model.hidden_sizes {self.hidden_sizes} must all be positive.")
        if self.kind == "cnn" and (not self.conv_filters or any(f < 1 for f in self.conv_filters)):
            raise ConfigError(
                f"task.model.conv_filters {self.conv_filters} must be a non-empty list of "
                f"positive integers for kind 'cnn'.")


@dataclasses.dataclass
class DigitsDataConfig(DataConfig):
    """`DataConfig` plus `split`: which shipped split to read when `input_path` is empty."""

    split: str = "train"

    def _validate(self):
        super()._validate()
        if self.split not in SPLITS:
            raise ConfigError(f"digits data split {self.split!r} must be one of {SPLITS}.")


def _train_data() -> DigitsDataConfig:
    return DigitsDataConfig(split="train", is_training=True, global_batch_size=64,
                            shuffle_buffer_size=NUM_TRAIN, seed=0)


def _validation_data() -> DigitsDataConfig:
    return DigitsDataConfig(split="validation", is_training=False, global_batch_size=128,
                            drop_remainder=False)


@dataclasses.dataclass
class DigitsTaskConfig(TaskConfig):
    """The digits classification task."""

    model: DigitsModelConfig = dataclasses.field(default_factory=DigitsModelConfig)
    train_data: DigitsDataConfig = dataclasses.field(default_factory=_train_data)
    validation_data: DigitsDataConfig = dataclasses.field(default_factory=_validation_data)


# ---------------------------------------------------------------------------
# Model and task
# ---------------------------------------------------------------------------


def build_digits_model(config: DigitsModelConfig) -> keras.Model:
    """The Functional classifier `config` describes; outputs logits [batch, 10]."""
    config.validate()
    seeds = iter(range(config.seed, config.seed + 1000))

    def init():
        return keras.initializers.GlorotUniform(seed=next(seeds))

    inputs = keras.Input(shape=(IMAGE_SIZE, IMAGE_SIZE), dtype="float32", name="image")
    x = inputs
    if config.kind == "cnn":
        x = keras.layers.Reshape((IMAGE_SIZE, IMAGE_SIZE, 1))(x)
        for i, filters in enumerate(config.conv_filters):
            x = keras.layers.Conv2D(filters, 3, strides=1 if i == 0 else 2, padding="same",
                                    activation="relu", kernel_initializer=init(),
                                    name=f"conv_{i}")(x)
    x = keras.layers.Flatten()(x)
    for i, units in enumerate(config.hidden_sizes):
        x = keras.layers.Dense(units, activation="relu", kernel_initializer=init(),
                               name=f"dense_{i}")(x)
    logits = keras.layers.Dense(NUM_CLASSES, kernel_initializer=init(), name="logits")(x)
    return keras.Model(inputs, logits, name=f"digits_{config.kind}")


def sparse_cross_entropy_loss(labels, logits, aux_losses=None) -> tf.Tensor:
    """Mean sparse categorical cross-entropy from logits, plus any auxiliary losses.

    An empty batch (the last, partial evaluation batch can leave a replica with none) gives 0,
    not NaN.
    """
    per_example = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    per_example = tf.cast(per_example, tf.float32)
    loss = tf.math.divide_no_nan(tf.reduce_sum(per_example),
                                 tf.cast(tf.size(per_example), tf.float32))
    if aux_losses:
        loss += tf.add_n([tf.cast(l, tf.float32) for l in aux_losses])
    return loss


@register_task_cls(DigitsTaskConfig)
class DigitsClassificationTask(Task):
    """Classifies 8x8 digit images into 10 classes. Inputs: (image float32 [8, 8], label int32)."""

    def build_model(self) -> keras.Model:
        return build_digits_model(self.task_config.model)

    def build_inputs(self, params: DataConfig,
                     input_context: Optional[tf.distribute.InputContext] = None):
        if params.input_path:
            reader = InputReader(params, dataset_fn=pick_dataset_fn(params.file_type),
                                 decoder_fn=decode_digits_example)
            return reader.read(input_context)
        # A plain DataConfig has no split: training data means the training split.
        default_split = "train" if params.is_training else "validation"
        images, labels = load_digits_split(getattr(params, "split", default_split))
        source = tf.data.Dataset.from_tensor_slices((images, labels))
        return InputReader(params).read(input_context, dataset=source)

    def build_losses(self, labels, model_outputs, aux_losses=None) -> tf.Tensor:
        return sparse_cross_entropy_loss(labels, model_outputs, aux_losses)

    def build_metrics(self, training: bool = True):
        del training
        return [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]


# ---------------------------------------------------------------------------
# Experiments
# ---------------------------------------------------------------------------


def _digits_experiment(model: DigitsModelConfig, train_steps: int, optimizer: dict,
                       learning_rate: dict) -> ExperimentConfig:
    # 1,500 training examples / batch 64 is ~23 steps an epoch.
    trainer = TrainerConfig(
        train_steps=train_steps,
        steps_per_loop=100,
        summary_interval=100,
        checkpoint_interval=train_steps // 2,
        validation_interval=train_steps // 2,
        validation_steps=-1,
        max_to_keep=2,
    )
    trainer.optimizer_config.override({"optimizer": optimizer, "learning_rate": learning_rate})
    return ExperimentConfig(task=DigitsTaskConfig(model=model), trainer=trainer)


@register_config_factory("digits_mlp")
def digits_mlp() -> ExperimentConfig:
    """MLP (64 -> 128 -> 10) on the digits; Adam, 600 steps; ~98% validation accuracy."""
    return _digits_experiment(
        DigitsModelConfig(kind="mlp", hidden_sizes=[128]),
        train_steps=600,
        optimizer={"type": "adam"},
        learning_rate={"type": "constant", "constant": {"learning_rate": 0.003}})


@register_config_factory("digits_cnn")
def digits_cnn() -> ExperimentConfig:
    """Small CNN (conv 16 -> conv 32 stride 2 -> 10) on the digits; SGD with momentum, 600
    steps; ~99% validation accuracy."""
    return _digits_experiment(
        DigitsModelConfig(kind="cnn", hidden_sizes=[], conv_filters=[16, 32]),
        train_steps=600,
        optimizer={"type": "sgd", "sgd": {"momentum": 0.9}},
        learning_rate={"type": "constant", "constant": {"learning_rate": 0.05}})
