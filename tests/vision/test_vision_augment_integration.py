"""The vision parser and task with the real augment.py (the other vision tests fake it)."""

import os

import numpy as np
import tensorflow as tf

import lite_launcher as ll
from lite_launcher.vision import make_tfrecords


def _tfrecords(tmp_path, classes=("a", "b"), per_class=4):
    image_dir = tmp_path / "images"
    rng = np.random.default_rng(0)
    for name in classes:
        os.makedirs(image_dir / name)
        for i in range(per_class):
            pixels = rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)
            (image_dir / name / f"{i}.jpg").write_bytes(tf.io.encode_jpeg(pixels).numpy())
    make_tfrecords.main(["--image_dir", str(image_dir), "--output_prefix", str(tmp_path / "t")])
    return str(tmp_path / "t-*")


def _config(input_path, **train_data):
    config = ll.get_exp_config("image_classification")
    data = {"input_path": input_path, "global_batch_size": 4, "is_training": True,
            "shuffle_buffer_size": 8}
    config.override({"task": {
        "model": {"num_classes": 2, "input_size": [16, 16, 3],
                  "backbone": {"type": "resnet", "resnet": {"model_id": 10}}},
        "train_data": dict(data, **train_data),
        "validation_data": dict(data, is_training=False)},
        "trainer": {"optimizer_config": {"optimizer": {"type": "sgd"},
                                          "learning_rate": {"type": "constant",
                                                            "constant": {"learning_rate": 0.01}}}}})
    return config


def _one_batch(config, data):
    task = ll.get_task(config.task)
    return task, next(iter(task.build_inputs(data)))


def test_every_augmentation_runs_in_the_input_pipeline_and_trains(tmp_path):
    """RandAugment, colour jitter, random erasing and MixUp/CutMix from augment.py, then a step."""
    path = _tfrecords(tmp_path)
    plain = _config(path)
    # One RandAugment layer: each layer traces every op (test_augment runs the default two).
    augmented = _config(path, aug_type={"type": "randaug",
                                        "randaug": {"magnitude": 9, "num_layers": 1}},
                        color_jitter=0.4, random_erasing={"probability": 1.0},
                        mixup_and_cutmix={"mixup_alpha": 0.8, "cutmix_alpha": 1.0})
    task, (images, labels) = _one_batch(augmented, augmented.task.train_data)
    _, (plain_images, plain_labels) = _one_batch(plain, plain.task.train_data)
    assert images.shape == plain_images.shape == (4, 16, 16, 3)
    assert np.isfinite(images.numpy()).all()
    # MixUp/CutMix turn the integer labels into smoothed, mixed one-hot rows.
    assert plain_labels.shape == (4,) and labels.shape == (4, 2)
    np.testing.assert_allclose(labels.numpy().sum(axis=1), 1.0, rtol=1e-5)
    # The evaluation batches stay unaugmented integer labels.
    _, (_, eval_labels) = _one_batch(augmented, augmented.task.validation_data)
    assert eval_labels.shape == (4,)

    model = task.build_model()
    optimizer = task.create_optimizer(augmented.trainer.optimizer_config, augmented.runtime)
    before = [v.numpy().copy() for v in model.trainable_variables]
    logs = task.train_step((images, labels), model, optimizer, metrics=task.build_metrics())
    assert np.isfinite(float(logs["loss"]))
    assert any(not np.array_equal(b, v.numpy()) for b, v in zip(before, model.trainable_variables))


def test_autoaugment_changes_the_pixels_and_keeps_the_shapes(tmp_path):
    path = _tfrecords(tmp_path, per_class=2)
    config = _config(path, aug_type={"type": "autoaug", "autoaug": {"augmentation_name": "test"}},
                     aug_crop=False, aug_rand_hflip=False, shuffle_buffer_size=1)
    plain = _config(path, aug_crop=False, aug_rand_hflip=False, shuffle_buffer_size=1)
    config.task.train_data.seed = plain.task.train_data.seed = 1
    _, (images, _) = _one_batch(config, config.task.train_data)
    _, (plain_images, _) = _one_batch(plain, plain.task.train_data)
    assert images.shape == plain_images.shape
    # TFM's 'test' policy always equalizes and translates: the pixels must differ.
    assert not np.allclose(images.numpy(), plain_images.numpy())
