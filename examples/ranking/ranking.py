"""A two-optimizer ranking model and TFM's `RankingTrainer`, ported to lite_launcher.

The shape of TFM's `official/recommendation/ranking` (a DLRM-style click model trained with
one optimizer for the embedding tables and another for the dense layers), small enough to
train in a second on a CPU:

- `RankingTask.build_model` compiles the model with a `keras.optimizers.MultiOptimizer`
  (Keras 3's counterpart of TFRS's `CompositeOptimizer`): SGD for `embedding/.*`, Adam with an
  exponentially decaying rate for everything else. The driver hands `model.optimizer` to the
  trainer, as TFM's ranking driver does; lite checkpoints each inner optimizer (iterations,
  Adam's moments), so a resumed run equals a straight one.
- `RankingTrainer.train_loop_end` is TFM's body, imports changed only: it resets the metrics
  with `reset_states()` and logs one `<OptimizerClass>_<i>_learning_rate` per optimizer.
- The data: synthetic clicks from two categorical features and three dense ones, made from a
  fixed seed, so every run sees the same examples in the same order.

`examples/ranking/driver.py` runs it (train_and_eval, continuous_eval, ...).
"""

import dataclasses

import keras
import numpy as np
import tensorflow as tf

import lite_launcher as ll

NUM_DENSE = 3
NUM_CATEGORICAL = 2


@dataclasses.dataclass
class RankingTaskConfig(ll.TaskConfig):
    """The model and its two optimizers (TFM keeps them in the ranking task's config too)."""

    vocab_size: int = 24
    embedding_dim: int = 4
    tower_units: int = 8
    embedding_learning_rate: float = 0.3
    dense_learning_rate: float = 0.02
    dense_decay_steps: int = 10
    dense_decay_rate: float = 0.5
    num_examples: int = 256
    data_seed: int = 0


def synthetic_clicks(config: RankingTaskConfig, training: bool):
    """`(features, labels)` as NumPy arrays: clicks from a fixed random scoring rule."""
    rng = np.random.default_rng(config.data_seed)
    item_score = rng.normal(size=config.vocab_size)
    dense_weights = rng.normal(size=NUM_DENSE)
    n = config.num_examples if training else config.num_examples // 4
    # Training and validation examples come from one stream, so they never overlap.
    ids = rng.integers(0, config.vocab_size, size=(config.num_examples + n, NUM_CATEGORICAL))
    dense = rng.normal(size=(config.num_examples + n, NUM_DENSE))
    part = slice(0, n) if training else slice(config.num_examples, config.num_examples + n)
    ids, dense = ids[part], dense[part]
    score = item_score[ids].sum(axis=1) + dense @ dense_weights
    labels = (score > 0).astype("float32")[:, None]
    return {"ids": ids.astype("int32"), "dense": dense.astype("float32")}, labels


class RankingTask(ll.Task):
    """A click model: embeddings of the categorical features, concatenated with the dense
    ones, then a small tower; binary cross-entropy on the logit."""

    def build_model(self) -> keras.Model:
        cfg = self.task_config
        ids = keras.Input((NUM_CATEGORICAL,), dtype="int32", name="ids")
        dense = keras.Input((NUM_DENSE,), name="dense")
        init = keras.initializers.GlorotUniform(seed=1)
        embedded = keras.layers.Embedding(cfg.vocab_size, cfg.embedding_dim, name="embedding",
                                          embeddings_initializer=keras.initializers.RandomNormal(
                                              stddev=0.1, seed=2))(ids)
        x = keras.layers.Concatenate()([keras.layers.Flatten()(embedded), dense])
        x = keras.layers.Dense(cfg.tower_units, activation="relu", kernel_initializer=init,
                               name="tower")(x)
        logits = keras.layers.Dense(1, kernel_initializer=init, name="logits")(x)
        model = keras.Model({"ids": ids, "dense": dense}, logits)
        dense_rate = keras.optimizers.schedules.ExponentialDecay(
            cfg.dense_learning_rate, cfg.dense_decay_steps, cfg.dense_decay_rate)
        optimizer = keras.optimizers.MultiOptimizer(keras.optimizers.OptimizerMap(
            default_optimizer=keras.optimizers.Adam(dense_rate),
            optimizer_map={"embedding/.*": keras.optimizers.SGD(cfg.embedding_learning_rate)}))
        # As TFM's ranking model: compiled with its optimizer, which the driver hands over.
        model.compile(optimizer=optimizer)
        return model

    def build_inputs(self, params, input_context=None):
        features, labels = synthetic_clicks(self.task_config, bool(params.is_training))
        batch = params.global_batch_size
        if input_context is not None:
            batch = input_context.get_per_replica_batch_size(batch)
        dataset = tf.data.Dataset.from_tensor_slices((features, labels))
        if params.is_training:
            dataset = dataset.repeat()
        return dataset.batch(batch, drop_remainder=bool(params.is_training))

    def build_losses(self, labels, model_outputs, aux_losses=None):
        loss = tf.reduce_mean(keras.losses.binary_crossentropy(labels, model_outputs,
                                                               from_logits=True))
        return loss + super().build_losses(labels, model_outputs, aux_losses)

    def build_metrics(self, training=True):
        return [keras.metrics.BinaryAccuracy("accuracy", threshold=0.0),
                keras.metrics.AUC(name="auc", from_logits=True)]


ll.register_task_cls(RankingTaskConfig)(RankingTask)


@ll.register_config_factory("ranking_tiny")
def ranking_tiny() -> ll.ExperimentConfig:
    """20 steps of batch 16; a checkpoint and an evaluation every 5 steps, every checkpoint
    kept; the training iterator checkpointed, so a resumed run reads the data a straight run
    reads."""
    return ll.ExperimentConfig(
        task=RankingTaskConfig(
            train_data=ll.DataConfig(global_batch_size=16, is_training=True),
            validation_data=ll.DataConfig(global_batch_size=32, is_training=False)),
        trainer=ll.TrainerConfig(
            train_steps=20, steps_per_loop=5, summary_interval=5, checkpoint_interval=5,
            validation_interval=5, max_to_keep=100, checkpoint_train_iterator=True,
            continuous_eval_all_checkpoints=True, continuous_eval_timeout=1,
            best_checkpoint_export_subdir="best", best_checkpoint_eval_metric="auc"),
        runtime=ll.RuntimeConfig(distribution_strategy="off"))


class RankingTrainer(ll.Trainer):
    """TFM's RankingTrainer: one logged learning rate per optimizer of the model.

    The body is TFM's `official/recommendation/ranking/train.py`, imports changed only.
    """

    def train_loop_end(self):
        """See base class."""
        self.join()
        logs = {}
        for metric in self.train_metrics + [self.train_loss]:
            logs[metric.name] = metric.result()
            metric.reset_states()

        for i, optimizer in enumerate(self.optimizer.optimizers):
            lr_key = f"{type(optimizer).__name__}_{i}_learning_rate"
            if callable(optimizer.learning_rate):
                logs[lr_key] = optimizer.learning_rate(self.global_step)
            else:
                logs[lr_key] = optimizer.learning_rate
        return logs


def build_ranking_trainer(params, task, strategy, mode, model_dir):
    """What TFM's ranking driver does before `run_experiment`: the model in the strategy's
    scope, datasets from `distribute_datasets_from_function`, the trainer with the model's
    own optimizer."""
    with strategy.scope():
        model = task.build_model()

    def get_dataset_fn(data_params):
        return lambda input_context: task.build_inputs(data_params, input_context)

    train_dataset = None
    if "train" in mode:
        train_dataset = strategy.distribute_datasets_from_function(
            get_dataset_fn(params.task.train_data),
            options=tf.distribute.InputOptions(experimental_fetch_to_device=False))
    validation_dataset = None
    if "eval" in mode:
        validation_dataset = strategy.distribute_datasets_from_function(
            get_dataset_fn(params.task.validation_data),
            options=tf.distribute.InputOptions(experimental_fetch_to_device=False))
    with strategy.scope():
        checkpoint_exporter = ll.maybe_create_best_ckpt_exporter(params, model_dir)
        return RankingTrainer(
            config=params, task=task, model=model, optimizer=model.optimizer,
            train="train" in mode, evaluate="eval" in mode, train_dataset=train_dataset,
            validation_dataset=validation_dataset, checkpoint_exporter=checkpoint_exporter)
