"""Every vision row of issues 21 and 31 in one run: ResNet-18, ResNet-50, MobileNetV2,
MobileNetV3Large and ViT-Ti/16 (DeiT's recipe), train and eval steps/s, float32 and bfloat16,
lite_launcher vs TFM, like for like and as shipped.

Every process runs one side of one model in one dtype (vision_rows.py), in TFM's venv, so
every side uses TFM's TensorFlow; it trains (2 warm-up + N timed loops), then evaluates twice
(`validation_steps`; the second evaluation is timed): train and eval steps/s from one process.
`runtime.mixed_precision_dtype` is set on both sides (TFM's policy as official/vision/train.py
sets it). Per round, model and dtype the sides run back to back; every other round the whole
order is reversed. Settings:

| setting       | side      | environment                                  | runtime.enable_xla      |
|---------------|-----------|----------------------------------------------|-------------------------|
| as shipped    | lite, tfm | TF_ENABLE_ONEDNN_OPTS unset: lite-train's choice (lite_launcher.common.onednn) / TensorFlow's own | the experiment's |
| like for like | lite, tfm | TF_ENABLE_ONEDNN_OPTS=1                      | false                   |
| raw           | raw       | TF_ENABLE_ONEDNN_OPTS=1 (`--raw_models`)      | false                   |
| input         | lite, tfm | TF_ENABLE_ONEDNN_OPTS=1 (`--input_models`): the training dataset alone, images/s | — |
| probe         | lite, tfm | as shipped + ONEDNN_VERBOSE=1, 3 steps, once before the rounds: which oneDNN kernels ran | — |

Where TensorFlow turns oneDNN on by itself (a CPU with AVX-512 VNNI / BF16 or AMX) and nothing
is XLA-compiled on a CPU, "as shipped" IS "like for like" on both sides: the suite then runs
the as-shipped processes only, and the report uses a process for both settings only where its
record shows that state (oneDNN on, nothing compiled). `--separate_like` runs both anyway.

Every record holds the CPU model, core count, CPU flags (AMX, AVX-512 BF16, ...), the
process's oneDNN state, `enable_xla` and whether the step was compiled, the dtype and the Keras
policy the model was built under, and the load average. Writes
benchmarks/results/<date>-<commit>-vision.json (`kind: vision_suite`);
`report.py FILE --update benchmarks/README.md` renders it.

    python benchmarks/vision_suite.py --list          # the processes and the estimated time
    python benchmarks/vision_suite.py --rounds 5      # every row, ~45 min on 2 idle cores
    python benchmarks/vision_suite.py --smoke         # 1 round, fewest steps: checks each row
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
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)

import measure  # noqa: E402
import rounds as rounds_lib  # noqa: E402
import run  # noqa: E402  (git helpers, results path)
import vision_rows  # noqa: E402

MODELS = ("resnet18", "resnet50", "mobilenetv2", "mobilenetv3large", "vit_ti16")
DTYPES = vision_rows.DTYPES
SETTINGS = ("shipped", "like", "raw", "input")
INPUT_BATCHES = 100
ONEDNN_VAR = "TF_ENABLE_ONEDNN_OPTS"
# Per model: (steps_per_loop, timed loops, eval steps), sized so that a timed train loop and
# the timed evaluation each take ~1-2 s on 2 cores (ResNet-50 ~1.6 steps/s, the others 4-9;
# eval ~3x train), and est. seconds per process (imports, build, two traces, warm-up
# and timed loops), measured on 2 AMD EPYC cores.
SIZES = {"resnet18": (6, 3, 16), "resnet50": (2, 3, 8), "mobilenetv2": (8, 3, 24),
         "mobilenetv3large": (8, 3, 24), "vit_ti16": (6, 3, 24)}
# Median process wall times of the 5-round run on 2 idle AMD EPYC cores
# (results/2026-12-02-944d805-vision.json: 45 min in all).
EST_PROCESS_S = {"resnet18": 16, "resnet50": 24, "mobilenetv2": 21, "mobilenetv3large": 25,
                 "vit_ti16": 36}
# The input pipeline alone; a probe: a process without its timed part (~7 s).
EST_INPUT_S, EST_TIMED_S = 7, 7
SMOKE_SIZE = (1, 1, 2)


def shipped_is_like(cpu_flags):
    """Whether TensorFlow turns oneDNN on by itself on this CPU (AVX-512 VNNI / BF16 or AMX),
    so that as shipped both sides already run the like-for-like state on a CPU."""
    return any(cpu_flags.get(f) for f in ("avx512_vnni", "avx512_bf16", "amx_tile"))


def round_plan(models, dtypes, round_index, separate_like=False, raw_models=(),
               input_models=(), input_rounds=None, model_rounds=None):
    """[(model, dtype, setting, side)] of one round: a model's dtypes and sides back to back;
    every other round the whole list reversed. `model_rounds`: {model: first N rounds only};
    `input_rounds`: the input pipeline alone in the first N rounds only."""
    plan = []
    for m in models:
        if round_index >= (model_rounds or {}).get(m, 10**9):
            continue
        if m in input_models and (input_rounds is None or round_index < input_rounds):
            plan += [(m, "float32", "input", side) for side in ("lite", "tfm")]
        for dtype in dtypes:
            plan += [(m, dtype, "shipped", side) for side in ("lite", "tfm")]
            if separate_like:
                plan += [(m, dtype, "like", side) for side in ("lite", "tfm")]
            if m in raw_models:
                plan.append((m, dtype, "raw", "raw"))
    return rounds_lib.round_order(plan, round_index)


def process_argv(python, model, dtype, setting, side, data_dir, size):
    """(argv, env) of one measurement; `size` = (steps_per_loop, timed loops, eval steps)."""
    steps_per_loop, loops, eval_steps = size
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if setting == "input":
        argv = [python, os.path.join(_HERE, "vision_profile.py"), "--input_only", "--model",
                model, "--side", side, "--batches", str(INPUT_BATCHES), "--data_dir", data_dir]
        env[ONEDNN_VAR] = "1"
        return argv, env
    argv = [python, os.path.join(_HERE, "vision_rows.py"), "--model", model, "--side", side,
            "--dtype", dtype, "--data_dir", data_dir]
    if setting == "probe":
        # 3 one-step loops of training, no evaluation: the kernels, not the speed.
        argv += ["--steps_per_loop", "1", "--loops", "1"]
        env["ONEDNN_VERBOSE"] = "1"
    else:
        argv += ["--steps_per_loop", str(steps_per_loop), "--loops", str(loops)]
        if side != "raw":
            argv += ["--eval_steps", str(eval_steps)]
    if setting in ("shipped", "probe"):
        argv.append("--as_shipped")
        env.pop(ONEDNN_VAR, None)
    else:
        env[ONEDNN_VAR] = "1"
    return argv, env


_VERBOSE_EXEC = re.compile(r"^onednn_verbose,(?:.*?,)?exec,cpu,([^,]+),([^,]*),")
_VERBOSE_TYPE = re.compile(r"(?:^|[ ,])[a-z_]+:([a-z0-9]+):")


def onednn_kernels(stdout):
    """Summary of oneDNN's verbose lines (ONEDNN_VERBOSE=1): executed primitives in total, how
    many had bf16 data, and the count per (primitive kind, implementation, data type)."""
    total, bf16, by_kind = 0, 0, {}
    for line in stdout.splitlines():
        match = _VERBOSE_EXEC.match(line)
        if not match:
            continue
        kind, impl = match.groups()
        # The data types of the memory descriptors ("src:bf16::blocked:..."): "bf16",
        # "f32", or "bf16/f32" for a cast (reorder) or a primitive with f32 parts.
        types = sorted(set(_VERBOSE_TYPE.findall(line)) - {"undef"})
        dtype = "/".join(types) or "other"
        total += 1
        bf16 += "bf16" in types
        key = f"{kind} {impl} {dtype}"
        by_kind[key] = by_kind.get(key, 0) + 1
    return {"primitives": total, "bf16_primitives": bf16,
            "by_kind": dict(sorted(by_kind.items(), key=lambda kv: -kv[1]))}


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
    if env.get("ONEDNN_VERBOSE"):
        result["onednn_kernels"] = onednn_kernels(proc.stdout)
    result["wall_s"] = time.perf_counter() - started
    return result


def estimate_s(plans, probes):
    """Estimated seconds of the run: EST_PROCESS_S per measured process, EST_INPUT_S per
    input-alone process, a process less its timed part per probe."""
    total = sum(EST_INPUT_S if setting == "input" else EST_PROCESS_S[m]
                for plan in plans for m, _, setting, _ in plan)
    return total + sum(EST_PROCESS_S[m] - EST_TIMED_S for m, _, _, _ in probes)


def _describe(result, setting):
    if "error" in result:
        return f"FAILED {result['error']}"
    if setting == "input":
        return f"{result['images_per_sec']:6.1f} images/s (input alone)"
    if setting == "probe":
        k = result["onednn_kernels"]
        return f"oneDNN primitives {k['primitives']}, bf16 {k['bf16_primitives']}"
    text = f"train {result['steps_per_sec']:6.2f}"
    if result.get("eval_steps_per_sec"):
        text += f"  eval {result['eval_steps_per_sec']:6.2f}"
    return (f"{text} steps/s  oneDNN {'on' if result['onednn'] else 'off'}  XLA "
            f"{'compiled' if result.get('xla_compiled') else 'not compiled'}  policy "
            f"{result.get('policy')}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=DTYPES)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--separate_like", action="store_true",
                        help="also run like-for-like processes where as shipped already is "
                        "that state (see the module doc)")
    parser.add_argument("--raw_models", nargs="*", default=[], choices=MODELS,
                        help="models that also get the raw loop (train only)")
    parser.add_argument("--input_models", nargs="*", default=["resnet18"], choices=MODELS,
                        help="models whose input pipeline is also measured alone")
    parser.add_argument("--input_rounds", type=int, default=None,
                        help="the input pipeline alone in the first N rounds only")
    parser.add_argument("--probe_dtypes", nargs="*", default=["bfloat16"], choices=DTYPES,
                        help="dtypes whose oneDNN kernels are probed once per model and side "
                        "(ONEDNN_VERBOSE=1) before the rounds")
    parser.add_argument("--model_rounds", nargs="*", default=[], metavar="MODEL=N",
                        help="measure MODEL in the first N rounds only")
    parser.add_argument("--smoke", action="store_true",
                        help="1 round, 1-step loops, 2 eval steps, 64 images: every row runs")
    parser.add_argument("--tfm_python", default=vision_rows.DEFAULT_TFM_PYTHON)
    parser.add_argument("--data_dir", default=None)
    parser.add_argument("--timeout", type=int, default=600, help="seconds per process")
    parser.add_argument("--results", default=None, help="results file (default: "
                        "benchmarks/results/<date>-<commit>-vision.json)")
    parser.add_argument("--label", default="")
    parser.add_argument("--list", action="store_true",
                        help="print the processes of the first two rounds, the estimated "
                        "duration, and exit")
    args = parser.parse_args(argv)
    try:
        model_rounds = {k: int(v) for k, v in (item.split("=") for item in args.model_rounds)}
    except ValueError:
        parser.error(f"--model_rounds {' '.join(args.model_rounds)}: write MODEL=N, e.g. "
                     "resnet50=3")
    if args.smoke:
        args.rounds = 1
    sizes = {m: SMOKE_SIZE if args.smoke else SIZES[m] for m in args.models}
    data_dir = args.data_dir or os.path.join(
        tempfile.gettempdir(), "lite_vision_bench_smoke" if args.smoke else "lite_vision_bench")
    cpu_flags = vision_rows.cpu_features()
    separate_like = args.separate_like or not shipped_is_like(cpu_flags)
    plans = [round_plan(args.models, args.dtypes, r, separate_like, args.raw_models,
                        args.input_models, args.input_rounds, model_rounds)
             for r in range(args.rounds)]
    probes = [(m, d, "probe", side) for m in args.models for d in args.probe_dtypes
              for side in ("lite", "tfm")]

    if args.list:
        for model, dtype, setting, side in probes:
            command, env = process_argv(args.tfm_python, model, dtype, setting, side, data_dir,
                                        sizes[model])
            print(f"probe {model} {dtype} {side}: ONEDNN_VERBOSE=1 {' '.join(command)}")
        for r, plan in enumerate(plans[:2]):
            for model, dtype, setting, side in plan:
                command, env = process_argv(args.tfm_python, model, dtype, setting, side,
                                            data_dir, sizes[model])
                print(f"round {r + 1} {model} {dtype} {setting} {side}: "
                      f"{ONEDNN_VAR}={env.get(ONEDNN_VAR, '<unset>')} {' '.join(command)}")
        print(f"{sum(map(len, plans))} measured processes in {args.rounds} round(s) + "
              f"{len(probes)} probes; like for like "
              f"{'in separate processes' if separate_like else 'served by as shipped'}; "
              f"estimated {estimate_s(plans, probes) / 60:.0f} min on 2 quiet cores "
              "(EST_PROCESS_S)")
        return 0

    subprocess.run([args.tfm_python, os.path.join(_HERE, "vision_rows.py"),
                    "--write_data_only", "--data_dir", data_dir]
                   + (["--smoke"] if args.smoke else []), check=True, capture_output=True)
    commit = run._git("rev-parse", "HEAD")
    dirty = bool(run._git("status", "--porcelain", "--untracked-files=no"))
    now = datetime.datetime.now(datetime.timezone.utc)
    records, rounds = [], []
    started = time.perf_counter()
    path = args.results or os.path.join(
        run.RESULTS_DIR, f"{now.strftime('%Y-%m-%d')}-{commit[:7]}{'-dirty' if dirty else ''}"
        f"-vision{'-smoke' if args.smoke else ''}.json")

    def save(final=False):
        meta = {"date": now.strftime("%Y-%m-%d %H:%M"), "commit": commit, "dirty": dirty,
                "machine": platform.machine(), "cpu_model": vision_rows.cpu_model(),
                "cpus": os.cpu_count(), "cpu_flags": cpu_flags,
                "command": " ".join(sys.argv), "label": args.label, "smoke": args.smoke,
                "rounds": len(rounds), "rounds_requested": args.rounds, "complete": final,
                "sizes": sizes, "warmup_loops": vision_rows.WARMUP_LOOPS,
                "batch": vision_rows.BATCH, "image_size": vision_rows.IMAGE_SIZE,
                "models": args.models, "dtypes": args.dtypes,
                "shipped_serves_like": not separate_like, "raw_models": args.raw_models,
                "model_rounds": model_rounds, "input_rounds": args.input_rounds,
                "input_models": args.input_models, "input_batches": INPUT_BATCHES,
                "estimated_s": estimate_s(plans, probes),
                "elapsed_s": time.perf_counter() - started}
        with open(path, "w") as f:
            json.dump({"kind": "vision_suite", "meta": meta, "rounds": rounds,
                       "records": records}, f, indent=1)

    def one(r, model, dtype, setting, side):
        command, env = process_argv(args.tfm_python, model, dtype, setting, side, data_dir,
                                    sizes[model])
        load = list(os.getloadavg())
        result = measure_one(command, env, args.timeout)
        result.update(round=r, model=model, dtype=dtype, setting=setting, side=side,
                      loadavg_before=load)
        if setting == "probe" and "error" not in result:
            kernels[(model, dtype, side)] = result["onednn_kernels"]
        elif (model, dtype, side) in kernels:
            # Which kernels a process of this model, dtype and side runs: the probe's count.
            result["onednn_kernels_probe"] = kernels[(model, dtype, side)]
        records.append(result)
        where = "probe" if r is None else f"round {r + 1}/{args.rounds}"
        print(f"{where} {model:16s} "
              f"{dtype:8s} {setting:7s} {side:4s} {_describe(result, setting)}  load "
              f"{load[0]:.1f}", flush=True)
        save()  # a process at a time: nothing is lost

    kernels = {}
    for model, dtype, setting, side in probes:
        one(None, model, dtype, setting, side)
    for r, plan in enumerate(plans):
        round_info = {"round": r, "loadavg_start": list(os.getloadavg()),
                      "order": [f"{m}/{d}/{s}/{side}" for m, d, s, side in plan]}
        for model, dtype, setting, side in plan:
            one(r, model, dtype, setting, side)
        round_info["loadavg_end"] = list(os.getloadavg())
        round_info["elapsed_s"] = time.perf_counter() - started
        rounds.append(round_info)
    save(final=True)
    print(f"wrote {path}")
    return 1 if any("error" in r for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
