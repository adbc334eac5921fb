"""Trainer and inner loops: hooks, loop variants, retracing, eval, metrics, XLA, EMA."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import lite_launcher as ll
from lite_launcher.orbit import loops
import tiny
import xla_checks


def _numpy_logs(logs):
    return {k: float(v) for k, v in logs.items()}


# ---------------------------------------------------------------- hooks


class RecordingTrainer(ll.Trainer):
    """Overrides every hook and records the calls (tracing counts as a call)."""

    def __init__(self, *args, **kwargs):
        self.calls = []
        super().__init__(*args, **kwargs)

    def train_loop_begin(self):
        self.calls.append("train_loop_begin")
        return super().train_loop_begin()

    def next_train_inputs(self, iterator):
        self.calls.append("next_train_inputs")
        return super().next_train_inputs(iterator)

    def train_step(self, iterator):
        self.calls.append("train_step")
        return super().train_step(iterator)

    def train_loop_end(self):
        self.calls.append("train_loop_end")
        logs = super().train_loop_end()
        logs["extra"] = 7.0
        return logs

    def eval_begin(self):
        self.calls.append("eval_begin")
        return super().eval_begin()

    def next_eval_inputs(self, iterator):
        self.calls.append("next_eval_inputs")
        return super().next_eval_inputs(iterator)

    def eval_step(self, iterator):
        self.calls.append("eval_step")
        return super().eval_step(iterator)

    def eval_reduce(self, state=None, step_outputs=None):
        self.calls.append("eval_reduce")
        return (state or 0) + 1

    def eval_end(self, aggregated_logs=None):
        self.calls.append("eval_end")
        logs = super().eval_end(aggregated_logs)
        logs["num_reduced"] = aggregated_logs
        return logs


def test_hooks_are_called_in_order_eagerly():
    config = tiny.make_config(train_tf_function=False, train_tf_while_loop=False,
                              eval_tf_function=False)
    trainer = tiny.make_trainer(config, trainer_cls=RecordingTrainer)
    logs = trainer.train(3)
    assert trainer.calls == (["train_loop_begin"] + ["train_step", "next_train_inputs"] * 3
                             + ["train_loop_end"])
    assert logs["extra"] == 7.0
    assert int(trainer.global_step.numpy()) == 3

    trainer.calls.clear()
    logs = trainer.evaluate(-1)  # 64 examples / batch 8 = 8 steps
    # The 9th step finds the dataset exhausted: its inputs raise, nothing is reduced.
    assert trainer.calls == (["eval_begin"] + ["eval_step", "next_eval_inputs", "eval_reduce"] * 8
                             + ["eval_step", "next_eval_inputs", "eval_end"])
    # eval_reduce folded 8 steps (the base eval_begin gives state None; ours counts from 0).
    assert logs["num_reduced"] == 8


def test_hooks_traced_once_in_tf_while_loop():
    trainer = tiny.make_trainer(tiny.make_config(), trainer_cls=RecordingTrainer)
    trainer.train(tf.constant(5))
    trainer.train(tf.constant(7))
    # The step is traced once into the while loop; the eager hooks run once per loop.
    assert trainer.calls.count("train_step") == 1
    assert trainer.calls.count("next_train_inputs") == 1
    assert trainer.calls.count("train_loop_begin") == 2
    assert trainer.calls.count("train_loop_end") == 2
    assert int(trainer.global_step.numpy()) == 12


# ---------------------------------------------------------------- loops


LOOP_OPTIONS = [
    dict(train_tf_function=False, train_tf_while_loop=False),
    dict(train_tf_function=True, train_tf_while_loop=False),
    dict(train_tf_function=True, train_tf_while_loop=True),
]


def test_all_loop_variants_train_to_same_weights():
    results = []
    for options in LOOP_OPTIONS:
        trainer = tiny.make_trainer(tiny.make_config(**options))
        logs = trainer.train(tf.constant(6))
        logs.update(trainer.train(4))
        results.append(([w.numpy() for w in trainer.model.weights], _numpy_logs(logs)))
        assert int(trainer.global_step.numpy()) == 10
    for weights, logs in results[1:]:
        for a, b in zip(results[0][0], weights):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        assert logs == pytest.approx(results[0][1], rel=1e-5)


def test_while_loop_without_tf_function_is_an_error():
    with pytest.raises(ll.ConfigError, match="train_tf_function"):
        tiny.make_trainer(tiny.make_config(train_tf_function=False, train_tf_while_loop=True))
    with pytest.raises(ll.ConfigError, match="eval_tf_function"):
        tiny.make_trainer(tiny.make_config(eval_tf_function=False, eval_tf_while_loop=True,
                                           validation_steps=2))


def test_tf_while_loop_needs_tensor_num_steps():
    loop = loops.while_loop(lambda it: None)
    with pytest.raises(ValueError, match="tf.Tensor"):
        loop(iter([]), 3)


def test_changing_num_steps_does_not_retrace():
    traces = []

    def step(iterator):
        traces.append(1)
        next(iterator)

    loop = loops.make_train_loop(step, use_tf_function=True, use_tf_while_loop=True)
    iterator = iter(tf.data.Dataset.range(1000))
    for n in (1, 2, 5, 17):
        loop(iterator, tf.constant(n, tf.int32))
    assert len(traces) == 1
    # 1 + 2 + 5 + 17 elements consumed: the next one is 25.
    assert int(next(iterator)) == 25

    trainer = tiny.make_trainer()
    trainer.train(3)  # a Python int is converted to a tensor: still one trace
    trainer.train(4)
    trainer.train(tf.constant(5))
    assert trainer._train_loop.loop_fn.experimental_get_tracing_count() == 1


@pytest.mark.parametrize("eval_tf_function", [False, True])
def test_eval_minus_one_exhausts_dataset_and_counts_batches(eval_tf_function):
    counted = []

    class CountingTask(tiny.TinyTask):
        def aggregate_logs(self, state=None, step_logs=None):
            state = state or {"batches": 0, "examples": 0}
            state["batches"] += 1
            state["examples"] += sum(int(p[0]) for p in step_logs["batch_size"])
            return state

        def reduce_aggregated_logs(self, aggregated_logs, global_step=None):
            counted.append(aggregated_logs)
            return {"num_batches": aggregated_logs["batches"]}

        def validation_step(self, inputs, model, metrics=None):
            logs = super().validation_step(inputs, model, metrics)
            logs["batch_size"] = tf.shape(inputs[0])[:1]
            return logs

    config = tiny.make_config(eval_tf_function=eval_tf_function)
    config.task.validation_data.global_batch_size = 10  # 64 = 6 * 10 + 4: last batch partial
    with tf.distribute.get_strategy().scope():
        task = CountingTask(config.task)
        trainer = ll.Trainer(config, task, task.build_model(), keras.optimizers.SGD(0.1),
                             train=False)
    logs = trainer.evaluate(-1)
    assert logs["num_batches"] == 7
    assert counted[-1]["examples"] == tiny.NUM_EXAMPLES
    # A second evaluation starts again from the top of the validation set.
    assert trainer.evaluate(-1)["num_batches"] == 7
    assert trainer.evaluate(3)["num_batches"] == 3


def test_eval_while_loop_with_minus_one_is_an_error():
    trainer = tiny.make_trainer(tiny.make_config(eval_tf_while_loop=True,
                                                 validation_steps=4))
    with pytest.raises(ValueError, match="eval_tf_while_loop"):
        trainer.evaluate(-1)
    logs = trainer.evaluate(4)
    assert 0.0 <= float(logs["accuracy"]) <= 1.0


def test_eval_metrics_match_numpy():
    trainer = tiny.make_trainer()
    trainer.train(5)
    logs = trainer.evaluate(-1)
    x, y = tiny.make_data()
    logits = trainer.model(x).numpy()
    accuracy = np.mean(np.argmax(logits, -1) == y)
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    per_batch = [-log_probs[i:i + 8][np.arange(8), y[i:i + 8]].mean() for i in range(0, 64, 8)]
    assert float(logs["accuracy"]) == pytest.approx(accuracy, abs=1e-6)
    assert float(logs["validation_loss"]) == pytest.approx(np.mean(per_batch), rel=1e-5)



class StatefulEvalTrainer(ll.Trainer):
    """eval_begin starts a state; eval_reduce grows it by each step's per-replica losses."""

    def eval_begin(self):
        super().eval_begin()
        return {"losses": tf.zeros([0]), "steps": tf.constant(0)}

    def eval_reduce(self, state=None, step_outputs=None):
        losses = tf.stack(step_outputs[self.task.loss])
        return {"losses": tf.concat([state["losses"], losses], 0), "steps": state["steps"] + 1}

    def eval_end(self, aggregated_logs=None):
        logs = super().eval_end()
        logs.update(aggregated_logs)
        return logs


@pytest.mark.parametrize("eval_tf_while_loop", [False, True])
def test_stateful_evaluation_folds_every_step(eval_tf_while_loop):
    # The state's tensor grows each step: the while loop must relax its shape invariant.
    trainer = tiny.make_trainer(tiny.make_config(eval_tf_while_loop=eval_tf_while_loop,
                                                 validation_steps=5),
                                trainer_cls=StatefulEvalTrainer)
    trainer.train(3)
    logs = trainer.evaluate(5)
    x, y = tiny.make_data()
    logits = trainer.model(x).numpy()
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    per_batch = [-log_probs[i:i + 8][np.arange(8), y[i:i + 8]].mean() for i in range(0, 40, 8)]
    assert int(logs["steps"]) == 5
    np.testing.assert_allclose(logs["losses"].numpy(), per_batch, rtol=1e-5)
    assert float(logs["validation_loss"]) == pytest.approx(np.mean(per_batch), rel=1e-5)


# ------------------------------------------------------- passthrough logs


class PassthroughTrainer(ll.Trainer):
    def next_eval_inputs(self, iterator):
        inputs = next(iterator)
        return inputs, {"host_count": tf.constant(1), "loss": tf.constant(-1.0)}


class AggregatingTask(tiny.TinyTask):
    def aggregate_logs(self, state=None, step_logs=None):
        state = state or {"host_count": 0, "losses": []}
        state["host_count"] += int(step_logs["host_count"])
        state["losses"].append(float(np.mean(step_logs["loss"])))
        return state

    def reduce_aggregated_logs(self, aggregated_logs, global_step=None):
        return {"host_count": aggregated_logs["host_count"],
                "min_loss": min(aggregated_logs["losses"])}


def test_passthrough_logs_reach_aggregate_logs_and_model_keys_win(caplog):
    config = tiny.make_config()
    with tf.distribute.get_strategy().scope():
        task = AggregatingTask(config.task)
        trainer = PassthroughTrainer(config, task, task.build_model(),
                                     keras.optimizers.SGD(0.1), train=False)
    with caplog.at_level("WARNING"):
        logs = trainer.evaluate(-1)
    assert logs["host_count"] == 8
    # The model's loss (positive cross-entropy) won over the passthrough -1.
    assert logs["min_loss"] > 0
    assert any("clash" in r.getMessage() for r in caplog.records)


# ---------------------------------------------------------- global step / lr


def test_global_step_equals_optimizer_iterations_and_lr_logged():
    trainer = tiny.make_trainer(optimizer=keras.optimizers.SGD(
        keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5)))
    logs = trainer.train(10)
    assert int(trainer.global_step.numpy()) == int(trainer.optimizer.iterations.numpy()) == 10
    assert float(logs["learning_rate"]) == pytest.approx(0.1 * 0.5 ** (10 / 10))
    assert set(logs) == {"accuracy", "training_loss", "learning_rate"}
    # Metrics are reset after each loop: the next loop reports its own steps only.
    first = trainer.train(1)
    assert 0.0 <= float(first["accuracy"]) <= 1.0


class TwoOptimizerTrainer(ll.Trainer):
    """RankingTrainer-style: the kernel and the bias are updated by different optimizers."""

    def train_step(self, iterator):
        kernel, bias = self.model.trainable_variables

        def step_fn(inputs):
            x, y = inputs
            with tf.GradientTape() as tape:
                loss = self.task.build_losses(y, self.model(x, training=True))
            g_kernel, g_bias = tape.gradient(loss, [kernel, bias])
            self.optimizer["dense"].apply_gradients([(g_kernel, kernel)])
            self.optimizer["bias"].apply_gradients([(g_bias, bias)])
            self.train_loss.update_state(loss)
            self.global_step.assign_add(1)

        self.strategy.run(step_fn, args=(self.next_train_inputs(iterator),))


def test_two_optimizers_log_one_learning_rate_each():
    optimizers = {"dense": keras.optimizers.SGD(0.1), "bias": keras.optimizers.Adam(0.01)}
    trainer = tiny.make_trainer(trainer_cls=TwoOptimizerTrainer, optimizer=optimizers)
    logs = trainer.train(4)
    assert float(logs["dense_learning_rate"]) == pytest.approx(0.1)
    assert float(logs["bias_learning_rate"]) == pytest.approx(0.01)
    assert "learning_rate" not in logs
    assert int(optimizers["dense"].iterations.numpy()) == 4
    assert int(trainer.global_step.numpy()) == 4


# ------------------------------------------------------------- strategies


def test_mirrored_two_replicas_metrics_match_numpy():
    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    assert len(devices) >= 2, "conftest configures 2 logical CPU devices"
    strategy = ll.get_distribution_strategy("mirrored", devices=devices[:2])
    trainer = tiny.make_trainer(strategy=strategy)
    with strategy.scope():
        assert strategy.num_replicas_in_sync == 2
        trainer.train(tf.constant(3))
        logs = trainer.evaluate(-1)
    x, y = tiny.make_data()
    logits = trainer.model(x).numpy()
    assert float(logs["accuracy"]) == pytest.approx(np.mean(np.argmax(logits, -1) == y),
                                                    abs=1e-6)
    assert int(trainer.global_step.numpy()) == 3

    # Same global batch on one device gives the same weights (loss scaled by 1/replicas).
    single = tiny.make_trainer()
    single.train(tf.constant(3))
    for a, b in zip(trainer.model.weights, single.model.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


def test_xla_matches_non_xla():
    plain = tiny.make_trainer()
    plain.train(tf.constant(5))
    config = tiny.make_config()
    config.runtime.enable_xla = True
    xla = tiny.make_trainer(config)
    xla.train(tf.constant(5))
    # The loop that ran calls the task's whole step compiled by XLA; the plain one does not.
    compiled = xla_checks.xla_compiled_calls(xla)
    assert len(compiled) == 1 and "train_step" in compiled[0], compiled
    assert xla_checks.xla_compiled_calls(plain) == []
    for a, b in zip(plain.model.weights, xla.model.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


def test_setting_train_dataset_drops_old_iterator():
    trainer = tiny.make_trainer()
    trainer.train(2)
    assert trainer._train_loop.iterator is not None
    trainer.train_dataset = trainer.train_dataset
    assert trainer._train_loop.iterator is None
    trainer.train(1)
    assert int(trainer.global_step.numpy()) == 3


def test_missing_sections_are_clear_errors():
    config = tiny.make_config()
    config.task.train_data = None
    with pytest.raises(ll.ConfigError, match="task.train_data"):
        tiny.make_trainer(config)


def test_two_mirrored_strategies_in_one_process_do_not_clash():
    devices = [d.name for d in tf.config.list_logical_devices("CPU")][:2]
    for _ in range(2):  # a second strategy object used to hit a collective-key clash
        strategy = ll.get_distribution_strategy("mirrored", devices=devices)
        trainer = tiny.make_trainer(strategy=strategy)
        with strategy.scope():
            trainer.train(tf.constant(2))
        assert int(trainer.global_step.numpy()) == 2


# ------------------------------------------------------------------- EMA


def _ema_trainer(tmp_path=None):
    config = tiny.make_config()
    config.trainer.optimizer_config.override({"ema": {"average_decay": 0.5}})
    exporter = None
    if tmp_path is not None:
        config.trainer.override({"best_checkpoint_export_subdir": "best",
                                 "best_checkpoint_eval_metric": "accuracy"})
        exporter = ll.BestCheckpointExporter(str(tmp_path / "best"), "accuracy", "higher")
    with tf.distribute.get_strategy().scope():
        task = tiny.TinyTask(config.task)
        model = task.build_model()
        optimizer = task.create_optimizer(config.trainer.optimizer_config, config.runtime)
        trainer = ll.Trainer(config, task, model, optimizer, checkpoint_exporter=exporter)
    return trainer


def test_ema_swap_twice_restores_bit_for_bit():
    trainer = _ema_trainer()
    trainer.train(5)
    before = [w.numpy().copy() for w in trainer.model.trainable_variables]
    averages = [v.numpy().copy() for v in ll.optimization.ema_variables(trainer.optimizer)]
    trainer.swap_weights()
    swapped = [w.numpy() for w in trainer.model.trainable_variables]
    for a, b in zip(swapped, averages):
        np.testing.assert_array_equal(a, b)
    assert any(not np.array_equal(a, b) for a, b in zip(swapped, before))
    trainer.swap_weights()
    for a, b in zip(trainer.model.trainable_variables, before):
        np.testing.assert_array_equal(a.numpy(), b)


def test_exported_best_checkpoint_holds_ema_weights(tmp_path):
    trainer = _ema_trainer(tmp_path)
    trainer.train(5)
    raw = [w.numpy().copy() for w in trainer.model.trainable_variables]
    averages = [v.numpy().copy() for v in ll.optimization.ema_variables(trainer.optimizer)]
    logs = trainer.evaluate(-1)
    assert "best_accuracy" in logs
    # After evaluation the raw weights are back in the model.
    for a, b in zip(trainer.model.trainable_variables, raw):
        np.testing.assert_array_equal(a.numpy(), b)
    # The exported checkpoint holds the averaged weights that were evaluated.
    restored = tiny.TinyTask(trainer.config.task).build_model()
    status = tf.train.Checkpoint(model=restored).read(
        trainer.checkpoint_exporter.best_ckpt_path)
    status.expect_partial()
    for a, b in zip(restored.trainable_variables, averages):
        np.testing.assert_array_equal(a.numpy(), b)
