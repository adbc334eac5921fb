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
    assert status[("mock", "train1 lite@tfm/tfm@tfm >= 5.0")] == "MISS"
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
    assert "old table" not in content and "| mock | train1 lite@tfm/tfm@tfm >= 5.0 |" in content
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


def test_ab_checkouts_reports_per_round_ratios_and_puts_each_checkout_first(monkeypatch):
    import ab_checkouts  # pylint: disable=import-outside-toplevel

    seen = []

    def fake_measure_rows(side, workload, rows, smoke=False):
        seen.append(os.environ["PYTHONPATH"])
        speed = {"/a": 100.0, "/b": 110.0}[os.environ["PYTHONPATH"]] * (1 + len(seen) % 2)
        return {row: {"steps_per_sec": speed} for row in rows}

    monkeypatch.setattr(ab_checkouts.run, "measure_rows", fake_measure_rows)
    monkeypatch.setattr(ab_checkouts, "_git_head", lambda checkout: checkout)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    ab_checkouts.main(["--a", "/a", "--b", "/b", "--workloads", "mock", "--rows", "train100",
                       "--rounds", "2"])
    # Alternating order: a, b in round 1, then b, a; PYTHONPATH restored afterwards.
    assert seen == ["/a", "/b", "/b", "/a"] and "PYTHONPATH" not in os.environ
    samples = [{"workload": "mock", "a": {"train100": {"steps_per_sec": a}},
                "b": {"train100": {"steps_per_sec": b}}} for a, b in ((100, 110), (200, 180))]
    summary = ab_checkouts.summarise(samples, ["train100"], ["mock"])["mock"]["train100"]
    assert summary["median"] == pytest.approx((1.1 + 0.9) / 2)
    assert (summary["min"], summary["max"]) == (pytest.approx(0.9), pytest.approx(1.1))
    assert (summary["a"], summary["b"], summary["rounds"]) == (150, 145, 2)


# ----- issue 21: the vision suite, its report, the GPU vision rows --------------------------

def test_vision_suite_interleaves_sides_per_model_and_sets_onednn_per_setting():
    import vision_suite

    first = vision_suite.round_plan(["resnet18", "resnet50"], ["resnet18"], 0,
                                    model_rounds={"resnet50": 1})
    second = vision_suite.round_plan(["resnet18", "resnet50"], ["resnet18"], 1,
                                     model_rounds={"resnet50": 1})
    # A model's sides run back to back; raw only for raw_models; input only for resnet18.
    assert [m for m, _, _ in first] == ["resnet18"] * 7 + ["resnet50"] * 4
    assert ("resnet50", "like", "raw") not in first
    assert ("resnet18", "input", "lite") in first and ("resnet50", "input", "lite") not in first
    # Reversed every other round, ResNet-50 in its first round only.
    assert second == first[:7][::-1]
    for setting, side in vision_suite.SIDES:
        argv, env = vision_suite.process_argv("py", "resnet18", setting, side, "/d", 4, 2)
        if setting == "shipped":
            # Each launcher's own choice: the variable unset, the experiment's enable_xla.
            assert vision_suite.ONEDNN_VAR not in env and "--as_shipped" in argv
            assert "--xla" not in argv
        else:
            assert env[vision_suite.ONEDNN_VAR] == "1" and "--as_shipped" not in argv
        script = "vision_profile.py" if setting == "input" else "vision_rows.py"
        assert argv[1].endswith(script) and argv[argv.index("--side") + 1] == side


def test_vision_rows_overrides_as_shipped_keep_the_experiments_xla_and_cover_mobilenet():
    import vision_rows

    shipped = vision_rows.overrides("mobilenetv2", "/d/*", 4, 2, None)
    assert "enable_xla" not in shipped["runtime"]
    assert shipped["task"]["model"]["backbone"] == {"mobilenet": {"model_id": "MobileNetV2"}}
    assert vision_rows.EXPERIMENTS["mobilenetv2"] == "mobilenet_imagenet"
    like = vision_rows.overrides("resnet18", "/d/*", 4, 2, False, dtype="bfloat16", num_gpus=1)
    assert like["runtime"] == {"distribution_strategy": "off", "enable_xla": False,
                               "mixed_precision_dtype": "bfloat16", "num_gpus": 1}


def _suite_record(r, model, setting, side, figure, **state):
    key = "images_per_sec" if setting == "input" else "steps_per_sec"
    record = {"round": r, "model": model, "setting": setting, "side": side, key: figure,
              "loadavg_before": [4.0 + r, 0, 0]}
    if setting != "input":
        record.update({"onednn": True, "enable_xla": setting == "shipped",
                       "xla_compiled": False}, **state)
    return record


def _suite_results():
    records = []
    # lite/tfm like for like per round: 1.2, 0.8, 1.1 -> median 1.1 (pass);
    # shipped lite/tfm: 3.0, 1.5, 2.5 -> 2.5 (pass); lite/raw: 0.9 each round (MISS).
    for r, (lite, tfm, shipped_tfm) in enumerate(((1.2, 1.0, 0.4), (0.8, 1.0, 0.8),
                                                  (1.1, 1.0, 0.48))):
        records += [_suite_record(r, "resnet18", "like", "lite", lite),
                    _suite_record(r, "resnet18", "like", "tfm", tfm),
                    _suite_record(r, "resnet18", "like", "raw", lite / 0.9),
                    _suite_record(r, "resnet18", "shipped", "lite", 1.2),
                    _suite_record(r, "resnet18", "shipped", "tfm", shipped_tfm,
                                  onednn=False),
                    _suite_record(r, "resnet18", "input", "lite", 900.0),
                    _suite_record(r, "resnet18", "input", "tfm", 1000.0)]
    records.append({"round": 0, "model": "resnet50", "setting": "like", "side": "tfm",
                    "error": "exit 1: boom", "loadavg_before": [5.0, 0, 0]})
    meta = {"date": "2026-12-01 11:00", "commit": "abc1234def", "dirty": False,
            "cpu_model": "AMD EPYC", "cpus": 2, "machine": "x86_64", "rounds": 3,
            "elapsed_s": 600, "batch": 16, "image_size": 64, "loops": 2, "steps_per_loop": 4,
            "warmup_loops": 2, "models": ["resnet18", "resnet50"]}
    return {"kind": "vision_suite", "meta": meta, "rounds": [], "records": records}


def test_report_renders_the_vision_suite_with_per_round_ratios_and_misses(tmp_path):
    text, targets = report.vision_suite_markdown(_suite_results(), source="r.json")
    status = {(m, name): (s, st) for m, name, s, st in targets}
    assert status[("resnet18", "like: lite/tfm >= 1")][0]["median"] == pytest.approx(1.1)
    assert status[("resnet18", "like: lite/tfm >= 1")][1] == "pass"
    assert status[("resnet18", "like: lite/raw >= 0.97")][1] == "MISS"
    assert status[("resnet18", "shipped: lite/tfm >= 2")][0]["median"] == pytest.approx(2.5)
    assert status[("resnet18", "input: lite/tfm >= 1")][1] == "MISS"
    assert status[("resnet50", "like: lite/tfm >= 1")][1] == "not measured"
    assert "AMD EPYC" in text and "1 process(es) failed" in text
    assert "| resnet18 | as shipped (each launcher's defaults) | tfm | oneDNN off, enable_xla " \
           "true (not compiled) |" in text
    # --update writes the vision block only.
    results = tmp_path / "v.json"
    results.write_text(json.dumps(_suite_results()))
    readme = tmp_path / "README.md"
    readme.write_text(f"{report.START_MARKER}\nkeep\n{report.END_MARKER}\n"
                      f"{report.VISION_START_MARKER}\nold\n{report.VISION_END_MARKER}\n")
    assert report.main([str(results), "--update", str(readme)]) == 0
    content = readme.read_text()
    assert "keep" in content and "old" not in content and "targets pass" in content


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


def test_report_uses_the_as_shipped_lite_process_like_for_like_only_in_that_state():
    data = _suite_results()
    data["meta"]["lite_once"] = True
    data["records"] = [r for r in data["records"]
                       if not (r["side"] == "lite" and r["setting"] == "like")]
    _, targets = report.vision_suite_markdown(data)
    like = {(m, name): s for m, name, s, _ in targets}[("resnet18", "like: lite/tfm >= 1")]
    assert like["median"] == pytest.approx(1.2) and like["n"] == 3  # shipped lite 1.2 / 1.0
    for r in data["records"]:  # compiled with XLA: not the like-for-like state
        if r["side"] == "lite" and r["setting"] == "shipped":
            r["xla_compiled"] = True
    _, targets = report.vision_suite_markdown(data)
    assert {(m, n): st for m, n, _, st in targets}[("resnet18", "like: lite/tfm >= 1")] == \
        "not measured"
