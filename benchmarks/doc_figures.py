"""The benchmark figures the docs quote, each recomputed from the results file it comes from.

`report.py --check` runs `check()`: every rendered block (between the `report.py` markers) is
rendered again from the file it names and compared, and every figure quoted in prose is listed
in `CLAIMS` as the sentence it appears in, with `{}` where the figure goes and a function that
computes the figure from its results file. A claim passes when the doc holds the sentence with
the recomputed figures (whitespace and `**` bold markers ignored, since prose wraps). A figure
quoted in prose but absent from `CLAIMS` is not checked: add it here when you quote one.

Not checked, because no results file holds them (the docs say so where they quote them:
"no results file", "printed, not filed", "not filed"): the start-up profile of `lite-train
--experiment mock` (benchmarks/README.md, "Where the start-up time goes", and its summary in
docs/benchmarks.md), the summary-write A/B (45 / 76 µs) and the in-process loop split (1.03×),
the first-step bullets' op / conversion / import counts, `import tensorflow, keras` 4.15–4.65 s
and the 437-variable cProfile, the ViT projection A/B (1.16×) and the op-histogram counts of
the Adam powers and MobileNetV3 activations, the
convolution bias `add` / `bias_add` A/B (1.001), the cost of an eager global-step read right
after a graph call against a tight loop's (issue 55's inner loop), the float32 noise figures measured on an Intel
Xeon with AMX in an earlier session (tests/vision/fp32_noise.py, docs/detection.md), the
learning runs' APs of 2026-12-03 (docs/detection.md; the release learning tests write a results
file when `LITE_LEARNING_RUN_OUT` names one, tests/vision/learning_run.py). The soaks' own prose about how they ran, machine
descriptions, loads, and the commands' duration estimates are not figures of a result.

Standard library only, like report.py.
"""

from __future__ import annotations

import functools
import json
import os
import re
import statistics
import sys
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)

import first_step  # noqa: E402
import startup_profile  # noqa: E402
import report  # noqa: E402
import rounds as rounds_lib  # noqa: E402
import speed_targets  # noqa: E402
import step_vs_tfm  # noqa: E402

REPO_ROOT = os.path.dirname(_HERE)
RESULTS = "benchmarks/results/"


# The A/B harnesses that wrote some results files have retired (docs/benchmarks.md, "Retired
# one-off harnesses"); their files' figures are still recomputed here, with their summaries.
def _checkout_ab_summary(samples, rows, workloads_):
    """ab_checkouts.py's summary: {workload: {row: median/min/max of B/A, a, b, rounds}}."""
    summary = {}
    for workload in workloads_:
        for row in rows:
            ratios, a_values, b_values = [], [], []
            for sample in samples:
                a = sample["a"].get(row, {}).get("steps_per_sec")
                b = sample["b"].get(row, {}).get("steps_per_sec")
                if sample["workload"] != workload or not (a and b):
                    continue
                ratios.append(b / a)
                a_values.append(a)
                b_values.append(b)
            if ratios:
                summary.setdefault(workload, {})[row] = dict(
                    median=statistics.median(ratios), min=min(ratios), max=max(ratios),
                    a=statistics.median(a_values), b=statistics.median(b_values),
                    rounds=len(ratios))
    return summary


def _shipped_ab_summary(records, variants):
    """shipped_ab.py's summary: {variant: ratio_to_base and steps_per_sec stats}."""
    by_round = {}
    for record in records:
        if "error" not in record:
            by_round.setdefault(record["round"], {})[record["variant"]] = record["steps_per_sec"]
    out = {}
    for variant in variants:
        ratios = [rates[variant] / rates["base"] for rates in by_round.values()
                  if variant in rates and "base" in rates]
        rates = [rates[variant] for rates in by_round.values() if variant in rates]
        out[variant] = {
            "ratio_to_base": dict(median=statistics.median(ratios), min=min(ratios),
                                  max=max(ratios), n=len(ratios)) if ratios else None,
            "steps_per_sec": dict(median=statistics.median(rates), min=min(rates),
                                  max=max(rates)) if rates else None}
    return out
# The docs whose benchmark figures are checked.
DOCS = ("README.md", "docs/benchmarks.md", "benchmarks/README.md", "docs/multi_worker_faults.md",
        "docs/detection.md", "docs/export.md", "docs/testing.md", "docs/video.md",
        # A module's docstring is prose like a doc's (the float32 noise behind the tolerances).
        "tests/vision/fp32_noise.py")
# The rendered blocks: (start marker, end marker).
BLOCKS = ((report.START_MARKER, report.END_MARKER),
          (report.VISION_START_MARKER, report.VISION_END_MARKER),
          (report.STEP_VS_TFM_START_MARKER, report.STEP_VS_TFM_END_MARKER),
          (report.FIRST_STEP_START_MARKER, report.FIRST_STEP_END_MARKER))
_SOURCE = re.compile(r"From `(benchmarks/results/[^`]+\.json)`")


class Claim(NamedTuple):
    """A sentence of `doc` with `{}` for each figure; `figures()` gives them as quoted."""
    doc: str
    text: str
    figures: Callable[[], Tuple[str, ...]]


@functools.lru_cache(maxsize=None)
def load(name: str) -> dict:
    """A results file under benchmarks/results/, read once."""
    with open(os.path.join(REPO_ROOT, RESULTS, name)) as f:
        return json.load(f)


def spread(s: dict, digits: int = 3) -> str:
    """'median [min–max]' as the docs write it."""
    return f"{s['median']:.{digits}f} [{s['min']:.{digits}f}–{s['max']:.{digits}f}]"


def pm(s: dict) -> int:
    """The farthest round from 1, in per cent (report.verdict's ±X)."""
    return round(100 * max(abs(s["min"] - 1.0), abs(s["max"] - 1.0)))


# --- vision_suite.py files ------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def suite(name: str):
    """(figures, ratios, bf16 speed-ups) of a vision_suite.py file (report.py's summary)."""
    return report.summarize_vision_suite(load(name))


def suite_ratio(name, model, figure="train", setting="like", dtype="float32", other="tfm"):
    return suite(name)[1][(model, dtype, setting, figure, "lite", other)]


def suite_speedup(name, model, side, figure="train"):
    return suite(name)[2][(model, side, figure)]["median"]


def suite_targets(name) -> Tuple[int, int]:
    """(passed, total) targets of a vision_suite.py file, as its rendered block counts them."""
    text, _ = report.vision_suite_markdown(load(name))
    found = re.search(r"(\d+) of (\d+) targets pass", text)
    return int(found.group(1)), int(found.group(2))


FINAL_SUITE = "2026-12-02-7e1676d-vision.json"
SUITE_MODELS = ("resnet18", "resnet50", "mobilenetv2", "mobilenetv3large", "vit_ti16")


def like_train_medians(name=FINAL_SUITE) -> List[dict]:
    return [suite_ratio(name, m, dtype=d) for m in SUITE_MODELS
            for d in ("float32", "bfloat16")]


def _range(values, digits=2, sep="–"):
    return f"{min(values):.{digits}f}{sep}{max(values):.{digits}f}"


# --- run.py files ---------------------------------------------------------------------------

def targets_passed(name) -> Tuple[int, int]:
    """(passed, total) targets of a run.py file judged on today's TARGETS."""
    _, _, checks = report.markdown(load(name))
    return sum(c["status"] == "pass" for c in checks), len(checks)


@functools.lru_cache(maxsize=None)
def run_ratios(name) -> Dict[str, dict]:
    """report.summarize of a run.py file: {workload: {"values": ..., "ratios": ...}}."""
    records = load(name)["records"]
    workloads = sorted({r["workload"] for r in records})
    return report.summarize(records, max(r["round"] for r in records) + 1, workloads)


def _status(s, threshold=0.97):
    return "pass" if s["median"] >= threshold else "MISS"


def outer_loop_ms(name, workload, column):
    return f"{run_ratios(name)[workload]['values'][f'outer_loop/{column}']['median']:.2f}"


B9A = "2026-12-02-b9a447a.json"


def run_vision_ratio(name, model) -> str:
    """lite/TFM (both on TFM's TensorFlow) of a run.py file's vision row for `model`."""
    records = load(name)["records"]
    workload = f"resnet_imagenet_{model}"
    summary = report.summarize_vision(records, max(r["round"] for r in records) + 1, [workload])
    return f"{summary[workload]['ratios']['vision lite@tfm/tfm@tfm']['median']:.3f}"


def lite_raw_row(workload):
    ratios = run_ratios(B9A)[workload]["ratios"]
    pair = [ratios[f"train100 lite@{env}/raw@{env}"] for env in ("tfm", "project")]
    statuses = sorted({_status(s) for s in pair}, key=["pass", "MISS"].index)
    return (f"| {workload} | spl=100 lite/raw ≥ 0.97 (TF 2.20 / TF 2.21) | {{}} / {{}} | "
            f"{' / '.join(statuses)} |"), lambda: tuple(spread(s) for s in pair)


# --- first_step.py, step_vs_tfm.py, shipped_ab.py files -------------------------------------

def first_ratio(name, model, side="lite", field="first_step_s"):
    return first_step.summarize(load(name)["records"])["ratios"][f"{model}/{side}/tfm"][field]


def _fs_records(name, model, side) -> List[dict]:
    """The successful first_step.py records of one model and side."""
    return [r for r in load(name)["records"] if r.get("rc") == 0
            and (r["model"], r["side"]) == (model, side)]


def first_rounds(name, model, side="lite") -> List[float]:
    """Per-round lite/TFM first step of `model`."""
    records = [r for r in load(name)["records"] if r.get("rc") == 0 and r["model"] == model]
    tfm = {r["round"]: r["first_step_s"] for r in records if r["side"] == "tfm"}
    return [r["first_step_s"] / tfm[r["round"]] for r in records
            if r["side"] == side and r["round"] in tfm]


FIRST_STEP_WINDOWS = ("2026-12-02-33ea081-first-step-tfm.json",
                      "2026-12-02-51d07bf-first-step.json", "2026-12-02-c45dcda-first-step.json")


def resnet50_first_step_medians() -> List[float]:
    return [first_ratio(f, "resnet50")["median"] for f in FIRST_STEP_WINDOWS]


FIRST_STEP_MODELS = {"resnet50": "ResNet-50", "mobilenetv2": "MobileNetV2",
                     "vit_ti16": "ViT-Ti/16"}
LOADED = "2026-12-02-2af19b0-first-step.json"


def _median(name, model, side, field="first_step_s", baseline="tfm"):
    table = first_step.summarize(load(name)["records"], baseline=baseline)["table"]
    return table[f"{model}/{side}"][field]["median"]


# Issue 55: time to first step and peak memory (first_step.py with its RetinaNet row and peak
# RSS; startup_profile.py's phases of one lite process).
FS55_RESNET50 = "2026-12-06-b9f462a-first-step-resnet50.json"
FS55_RETINANET = "2026-12-06-b9f462a-first-step.json"
PROFILE55 = "2026-12-06-b9f462a-startup-profile.json"
_PHASES55 = ("imports", "build_model", "optimizer_variables", "build_inputs", "trace",
             "first_run", "first_step")


def startup_phases(model: str) -> Tuple[str, ...]:
    """The load, the phases' seconds, the peak and where it was reached, of `model`'s lite
    process in PROFILE55."""
    record = next(r for r in load(PROFILE55)["records"] if r["model"] == model)
    phases = startup_profile.phases(record["marks"])
    where = {"first loop end": "after step 1 (the checkpoint written after it, steps 2–3)"}.get(
        phases["peak_phase"], "in graph optimisation and the first run"
        if str(phases["peak_phase"]).startswith("trace loop") else phases["peak_phase"])
    at_step1 = next(m["hwm_mb"] for m in record["marks"] if m["what"] == "first loop end")
    return ((f"{record['loadavg_1m_before']:.1f}",)
            + tuple(f"{phases[k]:.1f}" for k in _PHASES55)
            + (str(phases["peak_hwm_mb"]), str(at_step1), where))


def fs55_ratio(name: str, model: str, field: str, side: str = "lite") -> str:
    return spread(first_step.summarize(load(name)["records"])["ratios"][
        f"{model}/{side}/tfm"][field])


def first_step_rows() -> List[Tuple[str, Callable[[], Tuple[str, ...]]]]:
    """The three first-step tables of docs/benchmarks.md, one (row template, figures) a row:
    before/after of lite alone, lite against TFM, and base / after / TFM."""
    ab, tfm, three = ("2026-12-02-2af19b0-first-step-ab.json", FIRST_STEP_WINDOWS[0],
                      FIRST_STEP_WINDOWS[1])
    fields = ("first_step_s", "trace_compile_s", "cpu_s")
    rows = []
    for model, title in FIRST_STEP_MODELS.items():
        rows.append((f"| {title} | {{}} → {{}} | {{}} | {{}} | {{}} |", lambda m=model: (
            f"{_median(ab, m, 'base', baseline='base'):.1f}",
            f"{_median(ab, m, 'lite', baseline='base'):.1f}")
            + tuple(spread(first_step.summarize(load(ab)["records"], baseline="base")
                           ["ratios"][f"{m}/lite/base"][f]) for f in fields)))
        rows.append((f"| {title} | {{}} | {{}} | {{}} | {{}} / {{}} | {{}} | {{}} |",
                     lambda m=model: (
                         f"{_median(tfm, m, 'lite'):.2f}", f"{_median(tfm, m, 'tfm'):.2f}",
                         spread(first_ratio(tfm, m)),
                         f"{_median(tfm, m, 'lite', 'startup_s'):.2f}",
                         f"{_median(tfm, m, 'tfm', 'startup_s'):.2f}",
                         spread(first_ratio(tfm, m, field="trace_compile_s")),
                         spread(first_ratio(tfm, m, field="cpu_s")))))
        rows.append((f"| {title} | {{}} / {{}} / {{}} | {{}} | {{}} | {{}} | {{}} |",
                     lambda m=model: tuple(f"{_median(three, m, side):.2f}"
                                           for side in ("base", "lite", "tfm"))
                     + (spread(first_ratio(three, m, "base")), spread(first_ratio(three, m)),
                        spread(first_ratio(three, m, field="trace_compile_s")),
                        spread(first_ratio(three, m, field="cpu_s")))))
    return rows


FINAL_STEP_VS_TFM = "2026-12-02-4cc55f6-step-vs-tfm.json"


def step_vs_tfm_rows(name=FINAL_STEP_VS_TFM, kind=None) -> List[dict]:
    kinds = ("train", "eval") if kind is None else (kind,)
    return [s for r in load(name)["records"] for k in kinds
            if (s := step_vs_tfm.summarize(r, k)) is not None]


def step_speedup(model, side, name=FINAL_STEP_VS_TFM) -> float:
    """bf16 over float32 training speed of one side in a step_vs_tfm.py file."""
    return step_vs_tfm._dtype_speedup(  # pylint: disable=protected-access
        load(name)["records"], model, side, "train")


def step_vs_tfm_row(name, model, dtype, kind="train") -> dict:
    record = next(r for r in load(name)["records"]
                  if r["model"] == model and r["dtype"] == dtype)
    return step_vs_tfm.summarize(record, kind)


MASKRCNN_STEP_VS_TFM = "2026-12-03-5595f55-step-vs-tfm-maskrcnn.json"
DETECTION_BATCH = 2  # detection_rows.BATCH: images per step of the detection rows


def detection_row(name, model, kind) -> Tuple[str, ...]:
    """A detection row's figures as docs/benchmarks.md tabulates them: lite and TFM ms per
    step (medians), lite/TFM median [min–max], rounds lite won, images/s of each median."""
    s = step_vs_tfm_row(name, model, "float32", kind)
    return (f"{s['lite_ms']:,.0f}", f"{s['tfm_ms']:,.0f}", spread(s),
            f"{s['lite_wins']}/{s['rounds']}",
            *(f"{1000.0 * DETECTION_BATCH / s[f'{side}_ms']:.2f}" for side in ("lite", "tfm")))


def first_calls(name, model) -> Tuple[str, ...]:
    """First train and eval call (trace + run) of lite and TFM, seconds: lite train, TFM
    train, lite eval, TFM eval."""
    record = next(r for r in load(name)["records"] if r["model"] == model)
    return tuple(f"{record['first_call_s'][side][kind]:.0f}"
                 for kind in ("train", "eval") for side in ("lite", "tfm"))


def load_range(name, model) -> Tuple[str, str]:
    """The 1-minute load average over a record's rounds, (lowest, highest)."""
    record = next(r for r in load(name)["records"] if r["model"] == model)
    loads = [r["loadavg"][0] for r in record["rounds"]]
    return f"{min(loads):.1f}", f"{max(loads):.1f}"


def step_ranges(name, model) -> Tuple[str, ...]:
    """(eval lowest, eval highest, train lowest, train highest) seconds a step, over both
    sides and every round of a step_vs_tfm.py record."""
    record = next(r for r in load(name)["records"] if r["model"] == model)
    out = []
    for kind, digits in (("eval", 2), ("train", 0)):
        values = [r["ms_per_step"][side][kind] / 1000.0 for r in record["rounds"]
                  for side in ("lite", "tfm")]
        out += [f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"]
    return tuple(out)


def train_over_eval(name, model) -> float:
    """Median training step over median eval step, both sides' medians averaged."""
    rows = [step_vs_tfm_row(name, model, "float32", kind) for kind in ("train", "eval")]
    return statistics.mean(rows[0][f"{side}_ms"] / rows[1][f"{side}_ms"]
                           for side in ("lite", "tfm"))


def shipped(name, variant) -> dict:
    data = load(name)
    variants = sorted({r["variant"] for r in data["records"] if "variant" in r})
    return _shipped_ab_summary(data["records"], variants)[variant]["ratio_to_base"]


def shipped_rounds(name, variant) -> Tuple[int, int]:
    """(rounds where `variant` beat base, rounds)."""
    by_round = {}
    for r in load(name)["records"]:
        if "error" not in r:
            by_round.setdefault(r["round"], {})[r["variant"]] = r["steps_per_sec"]
    pairs = [(v[variant], v["base"]) for v in by_round.values() if variant in v and "base" in v]
    return sum(a > b for a, b in pairs), len(pairs)


# --- ab_checkouts.py and single-summary files -----------------------------------------------

def ab_row(name, workload) -> Tuple[str, ...]:
    """A before/after table row of an ab_checkouts.py file, recomputed from its samples."""
    data = load(name)
    rows = ("train100", "train1", "train1_nosum", "eval")
    summary = _checkout_ab_summary(data["samples"], rows, [workload])[workload]
    return tuple(spread(summary[row]) for row in rows)


# --- soak.py files --------------------------------------------------------------------------

def soak_cell(name, process, figure, digits=1) -> Tuple[str, ...]:
    """A soak results file's verdict for `process` as the docs quote it: `rss` -> (growth %,
    start KiB, end KiB); `threads` -> (start, end, max); `fds` -> (baseline start, baseline
    end, max)."""
    v = load(name)["verdicts"][process]
    if figure == "rss":
        return (f"{100 * v['rss']['growth']:+.{digits}f}", f"{v['rss']['start']:,}",
                f"{v['rss']['end']:,}")
    if figure == "threads":
        return tuple(str(v["threads"][k]) for k in ("start", "end", "max"))
    return (str(v["fds_baseline"][0]), str(v["fds_baseline"][1]), str(v["fds_max"]))


def soak_timeline(name, every_s=300) -> List[str]:
    """The docs' over-time table of a soak: the first sample at or after each `every_s`
    seconds and the last one, of the samples taken after the first train loop and before
    the trainer was stopped, with both processes alive, as markdown rows: minute,
    train step, eval step, then RSS (MiB), threads and open fds of the trainer and the
    evaluator."""
    data = load(name)
    stop_s = (data.get("stopped") or {}).get("time_s", float("inf"))
    live = [s for s in data["samples"] if s["trainer"] and s["evaluator"]
            and s["train_step"] > 0 and s["time_s"] < stop_s]
    picked, mark = [], 0.0
    for sample in live:
        if sample["time_s"] >= mark:
            picked.append(sample)
            mark = (sample["time_s"] // every_s + 1) * every_s
    if live and picked[-1] is not live[-1]:
        picked.append(live[-1])
    return ["| {:.0f} | {:,} | {:,} | {:.0f} / {} / {} | {:.0f} / {} / {} |".format(
        s["time_s"] / 60, s["train_step"], s["eval_step"],
        s["trainer"]["rss_kib"] / 1024, s["trainer"]["threads"], s["trainer"]["fds"],
        s["evaluator"]["rss_kib"] / 1024, s["evaluator"]["threads"], s["evaluator"]["fds"])
        for s in picked]


def soak_model_dir(name) -> dict:
    """model_dir's sizes at a soak's end."""
    return load(name)["verdicts"]["model_dir"]["final"]


def _trainer_window(name, process) -> List[dict]:
    """`process`'s samples from the warm-up step to the trainer's stop (or last step)."""
    data = load(name)
    end = (data.get("stopped") or {}).get("train_step", data["train_steps"])
    return [s[process] for s in data["samples"]
            if s[process] and data["warm_up_step"] <= s["train_step"] < end]


def soak_fds_spread(name, process="trainer") -> Tuple[str, ...]:
    """(the most frequent fd count, its samples, the judged samples, the other counts) over
    the judged window of a soak."""
    counts = {}
    for sample in _trainer_window(name, process):
        counts[sample["fds"]] = counts.get(sample["fds"], 0) + 1
    common = max(counts, key=counts.get)
    others = " or ".join(str(c) for c in sorted(counts) if c != common)
    return str(common), str(counts[common]), str(sum(counts.values())), others


def soak_after_each_evaluation(name) -> Tuple[str, str]:
    """(the evaluated steps, the evaluator's RSS in MiB at the first sample after each
    evaluation), comma-separated."""
    steps, rss = [], []
    for sample in load(name)["samples"]:
        if sample["evaluator"] and sample["eval_step"] and sample["eval_step"] not in steps:
            steps.append(sample["eval_step"])
            rss.append(f"{sample['evaluator']['rss_kib'] / 1024:.0f}")
    return ", ".join(f"{s:,}" for s in steps), ", ".join(rss)


def soak_second_half(name, process) -> Tuple[str, ...]:
    """(RSS MiB at the start and end of the second half of `process`'s judged window, the
    growth a least-squares line gives over it in %, "a plateau" or "still growing")."""
    trend = load(name)["verdicts"][process]["rss_second_half"]
    return (f"{trend['start'] / 1024:.0f}", f"{trend['end'] / 1024:.0f}",
            f"{100 * trend['fitted_growth']:+.2f}",
            "a plateau" if trend["plateau"] else "still growing")


def soak_evaluations(name) -> Tuple[str, str]:
    """(evaluations the evaluator finished, the one after which its window starts)."""
    data = load(name)
    return (str(max(s.get("evaluations", 0) for s in data["samples"])),
            str(data["evaluator_warm_up_evaluations"]))


def soak_after_evaluations(name, counts) -> Tuple[str, ...]:
    """The evaluator's RSS (MiB) at the first sample after each of its `counts`-th evaluations."""
    after, seen = {}, 0
    for sample in load(name)["samples"]:
        if sample["evaluator"] and sample.get("evaluations", 0) > seen:
            seen = sample["evaluations"]
            after[seen] = sample["evaluator"]["rss_kib"] / 1024
    return tuple(f"{after[count]:.0f}" for count in counts)


def soak_second_half_band(name, process) -> Tuple[str, str]:
    """(smallest, largest) RSS in MiB over the second half of `process`'s judged window."""
    rss = [s["rss_kib"] / 1024 for s in _trainer_window(name, process)]
    half = rss[len(rss) // 2:]
    return f"{min(half):.0f}", f"{max(half):.0f}"


SOAK_2H = "2026-12-06-be39ab1-soak-resnet18-2h.json"
SOAK_MOCK, SOAK_RESNET = "soak_mock_200k.json", "soak_resnet18_64.json"
MWF = "docs/multi_worker_faults.md"

DB, BR = "docs/benchmarks.md", "benchmarks/README.md"
D190, DA9D, E944 = ("2026-12-01-d190cc5-vision.json", "2026-12-01-da9d28d-dirty-vision.json",
                    "2026-12-02-944d805-vision.json")
SHIP = ("2026-12-02-shipped-ab-resnet18-loaded.json",
        "2026-12-02-shipped-ab-resnet18-inter-op-loaded.json",
        "2026-12-02-shipped-ab-resnet18-tf-data-1-thread.json")
C45 = FIRST_STEP_WINDOWS[2]

CLAIMS: List[Claim] = [
    # The issue-21 vision suite (d190cc5) and MobileNetV2's raw row (da9d28d).
    Claim(DB, "lite/TFM like for like ResNet-18 {}, ResNet-50 {}, MobileNetV2 {} —",
          lambda: tuple(spread(suite_ratio(D190, m)) for m in
                        ("resnet18", "resnet50", "mobilenetv2"))),
    Claim(DB, "indistinguishable within ±{} %, ±{} % and ±{} %",
          lambda: tuple(str(pm(suite_ratio(D190, m))) for m in
                        ("resnet18", "resnet50", "mobilenetv2"))),
    Claim(DB, "lite/raw {} / {} (that file; MobileNetV2's {} is `2026-12-01-da9d28d",
          lambda: (f"{suite_ratio(D190, 'resnet18', other='raw')['median']:.3f}",
                   f"{suite_ratio(D190, 'resnet50', other='raw')['median']:.3f}",
                   f"{suite_ratio(DA9D, 'mobilenetv2', other='raw')['median']:.3f}")),
    Claim(BR, "lite/raw {}, lite/TFM {} again",
          lambda: (spread(suite_ratio(DA9D, "mobilenetv2", other="raw")),
                   spread(suite_ratio(DA9D, "mobilenetv2")))),
    Claim(DB, "input pipeline alone {} (±{} %)",
          lambda: (f"{suite_ratio(D190, 'resnet18', 'input', 'input')['median']:.3f}",
                   str(pm(suite_ratio(D190, "resnet18", "input", "input"))))),
    Claim(DB, "As shipped (lite turns oneDNN on, TFM left it off on that CPU) ResNet-18 {}, "
          "ResNet-50 {}, lite faster in every round",
          lambda: tuple(f"{suite_ratio(D190, m, setting='shipped')['median']:.2f}"
                        for m in ("resnet18", "resnet50"))),
    Claim(BR, "Like for like lite/TFM ResNet-18 {}, ResNet-50 {}, MobileNetV2 {}; lite/raw {} / "
          "{}; as shipped {} / {}; input alone {}.",
          lambda: tuple(f"{suite_ratio(D190, m)['median']:.3f}"
                        for m in ("resnet18", "resnet50", "mobilenetv2"))
          + tuple(f"{suite_ratio(D190, m, other='raw')['median']:.3f}"
                  for m in ("resnet18", "resnet50"))
          + tuple(f"{suite_ratio(D190, m, setting='shipped')['median']:.2f}"
                  for m in ("resnet18", "resnet50"))
          + (f"{suite_ratio(D190, 'resnet18', 'input', 'input')['median']:.3f}",)),
    Claim(BR, "Input pipeline alone: {} over the 5 rounds above",
          lambda: (spread(suite_ratio(D190, "resnet18", "input", "input")),)),
    # The final vision suite (7e1676d) and the one before it (944d805).
    Claim(DB, "Like for like, lite/TFM training medians are {} with ±{} % per-round spreads",
          lambda: (_range([s["median"] for s in like_train_medians()]),
                   _range([pm(s) for s in like_train_medians()], 0))),
    Claim(DB, "ViT-Ti float32, slower in every round before the fused Adam ({} in "
          "`2026-12-02-944d805-vision.json`), is {}.",
          lambda: (f"{suite_ratio(E944, 'vit_ti16')['median']:.3f}",
                   spread(suite_ratio(FINAL_SUITE, "vit_ti16")))),
    Claim(BR, "lite/TFM training steps/s medians are {} with per-round spreads of ±{} %",
          lambda: (_range([s["median"] for s in like_train_medians()]),
                   _range([pm(s) for s in like_train_medians()], 0))),
    Claim(BR, "{} of {} targets pass on their medians; the as-shipped ≥ 1.15× target is missed "
          "(ResNet-18 {}, MobileNetV2 {})",
          lambda: tuple(map(str, suite_targets(FINAL_SUITE)))
          + tuple(f"{suite_ratio(FINAL_SUITE, m, setting='shipped')['median']:.3f}"
                  for m in ("resnet18", "mobilenetv2"))),
    Claim(BR, "bf16 over float32 trains the ResNets {}× faster in lite (TFM {}×), the MobileNets "
          "{}× (slower, both sides)",
          lambda: (_range([suite_speedup(FINAL_SUITE, m, "lite") for m in SUITE_MODELS[:2]]),
                   _range([suite_speedup(FINAL_SUITE, m, "tfm") for m in SUITE_MODELS[:2]]),
                   _range([suite_speedup(FINAL_SUITE, m, s) for m in SUITE_MODELS[2:4]
                           for s in ("lite", "tfm")]))),
    Claim(BR, "ViT-Ti float32 ({}), is {} with the fused Adam",
          lambda: (f"{suite_ratio(E944, 'vit_ti16')['median']:.3f}",
                   f"{suite_ratio(FINAL_SUITE, 'vit_ti16')['median']:.3f}")),
    Claim(BR, "{} of the {} targets pass on their medians; the misses (ResNet-18 float32 train {}, "
          "MobileNetV3Large float32 train {}, ViT-Ti bfloat16 train {}, ResNet-50 float32 eval "
          "{}, MobileNetV3Large bfloat16 eval {}, ResNet-18 input {})",
          lambda: tuple(map(str, suite_targets(FINAL_SUITE))) + tuple(
              f"{suite_ratio(FINAL_SUITE, *args)['median']:.3f}" for args in (
                  ("resnet18",), ("mobilenetv3large",),
                  ("vit_ti16", "train", "like", "bfloat16"), ("resnet50", "eval"),
                  ("mobilenetv3large", "eval", "like", "bfloat16"),
                  ("resnet18", "input", "input")))),
    Claim(BR, "ResNet-18 float32 {}, ResNet-50 float32 eval {}, MobileNetV3Large float32 {})",
          lambda: tuple(f"{suite_ratio(E944, *args)['median']:.3f}" for args in (
              ("resnet18",), ("resnet50", "eval"), ("mobilenetv3large",)))),
    Claim(BR, "in the run before (944d805) lite was slower in every round, {};",
          lambda: (spread(suite_ratio(E944, "vit_ti16")),)),
    Claim(BR, "*ResNet-18 / ResNet-50*: {}× / {}× (lite), {}× / {}× (TFM)",
          lambda: tuple(f"{suite_speedup(FINAL_SUITE, m, s):.2f}" for s in ("lite", "tfm")
                        for m in SUITE_MODELS[:2])),
    Claim(BR, "*MobileNetV2 / MobileNetV3Large*: {}× / {}× (lite), {}× / {}× (TFM)",
          lambda: tuple(f"{suite_speedup(FINAL_SUITE, m, s):.2f}" for s in ("lite", "tfm")
                        for m in SUITE_MODELS[2:4])),
    Claim(BR, "*ViT-Ti/16*: {}× (lite), {}× (TFM)",
          lambda: tuple(f"{suite_speedup(FINAL_SUITE, 'vit_ti16', s):.2f}"
                        for s in ("lite", "tfm"))),
    # run.py files (today's targets).
    Claim(BR, "the current harness on 39d2e4f's lite) and after (`2026-12-01-e787426.json`) "
          "both pass {} of {} of today's targets",
          lambda: tuple(map(str, targets_passed("2026-12-01-39d2e4f-before-issue13.json")))),
    Claim(BR, "(`2026-12-01-e787426.json`) both pass {} of {} of today's targets",
          lambda: tuple(map(str, targets_passed("2026-12-01-e787426.json")))),
    *[Claim(doc, "its vision rows (ResNet-18 / ResNet-50, lite/TFM {} / {}) came from another "
            "machine", lambda: tuple(run_vision_ratio("2026-12-01-e787426.json", m)
                                     for m in ("resnet18", "resnet50"))) for doc in (DB, BR)],
    Claim(BR, "MobileNetV2 {} (no target for MobileNetV2 as shipped;",
          lambda: (spread(suite_ratio(D190, "mobilenetv2", setting="shipped"), 2),)),
    Claim(BR, "Lite {} steps/s, TFM {}, raw {}.",
          lambda: tuple(_range([suite(DA9D)[0][("mobilenetv2", "float32", "like", side,
                                                "train")][k] for k in ("min", "max")])
                        for side in ("lite", "tfm", "raw"))),
    # Before and after issue 13's refactor (ab_checkouts.py), and files that keep only their
    # summary (no per-round records to recompute it from).
    *[Claim(BR, f"| {w} | {{}} | {{}} | {{}} | {{}} |",
            lambda w=w: ab_row("2026-12-01-ab-39d2e4f-vs-e3f2ba2.json", w))
      for w in ("mlp_tiny", "mock", "cnn_small")],
    Claim(BR, "`results/2026-12-01-input-ab-resnet18.json`, 7 rounds of 300 batches): {}",
          lambda: (spread(load("2026-12-01-input-ab-resnet18.json")["lite_over_tfm"]),)),
    Claim(BR, "median [min–max] speed-up of the step over Keras 3's forms: L2Loss {}, fused BN "
          "{}, fused momentum {}, all three {}",
          lambda: tuple(spread(load("2026-12-01-bf05557-resnet50-step-ab.json")
                               ["speedup_vs_base"][k], 2)
                        for k in ("l2loss", "fusedbn", "fusedmom", "l2loss+fusedbn+fusedmom"))),
    # Both trainers in one process (step_vs_tfm.py).
    Claim(BR, "lite/TFM ≥ 1.0 on the median of all {} rows (train and eval, float32 and bf16, "
          "five models), {} for training, lite faster in {} of {} rounds per row",
          lambda: (str(sum(s["median"] >= 1.0 for s in step_vs_tfm_rows())),
                   _range([s["median"] for s in step_vs_tfm_rows(kind="train")], 3),
                   _range([s["lite_wins"] for s in step_vs_tfm_rows()], 0),
                   str(load(FINAL_STEP_VS_TFM)["rounds"]))),
    Claim(BR, "(e.g. ResNet-18 {} / {} against {} / {})",
          lambda: tuple(f"{step_speedup('resnet18', s):.2f}" for s in ("lite", "tfm"))
          + tuple(f"{suite_speedup(FINAL_SUITE, 'resnet18', s):.2f}" for s in ("lite", "tfm"))),
    Claim(BR, "ViT-Ti bfloat16 training: {}, TFM faster in all 8 rounds",
          lambda: (spread(step_vs_tfm_row("2026-12-02-ee33327-step-vs-tfm.json", "vit_ti16",
                                          "bfloat16")),)),
    Claim(BR, "After: {} (`2026-12-02-a95e1a7-step-vs-tfm.json`, 8 rounds), {} in the 16-round "
          "run `06d0950`, {} in the final run",
          lambda: tuple(spread(step_vs_tfm_row(f, "vit_ti16", "bfloat16")) for f in (
              "2026-12-02-a95e1a7-step-vs-tfm.json", "2026-12-02-06d0950-step-vs-tfm.json",
              FINAL_STEP_VS_TFM))),
    Claim(BR, "(MobileNetV3Large after them: {}, {} of 16; in the final run below {}, {} of 16",
          lambda: tuple(x for f in ("2026-12-02-ebf42a0-step-vs-tfm.json", FINAL_STEP_VS_TFM)
                        for s in [step_vs_tfm_row(f, "mobilenetv3large", "float32")]
                        for x in (f"{s['median']:.3f}", str(s["lite_wins"])))),
    # Mask R-CNN, both trainers in one process (step_vs_tfm.py, issue 43).
    Claim(DB, "| Mask R-CNN ResNet-50 FPN | train | {} | {} | {} | {} | {} / {} |",
          lambda: detection_row(MASKRCNN_STEP_VS_TFM, "maskrcnn_resnet50_fpn", "train")),
    Claim(DB, "| Mask R-CNN ResNet-50 FPN | eval (pruned: input pipeline only) | {} | {} | {} | "
          "{} | "
          "{} / {} |",
          lambda: detection_row(MASKRCNN_STEP_VS_TFM, "maskrcnn_resnet50_fpn", "eval")),
    Claim(DB, "1-minute load average {}–{} over the rounds",
          lambda: load_range(MASKRCNN_STEP_VS_TFM, "maskrcnn_resnet50_fpn")),
    Claim(DB, "an eval step is {}–{} s against a training step of {}–{} s on this loaded "
          "machine", lambda: step_ranges(MASKRCNN_STEP_VS_TFM, "maskrcnn_resnet50_fpn")),
    Claim(DB, "A training step costs ~{}× an eval step on both sides",
          lambda: (f"{round(train_over_eval(MASKRCNN_STEP_VS_TFM, 'maskrcnn_resnet50_fpn'), -1):.0f}",)),
    Claim(DB, "first train call (trace + run) {} s in lite against {} s in TFM, first eval "
          "call {} s against {} s",
          lambda: first_calls(MASKRCNN_STEP_VS_TFM, "maskrcnn_resnet50_fpn")),
    # Time to first step (first_step.py).
    Claim(DB, "lite/TFM first step {} (ResNet-50) and {} (ViT-Ti), process CPU {} / {}.",
          lambda: (spread(first_ratio(C45, "resnet50")), spread(first_ratio(C45, "vit_ti16")),
                   f"{first_ratio(C45, 'resnet50', field='cpu_s')['median']:.3f}",
                   f"{first_ratio(C45, 'vit_ti16', field='cpu_s')['median']:.3f}")),
    Claim(DB, "one ViT round ({}) and one ResNet-50 round ({}) were below 0.5",
          lambda: tuple(f"{min(first_rounds(C45, m)):.3f}" for m in ("vit_ti16", "resnet50")
                        if sum(v < 0.5 for v in first_rounds(C45, m)) == 1)),
    Claim(DB, "first step for ResNet-50 is {} (medians {}, {}, {})",
          lambda: (_range(resnet50_first_step_medians()),)
          + tuple(f"{m:.3f}" for m in resnet50_first_step_medians())),
    Claim(DB, "(`2026-12-02-2af19b0-first-step.json`) agrees on MobileNetV2 and ViT-Ti, not on "
          "ResNet-50: lite/TFM first step {} / {} / {} after against {} / {} / {} before "
          "(ResNet-50 slower after there, within that run's spread: {} after, {} before), "
          "process CPU {} / {} / {} after against {} / {} / {} before.",
          lambda: tuple(f"{first_ratio(LOADED, m, side)['median']:.3f}"
                        for side in ("lite", "base") for m in FIRST_STEP_MODELS)
          + tuple(_range([first_ratio(LOADED, "resnet50", side)[k] for k in ("min", "max")], 3)
                  for side in ("lite", "base"))
          + tuple(f"{first_ratio(LOADED, m, side, 'cpu_s')['median']:.3f}"
                  for side in ("lite", "base") for m in FIRST_STEP_MODELS)),
    *[Claim(DB, row, figures) for row, figures in (first_step_rows())],
    # Time to first step and peak memory (issue 55).
    Claim(DB, "base → lite (medians): process CPU {} → {} s, peak RSS {} → {} MB",
          lambda: tuple(f"{_median(FS55_RESNET50, 'resnet50', side, field):.{d}f}"
                        for field, d in (("cpu_s", 1), ("peak_rss_mb", 0))
                        for side in ("base", "lite"))),
    Claim(DB, "lite/TFM process CPU {} (ResNet-50) and {} (RetinaNet)",
          lambda: (fs55_ratio(FS55_RESNET50, "resnet50", "cpu_s"),
                   fs55_ratio(FS55_RETINANET, "retinanet_resnet50_fpn", "cpu_s"))),
    Claim(DB, "ResNet-50 (1-min load {} at its start): TensorFlow's import {} s, the model {} s, "
          "the optimizer's variables {} s, the dataset {} s, the loop's trace {} s, graph "
          "optimisation and the first run {} s; step 1 at {} s; the peak, {} MB ({} MB at step 1), "
          "{}.",
          lambda: startup_phases("resnet50")),
    Claim(DB, "RetinaNet R50-FPN (1-min load {} at its start): TensorFlow's import {} s, the "
          "model {} s, the optimizer's variables {} s, the dataset {} s, the loop's trace {} s, "
          "graph optimisation and the first run {} s; step 1 at {} s; the peak, {} MB ({} MB at "
          "step 1), {}.",
          lambda: startup_phases("retinanet_resnet50_fpn")),
    # The outer loop's own cost (run.py, b9a447a).
    *[Claim(DB, *lite_raw_row(w)) for w in ("mlp_tiny", "cnn_small", "mock")],
    *[Claim(DB, f"| {w} | spl=1 with summaries, lite/TFM ≥ 8 | {{}} | pass (median only) |",
            lambda w=w: (spread(run_ratios(B9A)[w]["ratios"]["train1 lite@tfm/tfm@tfm"], 2),))
      for w in ("mlp_tiny", "mock")],
    Claim(DB, "Outer loop, 1/r(spl=1) − 1/r(spl=100) with summaries: lite {} ms (mlp_tiny) and "
          "{} ms (mock) against TFM's {} / {} ms (TF 2.20)",
          lambda: tuple(outer_loop_ms(B9A, w, side) for side in ("lite@tfm", "tfm@tfm")
                        for w in ("mlp_tiny", "mock"))),
    # As-shipped A/Bs (shipped_ab.py).
    Claim(DB, "gave a 1-thread private tf.data pool {} of base and one inter-op thread {} —",
          lambda: (spread(shipped(SHIP[0], "tf_data_1_thread")),
                   spread(shipped(SHIP[0], "inter_op_1")))),
    Claim(DB, "{}, slower in {} of {} rounds — TensorFlow's default inter-op pool stays",
          lambda: (spread(shipped(SHIP[1], "inter_op_1")),)
          + tuple(map(str, (shipped_rounds(SHIP[1], "inter_op_1")[1]
                            - shipped_rounds(SHIP[1], "inter_op_1")[0],
                            shipped_rounds(SHIP[1], "inter_op_1")[1])))),
    Claim(DB, "{}, ahead in {} of {} rounds — within the spread",
          lambda: (spread(shipped(SHIP[2], "tf_data_1_thread")),)
          + tuple(map(str, shipped_rounds(SHIP[2], "tf_data_1_thread")))),
    # The two-hour ResNet-18 soak (soak.py, issue 52).
    Claim(MWF, "the trainer ran {} steps in {} min and the evaluator finished {} evaluations.",
          lambda: (f"{load(SOAK_2H)['stopped']['train_step']:,}",
                   f"{load(SOAK_2H)['wall_s'] / 60:.0f}", soak_evaluations(SOAK_2H)[0])),
    Claim(MWF, "| RSS growth | {} % ({} -> {} KiB): **missed** | {} % ({} -> {} KiB) | <= 5 % |",
          lambda: soak_cell(SOAK_2H, "trainer", "rss") + soak_cell(SOAK_2H, "evaluator", "rss")),
    Claim(MWF, "| second half of the window (fitted line) | {} -> {} MiB, {} %: {} | {} -> {} "
          "MiB, {} %: {} | |",
          lambda: soak_second_half(SOAK_2H, "trainer") + soak_second_half(SOAK_2H, "evaluator")),
    Claim(MWF, "| threads | {} -> {} ({} at most) | {} -> {} ({} at most, while an evaluation "
          "runs) | <= 5 % |",
          lambda: soak_cell(SOAK_2H, "trainer", "threads")
          + soak_cell(SOAK_2H, "evaluator", "threads")),
    Claim(MWF, "| open fds (the smallest in each half) | {} -> {} ({} at most) | {} -> {} ({} at "
          "most) | constant |",
          lambda: soak_cell(SOAK_2H, "trainer", "fds") + soak_cell(SOAK_2H, "evaluator", "fds")),
    Claim(MWF, "| checkpoints in model_dir | {} at most ({} MB at the end) | | max_to_keep |",
          lambda: (str(load(SOAK_2H)["verdicts"]["model_dir"]["max_checkpoints"]),
                   f"{soak_model_dir(SOAK_2H)['checkpoint_bytes'] / 1e6:.0f}")),
    Claim(MWF, "evaluations was {}, {}, {}, {}, {}, {} and {} MiB",
          lambda: soak_after_evaluations(SOAK_2H, (3, 10, 20, 30, 40, 50, 57))),
    Claim(MWF, "over the second half its RSS moves in a {}-{} MiB band",
          lambda: soak_second_half_band(SOAK_2H, "trainer")),
    # The ResNet-18 soak (soak.py).
    Claim(MWF, "it ran {} steps in {} min, the evaluator reaching step {}.",
          lambda: (f"{load(SOAK_RESNET)['final_checkpoint_step']:,}",
                   f"{load(SOAK_RESNET)['wall_s'] / 60:.0f}",
                   f"{load(SOAK_RESNET)['final_eval_step']:,}")),
    *[Claim(MWF, "{}", lambda i=i: (soak_timeline(SOAK_RESNET)[i],)) for i in range(8)],
    Claim(MWF, "Judged from step {} (loop 20, reached only in minute 22 on this loaded "
          "machine) to the SIGTERM, {} samples:",
          lambda: (str(load(SOAK_RESNET)["warm_up_step"]),
                   str(load(SOAK_RESNET)["verdicts"]["trainer"]["samples"]))),
    Claim(MWF, "| RSS growth | {} % ({} -> {} KiB) | {} % ({} -> {} KiB): missed | <= 5 % |",
          lambda: soak_cell(SOAK_RESNET, "trainer", "rss")
          + soak_cell(SOAK_RESNET, "evaluator", "rss")),
    Claim(MWF, "| threads | {} -> {} ({} at most) | {} -> {} ({} at most, while an evaluation "
          "runs) | <= 5 % |",
          lambda: soak_cell(SOAK_RESNET, "trainer", "threads")
          + soak_cell(SOAK_RESNET, "evaluator", "threads")),
    Claim(MWF, "| open fds | {} in {} of {} samples, {} in the others (the harness's baseline, "
          "the smallest in each half: {} -> {}) | {} -> {} between evaluations ({} at most) | "
          "constant |",
          lambda: soak_fds_spread(SOAK_RESNET) + soak_cell(SOAK_RESNET, "trainer", "fds")[:2]
          + soak_cell(SOAK_RESNET, "evaluator", "fds")),
    Claim(MWF, "| checkpoints in model_dir | {} at most ({} MB at the end) | | max_to_keep |",
          lambda: (str(load(SOAK_RESNET)["verdicts"]["model_dir"]["max_checkpoints"]),
                   f"{soak_model_dir(SOAK_RESNET)['checkpoint_bytes'] / 1e6:.0f}")),
    Claim(MWF, "Its RSS right after each evaluation (steps {}): {} MiB.",
          lambda: soak_after_each_evaluation(SOAK_RESNET)),
    # This check's own size, as docs/benchmarks.md states it.
    Claim(DB, "from theirs ({} sentences across the docs)", lambda: (str(len(CLAIMS)),)),
    # The mock soak (soak.py).
    Claim(MWF, "judged from loop 100 to the last loop, {} samples over {} s:",
          lambda: (str(load(SOAK_MOCK)["verdicts"]["trainer"]["samples"]),
                   f"{load(SOAK_MOCK)['wall_s']:.0f}")),
    Claim(MWF, "| RSS growth | {} % ({} -> {} KiB) | {} % ({} -> {} KiB) | <= 5 % |",
          lambda: soak_cell(SOAK_MOCK, "trainer", "rss", 2)
          + soak_cell(SOAK_MOCK, "evaluator", "rss")),
    Claim(MWF, "| threads | {} -> {} ({} at most, while a checkpoint is written) | {} -> {} ({} "
          "at most) | <= 5 % |",
          lambda: soak_cell(SOAK_MOCK, "trainer", "threads")
          + soak_cell(SOAK_MOCK, "evaluator", "threads")),
    Claim(MWF, "| open fds between writes | {} -> {} ({} at most) | {} -> {} |",
          lambda: soak_cell(SOAK_MOCK, "trainer", "fds")
          + soak_cell(SOAK_MOCK, "evaluator", "fds")[:2]),
]



# --- vision_profile.py files (op time by type, ms per step) ---------------------------------

PROFILE21, PROFILE_FIXED, PROFILE_BF16 = (
    "2026-12-01-vision-profile-resnet18.json", "2026-12-01-4ea454c-vision-profile-resnet18.json",
    "2026-12-02-vision-profile-resnet18-bf16.json")
# The ops that are the parser's per-image work (decode, parse, resize, flip, normalise).
PARSER_OPS = ("DecodeAndCropJpeg", "ExtractJpegShape", "ParseExampleV2", "ResizeBilinear",
              "ReverseV2", "RealDiv", "Sub")


def profile(name, key) -> dict:
    """One side's profile: `key` is a profile's name, or 'side/dtype' in a bf16 probe file."""
    data = load(name)
    if "profiles" in data:
        return data["profiles"][key]
    side, dtype = key.split("/")
    return next(r for r in data["records"] if (r["side"], r["dtype"]) == (side, dtype))


def op_ms(name, key, *ops) -> float:
    """ms a step of these op types, summed over threads; no types: all the step's op time
    (tf.data's events included, the trace's host-side events not)."""
    times = profile(name, key)["op_ms_per_step"]
    return sum(v for op, v in times.items() if (op in ops if ops else not op.startswith(" ")))


def op_count(name, key, *ops) -> float:
    """Ops run a step of these types; no types: every op but tf.data's events."""
    counts = profile(name, key)["op_count_per_step"]
    return sum(v for op, v in counts.items()
               if (op in ops if ops else not op.startswith("tf.data")))


def tf_data_ms(name, key) -> float:
    """tf.data's iterator events a step, summed (they nest, so the sum over-counts)."""
    times = profile(name, key)["op_ms_per_step"]
    return sum(v for op, v in times.items() if op.startswith("tf.data"))


def wall_ms(name, key) -> float:
    return profile(name, key)["wall_ms_per_step"]


def profile_row(name, keys, figure, digits=0) -> Tuple[str, ...]:
    """`figure(name, key)` for each key, formatted as the profile tables print it."""
    return tuple(f"{figure(name, k):,.{digits}f}" for k in keys)


PROFILE21_KEYS = ("lite/default", "tfm/default", "lite/inter_op_1", "tfm/inter_op_1")
CONV = ("_MklNativeConv2D", "_MklNativeConv2DBackpropInput", "_MklNativeConv2DBackpropFilter")
FUSED_BN = ("_MklNativeFusedBatchNormV3", "_MklNativeFusedBatchNormEx",
            "_MklNativeFusedBatchNormGradV3")
# bf16 probe rows: (label of docs/benchmarks.md's table, op types).
BF16_ROWS = (
    ("Conv2D backprop filter (weight gradients)", ("_MklNativeConv2DBackpropFilter",)),
    ("Conv2D backprop input", ("_MklNativeConv2DBackpropInput",)),
    ("Conv2D forward", ("_MklNativeConv2D",)),
    ("batch-norm gradient, ReluGrad, AddN, Mul",
     ("_MklNativeFusedBatchNormGradV3", "ReluGrad", "AddN", "Mul")))


def bf16_row(label, ops) -> Tuple[str, Callable[[], Tuple[str, ...]]]:
    def figures():
        f32, bf16 = (op_ms(PROFILE_BF16, f"lite/{d}", *ops) for d in ("float32", "bfloat16"))
        return f"{f32:.0f}", f"{bf16:.0f}", f"{f32 / bf16:.2f}"
    return f"| {label} | {{}} | {{}} | {{}}× |", figures


def bf16_net_gain_ms() -> float:
    """What bf16 saved on the forward and input-gradient convolutions, less what the weight
    gradient lost (lite, ms a step)."""
    f32, bf16 = ({op: op_ms(PROFILE_BF16, f"lite/{d}", op) for op in CONV}
                 for d in ("float32", "bfloat16"))
    return sum(f32[op] - bf16[op] for op in CONV)


def probe(name, model, side) -> Tuple[int, int]:
    """(bf16 primitives, primitives) of a vision suite's oneDNN probe."""
    record = next(r for r in load(name)["records"] if r.get("setting") == "probe"
                  and "error" not in r and (r["model"], r["side"]) == (model, side))
    return record["onednn_kernels"]["bf16_primitives"], record["onednn_kernels"]["primitives"]


# --- the earliest vision_suite.py runs and their per-process figures ------------------------

def process_range(name, model, side, setting="like", digits=2) -> str:
    """min–max over rounds of one side's per-process training steps/s."""
    s = suite(name)[0][(model, "float32", setting, side, "train")]
    return _range([s["min"], s["max"]], digits)


def timed_loops(name, model, side) -> List[List[float]]:
    """Per process, its timed loops' ms (the like-for-like processes of `side`)."""
    return [r["loop_ms"]["first"] for r in load(name)["records"]
            if r.get("model") == model and r["side"] == side and "loop_ms" in r
            and r.get("dtype", "float32") == "float32"
            and (side == "lite" or not r.get("as_shipped"))]


def loop_range(name, model, side, scale=1.0, digits=0) -> str:
    loops = [ms / scale for process in timed_loops(name, model, side) for ms in process]
    return _range(loops, digits) if scale != 1.0 else f"{min(loops):,.0f}–{max(loops):,.0f}"


def within_process(name, model, side) -> Tuple[float, List[float]]:
    """(largest slower/faster − 1 between one process's timed loops, that process's loops)."""
    return max(((max(p) / min(p) - 1, p) for p in timed_loops(name, model, side)),
               key=lambda x: x[0])


def pairs(name, group) -> List[float]:
    return [v for _, v in load(name)["steps_per_sec"][group]]


def pair_ratios(name) -> List[float]:
    rates = pairs(name, "lite_vs_tfm_like")
    return [rates[i + 1] / rates[i] for i in range(0, len(rates), 2)]


# --- step_vs_tfm.py: rounds pooled over several files ---------------------------------------

POOLED_STEP_VS_TFM = ("2026-12-02-ee33327-step-vs-tfm.json", "2026-12-02-a95e1a7-step-vs-tfm.json",
                      "2026-12-02-06d0950-step-vs-tfm.json")
RETINANET, VIT_LOADED = ("2026-12-03-26e1fa9-step-vs-tfm-retinanet.json",
                         "2026-12-03-137157f-step-vs-tfm-vit.json")


def pooled(model, dtype, names=POOLED_STEP_VS_TFM) -> Tuple[float, int, int]:
    """(median lite/TFM training, rounds lite won, rounds) over the rounds of several files."""
    values = [v for f in names for r in load(f)["records"]
              if (r["model"], r["dtype"]) == (model, dtype)
              for v in step_vs_tfm.ratios(r, "train")]
    return statistics.median(values), sum(v > 1.0 for v in values), len(values)


def retinanet_row(model, kind) -> Tuple[str, ...]:
    """A row of docs/benchmarks.md's RetinaNet table: ms a step, lite/TFM, rounds, images/s."""
    record = next(r for r in load(RETINANET)["records"] if r["model"] == model)
    s = step_vs_tfm.summarize(record, kind)
    batch = 2
    return (f"{s['lite_ms']:,.0f}", f"{s['tfm_ms']:,.0f}", spread(s),
            f"{s['lite_wins']}/{s['rounds']}", *(
                f"{1000 * batch / s[f'{side}_ms']:.2g}"
                for side in ("lite", "tfm")))


def first_call_s(model) -> Tuple[str, ...]:
    record = next(r for r in load(RETINANET)["records"] if r["model"] == model)
    return tuple(f"{record['first_call_s'][side][kind]:.0f}"
                 for kind in ("train", "eval") for side in ("lite", "tfm"))


# --- XLA on CPU and oneDNN's numerics (the issue-21 profile file's extra entries) -----------

def onednn_loss_gap() -> float:
    """Largest relative difference of the digits_cnn loss curves, oneDNN off against on."""
    runs = load(PROFILE21)["digits_cnn_onednn_losses"]
    off = runs["TF_ENABLE_ONEDNN_OPTS=0"]["losses"]
    return max(abs(a - b) / abs(a) for key, run in runs.items() if run["onednn"]
               for a, b in zip(off, run["losses"]))


def loop_graph_nodes(when, workload) -> str:
    data = load("2026-12-01-loop-graph-ops-bf05557-vs-fused.json")
    return str(data["before_bf05557" if when == "before" else "after"][workload]["nodes"])



D190_MODELS = (("resnet18", "ResNet-18"), ("resnet50", "ResNet-50"))
E4EA, E513, E1DED, E0361 = ("2026-12-01-4ea454c-vision.json", "2026-12-01-513f9aa-vision.json",
                            "2026-12-01-1ded3d0-vision.json", "2026-12-01-0361e2f-vision.json")
C711 = "2026-12-01-c711b1e-resnet18-4step-pairs.json"
SMOKE = "2026-12-02-b26c3e1-dirty-vision-smoke.json"
F51 = FIRST_STEP_WINDOWS[1]

CLAIMS += [
    # The op-time profiles (vision_profile.py): issue 21's (before the fused kernels), the one
    # after them (4ea454c) and the bf16 one (issue 31).
    Claim(DB, "Lite's step runs TFM's kernels (profiled {} against {} ms a step).",
          lambda: profile_row(PROFILE_FIXED, ("lite", "tfm"), wall_ms)),
    Claim(BR, "| wall (ms) | {} | {} | {} | {} |",
          lambda: profile_row(PROFILE21, PROFILE21_KEYS, wall_ms)),
    Claim(BR, "| TensorFlow ops run (tf.data's events not counted) | {} | {} | {} | {} |",
          lambda: profile_row(PROFILE21, PROFILE21_KEYS, op_count)),
    Claim(BR, "| op time, all threads (ms) | {} | {} | {} | {} |",
          lambda: profile_row(PROFILE21, PROFILE21_KEYS, op_ms)),
    *[Claim(BR, f"| {label} ({n}, ms) | {{}} | {{}} | {{}} | {{}} |",
            lambda op=op: profile_row(PROFILE21, PROFILE21_KEYS,
                                      lambda f, k: op_ms(f, k, op)))
      for label, n, op in (("`Conv2D` forward", "21 ops", CONV[0]),
                           ("`Conv2DBackpropInput`", "20", CONV[1]),
                           ("`Conv2DBackpropFilter`", "21", CONV[2]))],
    Claim(BR, "| tf.data events, nested, summed (ms) | {} | {} | {} | {} |",
          lambda: profile_row(PROFILE21, PROFILE21_KEYS, tf_data_ms)),
    Claim(BR, "| of which `Root` (the step waiting in GetNext, ms) | {} | {} | {} | {} |",
          lambda: profile_row(PROFILE21, PROFILE21_KEYS,
                              lambda f, k: op_ms(f, k, "tf.data Root"), 1)),
    Claim(BR, "unfused: `Mul` ×{}, `Sub` ×{}, `AddN` ×{}",
          lambda: tuple(f"{op_count(PROFILE21, 'lite/default', op):.0f}"
                        for op in ("Mul", "Sub", "AddN"))),
    Claim(BR, "fused: `FusedBatchNormV3`/`Ex`/`GradV3` ×{}, {} ms",
          lambda: (f"{op_count(PROFILE21, 'tfm/default', *FUSED_BN):.0f}",
                   f"{op_ms(PROFILE21, 'tfm/default', *FUSED_BN):.0f}")),
    Claim(BR, "`ResourceApplyKerasMomentum` ×{}, {} ms |",
          lambda: (f"{op_count(PROFILE21, 'tfm/default', 'ResourceApplyKerasMomentum'):.0f}",
                   f"{op_ms(PROFILE21, 'tfm/default', 'ResourceApplyKerasMomentum'):.0f}")),
    Claim(BR, "`L2Loss` + `Mul`, {} ms |",
          lambda: (f"{op_ms(PROFILE21, 'tfm/default', 'L2Loss', 'Mul'):.0f}",)),
    Claim(BR, "both sides take the same {} / {} ms",
          lambda: profile_row(PROFILE21, PROFILE21_KEYS[2:], wall_ms)),
    Claim(BR, "TFM gains {} % ({} → {} ms) and lite *loses* ({} → {} ms): lite's step has {}× as "
          "many ops",
          lambda: (f"{100 * (1 - wall_ms(PROFILE21, 'tfm/default') / wall_ms(PROFILE21, 'tfm/inter_op_1')):.0f}",
                   *profile_row(PROFILE21, ("tfm/inter_op_1", "tfm/default", "lite/inter_op_1",
                                            "lite/default"), wall_ms),
                   f"{op_count(PROFILE21, 'lite/default') / op_count(PROFILE21, 'tfm/default'):.1f}")),
    Claim(BR, "its tf.data events add up to ≤ {} ms a step of the {}–{}, and the step waits ≤ {} ms "
          "in GetNext",
          lambda: (f"{max(tf_data_ms(PROFILE21, k) for k in PROFILE21_KEYS):.0f}",
                   f"{min(wall_ms(PROFILE21, k) for k in PROFILE21_KEYS):.0f}",
                   f"{max(wall_ms(PROFILE21, k) for k in PROFILE21_KEYS):.0f}",
                   f"{max(op_ms(PROFILE21, k, 'tf.data Root') for k in PROFILE21_KEYS):.0f}")),
    Claim(BR, "| wall (ms) | {} ({} in a repeat) | {} |",
          lambda: profile_row(PROFILE_FIXED, ("lite", "lite_repeat", "tfm"), wall_ms)),
    Claim(BR, "| TensorFlow ops run (tf.data's events not counted) | {} | {} |",
          lambda: profile_row(PROFILE_FIXED, ("lite", "tfm"), op_count)),
    Claim(BR, "| `Conv2DBackpropFilter` / `BackpropInput` / `Conv2D` (ms) | {} / {} / {} | {} / {} "
          "/ {} |",
          lambda: tuple(f"{op_ms(PROFILE_FIXED, k, op):.0f}" for k in ("lite", "tfm")
                        for op in reversed(CONV))),
    Claim(BR, "| fused batch norm forward + gradient ({} ops, ms) | {} | {} |",
          lambda: (f"{op_count(PROFILE_FIXED, 'lite', *FUSED_BN):.0f}",)
          + profile_row(PROFILE_FIXED, ("lite", "tfm"), lambda f, k: op_ms(f, k, *FUSED_BN))),
    *[Claim(BR, f"| `{op}` ×{{}} (ms) | {{}} | {{}} |",
            lambda op=op: (f"{op_count(PROFILE_FIXED, 'lite', op):.0f}",)
            + profile_row(PROFILE_FIXED, ("lite", "tfm"), lambda f, k: op_ms(f, k, op)))
      for op in ("ResourceApplyKerasMomentum", "L2Loss")],
    Claim(BR, "| `AddN` / `Mul` (ms) | {} / {} | {} / {} |",
          lambda: tuple(f"{op_ms(PROFILE_FIXED, k, op):.0f}" for k in ("lite", "tfm")
                        for op in ("AddN", "Mul"))),
    Claim(BR, "The profile (`vision_profile.py`, below) has lite's step at {}–{} ms against TFM's "
          "{} ms with the same kernels.",
          lambda: profile_row(PROFILE_FIXED, ("lite", "lite_repeat", "tfm"), wall_ms)),
    Claim(DB, "the step went from {} ms (float32) to {} ms (bfloat16), {}×.",
          lambda: profile_row(PROFILE_BF16, ("lite/float32", "lite/bfloat16"), wall_ms)
          + (f"{wall_ms(PROFILE_BF16, 'lite/float32') / wall_ms(PROFILE_BF16, 'lite/bfloat16'):.2f}",)),
    *[Claim(DB, *bf16_row(label, ops)) for label, ops in BF16_ROWS],
    Claim(DB, "| Cast (float32 weights → bf16 each step, bf16 gradients → float32) | {} | {} | — |",
          lambda: profile_row(PROFILE_BF16, ("lite/float32", "lite/bfloat16"),
                              lambda f, k: op_ms(f, k, "Cast"))),
    Claim(DB, "| optimizer (momentum), L2 loss (float32 variables) | {} | {} | ~1× |",
          lambda: profile_row(PROFILE_BF16, ("lite/float32", "lite/bfloat16"),
                              lambda f, k: op_ms(f, k, "ResourceApplyKerasMomentum", "L2Loss"))),
    Claim(DB, "What bf16 wins there (~{} ms, net of the slower weight gradient)",
          lambda: (f"{bf16_net_gain_ms():.0f}",)),
    Claim(DB, "their gradients back every step (2 × 11.7 M values, {} ms)",
          lambda: (f"{op_ms(PROFILE_BF16, 'lite/bfloat16', 'Cast'):.0f}",)),
    Claim(DB, "its step has {} casts against TFM's {}",
          lambda: tuple(f"{op_count(PROFILE_BF16, k, 'Cast'):.0f}"
                        for k in ("lite/bfloat16", "tfm/bfloat16"))),
    Claim(DB, "TFM's bf16 step, profiled the same way, took {} ms with the same op pattern ({} "
          "casts).",
          lambda: (f"{wall_ms(PROFILE_BF16, 'tfm/bfloat16'):.0f}",
                   f"{op_count(PROFILE_BF16, 'tfm/bfloat16', 'Cast'):.0f}")),
    Claim(DB, "the `ONEDNN_VERBOSE` probe of the suite: {} of {} primitives of a ResNet-18 step",
          lambda: tuple(map(str, probe(FINAL_SUITE, "resnet18", "lite")))),
    Claim(DB, "ResNet-18 {} / {} primitives bf16 on each side, ResNet-50 {}, MobileNetV2 {}, "
          "MobileNetV3Large {}; ViT-Ti/16 {} of {} (lite) and {} of {} (TFM)",
          lambda: tuple(f"{n:,}" for n in probe(SMOKE, "resnet18", "lite"))
          + tuple(f"{probe(SMOKE, m, 'lite')[1]:,}"
                  for m in ("resnet50", "mobilenetv2", "mobilenetv3large"))
          + tuple(str(n) for side in ("lite", "tfm") for n in probe(SMOKE, "vit_ti16", side))),
    *[Claim(BR, text, lambda: tuple(map(str, probe(FINAL_SUITE, "vit_ti16", "lite"))))
      for text in ("ran bf16 on `avx512_core_bf16` kernels, {} of {} of ViT-Ti's",
                   "the matmuls run bf16 ({} of {} primitives)")],
    Claim(DB, "its ops (JPEG decode-and-crop, parse, resize, flip, normalisation: {} ms; "
          "tf.data's map / prefetch / shuffle events, which nest and so over-count: {} ms more) "
          "take at most {} ms of ~{} ms of CPU time a step (float32), i.e. ≤ {} %",
          lambda: (f"{op_ms(PROFILE_BF16, 'lite/float32', *PARSER_OPS):.1f}",
                   f"{tf_data_ms(PROFILE_BF16, 'lite/float32'):.1f}",
                   f"{op_ms(PROFILE_BF16, 'lite/float32', *PARSER_OPS) + tf_data_ms(PROFILE_BF16, 'lite/float32'):.0f}",
                   f"{op_ms(PROFILE_BF16, 'lite/float32'):.0f}",
                   f"{100 * (op_ms(PROFILE_BF16, 'lite/float32', *PARSER_OPS) + tf_data_ms(PROFILE_BF16, 'lite/float32')) / op_ms(PROFILE_BF16, 'lite/float32'):.0f}")),
    Claim(DB, "The step's ops fill ~{} % of the two cores ({} ms of op time in {} ms of wall time;",
          lambda: (f"{100 * op_ms(PROFILE_BF16, 'lite/float32') / (2 * wall_ms(PROFILE_BF16, 'lite/float32')):.0f}",
                   f"{op_ms(PROFILE_BF16, 'lite/float32'):.0f}",
                   f"{wall_ms(PROFILE_BF16, 'lite/float32'):.0f}")),
    # XLA on CPU and oneDNN's numerics (entries of the issue-21 profile file).
    Claim(BR, "(ResNet-18, oneDNN on, {} rounds of {} steps, in one process): the XLA-compiled step "
          "ran at {}× [{}–{}] the speed of the uncompiled one",
          lambda: (str(len(load(PROFILE21)["step_ab_xla"]["rounds"])),
                   str(load(PROFILE21)["step_ab_xla"]["steps"]),
                   *(f"{load(PROFILE21)['step_ab_xla']['speedup_vs_base']['xla'][k]:.2f}"
                     for k in ("median", "min", "max")))),
    Claim(BR, "the loss curves with oneDNN on and off differ by at most {} relative",
          lambda: (f"{onednn_loss_gap():.1e}".replace("e-0", "e-"),)),
    # The loop graphs of the workload rows (loop_graph_ops.py).
    Claim(BR, "`mlp_tiny` ({} nodes) and `mock` ({}) are identical before and after",
          lambda: (loop_graph_nodes("before", "mlp_tiny"), loop_graph_nodes("before", "mock"))
          if all(loop_graph_nodes("before", w) == loop_graph_nodes("after", w)
                 for w in ("mlp_tiny", "mock")) else ("?", "?")),
    Claim(BR, "goes from {} to {} nodes",
          lambda: tuple(loop_graph_nodes(w, "cnn_small") for w in ("before", "after"))),
    Claim(DB, "`mlp_tiny` and `mock` identical ({} / {} nodes); `cnn_small` {} → {} nodes",
          lambda: (loop_graph_nodes("after", "mlp_tiny"), loop_graph_nodes("after", "mock"),
                   loop_graph_nodes("before", "cnn_small"), loop_graph_nodes("after", "cnn_small"))),
    # d190cc5's per-process figures.
    Claim(BR, "Per process, lite ran ResNet-18 at {} steps/s and ResNet-50 at {} over the five "
          "rounds; TFM at {} and {}, raw at {} and {}, MobileNetV2 TFM {} against lite's {}.",
          lambda: tuple(process_range(D190, m, side) for side in ("lite", "tfm", "raw")
                        for m, _ in D190_MODELS)
          + tuple(process_range(D190, "mobilenetv2", side) for side in ("tfm", "lite"))),
    Claim(BR, "Lite's 4-step loops took {} ms (ResNet-18), TFM's {} ms, and TFM's two timed loops "
          "of one process differ by up to {} % ({} / {} ms) where lite's differ by at most {} %.",
          lambda: (loop_range(D190, "resnet18", "lite"), loop_range(D190, "resnet18", "tfm"),
                   f"{100 * within_process(D190, 'resnet18', 'tfm')[0]:.0f}",
                   *(f"{ms:,.0f}" for ms in within_process(D190, "resnet18", "tfm")[1]),
                   f"{100 * within_process(D190, 'resnet18', 'lite')[0]:.0f}")),
    Claim(BR, "in the 5-round run lite's took {} s and TFM's {} s.",
          lambda: tuple(loop_range(D190, "resnet18", side, 1000, 2) for side in ("lite", "tfm"))),
    # The earliest vision runs.
    Claim(BR, "lite/TFM ResNet-18 {}, ResNet-50 {}, lite/raw {} / {} — misses, with TFM at the top "
          "of its per-process range in that half hour ({}).",
          lambda: tuple(f"{suite_ratio(E4EA, m, other=o)['median']:.3f}"
                        for o in ("tfm", "raw") for m, _ in D190_MODELS)
          + (process_range(E4EA, "resnet18", "tfm"),)),
    Claim(BR, "Two alternated pairs 70 min later gave {} and {}; summaries every loop or never made "
          "no difference to lite ({} / {} against {} / {})",
          lambda: tuple(f"{r:.3f}" for r in pair_ratios(C711))
          + tuple(f"{v:.2f}" for v in pairs(C711, "summary_ab")[0::2] + pairs(C711, "summary_ab")[1::2])),
    Claim(BR, "(`results/2026-12-01-513f9aa-vision.json`, ResNet-18 {} rounds, ResNet-50 {}): {} "
          "and {}, lite/raw {}.",
          lambda: tuple(str(suite_ratio(E513, m)["n"]) for m, _ in D190_MODELS)
          + tuple(f"{suite_ratio(E513, m)['median']:.3f}" for m, _ in D190_MODELS)
          + (f"{suite_ratio(E513, 'resnet18', other='raw')['median']:.3f}",)),
    Claim(BR, "(\"lite's 4-step loops take {} s against TFM's {} s\", `4ea454c`'s) was one half "
          "hour's processes",
          lambda: tuple(loop_range(E4EA, "resnet18", side, 1000, 2) for side in ("lite", "tfm"))),
    Claim(BR, "measured lite/TFM {} / {} and lite/raw {} / {} that way.",
          lambda: tuple(f"{suite_ratio(E1DED, m, other=o)['median']:.{d}f}"
                        for o, d in (("tfm", 3), ("raw", 2)) for m, _ in D190_MODELS)),
    Claim(BR, "(`results/2026-12-01-0361e2f-vision.json`, {} rounds: {}); the table above measures "
          "it again ({} over {} rounds).",
          lambda: (str(suite_ratio(E0361, "mobilenetv2")["n"]),
                   f"{suite_ratio(E0361, 'mobilenetv2')['median']:.3f}",
                   f"{suite_ratio(D190, 'mobilenetv2')['median']:.3f}",
                   str(suite_ratio(D190, "mobilenetv2")["n"]))),
    Claim(BR, "1ded3d0's {} rounds gave {}, so what oneDNN gains",
          lambda: (str(suite_ratio(E1DED, "mobilenetv2", setting="shipped")["n"]),
                   f"{suite_ratio(E1DED, 'mobilenetv2', setting='shipped')['median']:.2f}")),
    Claim(BR, "100 batches); 1ded3d0's {} rounds {}.",
          lambda: (str(suite_ratio(E1DED, "resnet18", "input", "input")["n"]),
                   f"{suite_ratio(E1DED, 'resnet18', 'input', 'input')['median']:.2f}")),
    Claim(BR, "lite ahead in {} of {} rounds. Both pipelines",
          lambda: (str(sum(r["images_per_sec"]["lite"] > r["images_per_sec"]["tfm"] for r in
                           load("2026-12-01-input-ab-resnet18.json")["rounds"])),
                   str(len(load("2026-12-01-input-ab-resnet18.json")["rounds"])))),
    # Both trainers in one process: earlier runs, pooled rounds, the loaded re-measurement.
    Claim(BR, "(`results/2026-12-02-ee33327-step-vs-tfm.json`; the suite had it at {}).",
          lambda: (f"{suite_ratio(FINAL_SUITE, 'vit_ti16', dtype='bfloat16')['median']:.3f}",)),
    Claim(BR, "lite's bf16/fp32 for ViT-Ti went from {} to {} in the final run",
          lambda: tuple(f"{step_speedup('vit_ti16', 'lite', f):.2f}"
                        for f in ("2026-12-02-ee33327-step-vs-tfm.json", FINAL_STEP_VS_TFM))),
    Claim(BR, "lite/TFM training is ResNet-50 {} / {} (float32 / bf16; lite faster in {} and {} of "
          "{} rounds), ResNet-18 {} / {} ({}, {}), MobileNetV2 {} / {} ({}, {}).",
          lambda: (lambda r: (f"{r[0][0]:.3f}", f"{r[1][0]:.3f}", str(r[0][1]), str(r[1][1]),
                              str(r[0][2]), f"{r[2][0]:.3f}", f"{r[3][0]:.3f}", str(r[2][1]),
                              str(r[3][1]), f"{r[4][0]:.3f}", f"{r[5][0]:.3f}", str(r[4][1]),
                              str(r[5][1])))(
              [pooled(m, d) for m in ("resnet50", "resnet18", "mobilenetv2")
               for d in ("float32", "bfloat16")])),
    Claim(BR, "before the MobileNet activations: MobileNetV3Large float32 train {}, lite faster in "
          "{} of {})",
          lambda: (lambda s: (f"{s['median']:.3f}", str(s["lite_wins"]), str(s["rounds"])))(
              step_vs_tfm_row("2026-12-02-06d0950-step-vs-tfm.json", "mobilenetv3large",
                              "float32"))),
    *[Claim(DB, f"| RetinaNet {title} | {kind_text} | {{}} | {{}} | {{}} | {{}} | {{}} / {{}} |",
            lambda m=m, k=k: retinanet_row(m, k))
      for m, title in (("retinanet_resnet50_fpn", "ResNet-50 FPN"),
                       ("retinanet_mobilenetv2_fpn", "MobileNetV2 FPN"))
      for k, kind_text in (("train", "train"), ("eval", "eval (pruned: no decoding, no NMS)"))],
    Claim(DB, "(TFM faster in {} of {} rounds each)",
          lambda: (lambda rows: (str(rows[0]["rounds"] - rows[0]["lite_wins"]),
                                 str(rows[0]["rounds"])) if len({(s["lite_wins"], s["rounds"])
                                                                  for s in rows}) == 1
                   else ("?", "?"))([step_vs_tfm.summarize(r, k) for r in load(RETINANET)[
                       "records"] if r["model"].startswith("retinanet") for k in ("train", "eval")])),
    Claim(DB, "first train call (trace + run) {} / {} s against TFM's {} / {} s, first eval call {} "
          "/ {} s against {} / {} s (ResNet-50 FPN / MobileNetV2 FPN)",
          lambda: tuple(first_call_s(m)[i] for i in range(4)
                        for m in ("retinanet_resnet50_fpn", "retinanet_mobilenetv2_fpn"))),
    Claim(DB, "ViT-Ti/16 float32 train {}, eval {}, lite faster in {} of {} rounds each",
          lambda: (spread(step_vs_tfm_row(VIT_LOADED, "vit_ti16", "float32")),
                   spread(step_vs_tfm_row(VIT_LOADED, "vit_ti16", "float32", "eval")),
                   str(step_vs_tfm_row(VIT_LOADED, "vit_ti16", "float32")["lite_wins"]),
                   str(step_vs_tfm_row(VIT_LOADED, "vit_ti16", "float32")["rounds"]))),
    Claim(DB, "ResNet-18 float32 train {}, eval {}, lite faster in {} of {} (in the RetinaNet file",
          lambda: (spread(step_vs_tfm_row(RETINANET, "resnet18", "float32")),
                   spread(step_vs_tfm_row(RETINANET, "resnet18", "float32", "eval")),
                   str(step_vs_tfm_row(RETINANET, "resnet18", "float32")["lite_wins"]),
                   str(step_vs_tfm_row(RETINANET, "resnet18", "float32")["rounds"]))),
    Claim(DB, "(ViT-Ti {}, ResNet-18 {} train, {} rounds) the medians did not drop, but at {} / {} "
          "ms a step against {} / {} ms there",
          lambda: (f"{step_vs_tfm_row(FINAL_STEP_VS_TFM, 'vit_ti16', 'float32')['median']:.3f}",
                   f"{step_vs_tfm_row(FINAL_STEP_VS_TFM, 'resnet18', 'float32')['median']:.3f}",
                   str(load(FINAL_STEP_VS_TFM)["rounds"]),
                   f"{step_vs_tfm_row(VIT_LOADED, 'vit_ti16', 'float32')['lite_ms']:.0f}",
                   f"{step_vs_tfm_row(RETINANET, 'resnet18', 'float32')['lite_ms']:.0f}",
                   f"{step_vs_tfm_row(FINAL_STEP_VS_TFM, 'vit_ti16', 'float32')['lite_ms']:.0f}",
                   f"{step_vs_tfm_row(FINAL_STEP_VS_TFM, 'resnet18', 'float32')['lite_ms']:.0f}")),
    # The vision suites' durations.
    *[Claim(doc, text, lambda: (f"{load(FINAL_SUITE)['meta']['elapsed_s'] / 60:.0f}",))
      for doc, text in ((DB, "(5 rounds, the AVX-512 BF16 EPYC, {} min)"),
                        (BR, "every row, 5 alternating rounds, {} min on the 2 idle cores"))],
    Claim(BR, "from the 5-round run of 944d805, which took {} min.",
          lambda: (f"{load(E944)['meta']['elapsed_s'] / 60:.0f}",)),
    # Time to first step: the windows' own figures.
    Claim(DB, "this window was slower than the one above: TFM's ResNet-50 {} s against {} s",
          lambda: (f"{_median(F51, 'resnet50', 'tfm'):.1f}",
                   f"{_median(FIRST_STEP_WINDOWS[0], 'resnet50', 'tfm'):.2f}")),
    Claim(DB, "i.e. ~{}× of TFM's ResNet-50 first step ({} s)",
          lambda: (f"{4.15 / _median(F51, 'resnet50', 'tfm'):.2f}",
                   f"{_median(F51, 'resnet50', 'tfm'):.1f}")),
    Claim(DB, "(~{} s of lite's {}, TFM's ~{} s)",
          lambda: (f"{_median(F51, 'resnet50', 'lite', 'trace_compile_s'):.0f}",
                   f"{_median(F51, 'resnet50', 'lite'):.1f}",
                   f"{_median(F51, 'resnet50', 'tfm', 'trace_compile_s'):.0f}")),
    Claim(DB, "(start-up {} vs {} s, trace+compile {}×, process CPU {}×)",
          lambda: (f"{_median(F51, 'resnet50', 'lite', 'startup_s'):.1f}",
                   f"{_median(F51, 'resnet50', 'tfm', 'startup_s'):.1f}",
                   f"{first_ratio(F51, 'resnet50', field='trace_compile_s')['median']:.2f}",
                   f"{first_ratio(F51, 'resnet50', field='cpu_s')['median']:.2f}")),
    Claim(DB, "a slower window again: TFM's ResNet-50 {} s)",
          lambda: (f"{_median(C45, 'resnet50', 'tfm'):.1f}",)),
    Claim(DB, "its {} → {} is the window (lite's own first step got slower, median {} → {} s, "
          "TFM's more, {} → {} s)",
          lambda: (f"{first_ratio(F51, 'resnet50')['median']:.3f}",
                   f"{first_ratio(C45, 'resnet50')['median']:.3f}",
                   *(f"{_median(f, 'resnet50', side):.2f}" for side in ("lite", "tfm")
                     for f in (F51, C45)))),
    Claim(DB, "lite's ResNet-50 start-up (import and build) alone was {} s of its {} s.",
          lambda: (_range([r["startup_s"] for r in _fs_records(C45, "resnet50", "lite")]),
                   _range([r["first_step_s"] for r in _fs_records(C45, "resnet50", "lite")], 1))),
    # The run.py files' own figures.
    Claim(DB, "{} alternating rounds in {} min on a 2-core AMD EPYC VM",
          lambda: (str(load(B9A)["meta"]["rounds"]),
                   f"{load(B9A)['meta']['elapsed_s'] / 60:.0f}")),
    Claim(DB, "(a {} round for mlp_tiny at spl=1; lite/raw of {} for mlp_tiny",
          lambda: (f"{run_ratios(B9A)['mlp_tiny']['ratios']['train1 lite@tfm/tfm@tfm']['min']:.2f}",
                   _range([run_ratios(B9A)["mlp_tiny"]["ratios"][f"train100 lite@{e}/raw@{e}"]
                           ["median"] for e in ("tfm", "project")]))),
    Claim(DB, "mock's {} on TF 2.21 is a miss.",
          lambda: (f"{run_ratios(B9A)['mock']['ratios']['train100 lite@project/raw@project']['median']:.3f}",)),
    Claim(DB, "issue 13's change (39d2e4f → e3f2ba2): B/A {} on the medians over {} rounds",
          lambda: (lambda s: (_range([r["median"] for w in s.values() for r in w.values()]),
                              str(max(r["rounds"] for w in s.values() for r in w.values()))))(
              _checkout_ab_summary(load("2026-12-01-ab-39d2e4f-vs-e3f2ba2.json")["samples"],
                                   ("train100", "train1", "train1_nosum", "eval"),
                                   ("mlp_tiny", "mock", "cnn_small")))),
    Claim(DB, "ResNet-50, {} rotated rounds: fused momentum {}, fused BatchNorm {}, the three "
          "together {} of the step without them (the `l2_loss` form alone {})",
          lambda: (str(len(load("2026-12-01-bf05557-resnet50-step-ab.json")["rounds"])),)
          + tuple(spread(load("2026-12-01-bf05557-resnet50-step-ab.json")["speedup_vs_base"][k])
                  for k in ("fusedmom", "fusedbn", "l2loss+fusedbn+fusedmom"))
          + (f"{load('2026-12-01-bf05557-resnet50-step-ab.json')['speedup_vs_base']['l2loss']['median']:.3f}",)),
]


# --- Detection rows on a quiet Intel Xeon with AMX: two 8-round runs, pooled -----------------

AMX_RETINANET = ("2026-12-06-04468a6-step-vs-tfm-retinanet-amx.json",
                 "2026-12-06-04468a6-step-vs-tfm-retinanet-amx-2.json")
AMX_MASKRCNN = ("2026-12-06-04468a6-step-vs-tfm-maskrcnn-amx.json",
                "2026-12-06-04468a6-step-vs-tfm-maskrcnn-amx-2.json")
AMX_ROWS = tuple((names, model, dtype, kind)
                 for names, models, dtypes in (
                     (AMX_RETINANET, ("retinanet_resnet50_fpn", "retinanet_mobilenetv2_fpn"),
                      ("float32", "bfloat16")),
                     (AMX_MASKRCNN, ("maskrcnn_resnet50_fpn",), ("float32",)))
                 for model in models for dtype in dtypes for kind in ("train", "eval"))


def pooled_row(names, model, dtype, kind) -> dict:
    """One row's within-round lite/TFM ratios over the rounds of several step_vs_tfm.py files:
    the spread, the rounds lite won, the rounds."""
    values = [v for f in names for r in load(f)["records"]
              if (r["model"], r["dtype"]) == (model, dtype)
              for v in step_vs_tfm.ratios(r, kind)]
    return {**rounds_lib.spread(values), "lite_wins": sum(v > 1.0 for v in values),
            "rounds": len(values)}


def pooled_cells(names, model, dtype, kind) -> Tuple[str, str]:
    s = pooled_row(names, model, dtype, kind)
    return spread(s), f"{s['lite_wins']}/{s['rounds']}"


_AMX_TITLES = {"retinanet_resnet50_fpn": "RetinaNet ResNet-50 FPN",
               "retinanet_mobilenetv2_fpn": "RetinaNet MobileNetV2 FPN",
               "maskrcnn_resnet50_fpn": "Mask R-CNN ResNet-50 FPN"}

def pooled_table_claims(rows, label="") -> List[Claim]:
    """One claim per row of a pooled table: "| title{label} | dtype | kind | spread | wins |"."""
    return [Claim(DB, f"| {_AMX_TITLES[model]}{label} | {dtype} | {kind} | {{}} | {{}} |",
                  lambda n=names, m=model, d=dtype, k=kind: pooled_cells(n, m, d, k))
            for names, model, dtype, kind in rows]


CLAIMS += [
    *pooled_table_claims(AMX_ROWS),
    Claim(DB, "{} of the {} pooled rows are ≥ 1.0 on the median: every eval row ({}) and {} of "
          "the {} training rows (training {})",
          lambda: (lambda rows: (
              str(sum(s["median"] >= 1.0 for s in rows.values())), str(len(rows)),
              _range([s["median"] for (_, _, _, k), s in rows.items() if k == "eval"], 3),
              str(sum(s["median"] >= 1.0 for (_, _, _, k), s in rows.items() if k == "train")),
              str(sum(k == "train" for (_, _, _, k) in rows)),
              _range([s["median"] for (_, _, _, k), s in rows.items() if k == "train"], 3)))(
              {row: pooled_row(*row) for row in AMX_ROWS})),
    Claim(DB, "1-minute load {}–{} over the rounds",
          lambda: (lambda loads: (f"{min(loads):.1f}", f"{max(loads):.1f}"))(
              [r["loadavg"][0] for f in AMX_RETINANET + AMX_MASKRCNN
               for record in load(f)["records"] for r in record["rounds"]])),
]


# --- The Mask R-CNN op profile (step_vs_tfm.py --profile, issue 43) ---------------------------

MASKRCNN_PROFILE = "2026-12-03-56c1cdd-step-vs-tfm-maskrcnn-profile.json"


MASKRCNN_AMX_PROFILE = "2026-12-06-6156e0a-step-vs-tfm-maskrcnn-amx-profile.json"


def profile_ops(side, kind, name=MASKRCNN_PROFILE) -> Dict[str, float]:
    """{op type: ms per step} of one side's profiled call."""
    return load(name)["records"][0]["op_ms_per_step"][side][kind]


def profile_sum(side, kind, pick, name=MASKRCNN_PROFILE) -> float:
    """ms a step of the op types `pick(name)` selects."""
    return sum(ms for op, ms in profile_ops(side, kind, name).items() if pick(op))


def _op(*names):
    return lambda name: name in names


CLAIMS += [
    Claim(DB, "whose one round gave train {} / {} ms and eval {} / {} ms",
          lambda: tuple(f"{load(MASKRCNN_PROFILE)['records'][0]['rounds'][0]['ms_per_step'][side][kind]:,.0f}"
                        for kind in ("train", "eval") for side in ("lite", "tfm"))),
    Claim(DB, "~{} s of op time a step in lite against ~{} s in TFM (the enclosing function's own "
          "event left out)",
          lambda: tuple(f"{profile_sum(side, 'train', lambda n: '__inference' not in n) / 1000:.0f}"
                        for side in ("lite", "tfm"))),
    Claim(DB, "(weight gradients with bias {} s in lite against {} s in TFM, input gradients {} / "
          "{} s, forward {} / {} s)",
          lambda: tuple(f"{profile_sum(side, 'train', pick) / 1000:.1f}" for pick in (
              _op("_MklNativeConv2DBackpropFilterWithBias", "_MklNativeConv2DBackpropFilter"),
              _op("_MklNativeConv2DBackpropInput"),
              _op("_MklNativeFusedConv2D", "_MklNativeConv2D")) for side in ("lite", "tfm"))),
    Claim(DB, "per step `MakeIterator` {} ms in lite against {} ms in TFM and tf.data's own events "
          "~{} against ~{} ms (lite's eval step function {} against {} ms)",
          lambda: tuple(f"{profile_sum(side, 'eval', pick):.0f}" for pick in (
              _op(" MakeIterator"), lambda n: n.startswith("tf.data"),
              lambda n: n.startswith(" __inference_eval_step")) for side in ("lite", "tfm"))),
    Claim(DB, "train {} [{}] over its 2 rounds; in the profiled call, op time summed over threads "
          "{} s a step in lite against {} s in TFM and the step function's own event {} against "
          "{} s; lite-side extras: Sum {} against {} ms, ReluGrad {} against {} ms, Tile {} "
          "against {} ms",
          lambda: (lambda s, f: (
              f"{s['median']:.3f}", f"{s['min']:.3f}–{s['max']:.3f}",
              *(f"{profile_sum(side, 'train', lambda n: '__inference' not in n, f) / 1000:.1f}"
                for side in ("lite", "tfm")),
              *(f"{profile_sum(side, 'train', lambda n: '__inference_loop' in n, f) / 1000:.1f}"
                for side in ("lite", "tfm")),
              *(f"{profile_sum(side, 'train', _op(op), f):.0f}"
                for op in ("Sum", "ReluGrad", "Tile") for side in ("lite", "tfm"))))(
              step_vs_tfm_row(MASKRCNN_AMX_PROFILE, "maskrcnn_resnet50_fpn", "float32"),
              MASKRCNN_AMX_PROFILE)),
    Claim(DB, "8 rounds): Mask R-CNN train {}, lite faster in {}; pruned eval (input only) {} —",
          lambda: (lambda f: (
              spread(step_vs_tfm_row(f, "maskrcnn_resnet50_fpn", "float32")),
              "{lite_wins} of {rounds}".format(
                  **step_vs_tfm_row(f, "maskrcnn_resnet50_fpn", "float32")),
              spread(step_vs_tfm_row(f, "maskrcnn_resnet50_fpn", "float32", "eval"))))(
              "2026-12-06-ded6be6-step-vs-tfm-maskrcnn-amx-roialign.json")),
]


# --- RetinaNet's focal loss with a hand-written gradient (issue 41, 7331d2b) -----------------

FOCAL_PROFILE_BEFORE = "2026-12-06-1d3825c-step-vs-tfm-retinanet-mobilenetv2-profile-by-name.json"
FOCAL_PROFILE_AFTER = "2026-12-06-82975a6-step-vs-tfm-retinanet-mobilenetv2-profile-by-name.json"
FOCAL_AB = "2026-12-06-82975a6-focal-loss-ab.json"
FOCAL_RETINANET = ("2026-12-06-7331d2b-step-vs-tfm-retinanet-focal.json",
                   "2026-12-06-7331d2b-step-vs-tfm-retinanet-focal-bf16.json",
                   "2026-12-06-77e2a9d-step-vs-tfm-retinanet-focal-2.json")
FOCAL_ROWS = tuple((FOCAL_RETINANET, model, dtype, kind)
                   for model in ("retinanet_resnet50_fpn", "retinanet_mobilenetv2_fpn")
                   for dtype in ("float32", "bfloat16") for kind in ("train", "eval"))


def _by_type(name, side, op_type, kind="train") -> float:
    """ms a step of one op type in a by-name profile ("op_name:OpType" keys)."""
    return profile_sum(side, kind, lambda key: key.endswith(":" + op_type), name)


def _op_time(name, side) -> float:
    return profile_sum(side, "train", lambda key: "__inference" not in key, name)


def _loss_side_ops(name, side) -> Tuple[str, str]:
    """(count, ms a step) of the step's ops outside the model over 0.7 ms: the losses' forward
    and backward (the optimizer's updates, L2 terms and gradient sums left out)."""
    ops = [ms for key, ms in profile_ops(side, "train", name).items()
           if key.startswith("while/body/_1/") and "retinanet_model" not in key
           and "retina_net_model" not in key and ms > 0.7
           and not any(word in key for word in ("L2Loss", "AddN", "Apply"))]
    return str(len(ops)), f"{sum(ops):.0f}"


def _profile_round_ms(name, side) -> str:
    return " / ".join(f"{r['ms_per_step'][side]['train']:.0f}"
                      for r in load(name)["records"][0]["rounds"])


def _focal_ab() -> dict:
    return load(FOCAL_AB)["records"][0]


CLAIMS += [
    Claim(DB, "whose 2 rounds gave lite {} against TFM {} ms a step): op time summed over "
          "threads {} ms a step in lite against {} ms in TFM",
          lambda: (_profile_round_ms(FOCAL_PROFILE_BEFORE, "lite"),
                   _profile_round_ms(FOCAL_PROFILE_BEFORE, "tfm"),
                   *(f"{_op_time(FOCAL_PROFILE_BEFORE, side):.0f}" for side in ("lite", "tfm")))),
    Claim(DB, "Ops outside the model (the losses' forward and backward) over 0.7 ms a step: {} in "
          "lite ({} ms in all) and {} in TFM ({} ms)",
          lambda: (*_loss_side_ops(FOCAL_PROFILE_BEFORE, "lite"),
                   *_loss_side_ops(FOCAL_PROFILE_BEFORE, "tfm"))),
    Claim(DB, "ops outside the model over 0.7 ms: {} in lite ({} ms) against {} in TFM ({} ms)",
          lambda: (*_loss_side_ops(FOCAL_PROFILE_AFTER, "lite"),
                   *_loss_side_ops(FOCAL_PROFILE_AFTER, "tfm"))),
    Claim(DB, "the focal loss's `Pow`: {} ms a step in lite, {} ms in TFM",
          lambda: tuple(f"{_by_type(FOCAL_PROFILE_BEFORE, side, 'Pow'):.1f}"
                        for side in ("lite", "tfm"))),
    Claim(DB, "{} ms a call in lite against {} ms in TFM (TFM/lite {}), the same loss ({} on "
          "both sides), gradients within {} (largest gradient {})",
          lambda: (lambda r: (
              *(f"{statistics.median(x['ms_per_step'][side]['loss_and_gradient'] for x in r['rounds']):.1f}"
                for side in ("lite", "tfm")),
              spread(r["tfm_over_lite_ms"]),
              f"{r['loss']['lite']:,.2f}" if r["loss"]["lite"] == r["loss"]["tfm"] else "differ",
              f"{r['max_abs_gradient_difference']:.1e}", f"{r['max_abs_gradient']:.2f}"))(
              _focal_ab())),
    Claim(DB, "2 rounds lite {} against TFM {} ms a step; no `Pow` left in lite ({} ms) against "
          "TFM's {} ms, op time {} against {} ms a step",
          lambda: (_profile_round_ms(FOCAL_PROFILE_AFTER, "lite"),
                   _profile_round_ms(FOCAL_PROFILE_AFTER, "tfm"),
                   *(f"{_by_type(FOCAL_PROFILE_AFTER, side, 'Pow'):.1f}"
                     for side in ("lite", "tfm")),
                   *(f"{_op_time(FOCAL_PROFILE_AFTER, side):.0f}" for side in ("lite", "tfm")))),
    *pooled_table_claims(FOCAL_ROWS, ", focal loss `7331d2b`"),
    Claim(DB, "{} of the {} pooled RetinaNet rows are ≥ 1.0 on the median, training {} and "
          "pruned evaluation (no decoding, no NMS) {}; lite was faster in {} of the {} training "
          "rounds",
          lambda: (lambda rows: (
              str(sum(s["median"] >= 1.0 for s in rows.values())), str(len(rows)),
              _range([s["median"] for (_, _, _, k), s in rows.items() if k == "train"], 3),
              _range([s["median"] for (_, _, _, k), s in rows.items() if k == "eval"], 3),
              str(sum(s["lite_wins"] for (_, _, _, k), s in rows.items() if k == "train")),
              str(sum(s["rounds"] for (_, _, _, k), s in rows.items() if k == "train"))))(
              {row: pooled_row(*row) for row in FOCAL_ROWS})),
    Claim(DB, "(before the change, the pooled runs above: {} of {}, training medians {})",
          lambda: (lambda rows: (
              str(sum(s["lite_wins"] for s in rows)), str(sum(s["rounds"] for s in rows)),
              _range([s["median"] for s in rows], 3)))(
              [pooled_row(*row) for row in AMX_ROWS
               if row[1].startswith("retinanet") and row[3] == "train"])),
    Claim(DB, "MobileNetV2 FPN to {} (a light backbone, 220–250 ms a step, of which the loss was a "
          "large part), ResNet-50 FPN to {} (1.2–1.3 s a step in float32)",
          lambda: tuple(_range([pooled_row(*row)["median"] for row in FOCAL_ROWS
                                if row[1] == model and row[3] == "train"], 3)
                        for model in ("retinanet_mobilenetv2_fpn", "retinanet_resnet50_fpn"))),
    Claim("docs/detection.md", "a hand-written gradient, {}× faster than TFM's forward + "
          "backward at this size", lambda: (f"{_focal_ab()['tfm_over_lite_ms']['median']:.1f}",)),
    Claim("docs/detection.md", "RetinaNet training {} (lite/TFM medians over "
          "16 rounds, after the focal-loss change",
          lambda: tuple(_range([pooled_row(*row)["median"] for row in FOCAL_ROWS
                                if row[3] == kind], 3) for kind in ("train",))),
]


# --- Mask R-CNN after the ROI Align change: two 8-round runs ---------------------------------

MASKRCNN_ROIALIGN = ("2026-12-06-ded6be6-step-vs-tfm-maskrcnn-amx-roialign.json",
                     "2026-12-06-6e23ac0-step-vs-tfm-maskrcnn-amx-roialign-2.json")


def _maskrcnn_pooled(kind) -> dict:
    return pooled_row(MASKRCNN_ROIALIGN, "maskrcnn_resnet50_fpn", "float32", kind)


CLAIMS += [
    Claim(DB, "the same command): train {}, lite faster in {} of {}, pruned eval (input only) {}",
          lambda: (lambda f: (
              spread(step_vs_tfm_row(f, "maskrcnn_resnet50_fpn", "float32")),
              str(step_vs_tfm_row(f, "maskrcnn_resnet50_fpn", "float32")["lite_wins"]),
              str(step_vs_tfm_row(f, "maskrcnn_resnet50_fpn", "float32")["rounds"]),
              spread(step_vs_tfm_row(f, "maskrcnn_resnet50_fpn", "float32", "eval"))))(
              MASKRCNN_ROIALIGN[1])),
    Claim(DB, "pooled over the two runs after the change ({} rounds), train {} with lite faster in "
          "{} of {}, pruned eval (input only) {} with lite faster in {} of {}",
          lambda: (lambda t, e: (str(t["rounds"]), spread(t), str(t["lite_wins"]),
                                 str(t["rounds"]), spread(e), str(e["lite_wins"]),
                                 str(e["rounds"])))(
              _maskrcnn_pooled("train"), _maskrcnn_pooled("eval"))),
    Claim("docs/detection.md", "(it was {} over 16 rounds before): training {} over {} rounds",
          lambda: (f"{pooled_row(AMX_MASKRCNN, 'maskrcnn_resnet50_fpn', 'float32', 'train')['median']:.3f}",
                   spread(_maskrcnn_pooled("train")), str(_maskrcnn_pooled("train")["rounds"]))),
    Claim("docs/detection.md", "its median is ≥ 1.0 but lite was faster in {} of {} rounds, where "
          "RetinaNet's training rows won {} of {}",
          lambda: (str(_maskrcnn_pooled("train")["lite_wins"]),
                   str(_maskrcnn_pooled("train")["rounds"]),
                   str(sum(pooled_row(*row)["lite_wins"] for row in FOCAL_ROWS if row[3] == "train")),
                   str(sum(pooled_row(*row)["rounds"] for row in FOCAL_ROWS if row[3] == "train")))),
]


MASKRCNN_NAME_PROFILE = "2026-12-06-46b4fcc-step-vs-tfm-maskrcnn-profile-by-name.json"


def _largest_op_ms(name, side, op_type) -> float:
    return max(ms for key, ms in profile_ops(side, "train", name).items()
               if key.endswith(":" + op_type))


CLAIMS += [
    Claim(DB, "its 2 rounds lite {} against TFM {} ms a step): op time {} s a step in lite against "
          "{} s in TFM; the op types that differ most are the convolution gradients (weight "
          "gradients with bias {} s in lite, input gradients {} s)",
          lambda: (lambda f: (
              *(" / ".join(f"{r['ms_per_step'][side]['train']:,.0f}"
                           for r in load(f)["records"][0]["rounds"]) for side in ("lite", "tfm")),
              *(f"{_op_time(f, side) / 1000:.1f}" for side in ("lite", "tfm")),
              *(f"{(_by_type(f, 'lite', op) - _by_type(f, 'tfm', op)) / 1000:+.1f}".replace("-", "−")
                for op in ("_MklNativeConv2DBackpropFilterWithBias",
                           "_MklNativeConv2DBackpropInput"))))(MASKRCNN_NAME_PROFILE)),
    Claim(DB, "(`ResourceApplyKerasMomentum`, {} ms for one variable in lite against TFM's largest "
          "{} ms; the two earlier profiles had lite {} / {} ms in all against TFM {} / {})",
          lambda: (f"{_largest_op_ms(MASKRCNN_NAME_PROFILE, 'lite', 'ResourceApplyKerasMomentum'):.0f}",
                   f"{_largest_op_ms(MASKRCNN_NAME_PROFILE, 'tfm', 'ResourceApplyKerasMomentum'):.0f}",
                   *(f"{profile_ops(side, 'train', f)['ResourceApplyKerasMomentum']:.0f}"
                     for side in ("lite", "tfm")
                     for f in (MASKRCNN_AMX_PROFILE, MASKRCNN_PROFILE)))),
]


FP32_NOISE = "2026-12-06-1690600-fp32-noise.json"
NOISE_DOC = "tests/vision/fp32_noise.py"


def sci(x: float) -> str:
    """1.8e-4 as the docstring writes it (two digits; 0 as 0)."""
    if x == 0:
        return "0"
    mantissa, exponent = f"{x:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def noise(library: str) -> dict:
    """The figures of one oneDNN setting ('onednn' or 'eigen') of the fp32_noise.py file."""
    return load(FP32_NOISE)[library]


def noise_detections(library: str, figure: str) -> float:
    """The largest detection difference of `figure` over RetinaNet and Mask R-CNN."""
    found = noise(library)
    return max(found[model]["detections"][figure] for model in ("retinanet", "maskrcnn")
               if figure in found[model]["detections"])


def noise_served(side: str) -> float:
    """The largest served box difference ('vs_lite' or 'vs_tfm_served') over both settings."""
    return max(noise(library)["retinanet"]["served"][side]["box_px"]
               for library in ("onednn", "eigen"))


CLAIMS += [
    Claim(NOISE_DOC, "`benchmarks/results/{}`", lambda: (FP32_NOISE,)),
    Claim(NOISE_DOC, "lite vs TFM {} with Eigen and {} with oneDNN ({} at the worst level and "
          "kind); lite with oneDNN vs lite with Eigen, same weights and inputs, {}.",
          lambda: (sci(noise("eigen")["retinanet"]["lite_vs_tfm"]["cls_3"]),
                   sci(noise("onednn")["retinanet"]["lite_vs_tfm"]["cls_3"]),
                   sci(noise("onednn")["retinanet"]["lite_vs_tfm"]["worst"]),
                   sci(load(FP32_NOISE)["onednn_vs_eigen"]["cls_3"]))),
    Claim(NOISE_DOC, "with oneDNN: box corners {} px, scores {}, a mask pixel {} (with Eigen at "
          "most {}); lite's SavedModel's optimised graph moves RetinaNet's box corners by up to "
          "{} px on its own ({} px from TFM's served boxes).",
          lambda: (sci(noise_detections("onednn", "box_px")),
                   sci(noise_detections("onednn", "score")),
                   sci(noise_detections("onednn", "mask_pixel")),
                   sci(max(noise_detections("eigen", f)
                           for f in ("box_px", "score", "mask_pixel"))),
                   sci(noise_served("vs_lite")), sci(noise_served("vs_tfm_served")))),
    Claim(NOISE_DOC, "moves the class outputs by {} (the stem kernel's output channels reversed; "
          "the model as built, {})",
          lambda: tuple(f"{min(noise(library)['wrong_weight'][key] for library in ('onednn', 'eigen')):.1f}"
                        for key in ("permuted_kernel_cls_3", "as_built_cls_3"))),
    Claim("docs/detection.md", "on the AMD EPYC that wrote the references, {} with TensorFlow's "
          "default there (Eigen) and {} with oneDNN, which differs from Eigen by {} itself "
          "(`benchmarks/results/{}`)",
          lambda: (sci(noise("eigen")["retinanet"]["lite_vs_tfm"]["cls_3"]),
                   sci(noise("onednn")["retinanet"]["lite_vs_tfm"]["cls_3"]),
                   sci(load(FP32_NOISE)["onednn_vs_eigen"]["cls_3"]), FP32_NOISE)),
]

# --- The quantized .tflite files of the digits ResNet (benchmarks/tflite_digits.py) ----------

EX = "docs/export.md"
TFLITE_DIGITS = "2026-12-06-tflite-digits.json"


def _tflite_row(quant_type):
    record = load(TFLITE_DIGITS)
    row, float_bytes = record["files"][quant_type], record["files"]["none"]["bytes"]
    return (f"{row['bytes']:,}", f"{float_bytes / row['bytes']:.2f}x", row["input_dtype"],
            f"{row['top1']:.4f}")


CLAIMS += [
    Claim(EX, "a ResNet-10 (depth multiplier 0.5, {} parameters) trained {} steps on the digits, "
          "on its {} validation images",
          lambda: (f"{load(TFLITE_DIGITS)['parameters']:,}",
                   str(load(TFLITE_DIGITS)["train_steps"]),
                   str(load(TFLITE_DIGITS)["validation_images"]))),
    *(Claim(EX, f"| {label} | {{}} | {{}} | {{}} | {{}} |",
            lambda q=quant_type: _tflite_row(q))
      for label, quant_type in (("none", "none"), ("`fp16`", "fp16"), ("`default`", "default"),
                                ("`int8`", "int8"), ("`int8_full`", "int8_full"))),
    Claim(EX, "The Keras model's own top-1 there is {}.",
          lambda: (f"{load(TFLITE_DIGITS)['keras_top1']:.4f}",)),
]

def normalise(text: str) -> str:
    """Whitespace runs as one space, bold markers dropped: prose wraps and emphasises freely."""
    return re.sub(r"\s+", " ", text.replace("**", ""))


def render_block(source: str) -> str:
    """The block report.py renders from results file `source` (a repository path)."""
    with open(os.path.join(REPO_ROOT, source)) as f:
        data = json.load(f)
    if data.get("kind") == "vision_suite":
        return report.vision_suite_markdown(data, source=source)[0]
    if report.is_step_vs_tfm(data):
        return step_vs_tfm.render(dict(data, file=source))
    if report.is_first_step(data):
        return first_step.render(dict(data, file=source), data.get("baseline", "tfm"))
    return report.markdown(data, source=source)[0]


def check(docs: Optional[Dict[str, str]] = None, claims: Optional[List[Claim]] = None,
          blocks: bool = True, docs_root: str = REPO_ROOT) -> List[str]:
    """Every mismatch between the docs and their results files, one line each ([]: none).

    `docs`: {path: text} read instead of the files (tests alter a figure this way); `claims`:
    these instead of CLAIMS; `blocks`: False leaves the rendered blocks unchecked;
    `docs_root`: where the docs are read (the results files always come from this checkout).
    """
    docs = dict(docs or {})
    for path in DOCS:
        if path not in docs:
            with open(os.path.join(docs_root, path)) as f:
                docs[path] = f.read()
    problems = []
    for path in DOCS:
        text = docs[path]
        for start, end in BLOCKS if blocks else ():
            i = text.find(start)
            while i >= 0:  # every such block of the doc (one per results file)
                stop = text.find(end, i)
                block = text[i + len(start):stop]
                source = _SOURCE.search(block)
                if source is None:
                    problems.append(f"{path}: the {start} block names no results file")
                elif block.strip() != render_block(source.group(1)).strip():
                    problems.append(f"{path}: the {start} block differs from what report.py "
                                    f"renders from {source.group(1)}; rerun report.py --update")
                i = text.find(start, stop) if stop >= 0 else -1
        if blocks and speed_targets.START_MARKER in text:
            start = text.index(speed_targets.START_MARKER) + len(speed_targets.START_MARKER)
            block = text[start:text.find(speed_targets.END_MARKER, start)]
            if block.strip() != speed_targets.render().strip():
                problems.append(f"{path}: the speed-targets block differs from what "
                                f"speed_targets.py renders; rerun report.py --targets --update")
    for claim in CLAIMS if claims is None else claims:
        try:
            expected = claim.text.format(*claim.figures())
        except (KeyError, IndexError, StopIteration, TypeError, ValueError) as e:
            problems.append(f"{claim.doc}: cannot compute {claim.text!r}: {e!r}")
            continue
        if normalise(expected) not in normalise(docs[claim.doc]):
            problems.append(f"{claim.doc}: expected {expected!r} (from its results file); "
                            f"the doc says otherwise")
    return problems


# --- The release learning runs' filed numbers (tests/vision/learning_run.py) -----------------

DD = "docs/detection.md"
LEARNING_MASKRCNN = "2026-12-06-6635907-learning-maskrcnn.json"
LEARNING_RETINANET = "2026-12-06-6635907-learning-retinanet.json"


def learning_figures(name, *metrics):
    """The last evaluation's `metrics` of a learning run's file, 3 decimals, then its file
    name and its wall seconds."""
    data = load(name)
    last = str(data["train_steps"])
    return tuple(f"{data['validation'][m][last]:.3f}" for m in metrics) + (
        name, f"{data['wall_s']:.0f}")


CLAIMS += [
    Claim(DD, "box AP50 {}, AP {}, mask AP50 {}, mask AP {} in the run filed as "
          "`benchmarks/results/{}`, {} s on the loaded 2-core AMD EPYC",
          lambda: learning_figures(LEARNING_MASKRCNN, "AP50", "AP", "mask_AP50", "mask_AP")),
    Claim(DD, "AP50 {}, AP {} in the run filed as\n`benchmarks/results/{}`, {} s on a loaded",
          lambda: learning_figures(LEARNING_RETINANET, "AP50", "AP")),
]


# --- The README's test command on a clean clone (benchmarks/suite_time.py) -------------------

TT = "docs/testing.md"
SUITE_TIME = "2026-12-06-3e8f122-suite-time.json"
EARLIER_SUITE_TIMES = ("2026-12-06-47e7217-suite-time.json", "2026-12-06-9ee15e6-suite-time.json",
                       "2026-12-06-2fbdc66-suite-time.json", "2026-12-06-60a997b-suite-time.json",
                       "2026-12-06-9aaae79-suite-time.json")


def _min_s(seconds: float) -> str:
    """689.4 -> '11 min 29 s'; a half second rounds up (600.5 -> '10 min 01 s': over a
    10-minute budget, as the run was), not to the even neighbour as round() does."""
    whole = int(seconds + 0.5)
    return f"{whole // 60} min {whole % 60:02d} s"


def _suite_time_figures():
    run = load(SUITE_TIME)
    return (SUITE_TIME, run["commit"], run["cpu_model"], str(run["cores"]),
            str(run["load_before"][0]), _min_s(run["total_s"]), f"{run['setup_s']:.0f}",
            f"{run['tests_s']:.0f}", str(run["passed"]), str(run["failed"]),
            str(run["skipped"]), f"{run['tests_cpu_s']:.0f}")


CLAIMS += [
    Claim(TT, "Before issue 55's work, the last run within the budget, `benchmarks/results/{}` "
          "(commit {}, on an {} with {} cores, load average {} before): {} in all on a clean "
          "clone, {} s setting up and {} s of tests ({} passed, {} failed, {} skipped; {} "
          "CPU-seconds of tests).",
          _suite_time_figures),
    Claim(TT, "11 min 29 s (`{}`: {} s setting up, {} s of tests; its pass counts read 0",
          lambda: (EARLIER_SUITE_TIMES[0], f"{load(EARLIER_SUITE_TIMES[0])['setup_s']:.0f}",
                   f"{load(EARLIER_SUITE_TIMES[0])['tests_s']:.0f}")),
    Claim(TT, "{} (`{}`: {} s and {} s of tests, {} CPU-seconds)",
          lambda: (_min_s(load(EARLIER_SUITE_TIMES[1])["total_s"]), EARLIER_SUITE_TIMES[1],
                   f"{load(EARLIER_SUITE_TIMES[1])['setup_s']:.0f}",
                   f"{load(EARLIER_SUITE_TIMES[1])['tests_s']:.0f}",
                   f"{load(EARLIER_SUITE_TIMES[1])['tests_cpu_s']:.0f}")),
    Claim(TT, "{} on a machine loaded by two helpers' benchmarks (`{}`: load {} before, {} "
          "CPU-seconds)",
          lambda: (_min_s(load(EARLIER_SUITE_TIMES[2])["total_s"]), EARLIER_SUITE_TIMES[2],
                   str(load(EARLIER_SUITE_TIMES[2])["load_before"][0]),
                   f"{load(EARLIER_SUITE_TIMES[2])['tests_cpu_s']:.0f}")),
    Claim(TT, "{} beside the two-hour soak at nice 19 (`{}`: {} s and {} s, {} CPU-seconds)",
          lambda: (_min_s(load(EARLIER_SUITE_TIMES[3])["total_s"]), EARLIER_SUITE_TIMES[3],
                   f"{load(EARLIER_SUITE_TIMES[3])['setup_s']:.0f}",
                   f"{load(EARLIER_SUITE_TIMES[3])['tests_s']:.0f}",
                   f"{load(EARLIER_SUITE_TIMES[3])['tests_cpu_s']:.0f}")),
    Claim(TT, "That is **within the 10-minute budget**, with {} s to spare. The run before it, "
          "`{}`: {} ({} s and {} s of tests, {} CPU-seconds)",
          lambda: (f"{600 - load(SUITE_TIME)['total_s']:.0f}", EARLIER_SUITE_TIMES[4],
                   _min_s(load(EARLIER_SUITE_TIMES[4])["total_s"]),
                   f"{load(EARLIER_SUITE_TIMES[4])['setup_s']:.0f}",
                   f"{load(EARLIER_SUITE_TIMES[4])['tests_s']:.0f}",
                   f"{load(EARLIER_SUITE_TIMES[4])['tests_cpu_s']:.0f}")),
    Claim(TT, "the CPU-seconds are the fairer comparison ({} -> {})",
          lambda: (f"{load(EARLIER_SUITE_TIMES[1])['tests_cpu_s']:.0f}",
                   f"{load(SUITE_TIME)['tests_cpu_s']:.0f}")),
]


# --- Video classification, both trainers in one process (step_vs_tfm.py, issue 53) -----------

VM = "docs/video.md"
VIDEO_STEP_VS_TFM = ("2026-12-06-d10a835-step-vs-tfm-video.json",
                     "2026-12-06-43a54e3-step-vs-tfm-video-2.json")
VIDEO_PROFILE = "2026-12-06-d10a835-step-vs-tfm-video-profile-by-name.json"
VIDEO_MODEL = "resnet3d50_kinetics400"


def video_row(name, kind) -> Tuple[str, ...]:
    """lite and TFM ms per step (medians), lite/TFM median [min–max], rounds lite won."""
    s = step_vs_tfm_row(name, VIDEO_MODEL, "float32", kind)
    return (f"{s['lite_ms']:,.0f}", f"{s['tfm_ms']:,.0f}", spread(s),
            f"{s['lite_wins']}/{s['rounds']}")


def video_profile(side) -> Tuple[str, ...]:
    """One profiled training call of `side` (ops keyed "op_name:OpType"): the op names, those
    of batch normalisation (the layers' names hold "norm") and their ms a step, and the 3D
    convolutions' ms a step."""
    ops = load(VIDEO_PROFILE)["records"][0]["op_ms_per_step"][side]["train"]
    norm = [ms for key, ms in ops.items() if "norm" in key.rpartition(":")[0].lower()]
    conv = [ms for key, ms in ops.items() if "Conv3D" in key.rpartition(":")[2]]
    return (f"{len(ops):,}", f"{len(norm):,}", f"{sum(norm):.0f}", f"{sum(conv):,.0f}")


def _video_pooled(kind) -> dict:
    return pooled_row(VIDEO_STEP_VS_TFM, VIDEO_MODEL, "float32", kind)


def _video_claims() -> List[Claim]:
    def both(side_figures):
        lite, tfm = video_profile("lite"), video_profile("tfm")
        return tuple(x for pair in zip(*(lite, tfm)) for x in pair)[side_figures]

    runs = [(f"| `{load(name)['commit']}` | {kind} | {{}} | {{}} | {{}} | {{}} |", name, kind)
            for name in VIDEO_STEP_VS_TFM for kind in ("train", "eval")]
    return [
        *[Claim(VM, text, lambda n=name, k=kind: video_row(n, k)) for text, name, kind in runs],
        *[Claim(VM, f"| both runs pooled | {kind} | | | {{}} | {{}} |",
                lambda k=kind: pooled_cells(VIDEO_STEP_VS_TFM, VIDEO_MODEL, "float32", k))
          for kind in ("train", "eval")],
        Claim(VM, "1-minute load average {}–{} and {}–{} over the rounds",
              lambda: tuple(x for name in VIDEO_STEP_VS_TFM
                            for x in load_range(name, VIDEO_MODEL))),
        Claim(VM, "lite's training step ran {} op names against TFM's {}, {} of them batch "
              "normalisation's against TFM's {}", lambda: both(slice(0, 4))),
        Claim(VM, "those took {} against {} ms a step, the 3D convolutions {} against {} ms",
              lambda: both(slice(4, 8))),
        Claim(VM, "(that run's own 2 rounds: train {}, eval {})",
              lambda: tuple(spread(step_vs_tfm_row(VIDEO_PROFILE, VIDEO_MODEL, "float32", k))
                            for k in ("train", "eval"))),
        Claim(DB, "3D ResNet-50 (`video_classification_kinetics400`, 8×112×112 clips, batch 2, "
              "float32), {} rounds pooled: train {} with lite faster in {} of them, eval {} "
              "with lite faster in {}",
              lambda: (lambda t, e: (str(t["rounds"]), spread(t), str(t["lite_wins"]),
                                     spread(e), str(e["lite_wins"])))(
                  _video_pooled("train"), _video_pooled("eval"))),
    ]


CLAIMS += _video_claims()


# --- Honest detection eval rows (issue 55): the COCO evaluator on, nothing pruned -------------

# The MobileNetV2 FPN row was not re-measured (the session's time ran out).
HONEST_EVAL = {model: f"2026-12-06-b581a18-step-vs-tfm-{model}-honest-eval.json"
               for model in ("retinanet_resnet50_fpn", "maskrcnn_resnet50_fpn")}


def _honest(model) -> dict:
    return step_vs_tfm_row(HONEST_EVAL[model], model, "float32", "eval")


def _honest_graph(model, side) -> dict:
    return load(HONEST_EVAL[model])["records"][0]["eval_step_graph"][side]


def honest_row(model) -> Tuple[str, ...]:
    """lite ms, TFM ms (medians), lite/TFM median [min–max], rounds lite won, rounds."""
    s = _honest(model)
    return (f"{s['lite_ms']:,.0f}", f"{s['tfm_ms']:,.0f}", spread(s), str(s["lite_wins"]),
            str(s["rounds"]))


def honest_graph_cells(model) -> Tuple[str, ...]:
    """Kept convolutions, detection-NMS loops / ops and transposed convolutions (the mask
    head's upsampling), lite then TFM, of the timed eval steps."""
    graphs = [_honest_graph(model, side) for side in ("lite", "tfm")]
    return tuple(str(x) for x in (
        *(g["convolutions"] for g in graphs), *(len(g["nms"]) for g in graphs),
        *(g["op_types"].get("Conv2DBackpropInput", 0) for g in graphs)))


_HONEST_TITLES = {"retinanet_resnet50_fpn": "RetinaNet ResNet-50 FPN",
                  "retinanet_mobilenetv2_fpn": "RetinaNet MobileNetV2 FPN",
                  "maskrcnn_resnet50_fpn": "Mask R-CNN ResNet-50 FPN (masks)"}

CLAIMS += [
    *[Claim(DB, f"| {_HONEST_TITLES[model]} | {{}} | {{}} | {{}} | {{}}/{{}} | {{}} / {{}} | "
                f"{{}} / {{}} | {{}} / {{}} |",
            lambda m=model: honest_row(m) + honest_graph_cells(m))
      for model in HONEST_EVAL],
    Claim("docs/detection.md", "RetinaNet ResNet-50 FPN {} and Mask R-CNN ResNet-50 FPN with "
          "masks {} (lite/TFM, median [min–max] of 8 rounds",
          lambda: tuple(spread(_honest(m)) for m in HONEST_EVAL)),
]

CLAIMS += [
    Claim(DB, "1-minute load average {}–{} over these rounds",
          lambda: (lambda loads: (f"{min(loads):.1f}", f"{max(loads):.1f}"))(
              [r["loadavg"][0] for name in HONEST_EVAL.values()
               for r in load(name)["records"][0]["rounds"]])),
    Claim(DB, "the same {} / {} convolutions on each side",
          lambda: tuple(str(_honest_graph(m, "lite")["convolutions"])
                        for m in ("retinanet_resnet50_fpn", "maskrcnn_resnet50_fpn")
                        if _honest_graph(m, "lite")["convolutions"]
                        == _honest_graph(m, "tfm")["convolutions"])),
    Claim(DB, "RetinaNet ResNet-50 FPN {} ms a step in lite against the pruned row's {} ms",
          lambda: (f"{_honest('retinanet_resnet50_fpn')['lite_ms']:,.0f}",
                   retinanet_row("retinanet_resnet50_fpn", "eval")[0])),
    Claim(DB, "RetinaNet ResNet-50 FPN {}, lite faster in {} of 8 rounds (a MISS",
          lambda: (spread(_honest("retinanet_resnet50_fpn")),
                   str(_honest("retinanet_resnet50_fpn")["lite_wins"]))),
    Claim(DB, "Mask R-CNN with masks {}, lite faster in {} of 8 (level, not ahead)",
          lambda: (spread(_honest("maskrcnn_resnet50_fpn")),
                   str(_honest("maskrcnn_resnet50_fpn")["lite_wins"]))),
]


# --- Issue 55: where lite chooses the ops (nms_ab.py, the honest eval profile) ---------------

EVAL_PROFILE = "2026-12-06-1a5e0d3-step-vs-tfm-retinanet-honest-eval-profile-by-name.json"
GENERATOR_SCOPES = ("detection_generator", "generate_detections")


def profile_scopes(name: str, side: str, kind: str, scopes: Tuple[str, ...]):
    """(op ms inside any of `scopes`, op ms in all) of one side's profiled call of a
    by-name profile file, summed over threads; the function-call wrapper
    (`EagerLocalExecute`) spans the others and is left out."""
    ops = load(name)["records"][0]["op_ms_per_step"][side][kind]
    total = sum(v for k, v in ops.items() if not k.startswith("EagerLocalExecute"))
    return sum(v for k, v in ops.items() if any(s in k for s in scopes)), total


def eval_profile_split(side: str) -> Tuple[str, ...]:
    """Op time of one side's profiled honest RetinaNet eval step: inside its detection
    generator, in all, and the generator's share in per cent."""
    inside, total = profile_scopes(EVAL_PROFILE, side, "eval", GENERATOR_SCOPES)
    return f"{inside:,.0f}", f"{total:,.0f}", f"{100 * inside / total:.0f}"


def nms_ab_figures(name: str, above: float) -> Tuple[str, ...]:
    """A regime of an nms_ab.py file: median ms of lite and TFM, lite/TFM median [min–max],
    rounds lite was faster in, scores above the threshold per image, outputs equal."""
    record = next(r for r in load(name)["records"] if r["above"] == above)
    ms = {side: statistics.median(r["ms_per_step"][side]["generator"]
                                  for r in record["rounds"]) for side in ("lite", "tfm")}
    ratios = [r["ms_per_step"]["tfm"]["generator"] / r["ms_per_step"]["lite"]["generator"]
              for r in record["rounds"]]
    return (f"{ms['lite']:,.0f}", f"{ms['tfm']:,.0f}",
            spread(rounds_lib.spread(ratios), 1), f"{sum(v > 1 for v in ratios)}/{len(ratios)}",
            f"{record['scores_above_threshold_per_image']:,.0f}",
            "equal" if all(record["outputs_equal"].values()) else "NOT equal")


NMS_AB = "2026-12-06-bd6dcd4-nms-ab.json"
CLAIMS += [
    Claim(DB, "of lite's step, {} ms of {} ms of op time (summed over threads) ran inside the "
          "detection generator ({} %); of TFM's, {} ms of {} ms ({} %).",
          lambda: eval_profile_split("lite") + eval_profile_split("tfm")),
    Claim(DB, "the eval rows' case) lite {} ms against TFM's {} ms a call, lite/TFM {} (lite "
          "faster in {})", lambda: nms_ab_figures(NMS_AB, 0.0)[:4]),
    Claim(DB, "with {} scores per image above 0.05, about 12 a class (a trained model's order), "
          "lite {} ms against {} ms, lite/TFM {} (lite faster in {}). In both, the detections "
          "were {}",
          lambda: (lambda f: (f[4],) + f[:4] + (f[5],))(nms_ab_figures(NMS_AB, 0.001))),
]

# Issue 55, the inner loop (benchmarks/inner_loop.py): before and after the reported step, and
# the final run; run.py's cross-process rows of the same commit.
INNER_BEFORE, INNER_AFTER, INNER, INNER_TF220 = (
    "2026-12-06-453d986-inner-loop-before.json", "2026-12-06-e952a50-inner-loop.json",
    "2026-12-06-9438a04-inner-loop.json", "2026-12-06-47c4883-inner-loop-tf220.json")


def inner_paired(name, raw_key="raw_loop_ms") -> dict:
    """The paired lite/raw ratio of each round of an inner_loop.py file, as median/min/max."""
    import inner_loop  # pylint: disable=import-outside-toplevel

    return rounds_lib.spread([inner_loop.paired_ratios(r, raw_key)["paired"]
                              for r in load(name)["records"]])


def inner_host(name) -> Tuple[str, str]:
    """(global-step reads a loop, lite's host µs a loop as median [min–max]) of a file."""
    records = load(name)["records"]
    reads = statistics.median(r["host_us"]["global-step read"]["calls_per_loop"]
                              for r in records)
    host = rounds_lib.spread([r["host_us"]["cycle_minus_trainer_train"] for r in records])
    return f"{reads:.2f}", spread(host, 0)


CLAIMS += [
    Claim(DB, "lite's `tf.while_loop` body runs {} ops against the raw loop's {}",
          lambda: tuple(str(load(INNER)["graphs"]["body_ops"][side]) for side in ("lite", "raw"))),
    Claim(DB, "per step, lite/raw {} (speed; each step's cost from calls of 100 and 300 steps)",
          lambda: (spread(load(INNER)["summary"]["per_step_lite_over_raw"]),)),
    Claim(DB, "Before: {} global-step reads a loop and {} µs of host work a loop",
          lambda: inner_host(INNER_BEFORE)),
    Claim(DB, "after: {} reads and {} µs",
          lambda: inner_host(INNER_AFTER)),
    Claim(DB, "the paired lite/raw ratio went from {} to {}",
          lambda: (spread(inner_paired(INNER_BEFORE)), spread(inner_paired(INNER_AFTER)))),
    Claim(DB, "lite/raw {} paired, {} from each side's median loop",
          lambda: (spread(inner_paired(INNER)), spread(load(INNER)["summary"]["lite_over_raw"]))),
    Claim(DB, "against the raw graph called as lite calls its own, {}",
          lambda: (spread(inner_paired(INNER, "raw_direct_loop_ms")),)),
    Claim(DB, "host work a loop {} µs",
          lambda: (inner_host(INNER)[1],)),
    Claim(DB, "`benchmarks/results/2026-12-06-338e246-inner-loop-run.json`, TF 2.21): lite/raw "
          "{}, load average {} at the start and {} at the end of the run.",
          lambda: (lambda data: (spread(next(
              t for t in data["targets"]
              if t["target"] == "train100 lite@project/raw@project >= 0.97")),
                                 *(f"{float(data['meta'][k].split()[0]):.1f}"
                                   for k in ("loadavg_start", "loadavg_end"))))(
              load("2026-12-06-338e246-inner-loop-run.json"))),
    Claim(DB, "1-minute load average {}–{} over the inner-loop rounds",
          lambda: (lambda loads: (f"{min(loads):.1f}", f"{max(loads):.1f}"))(
              [r["loadavg"][0] for name in (INNER_BEFORE, INNER_AFTER, INNER, INNER_TF220)
               for r in load(name)["records"]])),
    Claim(DB, "8 rounds): lite/raw {} paired, {} against the raw graph through DirectCall, per "
          "step {}, host work a loop {} µs.",
          lambda: (spread(inner_paired(INNER_TF220)),
                   spread(inner_paired(INNER_TF220, "raw_direct_loop_ms")),
                   spread(load(INNER_TF220)["summary"]["per_step_lite_over_raw"]),
                   inner_host(INNER_TF220)[1])),
]


# Issue 55, training: where a Mask R-CNN training step's op time goes (the by-name profile of
# issue 43's row): the heads' convolutions, against what lite chooses (ROI Align, sampling).
MASKRCNN_TRAIN_PROFILE = "2026-12-06-46b4fcc-step-vs-tfm-maskrcnn-profile-by-name.json"
TRAIN_SCOPES = {"heads": ("mask_head", "detection_head"), "roi_align": ("roi_aligner",),
                "sampling": ("roi_sampler", "mask_sampler")}


def train_profile_split(side: str) -> Tuple[str, ...]:
    """ms of op time (summed over threads, forward and backward) of one side's profiled Mask
    R-CNN training step in its box and mask heads, its ROI aligners and its ROI / mask
    samplers, the step's total, and the heads' and ROI Align's shares in per cent."""
    part = {name: profile_scopes(MASKRCNN_TRAIN_PROFILE, side, "train", scopes)[0]
            for name, scopes in TRAIN_SCOPES.items()}
    total = profile_scopes(MASKRCNN_TRAIN_PROFILE, side, "train", ())[1]
    return (f"{part['heads']:,.0f}", f"{part['roi_align']:,.0f}", f"{part['sampling']:,.0f}",
            f"{total:,.0f}", f"{100 * part['heads'] / total:.0f}",
            f"{100 * part['roi_align'] / total:.1f}")

CLAIMS += [
    Claim(DB, "slow. The by-name profile of the Mask R-CNN training row (`benchmarks/results/{}`, "
          "issue 43's, one profiled call a side on the loaded AMD EPYC) says otherwise: of "
          "lite's step, {} ms of op time (forward and backward) ran in the box and mask heads, "
          "{} ms in the two ROI aligners and {} ms in the ROI and mask samplers, of {} ms in all "
          "— the heads {} %, ROI Align {} %; TFM's: {} ms, {} ms, {} ms of {} ms ({} %, {} %).",
          lambda: ((MASKRCNN_TRAIN_PROFILE,) + train_profile_split("lite")
                   + train_profile_split("tfm"))),
    Claim(DB, "taking ROI Align to zero would buy lite at most its {} %",
          lambda: (train_profile_split("lite")[5],)),
]

# --- Detection input alone (issue 55): decode + parser, no model --------------------------

DETECTION_INPUT = "2026-12-06-4c727e8-detection-input.json"
DETECTION_INPUT_BEFORE = "2026-12-06-3954ab1-detection-input.json"
DETECTION_INPUT_PROFILE = "2026-12-06-4c727e8-detection-input-profile.json"
_INPUT_ROWS = {"retinanet_resnet50_fpn train": "RetinaNet R50-FPN, training",
               "retinanet_resnet50_fpn eval": "RetinaNet R50-FPN, evaluation",
               "maskrcnn_resnet50_fpn train": "Mask R-CNN R50-FPN, training",
               "maskrcnn_resnet50_fpn eval": "Mask R-CNN R50-FPN, evaluation"}


def input_row(label, name=DETECTION_INPUT) -> Tuple[str, ...]:
    """lite and TFM images/s (medians), lite/TFM median [min–max], rounds lite faster of
    rounds, CPU ms an image lite / TFM (medians), TFM/lite CPU median [min–max]."""
    row = load(name)["rows"][label]
    s = row["summary"]
    return (f"{s['lite']['median']:.1f}", f"{s['tfm']['median']:.1f}",
            spread(s["lite_over_tfm"], 2), str(s["rounds_lite_faster"]), str(len(row["rounds"])),
            f"{s['cpu_ms_per_image']['lite']['median']:.2f}",
            f"{s['cpu_ms_per_image']['tfm']['median']:.2f}", spread(s["cpu_tfm_over_lite"], 2))


def input_loads(name=DETECTION_INPUT) -> Tuple[str, str]:
    loads = [r["loadavg"][0] for row in load(name)["rows"].values() for r in row["rounds"]]
    return f"{min(loads):.1f}", f"{max(loads):.1f}"


def input_profile_ms(label, side, ops=None) -> str:
    """ms an image of a stage's ops (all of them, or those whose "name:Type" ends with one
    of `ops`' types), one thread, from the profile file."""
    record = load(DETECTION_INPUT_PROFILE)["rows"][label][side]
    if ops is None:
        return f"{record['op_ms_per_image_total']:.2f}"
    return f"{sum(v for k, v in record['op_ms_per_image'].items() if k.rsplit(':', 1)[-1] in ops):.2f}"


_IMAGE_OPS = ("RealDiv", "Sub", "ResizeBilinear")

CLAIMS += [
    *[Claim(DB, f"| {title} | {{}} | {{}} | {{}} | {{}}/{{}} | {{}} / {{}} | {{}} |",
            lambda label=label: input_row(label)) for label, title in _INPUT_ROWS.items()],
    *[Claim(DB, f"| {title}, before | {{}} | {{}} | {{}} | {{}}/{{}} | {{}} / {{}} | {{}} |",
            lambda label=label: input_row(label, DETECTION_INPUT_BEFORE))
      for label, title in _INPUT_ROWS.items()],
    Claim(DB, "commit `{}` on an {} ({} CPUs), 1-minute load average {}–{} over its rounds",
          lambda: (load(DETECTION_INPUT)["commit"], load(DETECTION_INPUT)["cpu_model"],
                   str(load(DETECTION_INPUT)["cpus"])) + input_loads()),
    Claim(DB, "(`{}`, load average {}–{})",
          lambda: (load(DETECTION_INPUT_BEFORE)["commit"],) + input_loads(DETECTION_INPUT_BEFORE)),
    Claim(DB, "RetinaNet's training parse ran {} ms of ops an image in lite and {} in TFM, of "
              "which the normalisation's division and subtraction and the bilinear resize {} "
              "and {}",
          lambda: (input_profile_ms("retinanet_resnet50_fpn train parse", "lite"),
                   input_profile_ms("retinanet_resnet50_fpn train parse", "tfm"),
                   input_profile_ms("retinanet_resnet50_fpn train parse", "lite", _IMAGE_OPS),
                   input_profile_ms("retinanet_resnet50_fpn train parse", "tfm", _IMAGE_OPS))),
    Claim(DB, "the JPEG decoding stage {} / {} ms",
          lambda: tuple(input_profile_ms("retinanet_resnet50_fpn train decode", side)
                        for side in ("lite", "tfm"))),
]


# Issue 55: the honest eval rows after the tile stop and the per-row loop.
PER_ROW_EVAL = {model: f"2026-12-06-04297a2-step-vs-tfm-{model}-honest-eval-per-row-nms.json"
                for model in ("retinanet_resnet50_fpn", "maskrcnn_resnet50_fpn",
                              "retinanet_mobilenetv2_fpn")}


def per_row_eval(model) -> Tuple[str, ...]:
    """lite and TFM ms a step (medians), lite/TFM median [min–max], rounds lite won, the
    rounds' 1-minute load range, each side's first evaluate call (s: tracing included)."""
    data = load(PER_ROW_EVAL[model])
    record = data["records"][0]
    s = step_vs_tfm.summarize(record, "eval")
    loads = [r["loadavg"][0] for r in record["rounds"]]
    first = record["first_call_s"]
    return (f"{s['lite_ms']:,.0f}", f"{s['tfm_ms']:,.0f}", spread(s),
            f"{s['lite_wins']}/{s['rounds']}", f"{min(loads):.1f}", f"{max(loads):.1f}",
            f"{first['lite']['eval']:.1f}", f"{first['tfm']['eval']:.1f}")


CLAIMS += [
    Claim(DB, "RetinaNet ResNet-50 FPN: lite {} ms a step against TFM's {} ms, lite/TFM {}, lite "
          "faster in {} rounds (load {}–{}); its first `evaluate` call, tracing included, {} s "
          "against {} s.", lambda: per_row_eval("retinanet_resnet50_fpn")),
    Claim(DB, "Mask R-CNN ResNet-50 FPN with masks: lite {} ms against {} ms, lite/TFM {}, lite "
          "faster in {} rounds (load {}–{}); first call {} s against {} s.",
          lambda: per_row_eval("maskrcnn_resnet50_fpn")),
    Claim(DB, "RetinaNet MobileNetV2 FPN (its first honest row): lite {} ms against {} ms, "
          "lite/TFM {}, lite faster in {} rounds (load {}–{}); first call {} s against {} s.",
          lambda: per_row_eval("retinanet_mobilenetv2_fpn")),
]

MASKRCNN_EVAL_PROFILE = "2026-12-06-d5a132e-step-vs-tfm-maskrcnn-honest-eval-profile-by-name.json"


def maskrcnn_eval_generator_share(side: str) -> str:
    """Per cent of one side's profiled Mask R-CNN eval step's op time in its detection
    generator (the `EagerLocalExecute` wrapper left out)."""
    inside, total = profile_scopes(MASKRCNN_EVAL_PROFILE, side, "eval", GENERATOR_SCOPES)
    return f"{100 * inside / total:.0f}"


CLAIMS += [
    Claim(DB, "TFM's detection generator was {} % of its step's op time in one profiled call "
          "(`benchmarks/results/{}`, lite with the tile stop only, whose batched loop still ran "
          "there: its generator took {} %).",
          lambda: (maskrcnn_eval_generator_share("tfm"), MASKRCNN_EVAL_PROFILE,
                   maskrcnn_eval_generator_share("lite"))),
]

CLAIMS += [
    Claim(DD, "Measured again on the same machine: RetinaNet ResNet-50 FPN eval lite/TFM {}, "
          "Mask R-CNN with masks {}; the detection generator alone, with a trained model's "
          "order of scores above the threshold ({} an image), {} with the batched-rows loop "
          "before the per-row one and {} with it.",
          lambda: (per_row_eval("retinanet_resnet50_fpn")[2],
                   per_row_eval("maskrcnn_resnet50_fpn")[2],
                   nms_ab_figures(NMS_AB, 0.001)[4], nms_ab_figures(NMS_AB, 0.001)[2],
                   nms_ab_figures("2026-12-06-90a1028-nms-ab.json", 0.001)[2])),
]

NMS_AB_PER_ROW = "2026-12-06-90a1028-nms-ab.json"
CLAIMS += [
    Claim(DB, "no score above the threshold, lite {} ms against TFM's {} ms, lite/TFM {} (lite "
          "faster in {}); {} an image, lite {} ms against {} ms, lite/TFM {} (lite faster in {}); "
          "{} an image (about 120 a class: every class fills its 100 boxes within its first "
          "tile, where TFM's loop stops early too), lite {} ms against {} ms, lite/TFM {} (lite "
          "faster in {}). The detections were {} in all three, bit for bit.",
          lambda: (nms_ab_figures(NMS_AB_PER_ROW, 0.0)[:4]
                   + (nms_ab_figures(NMS_AB_PER_ROW, 0.001)[4],)
                   + nms_ab_figures(NMS_AB_PER_ROW, 0.001)[:4]
                   + (nms_ab_figures(NMS_AB_PER_ROW, 0.01)[4],)
                   + nms_ab_figures(NMS_AB_PER_ROW, 0.01)[:4]
                   + (("equal" if all(nms_ab_figures(NMS_AB_PER_ROW, a)[5] == "equal"
                                      for a in (0.0, 0.001, 0.01)) else "NOT equal"),))),
    Claim(DB, "`benchmarks/results/2026-12-06-90a1028-nms-ab.json`, load average {}–{}): no score",
          lambda: (lambda loads: (f"{min(loads):.1f}", f"{max(loads):.1f}"))(
              [r["loadavg"][0] for rec in load(NMS_AB_PER_ROW)["records"]
               for r in rec["rounds"]])),
]


# Issue 55's work (the evening of 2026-12-06): the clean-clone runs after it, in order.
SUITE_AFTER_55 = ("2026-12-06-1d1fefe-suite-time.json", "2026-12-06-e7edafb-suite-time.json",
                  "2026-12-06-e4bbda5-suite-time.json")


def suite_runs(names, with_setup_cpu=False) -> str:
    """The sentence docs/testing.md gives clean-clone runs, every figure from its results file
    (with `with_setup_cpu`, the set-up's CPU-seconds too: the same install every time)."""
    parts = []
    for name in names:
        run = load(name)
        setup = (f"{run['setup_s']:.0f} s setting up ({run['setup_cpu_s']:.0f} CPU-seconds)"
                 if with_setup_cpu else f"{run['setup_s']:.0f} s setting up")
        parts.append(f"`{name}` (commit {run['commit']}, load average {run['load_before'][0]} "
                     f"before): {_min_s(run['total_s'])} in all, {setup} and "
                     f"{run['tests_s']:.0f} s of tests ({run['passed']} passed, "
                     f"{run['failed']} failed; {run['tests_cpu_s']:.0f} CPU-seconds of tests)")
    return "; then ".join(parts) + "."


# The clean-clone runs of issue 55's suite work (the late evening of 2026-12-06), in order.
SUITE_55_WORK = ("2026-12-06-8fb0cca-suite-time.json", "2026-12-06-f2669b8-suite-time.json",
                 "2026-12-06-7b30556-suite-time.json", "2026-12-06-c6f0cf4-suite-time.json",
                 "2026-12-06-41529d7-suite-time.json")

CLAIMS += [Claim(TT, "After issue 55's first part (2026-12-06, evening) the suite went **over "
                 "the budget**: {}", lambda: (suite_runs(SUITE_AFTER_55),)),
           Claim(TT, "Issue 55's suite work, five clean-clone runs in order: {}",
                 lambda: (suite_runs(SUITE_55_WORK, with_setup_cpu=True),))]

# Its second session (2026-12-07): the run at the session's start, then the runs after the cut.
SUITE_55_SECOND = ("2026-12-07-507aff4-suite-time.json", "2026-12-07-3d0a557-suite-time.json",
                   "2026-12-07-3d0a557-suite-time-2.json", "2026-12-07-5b31b1e-suite-time.json",
                   "2026-12-07-8fe0b86-suite-time.json")

CLAIMS += [Claim(TT, "Issue 55's second session (2026-12-07), five clean-clone runs in order: {}",
                 lambda: (suite_runs(SUITE_55_SECOND, with_setup_cpu=True),))]

# Its third session (2026-12-07, morning): after the video and dilated ResNet cuts, then after
# the file-order fix, then the fix's test mended (the same tests three times, the last at a
# docs-only commit), then the last code commit (a test refactored, its assertions unchanged),
# then the rounding fix (a doc-figures test added).
SUITE_55_THIRD = ("2026-12-07-754eb22-suite-time.json", "2026-12-07-7fd65e9-suite-time.json",
                  "2026-12-07-8c67d08-suite-time.json", "2026-12-07-8c67d08-suite-time-2.json",
                  "2026-12-07-8eff048-suite-time.json", "2026-12-07-4f258ed-suite-time.json",
                  "2026-12-07-75b743c-suite-time.json")

CLAIMS += [Claim(TT, "Issue 55's third session (2026-12-07, morning), seven clean-clone runs in "
                     "order: {}", lambda: (suite_runs(SUITE_55_THIRD, with_setup_cpu=True),))]

# Its fourth session (2026-12-07, late morning): the run at the commit the third stopped at,
# then after the Trainer's background release of training iterators, then after the TFM
# checkpoint reader's partial read (one more test), then at the docs commit after it, then
# after a refactor of the two (their tests unchanged).
SUITE_55_FOURTH = ("2026-12-07-9d69e3d-suite-time.json", "2026-12-07-ac02b3e-suite-time.json",
                   "2026-12-07-3c6b089-suite-time.json", "2026-12-07-87c2b2d-suite-time.json",
                   "2026-12-07-e6dcf3b-suite-time.json")

CLAIMS += [Claim(TT, "Issue 55's fourth session (2026-12-07, late morning), five clean-clone "
                     "runs in order: {}",
                 lambda: (suite_runs(SUITE_55_FOURTH, with_setup_cpu=True),))]
