"""TFM's two-stage detection configs, heads and model as lite defines and builds them, against
TFM 2.20's own numbers (tests/vision/data/tfm_maskrcnn_counts.json and tfm_maskrcnn_heads.npz,
written in TFM's venv by make_tfm_maskrcnn_counts.py): every config value of the five
experiments and of TFM's five Mask R-CNN YAMLs loaded unchanged; the RPN, detection and mask
heads' outputs with TFM's weights; the parameter counts, checkpoint parts and L2 terms of the
experiments and of small variants, and the keys and shapes of their training and inference
outputs; the checks that refuse a bad config in one line; and TFM-written Mask R-CNN and
Cascade R-CNN checkpoints (tests/vision/data/tfm_checkpoints/maskrcnn, written by
make_tfm_maskrcnn_checkpoints.py) restoring to TFM's detections and masks."""

import functools
import json
import os
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import lite_launcher as ll
from lite_launcher.common import builtin_experiments
from lite_launcher.checkpointing import checkpoints, tfm_checkpoint
from lite_launcher.core.base_config import ConfigError
from lite_launcher.vision.configs import maskrcnn as maskrcnn_configs
from lite_launcher.vision.modeling import maskrcnn_model
from lite_launcher.vision.modeling.heads.dense_prediction_heads import RPNHead
from lite_launcher.vision.modeling.heads.instance_heads import DetectionHead, MaskHead
from lite_launcher.vision.modeling.layers.nn_layers import NormSettings

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import release_siblings  # noqa: E402
from tfm_compare import as_plain_dict, count_weights, differences, shapes  # noqa: E402
from fp32_noise import (  # noqa: E402
    BOX_PIXEL_TOLERANCE, DEEP_NETWORK_TOLERANCE, PROBABILITY_TOLERANCE)

with open(os.path.join(DATA, "tfm_maskrcnn_counts.json")) as f:
    TFM = json.load(f)
EXPERIMENTS = sorted(TFM["experiments"])
SMALL = sorted(name for name in TFM["models"] if name.startswith("small"))


# ----- configs --------------------------------------------------------------------------


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_config_values_are_tfms(name):
    config = ll.get_exp_config(name)
    config.validate()
    missing, different = differences(TFM["experiments"][name],
                                     as_plain_dict(config, "task", "trainer", "runtime"))
    assert different == []
    assert [m for m in missing if m.startswith(".task")] == []


def test_a_tfm_config_value_that_differs_is_found():
    # The comparison above can fail: a nested value, a list item and a null sub-config.
    config = ll.get_exp_config("cascadercnn_spinenet_coco")
    config.task.model.roi_sampler.cascade_iou_thresholds = [0.6, 0.75]
    config.task.model.detection_head.fc_dims = 512
    config.task.model.mask_head = None
    _, different = differences(TFM["experiments"]["cascadercnn_spinenet_coco"],
                               as_plain_dict(config, "task", "trainer", "runtime"))
    assert {d[0] for d in different} == {
        ".task.model.roi_sampler.cascade_iou_thresholds[1]",
        ".task.model.detection_head.fc_dims", ".task.model.mask_head"}


@pytest.mark.parametrize("yaml_name", sorted(TFM["yamls"]))
def test_tfm_maskrcnn_yaml_loads_unchanged(yaml_name):
    expected = TFM["yamls"][yaml_name]
    config = ll.override_config(ll.get_exp_config(expected["experiment"]),
                                [os.path.join(DATA, yaml_name)])
    config.validate()
    missing, different = differences({k: expected[k] for k in ("task", "trainer", "runtime")},
                                     as_plain_dict(config, "task", "trainer", "runtime"))
    assert different == []
    assert [m for m in missing if m.startswith(".task")] == []


def test_experiments_are_built_in_names():
    assert {name: builtin_experiments.BUILTIN_EXPERIMENTS[name] for name in EXPERIMENTS} \
        == {name: "lite_launcher.vision.configs.maskrcnn" for name in EXPERIMENTS}


@pytest.mark.parametrize("override,message", [
    ({"model": {"roi_sampler": {"cascade_iou_thresholds": [0.6]}}},
     r"cascade_iou_thresholds \[0.6\] need task.model.detection_head.class_agnostic_bbox_pred"),
    ({"model": {"roi_sampler": {"cascade_iou_thresholds": [0.6, 0.7, 0.8]}, "detection_head": {
        "class_agnostic_bbox_pred": True}}}, "at most 2 cascade stages"),
    ({"model": {"mask_head": None}}, r"include_mask is true but task.model.mask_head is null"),
    ({"model": {"outer_boxes_scale": 0.5}}, r"outer_boxes_scale \(0.5\) must be >= 1.0"),
    ({"model": {"detection_generator": {"nms_version": "tflite"}}}, "nms_version 'tflite'"),
    ({"model": {"detection_generator": {"soft_nms_sigma": 0.5}}}, "soft_nms_sigma needs"),
    ({"model": {"decoder": {"type": "aspp"}}}, "not implemented for Mask R-CNN"),
    ({"model": {"backbone": {"type": "hrnet"}}}, "Unknown value 'hrnet'"),
    ({"model": {"roi_generator": {"test_num_proposals": 0}}}, "test_num_proposals"),
    ({"model": {"mask_head": {"upsample_factor": 0}}}, "upsample_factor"),
    ({"train_data": {"parser": {"pad": False}}}, r"task.train_data.parser.pad is false"),
    ({"train_data": {"parser": {"rpn_match_threshold": 0.2}}}, "rpn_unmatched_threshold"),
    ({"train_data": {"parser": {"aug_type": {"type": "autoaug", "autoaug": {
        "augmentation_name": "detection_v0"}}}}},
     r"task.train_data.parser.aug_type.autoaug.augmentation_name 'detection_v0' moves boxes"),
    ({"losses": {"class_weights": [1.0, 2.0]}}, "class_weights has 2 values"),
    ({"losses": {"frcnn_class_loss_top_k_percent": 0.0}}, "frcnn_class_loss_top_k_percent"),
    ({"allowed_mask_class_ids": [0, 5]}, r"allowed_mask_class_ids \[0\]"),
    ({"init_checkpoint_modules": ["backbone", "rpn_head"]}, "init_checkpoint_modules"),
    ({"use_approx_instance_metrics": True}, "use_approx_instance_metrics"),
])
def test_config_check_names_the_bad_field(override, message):
    config = ll.get_exp_config("maskrcnn_resnetfpn_coco")
    with pytest.raises(ConfigError, match=message) as error:
        config.task.override(override)  # a type lite does not know is refused here
        config.validate()
    assert "\n" not in str(error.value)


def test_faster_rcnn_has_no_mask_branch_and_the_general_task_needs_classes():
    model = ll.get_exp_config("fasterrcnn_resnetfpn_coco").task.model
    assert (model.include_mask, model.mask_head, model.mask_sampler,
            model.mask_roi_aligner) == (False, None, None, None)
    task = maskrcnn_configs.MaskRCNNTask()
    task.validate()
    with pytest.raises(ConfigError, match="num_classes"):
        maskrcnn_configs.check_buildable(task)


# ----- heads ----------------------------------------------------------------------------

HEAD_CLASSES = {"RPNHead": RPNHead, "DetectionHead": DetectionHead, "MaskHead": MaskHead}


@pytest.mark.parametrize("name", sorted(TFM["heads"]))
def test_head_outputs_equal_tfms_with_tfms_weights(name):
    """Every weight TFM's head was given (a normal draw), by TFM's layer names: equal
    outputs pin the wiring, the layer names and the per-ROI reshapes."""
    spec = TFM["heads"][name]
    tfm = np.load(os.path.join(DATA, "tfm_maskrcnn_heads.npz"))
    arguments = dict(spec["arguments"])
    settings = NormSettings(activation=arguments.pop("activation", "relu"))
    head = HEAD_CLASSES[spec["class"]](settings=settings, **arguments)
    inputs = {key: tfm[f"{name}/input/{key}"] for key in spec["inputs"]}
    call_input = {"RPNHead": lambda: inputs, "DetectionHead": lambda: inputs["features"],
                  "MaskHead": lambda: [inputs["features"], inputs["classes"]]}[spec["class"]]()
    head(call_input)
    weights = {key.split("/weight/")[1]: tfm[key] for key in tfm.files
               if key.startswith(f"{name}/weight/")}
    assert len(head.weights) == len(weights)
    for weight in head.weights:  # the layers carry TFM's names
        weight.assign(weights.pop("/".join(weight.path.split("/")[-2:])))
    assert weights == {}
    outputs = head(call_input, training=False)
    if spec["class"] == "RPNHead":
        got = {f"scores_{k}": v for k, v in outputs[0].items()}
        got.update({f"boxes_{k}": v for k, v in outputs[1].items()})
    elif spec["class"] == "DetectionHead":
        got = {"classes": outputs[0], "boxes": outputs[1]}
    else:
        got = {"masks": outputs}
    expected = {key.split("/output/")[1]: tfm[key] for key in tfm.files
                if key.startswith(f"{name}/output/")}
    assert sorted(got) == sorted(expected)
    for key, value in expected.items():
        np.testing.assert_allclose(got[key], value, rtol=1e-5, atol=1e-5 * np.abs(value).max(),
                                   err_msg=key)


def test_mask_head_returns_each_rois_own_class_channel():
    # Class-specific logits: the ROI of class c gets channel c of the 1x1 logits.
    head = MaskHead(num_classes=3, upsample_factor=1, num_convs=0, num_filters=2)
    features = tf.random.stateless_normal([1, 2, 3, 3, 4], [3, 4])
    head([features, tf.constant([[0, 2]])])
    head.mask_regressor.kernel.assign(np.arange(6, dtype=np.float32).reshape(1, 1, 2, 3) - 2.5)
    masks = head([features, tf.constant([[0, 2]])], training=False)
    hidden = head.deconv_norm(head.deconv(tf.reshape(features, [2, 3, 3, 4])), training=False)
    hidden = tf.nn.relu(hidden)
    logits = head.mask_regressor(hidden).numpy().reshape(2, 3, 3, 3)
    np.testing.assert_allclose(masks[0, 0], logits[0, ..., 0], rtol=1e-6)
    np.testing.assert_allclose(masks[0, 1], logits[1, ..., 2], rtol=1e-6)


# ----- models ---------------------------------------------------------------------------


def _part_count(item):
    layers = item if isinstance(item, list) else [item]
    return sum(count_weights(layer.weights) for layer in layers)


def _assert_counts_are(model, expected):
    """All and trainable weights, each checkpoint part's and the L2 terms, as TFM's."""
    assert count_weights(model.weights) == expected["params"]
    assert count_weights(model.trainable_weights) == expected["trainable_params"]
    parts = model.checkpoint_items.items()
    assert {k: _part_count(v) for k, v in parts} == expected["parts"]
    assert len(model.losses) == expected["l2_terms"]


def _config(name):
    """The experiment config of model variant `name`, its overrides applied."""
    entry = TFM["models"][name]
    config = ll.get_exp_config(entry["experiment"])
    for override in entry["overrides"]:
        config.override(override)
    config.validate()
    return config


def _build(name):
    keras.backend.clear_session()
    task = _config(name).task
    maskrcnn_configs.check_buildable(task)
    return maskrcnn_model.build_maskrcnn(task.model, task.losses.l2_weight_decay)


@functools.lru_cache(maxsize=None)
def _built(name):
    """`_build(name)` once per test run, for the tests that only read the model."""
    return _build(name)


def _ground_truths(batch):
    """The generator's `small_ground_truths`: two boxes per image (classes 1 and 3), a third
    padded with -1, their box-cropped 16x16 masks."""
    boxes = np.full([batch, 3, 4], -1.0, np.float32)
    classes = np.full([batch, 3], -1, np.int32)
    masks = np.full([batch, 3, 16, 16], -1.0, np.float32)
    for b in range(batch):
        for i, (box, cls) in enumerate((([4, 6, 30, 40], 1), ([20 + b, 24, 60, 58], 3))):
            boxes[b, i] = box
            classes[b, i] = cls
            masks[b, i] = 0.0
            masks[b, i, 4:12, 4:12] = 1.0
    return boxes, classes, masks


# The full-size models take seconds each to build: `release`, each naming a suite test of its
# own branch (release_siblings.sibling_of: the cascade's and Faster R-CNN's run their
# variant; the Mask R-CNNs name the small Mask R-CNN's count test).
@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.release(
    sibling=release_siblings.sibling_of(
        name, "tests/vision/test_maskrcnn_model.py::"
              "test_small_model_counts_and_output_shapes_are_tfms[small_maskrcnn]")))
    for name in EXPERIMENTS])
def test_experiment_model_counts_are_tfms(name):
    # maskrcnn_resnetfpn_coco: 46,431,985; fasterrcnn_resnetfpn_coco: 43,780,758 (TFM 2.20).
    _assert_counts_are(_build(name), TFM["models"][name])


# small_maskrcnn runs in the suite; Faster R-CNN, the cascade and the separable heads build
# the same way with other options (each model costs seconds to build and call): `release`.
SUITE_SMALL = "small_maskrcnn"


@pytest.mark.parametrize("name", [
    name if name == SUITE_SMALL else pytest.param(name, marks=pytest.mark.release(
        sibling=release_siblings.sibling_of(
            name, f"tests/vision/test_maskrcnn_model.py::"
                  f"test_small_model_counts_and_output_shapes_are_tfms[{SUITE_SMALL}]")))
    for name in SMALL])
def test_small_model_counts_and_output_shapes_are_tfms(name):
    """Mask R-CNN, Faster R-CNN, a 3-stage cascade, separable heads with a class-agnostic
    mask head: weights, parts, L2 terms, and the keys and shapes of the training outputs
    (ground truths given) and of the inference outputs."""
    expected = TFM["models"][name]
    model = _built(name)
    _assert_counts_are(model, expected)
    size = expected["input_size"]
    images = np.random.default_rng(0).normal(size=[2] + size).astype(np.float32)
    boxes, classes, masks = _ground_truths(2)
    train = model(images, image_shape=tf.constant([size[:2]] * 2, tf.float32), gt_boxes=boxes,
                  gt_classes=classes, gt_masks=masks, training=True)
    assert {k: shapes(v) for k, v in train.items() if not k.endswith("_features")} == \
        expected["train_outputs"]
    inference = model(images[:1], image_shape=tf.constant([size[:2]], tf.float32),
                      training=False)
    assert {k: shapes(v) for k, v in inference.items() if not k.endswith("_features")} == \
        expected["inference_outputs"]


def test_every_variable_is_checkpointed_and_the_keras_file_round_trips(tmp_path):
    # The per-stage heads are attributes, not list items: tf.train.Checkpoint sees them all.
    model = _built(SUITE_SMALL)
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    saved = [name for name, _ in tf.train.list_variables(path)
             if name.startswith("model/") and "OBJECT" not in name]
    assert len(saved) == len(model.weights) == 199
    model.save(str(tmp_path / "maskrcnn.keras"))
    loaded = keras.models.load_model(str(tmp_path / "maskrcnn.keras"))
    assert type(loaded) is maskrcnn_model.MaskRCNNModel
    assert sorted(loaded.checkpoint_items) == ["backbone", "decoder", "detection_head",
                                               "mask_head", "rpn_head"]
    assert len(loaded.losses) == len(model.losses) == 40
    # The same parts and options (a call of each costs seconds; the weights pin the rest).
    as_json = lambda config: json.loads(json.dumps(config))  # tuples read back as lists
    assert as_json(loaded.get_config()) == as_json(model.get_config())
    layer_and_name = lambda weights: [w.path.split("/")[-2:] for w in weights]
    assert layer_and_name(loaded.weights) == layer_and_name(model.weights)
    for saved_weight, weight in zip(loaded.weights, model.weights):
        np.testing.assert_array_equal(saved_weight, weight, err_msg=weight.path)


# ----- TFM-written checkpoints ------------------------------------------------------------

CHECKPOINTS = os.path.join(DATA, "tfm_checkpoints", "maskrcnn")
with open(os.path.join(CHECKPOINTS, "index.json")) as f:
    CHECKPOINT_INDEX = json.load(f)


def _close(got, expected, name):
    """Within DEEP_NETWORK_TOLERANCE of the largest magnitude (float rounding of two
    implementations)."""
    np.testing.assert_allclose(
        np.asarray(got), expected, rtol=0,
        atol=DEEP_NETWORK_TOLERANCE * max(np.abs(expected).max(), 1.0), err_msg=name)


def _roi_order(got, expected):
    """The order that lines lite's ROI rows up with TFM's. Two proposals whose scores differ
    by float rounding alone can leave the ROI generator's top-k in either order (seen on an
    Intel Xeon: rows 21 and 22 swapped), so a row may pair with a neighbour's: each TFM row
    takes the nearest lite row, every lite row used once, none moved more than two places."""
    got, expected = np.asarray(got), np.asarray(expected)
    distance = np.abs(expected[:, None, :] - got[None, :, :]).max(axis=-1)
    order = distance.argmin(axis=1)
    assert sorted(order) == list(range(len(got))), order
    assert np.abs(order - np.arange(len(got))).max() <= 2, order
    return order


# The Mask R-CNN runs in the suite; the cascade (two more class-agnostic stages, the
# ensemble of their scores) is `release`, its sibling the cascade's suite test (the same
# checkpoint served through the task, then trained and evaluated).
@pytest.mark.parametrize("name", [
    "maskrcnn_resnet50_fpn",
    pytest.param("cascadercnn_resnet50_fpn", marks=pytest.mark.release(
        sibling=release_siblings.sibling_of("cascadercnn_resnet50_fpn", "")))])
def test_tfm_checkpoint_gives_tfms_detections_and_masks(name):
    """A TFM-written Mask R-CNN (random weights, ResNet-50 at 1/16 width) restores by
    structure through lite's reader: RPN outputs, the last stage's class and box outputs, the
    detections after NMS and the masks equal TFM's on the same image."""
    entry = CHECKPOINT_INDEX["models"][name]
    config = ll.get_exp_config(entry["experiment"])
    config.task.model.override(entry["model"])
    config.validate()
    keras.backend.clear_session()
    model = maskrcnn_model.build_maskrcnn(config.task.model)
    directory = os.path.join(CHECKPOINTS, name)
    assert count_weights(model.weights) == entry["params"]
    assert tfm_checkpoint.load_weights(model, tf.train.latest_checkpoint(directory),
                                       "model") == len(model.weights)
    tfm = np.load(os.path.join(directory, "reference.npz"))
    outputs = model(tfm["images"], image_shape=tfm["image_shape"], training=False)
    count = _assert_boxes_are_tfms(outputs, tfm)
    np.testing.assert_allclose(outputs["detection_masks"][0, :count],
                               tfm["detection_masks"][0, :count], atol=PROBABILITY_TOLERANCE)


def _assert_boxes_are_tfms(outputs, tfm) -> int:
    """The RPN, class and box outputs and the detections of `outputs` equal TFM's reference
    (`tfm`); returns the number of detections."""
    for level in outputs["rpn_scores"]:
        _close(outputs["rpn_scores"][level], tfm[f"rpn_scores_{level}"], f"rpn_scores {level}")
        _close(outputs["rpn_boxes"][level], tfm[f"rpn_boxes_{level}"], f"rpn_boxes {level}")
    order = _roi_order(outputs["cls_outputs"][0], tfm["cls_outputs"][0])
    _close(np.asarray(outputs["cls_outputs"])[:, order], tfm["cls_outputs"], "cls_outputs")
    _close(np.asarray(outputs["box_outputs"])[:, order], tfm["box_outputs"], "box_outputs")
    count = int(tfm["num_detections"][0])
    assert int(outputs["num_detections"][0]) == count > 1
    np.testing.assert_array_equal(outputs["detection_classes"][0, :count],
                                  tfm["detection_classes"][0, :count])
    np.testing.assert_allclose(outputs["detection_scores"][0, :count],
                               tfm["detection_scores"][0, :count], atol=PROBABILITY_TOLERANCE)
    np.testing.assert_allclose(outputs["detection_boxes"][0, :count],
                               tfm["detection_boxes"][0, :count], atol=BOX_PIXEL_TOLERANCE)
    return count


def test_a_box_only_model_initialises_from_a_tfm_mask_rcnn_checkpoint(caplog):
    """Fine-tuning a Faster R-CNN from a COCO Mask R-CNN checkpoint, as TFM's task allows
    (`init_checkpoint_modules: all` reads with `expect_partial()`): every variable of the
    box-only model is read, the checkpoint's `mask_head` is left unread (logged), and the
    RPN, class and box outputs and the detections equal TFM's Mask R-CNN's on the same
    image (the mask branch does not feed them)."""
    entry = CHECKPOINT_INDEX["models"]["maskrcnn_resnet50_fpn"]
    config = ll.get_exp_config(entry["experiment"])
    config.task.model.override(entry["model"])
    config.task.model.override({"include_mask": False})
    keras.backend.clear_session()
    model = maskrcnn_model.build_maskrcnn(config.task.model)
    assert model.mask_head is None
    directory = os.path.join(CHECKPOINTS, "maskrcnn_resnet50_fpn")
    with caplog.at_level("INFO"):
        checkpoints.read_weights(model.init_checkpoint_items(["all"]), directory)
    assert "TFM checkpoint's model/mask_head weights are not read" in caplog.text
    tfm = np.load(os.path.join(directory, "reference.npz"))
    outputs = model(tfm["images"], image_shape=tfm["image_shape"], training=False)
    _assert_boxes_are_tfms(outputs, tfm)
    assert "detection_masks" not in outputs
