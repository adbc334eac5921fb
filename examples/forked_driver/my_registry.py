"""The user's registry_imports module: importing it registers their experiments and tasks.

A forked driver imports it; `lite-train --registry_imports=my_registry` does the same.
Here: a linear ("logistic regression") task on the digits data and an experiment using it.
"""

import dataclasses

import keras
import tensorflow as tf

import lite_launcher as ll
from lite_launcher.experiments import digits


@dataclasses.dataclass
class LinearDigitsTaskConfig(digits.DigitsTaskConfig):
    l2: float = 1e-4


@ll.register_task_cls(LinearDigitsTaskConfig)
class LinearDigitsTask(digits.DigitsClassificationTask):
    """Softmax regression on the 64 pixels, with an L2 penalty added through model.losses."""

    def build_model(self):
        regularizer = keras.regularizers.L2(self.task_config.l2)
        return keras.Sequential([
            keras.Input((8, 8)),
            keras.layers.Flatten(),
            keras.layers.Dense(10, kernel_regularizer=regularizer,
                               kernel_initializer=keras.initializers.Zeros()),
        ])


@ll.register_config_factory("linear_digits")
def linear_digits() -> ll.ExperimentConfig:
    config = ll.get_exp_config("digits_mlp")
    task = LinearDigitsTaskConfig()
    task.override(config.task.as_dict(), is_strict=False)
    config.task = task
    config.trainer.override({"train_steps": 300, "optimizer_config": {
        "optimizer": {"type": "sgd", "sgd": {"momentum": 0.9}},
        "learning_rate": {"type": "constant", "constant": {"learning_rate": 0.2}}}})
    return config
