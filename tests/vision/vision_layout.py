"""What users' saved weights depend on, for one small model of each vision family.

`layout(model, directory)`: the model's weights in creation order as (path, shape), and the keys
and shapes of a tf.train.Checkpoint(model=..., backbone=...) written to `directory` (what
lite's Trainer saves, read back with tf.train.list_variables). `MODELS` names the models; the
recorded layout of the code before the vision-layers refactor is
data/vision_layout_reference.json (made by data/make_vision_layout_reference.py).
"""

import os

import tensorflow as tf

from lite_launcher.vision import configs, modeling

# name -> (experiment factory, task.model override). Every block class, with and without its
# options (SE, ResNet-D, dilation, layer scale, attention, fused / UIB), is in one of them.
MODELS = {
    "resnet18": (configs.resnet_imagenet, {"backbone": {"resnet": {"model_id": 18}}}),
    "resnet_rs50_x0.25": (configs.resnet_rs_imagenet, {"backbone": {"resnet": {
        "model_id": 50, "depth_multiplier": 0.25}}}),
    "dilated_resnet50": (configs.resnet_imagenet, {"backbone": {
        "type": "dilated_resnet", "dilated_resnet": {
            "model_id": 50, "output_stride": 16, "multigrid": [1, 2, 4], "stem_type": "v1",
            "se_ratio": 0.25, "resnetd_shortcut": True, "replace_stem_max_pool": True,
            "stochastic_depth_drop_rate": 0.1}}}),
    "mobilenet_v1": (configs.mobilenet_imagenet, {"backbone": {"mobilenet": {
        "model_id": "MobileNetV1"}}}),
    "mobilenet_v2": (configs.mobilenet_imagenet, {"backbone": {"mobilenet": {
        "model_id": "MobileNetV2"}}}),
    "mobilenet_v3_small": (configs.mobilenet_imagenet, {"backbone": {"mobilenet": {
        "model_id": "MobileNetV3Small"}}}),
    "mobilenet_v4_conv_small": (configs.mobilenet_imagenet, {"backbone": {"mobilenet": {
        "model_id": "MobileNetV4ConvSmall", "stochastic_depth_drop_rate": 0.1}}}),
    "mobilenet_v4_hybrid_medium_x0.5": (configs.mobilenet_imagenet, {"backbone": {"mobilenet": {
        "model_id": "MobileNetV4HybridMedium", "filter_size_scale": 0.5}}}),
    "vit_ti16_layer_scale": (configs.deit_imagenet_pretrain, {"backbone": {"vit": {
        "model_name": "vit-ti16", "layer_scale_init_value": 0.1,
        "representation_size": 64}}}),
}
INPUT_SIZE = {"vit_ti16_layer_scale": [224, 224, 3]}  # the position table's grid


def build(name):
    """The classifier MODELS[name] describes (10 classes, 64x64 inputs unless INPUT_SIZE)."""
    factory, override = MODELS[name]
    config = factory().task.model
    config.override(override)
    config.num_classes = 10
    config.input_size = INPUT_SIZE.get(name, [64, 64, 3])
    return modeling.build_classification_model(config, l2_weight_decay=1e-5)


def layout(model, directory):
    """{'weights': [[path, shape], ...] in order, 'checkpoint': [[key, shape], ...] sorted}."""
    prefix = tf.train.Checkpoint(model=model, **model.checkpoint_items).write(
        os.path.join(directory, "ckpt"))
    return {"weights": [[w.path, list(w.shape)] for w in model.weights],
            "checkpoint": sorted([key, list(shape)]
                                 for key, shape in tf.train.list_variables(prefix))}
