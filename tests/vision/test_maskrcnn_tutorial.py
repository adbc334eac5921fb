"""TFM's instance-segmentation tutorial (tensorflow/models docs/vision/instance_segmentation
.ipynb: fine-tune `maskrcnn_mobilenet_coco` from a MobileNetV2 backbone checkpoint on a
3-class LVIS subset, train and evaluate with `run_experiment`, export with
`export_inference_graph`, draw the served boxes and masks) on lite, with its imports changed as
docs/porting_from_tfm.md says:

    exp_factory.get_exp_config          -> ll.get_exp_config
    tfm.core.task_factory.get_task      -> ll.get_task
    tfm.core.train_lib.run_experiment   -> ll.run_experiment
    official.vision.<module>            -> lite_launcher.vision.<module> (same module names)

Local data in the tutorial's format instead of LVIS (no network here): drawn squares and discs
with COCO polygons (tests/vision/detection_images.py), turned into records the way the
tutorial's `_process_example` writes them (`coco_annotations_to_lists(..., include_masks=True)`
and `tfrecord_lib.convert_to_feature`); the backbone checkpoint is a TFM-written MobileNetV2
(1/32 width, tests/vision/data/tfm_checkpoints/mobilenetv2) instead of TFM's GCS one, so the
model is that width. The cells run in the notebook's order from its configuration on (the
LVIS download and parsing cells are replaced by the records above; the `gsutil cp`,
`%tensorboard` and pip cells are left out); matplotlib is not used: the drawn arrays are
checked instead of shown.

The smallest run is every cell on a smaller model, set by one extra cell after the model config: a
TFM-written ResNet-18 (v1 stem, 1/32 width, tests/vision/data/tfm_checkpoints/resnet18_v1)
as the restored, frozen backbone instead of MobileNetV2 (fewer layers), level 3 alone instead of
3-6, FPN and RPN head of 16 filters, a box head without convolutions and 32-wide fully
connected layer, a mask head of one 16-filter convolution; 64x64, one step of a batch of 2,
one validation batch. It and the notebook as written are `release` (the suite's sibling:
tests/vision/test_maskrcnn_train.py's export of a trained Mask R-CNN with masks): 64x64, 2 images a batch, 2 steps
(250 s on the loaded 2-core machine, mostly tracing) and the tutorial's 256x256, batch 8,
10 steps (755 s).
"""

import json
import os
import pprint
import sys

import numpy as np
import pytest
import tensorflow as tf

import lite_launcher as ll
from lite_launcher.vision.data import tfrecord_lib
from lite_launcher.vision.data.create_coco_tf_record import coco_annotations_to_lists
from lite_launcher.vision.dataloaders.tf_example_decoder import TfExampleDecoder
from lite_launcher.vision.ops.preprocess_ops import resize_and_crop_image
from lite_launcher.vision.serving import export_saved_model_lib
from lite_launcher.vision.utils.object_detection import visualization_utils

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from detection_images import write_coco  # noqa: E402

pytest.importorskip("pycocotools")

BACKBONE_CHECKPOINT = os.path.join(HERE, "data", "tfm_checkpoints", "mobilenetv2", "ckpt-7")
# The suite's smaller model: a TFM-written ResNet-18 (v1 stem, 1/32 width), fewer layers.
SMALL_BACKBONE_CHECKPOINT = os.path.join(HERE, "data", "tfm_checkpoints", "resnet18_v1",
                                         "ckpt-3")
NUM_CLASSES = 2  # square, disc (the tutorial: 3 LVIS classes)


def write_records(root, split, count, seed, size, category_index):
    """The tutorial's `_generate_tf_records` on drawn images: one tf.train.Example per image
    with the tutorial's keys."""
    image_dir, annotation_file = write_coco(os.path.join(root, split), count, seed, size,
                                            masks=True)
    with open(annotation_file) as f:
        coco = json.load(f)
    id_to_name_map = {c["id"]: c["name"] for c in coco["categories"][:NUM_CLASSES]}
    assert {k: v["name"] for k, v in category_index.items()} == id_to_name_map
    path = os.path.join(root, "tfrecords", f"{split}-00000-of-00001.tfrecord")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path) as writer:
        for image_info in coco["images"]:
            filename = image_info["file_name"]
            image = tf.io.read_file(os.path.join(image_dir, filename))
            instances = [a for a in coco["annotations"] if a["image_id"] == image_info["id"]]
            data, _ = coco_annotations_to_lists(instances, id_to_name_map,
                                                image_info["height"], image_info["width"],
                                                include_masks=True)
            keys_to_features = {
                "image/encoded": tfrecord_lib.convert_to_feature(image.numpy()),
                "image/filename": tfrecord_lib.convert_to_feature(filename.encode("utf8")),
                "image/format": tfrecord_lib.convert_to_feature("png".encode("utf8")),
                "image/height": tfrecord_lib.convert_to_feature(image_info["height"]),
                "image/width": tfrecord_lib.convert_to_feature(image_info["width"]),
                "image/source_id": tfrecord_lib.convert_to_feature(
                    str(image_info["id"]).encode("utf8")),
                "image/object/bbox/xmin": tfrecord_lib.convert_to_feature(data["xmin"]),
                "image/object/bbox/xmax": tfrecord_lib.convert_to_feature(data["xmax"]),
                "image/object/bbox/ymin": tfrecord_lib.convert_to_feature(data["ymin"]),
                "image/object/bbox/ymax": tfrecord_lib.convert_to_feature(data["ymax"]),
                "image/object/class/text": tfrecord_lib.convert_to_feature(
                    data["category_names"]),
                "image/object/class/label": tfrecord_lib.convert_to_feature(
                    data["category_id"]),
                "image/object/is_crowd": tfrecord_lib.convert_to_feature(data["is_crowd"]),
                "image/object/area": tfrecord_lib.convert_to_feature(data["area"],
                                                                     "float_list"),
                "image/object/mask": tfrecord_lib.convert_to_feature(
                    data["encoded_mask_png"]),
            }
            example = tf.train.Example(features=tf.train.Features(feature=keys_to_features))
            writer.write(example.SerializeToString())
    return path


def reframe_box_masks_to_image_masks(box_masks, boxes, image_height, image_width):
    """The tutorial's helper, in short: each box's mask pasted into a full image (boxes in
    [0, 1] of the image)."""
    height = tf.maximum(boxes[:, 2] - boxes[:, 0], 1e-4)
    width = tf.maximum(boxes[:, 3] - boxes[:, 1], 1e-4)
    corners = tf.stack([-boxes[:, 0] / height, -boxes[:, 1] / width,
                        (1 - boxes[:, 0]) / height, (1 - boxes[:, 1]) / width], axis=1)
    crops = tf.image.crop_and_resize(box_masks[..., None], corners,
                                     tf.range(tf.shape(box_masks)[0]),
                                     [image_height, image_width], extrapolation_value=0)
    return crops[..., 0]


def _run_tutorial(root, size, batch_size, train_steps, small_model=False):
    """The notebook's cells from its configuration on (records written above); with
    small_model, one extra cell after the model's config. Returns what the cells produce."""
    # pylint: disable=invalid-name
    shown = []  # plt.imshow's images (matplotlib is not used)
    # The tutorial's category map: {id + 1: {'id': ..., 'name': ...}} of the first classes.
    category_index = {1: {"id": 1, "name": "square"}, 2: {"id": 2, "name": "disc"}}
    write_records(root, "train", 4 * batch_size, 0, size, category_index)
    write_records(root, "val", max(3, batch_size), 1, size, category_index)

    train_data_input_path = os.path.join(root, "tfrecords", "train*")
    valid_data_input_path = os.path.join(root, "tfrecords", "val*")
    model_dir = os.path.join(root, "trained_model")
    export_dir = os.path.join(root, "exported_model")
    if not os.path.exists(model_dir):
        os.mkdir(model_dir)

    exp_config = ll.get_exp_config("maskrcnn_mobilenet_coco")

    BATCH_SIZE = batch_size
    HEIGHT, WIDTH = size, size
    IMG_SHAPE = [HEIGHT, WIDTH, 3]

    # Backbone Config
    exp_config.task.annotation_file = None
    exp_config.task.freeze_backbone = True
    exp_config.task.init_checkpoint = BACKBONE_CHECKPOINT
    exp_config.task.init_checkpoint_modules = "backbone"
    # (Not in the tutorial: the width of the local checkpoint; small images have fewer
    # proposals than the 512 ROIs TFM samples.)
    exp_config.task.model.backbone.mobilenet.filter_size_scale = 0.03125
    if size < 256:
        exp_config.task.model.roi_sampler.num_sampled_rois = 64
        exp_config.task.model.mask_sampler.num_sampled_masks = 16

    # Model Config
    exp_config.task.model.num_classes = NUM_CLASSES + 1
    exp_config.task.model.input_size = IMG_SHAPE

    if small_model:  # not the notebook's: the suite's smaller model (see the module docstring)
        exp_config.task.init_checkpoint = SMALL_BACKBONE_CHECKPOINT
        exp_config.task.model.backbone.type = "resnet"
        exp_config.task.model.backbone.resnet.model_id = 18
        exp_config.task.model.backbone.resnet.depth_multiplier = 0.03125
        exp_config.task.model.backbone.resnet.stem_type = "v1"
        exp_config.task.model.max_level = 3
        exp_config.task.model.decoder.fpn.num_filters = 16
        exp_config.task.model.rpn_head.num_filters = 16
        exp_config.task.model.detection_head.num_convs = 0
        exp_config.task.model.detection_head.fc_dims = 32
        exp_config.task.model.mask_head.num_convs = 1
        exp_config.task.model.mask_head.num_filters = 16

    # Training Data Config
    exp_config.task.train_data.input_path = train_data_input_path
    exp_config.task.train_data.dtype = "float32"
    exp_config.task.train_data.global_batch_size = BATCH_SIZE
    exp_config.task.train_data.shuffle_buffer_size = 64
    exp_config.task.train_data.parser.aug_scale_max = 1.0
    exp_config.task.train_data.parser.aug_scale_min = 1.0

    # Validation Data Config
    exp_config.task.validation_data.input_path = valid_data_input_path
    exp_config.task.validation_data.dtype = "float32"
    exp_config.task.validation_data.global_batch_size = BATCH_SIZE

    # Trainer (the CPU branch; the tutorial's 2000 steps and intervals of 200 scaled down)
    logical_device_names = [d.name for d in tf.config.list_logical_devices()]
    assert "GPU" not in "".join(logical_device_names)
    exp_config.trainer.steps_per_loop = train_steps
    exp_config.trainer.summary_interval = train_steps
    exp_config.trainer.checkpoint_interval = train_steps
    exp_config.trainer.validation_interval = train_steps
    exp_config.trainer.validation_steps = 1
    exp_config.trainer.train_steps = train_steps
    exp_config.trainer.optimizer_config.warmup.linear.warmup_steps = 1
    exp_config.trainer.optimizer_config.learning_rate.type = "cosine"
    exp_config.trainer.optimizer_config.learning_rate.cosine.decay_steps = train_steps
    exp_config.trainer.optimizer_config.learning_rate.cosine.initial_learning_rate = 0.07
    exp_config.trainer.optimizer_config.warmup.linear.warmup_learning_rate = 0.05

    pprint.PrettyPrinter(indent=4).pformat(exp_config.as_dict())

    if exp_config.runtime.mixed_precision_dtype == tf.float16:
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
    distribution_strategy = tf.distribute.OneDeviceStrategy(logical_device_names[0])

    with distribution_strategy.scope():
        task = ll.get_task(exp_config.task, logging_dir=model_dir)

    for images, labels in task.build_inputs(exp_config.task.train_data).take(1):
        print(f"images.shape: {str(images.shape):16}  images.dtype: {images.dtype!r}")
        print(f"labels.keys: {labels.keys()}")
    first_batch = (images, labels)

    tf_ex_decoder = TfExampleDecoder(include_mask=True)

    def show_batch(raw_records):
        use_normalized_coordinates = True
        min_score_thresh = 0.30
        for i, serialized_example in enumerate(raw_records):
            decoded_tensors = tf_ex_decoder.decode(serialized_example)
            image = decoded_tensors["image"].numpy().astype("uint8")
            scores = np.ones(shape=(len(decoded_tensors["groundtruth_boxes"])))
            visualization_utils.visualize_boxes_and_labels_on_image_array(
                image,
                decoded_tensors["groundtruth_boxes"].numpy(),
                decoded_tensors["groundtruth_classes"].numpy().astype("int"),
                scores,
                category_index=category_index,
                use_normalized_coordinates=use_normalized_coordinates,
                min_score_thresh=min_score_thresh,
                instance_masks=decoded_tensors["groundtruth_instance_masks"].numpy().astype(
                    "uint8"),
                line_thickness=4)
            shown.append(("groundtruth", decoded_tensors["image"].numpy(), image))

    buffer_size = 100
    num_of_examples = 3

    train_tfrecords = tf.io.gfile.glob(exp_config.task.train_data.input_path)
    raw_records = tf.data.TFRecordDataset(train_tfrecords).shuffle(
        buffer_size=buffer_size).take(num_of_examples)
    show_batch(raw_records)

    model, eval_logs = ll.run_experiment(
        distribution_strategy=distribution_strategy, task=task, mode="train_and_eval",
        params=exp_config, model_dir=model_dir, run_post_eval=True)

    export_saved_model_lib.export_inference_graph(
        input_type="image_tensor", batch_size=1, input_image_size=[HEIGHT, WIDTH],
        params=exp_config, checkpoint_path=tf.train.latest_checkpoint(model_dir),
        export_dir=export_dir)

    def build_inputs_for_object_detection(image, input_image_size):
        """Builds Object Detection model inputs for serving."""
        image, _ = resize_and_crop_image(image, input_image_size, padded_size=input_image_size,
                                         aug_scale_min=1.0, aug_scale_max=1.0)
        return image

    num_of_examples = 3
    test_tfrecords = tf.io.gfile.glob(valid_data_input_path)
    test_ds = tf.data.TFRecordDataset(test_tfrecords).take(num_of_examples)
    show_batch(test_ds)

    imported = tf.saved_model.load(export_dir)
    model_fn = imported.signatures["serving_default"]

    input_image_size = (HEIGHT, WIDTH)
    min_score_thresh = 0.40
    results = []
    for i, serialized_example in enumerate(test_ds):
        decoded_tensors = tf_ex_decoder.decode(serialized_example)
        image = build_inputs_for_object_detection(decoded_tensors["image"], input_image_size)
        image = tf.expand_dims(image, axis=0)
        image = tf.cast(image, dtype=tf.uint8)
        image_np = image[0].numpy()
        result = model_fn(image)
        if "detection_masks" in result:
            detection_masks = tf.convert_to_tensor(result["detection_masks"][0])
            detection_boxes = tf.convert_to_tensor(result["detection_boxes"][0])
            # The tutorial divides by 256.0, its image size.
            detection_masks_reframed = reframe_box_masks_to_image_masks(
                detection_masks, detection_boxes / float(HEIGHT),
                image_np.shape[0], image_np.shape[1])
            detection_masks_reframed = tf.cast(detection_masks_reframed > min_score_thresh,
                                               np.uint8)
            result["detection_masks_reframed"] = detection_masks_reframed.numpy()
        before = image_np.copy()
        visualization_utils.visualize_boxes_and_labels_on_image_array(
            image_np,
            result["detection_boxes"][0].numpy(),
            (result["detection_classes"][0] + 0).numpy().astype(int),
            result["detection_scores"][0].numpy(),
            category_index=category_index,
            use_normalized_coordinates=False,
            max_boxes_to_draw=200,
            min_score_thresh=min_score_thresh,
            instance_masks=result.get("detection_masks_reframed", None),
            line_thickness=4)
        shown.append(("predicted", before, image_np))
        results.append(result)
    return dict(model=model, eval_logs=eval_logs, model_dir=model_dir, export_dir=export_dir,
                init_checkpoint=exp_config.task.init_checkpoint,
                first_batch=first_batch, shown=shown, results=results)


def _check(outcome, size, batch_size, train_steps):
    images, labels = outcome["first_batch"]
    assert images.shape == (batch_size, size, size, 3) and images.dtype == tf.float32
    assert {"anchor_boxes", "image_info", "rpn_score_targets", "rpn_box_targets",
            "gt_boxes", "gt_classes", "gt_masks", "gt_outer_boxes"} <= set(labels)
    # 3 training and 3 validation records drawn with their boxes and masks, then 3 served
    # images at the model's size with the detections over 0.40 drawn.
    shown = outcome["shown"]
    assert [kind for kind, _, _ in shown] == ["groundtruth"] * 6 + ["predicted"] * 3
    for kind, before, drawn in shown:
        assert drawn.dtype == np.uint8 and drawn.shape == before.shape
        if kind == "groundtruth":
            assert drawn.shape == (size, size, 3)
            assert (drawn != before.astype(np.uint8)).any()  # boxes and masks drawn in place
    model = outcome["model"]
    # The backbone is TFM's checkpoint, frozen: its stem kernel is the checkpoint's.
    assert model.backbone.trainable is False
    reader = tf.train.load_checkpoint(outcome["init_checkpoint"])
    [stem_name] = [name for name in reader.get_variable_to_shape_map()
                   if name.startswith("backbone/layer_with_weights-0/")
                   and name.endswith("/kernel/.ATTRIBUTES/VARIABLE_VALUE")]
    stem = reader.get_tensor(stem_name)
    kernel = model.backbone.weights[0]
    assert "kernel" in kernel.path and tuple(kernel.shape) == stem.shape
    np.testing.assert_array_equal(kernel.numpy(), stem)
    for name in ("AP", "AP50", "mask_AP", "mask_AP50"):
        assert 0.0 <= float(outcome["eval_logs"][name]) <= 1.0, name
    assert os.path.isfile(os.path.join(outcome["model_dir"], "annotation.json"))
    assert tf.train.latest_checkpoint(outcome["model_dir"]).endswith(f"ckpt-{train_steps}")
    assert os.path.isfile(os.path.join(outcome["export_dir"], "saved_model.pb"))
    for result in outcome["results"]:
        boxes = result["detection_boxes"].numpy()
        assert boxes.shape == (1, 100, 4) and boxes.min() >= 0 and boxes.max() <= size
        assert result["detection_masks"].shape[:2] == (1, 100)
        assert result["detection_masks_reframed"].shape == (100, size, size)


# The notebook's cells trace a Mask R-CNN's train, eval and serving graphs: ~25 CPU-seconds
# even on the small model, so all three sizes are `release`; the suite's sibling trains and
# evaluates a Mask R-CNN with masks through the same task (tests/vision/test_maskrcnn_checkpoint.py
# serves one's masks through the same export library).
_SIBLING = ("tests/vision/test_maskrcnn_train.py::"
            "test_lite_train_maskrcnn_logs_tfms_losses_box_and_mask_ap_and_writes_a_checkpoint")


@pytest.mark.release(sibling=_SIBLING)
def test_instance_segmentation_tutorial_whole_on_a_small_model(tmp_path):
    # Every cell on a Mask R-CNN with narrow heads (see the module docstring), 64x64, one step
    # of a batch of 2, one validation batch.
    outcome = _run_tutorial(str(tmp_path), 64, 2, 1, small_model=True)
    _check(outcome, 64, 2, 1)
    model = outcome["model"]
    assert {level: out.shape[-1] for level, out in model.decoder.output.items()} == {
        "3": 16}  # the FPN's levels and filters


@pytest.mark.release(sibling=_SIBLING)
@pytest.mark.parametrize("size, batch_size, train_steps", [(64, 2, 2), (256, 8, 10)])
def test_tfm_instance_segmentation_tutorial(tmp_path, size, batch_size, train_steps):
    _check(_run_tutorial(str(tmp_path), size, batch_size, train_steps), size, batch_size,
           train_steps)
