"""TFM's object-detection Colab (tensorflow/models docs/vision/object_detection.ipynb) run on
lite: its code cells in order, with only the imports changed as docs/porting_from_tfm.md says,
on local data in the tutorial's format (a COCO JSON and an image folder per split, drawn
shapes instead of BCCD). Shell cells (`%%bash python -m official.vision.data.create_coco_tf_record
...`) run lite's converter with the same flags; matplotlib / IPython (not lite's) are stubs
recording what would be shown. Changed beyond the imports: the sizes and step counts
(HEIGHT / WIDTH, batch_size, train_steps and the intervals, warmup_steps 1, validation_steps
2), the device branches reduced to the CPU one this machine takes, and, offline, the default
`init_checkpoint` (TFM's GCS bucket) cleared.

Every cell also runs on a smaller RetinaNet (`release`, like the tutorial's sizes; ~17 s, its
suite sibling the RetinaNet export test of test_retinanet_train.py), set by one extra cell after
the model config: ResNet-10 at depth_multiplier 0.25 instead of ResNet-50, level 3 alone
instead of 3-7, FPN and head of 16 filters, the head with one convolution instead of four, the ten best
detections whatever their score (after one step all sit near the focal loss's prior, under
TFM's 0.05 threshold); 64x64 input and images, one step of a batch of 2, one validation batch.
The served detections are checked against the trained model's own on the same images. The notebook as written (ResNet-50
RetinaNet: minutes on a CPU) is in the release set: a small version (128x128 input, 64x64
images, batch 2, 2 steps) and the tutorial's own sizes (256x256, batch 8; 10 steps, "only
train for a few steps" on a CPU, as its text says)."""

import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from detection_images import write_coco  # noqa: E402
from fp32_noise import BOX_PIXEL_TOLERANCE, PROBABILITY_TOLERANCE  # noqa: E402
from lite_launcher.vision.ops.preprocess_ops import normalize_image  # noqa: E402

TIE = 1e-7
DETECTION_KEYS = ("detection_boxes", "detection_scores", "detection_classes",
                  "num_detections")

pytest.importorskip("pycocotools")
pytest.importorskip("PIL")


class _Pyplot:
    """matplotlib.pyplot as the tutorial calls it: records the images it is shown."""

    def __init__(self):
        self.shown = []

    def imshow(self, image):
        self.shown.append(np.array(image))

    def __getattr__(self, name):  # figure, subplot, axis, title, show
        return lambda *args, **kwargs: None


class _Display:
    @staticmethod
    def Javascript(text):  # pylint: disable=invalid-name
        return text


def _make_bccd_like_data(root, size, batch_size, validation_steps):
    """../BCC.v1-bccd.coco/{train,valid,test}/ with images and _annotations.coco.json
    (`validation_steps` full validation batches: the evaluation drops a partial one, as
    TFM's)."""
    for split, count, seed in (("train", 8, 0), ("valid", validation_steps * batch_size, 1),
                               ("test", 3, 2)):
        split_dir = os.path.join(root, "BCC.v1-bccd.coco", split)
        image_dir, annotation_file = write_coco(split_dir, count, seed, size)
        # Roboflow's COCO export, which the tutorial reads: images and JSON in one folder.
        for name in os.listdir(image_dir):
            os.rename(os.path.join(image_dir, name), os.path.join(split_dir, name))
        os.rename(annotation_file, os.path.join(split_dir, "_annotations.coco.json"))


def _run_tutorial(tmp_path, monkeypatch, HEIGHT, WIDTH, batch_size, train_steps, size,
                  validation_steps=2, small_model=False):
    """The notebook's cells; with small_model, one extra cell after the model's config."""
    # pylint: disable=invalid-name,unused-variable,import-outside-toplevel,reimported
    _make_bccd_like_data(str(tmp_path), size, batch_size, validation_steps)
    os.makedirs(tmp_path / "models")
    monkeypatch.chdir(tmp_path / "models")  # %cd ./models/
    plt = _Pyplot()
    display = _Display()

    # --- Import required libraries (matplotlib / IPython: the stubs above) ---
    import io
    import pprint
    import tempfile

    import tensorflow as tf
    from PIL import Image
    from six import BytesIO
    from urllib.request import urlopen

    # --- Import required libraries from tensorflow models (ported imports) ---
    import lite_launcher as tfm  # TFM: import tensorflow_models as tfm (orbit: unused)

    from lite_launcher.core import exp_factory
    from lite_launcher.core import config_definitions as cfg
    from lite_launcher.vision.serving import export_saved_model_lib
    from lite_launcher.vision.ops.preprocess_ops import normalize_image
    from lite_launcher.vision.ops.preprocess_ops import resize_and_crop_image
    from lite_launcher.vision.utils.object_detection import visualization_utils
    from lite_launcher.vision.dataloaders.tf_example_decoder import TfExampleDecoder

    pp = pprint.PrettyPrinter(indent=4)  # Set Pretty Print Indentation
    print(tf.__version__)  # Check the version of tensorflow used

    # --- %%bash: python -m official.vision.data.create_coco_tf_record (train, valid, test) ---
    from lite_launcher.vision.data import create_coco_tf_record
    for split in ("train", "valid", "test"):
        assert create_coco_tf_record.main([
            "--logtostderr", f"--image_dir=../BCC.v1-bccd.coco/{split}",
            f"--object_annotations_file=../BCC.v1-bccd.coco/{split}/_annotations.coco.json",
            f"--output_file_prefix=../bccd_coco_tfrecords/{split}", "--num_shards=1"]) == 0

    train_data_input_path = '../bccd_coco_tfrecords/train-00000-of-00001.tfrecord'
    valid_data_input_path = '../bccd_coco_tfrecords/valid-00000-of-00001.tfrecord'
    test_data_input_path = '../bccd_coco_tfrecords/test-00000-of-00001.tfrecord'
    model_dir = '../trained_model/'
    export_dir = '../exported_model/'

    exp_config = exp_factory.get_exp_config('retinanet_resnetfpn_coco')
    exp_config.task.init_checkpoint = ''  # offline: TFM's ResNet-50 checkpoint is on GCS

    num_classes = 3

    IMG_SIZE = [HEIGHT, WIDTH, 3]

    # Backbone config.
    exp_config.task.freeze_backbone = False
    exp_config.task.annotation_file = ''

    # Model config.
    exp_config.task.model.input_size = IMG_SIZE
    exp_config.task.model.num_classes = num_classes + 1
    exp_config.task.model.detection_generator.tflite_post_processing.max_classes_per_detection = exp_config.task.model.num_classes  # noqa: E501

    if small_model:  # not the notebook's: the suite's smaller model (see the module docstring)
        exp_config.task.model.backbone.resnet.model_id = 10
        exp_config.task.model.backbone.resnet.depth_multiplier = 0.25
        exp_config.task.model.min_level = 3
        exp_config.task.model.max_level = 3
        exp_config.task.model.decoder.fpn.num_filters = 16
        exp_config.task.model.head.num_convs = 1
        exp_config.task.model.head.num_filters = 16
        # One step leaves every score near the focal loss's prior (0.01), under TFM's 0.05
        # threshold: no detections. Keep the ten best, whatever their score, so that the
        # served detections can be checked against the model's own.
        exp_config.task.model.detection_generator.pre_nms_score_threshold = 0.0
        exp_config.task.model.detection_generator.max_num_detections = 10

    # Training data config.
    exp_config.task.train_data.input_path = train_data_input_path
    exp_config.task.train_data.dtype = 'float32'
    exp_config.task.train_data.global_batch_size = batch_size
    exp_config.task.train_data.parser.aug_scale_max = 1.0
    exp_config.task.train_data.parser.aug_scale_min = 1.0

    # Validation data config.
    exp_config.task.validation_data.input_path = valid_data_input_path
    exp_config.task.validation_data.dtype = 'float32'
    exp_config.task.validation_data.global_batch_size = batch_size

    logical_device_names = [logical_device.name
                            for logical_device in tf.config.list_logical_devices()]
    assert 'GPU' not in ''.join(logical_device_names)  # the CPU branch
    print('Running on CPU is slow, so only train for a few steps.')
    device = 'CPU'

    exp_config.trainer.steps_per_loop = train_steps
    exp_config.trainer.summary_interval = train_steps
    exp_config.trainer.checkpoint_interval = train_steps
    exp_config.trainer.validation_interval = train_steps
    exp_config.trainer.validation_steps = validation_steps  # the test data's batches
    exp_config.trainer.train_steps = train_steps
    exp_config.trainer.optimizer_config.warmup.linear.warmup_steps = 1
    exp_config.trainer.optimizer_config.learning_rate.type = 'cosine'
    exp_config.trainer.optimizer_config.learning_rate.cosine.decay_steps = train_steps
    exp_config.trainer.optimizer_config.learning_rate.cosine.initial_learning_rate = 0.1
    exp_config.trainer.optimizer_config.warmup.linear.warmup_learning_rate = 0.05

    pp.pprint(exp_config.as_dict())
    display.Javascript('google.colab.output.setIframeHeight("500px");')

    if exp_config.runtime.mixed_precision_dtype == tf.float16:
        tf.keras.mixed_precision.set_global_policy('mixed_float16')
    print('Warning: this will be really slow.')
    distribution_strategy = tf.distribute.OneDeviceStrategy(logical_device_names[0])

    with distribution_strategy.scope():
        task = tfm.core.task_factory.get_task(exp_config.task, logging_dir=model_dir)

    for images, labels in task.build_inputs(exp_config.task.train_data).take(1):
        print(f'images.shape: {str(images.shape):16}  images.dtype: {images.dtype!r}')
        print(f'labels.keys: {labels.keys()}')
    assert images.shape == (batch_size, HEIGHT, WIDTH, 3)

    category_index = {1: {'id': 1, 'name': 'Platelets'}, 2: {'id': 2, 'name': 'RBC'},
                      3: {'id': 3, 'name': 'WBC'}}
    tf_ex_decoder = TfExampleDecoder()

    def show_batch(raw_records, num_of_examples):
        plt.figure(figsize=(20, 20))
        use_normalized_coordinates = True
        min_score_thresh = 0.30
        for i, serialized_example in enumerate(raw_records):
            plt.subplot(1, 3, i + 1)
            decoded_tensors = tf_ex_decoder.decode(serialized_example)
            image = decoded_tensors['image'].numpy().astype('uint8')
            scores = np.ones(shape=(len(decoded_tensors['groundtruth_boxes'])))
            visualization_utils.visualize_boxes_and_labels_on_image_array(
                image,
                decoded_tensors['groundtruth_boxes'].numpy(),
                decoded_tensors['groundtruth_classes'].numpy().astype('int'),
                scores,
                category_index=category_index,
                use_normalized_coordinates=use_normalized_coordinates,
                max_boxes_to_draw=200,
                min_score_thresh=min_score_thresh,
                agnostic_mode=False,
                instance_masks=None,
                line_thickness=4)

            plt.imshow(image)
            plt.axis('off')
            plt.title(f'Image-{i+1}')
        plt.show()

    buffer_size = 20
    num_of_examples = 3

    raw_records = tf.data.TFRecordDataset(
        exp_config.task.train_data.input_path).shuffle(
            buffer_size=buffer_size).take(num_of_examples)
    show_batch(raw_records, num_of_examples)

    model, eval_logs = tfm.core.train_lib.run_experiment(
        distribution_strategy=distribution_strategy,
        task=task,
        mode='train_and_eval',
        params=exp_config,
        model_dir=model_dir,
        run_post_eval=True)

    export_saved_model_lib.export_inference_graph(
        input_type='image_tensor',
        batch_size=1,
        input_image_size=[HEIGHT, WIDTH],
        params=exp_config,
        checkpoint_path=tf.train.latest_checkpoint(model_dir),
        export_dir=export_dir)

    def build_inputs_for_object_detection(image, input_image_size):
        """Builds Object Detection model inputs for serving."""
        image, _ = resize_and_crop_image(
            image,
            input_image_size,
            padded_size=input_image_size,
            aug_scale_min=1.0,
            aug_scale_max=1.0)
        return image

    num_of_examples = 3

    test_ds = tf.data.TFRecordDataset(
        '../bccd_coco_tfrecords/test-00000-of-00001.tfrecord').take(
            num_of_examples)
    show_batch(test_ds, num_of_examples)

    imported = tf.saved_model.load(export_dir)
    model_fn = imported.signatures['serving_default']

    input_image_size = (HEIGHT, WIDTH)
    plt.figure(figsize=(20, 20))
    min_score_thresh = 0.30  # Change minimum score for threshold to see all bounding boxes confidences.  # noqa: E501

    results, served_images = [], []
    for i, serialized_example in enumerate(test_ds):
        plt.subplot(1, 3, i + 1)
        decoded_tensors = tf_ex_decoder.decode(serialized_example)
        image = build_inputs_for_object_detection(decoded_tensors['image'], input_image_size)
        image = tf.expand_dims(image, axis=0)
        image = tf.cast(image, dtype=tf.uint8)
        image_np = image[0].numpy()
        result = model_fn(image)
        results.append(result)
        served_images.append(image)  # not the notebook's: the check compares the model's
        visualization_utils.visualize_boxes_and_labels_on_image_array(
            image_np,
            result['detection_boxes'][0].numpy(),
            result['detection_classes'][0].numpy().astype(int),
            result['detection_scores'][0].numpy(),
            category_index=category_index,
            use_normalized_coordinates=False,
            max_boxes_to_draw=200,
            min_score_thresh=min_score_thresh,
            agnostic_mode=False,
            instance_masks=None,
            line_thickness=4)
        plt.imshow(image_np)
        plt.axis('off')

    plt.show()
    return dict(plt=plt, eval_logs=eval_logs, results=results, model_dir=model_dir,
                export_dir=export_dir, model=model, served_images=served_images)


def _assert_same_detections(served, own, some=True):
    """`served` has `own`'s detections (image 0; with `some`, at least two): the same count
    and sorted
    scores within PROBABILITY_TOLERANCE, and each served row one of the model's (same class,
    score within PROBABILITY_TOLERANCE, box within BOX_PIXEL_TOLERANCE). In any order: after
    one step every score sits near the focal loss's prior (0.0102, neighbours ~1e-6 apart), so
    float rounding (~1e-8 on these scores) may swap two rows, or keep another box tied with
    the last one (within `TIE` of it: those rows need no match)."""
    count = int(own["num_detections"][0])
    assert int(served["num_detections"][0]) == count, (served, own)
    assert count > 1 or not some, own
    if count == 0:  # the notebook's own model may keep nothing after its few steps
        return
    scores = [np.sort(d["detection_scores"][0, :count]) for d in (served, own)]
    np.testing.assert_allclose(*scores, atol=PROBABILITY_TOLERANCE)
    last = scores[1][0]
    for row in range(count):
        score = served["detection_scores"][0, row]
        if score - last < TIE:
            continue  # tied with the last kept: another anchor may take its place
        match = ((own["detection_classes"][0, :count] == served["detection_classes"][0, row])
                 & (np.abs(own["detection_scores"][0, :count] - score)
                    < PROBABILITY_TOLERANCE)
                 & (np.abs(own["detection_boxes"][0, :count]
                           - served["detection_boxes"][0, row]).max(axis=-1)
                    < BOX_PIXEL_TOLERANCE))
        assert match.any(), (row, served, own)


def _check(outcome, height, size, train_steps, max_detections=100, some_detections=False):
    """What the notebook showed, logged, wrote and served; the served detections are the
    model's own (with `some_detections`, at least two per image: the notebook's own model,
    after its few steps, may keep none over TFM's 0.05 threshold)."""
    import tensorflow as tf

    # 3 train and 3 test records shown with their ground-truth boxes drawn, then 3 test images
    # at the model's size with the predictions over 0.30 drawn.
    shown = outcome["plt"].shown
    assert [image.shape for image in shown] == [(size, size, 3)] * 6 + [(height, height, 3)] * 3
    assert all(image.dtype == np.uint8 for image in shown)
    logs = outcome["eval_logs"]
    for name in ("AP", "AP50", "ARmax100", "total_loss"):
        assert np.isfinite(float(logs[name])), name
    assert tf.train.latest_checkpoint(outcome["model_dir"]).endswith(f"ckpt-{train_steps}")
    assert os.path.isfile(os.path.join(outcome["export_dir"], "saved_model.pb"))
    for result, image in zip(outcome["results"], outcome["served_images"]):
        boxes = result["detection_boxes"].numpy()
        assert boxes.shape == (1, max_detections, 4)  # pixels of the served image
        assert boxes.min() >= 0 and boxes.max() <= height
        assert result["num_detections"].shape == (1,)
        # The served detections are the trained model's own on the same image (the
        # image the notebook serves is already at the model's size: no resize; the boxes
        # clipped to it, as served).
        own = outcome["model"](normalize_image(tf.cast(image, tf.float32)),
                               image_shape=tf.constant([[height, height]], tf.float32),
                               training=False)
        own = {key: np.asarray(value) for key, value in own.items() if key in DETECTION_KEYS}
        _assert_same_detections({key: result[key].numpy() for key in DETECTION_KEYS}, own,
                                some=some_detections)


# The suite test of the same task path: a RetinaNet trained by the driver, exported and its
# SavedModel served (the tutorial's run_experiment, export_inference_graph and load).
_SIBLING = ("tests/vision/test_retinanet_train.py::"
            "test_lite_export_serves_detections_loaded_with_tensorflow_alone")


@pytest.mark.release(sibling=_SIBLING)
def test_object_detection_tutorial_whole_on_a_small_retinanet(tmp_path, monkeypatch):
    # Every cell on RetinaNet with ResNet-10 at a quarter of the width, level 3 alone and a
    # 16-filter FPN and head of one convolution: 64x64 input (a multiple of 2**3), one step of
    # a batch of 2, one validation batch.
    outcome = _run_tutorial(tmp_path, monkeypatch, HEIGHT=64, WIDTH=64, batch_size=2,
                            train_steps=1, size=64, validation_steps=1, small_model=True)
    _check(outcome, 64, 64, 1, max_detections=10, some_detections=True)
    model = outcome["model"]
    assert model.backbone.weights[0].shape == (7, 7, 3, 16)  # the stem's 64 at a quarter
    assert {level: out.shape[-1] for level, out in model.decoder.output.items()} == {
        "3": 16}  # the FPN's levels and filters


# The notebook as written (ResNet-50 RetinaNet): training, two evaluations, the export and the
# SavedModel's load took 234 s at the small size on the loaded 2-core machine.
@pytest.mark.release(sibling=_SIBLING)
def test_object_detection_tutorial_small(tmp_path, monkeypatch):
    # 128: the parser pads to a multiple of 2**max_level (7), as TFM's.
    outcome = _run_tutorial(tmp_path, monkeypatch, HEIGHT=128, WIDTH=128, batch_size=2,
                            train_steps=2, size=64)
    _check(outcome, 128, 64, 2)


@pytest.mark.release(sibling=_SIBLING)
def test_object_detection_tutorial_at_its_sizes(tmp_path, monkeypatch):
    outcome = _run_tutorial(tmp_path, monkeypatch, HEIGHT=256, WIDTH=256, batch_size=8,
                            train_steps=10, size=256)
    _check(outcome, 256, 256, 10)
