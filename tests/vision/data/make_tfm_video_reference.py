"""Writes tfm_video_reference.json and tfm_video/: TFM 2.20's numbers for video classification
(official/vision/configs/video_classification.py, backbones_3d.py, modeling/backbones/
resnet_3d.py, modeling/layers/nn_blocks_3d.py, modeling/video_classification_model.py,
tasks/video_classification.py in tensorflow/models).

Run once with TFM 2.20 (tf-models-official 2.20, tensorflow 2.20, tf_keras):

    /work/tfm_venv/bin/python tests/vision/data/make_tfm_video_reference.py

`defaults`: `as_dict()` of a default instance of each config class of the two modules
(`DEFAULTS`; Backbone3D once per type).
`experiments`: each of the six `video_classification*` experiments' task, trainer and runtime
as TFM's `as_dict()`.
`counts`: for each experiment (num_classes 10 where TFM leaves it -1) what TFM's task
`build_model` makes of it: `params`, `trainable_params`, `backbone_params`, `l2_terms`
(len(model.losses)); `backbones`: the parameters of `resnet_3d` and `resnet_3d_rs` (their
default block plans, `resnet_3d`'s kernel sizes written out per block) for every model id of
TFM's RESNET_SPECS, on TFM's NormActivation defaults (`backbone_overrides` records the
`resnet_3d` block plans used).

`tfm_video/<name>/`: for each model of SMALL (a narrow 3D ResNet: model id TINY_ID added to
TFM's RESNET_SPECS as TINY_SPECS, an 8x32x32 clip, 5 classes), the checkpoint TFM's Trainer
writes (global_step, model, optimizer, backbone) with every variable random, and
`reference.npz`: `clips` (4 fixed clips), TFM's `logits` in inference mode, `features` (the
backbone's endpoints), `labels`, TFM's task loss on them (`loss`: softmax, categorical cross
entropy with label smoothing, plus the L2 terms; `sparse_loss`: the sparse loss),
`multilabel_loss` (sigmoid, binary cross entropy, per clip) on `multi_labels`, and
`views_probs`: TFM's `inference_step` with 2 test clips x 1 crop (the 4 clips as 2 x 2 views).
`index.json` lists the models with the overrides both sides build from.

`yaml`: TFM's only video YAML (k400_resnet3drs_50_tpu.yaml, in this folder as shipped)
applied by TFM's loader to `video_classification_kinetics400`: `shipped_error` (what TFM
raises on the file as shipped: it sets `num_channels`, no DataConfig field) and, with the
`num_channels` and `file_type` lines removed (`STRIPPED`), the task, trainer and runtime.

`--defaults_only` / `--yaml_only` rewrite `defaults` / `yaml` alone (no model is built).
"""

import json
import os
import shutil
import sys

import numpy as np
import tensorflow as tf
import tf_keras

from official.core import exp_factory, task_factory
from official.modeling import hyperparams
from official.vision import registry_imports  # noqa: F401  (registers the experiments)
from official.vision.configs import backbones_3d, video_classification
from official.vision.modeling.backbones import resnet_3d

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from tfm_generator_utils import randomize, save_trainer_checkpoint, sgd_momentum_optimizer  # noqa: E402

EXPERIMENTS = ["video_classification", "video_classification_ucf101",
               "video_classification_kinetics400", "video_classification_kinetics600",
               "video_classification_kinetics700", "video_classification_kinetics700_2020"]
TINY_ID = 8
TINY_SPECS = [("bottleneck3d", 4, 2), ("bottleneck3d", 8, 2), ("bottleneck3d", 8, 1),
              ("bottleneck3d", 16, 2)]
resnet_3d.RESNET_SPECS[TINY_ID] = TINY_SPECS
CLIP = [8, 32, 32, 3]
NUM_CLASSES = 5


def data(num_classes, feature_shape):
    return {"num_classes": num_classes, "feature_shape": feature_shape}


SMALL = {
    # Stem v0, temporal strides in two groups, self-gating on two, the required endpoints 3, 5.
    "resnet3d_tiny": {"experiment": "video_classification_kinetics400", "task": {
        "model": {"backbone": {"type": "resnet_3d", "resnet_3d": {
            "model_id": TINY_ID, "stem_conv_temporal_stride": 1,
            "block_specs": [
                {"temporal_strides": 1, "temporal_kernel_sizes": [3, 1],
                 "use_self_gating": True},
                {"temporal_strides": 2, "temporal_kernel_sizes": [1, 3],
                 "use_self_gating": False},
                {"temporal_strides": 1, "temporal_kernel_sizes": [3],
                 "use_self_gating": True},
                {"temporal_strides": 2, "temporal_kernel_sizes": [3, 1],
                 "use_self_gating": False}]}},
            "dropout_rate": 0.3, "require_endpoints": ["3", "5"]},
        "losses": {"label_smoothing": 0.1, "l2_weight_decay": 1e-4}}},
    # ResNet3D-RS: stem v1, SE 0.2, stochastic depth 0.1, swish, every endpoint pooled.
    "resnet3drs_tiny": {"experiment": "video_classification_kinetics400", "task": {
        "model": {"backbone": {"type": "resnet_3d_rs", "resnet_3d_rs": {
            "model_id": TINY_ID, "stem_pool_temporal_stride": 1}},
            "aggregate_endpoints": True,
            "norm_activation": {"activation": "swish", "norm_momentum": 0.99,
                                "norm_epsilon": 1e-3}},
        "losses": {"label_smoothing": 0.0, "l2_weight_decay": 4e-5}}},
}


def count(weights):
    return int(sum(int(np.prod(w.shape)) for w in weights))


def config_of(experiment, overrides=()):
    config = exp_factory.get_exp_config(experiment)
    for override in overrides:
        config = hyperparams.override_params_dict(config, override, is_strict=True)
    return config


def model_counts(config):
    tf_keras.backend.clear_session()
    task = task_factory.get_task(config.task)
    model = task.build_model()
    return {"params": count(model.weights), "trainable_params": count(model.trainable_weights),
            "backbone_params": count(model.backbone.weights), "l2_terms": len(model.losses)}


def resnet_3d_plan(model_id):
    """`resnet_3d` block plans for every id: temporal kernels 3, 1, 3, ... per group (1, 3, 1,
    ... in the last, as ResNet3D50's), one size per block; self-gating as ResNet3D50."""
    specs = []
    for i, (_, _, repeats) in enumerate(resnet_3d.RESNET_SPECS[model_id]):
        first, other = (1, 3) if i == 3 else (3, 1)
        specs.append({"temporal_strides": 1, "use_self_gating": True,
                      "temporal_kernel_sizes": [first if j % 2 == 0 else other
                                                for j in range(repeats)]})
    return specs


def backbone_counts():
    counts, overrides = {}, {}
    for model_id in sorted(k for k in resnet_3d.RESNET_SPECS if k != TINY_ID):
        for backbone_type in ("resnet_3d", "resnet_3d_rs"):
            backbone = {"model_id": model_id}
            if backbone_type == "resnet_3d":
                backbone["block_specs"] = resnet_3d_plan(model_id)
                overrides[str(model_id)] = backbone["block_specs"]
            config = config_of("video_classification", [
                {"task": {"model": {"backbone": {"type": backbone_type,
                                                 backbone_type: backbone}},
                          "train_data": data(10, [8, 64, 64, 3]),
                          "validation_data": data(10, [8, 64, 64, 3])}}])
            counts[f"{backbone_type}/{model_id}"] = model_counts(config)["backbone_params"]
            print(backbone_type, model_id, counts[f"{backbone_type}/{model_id}"], flush=True)
    return counts, overrides


def small_model(name, spec, rng, target):
    tf_keras.backend.clear_session()
    tf.random.set_seed(1)
    config = config_of(spec["experiment"], [{"task": spec["task"]}, {"task": {
        "train_data": data(NUM_CLASSES, CLIP),
        "validation_data": dict(data(NUM_CLASSES, CLIP), num_test_clips=2)}}])
    task = task_factory.get_task(config.task)
    model = task.build_model()
    randomize(model, rng)
    clips = rng.uniform(-1.0, 1.0, [4] + CLIP).astype(np.float32)
    logits = model({"image": clips}, training=False).numpy()
    features = model.backbone(clips, training=False)
    labels = np.array([0, 3, 1, 4], np.int32)
    one_hot = tf.one_hot(labels, NUM_CLASSES)
    probs = tf.nn.softmax(logits)
    loss = task.build_losses(one_hot, probs, aux_losses=model.losses)["loss"].numpy()
    config.task.losses.one_hot = False
    sparse_task = task_factory.get_task(config.task)
    sparse_loss = sparse_task.build_losses(labels, probs)["loss"].numpy()
    multi_labels = (rng.uniform(size=[4, NUM_CLASSES]) < 0.4).astype(np.float32)
    multilabel_loss = tf_keras.losses.binary_crossentropy(
        multi_labels, tf.sigmoid(logits), from_logits=False).numpy()
    views_probs = task.inference_step({"image": clips}, model).numpy()
    directory = os.path.join(target, name)
    shutil.rmtree(directory, ignore_errors=True)
    global_step = tf.Variable(7, dtype=tf.int64, name="global_step")
    save_trainer_checkpoint(directory, global_step, model, sgd_momentum_optimizer())
    np.savez(os.path.join(directory, "reference.npz"), clips=clips, logits=logits,
             labels=labels, loss=loss, sparse_loss=sparse_loss, multi_labels=multi_labels,
             multilabel_loss=multilabel_loss, views_probs=views_probs,
             **{f"features_{k}": v.numpy() for k, v in features.items()})
    return {"experiment": spec["experiment"], "task": spec["task"], "clip": CLIP,
            "num_classes": NUM_CLASSES, "params": count(model.weights),
            "resnet_3d_specs": {str(TINY_ID): TINY_SPECS}}


DEFAULTS = {
    "DataConfig": video_classification.DataConfig,
    "VideoClassificationModel": video_classification.VideoClassificationModel,
    "Losses": video_classification.Losses,
    "Metrics": video_classification.Metrics,
    "VideoClassificationTask": video_classification.VideoClassificationTask,
    "ResNet3DBlock": backbones_3d.ResNet3DBlock,
    "ResNet3D": backbones_3d.ResNet3D,
    "ResNet3D50": backbones_3d.ResNet3D50,
    "ResNet3DRS": backbones_3d.ResNet3DRS,
    "Backbone3D/resnet_3d": lambda: backbones_3d.Backbone3D(type="resnet_3d"),
    "Backbone3D/resnet_3d_rs": lambda: backbones_3d.Backbone3D(type="resnet_3d_rs"),
}


def defaults():
    return json.loads(json.dumps({name: make().as_dict() for name, make in DEFAULTS.items()},
                                 default=list))


YAML = os.path.join(HERE, "k400_resnet3drs_50_tpu.yaml")
STRIPPED = ("num_channels:", "file_type:")


def yaml_reference():
    import tempfile  # pylint: disable=import-outside-toplevel
    try:
        config_of("video_classification_kinetics400", [YAML])
        shipped_error = None
    except Exception as e:  # pylint: disable=broad-except
        shipped_error = f"{type(e).__name__}: {e}"
    lines = [line for line in open(YAML).read().splitlines(keepends=True)
             if not line.strip().startswith(STRIPPED)]
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write("".join(lines))
    config = config_of("video_classification_kinetics400", [f.name])
    os.unlink(f.name)
    return {"shipped_error": shipped_error, "stripped": json.loads(json.dumps(
        {k: getattr(config, k).as_dict() for k in ("task", "trainer", "runtime")},
        default=list))}


def main():
    path = os.path.join(HERE, "tfm_video_reference.json")
    if "--defaults_only" in sys.argv or "--yaml_only" in sys.argv:
        with open(path) as f:
            reference = json.load(f)
        if "--defaults_only" in sys.argv:
            reference["defaults"] = defaults()
        else:
            reference["yaml"] = yaml_reference()
        with open(path, "w") as f:
            json.dump(reference, f, indent=1, sort_keys=True)
            f.write("\n")
        return
    reference = {"experiments": {}, "counts": {}, "defaults": defaults(),
                 "yaml": yaml_reference()}
    for name in EXPERIMENTS:
        config = config_of(name)
        reference["experiments"][name] = json.loads(json.dumps(
            {k: getattr(config, k).as_dict() for k in ("task", "trainer", "runtime")},
            default=list))
        if config.task.train_data.num_classes < 1:
            config = config_of(name, [{"task": {"train_data": {"num_classes": 10},
                                                "validation_data": {"num_classes": 10}}}])
        reference["counts"][name] = model_counts(config)
        print(name, reference["counts"][name], flush=True)
    reference["backbones"], reference["backbone_overrides"] = backbone_counts()
    with open(path, "w") as f:
        json.dump(reference, f, indent=1, sort_keys=True)
        f.write("\n")
    target = os.path.join(HERE, "tfm_video")
    os.makedirs(target, exist_ok=True)
    rng = np.random.default_rng(53)
    index = {name: small_model(name, spec, rng, target) for name, spec in SMALL.items()}
    with open(os.path.join(target, "index.json"), "w") as f:
        json.dump(index, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
