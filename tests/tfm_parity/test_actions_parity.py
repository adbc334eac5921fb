"""TFM parity: official/core/actions_test.py restated on lite_launcher.core.actions.

TFM runs these under a TPU strategy, the one-device strategy and the default strategy; here
the default strategy and a one-device strategy on the CPU.
"""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from lite_launcher.core import actions
from lite_launcher.core.base_trainer import create_global_step

STRATEGIES = {
    "default": lambda: tf.distribute.get_strategy(),
    "one_device": lambda: tf.distribute.OneDeviceStrategy("/cpu:0"),
}


class ValueModel(keras.Model):
    """TFM's TestModel: returns `value + x`; also holds a Dense layer."""

    def __init__(self):
        super().__init__()
        self.value = self.add_weight(shape=(), initializer="zeros", name="value")
        self.dense = keras.layers.Dense(2)
        self.dense(tf.zeros((2, 2), tf.float32))

    def call(self, x, training=None):
        return self.value + x


@pytest.mark.parametrize("strategy_name", ["default", "one_device"])
def test_ema_checkpointing(tmp_path, strategy_name):
    """Restates actions_test.ActionsTest.test_ema_checkpointing: the averages start at zero,
    the model's value becomes 3, and the EMA checkpoint holds 0; a plain optimizer is a
    ValueError."""
    with STRATEGIES[strategy_name]().scope():
        model = ValueModel()
        # Keras 3's EMA lives in the optimizer (use_ema): building it creates the averages,
        # at zero, as TFM's shadow_copy does.
        optimizer = keras.optimizers.SGD(use_ema=True)
        optimizer.build(model.trainable_variables)
        checkpoint = tf.train.Checkpoint(model=model)
        model.value.assign(3.0)
        assert float(model(tf.constant(0.0))) == 3.0

        ema_action = actions.EMACheckpointing(str(tmp_path), optimizer, checkpoint)
        ema_action({})
        ema_dir = os.path.join(str(tmp_path), "ema_checkpoints")
        assert tf.io.gfile.glob(ema_dir)
        assert float(model(tf.constant(0.0))) == 3.0  # swapped back after the save

        checkpoint.read(tf.train.latest_checkpoint(ema_dir))
        assert float(model(tf.constant(0.0))) == 0.0

        with pytest.raises(ValueError, match="EMACheckpointing needs an optimizer with EMA"):
            actions.EMACheckpointing(str(tmp_path), keras.optimizers.SGD(), checkpoint)


@pytest.mark.parametrize("strategy_name", ["default", "one_device"])
def test_recovery_condition(strategy_name):
    """Restates actions_test.ActionsTest.test_recovery_condition: a loss above the bound, then
    a loss of shape [1] holding NaN, each recover twice and raise RuntimeError the third time."""
    with STRATEGIES[strategy_name]().scope():
        for loss in (0.6, tf.constant([np.nan], tf.float32)):
            condition = actions.RecoveryCondition(create_global_step(), loss_upper_bound=0.5,
                                                  recovery_max_trials=2)
            outputs = {"training_loss": loss}
            assert condition(outputs) is True
            assert condition(outputs) is True
            with pytest.raises(RuntimeError):
                condition(outputs)
