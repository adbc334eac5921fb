"""The vision rows on one GPU: ResNet-18, ResNet-50, MobileNetV2 x float32/float16/bfloat16 x
XLA off/on (issue 21), lite_launcher's side, one process each (vision_rows.py --side lite).

    python benchmarks/gpu_vision_rows.py --out DIR              # on a GPU machine
    python benchmarks/gpu_vision_rows.py --out DIR --cpu        # dry run: tiny, on the CPU
    python benchmarks/gpu_vision_rows.py --list                 # the processes, nothing run

Each combination runs `vision_rows.py --side lite --model M --dtype D [--xla] --num_gpus 1`
(`runtime.mixed_precision_dtype`, `runtime.enable_xla`, `runtime.num_gpus`; the default
strategy places the step on GPU:0 and, with a GPU, the Trainer XLA-compiles the whole step).
A failed process is recorded with its error; once `--budget_s` is spent the rest are recorded
as skipped. Writes DIR/gpu_vision_rows.json and DIR/gpu_vision_rows.md; exit 1 if any failed.
"""

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)

import measure  # noqa: E402
import run  # noqa: E402  (git helper)

MODELS = ("resnet50", "resnet18", "mobilenetv2")
DTYPES = ("float32", "float16", "bfloat16")


def combinations(models=MODELS, dtypes=DTYPES):
    """(model, dtype, xla) in the order they run: XLA off and on side by side."""
    return [(m, d, x) for m in models for d in dtypes for x in (False, True)]


def command(python, model, dtype, xla, cpu, data_dir):
    argv = [python, os.path.join(_HERE, "vision_rows.py"), "--side", "lite", "--model", model,
            "--dtype", dtype, "--num_gpus", "0" if cpu else "1", "--data_dir", data_dir]
    if xla:
        argv.append("--xla")
    if cpu:  # the fewest steps: the dry run checks that every combination runs
        argv += ["--steps_per_loop", "2", "--loops", "2"]
    return argv


def markdown(records, meta):
    lines = [f"GPU vision rows, {meta['date']} UTC, {meta['device']}, commit "
             f"`{meta['commit'][:10]}`, {meta['elapsed_s']:.0f} s"
             + (" — **CPU dry run: tiny loops, figures are not meaningful**" if meta["cpu"]
                else "") + ". Batch 16, 64×64 synthetic JPEGs, input pipeline included.", "",
             "| model | dtype | XLA | steps/s | images/s |", "|---|---|---|---|---|"]
    for r in records:
        cells = ([f"{r['steps_per_sec']:,.2f}", f"{r['images_per_sec']:,.0f}"]
                 if "steps_per_sec" in r else [r.get("error", "—")[:80].replace("|", "/"), ""])
        lines.append(f"| {r['model']} | {r['dtype']} | {'on' if r['xla'] else 'off'} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="folder for the json / md (required "
                        "unless --list)")
    parser.add_argument("--cpu", action="store_true", help="dry run on the CPU, tiny loops")
    parser.add_argument("--list", action="store_true", help="print the processes and exit")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=DTYPES)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--data_dir", default=os.path.join(tempfile.gettempdir(),
                                                           "lite_vision_bench"))
    parser.add_argument("--budget_s", type=float, default=300.0)
    parser.add_argument("--timeout", type=int, default=300, help="seconds per process")
    args = parser.parse_args(argv)
    combos = combinations(args.models, args.dtypes)
    if args.list:
        for m, d, x in combos:
            print(" ".join(command(args.python, m, d, x, args.cpu, args.data_dir)))
        return 0
    if not args.out:
        parser.error("--out is required (or --list)")
    subprocess.run([args.python, os.path.join(_HERE, "vision_rows.py"), "--write_data_only",
                    "--data_dir", args.data_dir], check=True, capture_output=True)
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    started = time.time()
    records = []
    for m, d, x in combos:
        record = {"model": m, "dtype": d, "xla": x}
        if time.time() - started > args.budget_s:
            record.update(error=f"skipped: the {args.budget_s:.0f} s budget was spent",
                          skipped=True)
        else:
            try:
                proc = subprocess.run(command(args.python, m, d, x, args.cpu, args.data_dir),
                                      capture_output=True, text=True, env=env,
                                      timeout=args.timeout)
                result = measure.parse_result(proc.stdout)
                record.update(result or {"error": f"exit {proc.returncode}: " + " | ".join(
                    proc.stderr.strip().splitlines()[-2:])})
            except subprocess.TimeoutExpired:
                record["error"] = f"timed out after {args.timeout} s"
        records.append(record)
        print(f"{m:11s} {d:8s} XLA {'on ' if x else 'off'}  " + (
            f"{record['steps_per_sec']:.2f} steps/s" if "steps_per_sec" in record
            else record["error"]), flush=True)
    gpus = next((r["gpu_devices"] for r in records if r.get("gpu_devices")), [])
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
            "commit": run._git("rev-parse", "HEAD"), "cpu": args.cpu,
            "device": "CPU (dry run)" if args.cpu else f"GPU devices seen by TensorFlow: {gpus}",
            "elapsed_s": time.time() - started}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "gpu_vision_rows.json"), "w") as f:
        json.dump({"meta": meta, "records": records}, f, indent=1)
    text = markdown(records, meta)
    with open(os.path.join(args.out, "gpu_vision_rows.md"), "w") as f:
        f.write(text)
    print(text)
    failed = sum("error" in r and not r.get("skipped") for r in records)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
