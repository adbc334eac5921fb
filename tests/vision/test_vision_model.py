"""Backbones, head, losses, metrics, init_checkpoint_modules and freeze_backbone."""

import collections
import os
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import lite_launcher as ll
from lite_launcher.core.base_config import ConfigError
from lite_launcher.vision import configs, mobilenet, modeling, resnet

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tfm_compare import shapes_only  # noqa: E402


def small_config(model_id=18, num_classes=10, size=32, **task_overrides):
    config = ll.get_exp_config("image_classification")
    config.override({"task": {"model": {
        "num_classes": num_classes, "input_size": [size, size, 3],
        "backbone": {"type": "resnet", "resnet": {"model_id": model_id}}}, **task_overrides}})
    config.validate()
    return config


def resnet_model(model_id, **resnet):
    config = configs.resnet_imagenet().task.model
    config.backbone.resnet.model_id = model_id
    config.backbone.resnet.override(resnet)
    return modeling.build_classification_model(config)


@pytest.mark.parametrize("model_id, expected", [(50, 25_612_201), (18, 11_703_977)])
def test_resnet_imagenet_parameter_counts_equal_tfms(model_id, expected):
    with shapes_only():
        model = resnet_model(model_id)
        assert model.count_params() == expected
        assert model.output_shape == (None, 1001)


@shapes_only()
def test_resnet_options_change_the_network_as_tfm():
    base = resnet_model(18).count_params()
    # SE on each ResNet-18 block: reduce f -> f/4 and expand f/4 -> f, with biases.
    se = sum(2 * (f * (f // 4) + (f // 4) + (f // 4) * f + f) for f in (64, 128, 256, 512))
    assert resnet_model(18, se_ratio=0.25).count_params() == base + se
    # Stem v1: 3x3x3x32 + 3x3x32x32 + 3x3x32x64 convolutions and 3 BN (4 weights each) replace
    # the 7x7x3x64 convolution and its BN.
    v1 = (27 * 32 + 9 * 32 * 32 + 9 * 32 * 64 + 4 * (32 + 32 + 64)) - (49 * 3 * 64 + 4 * 64)
    assert resnet_model(18, stem_type="v1").count_params() == base + v1
    # Replacing the max pool adds a 3x3x64x64 convolution and a BN.
    assert resnet_model(18, replace_stem_max_pool=True).count_params() == base + 9 * 64 * 64 + 256
    # ResNet-D shortcuts average-pool first: same parameters, extra AveragePooling2D layers.
    resnet_d = resnet_model(50, resnetd_shortcut=True)
    assert resnet_d.count_params() == 25_612_201
    blocks = [l for l in resnet_d.backbone.layers if isinstance(l, resnet.BottleneckBlock)]
    pools = [s for b in blocks for s in b._shortcut
             if isinstance(s, keras.layers.AveragePooling2D)]
    assert len(pools) == 4
    half = resnet_model(18, depth_multiplier=0.5)
    assert half.get_layer("logits").kernel.shape == (256, 1001)


def test_stochastic_depth_drops_whole_examples_in_training_only():
    layer = modeling.StochasticDepth(0.5)
    x = tf.ones([200, 2, 2, 3])
    assert np.array_equal(layer(x, training=False).numpy(), x.numpy())
    out = layer(x, training=True).numpy().reshape(200, -1)
    per_example = set(np.unique(out, axis=1).ravel().tolist())
    assert per_example <= {0.0, 2.0} and len(per_example) == 2  # kept ones scaled by 1/keep
    assert 40 < int((out[:, 0] == 0).sum()) < 160


def test_head_options_and_l2_weight_decay():
    config = small_config()
    config.task.model.override({"add_head_batch_norm": True, "dropout_rate": 0.3})
    model = modeling.build_classification_model(config.task.model, l2_weight_decay=1e-3)
    names = [l.name for l in model.layers]
    assert "head_norm" in names
    assert any(isinstance(l, keras.layers.Dropout) and l.rate == 0.3 for l in model.layers)
    kernels = [v for v in model.trainable_variables
               if "kernel" in v.path and "norm" not in v.path]
    expected = 1e-3 / 2 * sum(float(tf.reduce_sum(tf.square(k))) for k in kernels)
    # Stem, 16 block and 4 shortcut convolutions, and the dense layer.
    assert len(model.losses) == len(kernels) == 22
    np.testing.assert_allclose(float(tf.add_n(model.losses)), expected, rtol=1e-5)


# At scale 1.0 TFM's figures for these three (2,257,984, 4,226,432 and 1,529,968) are the
# backbone counts test_vision_zoo_models pins for TFM's MobileNet V2 / V3 YAMLs.
@pytest.mark.parametrize("model_id, scale, expected", [
    ("MobileNetV2", 0.75, 1_382_064), ("MobileNetV3Large", 0.75, 2_731_616)])
def test_mobilenet_backbone_parameter_counts_equal_tfms(model_id, scale, expected):
    # TFM's own figures (official/vision/modeling/backbones/mobilenet_test.py).
    config = configs.MobileNet(model_id=model_id, filter_size_scale=scale)
    with shapes_only():
        backbone = mobilenet.build_mobilenet([64, 64, 3], config, modeling.NormSettings())
        assert backbone.count_params() == expected


def test_mobilenets_build_with_the_norm_settings():
    for model_id, channels in (("MobileNetV2", 1280), ("MobileNetV3Small", 1024)):
        config = small_config()
        config.task.model.backbone.override({"type": "mobilenet",
                                             "mobilenet": {"model_id": model_id}})
        config.task.model.norm_activation.override({"norm_momentum": 0.997,
                                                    "norm_epsilon": 0.002})
        model = modeling.build_classification_model(config.task.model, l2_weight_decay=1e-5)
        # TFM's numbering: levels 2-5, the final map as 6.
        assert model.backbone(tf.zeros([1, 32, 32, 3]))["6"].shape[-1] == channels
        layers = _all_layers(model.backbone)
        norms = [l for l in layers if isinstance(l, keras.layers.BatchNormalization)]
        assert norms and all(n.momentum == 0.997 and n.epsilon == 0.002 for n in norms)
        convs = [l for l in layers if isinstance(l, keras.layers.Conv2D)]
        depthwise = [l for l in layers if isinstance(l, keras.layers.DepthwiseConv2D)]
        # Convolution kernels and the dense layer are regularised, depthwise kernels not (TFM).
        assert len(convs) > 20 and len(depthwise) > 10
        assert len(model.losses) == len(convs) + 1
        assert model(tf.zeros([2, 32, 32, 3])).shape == (2, 10)


def test_mixed_precision_forward_and_float32_loss():
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        config = small_config(losses={"l2_weight_decay": 1e-4})
        task = ll.get_task(config.task)
        model = task.build_model()
        logits = model(tf.random.uniform([2, 32, 32, 3]), training=True)
        assert logits.dtype == tf.float16
        loss = task.build_losses(tf.one_hot([1, 2], 10), logits, model.losses)
        assert loss.dtype == tf.float32 and np.isfinite(float(loss))
        # One training step with the dynamic loss scale lite_launcher uses for float16.
        config.override({"runtime": {"mixed_precision_dtype": "float16"},
                         "trainer": {"optimizer_config": {
                             "optimizer": {"type": "sgd"},
                             "learning_rate": {"type": "constant"}}}})
        optimizer = task.create_optimizer(config.trainer.optimizer_config, config.runtime)
        assert isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
        kernel = model.get_layer("logits").kernel
        before = kernel.numpy().copy()
        inputs = (tf.random.uniform([2, 32, 32, 3], dtype=tf.float16), tf.constant([1, 2]))
        # Steps that overflow in float16 are skipped while the scale comes down (from 2**15).
        for _ in range(20):
            logs = task.train_step(inputs, model, optimizer, metrics=task.build_metrics())
            assert np.isfinite(float(logs["loss"])) and kernel.dtype == tf.float32
            if not np.array_equal(before, kernel.numpy()):
                break
        assert not np.array_equal(before, kernel.numpy())
        assert all(np.isfinite(v.numpy()).all() for v in model.trainable_variables)
    finally:
        keras.mixed_precision.set_global_policy("float32")


# ----- losses and metrics ----------------------------------------------------------------


LOGITS = np.array([[2.0, 0.5, -1.0], [0.1, 0.2, 3.0]], np.float32)
LABELS = np.array([0, 1], np.int32)


def log_softmax(x):
    return x - np.log(np.exp(x).sum(axis=1, keepdims=True))


def task_for(**losses):
    config = small_config(num_classes=3, losses=losses)
    return ll.get_task(config.task)


def test_one_hot_loss_with_label_smoothing_and_loss_weight_match_numpy():
    task = task_for(label_smoothing=0.1, loss_weight=2.0)
    labels = task._loss_labels(tf.constant(LABELS), training=True)
    smooth = np.eye(3)[LABELS] * 0.9 + 0.1 / 3
    expected = 2.0 * np.mean(-(smooth * log_softmax(LOGITS)).sum(axis=1))
    got = task.build_losses(labels, LOGITS, aux_losses=[tf.constant(0.25)])
    np.testing.assert_allclose(float(got), expected + 2.0 * 0.25, rtol=1e-5)


def test_sparse_soft_and_binary_losses_match_numpy():
    ce = -log_softmax(LOGITS)[[0, 1], LABELS].mean()
    sparse = task_for(one_hot=False)
    assert sparse._loss_labels(tf.constant(LABELS), True).shape == (2,)
    np.testing.assert_allclose(float(sparse.build_losses(LABELS, LOGITS)), ce, rtol=1e-5)
    soft = np.array([[0.7, 0.3, 0.0], [0.0, 0.5, 0.5]], np.float32)
    soft_task = task_for(one_hot=False, soft_labels=True)
    np.testing.assert_allclose(float(soft_task.build_losses(soft, LOGITS)),
                               np.mean(-(soft * log_softmax(LOGITS)).sum(axis=1)), rtol=1e-5)
    bce_task = task_for(use_binary_cross_entropy=True)
    y = np.eye(3)[LABELS]
    p = 1 / (1 + np.exp(-LOGITS))
    bce = np.mean(-(y * np.log(p) + (1 - y) * np.log(1 - p)))
    labels = bce_task._loss_labels(tf.constant(LABELS), True)
    np.testing.assert_allclose(float(bce_task.build_losses(labels, LOGITS)), bce, rtol=1e-5)
    assert float(sparse.build_losses(np.zeros([0], np.int32), np.zeros([0, 3]))) == 0.0


def test_multilabel_loss_and_metrics():
    config = small_config(num_classes=3, train_data={"is_multilabel": True})
    task = ll.get_task(config.task)
    y = np.array([[1, 0, 1], [0, 1, 0]], np.float32)
    p = 1 / (1 + np.exp(-LOGITS))
    expected = np.mean(-(y * np.log(p) + (1 - y) * np.log(1 - p)).sum(axis=1))
    np.testing.assert_allclose(float(task.build_losses(y, LOGITS)), expected, rtol=1e-5)
    assert task.build_metrics(training=True) == []
    assert [m.name for m in task.build_metrics(training=False)] == ["globalPR-AUC", "meanPR-AUC"]


def test_metrics_accuracy_top_k_precision_recall():
    config = small_config(num_classes=3, evaluation={"top_k": 2,
                                                     "precision_and_recall_thresholds": [0.5]})
    task = ll.get_task(config.task)
    metrics = task.build_metrics()
    assert [m.name for m in metrics] == ["accuracy", "top_2_accuracy",
                                         "precision_at_threshold_0.5", "recall_at_threshold_0.5"]
    labels = task._loss_labels(tf.constant([0, 0]), training=False)
    task.process_metrics(metrics, labels, LOGITS)
    assert float(metrics[0].result()) == 0.5  # example 2 predicts class 2, not 0
    assert float(metrics[1].result()) == 0.5  # class 0 is not in its top 2 either
    sparse = ll.get_task(small_config(num_classes=3, losses={"one_hot": False}).task)
    assert [type(m).__name__ for m in sparse.build_metrics()] == [
        "SparseCategoricalAccuracy", "SparseTopKCategoricalAccuracy"]


# ----- init_checkpoint_modules and freeze_backbone ----------------------------------------


def _weights(model):
    return [v.numpy().copy() for v in model.weights]


def test_init_checkpoint_modules_backbone_restores_the_backbone_only(tmp_path):
    config = small_config()
    source = ll.get_task(config.task).build_model()
    # Saved as the Trainer saves: the model and its checkpoint_items (the backbone).
    path = tf.train.Checkpoint(model=source, **source.checkpoint_items).write(
        str(tmp_path / "ckpt"))
    # Every weight is in the checkpoint (Keras 3 layers held only in a list would be missing).
    saved = [n for n, _ in tf.train.list_variables(path) if n != "_CHECKPOINTABLE_OBJECT_GRAPH"]
    assert len(saved) == len(source.weights) == 107
    for modules in ("backbone", "all"):
        target_config = small_config(init_checkpoint=path, init_checkpoint_modules=modules)
        task = ll.get_task(target_config.task)
        target = task.build_model()
        head_before = target.get_layer("logits").kernel.numpy().copy()
        task.initialize(target)
        for a, b in zip(_weights(source.backbone), _weights(target.backbone)):
            np.testing.assert_array_equal(a, b)
        head = target.get_layer("logits").kernel.numpy()
        if modules == "backbone":
            np.testing.assert_array_equal(head, head_before)
        else:
            np.testing.assert_array_equal(head, source.get_layer("logits").kernel.numpy())
    # A checkpoint of another backbone does not fit: one ConfigError.
    other = ll.get_task(small_config(model_id=34, init_checkpoint=path,
                                     init_checkpoint_modules="backbone").task)
    with pytest.raises(ConfigError, match="does not fit"):
        other.initialize(other.build_model())
    missing = ll.get_task(small_config(init_checkpoint=str(tmp_path / "nope")).task)
    with pytest.raises(ConfigError, match="nope"):
        missing.initialize(missing.build_model())


def test_freeze_backbone_trains_the_head_only():
    config = small_config(freeze_backbone=True)
    task = ll.get_task(config.task)
    model = task.build_model()
    assert [v.path.split("/")[-1] for v in model.trainable_variables] == ["kernel", "bias"]
    optimizer = keras.optimizers.SGD(0.1)
    backbone_before = _weights(model.backbone)
    head_before = model.get_layer("logits").kernel.numpy().copy()
    inputs = (tf.random.uniform([4, 32, 32, 3]), tf.constant([0, 1, 2, 3]))
    logs = task.train_step(inputs, model, optimizer, metrics=task.build_metrics())
    assert np.isfinite(float(logs["loss"]))
    # Moving statistics too: a frozen backbone's BatchNormalization runs in inference mode.
    for a, b in zip(backbone_before, _weights(model.backbone)):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(head_before, model.get_layer("logits").kernel.numpy())
    unfrozen = ll.get_task(small_config().task).build_model()
    assert len(unfrozen.trainable_variables) > 2


def _graph_op_types(fn, *args):
    return {op.type for op in tf.function(fn).get_concrete_function(*args).graph.get_operations()}


def _twin_batch_norms(**kwargs):
    """A FusedBatchNormalization and a Keras BatchNormalization with the same weights."""
    rng = np.random.default_rng(0)
    fused = modeling.FusedBatchNormalization(**kwargs)
    plain = keras.layers.BatchNormalization(**kwargs)
    for layer in (fused, plain):
        layer.build((None, 5, 5, 4))
    weights = [rng.uniform(0.5, 1.5, 4).astype("float32"), rng.normal(size=4).astype("float32"),
               rng.normal(size=4).astype("float32"), rng.uniform(0.5, 2, 4).astype("float32")]
    weights = weights[len(weights) - len(plain.get_weights()):]  # gamma, beta when present
    for layer in (fused, plain):
        layer.set_weights(weights)
    return fused, plain


@pytest.mark.parametrize("options", [{}, {"scale": False, "center": False, "momentum": 0.9},
                                     {"epsilon": 1e-5, "momentum": 0.9}])  # ResNet's
def test_fused_batch_norm_equals_keras_batch_norm_in_one_kernel(options):
    """Outputs, input / scale / offset gradients and the moving mean equal Keras's; the moving
    variance takes the unbiased batch variance (tf_keras's fused rule); one FusedBatchNormV3."""
    fused, plain = _twin_batch_norms(**options)
    x = tf.constant(np.random.default_rng(1).normal(2.0, 3.0, (3, 5, 5, 4)).astype("float32"))
    grads = {}
    for name, layer in (("fused", fused), ("plain", plain)):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, training=True)
            loss = tf.reduce_sum(y * tf.range(4, dtype=tf.float32))
        grads[name] = (y, tape.gradient(loss, [x] + layer.trainable_weights))
    for a, b in zip([grads["fused"][0]] + grads["fused"][1], [grads["plain"][0]] + grads["plain"][1]):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(fused.moving_mean.numpy(), plain.moving_mean.numpy(), rtol=1e-5)
    n = 3 * 5 * 5
    batch_variance = np.var(x.numpy(), axis=(0, 1, 2))
    momentum = fused.momentum
    before = _twin_batch_norms(**options)[0].moving_variance.numpy()
    np.testing.assert_allclose(
        fused.moving_variance.numpy(),
        momentum * before + (1 - momentum) * batch_variance * n / (n - 1), rtol=1e-5)
    # Inference: normalised by the moving statistics, as Keras.
    gamma = fused.gamma.numpy() if fused.scale else 1.0
    beta = fused.beta.numpy() if fused.center else 0.0
    expected = (x.numpy() - fused.moving_mean.numpy()) / np.sqrt(
        fused.moving_variance.numpy() + fused.epsilon) * gamma + beta
    np.testing.assert_allclose(fused(x, training=False).numpy(), expected, rtol=1e-4, atol=1e-4)
    spec = tf.TensorSpec((3, 5, 5, 4), tf.float32)
    assert "FusedBatchNormV3" in _graph_op_types(lambda t: fused(t, training=True), spec)
    assert "FusedBatchNormV3" not in _graph_op_types(lambda t: plain(t, training=True), spec)


def test_fused_batch_norm_falls_back_to_keras_where_the_kernel_does_not_apply():
    x2d = tf.constant(np.random.default_rng(2).normal(size=(6, 4)).astype("float32"))
    fused = modeling.FusedBatchNormalization()
    plain = keras.layers.BatchNormalization()
    np.testing.assert_allclose(fused(x2d, training=True).numpy(),
                               plain(x2d, training=True).numpy(), rtol=1e-6)
    renorm = modeling.FusedBatchNormalization(renorm=True)
    spec = tf.TensorSpec((2, 3, 3, 4), tf.float32)
    assert "FusedBatchNormV3" not in _graph_op_types(lambda t: renorm(t, training=True), spec)


def test_fused_batch_norm_under_mixed_precision_keeps_float32_statistics():
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        layer = modeling.FusedBatchNormalization()
        x = tf.constant(np.random.default_rng(3).normal(size=(2, 3, 3, 4)), tf.float16)
        y = layer(x, training=True)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert y.dtype == tf.float16 and layer.moving_mean.dtype == "float32"
    expected = (x.numpy().astype(np.float32) - x.numpy().astype(np.float32).mean((0, 1, 2))) / \
        np.sqrt(x.numpy().astype(np.float32).var((0, 1, 2)) + layer.epsilon)
    np.testing.assert_allclose(y.numpy().astype(np.float32), expected, atol=1e-2)


def test_l2_kernel_regularizer_equals_keras_l2_in_one_op():
    x = tf.constant(np.random.default_rng(4).normal(size=(3, 3, 8, 16)).astype("float32"))
    ours = modeling.L2KernelRegularizer(2.5e-5)
    np.testing.assert_allclose(float(ours(x)), float(keras.regularizers.L2(2.5e-5)(x)),
                               rtol=1e-6)
    spec = tf.TensorSpec(x.shape, tf.float32)
    assert "L2Loss" in _graph_op_types(ours, spec)
    assert "L2Loss" not in _graph_op_types(keras.regularizers.L2(2.5e-5), spec)
    restored = keras.regularizers.deserialize(keras.regularizers.serialize(ours))
    assert type(restored) is modeling.L2KernelRegularizer and restored.l2 == ours.l2


def _all_layers(model):
    """Every layer inside `model`, at any depth (blocks' own sub-layers too, not only
    sub-models'). Keras 3 has no public walk of a layer's tracked sub-layers."""
    return list(model._flatten_layers(include_self=False))  # pylint: disable=protected-access


def test_classification_models_use_the_fused_layers():
    model = resnet_model(18)
    norms = [layer for layer in _all_layers(model)
             if isinstance(layer, keras.layers.BatchNormalization)]
    assert len(norms) == 21 and all(isinstance(n, modeling.FusedBatchNormalization) for n in norms)
    config = configs.resnet_imagenet().task.model
    config.backbone.resnet.model_id = 10
    regularized = modeling.build_classification_model(config, l2_weight_decay=1e-4)
    convs = [layer for layer in _all_layers(regularized)
             if isinstance(layer, keras.layers.Conv2D)]
    # Every convolution kernel and the classifier's kernel add a loss.
    assert len(convs) > 10 and len(regularized.losses) == len(convs) + 1
    assert all(isinstance(c.kernel_regularizer, modeling.L2KernelRegularizer) for c in convs)


def test_resnet_imagenet_train_step_runs_tfms_fused_kernels_for_every_layer():
    """The whole traced train step of `resnet_imagenet` (ResNet-18, norm_epsilon 1e-5): one
    FusedBatchNormV3 and one fused gradient per batch-norm layer, one L2Loss per regularized
    kernel, one ResourceApplyKerasMomentum per variable, and none of Keras 3's element-wise
    batch norm (its SquaredDifference / Rsqrt) left: the op set of TFM's tf_keras step."""
    params = ll.get_exp_config("resnet_imagenet")
    params.task.model.backbone.resnet.model_id = 18
    params.task.model.input_size = [32, 32, 3]
    assert params.task.model.norm_activation.norm_epsilon == 1e-5
    task = ll.get_task(params.task)
    model = task.build_model()
    optimizer = task.create_optimizer(params.trainer.optimizer_config, params.runtime)
    batch_norms = [layer for layer in _all_layers(model)
                   if isinstance(layer, keras.layers.BatchNormalization)]
    kernels = [layer for layer in _all_layers(model)
               if getattr(layer, "kernel_regularizer", None) is not None]
    assert len(batch_norms) == 21 and len(kernels) == 22

    def step(images, labels):
        return task.train_step((images, labels), model, optimizer)

    graph = tf.function(step).get_concrete_function(
        tf.TensorSpec((2, 32, 32, 3), tf.float32), tf.TensorSpec((2,), tf.int32)).graph
    counts = collections.Counter(op.type for op in graph.get_operations())
    assert counts.get("FusedBatchNormV3") == len(batch_norms)
    assert counts.get("FusedBatchNormGradV3") == len(batch_norms)
    assert counts.get("L2Loss") == len(kernels)
    assert counts.get("ResourceApplyKerasMomentum") == len(model.trainable_variables)
    assert "SquaredDifference" not in counts and "Rsqrt" not in counts
