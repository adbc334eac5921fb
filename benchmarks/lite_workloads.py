"""Measures benchmark rows through lite_launcher's public path.

The lite_launcher twin of tfm_workloads.py: the same rows, overrides (`workloads.run_plan`)
and timing (`measure.LoopClock` actions), with the experiments `mlp_tiny`, `cnn_small` and
`mock` that lite_launcher registers itself (lite_launcher/experiments/workloads.py), run by
`ll.run_experiment` with the default strategy.

    .venv/bin/python benchmarks/lite_workloads.py --workload mlp_tiny [--rows train100 eval]

runs the rows one after the other (each with its own task, trainer and model_dir) and prints
one `BENCH_RESULT {json}` line per row (see measure.py). Run from the repository root, or with
lite_launcher installed.
"""

import argparse
import os
import sys
import tempfile

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
# Without `pip install -e .`, lite_launcher is found from the repository root.
sys.path.insert(1, os.path.dirname(_HERE))

import measure  # noqa: E402
import workloads  # noqa: E402

# Imported before anything is timed, so the first-step figure includes it.
import tensorflow as tf  # noqa: E402
import lite_launcher as ll  # noqa: E402


def measure_row(workload_name, row, loops, model_dir):
    """Runs one row through `ll.run_experiment`; returns the result dict."""
    workload = workloads.get(workload_name)
    mode, trainer_overrides = workloads.run_plan(workload, row, loops)
    params = ll.get_exp_config(workload_name)
    params.override({"trainer": trainer_overrides})
    params.validate()
    task = ll.get_task(params.task, logging_dir=model_dir)
    clock = measure.LoopClock()
    # 'off' in the registered experiments (WORKLOADS.md: the default strategy).
    strategy = ll.get_distribution_strategy(params.runtime.distribution_strategy)
    ll.run_experiment(
        distribution_strategy=strategy,
        task=task,
        mode=mode,
        params=params,
        model_dir=model_dir,
        train_actions=[clock.train_action],
        eval_actions=[clock.eval_action],
    )
    spl = trainer_overrides["steps_per_loop"]
    import keras

    result = {
        "side": "lite",
        "workload": workload_name,
        "row": row,
        "loops": loops,
        "first_loop_s": clock.first_loop_age_s,
        "first_loop_steps": spl,
        "train_loops_seen": len(clock.train_times),
        "versions": {"tensorflow": tf.__version__, "keras": keras.__version__,
                     "lite_launcher": ll.__version__},
    }
    if row == "eval":
        result["steps_per_sec"] = measure.eval_rate(
            clock.train_times, clock.eval_times, workloads.EVAL_STEPS)
        result["eval_ms"] = measure.eval_ms(clock.train_times, clock.eval_times)
    else:
        skip = workloads.warmup_loops(workload, row)
        result["steps_per_sec"] = measure.steady_rate(clock.train_times, spl, skip)
        result["loop_ms"] = measure.loop_ms(clock.train_times, skip)
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", required=True, choices=sorted(workloads.WORKLOADS))
    parser.add_argument("--rows", nargs="+", default=list(workloads.FRAMEWORK_ROWS),
                        choices=workloads.FRAMEWORK_ROWS,
                        help="rows to measure, one after the other in this process")
    parser.add_argument("--loops", type=int, default=None,
                        help="timed outer loops (default: the workload's, see workloads.py)")
    parser.add_argument("--smoke", action="store_true", help="fewest loops that still time")
    parser.add_argument("--model_dir", default=None,
                        help="parent of each row's model_dir (default: a fresh temporary folder)")
    args = parser.parse_args(argv)
    parent = args.model_dir or tempfile.mkdtemp(prefix="lite_bench_")
    for row in args.rows:
        loops = args.loops or workloads.timed_loops(
            workloads.get(args.workload), row, args.smoke)
        measure.emit(measure_row(args.workload, row, loops, os.path.join(parent, row)))


if __name__ == "__main__":
    main()
