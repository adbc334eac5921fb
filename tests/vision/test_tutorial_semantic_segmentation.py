"""TFM's semantic-segmentation Colab (tensorflow/models docs/vision/semantic_segmentation.ipynb:
TFDS oxford_iiit_pet written to TFRecords with `tfrecord_lib`, `mnv2_deeplabv3_pascal` with
`freeze_backbone`, trained and evaluated with `run_experiment`, exported with
`export_inference_graph`, the SavedModel loaded and its masks drawn) run on lite: its code cells
in order, with only the imports changed as docs/porting_from_tfm.md says, on TFDS mock data
(tests/vision/tfds_mock.py: pet-like images with trimap masks of values 1-3, as the dataset's).
matplotlib / IPython (not lite's) are stubs recording what would be shown; the shell cells
(`gsutil cp` of TFM's COCO-trained checkpoint, `%tensorboard`) are left out and, offline, the
`init_checkpoint` the tutorial points at that download is cleared.

Changed beyond the imports: the sizes (WIDTH / HEIGHT, BATCH_SIZE, the number of examples,
`train_steps`: the tutorial's 2000 on a CPU is hours), the device branches reduced to the CPU
one this machine takes, and the dataset version: the tutorial asks for 'oxford_iiit_pet:3.*.*',
which TensorFlow Datasets 4.9 no longer builds ("cannot be loaded at version 3.*.*, only:
4.0.0") with TFM as with lite, so the load names 'oxford_iiit_pet' (4.0.0 has the features
the tutorial reads, image and segmentation_mask).

The smallest run is every cell on a smaller model, set by one extra cell after the "Model Config"
lines: a ResNet-10 backbone at depth_multiplier 0.25 instead of MobileNetV2 (the backbone's
level 4 feeds the same ASPP; still frozen) and ASPP's 256 filters down to 16; 32x32, 2 training
and 2 validation examples, one step of a batch of 2, one test image. It and the notebook as
written (MobileNetV2 DeepLab v3, at the small size and at the tutorial's) are in the release
set; the suite's sibling is tests/vision/test_segmentation_train.py's DeepLab export.
"""

import os
import sys

import numpy as np
import pytest

tfds = pytest.importorskip(
    "tensorflow_datasets", reason="tensorflow-datasets (in lite_launcher[test] and [tfds]) is "
    "not installed: the tutorial reads oxford_iiit_pet through TFDS")
pytest.importorskip("PIL", reason="keras.utils.array_to_img, which the tutorial draws with, "
                    "needs Pillow")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from notebook_stubs import Display, Pyplot  # noqa: E402
from tfds_mock import mock_tfds  # noqa: E402

TRAIN_SPLIT, VAL_SPLIT, TEST_SPLIT = 'train+test[:50%]', 'test[50%:80%]', 'test[80%:100%]'


def _pet(rng, size_range):
    """An oxford_iiit_pet example: a pet-coloured ellipse (trimap 1) with its border (3) on a
    background (2), the image coloured by region with noise."""
    height, width = rng.integers(*size_range, size=2)
    rows, cols = np.mgrid[:height, :width]
    centre, radii = rng.uniform(0.35, 0.65, 2) * [height, width], [height / 3, width / 3]
    distance = ((rows - centre[0]) / radii[0]) ** 2 + ((cols - centre[1]) / radii[1]) ** 2
    mask = np.where(distance < 0.8, 1, np.where(distance < 1.2, 3, 2)).astype(np.uint8)
    colours = np.array([[0, 0, 0], [200, 120, 40], [40, 90, 160], [230, 230, 230]])
    image = np.clip(colours[mask] + rng.normal(0, 20, (height, width, 3)), 0, 255)
    return {"image": image.astype(np.uint8), "segmentation_mask": mask[..., None],
            "label": np.int64(rng.integers(37)), "species": np.int64(rng.integers(2)),
            "file_name": f"pet_{rng.integers(10**6)}.jpg"}


def _mock_pets(tmp_path, counts, size_range):
    rng = np.random.default_rng(0)
    examples = {split: [_pet(rng, size_range) for _ in range(count)]
                for split, count in zip((TRAIN_SPLIT, VAL_SPLIT, TEST_SPLIT), counts)}
    # The split metadata is the real dataset's (3,680 / 3,669 examples); the splits read give
    # `counts` examples, as TFDS's mock data (its docs: num_examples won't match).
    return mock_tfds(str(tmp_path / "tfds"), "oxford_iiit_pet", {"train": 3680, "test": 3669},
                     examples)


def _run_tutorial(tmp_path, monkeypatch, WIDTH, HEIGHT, BATCH_SIZE, train_steps,
                  small_model=False):
    """The notebook's cells; with small_model, one extra cell after the model's config."""
    # pylint: disable=invalid-name,unused-variable,import-outside-toplevel,expression-not-assigned
    monkeypatch.chdir(tmp_path)
    plt = Pyplot()
    display = Display()

    # --- Import required libraries (matplotlib / IPython: the stubs above) ---
    import os
    import pprint

    import tensorflow as tf

    import lite_launcher as tfm  # TFM: import tensorflow_models as tfm (orbit: unused)
    from lite_launcher.vision.data import tfrecord_lib
    from lite_launcher.vision.utils import summary_manager
    from lite_launcher.vision.serving import export_saved_model_lib
    from lite_launcher.vision.utils.object_detection import visualization_utils

    pp = pprint.PrettyPrinter(indent=4)  # Set Pretty Print Indentation
    print(tf.__version__)  # Check the version of tensorflow used

    # --- Custom dataset preparation for semantic segmentation ---
    (train_ds, val_ds, test_ds), info = tfds.load(
        'oxford_iiit_pet',  # the tutorial: 'oxford_iiit_pet:3.*.*' (see the module docstring)
        split=['train+test[:50%]', 'test[50%:80%]', 'test[80%:100%]'],
        with_info=True)
    info

    def process_record(record):
        keys_to_features = {
            'image/encoded': tfrecord_lib.convert_to_feature(
                tf.io.encode_jpeg(record['image']).numpy()),
            'image/height': tfrecord_lib.convert_to_feature(record['image'].shape[0]),
            'image/width': tfrecord_lib.convert_to_feature(record['image'].shape[1]),
            'image/segmentation/class/encoded': tfrecord_lib.convert_to_feature(
                tf.io.encode_png(record['segmentation_mask'] - 1).numpy())
        }
        example = tf.train.Example(
            features=tf.train.Features(feature=keys_to_features))
        return example

    output_dir = './oxford_iiit_pet_tfrecords/'
    LOG_EVERY = 100
    if not os.path.exists(output_dir):
        os.mkdir(output_dir)

    def write_tfrecords(dataset, output_path, num_shards=1):
        writers = [
            tf.io.TFRecordWriter(
                output_path + '-%05d-of-%05d.tfrecord' % (i, num_shards))
            for i in range(num_shards)
        ]
        for idx, record in enumerate(dataset):
            if idx % LOG_EVERY == 0:
                print('On image %d', idx)
            tf_example = process_record(record)
            writers[idx % num_shards].write(tf_example.SerializeToString())

    output_train_tfrecs = output_dir + 'train'
    write_tfrecords(train_ds, output_train_tfrecs, num_shards=10)

    output_val_tfrecs = output_dir + 'val'
    write_tfrecords(val_ds, output_val_tfrecs, num_shards=5)

    output_test_tfrecs = output_dir + 'test'
    write_tfrecords(test_ds, output_test_tfrecs, num_shards=5)

    # --- Configure the DeepLabV3 Mobilenet model for custom dataset ---
    train_data_tfrecords = './oxford_iiit_pet_tfrecords/train*'
    val_data_tfrecords = './oxford_iiit_pet_tfrecords/val*'
    test_data_tfrecords = './oxford_iiit_pet_tfrecords/test*'
    trained_model = './trained_model/'
    export_dir = './exported_model/'

    exp_config = tfm.core.exp_factory.get_exp_config('mnv2_deeplabv3_pascal')

    model_ckpt_path = './model_ckpt/'
    if not os.path.exists(model_ckpt_path):
        os.mkdir(model_ckpt_path)
    # !gsutil cp gs://tf_model_garden/.../best_ckpt-63.* './model_ckpt/': offline, not run.

    num_classes = 3
    input_size = [HEIGHT, WIDTH, 3]

    # Backbone Config
    exp_config.task.init_checkpoint = model_ckpt_path + 'best_ckpt-63'
    exp_config.task.init_checkpoint = ''  # offline: the gsutil download above did not run
    exp_config.task.freeze_backbone = True

    # Model Config
    exp_config.task.model.num_classes = num_classes
    exp_config.task.model.input_size = input_size

    if small_model:  # not the notebook's: the suite's smaller model (see the module docstring)
        exp_config.task.model.backbone.type = 'resnet'
        exp_config.task.model.backbone.resnet.model_id = 10
        exp_config.task.model.backbone.resnet.depth_multiplier = 0.25
        exp_config.task.model.decoder.aspp.num_filters = 16

    # Training Data Config
    exp_config.task.train_data.aug_scale_min = 1.0
    exp_config.task.train_data.aug_scale_max = 1.0
    exp_config.task.train_data.input_path = train_data_tfrecords
    exp_config.task.train_data.global_batch_size = BATCH_SIZE
    exp_config.task.train_data.dtype = 'float32'
    exp_config.task.train_data.output_size = [HEIGHT, WIDTH]
    exp_config.task.train_data.preserve_aspect_ratio = False
    exp_config.task.train_data.seed = 21  # Reproducible Training Data

    # Validation Data Config
    exp_config.task.validation_data.input_path = val_data_tfrecords
    exp_config.task.validation_data.global_batch_size = BATCH_SIZE
    exp_config.task.validation_data.dtype = 'float32'
    exp_config.task.validation_data.output_size = [HEIGHT, WIDTH]
    exp_config.task.validation_data.preserve_aspect_ratio = False
    exp_config.task.validation_data.groundtruth_padded_size = [HEIGHT, WIDTH]
    exp_config.task.validation_data.seed = 21  # Reproducible Validation Data
    exp_config.task.validation_data.resize_eval_groundtruth = True  # To enable validation loss

    # --- Adjust the trainer configuration (the CPU branch) ---
    logical_device_names = [logical_device.name
                            for logical_device in tf.config.list_logical_devices()]
    assert 'GPU' not in ''.join(logical_device_names)
    print('Running on CPU is slow, so only train for a few steps.')
    device = 'CPU'

    exp_config.trainer.steps_per_loop = int(train_ds.__len__().numpy() // BATCH_SIZE)

    exp_config.trainer.summary_interval = exp_config.trainer.steps_per_loop
    exp_config.trainer.checkpoint_interval = exp_config.trainer.steps_per_loop
    exp_config.trainer.validation_interval = exp_config.trainer.steps_per_loop
    exp_config.trainer.validation_steps = int(train_ds.__len__().numpy() // BATCH_SIZE)
    exp_config.trainer.train_steps = train_steps
    exp_config.trainer.optimizer_config.warmup.linear.warmup_steps = exp_config.trainer.steps_per_loop  # noqa: E501
    exp_config.trainer.optimizer_config.learning_rate.type = 'cosine'
    exp_config.trainer.optimizer_config.learning_rate.cosine.decay_steps = train_steps
    exp_config.trainer.optimizer_config.learning_rate.cosine.initial_learning_rate = 0.1
    exp_config.trainer.optimizer_config.warmup.linear.warmup_learning_rate = 0.05

    pp.pprint(exp_config.as_dict())
    display.Javascript('google.colab.output.setIframeHeight("500px");')

    # --- Set up the distribution strategy (the CPU branch) ---
    if exp_config.runtime.mixed_precision_dtype == tf.float16:
        tf.keras.mixed_precision.set_global_policy('mixed_float16')
    print('Warning: this will be really slow.')
    distribution_strategy = tf.distribute.OneDeviceStrategy(logical_device_names[0])
    print("Done")

    # --- Create the Task object ---
    model_dir = './trained_model/'

    with distribution_strategy.scope():
        task = tfm.core.task_factory.get_task(exp_config.task, logging_dir=model_dir)

    for images, masks in task.build_inputs(exp_config.task.train_data).take(1):
        print()
        print(f'images.shape: {str(images.shape):16}  images.dtype: {images.dtype!r}')
        print(f'masks.shape: {str(masks["masks"].shape):16} images.dtype: {masks["masks"].dtype!r}')  # noqa: E501
    first_batch = (images, masks)

    def plot_masks(display_list):
        plt.figure(figsize=(15, 15))

        title = ['Input Image', 'True Mask', 'Predicted Mask']

        for i in range(len(display_list)):
            plt.subplot(1, len(display_list), i + 1)
            plt.title(title[i])
            plt.imshow(tf.keras.utils.array_to_img(display_list[i]))

            plt.axis('off')
        plt.show()

    num_examples = 3

    for images, masks in task.build_inputs(exp_config.task.train_data).take(num_examples):
        plot_masks([images[0], masks['masks'][0]])

    # --- Train and evaluate ---
    model, eval_logs = tfm.core.train_lib.run_experiment(
        distribution_strategy=distribution_strategy,
        task=task,
        mode='train_and_eval',
        params=exp_config,
        model_dir=model_dir,
        eval_summary_manager=summary_manager.maybe_build_eval_summary_manager(
            params=exp_config, model_dir=model_dir),
        run_post_eval=True)

    # --- Saving and exporting the trained model ---
    export_saved_model_lib.export_inference_graph(
        input_type='image_tensor',
        batch_size=1,
        input_image_size=[HEIGHT, WIDTH],
        params=exp_config,
        checkpoint_path=tf.train.latest_checkpoint(model_dir),
        export_dir=export_dir)

    imported = tf.saved_model.load(export_dir)
    model_fn = imported.signatures['serving_default']

    # --- Visualize predictions ---
    def create_mask(pred_mask):
        pred_mask = tf.math.argmax(pred_mask, axis=-1)
        pred_mask = pred_mask[..., tf.newaxis]
        return pred_mask[0]

    predictions = []
    for record in test_ds.take(15):
        image = tf.image.resize(record['image'], size=[HEIGHT, WIDTH])
        image = tf.cast(image, dtype=tf.uint8)
        mask = tf.image.resize(record['segmentation_mask'], size=[HEIGHT, WIDTH])
        predicted_mask = model_fn(tf.expand_dims(record['image'], axis=0))
        plot_masks([image, mask, create_mask(predicted_mask['logits'])])
        predictions.append((record, predicted_mask))
    return dict(plt=plt, eval_logs=eval_logs, model=model, model_dir=model_dir,
                export_dir=export_dir, first_batch=first_batch, predictions=predictions,
                model_fn=model_fn, exp_config=exp_config)


def _check_inputs(outcome, size, batch_size, num_test):
    """The cells before training: the records written, a batch read from them, pairs drawn."""
    # The records the tutorial wrote: 10 / 5 / 5 shards.
    records = sorted(os.listdir("oxford_iiit_pet_tfrecords"))
    assert [name.split("-")[0] for name in records] == ["test"] * 5 + ["train"] * 10 + ["val"] * 5
    images, masks = outcome["first_batch"]
    assert images.shape == (batch_size, size, size, 3)
    labels = masks["masks"].numpy()
    assert labels.shape == (batch_size, size, size, 1)
    assert set(np.unique(labels)) == {0.0, 1.0, 2.0}  # the trimap less 1
    plt = outcome["plt"]
    # 3 training pairs, then num_test triples of image, true mask, predicted mask.
    assert plt.titles == (["Input Image", "True Mask"] * 3
                          + ["Input Image", "True Mask", "Predicted Mask"] * num_test)
    assert all(image.shape[:2] == (size, size) for image in plt.shown)


def _check(outcome, size, batch_size, train_steps, num_test):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    _check_inputs(outcome, size, batch_size, num_test)
    logs = outcome["eval_logs"]
    assert 0 <= float(logs["mean_iou"]) <= 1 and np.isfinite(float(logs["validation_loss"]))
    assert tf.train.latest_checkpoint(outcome["model_dir"]).endswith(f"ckpt-{train_steps}")
    assert os.path.isfile(os.path.join(outcome["export_dir"], "saved_model.pb"))
    # freeze_backbone: the backbone is not trained (its BatchNorm runs in inference mode).
    model = outcome["model"]
    assert not model.backbone.trainable and model.backbone.trainable_weights == []
    assert model.decoder.trainable_weights
    # The served logits are the Keras model's on the image resized to the model's size (no
    # aspect kept, as the tutorial's data config) and normalised.
    record, served = outcome["predictions"][0]
    assert served["logits"].shape == (1, size, size, 3)
    image = tf.image.resize(tf.cast(record["image"], tf.float32)[tf.newaxis], [size, size])
    image = (image - np.array([0.485, 0.456, 0.406]) * 255) / (np.array([0.229, 0.224, 0.225])
                                                               * 255)
    keras_logits = model(image, training=False)["logits"]
    keras_logits = tf.image.resize(keras_logits, [size, size])
    np.testing.assert_allclose(served["logits"], keras_logits, rtol=1e-4, atol=1e-4)


# Even the small model's cells (train, two evaluations, export, the SavedModel's load in a
# fresh process) take ~15 CPU-seconds: all three sizes are `release`; the suite's sibling
# trains, exports and serves a DeepLab through the same task and export library.
_SIBLING = ("tests/vision/test_segmentation_train.py::test_in_process_export_of_a_2_class_"
            "deeplab_serves_predicted_mask_in_a_fresh_process")


@pytest.mark.release(sibling=_SIBLING)
def test_semantic_segmentation_tutorial_whole_on_a_small_model(tmp_path, monkeypatch):
    # Every cell on a ResNet-10 DeepLab at a quarter of the width, 32x32, one step of a batch
    # of 2: 2 training and 2 validation examples (steps_per_loop = validation_steps = 1), one
    # test image drawn.
    with _mock_pets(tmp_path, (2, 2, 1), (24, 48)):
        outcome = _run_tutorial(tmp_path, monkeypatch, WIDTH=32, HEIGHT=32, BATCH_SIZE=2,
                                train_steps=1, small_model=True)
        _check(outcome, 32, 2, 1, 1)
    config = outcome["exp_config"]
    assert config.trainer.steps_per_loop == config.trainer.validation_steps == 1
    assert config.task.freeze_backbone is True
    # The extra cell took: the ResNet-10 stem's 64 filters at a quarter, ASPP's 16.
    model = outcome["model"]
    assert model.backbone.weights[0].shape == (7, 7, 3, 16)
    assert config.task.model.decoder.aspp.num_filters == 16


# The notebook as written (MobileNetV2 DeepLab v3): training, two evaluations, the export and
# the SavedModel's load take ~40 s of CPU (~95 s on the loaded 2-core machine).
@pytest.mark.release(sibling=_SIBLING)
def test_semantic_segmentation_tutorial_small(tmp_path, monkeypatch):
    # 4 training and 4 validation examples (2 steps of 2 each), 2 test images of 24-48 pixels.
    with _mock_pets(tmp_path, (4, 4, 2), (24, 48)):
        outcome = _run_tutorial(tmp_path, monkeypatch, WIDTH=64, HEIGHT=64, BATCH_SIZE=2,
                                train_steps=2)
        _check(outcome, 64, 2, 2, 2)


@pytest.mark.release(sibling=_SIBLING)
def test_semantic_segmentation_tutorial_at_its_sizes(tmp_path, monkeypatch):
    # The tutorial's 128x128 and batch of 16, its 15 test images drawn; 32 training and
    # validation examples of 100-250 pixels (steps_per_loop = validation_steps = 2), and 4
    # steps instead of 2000.
    with _mock_pets(tmp_path, (32, 32, 15), (100, 250)):
        outcome = _run_tutorial(tmp_path, monkeypatch, WIDTH=128, HEIGHT=128, BATCH_SIZE=16,
                                train_steps=4)
        _check(outcome, 128, 16, 4, 15)
