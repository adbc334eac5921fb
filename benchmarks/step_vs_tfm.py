"""Lite's Trainer against TFM's in ONE process, calls alternating: the vision rows without the
process-to-process noise.

`vision_suite.py` runs each side in its own process, as users run them; on a shared VM two
processes a minute apart differ by ±20-40 % (same code), so a 5-round median cannot tell a 5 %
difference from the noise. Here, in TFM's venv (TensorFlow 2.20 with both Keras 3 and tf_keras),
one process per model and dtype builds lite_launcher's `Trainer` and TFM's `base_trainer.Trainer`
from the same experiment and overrides as `vision_rows.py` (64x64 synthetic JPEG TFRecords,
batch 16, each side's own input pipeline, task, model, optimizer and metrics), traces both,
then calls `trainer.train(steps)` (and `trainer.evaluate(eval_steps)`) of the two in turn,
lite first in even rounds and TFM first in odd ones. Whatever load the machine has falls on both
sides alike, and each ratio is taken within a round. What is left out is the outer loop
(Controller / Orbit: summaries, checkpoints, actions), which `run.py` measures on its own.

The mixed-precision policy is global per library: lite's (Keras 3) is set as `lite-train`
sets it, TFM's (tf_keras) as its `train.py` sets it, both before either model is built.

    .venv/bin/python benchmarks/step_vs_tfm.py --rounds 8         # every model, float32 + bf16
    .venv/bin/python benchmarks/step_vs_tfm.py --report benchmarks/results/FILE.json
    .venv/bin/python benchmarks/report.py benchmarks/results/FILE.json --update benchmarks/README.md
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)
sys.path.insert(0, _HERE)

import detection_rows  # noqa: E402
import eval_graph  # noqa: E402
import measure  # noqa: E402
import rounds as rounds_lib  # noqa: E402
import row_params  # noqa: E402
import video_rows  # noqa: E402
import vision_rows  # noqa: E402

MODELS = tuple(vision_rows.MODELS) + tuple(detection_rows.MODELS)
DTYPES = vision_rows.DTYPES
SIDES = ("lite", "tfm")
RESULTS_DIR = os.path.join(_HERE, "results")
# oneDNN on for both (TensorFlow's own default on this benchmark's CPUs; lite-train sets it too).
ENV = {"TF_ENABLE_ONEDNN_OPTS": "1", "PYTHONUNBUFFERED": "1"}
TARGET = 1.0  # issue 31: lite >= TFM on every like-for-like row
# Rows defined in a module of their own with detection_rows' interface (issue 53's video).
ROW_MODULES = {model: video_rows for model in video_rows.MODELS}
MODELS += tuple(ROW_MODULES)


def round_order(round_index):
    """Lite first in even rounds, TFM first in odd ones."""
    return rounds_lib.round_order(SIDES, round_index)


def plan(models, dtypes):
    """One child process per (model, dtype): the policy is global per process."""
    return [(model, dtype) for model in models for dtype in dtypes]


def child_command(python, model, dtype, args):
    return [python, os.path.abspath(__file__), "--child", "--models", model, "--dtypes", dtype,
            "--rounds", str(args.rounds), "--steps", str(args.steps),
            "--eval_steps", str(args.eval_steps), "--data_dir", args.data_dir] + (
                ["--profile", "--profile_by", getattr(args, "profile_by", "type")]
                if getattr(args, "profile", False) else [])


# ------------------------------------------------------------------ child (TFM's venv)
def _params_and_task(side, model, dtype, input_glob, steps, eval_steps):
    model_dir = tempfile.mkdtemp(prefix=f"{side}_step_vs_tfm_")
    if model in ROW_MODULES:
        rows = ROW_MODULES[model]
        return getattr(row_params, f"{side}_params_and_task")(
            rows.MODELS[model][0], rows.overrides(model, input_glob, steps, dtype, eval_steps),
            model_dir)
    if model in detection_rows.MODELS:
        build = getattr(detection_rows, f"{side}_params_and_task")
        return build(model, input_glob, steps, model_dir, dtype, eval_steps=eval_steps)
    build = getattr(vision_rows, f"{side}_params_and_task")
    return build(model, input_glob, steps, 1, False, model_dir, dtype, eval_steps=eval_steps)


def _lite_trainer(model, dtype, input_glob, steps, eval_steps):
    import lite_launcher as ll

    params, task = _params_and_task("lite", model, dtype, input_glob, steps, eval_steps)
    return ll.create_trainer(params, task, train=True, evaluate=bool(eval_steps))


def _tfm_trainer(model, dtype, input_glob, steps, eval_steps):
    from official.core import train_utils

    params, task = _params_and_task("tfm", model, dtype, input_glob, steps, eval_steps)
    return train_utils.create_trainer(params, task, train=True, evaluate=bool(eval_steps))


def workload_name(model):
    """The results' workload name: the experiment, then the model."""
    if model in ROW_MODULES:
        return f"{ROW_MODULES[model].MODELS[model][0]}_{model}"
    if model in detection_rows.MODELS:
        return f"{detection_rows.MODELS[model][0]}_{model}"
    return vision_rows.workload_name(model)


def measure_in_process(model, dtype, input_glob, rounds, steps, eval_steps, profile=False,
                       profile_by="type"):
    """Both trainers in this process; train (and eval) calls alternating. One record; with
    `profile`, each side's op time of one more call of each kind (`op_ms_per_step`), keyed
    by op type or, with `profile_by="name"`, by "op_name:OpType"."""
    import keras
    import tensorflow as tf
    import tf_keras

    trainers = {"lite": _lite_trainer(model, dtype, input_glob, steps, eval_steps),
                "tfm": _tfm_trainer(model, dtype, input_glob, steps, eval_steps)}
    n_train = tf.constant(steps, tf.int32)
    n_eval = tf.constant(eval_steps, tf.int32)
    # --steps 0: the eval rows alone (a Mask R-CNN training step is ~100 eval steps).
    calls = {side: ({"train": (lambda t=t: t.train(n_train))} if steps else {})
             for side, t in trainers.items()}
    if eval_steps:
        for side, t in trainers.items():
            calls[side]["eval"] = lambda t=t: t.evaluate(n_eval)
    first_s = {}
    for side in SIDES:  # trace, then one more untimed call: one-time work after tracing
        first_s[side] = {kind: rounds_lib.timed(call) for kind, call in calls[side].items()}
        for call in calls[side].values():
            rounds_lib.timed(call)
    per_round = rounds_lib.alternate_calls(calls, SIDES, rounds,
                                           {"train": steps, "eval": eval_steps},
                                           label=f"{model} {dtype}")
    record = {"workload": workload_name(model), "model": model, "dtype": dtype,
              "row": "step_vs_tfm", "steps": steps, "eval_steps": eval_steps,
              "rounds": per_round, "first_call_s": first_s,
              "policies": {"lite": keras.mixed_precision.global_policy().name,
                           "tfm": tf_keras.mixed_precision.global_policy().name},
              "versions": {"lite": vision_rows._versions("lite"),
                           "tfm": vision_rows._versions("tfm")}}
    record.update(vision_rows.compute_state(False, dtype))
    if eval_steps and model in detection_rows.MODELS:
        record["eval_step_graph"] = eval_step_graphs(trainers, model)
    if profile:
        units = {"train": steps, "eval": eval_steps}
        record["profile_by"] = profile_by
        record["op_ms_per_step"] = {side: {kind: profile_call(call, units[kind], side,
                                                              profile_by)
                                           for kind, call in calls[side].items()}
                                    for side in SIDES}
    return record


def eval_step_graphs(trainers, model):
    """{side: eval_graph.check of the eval step its `evaluate` called}: whether the timed step
    keeps the model, the detection NMS (and the mask head), per side, with the op types kept
    and pruned. A side whose step cannot be traced again records the error."""
    checks = {}
    for side, trainer in trainers.items():
        try:
            checks[side] = eval_graph.check_trainer(
                trainer, masks=model in detection_rows.WITH_MASKS, timed=True)
        except Exception as error:  # pylint: disable=broad-except  (recorded, not fatal)
            checks[side] = {"ok": False, "missing": ["trace"], "error": repr(error)[:500]}
    return checks


def profile_call(call, steps, side, by="type"):
    """{op type (or "op_name:OpType" with by="name"): ms per step} of one more call (train or
    eval) under tf.profiler (host ops summed over threads, largest first): where a side's step
    spends its time."""
    import tensorflow as tf
    import vision_profile  # pylint: disable=import-outside-toplevel

    logdir = tempfile.mkdtemp(prefix=f"{side}_step_vs_tfm_trace_")
    tf.profiler.experimental.start(logdir)
    try:
        rounds_lib.timed(call)
    finally:
        tf.profiler.experimental.stop()
    totals, _ = vision_profile.xspace_ops(logdir, by)
    return {op: round(us / 1000.0 / steps, 3) for op, us in totals.most_common()}


# ------------------------------------------------------------------ report
def ratios(record, kind):
    """Lite/TFM speed (TFM's ms per step over lite's) per round, for `kind` train or eval."""
    return [r["ms_per_step"]["tfm"][kind] / r["ms_per_step"]["lite"][kind]
            for r in record["rounds"] if kind in r["ms_per_step"]["lite"]]


def summarize(record, kind):
    values = ratios(record, kind)
    if not values:
        return None
    ms = {side: statistics.median(r["ms_per_step"][side][kind] for r in record["rounds"])
          for side in SIDES}
    return {**rounds_lib.spread(values),
            "lite_wins": sum(v > 1.0 for v in values), "rounds": len(values),
            "lite_ms": ms["lite"], "tfm_ms": ms["tfm"]}


def _dtype_speedup(records, model, side, kind):
    """bf16 over float32 speed of one side (median ms per step ratio), or None."""
    by_dtype = {r["dtype"]: r for r in records if r["model"] == model}
    if not {"float32", "bfloat16"} <= set(by_dtype):
        return None
    f32, bf16 = (summarize(by_dtype[d], kind) for d in ("float32", "bfloat16"))
    if f32 is None or bf16 is None:  # an eval-only run (--steps 0)
        return None
    return f32[f"{side}_ms"] / bf16[f"{side}_ms"]


def render(results):
    """Markdown: per model, dtype and kind, ms per step of each side, lite/TFM per round
    (median [min-max], rounds lite won), the >= 1.0 target; then bf16/fp32 per side."""
    records = results["records"]
    machine = records[0] if records else {}
    flags = machine.get("cpu_flags") or {}
    lines = [f"From `{results.get('file', 'results')}`: {results.get('started', '?')}, commit "
             f"`{results.get('commit', '?')}`, {machine.get('cpu_model', 'CPU not recorded')}, "
             f"{machine.get('cpus', '?')} CPU(s), oneDNN "
             f"{'on' if machine.get('onednn') else 'off'}, XLA off, AMX "
             f"{'yes' if flags.get('amx_bf16') else 'no'}, AVX-512 BF16 "
             f"{'yes' if flags.get('avx512_bf16') else 'no'}; both trainers in one process "
             f"per row, calls alternating, {results.get('rounds', '?')} rounds.", "",
             "| model | dtype | loop | lite ms/step | TFM ms/step | lite/TFM median [min–max] "
             "| rounds lite faster | ≥ 1.0 |", "|---|---|---|---|---|---|---|---|"]
    passed = total = 0
    for record in records:
        for kind in ("train", "eval"):
            s = summarize(record, kind)
            if s is None:
                continue
            total += 1
            ok = s["median"] >= TARGET
            passed += ok
            lines.append(f"| {record['model']} | {record['dtype']} | {kind} | "
                         f"{s['lite_ms']:.1f} | {s['tfm_ms']:.1f} | {s['median']:.3f} "
                         f"[{s['min']:.3f}–{s['max']:.3f}] | {s['lite_wins']}/{s['rounds']} | "
                         f"{'pass' if ok else 'MISS'} |")
    lines += ["", f"{passed} of {total} rows ≥ 1.0 on the median."]
    for record in records:
        for side, check in sorted((record.get("eval_step_graph") or {}).items()):
            if not check.get("ok"):
                lines.append(f"- {record['model']} {record['dtype']}: {side}'s eval step does "
                             f"not keep {', '.join(check.get('missing', []))} (pruned).")
    lines += ["",
              "| model | bf16/fp32 train, lite | bf16/fp32 train, TFM |", "|---|---|---|"]
    for model in dict.fromkeys(r["model"] for r in records):
        lite, tfm = (_dtype_speedup(records, model, side, "train") for side in SIDES)
        if lite is not None:
            lines.append(f"| {model} | {lite:.2f} | {tfm:.2f} |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ parent
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=DTYPES)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=5,
                        help="train steps per timed call (0: no train rows)")
    parser.add_argument("--eval_steps", type=int, default=10,
                        help="eval steps per timed call (0: no eval rows)")
    parser.add_argument("--tfm_python", default=vision_rows.DEFAULT_TFM_PYTHON)
    parser.add_argument("--data_dir", default=os.path.join(tempfile.gettempdir(),
                                                           "lite_vision_bench"))
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per process")
    parser.add_argument("--out", default=None, help="results JSON (default benchmarks/results/"
                        "<UTC date>-<commit>-step-vs-tfm.json)")
    parser.add_argument("--list", action="store_true", help="print the processes and exit")
    parser.add_argument("--report", default=None, metavar="FILE",
                        help="print the tables of a results file and exit")
    parser.add_argument("--profile", action="store_true",
                        help="after the rounds, one more call per side and kind under "
                        "tf.profiler: op time by type (op_ms_per_step in the record)")
    parser.add_argument("--profile_by", choices=("type", "name"), default="type",
                        help="key the profile by op type or by op name (which layer)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.steps < 0 or args.eval_steps < 0 or not (
            args.steps or args.eval_steps):
        parser.error("--rounds must be >= 1, --steps and --eval_steps >= 0, not both 0")
    if args.report:
        with open(args.report) as f:
            results = json.load(f)
        results.setdefault("file", args.report)
        print(render(results), end="")
        return 0
    if args.list:
        for model, dtype in plan(args.models, args.dtypes):
            print(" ".join(child_command(args.tfm_python, model, dtype, args)))
        return 0
    if args.child and args.models[0] in ROW_MODULES:
        input_glob = ROW_MODULES[args.models[0]].input_glob_for(args.models[0], args.data_dir)
        measure.emit(measure_in_process(args.models[0], args.dtypes[0], input_glob,
                                        args.rounds, args.steps, args.eval_steps,
                                        args.profile, args.profile_by))
        return 0
    if args.child:
        if args.models[0] in detection_rows.MODELS:
            input_glob = detection_rows.input_glob_for(args.models[0], args.data_dir)
        else:
            input_glob = vision_rows.write_synthetic_tfrecords(args.data_dir)
        measure.emit(measure_in_process(args.models[0], args.dtypes[0], input_glob,
                                        args.rounds, args.steps, args.eval_steps,
                                        args.profile, args.profile_by))
        return 0
    if not os.path.exists(args.tfm_python):
        parser.error(f"--tfm_python {args.tfm_python} does not exist: run "
                     "`bash benchmarks/setup_tfm_env.sh` first")
    commit = subprocess.run(["git", "-C", _ROOT, "rev-parse", "--short=7", "HEAD"],
                            capture_output=True, text=True, check=False).stdout.strip()
    started = datetime.datetime.now(datetime.timezone.utc)
    out = args.out or os.path.join(
        RESULTS_DIR, f"{started:%Y-%m-%d}-{commit or 'nocommit'}-step-vs-tfm.json")
    results = {"kind": "step_vs_tfm", "commit": commit, "started": f"{started:%Y-%m-%d %H:%M} UTC",
               "rounds": args.rounds, "command": sys.argv, "records": [], "failures": []}
    env = dict(os.environ, **ENV)
    env.pop("PYTHONPATH", None)  # the child puts this checkout first itself (vision_rows)
    for model, dtype in plan(args.models, args.dtypes):
        command = child_command(args.tfm_python, model, dtype, args)
        proc = subprocess.run(command, env=env, cwd=_ROOT, capture_output=True, text=True,
                              timeout=args.timeout, check=False)
        records = measure.parse_results(proc.stdout)
        if proc.returncode or not records:
            results["failures"].append({"model": model, "dtype": dtype,
                                        "returncode": proc.returncode,
                                        "stderr_tail": proc.stderr[-2000:]})
            print(f"{model} {dtype}: FAILED (exit {proc.returncode})", file=sys.stderr)
            continue
        results["records"].extend(records)
        with open(out, "w") as f:  # after every process: a cut-short run keeps what it measured
            json.dump(results, f, indent=1)
        kind = "train" if args.steps else "eval"
        s = summarize(records[0], kind)
        print(f"{model} {dtype}: {kind} lite/TFM {s['median']:.3f} "
              f"[{s['min']:.3f}-{s['max']:.3f}]", file=sys.stderr, flush=True)
    results["file"] = os.path.relpath(out, _ROOT)
    with open(out, "w") as f:
        json.dump(results, f, indent=1)
    print(render(results), end="")
    return 1 if results["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
