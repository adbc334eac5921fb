"""Quantized `.tflite` files of a trained classifier: their size and validation top-1 against
the float file's (docs/export.md "To a phone"; tests/vision/test_export_tflite.py runs
`measure` as a `release` test).

On the shipped UCI digits written as 32x32 JPEG TFRecords (train: 1,437 images, validation:
360), a ResNet-10 (`resnet_imagenet`, depth_multiplier 0.5, 10 classes) is trained in this
process, exported with `lite-export --input_type tflite --batch_size 1` (the library call),
and converted by `lite-export-tflite`'s library to each of QUANT_TYPES (the integer types
calibrated on `train_data`, `calibration_steps` images). Each file runs on LiteRT over the
validation split as the evaluation pipeline preprocesses it (the normalised images a phone
app hands the file); top-1 accuracy, file size and the file's input type are recorded, with
the Keras model's own top-1 on the same images.

    PYTHONPATH=$PWD python benchmarks/tflite_digits.py \
      --output benchmarks/results/tflite_digits.json
"""

import argparse
import datetime
import json
import os
import sys
import tempfile

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(_HERE))
sys.path.insert(1, os.path.join(os.path.dirname(_HERE), "tests", "vision"))

QUANT_TYPES = ("none", "fp16", "default", "int8", "int8_full")
TRAIN_STEPS = 300


def experiment(train_glob, validation_glob, train_steps):
    """The digits ResNet-10's config (augmentation off: digits are not mirror images)."""
    import lite_launcher as ll  # pylint: disable=import-outside-toplevel

    params = ll.get_exp_config("resnet_imagenet")
    params.override({
        "runtime": {"distribution_strategy": "off", "enable_xla": False},
        "task": {"model": {"num_classes": 10, "input_size": [32, 32, 3],
                           "backbone": {"resnet": {"model_id": 10, "depth_multiplier": 0.5}},
                           "norm_activation": {"norm_momentum": 0.9}},
                 "train_data": {"input_path": train_glob, "global_batch_size": 32,
                                "aug_rand_hflip": False, "aug_crop": False},
                 "validation_data": {"input_path": validation_glob, "global_batch_size": 40,
                                     "aug_crop": False, "drop_remainder": False}},
        "trainer": {"train_steps": train_steps, "steps_per_loop": 50, "summary_interval": 50,
                    "checkpoint_interval": train_steps, "validation_interval": train_steps,
                    "validation_steps": -1,
                    "optimizer_config": {
                        "optimizer": {"type": "adam"}, "warmup": {"type": None},
                        "learning_rate": {"type": "cosine", "cosine": {
                            "initial_learning_rate": 0.002, "decay_steps": train_steps}}}}})
    params.validate()
    return params


def measure(work_dir, train_steps=TRAIN_STEPS, quant_types=QUANT_TYPES, calibration_steps=200):
    """Trains, exports, converts and evaluates (see the module docstring); returns the record."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    import digits_images  # pylint: disable=import-outside-toplevel
    import lite_launcher as ll  # pylint: disable=import-outside-toplevel
    from lite_launcher.core import export_lib  # pylint: disable=import-outside-toplevel
    from lite_launcher.commands import export_tflite  # pylint: disable=import-outside-toplevel
    from lite_launcher.vision.serving import predict_tflite  # pylint: disable=C0415

    train_glob, validation_glob = digits_images.digits_tfrecords(work_dir)
    params = experiment(train_glob, validation_glob, train_steps)
    model_dir = os.path.join(work_dir, "model")
    task = ll.get_task(params.task, logging_dir=model_dir)
    model, _ = ll.run_experiment(distribution_strategy=tf.distribute.get_strategy(), task=task,
                                 mode="train", params=params, model_dir=model_dir)
    saved_model_dir = os.path.join(work_dir, "saved_model")
    export_lib.export_saved_model(params, model_dir, saved_model_dir, input_type="tflite",
                                  batch_size=1)

    images, labels = [], []
    for batch_images, batch_labels in task.build_inputs(params.task.validation_data):
        images.append(batch_images.numpy())
        labels.append(batch_labels.numpy())
    images, labels = np.concatenate(images), np.concatenate(labels)
    keras_top1 = float(np.mean(np.argmax(model.predict(images, verbose=0), -1) == labels))

    record = {"experiment": "resnet_imagenet", "model": "ResNet-10, depth_multiplier 0.5, "
              "32x32, 10 classes", "train_steps": train_steps,
              "calibration_steps": calibration_steps, "validation_images": int(len(labels)),
              "keras_top1": keras_top1, "parameters": int(model.count_params()), "files": {}}
    for quant_type in quant_types:
        path = os.path.join(work_dir, f"{quant_type}.tflite")
        export_tflite.export_tflite(params, saved_model_dir, path, quant_type,
                                    calibration_steps=calibration_steps)
        runner = predict_tflite.TFLiteModel(path)
        predicted = [np.argmax(runner(image)["probs"]) for image in images]
        record["files"][quant_type] = {
            "bytes": os.path.getsize(path),
            "input_dtype": np.dtype(runner.input["dtype"]).name,
            "top1": float(np.mean(np.array(predicted) == labels))}
    return record


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True, help="the results JSON to write")
    parser.add_argument("--train_steps", type=int, default=TRAIN_STEPS)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as work_dir:
        record = measure(work_dir, args.train_steps)
    record["date"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    with open(args.output, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    float_size = record["files"]["none"]["bytes"]
    for quant_type, row in record["files"].items():
        print(f"{quant_type:10s} {row['bytes']:>10,} bytes ({float_size / row['bytes']:.2f}x "
              f"smaller)  {row['input_dtype']:8s} top-1 {row['top1']:.4f}")
    print(f"Keras model top-1 {record['keras_top1']:.4f}")


if __name__ == "__main__":
    main()
