"""Runs every benchmark row of WORKLOADS.md and writes one JSON file and one markdown table.

    .venv/bin/python benchmarks/run.py [--rounds 5] [--workloads mlp_tiny mock] [--out bench_out/]
    .venv/bin/python benchmarks/run.py --smoke          # 1 round, fewest loops (CI)

Each measurement runs in its own process (so start-up time and peak RSS are per process):
lite_launcher (lite_workloads.py), TFM (tfm_workloads.py in the TFM venv made by
setup_tfm_env.sh) and the raw Keras loop (raw_loop.py). Rounds interleave the sides
(lite, TFM, lite, TFM, ...); every ratio is computed within one round and then summarised as
median [min, max] over rounds, because the machines are shared and absolute numbers drift.
Without the TFM venv the table says TFM was not measured.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)

import measure  # noqa: E402
import workloads  # noqa: E402

REPO_ROOT = os.path.dirname(_HERE)
DEFAULT_TFM_PYTHON = os.path.join(REPO_ROOT, ".tfm_venv", "bin", "python")
ROWS = ("train100", "train1", "eval", "raw")
ROW_TITLES = {
    "train100": "train, steps_per_loop=100",
    "train1": "train, steps_per_loop=1",
    "eval": f"eval, validation_steps={workloads.EVAL_STEPS}",
}


def _run_measurement(argv, timeout_s):
    """Runs one measurement process; returns its result dict, or {'error': ...}."""
    started = time.perf_counter()
    try:
        proc = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s} s: {' '.join(argv)}"}
    result = measure.parse_result(proc.stdout)
    if proc.returncode != 0 or result is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"error": f"exit {proc.returncode}: " + " | ".join(tail)}
    result["wall_s"] = time.perf_counter() - started
    return result


# ---------------------------------------------------------------------------------------------
# lite_launcher side. The lead wires lite_launcher's public path in lite_workloads.py; this
# function only launches it, exactly as measure_tfm launches the TFM side.
# ---------------------------------------------------------------------------------------------
def measure_lite(workload, row, smoke=False, python=sys.executable, timeout_s=600):
    """Measures `row` of `workload` through lite_launcher (`ll.run_experiment`), in a new
    process running benchmarks/lite_workloads.py with `python` (the project's environment)."""
    argv = [python, os.path.join(_HERE, "lite_workloads.py"), "--workload", workload,
            "--row", row] + (["--smoke"] if smoke else [])
    return _run_measurement(argv, timeout_s)


def measure_tfm(workload, row, smoke=False, python=DEFAULT_TFM_PYTHON, timeout_s=600):
    """Measures `row` of `workload` through TFM's `train_lib.run_experiment`, in a new process
    running benchmarks/tfm_workloads.py with the TFM venv's `python`."""
    argv = [python, os.path.join(_HERE, "tfm_workloads.py"), "--workload", workload,
            "--row", row] + (["--smoke"] if smoke else [])
    return _run_measurement(argv, timeout_s)


def measure_raw(workload, smoke=False, python=sys.executable, timeout_s=600):
    """Measures the raw Keras 3 loop of `workload` in a new process (raw_loop.py)."""
    argv = [python, os.path.join(_HERE, "raw_loop.py"), "--workload", workload] + (
        ["--smoke"] if smoke else [])
    return _run_measurement(argv, timeout_s)


def run_rounds(args, tfm_python, log=print):
    """Runs all rounds; returns a list of records {round, workload, row, side, ...result}."""
    records = []
    for round_index in range(args.rounds):
        for workload in args.workloads:
            for row in args.rows:
                if row == "raw":
                    plan = [("raw", lambda: measure_raw(
                        workload, args.smoke, args.python, args.timeout))]
                else:
                    plan = [("lite", lambda: measure_lite(
                        workload, row, args.smoke, args.python, args.timeout))]
                    if tfm_python:
                        plan.append(("tfm", lambda: measure_tfm(
                            workload, row, args.smoke, tfm_python, args.timeout)))
                for side, run in plan:
                    result = run()
                    result.update(round=round_index, workload=workload, row=row, side=side)
                    records.append(result)
                    if "error" in result:
                        log(f"round {round_index + 1}/{args.rounds} {workload:9s} {row:8s} "
                            f"{side:4s} FAILED {result['error']}")
                    else:
                        log(f"round {round_index + 1}/{args.rounds} {workload:9s} {row:8s} "
                            f"{side:4s} {result['steps_per_sec']:10.1f} steps/s  first loop "
                            f"{result['first_loop_s']:.2f} s  peak RSS "
                            f"{result['peak_rss_mib']:.0f} MiB")
    return records


# ---------------------------------------------------------------------------------------------
# Summaries: every comparison is a per-round ratio, then median [min, max] over rounds.
# ---------------------------------------------------------------------------------------------
def _stats(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values)}


def _lookup(records):
    table = {}
    for r in records:
        if "error" not in r:
            table[(r["round"], r["workload"], r["row"], r["side"])] = r
    return table


def _per_round(records, rounds, fn):
    """Applies fn(round) -> value or None over rounds; returns stats of the values."""
    return _stats([fn(i) for i in range(rounds)])


def summarize(records, rounds, workload_names):
    """Medians / min / max of every figure and per-round ratio, per workload."""
    table = _lookup(records)

    def value(i, w, row, side, key="steps_per_sec"):
        r = table.get((i, w, row, side))
        return None if r is None else r.get(key)

    def ratio(a, b):
        return None if a is None or b is None or b == 0 else a / b

    def outer_loop_ms(i, w, side):
        # Controller overhead per outer loop: 1/r(spl=1) - 1/r(spl=100), in ms.
        r1, r100 = value(i, w, "train1", side), value(i, w, "train100", side)
        return None if r1 is None or r100 is None else 1000.0 * (1.0 / r1 - 1.0 / r100)

    summary = {}
    for w in workload_names:
        s = {"steps_per_sec": {}, "ratios": {}, "first_step_s": {}, "peak_rss_mib": {},
             "outer_loop_ms": {}}
        for row in ROWS:
            for side in (("raw",) if row == "raw" else ("lite", "tfm")):
                s["steps_per_sec"][f"{row}/{side}"] = _per_round(
                    records, rounds, lambda i: value(i, w, row, side))
        for side in ("lite", "tfm", "raw"):
            # First step: process start -> first finished train step (the spl=1 process; raw
            # times its own 1-step call). Peak RSS: the spl=100 training process.
            step_row = "raw" if side == "raw" else "train1"
            rss_row = "raw" if side == "raw" else "train100"
            s["first_step_s"][side] = _per_round(
                records, rounds, lambda i: value(i, w, step_row, side, "first_loop_s"))
            s["peak_rss_mib"][side] = _per_round(
                records, rounds, lambda i: value(i, w, rss_row, side, "peak_rss_mib"))
        for side in ("lite", "tfm"):
            s["outer_loop_ms"][side] = _per_round(
                records, rounds, lambda i: outer_loop_ms(i, w, side))
        s["ratios"]["train100 lite/raw"] = _per_round(
            records, rounds, lambda i: ratio(value(i, w, "train100", "lite"),
                                             value(i, w, "raw", "raw")))
        for row in ("train100", "train1", "eval"):
            s["ratios"][f"{row} lite/tfm"] = _per_round(
                records, rounds, lambda i: ratio(value(i, w, row, "lite"),
                                                 value(i, w, row, "tfm")))
        s["ratios"]["first_step lite/tfm"] = _per_round(
            records, rounds, lambda i: ratio(value(i, w, "train1", "lite", "first_loop_s"),
                                             value(i, w, "train1", "tfm", "first_loop_s")))
        s["ratios"]["peak_rss lite/tfm"] = _per_round(
            records, rounds, lambda i: ratio(value(i, w, "train100", "lite", "peak_rss_mib"),
                                             value(i, w, "train100", "tfm", "peak_rss_mib")))
        summary[w] = s
    return summary


# Targets from the project issue: (workload, ratio or figure key, comparison, threshold).
TARGETS = (
    [(w, "ratios", "train100 lite/raw", ">=", 0.90) for w in ("mlp_tiny", "cnn_small", "mock")]
    + [(w, "ratios", "train1 lite/tfm", ">=", 4.0) for w in ("mlp_tiny", "mock")]
    + [(w, "outer_loop_ms", "lite", "<", 0.5) for w in ("mlp_tiny", "mock")]
    + [("mlp_tiny", "ratios", "eval lite/tfm", ">=", 2.0)]
    + [(w, "ratios", "first_step lite/tfm", "<=", 1.0) for w in ("mlp_tiny", "cnn_small", "mock")]
    + [(w, "ratios", "peak_rss lite/tfm", "<=", 1.0) for w in ("mlp_tiny", "cnn_small", "mock")]
)


def check_targets(summary):
    """Each target judged on the median; 'not measured' when a side is missing."""
    checks = []
    for w, group, key, op, threshold in TARGETS:
        if w not in summary:
            continue
        stats = summary[w][group].get(key)
        label = f"{key}" if group == "ratios" else f"{group.replace('_ms', '')} {key} (ms)"
        if stats is None:
            status = "not measured"
            median = None
        else:
            median = stats["median"]
            ok = {">=": median >= threshold, "<=": median <= threshold,
                  "<": median < threshold}[op]
            status = "pass" if ok else "FAIL"
        checks.append({"workload": w, "target": f"{label} {op} {threshold}",
                       "median": median, "status": status})
    return checks


def _fmt(stats, digits=0, unit=""):
    if stats is None:
        return "—"
    fmt = f"{{:,.{digits}f}}"
    if stats["n"] == 1:
        return fmt.format(stats["median"]) + unit
    return (f"{fmt.format(stats['median'])}{unit} "
            f"[{fmt.format(stats['min'])}–{fmt.format(stats['max'])}]")


def markdown(summary, checks, meta):
    """The report as markdown: one table per workload, then the targets."""
    tfm_missing = meta["tfm"] is None
    tfm_cell = (lambda stats, digits=0, unit="": "TFM not measured") if tfm_missing else _fmt
    lines = [
        "# lite_launcher benchmarks",
        "",
        f"{meta['date']} · {meta['machine']} · {meta['rounds']} round(s), interleaved · "
        f"figures are median [min–max] over rounds; ratios are computed per round.",
        "",
        f"- lite_launcher: {meta['versions'].get('lite', 'not measured')}",
        f"- raw Keras loop: {meta['versions'].get('raw', 'not measured')}",
        f"- TFM: {meta['versions'].get('tfm', 'not measured')}",
    ]
    if tfm_missing:
        lines.append("- **TFM was not measured**: no TFM environment "
                     "(create one with `bash benchmarks/setup_tfm_env.sh`).")
    if meta.get("smoke"):
        lines.append("- **smoke run**: fewest loops, figures are not meaningful.")
    failures = meta.get("failures", 0)
    if failures:
        lines.append(f"- **{failures} measurement(s) failed**: see `errors` in the JSON.")
    for w, s in summary.items():
        sps, ratios = s["steps_per_sec"], s["ratios"]
        lines += ["", f"## {w}", "",
                  "| row | lite steps/s | TFM steps/s | raw steps/s | lite/TFM | lite/raw |",
                  "|---|---|---|---|---|---|"]
        for row in ("train100", "train1", "eval"):
            raw_cell = _fmt(sps.get("raw/raw")) if row == "train100" else ""
            lite_raw = _fmt(ratios["train100 lite/raw"], 3) if row == "train100" else ""
            lines.append(
                f"| {ROW_TITLES[row]} | {_fmt(sps.get(f'{row}/lite'))} | "
                f"{tfm_cell(sps.get(f'{row}/tfm'))} | {raw_cell} | "
                f"{tfm_cell(ratios[f'{row} lite/tfm'], 2)} | {lite_raw} |")
        lines.append(
            f"| outer loop overhead, 1/r(spl=1) − 1/r(spl=100) | "
            f"{_fmt(s['outer_loop_ms']['lite'], 3, ' ms')} | "
            f"{tfm_cell(s['outer_loop_ms']['tfm'], 3, ' ms')} |  |  |  |")
        lines.append(
            f"| first step: process start → first finished train step | "
            f"{_fmt(s['first_step_s']['lite'], 2, ' s')} | "
            f"{tfm_cell(s['first_step_s']['tfm'], 2, ' s')} | "
            f"{_fmt(s['first_step_s']['raw'], 2, ' s')} | "
            f"{tfm_cell(ratios['first_step lite/tfm'], 2)} |  |")
        lines.append(
            f"| peak RSS (train spl=100 process) | "
            f"{_fmt(s['peak_rss_mib']['lite'], 0, ' MiB')} | "
            f"{tfm_cell(s['peak_rss_mib']['tfm'], 0, ' MiB')} | "
            f"{_fmt(s['peak_rss_mib']['raw'], 0, ' MiB')} | "
            f"{tfm_cell(ratios['peak_rss lite/tfm'], 2)} |  |")
    lines += ["", "## Targets (judged on the median)", "", "| workload | target | median | status |",
              "|---|---|---|---|"]
    for c in checks:
        median = "—" if c["median"] is None else f"{c['median']:.3f}"
        lines.append(f"| {c['workload']} | {c['target']} | {median} | {c['status']} |")
    lines += ["", "How: " + HOW, ""]
    return "\n".join(lines)


HOW = (
    "each figure comes from its own process. Train rows run WARMUP_LOOPS "
    f"({workloads.WARMUP_LOOPS}) + N outer loops through `run_experiment(mode='train')` with "
    "the default strategy; a train action timestamps the end of each loop and steps/s is "
    "taken over the N loops after the warm-up (tracing, then the one-time work after the "
    "first loop), so it includes all per-loop controller work. The eval row runs "
    "`mode='train_and_eval'` with 1-step train loops and an evaluation of "
    f"{workloads.EVAL_STEPS} steps after each; an evaluation is timed from the train action "
    "before it to the eval action after it, the first (tracing) one excluded. The raw loop "
    "is timed the same way over calls of 100 steps. Checkpoint and summary intervals never "
    "fire. First step: process age (from /proc) when the first train action runs in the "
    "spl=1 process. Outer loop overhead is only meaningful where a step is short (mlp_tiny, "
    "mock).")


def _versions(records):
    versions = {}
    for r in records:
        if "versions" in r and r["side"] not in versions:
            versions[r["side"]] = ", ".join(f"{k} {v}" for k, v in r["versions"].items())
    return versions


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--workloads", nargs="+", default=list(workloads.WORKLOADS),
                        choices=sorted(workloads.WORKLOADS))
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=ROWS)
    parser.add_argument("--out", default=os.path.join(REPO_ROOT, "bench_out"),
                        help="folder for results.json and results.md (default bench_out/)")
    parser.add_argument("--smoke", action="store_true",
                        help="1 round and the fewest loops that still time (CI)")
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter of the project's environment (lite and raw sides)")
    parser.add_argument("--tfm_python", default=DEFAULT_TFM_PYTHON,
                        help="interpreter of the TFM venv (default .tfm_venv/bin/python)")
    parser.add_argument("--no_tfm", action="store_true", help="do not measure TFM")
    parser.add_argument("--timeout", type=int, default=600,
                        help="seconds allowed for one measurement process")
    args = parser.parse_args(argv)
    if args.smoke:
        args.rounds = 1
    if args.rounds < 1:
        parser.error(f"--rounds ({args.rounds}) must be >= 1")

    tfm_python = None
    if not args.no_tfm and os.path.exists(args.tfm_python):
        tfm_python = args.tfm_python
    elif not args.no_tfm:
        print(f"TFM not measured: {args.tfm_python} does not exist "
              f"(create it with `bash benchmarks/setup_tfm_env.sh`).", flush=True)

    started = time.time()
    records = run_rounds(args, tfm_python, log=lambda msg: print(msg, flush=True))
    summary = summarize(records, args.rounds, args.workloads)
    checks = check_targets(summary)
    meta = {
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU(s), {platform.system()}",
        "rounds": args.rounds,
        "smoke": args.smoke,
        "workloads": args.workloads,
        "rows": args.rows,
        "tfm": tfm_python,
        "versions": _versions(records),
        "failures": sum(1 for r in records if "error" in r),
        "elapsed_s": time.time() - started,
    }
    os.makedirs(args.out, exist_ok=True)
    json_path = os.path.join(args.out, "results.json")
    md_path = os.path.join(args.out, "results.md")
    with open(json_path, "w") as f:
        json.dump({"meta": meta, "summary": summary, "targets": checks,
                   "errors": [r for r in records if "error" in r],
                   "records": records}, f, indent=1)
    report = markdown(summary, checks, meta)
    with open(md_path, "w") as f:
        f.write(report)
    print(report)
    print(f"wrote {json_path} and {md_path} in {meta['elapsed_s']:.0f} s")
    return 1 if meta["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
