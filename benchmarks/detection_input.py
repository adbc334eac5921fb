"""Detection input alone (issue 55): images/s of each side's `task.build_inputs`, no model.

RetinaNet R50-FPN (`retinanet_resnetfpn_coco`) and Mask R-CNN R50-FPN (`maskrcnn_resnetfpn_coco`,
PNG masks and 112x112 mask targets) at 256x256, batch 2, each side's training and evaluation
datasets built by its own task from the same experiment, overrides and records
(`detection_rows.py`: TFM's field names, TFM's TF Example format; here a bigger set,
`--num_images`, so that decoding and parsing, not the file read, is the work). Both sides then
run the same stages with the same options (the experiment's parser settings: scale jitter,
flips, anchor labelling, RPN sampling, mask crops; `num_parallel_calls=AUTOTUNE` for decode
and parse, the same batch, `prefetch(AUTOTUNE)`, TensorFlow's default tf.data options); lite's
decoder also checks each record (`tf_example_decoder`'s `validate`), work TFM does not do.

All in one process of TFM's venv (one TensorFlow for both), this checkout first on sys.path.
Rounds alternate the sides (`rounds.round_order`); a timed call is, for training,
`--batches` batches of a new iterator after `--warmup` untimed ones, and for evaluation one
whole pass of the eval set through a new iterator, its start included (as each evaluation
reads it); the iterator is deleted before the other side is timed, so that neither side's
pipeline runs ahead (fills its prefetch buffers) while the other's is timed. Besides wall
time, each call's CPU time (the process's, every thread) per image. Per round images/s and lite/TFM (TFM's time over lite's), medians [min-max], with the CPU
model and the load average of each round.

    /work/tfm_venv/bin/python benchmarks/detection_input.py --rounds 8
    /work/tfm_venv/bin/python benchmarks/detection_input.py --profile   # op time by name

With `--profile` nothing is compared: for each side, model and split, `--batches` batches are
read under `tf.profiler` and the host op time (the map functions' ops, "name:Type") is summed
by name (`vision_profile.xspace_ops`), ms per image, largest first.
"""

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)
sys.path.insert(0, _HERE)
sys.path.insert(1, _ROOT)

import detection_rows  # noqa: E402
import rounds as rounds_lib  # noqa: E402

SIDES = ("lite", "tfm")
SPLITS = ("train", "eval")
MODELS = ("retinanet_resnet50_fpn", "maskrcnn_resnet50_fpn")
NUM_IMAGES = 256
CONTAINERS = ("If", "StatelessIf", "While", "StatelessWhile", "PartitionedCall",
              "StatefulPartitionedCall")


def records(data_dir, model, num_images):
    """The records of `model`'s row, `num_images` of them (written once per directory)."""
    data_dir = os.path.join(data_dir, str(num_images))
    return detection_rows.write_synthetic_tfrecords(
        data_dir, num_images=num_images, masks=model in detection_rows.WITH_MASKS)


def build_dataset(side, model, input_glob, split):
    """The side's own dataset of `split` ('train' / 'eval'), built by its task."""
    build = getattr(detection_rows, f"{side}_params_and_task")
    params, task = build(model, input_glob, 1, tempfile.mkdtemp(prefix=f"{side}_det_input_"),
                         eval_steps=1 if split == "eval" else 0)
    data = params.task.train_data if split == "train" else params.task.validation_data
    return task.build_inputs(data)


def map_functions(side, model, input_glob, split):
    """(decoder, parser): the two functions the side's `build_inputs` maps over its records,
    caught as it calls `tf.data.Dataset.map` (the same two on both sides)."""
    import tensorflow as tf

    caught = []
    original = tf.data.Dataset.map

    def catch(dataset, fn, *args, **kwargs):
        caught.append(fn)
        return original(dataset, fn, *args, **kwargs)

    tf.data.Dataset.map = catch
    try:
        build_dataset(side, model, input_glob, split)
    finally:
        tf.data.Dataset.map = original
    if len(caught) != 2:
        raise RuntimeError(f"{side}'s build_inputs mapped {len(caught)} functions, not a "
                           f"decoder and a parser")
    return caught[0], caught[1]


class StageReader:
    """One stage of one side, alone and on one thread (`single_threaded`): 'decode' maps the
    side's decoder over the records, 'parse' its parser over decoded records held in memory
    (decoded once, `cache`); each call reads the next `count` elements."""

    def __init__(self, decoder, parser, input_glob, stage, count, warmup, num_images):
        import tensorflow as tf

        files = tf.io.gfile.glob(input_glob)
        records = tf.data.TFRecordDataset(files).cache()
        if stage == "decode":
            dataset = records.repeat().map(decoder)
        else:
            dataset = records.map(decoder).cache().repeat().map(parser)
        self.iterator = iter(single_threaded(dataset))
        self.count = count
        # A cache serves from memory once a whole pass has filled it.
        _read_elements(self.iterator, warmup + (num_images if stage == "parse" else 0))

    def __call__(self):
        """(elements read, wall seconds, CPU seconds of the process)."""
        cpu, start = time.process_time(), time.perf_counter()
        _read_elements(self.iterator, self.count)
        return self.count, time.perf_counter() - start, time.process_time() - cpu


def _read_elements(iterator, count):
    for _ in range(count):
        next(iterator)


def _read(iterator, batches):
    """Images read in `batches` batches (None: to the end), each batch fetched to NumPy."""
    import numpy as np
    import tensorflow as tf

    images = 0
    for i, (features, labels) in enumerate(iterator):
        tf.nest.map_structure(np.asarray, labels)
        images += int(np.asarray(features).shape[0])
        if batches is not None and i + 1 == batches:
            break
    return images


class Reader:
    """One side's dataset of one split, read call by call (see the module docstring).

    Every call makes its own iterator and deletes it before returning, so that no side's
    pipeline works (or fills its prefetch buffers) while the other side is timed: training
    reads `warmup` batches untimed (the iterator's start and tf.data's autotuning), then
    times `batches`; evaluation times one whole pass from `iter()` on."""

    def __init__(self, dataset, split, batches, warmup):
        self.dataset, self.split, self.batches, self.warmup = dataset, split, batches, warmup
        _read(iter(dataset), warmup if split == "train" else None)  # traced, run once

    def __call__(self):
        """(images read, wall seconds, CPU seconds of the process: every thread)."""
        if self.split == "train":
            iterator = iter(self.dataset)
            _read(iterator, self.warmup)
            cpu, start = time.process_time(), time.perf_counter()
            images = _read(iterator, self.batches)
        else:
            cpu, start = time.process_time(), time.perf_counter()
            iterator = iter(self.dataset)
            images = _read(iterator, None)
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
        del iterator
        return images, seconds, cpu_seconds


def compare(readers, rounds, label):
    """Alternating rounds over {side: Reader}: per round images/s, the order and load."""
    per_round = []
    for r in range(rounds):
        order = rounds_lib.round_order(SIDES, r)
        rate, images, cpu_ms = {}, {}, {}
        for side in order:
            images[side], seconds, cpu_seconds = readers[side]()
            rate[side] = images[side] / seconds
            cpu_ms[side] = 1000.0 * cpu_seconds / images[side]
        per_round.append({"order": list(order), "images": images, "images_per_sec": rate,
                          "cpu_ms_per_image": cpu_ms, "loadavg": list(os.getloadavg())})
        print(f"{label} round {r}: lite {rate['lite']:.1f}  tfm {rate['tfm']:.1f} images/s, "
              f"CPU lite {cpu_ms['lite']:.1f}  tfm {cpu_ms['tfm']:.1f} ms/image"
              f"  load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
    return per_round


def summarize(per_round):
    """Per side images/s and lite/TFM (per round, TFM's time over lite's), median [min-max]."""
    out = {side: rounds_lib.spread([p["images_per_sec"][side] for p in per_round])
           for side in SIDES}
    ratios = [p["images_per_sec"]["lite"] / p["images_per_sec"]["tfm"] for p in per_round]
    out["lite_over_tfm"] = rounds_lib.spread(ratios)
    out["rounds_lite_faster"] = sum(x > 1.0 for x in ratios)
    # CPU time per image (the process's, while that side was read): TFM's over lite's.
    out["cpu_ms_per_image"] = {side: rounds_lib.spread([p["cpu_ms_per_image"][side]
                                                        for p in per_round]) for side in SIDES}
    out["cpu_tfm_over_lite"] = rounds_lib.spread(
        [p["cpu_ms_per_image"]["tfm"] / p["cpu_ms_per_image"]["lite"] for p in per_round])
    return out


def single_threaded(dataset):
    """`dataset` run by one thread (tf.data's pool and each op's): op times in a trace are
    then each op's own, not shared with other map calls."""
    import tensorflow as tf

    options = tf.data.Options()
    options.threading.private_threadpool_size = 1
    options.threading.max_intra_op_parallelism = 1
    # No prefetch thread either (tf.data injects one by default), which would run ahead
    # while the other side is timed.
    options.experimental_optimization.inject_prefetch = False
    return dataset.with_options(options)


def profile(reader):
    """{'op_ms_per_image': {"name:Type": ms}, 'images'} of one call of `reader` (`Reader`
    of a `single_threaded` dataset, or `StageReader`) under tf.profiler."""
    import tensorflow as tf
    import vision_profile

    logdir = tempfile.mkdtemp(prefix="det_input_trace_")
    tf.profiler.experimental.start(logdir)
    images, seconds, _ = reader()
    tf.profiler.experimental.stop()
    totals, counts = vision_profile.xspace_ops(logdir, by="name")
    # The ops TensorFlow runs, without tf.data's spans and the calls that hold other ops
    # (a cond's If, a map_fn's While, a function call), which would count their ops twice.
    ops = {k: v for k, v in totals.items() if not k.startswith(("tf.data", "Eager"))
           and k.rsplit(":", 1)[-1] not in CONTAINERS}
    return {"images": images, "wall_ms_per_image": 1000.0 * seconds / images,
            "op_ms_per_image_total": sum(ops.values()) / 1000.0 / images,
            "op_ms_per_image": {k: round(v / 1000.0 / images, 4)
                                for k, v in totals.most_common(60)},
            "op_count_per_image": {k: counts[k] / images for k, _ in totals.most_common(60)}}


def machine():
    """CPU model, cores, the versions of both sides and this checkout's commit."""
    import tensorflow as tf
    import tf_keras
    import keras
    import vision_rows

    import lite_launcher as ll

    commit = subprocess.run(["git", "-C", _ROOT, "rev-parse", "--short=7", "HEAD"],
                            capture_output=True, text=True, check=False).stdout.strip()
    dirty = subprocess.run(["git", "-C", _ROOT, "status", "--porcelain", "--", "lite_launcher"],
                           capture_output=True, text=True, check=False).stdout.strip()
    return {"commit": commit, "lite_launcher_modified": bool(dirty),
            "cpu_model": vision_rows.cpu_model(), "cpus": os.cpu_count(),
            "cpu_flags": vision_rows.cpu_features(),
            "versions": {"tensorflow": tf.__version__, "tf_keras": tf_keras.__version__,
                         "keras": keras.__version__, "lite_launcher": ll.__version__}}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--splits", nargs="+", default=list(SPLITS), choices=SPLITS)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--batches", type=int, default=64,
                        help="training batches per timed call")
    parser.add_argument("--warmup", type=int, default=16, help="training batches first")
    parser.add_argument("--num_images", type=int, default=NUM_IMAGES)
    parser.add_argument("--profile", action="store_true", help="op time by name, per side")
    parser.add_argument("--stages", action="store_true",
                        help="decode and parse apart, one thread each (CPU ms per image)")
    parser.add_argument("--data_dir", default=os.path.join(tempfile.gettempdir(),
                                                           "lite_detection_input"))
    parser.add_argument("--out", default=None, help="results file (default: "
                        "benchmarks/results/<date>-<commit>-detection-input[-profile].json)")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.batches < 1 or args.num_images < detection_rows.BATCH:
        parser.error("--rounds and --batches must be positive and --num_images at least "
                     f"the batch ({detection_rows.BATCH})")
    started = datetime.datetime.now(datetime.timezone.utc)
    state = machine()
    what = ("detection-input-profile" if args.profile else
            "detection-input-stages" if args.stages else "detection-input")
    out = args.out or os.path.join(_HERE, "results",
                                   f"{started:%Y-%m-%d}-{state['commit']}-{what}.json")
    results = {"kind": what.replace("-", "_"), "command": sys.argv,
               "file": os.path.relpath(out, _ROOT),
               "started": f"{started:%Y-%m-%d %H:%M} UTC", **state,
               "num_images": args.num_images, "batch": detection_rows.BATCH,
               "image_size": detection_rows.IMAGE_SIZE, "batches": args.batches,
               "warmup": args.warmup, "rows": {}}
    for model in args.models:
        input_glob = records(args.data_dir, model, args.num_images)
        for split in args.splits:
            label = f"{model} {split}"
            if args.stages:
                functions = {side: map_functions(side, model, input_glob, split)
                             for side in SIDES}
                for stage in ("decode", "parse"):
                    readers = {side: StageReader(*functions[side], input_glob, stage,
                                                 args.batches * detection_rows.BATCH,
                                                 args.warmup, args.num_images)
                               for side in SIDES}
                    if args.profile:
                        results["rows"][f"{label} {stage}"] = {
                            side: profile(readers[side]) for side in SIDES}
                        continue
                    per_round = compare(readers, args.rounds, f"{label} {stage}")
                    results["rows"][f"{label} {stage}"] = {"rounds": per_round,
                                                           "summary": summarize(per_round)}
                continue
            datasets = {side: build_dataset(side, model, input_glob, split) for side in SIDES}
            if args.profile:
                results["rows"][label] = {side: profile(Reader(
                    single_threaded(datasets[side]), split, args.batches, args.warmup))
                    for side in SIDES}
                for side in SIDES:
                    top = list(results["rows"][label][side]["op_ms_per_image"].items())[:8]
                    print(f"{label} {side}: " + "  ".join(f"{k} {v:.2f}" for k, v in top),
                          file=sys.stderr, flush=True)
                continue
            readers = {side: Reader(datasets[side], split, args.batches, args.warmup)
                       for side in SIDES}
            per_round = compare(readers, args.rounds, label)
            results["rows"][label] = {"rounds": per_round, "summary": summarize(per_round)}
            print(json.dumps({label: results["rows"][label]["summary"]}), flush=True)
    results["loadavg_end"] = list(os.getloadavg())
    with open(out, "w") as f:
        json.dump(results, f, indent=1)
    print(f"wrote {results['file']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
