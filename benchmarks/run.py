"""Runs every benchmark row of WORKLOADS.md side by side and writes one results file.

    .venv/bin/python benchmarks/run.py [--rounds 3] [--workloads mlp_tiny mock] [--label TEXT]
    .venv/bin/python benchmarks/run.py --smoke      # 1 round, fewest loops, mlp_tiny + mock (CI)

A full run writes benchmarks/results/<UTC date>-<commit>.json (every process's result, the
versions and the run's metadata; commit it) and bench_out/results.md; `benchmarks/report.py
FILE --update docs/benchmarks.md benchmarks/README.md` renders the docs/benchmarks.md tables from that file.

Per round and workload, these processes (the order is reversed every other round, so that no
side always runs first or last):
- the raw Keras 3 loop (raw_loop.py) and lite_launcher's rows (lite_workloads.py), in the
  project's environment (its TensorFlow);
- the same two in TFM's venv (its TensorFlow, where lite_launcher is installed --no-deps), so
  that lite/TFM compares launchers on one TensorFlow;
- TFM's rows (tfm_workloads.py, TFM's venv), the same rows through `train_lib.run_experiment`;
- the driver row: `lite-train` in both environments and TFM's driver (tfm_driver.py) on the
  same experiment, timed from process start to the first `train | step: N | steps/sec` log
  line (N >= 1: the first finished step), and the driver process's peak RSS.
- the vision rows (vision_rows.py, after the workloads): `resnet_imagenet` ResNet-18 every
  round and ResNet-50 in the first VISION_ROUNDS["resnet50"] rounds, on synthetic 64x64 JPEG
  TFRecords (written once before the rounds; `--resnet50_rounds N` for more), batch 16, steps_per_loop 10, input pipeline
  included: lite, raw and TFM, each in its own process, by default on TFM's TensorFlow only
  (`--vision_envs project tfm` adds lite and raw on the project's TensorFlow).
A rows process runs train steps_per_loop=100, steps_per_loop=1 (summaries every loop),
steps_per_loop=1 without summaries and eval, one after the other, with the same work on both
sides (workloads.run_plan). Every ratio is computed within one round, then summarised as
median [min, max] over rounds (report.py), because the machines are shared and absolute
numbers drift. Without the TFM venv the report says TFM was not measured.
"""

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)

import measure  # noqa: E402
import report  # noqa: E402
import rounds as rounds_lib  # noqa: E402
import vision_rows  # noqa: E402  (its constants; it imports TensorFlow only in its rows)
import workloads  # noqa: E402

REPO_ROOT = os.path.dirname(_HERE)
DEFAULT_TFM_PYTHON = os.path.join(REPO_ROOT, ".tfm_venv", "bin", "python")
RESULTS_DIR = os.path.join(_HERE, "results")
ROWS = workloads.FRAMEWORK_ROWS + ("raw", "driver")
ENVS = ("project", "tfm")
# The vision rows (issue 11). Measured on a loaded 2-core machine, one process (imports, build,
# tracing, 2 warm-up + the timed loops of 10 steps) takes ~20 s for ResNet-18 (~0.15 s a step at
# 64x64, batch 16) and ~45 s for ResNet-50 (~0.7 s a step). To add about 4 minutes to a 3-round
# run on an idle 2-core machine, ResNet-18 runs every round (3 processes of ~15 s) and ResNet-50
# in the first round only (3 processes of ~35 s); `--resnet50_rounds N` gives it more rounds.
VISION_MODELS = ("resnet18", "resnet50")
VISION_SIDES = ("lite", "raw", "tfm")
VISION_STEPS_PER_LOOP = 10
# Timed loops per process (after vision_rows.WARMUP_LOOPS warm-up loops).
VISION_LOOPS = {"resnet18": 3, "resnet50": 2}
# The rounds that measure each model: None = every round, N = the first N.
VISION_ROUNDS = {"resnet18": None, "resnet50": 1}
VISION_ROW = "vision"
# What `lite-train`'s console script runs, for a given interpreter: with `-c`, lite_launcher is
# imported from the working directory (the repository root) first, so the TFM venv runs this
# checkout, whatever its editable install points at.
_LITE_TRAIN = ("import sys; from lite_launcher.commands.train import run; sys.argv[0] = 'lite-train'; "
               "sys.exit(run())")
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


def measure_rows(side, workload, rows, smoke=False, python=sys.executable, timeout_s=600,
                 extra_args=()):
    """Measures `rows` of `workload` in one new process run with `python`: through
    `ll.run_experiment` (lite_workloads.py) for side 'lite', TFM's `train_lib.run_experiment`
    (tfm_workloads.py, TFM's venv) for side 'tfm'. `extra_args` go to the row script
    (`--loops N`, `--runtime JSON`)."""
    script = {"lite": "lite_workloads.py", "tfm": "tfm_workloads.py"}[side]
    with tempfile.TemporaryDirectory(prefix=f"{side}_bench_") as model_dir:
        argv = [python, os.path.join(_HERE, script), "--workload", workload,
                "--rows", *rows, "--model_dir", model_dir] + (["--smoke"] if smoke else [])
        return _run_rows_process(argv + list(extra_args), rows, timeout_s)


def measure_raw(workload, smoke=False, python=sys.executable, timeout_s=600):
    """Measures the raw Keras 3 loop of `workload` in a new process (raw_loop.py)."""
    argv = [python, os.path.join(_HERE, "raw_loop.py"), "--workload", workload] + (
        ["--smoke"] if smoke else [])
    return _run_rows_process(argv, ["raw"], timeout_s)["raw"]


def driver_argv(side, workload, model_dir, python):
    """The driver command of `side` for the driver row of `workload`."""
    mode, trainer, _ = workloads.run_plan(workloads.get(workload), "driver", 0, side)
    args = ["--experiment", workload, "--mode", mode, "--model_dir", model_dir,
            "--params_override", json.dumps({"trainer": trainer})]
    if side == "lite":
        return [python, "-c", _LITE_TRAIN] + args
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


def vision_workload(model):
    """The results' workload name of a vision model (as vision_rows.py reports it)."""
    return f"resnet_imagenet_{model}"


def vision_plan(args, pythons, round_index):
    """The vision processes of one round: (side, env, model), reversed every other round.

    lite and raw run in each of `args.vision_envs` that has an interpreter; TFM in its venv.
    A model is left out of rounds past its limit (`args.vision_rounds`, default VISION_ROUNDS).
    """
    steps = []
    for model in args.vision_models:
        limit = getattr(args, "vision_rounds", VISION_ROUNDS).get(model)
        if limit is not None and round_index >= limit:
            continue
        for env in ("project", "tfm"):
            if env in pythons and env in args.vision_envs:
                steps += [("lite", env, model), ("raw", env, model)]
        if "tfm" in pythons:
            steps.append(("tfm", "tfm", model))
    return rounds_lib.round_order(steps, round_index)


def measure_vision(side, model, python, data_dir, timeout_s=600, loops=None):
    """Measures one vision row (vision_rows.py --side SIDE) in a new process run with
    `python`; vision_rows.py puts this checkout first on sys.path, so the TFM venv runs it."""
    loops = VISION_LOOPS[model] if loops is None else loops
    argv = [python, os.path.join(_HERE, "vision_rows.py"), "--side", side, "--model", model,
            "--steps_per_loop", str(VISION_STEPS_PER_LOOP), "--loops", str(loops),
            "--data_dir", data_dir]
    return _run_rows_process(argv, [f"train{VISION_STEPS_PER_LOOP}"],
                             timeout_s)[f"train{VISION_STEPS_PER_LOOP}"]


def write_vision_data(python, data_dir, timeout_s=600):
    """Writes the synthetic TFRecords every vision process reads; None or an error line."""
    argv = [python, os.path.join(_HERE, "vision_rows.py"), "--write_data_only",
            "--data_dir", data_dir]
    try:
        proc = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True,
                              timeout=timeout_s, env=_child_env())
    except subprocess.TimeoutExpired:
        return f"writing the vision TFRecords timed out after {timeout_s} s"
    return None if proc.returncode == 0 else f"exit {proc.returncode}: {_tail(proc.stderr)}"


def round_plan(workload, args, pythons, round_index):
    """The processes of one round for `workload`: (side, env, row kind), reversed every other
    round. `pythons` maps each available environment to its interpreter."""
    framework_rows = [r for r in args.rows if r in workloads.FRAMEWORK_ROWS]
    steps = []
    for env in ("project", "tfm"):
        if env not in pythons:
            continue
        if "raw" in args.rows:
            steps.append(("raw", env, "raw"))
        if framework_rows:
            steps.append(("lite", env, "rows"))
    if "tfm" in pythons and framework_rows:
        steps.append(("tfm", "tfm", "rows"))
    if "driver" in args.rows:
        steps += [("lite", env, "driver") for env in ("project", "tfm") if env in pythons]
        if "tfm" in pythons:
            steps.append(("tfm", "tfm", "driver"))
    return rounds_lib.round_order(steps, round_index)


def run_rounds(args, pythons, log=print):
    """Runs the rounds; returns (records {round, workload, row, side, env, ...}, rounds run).

    A round starts only if the mean round time so far says it ends within `args.max_minutes`;
    past that time no further process starts, even within a round (the report says so).
    """
    records = []
    started = time.perf_counter()
    framework_rows = [r for r in args.rows if r in workloads.FRAMEWORK_ROWS]

    def record(round_index, workload, row, side, env, result):
        result = dict(result, round=round_index, workload=workload, row=row, side=side, env=env)
        records.append(result)
        prefix = (f"round {round_index + 1}/{args.rounds} {workload:9s} {row:12s} "
                  f"{side}@{env:8s}")
        if "error" in result:
            log(f"{prefix} FAILED {result['error']}")
        elif row == "driver":
            log(f"{prefix} first step {result['first_step_s']:.2f} s  peak RSS "
                f"{result['peak_rss_mib']:.0f} MiB")
        elif row == "eval":
            log(f"{prefix} {result['steps_per_sec']:10.1f} steps/s (call), "
                f"{result['wall_steps_per_sec']:.1f} (wall)")
        elif row == VISION_ROW:
            log(f"{prefix} {result['steps_per_sec']:10.2f} steps/s "
                f"{result['images_per_sec']:.1f} images/s")
        else:
            log(f"{prefix} {result['steps_per_sec']:10.1f} steps/s")

    vision_models = list(getattr(args, "vision_models", ()))
    data_dir = None
    if vision_models:
        data_dir = getattr(args, "vision_data_dir", None) or os.path.join(
            tempfile.gettempdir(), "lite_vision_bench")
        error = write_vision_data(pythons["project"], data_dir, args.timeout)
        if error:
            log(f"vision rows not measured: {error}")
            vision_models = []

    rounds_run = 0
    for round_index in range(args.rounds):
        elapsed = time.perf_counter() - started
        if round_index and elapsed * (round_index + 1) / round_index > 60.0 * args.max_minutes:
            log(f"stopping after {round_index} round(s): another would end after "
                f"--max_minutes {args.max_minutes:g}")
            break
        rounds_run += 1
        for workload in args.workloads:
            for side, env, kind in round_plan(workload, args, pythons, round_index):
                if time.perf_counter() - started > 60.0 * args.max_minutes:
                    log(f"stopping in round {round_index + 1}: past --max_minutes "
                        f"{args.max_minutes:g}")
                    return records, rounds_run
                python = pythons[env]
                if kind == "raw":
                    record(round_index, workload, "raw", "raw", env,
                           measure_raw(workload, args.smoke, python, args.timeout))
                elif kind == "rows":
                    results = measure_rows(side, workload, framework_rows, args.smoke, python,
                                           args.timeout)
                    for row, result in results.items():
                        record(round_index, workload, row, side, env, result)
                else:
                    record(round_index, workload, "driver", side, env,
                           measure_driver(side, workload, python, args.timeout))
        if not vision_models:
            continue
        for side, env, model in vision_plan(args, pythons, round_index):
            if time.perf_counter() - started > 60.0 * args.max_minutes:
                log(f"stopping in round {round_index + 1}: past --max_minutes "
                    f"{args.max_minutes:g}")
                return records, rounds_run
            record(round_index, vision_workload(model), VISION_ROW, side, env,
                   measure_vision(side, model, pythons[env], data_dir, args.timeout))
    return records, rounds_run


def _versions(records):
    """The versions each side@env reported (its first result)."""
    versions = {}
    for r in records:
        if "versions" in r:
            versions.setdefault(f"{r['side']}@{r['env']}", r["versions"])
    return versions


def _git(*args):
    try:
        return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                              timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def default_results_path(date, commit, dirty):
    """benchmarks/results/<date>-<commit>[-dirty][-N].json, never an existing file."""
    stem = f"{date}-{commit[:7] or 'nogit'}{'-dirty' if dirty else ''}"
    path, n = os.path.join(RESULTS_DIR, stem + ".json"), 2
    while os.path.exists(path):
        path, n = os.path.join(RESULTS_DIR, f"{stem}-{n}.json"), n + 1
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds, the order of the sides reversed every other one "
                        "(default 3: ~12 min on 2 cores with the TFM venv)")
    parser.add_argument("--max_minutes", type=float, default=20.0,
                        help="start no round that would end after this many minutes "
                        "(judged on the mean round so far; default 20)")
    parser.add_argument("--workloads", nargs="+", default=None,
                        choices=sorted(workloads.WORKLOADS),
                        help="default: all (with --smoke: " + " ".join(workloads.SMOKE_WORKLOADS)
                        + ")")
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=ROWS)
    parser.add_argument("--out", default=os.path.join(REPO_ROOT, "bench_out"),
                        help="folder for results.md (and, with --smoke, results.json); "
                        "default bench_out/")
    parser.add_argument("--results", default=None,
                        help="results file to write (default: benchmarks/results/"
                        "<date>-<commit>.json; with --smoke: OUT/results.json)")
    parser.add_argument("--label", default="",
                        help="a note printed above the tables, e.g. 'preliminary: loaded machine'")
    parser.add_argument("--smoke", action="store_true",
                        help="1 round and the fewest loops that still time (CI)")
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter of the project's environment (lite and raw sides)")
    parser.add_argument("--tfm_python", default=DEFAULT_TFM_PYTHON,
                        help="interpreter of the TFM venv (default .tfm_venv/bin/python); "
                        "lite_launcher and the raw loop also run with it")
    parser.add_argument("--no_tfm", action="store_true", help="do not use the TFM venv")
    parser.add_argument("--vision_models", nargs="*", default=None, choices=VISION_MODELS,
                        help="vision rows to measure (default: " + " ".join(VISION_MODELS)
                        + "; with --smoke: none); give the flag alone for none")
    parser.add_argument("--no_vision", action="store_true", help="no vision rows")
    parser.add_argument("--vision_envs", nargs="+", default=["tfm"], choices=ENVS,
                        help="environments of the vision rows' lite and raw sides (default: "
                        "tfm, TFM's TensorFlow; the project's when there is no TFM venv)")
    parser.add_argument("--resnet50_rounds", type=int, default=VISION_ROUNDS["resnet50"],
                        help="the first N rounds measure the ResNet-50 vision row (default "
                        f"{VISION_ROUNDS['resnet50']}: it is slow on CPU)")
    parser.add_argument("--vision_data_dir", default=None,
                        help="the vision rows' synthetic TFRecords (written if missing; "
                        "default: <tmp>/lite_vision_bench)")
    parser.add_argument("--timeout", type=int, default=600,
                        help="seconds allowed for one measurement process")
    args = parser.parse_args(argv)
    if args.smoke:
        args.rounds = 1
    if args.workloads is None:
        args.workloads = list(workloads.SMOKE_WORKLOADS if args.smoke else workloads.WORKLOADS)
    if args.rounds < 1:
        parser.error(f"--rounds ({args.rounds}) must be >= 1")
    if args.no_vision or (args.smoke and args.vision_models is None):
        args.vision_models = []
    elif args.vision_models is None:
        args.vision_models = list(VISION_MODELS)
    if args.resnet50_rounds < 0:
        parser.error(f"--resnet50_rounds ({args.resnet50_rounds}) must be >= 0")
    args.vision_rounds = dict(VISION_ROUNDS, resnet50=args.resnet50_rounds)

    pythons = {"project": args.python}
    if not args.no_tfm and os.path.exists(args.tfm_python):
        pythons["tfm"] = args.tfm_python
    elif not args.no_tfm:
        print(f"TFM not measured: {args.tfm_python} does not exist "
              f"(create it with `bash benchmarks/setup_tfm_env.sh`).", flush=True)
    if "tfm" not in pythons and "project" not in args.vision_envs:
        args.vision_envs = ["project"]

    now = datetime.datetime.now(datetime.timezone.utc)
    commit = _git("rev-parse", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    started = time.time()
    loadavg_start = " ".join(f"{x:.2f}" for x in os.getloadavg())
    stops = []

    def log(msg):
        print(msg, flush=True)
        if msg.startswith("stopping"):
            stops.append(msg)

    records, rounds_run = run_rounds(args, pythons, log=log)
    meta = {
        "date": now.strftime("%Y-%m-%d %H:%M"),
        "commit": commit,
        "dirty": dirty,
        "command": " ".join(["benchmarks/run.py"] + (argv if argv is not None else sys.argv[1:])),
        "label": args.label,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU(s), {platform.system()}",
        # The CPU and the oneDNN choice the processes inherit (issue 21: rows differ by both).
        "cpu_model": vision_rows.cpu_model(),
        "tf_enable_onednn_opts": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
        "loadavg_start": loadavg_start,
        "loadavg_end": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "rounds": rounds_run,
        "rounds_requested": args.rounds,
        "stopped": "; ".join(stops),
        "smoke": args.smoke,
        "workloads": args.workloads,
        "rows": args.rows,
        "vision": {"models": args.vision_models, "workloads": [
            vision_workload(m) for m in args.vision_models],
            "envs": args.vision_envs, "steps_per_loop": VISION_STEPS_PER_LOOP,
            "warmup_loops": vision_rows.WARMUP_LOOPS,
            "loops": {m: VISION_LOOPS[m] for m in args.vision_models},
            "rounds": {m: args.vision_rounds[m] for m in args.vision_models},
            "batch": vision_rows.BATCH, "image_size": vision_rows.IMAGE_SIZE},
        "tfm": pythons.get("tfm"),
        "versions": _versions(records),
        "failures": sum(1 for r in records if "error" in r),
        "elapsed_s": time.time() - started,
    }
    if args.results:
        results_path = args.results
    elif args.smoke:
        results_path = os.path.join(args.out, "results.json")
    else:
        results_path = default_results_path(now.strftime("%Y-%m-%d"), commit, dirty)
    data = {"meta": meta, "records": records}
    text, summary, checks = report.markdown(
        data, source=report.display_path(results_path, REPO_ROOT))
    # The summary and targets are stored for reading; report.py recomputes them from records.
    data.update(summary=summary, targets=checks)
    os.makedirs(os.path.dirname(os.path.abspath(results_path)), exist_ok=True)
    with open(results_path, "w") as f:
        json.dump(data, f, indent=1)
    os.makedirs(args.out, exist_ok=True)
    md_path = os.path.join(args.out, "results.md")
    with open(md_path, "w") as f:
        f.write(text)
    print(text)
    print(f"wrote {results_path} and {md_path} in {meta['elapsed_s']:.0f} s")
    return 1 if meta["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
