"""Task: TFM's contract, the default train step against a numpy hand computation, init_checkpoint."""

import inspect
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from lite_launcher import optimization
import lite_launcher as ll
from lite_launcher.core.base_config import ConfigError
from lite_launcher.core.config_definitions import RuntimeConfig
from lite_launcher.optimization import OptimizationConfig

NUM_FEATURES, NUM_CLASSES, BATCH = 4, 3, 8
L2 = 0.01
LR = 0.1


class DenseTask(ll.Task):
    """Softmax regression with an L2 kernel regularizer: the loss is mean CE + model.losses."""

    def build_model(self):
        return keras.Sequential([
            keras.Input((NUM_FEATURES,)),
            keras.layers.Dense(
                NUM_CLASSES,
                kernel_initializer=keras.initializers.GlorotUniform(seed=3),
                bias_initializer=keras.initializers.RandomNormal(stddev=0.5, seed=4),
                kernel_regularizer=keras.regularizers.L2(L2)),
        ])

    def build_losses(self, labels, model_outputs, aux_losses=None):
        cross_entropy = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
            labels, model_outputs, from_logits=True))
        # The base class adds up the auxiliary (regularisation) losses.
        return cross_entropy + super().build_losses(labels, model_outputs, aux_losses)

    def build_metrics(self, training=True):
        return [keras.metrics.SparseCategoricalAccuracy("accuracy")]


def make_batch(seed=0, n=BATCH):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, NUM_FEATURES)).astype("float32")
    y = rng.integers(0, NUM_CLASSES, n).astype("int32")
    return x, y


def softmax(logits):
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def numpy_loss_and_grads(kernel, bias, x, y):
    """Mean cross-entropy + L2 * sum(kernel**2), and its gradients, by hand (float64)."""
    kernel, bias, x = kernel.astype("float64"), bias.astype("float64"), x.astype("float64")
    probs = softmax(x @ kernel + bias)
    onehot = np.eye(NUM_CLASSES)[y]
    loss = -np.mean(np.log(probs[np.arange(len(y)), y])) + L2 * np.sum(kernel ** 2)
    delta = (probs - onehot) / len(y)
    return loss, x.T @ delta + 2 * L2 * kernel, delta.sum(axis=0)


@pytest.fixture(scope="module")
def mirrored():
    return ll.get_distribution_strategy("mirrored", devices=["/cpu:0", "/cpu:1"])


def _optimizer(kind):
    sgd = keras.optimizers.SGD(LR)
    if kind == "plain":
        return sgd
    if kind == "dynamic_loss_scale":
        return optimization.configure_loss_scale(sgd, use_float16=True)
    return optimization.configure_loss_scale(sgd, use_float16=True, loss_scale=128.0)


def _run_one_step(strategy, optimizer_kind, x, y):
    """One `Task.train_step` under `strategy`; returns (model, optimizer, per-replica losses)."""
    task = DenseTask(ll.TaskConfig())
    with strategy.scope():
        model = task.build_model()
        optimizer = _optimizer(optimizer_kind)
        optimizer.build(model.trainable_variables)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(len(y))
    batch = next(iter(strategy.experimental_distribute_dataset(dataset)))
    initial = [v.numpy() for v in model.trainable_variables]

    @tf.function
    def step(inputs):
        return strategy.run(task.train_step, args=(inputs, model, optimizer))

    logs = step(batch)
    losses = [float(v) for v in strategy.experimental_local_results(logs[task.loss])]
    return initial, model, optimizer, losses


@pytest.mark.parametrize("optimizer_kind", ["plain", "dynamic_loss_scale", "fixed_loss_scale"])
@pytest.mark.parametrize("distributed", [False, True], ids=["default", "mirrored2"])
def test_train_step_update_matches_numpy_sgd_on_the_global_batch_mean(
        distributed, optimizer_kind, mirrored):
    x, y = make_batch()
    strategy = mirrored if distributed else tf.distribute.get_strategy()
    (kernel0, bias0), model, optimizer, losses = _run_one_step(strategy, optimizer_kind, x, y)

    loss, grad_kernel, grad_bias = numpy_loss_and_grads(kernel0, bias0, x, y)
    kernel, bias = (v.numpy() for v in model.trainable_variables)
    # Under 2 replicas each half-batch loss is divided by 2 and the gradients summed: the
    # update is the one of the global-batch mean, and a loss scale is removed exactly.
    np.testing.assert_allclose(kernel, kernel0 - LR * grad_kernel, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bias, bias0 - LR * grad_bias, rtol=1e-5, atol=1e-6)
    assert not np.allclose(kernel, kernel0)  # the step really moved the weights
    assert int(optimizer.iterations.numpy()) == 1
    assert len(losses) == strategy.num_replicas_in_sync
    if distributed:
        # Each replica reports the (unscaled) loss of its own half of the batch.
        for half, replica_loss in zip((slice(0, 4), slice(4, 8)), losses):
            expected, _, _ = numpy_loss_and_grads(kernel0, bias0, x[half], y[half])
            assert replica_loss == pytest.approx(expected, rel=1e-5)
    assert np.mean(losses) == pytest.approx(loss, rel=1e-5)


def test_loss_scale_optimizer_sees_scaled_gradients():
    # Without scaling, the optimizer's unscaling would shrink the step 2**15 times; pin that
    # compute_gradients really scales, so the equality above is not a coincidence.
    x, y = make_batch()
    task = DenseTask(ll.TaskConfig())
    model = task.build_model()
    optimizer = _optimizer("fixed_loss_scale")
    grads, loss, _ = task.compute_gradients((x, y), model, optimizer)
    _, grad_kernel, _ = numpy_loss_and_grads(*(v.numpy() for v in model.trainable_variables),
                                             x, y)
    np.testing.assert_allclose(grads[0].numpy(), 128.0 * grad_kernel, rtol=1e-5, atol=1e-4)
    assert float(loss) > 0


@pytest.mark.parametrize("distributed", [False, True], ids=["default", "mirrored2"])
def test_loss_scale_optimizer_skips_a_non_finite_step_and_halves_the_scale(distributed, mirrored):
    # Under 2 replicas the Inf is only in replica 1's half: both replicas must skip the step.
    x, y = make_batch()
    x[BATCH - 1, 0] = np.inf
    strategy = mirrored if distributed else tf.distribute.get_strategy()
    before, model, optimizer, _ = _run_one_step(strategy, "dynamic_loss_scale", x, y)
    for old, new in zip(before, model.trainable_variables):
        np.testing.assert_array_equal(new.numpy(), old)
    assert float(optimizer.dynamic_scale.numpy()) == 2.0 ** 15 / 2


def test_validation_step_returns_the_loss_updates_metrics_and_leaves_weights():
    x, y = make_batch(seed=1)
    task = DenseTask(ll.TaskConfig())
    model = task.build_model()
    kernel, bias = (v.numpy() for v in model.trainable_variables)
    metrics = task.build_metrics(training=False)
    logs = task.validation_step((x, y), model, metrics=metrics)
    loss, _, _ = numpy_loss_and_grads(kernel, bias, x, y)
    assert float(logs["loss"]) == pytest.approx(loss, rel=1e-5)
    accuracy = np.mean(np.argmax(x @ kernel + bias, axis=1) == y)
    assert float(metrics[0].result()) == pytest.approx(accuracy)
    np.testing.assert_array_equal(model.trainable_variables[0].numpy(), kernel)


def test_train_step_updates_metrics_with_the_step_outputs():
    x, y = make_batch(seed=2)
    task = DenseTask(ll.TaskConfig())
    model = task.build_model()
    kernel, bias = (v.numpy() for v in model.trainable_variables)
    metrics = task.build_metrics()
    task.train_step((x, y), model, keras.optimizers.SGD(LR), metrics=metrics)
    # The metric sees the outputs computed before the update.
    accuracy = np.mean(np.argmax(x @ kernel + bias, axis=1) == y)
    assert float(metrics[0].result()) == pytest.approx(accuracy)


def test_inference_step_runs_the_model_in_inference_mode():
    task = ll.Task(ll.TaskConfig())
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dropout(0.9)])
    x = np.ones((2, 4), "float32")
    np.testing.assert_array_equal(task.inference_step(x, model).numpy(), x)


def test_base_task_contract_and_defaults(tmp_path):
    config = ll.TaskConfig()
    task = ll.Task(config, logging_dir=str(tmp_path), name="my_task")
    assert task.loss == "loss"
    assert task.task_config is config
    assert task.logging_dir == str(tmp_path)
    assert task.name == "my_task"
    assert ll.Task(config).logging_dir == ""
    assert task.build_metrics() == [] and task.build_metrics(training=False) == []
    assert task.aggregate_logs(state={"n": 1}, step_logs={"loss": 2}) == {"n": 1}
    assert task.aggregate_logs() is None
    assert task.reduce_aggregated_logs({"n": 1}, global_step=3) == {}
    # The base loss is the sum of the auxiliary losses.
    assert float(task.build_losses(None, None, aux_losses=[tf.constant(1.5),
                                                           tf.constant(2.0)])) == 3.5
    assert float(task.build_losses(None, None)) == 0.0
    with pytest.raises(NotImplementedError, match="build_model"):
        task.build_model()
    with pytest.raises(NotImplementedError, match="build_inputs"):
        task.build_inputs(config.train_data, input_context=None)


def test_task_method_signatures_follow_tfm():
    expected = {
        "__init__": ["self", "params", "logging_dir", "name"],
        "initialize": ["self", "model"],
        "build_model": ["self"],
        "build_inputs": ["self", "params", "input_context"],
        "build_losses": ["self", "labels", "model_outputs", "aux_losses"],
        "build_metrics": ["self", "training"],
        "process_metrics": ["self", "metrics", "labels", "model_outputs", "kwargs"],
        "train_step": ["self", "inputs", "model", "optimizer", "metrics"],
        "validation_step": ["self", "inputs", "model", "metrics"],
        "inference_step": ["self", "inputs", "model"],
        "aggregate_logs": ["self", "state", "step_logs"],
        "reduce_aggregated_logs": ["self", "aggregated_logs", "global_step"],
    }
    for method, names in expected.items():
        assert list(inspect.signature(getattr(ll.Task, method)).parameters) == names, method
    assert list(inspect.signature(ll.Task.create_optimizer).parameters) == [
        "optimizer_config", "runtime_config"]  # a classmethod, as in TFM
    assert inspect.signature(ll.Task.build_inputs).parameters["input_context"].default is None
    assert inspect.signature(ll.Task.create_optimizer).parameters[
        "runtime_config"].default is None


def test_inputs_that_are_not_a_pair_are_both_features_and_labels():
    seen = {}

    class EchoTask(ll.Task):
        def build_losses(self, labels, model_outputs, aux_losses=None):
            seen["labels"] = labels
            return tf.reduce_mean(model_outputs)

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    features = tf.ones((3, 2))
    EchoTask(ll.TaskConfig()).validation_step(features, model)
    assert seen["labels"] is features


def test_create_optimizer_from_optimization_config_and_runtime():
    config = OptimizationConfig()
    config.override({"optimizer": {"type": "sgd", "sgd": {"momentum": 0.5}},
                     "learning_rate": {"type": "constant", "constant": {"learning_rate": 0.05}}})
    optimizer = ll.Task.create_optimizer(config)
    assert isinstance(optimizer, keras.optimizers.SGD)
    assert float(optimizer.learning_rate) == pytest.approx(0.05)
    assert optimizer.momentum == 0.5

    fp16 = RuntimeConfig(mixed_precision_dtype="float16")
    wrapped = ll.Task.create_optimizer(config, fp16)
    assert isinstance(wrapped, keras.optimizers.LossScaleOptimizer)
    assert isinstance(wrapped.inner_optimizer, keras.optimizers.SGD)
    fixed = ll.Task.create_optimizer(config, RuntimeConfig(mixed_precision_dtype="float16",
                                                           loss_scale=64.0))
    assert float(fixed.initial_scale) == 64.0
    assert float(fixed.scale_loss(tf.constant(2.0))) == 128.0
    bf16 = ll.Task.create_optimizer(config, RuntimeConfig(mixed_precision_dtype="bfloat16"))
    assert isinstance(bf16, keras.optimizers.SGD)


# ----- initialize(model) with task.init_checkpoint -----------------------------------------


def _weights(model):
    return [v.numpy() for v in model.weights]


def _trained_like_model(seed):
    """A model of DenseTask's shape whose weights differ from a fresh build."""
    model = DenseTask(ll.TaskConfig()).build_model()
    rng = np.random.default_rng(seed)
    for v in model.weights:
        v.assign(rng.normal(size=v.shape).astype("float32"))
    return model


def test_initialize_restores_weights_from_a_checkpoint_prefix(tmp_path):
    source = _trained_like_model(seed=7)
    prefix = tf.train.Checkpoint(model=source).write(str(tmp_path / "pretrained"))
    task = DenseTask(ll.TaskConfig(init_checkpoint=prefix))
    model = task.build_model()
    task.initialize(model)
    for got, want in zip(_weights(model), _weights(source)):
        np.testing.assert_array_equal(got, want)


def test_initialize_from_a_directory_uses_its_latest_checkpoint(tmp_path):
    # A checkpoint as the Trainer writes it (model, optimizer, step): only `model` is read.
    source = _trained_like_model(seed=1)
    optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
    optimizer.build(source.trainable_variables)
    checkpoint = tf.train.Checkpoint(model=source, optimizer=optimizer,
                                     global_step=tf.Variable(0, dtype=tf.int64))
    manager = tf.train.CheckpointManager(checkpoint, str(tmp_path), max_to_keep=3)
    manager.save(checkpoint_number=1)
    latest = _trained_like_model(seed=2)
    for target, value in zip(source.weights, latest.weights):
        target.assign(value)
    manager.save(checkpoint_number=2)
    task = DenseTask(ll.TaskConfig(init_checkpoint=str(tmp_path)))
    model = task.build_model()
    task.initialize(model)
    for got, want in zip(_weights(model), _weights(latest)):
        np.testing.assert_array_equal(got, want)


def test_initialize_without_init_checkpoint_changes_nothing():
    task = DenseTask(ll.TaskConfig())
    model = task.build_model()
    before = _weights(model)
    task.initialize(model)
    for got, want in zip(_weights(model), before):
        np.testing.assert_array_equal(got, want)


def test_initialize_errors_are_config_errors(tmp_path):
    missing = str(tmp_path / "nope" / "ckpt-3")
    task = DenseTask(ll.TaskConfig(init_checkpoint=missing))
    with pytest.raises(ConfigError, match=r"task\.init_checkpoint .*nope/ckpt-3.* does not "
                                          r"exist"):
        task.initialize(task.build_model())

    empty = tmp_path / "empty"
    empty.mkdir()
    task = DenseTask(ll.TaskConfig(init_checkpoint=str(empty)))
    with pytest.raises(ConfigError, match="holds no checkpoint"):
        task.initialize(task.build_model())

    other = keras.Sequential([keras.Input((NUM_FEATURES + 1,)), keras.layers.Dense(3)])
    prefix = tf.train.Checkpoint(model=other).write(str(tmp_path / "other"))
    task = DenseTask(ll.TaskConfig(init_checkpoint=prefix))
    with pytest.raises(ConfigError, match="does not fit the model"):
        task.initialize(task.build_model())

    prefix = tf.train.Checkpoint(net=_trained_like_model(0)).write(str(tmp_path / "renamed"))
    task = DenseTask(ll.TaskConfig(init_checkpoint=prefix))
    with pytest.raises(ConfigError, match="does not fit the model"):
        task.initialize(task.build_model())
    assert os.path.exists(prefix + ".index")
