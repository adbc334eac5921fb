"""Writes tfm_spinenet_reference.json and tfm_spinenet/: TFM 2.20's SpineNet, mobile SpineNet
and MobileDet numbers.

Run once with TFM 2.20 (tf-models-official 2.20, tensorflow 2.20, tf_keras):

    /work/tfm_venv/bin/python tests/vision/data/make_tfm_spinenet_reference.py

- `backbones`: for every model id of TFM's two SCALING_MAPs and of MobileDet's
  SUPPORTED_SPECS_MAP (and a few level ranges / scales), the
  backbone TFM's factory (`backbones.factory.build_backbone`) builds at INPUT x INPUT with TFM's
  default norm / activation: its parameter count and endpoint shapes.
- `retinanet`: the parameter count of `retinanet_spinenet_coco` and `retinanet_mobile_coco`
  at their defaults (`factory.build_retinanet`, their input sizes).
- `checkpoints`: NARROW backbones (TFM's spinenet / spinenet_mobile with one more SCALING_MAP
  entry each, recorded in `sizes` for lite's side; MobileDetCPU / DSP narrowed by their
  config's own filter_size_scale), swish activation (MobileDet: its own), every variable random
  (as make_tfm_checkpoints.py does), saved as `tf.train.Checkpoint(backbone=...)` by a
  CheckpointManager into `tfm_spinenet/<name>/`, with `reference.npz`: a fixed input `images`
  and TFM's endpoints (inference mode) `endpoint_<level>`.
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
from official.vision.configs import backbones as backbones_cfg
from official.vision.configs import common
from official.vision.modeling import factory
from official.vision.modeling.backbones import factory as backbone_factory
from official.vision.modeling.backbones import spinenet
from official.vision.modeling.backbones import mobiledet
from official.vision.modeling.backbones import spinenet_mobile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_tfm_checkpoints import randomize  # noqa: E402  (TFM-only helper)

INPUT = 128
CHECKPOINT_INPUT = 128
TARGET = os.path.join(HERE, "tfm_spinenet")

# (type, config overrides) of the extra level ranges: SpineNet's level-2 output, and mobile
# SpineNet with blocks above max_level built at max_level.
VARIANTS = {
    "spinenet_49_l2_l6": ("spinenet", {"model_id": "49", "min_level": 2, "max_level": 6}),
    "spinenet_mobile_49_l3_l5": ("spinenet_mobile",
                                 {"model_id": "49", "min_level": 3, "max_level": 5}),
    "mobiledet_cpu_x0.75": ("mobiledet", {"model_id": "MobileDetCPU",
                                          "filter_size_scale": 0.75}),
}
NARROW = {
    "spinenet_49_narrow": ("spinenet", "49N", {
        "endpoints_num_filters": 16, "filter_size_scale": 0.125, "resample_alpha": 0.5,
        "block_repeats": 1}),
    "spinenet_mobile_49_narrow": ("spinenet_mobile", "49N", {
        "endpoints_num_filters": 16, "filter_size_scale": 0.25, "block_repeats": 1}),
}
# Narrow MobileDets through TFM's own config field (no table entry needed): CPU's blocks have
# squeeze-excitation, DSP's are plain, fused and Tucker.
NARROW_MOBILEDET = {
    "mobiledet_cpu_narrow": {"model_id": "MobileDetCPU", "filter_size_scale": 0.25},
    "mobiledet_dsp_narrow": {"model_id": "MobileDetDSP", "filter_size_scale": 0.25},
}
NARROW_OPTIONS = {"spinenet": {"stochastic_depth_drop_rate": 0.2},
                  "spinenet_mobile": {"stochastic_depth_drop_rate": 0.2, "se_ratio": 0.2,
                                      "expand_ratio": 6}}
NORM = {"activation": "swish", "norm_momentum": 0.99, "norm_epsilon": 0.001,
        "use_sync_bn": False}


def build(backbone_type, options, size, norm=None):
    tf_keras.backend.clear_session()
    config = backbones_cfg.Backbone(type=backbone_type)
    config.get().override(options, is_strict=True)
    return backbone_factory.build_backbone(
        tf_keras.layers.InputSpec(shape=[None, size, size, 3]), config,
        common.NormActivation(**(norm or {})))


def describe(model):
    return {"params": int(model.count_params()),
            "endpoints": {level: list(spec.as_list()[1:])
                          for level, spec in sorted(model.output_specs.items())}}


def save_checkpoint(name, backbone_type, options, rng):
    """TFM's backbone, randomised, saved with its endpoints on a fixed input into
    TARGET/name; returns its count and endpoint shapes."""
    model = build(backbone_type, options, CHECKPOINT_INPUT, NORM)
    randomize(model, rng)
    images = rng.uniform(-1.0, 1.0, (1, CHECKPOINT_INPUT, CHECKPOINT_INPUT, 3))
    images = images.astype(np.float32)
    endpoints = model(images, training=False)
    directory = os.path.join(TARGET, name)
    os.makedirs(directory)
    step = tf.Variable(3, dtype=tf.int64, name="global_step")
    checkpoint = tf.train.Checkpoint(global_step=step, backbone=model)
    tf.train.CheckpointManager(checkpoint, directory, max_to_keep=1, step_counter=step,
                               checkpoint_name="ckpt").save(checkpoint_number=step)
    np.savez(os.path.join(directory, "reference.npz"), images=images,
             **{f"endpoint_{level}": value.numpy() for level, value in endpoints.items()})
    print(name, describe(model), flush=True)
    return describe(model)


def main():
    out = {"input_size": INPUT, "checkpoint_input_size": CHECKPOINT_INPUT, "backbones": {},
           "retinanet": {}, "checkpoints": {}}
    for backbone_type, scaling in (("spinenet", spinenet.SCALING_MAP),
                                   ("spinenet_mobile", spinenet_mobile.SCALING_MAP),
                                   ("mobiledet", mobiledet.SUPPORTED_SPECS_MAP)):
        for model_id in scaling:
            name = f"{backbone_type}_{model_id}"
            out["backbones"][name] = dict(
                type=backbone_type, options={"model_id": model_id},
                **describe(build(backbone_type, {"model_id": model_id}, INPUT)))
            print(name, out["backbones"][name], flush=True)
    for name, (backbone_type, options) in VARIANTS.items():
        out["backbones"][name] = dict(type=backbone_type, options=options,
                                      **describe(build(backbone_type, options, INPUT)))
        print(name, out["backbones"][name], flush=True)
    for experiment in ("retinanet_spinenet_coco", "retinanet_mobile_coco"):
        tf_keras.backend.clear_session()
        model_config = exp_factory.get_exp_config(experiment).task.model
        model = factory.build_retinanet(
            tf_keras.layers.InputSpec(shape=[None] + list(model_config.input_size)),
            model_config)
        model(tf.zeros([1] + list(model_config.input_size)), training=False)  # builds the head
        out["retinanet"][experiment] = {
            "params": int(model.count_params()),
            "backbone_params": int(model.backbone.count_params())}
        print(experiment, out["retinanet"][experiment], flush=True)

    rng = np.random.default_rng(42)
    shutil.rmtree(TARGET, ignore_errors=True)
    for name, (backbone_type, model_id, sizes) in NARROW.items():
        module = spinenet if backbone_type == "spinenet" else spinenet_mobile
        module.SCALING_MAP[model_id] = sizes
        options = dict(NARROW_OPTIONS[backbone_type], model_id=model_id)
        out["checkpoints"][name] = dict(type=backbone_type, options=options, sizes=sizes,
                                        norm_activation=NORM,
                                        **save_checkpoint(name, backbone_type, options, rng))
    for name, options in NARROW_MOBILEDET.items():
        out["checkpoints"][name] = dict(type="mobiledet", options=options, sizes={},
                                        norm_activation=NORM,
                                        **save_checkpoint(name, "mobiledet", options, rng))
    with open(os.path.join(HERE, "tfm_spinenet_reference.json"), "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
