"""Runs a `.tflite` file of `lite-export-tflite` on image files and prints what it predicts.

    python -m lite_launcher.vision.serving.predict_tflite --experiment mobilenet_imagenet \
      --config_file my.yaml --tflite_path /tmp/m_int8.tflite --image_path 'photos/*.jpg'

prints, per image, the top classes with their probabilities (image classification), the
detections above `--score_threshold` with their boxes in the image's own pixels (RetinaNet,
Mask R-CNN), or the predicted mask's size and the share of each class in it (semantic
segmentation). The file runs on LiteRT's interpreter (`pip install 'lite_launcher[tflite]'`).

The file takes the model's preprocessed input, not the image: its `tflite` signature skips the
preprocessing so that the whole graph quantizes (TFM's contract). Each image is preprocessed
here as the SavedModel's `image_bytes` signature does it (the evaluation pipeline's), which is
what a phone app must do before calling the file:

| family | what the app does to an RGB image (0..255) |
|---|---|
| image classification | centre crop of `center_crop_fraction` (0.875) of the short side, bilinear resize to the model's height x width, then (x - mean) / stddev per channel with ImageNet's mean (123.675, 116.28, 103.53) and stddev (58.395, 57.12, 57.375) |
| RetinaNet, Mask R-CNN | the same mean / stddev, resize keeping the aspect ratio to fit the model's size, zero-pad bottom / right to the file's input size; boxes come out in pixels of the resized image (divide by the resize scale) |
| semantic segmentation | `train_data.image_feature`'s mean / stddev (ImageNet's by default), resize to the model's size |

An integer-input file (`int8_full`: uint8, `int8_full_int8_io`: int8) takes that float image
quantized with its input's scale and zero point (`q = round(x / scale) + zero_point`); its
outputs are dequantized the same way. Both are done here.
"""

from __future__ import annotations

import glob
import os
from typing import Dict, List

from absl import flags

from lite_launcher.common import flags as lite_flags
from lite_launcher.common.errors import ConfigError, import_extra

FLAGS = flags.FLAGS
PROG = "predict_tflite"

_HELP_INTRO = """\
USAGE: python -m lite_launcher.vision.serving.predict_tflite --experiment=NAME
         --tflite_path=FILE --image_path=GLOB [--image_path=GLOB ...] [flags]

Runs a .tflite file of lite-export-tflite on image files (JPEG, PNG, GIF, BMP), preprocessed
as the experiment's evaluation does, and prints the top classes / detections / mask summary.
The config flags are the ones the model was exported with.
"""


def define_flags() -> None:
    """The config flags (which experiment, as exported) and predict_tflite's own."""
    lite_flags.define_config_flags()
    lite_flags.define_registry_imports_flag()
    if "image_path" in FLAGS:
        return
    if "tflite_path" not in FLAGS:
        flags.DEFINE_string("tflite_path", None, "The .tflite file to run.")
    flags.DEFINE_multi_string("image_path", None, "An image file or a glob pattern "
                              "(repeatable).")
    flags.DEFINE_integer("top_k", 3, "Image classification: how many classes to print.")
    flags.DEFINE_float("score_threshold", 0.3, "Detection: the lowest score printed.")


def image_files(patterns) -> List[str]:
    """The files `patterns` name (globs expanded, in order), each checked to exist."""
    files = []
    for pattern in patterns or []:
        matched = sorted(glob.glob(pattern))
        if not matched:
            raise ConfigError(f"--image_path {pattern!r} matches no file.")
        files.extend(matched)
    if not files:
        raise ConfigError("--image_path is required: the image files to run the model on.")
    return files


class TFLiteModel:
    """A `.tflite` file's `serving_default` on LiteRT: float images in, float outputs out
    (quantizing the input and dequantizing the outputs of an integer-io file)."""

    def __init__(self, tflite_path: str):
        litert = import_extra("ai_edge_litert.interpreter", "Running a .tflite file needs "
                              "LiteRT (ai-edge-litert)", "tflite")
        if not os.path.isfile(tflite_path):
            raise ConfigError(f"--tflite_path {tflite_path!r} is not a file.")
        try:
            self.interpreter = litert.Interpreter(model_path=tflite_path)
        except ValueError as error:
            raise ConfigError(f"--tflite_path {tflite_path!r} is not a TFLite model: "
                              f"{str(error).splitlines()[0]}") from error
        signatures = self.interpreter.get_signature_list()
        if "serving_default" not in signatures:
            raise ConfigError(f"--tflite_path {tflite_path!r} has no serving_default "
                              f"signature (signatures: {sorted(signatures)}).")
        self.runner = self.interpreter.get_signature_runner("serving_default")
        self.input = self.runner.get_input_details()["inputs"]
        self.outputs = self.runner.get_output_details()

    @property
    def input_size(self) -> List[int]:
        """[height, width] the file takes."""
        return [int(d) for d in self.input["shape"][1:3]]

    def __call__(self, image) -> Dict[str, "object"]:
        """{output name: float32 or int array} for one preprocessed float32 image [h, w, 3]."""
        import numpy as np  # pylint: disable=import-outside-toplevel

        value = np.asarray(image, np.float32)[None]
        dtype = self.input["dtype"]
        if dtype != np.float32:
            scale, zero_point = self.input["quantization"]
            info = np.iinfo(dtype)
            value = np.clip(np.round(value / scale) + zero_point, info.min, info.max)
            value = value.astype(dtype)
        result = self.runner(inputs=value)
        outputs = {}
        for name, detail in self.outputs.items():
            out = result[name]
            scale, zero_point = detail["quantization"]
            if scale and detail["dtype"] in (np.uint8, np.int8):
                out = (out.astype(np.float32) - zero_point) * scale
            outputs[name] = out[0]
        return outputs


def preprocessing_module(task, name: str, input_size: List[int]):
    """The serving module of `task` (family `name`, a key of SUPPORTED_TASKS) for
    `image_bytes`, for its preprocessing only (no model), at the size the file takes (for
    detection: the model's size, which pads to it)."""
    if name in ("RetinaNetTask", "MaskRCNNTask"):
        from lite_launcher.vision.serving import detection  # pylint: disable=C0415
        module = detection.DetectionModule(task, None, "image_bytes")
        if module.padded_size != input_size:
            raise ConfigError(f"The .tflite file takes {input_size[0]}x{input_size[1]} images; "
                              f"the experiment's detection model pads to "
                              f"{module.padded_size[0]}x{module.padded_size[1]}: pass the "
                              f"config flags it was exported with.")
        return module
    if name == "SemanticSegmentationTask":
        from lite_launcher.vision.serving import semantic_segmentation  # pylint: disable=C0415
        return semantic_segmentation.SegmentationModule(task, None, "image_bytes",
                                                        input_image_size=input_size)
    from lite_launcher.vision.serving import image_classification  # pylint: disable=C0415
    return image_classification.ClassificationModule(task, None, "image_bytes",
                                                     input_image_size=input_size)


def describe_classification(outputs, top_k: int) -> str:
    """'7 (0.981), 1 (0.012), ...': the `top_k` classes by probability."""
    import numpy as np  # pylint: disable=import-outside-toplevel

    probs = np.asarray(outputs["probs"], np.float32)
    order = np.argsort(-probs, kind="stable")[:top_k]
    return ", ".join(f"{int(c)} ({probs[c]:.3f})" for c in order)


def describe_detections(outputs, image_info, score_threshold: float) -> str:
    """The detections above `score_threshold`, one a line: class, score, box (ymin, xmin, ymax,
    xmax) in the original image's pixels (the file's boxes divided by the resize scale)."""
    import numpy as np  # pylint: disable=import-outside-toplevel

    count = int(np.asarray(outputs["num_detections"]).reshape(-1)[0])
    scale = np.tile(np.asarray(image_info)[2], 2)
    lines = []
    for i in range(count):
        score = float(outputs["detection_scores"][i])
        if score < score_threshold:
            continue
        box = np.asarray(outputs["detection_boxes"][i], np.float32) / scale
        lines.append(f"  class {int(outputs['detection_classes'][i])}  score {score:.3f}  "
                     f"box [{', '.join(f'{v:.1f}' for v in box)}]")
    header = f"{len(lines)} detections (score >= {score_threshold})"
    return "\n".join([header] + lines)


def describe_mask(outputs) -> str:
    """'32x32 mask; class 0 71.3%, class 2 28.7%': the mask's size and each class's share."""
    import numpy as np  # pylint: disable=import-outside-toplevel

    mask = np.asarray(outputs["predicted_mask"])
    classes, counts = np.unique(mask, return_counts=True)
    order = np.argsort(-counts, kind="stable")
    shares = ", ".join(f"class {int(classes[i])} {100.0 * counts[i] / mask.size:.1f}%"
                       for i in order)
    return f"{mask.shape[0]}x{mask.shape[1]} mask; {shares}"


def predict(params, tflite_path: str, files, top_k: int = 3,
            score_threshold: float = 0.3) -> str:
    """The lines predict_tflite prints for `files` (see the module docstring)."""
    from lite_launcher.core import registry  # pylint: disable=import-outside-toplevel
    from lite_launcher.vision.serving import export_tflite_lib  # pylint: disable=C0415

    name = export_tflite_lib.task_name(params)
    model = TFLiteModel(tflite_path)
    task = registry.get_task(params.task)
    module = preprocessing_module(task, name, model.input_size)
    family, expected = export_tflite_lib.SUPPORTED_TASKS[name]
    if not set(expected) <= set(model.outputs):
        raise ConfigError(f"--tflite_path {tflite_path!r} returns {', '.join(model.outputs)}: "
                          f"not a {family} model (the experiment's task).")
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    lines = []
    for path in files:
        preprocessed = module.preprocess_bytes(tf.io.read_file(path))
        image, extras = (preprocessed if isinstance(preprocessed, tuple)
                         else (preprocessed, None))
        outputs = model(image.numpy())
        if name == "ImageClassificationTask":
            text = describe_classification(outputs, top_k)
        elif name == "SemanticSegmentationTask":
            text = describe_mask(outputs)
        else:
            text = describe_detections(outputs, extras.numpy(), score_threshold)
        lines.append(f"{path}: {text}")
    return "\n".join(lines)


def _main(flags_obj) -> str:
    if not flags_obj.experiment:
        raise ConfigError("--experiment is required: the experiment the model was exported "
                          "from.")
    if not flags_obj.tflite_path or not os.path.isfile(flags_obj.tflite_path):
        raise ConfigError(f"--tflite_path {flags_obj.tflite_path!r} is not a file: pass the "
                          f".tflite file lite-export-tflite wrote.")
    files = image_files(flags_obj.image_path)
    if flags_obj.top_k < 1:
        raise ConfigError(f"--top_k ({flags_obj.top_k}) must be a positive integer.")
    params = lite_flags.parse_params(flags_obj)
    return predict(params, flags_obj.tflite_path, files, flags_obj.top_k,
                   flags_obj.score_threshold)


def main(argv) -> None:
    """Runs predict_tflite with parsed FLAGS; bad input exits 2 with one line."""
    lite_flags.run_command(_main, argv, PROG)


def run() -> None:
    """Entry point of `python -m lite_launcher.vision.serving.predict_tflite`."""
    lite_flags.start_command(define_flags, main, PROG, _HELP_INTRO, "image_path")


if __name__ == "__main__":
    run()
