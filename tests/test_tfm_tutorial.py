"""Issue 18: TFM's own tutorial code runs on lite after an import change.

Each test restates one numbered item of the issue the way a TFM user writes it: the
"customize training launcher" guide's `CustomTrainer` with `base_trainer.Trainer`'s own
bodies, TFM's EMA block in `eval_end`, the ranking driver's two-optimizer model, a fork of
`vision/train.py` (its own `--enable_async_checkpointing`, gin parsed first). The TFM lines
are kept as TFM writes them; only imports change (`official.core.base_trainer` ->
`lite_launcher`, `official.modeling.optimization` -> `lite_launcher.optimization`).
The ranking example (examples/ranking/) runs end to end in test_examples.py.
"""

import dataclasses
import glob
import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

from lite_launcher import optimization  # TFM: from official.modeling import optimization
import lite_launcher as ll

import tiny
from test_modes import checkpoint_values, subprocess_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _sgd_with(**extra):
    return {"optimizer": {"type": "sgd", "sgd": {"momentum": 0.5}},
            "learning_rate": {"type": "constant", "constant": {"learning_rate": 0.1}}, **extra}


def _config(optimizer_config=None, **trainer):
    config = tiny.make_config(**{"train_steps": 6, "steps_per_loop": 2, "summary_interval": 2,
                                 "checkpoint_interval": 2, "validation_interval": 2, **trainer})
    if optimizer_config is not None:
        config.trainer.optimizer_config = optimizer_config
    return config


def _run(config, trainer_cls, model_dir, mode="train_and_eval"):
    """run_experiment with a trainer built as TFM's guide builds it (in the strategy scope)."""
    strategy = tf.distribute.get_strategy()
    with strategy.scope():
        task = tiny.TinyTask(config.task)
        model = task.build_model()
        optimizer = task.create_optimizer(config.trainer.optimizer_config, config.runtime)
        trainer = trainer_cls(config, task, model=model, optimizer=optimizer)
    ll.run_experiment(distribution_strategy=strategy, task=task, mode=mode, params=config,
                      model_dir=model_dir, trainer=trainer, save_summary=False)
    return trainer


# ------------------------------------------------------------------------------------------
# Items 1 and 3: the guide's CustomTrainer with base_trainer.Trainer's own bodies.

class GuideTrainer(ll.Trainer):  # TFM: class CustomTrainer(base_trainer.Trainer)
    """train_step / eval_step / train_loop_end / eval_end with TFM 2.20's base bodies."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.loop_logs = []
        self.eval_logs = []

    def train_step(self, iterator):
        def step_fn(inputs):
            if self.config.runtime.enable_xla and (self.config.runtime.num_gpus > 0):
                task_train_step = tf.function(self.task.train_step, jit_compile=True)
            else:
                task_train_step = self.task.train_step
            logs = task_train_step(
                inputs,
                model=self.model,
                optimizer=self.optimizer,
                metrics=self.train_metrics)
            self._train_loss.update_state(logs[self.task.loss])
            self.global_step.assign_add(1)

        inputs = self.next_train_inputs(iterator)
        self.strategy.run(step_fn, args=(inputs,), options=self._runtime_options)

    def eval_step(self, iterator):
        def step_fn(inputs):
            logs = self.task.validation_step(
                inputs, model=self.model, metrics=self.validation_metrics)
            if self.task.loss in logs:
                self._validation_loss.update_state(logs[self.task.loss])
            return logs

        inputs, passthrough_logs = self.next_eval_inputs(iterator)
        distributed_outputs = self.strategy.run(step_fn, args=(inputs,))
        logs = tf.nest.map_structure(
            self.strategy.experimental_local_results, distributed_outputs
        )
        return {**passthrough_logs, **logs}

    def train_loop_end(self):
        self.join()
        logs = {}
        for metric in self.train_metrics + [self.train_loss]:
            logs[metric.name] = metric.result()
            metric.reset_states()
        if callable(self.optimizer.learning_rate):
            if hasattr(self.optimizer, "iterations"):
                logs["learning_rate"] = self.optimizer.learning_rate(
                    self.optimizer.iterations)
            else:
                logs["learning_rate"] = self.optimizer.learning_rate(self.global_step)
        else:
            logs["learning_rate"] = self.optimizer.learning_rate
        self.loop_logs.append({k: float(v) for k, v in logs.items()})
        return logs

    def eval_end(self, aggregated_logs=None):
        self.join()
        logs = {}
        for metric in self.validation_metrics:
            logs[metric.name] = metric.result()
        if self.validation_loss.count.numpy() != 0:
            logs[self.validation_loss.name] = self.validation_loss.result()
        if aggregated_logs:
            metrics = self.task.reduce_aggregated_logs(
                aggregated_logs, global_step=self.global_step)
            logs.update(metrics)

        if self._checkpoint_exporter:
            self._checkpoint_exporter.maybe_export_checkpoint(
                self.checkpoint, logs, self.global_step.numpy())
            metric_name = self.config.trainer.best_checkpoint_eval_metric
            logs["best_" + metric_name] = self._checkpoint_exporter.best_ckpt_logs[metric_name]

        # Swaps back weights after testing when EMA is used.
        if self.optimizer and isinstance(self.optimizer,
                                         optimization.ExponentialMovingAverage):
            self.optimizer.swap_weights()
        self.eval_logs.append({k: float(v) for k, v in logs.items()})
        return logs


class RecordingTrainer(ll.Trainer):
    def evaluate(self, num_steps):
        logs = super().evaluate(num_steps)
        self.eval_logs = getattr(self, "eval_logs", []) + [{k: float(v)
                                                            for k, v in logs.items()}]
        return logs


def test_guide_custom_trainer_with_base_bodies_and_ema_trains_as_the_base_trainer(tmp_path):
    # Items 1 and 3: reset_states() on the trainer's metrics, and TFM's EMA block in
    # eval_end. lite's own eval_begin swaps the averages in; the ported eval_end must swap
    # them back, or training would go on from the averaged weights after each evaluation.
    ema = _sgd_with(ema={"average_decay": 0.9, "dynamic_decay": True})
    guide = _run(_config(ema), GuideTrainer, str(tmp_path / "guide"))
    base = _run(_config(ema), RecordingTrainer, str(tmp_path / "base"))
    assert isinstance(guide.optimizer, optimization.ExponentialMovingAverage)
    assert int(guide.global_step.numpy()) == 6 and len(guide.eval_logs) == 3
    for ported, own in zip(guide.model.get_weights(), base.model.get_weights()):
        np.testing.assert_allclose(ported, own, rtol=1e-6, atol=1e-7)
    # The evaluations saw the averaged weights, as the base trainer's.
    for ported, own in zip(guide.eval_logs, base.eval_logs):
        assert ported["accuracy"] == pytest.approx(own["accuracy"])
        assert ported["validation_loss"] == pytest.approx(own["validation_loss"], rel=1e-5)
    # Metrics were reset at each loop end: a 2-step loop over 8 examples each.
    assert [log["learning_rate"] for log in guide.loop_logs] == pytest.approx([0.1] * 3)
    for log in guide.loop_logs:
        assert log["accuracy"] * 16 == pytest.approx(round(log["accuracy"] * 16))


def test_reset_states_works_on_every_metric_the_trainer_hands_out():
    # Item 1: TFM calls reset_states() (tf_keras's name) on what the trainer gives it.
    trainer = tiny.make_trainer()
    trainer.train(2)
    metrics = trainer.train_metrics + trainer.validation_metrics + [trainer.train_loss,
                                                                    trainer.validation_loss]
    trainer.train_loss.update_state(3.0)
    trainer.train_metrics[0].update_state([0, 1], [[1.0, 0, 0], [0, 1.0, 0]])
    for metric in metrics:
        metric.reset_states()
    assert float(trainer.train_loss.result()) == 0.0
    assert int(trainer.train_loss.count.numpy()) == 0
    assert float(trainer.train_metrics[0].result()) == 0.0


def test_optimizer_built_with_ema_is_tfms_exponential_moving_average():
    # Item 3: the class TFM's code tests for, with its swap_weights / shadow_copy.
    model = tiny.TinyTask(tiny.TinyTaskConfig()).build_model()
    for ema in ({"average_decay": 0.5, "dynamic_decay": False},
                {"average_decay": 0.9, "start_step": 2}):
        config = ll.OptimizationConfig(_sgd_with(ema=ema))
        factory = ll.OptimizerFactory(config)
        optimizer = factory.build_optimizer(factory.build_learning_rate())
        assert isinstance(optimizer, optimization.ExponentialMovingAverage)
        assert not optimizer.has_shadow_copy
        optimizer.shadow_copy(model)
        assert optimizer.has_shadow_copy
        for _ in range(3):
            optimizer.apply_gradients(
                [(tf.ones_like(v), v) for v in model.trainable_variables])
        weights = [v.numpy() for v in model.trainable_variables]
        averages = [a.numpy() for a in optimization.ema_variables(optimizer)]
        assert not np.allclose(weights[0], averages[0])
        optimizer.swap_weights()
        for variable, average in zip(model.trainable_variables, averages):
            np.testing.assert_array_equal(variable.numpy(), average)
        optimizer.swap_weights()
        for variable, weight in zip(model.trainable_variables, weights):
            np.testing.assert_array_equal(variable.numpy(), weight)
    plain = ll.OptimizerFactory(ll.OptimizationConfig(_sgd_with()))
    assert not isinstance(plain.build_optimizer(0.1), optimization.ExponentialMovingAverage)


# ------------------------------------------------------------------------------------------
# Item 2: the learning rate the base Trainer logs; the replacement of TFM's call.

class TwoLayerTask(tiny.TinyTask):
    """TinyTask with an `embedding` layer and a `head`, for two optimizers."""

    def build_model(self):
        init = keras.initializers.GlorotUniform(seed=1)
        return keras.Sequential([
            keras.Input((tiny.NUM_FEATURES,)),
            keras.layers.Dense(5, kernel_initializer=init, name="embedding"),
            keras.layers.Dense(tiny.NUM_CLASSES, kernel_initializer=init, name="head")])

    @classmethod
    def create_optimizer(cls, optimizer_config, runtime_config=None):
        return two_optimizers()


def decaying(rate=0.05):
    return keras.optimizers.schedules.ExponentialDecay(rate, decay_steps=2, decay_rate=0.5)


def two_optimizers():
    return keras.optimizers.MultiOptimizer(keras.optimizers.OptimizerMap(
        default_optimizer=keras.optimizers.Adam(decaying()),
        optimizer_map={".*embedding/.*": keras.optimizers.SGD(0.2)}))


def test_base_trainer_logs_the_learning_rate_of_schedules_constants_and_each_optimizer():
    schedule = decaying(0.4)
    for optimizer, expected in ((keras.optimizers.SGD(schedule), {"learning_rate": 0.1}),
                                (keras.optimizers.SGD(0.3), {"learning_rate": 0.3})):
        trainer = tiny.make_trainer(optimizer=optimizer)
        logs = trainer.train(tf.constant(4))  # the rate of the next step, 4: 0.4 / 2 ** 2
        assert {k: float(logs[k]) for k in expected} == pytest.approx(expected)
    with tf.distribute.get_strategy().scope():
        task = TwoLayerTask(tiny.make_config().task)
        model = task.build_model()
        trainer = ll.Trainer(tiny.make_config(), task, model, task.create_optimizer(None))
    logs = trainer.train(tf.constant(4))
    rates = {k: float(v) for k, v in logs.items() if k.endswith("learning_rate")}
    assert rates == pytest.approx({"SGD_0_learning_rate": 0.2, "Adam_1_learning_rate": 0.0125})
    # TFM's legacy call cannot work on Keras 3 (the rate is a value); the replacement:
    adam = trainer.optimizer.optimizers[1]
    with pytest.raises(TypeError):
        adam.learning_rate(adam.iterations)
    assert float(ll.learning_rate_value(adam, adam.iterations)) == pytest.approx(0.0125)
    assert float(ll.learning_rate_value(adam, 6)) == pytest.approx(0.05 / 8)


# ------------------------------------------------------------------------------------------
# Item 8: two optimizers keep their state across a restart.

def _two_optimizer_run(model_dir, train_steps):
    config = _config(train_steps=train_steps, checkpoint_train_iterator=True)
    strategy = tf.distribute.get_strategy()
    with strategy.scope():
        task = TwoLayerTask(config.task)
    runner = ll.ExperimentRunner(distribution_strategy=strategy, task=task, mode="train",
                                 params=config, model_dir=model_dir, save_summary=False)
    runner.run()
    return runner.trainer


def test_two_optimizers_resume_as_a_straight_run(tmp_path):
    straight = _two_optimizer_run(str(tmp_path / "straight"), 6)
    _two_optimizer_run(str(tmp_path / "resumed"), 2)
    resumed = _two_optimizer_run(str(tmp_path / "resumed"), 6)  # restarts from ckpt-2
    assert int(resumed.global_step.numpy()) == 6
    for optimizer in resumed.optimizer.optimizers:
        assert int(optimizer.iterations.numpy()) == 6  # not restarted at 0
    for a, b in zip(straight.model.get_weights(), resumed.model.get_weights()):
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-7)
    for a, b in zip(straight.optimizer.variables, resumed.optimizer.variables):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-6, atol=1e-7)
    saved = checkpoint_values(str(tmp_path / "resumed" / "ckpt-6"))
    for i in (0, 1):
        assert saved[f"optimizer/inner_optimizer_{i}/_iterations/.ATTRIBUTES/VARIABLE_VALUE"] == 6


def test_apply_update_with_a_list_of_optimizers_says_what_to_use():
    task = tiny.TinyTask(tiny.TinyTaskConfig())
    with pytest.raises(TypeError, match="MultiOptimizer, or override TinyTask.apply_update"):
        task.apply_update(None, [], 0.0, None, model=None,
                          optimizer=[keras.optimizers.SGD(), keras.optimizers.Adam()])


# ------------------------------------------------------------------------------------------
# Item 9: a model compiled with its optimizer brings no made-up `loss` metric.

class OwnMetricModel(keras.Model):
    """A model that defines a metric of its own (kept), compiled with loss and metrics."""

    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(tiny.NUM_CLASSES)
        self.top2 = keras.metrics.SparseTopKCategoricalAccuracy(k=2, name="top2")

    def call(self, inputs, training=False):
        return self.dense(inputs)


def test_compiled_model_brings_only_the_metrics_it_defines():
    strategy = tf.distribute.get_strategy()
    with strategy.scope():
        task = tiny.TinyTask(tiny.make_config().task)
        model = OwnMetricModel()
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", metrics=["mae"])
        model(tf.zeros((1, tiny.NUM_FEATURES)))
        assert "loss" in [m.name for m in model.metrics]  # Keras's compile tracker
        trainer = ll.Trainer(tiny.make_config(), task, model, model.optimizer)
    assert [m.name for m in trainer.train_metrics] == ["accuracy", "top2"]
    train_logs = trainer.train(tf.constant(2))
    eval_logs = trainer.evaluate(tf.constant(2))
    assert set(train_logs) == {"accuracy", "top2", "training_loss", "learning_rate"}
    assert set(eval_logs) == {"accuracy", "top2", "validation_loss"}
    assert 0.0 < float(eval_logs["top2"]) <= 1.0


# ------------------------------------------------------------------------------------------
# Items 4, 5, 6, 7: a fork of vision/train.py, gin parsed first.

FORKED_DRIVER = '''
import json
import os

from absl import app
from absl import flags
import gin

from lite_launcher import train_lib        # TFM: from official.core import train_lib
import lite_launcher as ll                 # TFM: official.common / official.core / ...

FLAGS = flags.FLAGS

flags.DEFINE_bool(
    "enable_async_checkpointing",
    default=True,
    help="A boolean indicating whether to enable async checkpoint saving")


@gin.configurable
class GinTrainer(ll.Trainer):
    def __init__(self, *args, note="unset", **kwargs):
        super().__init__(*args, **kwargs)
        with open(os.path.join(os.environ["RECORD_DIR"], "trainer.json"), "w") as f:
            json.dump({"class": type(self).__name__, "note": note}, f)


@gin.configurable
def mark_optimizer(optimizer):
    with open(os.path.join(os.environ["RECORD_DIR"], "optimizer.txt"), "w") as f:
        f.write(type(optimizer).__name__)
    return optimizer


def main(_):
    gin.parse_config_files_and_bindings(FLAGS.gin_file, FLAGS.gin_params)
    params = ll.parse_configuration(FLAGS)
    model_dir = FLAGS.model_dir
    if "train" in FLAGS.mode:
        ll.serialize_config(params, model_dir)
    if params.runtime.mixed_precision_dtype:
        ll.set_mixed_precision_policy(params.runtime.mixed_precision_dtype)
    distribution_strategy = ll.get_distribution_strategy(
        distribution_strategy=params.runtime.distribution_strategy,
        all_reduce_alg=params.runtime.all_reduce_alg,
        num_gpus=params.runtime.num_gpus,
        tpu_address=params.runtime.tpu)
    with distribution_strategy.scope():
        task = ll.get_task(params.task, logging_dir=model_dir)
    train_lib.run_experiment(
        distribution_strategy=distribution_strategy,
        task=task,
        mode=FLAGS.mode,
        params=params,
        model_dir=model_dir,
        summary_manager=None,
        eval_summary_manager=ll.maybe_build_eval_summary_manager(
            params=params, model_dir=model_dir),
        enable_async_checkpointing=FLAGS.enable_async_checkpointing)
    ll.save_gin_config(FLAGS.mode, model_dir)


if __name__ == "__main__":
    ll.define_flags()
    flags.mark_flags_as_required(["experiment", "mode", "model_dir"])
    app.run(main)
'''

GIN_BINDINGS = [
    "create_trainer.trainer_cls = @GinTrainer",
    "GinTrainer.note = 'from gin'",
    "build_optimizer.postprocessor = @mark_optimizer",
    "run_experiment.save_summary = False",
    "get_train_actions.checkpoint_manager = None",  # passed explicitly: bindable, no effect
    "get_eval_actions.model_dir = None",
    "Trainer.checkpoint_exporter = None",
]


def test_forked_vision_driver_parses_gin_first_and_defines_its_own_flag(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(FORKED_DRIVER)
    model_dir = tmp_path / "model"
    env = subprocess_env()
    env["RECORD_DIR"] = str(tmp_path)
    result = subprocess.run(
        [sys.executable, str(script), "--experiment=mock", "--mode=train_and_eval",
         f"--model_dir={model_dir}",
         "--params_override=trainer.train_steps=4,trainer.steps_per_loop=2,"
         "trainer.summary_interval=2,trainer.checkpoint_interval=2,trainer.validation_steps=1,"
         "trainer.validation_interval=4,runtime.distribution_strategy=off"]
        + [f"--gin_params={binding}" for binding in GIN_BINDINGS],
        cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    with open(tmp_path / "trainer.json") as f:
        assert json.load(f) == {"class": "GinTrainer", "note": "from gin"}
    assert (tmp_path / "optimizer.txt").read_text() == "SGD"
    assert sorted(os.listdir(model_dir)) == [
        "checkpoint", "ckpt-2.data-00000-of-00001", "ckpt-2.index", "ckpt-4.data-00000-of-00001",
        "ckpt-4.index", "operative_config.train_and_eval.gin", "params.yaml"]  # no summaries
    operative = (model_dir / "operative_config.train_and_eval.gin").read_text()
    assert "GinTrainer.note = 'from gin'" in operative


def test_define_flags_defines_tfms_flags_only():
    code = textwrap.dedent('''
        from absl import flags
        import lite_launcher as ll
        ll.define_flags()
        ll.define_flags()  # twice is fine
        defined = flags.FLAGS.get_flags_for_module("lite_launcher.common.flags")
        print(" ".join(sorted(flag.name for flag in defined)))
    ''')
    result = subprocess.run([sys.executable, "-c", code], env=subprocess_env(), cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    # TFM's official/common/flags.py, less its Google-internal tpu_platform / tfhub_handle /
    # tflex_output_uri; lite-train's own flags are define_lite_train_flags'.
    assert result.stdout.split() == sorted(
        ["experiment", "mode", "model_dir", "config_file", "params_override", "gin_file",
         "gin_params", "tpu", "tf_data_service"])


def test_off_strategy_is_the_default_one_as_tfm_drivers_use_it():
    # Item 7: TFM's ranking driver calls these on the strategy it gets for "off".
    strategy = ll.get_distribution_strategy(distribution_strategy="off")
    assert strategy is tf.distribute.get_strategy()
    with strategy.scope():
        dataset = strategy.distribute_datasets_from_function(
            lambda context: tf.data.Dataset.range(4).batch(2))
    assert [list(batch.numpy()) for batch in dataset] == [[0, 1], [2, 3]]


def test_dist_strategy_keyword_of_the_guide_is_a_type_error_naming_the_argument():
    # Item 15: TFM silently drops `dist_strategy=` (and builds 'mirrored'); lite refuses it.
    with pytest.raises(TypeError, match="the argument is distribution_strategy="):
        ll.get_distribution_strategy(dist_strategy="off")


def test_save_gin_config_and_eval_summary_manager_are_where_a_porting_user_looks(tmp_path):
    # Item 5: TFM's train_utils.save_gin_config and summary_manager's builder.
    path = ll.save_gin_config("train", str(tmp_path))
    assert path == str(tmp_path / "operative_config.train.gin") and os.path.exists(path)
    params = ll.get_exp_config("mock")
    assert ll.maybe_build_eval_summary_manager(params=params, model_dir=str(tmp_path)) is None

    @dataclasses.dataclass
    class ImageTaskConfig(ll.TaskConfig):
        allow_image_summary: bool = True

    params = ll.ExperimentConfig(task=ImageTaskConfig())
    manager = ll.maybe_build_eval_summary_manager(params=params, model_dir=str(tmp_path))
    images = np.linspace(0, 1, 2 * 4 * 5 * 3, dtype=np.float32).reshape(2, 4, 5, 3)
    manager.write_summaries({"image/inputs": images, "accuracy": 0.5}, step=7)
    manager.flush()
    events = {}
    for path in glob.glob(str(tmp_path / "validation" / "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                events[value.tag] = (event.step, value)
    step, image = events["image/inputs"]
    assert step == 7 and image.metadata.plugin_data.plugin_name == "images"
    width, height, *pngs = tf.make_ndarray(image.tensor)
    assert (int(width), int(height), len(pngs)) == (5, 4, 2)
    np.testing.assert_allclose(tf.io.decode_png(pngs[1]).numpy() / 255.0, images[1], atol=0.003)
    assert events["accuracy"][1].metadata.plugin_data.plugin_name == "scalars"


# ------------------------------------------------------------------------------------------
# Items 10 and 11: TFM config semantics.

@dataclasses.dataclass
class L2TaskConfig(ll.TaskConfig):
    l2: float = 0.0


def test_replace_is_a_strict_override_copy_following_the_instances_class():
    # Item 10: a field holding a config of another class than declared (`task` is declared
    # TaskConfig); overrides follow the instance's class, strictly, on a copy.
    params = ll.ExperimentConfig(task=L2TaskConfig(l2=0.1)).lock()
    changed = params.replace(task={"l2": 0.3, "train_data": {"global_batch_size": 4}},
                             trainer={"train_steps": 5})
    assert type(changed.task) is L2TaskConfig and changed.task.l2 == 0.3
    assert changed.task.train_data.global_batch_size == 4 and changed.trainer.train_steps == 5
    assert params.task.l2 == 0.1 and params.trainer.train_steps == 0  # unchanged
    changed.task.l2 = 0.5  # the copy is unlocked
    with pytest.raises(KeyError, match="l3"):
        params.replace(task={"l3": 1.0})
    with pytest.raises(KeyError, match="l2"):  # as TFM: a plain TaskConfig has no l2
        ll.ExperimentConfig().replace(task=L2TaskConfig(l2=0.7))


def test_registered_experiment_refuses_training_data_with_is_training_null():
    # Item 11: TFM's experiments restrict `task.train_data.is_training != None`.
    params = ll.get_exp_config("digits_mlp")
    params.override({"task": {"train_data": {"is_training": None}}})
    with pytest.raises(ll.ConfigError, match="task.train_data.is_training is null"):
        params.validate()
    config = ll.get_exp_config("resnet_imagenet")
    config.task.train_data.is_training = None  # as TFM's image_classification_test
    with pytest.raises(KeyError):  # which catches a KeyError
        config.validate()
    with pytest.raises(ll.ConfigError, match="is_training is null"):
        params.replace(runtime={"num_gpus": 0}).validate()  # copies keep the check
    ll.ExperimentConfig().validate()  # a bare config, as TFM's base ExperimentConfig
