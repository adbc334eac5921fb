"""Vision configs: TFM's fields and defaults, the three experiments, the TFM YAML, rejects."""

import os
import subprocess
import sys

import pytest
import yaml

import lite_launcher as ll
from lite_launcher.base_config import ConfigError, load_config_file
from lite_launcher.vision import configs

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TFM_YAML = os.path.join(HERE, "data", "imagenet_resnet50_gpu.yaml")
EXPERIMENTS = ["image_classification", "resnet_imagenet", "mobilenet_imagenet"]


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
    ({"task": {"validation_data": {"aug_policy": "randaug"}}}, "task.validation_data.aug_policy"),
    ({"task": {"train_data": {"repeated_augment": 3}}}, "task.train_data.repeated_augment"),
    ({"task": {"train_input_partition_dims": [1, 2, 1, 1]}}, "task.train_input_partition_dims"),
    ({"task": {"model_output_keys": [1]}}, "task.model_output_keys"),
    ({"task": {"model": {"backbone": {"type": "mobilenet", "mobilenet": {"output_stride": 16}}}}},
     "task.model.backbone.mobilenet.output_stride"),
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


def test_defaults_of_unimplemented_fields_are_accepted():
    config = ll.get_exp_config("resnet_imagenet")
    config.override({"task": {"train_data": {"three_augment": False, "aug_policy": None,
                                             "weights": None, "repeated_augment": None},
                              "train_input_partition_dims": []}})
    config.validate()


def test_cli_rejects_an_unimplemented_field_in_one_line():
    result = subprocess.run(
        [sys.executable, "-m", "lite_launcher.main", "--experiment", "resnet_imagenet",
         "--dry_run", "--params_override", "task.train_data.three_augment=true"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.returncode == 2, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("lite-train: error:") and "task.train_data.three_augment" in last
