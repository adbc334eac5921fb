"""The benchmark figures the docs quote, each recomputed from the results file it comes from.

`report.py --check` runs `check()`: every rendered block (between the `report.py` markers) is
rendered again from the file it names and compared, and every figure quoted in prose is listed
in `CLAIMS` as the sentence it appears in, with `{}` where the figure goes and a function that
computes the figure from its results file. A claim passes when the doc holds the sentence with
the recomputed figures (whitespace and `**` bold markers ignored, since prose wraps). A figure
quoted in prose but absent from `CLAIMS` is not checked: add it here when you quote one.

Not checked yet (quoted in benchmarks/README.md or docs/benchmarks.md, no claim here): the
op-time profiles (`vision_profile.py` files: the per-op tables, 300 / 375 ms, 235 / 218 ms), the
oneDNN primitive counts of the bf16 probe, the start-up profile and the outer-loop A/B
(45 / 76 µs; no results file), d190cc5's per-process steps/s and loop-time ranges, the earlier
runs 4ea454c / c711b1e / 513f9aa / 1ded3d0 / 0361e2f, the loop-graph node counts, the
XLA-on-CPU 0.17x, the 32-round step_vs_tfm sums over three runs, and the Mask R-CNN op
profile (`2026-12-03-56c1cdd-step-vs-tfm-maskrcnn-profile.json`).

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
import report  # noqa: E402
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
DOCS = ("README.md", "docs/benchmarks.md", "benchmarks/README.md", "docs/multi_worker_faults.md")
# The rendered blocks: (start marker, end marker).
BLOCKS = ((report.START_MARKER, report.END_MARKER),
          (report.VISION_START_MARKER, report.VISION_END_MARKER),
          (report.STEP_VS_TFM_START_MARKER, report.STEP_VS_TFM_END_MARKER))
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


def soak_fds_spread(name, process="trainer") -> Tuple[str, ...]:
    """(the most frequent fd count, its samples, the judged samples, the other counts) over
    the judged window of a soak."""
    data = load(name)
    end = (data.get("stopped") or {}).get("train_step", data["train_steps"])
    counts = {}
    for sample in data["samples"]:
        if sample[process] and data["warm_up_step"] <= sample["train_step"] < end:
            counts[sample[process]["fds"]] = counts.get(sample[process]["fds"], 0) + 1
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
    Claim(DB, "| Mask R-CNN ResNet-50 FPN | eval (with NMS and masks) | {} | {} | {} | {} | "
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
    return report.markdown(data, source=source)[0]


def check(docs: Optional[Dict[str, str]] = None, claims: Optional[List[Claim]] = None,
          blocks: bool = True) -> List[str]:
    """Every mismatch between the docs and their results files, one line each ([]: none).

    `docs`: {path: text} read instead of the files (tests alter a figure this way); `claims`:
    these instead of CLAIMS; `blocks`: False leaves the rendered blocks unchecked.
    """
    docs = dict(docs or {})
    for path in DOCS:
        if path not in docs:
            with open(os.path.join(REPO_ROOT, path)) as f:
                docs[path] = f.read()
    problems = []
    for path in DOCS:
        text = docs[path]
        for start, end in BLOCKS if blocks else ():
            i = text.find(start)
            if i < 0:
                continue
            block = text[i + len(start):text.find(end, i)]
            source = _SOURCE.search(block)
            if source is None:
                problems.append(f"{path}: the {start} block names no results file")
            elif block.strip() != render_block(source.group(1)).strip():
                problems.append(f"{path}: the {start} block differs from what report.py "
                                f"renders from {source.group(1)}; rerun report.py --update")
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
