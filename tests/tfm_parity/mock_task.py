"""TFM's `official/utils/testing/mock_task.MockTask`, restated on lite_launcher for the parity
tests: Dense(1) (bias initialised to ones) on float32 [2] zeros, loss = mean of the output, an
`Accuracy("acc")` metric, and a validation `counter` of 1 per replica step that `aggregate_logs`
collects and `reduce_aggregated_logs` sums."""

import dataclasses

import keras
import numpy as np
import tensorflow as tf

import lite_launcher as ll


@dataclasses.dataclass
class MockTaskConfig(ll.TaskConfig):
    pass


def mock_config(**trainer):
    """An ExperimentConfig for MockTask: SGD at a constant rate (TFM's test set-up)."""
    config = ll.ExperimentConfig(task=MockTaskConfig())
    config.trainer.override({"optimizer_config": {"optimizer": {"type": "sgd"},
                                                  "learning_rate": {"type": "constant"}}})
    config.trainer.override(trainer)
    return config


class MockTask(ll.Task):

    def build_model(self, *args, **kwargs):
        inputs = keras.Input(shape=(2,), name="random", dtype="float32")
        outputs = keras.layers.Dense(1, bias_initializer="ones", name="dense_0")(inputs)
        return keras.Model(inputs, outputs)

    def build_losses(self, labels, model_outputs, aux_losses=None):
        return tf.reduce_mean(tf.cast(model_outputs, tf.float32))

    def build_metrics(self, training: bool = True):
        return [keras.metrics.Accuracy(name="acc")]

    def validation_step(self, inputs, model, metrics=None):
        logs = super().validation_step(inputs, model, metrics)
        logs["counter"] = tf.constant(1, dtype=tf.float32)
        return logs

    def build_inputs(self, params, input_context=None):
        def generate(_):
            return tf.zeros((2,), tf.float32), tf.zeros([1], tf.int32)

        dataset = tf.data.Dataset.range(1).repeat().map(generate)
        return dataset.prefetch(1).batch(2, drop_remainder=True)

    def aggregate_logs(self, state=None, step_logs=None):
        state = state if state is not None else {}
        for key, value in step_logs.items():
            state.setdefault(key, []).append(
                np.concatenate([np.expand_dims(np.asarray(v), 0) for v in value]))
        return state

    def reduce_aggregated_logs(self, aggregated_logs, global_step=None):
        return {key: np.sum(np.stack(values, 0)) for key, values in aggregated_logs.items()}
