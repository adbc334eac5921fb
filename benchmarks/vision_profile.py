"""Where a vision training loop's time goes: lite_launcher's vs TFM's `resnet_imagenet`.

One side per process (run with TFM's venv so both sides use TFM's TensorFlow):

    TF_ENABLE_ONEDNN_OPTS=1 /work/tfm_venv/bin/python benchmarks/vision_profile.py --side lite
    TF_ENABLE_ONEDNN_OPTS=1 /work/tfm_venv/bin/python benchmarks/vision_profile.py --side tfm
    ... --input_only      # the input pipeline alone: batches/s of task.build_inputs

The training loop: the same config overrides as vision_rows.py (64x64, batch 16, XLA off by
default); after the warm-up loops a train action starts `tf.profiler.experimental` for
`--profile_loops` outer loops, then the trace (XSpace protobuf) is read back and the host
events of TensorFlow ops are summed by op type. Prints one `BENCH_RESULT {json}` line: wall
time of the profiled loops, the op time by type (ms per step, summed over threads), and the
input pipeline's share (`IteratorGetNext` and the tf.data events).

With `--input_only` no model is built: the side's own `task.build_inputs` dataset is iterated
for `--batches` batches after a warm-up, batches/s and images/s.

With `--input_ab` (TFM's venv) both sides' training datasets are built in ONE process and read
in turn, `--batches` batches each, for `--rounds` rounds, order alternated: a change of load
falls on both alike. Per-round lite/TFM ratio of images/s, median [min-max].
"""

import argparse
import collections
import glob
import os
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(1, os.path.dirname(_HERE))

import measure  # noqa: E402
import vision_rows  # noqa: E402


def xspace_ops(logdir, by="type"):
    """{op type: total µs} and {op type: count} from the host plane of the trace in logdir;
    with `by="name"`, keyed "op_name:OpType" instead (which layer's op it is)."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    paths = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)
    if not paths:
        raise RuntimeError(f"no .xplane.pb under {logdir}")
    space = xplane_pb2.XSpace()
    with open(sorted(paths)[-1], "rb") as f:
        space.ParseFromString(f.read())
    totals = collections.Counter()
    counts = collections.Counter()
    for plane in space.planes:
        if not plane.name.startswith("/host:CPU"):
            continue
        for line in plane.lines:
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                # TensorFlow op events are named "op_name:OpType"; tf.data's "Iterator::..."
                # keep their name (one kind per dataset op).
                if name.startswith("Iterator::"):
                    kind = "tf.data " + name.split("::")[-1]
                elif ":" in name and "::" not in name:
                    kind = name if by == "name" else name.rsplit(":", 1)[1]
                else:
                    continue
                totals[kind] += event.duration_ps / 1e6
                counts[kind] += 1
    return totals, counts


class ProfileWindow:
    """A train action: profiles loops warmup+1 .. warmup+n, timing them."""

    def __init__(self, warmup, loops, logdir):
        self.warmup, self.loops, self.logdir = warmup, loops, logdir
        self.calls = 0
        self.start = self.end = None

    def __call__(self, output):
        import tensorflow as tf

        del output
        self.calls += 1
        if self.calls == self.warmup:
            tf.profiler.experimental.start(self.logdir)
            self.start = time.perf_counter()
        elif self.calls == self.warmup + self.loops:
            self.end = time.perf_counter()
            tf.profiler.experimental.stop()


def _run_side(side, model, input_glob, steps_per_loop, window, xla, dtype=None):
    model_dir = tempfile.mkdtemp(prefix=f"{side}_vision_profile_")
    loops = window.loops  # timed loops after the warm-up ones
    if side == "lite":
        import lite_launcher as ll
        from lite_launcher.common import distribute_utils as strategy_lib

        params = vision_rows.make_config(model, input_glob, steps_per_loop, loops, xla, dtype)
        strategy_lib.set_mixed_precision_policy(params.runtime.mixed_precision_dtype)
        task = ll.get_task(params.task, logging_dir=model_dir)
        ll.run_experiment(distribution_strategy=ll.get_distribution_strategy("off"), task=task,
                          mode="train", params=params, model_dir=model_dir,
                          train_actions=[window])
    else:
        from official.common import distribute_utils
        from official.core import exp_factory, task_factory, train_lib
        from official.modeling import performance
        import official.vision.registry_imports  # noqa: F401

        params = exp_factory.get_exp_config(vision_rows.EXPERIMENTS[model])
        params.override(vision_rows.overrides(model, input_glob, steps_per_loop, loops, xla,
                                              dtype), is_strict=True)
        params.validate()
        params.lock()
        if params.runtime.mixed_precision_dtype:
            performance.set_mixed_precision_policy(params.runtime.mixed_precision_dtype)
        task = task_factory.get_task(params.task, logging_dir=model_dir)
        train_lib.run_experiment(
            distribution_strategy=distribute_utils.get_distribution_strategy("off"),
            task=task, mode="train", params=params, model_dir=model_dir,
            train_actions=[window])


def profile_loop(side, model, input_glob, steps_per_loop, loops, xla, dtype=None):
    logdir = tempfile.mkdtemp(prefix=f"{side}_trace_")
    window = ProfileWindow(vision_rows.WARMUP_LOOPS, loops, logdir)
    _run_side(side, model, input_glob, steps_per_loop, window, xla, dtype)
    steps = steps_per_loop * loops  # loops warmup+1 .. warmup+loops
    wall_ms = 1000.0 * (window.end - window.start)
    totals, counts = xspace_ops(logdir)
    per_step = {k: round(v / 1000.0 / steps, 3) for k, v in totals.most_common()}
    return {"side": side, "workload": vision_rows.workload_name(model), "row": "profile",
            "steps": steps, "wall_ms_per_step": wall_ms / steps,
            "op_ms_per_step": per_step,
            "op_count_per_step": {k: counts[k] / steps for k in per_step},
            "dtype": dtype or "float32", "versions": vision_rows._versions(side),
            **vision_rows.machine_state()}


def _side_dataset(side, model, input_glob):
    """The side's own training dataset of `model`'s experiment (no model is built)."""
    if side == "lite":
        import lite_launcher as ll

        params = vision_rows.make_config(model, input_glob, 10, 1, False)
        dataset = ll.get_task(params.task).build_inputs(params.task.train_data)
    else:
        from official.core import exp_factory, task_factory
        import official.vision.registry_imports  # noqa: F401

        params = exp_factory.get_exp_config(vision_rows.EXPERIMENTS[model])
        params.override(vision_rows.overrides(model, input_glob, 10, 1, False), is_strict=True)
        dataset = task_factory.get_task(params.task).build_inputs(params.task.train_data)
    return dataset


def input_only(side, model, input_glob, batches, warmup=20):
    """Batches/s of the side's own training dataset, no model."""
    import tensorflow as tf

    iterator = iter(_side_dataset(side, model, input_glob))
    for _ in range(warmup):
        next(iterator)
    start = time.perf_counter()
    for _ in range(batches):
        images, _ = next(iterator)
    elapsed = time.perf_counter() - start
    del tf
    result = {"side": side, "workload": vision_rows.workload_name(model), "row": "input_only",
              "batches": batches, "batches_per_sec": batches / elapsed,
              "images_per_sec": batches * int(images.shape[0]) / elapsed,
              "versions": vision_rows._versions(side)}
    # No model, so nothing is XLA-compiled; the CPU and oneDNN state as for every record.
    result.update(vision_rows.machine_state(), enable_xla=False, xla_compiled=False)
    return result


def input_ab(model, input_glob, batches, rounds, warmup=20):
    """Both sides' datasets in this process, read in turn: per-round images/s and ratios."""
    import statistics

    iterators = {side: iter(_side_dataset(side, model, input_glob)) for side in ("lite", "tfm")}
    for iterator in iterators.values():
        for _ in range(warmup):
            next(iterator)
    per_round = []
    for r in range(rounds):
        order = ["lite", "tfm"] if r % 2 == 0 else ["tfm", "lite"]
        rates = {}
        for side in order:
            start = time.perf_counter()
            for _ in range(batches):
                images, _ = next(iterators[side])
            rates[side] = batches * int(images.shape[0]) / (time.perf_counter() - start)
        per_round.append({"order": order, "images_per_sec": rates,
                          "loadavg": list(os.getloadavg())})
        print(f"round {r}: lite {rates['lite']:.0f}  tfm {rates['tfm']:.0f} images/s",
              file=sys.stderr, flush=True)
    ratios = [p["images_per_sec"]["lite"] / p["images_per_sec"]["tfm"] for p in per_round]
    return {"workload": vision_rows.workload_name(model), "row": "input_ab", "batches": batches,
            "rounds": per_round, "lite_over_tfm": {"median": statistics.median(ratios),
                                                   "min": min(ratios), "max": max(ratios)},
            "versions": vision_rows._versions("tfm"), **vision_rows.machine_state()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", choices=("lite", "tfm"))
    parser.add_argument("--model", default="resnet18", choices=sorted(vision_rows.MODELS))
    parser.add_argument("--steps_per_loop", type=int, default=10)
    parser.add_argument("--profile_loops", type=int, default=3,
                        help="outer loops profiled, after the warm-up ones")
    parser.add_argument("--xla", action="store_true")
    parser.add_argument("--dtype", default=None, choices=vision_rows.DTYPES,
                        help="runtime.mixed_precision_dtype (both sides)")
    parser.add_argument("--inter_op_threads", type=int, default=None,
                        help="tf.config.threading.set_inter_op_parallelism_threads (1: one op "
                        "at a time)")
    parser.add_argument("--input_only", action="store_true")
    parser.add_argument("--input_ab", action="store_true",
                        help="both sides' datasets in this process, read in turn")
    parser.add_argument("--rounds", type=int, default=7, help="--input_ab rounds")
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--data_dir", default=os.path.join(tempfile.gettempdir(),
                                                           "lite_vision_bench"))
    args = parser.parse_args(argv)
    if args.inter_op_threads is not None:
        import tensorflow as tf
        tf.config.threading.set_inter_op_parallelism_threads(args.inter_op_threads)
    if not args.input_ab and args.side is None:
        parser.error("--side is required (except with --input_ab)")
    input_glob = vision_rows.write_synthetic_tfrecords(args.data_dir)
    if args.input_ab:
        result = input_ab(args.model, input_glob, args.batches, args.rounds)
    elif args.input_only:
        result = input_only(args.side, args.model, input_glob, args.batches)
    else:
        result = profile_loop(args.side, args.model, input_glob, args.steps_per_loop,
                              args.profile_loops, args.xla, args.dtype)
    measure.emit(result)


if __name__ == "__main__":
    main()
