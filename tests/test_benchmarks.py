"""The benchmark harness (benchmarks/): like-for-like plans, the report's ratios and targets.

Timing is never asserted; these check what each side is told to do, that the lite side's
summaries land every outer loop like Orbit's, and that the report computes per-round ratios
and judges targets from a results file.
"""

import glob
import json
import os
import sys
import types

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
sys.path.insert(0, BENCH)

import measure  # noqa: E402
import report  # noqa: E402
import run  # noqa: E402
import workloads  # noqa: E402


@pytest.mark.parametrize("row", workloads.FRAMEWORK_ROWS)
def test_both_sides_get_the_same_plan_except_the_lite_summary_interval(row):
    workload = workloads.get("mlp_tiny")
    lite_mode, lite, lite_summaries = workloads.run_plan(workload, row, 5, "lite")
    tfm_mode, tfm, tfm_summaries = workloads.run_plan(workload, row, 5, "tfm")
    assert (lite_mode, lite_summaries) == (tfm_mode, tfm_summaries)
    assert lite_summaries == (row != "train1_nosum")
    assert {k: v for k, v in lite.items() if k != "summary_interval"} == \
        {k: v for k, v in tfm.items() if k != "summary_interval"}
    # Orbit writes loop outputs every loop whatever the interval; lite's must be due every loop.
    if lite_summaries:
        assert lite["summary_interval"] == lite["steps_per_loop"]
    assert lite["checkpoint_interval"] == tfm["checkpoint_interval"] == workloads.NEVER


def test_eval_plan_leaves_a_train_loop_after_every_timed_evaluation():
    mode, trainer, _ = workloads.run_plan(workloads.get("mock"), "eval", 3, "lite")
    assert mode == "train_and_eval"
    assert trainer["train_steps"] == 5 and trainer["validation_interval"] == 1


def _summary_steps(model_dir):
    from tensorboard.backend.event_processing import event_file_loader

    steps = {}
    for path in glob.glob(os.path.join(model_dir, "**", "events.out.tfevents.*"),
                          recursive=True):
        for event in event_file_loader.EventFileLoader(path).Load():
            for value in event.summary.value:
                steps.setdefault(value.tag, []).append(event.step)
    return steps


def test_lite_rows_write_train_summaries_every_loop_and_none_without(tmp_path):
    import lite_workloads

    loops = 3
    result = lite_workloads.measure_row("mock", "train1", loops, str(tmp_path / "on"))
    warmup = workloads.warmup_loops(workloads.get("mock"), "train1")
    steps = _summary_steps(str(tmp_path / "on"))
    assert result["train_loops_seen"] == warmup + loops
    for tag in ("training_loss", "accuracy", "learning_rate", "steps_per_second"):
        assert sorted(steps[tag]) == list(range(1, warmup + loops + 1)), tag
    lite_workloads.measure_row("mock", "train1_nosum", loops, str(tmp_path / "off"))
    assert _summary_steps(str(tmp_path / "off")) == {}


def test_eval_wall_rate_spans_train_action_to_next_train_action():
    train_times = [0.0, 1.0, 2.5, 4.0]
    # Cycles after the first: 1.0 -> 2.5 and 2.5 -> 4.0, 100 eval steps each.
    assert measure.eval_wall_rate(train_times, 100) == pytest.approx(200 / 3.0)
    with pytest.raises(ValueError, match="train loops"):
        measure.eval_wall_rate([0.0, 1.0], 100)


def test_round_plan_reverses_the_order_every_other_round():
    args = types.SimpleNamespace(rows=list(run.ROWS))
    pythons = {"project": "py", "tfm": "tfm_py"}
    first = run.round_plan("mock", args, pythons, 0)
    assert run.round_plan("mock", args, pythons, 1) == first[::-1]
    assert ("lite", "tfm", "rows") in first and ("raw", "tfm", "raw") in first
    assert first.index(("lite", "project", "rows")) < first.index(("tfm", "tfm", "rows"))
    # Without TFM's venv: the project's sides only.
    assert {env for _, env, _ in run.round_plan("mock", args, {"project": "py"}, 0)} == \
        {"project"}


def _record(round_index, row, side, env, **figures):
    return dict(figures, round=round_index, workload="mock", row=row, side=side, env=env)


def _results(rounds):
    records = []
    for i in range(rounds):
        # lite on TFM's TF: 6x TFM at spl=1 in round 0, 4x in round 1 and 2 (median 4: a miss).
        lite_spl1 = 600.0 if i == 0 else 400.0
        records += [
            _record(i, "train100", "lite", "tfm", steps_per_sec=1000.0),
            _record(i, "raw", "raw", "tfm", steps_per_sec=1000.0),
            _record(i, "train1", "lite", "tfm", steps_per_sec=lite_spl1),
            _record(i, "train1", "tfm", "tfm", steps_per_sec=100.0),
            _record(i, "train100", "tfm", "tfm", steps_per_sec=500.0),
            _record(i, "driver", "lite", "tfm", first_step_s=1.5, peak_rss_mib=500.0),
            _record(i, "driver", "tfm", "tfm", first_step_s=2.0, peak_rss_mib=510.0),
            _record(i, "eval", "lite", "tfm", error="exit 1: boom"),
        ]
    meta = {"date": "2026-12-01 02:00", "commit": "0" * 40, "dirty": False, "machine": "m",
            "rounds": rounds, "workloads": ["mock"], "tfm": "python", "elapsed_s": 60,
            "versions": {"lite@tfm": {"tensorflow": "2.20.0"}, "tfm@tfm": {"tensorflow": "2.20.0"}}}
    return {"meta": meta, "records": records}


def test_report_ratios_are_per_round_and_a_missed_target_stays_a_miss():
    text, summary, checks = report.markdown(_results(3), source="benchmarks/results/x.json")
    ratios = summary["mock"]["ratios"]
    assert ratios["train1 lite@tfm/tfm@tfm"] == {"median": 4.0, "min": 4.0, "max": 6.0, "n": 3}
    outer = summary["mock"]["values"]["outer_loop/tfm@tfm"]
    assert outer["median"] == pytest.approx(1000.0 * (1 / 100.0 - 1 / 500.0))
    status = {(c["workload"], c["target"]): c["status"] for c in checks}
    assert status[("mock", "train1 lite@tfm/tfm@tfm >= 8.0")] == "MISS"
    assert status[("mock", "train100 lite@tfm/raw@tfm >= 0.97")] == "pass"
    assert status[("mock", "first_step lite@tfm/tfm@tfm <= 0.8")] == "pass"  # 0.75
    assert status[("mock", "eval_wall lite@tfm/tfm@tfm >= 2.5")] == "not measured"
    assert "`benchmarks/results/x.json`" in text
    assert "3 measurement(s) failed" in text
    assert "| mock | train100 lite@tfm/raw@tfm >= 0.97 | 1.000 [1.000–1.000] | pass |" in text


def test_report_updates_only_the_marked_block(tmp_path):
    results = tmp_path / "r.json"
    results.write_text(json.dumps(_results(1)))
    readme = tmp_path / "README.md"
    readme.write_text(f"# Title\nbefore\n{report.START_MARKER}\nold table\n"
                      f"{report.END_MARKER}\nafter\n")
    assert report.main([str(results), "--update", str(readme)]) == 0
    content = readme.read_text()
    assert content.startswith("# Title\nbefore\n") and content.endswith(
        f"{report.END_MARKER}\nafter\n")
    assert "old table" not in content and "| mock | train1 lite@tfm/tfm@tfm >= 8.0 |" in content
    unmarked = tmp_path / "other.md"
    unmarked.write_text("no markers\n")
    with pytest.raises(ValueError, match="bench-results"):
        report.update_file(str(unmarked), "x")


def test_gpu_rows_lists_combinations_skipped_for_time_without_failing(tmp_path):
    import gpu_rows

    assert gpu_rows.main(["--out", str(tmp_path), "--cpu", "--budget_s", "-1",
                          "--workloads", "mock", "--dtypes", "float16"]) == 0
    data = json.loads((tmp_path / "gpu_rows.json").read_text())
    assert [(r["dtype"], r["enable_xla"]) for r in data["records"]] == \
        [("float16", False), ("float16", True)]
    assert data["meta"]["skipped_combinations"] == 2 and data["meta"]["failed_rows"] == 0
    assert "skipped: the -1 s budget was spent" in (tmp_path / "gpu_rows.md").read_text()
    assert gpu_rows.runtime_overrides("bfloat16", True, cpu=False) == {
        "num_gpus": 1, "enable_xla": True, "mixed_precision_dtype": "bfloat16"}


def test_run_starts_no_round_that_would_end_after_max_minutes(monkeypatch):
    clock = [0.0]

    def fake_raw(workload, smoke, python, timeout_s):
        clock[0] += 100.0  # each round: one 100 s process
        return {"steps_per_sec": 1.0}

    monkeypatch.setattr(run.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(run, "measure_raw", fake_raw)
    args = types.SimpleNamespace(rows=["raw"], rounds=10, workloads=["mock"], smoke=False,
                                 timeout=1, max_minutes=10.0)
    records, rounds_run = run.run_rounds(args, {"project": "py"}, log=lambda msg: None)
    # After 6 rounds (600 s) a 7th would end at 700 s > 600 s.
    assert rounds_run == 6 and len(records) == 6 and clock[0] == 600.0


def test_run_starts_no_process_past_max_minutes_even_within_a_round(monkeypatch):
    clock = [0.0]

    def fake_raw(workload, smoke, python, timeout_s):
        clock[0] += 400.0
        return {"steps_per_sec": 1.0}

    monkeypatch.setattr(run.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(run, "measure_raw", fake_raw)
    args = types.SimpleNamespace(rows=["raw"], rounds=3, smoke=False, timeout=1,
                                 workloads=["mock", "mlp_tiny", "cnn_small"], max_minutes=10.0)
    records, rounds_run = run.run_rounds(args, {"project": "py"}, log=lambda msg: None)
    # 400 s, 800 s: the third process would start past 600 s.
    assert rounds_run == 1 and [r["workload"] for r in records] == ["mock", "mlp_tiny"]


def _vision_args(**kw):
    return types.SimpleNamespace(**dict(dict(vision_models=list(run.VISION_MODELS),
                                              vision_envs=["tfm"]), **kw))


def test_vision_plan_alternates_and_measures_resnet50_in_its_rounds_only():
    pythons = {"project": "py", "tfm": "tfm_py"}
    first = run.vision_plan(_vision_args(), pythons, 0)
    assert first == [("lite", "tfm", "resnet18"), ("raw", "tfm", "resnet18"),
                     ("tfm", "tfm", "resnet18"), ("lite", "tfm", "resnet50"),
                     ("raw", "tfm", "resnet50"), ("tfm", "tfm", "resnet50")]
    two = _vision_args(vision_rounds=dict(run.VISION_ROUNDS, resnet50=2))
    assert run.vision_plan(two, pythons, 0) == first
    assert run.vision_plan(two, pythons, 1) == first[::-1]
    assert {m for _, _, m in run.vision_plan(two, pythons, 2)} == {"resnet18"}
    limit = run.VISION_ROUNDS["resnet50"]
    assert {m for _, _, m in run.vision_plan(_vision_args(), pythons, limit)} == {"resnet18"}
    both = run.vision_plan(_vision_args(vision_envs=["project", "tfm"]), pythons, 0)
    assert ("lite", "project", "resnet50") in both and ("raw", "project", "resnet18") in both
    # Without TFM's venv: lite and raw on the project's TensorFlow, no TFM side.
    alone = run.vision_plan(_vision_args(vision_envs=["project"]), {"project": "py"}, 0)
    assert {(side, env) for side, env, _ in alone} == {("lite", "project"), ("raw", "project")}
    assert run.vision_plan(_vision_args(vision_models=[]), pythons, 0) == []
    # steps_per_loop within the 10-100.
    assert 10 <= run.VISION_STEPS_PER_LOOP <= 100


def test_run_rounds_records_vision_rows_after_the_workloads(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(run, "write_vision_data", lambda python, data_dir, timeout_s: None)
    monkeypatch.setattr(run, "measure_raw", lambda *a: {"steps_per_sec": 1.0})

    def fake_vision(side, model, python, data_dir, timeout_s):
        calls.append((side, model, python, data_dir))
        return {"steps_per_sec": 2.0, "images_per_sec": 32.0}

    monkeypatch.setattr(run, "measure_vision", fake_vision)
    args = types.SimpleNamespace(rows=["raw"], rounds=3, workloads=["mock"], smoke=False,
                                 timeout=1, max_minutes=10.0, vision_models=["resnet50"],
                                 vision_envs=["tfm"], vision_data_dir=str(tmp_path),
                                 vision_rounds={"resnet50": 2})
    records, rounds_run = run.run_rounds(args, {"project": "py", "tfm": "tfm_py"},
                                         log=lambda msg: None)
    vision = [r for r in records if r["row"] == run.VISION_ROW]
    assert rounds_run == 3
    # ResNet-50 in its first rounds only, every side on TFM's interpreter, order reversed.
    assert [(r["round"], r["side"]) for r in vision] == [
        (0, "lite"), (0, "raw"), (0, "tfm"), (1, "tfm"), (1, "raw"), (1, "lite")]
    assert {r["workload"] for r in vision} == {"resnet_imagenet_resnet50"}
    assert {c[2] for c in calls} == {"tfm_py"} and {c[3] for c in calls} == {str(tmp_path)}
    assert records[0]["row"] == "raw"  # the workloads first


def test_run_measures_no_vision_when_its_data_cannot_be_written(monkeypatch):
    monkeypatch.setattr(run, "write_vision_data", lambda *a: "exit 1: disk full")
    monkeypatch.setattr(run, "measure_vision", lambda *a: pytest.fail("measured anyway"))
    logged = []
    args = types.SimpleNamespace(rows=[], rounds=1, workloads=[], smoke=False, timeout=1,
                                 max_minutes=10.0, vision_models=["resnet18"],
                                 vision_envs=["tfm"])
    run.run_rounds(args, {"project": "py"}, log=logged.append)
    assert logged == ["vision rows not measured: exit 1: disk full"]


@pytest.mark.parametrize("argv, models", [
    (["--smoke"], []), ([], list(run.VISION_MODELS)), (["--no_vision"], []),
    (["--smoke", "--vision_models", "resnet18"], ["resnet18"]),
    (["--vision_models"], [])])
def test_full_runs_include_the_vision_rows_and_smoke_runs_do_not(monkeypatch, tmp_path, argv,
                                                                 models):
    seen = {}

    def fake_rounds(args, pythons, log):
        seen.update(models=args.vision_models, envs=args.vision_envs,
                    resnet50_rounds=args.vision_rounds["resnet50"])
        return [], args.rounds

    monkeypatch.setattr(run, "run_rounds", fake_rounds)
    assert run.main(argv + ["--no_tfm", "--results", str(tmp_path / "r.json"),
                            "--out", str(tmp_path)]) == 0
    assert seen["models"] == models
    assert seen["envs"] == ["project"]  # no TFM venv: lite and raw on the project's TF
    assert seen["resnet50_rounds"] == run.VISION_ROUNDS["resnet50"]
    meta = json.loads((tmp_path / "r.json").read_text())["meta"]
    assert meta["vision"]["workloads"] == [run.vision_workload(m) for m in models]


def _vision_results():
    records = []
    for i, (lite, raw, tfm) in enumerate([(9.9, 10.0, 9.0), (9.0, 10.0, 10.0), (9.5, 10.0, 9.0)]):
        w = "resnet_imagenet_resnet18"
        records += [
            dict(round=i, workload=w, row="vision", side="lite", env="tfm", steps_per_sec=lite,
                 images_per_sec=16 * lite),
            dict(round=i, workload=w, row="vision", side="raw", env="tfm", steps_per_sec=raw,
                 images_per_sec=16 * raw),
            dict(round=i, workload=w, row="vision", side="tfm", env="tfm", steps_per_sec=tfm,
                 images_per_sec=16 * tfm)]
    records.append(dict(round=0, workload="resnet_imagenet_resnet50", row="vision",
                        side="lite", env="tfm", error="exit 1: boom"))
    data = _results(3)
    data["records"] += records
    data["meta"]["vision"] = {
        "models": ["resnet18", "resnet50"], "envs": ["tfm"], "steps_per_loop": 10,
        "workloads": ["resnet_imagenet_resnet18", "resnet_imagenet_resnet50"],
        "loops": {"resnet18": 3, "resnet50": 2}, "rounds": {"resnet18": None, "resnet50": 2},
        "warmup_loops": 2, "batch": 16, "image_size": 64}
    return data


def test_report_vision_rows_ratios_images_and_targets():
    text, summary, checks = report.markdown(_vision_results())
    r18 = summary["resnet_imagenet_resnet18"]
    # Per-round lite/raw 0.99, 0.90, 0.95: median 0.95, a miss; lite/TFM 1.1, 0.9, 1.056: pass.
    assert r18["ratios"]["vision lite@tfm/raw@tfm"]["median"] == pytest.approx(0.95)
    assert r18["ratios"]["vision lite@tfm/tfm@tfm"]["median"] == pytest.approx(9.5 / 9.0)
    assert r18["values"]["vision_images/lite@tfm"]["median"] == pytest.approx(16 * 9.5)
    status = {(c["workload"], c["target"]): c["status"] for c in checks}
    assert status[("resnet_imagenet_resnet18", "vision lite@tfm/raw@tfm >= 0.97")] == "MISS"
    assert status[("resnet_imagenet_resnet18", "vision lite@tfm/tfm@tfm >= 1.0")] == "pass"
    # lite and raw were not run on the project's TF: no target; ResNet-50 failed: no target.
    assert not any("project" in target for w, target in status if w.startswith("resnet"))
    assert not any(w == "resnet_imagenet_resnet50" for w, _ in status)
    # Columns: lite TF 2.20, TFM, raw TF 2.20, then lite/raw and lite/TFM.
    assert "| resnet_imagenet_resnet18 | train (steps/s) | 9.50 [9.00–9.90] | " \
           "9.00 [9.00–10.00] | 10.00 [10.00–10.00] | 0.950 [0.900–0.990] | " \
           "1.056 [0.900–1.100] |" in text
    assert "| resnet_imagenet_resnet18 | train (images/s) | 152 [144–158] | 144 [144–160] | " \
           "160 [160–160] |  |  |" in text
    assert "| resnet_imagenet_resnet50 | train (steps/s) | — | — | — |" in text
    assert "resnet50: first 2 round(s), 2 timed loops" in text
    # A results file without vision rows renders as before.
    assert "Vision (issue 11)" not in report.markdown(_results(1))[0]


def test_vision_rows_give_both_launchers_the_same_overrides_with_summaries_every_loop():
    import vision_rows

    trainer = vision_rows.overrides("resnet50", "/data/train-*", 10, 3, False)["trainer"]
    # Orbit writes the train outputs every loop: lite's summaries are due every loop too.
    assert trainer["summary_interval"] == trainer["steps_per_loop"] == 10
    assert trainer["train_steps"] == 10 * (vision_rows.WARMUP_LOOPS + 3)
    assert trainer["checkpoint_interval"] == trainer["validation_interval"] == vision_rows.NEVER


# ----- issue 21: the vision suite, its report, the GPU vision rows --------------------------

def test_vision_suite_plans_every_row_interleaved_and_sets_each_sides_environment():
    import vision_suite

    models = ["resnet18", "vit_ti16"]
    first = vision_suite.round_plan(models, ["float32", "bfloat16"], 0, raw_models=["resnet18"],
                                    input_models=["resnet18"], input_rounds=1,
                                    model_rounds={"vit_ti16": 1})
    second = vision_suite.round_plan(models, ["float32", "bfloat16"], 1,
                                     raw_models=["resnet18"], input_models=["resnet18"],
                                     input_rounds=1, model_rounds={"vit_ti16": 1})
    # Per model and dtype the two sides back to back; raw only for raw_models; as shipped
    # only where it serves like for like; input in its first round only.
    assert first[:7] == [("resnet18", "float32", "input", "lite"),
                         ("resnet18", "float32", "input", "tfm"),
                         ("resnet18", "float32", "shipped", "lite"),
                         ("resnet18", "float32", "shipped", "tfm"),
                         ("resnet18", "float32", "raw", "raw"),
                         ("resnet18", "bfloat16", "shipped", "lite"),
                         ("resnet18", "bfloat16", "shipped", "tfm")]
    assert [e for e in first if e[0] == "vit_ti16"] == [
        ("vit_ti16", d, "shipped", side) for d in ("float32", "bfloat16")
        for side in ("lite", "tfm")]
    # Reversed every other round; ViT-Ti in its first round only, input too.
    assert second == [e for e in first if e[0] == "resnet18" and e[2] != "input"][::-1]
    separate = vision_suite.round_plan(["resnet18"], ["float32"], 0, separate_like=True)
    assert [s for _, _, s, _ in separate] == ["shipped", "shipped", "like", "like"]
    assert vision_suite.shipped_is_like({"avx512_bf16": True})
    assert not vision_suite.shipped_is_like({"avx2": True, "avx512f": True})
    size = (6, 3, 16)
    for setting, side in (("shipped", "tfm"), ("like", "lite"), ("raw", "raw"),
                          ("input", "lite"), ("probe", "tfm")):
        argv, env = vision_suite.process_argv("py", "resnet18", "bfloat16", setting, side,
                                              "/d", size)
        if setting in ("shipped", "probe"):
            # Each launcher's own choice: the variable unset, the experiment's enable_xla.
            assert vision_suite.ONEDNN_VAR not in env and "--as_shipped" in argv
        else:
            assert env[vision_suite.ONEDNN_VAR] == "1" and "--as_shipped" not in argv
        assert ("ONEDNN_VERBOSE" in env) == (setting == "probe")
        script = "vision_profile.py" if setting == "input" else "vision_rows.py"
        assert argv[1].endswith(script) and argv[argv.index("--side") + 1] == side
        if setting != "input":
            assert argv[argv.index("--dtype") + 1] == "bfloat16"
        if setting in ("shipped", "like"):
            assert argv[argv.index("--steps_per_loop") + 1] == "6"
            assert argv[argv.index("--eval_steps") + 1] == "16"
        else:
            assert "--eval_steps" not in argv


def test_vision_suite_list_prints_probes_rounds_and_the_estimated_time(capsys, monkeypatch):
    import vision_suite

    # A CPU where TensorFlow turns oneDNN on by itself (AVX-512 VNNI / BF16, AMX): as shipped
    # serves like for like. Fixed here, so the listing does not depend on this machine's CPU.
    monkeypatch.setattr(vision_suite, "shipped_is_like", lambda cpu_flags: True)

    assert vision_suite.main(["--list", "--rounds", "3", "--models", "resnet18", "resnet50",
                              "--dtypes", "float32", "--input_models", "--probe_dtypes",
                              "bfloat16", "--model_rounds", "resnet50=1"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    probes = [line for line in lines if line.startswith("probe ")]
    assert len(probes) == 4 and all("ONEDNN_VERBOSE=1" in line for line in probes)
    # Round 1: 2 models x 2 sides; round 2: resnet18 only (first two rounds listed).
    assert sum(line.startswith("round 1 ") for line in lines) == 4
    assert sum(line.startswith("round 2 ") for line in lines) == 2
    est = vision_suite.EST_PROCESS_S
    probes = 2 * (est["resnet18"] + est["resnet50"] - 2 * vision_suite.EST_TIMED_S)
    minutes = (3 * 2 * est["resnet18"] + 2 * est["resnet50"] + probes) / 60
    assert lines[-1].startswith("8 measured processes in 3 round(s) + 4 probes")
    assert f"estimated {minutes:.0f} min" in lines[-1]
    with pytest.raises(SystemExit):
        vision_suite.main(["--list", "--model_rounds", "resnet50"])


def test_onednn_verbose_lines_are_counted_by_kind_and_data_type():
    import vision_suite

    out = "\n".join([
        "onednn_verbose,v1,info,cpu,isa:Intel AVX-512 with bfloat16 support",
        "onednn_verbose,v1,primitive,exec,cpu,reorder,jit:uni,undef,src:f32::blocked:cdba::f0 "
        "dst:bf16::blocked:AcdB16a2b::f0,,,16x8x3x3,1.6",
        "onednn_verbose,v1,primitive,exec,cpu,convolution,brg_conv_fwd:avx512_core_bf16,"
        "forward_training,src:bf16::blocked:acdb::f0 wei:bf16:a:blocked:AcdB16a2b::f0 "
        "bia:undef::undef::: dst:bf16::blocked:acdb::f0,attr-scratchpad:user,alg:x,mb1,0.1",
        "onednn_verbose,v1,primitive,exec,cpu,convolution,brg_conv_fwd:avx512_core_bf16,"
        "forward_training,src:bf16::blocked:acdb::f0 dst:bf16::blocked:acdb::f0,,alg:x,mb1,0.1",
        "onednn_verbose,v1,primitive,exec,cpu,inner_product,brgemm:avx512_core,"
        "forward_training,src:f32::blocked:ab::f0 dst:f32::blocked:ab::f0,,,mb16ic8oc4,0.1",
        "BENCH_RESULT {}"])
    kernels = vision_suite.onednn_kernels(out)
    assert kernels == {"primitives": 4, "bf16_primitives": 3, "by_kind": {
        "convolution brg_conv_fwd:avx512_core_bf16 bf16": 2, "reorder jit:uni bf16/f32": 1,
        "inner_product brgemm:avx512_core f32": 1}}
    assert vision_suite.onednn_kernels("no verbose output")["primitives"] == 0


def test_vision_rows_time_train_loops_before_the_first_evaluation_and_the_second_one():
    import vision_rows

    w = vision_rows.WARMUP_LOOPS
    like = vision_rows.overrides("vit_ti16", "/d/*", 4, 3, False, dtype="bfloat16",
                                 eval_steps=8)
    trained = 4 * (w + 3)
    assert like["trainer"]["train_steps"] == trained + 1
    assert like["trainer"]["validation_interval"] == trained
    assert like["trainer"]["validation_steps"] == 8
    assert like["task"]["validation_data"]["input_path"] == "/d/*"
    assert like["task"]["model"]["backbone"] == {"vit": {"model_name": "vit-ti16"}}
    assert vision_rows.EXPERIMENTS["vit_ti16"] == "deit_imagenet_pretrain"
    assert vision_rows.overrides("mobilenetv3large", "/d/*", 4, 3, None)["task"]["model"][
        "backbone"] == {"mobilenet": {"model_id": "MobileNetV3Large"}}
    # Loops end at 1, 2, 3, 4, 5 s (warm-up: the first w), evaluation 0 (tracing) ends at
    # 9 s, the 1-step loop at 10 s, the timed evaluation (8 steps) at 12 s.
    train_times = [float(t) for t in range(1, w + 4)] + [10.0]
    train, ev = vision_rows.eval_layout(train_times, [9.0, 12.0], 4, 3, 8)
    assert train == pytest.approx(3 * 4 / (train_times[w + 2] - train_times[w - 1]))
    assert ev == pytest.approx(8 / 2.0)
    with pytest.raises(ValueError, match="2 evaluations"):
        vision_rows.eval_layout(train_times, [9.0], 4, 3, 8)


def test_cpu_features_read_the_flags_the_bf16_kernels_depend_on():
    import vision_rows

    info = "processor\t: 0\nmodel name\t: X\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_tile\n"
    assert vision_rows.cpu_features(info) == {
        "avx2": True, "avx512f": True, "avx512_vnni": False, "avx512_bf16": True,
        "amx_tile": True, "amx_bf16": False}
    assert vision_rows.cpu_features("no flags here") == {}


def test_vision_rows_overrides_as_shipped_keep_the_experiments_xla_and_cover_mobilenet():
    import vision_rows

    shipped = vision_rows.overrides("mobilenetv2", "/d/*", 4, 2, None)
    assert "enable_xla" not in shipped["runtime"]
    assert shipped["task"]["model"]["backbone"] == {"mobilenet": {"model_id": "MobileNetV2"}}
    assert vision_rows.EXPERIMENTS["mobilenetv2"] == "mobilenet_imagenet"
    assert "validation_data" not in shipped["task"]  # eval_steps 0: train only
    like = vision_rows.overrides("resnet18", "/d/*", 4, 2, False, dtype="bfloat16", num_gpus=1)
    assert like["runtime"] == {"distribution_strategy": "off", "enable_xla": False,
                               "mixed_precision_dtype": "bfloat16", "num_gpus": 1}


_STATE = {"onednn": True, "xla_compiled": False, "cpu_model": "AMD EPYC", "cpus": 2}


def _suite_record(r, model, setting, side, figure, dtype="float32", eval_figure=None, **state):
    key = "images_per_sec" if setting == "input" else "steps_per_sec"
    record = {"round": r, "model": model, "setting": setting, "side": side, key: figure,
              "dtype": dtype, "loadavg_before": [4.0 + r, 0, 0]}
    record.update(_STATE, enable_xla=setting == "shipped")
    if eval_figure is not None:
        record["eval_steps_per_sec"] = eval_figure
    record.update(state)
    return record


def _suite_results():
    records = [{"round": None, "model": "resnet18", "dtype": "bfloat16", "setting": "probe",
                "side": side, "onednn_kernels": {
                    "primitives": 100, "bf16_primitives": 60, "by_kind": {
                        "convolution brg_conv_fwd:avx512_core_bf16 bf16": 40}}}
               for side in ("lite", "tfm")]
    # lite/tfm train per round: 1.2, 0.8, 1.1 -> median 1.1 (pass), spread ±20 %;
    # eval: 0.9 every round (MISS, slower in every round); lite/raw: 0.9 (MISS);
    # bf16: lite 1.5x its fp32 every round.
    for r, (lite, tfm) in enumerate(((1.2, 1.0), (0.8, 1.0), (1.1, 1.0))):
        records += [_suite_record(r, "resnet18", "shipped", "lite", lite, eval_figure=9.0),
                    _suite_record(r, "resnet18", "shipped", "tfm", tfm, eval_figure=10.0),
                    _suite_record(r, "resnet18", "shipped", "lite", 1.5 * lite, "bfloat16",
                                  eval_figure=9.0),
                    _suite_record(r, "resnet18", "shipped", "tfm", tfm, "bfloat16",
                                  eval_figure=10.0),
                    _suite_record(r, "resnet18", "raw", "raw", lite / 0.9),
                    _suite_record(r, "resnet18", "input", "lite", 900.0),
                    _suite_record(r, "resnet18", "input", "tfm", 1000.0)]
    # A TFM process with oneDNN off: it cannot stand for like for like.
    records.append(_suite_record(0, "resnet50", "shipped", "tfm", 0.5, onednn=False))
    records.append(_suite_record(0, "resnet50", "shipped", "lite", 1.0))
    records.append({"round": 1, "model": "resnet50", "dtype": "float32", "setting": "shipped",
                    "side": "tfm", "error": "exit 1: boom", "loadavg_before": [5.0, 0, 0]})
    meta = {"date": "2026-12-01 11:00", "commit": "abc1234def", "dirty": False,
            "cpu_model": "AMD EPYC", "cpus": 2, "machine": "x86_64", "rounds": 3,
            "cpu_flags": {"avx512_bf16": True, "amx_tile": False},
            "elapsed_s": 600, "batch": 16, "image_size": 64, "warmup_loops": 2,
            "sizes": {"resnet18": [6, 3, 16], "resnet50": [2, 3, 8]},
            "models": ["resnet18", "resnet50"], "dtypes": ["float32", "bfloat16"],
            "shipped_serves_like": True, "raw_models": ["resnet18"],
            "input_models": ["resnet18"]}
    return {"kind": "vision_suite", "meta": meta, "rounds": [], "records": records}


def test_report_renders_every_vision_row_with_per_round_ratios_and_misses(tmp_path):
    text, targets = report.vision_suite_markdown(_suite_results(), source="r.json")
    status = {(m, d, name): (s, st) for m, d, name, s, st in targets}
    train = status[("resnet18", "float32", "like: lite/tfm train >= 1")]
    assert train[0]["median"] == pytest.approx(1.1) and train[1] == "pass"
    assert status[("resnet18", "float32", "like: lite/tfm eval >= 1")][1] == "MISS"
    assert status[("resnet18", "bfloat16", "like: lite/tfm train >= 1")][1] == "pass"
    assert status[("resnet18", "float32", "like: lite/raw train >= 0.97")][1] == "MISS"
    assert status[("resnet18", "float32", "shipped: lite/tfm train >= 1.15")][1] == "MISS"
    assert status[("resnet18", "float32", "input: lite/tfm input >= 1")][1] == "MISS"
    # ResNet-50's TFM process ran with oneDNN off: not like for like, so not measured there.
    assert status[("resnet50", "float32", "like: lite/tfm train >= 1")][1] == "not measured"
    # The as-shipped target names ResNet-18 and MobileNetV2 only; ResNet-50's ratio is shown.
    assert ("resnet50", "float32", "shipped: lite/tfm train >= 1.15") not in status
    assert "| resnet50 | float32 | as shipped (each launcher's defaults) | 2.000 |" in text
    assert "AMD EPYC (2 CPUs, x86_64), AMX no, AVX-512 BF16 yes" in text
    assert "oneDNN on in 22 of 23 processes" in text and "1 process(es) failed" in text
    # What the rounds show, not "at least as fast": the train ratio spans 0.8-1.2.
    assert "| 1.100 [0.800–1.200] | 0.900 [0.900–0.900] | 0.900 [0.900–0.900] | " \
           "indistinguishable within ±20 % |" in text
    assert "| resnet18 | lite | 1.50 [1.50–1.50] | 1.00 [1.00–1.00] | 60 of 100 oneDNN " \
           "primitives bf16" in text
    assert "| resnet18 | float32 | as shipped (each launcher's defaults) | tfm | oneDNN on, " \
           "enable_xla true (not compiled) |" in text
    assert "targets pass; MISS: resnet18 float32 like: lite/tfm eval >= 1;" in text
    # --update writes the vision block only.
    results = tmp_path / "v.json"
    results.write_text(json.dumps(_suite_results()))
    readme = tmp_path / "README.md"
    readme.write_text(f"{report.START_MARKER}\nkeep\n{report.END_MARKER}\n"
                      f"{report.VISION_START_MARKER}\nold\n{report.VISION_END_MARKER}\n")
    assert report.main([str(results), "--update", str(readme)]) == 0
    content = readme.read_text()
    assert "keep" in content and "old" not in content and "targets pass" in content


def test_report_says_not_recorded_where_a_file_lacks_the_machine_state():
    data = _suite_results()
    for key in ("cpu_model", "cpus", "cpu_flags"):
        del data["meta"][key]
    for r in data["records"]:
        for key in ("onednn", "cpu_model"):
            r.pop(key, None)
    text, targets = report.vision_suite_markdown(data)
    assert "CPU not recorded, CPU flags (AMX, AVX-512 BF16) not recorded" in text
    assert "oneDNN not recorded" in text and "oneDNN on" not in text
    # Without a recorded oneDNN state no process stands for like for like.
    like = [st for m, d, name, s, st in targets if name.startswith("like: lite/tfm")]
    assert set(like) == {"not measured"}
    # Rows from another machine are named.
    data = _suite_results()
    data["records"][-2]["cpu_model"] = "Intel Xeon"
    assert "**rows measured on another machine**: Intel Xeon" in \
        report.vision_suite_markdown(data)[0]


def test_report_of_a_run_file_derives_cpu_and_onednn_from_the_records():
    text = report.markdown(_results(1))[0]
    assert "CPU not recorded, oneDNN not recorded" in text and "oneDNN on" not in text
    data = _results(1)
    data["meta"]["cpu_model"] = "AMD EPYC"
    for r in data["records"]:
        r["onednn"] = r["side"] != "tfm"
    text = report.markdown(data)[0]
    assert "CPU AMD EPYC, oneDNN on in 4 of 7 processes that recorded it" in text


def test_verdict_claims_a_lead_only_when_every_round_shows_it():
    assert report.verdict({"median": 1.1, "min": 1.05, "max": 1.2, "n": 5}) == \
        "lite faster in every round (+5 to +20 %)"
    assert report.verdict({"median": 1.0, "min": 0.89, "max": 1.19, "n": 5}) == \
        "indistinguishable within ±19 %"
    assert report.verdict({"median": 0.9, "min": 0.8, "max": 0.95, "n": 3}).startswith(
        "lite slower in every round")
    assert report.verdict({"median": 1.3, "min": 1.3, "max": 1.3, "n": 1}) == \
        "one round: no spread, no verdict"


def test_gpu_vision_rows_list_every_model_dtype_and_xla_and_skip_for_time(tmp_path, capsys):
    import gpu_vision_rows

    combos = gpu_vision_rows.combinations()
    assert len(combos) == 18 and len(set(combos)) == 18
    assert {m for m, _, _ in combos} == {"resnet18", "resnet50", "mobilenetv2"}
    assert gpu_vision_rows.main(["--list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 18 and all("--num_gpus 1" in line for line in lines)
    assert sum("--xla" in line for line in lines) == 9
    cpu = gpu_vision_rows.command("py", "resnet18", "float16", True, True, "/d")
    assert cpu[cpu.index("--num_gpus") + 1] == "0" and "--dtype" in cpu


def test_gpu_check_lists_the_vision_rows():
    import subprocess

    out = subprocess.run(["bash", os.path.join(BENCH, "gpu_check.sh"), "--list"],
                         env=dict(os.environ, PYTHON=sys.executable), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 18 and all("vision_rows.py --side lite" in line for line in lines)


def test_report_uses_an_as_shipped_process_like_for_like_only_in_that_state():
    data = _suite_results()
    _, targets = report.vision_suite_markdown(data)
    like = {(m, d, n): s for m, d, n, s, _ in targets}[
        ("resnet18", "float32", "like: lite/tfm train >= 1")]
    assert like["n"] == 3
    for r in data["records"]:  # compiled with XLA: not the like-for-like state
        if r["side"] == "lite" and r.get("setting") == "shipped":
            r["xla_compiled"] = True
    _, targets = report.vision_suite_markdown(data)
    assert {(m, d, n): st for m, d, n, _, st in targets}[
        ("resnet18", "float32", "like: lite/tfm train >= 1")] == "not measured"
    data = _suite_results()
    data["meta"]["shipped_serves_like"] = False  # the suite ran like for like separately
    _, targets = report.vision_suite_markdown(data)
    assert {(m, d, n): st for m, d, n, _, st in targets}[
        ("resnet18", "float32", "like: lite/tfm train >= 1")] == "not measured"


def test_vision_rows_variants_reach_lites_dataset_and_config():
    import tensorflow as tf
    import vision_rows

    class Task:
        def build_inputs(self, data_config):
            return tf.data.Dataset.range(4)

    params = types.SimpleNamespace(task=types.SimpleNamespace(train_data=None))
    task = Task()
    vision_rows._apply_variant("tf_data_1_thread", params, task)
    assert task.build_inputs(None).options().threading.private_threadpool_size == 1
    task = Task()
    vision_rows._apply_variant("no_map_parallelization", params, task)
    assert task.build_inputs(None).options().experimental_optimization.map_parallelization \
        is False
    seen = []
    params.task.train_data = types.SimpleNamespace(override=seen.append)
    vision_rows._apply_variant("prefetch_2", params, Task())
    assert seen == [{"prefetch_buffer_size": 2}]


def test_suite_time_reads_pytests_closing_line_with_or_without_its_border():
    import suite_time  # pylint: disable=import-outside-toplevel

    quiet = "....\n1 failed, 2001 passed, 1 skipped, 882 warnings in 606.34s (0:10:06)\n"
    assert suite_time.parse_summary(quiet) == {"passed": 2001, "failed": 1, "skipped": 1,
                                               "errors": 0, "pytest_s": 606.34}
    bordered = "===== 3 passed, 2 errors in 1.5s =====\n"
    assert suite_time.parse_summary(bordered)["errors"] == 2
    assert suite_time.parse_summary("no summary")["pytest_s"] is None


def test_suite_time_keeps_the_failures_tracebacks():
    import suite_time  # pylint: disable=import-outside-toplevel

    output = ("....F\n=================== FAILURES ===================\n___ test_x ___\n"
              "E   assert 1 == 2\n========= short test summary info =========\n"
              "FAILED tests/test_a.py::test_x\n1 failed in 1.0s\n")
    section = suite_time.failures_section(output)
    assert section.startswith("=" * 19 + " FAILURES") and "E   assert 1 == 2" in section
    assert "short test summary" not in section
    assert suite_time.failures_section("3 passed in 1.0s") == ""
