"""In-process A/B of lite_launcher's vision train step: variants of the op graph, interleaved.

On a shared machine the load changes within seconds, so comparing two processes run one after
the other says little. Here every variant is built and traced in ONE process (its own model,
optimizer and `tf.function` over `tf.range(steps)` of `task.train_step`, on one fixed batch
from the task's own input pipeline), then the variants' loops are called in turn, order
rotated every round, for `--rounds` rounds: the load falls on all of them alike. Prints one
`BENCH_RESULT` line: ms per step of every variant per round, and each variant's per-round
ratio to `base`, median [min-max].

Variants (each changes how the graph is *traced*, so it is applied while its loop is traced):
- `base`: lite_launcher as it is: since issue 21, tf_keras's fused kernels (the vision models'
  `FusedBatchNormalization` and `L2KernelRegularizer`, `optimization.SGD`'s fused momentum).
- `keras_l2`: the L2 kernel regularizer as Keras 3's `l2 * sum(square(x))` (Square, Sum, and a
  Tile + Mul gradient over every kernel) instead of `2 * l2 * tf.nn.l2_loss(x)`.
- `keras_bn`: batch normalization as Keras 3 computes it (moments + batch_normalization, ~a
  dozen element-wise ops and their gradients per layer) instead of one FusedBatchNormV3.
- `keras_momentum`: SGD momentum as Keras 3's Mul / Sub / assign / assign_add per variable
  instead of one `ResourceApplyKerasMomentum`.
- `xla`: the step compiled with XLA (`tf.function(task.train_step, jit_compile=True)`, as
  lite_launcher's Trainer does with `runtime.enable_xla` under the default strategy).
- combinations joined with `+`, e.g. `keras_l2+keras_bn+keras_momentum` (lite before the
  change). Results files before commit 3527ded measured the opposite patches (`l2loss`,
  `fusedbn`, `fusedmom` applied to Keras 3's forms, then lite's).

    TF_ENABLE_ONEDNN_OPTS=1 /work/tfm_venv/bin/python benchmarks/vision_step_ab.py \
        --variants base keras_l2 keras_bn keras_momentum keras_l2+keras_bn+keras_momentum
"""

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(1, os.path.dirname(_HERE))

import measure  # noqa: E402
import vision_rows  # noqa: E402

PATCHES = ("keras_l2", "keras_bn", "keras_momentum", "xla")


@contextlib.contextmanager
def patched(names):
    """Applies the named graph patches (see the module docstring) while the block runs."""
    import keras

    from lite_launcher.optimization import optimizers
    from lite_launcher.vision.modeling.layers import nn_layers

    saved = []

    def swap(owner, attr, value):
        saved.append((owner, attr, owner.__dict__[attr]))
        setattr(owner, attr, value)

    if "keras_l2" in names:
        swap(nn_layers.L2KernelRegularizer, "__call__", keras.regularizers.L2.__call__)
    if "keras_bn" in names:
        swap(nn_layers.FusedBatchNormalization, "call", keras.layers.BatchNormalization.call)
    if "keras_momentum" in names:
        swap(optimizers.SGD, "update_step", keras.optimizers.SGD.update_step)
    try:
        yield
    finally:
        for owner, attr, value in reversed(saved):
            setattr(owner, attr, value)


def build_variant(names, model, input_glob, steps):
    """(loop, batch) for one variant: a traced `tf.range(steps)` loop of task.train_step."""
    import tensorflow as tf

    import lite_launcher as ll

    params = vision_rows.make_config(model, input_glob, steps, 1, False)
    with patched(names):
        task = ll.get_task(params.task)
        network = task.build_model()
        optimizer = task.create_optimizer(params.trainer.optimizer_config, params.runtime)
        metrics = task.build_metrics(training=True)
        batch = next(iter(task.build_inputs(params.task.train_data)))
        step = (tf.function(task.train_step, jit_compile=True) if "xla" in names
                else task.train_step)

        @tf.function
        def loop(n):
            for _ in tf.range(n):
                step(batch, model=network, optimizer=optimizer, metrics=metrics)

        n = tf.constant(steps, tf.int32)
        loop(n)  # traced (and run) with the patches on
    return lambda: loop(n)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18", choices=sorted(vision_rows.MODELS))
    parser.add_argument("--variants", nargs="+", default=[
        "base", "keras_l2", "keras_bn", "keras_momentum", "keras_l2+keras_bn+keras_momentum"])
    parser.add_argument("--steps", type=int, default=5, help="steps per timed call")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--data_dir", default=os.path.join(tempfile.gettempdir(),
                                                           "lite_vision_bench"))
    args = parser.parse_args(argv)
    for variant in args.variants:
        unknown = set(variant.split("+")) - set(PATCHES) - {"base"}
        if unknown:
            parser.error(f"unknown variant part(s) {sorted(unknown)}; known: {PATCHES}")
    if "base" not in args.variants:
        args.variants.insert(0, "base")
    input_glob = vision_rows.write_synthetic_tfrecords(args.data_dir)
    loops = {v: build_variant(set(v.split("+")) - {"base"}, args.model, input_glob, args.steps)
             for v in args.variants}
    for call in loops.values():  # a second untimed call each: one-time work after tracing
        call()
    per_round = []
    for r in range(args.rounds):
        order = args.variants[r % len(args.variants):] + args.variants[:r % len(args.variants)]
        if r % 2:
            order.reverse()
        times = {}
        for v in order:
            start = time.perf_counter()
            loops[v]()
            times[v] = 1000.0 * (time.perf_counter() - start) / args.steps
        per_round.append({"order": order, "ms_per_step": times, "loadavg": os.getloadavg()})
        print(f"round {r}: " + "  ".join(f"{v} {times[v]:.0f} ms" for v in args.variants),
              file=sys.stderr, flush=True)
    ratios = {}
    for v in args.variants:
        values = [p["ms_per_step"]["base"] / p["ms_per_step"][v] for p in per_round]
        ratios[v] = {"median": statistics.median(values), "min": min(values),
                     "max": max(values)}
    measure.emit({"workload": f"resnet_imagenet_{args.model}", "row": "step_ab",
                  "steps": args.steps, "rounds": per_round,
                  "speedup_vs_base": ratios,
                  "tf_enable_onednn_opts": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
                  "versions": vision_rows._versions("lite")})


if __name__ == "__main__":
    main()
