"""Writes tfm_2_20_convnet_counts.json: TFM 2.20's numbers for the convnet models of TFM's
image-classification experiment YAMLs (official/vision/configs/experiments/
image_classification/ in tensorflow/models).

Run once with TFM 2.20 (tf-models-official 2.20, tensorflow 2.20, tf_keras):

    /work/tfm_venv/bin/python tests/vision/data/make_tfm_convnet_counts.py [--missing]

For each YAML: the experiment it runs under, its `task.model` keys (transcribed below, the
rest comes from the experiment's defaults) and `task.losses.l2_weight_decay`, and what TFM's
`build_classification_model` makes of them: `params` (the whole classifier, at the YAML's input
size), `backbone_params`, and `l2_terms` (len(model.losses) with l2_weight_decay 1e-5, so the
regularised layers are counted even where the YAML turns decay off). `endpoints` (backbone
output shapes at a 64x64 input) are written for the MobileNet and dilated ResNet models, and
`EXTRA` adds backbone options the YAMLs do not use but TFM's backbone code reads
(output_stride, output_intermediate_endpoints). For the YAML TFM refuses, `refused_by_tfm`
holds TFM's error and the counts are those of its `task.model`.
"""

import json
import os
import sys

import tf_keras
from official.core import exp_factory
from official.vision.modeling import factory

RS = {"replace_stem_max_pool": True, "resnetd_shortcut": True, "se_ratio": 0.25,
      "stem_type": "v1"}
SWISH_RS = {"activation": "swish", "norm_momentum": 0.0, "use_sync_bn": False}
MN_NORM = {"norm_epsilon": 0.001, "norm_momentum": 0.997}


def resnet(model_id, size, l2, activation=None, **options):
    model = {"num_classes": 1001, "input_size": [size, size, 3],
             "backbone": {"type": "resnet", "resnet": {"model_id": model_id, **options}}}
    if activation:
        model["norm_activation"] = {"activation": activation}
    return "resnet_imagenet", model, l2


def resnet_rs(model_id, size, drop_rate, dropout):
    model = {"num_classes": 1001, "input_size": [size, size, 3], "dropout_rate": dropout,
             "backbone": {"type": "resnet", "resnet": {
                 "model_id": model_id, "stochastic_depth_drop_rate": drop_rate, **RS}},
             "norm_activation": SWISH_RS}
    return "resnet_rs_imagenet", model, 4e-5


def mobilenet(model_id, size, l2, norm=None, dropout=0.2, **options):
    model = {"num_classes": 1001, "input_size": [size, size, 3], "dropout_rate": dropout,
             "backbone": {"type": "mobilenet", "mobilenet": {"model_id": model_id, **options}}}
    if norm:
        model["norm_activation"] = norm
    return "mobilenet_imagenet", model, l2


def dilated(model_id, **options):
    model = {"num_classes": 1001, "input_size": [224, 224, 3],
             "backbone": {"type": "dilated_resnet", "dilated_resnet": {
                 "model_id": model_id, "output_stride": 16, **options}},
             "norm_activation": {"activation": "swish"}}
    return "resnet_imagenet", model, 1e-4 if not options else 4e-5


MNV4_SD = {"flat_stochastic_depth_drop_rate": False, "stochastic_depth_drop_rate": 0.075}

YAMLS = {
    "imagenet_mobilenetv1_tpu.yaml": mobilenet("MobileNetV1", 224, 1e-5, filter_size_scale=1.0),
    "imagenet_mobilenetv2_gpu.yaml": mobilenet("MobileNetV2", 224, 1e-5, filter_size_scale=1.0),
    "imagenet_mobilenetv2_tpu.yaml": mobilenet("MobileNetV2", 224, 1e-5, filter_size_scale=1.0),
    # TFM refuses this YAML (its norm_activation sits under task.losses); its model counted.
    "imagenet_mobilenetv3.5_avg_tpu.yaml": mobilenet(
        "MobileNetMultiAVG", 224, 1e-5, filter_size_scale=1.0, stochastic_depth_drop_rate=0.0),
    "imagenet_mobilenetv3.5_avgseg_tpu.yaml": mobilenet(
        "MobileNetMultiAVGSeg", 224, 1e-5, dict(MN_NORM, activation="relu", use_sync_bn=False),
        filter_size_scale=1.0, stochastic_depth_drop_rate=0.0),
    "imagenet_mobilenetv3large_tpu.yaml": mobilenet(
        "MobileNetV3Large", 224, 0.0, MN_NORM, filter_size_scale=1.0),
    "imagenet_mobilenetv3small_tpu.yaml": mobilenet(
        "MobileNetV3Small", 224, 1e-5, dict(MN_NORM, activation="relu", use_sync_bn=False),
        filter_size_scale=1.0),
    "imagenet_mobilenetv4_conv_large_tpu.yaml": mobilenet(
        "MobileNetV4ConvLarge", 384, 0.0, MN_NORM, flat_stochastic_depth_drop_rate=True,
        stochastic_depth_drop_rate=0.2),
    "imagenet_mobilenetv4_conv_medium_seg_tpu.yaml": mobilenet(
        "MobileNetV4ConvMediumSeg", 256, 0.0, MN_NORM, **MNV4_SD),
    "imagenet_mobilenetv4_conv_medium_tpu.yaml": mobilenet(
        "MobileNetV4ConvMedium", 256, 0.0, MN_NORM, **MNV4_SD),
    "imagenet_mobilenetv4_conv_small_tpu.yaml": mobilenet(
        "MobileNetV4ConvSmall", 224, 1e-5, {"norm_epsilon": 1e-6, "norm_momentum": 0.95},
        dropout=0.3),
    "imagenet_mobilenetv4_hybrid_large_tpu.yaml": mobilenet(
        "MobileNetV4HybridLarge", 384, 0.0, MN_NORM, flat_stochastic_depth_drop_rate=False,
        stochastic_depth_drop_rate=0.35),
    "imagenet_mobilenetv4_hybrid_medium_tpu.yaml": mobilenet(
        "MobileNetV4HybridMedium", 256, 0.0, {"norm_momentum": 0.997}, **MNV4_SD),
    "imagenet_resnet101_deeplab_tpu.yaml": dilated(
        101, stem_type="v1", se_ratio=0.25, stochastic_depth_drop_rate=0.2,
        multigrid=[1, 2, 4], last_stage_repeats=1),
    "imagenet_resnet101_tpu.yaml": resnet(101, 224, 1e-4, "swish"),
    "imagenet_resnet152_tpu.yaml": resnet(152, 224, 1e-4, "swish"),
    "imagenet_resnet26_tpu.yaml": resnet(26, 224, 1e-4),
    "imagenet_resnet50_deeplab_tpu.yaml": dilated(50),
    "imagenet_resnet50_gpu.yaml": resnet(50, 224, 1e-4),
    "imagenet_resnet50_tpu.yaml": resnet(50, 224, 1e-4),
    "imagenet_resnetrs101_i160.yaml": resnet_rs(101, 160, 0.0, 0.25),
    "imagenet_resnetrs101_i192.yaml": resnet_rs(101, 192, 0.0, 0.25),
    "imagenet_resnetrs152_i192.yaml": resnet_rs(152, 192, 0.0, 0.25),
    "imagenet_resnetrs152_i224.yaml": resnet_rs(152, 224, 0.0, 0.25),
    "imagenet_resnetrs152_i256.yaml": resnet_rs(152, 256, 0.0, 0.25),
    "imagenet_resnetrs200_i256.yaml": resnet_rs(200, 256, 0.1, 0.25),
    "imagenet_resnetrs270_i256.yaml": resnet_rs(270, 256, 0.1, 0.25),
    "imagenet_resnetrs350_i256.yaml": resnet_rs(350, 256, 0.1, 0.25),
    "imagenet_resnetrs350_i320.yaml": resnet_rs(350, 320, 0.1, 0.4),
    "imagenet_resnetrs420_i320.yaml": resnet_rs(420, 320, 0.1, 0.4),
    "imagenet_resnetrs50_i160.yaml": resnet_rs(50, 160, 0.0, 0.25),
    "imagenet_resnetrs50_i160_gpu.yaml": resnet_rs(50, 160, 0.0, 0.25),
}

# Backbone options TFM's code reads that no YAML sets (endpoints only).
EXTRA = {
    "MobileNetV2 output_stride 16": mobilenet("MobileNetV2", 224, 1e-5, output_stride=16),
    "MobileNetV2 intermediate endpoints": mobilenet(
        "MobileNetV2", 224, 1e-5, output_intermediate_endpoints=True),
    "MobileNetV3Large": mobilenet("MobileNetV3Large", 224, 1e-5),
    "MobileNetV1 output_stride 8": mobilenet("MobileNetV1", 224, 1e-5, output_stride=8),
    "MobileNetV4ConvSmall output_stride 16": mobilenet(
        "MobileNetV4ConvSmall", 224, 1e-5, output_stride=16),
}

# The part of a YAML TFM refuses, and the experiment it is loaded under.
REFUSED = {"imagenet_mobilenetv3.5_avg_tpu.yaml": (
    "mobilenet_imagenet", {"task": {"losses": {"norm_activation": {
        "activation": "relu", "norm_epsilon": 0.001, "norm_momentum": 0.997,
        "use_sync_bn": False}}}})}

ENDPOINT_SIZE = 64


def build(experiment, model_overrides, l2, size=None):
    config = exp_factory.get_exp_config(experiment).task.model
    config.override(model_overrides, is_strict=True)
    shape = [size, size, 3] if size else list(config.input_size)
    regularizer = tf_keras.regularizers.l2(l2 / 2.0) if l2 else None
    return factory.build_classification_model(
        input_specs=tf_keras.layers.InputSpec(shape=[None] + shape),
        model_config=config, l2_regularizer=regularizer)


def endpoints(experiment, model_overrides):
    backbone = build(experiment, model_overrides, 0.0, ENDPOINT_SIZE).backbone
    outputs = backbone(tf_keras.Input([ENDPOINT_SIZE, ENDPOINT_SIZE, 3]))
    return {k: list(v.shape[1:]) for k, v in sorted(outputs.items())}


def refusal(experiment, overrides):
    """TFM's error for `overrides`, or None when TFM accepts them."""
    try:
        exp_factory.get_exp_config(experiment).override(overrides, is_strict=True)
    except (KeyError, ValueError) as e:
        return f"{type(e).__name__}: {e}"
    return None


def main(argv):
    """`--missing`: keep the entries already in the json, compute only the others."""
    target = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                          "tfm_2_20_convnet_counts.json")
    out = {"models": {}, "extra_endpoints": {}, "endpoint_input_size": ENDPOINT_SIZE}
    if "--missing" in argv and os.path.exists(target):
        with open(target) as f:
            out = json.load(f)
    for name, (experiment, model, l2) in YAMLS.items():
        if name in out["models"]:
            continue
        tf_keras.backend.clear_session()
        classifier = build(experiment, model, l2)
        entry = {"experiment": experiment, "model": model, "l2_weight_decay": l2,
                 "params": classifier.count_params(),
                 "backbone_params": classifier.backbone.count_params(),
                 "l2_terms": len(build(experiment, model, 1e-5).losses)}
        if model["backbone"]["type"] != "resnet":
            entry["endpoints"] = endpoints(experiment, model)
        if name in REFUSED:
            entry["refused_by_tfm"] = refusal(*REFUSED[name])
        out["models"][name] = entry
        print(name, entry["params"], entry["l2_terms"], flush=True)
    for name, (experiment, model, _) in EXTRA.items():
        if name in out["extra_endpoints"]:
            continue
        tf_keras.backend.clear_session()
        out["extra_endpoints"][name] = {"experiment": experiment, "model": model,
                                        "endpoints": endpoints(experiment, model)}
        print(name, out["extra_endpoints"][name]["endpoints"], flush=True)
    with open(target, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")
    print(target)


if __name__ == "__main__":
    main(sys.argv[1:])
