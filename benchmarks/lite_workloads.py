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

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
# Without `pip install -e .`, lite_launcher is found from the repository root.
sys.path.insert(1, os.path.dirname(_HERE))

import measure  # noqa: E402
import workloads  # noqa: E402

# Imported before anything is timed, so the first-step figure includes it.
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402
import lite_launcher as ll  # noqa: E402


def measure_row(workload_name, row, loops, model_dir, runtime=None):
    """Runs one row through `ll.run_experiment`; returns the result dict. `runtime`: overrides
    of the runtime config (device, XLA, mixed precision), as lite-train's driver applies them."""
    workload = workloads.get(workload_name)
    mode, trainer_overrides, save_summary = workloads.run_plan(workload, row, loops, "lite")
    params = ll.get_exp_config(workload_name)
    params.override({"trainer": trainer_overrides, "runtime": runtime or {}})
    params.validate()
    # Before any model is built, as the driver does; float32 (the default) when unset.
    ll.set_mixed_precision_policy(params.runtime.mixed_precision_dtype)
    # 'off' in the registered experiments (WORKLOADS.md: the default strategy): None.
    strategy = ll.get_distribution_strategy(params.runtime.distribution_strategy,
                                            num_gpus=params.runtime.num_gpus)
    task = ll.get_task(params.task, logging_dir=model_dir)
    clock = measure.LoopClock()
    ll.run_experiment(
        distribution_strategy=strategy,
        task=task,
        mode=mode,
        params=params,
        model_dir=model_dir,
        train_actions=[clock.train_action],
        eval_actions=[clock.eval_action],
        save_summary=save_summary,
    )
    versions = {"tensorflow": tf.__version__, "keras": keras.__version__,
                "lite_launcher": ll.__version__}
    result = workloads.row_result("lite", workload, row, loops, clock,
                                  trainer_overrides["steps_per_loop"], versions)
    result["gpu_devices"] = [d.name for d in tf.config.list_logical_devices("GPU")]
    result["dtype_policy"] = keras.mixed_precision.global_policy().name
    return result


def main(argv=None):
    workloads.rows_main(measure_row, "lite_bench_", __doc__, argv)


if __name__ == "__main__":
    main()
