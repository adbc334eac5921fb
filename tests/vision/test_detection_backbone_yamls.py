"""TFM's RetinaNet YAMLs on SpineNet, mobile SpineNet and MobileDet (tests/vision/data, as
tensorflow/models ships them) load unchanged into lite with every task / trainer / runtime
value TFM 2.20's loader gives (data/make_tfm_detection_backbone_yamls.py); the MobileDet
YAML's `input_size: [320 320, 3]` is refused in one line and the corrected file loads; one YAML
per family trains 2 steps and evaluates with the COCO numbers logged, shrunk for a CPU
(release set: 2-4 minutes each here)."""

import json
import os
import re
import sys

import pytest

import lite_launcher as ll
from lite_launcher.core.base_config import ConfigError

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
sys.path.insert(0, DATA)
sys.path.insert(0, HERE)
import make_tfm_detection_backbone_yamls as tfm_yamls  # noqa: E402
from tfm_compare import as_plain_dict, differences  # noqa: E402

with open(os.path.join(DATA, "tfm_detection_backbone_yamls.json")) as _f:
    TFM = json.load(_f)["yamls"]
MOBILEDET = "coco_mobiledetcpu_tpu.yaml"


def _corrected_file(tmp_path, name):
    path = os.path.join(tmp_path, name)
    with open(path, "w") as f:
        f.write(tfm_yamls.corrected_text(name))
    return path


def merged(base, changes):
    """`base` (a nested dict) with the nested dict `changes` written over it, key by key."""
    out = dict(base)
    for key, value in changes.items():
        out[key] = (merged(out[key], value) if isinstance(value, dict)
                    and isinstance(out.get(key), dict) else value)
    return out


def test_the_driver_check_compares_values():
    """The check of `_train_and_eval` fails for one changed backbone value, where a check of
    the keys alone passed (issue 52)."""
    name = "coco_spinenet49_gpu_multiworker_mirrored.yaml"
    tfm = TFM[name]["task"]["model"]
    model = {"num_classes": 3, "head": {"num_convs": 1, "num_filters": 32}, **SHRINK[name]}
    written = merged(tfm, model)
    assert differences(merged(tfm, model), written) == ([], [])
    written["backbone"] = merged(written["backbone"], {
        "spinenet": {"model_id": "96" if tfm["backbone"]["spinenet"]["model_id"] != "96"
                     else "49"}})
    assert written["backbone"] == {**tfm["backbone"], **written["backbone"]}  # same keys
    _, different = differences(merged(tfm, model), written)
    assert [d[0] for d in different] == [".backbone.spinenet.model_id"]


def _assert_equals_tfm(config, expected):
    missing, different = differences({k: expected[k] for k in ("task", "trainer", "runtime")},
                                      as_plain_dict(config, "task", "trainer", "runtime"))
    assert different == []
    assert [m for m in missing if m.startswith(".task")] == []


@pytest.mark.parametrize("name", sorted(set(tfm_yamls.YAMLS) - {MOBILEDET}))
def test_tfm_yaml_loads_unchanged_with_tfms_values(name):
    expected = TFM[name]
    config = ll.override_config(ll.get_exp_config(expected["experiment"]),
                                [os.path.join(DATA, name)])
    config.validate()
    _assert_equals_tfm(config, expected)


def test_mobiledet_yaml_as_shipped_is_refused_naming_input_size_and_the_corrected_loads(
        tmp_path):
    shipped = os.path.join(DATA, MOBILEDET)
    with open(shipped) as f:
        assert "input_size: [320 320, 3]" in f.read()  # the file is TFM's, typo included
    with pytest.raises(ConfigError) as error:
        ll.override_config(ll.get_exp_config("retinanet_mobile_coco"), [shipped]).validate()
    message = str(error.value)
    assert "\n" not in message
    assert re.search(r"task\.model\.input_size\[0\].*'320 320'", message), message
    config = ll.override_config(ll.get_exp_config("retinanet_mobile_coco"),
                                [_corrected_file(tmp_path, MOBILEDET)])
    config.validate()
    _assert_equals_tfm(config, TFM[MOBILEDET + " (corrected)"])
    assert list(config.task.model.input_size) == [320, 320, 3]
    assert config.task.model.backbone.type == "mobiledet"


# ----- one YAML per family: 2 training steps and an evaluation with the COCO numbers ---------

COCO_NAMES = ("AP", "AP50", "AP75", "APs", "APm", "APl", "ARmax1", "ARmax10", "ARmax100", "ARs",
              "ARm", "ARl")
# Each YAML as shipped (the MobileDet one corrected), then this shrink for a CPU: the input
# (SpineNet's levels 3-7 need a multiple of 128; MobileDet's 3-6 of 64), a one-conv 32-filter
# head, 3 classes, batch 2, float32 on one device, no pretrained checkpoint.
SHRINK = {
    "coco_spinenet49xs_mobile_tpu.yaml": {"input_size": [128, 128, 3]},
    "coco_mobiledetcpu_tpu.yaml": {"input_size": [64, 64, 3],
                                   "decoder": {"fpn": {"num_filters": 32}}},
    "coco_spinenet49_gpu_multiworker_mirrored.yaml": {"input_size": [128, 128, 3]},
}


def _train_and_eval(tmp_path, name):
    import numpy as np
    import yaml

    from detection_images import detection_tfrecords
    from test_modes import read_scalars
    from test_retinanet_train import _run_main

    pytest.importorskip("pycocotools")
    data = detection_tfrecords(str(tmp_path / "shapes"), train_count=4, eval_count=2, size=64)
    model = {"num_classes": 3, "head": {"num_convs": 1, "num_filters": 32}, **SHRINK[name]}
    override = {
        "runtime": {"distribution_strategy": "off", "mixed_precision_dtype": "float32"},
        "task": {"init_checkpoint": "", "model": model,
                 "annotation_file": data["validation_json"],
                 "train_data": {"input_path": data["train"], "global_batch_size": 2,
                                "dtype": "float32"},
                 "validation_data": {"input_path": data["validation"],
                                     "global_batch_size": 2, "dtype": "float32"}},
        "trainer": {"train_steps": 2, "steps_per_loop": 2, "summary_interval": 2,
                    "checkpoint_interval": 2, "validation_interval": 2, "validation_steps": 1,
                    "best_checkpoint_export_subdir": "",
                    "optimizer_config": {"warmup": {"type": None}, "learning_rate": {
                        "type": "constant", "constant": {"learning_rate": 0.01}}}}}
    override_path = tmp_path / "override.yaml"
    override_path.write_text(yaml.safe_dump(override))
    yaml_path = (_corrected_file(tmp_path, name) if name == MOBILEDET
                 else os.path.join(DATA, name))
    model_dir = tmp_path / "model"
    monkeypatch = pytest.MonkeyPatch()
    try:
        code = _run_main(monkeypatch, "--experiment", TFM[name]["experiment"], "--mode",
                         "train_and_eval", "--model_dir", model_dir, "--config_file", yaml_path,
                         "--params_override", override_path)
    finally:
        monkeypatch.undo()
    assert code == 0
    params = yaml.safe_load((model_dir / "params.yaml").read_text())
    # The model the driver ran, value by value: TFM's reading of the YAML with the shrink
    # above on top (the backbone untouched by it: the YAML's, as TFM reads it).
    expected = merged(TFM[name]["task"]["model"], model)
    assert expected["backbone"] == TFM[name]["task"]["model"]["backbone"]
    missing, different = differences(expected, params["task"]["model"])
    assert (missing, different) == ([], [])
    validation = read_scalars(str(model_dir / "validation"))
    for coco_name in COCO_NAMES:
        assert sorted(validation[coco_name]) == [2], coco_name
        value = validation[coco_name][2]
        assert 0.0 <= value <= 1.0 or value == -1.0, (coco_name, value)
    train = read_scalars(str(model_dir / "train"))
    assert np.isfinite(train["training_loss"][2])


# 137-231 s each on the loaded 2-core machine (tracing SpineNet's and MobileDet's steps and
# NMS), so all three are in the release set. Their sibling in the suite runs the same driver
# path (a RetinaNet YAML-built config -> lite-train train_and_eval -> the COCO numbers logged)
# on ResNet-18; the backbones themselves are built in the suite by test_spinenet.py.
_SIBLING = ("tests/vision/test_retinanet_train.py::"
            "test_lite_train_retinanet_reports_the_coco_numbers_and_writes_a_checkpoint")


@pytest.mark.release(sibling=_SIBLING)
@pytest.mark.parametrize("name", sorted(SHRINK))
def test_a_yaml_per_backbone_family_trains_two_steps_and_logs_the_coco_numbers(tmp_path, name):
    _train_and_eval(tmp_path, name)
