"""Writes tfm_tflite_reference/: TFM 2.20's `.tflite` files of a TFM checkpoint, and their outputs.

Run once with TFM 2.20 (tf-models-official 2.20, tensorflow 2.20, tf_keras):

    /work/tfm_venv/bin/python tests/vision/data/make_tfm_tflite_reference.py

The model is `tfm_checkpoints/mobilenetv2` (a MobileNetV2 classifier, 32x32 input, 5 classes,
random weights, written by make_tfm_checkpoints.py). TFM's own code path, as its command
`official/vision/serving/export_tflite.py` runs it:

1. `export_saved_model_lib.export_inference_graph(input_type='tflite', batch_size=1, ...)`:
   TFM's SavedModel whose signature takes the normalised image.
2. `export_tflite_lib.convert_tflite_model(saved_model_dir, quant_type, params,
   calibration_steps)` for each quant type of QUANT_TYPES, calibrated (integer types) on the
   experiment's own `train_data`: `calibration.tfrecord` here, CALIBRATION_IMAGES PNG
   tf.Examples (32x32, so TFM's training parser with augmentation off only normalises them).
3. Each `.tflite` run by TensorFlow's interpreter on INPUTS fixed images normalised by TFM's
   `preprocess_ops.normalize_image` (ImageNet mean / std): what a phone app hands the file.

Outputs, beside this script:
  tfm_tflite_reference/calibration.tfrecord   the calibration data (train_data.input_path)
  tfm_tflite_reference/outputs.npz            `images` (uint8), `inputs` (normalised float32),
                                              `<quant_type>_logits` / `_probs` (dequantised)
  tfm_tflite_reference/reference.json         the config overrides, each type's file size,
                                              sha256, input / output dtypes and quantisation,
                                              and the types TFM's converter failed on (why)
"""

import hashlib
import json
import os
import shutil
import sys
import tempfile
import traceback

import numpy as np
import tensorflow as tf

from official.core import exp_factory
from official.vision import registry_imports  # noqa: F401  (registers the experiments)
from official.vision.ops import preprocess_ops
from official.vision.serving import export_saved_model_lib
from official.vision.serving import export_tflite_lib

HERE = os.path.dirname(os.path.abspath(__file__))
TARGET = os.path.join(HERE, "tfm_tflite_reference")
CHECKPOINT = os.path.join(HERE, "tfm_checkpoints", "mobilenetv2")
SIZE = 32
CALIBRATION_IMAGES = 16
INPUTS = 8
# Every quant type TFM 2.20's convert_tflite_model knows (None: no quantisation).
QUANT_TYPES = ("none", "default", "fp16", "int8", "int8_full", "int8_full_int8_io", "uint8",
               "qat", "qat_fp32_io")
# train_data for calibration: augmentation off, files read in order.
TRAIN_DATA = {"aug_rand_hflip": False, "aug_crop": False, "aug_type": None,
              "color_jitter": 0.0, "random_erasing": None, "mixup_and_cutmix": None,
              "shuffle_buffer_size": 1, "cycle_length": 1, "decode_jpeg_only": False}


def smooth_images(rng, count):
    """uint8 [count, SIZE, SIZE, 3]: random 6x6 colours resized (natural-looking, smooth)."""
    small = rng.uniform(0, 255, (count, 6, 6, 3)).astype(np.float32)
    return tf.cast(tf.round(tf.image.resize(small, [SIZE, SIZE])), tf.uint8).numpy()


def write_calibration(path, images):
    with tf.io.TFRecordWriter(path) as writer:
        for i, image in enumerate(images):
            example = tf.train.Example(features=tf.train.Features(feature={
                "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(
                    value=[tf.io.encode_png(image).numpy()])),
                "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(
                    value=[i % 5])),
            }))
            writer.write(example.SerializeToString())


def run_tflite(content, inputs):
    """{output name: float32 outputs} of `content` on `inputs`, one image a call (batch 1),
    quantising the input and dequantising the outputs where the file's io is integer."""
    interpreter = tf.lite.Interpreter(model_content=content)
    runner = interpreter.get_signature_runner("serving_default")
    input_detail = runner.get_input_details()["inputs"]
    outputs = {}
    for image in inputs:
        value = image[None]
        scale, zero_point = input_detail["quantization"]
        if input_detail["dtype"] != np.float32:
            info = np.iinfo(input_detail["dtype"])
            value = np.clip(np.round(value / scale + zero_point), info.min, info.max)
            value = value.astype(input_detail["dtype"])
        result = runner(inputs=value)
        for name, detail in runner.get_output_details().items():
            out = result[name].astype(np.float32)
            scale, zero_point = detail["quantization"]
            if detail["dtype"] != np.float32:
                out = (out - zero_point) * scale
            outputs.setdefault(name, []).append(out[0])
    details = {"input": _detail(input_detail),
               "outputs": {k: _detail(v) for k, v in runner.get_output_details().items()}}
    return {k: np.stack(v) for k, v in outputs.items()}, details


def _detail(detail):
    scale, zero_point = detail["quantization"]
    return {"dtype": np.dtype(detail["dtype"]).name, "shape": [int(d) for d in detail["shape"]],
            "scale": float(scale), "zero_point": int(zero_point)}


def main():
    index = json.load(open(os.path.join(HERE, "tfm_checkpoints", "index.json")))
    entry = index["models"]["mobilenetv2"]
    shutil.rmtree(TARGET, ignore_errors=True)
    os.makedirs(TARGET)
    rng = np.random.default_rng(54)
    calibration = os.path.join(TARGET, "calibration.tfrecord")
    write_calibration(calibration, smooth_images(rng, CALIBRATION_IMAGES))
    images = smooth_images(rng, INPUTS)
    inputs = preprocess_ops.normalize_image(tf.constant(images)).numpy().astype(np.float32)

    overrides = {"task": {"model": entry["model"],
                          "train_data": dict(TRAIN_DATA, input_path=calibration),
                          "validation_data": {"input_path": calibration}},
                 "runtime": {"distribution_strategy": "one_device"}}
    params = exp_factory.get_exp_config(entry["experiment"])
    params.override(overrides, is_strict=False)
    params.validate()

    work = tempfile.mkdtemp()
    saved_model_dir = os.path.join(work, "saved_model")
    prefix = tf.train.latest_checkpoint(CHECKPOINT)
    export_saved_model_lib.export_inference_graph(
        input_type="tflite", batch_size=1, input_image_size=[SIZE, SIZE], params=params,
        checkpoint_path=prefix, export_dir=saved_model_dir)

    arrays = {"images": images, "inputs": inputs}
    record = {"experiment": entry["experiment"], "checkpoint": "tfm_checkpoints/mobilenetv2",
              "overrides": {"task": {"train_data": TRAIN_DATA}},
              "calibration_steps": CALIBRATION_IMAGES, "tensorflow": tf.__version__,
              "types": {}, "failed": {}}
    for quant_type in QUANT_TYPES:
        try:
            content = export_tflite_lib.convert_tflite_model(
                saved_model_dir=saved_model_dir,
                quant_type=None if quant_type == "none" else quant_type,
                params=params,
                calibration_steps=CALIBRATION_IMAGES)
        except Exception as error:  # pylint: disable=broad-except  (recorded, not hidden)
            text = " ".join(str(error).split())
            record["failed"][quant_type] = f"{type(error).__name__}: {text[:400]}"
            traceback.print_exc()
            continue
        outputs, details = run_tflite(content, inputs)
        for name, values in outputs.items():
            arrays[f"{quant_type}_{name}"] = values
        record["types"][quant_type] = dict(
            size=len(content), sha256=hashlib.sha256(content).hexdigest(), **details)
        print(quant_type, len(content), details["input"]["dtype"], file=sys.stderr)
    np.savez_compressed(os.path.join(TARGET, "outputs.npz"), **arrays)
    with open(os.path.join(TARGET, "reference.json"), "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
        f.write("\n")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
