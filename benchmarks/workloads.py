"""The benchmark workloads of benchmarks/WORKLOADS.md, for any Keras-like module.

This module is shared by three environments: the project's (Keras 3, used by `raw_loop.py`),
lite_launcher's (`lite_workloads.py`) and TFM's separate venv (tf_keras, `tfm_workloads.py`).
So it imports neither TensorFlow nor Keras at module level: builders take the Keras module
(`keras` or `tf_keras`) as an argument, and both spell these layers the same way.

It also holds what every side must do identically: the data batch, the per-row trainer
overrides (TFM's field names, which lite_launcher keeps) and how many outer loops are timed.
The batch is drawn exactly as `lite_launcher.experiments.workloads.make_workload_batch` draws
it (raw_loop.py checks that they are equal), so all three sides train on the same numbers.
"""

import dataclasses

NUM_CLASSES = 10
LEARNING_RATE = 0.01
# Eval row: steps per evaluation (WORKLOADS.md row 3).
EVAL_STEPS = 100
# Train row 1: steps per inner loop.
LONG_LOOP = 100
# Train rows: outer loops excluded before timing. The first traces the loop; the work after it
# (first summary write, log files) is also one-time, and the action that times loop 1 fires
# before it, so timing starts at the end of loop 2. A workload whose loop lasts seconds
# (cnn_small, spl=100) excludes only the first: the one-time work is negligible there.
WARMUP_LOOPS = 2
# Intervals that never fire during a run (multiples of every steps_per_loop used here).
NEVER = 100 * 10**7


@dataclasses.dataclass(frozen=True)
class Workload:
    """One row of the WORKLOADS.md table."""

    name: str
    input_shape: tuple
    global_batch_size: int
    momentum: float
    # How many timed outer loops (evaluations for `eval_repeats`) each row runs after the
    # excluded warm-up. Sized so that the timed part takes about a second on 2 cores
    # (cnn_small: ~2.5 s per 100-step loop, so few loops).
    train_loops: int
    train1_loops: int
    eval_repeats: int
    # Outer loops excluded before timing in the steps_per_loop=100 row (and the raw loop).
    long_warmup: int = WARMUP_LOOPS


WORKLOADS = {
    "mlp_tiny": Workload("mlp_tiny", (32,), 64, 0.0,
                         train_loops=150, train1_loops=600, eval_repeats=20),
    "cnn_small": Workload("cnn_small", (32, 32, 3), 128, 0.9,
                          train_loops=3, train1_loops=30, eval_repeats=4, long_warmup=1),
    "mock": Workload("mock", (2,), 2, 0.0,
                     train_loops=150, train1_loops=600, eval_repeats=20),
}

# Smoke runs (CI): the same rows, with the fewest loops that still exclude tracing.
SMOKE_LOOPS = {"train_loops": 1, "train1_loops": 3, "eval_repeats": 1}
# Workloads of a smoke run unless named: the ones whose rows take well under a second.
SMOKE_WORKLOADS = ("mlp_tiny", "mock")

# The driver row: `lite-train` / TFM's driver on the experiment, mode train, 1-step loops, for
# the time from process start to the first finished step and the process's peak RSS.
DRIVER_STEPS = 20

# Rows measured through a framework (lite_launcher or TFM). `raw` is measured by raw_loop.py.
# Every row writes the train (and eval) summaries of every outer loop on both sides, as Orbit
# does whenever a summary dir is set, except `train1_nosum` (save_summary=False on both).
FRAMEWORK_ROWS = ("train100", "train1", "train1_nosum", "eval")
# The rows that write no summaries.
NO_SUMMARY_ROWS = ("train1_nosum",)
# The sides a row can be run by: lite_launcher and TFM (`raw` has its own script).
FRAMEWORK_SIDES = ("lite", "tfm")


def get(name):
    """Returns the Workload called `name`; raises ValueError naming the known ones."""
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r}; expected one of {sorted(WORKLOADS)}")
    return WORKLOADS[name]


def timed_loops(workload, row, smoke=False):
    """Number of timed outer loops (or evaluations, for `eval`) for `row` of `workload`."""
    key = {"train100": "train_loops", "raw": "train_loops", "train1": "train1_loops",
           "train1_nosum": "train1_loops", "eval": "eval_repeats"}[row]
    return SMOKE_LOOPS[key] if smoke else getattr(workload, key)


def warmup_loops(workload, row):
    """Outer loops (100-step calls for `raw`) excluded before timing in `row`."""
    return workload.long_warmup if row in ("train100", "raw") else WARMUP_LOOPS


def make_batch(workload):
    """The one fixed batch (features float32, labels int32 in [0, 10)) from default_rng(0).

    The same draw as lite_launcher's `make_workload_batch(name, global_batch_size)`.
    """
    import numpy as np

    rng = np.random.default_rng(0)
    features = rng.standard_normal(
        (workload.global_batch_size,) + tuple(workload.input_shape), dtype=np.float32)
    labels = rng.integers(0, NUM_CLASSES, size=(workload.global_batch_size,), dtype=np.int32)
    return features, labels


def make_dataset(workload):
    """`tf.data.Dataset.from_tensors(batch).repeat()`: input cost ~0."""
    import tensorflow as tf

    return tf.data.Dataset.from_tensors(make_batch(workload)).repeat()


def build_model(workload, keras):
    """Builds the workload's model with `keras` (the Keras 3 module or tf_keras)."""
    layers = keras.layers
    if workload.name == "mlp_tiny":
        body = [layers.Dense(64, activation="relu"), layers.Dense(NUM_CLASSES)]
    elif workload.name == "cnn_small":
        body = [
            layers.Conv2D(32, 3, padding="same", activation="relu"),
            layers.Conv2D(64, 3, strides=2, padding="same", activation="relu"),
            layers.GlobalAveragePooling2D(),
            layers.Dense(NUM_CLASSES),
        ]
    elif workload.name == "mock":
        body = [layers.Dense(1, bias_initializer="ones")]
    else:
        raise ValueError(f"no model for workload {workload.name!r}")
    return keras.Sequential([keras.Input(shape=workload.input_shape)] + body)


def compute_loss(workload, labels, outputs):
    """Mean over the global batch: cross-entropy from logits, or the mean output for `mock`.

    The TFM side's loss. The same math as lite_launcher's `WorkloadTask.build_losses` (which
    the raw loop calls): a mean that gives 0 rather than NaN on an empty batch.
    """
    import tensorflow as tf

    if workload.name == "mock":
        return tf.reduce_mean(tf.cast(outputs, tf.float32))
    per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.cast(labels, tf.int32), logits=outputs)
    per_example = tf.cast(per_example, tf.float32)
    return tf.math.divide_no_nan(tf.reduce_sum(per_example),
                                 tf.cast(tf.size(per_example), tf.float32))


def optimizer_config(workload):
    """The optimizer as TFM's (and lite_launcher's) `trainer.optimizer_config` dict."""
    sgd = {"momentum": workload.momentum} if workload.momentum else {}
    return {
        "optimizer": {"type": "sgd", "sgd": sgd},
        "learning_rate": {"type": "constant", "constant": {"learning_rate": LEARNING_RATE}},
    }


def run_plan(workload, row, loops, side):
    """What `side` ('lite' or 'tfm') runs for `row`: (mode, trainer overrides, save_summary).

    The same work on both sides. Train rows run `warmup_loops() + loops` outer loops in mode
    'train'; the timer excludes the warm-up loops. The eval row runs mode 'train_and_eval'
    with one-step train loops and an evaluation of EVAL_STEPS steps after each, `2 + loops`
    evaluations in all: the first (tracing) is excluded, and the last is followed by no train
    loop, so the wall window (train action to the next train action) sees `loops` of them.
    Checkpoint intervals never fire (both sides save one checkpoint after the last loop,
    outside every timed window).

    Summaries: with a summary dir, Orbit writes and flushes the train outputs after every
    outer loop whatever `summary_interval` is (that interval only gates in-graph `tf.summary`
    calls, and these tasks make none), and the eval outputs after every evaluation. This
    branch of lite_launcher writes train outputs only when `summary_interval` is due, so its
    side gets `summary_interval = steps_per_loop`: a write every loop, like Orbit's. (The
    Controller change that writes loop outputs every loop by default makes this a no-op.)
    `train1_nosum` passes save_summary=False to both `run_experiment`s: no summaries at all.
    """
    if side not in FRAMEWORK_SIDES:
        raise ValueError(f"unknown side {side!r}; expected one of {FRAMEWORK_SIDES}")
    if row == "train100":
        spl, train_steps = LONG_LOOP, LONG_LOOP * (warmup_loops(workload, row) + loops)
        mode = "train"
    elif row in ("train1", "train1_nosum"):
        spl, train_steps = 1, warmup_loops(workload, row) + loops
        mode = "train"
    elif row == "driver":
        spl, train_steps = 1, DRIVER_STEPS
        mode = "train"
    elif row == "eval":
        spl, train_steps = 1, 2 + loops
        mode = "train_and_eval"
    else:
        raise ValueError(f"unknown row {row!r}; expected one of {FRAMEWORK_ROWS} or driver")
    save_summary = row not in NO_SUMMARY_ROWS
    trainer = {
        "steps_per_loop": spl,
        "train_steps": train_steps,
        "train_tf_while_loop": True,
        "train_tf_function": True,
        "eval_tf_function": True,
        "eval_tf_while_loop": False,
        "validation_steps": EVAL_STEPS,
        "validation_interval": 1 if row == "eval" else NEVER,
        "summary_interval": spl if (side == "lite" and save_summary) else NEVER,
        "checkpoint_interval": NEVER,
    }
    return mode, trainer, save_summary


def row_result(side, workload, row, loops, clock, spl, versions):
    """One row's result line: what ran, and its rate (and per-loop / per-eval times)."""
    import measure  # sibling module, standard library only

    result = {
        "side": side,
        "workload": workload.name,
        "row": row,
        "loops": loops,
        "first_loop_s": clock.first_loop_age_s,
        "first_loop_steps": spl,
        "train_loops_seen": len(clock.train_times),
        "versions": versions,
    }
    if row == "eval":
        # Two windows: the evaluation call (train action -> eval action: the train loop's
        # summary write and the evaluation) and the wall (train action -> next train action:
        # also the eval summaries, everything the evaluation leaves to do, such as destroying
        # its iterator, and one 1-step train loop, the same on both sides).
        result["steps_per_sec"] = measure.eval_rate(clock.train_times, clock.eval_times,
                                                    EVAL_STEPS)
        result["wall_steps_per_sec"] = measure.eval_wall_rate(clock.train_times, EVAL_STEPS)
        result["eval_ms"] = measure.eval_ms(clock.train_times, clock.eval_times)
    else:
        skip = warmup_loops(workload, row)
        result["steps_per_sec"] = measure.steady_rate(clock.train_times, spl, skip)
        result["loop_ms"] = measure.loop_ms(clock.train_times, skip)
    return result


def rows_main(measure_row, temp_prefix, description, argv=None):
    """The command line shared by each framework's row script: measure rows, print results."""
    import argparse
    import json
    import os
    import tempfile

    import measure

    parser = argparse.ArgumentParser(description=description.splitlines()[0])
    parser.add_argument("--workload", required=True, choices=sorted(WORKLOADS))
    parser.add_argument("--rows", nargs="+", default=list(FRAMEWORK_ROWS),
                        choices=FRAMEWORK_ROWS,
                        help="rows to measure, one after the other in this process")
    parser.add_argument("--loops", type=int, default=None,
                        help="timed outer loops (default: the workload's, see workloads.py)")
    parser.add_argument("--smoke", action="store_true", help="fewest loops that still time")
    parser.add_argument("--model_dir", default=None,
                        help="parent of each row's model_dir (default: a fresh temporary folder)")
    parser.add_argument("--runtime", type=json.loads, default=None,
                        help="JSON overrides of the `runtime` config (gpu_rows.py: num_gpus, "
                        "distribution_strategy, enable_xla, mixed_precision_dtype)")
    args = parser.parse_args(argv)
    parent = args.model_dir or tempfile.mkdtemp(prefix=temp_prefix)
    for row in args.rows:
        loops = args.loops or timed_loops(get(args.workload), row, args.smoke)
        result = measure_row(args.workload, row, loops, os.path.join(parent, row),
                             runtime=args.runtime)
        measure.emit(dict(result, summaries=row not in NO_SUMMARY_ROWS,
                          runtime=args.runtime or {}))
