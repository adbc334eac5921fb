"""Writes tfm_retinanet_reference.json: TFM 2.20's numbers for its RetinaNet experiments and a
few model variants (official/vision/configs/retinanet.py, modeling/factory.py in
tensorflow/models).

Run once with TFM 2.20 (tf-models-official 2.20, tensorflow 2.20, tf_keras):

    /work/tfm_venv/bin/python tests/vision/data/make_tfm_retinanet_reference.py

`experiments`: each registered RetinaNet experiment's task and trainer as TFM's `as_dict()`.
`yamls`: the same after TFM's loader applies each YAML of this folder to its experiment.
`models`: for each model variant (`VARIANTS`: an experiment, the YAMLs and `overrides`
applied by TFM), what TFM's task `build_model` makes of it: `params` (all weights),
`trainable_params`, the weights of each `checkpoint_items` part, `l2_terms`
(len(model.losses)), and the training outputs' shapes per level at the model's input size
(a symbolic call, batch 2); for the small variants also the inference outputs' keys and
shapes on one zero image.

`heads`: `HEADS`, the arguments of the heads in `tfm_retinanet_heads.npz`: for each, TFM's
RetinaNetHead with every weight set from a fixed normal draw
(`<head>/weight/<layer>/<weight>`, the moving variances made positive), its inputs `<head>/features/<level>` and its inference outputs
(`<head>/scores/<level>`, `<head>/boxes/<level>`, `<head>/attributes/<name>/<level>`).
"""

import json
import os

import numpy as np
import tensorflow as tf
import tf_keras
from official.core import exp_factory, task_factory
from official.modeling import hyperparams
from official.vision import registry_imports  # noqa: F401  (registers the experiments)
from official.vision.modeling.heads import dense_prediction_heads

HERE = os.path.dirname(os.path.abspath(__file__))
EXPERIMENTS = ["retinanet", "retinanet_resnetfpn_coco", "retinanet_spinenet_coco",
               "retinanet_mobile_coco"]
# YAML -> the experiment its first line names (`--experiment_type`).
YAMLS = {"coco_mobilenetv2_tpu.yaml": "retinanet_mobile_coco",
         "coco_mobilenetv3.5_avg_tpu.yaml": "retinanet_mobile_coco",
         "resnet50fpn_coco_tpu4x4_benchmark.yaml": "retinanet_resnetfpn_coco"}
# The small variants: ResNet-18, FPN of 32 filters, 2 head convolutions of 16 filters at
# 128x128, 5 classes.
SMALL = {"task": {"model": {
    "num_classes": 5, "input_size": [128, 128, 3],
    "backbone": {"type": "resnet", "resnet": {"model_id": 18}},
    "decoder": {"type": "fpn", "fpn": {"num_filters": 32}},
    "head": {"num_convs": 2, "num_filters": 16},
    "norm_activation": {"use_sync_bn": False}}}}
ATTRIBUTES = [{"name": "depth", "type": "regression", "size": 1},
              {"name": "heading", "type": "regression", "size": 2,
               "prediction_tower_name": "pose"},
              {"name": "pitch", "type": "regression", "size": 1,
               "prediction_tower_name": "pose"},
              {"name": "kind", "type": "classification", "size": 3, "num_convs": 1,
               "num_filters": 8}]
# name -> (experiment, YAMLs, overrides as nested dicts, applied in order).
VARIANTS = {
    "retinanet_resnetfpn_coco": ("retinanet_resnetfpn_coco", [], []),
    # The general experiment has no classes and no size: COCO's 91 at 640x640, its defaults
    # otherwise (sync BN, no L2).
    "retinanet": ("retinanet", [], [{"task": {"model": {"num_classes": 91,
                                                        "input_size": [640, 640, 3]}}}]),
    "coco_mobilenetv2_tpu": ("retinanet_mobile_coco", ["coco_mobilenetv2_tpu.yaml"], []),
    "coco_mobilenetv3.5_avg_tpu": ("retinanet_mobile_coco",
                                   ["coco_mobilenetv3.5_avg_tpu.yaml"], []),
    "small_shared": ("retinanet", [], [SMALL]),
    "small_level_convs_attributes": ("retinanet", [], [SMALL, {"task": {"model": {"head": {
        "share_level_convs": False, "attribute_heads": ATTRIBUTES},
        "detection_generator": {"nms_version": "v1"}},
        "losses": {"l2_weight_decay": 1e-4}}}]),
    "small_shared_classification_heads": ("retinanet", [], [SMALL, {"task": {"model": {
        "head": {"share_classification_heads": True,
                 "attribute_heads": [ATTRIBUTES[0], ATTRIBUTES[3]]},
        "detection_generator": {"nms_version": "v1"}}}}]),
    "small_separable": ("retinanet", [], [SMALL, {"task": {"model": {
        "decoder": {"fpn": {"use_separable_conv": True, "use_keras_layer": True}},
        "head": {"use_separable_conv": True}, "anchor": {"num_scales": 2,
                                                          "aspect_ratios": [1.0]}},
        "losses": {"l2_weight_decay": 3e-5}}}]),
    "small_identity_levels_3_5": ("retinanet", [], [SMALL, {"task": {"model": {
        # ResNet's levels have 128 / 256 / 512 channels: one tower per level.
        "decoder": {"type": "identity"}, "min_level": 3, "max_level": 5,
        "head": {"share_level_convs": False},
        "detection_generator": {"nms_version": "batched", "return_decoded": True}}}}]),
    "small_no_nms": ("retinanet", [], [SMALL, {"task": {"model": {
        "detection_generator": {"apply_nms": False}}}}]),
}


# name -> RetinaNetHead arguments: per-level towers with own and shared attribute towers
# (swish), and separable shared towers with the class tower read by an attribute (relu6).
HEADS = {
    "per_level_attributes": dict(
        share_level_convs=False, activation="swish", attribute_heads=[
            {"name": "depth", "type": "regression", "size": 1, "prediction_tower_name": ""},
            {"name": "heading", "type": "regression", "size": 2,
             "prediction_tower_name": "pose", "num_convs": 1, "num_filters": 4},
            {"name": "pitch", "type": "classification", "size": 3,
             "prediction_tower_name": "pose"}]),
    "separable_class_tower": dict(
        use_separable_conv=True, activation="relu6", share_classification_heads=True,
        attribute_heads=[
            {"name": "kind", "type": "classification", "size": 2, "prediction_tower_name": ""},
            {"name": "depth", "type": "regression", "size": 1, "prediction_tower_name": ""}]),
}
HEAD_LEVELS = (3, 4)


def head_numbers(name, arguments):
    """TFM's head `name` with drawn weights on drawn features: the npz entries."""
    rng = np.random.default_rng(len(name))
    features = {str(level): rng.normal(size=(2, 32 // 2**level, 32 // 2**level, 6))
                .astype(np.float32) for level in HEAD_LEVELS}
    head = dense_prediction_heads.RetinaNetHead(
        min_level=HEAD_LEVELS[0], max_level=HEAD_LEVELS[-1], num_classes=3,
        num_anchors_per_location=2, num_convs=2, num_filters=8, **arguments)
    head(features)
    out = {f"{name}/features/{k}": v for k, v in features.items()}
    for weight in head.weights:
        layer, variable = weight.name.split(":")[0].split("/")[-2:]
        value = rng.normal(scale=0.3, size=weight.shape).astype(np.float32)
        if variable == "moving_variance":
            value = np.abs(value) + 0.5
        weight.assign(value)
        out[f"{name}/weight/{layer}/{variable}"] = value
    scores, boxes, attributes = head(features, training=False)
    out.update({f"{name}/scores/{k}": v.numpy() for k, v in scores.items()})
    out.update({f"{name}/boxes/{k}": v.numpy() for k, v in boxes.items()})
    for attribute, levels in attributes.items():
        out.update({f"{name}/attributes/{attribute}/{k}": v.numpy() for k, v in levels.items()})
    return out


def count(weights):
    return int(sum(tf.size(w).numpy() for w in weights))


def shapes(tree):
    """Nested dict of tensors -> the same dict of their shapes (lists)."""
    if isinstance(tree, dict):
        return {str(k): shapes(v) for k, v in tree.items()}
    return [None if d is None else int(d) for d in tree.shape]


def config_of(experiment, yamls, overrides):
    config = exp_factory.get_exp_config(experiment)
    for name in yamls:
        config = hyperparams.override_params_dict(config, os.path.join(HERE, name),
                                                  is_strict=True)
    for override in overrides:
        config = hyperparams.override_params_dict(config, override, is_strict=True)
    config.validate()
    return config


def model_entry(name, config):
    tf_keras.backend.clear_session()
    task = task_factory.get_task(config.task)
    model = task.build_model()
    size = list(config.task.model.input_size)
    outputs = model(tf_keras.Input(shape=size, batch_size=2), training=True)
    entry = dict(
        params=count(model.weights), trainable_params=count(model.trainable_weights),
        parts={key: count(item.weights)
               for key, item in sorted(model.checkpoint_items.items())},
        l2_terms=len(model.losses), input_size=size, train_outputs=shapes(outputs))
    if name.startswith("small"):
        image = np.zeros([1] + size, np.float32)
        inference = model(image, image_shape=tf.constant([size[:2]], tf.float32),
                          training=False)
        entry["inference_outputs"] = shapes(inference)
    print(name, entry["params"], entry["parts"], entry["l2_terms"], flush=True)
    return entry


def main():
    out = {"tfm_version": "2.20", "experiments": {}, "yamls": {}, "models": {},
           "heads": HEADS}
    for name in EXPERIMENTS:
        config = exp_factory.get_exp_config(name)
        out["experiments"][name] = {"task": config.task.as_dict(),
                                    "trainer": config.trainer.as_dict()}
    for yaml_name, experiment in YAMLS.items():
        config = config_of(experiment, [yaml_name], [])
        out["yamls"][yaml_name] = {"experiment": experiment, "task": config.task.as_dict(),
                                   "trainer": config.trainer.as_dict(),
                                   "runtime": config.runtime.as_dict()}
    for name, (experiment, yamls, overrides) in VARIANTS.items():
        config = config_of(experiment, yamls, overrides)
        entry = model_entry(name, config)
        entry.update(experiment=experiment, yamls=yamls, overrides=overrides)
        out["models"][name] = entry
    heads = {}
    for name, arguments in HEADS.items():
        tf_keras.backend.clear_session()
        heads.update(head_numbers(name, arguments))
    np.savez_compressed(os.path.join(HERE, "tfm_retinanet_heads.npz"), **heads)
    path = os.path.join(HERE, "tfm_retinanet_reference.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True, default=list)
        f.write("\n")
    print("wrote", path)


if __name__ == "__main__":
    main()
