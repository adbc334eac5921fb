"""EfficientNet, RevNet (`revnet_imagenet`) and the NAS-FPN decoder against TFM 2.20.

The numbers come from TFM itself (data/make_tfm_zoo_reference.py, run in a TFM venv):
parameter counts and endpoint shapes of every EfficientNet and RevNet id, `revnet_imagenet`'s
config and classifier count, RetinaNets with NAS-FPN, and TFM-written checkpoints of small
pieces with TFM's outputs on them (and, for the RevNets, TFM's gradient through its
reversible layers). The zoo YAMLs (data/zoo_*.yaml) load and train two steps.
"""

import json
import os
import re
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import lite_launcher as ll
from lite_launcher.checkpointing import tfm_checkpoint
from lite_launcher.core.base_config import ConfigError
from lite_launcher.vision.configs import backbones as backbone_configs
from lite_launcher.vision.modeling.backbones import efficientnet, revnet
from lite_launcher.vision.modeling.backbones.factory import build_backbone
from lite_launcher.vision.modeling.decoders.nasfpn import NASFPN
from lite_launcher.vision.modeling.layers.nn_layers import NormSettings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
from tfm_compare import as_plain_dict, differences, shapes_only  # noqa: E402

DATA = os.path.join(HERE, "data")
with open(os.path.join(DATA, "tfm_zoo_reference.json")) as _f:
    TFM = json.load(_f)

_COUNTS = "tests/vision/test_tfm_zoo.py::test_backbone_counts_and_endpoints_equal_tfm"
# In the suite: B0 with and without SE, RevNet-38 (residual) and -56 (bottleneck); the other
# ids build through the same builders from the same tables, scaled (`release`).
IN_SUITE = ("efficientnet_b0_se0.0", "efficientnet_b0_se0.25", "revnet_38", "revnet_56")


def _param(name):
    if name in IN_SUITE:
        return name
    sibling = "efficientnet_b0_se0.25" if name.startswith("efficientnet") else "revnet_56"
    return pytest.param(name, marks=pytest.mark.release(sibling=f"{_COUNTS}[{sibling}]"))


@pytest.mark.parametrize("name", [_param(name) for name in sorted(TFM["backbones"])])
def test_backbone_counts_and_endpoints_equal_tfm(name):
    entry = TFM["backbones"][name]
    config = backbone_configs.Backbone(type=entry["type"])
    config.get().override(entry["options"], is_strict=True)
    size = TFM["input_size"]
    with shapes_only():
        model = build_backbone([size, size, 3], config, NormSettings())
        count = model.count_params()
        specs = getattr(model, "output_specs", None) or {
            level: tuple(t.shape) for level, t in model.output.items()}
        endpoints = {level: list(shape[1:]) for level, shape in specs.items()}
    assert count == entry["params"]
    assert endpoints == entry["endpoints"]


def test_every_tfm_model_id_is_pinned():
    ids = {(e["type"], e["options"]["model_id"]) for e in TFM["backbones"].values()}
    assert ids == ({("efficientnet", i) for i in backbone_configs.EFFICIENTNET_MODEL_IDS}
                   | {("revnet", i) for i in backbone_configs.REVNET_MODEL_IDS})
    assert set(efficientnet.SCALING_MAP) == set(backbone_configs.EFFICIENTNET_MODEL_IDS)
    assert set(revnet.REVNET_SPECS) == set(backbone_configs.REVNET_MODEL_IDS)


def test_revnet_imagenet_is_tfms():
    config = ll.get_exp_config("revnet_imagenet")
    config.validate()
    expected = TFM["revnet_imagenet"]
    missing, different = differences({"task": expected["task"], "trainer": expected["trainer"]},
                                     as_plain_dict(config, "task", "trainer"))
    # Lite's configs hold TFM's fields; the few TFM-only ones are the shared classes' (checked
    # by test_vision_config), none is the experiment's own.
    assert not different, different
    assert not [m for m in missing if "backbone" in m or "learning_rate" in m], missing


@pytest.mark.release(sibling=f"{_COUNTS}[revnet_56]")
def test_revnet_imagenet_classifier_count_equals_tfm():
    from lite_launcher.vision.modeling.classification_model import build_classification_model
    model_config = ll.get_exp_config("revnet_imagenet").task.model
    with shapes_only():
        model = build_classification_model(model_config)
        assert model.count_params() == TFM["revnet_imagenet"]["params"]


def _retinanet_count(name):
    from lite_launcher.vision.modeling.retinanet_model import build_retinanet
    entry = TFM["retinanet"][name]
    config = ll.get_exp_config("retinanet_resnetfpn_coco")
    config.task.model.override({"backbone": entry["backbone"], "input_size": entry["input_size"],
                                "decoder": {"type": "nasfpn", "nasfpn": entry["decoder"]}},
                               is_strict=True)
    config.validate()
    with shapes_only():
        model = build_retinanet(config.task.model)
        counts = (model.count_params(), model.backbone.count_params(),
                  model.decoder.count_params())
    assert counts == (entry["params"], entry["backbone_params"], entry["decoder_params"])


_RETINANET = "tests/vision/test_tfm_zoo.py::test_nasfpn_retinanet_counts_equal_tfm"


@pytest.mark.parametrize("name", ["nasfpn_small", "nasfpn_small_separable"])
def test_nasfpn_retinanet_counts_equal_tfm(name):
    _retinanet_count(name)


@pytest.mark.release(sibling=f"{_RETINANET}[nasfpn_small]")
def test_nasfpn_retinanet_at_tfms_defaults_count_equals_tfm():
    _retinanet_count("nasfpn_default")


# ----- TFM-written checkpoints ---------------------------------------------------------------

def _settings(norm):
    return NormSettings(momentum=norm["norm_momentum"], epsilon=norm["norm_epsilon"],
                        activation=norm["activation"])


def _narrow_backbone(name):
    entry = TFM["checkpoints"][name]
    size = TFM["checkpoint_input_size"]
    settings = _settings(entry["norm_activation"])
    if entry["type"] == "efficientnet":
        options = entry["options"]
        return efficientnet.build_efficientnet_model(
            [size, size, 3], settings, se_ratio=options["se_ratio"],
            stochastic_depth_drop_rate=options["stochastic_depth_drop_rate"], **entry["sizes"])
    return revnet.build_revnet_model([size, size, 3], [tuple(s) for s in entry["sizes"]],
                                     settings)


def _relative_error(outputs, ref, prefix):
    return max(np.abs(np.asarray(outputs[k]) - ref[f"{prefix}_{k}"]).max()
               / np.abs(ref[f"{prefix}_{k}"]).mean() for k in outputs)


def _restore(model, name, root):
    directory = os.path.join(DATA, "tfm_zoo", name)
    count = tfm_checkpoint.load_weights(model, os.path.join(directory, "ckpt-3"), root)
    assert count == len(model.weights)
    return np.load(os.path.join(directory, "reference.npz"))


@pytest.mark.parametrize("name", ["efficientnet_narrow", "revnet_narrow_residual",
                                  "revnet_narrow_bottleneck"])
def test_tfm_checkpoint_of_a_narrow_backbone_gives_tfms_endpoints(name):
    model = _narrow_backbone(name)
    assert model.count_params() == TFM["checkpoints"][name]["params"]
    ref = np.load(os.path.join(DATA, "tfm_zoo", name, "reference.npz"))
    levels = sorted(TFM["checkpoints"][name]["endpoints"])

    def error():
        out = model(ref["images"], training=False)
        return _relative_error({level: out[level] for level in levels}, ref, "endpoint")

    assert error() > 1e-2
    _restore(model, name, "backbone")
    assert error() <= 1e-4


@pytest.mark.parametrize("name", ["revnet_narrow_residual", "revnet_narrow_bottleneck"])
def test_revnet_gradient_through_the_reversible_blocks_is_tfms(name):
    """TFM's manual backward pass (its input recomputed from the output) and lite's give the
    same gradient of a weighted sum of the endpoints with respect to the images, in training
    mode; lite's autodiff of the forward pass (manual_grads off) gives it too."""
    model = _narrow_backbone(name)
    ref = _restore(model, name, "backbone")
    levels = sorted(TFM["checkpoints"][name]["endpoints"])
    statistics = [v.numpy() for v in model.non_trainable_variables]

    def input_gradient():
        x = tf.constant(ref["images"])
        with tf.GradientTape() as tape:
            tape.watch(x)
            out = model(x, training=True)
            loss = tf.add_n([tf.reduce_sum(out[l] * ref[f"weights_{l}"]) for l in levels])
        return tape.gradient(loss, x).numpy()

    scale = np.abs(ref["input_gradient"]).mean()
    manual = input_gradient()
    assert np.abs(manual - ref["input_gradient"]).max() / scale <= 1e-4
    # The recomputation's BatchNormalization updates were put back: one forward's remain.
    blocks = [layer for layer in model.layers if isinstance(layer, revnet.ReversibleBlock)]
    assert any(b.get_config()["strides"] == 1 and b.get_config()["batch_norm_first"] is False
               for b in blocks)
    once = [v.numpy() for v in model.non_trainable_variables]
    for variable, value in zip(model.non_trainable_variables, statistics):
        variable.assign(value)
    for block in blocks:
        block._manual_grads = False  # pylint: disable=protected-access  (TFM's test switch)
    automatic = input_gradient()
    assert np.abs(automatic - ref["input_gradient"]).max() / scale <= 1e-4
    assert all(np.allclose(a, b.numpy(), rtol=1e-6, atol=1e-7)
               for a, b in zip(once, model.non_trainable_variables))


def test_revnet_manual_backward_recomputes_the_input():
    """With manual_grads a reversible block's backward pass runs f and g again (on the
    input it recomputes); without, it runs neither."""
    specs = [("residual", 8, 2)]
    model = revnet.build_revnet_model([16, 16, 3], specs, NormSettings())
    block = model.get_layer("revblock_group_2_1")
    calls = []
    inner_call = block._g.call  # pylint: disable=protected-access

    def counted(*args, **kwargs):
        calls.append(1)
        return inner_call(*args, **kwargs)

    block._g.call = counted  # pylint: disable=protected-access
    x = tf.random.stateless_uniform([2, 16, 16, 3], seed=[1, 2])
    for manual, backward_calls in ((True, 1), (False, 0)):
        block._manual_grads = manual  # pylint: disable=protected-access
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(model(x, training=True)["2"])
        forward_calls = len(calls)
        tape.gradient(loss, x)
        assert len(calls) - forward_calls == backward_calls
        del calls[:]


@pytest.mark.parametrize("name", ["nasfpn_small", "nasfpn_small_separable"])
def test_tfm_checkpoint_of_nasfpn_gives_tfms_outputs(name):
    entry = TFM["checkpoints"][name]
    image = entry["image_size"]
    specs = {level: (None, image // 2 ** int(level), image // 2 ** int(level), channels)
             for level, channels in entry["pyramid"].items()}
    decoder = NASFPN(specs, 3, 7, settings=_settings(entry["norm_activation"]),
                     **entry["options"])
    ref = np.load(os.path.join(DATA, "tfm_zoo", name, "reference.npz"))
    features = {level: ref[f"feature_{level}"] for level in specs}
    decoder(features)
    assert decoder.count_params() == entry["params"]

    def error():
        return _relative_error(decoder(features, training=False), ref, "output")

    assert error() > 1e-2
    _restore(decoder, name, "decoder")
    assert error() <= 1e-4


def test_nasfpn_without_creation_order_does_not_fit_tfms_checkpoint(monkeypatch):
    """TFM's checkpoint lists NAS-FPN's layers in graph order: paired in that order the
    weights land on the wrong layers (the outputs are far from TFM's)."""
    monkeypatch.setattr(tfm_checkpoint, "CREATION_ORDERS", [])
    entry = TFM["checkpoints"]["nasfpn_small"]
    image = entry["image_size"]
    specs = {level: (None, image // 2 ** int(level), image // 2 ** int(level), channels)
             for level, channels in entry["pyramid"].items()}
    decoder = NASFPN(specs, 3, 7, settings=_settings(entry["norm_activation"]),
                     **entry["options"])
    ref = np.load(os.path.join(DATA, "tfm_zoo", "nasfpn_small", "reference.npz"))
    features = {level: ref[f"feature_{level}"] for level in specs}
    decoder(features)
    try:
        _restore(decoder, "nasfpn_small", "decoder")
    except ConfigError:
        return  # a shape did not fit
    assert _relative_error(decoder(features, training=False), ref, "output") > 1e-2


# ----- configs --------------------------------------------------------------------------------

@pytest.mark.parametrize("experiment", ["maskrcnn_resnetfpn_coco", "semantic_segmentation"])
def test_nasfpn_on_levels_its_cell_does_not_output_is_refused_in_one_line(experiment):
    """Mask R-CNN's default levels 2..6, segmentation's 3..6: TFM's cell outputs 3..7 (TFM
    fails when the next cell reads them); refused by validate(), and by the layer itself."""
    config = ll.get_exp_config(experiment)
    config.task.model.decoder.type = "nasfpn"
    if experiment == "semantic_segmentation":  # the general task: data paths of its own
        config.task.train_data.input_path = config.task.validation_data.input_path = "x"
    model = config.task.model
    with pytest.raises(ConfigError, match=re.escape(
            f"task.model: the nasfpn decoder's cell outputs levels 3..7; set min_level 3 and "
            f"max_level 7 (they are {model.min_level}..{model.max_level}).")) as error:
        config.validate()
    assert "\n" not in str(error.value)
    with pytest.raises(ConfigError, match=re.escape(
            f"NAS-FPN's searched cell outputs levels 3..7, not min_level..max_level "
            f"({model.min_level}..{model.max_level}); set min_level 3 and max_level 7.")):
        NASFPN({"2": (None, 32, 32, 8), "3": (None, 16, 16, 8)}, model.min_level,
               model.max_level)


@pytest.mark.parametrize("backbone_type,override,named", [
    ("efficientnet", {"model_id": "b8"}, "efficientnet.model_id 'b8' is not one of b0, b1"),
    ("efficientnet", {"se_ratio": 1.5}, "efficientnet.se_ratio (1.5) must be within [0, 1]"),
    ("efficientnet", {"stochastic_depth_drop_rate": -0.1},
     "efficientnet.stochastic_depth_drop_rate (-0.1) must be within [0, 1]"),
    ("revnet", {"model_id": 50}, "revnet.model_id 50 is not one of 38, 56, 104"),
])
def test_bad_backbone_config_is_refused_in_one_line(backbone_type, override, named):
    config = ll.get_exp_config("resnet_imagenet")
    config.task.model.backbone.type = backbone_type
    config.task.model.backbone.get().override(override, is_strict=True)
    with pytest.raises(ConfigError, match=re.escape(named)) as error:
        config.validate()
    assert "\n" not in str(error.value)


def test_efficientnet_drops_every_block_at_the_configured_rate_as_tfm():
    model = efficientnet.build_efficientnet_model([32, 32, 3], NormSettings(), 0.25, 0.5,
                                                  se_ratio=0.25, stochastic_depth_drop_rate=0.3)
    rates = {layer.get_config()["stochastic_depth_drop_rate"] for layer in model.layers
             if layer.name.startswith("block_group_")}
    assert rates == {0.3}


def test_revnet_inner_blocks_keep_tfms_norm_defaults():
    """Only the stem takes the config's norm epsilon / momentum (TFM's RevNet passes neither to
    its inner blocks)."""
    model = revnet.build_revnet_model([32, 32, 3], [("residual", 8, 1), ("residual", 16, 1)],
                                      NormSettings(momentum=0.9, epsilon=1e-5))
    norms = {layer.name: (layer.momentum, layer.epsilon) for layer in model.layers
             if isinstance(layer, keras.layers.BatchNormalization)}
    assert norms and set(norms.values()) == {(0.9, 1e-5)}
    inner = model.get_layer("revblock_group_3_0")
    assert {(n.momentum, n.epsilon) for n in (inner._f._norm0, inner._g._norm1)} == {  # pylint: disable=protected-access
        (0.99, 1e-3)}


def test_keras_file_round_trip_of_revnet_and_nasfpn(tmp_path):
    """A RevNet (both inner blocks) under a NAS-FPN, saved as `.keras` and loaded: the same
    weights under the same paths and the same outputs (every new layer has a config)."""
    inputs = keras.Input((128, 128, 3))
    backbone = revnet.build_revnet_model(
        [128, 128, 3], [("residual", 8, 2), ("bottleneck", 8, 1)], NormSettings())
    features = backbone(inputs)
    specs = {level: tuple(tensor.shape) for level, tensor in features.items()}
    # Levels 4..7 max-pooled from RevNet's level 3.
    decoder = NASFPN(specs, 3, 7, num_filters=256, num_repeats=1, use_separable_conv=True,
                     settings=NormSettings(activation="swish"))
    model = keras.Model(inputs, decoder(features))
    x = np.random.default_rng(0).uniform(0, 1, (2, 128, 128, 3)).astype("float32")
    expected = {k: np.asarray(v) for k, v in model(x, training=False).items()}
    model.save(str(tmp_path / "m.keras"))
    loaded = keras.models.load_model(str(tmp_path / "m.keras"))
    assert [(w.path, w.shape) for w in loaded.weights] == [(w.path, w.shape)
                                                          for w in model.weights]
    out = loaded(x, training=False)
    for level, value in expected.items():
        np.testing.assert_allclose(np.asarray(out[level]), value, rtol=1e-5, atol=1e-6)
