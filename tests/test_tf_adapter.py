"""The private TensorFlow names lite uses (`tf_adapter.PRIVATE_NAMES`) exist in the installed
TensorFlow, and each adapter function falls back to public behaviour when one is gone."""

import types

import numpy as np
import tensorflow as tf

from lite_launcher.common import tf_adapter


def test_every_private_tensorflow_name_lite_uses_exists():
    missing = tf_adapter.missing_private_names()
    assert not missing, (f"TensorFlow {tf.__version__} lacks {missing} (lite was checked on "
                         f"{tf_adapter.CHECKED_TF_VERSIONS}): update tf_adapter.")


def _concrete():
    @tf.function(autograph=False)
    def affine(x, y):
        return 3.0 * x + y

    spec = tf.TensorSpec([2], tf.float32)
    return affine.get_concrete_function(spec, spec)


def test_the_flat_call_gives_the_public_calls_outputs():
    concrete = _concrete()
    x, y = tf.constant([1.0, 2.0]), tf.constant([0.5, -1.0])
    call = tf_adapter.flat_call(concrete)
    assert call is not None
    np.testing.assert_array_equal(call([x, y]), concrete(x, y))
    np.testing.assert_array_equal(call([x, y]), [3.5, 5.0])


def test_no_flat_call_when_tensorflow_renames_or_reshapes_it():
    def other_parameters(args, captured, cancellation_manager=None):
        raise AssertionError("must not be called")

    assert tf_adapter.flat_call(types.SimpleNamespace(captured_inputs=[])) is None
    assert tf_adapter.flat_call(types.SimpleNamespace(
        _call_flat=other_parameters, captured_inputs=[])) is None


def test_the_cluster_resolver_falls_back_to_the_private_one():
    resolver = object()
    assert tf_adapter.cluster_resolver(types.SimpleNamespace(
        cluster_resolver=None, _cluster_resolver=resolver)) is resolver
    assert tf_adapter.cluster_resolver(types.SimpleNamespace(cluster_resolver=None)) is None
    public = object()
    assert tf_adapter.cluster_resolver(types.SimpleNamespace(
        cluster_resolver=public, _cluster_resolver=resolver)) is public


def test_a_data_iterator_is_trackable_and_a_plain_object_is_not():
    assert tf_adapter.is_trackable(iter(tf.data.Dataset.range(3)))
    assert not tf_adapter.is_trackable(iter([1, 2, 3]))


def test_the_last_checkpoint_step_round_trips_on_a_real_manager(tmp_path):
    step = tf.Variable(5, dtype=tf.int64)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(step=step), str(tmp_path),
                                         max_to_keep=1, step_counter=step,
                                         checkpoint_interval=10)
    assert tf_adapter.last_checkpoint_step(manager) is None
    tf_adapter.set_last_checkpoint_step(manager, 5)
    assert tf_adapter.last_checkpoint_step(manager) == 5
    # The manager reads the same record: 5 + 10 is not reached at 9, so nothing is saved.
    step.assign(9)
    assert manager.save(check_interval=True) is None
