"""The soak benchmark's harness (benchmarks/soak.py) on a tiny run: its bookkeeping, not its
numbers (no speed or memory figure is asserted).

The verdict arithmetic is checked on hand-made samples whose growth is known, in both
directions, so a verdict that always passes (or always fails) is caught.
"""

import json
import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
sys.path.insert(0, BENCH)

import soak  # noqa: E402


def _sample(step, rss, threads, fds, checkpoints):
    process = {"rss_kib": rss, "threads": threads, "fds": fds}
    return {"train_step": step, "trainer": process, "evaluator": dict(process),
            "model_dir": {"checkpoints": checkpoints}}


def test_verdicts_measure_growth_after_the_warm_up_and_before_shutdown_only():
    samples = [_sample(0, 50, 5, 9, 1),  # warm-up: not judged
               _sample(1000, 100, 20, 12, 5), _sample(3000, 102, 20, 15, 5),  # a write: 15
               _sample(5000, 104, 21, 12, 6),
               _sample(9000, 10, 2, 3, 5)]  # the last loop: shutting down, not judged
    verdict = soak.verdicts(samples, from_step=1000, end_step=9000)
    assert verdict["trainer"]["samples"] == 3
    assert verdict["trainer"]["rss"]["growth"] == pytest.approx(0.04)
    assert verdict["trainer"]["rss_ok"] and verdict["trainer"]["threads_ok"]
    assert verdict["trainer"]["fds_baseline"] == (12, 12)
    assert verdict["trainer"]["fds_max"] == 15
    assert verdict["trainer"]["fds_ok"] and verdict["model_dir"]["checkpoints_ok"]
    grown = samples[:-1] + [_sample(7000, 106, 22, 13, 7), _sample(8000, 106, 22, 13, 5),
                            _sample(8500, 106, 22, 13, 5)]
    verdict = soak.verdicts(grown, from_step=1000, end_step=9000)
    assert verdict["trainer"]["rss"]["growth"] == pytest.approx(0.06)
    assert not verdict["trainer"]["rss_ok"]
    assert verdict["trainer"]["threads"]["growth"] == pytest.approx(0.10)
    assert not verdict["trainer"]["threads_ok"]
    assert verdict["trainer"]["fds_baseline"] == (12, 13)
    assert not verdict["trainer"]["fds_ok"]
    assert verdict["model_dir"]["max_checkpoints"] == 7
    assert not verdict["model_dir"]["checkpoints_ok"]


def test_the_evaluator_is_judged_after_its_third_evaluation_and_a_leak_is_told_from_a_plateau():
    def sample(step, evaluations, evaluator_rss):
        s = _sample(step, 100, 20, 12, 5)
        s["evaluations"] = evaluations
        s["evaluator"] = {"rss_kib": evaluator_rss, "threads": 20, "fds": 12}
        return s

    # The first three evaluations build graphs and input pipelines: 50 -> 100 is not judged.
    plateau = [sample(100 * i, min(i, 3), 50 if i < 3 else 100 + (i > 5)) for i in range(12)]
    verdict = soak.verdicts(plateau, from_step=0, end_step=10 ** 6)["evaluator"]
    assert verdict["samples"] == 9 and verdict["rss"]["start"] == 100
    assert verdict["rss_ok"] and verdict["rss_second_half"]["plateau"]
    # A steady leak of 1 % per sample: within the 5 % limit over a short window, but the
    # second half still grows, so it is not a plateau.
    leak = [sample(100 * i, 3, 1000 + 10 * i) for i in range(6)]
    verdict = soak.verdicts(leak, from_step=0, end_step=10 ** 6)["evaluator"]
    assert verdict["rss_ok"] and not verdict["rss_second_half"]["plateau"]
    assert verdict["rss_second_half"]["fitted_growth"] == pytest.approx(20 / 1030)


def test_the_plot_draws_every_sample_of_both_processes_and_each_evaluation():
    import xml.etree.ElementTree as ET

    import soak_plot

    samples = []
    for i in range(20):
        s = _sample(10 * i, 1024 * (100 + i), 20, 12, 5)
        s.update(time_s=60.0 * i, evaluations=i // 4)
        samples.append(s)
    samples[-1]["evaluator"] = None  # the evaluator stopped first
    svg = ET.fromstring(soak_plot.render({"samples": samples,
                                          "evaluator_warm_up_evaluations": 3}))
    ns = "{http://www.w3.org/2000/svg}"
    trainer, evaluator = svg.iter(ns + "polyline")
    assert len(trainer.get("points").split()) == 20
    assert len(evaluator.get("points").split()) == 19
    dashed = [line for line in svg.iter(ns + "line") if line.get("stroke-dasharray")]
    assert len(dashed) == 4  # evaluations 1..4 finished at minutes 4, 8, 12, 16
    # The trainer's RSS rises from 100 to 119 MiB: its last point is drawn higher (smaller y).
    first, last = trainer.get("points").split()[0], trainer.get("points").split()[-1]
    assert float(last.split(",")[1]) < float(first.split(",")[1])


def test_resnet18_soak_trains_resnet_imagenet_at_64_with_its_own_checkpoint_interval():
    task = {"model": {"input_size": [64, 64, 3], "backbone": {"resnet": {"model_id": 18}}}}
    command = soak._command("resnet18", "continuous_eval", "/m", 500, task)
    assert command[command.index("--experiment") + 1] == "resnet_imagenet"
    assert command[command.index("--mode") + 1] == "continuous_eval"
    override = json.loads(command[command.index("--params_override") + 1])
    assert override["task"] == task
    assert override["trainer"]["checkpoint_interval"] == 100
    assert override["trainer"]["train_steps"] == 500
    mock = json.loads(soak._command("mock", "train", "/m", 500)[-1])
    assert "task" not in mock and mock["trainer"]["checkpoint_interval"] == 50
    with pytest.raises(ValueError, match="experiment 'resnet50': use one of"):
        soak.run(10, "/unused.json", experiment="resnet50")


@pytest.mark.slow
def test_tiny_soak_run_samples_both_processes_and_writes_the_results_file(tmp_path):
    out = tmp_path / "results" / "soak.json"
    results = soak.run(train_steps=300, out_path=str(out), model_dir=str(tmp_path / "model"),
                       sample_interval_s=0.2, warm_up_loops=0)
    assert json.loads(out.read_text()) == json.loads(json.dumps(results))
    assert results["exit_codes"] == {"trainer": 0, "evaluator": 0}
    assert results["final_train_step"] == 300
    assert results["final_eval_step"] == 300  # the evaluator ran beside it to the end
    machine = results["machine"]
    assert machine["cores"] == os.cpu_count() and machine["cpu_model"]
    assert machine["tensorflow"].count(".") >= 1
    samples = results["samples"]
    steps = [s["train_step"] for s in samples]
    assert steps == sorted(steps) and steps[-1] == 300
    live = [s for s in samples if s["trainer"] is not None]
    assert live and all(s["trainer"]["rss_kib"] > 0 and s["trainer"]["threads"] > 0
                        and s["trainer"]["fds"] > 0 for s in live)
    assert any(s["evaluator"] is not None for s in samples)
    # Saves after the first loop (10), every 50 from there, and at the end (300): 7, of which
    # max_to_keep 5 remain.
    final = results["verdicts"]["model_dir"]
    assert final["final"]["checkpoints"] == 5 and final["checkpoints_ok"]
    assert sorted(int(name[5:-6]) for name in os.listdir(tmp_path / "model")
                  if name.endswith(".index")) == [110, 160, 210, 260, 300]
    assert final["final"]["event_bytes"] > 0 and final["final"]["checkpoint_bytes"] > 0


def test_the_docs_soak_plot_is_drawn_from_its_results_file():
    import soak_plot

    root = os.path.dirname(BENCH)
    with open(os.path.join(BENCH, "results", "2026-12-06-be39ab1-soak-resnet18-2h.json")) as f:
        expected = soak_plot.render(json.load(f))
    with open(os.path.join(root, "docs", "images", "soak-resnet18-2h.svg")) as f:
        assert f.read() == expected, "rerun benchmarks/soak_plot.py on the results file"
