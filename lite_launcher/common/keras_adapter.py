"""The one home of lite's uses of private Keras 3 names.

Keras 3 offers no public path to a few things lite needs for TFM's behaviour and speed: an
optimizer's slot of one variable (the fused TensorFlow update kernels take its handle), the
variables and strategy it was built with, its moving averages (TFM's EMA schedule and weight
swap), a hook to read the learning-rate schedule once per step for weight decay, the softmax of
`MultiHeadAttention` (float32 under mixed precision) and the CPU copy of a variable for async
checkpoints. Every read or override of a private Keras name is here, and nowhere else in lite
(`tests/test_architecture.py` scans for them); `PRIVATE_NAMES` lists them by owner and
`missing_private_names()` checks them against the installed Keras (`tests/test_keras_adapter.py`
fails naming each one a Keras release renames or drops).

Checked on Keras `CHECKED_KERAS_VERSIONS`.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import keras

CHECKED_KERAS_VERSIONS = ("3.15.1",)

# What lite reads or overrides, by the class that owns it. Instance attributes exist once an
# optimizer is built (slots; `_model_variables_moving_average` with `use_ema`).
PRIVATE_NAMES: Dict[str, Tuple[str, ...]] = {
    "keras.optimizers.Optimizer": (
        "_get_variable_index", "_apply_weight_decay", "_get_current_learning_rate",
        "_update_model_variables_moving_average", "_learning_rate", "_trainable_variables",
        "_distribution_strategy", "_model_variables_moving_average"),
    "keras.optimizers.Adam": ("_momentums", "_velocities"),
    "keras.optimizers.RMSprop": ("_momentums", "_velocities", "_average_gradients"),
    "keras.layers.MultiHeadAttention": ("_masked_softmax", "_attention_axes"),
    "keras.src.backend.tensorflow.core.Variable": ("_copy_trackable_to_cpu",),
}


def _built(optimizer_cls, **kwargs):
    optimizer = optimizer_cls(**kwargs)
    optimizer.build([keras.Variable([0.0, 0.0])])
    return optimizer


def _owners():
    """An instance (or class) of each owner in `PRIVATE_NAMES`, built as lite uses it."""
    attention = keras.layers.MultiHeadAttention(num_heads=1, key_dim=2)
    attention.build((1, 2, 2), (1, 2, 2))
    try:
        from keras.src.backend.tensorflow import core as keras_tf_core
        variable_cls = getattr(keras_tf_core, "Variable", None)
    except ImportError:
        variable_cls = None
    return {
        "keras.optimizers.Optimizer": _built(keras.optimizers.SGD, use_ema=True),
        "keras.optimizers.Adam": _built(keras.optimizers.Adam),
        "keras.optimizers.RMSprop": _built(keras.optimizers.RMSprop, momentum=0.9,
                                           centered=True),
        "keras.layers.MultiHeadAttention": attention,
        "keras.src.backend.tensorflow.core.Variable": variable_cls,
    }


def missing_private_names(owners=None) -> List[str]:
    """`owner.name` for each name of `PRIVATE_NAMES` the installed Keras does not have (empty
    when every one is there). `owners` ({owner: object}) defaults to Keras's own."""
    owners = _owners() if owners is None else owners
    missing = []
    for owner, names in PRIVATE_NAMES.items():
        holder = owners.get(owner)
        missing += [f"{owner}.{name}" for name in names
                    if holder is None or not hasattr(holder, name)]
    return missing


# ----- optimizer state -------------------------------------------------------------------------

def variable_index(optimizer, variable) -> int:
    """The index of `variable` among those `optimizer` was built on (KeyError: not one)."""
    return optimizer._get_variable_index(variable)  # pylint: disable=protected-access


def slot(optimizer, name: str, variable):
    """The `name` slot ("momentums", "velocities", "average_gradients") of `variable`.

    SGD keeps its momentums public; Adam and RMSprop keep theirs private."""
    slots = getattr(optimizer, name, None)
    if slots is None:
        slots = getattr(optimizer, "_" + name)
    return slots[variable_index(optimizer, variable)]


def built_variables(optimizer) -> list:
    """The variables `optimizer` was built on, in its order."""
    return list(optimizer._trainable_variables)  # pylint: disable=protected-access


def distribution_strategy(optimizer):
    """The strategy `optimizer` was created under."""
    return optimizer._distribution_strategy  # pylint: disable=protected-access


def moving_averages(optimizer) -> Optional[list]:
    """Keras's EMA averages, one per built variable (None: Keras keeps them elsewhere now)."""
    return getattr(optimizer, "_model_variables_moving_average", None)


class MovingAverageUpdateHook:
    """Mixin: Keras's EMA update step calls the public `update_moving_averages`."""

    def _update_model_variables_moving_average(self, trainable_variables):
        return self.update_moving_averages(trainable_variables)

    def update_moving_averages(self, trainable_variables):
        """Updates the averages after a step (Keras's own update unless overridden)."""
        return super()._update_model_variables_moving_average(trainable_variables)


class DecayReadsScheduleOnce:
    """Mixin: decoupled weight decay evaluates the learning-rate schedule once per step.

    Keras 3's `_apply_weight_decay` reads the learning rate inside its per-variable function,
    so with a schedule every decayed variable traced the whole schedule again (warmup, cosine,
    offsets: ~30 ops each; 200 copies for ViT-Ti, seconds of tracing and graph optimisation
    before the first step). The value is the same for every variable (the step counter moves
    only after all updates), so it is computed once here and returned to those reads; numerics
    are unchanged. tf_keras computed it once per step as well.
    """

    def _apply_weight_decay(self, variables):
        if self.weight_decay is None or not isinstance(
                self._learning_rate, keras.optimizers.schedules.LearningRateSchedule):
            return super()._apply_weight_decay(variables)
        # Set through __dict__: a tensor must not be tracked as optimizer state.
        self.__dict__["_decay_learning_rate"] = self._get_current_learning_rate()
        try:
            return super()._apply_weight_decay(variables)
        finally:
            self.__dict__["_decay_learning_rate"] = None

    def _get_current_learning_rate(self):
        value = self.__dict__.get("_decay_learning_rate")
        return super()._get_current_learning_rate() if value is None else value


# ----- attention -------------------------------------------------------------------------------

class AttentionSoftmaxHook:
    """Mixin for `keras.layers.MultiHeadAttention`: its explicit softmax calls the public
    `attention_softmax(scores, mask, keras_softmax)`; `attention_axes` is the layer's."""

    def _masked_softmax(self, attention_scores, attention_mask=None):
        return self.attention_softmax(attention_scores, attention_mask,
                                      super()._masked_softmax)

    @property
    def attention_axes(self):
        """The axes attention is computed over (Keras's `_attention_axes`)."""
        return self._attention_axes

    def attention_softmax(self, attention_scores, attention_mask, keras_softmax):
        """The attention probabilities (Keras's softmax unless overridden)."""
        return keras_softmax(attention_scores, attention_mask)


# ----- variables ---------------------------------------------------------------------------------

def enable_async_saves() -> None:
    """Makes Keras 3 variables work with async checkpointing (idempotent).

    Keras 3.15's TF `Variable._copy_trackable_to_cpu` makes a new `tf.Variable` on every call.
    The async checkpoint helper calls it inside a `tf.function` from the second save on, which
    fails ("tf.function only supports singleton tf.Variables created on the first call").
    Mapping the Keras variable to the CPU copy of its underlying variable saves the same values
    and creates nothing. `test_async_checkpointing_*` pins it.
    """
    try:
        from keras.src.backend.tensorflow import core as keras_tf_core
    except ImportError:
        return
    variable_cls = getattr(keras_tf_core, "Variable", None)
    if (variable_cls is None or "_copy_trackable_to_cpu" not in variable_cls.__dict__
            or getattr(variable_cls, "_lite_launcher_async_copy", False)):
        return

    def _copy_trackable_to_cpu(self, object_map):
        self.value._copy_trackable_to_cpu(object_map)  # pylint: disable=protected-access
        object_map[self] = object_map[self.value]

    variable_cls._copy_trackable_to_cpu = _copy_trackable_to_cpu
    variable_cls._lite_launcher_async_copy = True
