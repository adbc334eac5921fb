"""Row 4 of WORKLOADS.md: the raw Keras 3 loop, no framework (the limit for train row 1).

One `tf.function` runs `for _ in tf.range(n): step(next(iterator))`, where a step is the same
work a framework's train step does: forward, loss, gradients, SGD update, and the `accuracy`
and `loss` metric updates. Model, batch and loss come from lite_launcher's workload
definitions (`build_workload_model`, `make_workload_batch`, `WorkloadTask.build_losses` of
`lite_launcher.experiments.workloads`; no trainer, controller or loop of lite_launcher), so
the raw loop and lite_launcher do the same math on the same numbers. Timed like the framework
rows: calls of n=100 steps, the warm-up calls excluded.

    .venv/bin/python benchmarks/raw_loop.py --workload mlp_tiny

prints one `BENCH_RESULT {json}` line (see measure.py).
"""

import argparse
import os
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
# Without `pip install -e .`, lite_launcher is found from the repository root.
sys.path.insert(1, os.path.dirname(_HERE))

import measure  # noqa: E402
import workloads  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from lite_launcher.experiments.workloads import (  # noqa: E402
    WorkloadTask, WorkloadTaskConfig, build_workload_model, make_workload_batch)


def make_dataset(workload):
    """lite_launcher's batch of the workload, repeated; checked against the TFM side's."""
    batch = make_workload_batch(workload.name, workload.global_batch_size)
    for ours, theirs in zip(batch, workloads.make_batch(workload)):
        # tfm_workloads.py draws with workloads.make_batch: all sides must train on one batch.
        np.testing.assert_array_equal(ours, theirs)
    return tf.data.Dataset.from_tensors(batch).repeat()


def build_train_loop(workload):
    """Returns (loop, iterator, optimizer): `loop(iterator, n)` trains n steps in one graph."""
    model = build_workload_model(workload.name)
    # The workload's loss function only (WorkloadTask.build_losses is a pure function of the
    # labels and outputs).
    loss_fn = WorkloadTask(WorkloadTaskConfig(workload=workload.name)).build_losses
    optimizer = keras.optimizers.SGD(
        learning_rate=workloads.LEARNING_RATE, momentum=workload.momentum)
    # Built eagerly so that slot variables are not created inside the traced loop.
    optimizer.build(model.trainable_variables)
    accuracy = keras.metrics.SparseCategoricalAccuracy(name="accuracy")
    mean_loss = keras.metrics.Mean(name="loss")
    iterator = iter(make_dataset(workload))

    def step(batch):
        features, labels = batch
        with tf.GradientTape() as tape:
            outputs = model(features, training=True)
            loss = loss_fn(labels=labels, model_outputs=outputs)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        accuracy.update_state(labels, outputs)
        mean_loss.update_state(loss)

    @tf.function
    def loop(iterator, n):
        for _ in tf.range(n):
            step(next(iterator))

    return loop, iterator, optimizer


def measure_raw(workload_name, loops):
    """Times `loops` calls of 100 steps after a 1-step call (tracing, first step), excluding
    the first warm-up 100-step calls as the framework's steps_per_loop=100 row does."""
    workload = workloads.get(workload_name)
    warmup = workloads.warmup_loops(workload, "raw")
    loop, iterator, optimizer = build_train_loop(workload)
    # int32 tensors: one trace for every n (see KERAS3_NOTES.md "Retracing").
    one = tf.constant(1, tf.int32)
    long_loop = tf.constant(workloads.LONG_LOOP, tf.int32)

    loop(iterator, one)
    int(optimizer.iterations.numpy())  # the step has finished
    first_step_s = measure.process_age_s()

    times = []
    for _ in range(warmup + loops):
        loop(iterator, long_loop)
        int(optimizer.iterations.numpy())
        times.append(time.perf_counter())
    expected = 1 + workloads.LONG_LOOP * (warmup + loops)
    if int(optimizer.iterations.numpy()) != expected:
        raise RuntimeError(
            f"raw loop ran {int(optimizer.iterations.numpy())} steps, expected {expected}")
    return {
        "side": "raw",
        "workload": workload_name,
        "row": "raw",
        "loops": loops,
        "first_loop_s": first_step_s,
        "first_loop_steps": 1,
        "steps_per_sec": measure.steady_rate(times, workloads.LONG_LOOP, warmup),
        "loop_ms": measure.loop_ms(times, warmup),
        "versions": {"tensorflow": tf.__version__, "keras": keras.__version__},
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", required=True, choices=sorted(workloads.WORKLOADS))
    parser.add_argument("--loops", type=int, default=None,
                        help="timed 100-step calls (default: the workload's train_loops)")
    parser.add_argument("--smoke", action="store_true", help="fewest loops that still time")
    args = parser.parse_args(argv)
    loops = args.loops or workloads.timed_loops(workloads.get(args.workload), "raw", args.smoke)
    measure.emit(measure_raw(args.workload, loops))


if __name__ == "__main__":
    main()
