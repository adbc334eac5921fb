"""How long lite's vision models take to build, and how often each lite layer's `call` runs
while they are built.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/model_build.py [--repeats 5] [--models ...]
    ... --count      # also: call() runs per lite layer class during one build of each model

Build time is construction to a model ready for its first call (every weight created: the
builders return built models). Each model is built once to warm up (imports, Keras's and
TensorFlow's one-time costs), then `--repeats` times; the median and the range are printed.
A layer whose `call` runs twice per instance while a functional model is built has no
`build` / `compute_output_shape` Keras can use without tracing it (see
`tests/vision/test_build_once.py`).
"""

import argparse
import collections
import functools
import inspect
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _backbone(kind: str, size: int, **fields):
    def build():
        from lite_launcher.vision.configs import backbones as backbone_configs
        from lite_launcher.vision.modeling.backbones.factory import build_backbone
        from lite_launcher.vision.modeling.layers.nn_layers import NormSettings
        config = backbone_configs.Backbone(type=kind)
        for name, value in fields.items():
            setattr(getattr(config, kind), name, value)
        return build_backbone([size, size, 3], config, NormSettings())
    return build


def _experiment(name: str, builder: str):
    def build():
        import importlib
        from lite_launcher import get_exp_config
        config = get_exp_config(name).task
        module, function = builder.rsplit(".", 1)
        return getattr(importlib.import_module(module), function)(
            config.model, config.losses.l2_weight_decay)
    return build


MODELS = {
    "mobilenet_v2": _backbone("mobilenet", 224, model_id="MobileNetV2"),
    "mobilenet_v3_large": _backbone("mobilenet", 224, model_id="MobileNetV3Large"),
    "mobilenet_v4_conv_small": _backbone("mobilenet", 224, model_id="MobileNetV4ConvSmall"),
    "resnet50": _backbone("resnet", 224, model_id=50),
    "spinenet49": _backbone("spinenet", 256, model_id="49"),
    "mnv2_deeplabv3_pascal": _experiment(
        "mnv2_deeplabv3_pascal", "lite_launcher.vision.modeling.segmentation_model."
        "build_segmentation_model"),
    "retinanet_mobile_coco": _experiment(
        "retinanet_mobile_coco", "lite_launcher.vision.modeling.retinanet_model.build_retinanet"),
    "maskrcnn_mobilenet_coco": _experiment(
        "maskrcnn_mobilenet_coco", "lite_launcher.vision.modeling.maskrcnn_model.build_maskrcnn"),
}


def lite_layer_classes():
    """Every `keras.layers.Layer` subclass defined in `lite_launcher.vision.modeling`."""
    import importlib
    import pkgutil

    import keras

    import lite_launcher.vision.modeling as modeling
    classes = set()
    for info in pkgutil.walk_packages(modeling.__path__, modeling.__name__ + "."):
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if (issubclass(cls, keras.layers.Layer) and cls.__module__ == module.__name__
                    and "call" in vars(cls)):
                classes.add(cls)
    return sorted(classes, key=lambda c: (c.__module__, c.__name__))


def count_calls(build):
    """{class name: (call() runs, instances that ran)} over one `build()`."""
    runs = collections.Counter()
    instances = collections.defaultdict(set)
    originals = {}

    def counting(cls, original):
        @functools.wraps(original)  # Keras reads call()'s signature
        def call(self, *args, **kwargs):
            if type(self) is cls:  # pylint: disable=unidiomatic-typecheck
                runs[cls.__name__] += 1
                instances[cls.__name__].add(id(self))
            return original(self, *args, **kwargs)
        return call

    for cls in lite_layer_classes():
        originals[cls] = cls.call
        cls.call = counting(cls, cls.call)
    try:
        model = build()
    finally:
        for cls, original in originals.items():
            cls.call = original
    del model
    return {name: (runs[name], len(instances[name])) for name in sorted(runs)}


def _timed(build):
    """(wall seconds, process CPU seconds) of one `build()` in a fresh Keras session (CPU time
    is steadier on a shared machine)."""
    import keras
    keras.backend.clear_session()
    wall, cpu = time.perf_counter(), time.process_time()
    build()
    return time.perf_counter() - wall, time.process_time() - cpu


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--count", action="store_true")
    args = parser.parse_args(argv)

    import keras
    import tensorflow as tf
    print(f"tensorflow {tf.__version__}, keras {keras.__version__}, "
          f"TF_ENABLE_ONEDNN_OPTS={os.environ.get('TF_ENABLE_ONEDNN_OPTS', '(unset)')}")
    for name in args.models:
        build = MODELS[name]
        first = _timed(build)[0]
        times, cpu = zip(*[_timed(build) for _ in range(args.repeats)])
        print(f"{name:24s} median {statistics.median(times):5.2f} s "
              f"[{min(times):.2f}-{max(times):.2f}], CPU {statistics.median(cpu):5.2f} s "
              f"[{min(cpu):.2f}-{max(cpu):.2f}]; first {first:.2f} s", flush=True)
        if args.count:
            keras.backend.clear_session()
            for cls_name, (runs, instances) in count_calls(build).items():
                flag = "  <- traced twice" if runs >= 2 * instances else ""
                print(f"    {cls_name:34s} {runs:4d} calls / {instances:3d} layers{flag}")


if __name__ == "__main__":
    main()
