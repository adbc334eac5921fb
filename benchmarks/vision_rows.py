"""The vision benchmark rows: ResNet-18 / ResNet-50 (`resnet_imagenet`), MobileNetV2 /
MobileNetV3Large (`mobilenet_imagenet`) and ViT-Ti/16 (`deit_imagenet_pretrain`) on synthetic
JPEG TFRecords in TFM's format, lite_launcher vs a raw Keras 3 loop on the same model and
input, and TFM itself (its own experiment, tf_keras) in TFM's venv.

Both sides train the model their experiment's config builds, on the dataset its input pipeline
builds, with the config's loss and optimizer; `--dtype` sets `runtime.mixed_precision_dtype`
on every side (TFM's policy set as official/vision/train.py sets it). lite_launcher runs
`ll.run_experiment`; the raw side runs `for _ in tf.range(n): step(next(it))` in one
`tf.function` with the same metric updates; the TFM side (`--side tfm`, run with
`--tfm_python`, default $TFM_PYTHON or the repository's .tfm_venv) applies the same overrides
(TFM's field names) and runs TFM's `train_lib.run_experiment`. Train steps/sec (input pipeline
included) over outer loops of `steps_per_loop` steps after the warm-up loops; images/sec =
steps/sec x batch. With `--eval_steps N` (lite, tfm) the run is train_and_eval and also gives
eval steps/sec of a timed evaluation of N steps (`eval_layout`).

    .venv/bin/python benchmarks/vision_rows.py --model resnet18 --side lite
    .venv/bin/python benchmarks/vision_rows.py --smoke            # lite and raw, tiny and quick
    .venv/bin/python benchmarks/vision_rows.py --side all --with_tfm   # lite, raw and TFM

prints one `BENCH_RESULT {json}` line per (model, side) (see measure.py), with the machine
state (`machine_state`: CPU, cores, CPU flags, oneDNN) and dtype / policy. With `--side all`
each side runs in its own process, one after the other.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(1, os.path.dirname(_HERE))

import measure  # noqa: E402

MODELS = {"resnet50": 50, "resnet18": 18, "mobilenetv2": "MobileNetV2",
          "mobilenetv3large": "MobileNetV3Large", "vit_ti16": "vit-ti16"}
# The experiment (the same name in lite_launcher and TFM) and backbone field of each model.
# ViT-Ti/16 trains with DeiT's recipe (RandAugment, MixUp / CutMix, AdamW, soft labels).
EXPERIMENTS = {"resnet50": "resnet_imagenet", "resnet18": "resnet_imagenet",
               "mobilenetv2": "mobilenet_imagenet", "mobilenetv3large": "mobilenet_imagenet",
               "vit_ti16": "deit_imagenet_pretrain"}
SIDES = ("lite", "raw", "tfm")
DTYPES = ("float32", "bfloat16")
# Candidate as-shipped defaults for lite's CPU input pipeline / thread pools (compared in
# docs/benchmarks.md "As shipped on a CPU"; nothing was shipped),
# applied to the lite side only: name -> (tf.data options, DataConfig overrides, inter-op
# threads). None of them changes what is computed, only where and when.
VARIANTS = {
    "base": ({}, {}, None),
    "tf_data_1_thread": ({"private_threadpool_size": 1}, {}, None),
    "tf_data_2_threads": ({"private_threadpool_size": 2}, {}, None),
    "no_map_parallelization": ({"map_parallelization": False}, {}, None),
    "prefetch_2": ({}, {"prefetch_buffer_size": 2}, None),
    "ram_budget_1gib": ({}, {"ram_budget": 1}, None),
    "inter_op_1": ({}, {}, 1),
}
# TFM's venv: $TFM_PYTHON, else the one setup_tfm_env.sh makes at the repository root.
DEFAULT_TFM_PYTHON = os.environ.get(
    "TFM_PYTHON", os.path.join(os.path.dirname(_HERE), ".tfm_venv", "bin", "python"))
IMAGE_SIZE = 64
BATCH = 16
NUM_CLASSES = 1001
# The source images are larger than the input, so that the random crop has room.
SOURCE_SIZE = 80
NUM_IMAGES = 512
NUM_SHARDS = 4
WARMUP_LOOPS = 2
NEVER = 100 * 10**7


def write_synthetic_tfrecords(data_dir, num_images=NUM_IMAGES, num_shards=NUM_SHARDS):
    """Random-noise JPEGs with random labels, in TFM's format; returns the file glob.

    Written once per data_dir (seeded), so every side reads the same files.
    """
    import numpy as np
    import tensorflow as tf

    pattern = os.path.join(data_dir, "train-*-of-*")
    if tf.io.gfile.glob(pattern):
        return pattern
    os.makedirs(data_dir, exist_ok=True)
    rng = np.random.default_rng(0)
    writers = [tf.io.TFRecordWriter(os.path.join(data_dir, f"train-{k:05d}-of-{num_shards:05d}"))
               for k in range(num_shards)]
    for i in range(num_images):
        pixels = rng.integers(0, 256, (SOURCE_SIZE, SOURCE_SIZE, 3), dtype=np.uint8)
        feature = {
            "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(
                value=[tf.io.encode_jpeg(pixels, quality=90).numpy()])),
            "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(
                value=[int(rng.integers(0, NUM_CLASSES))])),
        }
        example = tf.train.Example(features=tf.train.Features(feature=feature))
        writers[i % num_shards].write(example.SerializeToString())
    for writer in writers:
        writer.close()
    return pattern


def _backbone(model):
    if EXPERIMENTS[model] == "deit_imagenet_pretrain":
        return {"vit": {"model_name": MODELS[model]}}
    if EXPERIMENTS[model] == "mobilenet_imagenet":
        return {"mobilenet": {"model_id": MODELS[model]}}
    return {"resnet": {"model_id": MODELS[model]}}


def overrides(model, input_glob, steps_per_loop, loops, xla, dtype=None, num_gpus=None,
              eval_steps=0):
    """The model's experiment at 64x64, batch 16, on the synthetic files.

    `xla` None: `runtime.enable_xla` as the experiment says (as shipped); else set to it.
    `eval_steps` 0: train only. Else (mode train_and_eval) the WARMUP_LOOPS + `loops` train
    loops run without an evaluation between them, then one evaluation of `eval_steps` steps
    (it traces), one 1-step train loop and the timed evaluation (`eval_layout`).

    Train summaries are due every outer loop on both launchers: Orbit writes the loop outputs
    after every loop whatever the interval (a summary dir is set), so lite does the same work.

    TFM's field names, so the same dict overrides lite_launcher's and TFM's experiment.
    """
    runtime = {"distribution_strategy": "off"}
    if xla is not None:
        runtime["enable_xla"] = xla
    if dtype is not None:  # the GPU rows (gpu_vision_rows.py)
        runtime["mixed_precision_dtype"] = dtype
    if num_gpus is not None:
        runtime["num_gpus"] = num_gpus
    trained = steps_per_loop * (WARMUP_LOOPS + loops)
    task = {"model": {"input_size": [IMAGE_SIZE, IMAGE_SIZE, 3], "backbone": _backbone(model)},
            "train_data": {"input_path": input_glob, "global_batch_size": BATCH,
                           "shuffle_buffer_size": 256}}
    trainer = {"steps_per_loop": steps_per_loop, "train_steps": trained,
               "summary_interval": steps_per_loop, "checkpoint_interval": NEVER,
               "validation_interval": NEVER}
    if eval_steps:
        task["validation_data"] = {"input_path": input_glob, "global_batch_size": BATCH}
        # Evaluations at `trained` (tracing) and at the end, one step later (timed).
        trainer.update(train_steps=trained + 1, validation_interval=trained,
                       validation_steps=eval_steps)
    return {"runtime": runtime, "task": task, "trainer": trainer}


def eval_layout(train_times, eval_times, steps_per_loop, loops, eval_steps):
    """(train steps/s, eval steps/s) of a train_and_eval run laid out by `overrides`.

    Train: the `loops` loops after the WARMUP_LOOPS ones, all before the first evaluation.
    Eval: the second evaluation, from the end of the 1-step train loop before it to its end.
    """
    trained = WARMUP_LOOPS + loops
    if len(train_times) != trained + 1 or len(eval_times) != 2:
        raise ValueError(f"expected {trained + 1} train loops and 2 evaluations, got "
                         f"{len(train_times)} and {len(eval_times)}")
    train = measure.steady_rate(train_times[:trained], steps_per_loop, WARMUP_LOOPS)
    return train, eval_steps / (eval_times[1] - train_times[-1])


def make_config(model, input_glob, steps_per_loop, loops, xla, dtype=None, num_gpus=None,
                eval_steps=0):
    """lite_launcher's experiment of `model` with `overrides`."""
    import lite_launcher as ll

    params = ll.get_exp_config(EXPERIMENTS[model])
    params.override(overrides(model, input_glob, steps_per_loop, loops, xla, dtype, num_gpus,
                              eval_steps))
    params.validate()
    return params


def _versions(side):
    import tensorflow as tf

    if side == "tfm":
        import tf_keras
        return {"tensorflow": tf.__version__, "tf_keras": tf_keras.__version__}
    import keras

    import lite_launcher as ll
    return {"tensorflow": tf.__version__, "keras": keras.__version__,
            "lite_launcher": ll.__version__}


def workload_name(model):
    """The results' workload name, e.g. resnet_imagenet_resnet18."""
    return f"{EXPERIMENTS[model]}_{model}"


def _cpuinfo():
    try:
        with open("/proc/cpuinfo") as f:
            return f.read()
    except OSError:
        return ""


def cpu_model():
    """The CPU's model name from /proc/cpuinfo (Linux), else platform.processor()."""
    import platform
    for line in _cpuinfo().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


# /proc/cpuinfo flags that decide which oneDNN kernels a bf16 (and int8) step can use, and
# whether TensorFlow turns oneDNN on by itself (AVX-512 VNNI / BF16 or AMX).
CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16")


def cpu_features(cpuinfo=None):
    """{flag: present} for CPU_FLAGS, from the first `flags` line of /proc/cpuinfo; {} when
    there is none (not Linux): the report then says "not recorded"."""
    text = _cpuinfo() if cpuinfo is None else cpuinfo
    for line in text.splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            return {flag: flag in flags for flag in CPU_FLAGS}
    return {}


def machine_state():
    """The CPU and what TensorFlow computes with in this process: CPU model, core count, CPU
    flags, oneDNN on or off (as TensorFlow loaded it), the load average. Every record of the
    vision benchmarks carries it."""
    from tensorflow.python.util import _pywrap_util_port  # pylint: disable=import-outside-toplevel

    return {"onednn": bool(_pywrap_util_port.IsMklEnabled()),
            "tf_enable_onednn_opts": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
            "cpu_model": cpu_model(), "cpus": os.cpu_count(), "cpu_flags": cpu_features(),
            "loadavg": list(os.getloadavg())}


def compute_state(enable_xla, dtype=None, policy=None):
    """`machine_state` plus the config's `runtime.enable_xla`, the dtype asked for
    (`runtime.mixed_precision_dtype`, float32 when unset) and the global Keras policy the
    model was built under (the evidence that the dtype was applied)."""
    state = machine_state()
    state.update(enable_xla=bool(enable_xla), dtype=dtype or "float32", policy=policy)
    return state


def _result(side, model, steps_per_loop, loops, times, first_loop_s, eval_times=None,
            eval_steps=0):
    if eval_steps:
        rate, eval_rate = eval_layout(times, eval_times, steps_per_loop, loops, eval_steps)
        times = times[:WARMUP_LOOPS + loops]
    else:
        rate, eval_rate = measure.steady_rate(times, steps_per_loop, WARMUP_LOOPS), None
    return {"side": side, "workload": workload_name(model), "row": f"train{steps_per_loop}",
            "loops": loops, "steps_per_sec": rate, "images_per_sec": rate * BATCH,
            "eval_steps": eval_steps, "eval_steps_per_sec": eval_rate,
            "loop_ms": measure.loop_ms(times, WARMUP_LOOPS), "first_loop_s": first_loop_s,
            "batch": BATCH, "image_size": IMAGE_SIZE, "versions": _versions(side)}


def _apply_variant(variant, params, task):
    """Applies a VARIANTS entry to lite's config, task and thread pools (before any op runs)."""
    import tensorflow as tf

    options, data, inter_op = VARIANTS[variant]
    if inter_op is not None:
        tf.config.threading.set_inter_op_parallelism_threads(inter_op)
    if data:
        params.task.train_data.override(data)
    if options:
        build_inputs = task.build_inputs

        def with_options(data_config, *args, **kwargs):
            opts = tf.data.Options()
            if "private_threadpool_size" in options:
                opts.threading.private_threadpool_size = options["private_threadpool_size"]
            if "map_parallelization" in options:
                opts.experimental_optimization.map_parallelization = options[
                    "map_parallelization"]
            return build_inputs(data_config, *args, **kwargs).with_options(opts)

        task.build_inputs = with_options


def lite_params_and_task(model, input_glob, steps_per_loop, loops, xla, model_dir, dtype=None,
                         num_gpus=None, eval_steps=0):
    """lite_launcher's (params, task) of `model` with `overrides`, the dtype policy set as
    lite-train sets it (before the model is built)."""
    import lite_launcher as ll
    from lite_launcher.common import distribute_utils as strategy_lib

    params = make_config(model, input_glob, steps_per_loop, loops, xla, dtype, num_gpus,
                         eval_steps)
    strategy_lib.set_mixed_precision_policy(params.runtime.mixed_precision_dtype)
    return params, ll.get_task(params.task, logging_dir=model_dir)


def tfm_params_and_task(model, input_glob, steps_per_loop, loops, xla, model_dir, dtype=None,
                        eval_steps=0):
    """TFM's (params, task) of `model` with `overrides` (TFM's venv only), the policy set as
    TFM's official/vision/train.py sets it."""
    from official.core import exp_factory, task_factory
    from official.modeling import performance
    import official.vision.registry_imports  # noqa: F401  (registers the experiments)

    params = exp_factory.get_exp_config(EXPERIMENTS[model])
    params.override(overrides(model, input_glob, steps_per_loop, loops, xla, dtype,
                              eval_steps=eval_steps), is_strict=True)
    params.validate()
    params.lock()
    if params.runtime.mixed_precision_dtype:
        performance.set_mixed_precision_policy(params.runtime.mixed_precision_dtype)
    return params, task_factory.get_task(params.task, logging_dir=model_dir)


def measure_lite(model, input_glob, steps_per_loop, loops, xla, model_dir, dtype=None,
                 num_gpus=None, eval_steps=0, variant="base"):
    """lite_launcher's public path: get_exp_config -> get_task -> run_experiment."""
    import keras
    import tensorflow as tf

    import lite_launcher as ll

    params, task = lite_params_and_task(model, input_glob, steps_per_loop, loops, xla,
                                        model_dir, dtype, num_gpus, eval_steps)
    _apply_variant(variant, params, task)
    clock = measure.LoopClock()
    ll.run_experiment(distribution_strategy=ll.get_distribution_strategy("off"), task=task,
                      mode="train_and_eval" if eval_steps else "train", params=params,
                      model_dir=model_dir, train_actions=[clock.train_action],
                      eval_actions=[clock.eval_action])
    result = _result("lite", model, steps_per_loop, loops, clock.train_times,
                     clock.first_loop_age_s, clock.eval_times, eval_steps)
    result.update(compute_state(params.runtime.enable_xla, params.runtime.mixed_precision_dtype,
                                keras.mixed_precision.global_policy().name))
    result["gpu_devices"] = [d.name for d in tf.config.list_logical_devices("GPU")]
    result["variant"] = variant
    # The Trainer compiles a convnet's step with XLA only with a GPU or TPU (trainer.py).
    result["xla_compiled"] = bool(params.runtime.enable_xla and (
        tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("TPU")))
    return result


def measure_raw(model, input_glob, steps_per_loop, loops, xla, dtype=None):
    """The same model, dataset, loss and optimizer in a bare `tf.range` loop (train only)."""
    import keras
    import tensorflow as tf

    import lite_launcher as ll
    from lite_launcher.common import distribute_utils as strategy_lib

    params = make_config(model, input_glob, steps_per_loop, loops, xla, dtype)
    strategy_lib.set_mixed_precision_policy(params.runtime.mixed_precision_dtype)
    xla = bool(params.runtime.enable_xla)
    task = ll.get_task(params.task)
    network = task.build_model()
    optimizer = task.create_optimizer(params.trainer.optimizer_config, params.runtime)
    optimizer.build(network.trainable_variables)
    # What lite_launcher's Trainer updates each step: the task's metrics and the mean loss.
    metrics = task.build_metrics(training=True)
    mean_loss = keras.metrics.Mean(name="training_loss")
    iterator = iter(task.build_inputs(params.task.train_data))

    def step(batch):
        images, labels = batch
        if params.task.losses.one_hot:  # the config's loss
            labels = tf.one_hot(labels, NUM_CLASSES)
        with tf.GradientTape() as tape:
            outputs = network(images, training=True)
            loss = task.build_losses(labels, outputs, network.losses)
        grads = tape.gradient(loss, network.trainable_variables)
        optimizer.apply_gradients(zip(grads, network.trainable_variables))
        for metric in metrics:
            metric.update_state(labels, outputs)
        mean_loss.update_state(loss)
        return loss

    @tf.function(jit_compile=xla)
    def one_step(batch):
        return step(batch)

    @tf.function
    def loop(n):
        for _ in tf.range(n):
            one_step(next(iterator))

    n = tf.constant(steps_per_loop, tf.int32)
    times = []
    first = None
    for _ in range(WARMUP_LOOPS + loops):
        loop(n)
        times.append(time.perf_counter())
        if first is None:
            first = measure.process_age_s()
    result = _result("raw", model, steps_per_loop, loops, times, first)
    result.update(compute_state(xla, params.runtime.mixed_precision_dtype,
                                keras.mixed_precision.global_policy().name))
    result["xla_compiled"] = bool(xla)  # the raw step is compiled exactly when asked
    return result


def measure_tfm(model, input_glob, steps_per_loop, loops, xla, model_dir, dtype=None,
                eval_steps=0):
    """TFM's own experiment through `train_lib.run_experiment` (TFM's venv only), with the
    mixed-precision policy set as TFM's official/vision/train.py sets it."""
    import tf_keras
    from official.common import distribute_utils
    from official.core import train_lib

    params, task = tfm_params_and_task(model, input_glob, steps_per_loop, loops, xla,
                                       model_dir, dtype, eval_steps)
    clock = measure.LoopClock()
    train_lib.run_experiment(
        distribution_strategy=distribute_utils.get_distribution_strategy("off"), task=task,
        mode="train_and_eval" if eval_steps else "train", params=params, model_dir=model_dir,
        train_actions=[clock.train_action], eval_actions=[clock.eval_action])
    result = _result("tfm", model, steps_per_loop, loops, clock.train_times,
                     clock.first_loop_age_s, clock.eval_times, eval_steps)
    result.update(compute_state(params.runtime.enable_xla, params.runtime.mixed_precision_dtype,
                                tf_keras.mixed_precision.global_policy().name))
    # TFM compiles the train step only with num_gpus > 0 (base_trainer).
    result["xla_compiled"] = bool(params.runtime.enable_xla and params.runtime.num_gpus > 0)
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", nargs="+", default=list(MODELS), choices=sorted(MODELS))
    parser.add_argument("--side", default="all", choices=SIDES + ("all",))
    parser.add_argument("--steps_per_loop", type=int, default=20)
    parser.add_argument("--loops", type=int, default=5, help="timed outer loops")
    parser.add_argument("--xla", action="store_true", help="runtime.enable_xla=true")
    parser.add_argument("--dtype", default=None, choices=("float32", "float16", "bfloat16"),
                        help="runtime.mixed_precision_dtype, on every side (TFM's: its policy "
                        "set as official/vision/train.py sets it)")
    parser.add_argument("--eval_steps", type=int, default=0,
                        help="> 0: mode train_and_eval, then eval steps/s of a timed "
                        "evaluation of this many steps after the train loops (lite, tfm)")
    parser.add_argument("--num_gpus", type=int, default=None, help="lite side: runtime.num_gpus")
    parser.add_argument("--variant", default="base", choices=sorted(VARIANTS),
                        help="lite side: a candidate input-pipeline / thread setting "
                        "(docs/benchmarks.md, 'As shipped on a CPU')")
    parser.add_argument("--as_shipped", action="store_true",
                        help="each launcher's defaults: runtime.enable_xla as the experiment "
                        "says (--xla ignored) and, on the lite side, lite-train's oneDNN "
                        "choice (lite_launcher.common.onednn) before TensorFlow loads; TFM: "
                        "TensorFlow's own")
    parser.add_argument("--data_dir", default=None,
                        help="where the synthetic TFRecords are (written if missing)")
    parser.add_argument("--with_tfm", action="store_true",
                        help="with --side all: also the TFM side, in --tfm_python")
    parser.add_argument("--tfm_python", default=DEFAULT_TFM_PYTHON,
                        help="the Python of TFM's venv (benchmarks/setup_tfm_env.sh)")
    parser.add_argument("--smoke", action="store_true",
                        help="ResNet-18, 2 x 2-step timed loops, 64 images: checks it runs")
    parser.add_argument("--write_data_only", action="store_true",
                        help="write the synthetic TFRecords into --data_dir and exit (run.py "
                        "does this once before the rounds, outside every measured process)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.model, args.steps_per_loop, args.loops = args.model[:1] if len(
            args.model) == 1 else ["resnet18"], 2, 2
        args.eval_steps = min(args.eval_steps, 2)
    data_dir = args.data_dir or os.path.join(
        tempfile.gettempdir(), "lite_vision_bench_smoke" if args.smoke else "lite_vision_bench")
    num_images = 64 if args.smoke else NUM_IMAGES
    if args.write_data_only:
        print(write_synthetic_tfrecords(data_dir, num_images=num_images))
        return
    if args.side == "all":
        # Written here once, so every side (and TFM's venv) reads the same files.
        write_synthetic_tfrecords(data_dir, num_images=num_images)
        sides = SIDES if args.with_tfm else ("lite", "raw")
        # Each side in a fresh process, so that none inherits another's threads or caches.
        for model in args.model:
            for side in sides:
                python = args.tfm_python if side == "tfm" else sys.executable
                command = [python, os.path.abspath(__file__), "--model", model,
                           "--side", side, "--steps_per_loop", str(args.steps_per_loop),
                           "--loops", str(args.loops), "--data_dir", data_dir]
                if args.xla:
                    command.append("--xla")
                if args.dtype:
                    command += ["--dtype", args.dtype]
                if args.eval_steps and side != "raw":
                    command += ["--eval_steps", str(args.eval_steps)]
                if args.as_shipped:
                    command.append("--as_shipped")
                if args.smoke:
                    command.append("--smoke")
                subprocess.run(command, check=True)
        return
    xla = None if args.as_shipped else args.xla
    if args.as_shipped and args.side == "lite":
        from lite_launcher.common import onednn  # pylint: disable=import-outside-toplevel
        onednn.enable_by_default()  # what lite-train does, before TensorFlow loads
    input_glob = write_synthetic_tfrecords(data_dir, num_images=num_images)
    for model in args.model:
        if args.side == "tfm":
            result = measure_tfm(model, input_glob, args.steps_per_loop, args.loops, xla,
                                 tempfile.mkdtemp(prefix="tfm_vision_bench_"), args.dtype,
                                 args.eval_steps)
        elif args.side == "lite":
            model_dir = tempfile.mkdtemp(prefix="lite_vision_bench_")
            result = measure_lite(model, input_glob, args.steps_per_loop, args.loops, xla,
                                  model_dir, args.dtype, args.num_gpus, args.eval_steps,
                                  args.variant)
        else:
            result = measure_raw(model, input_glob, args.steps_per_loop, args.loops, xla,
                                 args.dtype)
        result["as_shipped"] = args.as_shipped
        measure.emit(result)


if __name__ == "__main__":
    main()
