"""Writes tfm_checkpoints/: checkpoints written by TFM 2.20 and TFM's outputs on them.

Run once with TFM 2.20 (tf-models-official 2.20, tensorflow 2.20, tf_keras):

    /work/tfm_venv/bin/python tests/vision/data/make_tfm_checkpoints.py [--big DIR]

For each model of MODELS (small variants of TFM's classification families: a 32x32 input,
widths shrunk through TFM's own `depth_multiplier` / `filter_size_scale` where the family has
one, 5 classes), TFM's factory (`official.vision.modeling.factory.build_classification_model`)
builds the classifier; every variable (BatchNorm moving mean / variance included) is set to
random values, so that a dropped, swapped or transposed variable changes the outputs; and the
model is saved as TFM's Trainer saves it: `tf.train.Checkpoint(global_step=..., model=...,
optimizer=..., **model.checkpoint_items)` through a `tf.train.CheckpointManager` (prefix
`ckpt`), into `<name>/`. `<name>/reference.npz` holds a fixed input `images`, TFM's `logits`
(inference mode) and `features` (the backbone endpoint the head reads). `index.json` lists the
models with the `task.model` overrides (over the experiment's defaults) both sides build from.

TRAINED models are also trained for a few steps with the optimizer TFM's OptimizerFactory
builds (legacy tf_keras SGD with momentum / Adam, so slot variables exist) on fixed data
(`train_images`, `train_labels`); `reference.npz` then also holds TFM's per-step `losses`, the
loss at the saved weights (`next_loss`), the loss after one more step
(`loss_after_next_step`, which depends on the slots), and the optimizer's `iterations`.
For LARGER_INPUT models, a fine-tuning input at a larger size: `<name>/finetune.tfrecord`
(PNG images, labels), what TFM's own training parser makes of it (augmentation off:
`finetune_images`, `finetune_labels`) and TFM's logits there on the checkpoint's weights
(`finetune_logits`: the position embedding interpolated; no dropout or stochastic depth, so
they are also a first fine-tuning step's).
A model trained under TFM's ExponentialMovingAverage also has `average_logits` (its weights
swapped for the averages).

SEGMENTATION models (DeepLab v3 / v3+: an ASPP decoder and TFM's SegmentationHead, on a dilated
ResNet and on MobileNetV2 at output stride 16; one 48x48 image, narrow) come from TFM's
`factory.build_segmentation_model`, randomised and saved the same way; their `reference.npz`
holds `images`, TFM's `logits`, the backbone `features` the decoder reads and the decoder's
output there (`decoder`). The dilated ResNet's block widths are TFM's spec table with one narrow entry
(`DILATED_SPECS`, model_id `TINY_DILATED_ID`; recorded in index.json for the lite side), as
TFM's dilated ResNet has no width multiplier.
"""

import json
import os
import shutil
import sys

import numpy as np
import tensorflow as tf
import tf_keras

from official.core import exp_factory
from official.modeling import optimization
from official.vision import registry_imports  # noqa: F401  (registers the experiments)
from official.vision.dataloaders import classification_input
from official.vision.modeling import factory
from official.vision.modeling.backbones import resnet_deeplab
from official.vision.modeling.backbones import vit
from tfm_generator_utils import randomize, save_trainer_checkpoint, sgd_momentum_optimizer

SIZE = 32
NUM_CLASSES = 5
HERE = os.path.dirname(os.path.abspath(__file__))
TARGET = os.path.join(HERE, "tfm_checkpoints")

# ViT-Ti/16's layout (patch 16, class token, pre-norm blocks) shrunk to 32 wide, 2 heads,
# 2 blocks, so its checkpoint stays small.
# (TFM's spec table is immutable: its builder's module gets a copy with one more entry.)
vit.VIT_SPECS = dict(vit.VIT_SPECS, **{"vit-ti16-small": dict(
    hidden_size=32, patch_size=16, transformer=dict(mlp_dim=64, num_heads=2, num_layers=2))})

RS = {"replace_stem_max_pool": True, "resnetd_shortcut": True, "se_ratio": 0.25,
      "stem_type": "v1", "stochastic_depth_drop_rate": 0.1}


def classifier(backbone_type, backbone, **model):
    return {"num_classes": NUM_CLASSES, "input_size": [SIZE, SIZE, 3],
            "backbone": {"type": backbone_type, backbone_type: backbone}, **model}


MODELS = {
    # name: (experiment, task.model overrides)
    "resnet50": ("resnet_imagenet", classifier(
        "resnet", {"model_id": 50, "depth_multiplier": 0.03125})),
    "resnet18_v1": ("resnet_imagenet", classifier(
        "resnet", {"model_id": 18, "depth_multiplier": 0.03125, "stem_type": "v1"})),
    "resnetrs50": ("resnet_rs_imagenet", classifier(
        "resnet", dict(RS, model_id=50, depth_multiplier=0.03125), dropout_rate=0.25,
        norm_activation={"activation": "swish", "norm_momentum": 0.0, "use_sync_bn": False})),
    "mobilenetv1": ("mobilenet_imagenet", classifier(
        "mobilenet", {"model_id": "MobileNetV1", "filter_size_scale": 0.03125})),
    "mobilenetv2": ("mobilenet_imagenet", classifier(
        "mobilenet", {"model_id": "MobileNetV2", "filter_size_scale": 0.03125})),
    "mobilenetv3large": ("mobilenet_imagenet", classifier(
        "mobilenet", {"model_id": "MobileNetV3Large", "filter_size_scale": 0.03125},
        norm_activation={"norm_epsilon": 0.001, "norm_momentum": 0.997})),
    "mobilenetv4convsmall": ("mobilenet_imagenet", classifier(
        "mobilenet", {"model_id": "MobileNetV4ConvSmall", "filter_size_scale": 0.03125},
        norm_activation={"norm_epsilon": 1e-6, "norm_momentum": 0.95})),
    "mobilenetv4hybridmedium": ("mobilenet_imagenet", classifier(
        "mobilenet", {"model_id": "MobileNetV4HybridMedium", "filter_size_scale": 0.03125})),
    # With the token pooler, TFM's representation layer (pre_logits: dense + tanh).
    "vit_ti16": ("deit_imagenet_pretrain", classifier(
        "vit", {"model_name": "vit-ti16-small", "pooler": "token",
                "representation_size": 16, "init_stochastic_depth_rate": 0.1,
                "original_init": False})),
    "vit_ti16_gap": ("deit_imagenet_pretrain", classifier(
        "vit", {"model_name": "vit-ti16-small", "pooler": "gap",
                "representation_size": 0, "init_stochastic_depth_rate": 0.1,
                "original_init": False})),
}
# Too large to commit with the others: `--big DIR` only. The full-size dilated ResNet-50 (94 MB;
# TFM's dilated ResNet has no width multiplier), the larger MobileNetV4s (0.5-1.1 MB each even
# narrow: their 1280-wide last layers do not shrink), and MobileNet V3Small and MultiAVG (their
# blocks are V3Large's and V2's, which the committed set tests).
BIG = {
    "dilated_resnet50": ("resnet_imagenet", classifier(
        "dilated_resnet", {"model_id": 50, "output_stride": 16})),
    **{name.lower(): ("mobilenet_imagenet", classifier(
        "mobilenet", {"model_id": name, "filter_size_scale": 0.03125}))
       for name in ("MobileNetV4ConvMedium", "MobileNetV4ConvLarge", "MobileNetV4HybridLarge",
                    "MobileNetV3Small", "MobileNetMultiAVG")},
}
# The lite side builds the ViTs from these sizes (model_name null).
_LITE_VIT = {"backbone": {"vit": {
    "model_name": None, "hidden_size": 32, "patch_size": 16,
    "transformer": {"mlp_dim": 64, "num_heads": 2, "num_layers": 2}}}}
LITE_OVERRIDES = {"vit_ti16": _LITE_VIT, "vit_ti16_gap": _LITE_VIT}

# name: (input size, backbone options): TFM's outputs on the checkpoint's weights at a larger
# input (finetune_input). (TFM interpolates the position embedding only
# without a class token: with the token pooler its layer fails on the longer sequence.)
LARGER_INPUT = {"vit_ti16_gap": (48, {"pos_embed_shape": [SIZE // 16, SIZE // 16],
                                        "init_stochastic_depth_rate": 0.0})}

SEG_SIZE = 48
# TFM's dilated ResNet widths with one narrow entry: (block, filters, repeats) per group; the
# last group has 3 blocks, one per multigrid factor.
TINY_DILATED_ID = 8
DILATED_SPECS = [("bottleneck", 8, 1), ("bottleneck", 8, 2), ("bottleneck", 16, 2),
                 ("bottleneck", 16, 3)]
resnet_deeplab.RESNET_SPECS[TINY_DILATED_ID] = DILATED_SPECS


def segmenter(backbone_type, backbone, decoder, head, **model):
    return {"num_classes": NUM_CLASSES, "input_size": [SEG_SIZE, SEG_SIZE, 3],
            "backbone": {"type": backbone_type, backbone_type: backbone},
            "decoder": {"type": "aspp", "aspp": decoder}, "head": head, **model}


SEGMENTATION = {
    # DeepLab v3+ on the dilated ResNet (TFM's seg_deeplabv3plus_pascal layout): ASPP with
    # atrous branches and global pooling, the head fusing the level-2 features, two convs.
    "seg_dilated_resnet": ("seg_deeplabv3plus_pascal", segmenter(
        "dilated_resnet", {"model_id": TINY_DILATED_ID, "output_stride": 16,
                           "multigrid": [1, 2, 4], "stem_type": "v0"},
        {"level": 4, "dilation_rates": [2, 4], "num_filters": 16, "pool_kernel_size": None},
        {"level": 4, "num_convs": 2, "num_filters": 16, "feature_fusion": "deeplabv3plus",
         "low_level": 2, "low_level_num_filters": 8},
        norm_activation={"activation": "swish", "norm_momentum": 0.9997,
                         "norm_epsilon": 0.001, "use_sync_bn": False})),
    # DeepLab v3 on MobileNetV2 (TFM's mnv2_deeplabv3_pascal layout) with depthwise
    # convolutions in the ASPP's atrous branch and in the head.
    "seg_mobilenetv2": ("mnv2_deeplabv3_pascal", segmenter(
        "mobilenet", {"model_id": "MobileNetV2", "filter_size_scale": 0.03125,
                      "output_stride": 16},
        {"level": 4, "dilation_rates": [2], "num_filters": 8, "pool_kernel_size": None,
         "use_depthwise_convolution": True},
        {"level": 4, "num_convs": 1, "num_filters": 8, "use_depthwise_convolution": True},
        norm_activation={"use_sync_bn": False})),
}

TRAINED = {
    # name: (optimizer config, steps)
    # Under TFM's ExponentialMovingAverage (its averages are optimizer slots 'average').
    "resnet18_v1": ({"optimizer": {"type": "sgd", "sgd": {"momentum": 0.9}},
                     "learning_rate": {"type": "constant", "constant": {"learning_rate": 0.01}},
                     "ema": {"average_decay": 0.5, "dynamic_decay": False}},
                    3),
    "mobilenetv1": ({"optimizer": {"type": "adam", "adam": {}},
                  "learning_rate": {"type": "constant", "constant": {"learning_rate": 1e-4}}},
                 3),
}


def build(experiment, overrides, size=SIZE):
    config = exp_factory.get_exp_config(experiment).task.model
    config.override(overrides, is_strict=True)
    config.input_size = [size, size, 3]
    return factory.build_classification_model(
        input_specs=tf_keras.layers.InputSpec(shape=[None, size, size, 3]),
        model_config=config)


def build_segmenter(experiment, overrides):
    config = exp_factory.get_exp_config(experiment).task.model
    config.override(overrides, is_strict=True)
    return factory.build_segmentation_model(
        input_specs=tf_keras.layers.InputSpec(shape=[None, SEG_SIZE, SEG_SIZE, 3]),
        model_config=config)


def features(model, images):
    endpoints = model.backbone(images, training=False)
    return endpoints[max(endpoints)] if isinstance(endpoints, dict) else endpoints


def loss_of(model, out):
    logits = model(out["train_images"], training=False)
    return tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
        out["train_labels"], logits, from_logits=True))


def make(name, experiment, overrides, rng, target=TARGET):
    tf_keras.backend.clear_session()
    model = build(experiment, overrides)
    randomize(model, rng)
    images = rng.uniform(-1.0, 1.0, (2, SIZE, SIZE, 3)).astype(np.float32)
    out = {"images": images}
    global_step = tf.Variable(0, dtype=tf.int64, name="global_step")
    if name in TRAINED:
        opt_config, steps = TRAINED[name]
        factory_ = optimization.OptimizerFactory(optimization.OptimizationConfig(opt_config))
        optimizer = factory_.build_optimizer(factory_.build_learning_rate())
        if hasattr(optimizer, "shadow_copy"):  # EMA: as TFM's Trainer does
            optimizer.shadow_copy(model)
        train_images = rng.uniform(-1.0, 1.0, (4, SIZE, SIZE, 3)).astype(np.float32)
        train_labels = rng.integers(0, NUM_CLASSES, (4,)).astype(np.int32)

        def step():
            with tf.GradientTape() as tape:
                logits = model(train_images, training=False)
                loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
                    train_labels, logits, from_logits=True))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            global_step.assign_add(1)
            return float(loss)

        out["losses"] = np.array([step() for _ in range(steps)], np.float32)
        out.update(train_images=train_images, train_labels=train_labels,
                   iterations=np.int64(optimizer.iterations.numpy()))
    else:
        optimizer = sgd_momentum_optimizer()
        global_step.assign(7)
    out["logits"] = model(images, training=False).numpy()
    out["features"] = features(model, images).numpy()
    if hasattr(optimizer, "swap_weights") and getattr(optimizer, "has_shadow_copy", False):
        # TFM's evaluation / export weights: its averages (the 'average' slots) in place of
        # the trainable weights (what its swap_weights does, which needs a strategy).
        raw = [v.numpy() for v in model.trainable_variables]
        for v in model.trainable_variables:
            v.assign(optimizer.get_slot(v, "average"))
        out["average_logits"] = model(images, training=False).numpy()
        for v, value in zip(model.trainable_variables, raw):
            v.assign(value)
    directory = os.path.join(target, name)
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    if name in LARGER_INPUT:
        # The same weights in TFM's model at a larger input: its position embedding keeps the
        # checkpoint's grid (pos_embed_shape) and is interpolated to the larger one.
        size, vit_options = LARGER_INPUT[name]
        larger = build(experiment, dict(overrides, backbone={"type": "vit", "vit": dict(
            overrides["backbone"]["vit"], **vit_options)}), size)
        larger.set_weights(model.get_weights())
        out.update(finetune_input(larger, size, directory, rng))
    save_trainer_checkpoint(directory, global_step, model, optimizer)
    saved_step = int(global_step.numpy())
    if name in TRAINED:
        # Where a resumed run continues: the loss at the saved weights, and the loss after
        # one more step (which depends on the optimizer's slots and iterations).
        out["next_loss"] = np.float32(loss_of(model, out))
        step()
        out["loss_after_next_step"] = np.float32(loss_of(model, out))
    np.savez(os.path.join(directory, "reference.npz"), **out)
    print(name, model.count_params(), out["logits"].shape, out["features"].shape,
          out.get("losses"), flush=True)
    return {"experiment": experiment, "model": overrides,
            "lite_model": LITE_OVERRIDES.get(name, {}),
            "params": int(model.count_params()), "global_step": saved_step,
            "optimizer": TRAINED[name][0] if name in TRAINED else None}


def finetune_input(larger, size, directory, rng):
    """`finetune.tfrecord` in `directory` (2 PNG images, labels 0 and 1), what TFM's training
    parser (augmentation off) makes of it, and `larger`'s logits on that."""
    path = os.path.join(directory, "finetune.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for label in range(2):
            image = rng.integers(0, 256, (size, size, 3)).astype(np.uint8)
            feature = {
                "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(
                    value=[tf.io.encode_png(image).numpy()])),
                "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(
                    value=[label]))}
            writer.write(tf.train.Example(
                features=tf.train.Features(feature=feature)).SerializeToString())
    decoder = classification_input.Decoder()
    parser = classification_input.Parser(
        output_size=[size, size], num_classes=NUM_CLASSES, decode_jpeg_only=False,
        aug_rand_hflip=False, aug_crop=False)
    parse = parser.parse_fn(is_training=True)
    parsed = [parse(decoder.decode(record)) for record in tf.data.TFRecordDataset(path)]
    images = np.stack([image.numpy() for image, _ in parsed])
    labels = np.array([int(label) for _, label in parsed], np.int32)
    return {"finetune_images": images, "finetune_labels": labels,
            "finetune_logits": larger(images, training=False).numpy()}


def make_segmenter(name, experiment, overrides, rng, target=TARGET):
    tf_keras.backend.clear_session()
    model = build_segmenter(experiment, overrides)
    randomize(model, rng)
    images = rng.uniform(-1.0, 1.0, (1, SEG_SIZE, SEG_SIZE, 3)).astype(np.float32)
    backbone = model.backbone(images, training=False)
    decoded = model.decoder(backbone, training=False)
    level = str(overrides["decoder"]["aspp"]["level"])
    out = {"images": images, "logits": model(images, training=False)["logits"].numpy(),
           "features": backbone[level].numpy(), "decoder": decoded[level].numpy()}
    global_step = tf.Variable(11, dtype=tf.int64, name="global_step")
    optimizer = optimization.OptimizerFactory(optimization.OptimizationConfig(
        {"optimizer": {"type": "sgd", "sgd": {"momentum": 0.9}},
         "learning_rate": {"type": "constant", "constant": {"learning_rate": 0.1}}}))
    optimizer = optimizer.build_optimizer(0.1)
    directory = os.path.join(target, name)
    shutil.rmtree(directory, ignore_errors=True)
    checkpoint = tf.train.Checkpoint(global_step=global_step, model=model,
                                     optimizer=optimizer, **model.checkpoint_items)
    tf.train.CheckpointManager(checkpoint, directory, max_to_keep=1, step_counter=global_step,
                               checkpoint_name="ckpt").save(checkpoint_number=global_step)
    np.savez(os.path.join(directory, "reference.npz"), **out)
    print(name, model.count_params(), out["logits"].shape, out["decoder"].shape, flush=True)
    entry = {"experiment": experiment, "model": overrides, "lite_model": {},
             "params": int(model.count_params()), "global_step": 11}
    if overrides["backbone"]["type"] == "dilated_resnet":
        entry["dilated_resnet_specs"] = {str(TINY_DILATED_ID): DILATED_SPECS}
    return entry


def main(argv):
    """`--big DIR`: write BIG's models into DIR instead (too large to commit; the tests read
    them from $LITE_TFM_BIG_CHECKPOINTS)."""
    models, target = MODELS, TARGET
    if "--big" in argv:
        models, target = BIG, argv[argv.index("--big") + 1]
    os.makedirs(target, exist_ok=True)
    rng = np.random.default_rng(29)
    index = {"input_size": SIZE, "num_classes": NUM_CLASSES, "models": {}}
    for name, (experiment, overrides) in models.items():
        index["models"][name] = make(name, experiment, overrides, rng, target)
    if target == TARGET:
        index["segmentation"] = {"input_size": SEG_SIZE, "models": {
            name: make_segmenter(name, experiment, overrides, rng, target)
            for name, (experiment, overrides) in SEGMENTATION.items()}}
    with open(os.path.join(target, "index.json"), "w") as f:
        json.dump(index, f, indent=1, sort_keys=True)
        f.write("\n")
    print(target)


if __name__ == "__main__":
    main(sys.argv[1:])
