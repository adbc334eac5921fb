"""Vision configs: TFM's fields and defaults, the three experiments, the TFM YAML, rejects."""

import os
import subprocess
import sys

import pytest
import yaml

import lite_launcher as ll
from lite_launcher.core.base_config import ConfigError, load_config_file
from lite_launcher.vision import configs
from cli import lite_train_command

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TFM_YAML = os.path.join(HERE, "data", "imagenet_resnet50_gpu.yaml")
EXPERIMENTS = ["image_classification", "resnet_imagenet", "mobilenet_imagenet",
               "resnet_rs_imagenet"]


def test_the_three_experiments_are_registered():
    assert set(EXPERIMENTS) <= set(ll.registered_experiments())


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_config_round_trips_through_params_yaml(name, tmp_path):
    config = ll.get_exp_config(name)
    config.validate()
    path = str(tmp_path / "params.yaml")
    config.save_yaml(path)
    again = ll.get_exp_config("image_classification")
    again.override(load_config_file(path))
    again.validate()
    assert again.as_dict() == config.as_dict()
    assert isinstance(again.task, configs.ImageClassificationTask)
    assert isinstance(again.task.train_data.crop_area_range, tuple)


def test_resnet_imagenet_has_tfm_defaults():
    config = ll.get_exp_config("resnet_imagenet")
    steps_per_epoch = 1281167 // 4096
    assert config.runtime.enable_xla is True
    model = config.task.model
    assert (model.num_classes, model.input_size) == (1001, [224, 224, 3])
    assert (model.backbone.type, model.backbone.resnet.model_id) == ("resnet", 50)
    assert (model.norm_activation.norm_momentum, model.norm_activation.norm_epsilon) == (0.9, 1e-5)
    assert model.kernel_initializer == "random_uniform"
    assert config.task.losses.l2_weight_decay == 1e-4
    train, validation = config.task.train_data, config.task.validation_data
    assert (train.input_path, validation.input_path) == (
        "imagenet-2012-tfrecord/train*", "imagenet-2012-tfrecord/valid*")
    assert train.global_batch_size == validation.global_batch_size == 4096
    assert (train.is_training, validation.is_training) == (True, False)
    assert (train.shuffle_buffer_size, train.cycle_length, train.dtype) == (10000, 10, "float32")
    assert train.crop_area_range == (0.08, 1.0) and train.center_crop_fraction == 0.875
    trainer = config.trainer
    assert trainer.train_steps == 90 * steps_per_epoch
    assert trainer.steps_per_loop == trainer.validation_interval == steps_per_epoch
    assert trainer.validation_steps == 50000 // 4096
    opt = trainer.optimizer_config
    assert opt.optimizer.type == "sgd" and opt.optimizer.sgd.momentum == 0.9
    assert opt.learning_rate.stepwise.boundaries == [30 * steps_per_epoch, 60 * steps_per_epoch,
                                                    80 * steps_per_epoch]
    assert opt.learning_rate.stepwise.values == pytest.approx([1.6, 0.16, 0.016, 0.0016])
    assert opt.warmup.linear.warmup_steps == 5 * steps_per_epoch


def test_mobilenet_imagenet_has_tfm_defaults():
    config = ll.get_exp_config("mobilenet_imagenet")
    model = config.task.model
    assert model.backbone.type == "mobilenet"
    assert model.backbone.mobilenet.model_id == "MobileNetV2"
    assert model.dropout_rate == 0.2 and model.norm_activation.norm_momentum == 0.997
    assert config.task.losses.label_smoothing == 0.1
    assert config.task.losses.l2_weight_decay == 1e-5
    opt = config.trainer.optimizer_config
    assert opt.optimizer.type == "rmsprop" and opt.optimizer.rmsprop.epsilon == 0.002
    assert opt.learning_rate.exponential.initial_learning_rate == pytest.approx(0.008 * 32)
    assert config.trainer.train_steps == 500 * (1281167 // 4096)


def test_image_classification_defaults_are_tfms():
    task = ll.get_exp_config("image_classification").task
    assert task.model.num_classes == 0 and task.model.input_size == []
    assert task.model.backbone.type == "resnet" and task.model.backbone.resnet.model_id == 50
    assert task.model.norm_activation.use_sync_bn is False
    assert (task.losses.one_hot, task.losses.label_smoothing, task.losses.loss_weight) == (
        True, 0.0, 1.0)
    assert task.evaluation.top_k == 5
    assert (task.init_checkpoint_modules, task.freeze_backbone) == ("all", False)
    data = task.train_data
    assert (data.image_field_key, data.label_field_key) == ("image/encoded", "image/class/label")
    assert (data.decode_jpeg_only, data.aug_rand_hflip, data.aug_crop) == (True, True, True)
    assert data.tf_resize_method == "bilinear" and data.is_multilabel is False
    assert data.aug_type is None and data.mixup_and_cutmix is None
    assert data.random_erasing is None and data.color_jitter == 0.0
    # Sub-configs of the augmentations, with TFM's defaults, exist for YAMLs that name them.
    data.override({"aug_type": {"type": "randaug", "randaug": {"magnitude": 9}},
                   "mixup_and_cutmix": {"mixup_alpha": 0.2},
                   "random_erasing": {"probability": 0.5}})
    assert data.aug_type.randaug.num_layers == 2 and data.aug_type.randaug.magnitude == 9
    assert data.aug_type.randaug.translate_const == 10
    assert data.mixup_and_cutmix.cutmix_alpha == 1.0 and data.mixup_and_cutmix.mixup_alpha == 0.2
    assert data.mixup_and_cutmix.label_smoothing == 0.1
    assert data.random_erasing.max_area == pytest.approx(1 / 3) and data.random_erasing.trials == 10


def test_tfm_yaml_loads_unchanged():
    with open(TFM_YAML) as f:
        raw = yaml.safe_load(f)
    assert set(raw) == {"runtime", "task", "trainer"}
    config = ll.override_config(ll.get_exp_config("resnet_imagenet"), [TFM_YAML])
    assert config.runtime.mixed_precision_dtype == "float16" and config.runtime.num_gpus == 8
    assert config.task.losses.label_smoothing == 0.1
    assert config.task.train_data.dtype == "float16"
    assert config.task.train_data.global_batch_size == 2048
    assert config.task.validation_data.drop_remainder is False
    assert config.trainer.optimizer_config.learning_rate.stepwise.values == [
        0.8, 0.08, 0.008, 0.0008]
    assert config.trainer.optimizer_config.warmup.linear.warmup_steps == 3125


@pytest.mark.parametrize("override, named", [
    ({"task": {"train_data": {"three_augment": True}}}, "task.train_data.three_augment"),
    ({"task": {"train_data": {"repeated_augment": 3}}}, "task.train_data.repeated_augment"),
    ({"task": {"train_input_partition_dims": [1, 2, 1, 1]}}, "task.train_input_partition_dims"),
    ({"task": {"model_output_keys": [1]}}, "task.model_output_keys"),
    ({"task": {"model": {"backbone": {"type": "mobilenet", "mobilenet": {"output_stride": 3}}}}},
     "task.model.backbone.mobilenet.output_stride"),
    ({"task": {"model": {"backbone": {"type": "mobilenet",
                                      "mobilenet": {"model_id": "MobileNetV3EdgeTPU"}}}}},
     "MobileNetV3EdgeTPU"),
    ({"task": {"model": {"backbone": {"type": "dilated_resnet",
                                      "dilated_resnet": {"output_stride": 4}}}}},
     "task.model.backbone.dilated_resnet.output_stride"),
    ({"task": {"model": {"backbone": {"type": "dilated_resnet",
                                      "dilated_resnet": {"multigrid": [1, 2]}}}}},
     "task.model.backbone.dilated_resnet.multigrid"),
    ({"task": {"model": {"backbone": {"type": "efficientnet"}}}}, "efficientnet"),
    ({"task": {"train_data": {"decoder": {"type": "label_map_decoder"}}}}, "label_map_decoder"),
    ({"task": {"init_checkpoint_modules": "decoder"}}, "task.init_checkpoint_modules"),
    ({"task": {"model": {"backbone": {"resnet": {"model_id": 51}}}}}, "model_id 51"),
])
def test_unimplemented_or_bad_fields_fail_at_config_time(override, named):
    config = ll.get_exp_config("resnet_imagenet")
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        config.override(override)
        config.validate()


DEFAULTS_OF_UNIMPLEMENTED = {"train_data": {"three_augment": False, "aug_policy": None,
                                            "weights": None, "repeated_augment": None},
                             "train_input_partition_dims": []}


def test_defaults_of_unimplemented_fields_are_accepted():
    config = ll.get_exp_config("resnet_imagenet")
    config.override({"task": DEFAULTS_OF_UNIMPLEMENTED})
    assert config.validate() is None
    task = config.task.as_dict()
    assert {k: task["train_data"][k] for k in DEFAULTS_OF_UNIMPLEMENTED["train_data"]} == \
        DEFAULTS_OF_UNIMPLEMENTED["train_data"]
    assert task["train_input_partition_dims"] == []
    # Set explicitly to its default, a field passes; set to anything else, it is refused.
    for field, used in (("three_augment", True), ("repeated_augment", 2)):
        config = ll.get_exp_config("resnet_imagenet")
        config.override({"task": {"train_data": {field: used}}})
        with pytest.raises(ConfigError, match=f"task.train_data.{field}"):
            config.validate()


def test_cli_rejects_an_unimplemented_field_in_one_line():
    result = subprocess.run(
        lite_train_command("--experiment", "resnet_imagenet", "--dry_run", "--params_override",
                           "task.train_data.three_augment=true"),
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.returncode == 2, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("lite-train: error:") and "task.train_data.three_augment" in last


def test_resnet_rs_imagenet_has_tfm_defaults():
    config = ll.get_exp_config("resnet_rs_imagenet")
    steps_per_epoch = 1281167 // 4096
    assert config.runtime.enable_xla is False  # TFM leaves XLA off here
    model = config.task.model
    resnet = model.backbone.resnet
    assert (model.backbone.type, resnet.model_id, resnet.stem_type) == ("resnet", 50, "v1")
    assert resnet.resnetd_shortcut and resnet.replace_stem_max_pool and resnet.se_ratio == 0.25
    assert model.input_size == [160, 160, 3] and model.dropout_rate == 0.25
    norm = model.norm_activation
    assert (norm.norm_momentum, norm.norm_epsilon, norm.activation) == (0.0, 1e-5, "swish")
    assert config.task.losses.l2_weight_decay == 4e-5
    assert config.task.train_data.aug_type.type == "randaug"
    assert config.task.train_data.aug_type.randaug.magnitude == 10
    opt = config.trainer.optimizer_config
    assert (opt.ema.average_decay, opt.ema.trainable_weights_only) == (0.9999, False)
    assert opt.learning_rate.cosine.initial_learning_rate == 1.6
    assert config.trainer.train_steps == 350 * steps_per_epoch


# Every field TFM's DataConfig / TaskConfig / RuntimeConfig has, at a value that changes nothing
# in TFM either (the tf.data service needs an address; tfds_* need tfds_name; the TPU fields
# need the TPU strategy; aug_policy is never read).
ACCEPTED = {
    "runtime": {"tpu_enable_xla_dynamic_padder": True, "num_cores_per_replica": 2,
                "default_shard_dim": 1, "use_tpu_mp_strategy": True},
    "task": {"allow_image_summary": True, "differential_privacy_config": None,
             "train_data": {"enable_tf_data_service": True, "tf_data_service_job_name": "job",
                            "tfds_data_dir": "/data", "tfds_as_supervised": True,
                            "tfds_skip_decoding_feature": "image", "trainer_id": "t0",
                            "enable_shared_tf_data_service_between_parallel_trainers": True,
                            "apply_tf_data_service_before_batching": True,
                            "autotune_algorithm": "HILL_CLIMB", "ram_budget": 2,
                            "aug_policy": "randaug", "randaug_magnitude": 5},
             "validation_data": {"aug_policy": "autoaug"}},
}


def test_tfm_fields_are_accepted_where_they_change_nothing():
    config = ll.get_exp_config("resnet_imagenet")
    config.override(ACCEPTED)
    config.validate()
    assert config.task.train_data.enable_tf_data_service is True


@pytest.mark.parametrize("override, named", [
    ({"task": {"train_data": {"enable_tf_data_service": True,
                              "tf_data_service_address": "grpc://host:5000"}}},
     "enable_tf_data_service"),
    ({"task": {"differential_privacy_config": {"noise_multiplier": 1.0}}},
     "task.differential_privacy_config"),
    ({"runtime": {"distribution_strategy": "tpu", "num_cores_per_replica": 2}},
     "runtime.num_cores_per_replica"),
    ({"runtime": {"distribution_strategy": "tpu", "use_tpu_mp_strategy": True}},
     "runtime.use_tpu_mp_strategy"),
    ({"task": {"train_data": {"autotune_algorithm": "FASTEST"}}}, "autotune_algorithm"),
])
def test_tfm_fields_lite_does_not_implement_are_refused_where_they_change_behaviour(override,
                                                                                   named):
    config = ll.get_exp_config("resnet_imagenet")
    config.override(override)
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        config.validate()


def test_autotune_algorithm_and_ram_budget_reach_the_dataset():
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from lite_launcher.core.input_reader import InputReader  # pylint: disable=import-outside-toplevel
    params = ll.DataConfig(global_batch_size=2, is_training=False,
                           autotune_algorithm="MAX_PARALLELISM", ram_budget=3)
    dataset = InputReader(params).read(dataset=tf.data.Dataset.range(4))
    autotune = dataset.options().autotune
    assert autotune.autotune_algorithm == tf.data.experimental.AutotuneAlgorithm.MAX_PARALLELISM
    assert autotune.ram_budget == 3 * 1024 ** 3
    assert [b.tolist() for b in dataset.as_numpy_iterator()] == [[0, 1], [2, 3]]


VISION_TFM_SNAPSHOT = os.path.join(ROOT, "tests", "data", "tfm_2_20_config_defaults.json")
# TFM vision config classes lite does not have: other tasks' and backbones' configs.
TFM_VISION_CLASSES_NOT_IN_LITE = {
    "backbones.EfficientNet", "backbones.MobileDet", "backbones.RevNet", "backbones.SpineNet",
    "backbones.SpineNetMobile", "backbones.Transformer", "backbones.VisionTransformer",
    "common.PseudoLabelDataConfig", "common.RandJpegQuality", "common.SSDRandomCrop",
    "common.SSDRandomCropParam", "common.TFLitePostProcessingConfig",
    "common.TfExampleDecoderLabelMap"}
TFM_VISION_FIELDS_NOT_IN_LITE = {
    "backbones.Backbone": {"efficientnet", "mobiledet", "revnet", "spinenet", "spinenet_mobile",
                           "vit"},
    # Detection's augmentation and decoder (TFM's classification input reads neither).
    "common.Augmentation": {"ssd_random_crop"},
    "common.DataDecoder": {"label_map_decoder"}}
# TFM leaves these RandomErasing attributes unannotated (class constants); lite's are fields.
LITE_VISION_FIELDS_NOT_IN_TFM = {
    "common.RandomErasing": {"max_aspect", "min_count", "max_count", "trials"}}


def test_vision_config_fields_and_defaults_match_the_tfm_2_20_snapshot():
    import json  # pylint: disable=import-outside-toplevel
    with open(VISION_TFM_SNAPSHOT) as f:
        snapshot = json.load(f)

    def tfm_fields(name):
        fields = {}
        for base in snapshot[name]["bases"]:
            if base in snapshot:  # the core class a vision config derives from
                fields.update(tfm_fields(base))
        fields.update(snapshot[name]["fields"])
        return fields

    compared = set()
    for name in sorted(k for k in snapshot if "." in k):
        ours = getattr(configs, name.split(".", 1)[1], None)
        if name in TFM_VISION_CLASSES_NOT_IN_LITE and not isinstance(ours, type):
            continue
        assert ours is not None, f"lite has no {name}"
        tfm = tfm_fields(name)
        missing = set(tfm) - set(ours.field_names()) - TFM_VISION_FIELDS_NOT_IN_LITE.get(
            name, set())
        assert not missing, f"{name} lacks TFM fields {sorted(missing)}"
        extra = (set(ours.field_names()) - set(tfm) - LITE_VISION_FIELDS_NOT_IN_TFM.get(
            name, set()) - {"file_type", "deterministic_ops"})
        assert not extra, f"{name} has fields TFM does not: {sorted(extra)}"
        instance = ours()
        for field, default in tfm.items():
            if field not in ours.field_names() or isinstance(default, dict):
                continue
            value = getattr(instance, field)
            value = list(value) if isinstance(value, tuple) else value
            assert value == default, f"{name}.{field}: {value!r} here, {default!r} in TFM"
        compared.add(name)
    assert {"backbones.ResNet", "backbones.DilatedResNet", "backbones.MobileNet",
            "image_classification.DataConfig", "image_classification.ImageClassificationTask",
            "common.NormActivation"} <= compared
