"""SpineNet, mobile SpineNet and MobileDet (`backbone.type: spinenet` / `spinenet_mobile` /
`mobiledet`) against TFM 2.20.

The numbers come from TFM itself (data/make_tfm_spinenet_reference.py, run in a TFM venv):
parameter counts and endpoint shapes of every model id, two RetinaNet experiments' counts, and
TFM-written checkpoints of narrow backbones with TFM's endpoints on them.
"""

import json
import os
import re
import sys

import numpy as np
import pytest

import lite_launcher as ll
from lite_launcher.checkpointing import tfm_checkpoint
from lite_launcher.core.base_config import ConfigError
from lite_launcher.vision.configs import backbones as backbone_configs
from lite_launcher.vision.modeling.backbones import mobiledet, spinenet, spinenet_mobile
from lite_launcher.vision.modeling.backbones.factory import build_backbone
from lite_launcher.vision.modeling.layers.nn_layers import NormSettings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tfm_compare import shapes_only  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
with open(os.path.join(DATA, "tfm_spinenet_reference.json")) as _f:
    TFM = json.load(_f)
# Built only in the release set: the 90-130 M parameter ids (their sibling: SpineNet-49) and
# two more level-range / scale variants of ids the suite builds (sibling: SpineNet-49).
BIG = ("spinenet_143", "spinenet_143L", "spinenet_190")
VARIANTS = ("spinenet_49_l2_l6", "mobiledet_cpu_x0.75")
SMALL = sorted(set(TFM["backbones"]) - set(BIG) - set(VARIANTS))
_COUNTS = "tests/vision/test_spinenet.py::test_counts_and_endpoints_equal_tfm"


def _check_counts_and_endpoints(name):
    entry = TFM["backbones"][name]
    config = backbone_configs.Backbone(type=entry["type"])
    config.get().override(entry["options"], is_strict=True)
    size = TFM["input_size"]
    # TFM's default NormActivation: relu, momentum 0.99, epsilon 0.001.
    with shapes_only():
        model = build_backbone([size, size, 3], config, NormSettings())
        counts = model.count_params()
        endpoints = {level: list(t.shape[1:]) for level, t in model.output.items()}
    expected = TFM["backbones"][name]
    assert counts == expected["params"]
    assert endpoints == expected["endpoints"]


# The suite counts one model per family and per option the others lack (SpineNet-49;
# SpineNet-Mobile-49XS; the MobileDet DSP blocks); the other small ids build through the same
# builders from other block specs (data) and are `release`, each naming its family's.
_FAMILY_IN_SUITE = {"spinenet": "spinenet_49", "spinenet_mobile": "spinenet_mobile_49XS",
                    "mobiledet": "mobiledet_MobileDetDSP"}


def _small_param(name):
    suite = _FAMILY_IN_SUITE[TFM["backbones"][name]["type"]]
    return name if name == suite else pytest.param(
        name, marks=pytest.mark.release(sibling=f"{_COUNTS}[{suite}]"))


@pytest.mark.parametrize("name", [_small_param(name) for name in SMALL])
def test_counts_and_endpoints_equal_tfm(name):
    _check_counts_and_endpoints(name)


@pytest.mark.release(sibling=f"{_COUNTS}[spinenet_49]")
@pytest.mark.parametrize("name", BIG)
def test_big_ids_counts_and_endpoints_equal_tfm(name):
    _check_counts_and_endpoints(name)


@pytest.mark.release(sibling=f"{_COUNTS}[spinenet_49]")
@pytest.mark.parametrize("name", VARIANTS)
def test_variants_counts_and_endpoints_equal_tfm(name):
    _check_counts_and_endpoints(name)


def test_every_tfm_model_id_is_pinned():
    ids = {(e["type"], e["options"]["model_id"]) for e in TFM["backbones"].values()}
    assert ids == ({("spinenet", i) for i in backbone_configs.SPINENET_MODEL_IDS}
                   | {("spinenet_mobile", i)
                      for i in backbone_configs.SPINENET_MOBILE_MODEL_IDS}
                   | {("mobiledet", i) for i in backbone_configs.MOBILEDET_MODEL_IDS})
    assert set(spinenet.SCALING_MAP) == set(backbone_configs.SPINENET_MODEL_IDS)
    assert set(spinenet_mobile.SCALING_MAP) == set(backbone_configs.SPINENET_MOBILE_MODEL_IDS)
    assert set(mobiledet.MOBILEDET_SPECS) == set(backbone_configs.MOBILEDET_MODEL_IDS)


@pytest.mark.release(sibling="tests/vision/test_retinanet_checkpoint.py::"
                             "test_spinenet_retinanet_from_a_tfm_checkpoint_backbone_then_all")
@pytest.mark.parametrize("experiment", ["retinanet_spinenet_coco", "retinanet_mobile_coco"])
def test_retinanet_experiment_counts_equal_tfm(experiment):
    from lite_launcher.vision.modeling.retinanet_model import build_retinanet
    model = build_retinanet(ll.get_exp_config(experiment).task.model)
    expected = TFM["retinanet"][experiment]
    assert model.backbone.count_params() == expected["backbone_params"]
    assert model.count_params() == expected["params"]


def _narrow(name):
    """lite's model of the narrow backbone TFM's checkpoint `name` holds (its sizes from the
    reference), with the checkpoint's norm / activation."""
    entry = TFM["checkpoints"][name]
    norm = entry["norm_activation"]
    settings = NormSettings(momentum=norm["norm_momentum"], epsilon=norm["norm_epsilon"],
                            activation=norm["activation"])
    size = TFM["checkpoint_input_size"]
    if entry["type"] == "mobiledet":  # narrowed by its config's own filter_size_scale
        config = backbone_configs.Backbone(type="mobiledet")
        config.get().override(entry["options"], is_strict=True)
        return build_backbone([size, size, 3], config, settings)
    options = {k: v for k, v in entry["options"].items() if k != "model_id"}
    options["init_stochastic_depth_rate"] = options.pop("stochastic_depth_drop_rate")
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
    ("mobiledet", {"model_id": "MobileDetTPU"}, "mobiledet.model_id 'MobileDetTPU' is not one"),
    ("mobiledet", {"filter_size_scale": 0.0}, "mobiledet.filter_size_scale (0.0) must be > 0"),
])
def test_bad_config_is_refused_in_one_line(backbone_type, override, named):
    config = ll.get_exp_config("retinanet_mobile_coco")
    config.task.model.backbone.type = backbone_type
    config.task.model.backbone.get().override(override, is_strict=True)
    with pytest.raises(ConfigError, match=re.escape(named)) as error:
        config.validate()
    assert "\n" not in str(error.value)


def test_mobiledet_scale_whose_squeeze_width_tfm_rounds_otherwise_is_refused():
    """At 2.5, MobileDetCPU's first squeeze-excitation squeezes 40 channels to 10: TFM rounds
    that to 8, lite's shared block (round-down protected) to 16."""
    config = backbone_configs.Backbone(type="mobiledet")
    config.get().filter_size_scale = 2.5
    with pytest.raises(ConfigError, match=re.escape(
            "task.model.backbone.mobiledet.filter_size_scale (2.5) gives a squeeze-excitation "
            "width lite rounds otherwise than TFM")):
        build_backbone([32, 32, 3], config, NormSettings())


def test_tfm_mobiledet_yaml_input_size_typo_is_refused_naming_the_field():
    """TFM's coco_mobiledetcpu_tpu.yaml says `input_size: [320 320, 3]`: YAML reads
    ['320 320', 3]."""
    config = ll.get_exp_config("retinanet_mobile_coco")
    with pytest.raises(ConfigError, match=re.escape("task.model.input_size[0]")):
        config.override({"task": {"model": {"input_size": ["320 320", 3],
                                            "backbone": {"type": "mobiledet"}}}})
        config.validate()
