"""TFM-written checkpoints (tf_keras object graphs) load into lite's vision models.

The checkpoints and TFM's outputs on them come from TFM 2.20 itself
(data/make_tfm_checkpoints.py): every variable random, saved as TFM's Trainer saves.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import lite_launcher as ll
from lite_launcher.base_config import ConfigError
from lite_launcher.vision import tfm_checkpoint

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "tfm_checkpoints")
with open(os.path.join(DATA, "index.json")) as _f:
    INDEX = json.load(_f)
MODELS = sorted(INDEX["models"])


def params_for(name, **task):
    entry = INDEX["models"][name]
    params = ll.get_exp_config(entry["experiment"])
    params.task.model.override(entry["model"], is_strict=True)
    if entry["lite_model"]:
        params.task.model.override(entry["lite_model"], is_strict=True)
    params.task.override(task, is_strict=True)
    return params


def reference(name):
    return np.load(os.path.join(DATA, name, "reference.npz"))


def features(model, images):
    endpoints = model.backbone(images, training=False)
    return (endpoints[max(endpoints)] if isinstance(endpoints, dict) else endpoints).numpy()


def relative_error(actual, expected):
    return np.abs(actual - expected).max() / np.abs(expected).mean()


@pytest.mark.parametrize("name", MODELS)
def test_all_restores_tfm_logits(name):
    params = params_for(name, init_checkpoint=os.path.join(DATA, name),
                        init_checkpoint_modules="all")
    task = ll.get_task(params.task)
    model = task.build_model()
    ref = reference(name)
    assert relative_error(model(ref["images"], training=False).numpy(), ref["logits"]) > 1e-2
    task.initialize(model)
    assert relative_error(model(ref["images"], training=False).numpy(), ref["logits"]) <= 1e-4
    np.testing.assert_allclose(features(model, ref["images"]), ref["features"],
                               rtol=1e-4, atol=1e-4 * np.abs(ref["features"]).mean())


@pytest.mark.parametrize("name", ["resnet50", "mobilenetv3large", "vit_ti16"])
def test_backbone_restores_tfm_features_and_leaves_the_head(name):
    params = params_for(name, init_checkpoint=os.path.join(DATA, name),
                        init_checkpoint_modules="backbone")
    task = ll.get_task(params.task)
    model = task.build_model()
    head = {v.path: v.numpy() for v in model.weights if v.path.startswith("logits/")}
    assert len(head) == 2
    task.initialize(model)
    ref = reference(name)
    np.testing.assert_allclose(features(model, ref["images"]), ref["features"],
                               rtol=1e-4, atol=1e-4 * np.abs(ref["features"]).mean())
    for variable in model.weights:
        if variable.path in head:
            np.testing.assert_array_equal(variable.numpy(), head[variable.path])


def test_format_is_recognised(tmp_path):
    assert tfm_checkpoint.is_tfm_checkpoint(tfm_checkpoint.resolve(os.path.join(DATA, "resnet50")))
    model = ll.get_task(params_for("resnet50").task).build_model()
    lite_prefix = tf.train.Checkpoint(model=model).write(str(tmp_path / "lite"))
    assert not tfm_checkpoint.is_tfm_checkpoint(lite_prefix)
    # A lite checkpoint still restores as one.
    params = params_for("resnet50", init_checkpoint=lite_prefix)
    task = ll.get_task(params.task)
    other = task.build_model()
    task.initialize(other)
    for a, b in zip(model.weights, other.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_wrong_architecture_is_refused_in_one_line_before_any_assignment():
    params = params_for("mobilenetv2", init_checkpoint=os.path.join(DATA, "resnet50"))
    task = ll.get_task(params.task)
    model = task.build_model()
    before = [v.numpy() for v in model.weights]
    with pytest.raises(ConfigError) as error:
        task.initialize(model)
    message = str(error.value)
    assert "\n" not in message
    assert "a TFM checkpoint" in message and "model/layer_with_weights-0/" in message
    for variable, value in zip(model.weights, before):
        np.testing.assert_array_equal(variable.numpy(), value)


def test_mis_shaped_variable_names_both_shapes():
    params = params_for("resnet50", init_checkpoint=os.path.join(DATA, "resnet50"))
    params.task.model.num_classes = 7
    task = ll.get_task(params.task)
    with pytest.raises(ConfigError) as error:
        task.initialize(task.build_model())
    message = str(error.value)
    assert "\n" not in message
    assert "model/layer_with_weights-1/kernel/.ATTRIBUTES/VARIABLE_VALUE (128, 5)" in message
    assert "logits/kernel (128, 7)" in message


def test_export_from_a_tfm_checkpoint_matches_the_keras_model(tmp_path):
    name = "mobilenetv2"
    params = params_for(name, init_checkpoint=os.path.join(DATA, name))
    task = ll.get_task(params.task)
    model = task.build_model()
    task.initialize(model)
    saved = ll.export_saved_model(params_for(name), os.path.join(DATA, name),
                                  str(tmp_path / "export"))
    images = np.random.default_rng(0).integers(0, 256, (2, 32, 32, 3)).astype(np.uint8)
    fn, _ = task.build_serving_fn(model, "image_tensor")
    expected = fn(tf.constant(images))
    served = tf.saved_model.load(saved).signatures["serving_default"](
        inputs=tf.constant(images))
    np.testing.assert_allclose(served["logits"].numpy(), expected["logits"].numpy(),
                               rtol=1e-5, atol=1e-5)
    # The export's checkpoint is a lite one holding TFM's weights.
    exported = ll.get_task(params_for(name).task).build_model()
    tf.train.Checkpoint(model=exported).read(
        tf.train.latest_checkpoint(str(tmp_path / "export" / "checkpoint"))).expect_partial()
    ref = reference(name)
    assert relative_error(exported(ref["images"], training=False).numpy(),
                          ref["logits"]) <= 1e-4
