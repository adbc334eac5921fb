"""The in-process lite-vs-TFM trainer harness (benchmarks/step_vs_tfm.py): its options, the
processes it plans, the order of the sides, and its ratios and report on hand-made records.
No timing is asserted (the measurement itself needs TFM's venv)."""

import argparse
import json
import os
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
sys.path.insert(0, BENCH)

import step_vs_tfm  # noqa: E402


def record(model, dtype, lite_ms, tfm_ms, eval_ms=None):
    """A record as the child writes it: per round, ms per step of each side (and eval)."""
    rounds = []
    for i, (lite, tfm) in enumerate(zip(lite_ms, tfm_ms)):
        ms = {"lite": {"train": lite}, "tfm": {"train": tfm}}
        if eval_ms is not None:
            ms["lite"]["eval"], ms["tfm"]["eval"] = eval_ms[i]
        rounds.append({"order": list(step_vs_tfm.round_order(i)), "ms_per_step": ms,
                       "loadavg": [1.0, 1.0, 1.0]})
    return {"model": model, "dtype": dtype, "row": "step_vs_tfm", "rounds": rounds,
            "cpu_model": "Test CPU", "cpus": 2, "onednn": True,
            "cpu_flags": {"avx512_bf16": True, "amx_bf16": False}}


def test_sides_alternate_which_goes_first():
    assert step_vs_tfm.round_order(0) == ("lite", "tfm")
    assert step_vs_tfm.round_order(1) == ("tfm", "lite")
    assert step_vs_tfm.round_order(2) == ("lite", "tfm")


def test_one_process_per_model_and_dtype_with_the_run_options():
    assert step_vs_tfm.plan(["resnet18", "vit_ti16"], ["float32", "bfloat16"]) == [
        ("resnet18", "float32"), ("resnet18", "bfloat16"), ("vit_ti16", "float32"),
        ("vit_ti16", "bfloat16")]
    args = argparse.Namespace(rounds=6, steps=3, eval_steps=0, data_dir="/d")
    command = step_vs_tfm.child_command("tpy", "resnet50", "bfloat16", args)
    assert command[0] == "tpy" and command[1].endswith("step_vs_tfm.py")
    flags = command[2:]
    assert "--child" in flags
    for flag, value in (("--models", "resnet50"), ("--dtypes", "bfloat16"), ("--rounds", "6"),
                        ("--steps", "3"), ("--eval_steps", "0"), ("--data_dir", "/d")):
        assert flags[flags.index(flag) + 1] == value
    assert "--profile" not in flags
    args.profile = True  # the op-time look goes to the child, keyed by op type by default
    assert step_vs_tfm.child_command("tpy", "resnet50", "float32", args)[-3:] == [
        "--profile", "--profile_by", "type"]
    args.profile_by = "name"
    assert step_vs_tfm.child_command("tpy", "resnet50", "float32", args)[-3:] == [
        "--profile", "--profile_by", "name"]


def test_ratios_are_taken_within_each_round():
    rec = record("resnet18", "float32", lite_ms=[100.0, 200.0, 100.0],
                 tfm_ms=[110.0, 180.0, 100.0], eval_ms=[(50.0, 60.0)] * 3)
    assert step_vs_tfm.ratios(rec, "train") == pytest.approx([1.1, 0.9, 1.0])
    summary = step_vs_tfm.summarize(rec, "train")
    assert summary["median"] == pytest.approx(1.0)
    assert (summary["min"], summary["max"]) == pytest.approx((0.9, 1.1))
    assert summary["lite_wins"] == 1 and summary["rounds"] == 3
    assert (summary["lite_ms"], summary["tfm_ms"]) == (100.0, 110.0)
    assert step_vs_tfm.summarize(rec, "eval")["median"] == pytest.approx(1.2)
    # A run without eval calls has no eval row.
    no_eval = record("resnet18", "float32", [100.0], [100.0])
    assert step_vs_tfm.summarize(no_eval, "eval") is None


def test_report_marks_the_target_and_states_bf16_over_float32_per_side():
    results = {"commit": "abc1234", "started": "2026-12-02 13:00 UTC", "rounds": 2,
               "file": "benchmarks/results/x.json", "records": [
                   record("resnet18", "float32", [100.0, 100.0], [90.0, 95.0]),
                   record("resnet18", "bfloat16", [80.0, 80.0], [90.0, 90.0],
                          eval_ms=[(40.0, 50.0), (40.0, 50.0)])]}
    text = step_vs_tfm.render(results)
    assert "Test CPU, 2 CPU(s), oneDNN on, XLA off, AMX no, AVX-512 BF16 yes" in text
    assert "| resnet18 | float32 | train | 100.0 | 92.5 | 0.925 [0.900–0.950] | 0/2 | MISS |" \
        in text
    assert "| resnet18 | bfloat16 | train | 80.0 | 90.0 | 1.125 [1.125–1.125] | 2/2 | pass |" \
        in text
    assert "| resnet18 | bfloat16 | eval | 40.0 | 50.0 | 1.250 [1.250–1.250] | 2/2 | pass |" \
        in text
    assert "2 of 3 rows ≥ 1.0 on the median." in text
    # bf16 over float32: lite 100/80, TFM 92.5/90.
    assert "| resnet18 | 1.25 | 1.03 |" in text


def run_cli(*args):
    return subprocess.run([sys.executable, os.path.join(BENCH, "step_vs_tfm.py"), *args],
                          capture_output=True, text=True, timeout=120)


def test_cli_report_list_and_bad_options(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"rounds": 1, "records": [
        record("mobilenetv2", "float32", [10.0], [12.0])]}))
    report = run_cli("--report", str(path))
    assert report.returncode == 0, report.stderr
    assert "| mobilenetv2 | float32 | train | 10.0 | 12.0 | 1.200 [1.200–1.200] | 1/1 | pass |" \
        in report.stdout
    listed = run_cli("--list", "--models", "resnet18", "--tfm_python", "tpy")
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines()] == ["tpy", "tpy"]
    assert "bfloat16" in listed.stdout and "float32" in listed.stdout
    bad = run_cli("--rounds", "0")
    assert bad.returncode == 2 and "--rounds" in bad.stderr
    missing = run_cli("--models", "resnet18", "--tfm_python", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "setup_tfm_env.sh" in missing.stderr


def test_report_py_renders_a_step_vs_tfm_file_into_its_block(tmp_path):
    import report
    path = tmp_path / "2026-12-02-abc1234-step-vs-tfm.json"
    path.write_text(json.dumps({"kind": "step_vs_tfm", "rounds": 1, "records": [
        record("vit_ti16", "bfloat16", [10.0], [11.0])]}))
    readme = tmp_path / "README.md"
    readme.write_text("before\n<!-- step-vs-tfm:start -->\nold\n<!-- step-vs-tfm:end -->\n"
                      "after\n<!-- vision-speed:start -->\nkept\n<!-- vision-speed:end -->\n")
    assert report.main([str(path), "--update", str(readme)]) == 0
    text = readme.read_text()
    assert "old" not in text and "kept" in text and text.startswith("before\n")
    assert "| vit_ti16 | bfloat16 | train | 10.0 | 11.0 | 1.100 [1.100–1.100] | 1/1 | pass |" \
        in text
    assert str(path) in text
    # Files written before `kind` was recorded are known by their rows.
    assert report.is_step_vs_tfm({"records": [record("resnet18", "float32", [1.0], [1.0])]})
    assert not report.is_step_vs_tfm({"records": []})


# ----- the shared alternating-rounds helper and the RetinaNet rows (issues 40, 41) ---------

def test_alternate_calls_reverse_the_sides_every_other_round_and_time_per_step():
    import rounds  # pylint: disable=import-outside-toplevel

    assert rounds.round_order(("a", "b", "c"), 0) == ("a", "b", "c")
    assert rounds.round_order(["a", "b", "c"], 1) == ["c", "b", "a"]
    seen = []
    calls = {side: {"train": (lambda side=side: seen.append(side) or 0.0)}
             for side in ("lite", "tfm")}
    per_round = rounds.alternate_calls(calls, ("lite", "tfm"), 3, {"train": 4})
    assert seen == ["lite", "tfm", "tfm", "lite", "lite", "tfm"]
    assert [r["order"] for r in per_round] == [["lite", "tfm"], ["tfm", "lite"],
                                               ["lite", "tfm"]]
    assert all(0.0 <= r["ms_per_step"][side]["train"] < 250.0 for r in per_round
               for side in ("lite", "tfm"))
    assert rounds.spread([1.2, 0.9, 1.0]) == {"median": 1.0, "min": 0.9, "max": 1.2}


def test_retinanet_rows_build_lites_configs_from_tfms_yaml_and_field_names():
    import yaml  # pylint: disable=import-outside-toplevel

    import detection_rows  # pylint: disable=import-outside-toplevel
    import lite_launcher as ll  # pylint: disable=import-outside-toplevel
    from lite_launcher.core import train_utils  # pylint: disable=import-outside-toplevel

    assert step_vs_tfm.workload_name("retinanet_resnet50_fpn") == (
        "retinanet_resnetfpn_coco_retinanet_resnet50_fpn")
    assert {"retinanet_resnet50_fpn", "retinanet_mobilenetv2_fpn"} <= set(step_vs_tfm.MODELS)
    train_utils.load_builtin_registrations()
    yaml_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vision", "data",
                             "coco_mobilenetv2_tpu.yaml")
    with open(yaml_path) as f:
        tpu_model = yaml.safe_load(f)["task"]["model"]
    for model, (experiment, _) in detection_rows.MODELS.items():
        params = ll.get_exp_config(experiment)
        params.override(detection_rows.overrides(model, "/d/*.tfrecord", 2, "float32", 2))
        params.validate()
        config = params.task.model
        assert (config.input_size, config.num_classes) == ([256, 256, 3], 91)
        assert (params.task.use_coco_metrics, params.task.train_data.global_batch_size) == (
            True, detection_rows.BATCH)
        # Training only (eval_steps 0): no COCO evaluator, which would need validation records.
        assert detection_rows.overrides(model, "/d/*.tfrecord", 2, "float32", 0)["task"][
            "use_coco_metrics"] is False
        if model == "retinanet_mobilenetv2_fpn":
            mine = config.as_dict()
            for key in ("anchor", "backbone", "decoder", "head", "min_level", "max_level"):
                expected = tpu_model[key]
                got = mine[key]
                if isinstance(expected, dict):
                    got = {k: v for k, v in got.items() if k in expected}
                    for sub, value in expected.items():
                        if isinstance(value, dict):
                            got[sub] = {k: v for k, v in got[sub].items() if k in value}
                assert got == expected, key


def test_maskrcnn_row_runs_tfms_experiment_on_records_whose_masks_lites_decoder_reads(tmp_path):
    import numpy as np  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    import detection_rows  # pylint: disable=import-outside-toplevel
    import lite_launcher as ll  # pylint: disable=import-outside-toplevel
    from lite_launcher.core import train_utils  # pylint: disable=import-outside-toplevel
    from lite_launcher.vision.dataloaders import tf_example_decoder  # pylint: disable=C0415

    model = "maskrcnn_resnet50_fpn"
    assert model in step_vs_tfm.MODELS and model in detection_rows.WITH_MASKS
    assert step_vs_tfm.workload_name(model) == "maskrcnn_resnetfpn_coco_maskrcnn_resnet50_fpn"
    train_utils.load_builtin_registrations("maskrcnn_resnetfpn_coco")
    params = ll.get_exp_config("maskrcnn_resnetfpn_coco")
    params.override(detection_rows.overrides(model, "/d/*.tfrecord", 2, "float32", 2))
    params.validate()
    # TFM's experiment turns XLA on (and bf16); the row states float32 without XLA on both.
    assert (params.runtime.enable_xla, params.runtime.mixed_precision_dtype) == (
        False, "float32")
    assert params.task.model.include_mask and params.task.model.input_size == [256, 256, 3]
    # With masks, the records sit beside the box-only ones, under their own glob.
    glob = detection_rows.write_synthetic_tfrecords(str(tmp_path), num_images=2, masks=True)
    assert glob != detection_rows.input_glob_for("retinanet_resnet50_fpn", str(tmp_path))
    assert detection_rows.input_glob_for(model, str(tmp_path)) == glob
    decoder = tf_example_decoder.TfExampleDecoder(include_mask=True)  # checks count and size
    for serialized in tf.data.TFRecordDataset(tf.io.gfile.glob(glob)):
        decoded = decoder.decode(serialized)
        masks, boxes = decoded["groundtruth_instance_masks"].numpy(), decoded[
            "groundtruth_boxes"].numpy()
        assert masks.shape == (len(boxes), 256, 256) and set(np.unique(masks)) == {0.0, 1.0}
        for mask, (ymin, xmin, ymax, xmax) in zip(masks, boxes * 256):
            rows, cols = np.nonzero(mask)
            # The ellipse inscribed in its box: inside it, touching its middle.
            assert ymin - 1 <= rows.min() and rows.max() <= ymax + 1
            assert xmin - 1 <= cols.min() and cols.max() <= xmax + 1
            assert mask[int((ymin + ymax) / 2), int((xmin + xmax) / 2)] == 1.0


def test_profile_keys_op_time_by_type_or_by_op_name(tmp_path):
    import tensorflow as tf
    import vision_profile

    @tf.function
    def step(x):
        with tf.name_scope("head"):
            return tf.reduce_sum(tf.matmul(x, x))

    x = tf.random.uniform([256, 256])
    step(x)
    tf.profiler.experimental.start(str(tmp_path))
    for _ in range(3):
        step(x).numpy()
    tf.profiler.experimental.stop()
    by_type, _ = vision_profile.xspace_ops(str(tmp_path))
    by_name, _ = vision_profile.xspace_ops(str(tmp_path), by="name")
    matmul = [op for op in by_type if op.endswith("MatMul")]  # oneDNN's or Eigen's kernel
    assert len(matmul) == 1 and matmul[0] not in by_name
    matmul_names = [name for name in by_name if name.endswith(":" + matmul[0])]
    assert len(matmul_names) == 1 and "head/" in matmul_names[0]
    # The same events either way: the per-name times add up to the per-type ones.
    assert by_name[matmul_names[0]] == pytest.approx(by_type[matmul[0]])
    assert sum(by_name.values()) == pytest.approx(sum(by_type.values()))
