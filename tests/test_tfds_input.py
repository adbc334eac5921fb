"""TFDS as an input source (`DataConfig.tfds_name`, TFM's `_read_tfds`), on TFDS's own mock
data (`tfds.testing.mock_data`, no network): the reader's elements, `tfds_as_supervised`,
`tfds_skip_decoding_feature`, image classification reading a TFDS split exactly as the same
images in TFRecords, and the one-line refusals (the extra missing, an unknown name, a task
without a TFDS decoder).

tensorflow-datasets is in `[test]` (and is the optional extra `lite_launcher[tfds]` for users):
these tests run on CI. An install without it skips the tests that read TFDS, each saying so;
the missing-extra test runs everywhere."""

import logging as std_logging
import sys

import numpy as np
import pytest
import tensorflow as tf

import lite_launcher as ll
from lite_launcher.common.errors import ConfigError, MissingExtraError
from lite_launcher.core.config_definitions import DataConfig
from lite_launcher.core.input_reader import InputReader

try:
    import tensorflow_datasets as tfds
except ImportError:
    tfds = None

needs_tfds = pytest.mark.skipif(tfds is None, reason="tensorflow-datasets is not installed (it is "
                                "in [test]: pip install -e '.[test]' runs these tests)")
NUM_EXAMPLES = 5


def _mock_elements(**load):
    """The mock split as TFDS itself returns it (the mock data are the same on every read)."""
    return list(tfds.load("cifar10", split="train", **load).as_numpy_iterator())


def test_without_the_extra_tfds_name_is_one_line_naming_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)  # import fails
    with pytest.raises(MissingExtraError) as error:
        InputReader(DataConfig(tfds_name="cifar10", tfds_split="train", global_batch_size=2))
    message = str(error.value)
    assert "pip install 'lite_launcher[tfds]'" in message and len(message.splitlines()) == 1


@needs_tfds
def test_reads_the_split_batched_once_for_evaluation():
    with tfds.testing.mock_data(num_examples=NUM_EXAMPLES):
        expected = _mock_elements()
        params = DataConfig(tfds_name="cifar10", tfds_split="train", global_batch_size=2,
                            is_training=False, drop_remainder=False)
        batches = list(InputReader(params).read().as_numpy_iterator())
    assert [len(b["label"]) for b in batches] == [2, 2, 1]
    np.testing.assert_array_equal(np.concatenate([b["image"] for b in batches]),
                                  np.stack([e["image"] for e in expected]))
    np.testing.assert_array_equal(np.concatenate([b["label"] for b in batches]),
                                  [e["label"] for e in expected])


@needs_tfds
def test_training_repeats_and_as_supervised_gives_pairs():
    with tfds.testing.mock_data(num_examples=NUM_EXAMPLES):
        params = DataConfig(tfds_name="cifar10", tfds_split="train", global_batch_size=4,
                            is_training=True, tfds_as_supervised=True, seed=1)
        images, labels = next(iter(InputReader(params).read().skip(2)))  # past one epoch
    assert images.shape == (4, 32, 32, 3) and images.dtype == tf.uint8
    assert labels.shape == (4,)


@needs_tfds
def test_skip_decoding_feature_leaves_the_image_encoded():
    with tfds.testing.mock_data(num_examples=NUM_EXAMPLES):
        params = DataConfig(tfds_name="cifar10", tfds_split="train", global_batch_size=1,
                            is_training=False, tfds_skip_decoding_feature="image")
        element = next(iter(InputReader(params).read()))
    assert element["image"].dtype == tf.string
    assert tf.io.decode_image(element["image"][0]).shape == (32, 32, 3)


def _classification_config(**data):
    config = ll.get_exp_config("resnet_imagenet")
    config.override({"task": {
        "model": {"num_classes": 10, "input_size": [32, 32, 3]},
        "validation_data": {"global_batch_size": NUM_EXAMPLES, "drop_remainder": False,
                            **data}}})
    return config


@needs_tfds
def test_image_classification_reads_tfds_as_the_same_images_in_tfrecords(tmp_path):
    # TFM's TFDS classification decoder: the image as a quality-100 JPEG, the label as is;
    # written here into TFRecords by hand, the file path must give the same batch.
    with tfds.testing.mock_data(num_examples=NUM_EXAMPLES):
        expected = _mock_elements()
        config = _classification_config(tfds_name="cifar10", tfds_split="train")
        task = ll.get_task(config.task)
        images, labels = next(iter(task.build_inputs(config.task.validation_data)))
    path = str(tmp_path / "cifar.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for e in expected:
            jpeg = tf.io.encode_jpeg(e["image"], quality=100).numpy()
            writer.write(tf.train.Example(features=tf.train.Features(feature={
                "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[jpeg])),
                "image/class/label": tf.train.Feature(
                    int64_list=tf.train.Int64List(value=[int(e["label"])]))})).SerializeToString())
    files = _classification_config(input_path=path)
    file_images, file_labels = next(iter(ll.get_task(files.task).build_inputs(
        files.task.validation_data)))
    assert images.shape == (NUM_EXAMPLES, 32, 32, 3)
    np.testing.assert_array_equal(labels.numpy(), [e["label"] for e in expected])
    np.testing.assert_array_equal(labels.numpy(), file_labels.numpy())
    np.testing.assert_array_equal(images.numpy(), file_images.numpy())


@needs_tfds
def test_an_unknown_tfds_name_is_one_line():
    with pytest.raises(ConfigError) as error:
        InputReader(DataConfig(tfds_name="no_such_dataset", tfds_split="train",
                               global_batch_size=2))
    assert str(error.value) == ("tfds_name 'no_such_dataset' is not a TensorFlow Datasets "
                                "dataset; tfds.list_builders() names them.")


@needs_tfds
def test_segmentation_refuses_tfds_in_one_line():
    config = ll.get_exp_config("mnv2_deeplabv3_pascal")
    config.task.train_data.tfds_name = "cityscapes"
    with pytest.raises(ConfigError, match="lite reads TFDS for image classification only"):
        ll.get_task(config.task).build_inputs(config.task.train_data)


@needs_tfds
def test_lite_train_exits_2_with_one_line_for_an_unknown_tfds_name(tmp_path, monkeypatch,
                                                                  capsys):
    from lite_launcher.commands import train as main_lib  # pylint: disable=import-outside-toplevel

    monkeypatch.setattr(sys, "argv", [
        "lite-train", "--experiment", "resnet_imagenet", "--mode", "train",
        "--model_dir", str(tmp_path / "model"), "--params_override",
        "runtime.distribution_strategy=off,task.model.num_classes=10,"
        "task.model.input_size=[32,32,3],task.model.backbone.resnet.model_id=10,"
        "task.train_data.tfds_name=no_such_dataset,task.train_data.tfds_split=train,"
        "trainer.train_steps=1"])
    with pytest.raises(SystemExit) as exit_request:
        main_lib.run()
    std_logging.disable(std_logging.NOTSET)  # the driver silences logging for its exit
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exit_request.value.code == 2, lines[-20:]
    assert lines[-1] == ("lite-train: error: tfds_name 'no_such_dataset' is not a TensorFlow "
                         "Datasets dataset; tfds.list_builders() names them.")
