"""Renders a benchmark results file (written by run.py) as markdown: figures, ratios, targets.

    .venv/bin/python benchmarks/report.py benchmarks/results/2026-12-01-abc1234.json
    .venv/bin/python benchmarks/report.py RESULTS.json --update docs/benchmarks.md benchmarks/README.md

The first prints the report; `--update` also replaces, in each named file, the text between
the lines `<!-- bench-results:start -->` and `<!-- bench-results:end -->` with it, so the
README tables are always regenerated from one committed results file, which they name.

Everything is recomputed from the file's per-process records: each ratio within one round,
then median [min–max] over rounds; each target is judged on the median (a miss is reported
as a miss). Standard library only.
"""

import argparse
import json
import os
import statistics
import sys

START_MARKER = "<!-- bench-results:start -->"
END_MARKER = "<!-- bench-results:end -->"
# The block a vision_suite.py file (`kind: vision_suite`, issue 21) renders into.
VISION_START_MARKER = "<!-- vision-speed:start -->"
VISION_END_MARKER = "<!-- vision-speed:end -->"

# Where each side ran: the project's environment (lite_launcher's TensorFlow) or TFM's venv
# (TFM's TensorFlow, where lite_launcher and the raw loop also run, so that lite/TFM compares
# launchers on one TensorFlow).
ENVS = ("project", "tfm")
# Columns: (side, env).
LITE_P, LITE_T, TFM, RAW_P, RAW_T = (("lite", "project"), ("lite", "tfm"), ("tfm", "tfm"),
                                     ("raw", "project"), ("raw", "tfm"))
COLUMNS = (LITE_P, LITE_T, TFM, RAW_P, RAW_T)

# Measures: name -> (row in the records, key of the figure, title, digits).
MEASURES = {
    "train100": ("train100", "steps_per_sec", "train, steps_per_loop=100, summaries every loop "
                 "(steps/s)", 0),
    "train1": ("train1", "steps_per_sec", "train, steps_per_loop=1, summaries every loop "
               "(steps/s)", 0),
    "train1_nosum": ("train1_nosum", "steps_per_sec", "train, steps_per_loop=1, no summaries "
                     "(steps/s)", 0),
    "eval_wall": ("eval", "wall_steps_per_sec", "eval, validation_steps=100, wall: evaluation "
                  "+ teardown + 1-step train loop (steps/s)", 0),
    "eval": ("eval", "steps_per_sec", "eval, validation_steps=100, evaluation call only "
             "(steps/s)", 0),
    "raw": ("raw", "steps_per_sec", "raw loop, 100-step calls (steps/s)", 0),
    "first_step": ("driver", "first_step_s", "driver: process start → first finished step (s)",
                   2),
    "peak_rss": ("driver", "peak_rss_mib", "driver: peak RSS (MiB)", 0),
}
# Per outer loop cost beyond the steps: 1/r(spl=1) - 1/r(spl=100), in ms.
OUTER_LOOPS = {
    "outer_loop": ("train1", "outer loop: 1/r(spl=1) − 1/r(spl=100), summaries (ms)"),
    "outer_loop_nosum": ("train1_nosum",
                         "outer loop: 1/r(spl=1, no summaries) − 1/r(spl=100) (ms)"),
}

# Targets (issue 12): (workload, ratio name, comparison, threshold). Ratio names are
# "<measure> <side>@<env>/<side>@<env>". lite/TFM targets compare lite_launcher on TFM's
# TensorFlow with TFM; lite/raw targets hold in each environment.
TARGETS = (
    [(w, f"train100 lite@{env}/raw@{env}", ">=", 0.97)
     for env in ENVS for w in ("mlp_tiny", "cnn_small", "mock")]
    + [(w, f"{row} lite@tfm/tfm@tfm", ">=", 5.0)
       for row in ("train1", "train1_nosum") for w in ("mlp_tiny", "mock")]
    + [(w, "eval_wall lite@tfm/tfm@tfm", ">=", 2.5) for w in ("mlp_tiny", "mock")]
    + [("mock", "first_step lite@tfm/tfm@tfm", "<=", 0.8)]
    + [(w, "peak_rss lite@tfm/tfm@tfm", "<=", 1.0) for w in ("mlp_tiny", "cnn_small", "mock")]
)

# The vision rows (issue 11): `resnet_imagenet` models, rows "vision" in the records. The step
# dominates, so the launcher must disappear: lite >= 0.97x raw on each TensorFlow, and lite on
# TFM's TensorFlow >= TFM.
VISION_ROW = "vision"
VISION_RATIOS = ((LITE_T, RAW_T, 0.97), (LITE_P, RAW_P, 0.97), (LITE_T, TFM, 1.0))


def vision_targets(vision_workloads):
    """The vision targets of these workloads, in TARGETS' form."""
    return [(w, f"vision {col_name(lite)}/{col_name(other)}", ">=", threshold)
            for w in vision_workloads for lite, other, threshold in VISION_RATIOS]


def col_name(column):
    side, env = column
    return f"{side}@{env}"


def stats(values):
    """median / min / max / n of the values that are not None; None if there are none."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values)}


def summarize(records, rounds, workload_names):
    """Every figure and per-round ratio of each workload, as median [min, max] over rounds.

    Returns {workload: {"values": {"<measure>/<side>@<env>": stats}, "ratios": {name: stats}}}.
    """
    table = {}
    for r in records:
        if "error" not in r:
            key = (r["round"], r["workload"], r["row"], r["side"], r.get("env", "project"))
            table.setdefault(key, []).append(r)

    def value(i, w, measure, column):
        row, key = MEASURES[measure][:2]
        # The mean where a round measured a figure twice.
        found = [r[key] for r in table.get((i, w, row) + column, []) if r.get(key) is not None]
        return statistics.fmean(found) if found else None

    def outer_loop_ms(i, w, spl1_measure, column):
        r1, r100 = value(i, w, spl1_measure, column), value(i, w, "train100", column)
        return None if not r1 or not r100 else 1000.0 * (1.0 / r1 - 1.0 / r100)

    def ratio(a, b):
        return None if a is None or not b else a / b

    summary = {}
    for w in workload_names:
        values, ratios = {}, {}
        for measure in MEASURES:
            for column in COLUMNS:
                values[f"{measure}/{col_name(column)}"] = stats(
                    [value(i, w, measure, column) for i in range(rounds)])
        for name, (spl1_measure, _) in OUTER_LOOPS.items():
            for column in COLUMNS:
                values[f"{name}/{col_name(column)}"] = stats(
                    [outer_loop_ms(i, w, spl1_measure, column) for i in range(rounds)])
        for measure in MEASURES:
            if measure == "raw":
                continue
            for lite in (LITE_T, LITE_P):
                ratios[f"{measure} {col_name(lite)}/{col_name(TFM)}"] = stats(
                    [ratio(value(i, w, measure, lite), value(i, w, measure, TFM))
                     for i in range(rounds)])
        for lite, raw in ((LITE_P, RAW_P), (LITE_T, RAW_T)):
            ratios[f"train100 {col_name(lite)}/{col_name(raw)}"] = stats(
                [ratio(value(i, w, "train100", lite), value(i, w, "raw", raw))
                 for i in range(rounds)])
        summary[w] = {"values": values, "ratios": ratios}
    return summary


def summarize_vision(records, rounds, vision_workloads):
    """The vision rows' steps/sec and images/sec, and their per-round ratios, as median
    [min, max] over the rounds that measured them.

    Returns {workload: {"values": {"vision/<side>@<env>": stats, "vision_images/...": stats},
    "ratios": {"vision <lite>/<other>": stats}}}; a ratio is present only where both of its
    sides were measured in at least one round (a side measured in no round is not a target).
    """
    found = {}
    for r in records:
        if r.get("row") == VISION_ROW and "error" not in r:
            key = (r["round"], r["workload"], r["side"], r.get("env", "project"))
            found.setdefault(key, []).append(r)

    def value(i, w, column, key="steps_per_sec"):
        got = [r[key] for r in found.get((i, w) + column, []) if r.get(key) is not None]
        return statistics.fmean(got) if got else None

    summary = {}
    for w in vision_workloads:
        values, ratios = {}, {}
        for column in COLUMNS:
            values[f"vision/{col_name(column)}"] = stats(
                [value(i, w, column) for i in range(rounds)])
            values[f"vision_images/{col_name(column)}"] = stats(
                [value(i, w, column, "images_per_sec") for i in range(rounds)])
        for lite, other, _ in VISION_RATIOS:
            if values[f"vision/{col_name(lite)}"] and values[f"vision/{col_name(other)}"]:
                per_round = []
                for i in range(rounds):
                    a, b = value(i, w, lite), value(i, w, other)
                    per_round.append(None if a is None or not b else a / b)
                ratios[f"vision {col_name(lite)}/{col_name(other)}"] = stats(per_round)
        summary[w] = {"values": values, "ratios": ratios}
    return summary


def check_targets(summary, targets=TARGETS):
    """Each target judged on its median; 'not measured' when a side is missing. A target
    whose ratio the summary does not name at all (a vision side that was not run) is left
    out."""
    checks = []
    for w, name, op, threshold in targets:
        if w not in summary or name not in summary[w]["ratios"]:
            continue
        s = summary[w]["ratios"].get(name)
        if s is None:
            status, median = "not measured", None
        else:
            median = s["median"]
            ok = median >= threshold if op == ">=" else median <= threshold
            status = "pass" if ok else "MISS"
        checks.append({"workload": w, "target": f"{name} {op} {threshold}", "median": median,
                       "min": None if s is None else s["min"],
                       "max": None if s is None else s["max"], "status": status})
    return checks


def _fmt(s, digits=0):
    if s is None:
        return "—"
    fmt = f"{{:,.{digits}f}}"
    if s["n"] == 1:
        return fmt.format(s["median"])
    return f"{fmt.format(s['median'])} [{fmt.format(s['min'])}–{fmt.format(s['max'])}]"


def column_labels(meta):
    """'lite TF 2.21'-style headers from the versions each side reported."""
    versions = meta.get("versions", {})

    def tf_of(column):
        v = versions.get(col_name(column), {}).get("tensorflow")
        return f"TF {'.'.join(v.split('.')[:2])}" if v else f"{column[1]} env"

    names = {"lite": "lite", "tfm": "TFM", "raw": "raw"}
    return {column: f"{names[column[0]]} {tf_of(column)}" for column in COLUMNS}


def markdown(data, source=None):
    """The report of one results file as markdown (tables and targets)."""
    meta, records = data["meta"], data["records"]
    summary = summarize(records, meta["rounds"], meta["workloads"])
    vision = meta.get("vision") or {}
    vision_workloads = vision.get("workloads", [])
    vision_summary = summarize_vision(records, meta["rounds"], vision_workloads)
    checks = check_targets(dict(summary, **vision_summary),
                           list(TARGETS) + vision_targets(vision_workloads))
    labels = column_labels(meta)
    lines = []
    what = f"`{source}`" if source else "this run"
    lines.append(
        f"From {what}: {meta['date']} UTC, commit `{meta.get('commit', '?')[:10]}`"
        f"{' (uncommitted changes)' if meta.get('dirty') else ''}, {meta['machine']}, "
        f"CPU {meta.get('cpu_model', 'not recorded')}, TF_ENABLE_ONEDNN_OPTS "
        f"{meta.get('tf_enable_onednn_opts') or ('unset' if 'cpu_model' in meta else 'not recorded')}"
        f" (so oneDNN {'on' if meta.get('tf_enable_onednn_opts') == '1' else 'as TensorFlow chose'}"
        f"), XLA off unless a row says otherwise, "
        f"{meta['rounds']} round(s) in {meta.get('elapsed_s', 0) / 60:.0f} min, "
        f"load average (1, 5, 15 min) {meta.get('loadavg_start', '?')} at the start and "
        f"{meta.get('loadavg_end', '?')} at the end. Median [min–max] over "
        f"rounds; every ratio is computed within a round. Order of the sides reversed every "
        f"other round.")
    if meta.get("label"):
        lines += ["", f"**{meta['label']}**"]
    if meta.get("stopped"):
        lines += ["", f"**{meta['rounds']} of {meta['rounds_requested']} round(s)**, "
                  f"{meta['stopped']} (the time cap)."]
    if meta.get("smoke"):
        lines += ["", "**Smoke run**: fewest loops, the figures are not meaningful."]
    if not meta.get("tfm"):
        lines += ["", "**TFM was not measured** (no TFM environment: "
                  "`bash benchmarks/setup_tfm_env.sh`)."]
    failures = [r for r in records if "error" in r]
    if failures:
        lines += ["", f"**{len(failures)} measurement(s) failed** (see `error` in the records)."]
    lines += ["", "Versions: " + "; ".join(
        f"{labels[c]}: " + ", ".join(f"{k} {v}" for k, v in
                                     meta.get("versions", {}).get(col_name(c), {}).items())
        for c in COLUMNS if col_name(c) in meta.get("versions", {})) + "."]

    tfm = col_name(TFM)
    # Only the sides and ratios this run measured.
    columns = [c for c in COLUMNS if any(
        s["values"][f"{m}/{col_name(c)}"] is not None for s in summary.values() for m in MEASURES)]
    ratio_columns = [(lite, f"{labels[lite]} / TFM") for lite in (LITE_T, LITE_P)
                     if TFM in columns and lite in columns]
    lite_raw_pairs = [(lite, raw) for lite, raw in ((LITE_T, RAW_T), (LITE_P, RAW_P))
                      if lite in columns and raw in columns]
    header = [labels[c] for c in columns] + [title for _, title in ratio_columns]
    header += [f"{labels[lite]} / raw" for lite, _ in lite_raw_pairs]
    lines += ["", "| workload | measure | " + " | ".join(header) + " |",
              "|---|---|" + "---|" * len(header)]
    for w, s in summary.items():
        v, ratios = s["values"], s["ratios"]
        for measure, (_, _, title, digits) in MEASURES.items():
            if all(v[f"{measure}/{col_name(c)}"] is None for c in columns):
                continue
            cells = [_fmt(v[f"{measure}/{col_name(c)}"], digits) for c in columns]
            cells += ["" if measure == "raw" else
                      _fmt(ratios[f"{measure} {col_name(lite)}/{tfm}"], 2)
                      for lite, _ in ratio_columns]
            cells += [_fmt(ratios[f"train100 {col_name(lite)}/{col_name(raw)}"], 3)
                      if measure == "train100" else "" for lite, raw in lite_raw_pairs]
            lines.append(f"| {w} | {title} | " + " | ".join(cells) + " |")
        for name, (_, title) in OUTER_LOOPS.items():
            cells = [_fmt(v[f"{name}/{col_name(c)}"], 3) for c in columns]
            if any(cell != "—" for cell in cells):
                cells += [""] * (len(header) - len(cells))
                lines.append(f"| {w} | {title} | " + " | ".join(cells) + " |")

    lines += _vision_table(vision, vision_summary, labels)

    lines += ["", "Targets (issues 11 and 12), judged on the median of the per-round ratios; lite/TFM "
              f"targets use {labels[LITE_T]} (TFM's TensorFlow):", "",
              "| workload | target | median [min–max] | status |", "|---|---|---|---|"]
    for c in checks:
        s = None if c["median"] is None else {"median": c["median"], "min": c["min"],
                                               "max": c["max"], "n": 2}
        lines.append(f"| {c['workload']} | {c['target']} | {_fmt(s, 3)} | {c['status']} |")
    passed = sum(c["status"] == "pass" for c in checks)
    lines += ["", f"{passed} of {len(checks)} targets pass."]
    return "\n".join(lines) + "\n", dict(summary, **vision_summary), checks


def _vision_table(vision, vision_summary, labels):
    """The vision rows' table: steps/s and images/s per model and side, lite's ratios."""
    if not vision_summary:
        return []
    columns = [c for c in COLUMNS if any(
        s["values"][f"vision/{col_name(c)}"] is not None for s in vision_summary.values())]
    if not columns:
        return ["", "**Vision rows**: no measurement succeeded."]
    pairs = [(lite, other) for lite, other, _ in VISION_RATIOS
             if lite in columns and other in columns]
    header = [labels[c] for c in columns] + [
        f"{labels[lite]} / {'TFM' if other == TFM else labels[other]}" for lite, other in pairs]
    rounds = vision.get("rounds", {})
    which = "; ".join(
        f"{m}: {'every round' if rounds.get(m) is None else f'first {rounds[m]} round(s)'}, "
        f"{vision.get('loops', {}).get(m, '?')} timed loops" for m in vision.get("models", []))
    lines = ["", f"Vision (issue 11): `resnet_imagenet` on synthetic "
             f"{vision.get('image_size', '?')}×{vision.get('image_size', '?')} JPEG TFRecords "
             f"in TFM's format, batch {vision.get('batch', '?')}, steps_per_loop "
             f"{vision.get('steps_per_loop', '?')} after {vision.get('warmup_loops', '?')} warm-up loops, input pipeline "
             f"included, each side in its own process ({which}).", "",
             "| workload | measure | " + " | ".join(header) + " |",
             "|---|---|" + "---|" * len(header)]
    for w, s in vision_summary.items():
        v, ratios = s["values"], s["ratios"]
        for measure, title in (("vision", "train (steps/s)"), ("vision_images", "train (images/s)")):
            cells = [_fmt(v[f"{measure}/{col_name(c)}"], 2 if measure == "vision" else 0)
                     for c in columns]
            cells += [_fmt(ratios.get(f"vision {col_name(lite)}/{col_name(other)}"), 3)
                      if measure == "vision" else "" for lite, other in pairs]
            lines.append(f"| {w} | {title} | " + " | ".join(cells) + " |")
    return lines


# Issue 21's targets on the vision suite: (setting, numerator, denominator, models, bound).
VISION_SUITE_TARGETS = (
    ("like", "lite", "tfm", ("resnet18", "resnet50", "mobilenetv2"), 1.0),
    ("like", "lite", "raw", ("resnet18", "resnet50", "mobilenetv2"), 0.97),
    ("shipped", "lite", "tfm", ("resnet18", "resnet50"), 2.0),
    ("input", "lite", "tfm", ("resnet18",), 1.0),
)
_SETTING_TEXT = {"like": "like for like (oneDNN on, XLA off on every side)",
                 "shipped": "as shipped (each launcher's defaults)",
                 "input": "input pipeline alone (images/s)"}


def _vision_key(setting):
    return "images_per_sec" if setting == "input" else "steps_per_sec"


def summarize_vision_suite(data):
    """{(model, setting, side): stats of the figure} and {(model, setting, a, b): stats of the
    per-round ratio a/b}, from a vision_suite.py file; failed processes are left out."""
    values, by_round = {}, {}

    def add(setting, r, figure):
        values.setdefault((r["model"], setting, r["side"]), []).append(figure)
        by_round.setdefault((r["model"], setting), {}).setdefault(r["round"], {})[
            r["side"]] = figure

    for r in data["records"]:
        if "error" in r:
            continue
        figure = r[_vision_key(r["setting"])]
        add(r["setting"], r, figure)
        if _serves_like_for_like(data, r):
            add("like", r, figure)
    figures = {k: stats(v) for k, v in values.items()}
    ratios = {}
    for (model, setting), rounds in by_round.items():
        for a, b in (("lite", "tfm"), ("lite", "raw")):
            per_round = [sides[a] / sides[b] for sides in rounds.values()
                         if a in sides and b in sides]
            if per_round:
                ratios[(model, setting, a, b)] = stats(per_round)
    return figures, ratios


def _serves_like_for_like(data, record):
    """With `lite_once` the as-shipped lite process also stands for lite like for like, when
    its recorded state is that one: oneDNN on and nothing XLA-compiled."""
    return (data["meta"].get("lite_once") and record["side"] == "lite"
            and record["setting"] == "shipped" and record.get("onednn")
            and not record.get("xla_compiled"))


def _state(data, model, setting, side):
    """'oneDNN on/off, XLA compiled / not' of a row, from its first successful record."""
    for r in data["records"]:
        shared = setting == "like" and _serves_like_for_like(data, r)
        if ("error" not in r and (r["model"], r["side"]) == (model, side)
                and (r["setting"] == setting or shared)):
            if shared:
                return (f"oneDNN on, enable_xla {'true' if r['enable_xla'] else 'false'} "
                        f"(not compiled): the as-shipped process, in the like-for-like state")
            if setting == "input":
                return "oneDNN on"
            return (f"oneDNN {'on' if r['onednn'] else 'off'}, enable_xla "
                    f"{'true' if r['enable_xla'] else 'false'} "
                    f"({'compiled' if r['xla_compiled'] else 'not compiled'})")
    return "—"


def vision_suite_markdown(data, source=None):
    """The vision suite's tables (figures, ratios, targets); returns (text, target rows)."""
    meta = data["meta"]
    figures, ratios = summarize_vision_suite(data)
    loads = [r["loadavg_before"][0] for r in data["records"] if "loadavg_before" in r]
    lines = [f"From `{source or '?'}`: {meta['date']} UTC, commit `{meta['commit'][:10]}`"
             f"{' (dirty)' if meta.get('dirty') else ''}, {meta['cpu_model']} "
             f"({meta['cpus']} CPUs, {meta['machine']}), {meta['rounds']} round(s) in "
             f"{meta['elapsed_s'] / 60:.0f} min; 1-min load average before each process "
             f"{min(loads):.1f}–{max(loads):.1f} (median {statistics.median(loads):.1f}). "
             f"Every side on TFM's TensorFlow; batch {meta['batch']}, "
             f"{meta['image_size']}×{meta['image_size']} synthetic JPEGs, input pipeline "
             f"included, {meta['loops']} timed loops of {meta['steps_per_loop']} steps after "
             f"{meta['warmup_loops']} warm-up loops per process. Per round and model the sides "
             f"run back to back, order reversed every other round; median [min–max] over "
             f"rounds, every ratio computed within a round.", ""]
    failed = [r for r in data["records"] if "error" in r]
    if failed:
        lines += [f"{len(failed)} process(es) failed: " + "; ".join(
            f"round {r['round'] + 1} {r['model']} {r['setting']} {r['side']}: "
            f"{r['error'][:120]}" for r in failed), ""]
    lines += ["| model | setting | side | oneDNN / XLA | steps/s (images/s for input) |",
              "|---|---|---|---|---|"]
    for model in meta["models"]:
        for setting in ("like", "shipped", "input"):
            for side in ("lite", "tfm", "raw"):
                s = figures.get((model, setting, side))
                if s is None:
                    continue
                lines.append(f"| {model} | {_SETTING_TEXT[setting]} | {side} | "
                             f"{_state(data, model, setting, side)} | "
                             f"{_fmt(s, 2 if setting != 'input' else 0)} |")
    lines += ["", "| model | setting | lite/TFM | lite/raw |", "|---|---|---|---|"]
    for model in meta["models"]:
        for setting in ("like", "shipped", "input"):
            a = ratios.get((model, setting, "lite", "tfm"))
            b = ratios.get((model, setting, "lite", "raw"))
            if a or b:
                lines.append(f"| {model} | {_SETTING_TEXT[setting]} | "
                             f"{_fmt(a, 3) if a else '—'} | {_fmt(b, 3) if b else '—'} |")
    lines += ["", "Targets (issue 21), judged on the median of the per-round ratios:", "",
              "| model | target | median [min–max] | status |", "|---|---|---|---|"]
    results = []
    for setting, a, b, models, bound in VISION_SUITE_TARGETS:
        for model in models:
            if model not in meta["models"]:
                continue
            s = ratios.get((model, setting, a, b))
            name = f"{setting}: {a}/{b} >= {bound:g}"
            if s is None:
                status, shown = "not measured", "—"
            else:
                status = "pass" if s["median"] >= bound else "MISS"
                shown = _fmt(s, 3)
            results.append((model, name, s, status))
            lines.append(f"| {model} | {name} | {shown} | {status} |")
    passed = sum(r[3] == "pass" for r in results)
    lines += ["", f"{passed} of {len(results)} targets pass."]
    return "\n".join(lines) + "\n", results


def display_path(path, repo_root):
    """`path` relative to the repository root when it lies inside it, else absolute."""
    path = os.path.abspath(path)
    inside = os.path.commonpath([path, os.path.abspath(repo_root)]) == os.path.abspath(repo_root)
    return os.path.relpath(path, repo_root) if inside else path


def update_file(path, text, start_marker=START_MARKER, end_marker=END_MARKER):
    """Replaces the text between the start and end marker lines in `path` with `text`."""
    with open(path) as f:
        content = f.read()
    start, end = content.find(start_marker), content.find(end_marker)
    if start < 0 or end < start:
        raise ValueError(f"{path}: no '{start_marker}' ... '{end_marker}' block to replace; "
                         f"add the two marker lines where the results belong")
    start += len(start_marker)
    with open(path, "w") as f:
        f.write(content[:start] + "\n" + text + content[end:])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", help="a results file written by benchmarks/run.py")
    parser.add_argument("--update", nargs="+", default=[], metavar="FILE",
                        help="replace the bench-results block of these files (docs/benchmarks.md, "
                        "benchmarks/README.md) with the report")
    args = parser.parse_args(argv)
    with open(args.results) as f:
        data = json.load(f)
    repo_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    source = display_path(args.results, repo_root)
    markers = (START_MARKER, END_MARKER)
    if data.get("kind") == "vision_suite":
        text, _ = vision_suite_markdown(data, source=source)
        markers = (VISION_START_MARKER, VISION_END_MARKER)
    else:
        text, _, _ = markdown(data, source=source)
    print(text)
    for path in args.update:
        update_file(path, text, *markers)
        print(f"updated {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
