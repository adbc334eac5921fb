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
