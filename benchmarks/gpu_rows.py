"""The benchmark's train rows on one GPU: XLA off and on, float32 / float16 / bfloat16.

    python benchmarks/gpu_rows.py --out DIR            # on a GPU machine (gpu_check.sh runs it)
    python benchmarks/gpu_rows.py --out DIR --cpu      # the same rows, tiny, on the CPU

Each (workload, dtype, XLA) runs lite_launcher's train rows (lite_workloads.py: train
steps_per_loop=100, steps_per_loop=1 with summaries every loop and without) in one new
process, with `runtime` overrides: `num_gpus=1` (0 with --cpu) on the workloads' default
strategy ('off': the whole train step is XLA-compiled, TensorFlow places it on GPU:0),
`enable_xla`, `mixed_precision_dtype`. A process that fails is recorded with its error and the
rest go on; when the time budget is spent the remaining combinations are recorded as skipped
(cnn_small runs first). Writes DIR/gpu_rows.json (every result) and DIR/gpu_rows.md (a table),
and exits 1 if any combination failed (skipped ones are listed, not counted as failures).
"""

import argparse
import datetime
import json
import os
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)

import run  # noqa: E402  (the runner's process helpers)
import workloads  # noqa: E402

DTYPES = ("float32", "float16", "bfloat16")
TRAIN_ROWS = ("train100", "train1", "train1_nosum")


def combinations(workload_names, dtypes):
    """(workload, dtype, enable_xla) in the order they run: XLA off and on side by side."""
    return [(w, dtype, xla) for w in workload_names for dtype in dtypes for xla in (False, True)]


def runtime_overrides(dtype, enable_xla, cpu):
    """The `runtime` config overrides of one combination."""
    return {"num_gpus": 0 if cpu else 1, "enable_xla": enable_xla,
            "mixed_precision_dtype": dtype}


def markdown(records, meta):
    """One line per (workload, dtype, XLA): steps/s of each train row, or why there is none."""
    lines = [f"GPU train rows, {meta['date']} UTC, {meta['device']}, commit "
             f"`{meta['commit'][:10]}`, {meta['elapsed_s']:.0f} s"
             + (" — **CPU dry run: tiny loops, figures are not meaningful**" if meta["cpu"]
                else "") + ".", "",
             "| workload | dtype | XLA | " + " | ".join(f"{r} (steps/s)" for r in TRAIN_ROWS)
             + " |", "|---|---|---|" + "---|" * len(TRAIN_ROWS)]
    for (w, dtype, xla), results in records:
        cells = []
        for row in TRAIN_ROWS:
            r = results.get(row, {})
            cells.append(f"{r['steps_per_sec']:,.0f}" if "steps_per_sec" in r
                         else r.get("error", "—").split(" | ")[-1].replace("|", "/")[:80])
        lines.append(f"| {w} | {dtype} | {'on' if xla else 'off'} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for gpu_rows.json / gpu_rows.md")
    parser.add_argument("--cpu", action="store_true",
                        help="dry run on the CPU (num_gpus=0) with the fewest loops")
    # cnn_small first: the one whose steps are compute, if the budget runs out.
    parser.add_argument("--workloads", nargs="+", default=["cnn_small", "mlp_tiny", "mock"],
                        choices=sorted(workloads.WORKLOADS))
    parser.add_argument("--loops", type=int, default=20,
                        help="timed outer loops of every row (default 20; --cpu: the smoke "
                        "counts)")
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=DTYPES)
    parser.add_argument("--budget_s", type=float, default=300.0,
                        help="no new process starts after this many seconds (default 300)")
    parser.add_argument("--timeout", type=int, default=180,
                        help="seconds allowed for one process (default 180)")
    args = parser.parse_args(argv)

    started = time.time()
    records = []
    for w, dtype, xla in combinations(args.workloads, args.dtypes):
        label = f"{w:9s} {dtype:8s} XLA {'on ' if xla else 'off'}"
        if time.time() - started > args.budget_s:
            results = {row: {"error": f"skipped: the {args.budget_s:.0f} s budget was spent",
                             "skipped": True} for row in TRAIN_ROWS}
        else:
            extra = ["--runtime", json.dumps(runtime_overrides(dtype, xla, args.cpu))]
            if not args.cpu:
                extra += ["--loops", str(args.loops)]
            results = run.measure_rows("lite", w, list(TRAIN_ROWS), smoke=args.cpu,
                                       timeout_s=args.timeout, extra_args=extra)
        records.append(((w, dtype, xla), results))
        print(label + "  " + "  ".join(
            f"{row} {r['steps_per_sec']:,.0f}/s" if "steps_per_sec" in r else f"{row} FAILED"
            for row, r in results.items()), flush=True)
        for row, r in results.items():
            if "error" in r:
                print(f"  {row}: {r['error']}", flush=True)

    versions = next((r["versions"] for _, results in records for r in results.values()
                     if "versions" in r), {})
    gpus = next((r["gpu_devices"] for _, results in records for r in results.values()
                 if "gpu_devices" in r), [])
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "commit": run._git("rev-parse", "HEAD"),
        "cpu": args.cpu,
        "device": ("CPU (dry run)" if args.cpu else f"GPU devices seen by TensorFlow: {gpus}"),
        "versions": versions,
        "elapsed_s": time.time() - started,
    }
    failed = sum("error" in r and not r.get("skipped")
                 for _, results in records for r in results.values())
    skipped = sum(all(r.get("skipped") for r in results.values()) for _, results in records)
    meta["failed_rows"], meta["skipped_combinations"] = failed, skipped
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "gpu_rows.json"), "w") as f:
        json.dump({"meta": meta, "records": [
            {"workload": w, "dtype": dtype, "enable_xla": xla, "results": results}
            for (w, dtype, xla), results in records]}, f, indent=1)
    text = markdown(records, meta)
    with open(os.path.join(args.out, "gpu_rows.md"), "w") as f:
        f.write(text)
    print(text)
    print(f"{failed} row(s) failed; {skipped} combination(s) skipped for time")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
