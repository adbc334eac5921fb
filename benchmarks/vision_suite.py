"""The vision rows of issue 21: ResNet-18, ResNet-50, MobileNetV2, as shipped and like for like.

Every process runs one side of one model (vision_rows.py) in TFM's venv, so every side uses
TFM's TensorFlow. Per round and model, the sides run back to back (the load of that minute
falls on all of them), in this order, reversed every other round (and the models too):

| setting      | side | environment                                   | runtime.enable_xla      |
|--------------|------|-----------------------------------------------|-------------------------|
| like for like| lite | TF_ENABLE_ONEDNN_OPTS=1                       | false                   |
| like for like| tfm  | TF_ENABLE_ONEDNN_OPTS=1                       | false                   |
| like for like| raw  | TF_ENABLE_ONEDNN_OPTS=1 (`--raw_models`)      | false                   |
| as shipped   | lite | unset: lite-train's choice (lite_launcher.onednn) | the experiment's (true) |
| as shipped   | tfm  | unset: TensorFlow's own choice                | the experiment's (true) |
| input        | lite, tfm | TF_ENABLE_ONEDNN_OPTS=1 (`--input_models`): the side's own  | —  |
|              |      | training dataset alone (vision_profile.py --input_only), images/s |    |

Each result holds the process's oneDNN state (as TensorFlow loaded it), `enable_xla`, whether
the step was XLA-compiled, the CPU model and the load average; the round's load average at its
start and end is recorded too. Writes benchmarks/results/<date>-<commit>-vision.json
(`kind: vision_suite`); `report.py FILE --update benchmarks/README.md` renders it.

    python benchmarks/vision_suite.py --rounds 3            # ~25 min on 2 loaded cores
    python benchmarks/vision_suite.py --list                # the processes of round 1, no run
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)

import measure  # noqa: E402
import run  # noqa: E402  (git helpers, results path)
import vision_rows  # noqa: E402

MODELS = ("resnet18", "resnet50", "mobilenetv2")
# (setting, side): what each process of a model measures, in round-1 order.
SIDES = (("input", "lite"), ("input", "tfm"), ("like", "lite"), ("like", "tfm"),
         ("like", "raw"), ("shipped", "lite"), ("shipped", "tfm"))
INPUT_BATCHES = 100
ONEDNN_VAR = "TF_ENABLE_ONEDNN_OPTS"


def round_plan(models, raw_models, round_index, input_models=("resnet18",), model_rounds=None,
               lite_once=False, shipped_tfm_models=None, input_rounds=None):
    """[(model, setting, side)] of one round: sides of a model back to back; every other
    round the whole list reversed. `model_rounds`: {model: the first N rounds only}.

    `lite_once`: lite runs once per model and round, as shipped; where its recorded state is
    the like-for-like one (oneDNN on, nothing XLA-compiled) the report uses it for both
    settings. `shipped_tfm_models`: the models whose TFM side also runs as shipped (default
    all); `input_rounds`: the input pipeline alone in the first N rounds only.
    """
    models = [m for m in models if round_index < (model_rounds or {}).get(m, 10**9)]
    inputs = input_rounds is None or round_index < input_rounds

    def wanted(m, setting, side):
        if side == "raw":
            return m in raw_models
        if setting == "input":
            return m in input_models and inputs
        if lite_once and side == "lite" and setting == "like":
            return False
        if setting == "shipped" and side == "tfm" and shipped_tfm_models is not None:
            return m in shipped_tfm_models
        return True

    plan = [(m, setting, side) for m in models for setting, side in SIDES
            if wanted(m, setting, side)]
    return plan[::-1] if round_index % 2 else plan


def process_argv(python, model, setting, side, data_dir, steps_per_loop, loops):
    """(argv, env) of one measurement."""
    argv = [python, os.path.join(_HERE, "vision_rows.py"), "--model", model, "--side", side,
            "--steps_per_loop", str(steps_per_loop), "--loops", str(loops),
            "--data_dir", data_dir]
    if setting == "input":
        argv = [python, os.path.join(_HERE, "vision_profile.py"), "--input_only", "--model",
                model, "--side", side, "--batches", str(INPUT_BATCHES), "--data_dir", data_dir]
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if setting in ("like", "input"):
        env[ONEDNN_VAR] = "1"
    else:
        argv.append("--as_shipped")
        env.pop(ONEDNN_VAR, None)
    return argv, env


def measure_one(argv, env, timeout_s):
    started = time.perf_counter()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env,
                              cwd=os.path.dirname(_HERE))
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s} s"}
    result = measure.parse_result(proc.stdout)
    if result is None:
        tail = " | ".join((proc.stderr or "").strip().splitlines()[-3:])
        return {"error": f"exit {proc.returncode}: {tail}"}
    result["wall_s"] = time.perf_counter() - started
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--raw_models", nargs="*", default=["resnet18"], choices=MODELS,
                        help="models that also get the raw loop (default: resnet18)")
    parser.add_argument("--input_models", nargs="*", default=["resnet18"], choices=MODELS,
                        help="models whose input pipeline is also measured alone")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lite_once", action="store_true",
                        help="lite once per model and round, as shipped (see round_plan)")
    parser.add_argument("--shipped_tfm_models", nargs="*", default=None, choices=MODELS,
                        help="models whose TFM side also runs as shipped (default: all)")
    parser.add_argument("--input_rounds", type=int, default=None,
                        help="the input pipeline alone in the first N rounds only")
    parser.add_argument("--mobilenetv2_rounds", type=int, default=None,
                        help="measure MobileNetV2 in the first N rounds only")
    parser.add_argument("--resnet50_rounds", type=int, default=None,
                        help="measure ResNet-50 in the first N rounds only (default: all; "
                        "~2 s a step on 2 loaded cores)")
    parser.add_argument("--steps_per_loop", type=int, default=4)
    parser.add_argument("--loops", type=int, default=2, help="timed loops per process")
    parser.add_argument("--tfm_python", default=vision_rows.DEFAULT_TFM_PYTHON)
    parser.add_argument("--data_dir", default=os.path.join(tempfile.gettempdir(),
                                                           "lite_vision_bench"))
    parser.add_argument("--timeout", type=int, default=600, help="seconds per process")
    parser.add_argument("--results", default=None, help="results file (default: "
                        "benchmarks/results/<date>-<commit>-vision.json)")
    parser.add_argument("--label", default="")
    parser.add_argument("--list", action="store_true",
                        help="print the processes of the first two rounds and exit")
    args = parser.parse_args(argv)
    model_rounds = {m: n for m, n in (("resnet50", args.resnet50_rounds),
                                      ("mobilenetv2", args.mobilenetv2_rounds)) if n is not None}
    if args.list:
        for r in range(min(2, args.rounds)):
            for model, setting, side in round_plan(args.models, args.raw_models, r,
                                                   args.input_models, model_rounds,
                                                   args.lite_once, args.shipped_tfm_models,
                                                   args.input_rounds):
                command, env = process_argv(args.tfm_python, model, setting, side,
                                            args.data_dir, args.steps_per_loop, args.loops)
                print(f"round {r + 1} {model} {setting} {side}: "
                      f"{ONEDNN_VAR}={env.get(ONEDNN_VAR, '<unset>')} {' '.join(command)}")
        return 0

    subprocess.run([args.tfm_python, os.path.join(_HERE, "vision_rows.py"),
                    "--write_data_only", "--data_dir", args.data_dir], check=True,
                   capture_output=True)
    commit = run._git("rev-parse", "HEAD")
    dirty = bool(run._git("status", "--porcelain", "--untracked-files=no"))
    now = datetime.datetime.now(datetime.timezone.utc)
    records, rounds = [], []
    started = time.perf_counter()
    path = args.results or os.path.join(
        run.RESULTS_DIR, f"{now.strftime('%Y-%m-%d')}-{commit[:7]}{'-dirty' if dirty else ''}"
        "-vision.json")

    def save(records, rounds, final=False):
        meta = {"date": now.strftime("%Y-%m-%d %H:%M"), "commit": commit, "dirty": dirty,
                "machine": platform.machine(), "cpu_model": vision_rows.cpu_model(),
                "cpus": os.cpu_count(), "command": " ".join(sys.argv), "label": args.label,
                "rounds": len(rounds), "rounds_requested": args.rounds, "complete": final,
                "steps_per_loop": args.steps_per_loop, "loops": args.loops,
                "warmup_loops": vision_rows.WARMUP_LOOPS, "batch": vision_rows.BATCH,
                "image_size": vision_rows.IMAGE_SIZE, "models": args.models,
                "raw_models": args.raw_models, "model_rounds": model_rounds,
                "lite_once": args.lite_once, "shipped_tfm_models": args.shipped_tfm_models,
                "input_rounds": args.input_rounds, "input_models": args.input_models,
                "input_batches": INPUT_BATCHES, "elapsed_s": time.perf_counter() - started}
        with open(path, "w") as f:
            json.dump({"kind": "vision_suite", "meta": meta, "rounds": rounds,
                       "records": records}, f, indent=1)
    for r in range(args.rounds):
        round_info = {"round": r, "loadavg_start": list(os.getloadavg()),
                      "order": []}
        for model, setting, side in round_plan(args.models, args.raw_models, r,
                                               args.input_models, model_rounds, args.lite_once,
                                               args.shipped_tfm_models, args.input_rounds):
            command, env = process_argv(args.tfm_python, model, setting, side, args.data_dir,
                                        args.steps_per_loop, args.loops)
            load = list(os.getloadavg())
            result = measure_one(command, env, args.timeout)
            result.update(round=r, model=model, setting=setting, side=side,
                          loadavg_before=load)
            records.append(result)
            round_info["order"].append(f"{model}/{setting}/{side}")
            print(f"round {r + 1}/{args.rounds} {model:11s} {setting:7s} {side:4s} "
                  + (f"FAILED {result['error']}" if "error" in result else
                     f"{result['images_per_sec']:6.1f} images/s (input alone)"
                     if setting == "input" else
                     f"{result['steps_per_sec']:6.2f} steps/s  oneDNN "
                     f"{'on' if result['onednn'] else 'off'}  XLA "
                     f"{'compiled' if result.get('xla_compiled') else 'not compiled'}  load "
                     f"{load[0]:.1f}"), flush=True)
            save(records, rounds + [round_info])  # a process at a time: nothing is lost
        round_info["loadavg_end"] = list(os.getloadavg())
        round_info["elapsed_s"] = time.perf_counter() - started
        rounds.append(round_info)
    save(records, rounds, final=True)
    print(f"wrote {path}")
    failed = sum("error" in r for r in records)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
