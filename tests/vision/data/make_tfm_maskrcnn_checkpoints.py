"""Writes tfm_checkpoints/maskrcnn/: small Mask R-CNN / Cascade R-CNN checkpoints written by
TFM 2.20 and TFM's inference outputs on them.

Run once with TFM 2.20 (tf-models-official 2.20, tensorflow 2.20, tf_keras):

    /work/tfm_venv/bin/python tests/vision/data/make_tfm_maskrcnn_checkpoints.py

For each model of MODELS (TFM's maskrcnn_resnetfpn_coco shrunk: ResNet-50 at 1/16 width
through TFM's own `depth_multiplier`, a narrow FPN and heads, 3 classes at 128x128; the
cascade one with two more class-agnostic stages), TFM's factory (`factory.build_maskrcnn`)
builds the model; every variable is set to random values (`randomize` of
make_tfm_retinanet_checkpoints.py; the box predictors scaled down), the BatchNorm moving
statistics to those of one training batch of noise (momentum 0), and the model is saved as TFM's Trainer saves it (`global_step`,
`model` and the `checkpoint_items`, prefix `ckpt`) into `<name>/`. `<name>/reference.npz`:
`images` (one fixed normalised image [1, 128, 128, 3]), `image_shape`, and TFM's inference
outputs on them with generated anchors: `rpn_scores_<level>`, `rpn_boxes_<level>`,
`cls_outputs`, `box_outputs`, `detection_boxes`, `detection_scores`, `detection_classes`,
`num_detections`, `detection_masks`. `index.json` lists each model's `task.model` overrides
of its experiment (both sides build from them) and its parameter count.
"""

import json
import os
import shutil
import sys

import numpy as np
import tensorflow as tf
import tf_keras

from official.core import exp_factory
from official.vision import registry_imports  # noqa: F401  (registers the experiments)
from official.vision.modeling import factory

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_tfm_retinanet_checkpoints import randomize  # noqa: E402  (TFM-only helper)

TARGET = os.path.join(HERE, "tfm_checkpoints", "maskrcnn")
SIZE = 128
GLOBAL_STEP = 5
SMALL = {
    "num_classes": 3, "input_size": [SIZE, SIZE, 3],
    "backbone": {"type": "resnet", "resnet": {"model_id": 50, "depth_multiplier": 0.0625}},
    "decoder": {"type": "fpn", "fpn": {"num_filters": 16}},
    "rpn_head": {"num_filters": 16},
    "detection_head": {"num_convs": 1, "num_filters": 8, "fc_dims": 32},
    "mask_head": {"num_convs": 1, "num_filters": 8},
    "roi_generator": {"test_num_proposals": 50, "test_pre_nms_top_k": 200},
    "detection_generator": {"max_num_detections": 8, "pre_nms_score_threshold": 0.3},
    "norm_activation": {"use_sync_bn": False, "norm_momentum": 0.99, "norm_epsilon": 0.001},
}
# name -> (seed of its random weights and image, `task.model` overrides).
MODELS = {
    "maskrcnn_resnet50_fpn": (43, SMALL),
    "cascadercnn_resnet50_fpn": (44, dict(
        SMALL, roi_sampler={"cascade_iou_thresholds": [0.6, 0.7]},
        detection_head=dict(SMALL["detection_head"], class_agnostic_bbox_pred=True,
                            cascade_class_ensemble=True),
        norm_activation=dict(SMALL["norm_activation"], activation="swish"))),
}


def tame_box_predictors(model):
    """The RPN and box heads' offsets scaled down 20x: random offsets throw most boxes off the
    image, where they clip to empty boxes that NMS cannot tell apart."""
    for v in model.variables:
        if "rpn-boxes" in v.name or "detection-boxes" in v.name:
            v.assign(v * 0.05)


def calibrate(model, rng):
    """BatchNorm moving statistics of one training batch of noise images with two boxes each
    (momentum 0), so that random weights leave no layer dead."""
    norms = [layer for layer in model._flatten_layers()  # pylint: disable=protected-access
             if isinstance(layer, tf_keras.layers.BatchNormalization)]
    momenta = [layer.momentum for layer in norms]
    for layer in norms:
        layer.momentum = 0.0
    batch = 4
    boxes = np.tile(np.array([[[10, 12, 70, 90], [50, 40, 120, 110]]], np.float32),
                    [batch, 1, 1])
    model(rng.uniform(-2.0, 2.0, (batch, SIZE, SIZE, 3)).astype(np.float32),
          image_shape=tf.constant([[SIZE, SIZE]] * batch, tf.float32), gt_boxes=boxes,
          gt_classes=np.tile(np.array([[1, 2]], np.int32), [batch, 1]),
          gt_masks=np.ones([batch, 2, 112, 112], np.float32), training=True)
    for layer, momentum in zip(norms, momenta):
        layer.momentum = momentum
    return len(norms)


def make(name, overrides, rng):
    tf_keras.backend.clear_session()
    params = exp_factory.get_exp_config("maskrcnn_resnetfpn_coco")
    params.task.model.override(overrides, is_strict=True)
    model = factory.build_maskrcnn(
        input_specs=tf_keras.layers.InputSpec(shape=[None, SIZE, SIZE, 3]),
        model_config=params.task.model)
    model(tf_keras.Input([SIZE, SIZE, 3]), image_shape=tf_keras.layers.Input([2]),
          training=False)
    randomize(model, rng)
    tame_box_predictors(model)
    assert calibrate(model, rng) > 10
    images = rng.normal(size=(1, SIZE, SIZE, 3)).astype(np.float32)
    image_shape = np.array([[SIZE, SIZE]], np.float32)
    outputs = model(images, image_shape=image_shape, training=False)
    out = {"images": images, "image_shape": image_shape}
    for level in outputs["rpn_scores"]:
        out[f"rpn_scores_{level}"] = outputs["rpn_scores"][level].numpy()
        out[f"rpn_boxes_{level}"] = outputs["rpn_boxes"][level].numpy()
    for key in ("cls_outputs", "box_outputs", "detection_boxes", "detection_scores",
                "detection_classes", "num_detections", "detection_masks"):
        out[key] = outputs[key].numpy()
    count = int(out["num_detections"][0])
    assert count > 1, "no detections to compare"
    gaps = -np.diff(out["detection_scores"][0][:count])
    assert gaps.min() > 1e-4, gaps  # no near ties in the order after NMS
    global_step = tf.Variable(GLOBAL_STEP, dtype=tf.int64, name="global_step")
    directory = os.path.join(TARGET, name)
    shutil.rmtree(directory, ignore_errors=True)
    checkpoint = tf.train.Checkpoint(global_step=global_step, model=model,
                                     **model.checkpoint_items)
    tf.train.CheckpointManager(checkpoint, directory, max_to_keep=1, step_counter=global_step,
                               checkpoint_name="ckpt").save(checkpoint_number=global_step)
    np.savez_compressed(os.path.join(directory, "reference.npz"), **out)
    print(name, model.count_params(), count, out["detection_classes"][0][:count],
          np.round(out["detection_scores"][0][:count], 4), flush=True)
    return {"experiment": "maskrcnn_resnetfpn_coco", "model": overrides,
            "params": int(model.count_params()), "global_step": GLOBAL_STEP}


def main():
    os.makedirs(TARGET, exist_ok=True)
    index = {"input_size": SIZE, "models": {
        name: make(name, overrides, np.random.default_rng(seed))
        for name, (seed, overrides) in MODELS.items()}}
    with open(os.path.join(TARGET, "index.json"), "w") as f:
        json.dump(index, f, indent=1, sort_keys=True)
        f.write("\n")
    print(TARGET)


if __name__ == "__main__":
    main()
