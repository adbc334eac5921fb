"""Writes tfm_maskrcnn_reference.json and tfm_maskrcnn_heads.npz: TFM 2.20's numbers for its
two-stage detection experiments (official/vision/configs/maskrcnn.py, modeling/factory.py,
modeling/heads/{dense_prediction_heads,instance_heads}.py in tensorflow/models).

Run once with TFM 2.20 (tf-models-official 2.20, tensorflow 2.20, tf_keras):

    /work/tfm_venv/bin/python tests/vision/data/make_tfm_maskrcnn_counts.py

`experiments`: each registered Mask R-CNN experiment's task and trainer as TFM's `as_dict()`.
`yamls`: the same (and the runtime) after TFM's loader applies each Mask R-CNN YAML of this
folder to the experiment it belongs to.
`models`: for each model variant (`VARIANTS`: an experiment and `overrides` applied by TFM),
what TFM's task `build_model` makes of it: `params` (all weights), `trainable_params`, the
weights of each `checkpoint_items` part (the detection heads summed), `l2_terms`
(len(model.losses)); for the small variants also the shapes of the training outputs (ground
truths given, batch 2) and inference outputs (one zero image).

`heads`: `HEADS`, the arguments of the heads in `tfm_maskrcnn_heads.npz`: for each, TFM's
RPNHead / DetectionHead / MaskHead with every weight set from a fixed normal draw
(`<head>/weight/<layer>/<weight>`, the moving variances made positive), its inputs
(`<head>/input/<key>`) and its inference outputs (`<head>/output/<key>`).
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf
import tf_keras
from official.core import exp_factory, task_factory
from official.vision import registry_imports  # noqa: F401  (registers the experiments)
from official.vision.modeling.heads import dense_prediction_heads, instance_heads

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_tfm_retinanet_reference import config_of, count  # noqa: E402  (TFM-only helpers)
EXPERIMENTS = ["fasterrcnn_resnetfpn_coco", "maskrcnn_resnetfpn_coco", "maskrcnn_spinenet_coco",
               "cascadercnn_spinenet_coco", "maskrcnn_mobilenet_coco"]
# YAML -> the experiment it is written for (TFM's README / first line).
YAMLS = {"r50fpn_640_coco_scratch_tpu4x4.yaml": "maskrcnn_resnetfpn_coco",
         "coco_mobilenetv2_mrcnn_tpu.yaml": "maskrcnn_mobilenet_coco",
         "coco_spinenet143_mrcnn_tpu.yaml": "maskrcnn_spinenet_coco",
         "coco_spinenet96_cascadercnn_tpu.yaml": "cascadercnn_spinenet_coco",
         "coco_spinenet143_cascadercnn_tpu.yaml": "cascadercnn_spinenet_coco"}
# The small variants: ResNet-18, FPN of 32 filters, narrow heads at 64x64, 4 classes, few
# proposals and detections.
SMALL = {"task": {"model": {
    "num_classes": 4, "input_size": [64, 64, 3],
    "backbone": {"type": "resnet", "resnet": {"model_id": 18}},
    "decoder": {"type": "fpn", "fpn": {"num_filters": 32}},
    "rpn_head": {"num_filters": 16},
    "detection_head": {"num_convs": 1, "num_filters": 8, "fc_dims": 32},
    "mask_head": {"num_convs": 1, "num_filters": 8},
    "roi_generator": {"num_proposals": 40, "test_num_proposals": 30},
    "roi_sampler": {"num_sampled_rois": 16},
    "mask_sampler": {"num_sampled_masks": 6},
    "detection_generator": {"max_num_detections": 10},
    "norm_activation": {"use_sync_bn": False}}}}
# name -> (experiment, overrides as nested dicts, applied in order).
VARIANTS = {name: (name, []) for name in EXPERIMENTS}
VARIANTS.update({
    "small_maskrcnn": ("maskrcnn_resnetfpn_coco", [SMALL]),
    "small_fasterrcnn": ("fasterrcnn_resnetfpn_coco", [SMALL]),
    "small_cascade": ("maskrcnn_resnetfpn_coco", [SMALL, {"task": {"model": {
        "roi_sampler": {"cascade_iou_thresholds": [0.6, 0.7]},
        "detection_head": {"class_agnostic_bbox_pred": True, "cascade_class_ensemble": True},
        "norm_activation": {"activation": "swish"}},
        "losses": {"l2_weight_decay": 4e-5}}}]),
    "small_separable": ("maskrcnn_resnetfpn_coco", [SMALL, {"task": {"model": {
        "rpn_head": {"num_convs": 2, "use_separable_conv": True},
        "detection_head": {"use_separable_conv": True, "num_fcs": 2},
        "mask_head": {"use_separable_conv": True, "class_agnostic": True,
                      "upsample_factor": 1},
        "anchor": {"num_scales": 2}, "min_level": 3, "max_level": 5},
        "losses": {"l2_weight_decay": 4e-5}}}]),
})

# name -> (head class, arguments, {input key: shape}).
HEADS = {
    "rpn": ("RPNHead", dict(min_level=2, max_level=3, num_anchors_per_location=3,
                            num_convs=2, num_filters=8, activation="swish"),
            {"2": [2, 8, 8, 6], "3": [2, 4, 4, 6]}),
    "rpn_separable": ("RPNHead", dict(min_level=3, max_level=4, num_anchors_per_location=2,
                                      num_convs=1, num_filters=8, use_separable_conv=True),
                      {"3": [1, 8, 8, 6], "4": [1, 4, 4, 6]}),
    "detection": ("DetectionHead", dict(num_classes=3, num_convs=1, num_filters=8, num_fcs=2,
                                        fc_dims=16, activation="relu"),
                  {"features": [2, 5, 4, 4, 6]}),
    "detection_agnostic_separable": ("DetectionHead", dict(
        num_classes=3, num_convs=2, num_filters=8, use_separable_conv=True, num_fcs=1,
        fc_dims=16, class_agnostic_bbox_pred=True, activation="swish"),
        {"features": [1, 3, 4, 4, 6]}),
    "mask": ("MaskHead", dict(num_classes=3, upsample_factor=2, num_convs=2, num_filters=8),
             {"features": [2, 3, 4, 4, 6], "classes": [2, 3]}),
    "mask_agnostic_separable": ("MaskHead", dict(
        num_classes=3, upsample_factor=1, num_convs=1, num_filters=8,
        use_separable_conv=True, class_agnostic=True, activation="relu6"),
        {"features": [1, 2, 4, 4, 6], "classes": [1, 2]}),
}


def head_numbers(name, kind, arguments, inputs):
    """TFM's head `name` with drawn weights on drawn inputs: the npz entries."""
    rng = np.random.default_rng(len(name) + 7)
    values = {}
    for key, shape in inputs.items():
        if key == "classes":
            values[key] = rng.integers(0, arguments["num_classes"], size=shape).astype(
                np.int32)
        else:
            values[key] = rng.normal(size=shape).astype(np.float32)
    if kind == "RPNHead":
        head = dense_prediction_heads.RPNHead(**arguments)
        call_input = {k: values[k] for k in inputs}
    elif kind == "DetectionHead":
        head = instance_heads.DetectionHead(**arguments)
        call_input = values["features"]
    else:
        head = instance_heads.MaskHead(**arguments)
        call_input = [values["features"], values["classes"]]
    head(call_input)
    out = {f"{name}/input/{k}": v for k, v in values.items()}
    for weight in head.weights:
        layer, variable = weight.name.split(":")[0].split("/")[-2:]
        value = rng.normal(scale=0.3, size=weight.shape).astype(np.float32)
        if variable == "moving_variance":
            value = np.abs(value) + 0.5
        weight.assign(value)
        out[f"{name}/weight/{layer}/{variable}"] = value
    outputs = head(call_input, training=False)
    if kind == "RPNHead":
        scores, boxes = outputs
        out.update({f"{name}/output/scores_{k}": v.numpy() for k, v in scores.items()})
        out.update({f"{name}/output/boxes_{k}": v.numpy() for k, v in boxes.items()})
    elif kind == "DetectionHead":
        out[f"{name}/output/classes"] = outputs[0].numpy()
        out[f"{name}/output/boxes"] = outputs[1].numpy()
    else:
        out[f"{name}/output/masks"] = outputs.numpy()
    return out


def shapes(tree):
    """Nested dict of tensors -> the same dict of their shapes (lists); None stays None."""
    if isinstance(tree, dict):
        return {str(k): shapes(v) for k, v in tree.items()}
    if tree is None:
        return None
    return [None if d is None else int(d) for d in tree.shape]


def part_count(item):
    items = item if isinstance(item, (list, tuple)) else [item]
    return sum(count(layer.weights) for layer in items)


def small_ground_truths(batch):
    """Two boxes per image (pixels, yxyx) of classes 1 and 3, a third padded with -1, and
    their masks as TFM's parser gives them: cropped to the box, 16x16 (the middle half set)."""
    boxes = np.full([batch, 3, 4], -1.0, np.float32)
    classes = np.full([batch, 3], -1, np.int32)
    masks = np.full([batch, 3, 16, 16], -1.0, np.float32)
    for b in range(batch):
        for i, (box, cls) in enumerate((([4, 6, 30, 40], 1), ([20 + b, 24, 60, 58], 3))):
            boxes[b, i] = box
            classes[b, i] = cls
            masks[b, i] = 0.0
            masks[b, i, 4:12, 4:12] = 1.0
    return boxes, classes, masks


def model_entry(name, config):
    tf_keras.backend.clear_session()
    task = task_factory.get_task(config.task)
    model = task.build_model()
    entry = dict(
        params=count(model.weights), trainable_params=count(model.trainable_weights),
        parts={key: part_count(item) for key, item in sorted(model.checkpoint_items.items())},
        l2_terms=len(model.losses), input_size=list(config.task.model.input_size))
    if name.startswith("small"):
        size = list(config.task.model.input_size)
        tf.random.set_seed(1)
        images = np.random.default_rng(0).normal(size=[2] + size).astype(np.float32)
        boxes, classes, masks = small_ground_truths(2)
        train = model(images, image_shape=tf.constant([size[:2]] * 2, tf.float32),
                      gt_boxes=boxes, gt_classes=classes, gt_masks=masks, training=True)
        entry["train_outputs"] = {k: shapes(v) for k, v in train.items()
                                  if k not in ("backbone_features", "decoder_features")}
        inference = model(images[:1], image_shape=tf.constant([size[:2]], tf.float32),
                          training=False)
        entry["inference_outputs"] = {k: shapes(v) for k, v in inference.items()
                                      if k not in ("backbone_features", "decoder_features")}
    print(name, entry["params"], entry["parts"], entry["l2_terms"], flush=True)
    return entry


def main():
    out = {"tfm_version": "2.20", "experiments": {}, "yamls": {}, "models": {},
           "heads": {name: {"class": kind, "arguments": arguments, "inputs": inputs}
                     for name, (kind, arguments, inputs) in HEADS.items()}}
    for name in EXPERIMENTS:
        config = exp_factory.get_exp_config(name)
        out["experiments"][name] = {"task": config.task.as_dict(),
                                    "trainer": config.trainer.as_dict(),
                                    "runtime": config.runtime.as_dict()}
    for yaml_name, experiment in YAMLS.items():
        config = config_of(experiment, [yaml_name], [])
        out["yamls"][yaml_name] = {"experiment": experiment, "task": config.task.as_dict(),
                                   "trainer": config.trainer.as_dict(),
                                   "runtime": config.runtime.as_dict()}
    for name, (experiment, overrides) in VARIANTS.items():
        config = config_of(experiment, [], overrides)
        entry = model_entry(name, config)
        entry.update(experiment=experiment, overrides=overrides)
        out["models"][name] = entry
    heads = {}
    for name, (kind, arguments, inputs) in HEADS.items():
        tf_keras.backend.clear_session()
        heads.update(head_numbers(name, kind, arguments, inputs))
    np.savez_compressed(os.path.join(HERE, "tfm_maskrcnn_heads.npz"), **heads)
    path = os.path.join(HERE, "tfm_maskrcnn_counts.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True, default=list)
        f.write("\n")
    print("wrote", path)


if __name__ == "__main__":
    main()
