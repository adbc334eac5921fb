"""Users' weights survive refactors of the vision layers: for one small model of each family
the weights (path, shape, creation order) and the tf.train.Checkpoint keys equal those the
code before the shared-layers refactor made (data/vision_layout_reference.json), and `.keras`
files that code saved (data/legacy_keras/, ViT layers then under the Keras package
'lite_launcher.vit') load and give the outputs they gave."""

import copy
import json
import os
import sys

import keras
import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from vision_layout import MODELS, build, layout  # noqa: E402

DATA = os.path.join(HERE, "data")
with open(os.path.join(DATA, "vision_layout_reference.json")) as f:
    REFERENCE = json.load(f)


def test_the_reference_covers_every_family():
    assert sorted(REFERENCE) == sorted(MODELS)
    families = {override["backbone"].get("type") or next(iter(override["backbone"]))
                for _, override in MODELS.values()}
    assert families == {"resnet", "dilated_resnet", "mobilenet", "vit"}


_LAYOUT = "tests/vision/test_vision_layout.py::test_weights_and_checkpoint_keys_are_unchanged"
# `release` (seconds each to build): MobileNetV2's inverted bottlenecks are also in V3-Small's
# (with SE), V4-ConvSmall's UIBs in V4-HybridMedium's (with attention), which the suite checks.
_RELEASE_LAYOUTS = {"mobilenet_v2": "mobilenet_v3_small",
                    "mobilenet_v4_conv_small": "mobilenet_v4_hybrid_medium_x0.5"}


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.release(sibling=f"{_LAYOUT}[{_RELEASE_LAYOUTS[name]}]"))
    if name in _RELEASE_LAYOUTS else name for name in sorted(MODELS)])
def test_weights_and_checkpoint_keys_are_unchanged(name, tmp_path):
    got = layout(build(name), str(tmp_path))
    keras.backend.clear_session()
    expected = REFERENCE[name]
    # Equal lists, compared so that a failure names the first differing weight or key.
    for kind in ("weights", "checkpoint"):
        for i, (ours, theirs) in enumerate(zip(got[kind], expected[kind])):
            assert ours == theirs, f"{name} {kind}[{i}]"
        assert len(got[kind]) == len(expected[kind]), f"{name} {kind}"


@pytest.mark.parametrize("name", ["vit", "convnet_blocks"])
def test_keras_files_saved_before_the_refactor_load(name):
    model = keras.models.load_model(os.path.join(DATA, "legacy_keras", f"{name}.keras"))
    saved = dict(np.load(os.path.join(DATA, "legacy_keras", f"{name}.npz")))
    outputs = model(saved.pop("input"), training=False)
    outputs = outputs if isinstance(outputs, dict) else {"output": outputs}
    assert sorted(outputs) == sorted(saved)
    for key, expected in saved.items():
        np.testing.assert_allclose(np.asarray(outputs[key]), expected, rtol=1e-5, atol=1e-5,
                                   err_msg=key)


def test_layer_scales_saved_by_either_family_load_in_their_layout():
    # Before layers.py: ViT's LayerScale ('lite_launcher.vit>LayerScale', gamma (1, 1, C)
    # 'layerscale_gamma', float32) and MobileNetV4's ('lite_launcher>LayerScale', gamma (C,)).
    for registered_name, shape, weight in (("lite_launcher.vit>LayerScale", (1, 1, 4),
                                            "layerscale_gamma"),
                                           ("lite_launcher>LayerScale", (4,), "gamma")):
        layer = keras.saving.deserialize_keras_object({
            "module": "lite_launcher.vision", "class_name": "LayerScale",
            "registered_name": registered_name,
            "config": {"name": "scale", "trainable": True, "dtype": "float32",
                       "init_value": 0.5}})
        y = layer(np.ones((2, 3, 4), "float32"))
        assert (layer.gamma.path, tuple(layer.gamma.shape)) == (f"scale/{weight}", shape)
        np.testing.assert_array_equal(np.asarray(y), np.full((2, 3, 4), 0.5, "float32"))


# A dilated ResNet of one narrow bottleneck a group (model id 8, added to the spec table for
# the test as the TFM checkpoint tests add theirs): every layer kind of the dilated family at
# dilated_resnet50's options (output stride 16, multigrid, SE, ResNet-D shortcut, stochastic
# depth): 1.7 s to build and round-trip instead of ResNet-50's ~7 s (alone, one core).
TINY_DILATED_ID = 8
TINY_DILATED_SPECS = [("bottleneck", 8, 1), ("bottleneck", 16, 1), ("bottleneck", 16, 1),
                      ("bottleneck", 16, 1)]


def _build_for_round_trip(name, monkeypatch):
    if name == "dilated_resnet_tiny":
        from lite_launcher.vision.configs import backbones as backbone_configs
        from lite_launcher.vision.modeling.backbones import resnet_deeplab
        monkeypatch.setitem(resnet_deeplab.DILATED_RESNET_SPECS, TINY_DILATED_ID,
                            TINY_DILATED_SPECS)
        monkeypatch.setattr(backbone_configs, "DILATED_RESNET_MODEL_IDS",
                            tuple(backbone_configs.DILATED_RESNET_MODEL_IDS) + (TINY_DILATED_ID,))
        factory, override = MODELS["dilated_resnet50"]
        override = copy.deepcopy(override)
        override["backbone"]["dilated_resnet"]["model_id"] = TINY_DILATED_ID
        monkeypatch.setitem(MODELS, name, (factory, override))
    return build(name)


@pytest.mark.parametrize("name", [
    "dilated_resnet_tiny",
    pytest.param("mobilenet_v4_hybrid_medium_x0.5", marks=pytest.mark.release(  # ~15 s
        sibling="tests/vision/test_vision_layout.py::"
                "test_keras_file_round_trip_of_the_families_not_saved_elsewhere"
                "[dilated_resnet_tiny]"))])
def test_keras_file_round_trip_of_the_families_not_saved_elsewhere(name, tmp_path, monkeypatch):
    # ResNet(-RS) and ViT models round-trip in test_vision_zoo_models / test_vit.
    model = _build_for_round_trip(name, monkeypatch)
    x = np.random.default_rng(0).uniform(0, 1, (2, 64, 64, 3)).astype("float32")
    expected = np.asarray(model(x, training=False))
    model.save(str(tmp_path / "m.keras"))
    loaded = keras.models.load_model(str(tmp_path / "m.keras"))
    assert [(w.path, w.shape) for w in loaded.weights] == [(w.path, w.shape)
                                                          for w in model.weights]
    np.testing.assert_allclose(np.asarray(loaded(x, training=False)), expected, rtol=1e-5,
                               atol=1e-6)
