"""`lite-export-tflite` (lite_launcher/commands/export_tflite.py on
vision/serving/export_tflite_lib.py) and `predict_tflite`, against TFM 2.20's own `.tflite`
files.

A TFM-written MobileNetV2 checkpoint (tests/vision/data/tfm_checkpoints/mobilenetv2) is
exported by lite (`lite-export --input_type tflite --batch_size 1`, in this process) and
converted by lite-export-tflite's library; TFM's exporter and converter ran on the same
checkpoint in TFM's venv (make_tfm_tflite_reference.py, its outputs in
data/tfm_tflite_reference/): on the same normalised images lite's float file gives TFM's float
file's outputs (1e-4), fp16 TFM's fp16 (1e-2), and each integer type, calibrated on the same
train_data, TFM's top-1. Bad input is refused in one line with exit code 2 and no file.
"""

import json
import os
import sys
import types

import numpy as np
import pytest
import tensorflow as tf
import yaml

import lite_launcher as ll
from lite_launcher.core import export_lib
from lite_launcher.commands import export_tflite
from lite_launcher.common.errors import ConfigError
from lite_launcher.vision.serving import export_tflite_lib, predict_tflite

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
REFERENCE = os.path.join(DATA, "tfm_tflite_reference")
CHECKPOINTS = os.path.join(DATA, "tfm_checkpoints")
BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "benchmarks")
MEAN = np.array([0.485, 0.456, 0.406], np.float32) * 255
STD = np.array([0.229, 0.224, 0.225], np.float32) * 255


def _reference():
    with open(os.path.join(REFERENCE, "reference.json")) as f:
        record = json.load(f)
    return record, np.load(os.path.join(REFERENCE, "outputs.npz"))


def tfm_overrides():
    """(experiment, overrides): the config TFM's generator used (its model, its calibration
    train_data)."""
    record, _ = _reference()
    with open(os.path.join(CHECKPOINTS, "index.json")) as f:
        entry = json.load(f)["models"]["mobilenetv2"]
    return entry["experiment"], {
        "runtime": {"distribution_strategy": "off"},
        "task": {"model": entry["model"],
                 "train_data": dict(record["overrides"]["task"]["train_data"],
                                    input_path=os.path.join(REFERENCE, "calibration.tfrecord"))}}


def tfm_params():
    experiment, overrides = tfm_overrides()
    params = ll.get_exp_config(experiment)
    params.override(overrides)
    params.validate()
    return params


def config_file(directory):
    """tfm_overrides as a YAML --config_file; returns (experiment, its path)."""
    experiment, overrides = tfm_overrides()
    path = os.path.join(str(directory), "tfm_mobilenetv2.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(overrides, f)
    return experiment, path


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    """lite-export --input_type tflite --batch_size 1 of TFM's MobileNetV2 checkpoint."""
    export_dir = str(tmp_path_factory.mktemp("tflite") / "saved_model")
    export_lib.export_saved_model(tfm_params(), os.path.join(CHECKPOINTS, "mobilenetv2"),
                                  export_dir, input_type="tflite", batch_size=1)
    return export_dir


def convert(saved_model_dir, tmp_path, quant_type):
    """lite-export-tflite's conversion (the command's library call); returns (path, the line
    it prints)."""
    path = str(tmp_path / f"{quant_type}.tflite")
    record, _ = _reference()
    line = export_tflite.export_tflite(tfm_params(), saved_model_dir, path, quant_type,
                                       calibration_steps=record["calibration_steps"])
    return path, line


def run(path, inputs):
    """{output: [images, ...]} of the file on each normalised image (LiteRT; integer io
    quantized / dequantized by predict_tflite's runner)."""
    model = predict_tflite.TFLiteModel(path)
    outputs = [model(image) for image in inputs]
    return {name: np.stack([o[name] for o in outputs]) for name in outputs[0]}


@pytest.fixture(scope="module")
def float_file(saved_model, tmp_path_factory):
    """(path, the line lite-export-tflite prints) of the float conversion, by the command from
    its flags (in this process: no TensorFlow start-up)."""
    directory = tmp_path_factory.mktemp("float")
    experiment, yaml_path = config_file(directory)
    path = str(directory / "none.tflite")
    line = export_tflite._main(_flags(directory, experiment=experiment, config_file=[yaml_path],
                                      saved_model_dir=saved_model, tflite_path=path))
    return path, line


def test_float_file_gives_tfms_float_outputs(float_file):
    record, tfm = _reference()
    path, line = float_file
    out = run(path, tfm["inputs"])
    np.testing.assert_allclose(out["logits"], tfm["none_logits"], atol=1e-4, rtol=0)
    np.testing.assert_allclose(out["probs"], tfm["none_probs"], atol=1e-4, rtol=0)
    # The command's report: size, and float32 in and out (as TFM's file).
    assert record["types"]["none"]["input"]["dtype"] == "float32"
    assert line == (f"{path}: {os.path.getsize(path):,} bytes; input inputs float32 "
                    f"[1, 32, 32, 3]; output logits float32 [1, 5], probs float32 [1, 5]")


def test_int8_full_calibrated_on_train_data_agrees_with_tfms_top1(saved_model, tmp_path):
    record, tfm = _reference()
    path, line = convert(saved_model, tmp_path, "int8_full")
    assert "input inputs uint8 [1, 32, 32, 3]; output logits uint8 [1, 5]" in line
    assert record["types"]["int8_full"]["input"]["dtype"] == "uint8"
    out = run(path, tfm["inputs"])
    np.testing.assert_array_equal(out["logits"].argmax(-1), tfm["int8_full_logits"].argmax(-1))
    # Calibrated as TFM's: the same input quantization (from the same train_data images).
    detail = predict_tflite.TFLiteModel(path).input
    assert detail["quantization"][0] == pytest.approx(
        record["types"]["int8_full"]["input"]["scale"], rel=1e-6)
    assert detail["quantization"][1] == record["types"]["int8_full"]["input"]["zero_point"]


def _evaluation_image(image, size=32):
    """The evaluation preprocessing of one decoded image, written out (what a phone app does):
    centre crop of 0.875 of the short side, bilinear resize, ImageNet mean / stddev."""
    height, width = image.shape[:2]
    side = 0.875 * min(height, width)
    top, left = int((height - side) / 2), int((width - side) / 2)
    crop = image[top:top + int(side), left:left + int(side)].astype(np.float32)
    resized = tf.image.resize(crop, [size, size], method="bilinear").numpy()
    return (resized - MEAN) / STD


def test_predict_tflite_prints_the_files_top_classes_on_normalised_images(float_file, tmp_path):
    from ai_edge_litert.interpreter import Interpreter
    path, _ = float_file
    rng = np.random.default_rng(3)
    files, expected = [], []
    runner = Interpreter(model_path=path).get_signature_runner()
    for i in range(3):
        small = rng.uniform(0, 255, (5, 5, 3)).astype(np.float32)
        image = tf.cast(tf.image.resize(small, [40, 48]), tf.uint8).numpy()
        files.append(str(tmp_path / f"{i}.png"))
        tf.io.write_file(files[-1], tf.io.encode_png(image))
        probs = runner(inputs=_evaluation_image(image)[None])["probs"][0]
        top = np.argsort(-probs, kind="stable")[:2]
        expected.append(f"{files[-1]}: " + ", ".join(f"{c} ({probs[c]:.3f})" for c in top))
    experiment, yaml_path = config_file(tmp_path)
    printed = predict_tflite._main(types.SimpleNamespace(
        experiment=experiment, config_file=[yaml_path], params_override=None,
        registry_imports=None, tflite_path=path, image_path=[str(tmp_path / "*.png")],
        top_k=2, score_threshold=0.3))
    assert printed.splitlines() == expected


# ~11 s (a second conversion); the same conversion path runs in the suite on the float file.
@pytest.mark.release(sibling="tests/vision/test_export_tflite.py::"
                             "test_float_file_gives_tfms_float_outputs")
def test_fp16_file_gives_tfms_fp16_outputs(saved_model, tmp_path):
    _, tfm = _reference()
    path, _ = convert(saved_model, tmp_path, "fp16")
    out = run(path, tfm["inputs"])
    np.testing.assert_allclose(out["logits"], tfm["fp16_logits"], atol=1e-2, rtol=0)
    # Float16 weights, not float32: the outputs moved off the float file's.
    assert np.abs(out["logits"] - tfm["none_logits"]).max() > 1e-5


@pytest.mark.release(sibling="tests/vision/test_export_tflite.py::"
                             "test_int8_full_calibrated_on_train_data_agrees_with_tfms_top1")
@pytest.mark.parametrize("quant_type", ["int8", "int8_full_int8_io", "default"])
def test_every_other_tfm_quant_type_agrees_with_tfm(saved_model, tmp_path, quant_type):
    record, tfm = _reference()
    path, _ = convert(saved_model, tmp_path, quant_type)
    model = predict_tflite.TFLiteModel(path)
    assert np.dtype(model.input["dtype"]).name == record["types"][quant_type]["input"]["dtype"]
    out = run(path, tfm["inputs"])
    np.testing.assert_array_equal(out["logits"].argmax(-1),
                                  tfm[f"{quant_type}_logits"].argmax(-1))


@pytest.mark.release(sibling="tests/vision/test_export_tflite.py::"
                             "test_float_file_gives_tfms_float_outputs")
def test_uint8_writes_defaults_file_as_tfms_does(saved_model, tmp_path):
    """TFM's `uint8` settings are TF1's, which TensorFlow 2's converter ignores: TFM's own
    uint8 and default files are one file (the generator's sha256), and so are lite's."""
    record, _ = _reference()
    assert record["types"]["uint8"]["sha256"] == record["types"]["default"]["sha256"]
    uint8_path, _ = convert(saved_model, tmp_path, "uint8")
    default_path, _ = convert(saved_model, tmp_path, "default")
    with open(uint8_path, "rb") as a, open(default_path, "rb") as b:
        assert a.read() == b.read()


@pytest.mark.release(sibling="tests/vision/test_export_tflite.py::"
                             "test_int8_full_calibrated_on_train_data_agrees_with_tfms_top1")
def test_denylisted_ops_stay_float_in_an_integer_file(saved_model, tmp_path):
    """--denylisted_ops MEAN (TFM's QuantizationDebugger path): the global average pool's MEAN
    runs on float32 tensors, which the plain int8 file quantizes."""
    def mean_input_types(path):
        interpreter = predict_tflite.TFLiteModel(path).interpreter
        tensors = {t["index"]: t for t in interpreter.get_tensor_details()}
        return {np.dtype(tensors[op["inputs"][0]]["dtype"]).name
                for op in interpreter._get_ops_details() if op["op_name"] == "MEAN"}

    record, _ = _reference()
    plain, _ = convert(saved_model, tmp_path, "int8")
    denylisted = str(tmp_path / "denylisted.tflite")
    export_tflite.export_tflite(tfm_params(), saved_model, denylisted, "int8",
                                calibration_steps=record["calibration_steps"],
                                denylisted_ops=["MEAN"])
    assert mean_input_types(plain) == {"int8"}
    assert mean_input_types(denylisted) == {"float32"}


@pytest.mark.release(sibling="tests/vision/test_export_tflite.py::"
                             "test_int8_full_calibrated_on_train_data_agrees_with_tfms_top1")
def test_int8_top1_within_2_points_of_float_on_a_trained_digits_classifier(tmp_path):
    """benchmarks/tflite_digits.py's measurement (docs/export.md quotes its results file): a
    ResNet-10 trained on the digits, its int8 and int8_full files within 2 points of the float
    file's validation top-1, and about 4x smaller."""
    sys.path.insert(0, BENCHMARKS)
    import tflite_digits
    record = tflite_digits.measure(str(tmp_path), quant_types=("none", "int8", "int8_full"))
    files = record["files"]
    assert files["none"]["top1"] >= 0.9
    for quant_type in ("int8", "int8_full"):
        assert files[quant_type]["top1"] >= files["none"]["top1"] - 0.02, record
        assert files["none"]["bytes"] / files[quant_type]["bytes"] > 3.5, record
    assert files["int8_full"]["input_dtype"] == "uint8"


def _export_and_convert(tmp_path, params, checkpoint):
    saved_model_dir = str(tmp_path / "saved_model")
    export_lib.export_saved_model(params, checkpoint, saved_model_dir, input_type="tflite",
                                  batch_size=1)
    path = str(tmp_path / "model.tflite")
    export_tflite.export_tflite(params, saved_model_dir, path)
    return saved_model_dir, path


def _tfm_checkpoint_params(family, name):
    """The config and checkpoint directory of a TFM checkpoint of make_tfm_*checkpoints.py."""
    if family == "segmentation":  # indexed in the classifiers' index, stored beside them
        with open(os.path.join(CHECKPOINTS, "index.json")) as f:
            entry = json.load(f)["segmentation"]["models"][name]
        directory = os.path.join(CHECKPOINTS, name)
    else:
        with open(os.path.join(CHECKPOINTS, family, "index.json")) as f:
            entry = json.load(f)["models"][name]
        directory = os.path.join(CHECKPOINTS, family, name)
    params = ll.get_exp_config(entry["experiment"])
    params.override({"runtime": {"distribution_strategy": "off"},
                     "task": {"model": entry["model"]}})
    params.validate()
    return params, directory


def _png(tmp_path, size, seed):
    small = np.random.default_rng(seed).uniform(0, 255, (6, 6, 3)).astype(np.float32)
    image = tf.cast(tf.image.resize(small, [size, size]), tf.uint8).numpy()
    path = str(tmp_path / f"{seed}.png")
    tf.io.write_file(path, tf.io.encode_png(image))
    return path, (image.astype(np.float32) - MEAN) / STD


@pytest.mark.release(sibling="tests/vision/test_export_tflite.py::"
                             "test_float_file_gives_tfms_float_outputs")
def test_retinanet_float_file_gives_the_savedmodels_detections(tmp_path):
    """A TFM RetinaNet checkpoint (MobileNetV2-FPN, 128x128): lite's NMS converts to TFLite
    builtins; the file's detections are the SavedModel's, and predict_tflite prints them."""
    params, checkpoint = _tfm_checkpoint_params("retinanet", "retinanet_mobilenetv2_fpn")
    saved_model_dir, path = _export_and_convert(tmp_path, params, checkpoint)
    # A 128x128 image: the resize is the identity and nothing is padded (128 = 2**max_level).
    image_path, normalised = _png(tmp_path, 128, 0)
    served = tf.saved_model.load(saved_model_dir).signatures["serving_default"](
        inputs=tf.constant(normalised[None]))
    out = predict_tflite.TFLiteModel(path)(normalised)
    count = int(served["num_detections"][0])
    assert int(out["num_detections"]) == count
    np.testing.assert_allclose(out["detection_boxes"][:count],
                               served["detection_boxes"][0, :count], atol=1e-3)
    np.testing.assert_allclose(out["detection_scores"][:count],
                               served["detection_scores"][0, :count], atol=1e-5)
    np.testing.assert_array_equal(out["detection_classes"][:count],
                                  served["detection_classes"][0, :count])
    printed = predict_tflite.predict(params, path, [image_path], score_threshold=0.0)
    assert printed.splitlines()[0] == f"{image_path}: {count} detections (score >= 0.0)"
    assert len(printed.splitlines()) == count + 1


@pytest.mark.release(sibling="tests/vision/test_export_tflite.py::"
                             "test_float_file_gives_tfms_float_outputs")
def test_segmentation_float_file_gives_the_savedmodels_mask(tmp_path):
    """A TFM DeepLab v3 checkpoint (MobileNetV2, 48x48): the file's logits are the
    SavedModel's, and predict_tflite prints its mask's class shares."""
    params, checkpoint = _tfm_checkpoint_params("segmentation", "seg_mobilenetv2")
    saved_model_dir, path = _export_and_convert(tmp_path, params, checkpoint)
    image_path, normalised = _png(tmp_path, 48, 1)
    served = tf.saved_model.load(saved_model_dir).signatures["serving_default"](
        inputs=tf.constant(normalised[None]))
    out = predict_tflite.TFLiteModel(path)(normalised)
    np.testing.assert_allclose(out["logits"], served["logits"][0], atol=1e-4)
    mask = served["predicted_mask"][0].numpy()
    classes, counts = np.unique(mask, return_counts=True)
    order = np.argsort(-counts, kind="stable")
    shares = ", ".join(f"class {classes[i]} {100.0 * counts[i] / mask.size:.1f}%" for i in order)
    assert predict_tflite.predict(params, path, [image_path]) == (
        f"{image_path}: 48x48 mask; {shares}")


# ----- bad input: one line, exit code 2, no file ----------------------------------------------


def _flags(tmp_path, **values):
    base = dict(experiment="mobilenet_imagenet", config_file=None, params_override=None,
                registry_imports=None, saved_model_dir=str(tmp_path / "missing_sm"),
                tflite_path=str(tmp_path / "out.tflite"), quant_type=None,
                calibration_steps=4, denylisted_ops="")
    base.update(values)
    return types.SimpleNamespace(**base)


@pytest.mark.parametrize("values, message", [
    ({"quant_type": "int4"}, "--quant_type 'int4' is not a TFLite quantization type"),
    ({"quant_type": "qat"}, "converts a quantization-aware-trained model"),
    ({"quant_type": "qat_fp32_io"}, "which lite does not train"),
    ({"quant_type": "int8"}, "input_path 'imagenet-2012-tfrecord/train*' matches no file"),
    ({"quant_type": "int8", "params_override": "task.train_data.input_path=''"},
     "calibrates on the experiment's train_data, which names no data"),
    ({"quant_type": "int8_full", "calibration_steps": 0}, "--calibration_steps (0) must be"),
    ({"quant_type": "fp16", "denylisted_ops": "MEAN"}, "needs an integer --quant_type"),
    ({"quant_type": "int8", "denylisted_ops": "mean"}, "'mean' is not a TFLite op name"),
    ({"experiment": "maskrcnn_resnetfpn_coco"}, "Mask R-CNN has no TFLite export in lite"),
    ({"experiment": "digits_mlp"}, "(DigitsTaskConfig) has no TFLite export"),
    ({}, "is not a directory"),
])
def test_bad_input_is_one_line_before_any_conversion(tmp_path, values, message):
    with pytest.raises(ConfigError) as error:
        export_tflite._main(_flags(tmp_path, **values))
    assert message in str(error.value) and "\n" not in str(error.value)
    assert os.listdir(tmp_path) == []


def test_unwritable_tflite_path_is_refused_before_any_conversion(tmp_path):
    (tmp_path / "a_file").write_text("x")
    for path, message in ((tmp_path / "a_file" / "m.tflite", "is a file, not a directory"),
                          (tmp_path, "is a directory; pass a file path")):
        with pytest.raises(ConfigError, match=message):
            export_tflite._main(_flags(tmp_path, tflite_path=str(path)))


def _hand_saved_model(path, dtype, outputs, shape=(1, 32, 32, 3)):
    """A SavedModel whose serving_default takes `inputs` of `dtype` (float32: of `shape`) and
    returns `outputs`."""
    module = tf.Module()
    shape = list(shape) if dtype == tf.float32 else [None]

    @tf.function(input_signature=[tf.TensorSpec(shape, dtype, name="inputs")])
    def serve(inputs):
        value = tf.reduce_sum(tf.cast(tf.strings.length(inputs), tf.float32)
                              if dtype == tf.string else inputs)
        return {name: tf.fill([1, 5], value) for name in outputs}

    module.serve = serve
    tf.saved_model.save(module, str(path), signatures={"serving_default": serve})
    return str(path)


def test_savedmodel_of_another_input_type_or_task_is_refused(tmp_path):
    bytes_model = _hand_saved_model(tmp_path / "bytes", tf.string, ["logits", "probs"])
    with pytest.raises(ConfigError, match=r"takes string \[None\] inputs, not the tflite "
                                          r"signature's float32"):
        export_tflite_lib.convert_tflite_model(bytes_model, None, params=tfm_params())
    segmentation = _hand_saved_model(tmp_path / "seg", tf.float32, ["logits", "predicted_mask"])
    with pytest.raises(ConfigError, match="returns logits, predicted_mask: not a image "
                                          "classification model"):
        export_tflite_lib.convert_tflite_model(segmentation, "fp16", params=tfm_params())
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tflite")]


def test_savedmodel_of_another_size_or_batch_is_refused_for_calibration(tmp_path):
    small = _hand_saved_model(tmp_path / "small", tf.float32, ["logits", "probs"],
                              shape=(1, 16, 16, 3))
    with pytest.raises(ConfigError, match="train_data yields 32x32 images but the SavedModel "
                                          "takes 16x16"):
        export_tflite_lib.convert_tflite_model(small, "int8", params=tfm_params(),
                                               calibration_steps=2)
    batched = _hand_saved_model(tmp_path / "batched", tf.float32, ["logits", "probs"],
                                shape=(8, 32, 32, 3))
    with pytest.raises(ConfigError, match="takes batches of 8; --quant_type int8_full "
                                          "calibrates one image at a time"):
        export_tflite_lib.convert_tflite_model(batched, "int8_full", params=tfm_params())


def test_cli_bad_input_exits_2_with_one_line(tmp_path, capsys):
    from absl import flags as absl_flags
    export_tflite.define_flags()
    path = tmp_path / "m.tflite"
    argv = ["lite-export-tflite", "--experiment", "mobilenet_imagenet", "--saved_model_dir",
            str(tmp_path), "--tflite_path", str(path), "--quant_type", "int16"]
    absl_flags.FLAGS(argv)
    try:
        with pytest.raises(SystemExit) as exit_info:
            export_tflite.main(argv[:1])
    finally:
        absl_flags.FLAGS.unparse_flags()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("lite-export-tflite: error: --quant_type 'int16'") and "\n" not in err
    assert not path.exists()


def test_a_failed_write_leaves_no_partial_file_and_the_old_one_intact(tmp_path, monkeypatch):
    path = tmp_path / "m.tflite"
    path.write_bytes(b"old")

    def fail(*_):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError):
        export_tflite_lib.write_tflite(str(path), b"new model bytes")
    assert os.listdir(tmp_path) == ["m.tflite"] and path.read_bytes() == b"old"


def test_without_litert_the_report_is_the_size_and_predict_names_the_extra(monkeypatch,
                                                                           tmp_path):
    monkeypatch.setitem(sys.modules, "ai_edge_litert.interpreter", None)  # import fails
    assert export_tflite_lib.describe(b"x" * 1234) == (
        "1,234 bytes (pip install 'lite_launcher[tflite]' to list its inputs and outputs)")
    (tmp_path / "m.tflite").write_bytes(b"x")
    with pytest.raises(ConfigError, match=r"needs LiteRT \(ai-edge-litert\), which is not "
                                          r"installed .*pip install 'lite_launcher\[tflite\]'"):
        predict_tflite.TFLiteModel(str(tmp_path / "m.tflite"))


def test_predict_tflite_bad_input_is_one_line(float_file, tmp_path):
    path, _ = float_file
    (tmp_path / "a.png").write_bytes(tf.io.encode_png(np.zeros((8, 8, 3), np.uint8)).numpy())
    (tmp_path / "not_a_model.tflite").write_bytes(b"not a flatbuffer")

    def predict(**values):
        base = dict(experiment="mobilenet_imagenet", config_file=None, params_override=None,
                    registry_imports=None, tflite_path=path,
                    image_path=[str(tmp_path / "a.png")], top_k=3, score_threshold=0.3)
        base.update(values)
        with pytest.raises(ConfigError) as error:
            predict_tflite._main(types.SimpleNamespace(**base))
        assert "\n" not in str(error.value)
        return str(error.value)

    assert "matches no file" in predict(image_path=[str(tmp_path / "*.jpg")])
    assert "is not a file" in predict(tflite_path=str(tmp_path / "missing.tflite"))
    assert "is not a TFLite model" in predict(tflite_path=str(tmp_path / "not_a_model.tflite"))
    assert "--top_k (0) must be a positive integer" in predict(top_k=0)
    assert ("returns logits, probs: not a semantic segmentation model"
            in predict(experiment="mnv2_deeplabv3_pascal"))
