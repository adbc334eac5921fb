"""The detection serving module (TFM's DetectionModule) on a stand-in task whose detections are
fixed boxes in the resized image: preprocessing (resize, padding to 2**max_level,
image_info), the anchors it hands the model, TFM's output coordinates, normalised
coordinates and the casts of ExportConfig, each input type, and a SavedModel round trip."""

from types import SimpleNamespace as NS

import numpy as np
import pytest
import tensorflow as tf

from lite_launcher.core.base_config import ConfigError
from lite_launcher.vision.serving import detection

# Two detections per image, in pixels of the resized (not padded) image.
BOXES = [[4.0, 8.0, 20.0, 40.0], [0.0, 0.0, 10.0, 10.0]]


class StandInTask:
    """What DetectionModule uses of a RetinaNet task: `task_config` and
    `inference_step_with_anchors` (records the anchors and image shape it was given)."""

    def __init__(self, normalized=False, cast=False, pad=True):
        self.task_config = NS(
            model=NS(input_size=[40, 56, 3], min_level=3, max_level=5,
                     anchor=NS(num_scales=2, aspect_ratios=[1.0], anchor_size=3.0),
                     detection_generator=NS(apply_nms=True)),
            train_data=NS(parser=NS(pad=pad, keep_aspect_ratio=True)),
            export_config=NS(output_normalized_coordinates=normalized,
                             cast_num_detections_to_float=cast,
                             cast_detection_classes_to_float=cast))
        self.seen = {}

    def inference_step_with_anchors(self, images, model, anchor_boxes, image_shape):
        del model
        self.seen.update(images=images, anchors=anchor_boxes, image_shape=image_shape)
        batch = tf.shape(images)[0]
        return {"detection_boxes": tf.tile(tf.constant([BOXES]), [batch, 1, 1]),
                "detection_scores": tf.tile(tf.constant([[0.9, 0.8]]), [batch, 1]),
                "detection_classes": tf.tile(tf.constant([[1, 2]], tf.int32), [batch, 1]),
                "num_detections": tf.fill([batch], 2)}


def _image(height=48, width=80):
    return np.random.RandomState(0).randint(0, 256, (1, height, width, 3)).astype(np.uint8)


def test_image_tensor_outputs_are_tfms_resized_image_pixels_with_image_info():
    task = StandInTask()
    fn, spec = detection.build_serving_fn(task, None, "image_tensor")
    assert spec.shape.as_list() == [None, None, None, 3] and spec.dtype == tf.uint8
    out = fn(tf.constant(_image()))
    assert sorted(out) == ["detection_boxes", "detection_classes", "detection_scores",
                           "image_info", "num_detections"]
    np.testing.assert_allclose(out["detection_boxes"].numpy()[0], BOXES)
    assert out["detection_classes"].dtype == tf.int32
    # 48x80 into 40x56, aspect kept: 0.7 -> 34x56 (rounded), padded to 64x64.
    np.testing.assert_allclose(out["image_info"].numpy()[0],
                               [[48, 80], [40, 56], [34 / 48, 56 / 80], [0, 0]], rtol=1e-6)
    assert task.seen["images"].shape[1:] == (64, 64, 3)
    np.testing.assert_allclose(task.seen["image_shape"].numpy(), [[40, 56]])
    # Anchors of the padded size, batched: levels 3..5 of 64x64, 2 scales x 1 ratio.
    assert {k: v.shape.as_list() for k, v in task.seen["anchors"].items()} == {
        "3": [1, 8, 8, 8], "4": [1, 4, 4, 8], "5": [1, 2, 2, 8]}


def test_normalized_coordinates_and_float_casts():
    fn, _ = detection.build_serving_fn(StandInTask(normalized=True, cast=True), None,
                                       "image_tensor")
    out = fn(tf.constant(_image()))
    scale = np.array([34 / 48, 56 / 80] * 2)
    expected = np.clip(np.array(BOXES) / scale / np.array([48, 80, 48, 80]), 0, 1)
    np.testing.assert_allclose(out["detection_boxes"].numpy()[0], expected, rtol=1e-5)
    assert out["num_detections"].dtype == tf.float32
    assert out["detection_classes"].dtype == tf.float32


def test_bytes_example_and_tflite_inputs():
    task = StandInTask(pad=False)
    image = _image()
    encoded = tf.io.encode_png(image[0]).numpy()
    example = tf.train.Example(features=tf.train.Features(feature={
        "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(
            value=[encoded]))})).SerializeToString()
    by_tensor = detection.build_serving_fn(task, None, "image_tensor")[0](tf.constant(image))
    for input_type, value in (("image_bytes", [encoded]), ("tf_example", [example])):
        out = detection.build_serving_fn(task, None, input_type)[0](tf.constant(value))
        np.testing.assert_allclose(out["image_info"].numpy(), by_tensor["image_info"].numpy())
    assert task.seen["images"].shape[1:] == (40, 56, 3)  # pad: false
    fn, spec = detection.build_serving_fn(task, None, "tflite")
    assert spec.shape.as_list() == [None, 40, 56, 3]
    out = fn(tf.zeros([2, 40, 56, 3]))
    np.testing.assert_allclose(out["image_info"].numpy()[1],
                               [[40, 56], [40, 56], [1, 1], [0, 0]])


def test_unknown_input_type_is_one_line():
    with pytest.raises(ConfigError, match="--input_type 'jpeg' is not served by object "
                                          "detection; valid: image_tensor"):
        detection.build_serving_fn(StandInTask(), None, "jpeg")


def test_saved_model_round_trip(tmp_path):
    fn, spec = detection.build_serving_fn(StandInTask(), None, "image_bytes")
    module = tf.Module()
    module.serve = tf.function(fn, input_signature=[spec])
    tf.saved_model.save(module, str(tmp_path), signatures={"serving_default": module.serve})
    loaded = tf.saved_model.load(str(tmp_path)).signatures["serving_default"]
    out = loaded(inputs=tf.constant([tf.io.encode_png(_image()[0]).numpy()]))
    np.testing.assert_allclose(out["detection_boxes"].numpy()[0], BOXES)
    np.testing.assert_array_equal(out["num_detections"].numpy(), [2])


class TwoStageStandIn(StandInTask):
    """A Mask R-CNN task as DetectionModule sees it: no `export_config` (TFM's two-stage
    configs have none), masks and outer boxes among the detections."""

    def __init__(self):
        super().__init__(normalized=True, cast=True)
        del self.task_config.export_config

    def inference_step_with_anchors(self, images, model, anchor_boxes, image_shape):
        detections = super().inference_step_with_anchors(images, model, anchor_boxes,
                                                         image_shape)
        batch = tf.shape(images)[0]
        detections["detection_outer_boxes"] = detections["detection_boxes"] + 1.0
        detections["detection_masks"] = tf.fill([batch, 2, 28, 28], 0.25)
        return detections


def test_two_stage_outputs_add_masks_and_outer_boxes_unchanged():
    out = detection.build_serving_fn(TwoStageStandIn(), None, "image_tensor")[0](
        tf.constant(_image()))
    assert sorted(out) == ["detection_boxes", "detection_classes", "detection_masks",
                           "detection_outer_boxes", "detection_scores", "image_info",
                           "num_detections"]
    np.testing.assert_allclose(out["detection_masks"].numpy(), np.full([1, 2, 28, 28], 0.25))
    # Without an export_config nothing is normalised or cast (TFM's two-stage serving).
    np.testing.assert_allclose(out["detection_boxes"].numpy()[0], BOXES)
    np.testing.assert_allclose(out["detection_outer_boxes"].numpy()[0], np.array(BOXES) + 1)
    assert out["detection_classes"].dtype == tf.int32
