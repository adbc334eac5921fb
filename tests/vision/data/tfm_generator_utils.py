"""What the TFM checkpoint generators (make_tfm_*checkpoints.py) share, run in TFM's venv.

Imports TensorFlow and tf_keras only (never lite_launcher): random weights a model's BatchNorm
accepts, and TFM's Trainer checkpoint layout (global_step, model, optimizer and the model's
checkpoint items, in a `ckpt-<step>` CheckpointManager directory).
"""

import numpy as np
import tensorflow as tf


def randomize(model, rng):
    """Every variable random; positive where BatchNorm needs it (scale, variance)."""
    for v in model.variables:
        shape = v.shape.as_list()
        name = v.name.split("/")[-1]
        if "moving_variance" in name or "gamma" in name:
            value = rng.uniform(0.5, 1.5, shape)
        elif any(k in name for k in ("moving_mean", "beta", "bias")):
            value = rng.normal(0.0, 0.1, shape)
        else:
            fan_in = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
            value = rng.normal(0.0, 1.0 / np.sqrt(max(fan_in, 1)), shape)
        v.assign(value.astype(v.dtype.as_numpy_dtype))


def sgd_momentum_optimizer():
    """TFM's SGD (momentum 0.9, constant 0.1), as its OptimizerFactory builds it: a checkpoint
    with an optimizer that has slots, for a model that was not trained."""
    from official.modeling import optimization  # pylint: disable=import-outside-toplevel

    factory = optimization.OptimizerFactory(optimization.OptimizationConfig(
        {"optimizer": {"type": "sgd", "sgd": {"momentum": 0.9}},
         "learning_rate": {"type": "constant", "constant": {"learning_rate": 0.1}}}))
    return factory.build_optimizer(0.1)


def save_trainer_checkpoint(directory, global_step, model, optimizer):
    """Writes `ckpt-<global_step>` in `directory` as TFM's Trainer does: global_step, model,
    optimizer and the model's checkpoint items at the top level."""
    checkpoint = tf.train.Checkpoint(global_step=global_step, model=model,
                                     optimizer=optimizer, **model.checkpoint_items)
    manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=1,
                                         step_counter=global_step, checkpoint_name="ckpt")
    return manager.save(checkpoint_number=global_step)
