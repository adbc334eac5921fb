"""SpineNet and mobile SpineNet (`backbone.type: spinenet` / `spinenet_mobile`) against TFM 2.20.

The numbers come from TFM itself (data/make_tfm_spinenet_reference.py, run in a TFM venv):
parameter counts and endpoint shapes of every model id, two RetinaNet experiments' counts, and
TFM-written checkpoints of narrow backbones with TFM's endpoints on them.
"""

import json
import os
import re

import numpy as np
import pytest

import lite_launcher as ll
from lite_launcher.base_config import ConfigError
from lite_launcher import tfm_checkpoint
from lite_launcher.vision.configs import backbones as backbone_configs
from lite_launcher.vision.modeling.backbones import spinenet, spinenet_mobile
from lite_launcher.vision.modeling.backbones.factory import build_backbone
from lite_launcher.vision.modeling.layers.nn_layers import NormSettings

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
with open(os.path.join(DATA, "tfm_spinenet_reference.json")) as _f:
    TFM = json.load(_f)
# Built only in the release set (90-130 M parameters each); each one's sibling is SpineNet-96.
BIG = ("spinenet_143", "spinenet_143L", "spinenet_190")
SMALL = sorted(set(TFM["backbones"]) - set(BIG))
SIBLING = "tests/vision/test_spinenet.py::test_counts_and_endpoints_equal_tfm[spinenet_96]"


def _build(name, size=None):
    entry = TFM["backbones"][name]
    config = backbone_configs.Backbone(type=entry["type"])
    config.get().override(entry["options"], is_strict=True)
    size = size or TFM["input_size"]
    # TFM's default NormActivation: relu, momentum 0.99, epsilon 0.001.
    return build_backbone([size, size, 3], config, NormSettings())


def _check_counts_and_endpoints(name):
    model = _build(name)
    expected = TFM["backbones"][name]
    assert model.count_params() == expected["params"]
    assert {level: list(t.shape[1:]) for level, t in model.output.items()} == \
        expected["endpoints"]


@pytest.mark.parametrize("name", SMALL)
def test_counts_and_endpoints_equal_tfm(name):
    _check_counts_and_endpoints(name)


@pytest.mark.release(sibling=SIBLING)
@pytest.mark.parametrize("name", BIG)
def test_big_ids_counts_and_endpoints_equal_tfm(name):
    _check_counts_and_endpoints(name)


def test_every_tfm_model_id_is_pinned():
    ids = {(e["type"], e["options"]["model_id"]) for e in TFM["backbones"].values()}
    assert ids == ({("spinenet", i) for i in backbone_configs.SPINENET_MODEL_IDS}
                   | {("spinenet_mobile", i)
                      for i in backbone_configs.SPINENET_MOBILE_MODEL_IDS})
    assert set(spinenet.SCALING_MAP) == set(backbone_configs.SPINENET_MODEL_IDS)
    assert set(spinenet_mobile.SCALING_MAP) == set(backbone_configs.SPINENET_MOBILE_MODEL_IDS)


def test_retinanet_mobile_coco_counts_equal_tfm():
    from lite_launcher.vision.modeling.retinanet_model import build_retinanet
    model = build_retinanet(ll.get_exp_config("retinanet_mobile_coco").task.model)
    expected = TFM["retinanet"]["retinanet_mobile_coco"]
    assert model.backbone.count_params() == expected["backbone_params"]
    assert model.count_params() == expected["params"]


@pytest.mark.release(sibling="tests/vision/test_spinenet.py::"
                             "test_retinanet_mobile_coco_counts_equal_tfm")
def test_retinanet_spinenet_coco_counts_equal_tfm():
    from lite_launcher.vision.modeling.retinanet_model import build_retinanet
    model = build_retinanet(ll.get_exp_config("retinanet_spinenet_coco").task.model)
    expected = TFM["retinanet"]["retinanet_spinenet_coco"]
    assert model.backbone.count_params() == expected["backbone_params"]
    assert model.count_params() == expected["params"]


def _narrow(name):
    """lite's model of the narrow backbone TFM's checkpoint `name` holds (its sizes from the
    reference), with the checkpoint's norm / activation."""
    entry = TFM["checkpoints"][name]
    norm = entry["norm_activation"]
    settings = NormSettings(momentum=norm["norm_momentum"], epsilon=norm["norm_epsilon"],
                            activation=norm["activation"])
    options = {k: v for k, v in entry["options"].items() if k != "model_id"}
    options["init_stochastic_depth_rate"] = options.pop("stochastic_depth_drop_rate")
    size = TFM["checkpoint_input_size"]
    build = (spinenet.build_spinenet_model if entry["type"] == "spinenet"
             else spinenet_mobile.build_spinenet_mobile_model)
    return build([size, size, 3], settings, **entry["sizes"], **options)


@pytest.mark.parametrize("name", sorted(TFM["checkpoints"]))
def test_tfm_checkpoint_of_a_narrow_backbone_restores_tfm_endpoints(name):
    model = _narrow(name)
    assert model.count_params() == TFM["checkpoints"][name]["params"]
    directory = os.path.join(DATA, "tfm_spinenet", name)
    ref = np.load(os.path.join(directory, "reference.npz"))
    levels = sorted(TFM["checkpoints"][name]["endpoints"])

    def worst_error():
        out = model(ref["images"], training=False)
        return max(np.abs(out[l].numpy() - ref[f"endpoint_{l}"]).max()
                   / np.abs(ref[f"endpoint_{l}"]).mean() for l in levels)

    assert worst_error() > 1e-2
    count = tfm_checkpoint.load_weights(model, os.path.join(directory, "ckpt-3"), "backbone")
    assert count == len(model.weights)
    assert worst_error() <= 1e-4


def test_stochastic_depth_grows_with_the_block_as_tfm():
    """Block i of 16 drops its residual branch at rate * i / 16 (the stem blocks never; block
    16, the level-2 output, is not in a model whose min_level is 3)."""
    model = _narrow("spinenet_49_narrow")
    rates = {layer.name: layer.get_config()["stochastic_depth_drop_rate"]
             for layer in model.layers if "block_" in layer.name}
    assert rates["stem_block_1_0"] == 0.0
    assert rates["scale_permuted_block_8_0"] == pytest.approx(0.2 * 8 / 16)
    assert rates["scale_permuted_block_15_0"] == pytest.approx(0.2 * 15 / 16)
    assert "scale_permuted_block_16_0" not in rates


@pytest.mark.parametrize("backbone_type,override,named", [
    ("spinenet", {"model_id": "50"}, "spinenet.model_id '50' is not one of 49S, 49, 96"),
    ("spinenet", {"min_level": 1}, "min_level (1) and max_level (7) must satisfy 2 <="),
    ("spinenet", {"max_level": 8}, "max_level (8) must satisfy 2 <="),
    ("spinenet_mobile", {"model_id": "96"}, "spinenet_mobile.model_id '96' is not one of 49,"),
    ("spinenet_mobile", {"min_level": 2}, "min_level (2) and max_level (7) must satisfy 3 <="),
    ("spinenet_mobile", {"expand_ratio": 0}, "expand_ratio (0) must be >= 1"),
])
def test_bad_config_is_refused_in_one_line(backbone_type, override, named):
    config = ll.get_exp_config("retinanet_mobile_coco")
    config.task.model.backbone.type = backbone_type
    config.task.model.backbone.get().override(override, is_strict=True)
    with pytest.raises(ConfigError, match=re.escape(named)) as error:
        config.validate()
    assert "\n" not in str(error.value)
