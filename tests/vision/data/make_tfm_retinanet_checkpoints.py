"""Writes tfm_checkpoints/retinanet/: RetinaNet checkpoints written by TFM 2.20 and TFM's
outputs on them.

Run once with TFM 2.20 (tf-models-official 2.20, tensorflow 2.20, tf_keras):

    /work/tfm_venv/bin/python tests/vision/data/make_tfm_retinanet_checkpoints.py

For each model of MODELS (TFM's RetinaNet experiments shrunk to a 128x128 input, 3 classes,
narrow: the ResNet-50 bottlenecks and MobileNetV2 through TFM's own `depth_multiplier` /
`filter_size_scale`, a narrow FPN and head), TFM's factory (`factory.build_retinanet`) builds
the model; every variable (BatchNorm moving statistics included) is set to random values, and
the model is saved as TFM's Trainer saves it (`global_step`, `model`, `optimizer` and the
model's `checkpoint_items` through a `tf.train.CheckpointManager`, prefix `ckpt`) into
`<name>/`. `<name>/reference.npz` holds:
- `image`: a fixed uint8 image [1, 128, 128, 3];
- what TFM's `DetectionModule` (serving/detection.py, image_tensor) makes of it: the model's
  input `images`, `image_shape`, and its served `served_<key>` (detection boxes, scores,
  classes, num_detections);
- TFM's model on `images` (inference, the anchors the model generates, clipped to
  `image_shape`): `cls_<level>` / `box_<level>` raw head outputs, `backbone_<level>` /
  `decoder_<level>` features, and the post-NMS `detection_boxes`, `detection_scores`,
  `detection_classes`, `num_detections`.
`index.json` lists each model's experiment and `task.model` overrides (both sides build from
them), its parameter count and global step.
"""

import json
import os
import shutil

import numpy as np
import tensorflow as tf
import tf_keras

from official.core import exp_factory
from official.vision import registry_imports  # noqa: F401  (registers the experiments)
from official.vision.modeling import factory
from official.vision.serving import detection
from tfm_generator_utils import randomize, save_trainer_checkpoint, sgd_momentum_optimizer

HERE = os.path.dirname(os.path.abspath(__file__))
TARGET = os.path.join(HERE, "tfm_checkpoints", "retinanet")
SIZE = 128
GLOBAL_STEP = 13

# Shared by both models: 3 classes at 128x128, levels 3-7, few detections (random weights
# score many anchors; a short, well-separated list keeps the comparison free of near ties).
COMMON = {"num_classes": 3, "input_size": [SIZE, SIZE, 3], "min_level": 3, "max_level": 7,
          "detection_generator": {"pre_nms_top_k": 200, "max_num_detections": 10,
                                  "pre_nms_score_threshold": 0.3}}
MODELS = {
    # retinanet_resnetfpn_coco: ResNet-50 (bottleneck blocks) at 1/16 width, FPN, a 2-conv head.
    "retinanet_resnet50_fpn": ("retinanet_resnetfpn_coco", dict(
        COMMON, backbone={"type": "resnet", "resnet": {"model_id": 50,
                                                       "depth_multiplier": 0.0625}},
        decoder={"type": "fpn", "fpn": {"num_filters": 16}},
        head={"num_convs": 2, "num_filters": 16},
        norm_activation={"use_sync_bn": False})),
    # coco_mobilenetv2_tpu.yaml's model: MobileNetV2, separable FPN (Keras layers), separable
    # head, relu6, its anchors; at 1/8 width and a narrow FPN / head.
    "retinanet_mobilenetv2_fpn": ("retinanet_mobile_coco", dict(
        COMMON, anchor={"anchor_size": 3, "aspect_ratios": [0.5, 1.0, 2.0], "num_scales": 3},
        backbone={"type": "mobilenet", "mobilenet": {"model_id": "MobileNetV2",
                                                     "filter_size_scale": 0.125}},
        decoder={"type": "fpn", "fpn": {"num_filters": 16, "use_separable_conv": True,
                                        "use_keras_layer": True}},
        head={"num_convs": 2, "num_filters": 16, "use_separable_conv": True},
        norm_activation={"activation": "relu6", "norm_epsilon": 0.001, "norm_momentum": 0.99,
                         "use_sync_bn": False})),
}


def calibrate(model, rng, count=8):
    """BatchNorm moving statistics set to those of a batch of noise images (one training call
    at momentum 0): random weights otherwise leave the towers dead (relu6 / relu at zero) and
    many anchors with tied scores. `count` noise images; a deep narrow network needs more for
    its coarse levels' statistics to hold on another image."""
    norms = [layer for layer in model._flatten_layers()  # pylint: disable=protected-access
             if isinstance(layer, tf_keras.layers.BatchNormalization)]
    momenta = [layer.momentum for layer in norms]
    for layer in norms:
        layer.momentum = 0.0
    model(rng.uniform(-2.0, 2.0, (count, SIZE, SIZE, 3)).astype(np.float32), training=True)
    for layer, momentum in zip(norms, momenta):
        layer.momentum = momentum
    return len(norms)


def make(name, experiment, overrides, rng, target=TARGET, calibration_images=8):
    """TFM's model `name` built, randomised and saved with its outputs into target/name;
    returns its index entry."""
    tf_keras.backend.clear_session()
    params = exp_factory.get_exp_config(experiment)
    params.task.model.override(overrides, is_strict=True)
    model = factory.build_retinanet(
        input_specs=tf_keras.layers.InputSpec(shape=[None, SIZE, SIZE, 3]),
        model_config=params.task.model)
    # Without a decoder (identity) TFM's factory leaves the head unbuilt until the first call.
    model(tf.zeros([1, SIZE, SIZE, 3]), training=False)
    randomize(model, rng)
    assert calibrate(model, rng, calibration_images) > 10
    image = rng.integers(0, 256, (1, SIZE, SIZE, 3)).astype(np.uint8)
    module = detection.DetectionModule(params, batch_size=1, input_image_size=[SIZE, SIZE],
                                       model=model)
    images, anchor_boxes, image_info = module.preprocess(tf.constant(image))
    image_shape = image_info[:, 1, :]
    outputs = model(images, image_shape=image_shape, anchor_boxes=anchor_boxes,
                    output_intermediate_features=True, training=False)
    served = module.serve(tf.constant(image))
    out = {"image": image, "images": images.numpy(), "image_shape": image_shape.numpy()}
    for level in outputs["cls_outputs"]:
        out[f"cls_{level}"] = outputs["cls_outputs"][level].numpy()
        out[f"box_{level}"] = outputs["box_outputs"][level].numpy()
    for key, value in outputs.items():
        if key.startswith(("backbone_", "decoder_", "detection_", "num_detections")):
            out[key] = value.numpy()
    out.update({f"served_{key}": value.numpy() for key, value in served.items()})
    count = int(out["num_detections"][0])
    assert count > 1, "no detections to compare"
    # Distinct scores: the order after NMS must not hang on a near tie.
    gaps = -np.diff(out["detection_scores"][0][:count])
    assert gaps.min() > 1e-4, gaps
    global_step = tf.Variable(GLOBAL_STEP, dtype=tf.int64, name="global_step")
    directory = os.path.join(target, name)
    shutil.rmtree(directory, ignore_errors=True)
    save_trainer_checkpoint(directory, global_step, model, sgd_momentum_optimizer())
    np.savez(os.path.join(directory, "reference.npz"), **out)
    print(name, model.count_params(), int(out["num_detections"][0]),
          out["detection_classes"][0][: int(out["num_detections"][0])],
          np.round(out["detection_scores"][0][: int(out["num_detections"][0])], 4), flush=True)
    return {"experiment": experiment, "model": overrides,
            "params": int(model.count_params()), "global_step": GLOBAL_STEP}


def main():
    os.makedirs(TARGET, exist_ok=True)
    rng = np.random.default_rng(41)
    index = {"input_size": SIZE, "models": {
        name: make(name, experiment, overrides, rng)
        for name, (experiment, overrides) in MODELS.items()}}
    with open(os.path.join(TARGET, "index.json"), "w") as f:
        json.dump(index, f, indent=1, sort_keys=True)
        f.write("\n")
    print(TARGET)


if __name__ == "__main__":
    main()
