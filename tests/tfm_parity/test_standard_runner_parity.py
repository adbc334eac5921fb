"""TFM parity: orbit/standard_runner_test.py restated on lite_launcher.Trainer.

lite_launcher has no separate StandardTrainer / StandardEvaluator: `ll.Trainer` runs their
loops (its `train` / `evaluate` and hooks), and its options come from the trainer config
(`train_tf_while_loop`, `eval_tf_while_loop`, ...). Orbit's test runners are restated as
Trainer subclasses that override the hooks, fed with Orbit's datasets.
"""

import pytest
import tensorflow as tf

import lite_launcher as ll
from lite_launcher.core.base_trainer import create_global_step
from mock_task import MockTask, mock_config


def ones_dataset(input_context=None):
    """Orbit's test dataset: [1, 1] zeros, forever."""
    del input_context
    return tf.data.Dataset.range(1).repeat().map(lambda _: tf.zeros((1, 1), tf.float32))


class StepOnlyTask(MockTask):
    """Orbit's runners have no task: nothing is aggregated (Orbit's base eval_reduce)."""

    aggregate_logs = ll.Task.aggregate_logs
    reduce_aggregated_logs = ll.Task.reduce_aggregated_logs


def build_runner(runner_cls, dataset_fn=ones_dataset, **trainer_options):
    strategy = tf.distribute.get_strategy()
    dataset = strategy.distribute_datasets_from_function(dataset_fn)
    config = mock_config(**trainer_options)
    task = StepOnlyTask(config.task)
    return runner_cls(config, task, model=task.build_model(),
                      optimizer=task.create_optimizer(config.trainer.optimizer_config),
                      train_dataset=dataset, validation_dataset=dataset)


class CountingRunner(ll.Trainer):
    """Orbit's TestTrainer and TestEvaluator: hooks that count steps in their own variable."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.count = create_global_step()

    def train_loop_begin(self):
        self.count.assign(0)

    def train_step(self, iterator):
        self.strategy.run(lambda _: self.count.assign_add(1), args=(next(iterator),))

    def train_loop_end(self):
        return self.count.numpy()

    def eval_begin(self):
        self.count.assign(0)

    def eval_step(self, iterator):
        self.strategy.run(lambda _: self.count.assign_add(1), args=(next(iterator),))

    def eval_end(self, aggregated_logs=None):
        return self.count.numpy()


class AggregatingEvaluator(ll.Trainer):
    """Orbit's TestEvaluatorWithOutputsAggregation: eval_begin starts a state that eval_reduce
    grows by each step's output; eval_end sums it."""

    def eval_begin(self):
        return {"logits": tf.constant((0.0,))}

    def eval_reduce(self, state=None, step_outputs=None):
        state["logits"] = tf.concat([state["logits"], step_outputs], 0)
        return state

    def eval_step(self, iterator):
        outputs = self.strategy.run(lambda x: tf.reduce_sum(tf.cast(x, tf.float32)),
                                    args=(next(iterator),))
        return self.strategy.experimental_local_results(outputs)

    def eval_end(self, aggregated_logs=None):
        return tf.reduce_sum(aggregated_logs["logits"])


def range_dataset(input_context=None):
    del input_context
    return tf.data.Dataset.range(10)


def test_default_trainer():
    """Restates standard_runner_test.StandardRunnerTest.test_default_trainer (the default
    options: a tf.function with a tf.while_loop)."""
    trainer = build_runner(CountingRunner)
    assert trainer.train(tf.constant(10)) == 10


@pytest.mark.parametrize("use_tf_while_loop", [True, False])
def test_default_evaluator(use_tf_while_loop):
    """Restates standard_runner_test.StandardRunnerTest.test_default_evaluator."""
    evaluator = build_runner(CountingRunner, eval_tf_while_loop=use_tf_while_loop)
    assert evaluator.evaluate(tf.constant(10)) == 10


@pytest.mark.parametrize("use_tf_while_loop", [True, False])
def test_evaluator_with_outputs_aggregation(use_tf_while_loop):
    """Restates standard_runner_test.StandardRunnerTest.test_evaluator_with_outputs_aggregation:
    0 + 1 + ... + 9 folded into a growing state."""
    evaluator = build_runner(AggregatingEvaluator, range_dataset,
                             eval_tf_while_loop=use_tf_while_loop)
    assert float(evaluator.evaluate(tf.constant(10))) == 45.0


def test_evaluator_with_repeat_dataset():
    """Restates standard_runner_test.StandardRunnerTest.test_evaluator_with_repeat_dataset
    (recreate_iterator_for_each_eval=True, Orbit's default and lite's only behaviour): each
    evaluation reads the dataset from the top, so two 5-step evaluations both sum 0..4."""
    evaluator = build_runner(AggregatingEvaluator, range_dataset)
    assert float(evaluator.evaluate(tf.constant(5))) == 10.0
    assert float(evaluator.evaluate(tf.constant(5))) == 10.0
