"""A tiny classification task shared by trainer / controller / experiment tests."""

import dataclasses

import keras
import numpy as np
import tensorflow as tf

import lite_launcher as ll

NUM_FEATURES = 4
NUM_CLASSES = 3
NUM_EXAMPLES = 64


def make_data(seed=0, n=NUM_EXAMPLES):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, NUM_FEATURES)).astype("float32")
    y = rng.integers(0, NUM_CLASSES, n).astype("int32")
    return x, y


@dataclasses.dataclass
class TinyTaskConfig(ll.TaskConfig):
    hidden: int = 0


class TinyTask(ll.Task):
    """Dense classifier on a fixed random set; train data repeats, validation is finite."""

    def build_model(self):
        init = keras.initializers.GlorotUniform(seed=1)
        return keras.Sequential([keras.Input((NUM_FEATURES,)),
                                 keras.layers.Dense(NUM_CLASSES, kernel_initializer=init)])

    def build_inputs(self, params, input_context=None):
        x, y = make_data()
        batch = params.global_batch_size or 8
        if input_context is not None:
            batch = input_context.get_per_replica_batch_size(batch)
        ds = tf.data.Dataset.from_tensor_slices((x, y))
        if params.is_training:
            ds = ds.repeat()
        return ds.batch(batch, drop_remainder=bool(params.is_training))

    def build_losses(self, labels, model_outputs, aux_losses=None):
        return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
            labels, model_outputs, from_logits=True))

    def build_metrics(self, training=True):
        return [keras.metrics.SparseCategoricalAccuracy("accuracy")]


def make_config(**trainer_overrides):
    config = ll.ExperimentConfig(task=TinyTaskConfig())
    config.task.train_data.override({"is_training": True, "global_batch_size": 8})
    config.task.validation_data.override({"is_training": False, "global_batch_size": 8})
    config.trainer.override({"optimizer_config": {
        "optimizer": {"type": "sgd"}, "learning_rate": {"type": "constant",
                                                        "constant": {"learning_rate": 0.1}}}})
    config.trainer.override(trainer_overrides)
    return config


def make_trainer(config=None, trainer_cls=None, strategy=None, optimizer=None, **kwargs):
    """Builds TinyTask + model + optimizer + Trainer inside the strategy's scope."""
    config = config or make_config()
    strategy = strategy or tf.distribute.get_strategy()
    with strategy.scope():
        task = TinyTask(config.task)
        model = task.build_model()
        optimizer = optimizer or keras.optimizers.SGD(0.1)
        trainer = (trainer_cls or ll.Trainer)(config, task, model, optimizer, **kwargs)
    return trainer
