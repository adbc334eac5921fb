"""The detection rows of `step_vs_tfm.py`: RetinaNet (issue 41 "Speed") ResNet-50 FPN
(`retinanet_resnetfpn_coco`) and MobileNetV2 FPN (`retinanet_mobile_coco` with TFM's
`coco_mobilenetv2_tpu.yaml` model), and Mask R-CNN ResNet-50 FPN (issue 43,
`maskrcnn_resnetfpn_coco`, masks included) at 256x256, built by lite_launcher and by TFM from
the same experiment and overrides (TFM's field names), on synthetic detection TFRecords in
TFM's TF Example format (with one PNG mask per object for Mask R-CNN).

Eval steps are a real evaluation on both sides: the COCO evaluator is on
(`use_coco_metrics: true`, reading one COCO annotation JSON written from the records,
`annotation_file_for`), so each step's detections (and masks) are outputs of the step, handed
to the evaluator's update on the host, and TensorFlow keeps the model, the box decoding and the
NMS that make them. Each timed `evaluate` call also ends with the evaluator's COCO summary
(pycocotools on the host, once per call of `eval_steps` steps). Before 2026-12-06 the
evaluator was off on both sides and TensorFlow pruned what nobody consumed: RetinaNet's rows
timed backbone, heads and losses without decoding or NMS, Mask R-CNN's only the input pipeline
(its loss is 0). `eval_graph.py` checks what a step keeps. A training-only row (`eval_steps`
0) turns the evaluator off: its training steps do not use it.
"""

import os

import row_params

# name -> (experiment, task.model overrides). 91 classes, as COCO and the experiments.
IMAGE_SIZE = 256
BATCH = 2
NUM_CLASSES = 91
NUM_IMAGES = 16
_NORM = {"use_sync_bn": False}
MODELS = {
    "retinanet_resnet50_fpn": ("retinanet_resnetfpn_coco", {"norm_activation": _NORM}),
    "retinanet_mobilenetv2_fpn": ("retinanet_mobile_coco", {
        "anchor": {"anchor_size": 3, "aspect_ratios": [0.5, 1.0, 2.0], "num_scales": 3},
        "backbone": {"type": "mobilenet", "mobilenet": {"model_id": "MobileNetV2",
                                                        "filter_size_scale": 1.0}},
        "decoder": {"type": "fpn", "fpn": {"num_filters": 128, "use_separable_conv": True,
                                           "use_keras_layer": True}},
        "head": {"num_convs": 4, "num_filters": 128, "use_separable_conv": True},
        "min_level": 3, "max_level": 7,
        "norm_activation": dict(_NORM, activation="relu6", norm_epsilon=0.001,
                                norm_momentum=0.99)}),
    # TFM's experiment as it is (levels 2-6, include_mask, 112x112 mask targets).
    "maskrcnn_resnet50_fpn": ("maskrcnn_resnetfpn_coco", {"norm_activation": _NORM}),
}
# The rows whose records carry `image/object/mask`.
WITH_MASKS = ("maskrcnn_resnet50_fpn",)


def input_glob_for(model, data_dir):
    """The records `model`'s row reads (written if missing): with masks or without."""
    return write_synthetic_tfrecords(data_dir, masks=model in WITH_MASKS)


def annotation_file_for(input_glob):
    """The COCO annotation JSON of the records of `input_glob` (written beside them once, by
    lite's `scan_and_generator_annotation_file`, masks included when the records hold them):
    what both sides' COCO evaluators read, as a real evaluation reads instances_val2017.json.
    (TFM 2.20's evaluator cannot build its ground truths from the steps instead: with the
    NumPy of its venv, `convert_groundtruths_to_coco_dataset` fails on the parser's [1]-shaped
    `num_detections`.)"""
    import tensorflow as tf
    from lite_launcher.vision.dataloaders import coco_groundtruth_generator

    masks = os.path.basename(input_glob).startswith("instance")
    path = os.path.join(os.path.dirname(input_glob),
                        ("instance" if masks else "detection") + "-annotations.json")
    if not tf.io.gfile.exists(path):
        coco_groundtruth_generator.scan_and_generator_annotation_file(
            input_glob, "tfrecord", -1, masks, path + ".tmp")
        tf.io.gfile.rename(path + ".tmp", path, overwrite=True)
    return path


def _ellipse_mask_png(box, size):
    """PNG bytes of a 0/1 mask [size, size]: the ellipse inscribed in `box` (normalised
    ymin, xmin, ymax, xmax), as `create_coco_tf_record --include_masks` writes masks."""
    import numpy as np
    import tensorflow as tf

    ymin, xmin, ymax, xmax = (v * size for v in box)
    rows, cols = np.mgrid[:size, :size] + 0.5
    inside = (((rows - (ymin + ymax) / 2) / max((ymax - ymin) / 2, 0.5)) ** 2
              + ((cols - (xmin + xmax) / 2) / max((xmax - xmin) / 2, 0.5)) ** 2) <= 1.0
    return tf.io.encode_png(inside.astype(np.uint8)[..., None]).numpy()


def write_synthetic_tfrecords(data_dir, num_images=NUM_IMAGES, masks=False):
    """Noise JPEGs with one to three random boxes each (labels 1..90), in TFM's detection
    TF Example format (with `masks`, `image/object/mask`: one PNG per object, the ellipse in
    its box); written once per data_dir and kind (seeded). Returns the file glob."""
    import numpy as np
    import tensorflow as tf

    pattern = os.path.join(data_dir, ("instance" if masks else "detection") + "-*.tfrecord")
    if tf.io.gfile.glob(pattern):
        return pattern
    os.makedirs(data_dir, exist_ok=True)
    rng = np.random.default_rng(0)

    def floats(values):
        return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))

    def ints(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))

    def strings(values):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=list(values)))

    with tf.io.TFRecordWriter(pattern.replace("*", "0")) as writer:
        for i in range(num_images):
            pixels = rng.integers(0, 256, (IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)
            count = int(rng.integers(1, 4))
            corner = rng.uniform(0.0, 0.6, (count, 2))
            size = rng.uniform(0.1, 0.4, (count, 2))
            ymin, xmin = corner[:, 0], corner[:, 1]
            ymax, xmax = ymin + size[:, 0], xmin + size[:, 1]
            feature = {
                "image/encoded": strings([tf.io.encode_jpeg(pixels, quality=90).numpy()]),
                "image/format": strings([b"jpeg"]),
                "image/height": ints([IMAGE_SIZE]), "image/width": ints([IMAGE_SIZE]),
                "image/source_id": strings([str(i + 1).encode()]),
                "image/object/bbox/xmin": floats(xmin), "image/object/bbox/xmax": floats(xmax),
                "image/object/bbox/ymin": floats(ymin), "image/object/bbox/ymax": floats(ymax),
                "image/object/class/label": ints(rng.integers(1, NUM_CLASSES, count)),
                "image/object/is_crowd": ints([0] * count),
                "image/object/area": floats(size[:, 0] * size[:, 1] * IMAGE_SIZE ** 2),
            }
            if masks:
                feature["image/object/mask"] = strings(
                    [_ellipse_mask_png(box, IMAGE_SIZE) for box in zip(ymin, xmin, ymax, xmax)])
            writer.write(tf.train.Example(
                features=tf.train.Features(feature=feature)).SerializeToString())
    return pattern


def overrides(model, input_glob, steps, dtype=None, eval_steps=0, annotation_file=None):
    """The experiment's overrides for `model` (TFM's field names: the same dict for both).
    With `eval_steps`, the COCO evaluator reads `annotation_file` (`annotation_file_for`)."""
    _, model_overrides = MODELS[model]
    # XLA off on both, stated: Mask R-CNN's experiment turns it on, and TFM compiles only on
    # GPUs where lite's rule is its own (trainer.xla_train_step).
    runtime = {"distribution_strategy": "off", "enable_xla": False}
    if dtype is not None:
        runtime["mixed_precision_dtype"] = dtype
    # A training-only row builds no COCO evaluator: Mask R-CNN's (lite's and TFM's alike) would
    # scan validation records that row does not give for its annotations, and fail.
    task = {"model": dict(model_overrides, num_classes=NUM_CLASSES,
                          input_size=[IMAGE_SIZE, IMAGE_SIZE, 3]),
            "init_checkpoint": "", "use_coco_metrics": bool(eval_steps),
            "annotation_file": annotation_file,
            "train_data": {"input_path": input_glob, "global_batch_size": BATCH,
                           "shuffle_buffer_size": 16}}
    if eval_steps:
        task["validation_data"] = {"input_path": input_glob, "global_batch_size": BATCH}
    steps = max(steps, 1)  # an eval-only run (step_vs_tfm.py --steps 0) trains no step
    trainer = {"steps_per_loop": steps, "train_steps": 10 ** 6, "summary_interval": steps,
               "validation_steps": eval_steps or 1}
    return {"runtime": runtime, "task": task, "trainer": trainer}


def lite_params_and_task(model, input_glob, steps, model_dir, dtype=None, eval_steps=0,
                         extra_overrides=None):
    """lite_launcher's (params, task), the policy set as lite-train sets it. `extra_overrides`
    (applied after the row's; the tests shrink the model with it) is None for the rows."""
    return row_params.lite_params_and_task(
        MODELS[model][0], overrides(model, input_glob, steps, dtype, eval_steps,
                                    annotation_file_for(input_glob) if eval_steps else None),
        model_dir, extra_overrides)


def tfm_params_and_task(model, input_glob, steps, model_dir, dtype=None, eval_steps=0):
    """TFM's (params, task) (TFM's venv only), the policy set as its train.py sets it."""
    return row_params.tfm_params_and_task(
        MODELS[model][0], overrides(model, input_glob, steps, dtype, eval_steps,
                                    annotation_file_for(input_glob) if eval_steps else None),
        model_dir)
