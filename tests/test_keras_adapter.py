"""The private Keras names lite uses (`keras_adapter.PRIVATE_NAMES`) exist in the installed
Keras: a release that renames one fails here, naming it, instead of giving a wrong number."""

import keras
import numpy as np
import pytest

from lite_launcher import optimization
from lite_launcher.common import keras_adapter
from lite_launcher.optimization import ema_optimizer


def test_every_private_keras_name_lite_uses_exists():
    missing = keras_adapter.missing_private_names()
    assert not missing, (f"Keras {keras.__version__} lacks {missing} (lite was checked on "
                         f"{keras_adapter.CHECKED_KERAS_VERSIONS}): update keras_adapter.")


def test_the_check_names_a_renamed_private_name():
    class RenamedAdam(keras.optimizers.Adam):  # a Keras whose Adam renamed its slots
        def build(self, variables):
            super().build(variables)
            self.first_moments = self.__dict__.pop("_momentums")

    owners = keras_adapter._owners()  # pylint: disable=protected-access
    owners["keras.optimizers.Adam"] = keras_adapter._built(RenamedAdam)  # pylint: disable=protected-access
    assert keras_adapter.missing_private_names(owners) == ["keras.optimizers.Adam._momentums"]


@pytest.mark.parametrize("slot", ["momentums", "velocities", "average_gradients"])
def test_slot_is_the_variables_own_slot(slot):
    variables = [keras.Variable(np.zeros(2, "float32")), keras.Variable(np.ones(3, "float32"))]
    optimizer = optimization.RMSprop(momentum=0.9, centered=True)
    optimizer.build(variables)
    found = keras_adapter.slot(optimizer, slot, variables[1])
    assert tuple(found.shape) == (3,)
    assert keras_adapter.variable_index(optimizer, variables[1]) == 1
    assert keras_adapter.built_variables(optimizer)[1] is variables[1]


def test_the_ema_update_goes_through_the_public_hook():
    variable = keras.Variable(np.ones(2, "float32"))
    calls = []

    class Counting(ema_optimizer.SGDWithEMASchedule):
        def update_moving_averages(self, trainable_variables):
            calls.append(len(trainable_variables))
            return super().update_moving_averages(trainable_variables)

    optimizer = Counting(learning_rate=0.1, use_ema=True)
    optimizer.apply([np.ones(2, "float32")], [variable])
    optimizer.apply([np.ones(2, "float32")], [variable])
    assert calls == [1, 1]
    # TFM's dynamic decay at step 2: min(0.99, 3 / 12) -> average = 0.25 * 0.9 + 0.75 * 0.8
    np.testing.assert_allclose(keras_adapter.moving_averages(optimizer)[0].numpy(),
                               [0.25 * 0.9 + 0.75 * 0.8] * 2, rtol=1e-6)
