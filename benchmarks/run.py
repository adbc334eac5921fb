"""Runs every benchmark row of WORKLOADS.md and writes one JSON file and one markdown table.

    .venv/bin/python benchmarks/run.py [--rounds 5] [--workloads mlp_tiny mock] [--out bench_out/]
    .venv/bin/python benchmarks/run.py --smoke      # 1 round, fewest loops, mlp_tiny + mock (CI)

Per round and workload, six processes, in this order (rounds interleave the sides):
- the raw Keras 3 loop (raw_loop.py);
- lite_launcher rows (lite_workloads.py): train steps_per_loop=100, steps_per_loop=1, eval,
  one after the other through `ll.run_experiment`;
- the raw loop again (the round's raw figure is the mean of the two, not in smoke runs);
- TFM rows (tfm_workloads.py in the TFM venv made by setup_tfm_env.sh), the same rows through
  `train_lib.run_experiment`;
- the driver row for each framework: `lite-train` and TFM's driver (tfm_driver.py) on the same
  experiment, timed from process start to the first `train | step: N | steps/sec` log line
  (N >= 1: the first finished step), and the driver process's peak RSS.
Every ratio is computed within one round, then summarised as median [min, max] over rounds,
because the machines are shared and absolute numbers drift. Without the TFM venv the table
says TFM was not measured.
"""

import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)

import measure  # noqa: E402
import workloads  # noqa: E402

REPO_ROOT = os.path.dirname(_HERE)
DEFAULT_TFM_PYTHON = os.path.join(REPO_ROOT, ".tfm_venv", "bin", "python")
ROWS = ("train100", "train1", "eval", "raw", "driver")
SIDES = ("lite", "tfm")
# Both frameworks log this after each inner loop (Orbit's wording, kept by lite_launcher).
_STEP_LINE = re.compile(r"train \| step:\s*(\d+) \| steps/sec")


def _child_env():
    env = dict(os.environ)
    # The same C++ log level for every process (lite-train's default).
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def _tail(text, lines=3):
    return " | ".join((text or "").strip().splitlines()[-lines:])


def _run_rows_process(argv, rows, timeout_s):
    """Runs a process that prints one result line per row; returns one dict per row (an
    {'error': ...} dict for each row that printed no result)."""
    started = time.perf_counter()
    try:
        proc = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True,
                              timeout=timeout_s, env=_child_env())
    except subprocess.TimeoutExpired:
        return {row: {"error": f"timed out after {timeout_s} s: {' '.join(argv)}"}
                for row in rows}
    wall_s = time.perf_counter() - started
    found = {r.get("row"): r for r in measure.parse_results(proc.stdout)}
    results = {}
    for row in rows:
        if row in found:
            results[row] = dict(found[row], process_wall_s=wall_s)
        else:
            results[row] = {"error": f"exit {proc.returncode}: {_tail(proc.stderr or proc.stdout)}"}
    return results


def measure_lite(workload, rows, smoke=False, python=sys.executable, timeout_s=600):
    """Measures `rows` of `workload` through `ll.run_experiment`, in one new process
    (lite_workloads.py) run with `python` (the project's environment)."""
    with tempfile.TemporaryDirectory(prefix="lite_bench_") as model_dir:
        argv = [python, os.path.join(_HERE, "lite_workloads.py"), "--workload", workload,
                "--rows", *rows, "--model_dir", model_dir] + (["--smoke"] if smoke else [])
        return _run_rows_process(argv, rows, timeout_s)


def measure_tfm(workload, rows, smoke=False, python=DEFAULT_TFM_PYTHON, timeout_s=600):
    """Measures `rows` of `workload` through TFM's `train_lib.run_experiment`, in one new
    process (tfm_workloads.py) run with the TFM venv's `python`."""
    with tempfile.TemporaryDirectory(prefix="tfm_bench_") as model_dir:
        argv = [python, os.path.join(_HERE, "tfm_workloads.py"), "--workload", workload,
                "--rows", *rows, "--model_dir", model_dir] + (["--smoke"] if smoke else [])
        return _run_rows_process(argv, rows, timeout_s)


def measure_raw(workload, smoke=False, python=sys.executable, timeout_s=600):
    """Measures the raw Keras 3 loop of `workload` in a new process (raw_loop.py)."""
    argv = [python, os.path.join(_HERE, "raw_loop.py"), "--workload", workload] + (
        ["--smoke"] if smoke else [])
    return _run_rows_process(argv, ["raw"], timeout_s)["raw"]


def lite_train_command(python):
    """`lite-train` next to `python` (the console script), else `python -m lite_launcher.main`."""
    script = os.path.join(os.path.dirname(python), "lite-train")
    return [script] if os.path.exists(script) else [python, "-m", "lite_launcher.main"]


def driver_argv(side, workload, model_dir, python):
    """The driver command of `side` for the driver row of `workload`."""
    mode, trainer = workloads.run_plan(workloads.get(workload), "driver", 0)
    args = ["--experiment", workload, "--mode", mode, "--model_dir", model_dir,
            "--params_override", json.dumps({"trainer": trainer})]
    if side == "lite":
        return lite_train_command(python) + args
    return [python, os.path.join(_HERE, "tfm_driver.py")] + args


def measure_driver(side, workload, python, timeout_s=600):
    """Runs the driver of `side` on `workload`; returns first_step_s (process start to the
    first `train | step: N | steps/sec` line with N >= 1) and the process's peak RSS."""
    with tempfile.TemporaryDirectory(prefix=f"{side}_driver_") as model_dir:
        return _measure_driver(side, workload, driver_argv(side, workload, model_dir, python),
                               timeout_s)


def _measure_driver(side, workload, argv, timeout_s):
    started = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=_child_env())
    killer = threading.Timer(timeout_s, proc.kill)
    killer.start()
    first_step_s = None
    lines = []
    try:
        for line in proc.stdout:
            if first_step_s is None:
                match = _STEP_LINE.search(line)
                if match and int(match.group(1)) >= 1:
                    first_step_s = time.perf_counter() - started
            lines.append(line)
            del lines[:-20]
        # wait4 gives this child's own rusage (ru_maxrss in KiB on Linux).
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    finally:
        killer.cancel()
        proc.stdout.close()
    wall_s = time.perf_counter() - started
    if proc.returncode != 0 or first_step_s is None:
        why = "no 'train | step: N' line" if proc.returncode == 0 else f"exit {proc.returncode}"
        return {"error": f"{' '.join(argv[:2])}: {why}: {_tail(''.join(lines))}"}
    return {"side": side, "workload": workload, "row": "driver", "first_step_s": first_step_s,
            "peak_rss_mib": usage.ru_maxrss / 1024.0, "process_wall_s": wall_s,
            "steps": workloads.DRIVER_STEPS}


def run_rounds(args, tfm_python, log=print):
    """Runs all rounds; returns a list of records {round, workload, row, side, ...result}."""
    records = []
    framework_rows = [r for r in args.rows if r in workloads.FRAMEWORK_ROWS]

    def record(round_index, workload, row, side, result):
        result = dict(result, round=round_index, workload=workload, row=row, side=side)
        records.append(result)
        prefix = f"round {round_index + 1}/{args.rounds} {workload:9s} {row:8s} {side:4s}"
        if "error" in result:
            log(f"{prefix} FAILED {result['error']}")
        elif row == "driver":
            log(f"{prefix} first step {result['first_step_s']:.2f} s  peak RSS "
                f"{result['peak_rss_mib']:.0f} MiB")
        else:
            log(f"{prefix} {result['steps_per_sec']:10.1f} steps/s")

    for round_index in range(args.rounds):
        for workload in args.workloads:
            # The raw loop just before and just after lite_launcher's rows (train100 first):
            # the lite/raw ratio uses their mean, so a load that drifts within the round
            # weighs on both sides alike.
            if "raw" in args.rows:
                record(round_index, workload, "raw", "raw",
                       dict(measure_raw(workload, args.smoke, args.python, args.timeout),
                            raw_pass="before"))
            if framework_rows:
                for row, result in measure_lite(workload, framework_rows, args.smoke,
                                                args.python, args.timeout).items():
                    record(round_index, workload, row, "lite", result)
            if "raw" in args.rows and framework_rows and not args.smoke:
                record(round_index, workload, "raw", "raw",
                       dict(measure_raw(workload, args.smoke, args.python, args.timeout),
                            raw_pass="after"))
            if framework_rows:
                if tfm_python:
                    for row, result in measure_tfm(workload, framework_rows, args.smoke,
                                                   tfm_python, args.timeout).items():
                        record(round_index, workload, row, "tfm", result)
            if "driver" in args.rows:
                record(round_index, workload, "driver", "lite",
                       measure_driver("lite", workload, args.python, args.timeout))
                if tfm_python:
                    record(round_index, workload, "driver", "tfm",
                           measure_driver("tfm", workload, tfm_python, args.timeout))
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


def summarize(records, rounds, workload_names):
    """Medians / min / max of every figure and per-round ratio, per workload."""
    table = {}
    for r in records:
        if "error" not in r:
            table.setdefault((r["round"], r["workload"], r["row"], r["side"]), []).append(r)

    def value(i, w, row, side, key="steps_per_sec"):
        # The mean where a round measured a row twice (the raw loop, before and after).
        values = [r[key] for r in table.get((i, w, row, side), []) if r.get(key) is not None]
        return statistics.fmean(values) if values else None

    def ratio(a, b):
        return None if a is None or b is None or b == 0 else a / b

    def over_rounds(fn):
        return _stats([fn(i) for i in range(rounds)])

    def outer_loop_ms(i, w, side):
        # Per outer loop cost beyond the steps: 1/r(spl=1) - 1/r(spl=100), in ms.
        r1, r100 = value(i, w, "train1", side), value(i, w, "train100", side)
        return None if r1 is None or r100 is None else 1000.0 * (1.0 / r1 - 1.0 / r100)

    summary = {}
    for w in workload_names:
        s = {"steps_per_sec": {}, "ratios": {}, "outer_loop_ms": {}, "first_step_s": {},
             "peak_rss_mib": {}}
        for row in workloads.FRAMEWORK_ROWS:
            for side in SIDES:
                s["steps_per_sec"][f"{row}/{side}"] = over_rounds(
                    lambda i: value(i, w, row, side))
        s["steps_per_sec"]["raw/raw"] = over_rounds(lambda i: value(i, w, "raw", "raw"))
        for side in SIDES:
            s["outer_loop_ms"][side] = over_rounds(lambda i: outer_loop_ms(i, w, side))
            s["first_step_s"][side] = over_rounds(
                lambda i: value(i, w, "driver", side, "first_step_s"))
            s["peak_rss_mib"][side] = over_rounds(
                lambda i: value(i, w, "driver", side, "peak_rss_mib"))
        for side in SIDES:
            s["ratios"][f"train100 {side}/raw"] = over_rounds(
                lambda i: ratio(value(i, w, "train100", side), value(i, w, "raw", "raw")))
        for row in workloads.FRAMEWORK_ROWS:
            s["ratios"][f"{row} lite/tfm"] = over_rounds(
                lambda i: ratio(value(i, w, row, "lite"), value(i, w, row, "tfm")))
        s["ratios"]["first_step lite/tfm"] = over_rounds(
            lambda i: ratio(value(i, w, "driver", "lite", "first_step_s"),
                            value(i, w, "driver", "tfm", "first_step_s")))
        s["ratios"]["peak_rss lite/tfm"] = over_rounds(
            lambda i: ratio(value(i, w, "driver", "lite", "peak_rss_mib"),
                            value(i, w, "driver", "tfm", "peak_rss_mib")))
        summary[w] = s
    return summary


# Targets from the project issue: (workload, group, key, comparison, threshold).
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
        label = key if group == "ratios" else f"outer loop ms ({key})"
        if stats is None:
            status, median = "not measured", None
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
    """The report as markdown: one merged table (all workloads, both frameworks), targets."""
    tfm_missing = meta["tfm"] is None

    def tfm(stats, digits=0, unit=""):
        return "not measured" if tfm_missing else _fmt(stats, digits, unit)

    lines = [
        "# lite_launcher benchmarks",
        "",
        f"{meta['date']} · {meta['machine']} · {meta['rounds']} round(s), interleaved · "
        f"median [min–max] over rounds; ratios are computed within each round.",
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
    if meta.get("failures"):
        lines.append(f"- **{meta['failures']} measurement(s) failed**: see `errors` in the JSON.")
    lines += ["", "| workload | measure | lite_launcher | TFM | raw Keras 3 | lite/TFM | lite/raw |",
              "|---|---|---|---|---|---|---|"]
    titles = {"train100": f"train, steps_per_loop={workloads.LONG_LOOP} (steps/s)",
              "train1": "train, steps_per_loop=1 (steps/s)",
              "eval": f"eval, validation_steps={workloads.EVAL_STEPS} (steps/s)"}
    for w, s in summary.items():
        sps, ratios = s["steps_per_sec"], s["ratios"]
        for row in workloads.FRAMEWORK_ROWS:
            long_row = row == "train100"
            lines.append(
                f"| {w} | {titles[row]} | {_fmt(sps[f'{row}/lite'])} | "
                f"{tfm(sps[f'{row}/tfm'])} | {_fmt(sps['raw/raw']) if long_row else ''} | "
                f"{tfm(ratios[f'{row} lite/tfm'], 2)} | "
                f"{_fmt(ratios['train100 lite/raw'], 3) if long_row else ''} |")
        lines.append(
            f"| {w} | outer loop: 1/r(spl=1) − 1/r(spl=100) (ms) | "
            f"{_fmt(s['outer_loop_ms']['lite'], 3)} | {tfm(s['outer_loop_ms']['tfm'], 3)} "
            f"|  |  |  |")
        lines.append(
            f"| {w} | driver: process start → first finished step (s) | "
            f"{_fmt(s['first_step_s']['lite'], 2)} | {tfm(s['first_step_s']['tfm'], 2)} |  | "
            f"{tfm(ratios['first_step lite/tfm'], 2)} |  |")
        lines.append(
            f"| {w} | driver: peak RSS (MiB) | {_fmt(s['peak_rss_mib']['lite'])} | "
            f"{tfm(s['peak_rss_mib']['tfm'])} |  | {tfm(ratios['peak_rss lite/tfm'], 2)} |  |")
    lines += ["", "Targets (judged on the median):", "", "| workload | target | median | status |",
              "|---|---|---|---|"]
    for c in checks:
        median = "—" if c["median"] is None else f"{c['median']:.3f}"
        lines.append(f"| {c['workload']} | {c['target']} | {median} | {c['status']} |")
    lines += ["", "How: " + HOW, ""]
    return "\n".join(lines)


HOW = (
    "each framework runs its rows in one process per round through its own `run_experiment` "
    "(default strategy, checkpoint and summary intervals that never fire); a train action "
    "timestamps the end of each outer loop. Train rows: steps/s over the loops after the "
    f"warm-up ({workloads.WARMUP_LOOPS} loops: tracing, then the one-time work after the first "
    "loop; 1 for cnn_small at steps_per_loop=100), so it includes all per-loop controller "
    "work. Eval: `mode='train_and_eval'` with 1-step train loops and an evaluation of "
    f"{workloads.EVAL_STEPS} steps after each, timed from the train action before it to the "
    "eval action after it, the first (tracing) one excluded. Raw: one tf.function over "
    "`tf.range(100)` with lite_launcher's model, batch and loss, timed the same way, run "
    "just before and just after the lite_launcher rows (mean of the two). Driver: "
    f"`lite-train` and TFM's driver (benchmarks/tfm_driver.py), mode train, "
    f"{workloads.DRIVER_STEPS} one-step loops, from process start to the first "
    "`train | step: N` log line (N >= 1), and the process's peak RSS (wait4). Outer loop "
    "overhead is only meaningful where a step is short (mlp_tiny, mock).")


def _versions(records):
    versions = {}
    for r in records:
        if "versions" in r and r["side"] not in versions:
            versions[r["side"]] = ", ".join(f"{k} {v}" for k, v in r["versions"].items())
    return versions


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--workloads", nargs="+", default=None,
                        choices=sorted(workloads.WORKLOADS),
                        help="default: all (with --smoke: " + " ".join(workloads.SMOKE_WORKLOADS)
                        + ")")
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
    if args.workloads is None:
        args.workloads = list(workloads.SMOKE_WORKLOADS if args.smoke else workloads.WORKLOADS)
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
