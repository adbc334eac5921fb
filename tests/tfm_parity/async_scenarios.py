"""The parameter-server scenarios of TFM's base_trainer_test, run in a fresh process.

    python async_scenarios.py

Starts an in-process cluster (2 workers, 1 ps), runs the three scenarios and prints their
results as one JSON line. A separate process because a process connected to a cluster stays
connected (test_base_trainer_parity.py reads the JSON).
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # local_devices

import tensorflow as tf  # noqa: E402

import lite_launcher as ll  # noqa: E402
from local_devices import start_local_cluster  # noqa: E402
from mock_task import MockTask, mock_config  # noqa: E402


class CountingAsyncTrainer(ll.Trainer):
    """Counts train and eval steps in variables on the ps task (TFM's MockAsyncTrainer)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.train_count = tf.Variable(0, dtype=tf.int64)
        self.eval_count = tf.Variable(0, dtype=tf.int64)

    def train_loop_begin(self):
        self.train_count.assign(0)

    def train_step(self, iterator):
        def replica_step(_):
            self.train_count.assign_add(1)
        self.strategy.run(replica_step, args=(next(iterator),))

    def train_loop_end(self):
        self.join()
        return int(self.train_count.numpy())

    def eval_begin(self):
        self.eval_count.assign(0)

    def eval_step(self, iterator):
        def replica_step(_):
            self.eval_count.assign_add(1)
        self.strategy.run(replica_step, args=(next(iterator),))

    def eval_end(self, aggregated_logs=None):
        self.join()
        return int(self.eval_count.numpy())


def build(trainer_cls, config):
    task = MockTask(config.task)
    return trainer_cls(config, task, model=task.build_model(),
                       optimizer=task.create_optimizer(config.trainer.optimizer_config,
                                                       config.runtime))


def main():
    resolver = start_local_cluster(num_workers=2, num_ps=1)
    strategy = ll.get_distribution_strategy("parameter_server", cluster_resolver=resolver)
    results = {}
    with strategy.scope():
        trainer = build(CountingAsyncTrainer, mock_config())
        results["coordinator"] = type(trainer.coordinator_for_async()).__name__
        results["train_steps"] = trainer.train(tf.constant(10))
        results["eval_steps"] = trainer.evaluate(tf.constant(11))

        config = mock_config(eval_tf_while_loop=True, validation_steps=5)
        logs = build(ll.Trainer, config).train(tf.convert_to_tensor(5, dtype=tf.int32))
        results["train_logs"] = sorted(logs)
        trainer = build(ll.Trainer, config)
        logs = trainer.evaluate(tf.convert_to_tensor(5, dtype=tf.int32))
        results["eval_logs"] = sorted(logs)
        results["validation_loss"] = float(logs["validation_loss"])
        results["validation_loss_count"] = float(trainer.validation_loss.count.numpy())

        # As TFM's _AsyncTrainer: an evaluation with a reduce state is refused.
        trainer.eval_begin = lambda: {"sum": tf.constant(0.0)}
        try:
            trainer.evaluate(tf.constant(2))
            results["stateful_error"] = None
        except ValueError as error:
            results["stateful_error"] = str(error)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
