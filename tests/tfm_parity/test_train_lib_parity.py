"""TFM's `official/core/train_lib_test.py` scenarios, restated on lite_launcher.

Each test names the TFM test it restates. TFM runs its `mock` experiment (MockTask) through
`train_lib.run_experiment` / `OrbitExperimentRunner`; lite registers a `mock` experiment with
the same model and closed-form training, run by `ll.run_experiment` / `ll.ExperimentRunner`.
Only the default strategy is run here (TFM adds TPU and one-GPU strategies; see README.md).
"""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from absl import flags
from absl.testing import flagsaver

import lite_launcher as ll

FLAGS = flags.FLAGS

# TFM's test config, unchanged.
TEST_CONFIG = {
    "trainer": {
        "checkpoint_interval": 10,
        "steps_per_loop": 10,
        "summary_interval": 10,
        "train_steps": 10,
        "validation_steps": 5,
        "validation_interval": 10,
        "continuous_eval_timeout": 1,
        "validation_summary_subdir": "validation",
        "optimizer_config": {
            "optimizer": {"type": "sgd"},
            "learning_rate": {"type": "constant"},
        },
    },
}


@pytest.fixture
def parsed_flags():
    """The driver's flags, defined and parsed (as TFM's test module does at import)."""
    ll.define_flags()
    if not FLAGS.is_parsed():
        FLAGS.mark_as_parsed()
    return FLAGS


def parse(model_dir, mode):
    with flagsaver.flagsaver(experiment="mock", mode=mode, model_dir=str(model_dir),
                             params_override=json.dumps(TEST_CONFIG)):
        return ll.parse_configuration(FLAGS)


def checkpoint_steps(model_dir):
    state = tf.train.get_checkpoint_state(str(model_dir))
    return [int(path.rsplit("-", 1)[1]) for path in state.all_model_checkpoint_paths]


def run_end_to_end(tmp_path, mode, run_post_eval, use_runner_class):
    model_dir = str(tmp_path)
    params = parse(model_dir, mode)
    ll.serialize_config(params, model_dir)
    strategy = tf.distribute.get_strategy()
    with strategy.scope():
        task = ll.get_task(params.task, logging_dir=model_dir)

    def run(run_mode):
        kwargs = dict(distribution_strategy=strategy, task=task, mode=run_mode, params=params,
                      model_dir=model_dir, run_post_eval=run_post_eval)
        if use_runner_class:
            return ll.ExperimentRunner(**kwargs).run()
        return ll.run_experiment(**kwargs)

    model, logs = run(mode)
    assert isinstance(model, keras.Model)
    if "eval" in mode:
        assert os.path.isdir(os.path.join(model_dir, params.trainer.validation_summary_subdir))
    if run_post_eval:
        assert {"accuracy", "validation_loss"} <= set(logs)
    else:
        assert logs == {}
    assert os.path.exists(os.path.join(model_dir, "params.yaml"))
    if mode == "eval":
        return
    assert checkpoint_steps(model_dir) == [10]
    # Continuous evaluation of the finished run: ckpt-10 is at train_steps, so it stops there.
    _, logs = run("continuous_eval")
    assert ("validation_loss" in logs) == run_post_eval


MODES = pytest.mark.parametrize("mode", ["train", "eval", "train_and_eval"])
POST_EVAL = pytest.mark.parametrize("run_post_eval", [True, False], ids=["post_eval", "no_post"])


@MODES
@POST_EVAL
def test_end_to_end(tmp_path, parsed_flags, mode, run_post_eval):
    """Restates train_lib_test.TrainTest.test_end_to_end (default strategy)."""
    run_end_to_end(tmp_path, mode, run_post_eval, use_runner_class=False)


def _release_beside_the_function_runs():
    """(mode, run_post_eval) cases of the class test, each `release` naming the same case of
    test_end_to_end: run_experiment is ExperimentRunner(...).run(), the same code path."""
    cases = []
    for run_post_eval, post_id in ((True, "post_eval"), (False, "no_post")):
        for mode in ("train", "eval", "train_and_eval"):
            case_id = f"{post_id}-{mode}"
            cases.append(pytest.param(mode, run_post_eval, id=case_id, marks=pytest.mark.release(
                sibling=f"tests/tfm_parity/test_train_lib_parity.py::test_end_to_end[{case_id}]")))
    return cases


@pytest.mark.parametrize("mode, run_post_eval", _release_beside_the_function_runs())
def test_end_to_end_class(tmp_path, parsed_flags, mode, run_post_eval):
    """Restates train_lib_test.TrainTest.test_end_to_end_class (default strategy)."""
    run_end_to_end(tmp_path, mode, run_post_eval, use_runner_class=True)


def mock_loss(model_outputs):
    """The loss TFM's MockModel adds with `add_loss`: the mean of its outputs."""
    return tf.reduce_mean(model_outputs)


@pytest.mark.parametrize("mode", ["train", "train_and_eval"])
def test_recovery_nan_error(tmp_path, parsed_flags, mode):
    """Restates train_lib_test.TrainTest.test_recovery_nan_error.

    TFM's loss is `[nan]` plus the MockModel's own loss (its `aux_losses`): a shape-[1] NaN.
    """
    params = parse(tmp_path, mode)
    with tf.distribute.get_strategy().scope():
        task = ll.get_task(params.task, logging_dir=str(tmp_path))
    task.build_losses = lambda labels, model_outputs, aux_losses=None: (
        tf.constant([np.nan], tf.float32) + mock_loss(model_outputs))
    with pytest.raises(RuntimeError):
        ll.ExperimentRunner(distribution_strategy=tf.distribute.get_strategy(), task=task,
                            mode=mode, params=params, model_dir=str(tmp_path)).run()


def test_recovery(tmp_path, parsed_flags):
    """Restates train_lib_test.TrainTest.test_recovery.

    model_dir holds a checkpoint of a freshly built model. The loss, a shape-[1] constant plus
    the mock's own loss, is above `loss_upper_bound` (1.0) after the first loop: the recovery
    restores that checkpoint (one trial allowed), so the trained model ends with its weights.
    (TFM adds 1.0 to a positive mock loss; lite's mock loss starts slightly below 0, so 1.5.)
    """
    params = parse(tmp_path, "train")
    params.trainer.loss_upper_bound = 1.0
    params.trainer.recovery_max_trials = 1
    with tf.distribute.get_strategy().scope():
        task = ll.get_task(params.task, logging_dir=str(tmp_path))
    reference = task.build_model()
    tf.train.CheckpointManager(tf.train.Checkpoint(model=reference), str(tmp_path),
                               max_to_keep=2).save()
    before = reference.get_weights()
    task.build_losses = lambda labels, model_outputs, aux_losses=None: (
        tf.constant([1.5], tf.float32) + mock_loss(model_outputs))
    model, _ = ll.ExperimentRunner(distribution_strategy=tf.distribute.get_strategy(),
                                   task=task, mode="train", params=params,
                                   model_dir=str(tmp_path)).run()
    after = model.get_weights()
    assert len(before) == len(after)
    for left, right in zip(before, after):
        np.testing.assert_array_equal(left, right)


def test_parse_configuration(tmp_path, parsed_flags):
    """Restates train_lib_test.TrainTest.test_parse_configuration."""
    with flagsaver.flagsaver(experiment="mock", mode="train", model_dir=str(tmp_path),
                             params_override=json.dumps(TEST_CONFIG)):
        params = ll.parse_configuration(FLAGS, lock_return=True)
        with pytest.raises(ValueError):
            params.override({"task": {"init_checkpoint": "Foo"}})
        params = ll.parse_configuration(FLAGS, lock_return=False)
        params.override({"task": {"init_checkpoint": "Bar"}})
        assert params.task.init_checkpoint == "Bar"
