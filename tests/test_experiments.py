"""The built-in experiments: digits data and tasks, benchmark workloads, registration."""

import ast
import importlib
import os
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

import lite_launcher as ll
from lite_launcher.core.base_config import ConfigError
from lite_launcher.experiments import digits, workloads

# Class counts of the UCI digits test set (optdigits.tes) that scikit-learn ships.
DIGIT_CLASS_COUNTS = [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
EXPERIMENTS = ["cnn_small", "digits_cnn", "digits_mlp", "mlp_tiny", "mock"]


def _optimizer(config):
    return ll.Task.create_optimizer(config.trainer.optimizer_config, config.runtime)


# ----- digits data -----------------------------------------------------------


def test_shipped_data_and_license_are_in_the_package():
    data_dir = os.path.dirname(digits.DATA_PATH)
    assert os.path.getsize(digits.DATA_PATH) < 100_000
    with open(os.path.join(data_dir, "DIGITS_LICENSE.txt")) as f:
        text = f.read()
    assert "10.24432/C50P49" in text and "CC BY 4.0" in text and "Alpaydin" in text


def test_load_digits_shapes_dtypes_and_class_counts():
    images, labels = digits.load_digits()
    assert images.shape == (1797, 8, 8) and images.dtype == np.float32
    assert labels.shape == (1797,) and labels.dtype == np.int32
    assert images.min() == 0.0 and images.max() == 1.0
    # Pixels are counts 0..16 scaled by 1/16.
    np.testing.assert_array_equal(images * 16, np.round(images * 16))
    assert np.bincount(labels).tolist() == DIGIT_CLASS_COUNTS
    # The first example of the UCI file is a 0 whose top row is 0 0 5 13 9 1 0 0.
    assert labels[0] == 0
    np.testing.assert_array_equal(images[0, 0] * 16, [0, 0, 5, 13, 9, 1, 0, 0])


def test_split_is_fixed_and_disjoint():
    train, validation = digits.split_indices("train"), digits.split_indices("validation")
    assert len(train) == digits.NUM_TRAIN == 1500
    assert len(validation) == digits.NUM_VALIDATION == 297
    assert not set(train.tolist()) & set(validation.tolist())
    assert sorted(train.tolist() + validation.tolist()) == list(range(1797))
    np.testing.assert_array_equal(train, digits.split_indices("train"))
    np.testing.assert_array_equal(train, np.random.default_rng(0).permutation(1797)[:1500])
    images, labels = digits.load_digits()
    split_images, split_labels = digits.load_digits_split("validation")
    np.testing.assert_array_equal(split_images, images[validation])
    np.testing.assert_array_equal(split_labels, labels[validation])
    # Every class is present in both splits.
    assert np.bincount(split_labels, minlength=10).min() > 15
    with pytest.raises(ConfigError, match="'test'"):
        digits.split_indices("test")


# ----- every registered experiment -----------------------------------------


def test_registered_experiments():
    assert set(EXPERIMENTS) <= set(ll.registered_experiments())


def _factories_registered_by(module_name):
    """The experiment names `module_name`'s source registers (its decorators, read statically)."""
    module = importlib.import_module(module_name)
    with open(module.__file__) as f:
        tree = ast.parse(f.read())
    return {node.args[0].value for node in ast.walk(tree)
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") ==
            "register_config_factory" and node.args and isinstance(node.args[0], ast.Constant)}


def test_registry_imports_registers_every_name_of_the_one_table():
    # The built-in names live in one table (builtin_experiments); the docstrings point at it.
    import lite_launcher.experiments as built_ins
    import lite_launcher.common.registry_imports  # noqa: F401  (imports what the table names)
    from lite_launcher.core import registry
    from lite_launcher.common.builtin_experiments import BUILTIN_EXPERIMENTS

    assert set(EXPERIMENTS) | {"resnet_imagenet", "retinanet_resnetfpn_coco"} <= set(
        BUILTIN_EXPERIMENTS)
    assert set(BUILTIN_EXPERIMENTS) <= set(registry.registered_experiments())
    assert "BUILTIN_EXPERIMENTS" in built_ins.__doc__


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_builds_model_and_inputs(name):
    config = ll.get_exp_config(name)
    config.validate()
    task = ll.get_task(config.task)
    model = task.build_model()
    for data in (config.task.train_data, config.task.validation_data):
        features, labels = next(iter(task.build_inputs(data)))
        batch = data.global_batch_size
        assert features.dtype == tf.float32 and labels.dtype == tf.int32
        assert features.shape[0] == labels.shape[0] == batch
        assert labels.shape == (batch,)
        assert features.shape[1:] == tuple(model.input_shape[1:])
        outputs = model(features, training=False)
        assert outputs.shape[0] == batch
        loss = task.build_losses(labels, outputs)
        assert loss.shape == () and np.isfinite(float(loss))
    metrics = task.build_metrics()
    assert [type(m) for m in metrics] == [keras.metrics.SparseCategoricalAccuracy]
    assert metrics[0].name == "accuracy"
    # The config survives a round trip through its dict form.
    copy = ll.get_exp_config(name)
    copy.override(config.as_dict())
    assert copy.as_dict() == config.as_dict()


# ----- digits task -------------------------------------------------------------


def _digits_task(name="digits_mlp"):
    config = ll.get_exp_config(name)
    return config, ll.get_task(config.task)


def test_digits_models():
    config = ll.get_exp_config("digits_mlp")
    mlp = digits.build_digits_model(config.task.model)
    assert [tuple(w.shape) for w in mlp.weights] == [(64, 128), (128,), (128, 10), (10,)]
    assert mlp.count_params() == 64 * 128 + 128 + 128 * 10 + 10
    cnn = digits.build_digits_model(ll.get_exp_config("digits_cnn").task.model)
    assert [tuple(w.shape) for w in cnn.weights] == [
        (3, 3, 1, 16), (16,), (3, 3, 16, 32), (32,), (4 * 4 * 32, 10), (10,)]
    # Seeded initialisation: two builds are equal.
    again = digits.build_digits_model(config.task.model)
    for a, b in zip(mlp.weights, again.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    with pytest.raises(ConfigError, match="'rnn'"):
        digits.build_digits_model(digits.DigitsModelConfig(kind="rnn"))
    with pytest.raises(ConfigError, match="conv_filters"):
        digits.DigitsModelConfig(kind="cnn", conv_filters=[]).validate()


def test_digits_loss_matches_numpy_and_is_zero_on_an_empty_batch():
    logits = np.array([[2.0, 0.5, -1.0], [0.1, 0.2, 3.0]], np.float32)
    labels = np.array([0, 1], np.int32)
    log_softmax = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    expected = -np.mean(log_softmax[[0, 1], labels])
    got = digits.sparse_cross_entropy_loss(labels, logits)
    np.testing.assert_allclose(float(got), expected, rtol=1e-6)
    got = digits.sparse_cross_entropy_loss(labels, logits, aux_losses=[tf.constant(0.5)])
    np.testing.assert_allclose(float(got), expected + 0.5, rtol=1e-6)
    empty = digits.sparse_cross_entropy_loss(np.zeros([0], np.int32), np.zeros([0, 3], np.float32))
    assert float(empty) == 0.0


def test_digits_validation_data_is_the_whole_split_once():
    config, task = _digits_task()
    labels = np.concatenate([l.numpy() for _, l in task.build_inputs(config.task.validation_data)])
    np.testing.assert_array_equal(labels, digits.load_digits_split("validation")[1])
    # A plain DataConfig (no `split`) that is not training data reads the validation split.
    plain = ll.DataConfig(global_batch_size=100, is_training=False, drop_remainder=False)
    labels = np.concatenate([l.numpy() for _, l in task.build_inputs(plain)])
    np.testing.assert_array_equal(labels, digits.load_digits_split("validation")[1])


def test_digits_training_data_is_shuffled_deterministically_and_repeats():
    config, task = _digits_task()
    data = config.task.train_data
    steps = 4 * 1500 // data.global_batch_size  # four epochs

    def read():
        batches = list(task.build_inputs(data).take(steps))
        return (np.concatenate([b[0].numpy() for b in batches]),
                np.concatenate([b[1].numpy() for b in batches]))

    images, labels = read()
    again_images, again_labels = read()
    np.testing.assert_array_equal(images, again_images)
    np.testing.assert_array_equal(labels, again_labels)
    assert len(labels) == steps * data.global_batch_size
    train_images, train_labels = digits.load_digits_split("train")
    assert not np.array_equal(labels[:64], train_labels[:64])
    # Only training examples, and (over two epochs) every one of them.
    train_set = {(int(l), i.tobytes()) for i, l in zip(train_images, train_labels)}
    seen = {(int(l), i.tobytes()) for i, l in zip(images, labels)}
    assert seen == train_set


def test_digits_per_replica_batch():
    config, task = _digits_task()
    context = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0,
                                         num_replicas_in_sync=2)
    features, _ = next(iter(task.build_inputs(config.task.train_data, context)))
    assert features.shape == (32, 8, 8)


def test_digits_through_tfrecord_matches_the_npz(tmp_path):
    config, task = _digits_task()
    for split in ("train", "validation"):
        paths = digits.write_digits_tfrecord(str(tmp_path / split), split=split, num_shards=3)
        assert [os.path.basename(p) for p in paths] == [
            f"{split}-0000{i}-of-00003" for i in range(3)]
    data = config.task.validation_data.replace(input_path=str(tmp_path / "validation-*"))

    def examples(dataset):
        pairs = [(int(label), image.tobytes())
                 for images, labels in dataset
                 for image, label in zip(images.numpy(), labels.numpy())]
        return sorted(pairs)

    from_tfrecord = examples(task.build_inputs(data))
    from_npz = examples(task.build_inputs(config.task.validation_data))
    assert len(from_tfrecord) == 297
    assert from_tfrecord == from_npz
    # Training through TFRecord: float32 [8, 8] images, repeated past an epoch.
    train = config.task.train_data.replace(input_path=str(tmp_path / "train-*"))
    batches = list(task.build_inputs(train).take(30))
    assert batches[0][0].shape == (64, 8, 8) and batches[0][0].dtype == tf.float32
    seen = sum(int(b[1].shape[0]) for b in batches)
    assert seen == 30 * 64 > 1500


def test_digits_tfrecord_bad_path_names_it(tmp_path):
    config, task = _digits_task()
    data = config.task.train_data.replace(input_path=str(tmp_path / "missing-*"))
    with pytest.raises(ConfigError, match="missing-"):
        task.build_inputs(data)


def _train_and_evaluate(name):
    config = ll.get_exp_config(name)
    task = ll.get_task(config.task)
    model = task.build_model()
    optimizer = _optimizer(config)
    train_metrics, eval_metrics = task.build_metrics(True), task.build_metrics(False)
    iterator = iter(task.build_inputs(config.task.train_data))

    @tf.function
    def train(num_steps):
        for _ in tf.range(num_steps):
            logs = task.train_step(next(iterator), model, optimizer, train_metrics)
        return logs["loss"]

    @tf.function
    def evaluate(batch):
        return task.validation_step(batch, model, eval_metrics)["loss"]

    train(tf.constant(config.trainer.train_steps))
    losses = [float(evaluate(batch)) for batch in task.build_inputs(config.task.validation_data)]
    assert int(optimizer.iterations) == config.trainer.train_steps
    return float(eval_metrics[0].result()), float(np.mean(losses))


@pytest.mark.parametrize("name", ["digits_mlp", "digits_cnn"])
def test_digits_default_config_trains_above_90_percent(name):
    accuracy, loss = _train_and_evaluate(name)
    assert accuracy > 0.9, accuracy
    assert loss < 0.4, loss
    # "Seconds on a CPU" is kept as a work budget, not a wall-clock assertion (loaded machines).
    config = ll.get_exp_config(name)
    assert config.trainer.train_steps * config.task.train_data.global_batch_size <= 64 * 600


# ----- benchmark workloads (mlp_tiny, cnn_small, mock) ----------------------------


@pytest.mark.parametrize("name,input_shape,batch,weights,params,momentum", [
    ("mlp_tiny", (32,), 64, [(32, 64), (64,), (64, 10), (10,)], 2762, 0.0),
    ("cnn_small", (32, 32, 3), 128,
     [(3, 3, 3, 32), (32,), (3, 3, 32, 64), (64,), (64, 10), (10,)], 20042, 0.9),
    ("mock", (2,), 2, [(2, 1), (1,)], 3, 0.0),
])
def test_workload_matches_spec(name, input_shape, batch, weights, params, momentum):
    config = ll.get_exp_config(name)
    assert config.task.train_data.global_batch_size == batch
    assert config.task.validation_data.global_batch_size == batch
    assert config.runtime.distribution_strategy == "off"
    assert config.trainer.validation_steps == 100
    assert config.trainer.summary_interval > config.trainer.train_steps
    assert config.trainer.checkpoint_interval > config.trainer.train_steps
    optimization = config.trainer.optimizer_config
    assert optimization.optimizer.type == "sgd"
    assert optimization.optimizer.sgd.momentum == momentum
    assert optimization.learning_rate.type == "constant"
    assert optimization.learning_rate.constant.learning_rate == 0.01
    model = ll.get_task(config.task).build_model()
    assert tuple(model.input_shape[1:]) == input_shape
    assert [tuple(w.shape) for w in model.weights] == weights
    assert model.count_params() == params


def test_cnn_small_layers():
    model = workloads.build_workload_model("cnn_small")
    kinds = [(type(l).__name__, tuple(l.output.shape[1:])) for l in model.layers[1:]]
    assert kinds == [("Conv2D", (32, 32, 32)), ("Conv2D", (16, 16, 64)),
                     ("GlobalAveragePooling2D", (64,)), ("Dense", (10,))]
    assert model.layers[1].activation.__name__ == "relu"
    assert model.layers[-1].activation.__name__ == "linear"


def test_workload_batch_is_fixed_and_repeated():
    config = ll.get_exp_config("mlp_tiny")
    task = ll.get_task(config.task)
    rng = np.random.default_rng(0)
    expected_x = rng.standard_normal((64, 32), dtype=np.float32)
    expected_y = rng.integers(0, 10, size=64, dtype=np.int32)
    for x, y in task.build_inputs(config.task.train_data).take(3):
        np.testing.assert_array_equal(x.numpy(), expected_x)
        np.testing.assert_array_equal(y.numpy(), expected_y)
    assert 0 <= expected_y.min() and expected_y.max() < 10
    context = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0,
                                         num_replicas_in_sync=2)
    x, y = next(iter(task.build_inputs(config.task.train_data, context)))
    assert x.shape == (32, 32) and y.shape == (32,)
    context = tf.distribute.InputContext(num_replicas_in_sync=3)
    with pytest.raises(ConfigError, match=r"global_batch_size \(64\).*\(3\)"):
        task.build_inputs(config.task.train_data, context)


def test_mock_loss_is_the_mean_output_and_bias_starts_at_one():
    config = ll.get_exp_config("mock")
    task = ll.get_task(config.task)
    model = task.build_model()
    np.testing.assert_array_equal(model.layers[-1].bias.numpy(), [1.0])
    x, y = next(iter(task.build_inputs(config.task.train_data)))
    outputs = model(x)
    expected = x.numpy() @ model.layers[-1].kernel.numpy() + 1.0
    np.testing.assert_allclose(float(task.build_losses(y, outputs)), expected.mean(), rtol=1e-6)


def test_workload_task_trains():
    config = ll.get_exp_config("mlp_tiny")
    task = ll.get_task(config.task)
    model = task.build_model()
    optimizer = _optimizer(config)
    batch = next(iter(task.build_inputs(config.task.train_data)))
    step = tf.function(lambda: task.train_step(batch, model, optimizer)["loss"])
    losses = [float(step()) for _ in range(50)]
    assert losses[-1] < losses[0] * 0.9


def test_unknown_workload_is_a_config_error():
    config = ll.get_exp_config("mock")
    config.task.workload = "resnet"
    with pytest.raises(ConfigError, match="'resnet'.*cnn_small, mlp_tiny, mock"):
        config.validate()
