"""Writes vit_tfm_numbers.json: TFM 2.20's numbers that pin lite_launcher's ViT to TFM's.

Run once in a venv with tf-models-official 2.20 (tensorflow 2.20, tf_keras):

    /work/tfm_venv/bin/python tests/vision/data/make_vit_tfm_numbers.py

1. "models": for each of the 14 ViT / DeiT YAMLs of TFM's
   official/vision/configs/experiments/image_classification/, the `task.model` values the YAML
   sets (read from the YAML in the tensorflow/models repository and written out here by hand),
   applied over the defaults of the experiment the YAML names; the classifier TFM builds from
   them (official.vision.modeling.factory) and its parameter counts (whole model, backbone).
2. "tiny": the parameter counts of TFM's classifier for the 2-block, 16-wide ViT of
   tests/vision/test_vit.py (`tiny_config`: patch 8, MLP 32, 2 heads, 10 classes, under
   deit_imagenet_pretrain) at two input sizes and with each option that adds weights
   (representation_size, layer_scale_init_value) or removes them (pooler 'gap': no class
   token). TFM's builder takes its sizes from a `model_name` spec, so the tiny sizes are added
   as one more spec, TINY_NAME.
3. "interpolation": TFM's position-embedding interpolation (`AddPositionEmbs._interpolate`,
   used when a ViT runs at another input size than its `pos_embed_shape`) on small random
   grids: the input embedding and TFM's result.
"""

import json
import os

import numpy as np
import tensorflow as tf
import tf_keras

from official.core import exp_factory
from official.vision import registry_imports  # noqa: F401  (registers the experiments)
from official.vision.modeling import factory
from official.vision.modeling.backbones import vit

# The `task.model` block of each YAML (every ViT YAML also sets dropout_rate 0.0,
# kernel_initializer zeros, num_classes 1001, original_init false, init_stochastic_depth_rate
# 0.1 and the norm_activation block, none of which changes a parameter count).
_COMMON_VIT = {"init_stochastic_depth_rate": 0.1, "original_init": False}
YAMLS = {
    # name: (experiment, model_name, patch_size, representation_size or None (unset), size)
    "imagenet_vitti16_i224_gpu.yaml": ("deit_imagenet_pretrain", "vit-ti16", 16, None, 224),
    "imagenet_vitti16_i224_tpu.yaml": ("deit_imagenet_pretrain", "vit-ti16", 16, None, 224),
    "imagenet_vits16_i224_gpu.yaml": ("deit_imagenet_pretrain", "vit-s16", 16, None, 224),
    "imagenet_vits16_i224_tpu.yaml": ("deit_imagenet_pretrain", "vit-s16", 16, None, 224),
    "imagenet_vitb16_i224_gpu.yaml": ("deit_imagenet_pretrain", "vit-b16", 16, 0, 224),
    "imagenet_vitb16_i224_tpu.yaml": ("deit_imagenet_pretrain", "vit-b16", 16, 0, 224),
    "imagenet_vitb16_i384_gpu.yaml": ("deit_imagenet_pretrain", "vit-b16", 16, 0, 384),
    "imagenet_vitb16_i384_tpu.yaml": ("vit_imagenet_finetune", "vit-b16", 16, 0, 384),
    "imagenet_vitl16_i224_gpu.yaml": ("deit_imagenet_pretrain", "vit-l16", 16, None, 224),
    "imagenet_vitl16_i224_tpu.yaml": ("deit_imagenet_pretrain", "vit-l16", 16, None, 224),
    "imagenet_vitl16_i384_gpu.yaml": ("vit_imagenet_finetune", "vit-l16", 16, 0, 384),
    "imagenet_vitl16_i384_tpu.yaml": ("vit_imagenet_finetune", "vit-l16", 16, 0, 384),
    # The ViT-H YAMLs say patch_size 16; TFM's spec for vit-h14 overrides it with 14.
    "imagenet_vith14_i384_gpu.yaml": ("vit_imagenet_finetune", "vit-h14", 16, 0, 384),
    "imagenet_vith14_i384_tpu.yaml": ("vit_imagenet_finetune", "vit-h14", 16, 0, 384),
}


def model_override(model_name, patch_size, representation_size, size):
    vit_block = {**_COMMON_VIT, "model_name": model_name, "patch_size": patch_size}
    if representation_size is not None:
        vit_block["representation_size"] = representation_size
    return {"num_classes": 1001, "input_size": [size, size, 3], "dropout_rate": 0.0,
            "kernel_initializer": "zeros", "backbone": {"type": "vit", "vit": vit_block}}


def count_models():
    cache, out = {}, {}
    for name, (experiment, model_name, patch, rep, size) in YAMLS.items():
        override = model_override(model_name, patch, rep, size)
        config = exp_factory.get_exp_config(experiment)
        config.task.model.override(override)
        key = json.dumps(config.task.model.as_dict(), sort_keys=True)
        if key not in cache:
            tf_keras.backend.clear_session()
            model = factory.build_classification_model(
                tf_keras.layers.InputSpec(shape=[None, size, size, 3]), config.task.model)
            spec = vit.VIT_SPECS[model_name]
            cache[key] = {
                "params": int(model.count_params()),
                "backbone_params": int(model.backbone.count_params()),
                "hidden_size": spec["hidden_size"], "patch_size": spec["patch_size"],
                "representation_size": config.task.model.backbone.vit.representation_size,
            }
            del model
            print(name, cache[key], flush=True)
        out[name] = {"experiment": experiment, "model_override": override, **cache[key]}
    return out


TINY_NAME = "lite-test-tiny"
TINY_SPEC = {"hidden_size": 16, "patch_size": 8,
             "transformer": {"mlp_dim": 32, "num_heads": 2, "num_layers": 2}}
# name: (input size, vit options besides model_name)
TINY = {
    "32": (32, {}),
    "48": (48, {}),
    "representation_size 24": (32, {"representation_size": 24}),
    "layer_scale_init_value 0.1": (32, {"layer_scale_init_value": 0.1}),
    "pooler gap": (32, {"pooler": "gap"}),
}


def count_tiny():
    vit.VIT_SPECS = {**vit.VIT_SPECS, TINY_NAME: TINY_SPEC}
    out = {}
    for name, (size, options) in TINY.items():
        config = exp_factory.get_exp_config("deit_imagenet_pretrain")
        config.task.model.override({
            "num_classes": 10, "input_size": [size, size, 3],
            "backbone": {"type": "vit", "vit": {"model_name": TINY_NAME,
                                                "representation_size": 0, **options}}})
        tf_keras.backend.clear_session()
        model = factory.build_classification_model(
            tf_keras.layers.InputSpec(shape=[None, size, size, 3]), config.task.model)
        out[name] = {"size": size, "vit": options, "params": int(model.count_params()),
                     "backbone_params": int(model.backbone.count_params())}
        print(name, out[name], flush=True)
    return out


def interpolations():
    rng = np.random.default_rng(0)
    cases = []
    for from_shape, to_shape, dim in (((3, 3), (5, 5), 4), ((2, 3), (4, 5), 3),
                                      ((4, 4), (2, 2), 2)):
        emb = rng.standard_normal((1, from_shape[0] * from_shape[1], dim)).astype(np.float32)
        layer = vit.AddPositionEmbs(posemb_origin_shape=from_shape, posemb_target_shape=to_shape)
        result = layer._interpolate(tf.constant(emb), from_shape, to_shape).numpy()
        cases.append({"from_shape": list(from_shape), "to_shape": list(to_shape),
                      "embedding": emb.tolist(), "tfm_result": result.tolist()})
    return cases


def main():
    numbers = {"tfm_version": "tf-models-official 2.20, tensorflow " + tf.__version__,
               "interpolation": interpolations(), "models": count_models(),
               "tiny_spec": TINY_SPEC, "tiny": count_tiny()}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vit_tfm_numbers.json")
    with open(path, "w") as f:
        json.dump(numbers, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
