"""A SavedModel as a `.tflite` file, with post-training quantization (TFM's
official/vision/serving/export_tflite_lib.py).

The SavedModel is one `lite-export --input_type tflite` wrote: its `serving_default` takes the
model's input image already preprocessed (float32 [batch, height, width, 3], normalised as the
task's input pipeline normalises it) and skips all preprocessing, so that the whole graph can
be quantized. `convert_tflite_model` runs TensorFlow's TFLite converter on it with TFM's
`quant_type`s:

| quant_type | what the converter does | calibrated on train_data | file's input / output |
|---|---|---|---|
| None, `none` | float32 | no | float32 |
| `default` | dynamic range: weights int8, activations float | no | float32 |
| `fp16` | weights float16 | no | float32 |
| `int8` | integer, float kernels where an op has no integer one | yes | float32 |
| `int8_full` | integer only (TFLITE_BUILTINS_INT8) | yes | uint8 |
| `int8_full_int8_io` | integer only | yes | int8 |
| `uint8` | TFM's TF1 settings (`inference_type` uint8, `default_ranges_stats`, `quantized_input_stats`), which TensorFlow 2's converter ignores: the same file as `default` (TFM's too) | no | float32 |
| `qat`, `qat_fp32_io` | refused: they convert a quantization-aware-trained model (fake-quant ops in the graph), and lite trains none | - | - |

Calibration (the integer types), as TFM's `representative_dataset`: the experiment's own
`train_data` through the task's input pipeline (`task.build_inputs`) with batch size 1 and
float32, its first `calibration_steps` images (images without 3 channels skipped).

Families, as TFM's: image classification, semantic segmentation, RetinaNet and Mask R-CNN
(`SUPPORTED_TASKS`). TFM converts its RetinaNets with `nms_version: 'tflite'` (TFLite's
custom TFLite_Detection_PostProcess op), which lite does not implement; lite's RetinaNet
converts with its own NMS (`v2`, `v1`, `batched`), which TFLite's builtin ops hold. Lite's
Mask R-CNN does not convert: its ROI align slices 7-D tensors, beyond TFLite's builtin
STRIDED_SLICE (at most 5-D); it is refused in one line (`check_supported`) before any work.
"""

from __future__ import annotations

import dataclasses
import glob
import os
from typing import Iterator, List, Optional, Sequence

from lite_launcher.common.errors import ConfigError

# TFM 2.20's quant types (None: no quantization).
QUANT_TYPES = ("none", "default", "fp16", "int8", "int8_full", "int8_full_int8_io", "uint8",
               "qat", "qat_fp32_io")
QAT_TYPES = ("qat", "qat_fp32_io")
# The experiment task configs TFM's exporter supports, by lite's config class name: what their
# `tflite` signature returns.
SUPPORTED_TASKS = {
    "ImageClassificationTask": ("image classification", ("logits", "probs")),
    "SemanticSegmentationTask": ("semantic segmentation", ("logits", "predicted_mask")),
    "RetinaNetTask": ("RetinaNet", ("detection_boxes", "detection_scores")),
    "MaskRCNNTask": ("Mask R-CNN", ("detection_boxes", "detection_masks")),
}
# Families whose SavedModel TFLite's builtin ops cannot hold (see the module docstring).
UNCONVERTIBLE_TASKS = {
    "MaskRCNNTask": "its ROI align slices 7-D tensors and TFLite's builtin STRIDED_SLICE "
                    "takes at most 5 (TensorFlow's converter fails on it); export it as a "
                    "SavedModel (lite-export) instead",
}


def normalize_quant_type(quant_type: Optional[str]) -> Optional[str]:
    """`quant_type` checked: None for no quantization (None, '' or 'none'), else TFM's name.

    Raises:
      ConfigError: an unknown type, or a QAT type (lite trains no QAT model).
    """
    if quant_type in (None, "", "none"):
        return None
    if quant_type in QAT_TYPES:
        raise ConfigError(f"--quant_type {quant_type!r} converts a quantization-aware-trained "
                          f"model (fake-quant ops in the graph), which lite does not train; "
                          f"use a post-training type: int8, int8_full, fp16 or default.")
    if quant_type not in QUANT_TYPES:
        raise ConfigError(f"--quant_type {quant_type!r} is not a TFLite quantization type; "
                          f"valid: {', '.join(t for t in QUANT_TYPES if t not in QAT_TYPES)} "
                          f"(or none).")
    return quant_type


def needs_calibration(quant_type: Optional[str]) -> bool:
    """Whether `quant_type` quantizes activations, calibrated on a representative dataset."""
    return bool(quant_type) and quant_type.startswith("int8")


def task_name(params) -> str:
    """The family `params.task` belongs to (a key of SUPPORTED_TASKS), checked to be one TFM's
    exporter supports and TFLite's builtin ops can hold."""
    name = type(params.task).__name__
    if name not in SUPPORTED_TASKS:
        raise ConfigError(f"The experiment's task ({name}) has no TFLite export; TFM's (and "
                          f"lite's) covers image classification, semantic segmentation, "
                          f"RetinaNet and Mask R-CNN.")
    return name


def check_supported(params) -> str:
    """`task_name(params)`, refusing the families TFLite's builtin ops cannot hold."""
    name = task_name(params)
    if name in UNCONVERTIBLE_TASKS:
        raise ConfigError(f"{SUPPORTED_TASKS[name][0]} has no TFLite export in lite: "
                          f"{UNCONVERTIBLE_TASKS[name]}.")
    return name


def check_calibration_data(params, quant_type: Optional[str], calibration_steps: int) -> None:
    """An integer `quant_type` needs images to calibrate on: `train_data` names some and
    `calibration_steps` is positive (TensorFlow-free)."""
    if not needs_calibration(quant_type):
        return
    if calibration_steps is None or calibration_steps < 1:
        raise ConfigError(f"--calibration_steps ({calibration_steps}) must be a positive "
                          f"integer for --quant_type {quant_type}.")
    data = params.task.train_data
    if getattr(data, "tfds_name", ""):
        return
    if not data.input_path:
        raise ConfigError(f"--quant_type {quant_type} calibrates on the experiment's "
                          f"train_data, which names no data: set task.train_data.input_path "
                          f"(the training TFRecords) or use a float type (none, fp16, "
                          f"default).")
    patterns = (data.input_path.split(",") if isinstance(data.input_path, str)
                else list(data.input_path))
    for pattern in patterns:
        pattern = pattern.strip()
        if pattern and "://" not in pattern and not glob.glob(pattern):
            raise ConfigError(f"--quant_type {quant_type} calibrates on the experiment's "
                              f"train_data, but task.train_data.input_path {pattern!r} "
                              f"matches no file: point it at the training TFRecords or use "
                              f"a float type (none, fp16, default).")


# ---------------------------------------------------------------------------------------------
# The SavedModel.
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ServingSignature:
    """What a SavedModel's `serving_default` takes and returns."""
    input_dtype: str
    input_shape: List[Optional[int]]
    outputs: List[str]


def read_signature(saved_model_dir: str) -> ServingSignature:
    """The `serving_default` of the SavedModel in `saved_model_dir`, read from saved_model.pb
    (no graph is loaded).

    Raises:
      ConfigError: no SavedModel there, or it has no `serving_default`.
    """
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    # pylint: disable-next=import-outside-toplevel
    from tensorflow.core.protobuf import saved_model_pb2

    path = os.path.join(saved_model_dir, "saved_model.pb")
    if not tf.io.gfile.exists(path):
        raise ConfigError(f"--saved_model_dir {saved_model_dir!r} holds no SavedModel (no "
                          f"saved_model.pb); pass the directory lite-export --input_type "
                          f"tflite wrote.")
    proto = saved_model_pb2.SavedModel()
    with tf.io.gfile.GFile(path, "rb") as f:
        proto.ParseFromString(f.read())
    signatures = proto.meta_graphs[0].signature_def
    if "serving_default" not in signatures:
        raise ConfigError(f"--saved_model_dir {saved_model_dir!r} has no serving_default "
                          f"signature; export it with lite-export --input_type tflite.")
    signature = signatures["serving_default"]
    if len(signature.inputs) != 1:
        raise ConfigError(f"--saved_model_dir {saved_model_dir!r}: serving_default takes "
                          f"{len(signature.inputs)} inputs, not one image batch; export it "
                          f"with lite-export --input_type tflite.")
    tensor = next(iter(signature.inputs.values()))
    shape = ([None if d.size < 0 else int(d.size) for d in tensor.tensor_shape.dim]
             if not tensor.tensor_shape.unknown_rank else [])
    return ServingSignature(tf.dtypes.as_dtype(tensor.dtype).name, shape,
                            sorted(signature.outputs))


def check_saved_model(saved_model_dir: str, params, quant_type: Optional[str]) -> ServingSignature:
    """The SavedModel is lite-export's `tflite` signature of the experiment's task: a float32
    [batch, height, width, 3] input (not encoded or uint8 images) and the task's outputs; an
    integer type also needs batch 1 or any (calibration feeds one image at a time)."""
    if not saved_model_dir:
        raise ConfigError("--saved_model_dir is required: the SavedModel lite-export "
                          "--input_type tflite wrote.")
    if "://" not in saved_model_dir and not os.path.isdir(saved_model_dir):
        raise ConfigError(f"--saved_model_dir {saved_model_dir!r} is not a directory; pass "
                          f"the SavedModel lite-export --input_type tflite wrote.")
    name = task_name(params)
    signature = read_signature(saved_model_dir)
    shape = signature.input_shape
    if signature.input_dtype != "float32" or len(shape) != 4 or shape[-1] != 3:
        found = f"{signature.input_dtype} {shape or '(unknown shape)'}"
        raise ConfigError(f"--saved_model_dir {saved_model_dir!r} takes {found} inputs, not "
                          f"the tflite signature's float32 [batch, height, width, 3] "
                          f"preprocessed images; export it with lite-export --input_type "
                          f"tflite.")
    family, outputs = SUPPORTED_TASKS[name]
    if not set(outputs) <= set(signature.outputs):
        raise ConfigError(f"--saved_model_dir {saved_model_dir!r} returns "
                          f"{', '.join(signature.outputs)}: not a {family} model (the "
                          f"experiment's task); pass the SavedModel of this experiment.")
    if needs_calibration(quant_type) and shape[0] not in (None, 1):
        raise ConfigError(f"--saved_model_dir {saved_model_dir!r} takes batches of "
                          f"{shape[0]}; --quant_type {quant_type} calibrates one image at a "
                          f"time: export with lite-export --batch_size 1 (as TFM).")
    return signature


# ---------------------------------------------------------------------------------------------
# Calibration data.
# ---------------------------------------------------------------------------------------------


def create_representative_dataset(params, task=None):
    """The experiment's `train_data` as the task's input pipeline reads it, with batch size 1
    and float32 images (TFM's `create_representative_dataset`; `params` is not changed)."""
    from lite_launcher.core import registry  # pylint: disable=import-outside-toplevel

    task_name(params)
    train_data = params.task.train_data.replace(global_batch_size=1, dtype="float32")
    if task is None:
        task = registry.get_task(params.task)
    return task.build_inputs(train_data)


def representative_dataset(params, task=None, calibration_steps: int = 2000
                           ) -> Iterator[list]:
    """Yields `[image]` for the converter's calibration: the first `calibration_steps` images of
    `create_representative_dataset`, skipping those without 3 channels (TFM's)."""
    dataset = create_representative_dataset(params, task)
    for images, _ in dataset.take(calibration_steps):
        if images.shape[-1] != 3:
            continue
        yield [images]


def _check_first_image(params, task, signature: ServingSignature) -> None:
    """One calibration image is read before converting: its size must be the SavedModel's."""
    first = next(iter(representative_dataset(params, task, calibration_steps=1)), None)
    if first is None:
        raise ConfigError("task.train_data yields no image to calibrate on (empty input "
                          "files?); point it at the training data.")
    size, served = list(first[0].shape[1:3]), signature.input_shape[1:3]
    if size != served:
        raise ConfigError(f"task.train_data yields {size[0]}x{size[1]} images but the "
                          f"SavedModel takes {served[0]}x{served[1]}: export it at the "
                          f"experiment's input size (lite-export --input_image_size).")


# ---------------------------------------------------------------------------------------------
# The conversion.
# ---------------------------------------------------------------------------------------------


def _quantize(converter, quant_type, params, task, calibration_steps, denylisted_ops):
    """Sets `converter` up for `quant_type` (see the module docstring); returns a quantization
    debugger to run instead of `converter.convert()` when ops are denylisted, else None."""
    import functools  # pylint: disable=import-outside-toplevel

    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if needs_calibration(quant_type):
        converter.representative_dataset = functools.partial(
            representative_dataset, params=params, task=task,
            calibration_steps=calibration_steps)
        if quant_type.startswith("int8_full"):
            converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        if quant_type == "int8_full":
            converter.inference_input_type = tf.uint8
            converter.inference_output_type = tf.uint8
        elif quant_type == "int8_full_int8_io":
            converter.inference_input_type = tf.int8
            converter.inference_output_type = tf.int8
        if denylisted_ops:
            return tf.lite.experimental.QuantizationDebugger(
                converter=converter, debug_dataset=converter.representative_dataset,
                debug_options=tf.lite.experimental.QuantizationDebugOptions(
                    denylisted_ops=list(denylisted_ops)))
    elif quant_type == "fp16":
        converter.target_spec.supported_types = [tf.float16]
    elif quant_type == "uint8":
        # TFM's settings, kept so its configs convert alike; TensorFlow 2's converter reads
        # none of them (they are TF1's), so the result is `default`'s.
        converter.default_ranges_stats = (-10, 10)
        converter.inference_type = tf.uint8
        converter.quantized_input_stats = {"input_placeholder": (0.0, 1.0)}
    return None


def convert_tflite_model(saved_model_dir: str, quant_type: Optional[str] = None, params=None,
                         task=None, calibration_steps: int = 2000,
                         denylisted_ops: Optional[Sequence[str]] = None) -> bytes:
    """The SavedModel in `saved_model_dir` as TFLite flatbuffer bytes (TFM's
    `convert_tflite_model`).

    Args:
      saved_model_dir: a SavedModel `lite-export --input_type tflite` wrote.
      quant_type: the post-training quantization (see the module docstring); None: float.
      params: the experiment config (required: it names the task and, for the integer types,
        the calibration data `train_data`).
      task: the task to read `train_data` with (None: built from `params.task`).
      calibration_steps: how many `train_data` images calibrate the integer types.
      denylisted_ops: TFLite op names (e.g. 'MEAN') left in float by the integer types
        (through TensorFlow's QuantizationDebugger, as TFM).

    Raises:
      ConfigError: an unknown or QAT quant type, a task without a TFLite export, a SavedModel
        that is not the task's tflite signature, no data to calibrate on.
    """
    if params is None:
        raise ConfigError("convert_tflite_model: params (the experiment config) is required.")
    quant_type = normalize_quant_type(quant_type)
    check_supported(params)
    check_calibration_data(params, quant_type, calibration_steps)
    signature = check_saved_model(saved_model_dir, params, quant_type)

    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    if needs_calibration(quant_type):
        if task is None:
            from lite_launcher.core import registry  # pylint: disable=import-outside-toplevel
            task = registry.get_task(params.task)
        _check_first_image(params, task, signature)
    converter = tf.lite.TFLiteConverter.from_saved_model(saved_model_dir)
    if quant_type:
        debugger = _quantize(converter, quant_type, params, task, calibration_steps,
                             denylisted_ops)
        if debugger is not None:
            debugger.run()
            return debugger.get_nondebug_quantized_model()
    return converter.convert()


# ---------------------------------------------------------------------------------------------
# The file.
# ---------------------------------------------------------------------------------------------


def check_tflite_path(tflite_path: str) -> None:
    """`tflite_path` can be written: its directory exists (or can be made) and is writable, and
    it is not a directory (TensorFlow-free for local paths)."""
    from lite_launcher.core import train_utils  # pylint: disable=import-outside-toplevel

    if not tflite_path:
        raise ConfigError("--tflite_path is required: the .tflite file to write.")
    if "://" in tflite_path:
        return
    if os.path.isdir(tflite_path):
        raise ConfigError(f"--tflite_path {tflite_path!r} is a directory; pass a file path "
                          f"(e.g. {os.path.join(tflite_path, 'model.tflite')}).")
    train_utils.check_output_dir(os.path.dirname(os.path.abspath(tflite_path)),
                                 "--tflite_path's directory")


def write_tflite(tflite_path: str, content: bytes) -> None:
    """Writes `content` to `tflite_path` atomically: a failed write leaves no partial file
    (and an older file there as it was)."""
    from lite_launcher.common import atomic_write  # pylint: disable=import-outside-toplevel

    directory = os.path.dirname(tflite_path)
    if "://" in tflite_path:
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        if directory:
            tf.io.gfile.makedirs(directory)
        with atomic_write.atomic_path(tflite_path) as temporary:
            with tf.io.gfile.GFile(temporary, "wb") as f:
                f.write(content)
        return
    if directory:
        os.makedirs(directory, exist_ok=True)
    with atomic_write.atomic_path(tflite_path) as temporary:
        with open(temporary, "wb") as f:
            f.write(content)


def describe(content: bytes) -> str:
    """One line about a `.tflite` file: its size and its signature's input and output types and
    shapes (read by LiteRT's interpreter, the `tflite` extra; the size alone without it)."""
    text = f"{len(content):,} bytes"
    try:
        # pylint: disable-next=import-outside-toplevel
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        return text + " (pip install 'lite_launcher[tflite]' to list its inputs and outputs)"
    runner = Interpreter(model_content=content).get_signature_runner()

    def tensors(details):
        return ", ".join(f"{name} {_dtype_name(d['dtype'])} {list(map(int, d['shape']))}"
                         for name, d in sorted(details.items()))
    return (f"{text}; input {tensors(runner.get_input_details())}; output "
            f"{tensors(runner.get_output_details())}")


def _dtype_name(dtype) -> str:
    import numpy as np  # pylint: disable=import-outside-toplevel
    return np.dtype(dtype).name
