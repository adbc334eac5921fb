"""TFM's segmentation experiments as lite defines and builds them: every config value, and the
parameter counts, L2 terms and logits shapes of each experiment's own model, equal TFM 2.20's
(tests/vision/data/tfm_2_20_segmentation_models.json, written in TFM's venv by
make_tfm_segmentation_models.py); TFM's two segmentation YAMLs load unchanged; the decoders
and head options build and run."""

import json
import os
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import lite_launcher as ll
from lite_launcher.core.base_config import ConfigError
from lite_launcher.vision import decoders, segmentation_configs, segmentation_model
from lite_launcher.vision.modeling import NormSettings
from lite_launcher.vision.modeling.factory import BackboneDecoderHead
from lite_launcher.vision.segmentation_heads import SegmentationHead

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tfm_compare import (as_plain_dict, differences, regularised_weights,  # noqa: E402
                         shapes_only)

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "data", "tfm_2_20_segmentation_models.json")) as f:
    TFM = json.load(f)["experiments"]
EXPERIMENTS = sorted(TFM)
BUILDABLE = sorted(name for name, entry in TFM.items() if "params" in entry)
YAMLS = ["deeplabv3plus_resnet101_cityscapes_gpu.yaml",
         "deeplabv3plus_resnet101_cityscapes_gpu_multiworker_mirrored.yaml"]


def test_the_eight_experiments_are_registered_and_seven_build():
    assert set(EXPERIMENTS) <= set(ll.registered_experiments())
    assert len(EXPERIMENTS) == 8 and len(BUILDABLE) == 7
    assert "semantic_segmentation" not in BUILDABLE  # no classes: nothing to build


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_config_values_are_tfms(name):
    config = ll.get_exp_config(name)
    config.validate()
    missing, different = differences(TFM[name]["config"], as_plain_dict(config, "task", "trainer"))
    assert different == []
    # Every TFM task field exists in lite (the trainer's TFM-only options are the trainer's).
    assert [m for m in missing if m.startswith(".task")] == []


def test_a_tfm_config_value_that_differs_is_found():
    # The comparison above can fail: change one nested value and one list item.
    config = ll.get_exp_config("mnv2_deeplabv3_pascal")
    config.task.model.decoder.aspp.level = 3
    config.task.train_data.output_size = [512, 513]
    _, different = differences(TFM["mnv2_deeplabv3_pascal"]["config"],
                               as_plain_dict(config, "task", "trainer"))
    assert {d[0] for d in different} == {".task.model.decoder.aspp.level",
                                         ".task.train_data.output_size[1]"}


@pytest.mark.parametrize("yaml_name", YAMLS)
def test_tfm_segmentation_yaml_loads_unchanged(yaml_name):
    path = os.path.join(HERE, "data", yaml_name)
    config = ll.override_config(ll.get_exp_config("seg_deeplabv3plus_cityscapes"), [path])
    config.validate()
    model = config.task.model
    assert model.backbone.dilated_resnet.se_ratio == 0.25
    assert model.backbone.dilated_resnet.stochastic_depth_drop_rate == 0.2
    assert model.decoder.type == "aspp" and model.decoder.aspp.pool_kernel_size == [512, 1024]
    assert model.decoder.aspp.dilation_rates == [6, 12, 18]  # the experiment's, kept
    assert (model.head.feature_fusion, model.head.low_level) == ("deeplabv3plus", 2)
    assert config.runtime.mixed_precision_dtype == "float16"
    assert config.trainer.best_checkpoint_eval_metric == "mean_iou"
    assert config.trainer.optimizer_config.warmup.linear.warmup_steps == 925
    assert config.task.validation_data.resize_eval_groundtruth is True
    if "multiworker" in yaml_name:
        assert config.runtime.distribution_strategy == "multi_worker_mirrored"
        assert config.task.train_data.crop_size == [512, 1024]  # the experiment's
    else:
        assert config.task.init_checkpoint is None
        assert config.task.train_data.dtype == "float16"


def _count(weights):
    return int(sum(int(np.prod(w.shape)) for w in weights))


# mnv2_deeplabv3_cityscapes is `release`: its model is mnv2_deeplabv3_pascal's with 19 classes
# and the ASPP pooling window of seg_deeplabv3plus_cityscapes (both in the suite).
@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.release(sibling=(
    "tests/vision/test_segmentation_model.py::"
    "test_model_counts_and_logits_shape_are_tfms[mnv2_deeplabv3_pascal]")))
                                  if name == "mnv2_deeplabv3_cityscapes" else name
                                  for name in BUILDABLE])
def test_model_counts_and_logits_shape_are_tfms(name):
    expected = TFM[name]
    config = ll.get_exp_config(name).task
    height, width = expected["logits_input"]
    with shapes_only():
        model = segmentation_model.build_segmentation_model(config.model,
                                                            config.losses.l2_weight_decay)
        counts = (_count(model.weights), _count(model.trainable_weights),
                  {k: _count(v.weights) for k, v in model.checkpoint_items.items()},
                  regularised_weights(model))
        spec = model.compute_output_spec(keras.KerasTensor((2, height, width, 3)))
    assert counts == (expected["params"], expected["trainable_params"], expected["parts"],
                      expected["l2_terms"])
    assert list(spec["logits"].shape) == expected["logits_shape"]


def test_init_checkpoint_modules_are_checked():
    task = ll.get_exp_config("mnv2_deeplabv3_pascal").task
    task.init_checkpoint_modules = ["backbone", "head"]
    with pytest.raises(ConfigError, match="init_checkpoint_modules"):
        task.validate()
    task.init_checkpoint_modules = "decoder"
    task.validate()


def test_init_checkpoint_items_are_the_named_parts_and_a_missing_decoder_is_one_line():
    # The mixin every backbone -> decoder -> head model shares (segmentation, RetinaNet).
    class Parts(BackboneDecoderHead):
        def __init__(self, decoder):
            self._backbone, self._decoder, self._head = "B", decoder, "H"

    full, bare = Parts("D"), Parts(None)
    assert full.init_checkpoint_items(["all"]) == {"backbone": "B", "decoder": "D", "head": "H"}
    assert full.init_checkpoint_items(["backbone", "decoder"]) == {"backbone": "B",
                                                                   "decoder": "D"}
    assert bare.init_checkpoint_items(["all"]) == {"backbone": "B", "head": "H"}
    with pytest.raises(ConfigError) as refused:
        bare.init_checkpoint_items(["decoder"])
    assert str(refused.value) == ("task.init_checkpoint_modules names 'decoder', which this "
                                  "model does not have; use 'all' or backbone.")


def test_aspp_branches_and_pooling():
    """ASPP: 1x1 + one branch per rate + image pooling, each num_filters; projection back to
    num_filters. Global pooling gives every pixel the same pooled branch; a pooling kernel
    (in input pixels / 2**level) does not."""
    settings = NormSettings()
    features = tf.random.stateless_normal([1, 8, 8, 5], seed=[1, 2])
    aspp = decoders.ASPP(level=4, dilation_rates=[1, 2], num_filters=6, settings=settings)
    out = aspp({"4": features})["4"]
    assert out.shape == (1, 8, 8, 6)
    # 1x1 (5*6) + two 3x3 (2*9*5*6) + pooled 1x1 (5*6) + projection (4*6*6), + 5 BNs of 4*6.
    assert _count(aspp.weights) == 5 * 6 + 2 * 9 * 5 * 6 + 5 * 6 + 4 * 6 * 6 + 5 * 4 * 6
    depthwise = decoders.ASPP(level=4, dilation_rates=[2], num_filters=6,
                              use_depthwise_convolution=True, settings=settings)
    depthwise(features)
    assert _count(depthwise.weights) == 5 * 6 + (9 * 5 + 5 * 6) + 5 * 6 + 3 * 6 * 6 + 4 * 4 * 6
    windowed = decoders.ASPP(level=2, dilation_rates=[], num_filters=6,
                             pool_kernel_size=[16, 16], settings=settings)
    assert windowed(features).keys() == {"2"}
    assert windowed._pool_size == (4, 4)
    with pytest.raises(ConfigError, match="fixed input size"):
        v2 = decoders.ASPP(level=4, dilation_rates=[], spp_layer_version="v2",
                           settings=settings)
        v2(keras.Input((None, None, 5)))


def test_fpn_levels_and_head_fusions():
    settings = NormSettings()
    inputs = {str(level): keras.Input((64 // 2 ** level, 64 // 2 ** level, 4 * level))
              for level in (2, 3, 4, 5)}
    specs = {k: tuple(v.shape) for k, v in inputs.items()}
    fpn = decoders.build_fpn(specs, min_level=3, max_level=6, num_filters=8, settings=settings)
    outputs = fpn(inputs)
    assert sorted(outputs) == ["3", "4", "5", "6"]
    assert [tuple(outputs[k].shape[1:]) for k in sorted(outputs)] == [
        (8, 8, 8), (4, 4, 8), (2, 2, 8), (1, 1, 8)]
    for fusion, extra, size in (("pyramid_fusion", {}, 8),
                                ("panoptic_fpn_fusion",
                                 dict(decoder_min_level=3, decoder_max_level=6,
                                      num_decoder_filters=8), 8),
                                ("deeplabv3plus", dict(low_level=2), 16)):
        head = SegmentationHead(num_classes=3, level=3, num_convs=1, num_filters=32,
                                feature_fusion=fusion, upsample_factor=2, settings=settings,
                                **extra)
        logits = head((inputs, outputs))
        assert tuple(logits.shape[1:]) == (2 * size, 2 * size, 3), fusion


def test_every_variable_is_checkpointed(tmp_path):
    """Sub-layers are attributes (not list items), so tf.train.Checkpoint saves them all."""
    config = ll.get_exp_config("mnv2_deeplabv3plus_cityscapes").task
    config.model.backbone.mobilenet.filter_size_scale = 0.25
    config.model.decoder.aspp.dilation_rates = [2, 4]
    config.model.head.num_filters = 8
    keras.backend.clear_session()
    model = segmentation_model.build_segmentation_model(config.model)
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    saved = [name for name, _ in tf.train.list_variables(path)
             if name.startswith("model/") and "OBJECT" not in name]
    assert len(saved) == len(model.weights)


def test_panoptic_fusion_needs_its_levels():
    task = ll.get_exp_config("seg_resnetfpn_pascal").task
    task.model.head.feature_fusion = "panoptic_fpn_fusion"
    with pytest.raises(ConfigError, match="decoder_min_level"):
        task.validate()
    task.model.head.decoder_min_level, task.model.head.decoder_max_level = 3, 7
    task.validate()
    assert segmentation_configs.FEATURE_FUSIONS[1:] == (
        "deeplabv3plus", "deeplabv3plus_sum_to_merge", "pyramid_fusion", "panoptic_fpn_fusion")


def test_keras_file_round_trips(tmp_path):
    """model.save('.keras') / load_model rebuild the model (every custom layer's get_config)."""
    config = ll.get_exp_config("mnv2_deeplabv3plus_cityscapes").task
    config.model.backbone.mobilenet.filter_size_scale = 0.25
    config.model.decoder.aspp.pool_kernel_size = None  # 512x1024 / 16 pools 32x64 windows
    keras.backend.clear_session()
    model = segmentation_model.build_segmentation_model(config.model, 1e-4)
    path = str(tmp_path / "segmentation.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    images = np.random.default_rng(0).normal(size=(1, 64, 64, 3)).astype(np.float32)
    np.testing.assert_array_equal(loaded(images)["logits"], model(images)["logits"])
    assert type(loaded) is segmentation_model.SegmentationModel
    assert sorted(loaded.checkpoint_items) == ["backbone", "decoder", "head"]
    assert len(loaded.losses) == len(model.losses)


def test_freeze_backbone_trains_the_decoder_and_head_only():
    """`task.freeze_backbone` (newer TFM's field; TFM's segmentation tutorial sets it): one
    training step leaves every backbone weight, BatchNorm statistics included, as it was and
    changes the decoder and the head."""
    config = ll.get_exp_config("mnv2_deeplabv3_pascal")
    config.task.freeze_backbone = True  # the tutorial's assignment
    config.task.model.num_classes = 3
    config.task.model.input_size = [32, 32, 3]
    config.task.model.backbone.mobilenet.filter_size_scale = 0.25
    config.task.validate()
    keras.backend.clear_session()
    task = ll.get_task(config.task)
    model = task.build_model()
    frozen = {id(v) for v in model.backbone.weights}
    assert model.trainable_variables and not frozen & {id(v) for v in model.trainable_variables}
    before = {v.path: v.numpy().copy() for v in model.weights}
    rng = np.random.default_rng(0)
    images = tf.constant(rng.normal(size=(2, 32, 32, 3)), tf.float32)
    masks = tf.constant(rng.integers(0, 3, (2, 32, 32, 1)), tf.float32)
    logs = task.train_step((images, {"masks": masks}), model, keras.optimizers.SGD(0.1),
                           metrics=[])
    assert np.isfinite(float(logs["loss"]))
    changed = {v.path for v in model.weights if not np.array_equal(before[v.path], v.numpy())}
    assert not {v.path for v in model.backbone.weights} & changed
    assert {v.path for v in model.head.weights} & changed
    assert {v.path for v in model.decoder.weights} & changed
    unfrozen = ll.get_exp_config("mnv2_deeplabv3_pascal").task
    assert unfrozen.freeze_backbone is False  # TFM's default: everything trains
