"""A/B of two lite_launcher checkouts on the same rows: did a change make lite slower?

`run.py` compares lite with TFM and a raw loop; a refactor needs lite against itself. This
runs `lite_workloads.py` (this checkout's harness) once per checkout and round, with the
checkout's `lite_launcher` first on `PYTHONPATH`, in alternating order, and reports B/A per
row as the median [min–max] of the per-round steps/s ratios (> 1: B is faster).

    .venv/bin/python benchmarks/ab_checkouts.py --a /path/to/before --b . \\
        --workloads mlp_tiny mock --rows train100 train1 train1_nosum eval --rounds 5

Writes the per-round samples and the summary as JSON (`--out`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)

import run  # noqa: E402  (the row runner of the main harness)
import workloads  # noqa: E402

def _git_head(checkout: str) -> str:
    result = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkout,
                            capture_output=True, text=True, check=False)
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "lite_launcher"],
                           cwd=checkout, capture_output=True, text=True, check=False)
    return result.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def _ratio(row: str, sample: dict):
    """B/A steps/s of `row` in one round (None when either side has no result)."""
    a = sample["a"].get(row, {}).get("steps_per_sec")
    b = sample["b"].get(row, {}).get("steps_per_sec")
    return b / a if a and b else None


def measure_checkout(checkout: str, workload: str, rows, smoke: bool) -> dict:
    """One process measuring `rows` with `checkout`'s lite_launcher: {row: result}."""
    previous = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.path.abspath(checkout)
    try:
        return run.measure_rows("lite", workload, list(rows), smoke=smoke)
    finally:
        if previous is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = previous


def summarise(samples, rows, workloads_):
    """{workload: {row: {"median", "min", "max", "a", "b"}}} of the per-round B/A ratios."""
    summary = {}
    for workload in workloads_:
        for row in rows:
            ratios, a_values, b_values = [], [], []
            for sample in samples:
                if sample["workload"] != workload:
                    continue
                ratio = _ratio(row, sample)
                if ratio is not None:
                    ratios.append(ratio)
                    a_values.append(sample["a"][row]["steps_per_sec"])
                    b_values.append(sample["b"][row]["steps_per_sec"])
            if ratios:
                summary.setdefault(workload, {})[row] = dict(
                    median=statistics.median(ratios), min=min(ratios), max=max(ratios),
                    a=statistics.median(a_values), b=statistics.median(b_values),
                    rounds=len(ratios))
    return summary


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", required=True, help="checkout A (the baseline)")
    parser.add_argument("--b", default=os.path.dirname(_HERE), help="checkout B (default: this)")
    parser.add_argument("--workloads", nargs="+", default=["mlp_tiny", "mock"],
                        choices=sorted(workloads.WORKLOADS))
    parser.add_argument("--rows", nargs="+", default=list(workloads.FRAMEWORK_ROWS),
                        choices=workloads.FRAMEWORK_ROWS)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="fewest loops that still time")
    parser.add_argument("--out", default=None, help="JSON results file")
    args = parser.parse_args(argv)

    started, load_at_start = time.time(), list(os.getloadavg())
    samples = []
    for round_index in range(args.rounds):
        for workload in args.workloads:
            order = ("a", "b") if round_index % 2 == 0 else ("b", "a")
            sample = {"round": round_index, "workload": workload, "order": "".join(order)}
            for side in order:
                sample[side] = measure_checkout(getattr(args, side), workload, args.rows,
                                                args.smoke)
            samples.append(sample)
            ratios = {row: _ratio(row, sample) for row in args.rows}
            print(f"round {round_index + 1}/{args.rounds} {workload} ({sample['order']}): "
                  + ", ".join(f"{row} B/A " + (f"{r:.3f}" if r else "error")
                              for row, r in ratios.items()), flush=True)
    summary = summarise(samples, args.rows, args.workloads)
    data = dict(a=os.path.abspath(args.a), b=os.path.abspath(args.b), a_commit=_git_head(args.a),
                b_commit=_git_head(args.b), rounds=args.rounds, rows=args.rows,
                workloads=args.workloads, machine=dict(cpus=os.cpu_count(),
                                                       platform=platform.platform()),
                load_average_start_end=[load_at_start, list(os.getloadavg())],
                started_utc=time.strftime("%Y-%m-%d %H:%M", time.gmtime(started)),
                minutes=round((time.time() - started) / 60, 1), summary=summary, samples=samples)
    print(f"\nB ({data['b_commit']}) / A ({data['a_commit']}), median [min–max] of per-round "
          f"ratios over {args.rounds} rounds (steps/s: > 1 means B is faster):")
    for workload, rows in summary.items():
        for row, s in rows.items():
            print(f"  {workload:9s} {row:13s} {s['median']:.3f} [{s['min']:.3f}–{s['max']:.3f}]"
                  f"   A {s['a']:,.0f}  B {s['b']:,.0f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(data, f, indent=1)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
