"""Writes tfm_zoo_reference.json and tfm_zoo/: TFM 2.20's EfficientNet, RevNet and NAS-FPN
numbers.

Run once with TFM 2.20 (tf-models-official 2.20, tensorflow 2.20, tf_keras):

    /work/tfm_venv/bin/python tests/vision/data/make_tfm_zoo_reference.py [--checkpoints_only]

(`--checkpoints_only`: the counts kept from the JSON, the checkpoints written again.)

- `backbones`: every model id of TFM's efficientnet.SCALING_MAP (se_ratio 0 and 0.25) and
  revnet.REVNET_SPECS, as TFM's backbone factory builds them at INPUT x INPUT with TFM's
  default NormActivation: parameter count and endpoint shapes.
- `revnet_imagenet`: the experiment's `task` / `trainer` as TFM's `as_dict()` writes them, and
  the parameter count of the classifier TFM's `build_classification_model` makes of it.
- `retinanet`: RetinaNets with the NAS-FPN decoder (`retinanet_resnetfpn_coco` with
  `decoder.type: nasfpn`): at TFM's NASFPN defaults and at a small config (ResNet-18, 64
  filters, 2 repeats, plain and separable): whole-model and decoder parameter counts.
- `checkpoints`: small pieces with every variable random (tfm_generator_utils.randomize),
  saved by a CheckpointManager as `tf.train.Checkpoint(backbone=...)` (or `decoder=...`) into
  `tfm_zoo/<name>/`, with `reference.npz`: the fixed input and TFM's outputs (inference mode).
  The backbones are narrow variants through one more entry in TFM's own tables (recorded in
  `sizes`, for lite's side): EfficientNet at width 0.25 / depth 0.5 with SE and swish, two
  RevNets (residual and bottleneck inner blocks). For the RevNets the npz also holds TFM's
  training-mode gradient (its reversible layers' manual backward pass) of
  sum(endpoints * `weights_<level>`) with respect to the input images (`input_gradient`).
  NAS-FPN: the decoder alone on a random four-level pyramid (`feature_<level>`), plain (one
  cell) and separable (two).
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
from official.vision.modeling.backbones import efficientnet
from official.vision.modeling.backbones import revnet
from official.vision.modeling.decoders import nasfpn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from tfm_generator_utils import randomize  # noqa: E402  (TFM-only helper)
# TFM's backbone factory at a size, and a backbone's count and endpoint shapes.
from make_tfm_spinenet_reference import build, describe  # noqa: E402

INPUT = 64
CHECKPOINT_INPUT = 64
TARGET = os.path.join(HERE, "tfm_zoo")

NARROW_EFFICIENTNET = {"bN": {"width_scale": 0.25, "depth_scale": 0.5}}
# Narrow RevNet ids (TFM's table takes any int key): residual and bottleneck inner blocks.
NARROW_REVNET = {
    3801: [("residual", 8, 2), ("residual", 16, 1), ("residual", 24, 2)],
    5601: [("bottleneck", 8, 1), ("bottleneck", 16, 2), ("bottleneck", 24, 1)],
}
EFFICIENTNET_OPTIONS = {"se_ratio": 0.25, "stochastic_depth_drop_rate": 0.2}
SWISH = {"activation": "swish", "norm_momentum": 0.99, "norm_epsilon": 0.001,
         "use_sync_bn": False}
# RevNet's stem takes the config's norm epsilon, its inner blocks keep TFM's 0.001 default.
REVNET_NORM = {"activation": "relu", "norm_momentum": 0.9, "norm_epsilon": 1e-5,
               "use_sync_bn": False}
# NAS-FPN alone: a four-level pyramid (levels 2..5, their channels) of a 128 x 128 image.
NASFPN_PYRAMID = {"2": 8, "3": 12, "4": 16, "5": 24}
NASFPN_IMAGE = 128
# Two cells (the second reads the first's outputs) separable; one plain (its 3x3 convolutions
# from TFM's 256-channel cell inputs are the checkpoints' bulk).
NASFPN_SMALL = {False: {"num_filters": 16, "num_repeats": 1},
                True: {"num_filters": 16, "num_repeats": 2}}


def save(name, directory_items, arrays):
    directory = os.path.join(TARGET, name)
    os.makedirs(directory)
    step = tf.Variable(3, dtype=tf.int64, name="global_step")
    checkpoint = tf.train.Checkpoint(global_step=step, **directory_items)
    tf.train.CheckpointManager(checkpoint, directory, max_to_keep=1, step_counter=step,
                               checkpoint_name="ckpt").save(checkpoint_number=step)
    np.savez(os.path.join(directory, "reference.npz"), **arrays)


def backbone_checkpoint(name, backbone_type, options, norm, rng, gradient=False):
    model = build(backbone_type, options, CHECKPOINT_INPUT, norm)
    randomize(model, rng)
    images = rng.uniform(-1.0, 1.0, (2, CHECKPOINT_INPUT, CHECKPOINT_INPUT, 3))
    images = images.astype(np.float32)
    endpoints = model(images, training=False)
    arrays = {"images": images,
              **{f"endpoint_{level}": value.numpy() for level, value in endpoints.items()}}
    # Saved before the training-mode pass below moves the BatchNorm statistics.
    save(name, {"backbone": model}, arrays)
    if gradient:
        weights = {level: rng.normal(0.0, 1.0, value.shape).astype(np.float32)
                   for level, value in endpoints.items()}
        x = tf.constant(images)
        with tf.GradientTape() as tape:
            tape.watch(x)
            out = model(x, training=True)
            loss = tf.add_n([tf.reduce_sum(out[level] * weights[level]) for level in out])
        arrays["input_gradient"] = tape.gradient(loss, x).numpy()
        arrays.update({f"weights_{level}": w for level, w in weights.items()})
        np.savez(os.path.join(TARGET, name, "reference.npz"), **arrays)
    print(name, describe(model), flush=True)
    return describe(model)


def nasfpn_checkpoint(name, options, norm, rng):
    tf_keras.backend.clear_session()
    specs = {level: tf.TensorShape([None, NASFPN_IMAGE // 2 ** int(level),
                                    NASFPN_IMAGE // 2 ** int(level), channels])
             for level, channels in NASFPN_PYRAMID.items()}
    model = nasfpn.NASFPN(input_specs=specs, min_level=3, max_level=7,
                          activation=norm["activation"], norm_momentum=norm["norm_momentum"],
                          norm_epsilon=norm["norm_epsilon"], **options)
    randomize(model, rng)
    features = {level: rng.uniform(-1.0, 1.0, [2] + spec.as_list()[1:]).astype(np.float32)
                for level, spec in specs.items()}
    outputs = model(features, training=False)
    save(name, {"decoder": model},
         {**{f"feature_{level}": value for level, value in features.items()},
          **{f"output_{level}": value.numpy() for level, value in outputs.items()}})
    described = {"params": int(model.count_params()),
                 "outputs": {level: list(spec.as_list()[1:])
                             for level, spec in sorted(model.output_specs.items())}}
    print(name, described, flush=True)
    return described


def nasfpn_retinanet(backbone, decoder):
    tf_keras.backend.clear_session()
    config = exp_factory.get_exp_config("retinanet_resnetfpn_coco")
    model_config = config.task.model
    # The counts do not depend on the input size: a small one keeps the build quick.
    model_config.override({"backbone": backbone, "input_size": [NASFPN_IMAGE, NASFPN_IMAGE, 3],
                           "decoder": {"type": "nasfpn", "nasfpn": decoder}}, is_strict=True)
    size = list(model_config.input_size)
    model = factory.build_retinanet(tf_keras.layers.InputSpec(shape=[None] + size),
                                    model_config)
    model(tf.zeros([1] + size), training=False)  # builds the head
    return {"backbone": backbone, "decoder": decoder, "input_size": size,
            "params": int(model.count_params()),
            "backbone_params": int(model.backbone.count_params()),
            "decoder_params": int(model.decoder.count_params())}


def main():
    out = {"input_size": INPUT, "checkpoint_input_size": CHECKPOINT_INPUT, "backbones": {},
           "retinanet": {}, "checkpoints": {}}
    if "--checkpoints_only" in sys.argv:
        # The counts (minutes to build) kept from the JSON, the checkpoints written again.
        with open(os.path.join(HERE, "tfm_zoo_reference.json")) as f:
            out = dict(json.load(f), checkpoints={})
    else:
        counts(out)
    checkpoints(out)
    with open(os.path.join(HERE, "tfm_zoo_reference.json"), "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")


def counts(out):
    for model_id in efficientnet.SCALING_MAP:
        for se_ratio in (0.0, 0.25):
            name = f"efficientnet_{model_id}_se{se_ratio}"
            options = {"model_id": model_id, "se_ratio": se_ratio}
            out["backbones"][name] = dict(type="efficientnet", options=options,
                                          **describe(build("efficientnet", options, INPUT)))
            print(name, out["backbones"][name], flush=True)
    for model_id in revnet.REVNET_SPECS:
        name = f"revnet_{model_id}"
        options = {"model_id": model_id}
        out["backbones"][name] = dict(type="revnet", options=options,
                                      **describe(build("revnet", options, INPUT)))
        print(name, out["backbones"][name], flush=True)

    tf_keras.backend.clear_session()
    config = exp_factory.get_exp_config("revnet_imagenet")
    model_config = config.task.model
    model = factory.build_classification_model(
        tf_keras.layers.InputSpec(shape=[None] + list(model_config.input_size)), model_config)
    out["revnet_imagenet"] = {"task": json.loads(json.dumps(config.task.as_dict(), default=list)),
                              "trainer": json.loads(json.dumps(config.trainer.as_dict(),
                                                               default=list)),
                              "params": int(model.count_params())}
    print("revnet_imagenet", out["revnet_imagenet"]["params"], flush=True)

    out["retinanet"]["nasfpn_default"] = nasfpn_retinanet(
        {"type": "resnet", "resnet": {"model_id": 50}}, {})
    for separable in (False, True):
        name = f"nasfpn_small{'_separable' if separable else ''}"
        out["retinanet"][name] = nasfpn_retinanet(
            {"type": "resnet", "resnet": {"model_id": 18}},
            {"num_filters": 64, "num_repeats": 2, "use_separable_conv": separable})
    for name, entry in out["retinanet"].items():
        print(name, entry, flush=True)


def checkpoints(out):
    rng = np.random.default_rng(54)
    shutil.rmtree(TARGET, ignore_errors=True)
    for model_id, sizes in NARROW_EFFICIENTNET.items():
        efficientnet.SCALING_MAP[model_id] = sizes
        options = dict(EFFICIENTNET_OPTIONS, model_id=model_id)
        out["checkpoints"]["efficientnet_narrow"] = dict(
            type="efficientnet", options=options, sizes=sizes, norm_activation=SWISH,
            **backbone_checkpoint("efficientnet_narrow", "efficientnet", options, SWISH, rng))
    for model_id, specs in NARROW_REVNET.items():
        revnet.REVNET_SPECS[model_id] = specs
        name = f"revnet_narrow_{specs[0][0]}"
        out["checkpoints"][name] = dict(
            type="revnet", options={"model_id": model_id}, sizes=[list(s) for s in specs],
            norm_activation=REVNET_NORM,
            **backbone_checkpoint(name, "revnet", {"model_id": model_id}, REVNET_NORM, rng,
                                  gradient=True))
    for separable in (False, True):
        name = f"nasfpn_small{'_separable' if separable else ''}"
        options = dict(NASFPN_SMALL[separable], use_separable_conv=separable)
        out["checkpoints"][name] = dict(
            type="nasfpn", options=options, pyramid=NASFPN_PYRAMID, image_size=NASFPN_IMAGE,
            norm_activation=SWISH, **nasfpn_checkpoint(name, options, SWISH, rng))


if __name__ == "__main__":
    main()
