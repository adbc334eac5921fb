"""The op histogram of what a benchmark workload's training run traces, to compare checkouts.

Runs one `train` of 100 steps (one outer loop, `steps_per_loop=100`) of a registered workload
(`mlp_tiny`, `cnn_small`, `mock`) through `ll.run_experiment` in a temporary model_dir, then
reads every function the run registered with TensorFlow's eager context (the training loop,
its while body, the step, the checkpoint save) and counts their nodes by op type. Two checkouts
trace the same graph exactly when the histograms are equal:

    PYTHONPATH=/path/to/before .venv/bin/python benchmarks/loop_graph_ops.py > a.json
    PYTHONPATH=. .venv/bin/python benchmarks/loop_graph_ops.py > b.json

Prints one JSON object {workload: {"nodes": N, "ops": {type: count}}}; which lite_launcher
was imported is under "lite_launcher_file".
"""

import argparse
import collections
import json
import os
import sys
import tempfile

_HERE = os.path.dirname(os.path.abspath(__file__))
if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, os.path.dirname(_HERE))


def traced_ops(name):
    """{"nodes": total, "ops": {op type: count}} of the functions one 100-step train traced."""
    import tensorflow as tf
    from tensorflow.python.eager import context

    import lite_launcher as ll

    before = set(context.context().list_function_names())
    params = ll.get_exp_config(name)
    params.override({"trainer": {"train_steps": 100, "steps_per_loop": 100}})
    with tempfile.TemporaryDirectory() as model_dir:
        ll.run_experiment(distribution_strategy=tf.distribute.get_strategy(),
                          task=ll.get_task(params.task, logging_dir=model_dir), mode="train",
                          params=params, model_dir=model_dir)
    ops = collections.Counter()
    for fn_name in set(context.context().list_function_names()) - before:
        for node in context.context().get_function_def(fn_name).node_def:
            ops[node.op] += 1
    return {"nodes": sum(ops.values()), "ops": dict(sorted(ops.items()))}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", default=["mlp_tiny", "cnn_small", "mock"])
    args = parser.parse_args(argv)
    import lite_launcher as ll

    result = {"lite_launcher_file": ll.__file__}
    for name in args.workloads:
        result[name] = traced_ops(name)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
