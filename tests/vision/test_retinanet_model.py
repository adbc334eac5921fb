"""TFM's RetinaNet configs and model as lite defines and builds them, against TFM 2.20's own
numbers (tests/vision/data/tfm_retinanet_reference.json, written in TFM's venv by
make_tfm_retinanet_reference.py): every config value of the four experiments and of TFM's three
ResNet / MobileNet RetinaNet YAMLs loaded unchanged; the parameter counts, checkpoint parts and
L2 terms of each model variant, and the shapes of the training and inference outputs; the
unbuilt backbones refused in one line; the head's prior, the anchors, checkpoints and `.keras`
files."""

import functools
import json
import os
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import lite_launcher as ll
from lite_launcher.core.base_config import ConfigError, load_config_file
from lite_launcher.vision.configs import retinanet as retinanet_configs
from lite_launcher.vision.modeling import retinanet_model
from lite_launcher.vision.modeling.heads.dense_prediction_heads import RetinaNetHead
from lite_launcher.vision.modeling.layers.nn_layers import NormSettings
from lite_launcher.vision.ops import anchor

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
sys.path.insert(0, HERE)
from cli import run_lite_train_in_process  # noqa: E402
from tfm_compare import (as_plain_dict, count_weights, differences,  # noqa: E402
                         regularised_weights, shapes, shapes_only)

with open(os.path.join(DATA, "tfm_retinanet_reference.json")) as f:
    TFM = json.load(f)
SMALL = sorted(name for name in TFM["models"] if name.startswith("small"))
LARGE = sorted(name for name in TFM["models"] if not name.startswith("small"))


def _assert_counts_are(model, expected, l2_terms=None):
    """All and trainable weights, each checkpoint part's and the L2 terms (`len(model.losses)`
    unless counted by the caller, for a model without values), as TFM's."""
    assert count_weights(model.weights) == expected["params"]
    assert count_weights(model.trainable_weights) == expected["trainable_params"]
    parts = model.checkpoint_items.items()
    assert {k: count_weights(v.weights) for k, v in parts} == expected["parts"]
    assert (len(model.losses) if l2_terms is None else l2_terms) == expected["l2_terms"]


def _config(name):
    """The experiment config of model variant `name`, its YAMLs and overrides applied."""
    entry = TFM["models"][name]
    config = ll.get_exp_config(entry["experiment"])
    for yaml_name in entry["yamls"]:
        config.override(load_config_file(os.path.join(DATA, yaml_name)))
    for override in entry["overrides"]:
        config.override(override)
    config.validate()
    return config


def _build(name):
    keras.backend.clear_session()
    task = _config(name).task
    retinanet_configs.check_buildable(task)
    return retinanet_model.build_retinanet(task.model, task.losses.l2_weight_decay)


@functools.lru_cache(maxsize=None)
def _built(name):
    """`_build(name)` once per test run, for the tests that only read the model."""
    return _build(name)


def _small_images(batch=1, seed=0):
    return np.random.default_rng(seed).normal(size=(batch, 128, 128, 3)).astype(np.float32)


# ----- configs --------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(TFM["experiments"]))
def test_experiment_config_values_are_tfms(name):
    config = ll.get_exp_config(name)
    missing, different = differences(TFM["experiments"][name],
                                     as_plain_dict(config, "task", "trainer"))
    assert different == []
    assert [m for m in missing if m.startswith(".task")] == []


def test_a_tfm_config_value_that_differs_is_found():
    # The comparison above can fail: one nested value and one list item changed.
    config = ll.get_exp_config("retinanet_resnetfpn_coco")
    config.task.model.head.num_convs = 3
    config.task.model.anchor.aspect_ratios = [0.5, 1.0, 3.0]
    _, different = differences(TFM["experiments"]["retinanet_resnetfpn_coco"],
                               as_plain_dict(config, "task", "trainer"))
    assert {d[0] for d in different} == {".task.model.head.num_convs",
                                         ".task.model.anchor.aspect_ratios[2]"}


@pytest.mark.parametrize("yaml_name", sorted(TFM["yamls"]))
def test_tfm_retinanet_yaml_loads_unchanged(yaml_name):
    expected = TFM["yamls"][yaml_name]
    config = ll.override_config(ll.get_exp_config(expected["experiment"]),
                                [os.path.join(DATA, yaml_name)])
    missing, different = differences({k: expected[k] for k in ("task", "trainer", "runtime")},
                                      as_plain_dict(config, "task", "trainer", "runtime"))
    assert different == []
    assert [m for m in missing if m.startswith(".task")] == []


@pytest.mark.parametrize("name", ["retinanet_spinenet_coco", "retinanet_mobile_coco"])
def test_spinenet_configs_validate_and_an_unbuilt_backbone_is_refused_in_one_line(name):
    config = ll.get_exp_config(name)
    config.validate()
    config.task.model.backbone.type = "mobiledet"
    config.validate()
    config.task.model.backbone.type = "efficientnet"  # TFM's; not a lite backbone
    with pytest.raises(ConfigError, match="backbone.type 'efficientnet' must be one of resnet"):
        config.validate()


def test_lite_train_refuses_an_unbuilt_backbone_with_exit_2_and_writes_nothing(tmp_path):
    # The driver's own code in this process (the exit code and its stderr line are the same).
    result = run_lite_train_in_process(
        "--experiment", "retinanet_spinenet_coco", "--mode", "train",
        "--model_dir", tmp_path / "model",
        "--params_override", "task.model.backbone.type=efficientnet")
    assert result.returncode == 2
    errors = [l for l in result.stderr.splitlines() if l.startswith("lite-train: error:")]
    assert len(errors) == 1 and ("Unknown value 'efficientnet' for "
                                 "'task.model.backbone.type'") in errors[0]
    assert result.stderr.strip().splitlines()[-1] == errors[0]
    assert not os.path.exists(tmp_path / "model")


@pytest.mark.parametrize("override,message", [
    ({"model": {"detection_generator": {"nms_version": "tflite"}}}, "nms_version 'tflite'"),
    ({"model": {"detection_generator": {"soft_nms_sigma": 0.5}}}, "soft_nms_sigma needs"),
    ({"model": {"head": {"attribute_heads": [{"name": "depth"}]}}}, "nms_version 'v1'"),
    ({"model": {"head": {"share_classification_heads": True, "attribute_heads": [
        {"name": "a", "prediction_tower_name": "t"}]}, "detection_generator": {
        "nms_version": "v1"}}}, "cannot be set with"),
    ({"model": {"head": {"attribute_heads": [{"name": "a", "type": "ordinal"}]},
                "detection_generator": {"nms_version": "v1"}}}, "'regression' or"),
    ({"model": {"decoder": {"type": "aspp"}}}, "decoder.type 'aspp'"),
    ({"train_data": {"decoder": {"type": "label_map_decoder"}}}, "label_map is empty"),
    ({"init_checkpoint_modules": ["backbone", "head"]}, "init_checkpoint_modules"),
    ({"use_wod_metrics": True}, "use_wod_metrics"),
])
def test_config_check_names_the_bad_field(override, message):
    config = ll.get_exp_config("retinanet_resnetfpn_coco")
    config.task.override(override)
    with pytest.raises(ConfigError, match=message):
        config.validate()


def test_the_general_experiment_needs_classes_and_a_size():
    task = ll.get_exp_config("retinanet").task
    task.validate()
    with pytest.raises(ConfigError, match="num_classes"):
        retinanet_configs.check_buildable(task)
    task.model.num_classes = 3
    with pytest.raises(ConfigError, match="input_size"):
        retinanet_configs.check_buildable(task)


# ----- models ---------------------------------------------------------------------------


# The general `retinanet` at 91 classes is retinanet_resnetfpn_coco with synchronized BN, the
# MultiAVG YAML's FPN and head are the MobileNetV2 YAML's, and the MobileNetV2 YAML's separable
# FPN and head are in the small models here: those three run with `release`.
RELEASE = ("retinanet", "coco_mobilenetv3.5_avg_tpu", "coco_mobilenetv2_tpu")


@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.release(sibling=(
    "tests/vision/test_retinanet_model.py::"
    "test_experiment_model_counts_are_tfms[retinanet_resnetfpn_coco]")))
                                  if name in RELEASE else name for name in LARGE])
def test_experiment_model_counts_are_tfms(name):
    # retinanet_resnetfpn_coco: 34,167,319 weights with 91 classes, as TFM 2.20.
    expected = TFM["models"][name]
    with shapes_only():
        model = _build(name)
        _assert_counts_are(model, expected, l2_terms=regularised_weights(model))
        # The outputs per level at the model's size, from the head on the decoder's symbolic
        # features (a whole-model pass at 640x640 costs seconds; the small models run the call).
        scores, boxes, _ = model.head.compute_output_spec(model.feature_specs())
    expected_outputs = expected["train_outputs"]
    assert {k: v[1:] for k, v in shapes(scores).items()} == {
        k: v[1:] for k, v in expected_outputs["cls_outputs"].items()}
    assert {k: v[1:] for k, v in shapes(boxes).items()} == {
        k: v[1:] for k, v in expected_outputs["box_outputs"].items()}


# small_shared (TFM's defaults: shared towers, NMS v2) is `release`: small_separable has its
# towers and NMS, small_no_nms its very model.
@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.release(sibling=(
    "tests/vision/test_retinanet_model.py::"
    "test_small_model_counts_and_outputs_are_tfms[small_separable]")))
                                  if name == "small_shared" else name for name in SMALL])
def test_small_model_counts_and_outputs_are_tfms(name):
    """Shared and per-level towers, attribute heads (own, shared and the class tower),
    separable convolutions, the identity decoder, NMS v1 / v2 / batched and none."""
    expected = TFM["models"][name]
    model = _built(name)
    _assert_counts_are(model, expected)
    assert shapes(model(_small_images(2), training=True)) == expected["train_outputs"]
    outputs = model(_small_images(), image_shape=tf.constant([[128.0, 128.0]]), training=False)
    assert shapes(outputs) == expected["inference_outputs"]


# TFM's RetinaNetHead arguments of the heads in tfm_retinanet_heads.npz (the generator's
# HEADS): every weight drawn there, so equal outputs pin the wiring, not the initialisation.
HEADS = TFM["heads"]


@pytest.mark.parametrize("name", sorted(HEADS))
def test_head_outputs_equal_tfms_with_tfms_weights(name):
    tfm = np.load(os.path.join(DATA, "tfm_retinanet_heads.npz"))
    arguments = dict(HEADS[name])
    settings = NormSettings(activation=arguments.pop("activation"))
    head = RetinaNetHead(min_level=3, max_level=4, num_classes=3, num_anchors_per_location=2,
                         num_convs=2, num_filters=8, settings=settings, **arguments)
    features = {level: tfm[f"{name}/features/{level}"] for level in ("3", "4")}
    head(features)
    weights = {key.split("/weight/")[1]: tfm[key] for key in tfm.files
               if key.startswith(f"{name}/weight/")}
    assert len(head.weights) == len(weights)
    for weight in head.weights:  # the layers carry TFM's names
        weight.assign(weights.pop("/".join(weight.path.split("/")[-2:])))
    assert weights == {}
    scores, boxes, attributes = head(features, training=False)
    expected = {key.split(f"{name}/", 1)[1]: tfm[key] for key in tfm.files
                if key.startswith(f"{name}/") and "/weight/" not in key
                and "/features/" not in key}
    got = {f"scores/{k}": v for k, v in scores.items()}
    got.update({f"boxes/{k}": v for k, v in boxes.items()})
    got.update({f"attributes/{a}/{k}": v for a, levels in attributes.items()
                for k, v in levels.items()})
    assert sorted(got) == sorted(expected)
    for key, value in expected.items():
        np.testing.assert_allclose(got[key], value, rtol=1e-5, atol=1e-5 * np.abs(value).max(),
                                   err_msg=key)


def test_head_starts_at_the_focal_prior():
    # Every anchor's class logit starts at -log(99) (probability 0.01), the box offsets at 0.
    head = RetinaNetHead(min_level=3, max_level=4, num_classes=3, num_anchors_per_location=2,
                         num_convs=1, num_filters=8)
    features = {str(level): tf.random.stateless_normal([2, 16 // 2 ** (level - 3),
                                                        16 // 2 ** (level - 3), 5], [1, level])
                for level in (3, 4)}
    scores, boxes, attributes = head(features)
    assert attributes == {}
    assert [tuple(scores[k].shape) for k in ("3", "4")] == [(2, 16, 16, 6), (2, 8, 8, 6)]
    np.testing.assert_allclose(scores["3"], -np.log(99.0), atol=1e-3)
    np.testing.assert_allclose(boxes["4"], 0.0, atol=1e-3)
    assert np.abs(scores["3"] + np.log(99.0)).max() > 0  # the kernels are not zero


def _small_shared_task():
    """small_shared's task on a ResNet-10 (fewer layers to build; no count is asserted)."""
    task = _config("small_shared").task
    task.model.backbone.resnet.model_id = 10
    return task


def test_inference_anchors_are_generated_from_the_image_size():
    # Below the prior (0.01) every new anchor is a candidate, so there are boxes to compare.
    task = _small_shared_task()
    task.model.detection_generator.pre_nms_score_threshold = 0.005
    keras.backend.clear_session()
    model = retinanet_model.build_retinanet(task.model)
    images = _small_images(seed=1)
    generated = model(images, training=False)
    anchors = anchor.Anchor(3, 7, 3, [0.5, 1.0, 2.0], 4.0, (128, 128)).multilevel_boxes
    given = model(images, anchor_boxes={k: v[None] for k, v in anchors.items()},
                  training=False)
    np.testing.assert_array_equal(generated["detection_boxes"], given["detection_boxes"])
    assert int(generated["num_detections"][0]) == 100
    shifted = model(images, anchor_boxes={k: v[None] + 8.0 for k, v in anchors.items()},
                    training=False)
    assert not np.array_equal(shifted["detection_boxes"], generated["detection_boxes"])


def test_intermediate_features_and_fixed_anchors():
    task = _small_shared_task()
    keras.backend.clear_session()
    anchors = anchor.Anchor(3, 7, 3, [0.5, 1.0, 2.0], 4.0, (128, 128)).multilevel_boxes
    model = retinanet_model.build_retinanet(task.model, anchor_boxes=anchors)
    outputs = model(_small_images(2), output_intermediate_features=True, training=False)
    assert sorted(k for k in outputs if k.startswith(("backbone_", "decoder_"))) == [
        "backbone_2", "backbone_3", "backbone_4", "backbone_5", "decoder_3", "decoder_4",
        "decoder_5", "decoder_6", "decoder_7"]
    assert outputs["detection_boxes"].shape == (2, 100, 4)
    assert sorted(model.anchor_boxes) == ["3", "4", "5", "6", "7"]


def test_every_variable_is_checkpointed_and_restores(tmp_path):
    model = _built("small_level_convs_attributes")
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    saved = [name for name, _ in tf.train.list_variables(path)
             if name.startswith("model/") and "OBJECT" not in name]
    assert len(saved) == len(model.weights)
    images = _small_images(seed=2)
    expected = model(images, training=True)["attribute_outputs"]["heading"]["5"]
    restored = _build("small_level_convs_attributes")
    tf.train.Checkpoint(model=restored).read(path).assert_consumed()
    np.testing.assert_array_equal(
        restored(images, training=True)["attribute_outputs"]["heading"]["5"], expected)


def test_keras_file_round_trips(tmp_path):
    model = _built("small_separable")
    path = str(tmp_path / "retinanet.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert type(loaded) is retinanet_model.RetinaNetModel
    images = _small_images(seed=3)
    for key in ("detection_boxes", "detection_scores", "detection_classes"):
        np.testing.assert_array_equal(loaded(images, training=False)[key],
                                      model(images, training=False)[key])
    assert sorted(loaded.checkpoint_items) == ["backbone", "decoder", "head"]
    assert len(loaded.losses) == len(model.losses)


def test_mixed_bfloat16_raw_outputs_and_float32_detections():
    task = _small_shared_task()
    task.model.detection_generator.pre_nms_score_threshold = 0.005
    keras.backend.clear_session()  # before the policy: it resets Keras's global state
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = retinanet_model.build_retinanet(task.model)
        outputs = model(_small_images(), training=False)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert outputs["cls_outputs"]["3"].dtype == tf.bfloat16
    assert outputs["detection_boxes"].dtype == tf.float32
    assert outputs["detection_scores"].dtype == tf.float32
    assert int(outputs["num_detections"][0]) == 100


def test_tfds_input_is_refused_in_one_line_for_detection():
    config = ll.get_exp_config("retinanet_resnetfpn_coco")
    config.task.train_data.tfds_name = "coco/2017"
    with pytest.raises(ConfigError, match=r"task.train_data.tfds_name .*create_coco_tf_record"):
        retinanet_configs.check_buildable(config.task)
