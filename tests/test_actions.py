"""Tests for lite_launcher.core.actions: EMA checkpoints, loss recovery, preemption checkpoints."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import types

import numpy as np
import pytest
import tensorflow as tf
import keras

from lite_launcher import optimization
from lite_launcher.core import actions
from lite_launcher.core.base_config import ConfigError
from lite_launcher.core.config_definitions import ExperimentConfig

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class TinyTrainer:
    """What the actions need of a Trainer: model, optimizer, checkpoint, step, strategy."""

    def __init__(self, optimizer=None, seed=0):
        keras.utils.set_random_seed(seed)
        self.model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        self.optimizer = optimizer or keras.optimizers.SGD(learning_rate=0.1)
        self.optimizer.build(self.model.trainable_variables)
        self.global_step = tf.Variable(0, dtype=tf.int64)
        self.checkpoint = tf.train.Checkpoint(
            model=self.model, optimizer=self.optimizer, global_step=self.global_step)
        self.strategy = tf.distribute.get_strategy()

    def train(self, num_steps, poison=False):
        """Runs `num_steps` SGD steps on fixed data; returns the loop's output."""
        x = np.arange(12, dtype=np.float32).reshape(4, 3) / 10.0
        y = np.ones((4, 2), np.float32)
        if poison:
            x[0, 0] = np.nan
        for _ in range(num_steps):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(self.model(x) - y))
            grads = tape.gradient(loss, self.model.trainable_variables)
            self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
            self.global_step.assign_add(1)
        return {"training_loss": loss}

    def weights(self):
        return [v.numpy().copy() for v in self.model.trainable_variables]


def _params(**trainer):
    params = ExperimentConfig()
    params.override({"trainer": trainer})
    return params


# ---------------------------------------------------------------------------
# Recovery.
# ---------------------------------------------------------------------------


def test_nan_loss_restores_the_last_checkpoint_then_fails_after_max_trials(tmp_path):
    trainer = TinyTrainer()
    manager = tf.train.CheckpointManager(trainer.checkpoint, str(tmp_path), max_to_keep=2)
    train_actions = actions.get_train_actions(
        _params(recovery_max_trials=2, preemption_on_demand_checkpoint=False), trainer,
        str(tmp_path), manager)
    assert len(train_actions) == 1

    for action in train_actions:
        action(trainer.train(3))  # a healthy loop: no recovery
    manager.save(checkpoint_number=3)
    good = trainer.weights()
    good_slots = trainer.optimizer.iterations.numpy()

    for trial in range(2):
        output = trainer.train(2, poison=True)
        assert np.isnan(output["training_loss"].numpy())
        assert np.isnan(trainer.weights()[0]).all()
        for action in train_actions:
            action(output)
        # Weights, optimizer state and the step are those of the checkpoint.
        for restored, expected in zip(trainer.weights(), good):
            np.testing.assert_array_equal(restored, expected)
        assert trainer.optimizer.iterations.numpy() == good_slots
        assert int(trainer.global_step.numpy()) == 3
        assert train_actions[0].condition.recover_counter == trial + 1

    output = trainer.train(2, poison=True)
    with pytest.raises(RuntimeError) as error:
        train_actions[0](output)
    message = str(error.value)
    assert "NaN" in message and "step 5" in message
    assert "trainer.recovery_max_trials is 2" in message


def test_loss_above_upper_bound_counts_only_after_recovery_begin_steps():
    step = tf.Variable(0, dtype=tf.int64)
    condition = actions.RecoveryCondition(step, loss_upper_bound=10.0, recovery_begin_steps=100,
                                          recovery_max_trials=1)
    step.assign(50)
    assert condition({"training_loss": 1e9}) is False  # too early for the bound
    assert condition({"training_loss": np.float32(np.nan)}) is True  # NaN counts at any step
    assert condition.recover_counter == 1
    condition.recover_counter = 0
    step.assign(100)
    assert condition({"training_loss": 9.5}) is False
    assert condition({"training_loss": tf.constant(10.5)}) is True
    with pytest.raises(RuntimeError, match=r"loss 11.0 at step 100 exceeds "
                                           r"trainer.loss_upper_bound \(10.0\)"):
        condition({"training_loss": 11.0})


def test_recovery_max_trials_zero_fails_at_once_and_negative_disables(tmp_path):
    trainer = TinyTrainer()
    manager = tf.train.CheckpointManager(trainer.checkpoint, str(tmp_path), max_to_keep=1)
    (recovery,) = actions.get_train_actions(
        _params(recovery_max_trials=0, preemption_on_demand_checkpoint=False), trainer,
        str(tmp_path), manager)
    with pytest.raises(RuntimeError, match="recovery_max_trials is 0"):
        recovery({"training_loss": float("nan")})

    assert actions.get_train_actions(
        _params(recovery_max_trials=-1, preemption_on_demand_checkpoint=False), trainer,
        str(tmp_path), manager) == []


def test_recovery_without_checkpoints_is_a_config_error():
    with pytest.raises(ConfigError, match=r"recovery_max_trials \(3\) > 0 needs checkpoints"):
        actions.get_train_actions(
            _params(recovery_max_trials=3, preemption_on_demand_checkpoint=False),
            TinyTrainer(), "", None)


@pytest.mark.parametrize("loss, diverged", [
    (tf.constant([np.nan]), True), ([float("nan")], True), (np.array([[0.2, np.nan]]), True),
    (tf.constant([0.6]), True), ([0.2, 0.6], True), (np.array([0.2, 0.4]), False),
    (tf.constant([[0.3]]), False)])
def test_recovery_condition_takes_a_loss_of_any_shape(loss, diverged):
    # TFM's own tests pass a loss of shape [1]; any NaN element, or the largest, decides.
    condition = actions.RecoveryCondition(tf.Variable(0, dtype=tf.int64), loss_upper_bound=0.5,
                                          recovery_max_trials=1)
    assert condition({"training_loss": loss}) is diverged
    if diverged:
        with pytest.raises(RuntimeError, match="divergence 2"):
            condition({"training_loss": loss})
    with pytest.raises(ValueError, match="empty 'training_loss'"):
        condition({"training_loss": []})


def test_recovery_condition_needs_training_loss():
    condition = actions.RecoveryCondition(tf.Variable(0), loss_upper_bound=1.0)
    with pytest.raises(KeyError, match=r"'training_loss'.*\['loss'\]"):
        condition({"loss": 1.0})


# ---------------------------------------------------------------------------
# EMA checkpoints.
# ---------------------------------------------------------------------------


def test_ema_checkpoint_holds_the_averages_and_model_weights_are_unchanged(tmp_path):
    momentum = 0.5
    trainer = TinyTrainer(keras.optimizers.SGD(0.1, use_ema=True, ema_momentum=momentum))
    expected_average = None
    for _ in range(4):
        trainer.train(1)
        weights = trainer.weights()
        # Keras: the first update copies the weights, later ones mix in with `momentum`.
        expected_average = weights if expected_average is None else [
            momentum * a + (1 - momentum) * w for a, w in zip(expected_average, weights)]
    before = trainer.weights()
    assert not np.allclose(before[0], expected_average[0])  # the averages differ

    (ema_action,) = actions.get_eval_actions(_params(max_to_keep=2), trainer, str(tmp_path))
    path = ema_action({"accuracy": 0.5})

    assert path == os.path.join(str(tmp_path), "ema_checkpoints", "average_weights-4")
    for after, original in zip(trainer.weights(), before):
        np.testing.assert_array_equal(after, original)  # bit for bit
    fresh = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    step = tf.Variable(0, dtype=tf.int64)
    tf.train.Checkpoint(model=fresh, global_step=step).read(path).expect_partial()
    assert int(step.numpy()) == 4
    for restored, average in zip(fresh.trainable_variables, expected_average):
        np.testing.assert_allclose(restored.numpy(), average, rtol=1e-6, atol=1e-7)

    # Later evaluations add checkpoints, keeping `max_to_keep`.
    for _ in range(2):
        trainer.train(1)
        ema_action(None)
    assert tf.train.CheckpointManager(
        trainer.checkpoint, os.path.join(str(tmp_path), "ema_checkpoints"),
        max_to_keep=2).checkpoints == [
            os.path.join(str(tmp_path), "ema_checkpoints", f"average_weights-{s}") for s in (5, 6)]


def test_ema_checkpointing_with_tfm_arguments_swaps_every_averaged_variable(tmp_path):
    # TFM's signature: (export_dir, optimizer, checkpoint[, max_to_keep]), no variables=.
    trainer = TinyTrainer(keras.optimizers.SGD(0.1, use_ema=True, ema_momentum=0.5))
    trainer.train(3)
    averages = [v.numpy() for v in optimization.ema_variables(trainer.optimizer)]
    before = trainer.weights()
    assert not np.allclose(before[0], averages[0])
    action = actions.EMACheckpointing(str(tmp_path), trainer.optimizer, trainer.checkpoint)
    path = action({})
    for after, original in zip(trainer.weights(), before):
        np.testing.assert_array_equal(after, original)
    fresh = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    tf.train.Checkpoint(model=fresh).read(path).expect_partial()
    for restored, average in zip(fresh.trainable_variables, averages):
        np.testing.assert_array_equal(restored.numpy(), average)


def test_no_ema_action_without_ema(tmp_path):
    assert actions.get_eval_actions(_params(), TinyTrainer(), str(tmp_path)) == []
    with pytest.raises(ConfigError, match="use_ema=True"):
        actions.EMACheckpointing(str(tmp_path), keras.optimizers.SGD(0.1),
                                 tf.train.Checkpoint(), variables=[])


def test_ema_weights_are_swapped_back_when_saving_fails(tmp_path):
    trainer = TinyTrainer(keras.optimizers.SGD(0.1, use_ema=True, ema_momentum=0.5))
    trainer.train(3)
    before = trainer.weights()
    # A file where the directory should be makes the save fail.
    open(os.path.join(str(tmp_path), "ema_checkpoints"), "w").close()
    (ema_action,) = actions.get_eval_actions(_params(), trainer, str(tmp_path))
    with pytest.raises(Exception):
        ema_action(None)
    for after, original in zip(trainer.weights(), before):
        np.testing.assert_array_equal(after, original)


# ---------------------------------------------------------------------------
# Preemption.
# ---------------------------------------------------------------------------

# One child process for both preemption scenarios below (each costs a TensorFlow start-up).
# First a second SIGTERM that arrives while the action's handler is still running (Python runs
# the nested handler at the next bytecode boundary of the first): a trace function sends it at
# every line the first handler runs, down into what it calls; the child must go on at once.
# Then a training loop that the parent stops with a SIGTERM from outside.
_PREEMPTED_CHILD = textwrap.dedent("""
    import os, signal, sys, time
    sys.path.insert(0, {repo!r})
    sys.path.insert(0, {tests!r})
    import tensorflow as tf
    from test_actions import TinyTrainer
    from lite_launcher import actions

    step = tf.Variable(0, dtype=tf.int64)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(step=step), {nested_dir!r}, 1)
    action = actions.PreemptionCheckpointAction(manager, step)
    handler = signal.getsignal(signal.SIGTERM)
    sent = []

    def depth(frame):
        count = 0
        while frame is not None:
            count += frame.f_code is handler.__func__.__code__
            frame = frame.f_back
        return count

    def tracer(frame, event, arg):
        if event == "line" and depth(frame) == 1:
            sent.append(frame.f_code.co_name)
            os.kill(os.getpid(), signal.SIGTERM)
        return tracer

    sys.settrace(tracer)
    os.kill(os.getpid(), signal.SIGTERM)
    sys.settrace(None)
    assert action.preempted and sent, sent
    try:
        action()
    except SystemExit as exit_info:
        print("nested", exit_info.code, manager.latest_checkpoint, flush=True)
    action.close()

    trainer = TinyTrainer()
    manager = tf.train.CheckpointManager(trainer.checkpoint, {model_dir!r}, max_to_keep=3)
    action = actions.PreemptionCheckpointAction(manager, trainer.global_step)
    while True:
        output = trainer.train(2)
        print("step", int(trainer.global_step.numpy()), flush=True)
        action(output)
        time.sleep(0.02)
""")


@pytest.fixture(scope="module")
def preempted_child(tmp_path_factory):
    """The child above, sent a SIGTERM after its third training loop: its exit code, stderr,
    the nested scenario's line, the steps it printed, and its two checkpoint directories."""
    root = tmp_path_factory.mktemp("preempted")
    nested_dir, model_dir = str(root / "nested"), str(root / "model")
    script = _PREEMPTED_CHILD.format(repo=REPO_ROOT, tests=os.path.join(REPO_ROOT, "tests"),
                                     nested_dir=nested_dir, model_dir=model_dir)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env, cwd=REPO_ROOT)
    lines = []
    watchdog = threading.Timer(120, child.kill)  # a hang fails the tests, not the suite
    watchdog.start()
    try:
        for line in child.stdout:
            lines.append(line)
            if sum(line.startswith("step ") for line in lines) == 3:
                child.send_signal(signal.SIGTERM)
                break
        rest, stderr = child.communicate(timeout=90)
    finally:
        watchdog.cancel()
        if child.poll() is None:
            child.kill()
            child.wait()
    lines += rest.splitlines()
    return types.SimpleNamespace(
        returncode=child.returncode, stderr=stderr, nested_dir=nested_dir, model_dir=model_dir,
        nested=[line.split() for line in lines if line.startswith("nested ")],
        steps=[int(line.split()[1]) for line in lines if line.startswith("step ")])


def test_sigterm_saves_a_checkpoint_at_the_step_reached_and_exits(preempted_child):
    model_dir, steps = preempted_child.model_dir, preempted_child.steps
    assert preempted_child.returncode == actions.PREEMPTION_EXIT_CODE == 143, (
        preempted_child.stderr[-2000:])
    assert len(steps) >= 3
    last_step = steps[-1]
    assert tf.train.latest_checkpoint(model_dir) == os.path.join(model_dir, f"ckpt-{last_step}")
    # The checkpoint holds the state at that step.
    trainer = TinyTrainer(seed=1)
    trainer.checkpoint.restore(tf.train.latest_checkpoint(model_dir)).assert_consumed()
    assert int(trainer.global_step.numpy()) == last_step
    assert int(trainer.optimizer.iterations.numpy()) == last_step


def test_preemption_action_saves_only_after_sigterm_and_close_restores_handler(tmp_path):
    trainer = TinyTrainer()
    manager = tf.train.CheckpointManager(trainer.checkpoint, str(tmp_path), max_to_keep=1)
    seen = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        (action,) = actions.get_train_actions(
            _params(recovery_max_trials=-1), trainer, str(tmp_path), manager)
        assert isinstance(action, actions.PreemptionCheckpointAction)
        action(trainer.train(1))
        assert manager.latest_checkpoint is None and not action.preempted

        os.kill(os.getpid(), signal.SIGTERM)
        assert action.preempted and seen == []  # the action's handler took it
        trainer.train(2)
        with pytest.raises(SystemExit) as exit_info:
            action({"training_loss": 1.0})
        assert exit_info.value.code == 143
        assert manager.latest_checkpoint == os.path.join(str(tmp_path), "ckpt-3")

        action.close()
        os.kill(os.getpid(), signal.SIGTERM)
        assert seen == [signal.SIGTERM]  # the previous handler is back
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_sigterm_inside_the_preemption_handler_neither_hangs_nor_loses_the_save(
        preempted_child):
    # The handler once set a threading.Event: a SIGTERM inside Event.set() ran a nested
    # handler that waited for the Event's lock, held by the frame beneath it, forever (and,
    # with SIGTERMs every 2 ms, recursed to a RecursionError that lost the preemption save).
    assert preempted_child.nested == [
        ["nested", "143", os.path.join(preempted_child.nested_dir, "ckpt-0")]], (
        preempted_child.stderr[-3000:])


def test_preemption_action_off_the_main_thread_does_nothing(tmp_path):
    trainer = TinyTrainer()
    manager = tf.train.CheckpointManager(trainer.checkpoint, str(tmp_path), max_to_keep=1)
    handler_before = signal.getsignal(signal.SIGTERM)
    created = []
    thread = threading.Thread(target=lambda: created.append(
        actions.PreemptionCheckpointAction(manager, trainer.global_step)))
    thread.start()
    thread.join()
    (action,) = created
    assert signal.getsignal(signal.SIGTERM) is handler_before
    action({"training_loss": 1.0})
    action.close()
    assert manager.latest_checkpoint is None


def test_multi_worker_resolver_only_for_worker_clusters():
    def strategy_with(cluster):
        resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
            tf.train.ClusterSpec(cluster), task_type="worker", task_id=0)
        return types.SimpleNamespace(cluster_resolver=resolver)

    assert actions._multi_worker_resolver(tf.distribute.get_strategy()) is None
    assert actions._multi_worker_resolver(strategy_with({})) is None
    assert actions._multi_worker_resolver(
        strategy_with({"worker": ["a:1"], "ps": ["b:2"]})) is None
    workers = strategy_with({"worker": ["a:1", "a:2"]})
    assert actions._multi_worker_resolver(workers) is workers.cluster_resolver
