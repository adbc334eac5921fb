"""Interleaved A/B of candidate as-shipped defaults for lite's CPU input pipeline and thread
pools (issue 31): which of vision_rows.VARIANTS makes lite's own training faster.

Every variant trains the same model (lite's side of vision_rows.py, as shipped, train only) in
its own process; per round every variant runs once, the order rotated each round, so a change
of load falls on all alike. Per round each variant's steps/s over `base`'s; median [min–max]
over rounds. None of the variants changes what is computed. Writes
benchmarks/results/<date>-<commit>-shipped-ab-<model>.json.

    python benchmarks/shipped_ab.py --rounds 5 --variants base tf_data_1_thread inter_op_1
    python benchmarks/shipped_ab.py --list
"""

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)

import run  # noqa: E402  (git helpers, results path)
import vision_rows  # noqa: E402
import vision_suite  # noqa: E402


def round_order(variants, round_index):
    """The variants rotated by the round: each variant leads once every len(variants) rounds."""
    k = round_index % len(variants)
    return list(variants[k:]) + list(variants[:k])


def command(python, model, dtype, variant, data_dir, size):
    argv, env = vision_suite.process_argv(python, model, dtype, "shipped", "lite", data_dir,
                                          (size[0], size[1], 0))
    i = argv.index("--eval_steps")  # train only
    return argv[:i] + argv[i + 2:] + ["--variant", variant], env


def summarise(records, variants):
    """{variant: stats of the per-round steps/s ratio to base}."""
    by_round = {}
    for r in records:
        if "error" not in r:
            by_round.setdefault(r["round"], {})[r["variant"]] = r["steps_per_sec"]
    out = {}
    for v in variants:
        ratios = [rates[v] / rates["base"] for rates in by_round.values()
                  if v in rates and "base" in rates]
        rates = [rates[v] for rates in by_round.values() if v in rates]
        out[v] = {"ratio_to_base": {"median": statistics.median(ratios), "min": min(ratios),
                                    "max": max(ratios), "n": len(ratios)} if ratios else None,
                  "steps_per_sec": {"median": statistics.median(rates), "min": min(rates),
                                    "max": max(rates)} if rates else None}
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", default=sorted(vision_rows.VARIANTS),
                        choices=sorted(vision_rows.VARIANTS))
    parser.add_argument("--model", default="resnet18", choices=vision_suite.MODELS)
    parser.add_argument("--dtype", default="float32", choices=vision_rows.DTYPES)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tfm_python", default=vision_rows.DEFAULT_TFM_PYTHON,
                        help="the interpreter (TFM's venv: the suite's TensorFlow)")
    parser.add_argument("--data_dir", default=os.path.join(tempfile.gettempdir(),
                                                           "lite_vision_bench"))
    parser.add_argument("--results", default=None)
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args(argv)
    if "base" not in args.variants:
        parser.error("--variants must include base (every ratio is to base)")
    size = vision_suite.SIZES[args.model]
    if args.list:
        for r in range(min(2, args.rounds)):
            for v in round_order(args.variants, r):
                print(f"round {r + 1} {v}: "
                      + " ".join(command(args.tfm_python, args.model, args.dtype, v,
                                         args.data_dir, size)[0]))
        return 0
    commit = run._git("rev-parse", "HEAD")
    now = datetime.datetime.now(datetime.timezone.utc)
    path = args.results or os.path.join(
        run.RESULTS_DIR, f"{now.strftime('%Y-%m-%d')}-{commit[:7]}-shipped-ab-{args.model}.json")
    records = []
    for r in range(args.rounds):
        for v in round_order(args.variants, r):
            argv_, env = command(args.tfm_python, args.model, args.dtype, v, args.data_dir, size)
            load = list(os.getloadavg())
            result = vision_suite.measure_one(argv_, env, 600)
            result.update(round=r, variant=v, loadavg_before=load)
            records.append(result)
            print(f"round {r + 1}/{args.rounds} {v:24s} "
                  + (f"FAILED {result['error']}" if "error" in result
                     else f"{result['steps_per_sec']:.2f} steps/s  load {load[0]:.1f}"),
                  flush=True)
            summary = summarise(records, args.variants)
            with open(path, "w") as f:
                json.dump({"kind": "shipped_ab", "meta": {
                    "date": now.strftime("%Y-%m-%d %H:%M"), "commit": commit,
                    "model": args.model, "dtype": args.dtype, "variants": args.variants,
                    "variant_settings": {v: vision_rows.VARIANTS[v] for v in args.variants},
                    "rounds_requested": args.rounds, "size": size,
                    "cpu_model": vision_rows.cpu_model(), "cpus": os.cpu_count(),
                    "cpu_flags": vision_rows.cpu_features()},
                    "summary": summary, "records": records}, f, indent=1)
    for v, s in summarise(records, args.variants).items():
        ratio = s["ratio_to_base"]
        print(f"{v:24s} ratio to base "
              + (f"{ratio['median']:.3f} [{ratio['min']:.3f}–{ratio['max']:.3f}] (n={ratio['n']})"
                 if ratio else "—"))
    print(f"wrote {path}")
    return 1 if any("error" in r for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
