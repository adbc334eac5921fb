"""How long an evaluation's input pipeline takes to start, lite against TFM (issues 41 / 43).

Each `evaluate()` call reads the validation set from the top through a new iterator, so with a
few eval steps per call the iterator's start (tf.data's rewrites of the dataset graph, the map
functions instantiated, the first elements decoded and parsed) is a large part of the eval row
of `step_vs_tfm.py`. Here only the eval dataset of a detection row is built (each side's own
`task.build_inputs(validation_data)`, from the same experiment, overrides and records as
`detection_rows.py`), one process per side and round, sides alternating (lite first in even
rounds), all in TFM's venv (one TensorFlow for both). Per process: `--iterators` times, the
time of `iter(dataset)` and of its first `--batches` batches; the process's median is the
round's figure, in wall time and in the process's CPU time (all threads).

    .venv/bin/python benchmarks/eval_input_start.py --models maskrcnn_resnet50_fpn --rounds 6
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)
sys.path.insert(0, _HERE)

import detection_rows  # noqa: E402
import measure  # noqa: E402
import rounds as rounds_lib  # noqa: E402
import vision_rows  # noqa: E402  (puts this checkout on sys.path)

SIDES = ("lite", "tfm")
KINDS = ("iterator_ms", "first_batches_ms", "start_ms", "iterator_cpu_ms", "start_cpu_ms")


def _eval_dataset(side, model, input_glob):
    build = getattr(detection_rows, f"{side}_params_and_task")
    params, task = build(model, input_glob, 1, tempfile.mkdtemp(prefix=f"{side}_eval_input_"),
                         eval_steps=1)
    return task.build_inputs(params.task.validation_data)


def function_nodes(dataset):
    """Nodes in the dataset graph's function library (the map functions' bodies)."""
    import tensorflow as tf

    graph = tf.compat.v1.GraphDef.FromString(dataset._as_serialized_graph().numpy())  # pylint: disable=protected-access
    return sum(len(f.node_def) for f in graph.library.function)


def measure_child(side, model, input_glob, iterators, batches):
    """One process's record: per-iterator times and their medians."""
    import numpy as np
    import tensorflow as tf

    start = time.perf_counter()
    dataset = _eval_dataset(side, model, input_glob)
    build_s = time.perf_counter() - start
    times = {kind: [] for kind in KINDS}
    for _ in range(iterators):
        c0, t0 = time.process_time(), time.perf_counter()
        iterator = iter(dataset)
        c1, t1 = time.process_time(), time.perf_counter()
        for _ in range(batches):
            tf.nest.map_structure(np.asarray, next(iterator))
        c2, t2 = time.process_time(), time.perf_counter()
        del iterator
        times["iterator_ms"].append(1000.0 * (t1 - t0))
        times["first_batches_ms"].append(1000.0 * (t2 - t1))
        times["start_ms"].append(1000.0 * (t2 - t0))
        # CPU time of all the process's threads: less swayed by the other sessions' load.
        times["iterator_cpu_ms"].append(1000.0 * (c1 - c0))
        times["start_cpu_ms"].append(1000.0 * (c2 - c0))
    return {"side": side, "model": model, "build_s": build_s, "times": times,
            "median": {kind: statistics.median(v) for kind, v in times.items()},
            "function_nodes": function_nodes(dataset), "loadavg": list(os.getloadavg())}


def summarize(records, kind):
    """Per side the median [min-max] of the rounds' medians, and lite/TFM within a round."""
    by_round = {}
    for r in records:
        by_round.setdefault(r["round"], {})[r["side"]] = r["median"][kind]
    out = {side: rounds_lib.spread([r["median"][kind] for r in records if r["side"] == side])
           for side in SIDES}
    # TFM time / lite time: > 1 where lite starts faster (the repository's lite/TFM sense).
    ratios = [v["tfm"] / v["lite"] for v in by_round.values() if len(v) == 2]
    out["lite_over_tfm"] = rounds_lib.spread(ratios)
    out["rounds_lite_faster"] = sum(x > 1.0 for x in ratios)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["maskrcnn_resnet50_fpn"],
                        choices=list(detection_rows.MODELS))
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--iterators", type=int, default=5, help="iterators per process")
    parser.add_argument("--batches", type=int, default=2, help="batches read per iterator")
    parser.add_argument("--tfm_python", default=vision_rows.DEFAULT_TFM_PYTHON)
    parser.add_argument("--data_dir", default=os.path.join(tempfile.gettempdir(),
                                                           "lite_vision_bench"))
    parser.add_argument("--out", default=None)
    parser.add_argument("--child", default=None, choices=SIDES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        model = args.models[0]
        input_glob = detection_rows.input_glob_for(model, args.data_dir)
        measure.emit(measure_child(args.child, model, input_glob, args.iterators,
                                   args.batches))
        return 0
    commit = subprocess.run(["git", "-C", _ROOT, "rev-parse", "--short=7", "HEAD"],
                            capture_output=True, text=True, check=False).stdout.strip()
    started = datetime.datetime.now(datetime.timezone.utc)
    out = args.out or os.path.join(_HERE, "results",
                                   f"{started:%Y-%m-%d}-{commit}-eval-input-start.json")
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="1", PYTHONUNBUFFERED="1")
    env.pop("PYTHONPATH", None)
    results = {"kind": "eval_input_start", "commit": commit, "command": sys.argv,
               "started": f"{started:%Y-%m-%d %H:%M} UTC", "records": [], "summary": {}}
    for model in args.models:
        records = []
        for r in range(args.rounds):
            for side in rounds_lib.round_order(SIDES, r):
                command = [args.tfm_python, os.path.abspath(__file__), "--child", side,
                           "--models", model, "--iterators", str(args.iterators),
                           "--batches", str(args.batches), "--data_dir", args.data_dir]
                proc = subprocess.run(command, env=env, cwd=_ROOT, capture_output=True,
                                      text=True, check=False)
                record = measure.parse_result(proc.stdout)
                if proc.returncode or record is None:
                    print(proc.stderr[-3000:], file=sys.stderr)
                    return 1
                record["round"] = r
                records.append(record)
                print(f"{model} round {r} {side}: " + "  ".join(
                    f"{k} {v:.0f}" for k, v in record["median"].items())
                    + f"  nodes {record['function_nodes']}  load {record['loadavg'][0]:.1f}",
                    file=sys.stderr, flush=True)
        results["records"].extend(records)
        results["summary"][model] = {kind: summarize(records, kind) for kind in KINDS}
        print(json.dumps({model: results["summary"][model]}, indent=1))
    with open(out, "w") as f:
        json.dump(results, f, indent=1)
    print(f"wrote {os.path.relpath(out, _ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
