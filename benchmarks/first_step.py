"""Time to first step (issue 31) and peak memory (issue 55): a whole driver process, lite's
`lite-train` against TFM's `official/vision/train.py`, from process start to the first training
step finished, and the process's peak resident memory.

One run measures every model (ResNet-50, MobileNetV2, ViT-Ti/16 by default; RetinaNet R50-FPN,
`retinanet_resnet50_fpn`, the detection row of step_vs_tfm.py, on request) on both sides, in
rounds; within a round the sides of a model run back to back, order reversed every other round.
Each side is one fresh process of the real driver, on the same experiment with the same
overrides (TFM's field names: `overrides`), reading the synthetic TFRecords `vision_rows.py`
writes (RetinaNet: those of `detection_rows.py`). The driver's own log is the clock: the parent timestamps each line as it arrives
(children run with PYTHONUNBUFFERED=1) and reads

- `first_step_s`: process start -> the log line of step 1 ("train | step: 1 | steps/sec"),
  which both Orbit's Controller and lite's print after the first inner loop (steps_per_loop 1);
- `startup_s`: process start -> "train | step: 0 | training until step N" (imports, config,
  strategy, task, model, optimizer, dataset, checkpoint restore: all before the first loop);
- `first_loop_s`: that line -> step 1's (tracing, graph optimisation, the first run);
- `steady_step_s`: step `STEPS-1` -> step `STEPS` (one step once everything is warm);
- `trace_compile_s` = first_loop_s - steady_step_s: the step's trace/compile cost alone;
- `peak_rss_mb`: the process's peak resident memory to its exit (wait4's ru_maxrss), read
  the same way for both drivers.

Several lite checkouts can run side by side (`--lite NAME=DIR`, each put first on PYTHONPATH),
so one run is also an A/B of lite before and after a change. Every record carries the CPU
model, the core count, the side's TensorFlow version and oneDNN state (probed once per side in
that side's interpreter and environment), `runtime.enable_xla` and the dtype.

    .venv/bin/python benchmarks/first_step.py --rounds 5
    .venv/bin/python benchmarks/first_step.py --models resnet50 --no_tfm --lite base=/tmp/b lite=.
    .venv/bin/python benchmarks/first_step.py --list         # the processes of one round
    .venv/bin/python benchmarks/first_step.py --report FILE  # the tables of a results file
"""

import argparse
import datetime
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)
sys.path.insert(0, _HERE)

import detection_rows  # noqa: E402
import rounds as rounds_lib  # noqa: E402

# Model -> (experiment, backbone override, input size), the same on both sides. A detection
# model's backbone is its experiment's (None here); its overrides are detection_rows.py's.
MODELS = {
    "resnet50": ("resnet_imagenet", {"resnet": {"model_id": 50}}, 64),
    "mobilenetv2": ("mobilenet_imagenet", {"mobilenet": {"model_id": "MobileNetV2"}}, 64),
    # DeiT's recipe (RandAugment, MixUp/CutMix, AdamW, cosine) with ViT-Ti/16; 64x64 is a 4x4
    # grid of 16-pixel patches, the smallest input that still makes a patch sequence.
    "vit_ti16": ("deit_imagenet_pretrain", {"vit": {"model_name": "vit-ti16"}}, 64),
    # The step_vs_tfm.py detection row (issue 55): 256x256, batch 2, synthetic detection
    # TFRecords in TFM's format.
    "retinanet_resnet50_fpn": ("retinanet_resnetfpn_coco", None, detection_rows.IMAGE_SIZE),
}
DETECTION = ("retinanet_resnet50_fpn",)
DEFAULT_MODELS = ("resnet50", "mobilenetv2", "vit_ti16")
# Targets, lite/TFM medians of per-round ratios: issue 31's 0.45 first step; issue 55's
# first step for ResNet-50 and RetinaNet and peak resident memory (`peak_rss_mb`).
FIRST_STEP_TARGETS = {"resnet50": 0.40, "retinanet_resnet50_fpn": 0.50}
DEFAULT_FIRST_STEP_TARGET = 0.45
RSS_TARGETS = {"resnet50": 0.9, "retinanet_resnet50_fpn": 0.9}
SIDES = ("lite", "tfm")
BATCH = 16
STEPS = 3  # step 1 ends the first loop; steps 2 -> 3 give the steady step
NEVER = 10**9
DEFAULT_TFM_PYTHON = os.environ.get("TFM_PYTHON", "/work/main/.tfm_venv/bin/python")
STEP_LINE = re.compile(r"train \| step:\s*(\d+) \| steps/sec")
START_LINE = re.compile(r"train \| step:\s*(\d+) \| training until step")
# Like for like: oneDNN on for both drivers (lite-train would set it anyway; TFM's TensorFlow
# decides by CPU), XLA off (TFM compiles only with GPUs; lite compiles a ViT on the CPU).
ENV = {"TF_ENABLE_ONEDNN_OPTS": "1", "PYTHONUNBUFFERED": "1"}
RESULTS_DIR = os.path.join(_HERE, "results")


def loop_overrides(steps=STEPS):
    """1-step loops, `steps` steps, a summary every step, no checkpoint, no eval."""
    return {"steps_per_loop": 1, "train_steps": steps, "summary_interval": 1,
            "checkpoint_interval": NEVER, "validation_interval": NEVER}


def overrides(model, input_glob, steps=STEPS):
    """The model's experiment at its small size, batch 16 (a detection model: detection_rows'
    overrides, batch 2), 1-step loops, no eval, no export; TFM's field names, so the same dict
    overrides lite's and TFM's experiment."""
    experiment, backbone, size = MODELS[model]
    del experiment
    if model in DETECTION:
        # float32 stated: TFM's experiment defaults to bfloat16 (its TPU recipe).
        params = detection_rows.overrides(model, input_glob, steps, dtype="float32")
        params["trainer"] = loop_overrides(steps)
        return params
    return {
        "runtime": {"distribution_strategy": "off", "enable_xla": False},
        "task": {"model": {"input_size": [size, size, 3], "backbone": backbone},
                 "train_data": {"input_path": input_glob, "global_batch_size": BATCH,
                                "shuffle_buffer_size": 256}},
        "trainer": loop_overrides(steps),
    }


def input_glob_for(model, data_dir):
    """The records `model` reads under `data_dir` (vision_rows.py's classification records or
    detection_rows.py's detection records)."""
    if model in DETECTION:
        return os.path.join(data_dir, "detection-*.tfrecord")
    return os.path.join(data_dir, "train-*-of-*")


def write_data_command(python, model, data_dir):
    """The command that writes `model`'s records into `data_dir` (once; the writers skip
    records already there)."""
    if model in DETECTION:
        return [python, "-c", f"import sys; sys.path.insert(0, {_HERE!r}); import "
                f"detection_rows; detection_rows.write_synthetic_tfrecords({data_dir!r})"]
    return [python, os.path.join(_HERE, "vision_rows.py"), "--write_data_only",
            "--data_dir", data_dir]


def lite_command(python):
    """`lite-train` as its console script runs it, in `python` (works in any venv)."""
    return [python, "-c", "import sys; sys.argv[0] = 'lite-train'; "
            "from lite_launcher.commands.train import run; run()"]


def tfm_command(python):
    """TFM's `official/vision/train.py` in TFM's venv."""
    return [python, "-m", "official.vision.train"]


def side_command(side, python, model, input_glob, model_dir):
    """The driver process of one side: its command line (both drivers take TFM's flags)."""
    base = tfm_command(python) if side == "tfm" else lite_command(python)
    return base + ["--experiment", MODELS[model][0], "--mode", "train",
                   "--model_dir", model_dir,
                   "--params_override", json.dumps(overrides(model, input_glob))]


def parse_log(lines, steps=STEPS):
    """The clock from a driver's log: `lines` are (seconds since process start, text).

    Returns startup_s, first_step_s, first_loop_s, steady_step_s, trace_compile_s (None where
    the log lacks the line). Only the first "training until" line counts (a driver may log it
    again after a retry).
    """
    start = None
    step_times = {}
    for t, text in lines:
        if start is None and START_LINE.search(text):
            start = t
            continue
        match = STEP_LINE.search(text)
        if match:
            step_times.setdefault(int(match.group(1)), t)
    first = step_times.get(1)
    steady = None
    if steps in step_times and steps - 1 in step_times:
        steady = step_times[steps] - step_times[steps - 1]
    first_loop = first - start if first is not None and start is not None else None
    trace = first_loop - steady if first_loop is not None and steady is not None else None
    return {"startup_s": start, "first_step_s": first, "first_loop_s": first_loop,
            "steady_step_s": steady, "trace_compile_s": trace}


def _reap(proc, timeout):
    """Waits for `proc` (killed after `timeout` s) with wait4: (exit code, its own rusage)."""
    deadline = time.perf_counter() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, usage
        if time.perf_counter() > deadline:
            proc.kill()
            deadline = float("inf")
        time.sleep(0.02)


def run_process(command, env, timeout, cwd=None):
    """Runs `command`, timestamping each output line (stdout and stderr merged) against the
    moment just before the process was started. Returns (rc, [(t, line)], wall_s, cpu_s,
    peak_rss_mb): cpu_s is the process's user + system CPU time (less sensitive than wall time
    to other processes on a shared machine), peak_rss_mb its peak resident memory (the kernel's
    ru_maxrss of that one process, from wait4: the same reading for both drivers). Linux starts
    an exec'd child's ru_maxrss at its parent's RSS at spawn, so the harness keeps TensorFlow
    out of its own process and records its RSS (`harness_rss_mb`): a floor both sides share."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=env, text=True, bufsize=1, cwd=cwd)
    lines = []
    deadline = start + timeout
    for line in proc.stdout:
        lines.append((time.perf_counter() - start, line.rstrip("\n")))
        if time.perf_counter() > deadline:
            proc.kill()
            break
    rc, usage = _reap(proc, max(1.0, deadline - time.perf_counter()))
    proc.stdout.close()
    return (rc, lines, time.perf_counter() - start, usage.ru_utime + usage.ru_stime,
            usage.ru_maxrss / 1024.0)  # Linux reports kilobytes


_PROBE = """
import json, os
import tensorflow as tf
from tensorflow.python.util import _pywrap_util_port as port
try:
    import lite_launcher
    lite_file = lite_launcher.__file__
except ImportError:
    lite_file = None
print("PROBE " + json.dumps({"tensorflow": tf.__version__, "onednn": bool(port.IsMklEnabled()),
                             "cores": os.cpu_count(), "lite_launcher_file": lite_file}))
"""


def probe(python, env, cwd=None):
    """TensorFlow's version and oneDNN state in `python` with `env` (one short process)."""
    out = subprocess.run([python, "-c", _PROBE], env=env, capture_output=True, text=True,
                         check=False, cwd=cwd)
    for line in out.stdout.splitlines():
        if line.startswith("PROBE "):
            return json.loads(line[len("PROBE "):])
    return {"tensorflow": None, "onednn": None, "probe_error": out.stderr[-500:]}


def cpu_model():
    """The CPU's model name from /proc/cpuinfo (Linux), else platform.processor()."""
    import platform
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def parse_lite_specs(specs):
    """`NAME=DIR` (DIR put first on PYTHONPATH) or a bare DIR (named `lite`) -> {name: dir}."""
    result = {}
    for spec in specs:
        name, _, path = spec.rpartition("=")
        name = name or "lite"
        if name in result or name == "tfm":
            raise SystemExit(f"--lite: the name {name!r} is used twice or is 'tfm'; give each "
                             "checkout its own NAME=DIR.")
        if not os.path.isdir(os.path.join(path, "lite_launcher")):
            raise SystemExit(f"--lite {spec}: {path} has no lite_launcher package; give a "
                             "checkout's root.")
        result[name] = os.path.abspath(path)
    return result


def round_order(sides, round_index):
    """The sides of a model in round `round_index` (0-based): as given, reversed every other
    round."""
    return rounds_lib.round_order(list(sides), round_index)


def plan(models, sides, rounds):
    """Every (round, model, side, position) in run order."""
    return [(r, model, side, i) for r in range(rounds) for model in models
            for i, side in enumerate(round_order(sides, r))]


def side_env(name, lite_dirs):
    env = dict(os.environ)
    env.update(ENV)
    env.pop("PYTHONPATH", None)
    if name in lite_dirs:
        env["PYTHONPATH"] = lite_dirs[name]
    return env


def summarize(records, baseline="tfm"):
    """Per model and side: median [min-max] of each figure; per model and lite side: the
    ratio side/`baseline` of first_step_s taken within each round, median [min-max]."""
    def spread(values):
        values = [v for v in values if v is not None]
        if not values:
            return None
        return {"median": statistics.median(values), "min": min(values), "max": max(values),
                "n": len(values)}

    ok = [r for r in records if r.get("rc") == 0 and r.get("first_step_s") is not None]
    models = sorted({r["model"] for r in ok}, key=list(MODELS).index)
    sides = sorted({r["side"] for r in ok}, key=lambda s: (s == "tfm", s))
    figures = ("first_step_s", "startup_s", "first_loop_s", "trace_compile_s",
               "steady_step_s", "cpu_s", "peak_rss_mb")
    table = {}
    ratios = {}
    for model in models:
        for side in sides:
            mine = [r for r in ok if r["model"] == model and r["side"] == side]
            if mine:
                table[f"{model}/{side}"] = {f: spread([r.get(f) for r in mine])
                                            for f in figures}
        base = {r["round"]: r for r in ok if r["model"] == model and r["side"] == baseline}
        for side in sides:
            if side == baseline:
                continue
            per_round = {}
            for field in ("first_step_s", "trace_compile_s", "cpu_s", "peak_rss_mb"):
                per_round[field] = [
                    r[field] / base[r["round"]][field] for r in ok
                    if r["model"] == model and r["side"] == side and r["round"] in base
                    and r.get(field) is not None and base[r["round"]].get(field)]
            ratios[f"{model}/{side}/{baseline}"] = {f: spread(v) for f, v in per_round.items()}
    return {"table": table, "ratios": ratios}


def _fmt(s, digits=2):
    if not s:
        return "—"
    return f"{s['median']:.{digits}f} [{s['min']:.{digits}f}–{s['max']:.{digits}f}]"


def _verdict(ratio, target):
    if not ratio or target is None:
        return "—"
    return f"<= {target}: " + ("pass" if ratio["median"] <= target else "MISS")


def render(results, baseline="tfm", target=None):
    """Markdown tables of a results dict: seconds and peak RSS per side, then the per-round
    ratios against `baseline` with the targets (first step: `target` if given, else
    FIRST_STEP_TARGETS; peak RSS: RSS_TARGETS)."""
    summary = summarize(results["records"], baseline)
    meta = results.get("machine", {})
    loads = [r["loadavg_1m_before"] for r in results["records"] if "loadavg_1m_before" in r]
    load = f", 1-min load {min(loads):.2f}–{max(loads):.2f}" if loads else ""
    commit = f", commit `{results['commit']}`" if results.get("commit") else ""
    lines = [f"From `{results.get('file', '?')}`: {results.get('started', '?')}{commit}, "
             f"{meta.get('cpu_model', 'CPU not recorded')} ({meta.get('cores', '?')} cores)"
             f"{load}, {results.get('rounds', '?')} round(s); median [min–max] over rounds.", "",
             "| model | side | TF | oneDNN | XLA | dtype | first step (s) | start-up (s) | "
             "first loop (s) | trace+compile (s) | steady step (s) | process CPU to exit (s) | "
             "peak RSS (MB) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    states = {(r["model"], r["side"]): r for r in results["records"]}
    for key, figs in summary["table"].items():
        model, side = key.split("/")
        rec = states.get((model, side), {})
        lines.append(
            f"| {model} | {side} | {rec.get('tensorflow', '?')} | "
            f"{'on' if rec.get('onednn') else 'off' if rec.get('onednn') is False else '?'} | "
            f"{'on' if rec.get('enable_xla') else 'off'} | {rec.get('dtype', '?')} | "
            f"{_fmt(figs['first_step_s'])} | {_fmt(figs['startup_s'])} | "
            f"{_fmt(figs['first_loop_s'])} | {_fmt(figs['trace_compile_s'])} | "
            f"{_fmt(figs['steady_step_s'], 3)} | {_fmt(figs['cpu_s'], 1)} | "
            f"{_fmt(figs['peak_rss_mb'], 0)} |")
    if summary["ratios"]:
        lines += ["", "| model | ratio (per round) | first step | trace+compile | process CPU | "
                  "peak RSS | target first step | target peak RSS |",
                  "|---|---|---|---|---|---|---|---|"]
        for key, figs in summary["ratios"].items():
            model, side, base = key.split("/")
            first, rss = figs["first_step_s"], figs["peak_rss_mb"]
            first_target = (target if target is not None else
                            FIRST_STEP_TARGETS.get(model, DEFAULT_FIRST_STEP_TARGET))
            judged = base == "tfm"
            lines.append(f"| {model} | {side}/{base} | {_fmt(first, 3)} | "
                         f"{_fmt(figs['trace_compile_s'], 3)} | {_fmt(figs['cpu_s'], 3)} | "
                         f"{_fmt(rss, 3)} | "
                         f"{_verdict(first, first_target if judged else None)} | "
                         f"{_verdict(rss, RSS_TARGETS.get(model) if judged else None)} |")
    failed = [r for r in results["records"] if r.get("rc") != 0 or r.get("first_step_s") is None]
    if failed:
        lines += ["", f"{len(failed)} process(es) failed or logged no first step: " + ", ".join(
            f"{r['model']}/{r['side']} round {r['round']} rc={r.get('rc')}" for r in failed)]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS),
                        choices=list(MODELS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lite", nargs="+", default=[_ROOT], metavar="[NAME=]DIR",
                        help="lite checkouts to run (default: this one, named lite)")
    parser.add_argument("--python", default=None,
                        help="lite's interpreter (default: TFM's, so that both sides run the "
                        "same TensorFlow; this one with --no_tfm or without TFM's venv)")
    parser.add_argument("--tfm_python", default=DEFAULT_TFM_PYTHON)
    parser.add_argument("--no_tfm", action="store_true", help="lite checkouts only")
    parser.add_argument("--baseline", default=None,
                        help="the side ratios are taken against (default tfm, or the first "
                        "--lite with --no_tfm)")
    parser.add_argument("--data_dir", default="/tmp/lite_first_step_data")
    parser.add_argument("--work_dir", default="/tmp/lite_first_step_runs")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per process")
    parser.add_argument("--out", default=None, help="results JSON (default benchmarks/results/"
                        "<UTC date>-<commit>-first-step.json)")
    parser.add_argument("--label", default="")
    parser.add_argument("--list", action="store_true", help="print one round's processes")
    parser.add_argument("--report", default=None, metavar="FILE",
                        help="print the tables of a results file and exit")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    if args.report:
        with open(args.report) as f:
            results = json.load(f)
        print(render(results, args.baseline or results.get("baseline", "tfm")))
        return 0
    if args.python is None:
        args.python = (args.tfm_python if not args.no_tfm and os.path.exists(args.tfm_python)
                       else sys.executable)
    lite_dirs = parse_lite_specs(args.lite)
    sides = list(lite_dirs) + ([] if args.no_tfm else ["tfm"])
    baseline = args.baseline or ("tfm" if not args.no_tfm else sides[0])
    if baseline not in sides:
        parser.error(f"--baseline {baseline} is not one of the sides {sides}")
    if args.list:
        for r, model, side, _ in plan(args.models, sides, 1):
            python = args.tfm_python if side == "tfm" else args.python
            path = lite_dirs.get(side, "")
            print(f"{model} {side}: PYTHONPATH={path} " + " ".join(
                side_command(side, python, model, input_glob_for(model, args.data_dir),
                             "MODEL_DIR")))
        return 0
    for command in {tuple(write_data_command(args.python, m, args.data_dir))
                    for m in args.models}:
        subprocess.run(list(command), check=True, env=side_env(sides[0], lite_dirs),
                       capture_output=True)
    commit = subprocess.run(["git", "-C", _ROOT, "rev-parse", "--short=7", "HEAD"],
                            capture_output=True, text=True, check=False).stdout.strip()
    started = datetime.datetime.now(datetime.timezone.utc)
    out = args.out or os.path.join(
        RESULTS_DIR, f"{started:%Y-%m-%d}-{commit or 'nocommit'}-first-step.json")
    # Every child runs in the work dir: `python -c` and `-m` put the working directory first on
    # sys.path, which in a checkout would shadow the PYTHONPATH of the side.
    os.makedirs(args.work_dir, exist_ok=True)
    states = {}
    for side in sides:
        python = args.tfm_python if side == "tfm" else args.python
        states[side] = probe(python, side_env(side, lite_dirs), cwd=args.work_dir)
        if side in lite_dirs and not str(states[side].get("lite_launcher_file", "")).startswith(
                lite_dirs[side] + os.sep):
            raise SystemExit(f"side {side}: lite_launcher comes from "
                             f"{states[side].get('lite_launcher_file')}, not {lite_dirs[side]}")
    machine = {"cpu_model": cpu_model(), "cores": os.cpu_count()}
    results = {"file": os.path.relpath(out, _ROOT), "started": f"{started:%Y-%m-%d %H:%M} UTC",
               "commit": commit, "argv": sys.argv[1:] if argv is None else argv,
               "command": ["benchmarks/first_step.py"] + list(
                   sys.argv[1:] if argv is None else argv),
               "label": args.label, "rounds": args.rounds, "baseline": baseline,
               "machine": machine, "lite_checkouts": lite_dirs, "env": ENV, "records": []}
    os.makedirs(args.work_dir, exist_ok=True)
    for r, model, side, position in plan(args.models, sides, args.rounds):
        python = args.tfm_python if side == "tfm" else args.python
        model_dir = os.path.join(args.work_dir, f"{model}-{side}-r{r}-{os.getpid()}")
        subprocess.run(["rm", "-rf", model_dir], check=False)
        load = os.getloadavg()[0]
        command = side_command(side, python, model, input_glob_for(model, args.data_dir),
                               model_dir)
        rc, lines, wall, cpu, rss = run_process(command, side_env(side, lite_dirs),
                                                args.timeout, cwd=args.work_dir)
        record = {"round": r, "model": model, "side": side, "position": position, "rc": rc,
                  "exit_s": wall, "cpu_s": cpu, "peak_rss_mb": rss,
                  "harness_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "loadavg_1m_before": load, **parse_log(lines),
                  **machine, **states[side], "enable_xla": False, "dtype": "float32",
                  "experiment": MODELS[model][0], "image_size": MODELS[model][2],
                  "batch": detection_rows.BATCH if model in DETECTION else BATCH}
        if rc != 0 or record["first_step_s"] is None:
            record["log_tail"] = [text for _, text in lines[-15:]]
        results["records"].append(record)
        subprocess.run(["rm", "-rf", model_dir], check=False)
        print(f"round {r} {model} {side}: rc={rc} first step {record['first_step_s']} s "
              f"(start-up {record['startup_s']}, trace+compile {record['trace_compile_s']})",
              flush=True)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "w") as f:  # after every process, so an interrupted run keeps its data
            json.dump(results, f, indent=1)
    print(render(results, baseline))
    return 0 if all(r["rc"] == 0 and r["first_step_s"] is not None
                    for r in results["records"]) else 1


if __name__ == "__main__":
    sys.exit(main())
