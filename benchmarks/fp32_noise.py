"""How far apart two correct float32 runs of one deep network land: the figures behind the
TFM-reference tolerances of `tests/vision/fp32_noise.py`, measured on this machine.

The models, checkpoints and reference arrays are the tests' own: TFM 2.20's RetinaNet ResNet-50
FPN at 1/16 width (tests/vision/data/tfm_checkpoints/retinanet, written by
make_tfm_retinanet_checkpoints.py) and its Mask R-CNN at 1/16 width
(tfm_checkpoints/maskrcnn, make_tfm_maskrcnn_checkpoints.py), restored with
`init_checkpoint_modules: all` as test_retinanet_checkpoint.py / test_maskrcnn_checkpoint.py do.
One child process per oneDNN setting (`TF_ENABLE_ONEDNN_OPTS` 1 and 0: TensorFlow reads it once,
when it loads) runs both models and saves their outputs; this process compares them:

- `retinanet.lite_vs_tfm`: the tests' measure (`fp32_noise.relative_error`: max |difference|
  over mean |reference|) of lite's raw head outputs against TFM's, level 3 class outputs first
  (`cls_3`), and the worst of every level and kind;
- `retinanet.detections` / `maskrcnn.detections`: max |difference| of the detections against
  TFM's over the first `num_detections` rows (boxes in pixels of the 128-px image, scores, mask
  pixels), classes and counts compared exactly;
- `retinanet.served`: lite's SavedModel (`export_saved_model`, as the release export test) against
  lite in process and against TFM's served detections;
- `onednn_vs_eigen`: lite with oneDNN against lite with Eigen, same weights and inputs;
- `wrong_weight`: the control the tests check first: the restored model with one kernel's output
  channels reversed (the stem convolution), and the model as built (no restore), against TFM's.

    .venv/bin/python benchmarks/fp32_noise.py --out benchmarks/results/DATE-COMMIT-fp32-noise.json

Standard library, numpy, TensorFlow and lite; about a minute a child on a quiet 2-core machine.
"""

import argparse
import datetime
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)
_TESTS_VISION = os.path.join(_ROOT, "tests", "vision")
_DATA = os.path.join(_TESTS_VISION, "data", "tfm_checkpoints")
sys.path.insert(0, _HERE)

import vision_rows  # noqa: E402

# tests/vision/fp32_noise.py, by its path (this file has its name): the tests' own measure.
_SPEC = importlib.util.spec_from_file_location("tests_fp32_noise",
                                               os.path.join(_TESTS_VISION, "fp32_noise.py"))
test_noise = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(test_noise)

RETINANET = "retinanet_resnet50_fpn"
MASKRCNN = "maskrcnn_resnet50_fpn"
LEVELS = ("3", "4", "5", "6", "7")
SETTINGS = ("1", "0")  # TF_ENABLE_ONEDNN_OPTS of the two children: oneDNN, Eigen


def _params(family, name, modules="all"):
    import lite_launcher as ll  # pylint: disable=import-outside-toplevel

    with open(os.path.join(_DATA, family, "index.json")) as f:
        entry = json.load(f)["models"][name]
    params = ll.get_exp_config(entry["experiment"])
    params.task.model.override(entry["model"], is_strict=True)
    params.task.override({"init_checkpoint": os.path.join(_DATA, family, name),
                          "init_checkpoint_modules": modules}, is_strict=True)
    return params


def _reference(family, name):
    import numpy as np  # pylint: disable=import-outside-toplevel

    return np.load(os.path.join(_DATA, family, name, "reference.npz"))


def _retinanet_arrays(export_dir):
    """RetinaNet's raw outputs and detections (restored), its level-3 class outputs as built
    and with the stem kernel's output channels reversed, and its SavedModel's detections."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    import lite_launcher as ll  # pylint: disable=import-outside-toplevel

    ref = _reference("retinanet", RETINANET)
    params = _params("retinanet", RETINANET)
    task = ll.get_task(params.task)
    model = task.build_model()

    def run():
        return model(ref["images"], image_shape=ref["image_shape"],
                     output_intermediate_features=True, training=False)

    arrays = {"built_cls_3": run()["cls_outputs"]["3"]}
    task.initialize(model)
    outputs = run()
    for level in LEVELS:
        arrays[f"cls_{level}"] = outputs["cls_outputs"][level]
        arrays[f"box_{level}"] = outputs["box_outputs"][level]
    for key in ("detection_boxes", "detection_scores", "detection_classes", "num_detections"):
        arrays[key] = outputs[key]
    stem = next(w for w in model.backbone.weights if len(w.shape) == 4)
    value = stem.numpy()
    stem.assign(value[..., ::-1])
    arrays["permuted_cls_3"] = run()["cls_outputs"]["3"]
    stem.assign(value)
    saved = ll.export_saved_model(params, os.path.join(_DATA, "retinanet", RETINANET),
                                  export_dir, input_type="image_tensor", batch_size=1,
                                  input_image_size=[128, 128])
    served = tf.saved_model.load(saved).signatures["serving_default"](
        inputs=tf.constant(ref["image"]))
    for key, value in served.items():
        arrays[f"served_{key}"] = value
    return {key: np.asarray(value) for key, value in arrays.items()}, stem.path


def _maskrcnn_arrays():
    """Mask R-CNN's served detections and masks (the task's `tflite` signature, restored)."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    import lite_launcher as ll  # pylint: disable=import-outside-toplevel

    ref = _reference("maskrcnn", MASKRCNN)
    task = ll.get_task(_params("maskrcnn", MASKRCNN).task)
    model = task.build_model()
    task.initialize(model)
    fn, _ = task.build_serving_fn(model, "tflite", batch_size=1)
    served = fn(tf.constant(ref["images"]))
    return {f"maskrcnn_{key}": np.asarray(value) for key, value in served.items()}


def child(out_dir):
    """One oneDNN setting: both models' arrays to out_dir/arrays.npz, its state to state.json."""
    import numpy as np  # pylint: disable=import-outside-toplevel

    state = vision_rows.machine_state()
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    import lite_launcher  # pylint: disable=import-outside-toplevel

    state.update(tensorflow=tf.__version__, lite_launcher=lite_launcher.__file__)
    arrays, stem = _retinanet_arrays(os.path.join(out_dir, "export"))
    arrays.update(_maskrcnn_arrays())
    state["permuted_kernel"] = stem
    np.savez(os.path.join(out_dir, "arrays.npz"), **arrays)
    with open(os.path.join(out_dir, "state.json"), "w") as f:
        json.dump(state, f)


def detection_differences(actual, ref, prefix="", ref_prefix=""):
    """Max |difference| of boxes (pixels), scores and masks (where both have them) over the
    reference's first `num_detections` rows; counts and classes must be equal (else ValueError:
    then the figures would compare different detections)."""
    import numpy as np  # pylint: disable=import-outside-toplevel

    count = int(ref[ref_prefix + "num_detections"][0])
    if int(actual[prefix + "num_detections"][0]) != count or not np.array_equal(
            actual[prefix + "detection_classes"][0, :count].astype(np.int64),
            ref[ref_prefix + "detection_classes"][0, :count].astype(np.int64)):
        raise ValueError(f"{prefix or ref_prefix}detections: counts or classes differ")
    out = {"count": count}
    for key, name in (("detection_boxes", "box_px"), ("detection_scores", "score"),
                      ("detection_masks", "mask_pixel")):
        if prefix + key in actual and ref_prefix + key in ref:
            out[name] = float(np.abs(actual[prefix + key][0, :count]
                                     - ref[ref_prefix + key][0, :count]).max())
    return out


def raw_errors(actual, ref):
    """relative_error of every level's class and box outputs: {'cls_3': e, ...}."""
    return {f"{kind}_{level}": float(test_noise.relative_error(actual[f"{kind}_{level}"],
                                                               ref[f"{kind}_{level}"]))
            for kind in ("cls", "box") for level in LEVELS}


def compare(sides):
    """The figures from the children's arrays: {setting: arrays} -> the results' `figures`."""
    retinanet = _reference("retinanet", RETINANET)
    maskrcnn = dict(_reference("maskrcnn", MASKRCNN))
    figures = {}
    for setting, arrays in sides.items():
        raw = raw_errors(arrays, retinanet)
        served_vs_lite = detection_differences(arrays, arrays, prefix="served_")
        figures[setting] = {
            "retinanet": {
                "lite_vs_tfm": {"cls_3": raw["cls_3"], "worst": max(raw.values()),
                                "levels": raw},
                "detections": detection_differences(arrays, retinanet),
                "served": {"vs_lite": served_vs_lite,
                           "vs_tfm_served": detection_differences(
                               arrays, retinanet, prefix="served_", ref_prefix="served_")}},
            "maskrcnn": {"detections": detection_differences(
                {key[len("maskrcnn_"):]: value for key, value in arrays.items()
                 if key.startswith("maskrcnn_")}, maskrcnn)},
            "wrong_weight": {
                "permuted_kernel_cls_3": float(test_noise.relative_error(
                    arrays["permuted_cls_3"], retinanet["cls_3"])),
                "as_built_cls_3": float(test_noise.relative_error(
                    arrays["built_cls_3"], retinanet["cls_3"]))}}
    on, off = sides["1"], sides["0"]
    raw = raw_errors(off, on)
    figures["onednn_vs_eigen"] = {"cls_3": raw["cls_3"], "worst": max(raw.values()),
                                  "levels": raw}
    return figures


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="results JSON (default benchmarks/results/"
                        "<UTC date>-<commit>-fp32-noise.json)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child)
        return 0
    import numpy as np  # pylint: disable=import-outside-toplevel

    commit = subprocess.run(["git", "-C", _ROOT, "rev-parse", "--short=7", "HEAD"],
                            capture_output=True, text=True, check=False).stdout.strip()
    started = datetime.datetime.now(datetime.timezone.utc)
    out = args.out or os.path.join(
        "benchmarks", "results", f"{started:%Y-%m-%d}-{commit or 'nocommit'}-fp32-noise.json")
    default = vision_rows.machine_state()  # oneDNN as TensorFlow decides here (the tests')
    del default["cpu_flags"]
    sides, states = {}, {}
    with tempfile.TemporaryDirectory() as work:
        for setting in SETTINGS:
            out_dir = os.path.join(work, setting)
            os.makedirs(out_dir)
            env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS=setting)
            env.pop("TF_CPP_MIN_LOG_LEVEL", None)
            subprocess.run([sys.executable, os.path.abspath(__file__), "--child", out_dir],
                           env=env, check=True, cwd=work)
            with open(os.path.join(out_dir, "state.json")) as f:
                states[setting] = json.load(f)
            with np.load(os.path.join(out_dir, "arrays.npz")) as arrays:
                sides[setting] = dict(arrays)
    if states["1"]["onednn"] is not True or states["0"]["onednn"] is not False:
        raise SystemExit(f"TF_ENABLE_ONEDNN_OPTS was not honoured: {states}")
    figures = compare(sides)
    results = {
        "kind": "fp32_noise", "file": out, "command": [
            "benchmarks/fp32_noise.py"] + (sys.argv[1:] if argv is None else list(argv)),
        "commit": commit, "started": f"{started:%Y-%m-%d %H:%M} UTC",
        "machine": {"cpu_model": default["cpu_model"], "cores": default["cpus"],
                    "tensorflow": states["1"]["tensorflow"],
                    "onednn_by_default": default["onednn"],
                    "loadavg_before": default["loadavg"]},
        "children": {("onednn" if s == "1" else "eigen"): dict(states[s], TF_ENABLE_ONEDNN_OPTS=s)
                     for s in SETTINGS},
        "models": {"retinanet": f"tests/vision/data/tfm_checkpoints/retinanet/{RETINANET}",
                   "maskrcnn": f"tests/vision/data/tfm_checkpoints/maskrcnn/{MASKRCNN}"},
        "onednn": figures["1"], "eigen": figures["0"],
        "onednn_vs_eigen": figures["onednn_vs_eigen"],
        "loadavg_after": list(os.getloadavg())}
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(results, f, indent=1)
    print(json.dumps({key: results[key] for key in ("file", "onednn", "eigen",
                                                    "onednn_vs_eigen")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
