"""TFM's convnet zoo as lite builds it: parameter counts, L2 terms and endpoints equal TFM
2.20's for the model of every convnet YAML of TFM's image-classification zoo (numbers in
tests/vision/data/tfm_2_20_convnet_counts.json, made in TFM's venv by
make_tfm_convnet_counts.py); Keras serialisation of every custom layer and of the model."""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from lite_launcher.vision import configs, mobilenet, modeling, resnet

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "data", "tfm_2_20_convnet_counts.json")) as f:
    TFM = json.load(f)
SIZE = TFM["endpoint_input_size"]
EXPERIMENTS = {"resnet_imagenet": configs.resnet_imagenet,
               "resnet_rs_imagenet": configs.resnet_rs_imagenet,
               "mobilenet_imagenet": configs.mobilenet_imagenet}
# Options that change neither the parameters nor the L2 terms nor the shapes.
NO_WEIGHTS = ("stochastic_depth_drop_rate", "flat_stochastic_depth_drop_rate")


def _weights_key(entry):
    backbone = entry["model"]["backbone"]
    options = {k: v for k, v in backbone[backbone["type"]].items() if k not in NO_WEIGHTS}
    return json.dumps([entry["experiment"], backbone["type"], options], sort_keys=True)


def _unique_models():
    """One YAML per distinct model (ResNet-RS-152 at 192, 224 and 256 is counted once)."""
    seen = {}
    for name, entry in sorted(TFM["models"].items()):
        seen.setdefault(_weights_key(entry), (name, entry))
    return sorted(seen.values())


def _lite_model(entry, l2_weight_decay=1e-5):
    config = EXPERIMENTS[entry["experiment"]]().task.model
    config.override(entry["model"])
    config.input_size = [SIZE, SIZE, 3]  # counts do not depend on the input size
    return modeling.build_classification_model(config, l2_weight_decay)


def test_every_convnet_yaml_of_tfms_zoo_is_counted():
    # 32 convnet YAMLs; TFM itself refuses imagenet_mobilenetv3.5_avg_tpu.yaml, whose model
    # (MobileNetMultiAVG) is counted from its task.model alone.
    assert len(TFM["models"]) == 32
    assert TFM["models"]["imagenet_mobilenetv3.5_avg_tpu.yaml"]["refused_by_tfm"]


def _is_resnet(entry):
    return entry["model"]["backbone"]["type"] in ("resnet", "dilated_resnet")


MOBILENETS = [m for m in _unique_models() if not _is_resnet(m[1])]
RESNETS = [m for m in _unique_models() if _is_resnet(m[1])]


def _regularised_weights(model):
    """How many weights carry an L2 regulariser: len(model.losses), without their values."""
    return sum(1 for w in model.weights if getattr(w, "regularizer", None) is not None)


def _stateless_counts(entry):
    """(params, backbone params, L2 terms), endpoint shapes of lite's whole model for `entry`,
    its variables never initialised (shapes only): ResNet-RS-420 builds in a few seconds so,
    against ~12 s initialised."""
    with keras.StatelessScope(initialize_variables=False):
        model = _lite_model(entry)
        counts = (model.count_params(), model.backbone.count_params(),
                  _regularised_weights(model))
        shapes = {k: list(v.shape[1:]) for k, v in model.backbone.output.items()}
    keras.backend.clear_session()  # drops Keras's list of the uninitialised variables
    return counts, shapes


# The biggest models of a family whose smaller member the suite counts are `release` (seconds
# each to build); their sibling builds the same blocks through the same builder.
_SUITE_SIBLING = {
    "imagenet_mobilenetv4_hybrid_large_tpu.yaml": "imagenet_mobilenetv4_hybrid_medium_tpu.yaml",
    "imagenet_mobilenetv4_conv_large_tpu.yaml": "imagenet_mobilenetv4_conv_small_tpu.yaml",
    "imagenet_mobilenetv4_conv_medium_tpu.yaml": "imagenet_mobilenetv4_conv_small_tpu.yaml",
    "imagenet_mobilenetv4_conv_medium_seg_tpu.yaml": "imagenet_mobilenetv4_conv_small_tpu.yaml",
    "imagenet_resnetrs420_i320.yaml": "imagenet_resnetrs152_i192.yaml",
    "imagenet_resnetrs350_i256.yaml": "imagenet_resnetrs152_i192.yaml",
    "imagenet_resnetrs270_i256.yaml": "imagenet_resnetrs152_i192.yaml",
    "imagenet_resnetrs200_i256.yaml": "imagenet_resnetrs152_i192.yaml",
}


def _params(models, test):
    """pytest params of `models`, those in _SUITE_SIBLING marked `release` naming theirs."""
    node = f"tests/vision/test_vision_zoo_models.py::{test}"
    return [pytest.param(name, entry, id=name, marks=[pytest.mark.release(
        sibling=f"{node}[{_SUITE_SIBLING[name]}]")] if name in _SUITE_SIBLING else [])
        for name, entry in models]


@pytest.mark.parametrize("name, entry", _params(
    MOBILENETS, "test_mobilenet_parameters_l2_terms_and_endpoints_equal_tfms"))
def test_mobilenet_parameters_l2_terms_and_endpoints_equal_tfms(name, entry):
    counts, shapes = _stateless_counts(entry)
    # TFM regularises convolution and dense kernels, not depthwise kernels or attention.
    assert counts == (entry["params"], entry["backbone_params"], entry["l2_terms"]), name
    assert shapes == entry["endpoints"], name


@pytest.mark.parametrize("name, entry", _params(
    RESNETS, "test_resnet_parameters_l2_terms_and_endpoints_equal_tfms"))
def test_resnet_parameters_l2_terms_and_endpoints_equal_tfms(name, entry):
    counts, shapes = _stateless_counts(entry)
    assert counts == (entry["params"], entry["backbone_params"], entry["l2_terms"]), name
    if "endpoints" in entry:  # the dilated ResNets
        assert shapes == entry["endpoints"], name


@pytest.mark.parametrize("name", ["imagenet_resnet26_tpu.yaml",
                                  "imagenet_mobilenetv3small_tpu.yaml"])
def test_regularised_weights_count_the_l2_terms(name):
    # The count above without values equals len(model.losses) of an initialised model
    # (a ResNet, and a MobileNet with depthwise kernels and squeeze-excitation).
    entry = TFM["models"][name]
    model = _lite_model(entry)
    assert _regularised_weights(model) == len(model.losses) == entry["l2_terms"]


# The options no YAML sets (MobileNetV3Large's plain endpoints are its YAML's, checked above).
EXTRAS = sorted(n for n, e in TFM["extra_endpoints"].items()
                if set(e["model"]["backbone"]["mobilenet"]) - {"model_id"})


@pytest.mark.parametrize("name", EXTRAS)
def test_output_stride_and_intermediate_endpoints_as_tfm(name):
    entry = TFM["extra_endpoints"][name]
    config = configs.mobilenet_imagenet().task.model
    config.override(entry["model"])
    backbone = modeling.build_backbone([SIZE, SIZE, 3], config.backbone,
                                       modeling.NormSettings())
    shapes = {k: list(v.shape[1:]) for k, v in backbone.output.items()}
    assert shapes == entry["endpoints"]


def test_no_depthwise_kernel_is_regularised():
    entry = TFM["models"]["imagenet_mobilenetv2_tpu.yaml"]
    model = _lite_model(entry)
    depthwise = [l for b in model.backbone.layers for l in b._flatten_layers()
                 if isinstance(l, keras.layers.DepthwiseConv2D)]
    assert len(depthwise) == 17
    assert all(l.depthwise_regularizer is None for l in depthwise)
    assert len(model.losses) == 36  # 35 convolutions and the dense layer; TFM's count


# ----- Keras serialisation ---------------------------------------------------------------


def _round_trip(layer, x):
    """`layer` rebuilt from its config, given its weights, gives the same output."""
    y = layer(x, training=False)
    clone = type(layer).from_config(layer.get_config())
    clone(x, training=False)
    assert [w.shape for w in clone.weights] == [w.shape for w in layer.weights]
    clone.set_weights(layer.get_weights())
    np.testing.assert_allclose(clone(x, training=False), y, rtol=1e-5, atol=1e-6)


SETTINGS = modeling.NormSettings(activation="swish", kernel_regularizer=keras.regularizers.L2(1e-4))


@pytest.mark.parametrize("make", [
    lambda: resnet.BottleneckBlock(4, 2, True, SETTINGS, se_ratio=0.25, resnetd_shortcut=True,
                                   stochastic_depth_drop_rate=0.1),
    lambda: resnet.BottleneckBlock(4, 1, True, SETTINGS, dilation_rate=2),
    lambda: resnet.ResidualBlock(16, 1, False, SETTINGS, se_ratio=0.25),
    lambda: modeling.SqueezeExcitation(16, 16, 0.25, settings=SETTINGS),
    lambda: modeling.StochasticDepth(0.2),
    lambda: mobilenet.Conv2DBNBlock(8, 3, 2, settings=SETTINGS),
    lambda: mobilenet.DepthwiseSeparableConvBlock(8, dilation_rate=2, settings=SETTINGS),
    lambda: mobilenet.InvertedBottleneckBlock(16, 16, 4.0, 1, se_ratio=0.25,
                                              se_gating_activation="hard_sigmoid",
                                              expand_se_in_filters=True, divisible_by=8,
                                              stochastic_depth_drop_rate=0.1),
    lambda: mobilenet.InvertedBottleneckBlock(16, 24, 4.0, 2, use_depthwise=False),
    lambda: mobilenet.UniversalInvertedBottleneckBlock(16, 16, 4.0, 1, start_dw_kernel_size=3,
                                                       middle_dw_kernel_size=5,
                                                       end_dw_kernel_size=3,
                                                       use_layer_scale=True),
    lambda: mobilenet.MultiHeadSelfAttentionBlock(num_heads=2, key_dim=8, value_dim=8,
                                                  kv_strides=2),
    lambda: mobilenet.MultiHeadSelfAttentionBlock(num_heads=2, key_dim=8, value_dim=8,
                                                  query_h_strides=2, query_w_strides=2),
    lambda: mobilenet.LayerScale(0.5),
], ids=["bottleneck_se_resnetd", "bottleneck_dilated", "residual_se", "se", "stochastic_depth",
        "convbn", "depsepconv", "inverted_bottleneck_se", "fused_ib", "uib", "mhsa_kv_strides",
        "mhsa_query_strides", "layer_scale"])
def test_every_custom_layer_round_trips_through_its_config(make):
    _round_trip(make(), tf.random.stateless_uniform([2, 8, 8, 16], seed=[1, 2]))


def test_classification_model_saves_loads_and_clones_as_keras(tmp_path):
    config = configs.resnet_rs_imagenet().task.model
    config.override({"input_size": [32, 32, 3], "num_classes": 5,
                     "backbone": {"resnet": {"model_id": 18, "stochastic_depth_drop_rate": 0.2}},
                     "add_head_batch_norm": True})
    model = modeling.build_classification_model(config, l2_weight_decay=1e-4)
    x = tf.random.stateless_uniform([2, 32, 32, 3], seed=[3, 4])
    expected = model(x, training=False)
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded, modeling.ClassificationModel)
    assert loaded.backbone.count_params() == model.backbone.count_params()
    # 4 stem, 16 block, 4 shortcut and 16 squeeze-excitation convolutions, the dense layer.
    assert len(loaded.losses) == len(model.losses) == 41
    np.testing.assert_allclose(loaded(x, training=False), expected, rtol=1e-5, atol=1e-6)
    # Keras 3's clone_model copies any Functional subclass as a plain Functional model.
    clone = keras.models.clone_model(model)
    assert clone.count_params() == model.count_params()
    clone.set_weights(model.get_weights())
    np.testing.assert_allclose(clone(x, training=False), expected, rtol=1e-5, atol=1e-6)
    # TFM's test_serialize_deserialize: from_config(get_config()) is the same model.
    rebuilt = modeling.ClassificationModel.from_config(model.get_config())
    assert isinstance(rebuilt, modeling.ClassificationModel)
    assert rebuilt.get_config() == model.get_config()
    rebuilt.set_weights(model.get_weights())
    np.testing.assert_allclose(rebuilt(x, training=False), expected, rtol=1e-5, atol=1e-6)


def test_multi_query_attention_trains():
    block = mobilenet.MultiHeadSelfAttentionBlock(num_heads=2, key_dim=8, value_dim=8,
                                                  kv_strides=2, use_layer_scale=False)
    x = tf.random.stateless_uniform([2, 8, 8, 16], seed=[5, 6])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(block(x, training=True) ** 2)
    grads = tape.gradient(loss, block.trainable_variables)
    names = [v.path.split("/")[-1] for v in block.trainable_variables]
    assert {"query", "key", "value", "output"} <= set(names)
    assert all(g is not None and np.isfinite(g.numpy()).all() and np.abs(g.numpy()).sum() > 0
               for g in grads)


def test_resnet_squeeze_excitation_squeezes_with_relu_as_tfm():
    # TFM's ResNet blocks build their SE layer with its default ReLU, whatever the block's
    # activation (ResNet-RS: swish).
    block = resnet.BottleneckBlock(4, 1, True, SETTINGS, se_ratio=0.25)
    assert SETTINGS.activation == "swish"
    [se] = [l for l in block._branch if isinstance(l, modeling.SqueezeExcitation)]
    assert se.get_config()["activation"] == "relu"


def test_hard_swish_and_hard_sigmoid_are_tfms():
    """TFM's formulas (official/modeling/activations): x * relu6(x + 3) * (1/6) and
    relu6(x + 3) * 0.16667 (not Keras 3's division by 6)."""
    from lite_launcher.vision import layers
    x = np.linspace(-6.0, 6.0, 241).astype("float32")
    relu6 = np.clip(x + 3.0, 0.0, 6.0)
    np.testing.assert_allclose(layers.hard_swish(x).numpy(), x * relu6 * (1.0 / 6.0), atol=1e-6)
    np.testing.assert_array_equal(layers.hard_sigmoid(x).numpy(),
                                  (relu6 * np.float32(0.16667)).astype("float32"))
    assert layers.get_activation("hard_swish") is layers.hard_swish
    assert layers.get_activation("hard_sigmoid") is layers.hard_sigmoid
    assert layers.get_activation("relu") is keras.activations.relu
    # Saved by name, restored to the same function.
    assert keras.activations.get(keras.activations.serialize(layers.hard_swish)) \
        is layers.hard_swish


def test_mobilenet_v3_step_has_no_division_by_the_activation_constant():
    """Keras 3's hard_silu / hard_sigmoid divide by 6, and TensorFlow's gradient of a division
    also differentiates the divisor (a full-size RealDiv, Neg and Sum per activation, ~110 ops
    in MobileNetV3Large's step). TFM multiplies by 1/6; so do lite's MobileNets."""
    config = configs.mobilenet_imagenet().task.model
    config.override({"backbone": {"mobilenet": {"model_id": "MobileNetV3Small"}}})
    backbone = modeling.build_backbone([32, 32, 3], config.backbone,
                                       modeling.NormSettings(activation="hard_swish"))
    x = tf.ones((2, 32, 32, 3))

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            outputs = backbone(x, training=True)
            loss = tf.add_n([tf.reduce_sum(v) for v in tf.nest.flatten(outputs)])
        return tape.gradient(loss, backbone.trainable_variables)

    ops = step.get_concrete_function(x).graph.get_operations()
    assert sum(op.type == "Relu6" for op in ops) > 10  # the hard activations are in the graph
    # The gradient's own divisions (the average pools' 1/count) are TFM's too.
    assert [op.name for op in ops
            if op.type in ("RealDiv", "Neg") and not op.name.startswith("gradient_tape")] == []
    assert not [op.name for op in ops if op.type == "Neg"]
