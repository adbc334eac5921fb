"""Orbit's `controller_test.py` scenarios, restated on lite_launcher's Controller.

Each test names the Orbit test it restates. Orbit's runner there is a `StandardTrainer` +
`StandardEvaluator` on a small Keras model; here it is lite's `Trainer` on the tiny task of
tests/tiny.py (a Dense classifier, train data repeating, validation data finite: 8 batches).
The training summaries are the trainer's outputs (`training_loss`, `accuracy`,
`learning_rate`) plus `steps_per_second`; the evaluation ones `validation_loss`, `accuracy`.
"""

import os
import sys

import numpy as np
import pytest
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tiny  # noqa: E402
from lite_launcher.orbit import summaries  # noqa: E402
from lite_launcher.orbit.controller import Controller  # noqa: E402
from lite_launcher.orbit.summaries import SummaryManager  # noqa: E402
from test_controller import tensorboard_scalars  # noqa: E402

ASYNC = pytest.mark.parametrize("async_checkpointing", [False, True], ids=["sync", "async"])


def make_runner(trainer_cls=None, **trainer_config):
    return tiny.make_trainer(tiny.make_config(**trainer_config), trainer_cls=trainer_cls)


def make_manager(runner, directory, interval=None, optimizer=True):
    objects = dict(model=runner.model)
    if optimizer:
        objects["optimizer"] = runner.optimizer
    return tf.train.CheckpointManager(tf.train.Checkpoint(**objects), str(directory),
                                      max_to_keep=None, step_counter=runner.global_step,
                                      checkpoint_interval=interval)


def tags(directory):
    """{tag: [steps]} of the event files directly in `directory` (TensorBoard's loader)."""
    return {tag: [step for step, _, _ in events]
            for tag, events in tensorboard_scalars(str(directory)).items()}


def saved_model_only_manager(runner, directory, step_counter=True):
    """A manager on `directory`, where a checkpoint of the model alone was saved beforehand."""
    checkpoint = tf.train.Checkpoint(model=runner.model)
    checkpoint.save(os.path.join(str(directory), "ckpt"))
    return tf.train.CheckpointManager(
        checkpoint, str(directory), max_to_keep=None,
        step_counter=runner.global_step if step_counter else None)


def checkpoint_indexes(directory):
    return sorted(tf.io.gfile.glob(os.path.join(str(directory), "ckpt-*.index")))


def event_files(directory):
    return tf.io.gfile.glob(os.path.join(str(directory), "events.*"))


def test_no_checkpoint(tmp_path):
    """Restates controller_test.ControllerTest.test_no_checkpoint."""
    runner = make_runner()
    controller = Controller(trainer=runner, evaluator=runner, global_step=runner.global_step,
                            steps_per_loop=2, summary_dir=str(tmp_path / "summaries/train"),
                            eval_summary_dir=str(tmp_path / "summaries/eval"))
    controller.train_and_evaluate(train_steps=10, eval_steps=2, eval_interval=6)
    assert int(runner.global_step.numpy()) == 10
    assert tags(tmp_path / "summaries/train")["training_loss"] == [2, 4, 6, 8, 10]
    assert tags(tmp_path / "summaries/eval")["validation_loss"] == [6, 10]
    # No checkpoint: the step set back to 0 trains again from there.
    runner.global_step.assign(0)
    controller.train_and_evaluate(train_steps=10, eval_steps=2, eval_interval=6)
    assert int(runner.global_step.numpy()) == 10


def test_no_checkpoint_and_summaries(tmp_path):
    """Restates controller_test.ControllerTest.test_no_checkpoint_and_summaries."""
    runner = make_runner()
    controller = Controller(trainer=runner, evaluator=runner, global_step=runner.global_step,
                            steps_per_loop=2)
    assert controller.train_and_evaluate(train_steps=10, eval_steps=2, eval_interval=6)
    assert int(runner.global_step.numpy()) == 10


@ASYNC
def test_has_checkpoint_no_summaries(tmp_path, async_checkpointing):
    """Restates controller_test.ControllerTest.test_has_checkpoint_no_summaries."""
    runner = make_runner()
    manager = make_manager(runner, tmp_path, optimizer=False)
    controller = Controller(trainer=runner, evaluator=runner, global_step=runner.global_step,
                            checkpoint_manager=manager, steps_per_loop=2,
                            enable_async_checkpointing=async_checkpointing)
    controller.train_and_evaluate(train_steps=10, eval_steps=2, eval_interval=6)
    assert int(runner.global_step.numpy()) == 10
    assert event_files(tmp_path) == []
    assert checkpoint_indexes(tmp_path) == []  # a manager without an interval: Orbit saves none


@ASYNC
def test_has_checkpoint_eval_summary_only(tmp_path, async_checkpointing):
    """Restates controller_test.ControllerTest.test_has_checkpoint_eval_summary_only."""
    runner = make_runner()
    manager = make_manager(runner, tmp_path, optimizer=False)
    controller = Controller(trainer=runner, evaluator=runner, global_step=runner.global_step,
                            checkpoint_manager=manager, steps_per_loop=2,
                            enable_async_checkpointing=async_checkpointing,
                            eval_summary_dir=str(tmp_path / "summaries/eval"))
    controller.train_and_evaluate(train_steps=10, eval_steps=2, eval_interval=6)
    assert int(runner.global_step.numpy()) == 10
    assert event_files(tmp_path) == []
    assert tags(tmp_path / "summaries/eval")["validation_loss"] == [6, 10]


@ASYNC
def test_restore_from_most_recent_checkpoint(tmp_path, async_checkpointing):
    """Restates controller_test.ControllerTest.test_restore_from_most_recent_checkpoint."""
    runner = make_runner()
    manager = make_manager(runner, tmp_path, interval=5, optimizer=False)
    controller = Controller(trainer=runner, global_step=runner.global_step,
                            checkpoint_manager=manager, steps_per_loop=5,
                            enable_async_checkpointing=async_checkpointing,
                            eval_summary_dir=str(tmp_path / "summaries/eval"))
    controller.train(20)
    assert len(manager.checkpoints) == 4
    assert controller.restore_checkpoint() == manager.checkpoints[-1]
    assert manager.checkpoints[-1].endswith("ckpt-20")


@pytest.mark.parametrize("return_numpy", [True, False], ids=["numpy", "tensor"])
@ASYNC
def test_train_and_evaluate(tmp_path, return_numpy, async_checkpointing):
    """Restates controller_test.ControllerTest.test_train_and_evaluate."""

    class Runner(tiny.ll.Trainer):
        def train_loop_end(self):
            logs = super().train_loop_end()
            return {k: v.numpy() for k, v in logs.items()} if return_numpy else logs

    runner = make_runner(Runner)
    manager = make_manager(runner, tmp_path, interval=10)
    controller = Controller(trainer=runner, evaluator=runner, global_step=runner.global_step,
                            steps_per_loop=2, summary_dir=str(tmp_path / "summaries/train"),
                            checkpoint_manager=manager,
                            enable_async_checkpointing=async_checkpointing,
                            eval_summary_dir=str(tmp_path / "summaries/eval"))
    controller.train_and_evaluate(train_steps=10, eval_steps=2, eval_interval=6)
    assert [os.path.basename(p) for p in checkpoint_indexes(tmp_path)] == [
        "ckpt-10.index", "ckpt-2.index"]  # the first loop (nothing saved yet), then the end
    assert tags(tmp_path / "summaries/train")["training_loss"] == [2, 4, 6, 8, 10]
    assert tags(tmp_path / "summaries/eval")["validation_loss"] == [6, 10]


@ASYNC
def test_train_only(tmp_path, async_checkpointing):
    """Restates controller_test.ControllerTest.test_train_only."""
    runner = make_runner()
    manager = make_manager(runner, tmp_path, interval=10)
    controller = Controller(trainer=runner, global_step=runner.global_step, steps_per_loop=2,
                            summary_dir=str(tmp_path / "summaries/train"),
                            checkpoint_manager=manager,
                            enable_async_checkpointing=async_checkpointing,
                            eval_summary_dir=str(tmp_path / "summaries/eval"))
    controller.train(steps=10)
    assert checkpoint_indexes(tmp_path)
    assert tags(tmp_path / "summaries/train")["training_loss"] == [2, 4, 6, 8, 10]
    assert not (tmp_path / "summaries/eval").exists()


def test_evaluate_only(tmp_path):
    """Restates controller_test.ControllerTest.test_evaluate_only."""
    runner = make_runner()
    manager = saved_model_only_manager(runner, tmp_path)
    controller = Controller(evaluator=runner, global_step=runner.global_step,
                            checkpoint_manager=manager,
                            summary_dir=str(tmp_path / "summaries/train"),
                            eval_summary_dir=str(tmp_path / "summaries/eval"))
    results = controller.evaluate(steps=2)
    assert not (tmp_path / "summaries/train").exists()
    assert tags(tmp_path / "summaries/eval")["validation_loss"] == [0]
    assert "validation_loss" in results

    done_file = tmp_path / "summaries/eval/Done"

    def timeout_fn():
        done_file.write_text("DONE")
        return True

    controller = Controller(evaluator=runner, global_step=runner.global_step,
                            checkpoint_manager=manager,
                            eval_summary_dir=str(tmp_path / "summaries/eval"))
    controller.evaluate_continuously(timeout=1, timeout_fn=timeout_fn, steps=2)
    assert done_file.exists()


def test_no_eval_steps(tmp_path):
    """Restates controller_test.ControllerTest.test_no_eval_steps."""
    runner = make_runner()
    manager = saved_model_only_manager(runner, tmp_path)
    controller = Controller(evaluator=runner, global_step=runner.global_step,
                            checkpoint_manager=manager)
    output = controller.evaluate()  # -1: the whole (finite) validation set
    x, y = tiny.make_data()
    logits = runner.model(x)
    accuracy = np.mean(np.argmax(logits, axis=1) == y)
    np.testing.assert_allclose(output["accuracy"], accuracy, rtol=1e-6)
    assert "steps_per_second" not in output


@ASYNC
def test_already_trained_model(tmp_path, async_checkpointing):
    """Restates controller_test.ControllerTest.test_already_trained_model."""
    runner = make_runner()
    runner.global_step.assign(10)
    manager = make_manager(runner, tmp_path, interval=10)
    controller = Controller(trainer=runner, global_step=runner.global_step, steps_per_loop=2,
                            checkpoint_manager=manager,
                            enable_async_checkpointing=async_checkpointing)
    assert controller.train(steps=10) is None
    assert int(runner.global_step.numpy()) == 10


def test_summaries_inside_train_fn(tmp_path):
    """Restates controller_test.ControllerTest.test_summaries_inside_train_fn."""

    class Runner(tiny.ll.Trainer):
        def train_step(self, iterator):
            super().train_step(iterator)
            summaries.scalar("inner_loss", self.train_loss.result())

    runner = make_runner(Runner)
    manager = make_manager(runner, tmp_path)
    controller = Controller(trainer=runner, global_step=runner.global_step, steps_per_loop=2,
                            summary_dir=str(tmp_path / "summaries/train"), summary_interval=2,
                            checkpoint_manager=manager)
    controller.train(steps=10)
    assert checkpoint_indexes(tmp_path) == []  # no interval: Orbit saves no checkpoint
    written = tags(tmp_path / "summaries/train")
    assert written["training_loss"] == [2, 4, 6, 8, 10]
    # Inside the tf.while_loop of the trainer, under the loop's name scope.
    (inner,) = [tag for tag in written if tag.endswith("inner_loss")]
    assert written[inner] == [2, 4, 6, 8, 10]
    assert not (tmp_path / "summaries/eval").exists()


def test_train_and_evaluate_with_same_summary_dir(tmp_path):
    """Restates controller_test.ControllerTest.test_train_and_evaluate_with_same_summary_dir."""
    runner = make_runner()
    manager = make_manager(runner, tmp_path)
    controller = Controller(trainer=runner, evaluator=runner, global_step=runner.global_step,
                            steps_per_loop=2, summary_dir=str(tmp_path / "summaries"),
                            checkpoint_manager=manager,
                            eval_summary_dir=str(tmp_path / "summaries"))
    controller.train_and_evaluate(train_steps=10, eval_steps=2, eval_interval=6)
    assert controller.eval_summary_manager is controller.summary_manager
    written = tags(tmp_path / "summaries")
    assert written["training_loss"] == [2, 4, 6, 8, 10]
    assert written["validation_loss"] == [6, 10]
    assert len(event_files(tmp_path / "summaries")) == 1


def test_early_stop_on_eval_loss(tmp_path):
    """Restates controller_test.ControllerTest.test_early_stop_on_eval_loss.

    A Controller subclass written against Orbit's internals (`_sync_on_async_checkpointing`).
    """
    runner = make_runner()

    class EarlyStopController(Controller):
        def train_and_evaluate(self, train_steps=None, eval_steps=None, eval_interval=None):
            while int(self.global_step.numpy()) < train_steps:
                interval = min(train_steps - int(self.global_step.numpy()), eval_interval)
                self.train(steps=int(self.global_step.numpy()) + interval,
                           checkpoint_at_completion=False)
                self._sync_on_async_checkpointing()
                if self.evaluate(steps=eval_steps)["validation_loss"] < 10.0:  # at once
                    return

    manager = make_manager(runner, tmp_path, interval=10)
    controller = EarlyStopController(trainer=runner, evaluator=runner,
                                     global_step=runner.global_step, steps_per_loop=2,
                                     checkpoint_manager=manager)
    controller.train_and_evaluate(train_steps=10, eval_steps=6, eval_interval=2)
    assert int(runner.global_step.numpy()) == 2


def test_evaluate_with_loss_output(tmp_path):
    """Restates controller_test.ControllerTest.test_evaluate_with_loss_output.

    Orbit's evaluator keeps a state: `eval_begin` returns a list, `eval_reduce` appends each
    step's loss, `eval_end` averages them.
    """

    class Evaluator(tiny.ll.Trainer):
        def eval_begin(self):
            super().eval_begin()
            return []

        def eval_reduce(self, state=None, step_outputs=None):
            state.append(step_outputs[self.task.loss][0])
            return state

        def eval_end(self, aggregated_logs=None):
            logs = super().eval_end()
            logs["eval_loss"] = tf.reduce_mean(aggregated_logs)
            return logs

    runner = make_runner(Evaluator)
    manager = saved_model_only_manager(runner, tmp_path, step_counter=False)
    controller = Controller(evaluator=runner, global_step=tf.Variable(0, dtype=tf.int64),
                            checkpoint_manager=manager,
                            eval_summary_dir=str(tmp_path / "summaries/eval"))
    output = controller.evaluate(steps=5)
    x, y = tiny.make_data()
    losses = [runner.task.build_losses(y[i:i + 8], runner.model(x[i:i + 8]))
              for i in range(0, 40, 8)]
    np.testing.assert_allclose(output["eval_loss"], np.mean(losses), rtol=1e-5)
    assert tags(tmp_path / "summaries/eval")["eval_loss"] == [0]


def test_evaluate_with_no_output(tmp_path):
    """Restates controller_test.ControllerTest.test_evaluate_with_no_output."""

    class NoOutput:
        def evaluate(self, num_steps):
            return None

    controller = Controller(evaluator=NoOutput(), global_step=tf.Variable(0, dtype=tf.int64),
                            eval_summary_dir=str(tmp_path / "summaries/eval"))
    assert set(controller.evaluate(steps=5)) == {"steps_per_second"}


def test_train_and_evaluate_reset_datasets(tmp_path):
    """Restates controller_test.ControllerTest.test_train_and_evaluate_reset_datasets."""
    runner = make_runner()
    controller = Controller(trainer=runner, evaluator=runner, global_step=runner.global_step,
                            steps_per_loop=2)
    controller.train_and_evaluate(train_steps=10, eval_steps=2, eval_interval=6)
    task, config = runner.task, runner.config
    runner.train_dataset = task.build_inputs(config.task.train_data)
    runner.eval_dataset = task.build_inputs(config.task.validation_data)
    # Already at train_steps: nothing runs (Orbit), with or without new datasets.
    assert controller.train_and_evaluate(train_steps=10, eval_steps=2, eval_interval=6) is None
    assert controller.train_and_evaluate(train_steps=12, eval_steps=2, eval_interval=6)
    assert int(runner.global_step.numpy()) == 12


@ASYNC
def test_eval_and_checkpoint_interval(tmp_path, async_checkpointing):
    """Restates controller_test.ControllerTest.test_eval_and_checkpoint_interval."""
    runner = make_runner()
    manager = make_manager(runner, tmp_path, interval=5)
    controller = Controller(trainer=runner, evaluator=runner, global_step=runner.global_step,
                            steps_per_loop=10, checkpoint_manager=manager,
                            enable_async_checkpointing=async_checkpointing,
                            summary_dir=str(tmp_path))
    controller.train_and_evaluate(train_steps=10, eval_steps=2, eval_interval=5)
    assert len(tf.io.gfile.glob(str(tmp_path / "ckpt-*.data*"))) == 2  # at 5 and 10
    assert tags(tmp_path)["validation_loss"] == [5, 10]


@pytest.mark.parametrize("inject_summary_manager", [False, True], ids=["default", "injected"])
def test_evaluate_with_nested_summaries(tmp_path, inject_summary_manager):
    """Restates controller_test.ControllerTest.test_evaluate_with_nested_summaries."""

    class TwoDatasets:
        def evaluate(self, num_steps):
            return {"dataset": {"loss": tf.constant(0.5), "accuracy": tf.constant(0.25)},
                    "dataset2": {"loss": tf.constant(1.5), "accuracy": tf.constant(0.75)}}

    summary_manager = (SummaryManager(str(tmp_path), global_step=tf.Variable(0, dtype=tf.int64))
                       if inject_summary_manager else None)
    controller = Controller(evaluator=TwoDatasets(), global_step=tf.Variable(0, dtype=tf.int64),
                            eval_summary_dir=str(tmp_path), summary_manager=summary_manager)
    controller.evaluate(steps=5)
    for name, loss, accuracy in (("dataset", 0.5, 0.25), ("dataset2", 1.5, 0.75)):
        written = tensorboard_scalars(str(tmp_path / name))
        assert {tag: [float(v) for _, v, _ in events] for tag, events in written.items()} == {
            "loss": [loss], "accuracy": [accuracy]}


def test_actions(tmp_path):
    """Restates controller_test.ControllerTest.test_actions."""
    runner = make_runner()
    manager = make_manager(runner, tmp_path, interval=10)
    train_outputs, eval_outputs = [], []
    controller = Controller(trainer=runner, evaluator=runner,
                            train_actions=[train_outputs.append],
                            eval_actions=[eval_outputs.append],
                            global_step=runner.global_step, steps_per_loop=2,
                            summary_dir=str(tmp_path / "summaries/train"),
                            checkpoint_manager=manager,
                            eval_summary_dir=str(tmp_path / "summaries/eval"))
    controller.train_and_evaluate(train_steps=10, eval_steps=2, eval_interval=6)
    assert len(train_outputs) == 5
    assert all(float(output["training_loss"]) >= 0 for output in train_outputs)
    assert len(eval_outputs) == 2
    assert all(float(output["validation_loss"]) >= 0 for output in eval_outputs)


def test_step_per_loop_callable(tmp_path):
    """Restates controller_test.ControllerTest.test_step_per_loop_callable."""
    runner = make_runner()
    manager = make_manager(runner, tmp_path, interval=10)
    sizes = []

    def steps_per_loop_fn(global_step):
        sizes.append(4 if global_step > 4 else 2)
        return sizes[-1]

    controller = Controller(trainer=runner, global_step=runner.global_step,
                            steps_per_loop=steps_per_loop_fn, checkpoint_manager=manager)
    controller.train(steps=10)
    assert int(runner.global_step.numpy()) == 10
    assert sizes == [2, 2, 2, 4]  # at steps 0, 2, 4, 6; the last loop is cut to 10
