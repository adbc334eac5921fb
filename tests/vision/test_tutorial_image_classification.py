"""TFM's image-classification Colab (tensorflow/models docs/vision/image_classification.ipynb:
fine-tune a ResNet-18 `resnet_imagenet` on TFDS cifar10, train and evaluate with
`run_experiment`, export with `export_inference_graph`, load the SavedModel and predict) run on
lite: its code cells in order, with only the imports changed as docs/porting_from_tfm.md says,
on cifar10 served by `tfds.testing.mock_data` (tests/vision/tfds_mock.py: random 32x32 images
with CIFAR-10's class names and split metadata; no network). matplotlib / IPython (not lite's)
are stubs recording what would be shown. Changed beyond the imports: the batch size and step
counts (12 images and 2 steps in the small versions; the tutorial's batch of 128 and its CPU
branch's 20 steps at its sizes), the device branches reduced to the CPU one this machine takes,
`model_dir` under the test's directory (the working directory, so `./export/` is there too).

Every cell also runs on a smaller model (`release`, like the notebook as written; ~17 s, its
suite sibling test_export.py's run of the tutorial's export cell), set by one extra cell after
the "Configure model" cell: ResNet-10 at depth_multiplier 0.25 instead of ResNet-18, and
`runtime.enable_xla = False` (resnet_imagenet sets it, as TFM's; under the tutorial's OneDeviceStrategy lite then compiles
the forward and backward pass with XLA:CPU, ~10 s of CPU for this one step); 12 examples a
split, one batch of 12, one step. The notebook as written (ResNet-18, XLA) is in the release
set at the small size and at the tutorial's.
"""

import os
import sys

import numpy as np
import pytest

tfds = pytest.importorskip(
    "tensorflow_datasets", reason="tensorflow-datasets (in lite_launcher[test] and [tfds]) is "
    "not installed: the tutorial reads cifar10 through TFDS")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from notebook_stubs import Display, Pyplot  # noqa: E402
from tfds_mock import mock_tfds  # noqa: E402


def _run_tutorial(tmp_path, monkeypatch, batch_size, train_steps, small_model=False):
    """The notebook's cells; with small_model, one extra cell after the model's config."""
    # pylint: disable=invalid-name,unused-variable,import-outside-toplevel,redefined-builtin
    monkeypatch.chdir(tmp_path)
    plt = Pyplot()
    display = Display()

    # --- Import TensorFlow, TensorFlow Datasets (matplotlib / IPython: the stubs above) ---
    import pprint
    import tempfile

    import tensorflow as tf

    # --- Import tensorflow_models (ported imports) ---
    import lite_launcher as tfm  # TFM: import tensorflow_models as tfm

    from lite_launcher.vision.serving import export_saved_model_lib
    import lite_launcher.core.train_lib  # noqa: F401  TFM: import official.core.train_lib

    # --- Configure the ResNet-18 model for the Cifar-10 dataset ---
    exp_config = tfm.core.exp_factory.get_exp_config('resnet_imagenet')
    tfds_name = 'cifar10'
    ds, ds_info = tfds.load(
        tfds_name,
        with_info=True)
    ds_info

    # Configure model
    exp_config.task.model.num_classes = 10
    exp_config.task.model.input_size = list(ds_info.features["image"].shape)
    exp_config.task.model.backbone.resnet.model_id = 18

    if small_model:  # not the notebook's: the suite's smaller model (see the module docstring)
        exp_config.task.model.backbone.resnet.model_id = 10
        exp_config.task.model.backbone.resnet.depth_multiplier = 0.25
        exp_config.runtime.enable_xla = False

    # Configure training and testing data
    exp_config.task.train_data.input_path = ''
    exp_config.task.train_data.tfds_name = tfds_name
    exp_config.task.train_data.tfds_split = 'train'
    exp_config.task.train_data.global_batch_size = batch_size

    exp_config.task.validation_data.input_path = ''
    exp_config.task.validation_data.tfds_name = tfds_name
    exp_config.task.validation_data.tfds_split = 'test'
    exp_config.task.validation_data.global_batch_size = batch_size

    # --- Adjust the trainer configuration (the CPU branch) ---
    logical_device_names = [logical_device.name
                            for logical_device in tf.config.list_logical_devices()]
    assert 'GPU' not in ''.join(logical_device_names)
    print('Running on CPU is slow, so only train for a few steps.')
    device = 'CPU'

    if device == 'CPU':
        train_steps = train_steps  # the tutorial: 20
        exp_config.trainer.steps_per_loop = min(5, train_steps)  # the tutorial: 5

    exp_config.trainer.summary_interval = 100
    exp_config.trainer.checkpoint_interval = train_steps
    exp_config.trainer.validation_interval = 1000
    exp_config.trainer.validation_steps = ds_info.splits['test'].num_examples // batch_size
    exp_config.trainer.train_steps = train_steps
    exp_config.trainer.optimizer_config.learning_rate.type = 'cosine'
    exp_config.trainer.optimizer_config.learning_rate.cosine.decay_steps = train_steps
    exp_config.trainer.optimizer_config.learning_rate.cosine.initial_learning_rate = 0.1
    exp_config.trainer.optimizer_config.warmup.linear.warmup_steps = 100

    # --- Print the modified configuration ---
    pprint.pprint(exp_config.as_dict())
    display.Javascript("google.colab.output.setIframeHeight('300px');")

    # --- Set up the distribution strategy (the CPU branch) ---
    logical_device_names = [logical_device.name
                            for logical_device in tf.config.list_logical_devices()]
    if exp_config.runtime.mixed_precision_dtype == tf.float16:
        tf.keras.mixed_precision.set_global_policy('mixed_float16')
    print('Warning: this will be really slow.')
    distribution_strategy = tf.distribute.OneDeviceStrategy(logical_device_names[0])

    # --- Create the Task object ---
    with distribution_strategy.scope():
        model_dir = tempfile.mkdtemp(dir=tmp_path)
        task = tfm.core.task_factory.get_task(exp_config.task, logging_dir=model_dir)

    for images, labels in task.build_inputs(exp_config.task.train_data).take(1):
        print()
        print(f'images.shape: {str(images.shape):16}  images.dtype: {images.dtype!r}')
        print(f'labels.shape: {str(labels.shape):16}  labels.dtype: {labels.dtype!r}')
    first_train_batch = (images, labels)

    # --- Visualize the training data ---
    plt.hist(images.numpy().flatten())

    label_info = ds_info.features['label']
    label_info.int2str(1)

    def show_batch(images, labels, predictions=None):
        plt.figure(figsize=(10, 10))
        min = images.numpy().min()
        max = images.numpy().max()
        delta = max - min

        for i in range(12):
            plt.subplot(6, 6, i + 1)
            plt.imshow((images[i] - min) / delta)
            if predictions is None:
                plt.title(label_info.int2str(labels[i]))
            else:
                if labels[i] == predictions[i]:
                    color = 'g'
                else:
                    color = 'r'
                plt.title(label_info.int2str(predictions[i]), color=color)
            plt.axis("off")

    plt.figure(figsize=(10, 10))
    for images, labels in task.build_inputs(exp_config.task.train_data).take(1):
        show_batch(images, labels)

    # --- Visualize the testing data ---
    plt.figure(figsize=(10, 10))
    for images, labels in task.build_inputs(exp_config.task.validation_data).take(1):
        show_batch(images, labels)

    # --- Train and evaluate ---
    model, eval_logs = tfm.core.train_lib.run_experiment(
        distribution_strategy=distribution_strategy,
        task=task,
        mode='train_and_eval',
        params=exp_config,
        model_dir=model_dir,
        run_post_eval=True)

    for key, value in eval_logs.items():
        if isinstance(value, tf.Tensor):
            value = value.numpy()
        print(f'{key:20}: {value:.3f}')

    for images, labels in task.build_inputs(exp_config.task.train_data).take(1):
        predictions = model.predict(images)
        predictions = tf.argmax(predictions, axis=-1)

    show_batch(images, labels, tf.cast(predictions, tf.int32))
    train_predictions = predictions

    if device == 'CPU':
        plt.suptitle('The model was only trained for a few steps, it is not expected to do well.')

    # --- Export a SavedModel ---
    export_saved_model_lib.export_inference_graph(
        input_type='image_tensor',
        batch_size=1,
        input_image_size=[32, 32],
        params=exp_config,
        checkpoint_path=tf.train.latest_checkpoint(model_dir),
        export_dir='./export/')

    # Importing SavedModel
    imported = tf.saved_model.load('./export/')
    model_fn = imported.signatures['serving_default']

    # --- Visualize the predictions ---
    plt.figure(figsize=(10, 10))
    for data in tfds.load('cifar10', split='test').batch(12).take(1):
        predictions = []
        for image in data['image']:
            index = tf.argmax(model_fn(image[tf.newaxis, ...])['logits'], axis=1)[0]
            predictions.append(index)
        show_batch(data['image'], data['label'], predictions)

        if device == 'CPU':
            plt.suptitle('The model was only trained for a few steps, it is not expected to do '
                         'better than random.')
    return dict(plt=plt, eval_logs=eval_logs, model=model, model_dir=model_dir,
                first_train_batch=first_train_batch,
                served=(data, predictions), model_fn=model_fn, label_info=label_info,
                exp_config=exp_config)


def _check_inputs(outcome, batch_size, num_shown):
    """The cells before training: the batches read from TFDS and drawn with their class names."""
    plt = outcome["plt"]
    assert len(plt.shown) == num_shown and len(plt.titles) == num_shown
    for image in plt.shown[:24]:  # the two batches of the parser's output, rescaled to [0, 1]
        assert image.shape == (32, 32, 3) and image.min() >= 0 and image.max() <= 1
    images, labels = outcome["first_train_batch"]
    assert images.shape == (batch_size, 32, 32, 3) and labels.shape == (batch_size,)
    assert plt.hists[0].size == batch_size * 32 * 32 * 3
    assert all(title in CIFAR10_NAMES for title in plt.titles)


def _check(outcome, batch_size, train_steps):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    # Two batches of 12 drawn before training; after it, a training batch with predictions,
    # then 12 test images as TFDS gives them with the served predictions.
    _check_inputs(outcome, batch_size, 48)
    logs = outcome["eval_logs"]
    for name in ("accuracy", "top_5_accuracy", "validation_loss"):
        assert np.isfinite(float(logs[name])), name
    assert tf.train.latest_checkpoint(outcome["model_dir"]).endswith(f"ckpt-{train_steps}")
    assert os.path.isfile(os.path.join("export", "saved_model.pb"))
    # The SavedModel serves the trained model behind the evaluation's preprocessing (centre
    # crop of 0.875 of the side: 28 pixels at offset 2, bilinear resize back to 32, ImageNet
    # mean and stddev), here written out with plain TensorFlow ops; the tutorial's
    # predictions are the served logits' argmax.
    data, served = outcome["served"]
    images = tf.cast(data["image"], tf.float32)[:, 2:30, 2:30, :]
    images = (tf.image.resize(images, [32, 32]) - np.array([0.485, 0.456, 0.406]) * 255) / (
        np.array([0.229, 0.224, 0.225]) * 255)
    keras_logits = outcome["model"](images, training=False).numpy()
    model_fn = outcome["model_fn"]
    logits = [model_fn(image[tf.newaxis])["logits"][0].numpy() for image in data["image"]]
    np.testing.assert_allclose(logits, keras_logits, rtol=1e-4, atol=1e-5)
    assert np.ptp(keras_logits, axis=0).max() > 1e-3  # the images give different logits
    np.testing.assert_array_equal([int(p) for p in served], np.argmax(keras_logits, axis=-1))


CIFAR10_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
                 "truck"]


def _cifar10(num_examples, seed):
    rng = np.random.default_rng(seed)
    return [{"id": f"{seed}_{i}", "image": rng.integers(0, 256, (32, 32, 3), np.uint8),
             "label": np.int64(rng.integers(10))} for i in range(num_examples)]


def _mock_cifar10(tmp_path, num_examples):
    return mock_tfds(str(tmp_path / "tfds"), "cifar10",
                     {"train": num_examples, "test": num_examples},
                     {"train": _cifar10(num_examples, 0), "test": _cifar10(num_examples, 1)},
                     {"label": CIFAR10_NAMES})


# The suite test of the same task path: the tutorial's export cell on a trained ResNet, its
# SavedModel loaded and served (TFDS reading: tests/test_tfds_input.py).
_SIBLING = ("tests/test_export.py::"
            "test_tfm_export_inference_graph_writes_the_saved_model_into_export_dir")


@pytest.mark.release(sibling=_SIBLING)
def test_image_classification_tutorial_whole_on_a_small_resnet(tmp_path, monkeypatch):
    # Every cell, on ResNet-10 at a quarter of the width, one step of one batch of 12 (show_batch
    # draws 12): 12 examples a split, so validation_steps = 12 // 12 = 1.
    with _mock_cifar10(tmp_path, 12):
        outcome = _run_tutorial(tmp_path, monkeypatch, batch_size=12, train_steps=1,
                                small_model=True)
        _check(outcome, 12, 1)
    config = outcome["exp_config"]
    trainer, data = config.trainer, config.task.validation_data
    assert trainer.validation_steps == 1 and trainer.steps_per_loop == 1
    assert (data.tfds_name, data.tfds_split, data.input_path) == ("cifar10", "test", "")
    assert config.task.model.input_size == [32, 32, 3]  # from TFDS's feature metadata
    # The extra cell took: ResNet-10's stem and four blocks of two convolutions and a
    # projection shortcut each, the stem's 64 filters at a quarter.
    kernels = [w for w in outcome["model"].weights if "kernel" in w.path and w.ndim == 4]
    assert len(kernels) == 1 + 4 * 3 and kernels[0].shape[-1] == 16


# The notebook as written (ResNet-18): training, two evaluations, Keras predict, the export and
# the SavedModel's load take ~60 s of CPU (~2 min on the loaded 2-core machine).
@pytest.mark.release(sibling=_SIBLING)
def test_image_classification_tutorial_small(tmp_path, monkeypatch):
    # 24 examples a split: two batches of 12 (show_batch draws 12).
    with _mock_cifar10(tmp_path, 24):
        outcome = _run_tutorial(tmp_path, monkeypatch, batch_size=12, train_steps=2)
        _check(outcome, 12, 2)


@pytest.mark.release(sibling=_SIBLING)
def test_image_classification_tutorial_at_its_sizes(tmp_path, monkeypatch):
    # The tutorial's batch of 128 and its CPU branch's 20 steps (steps_per_loop 5); 256
    # examples a split: validation_steps = 256 // 128 = 2.
    with _mock_cifar10(tmp_path, 256):
        outcome = _run_tutorial(tmp_path, monkeypatch, batch_size=128, train_steps=20)
        _check(outcome, 128, 20)
