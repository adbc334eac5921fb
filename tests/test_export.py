"""`lite-export` (lite_launcher/commands/export.py): trained checkpoints as SavedModels, served by
TensorFlow alone.

digits_mlp and a ResNet-10 `resnet_imagenet` (32x32, 5 classes) are trained a few steps
in-process, exported by lite-export's flags-to-export code in this process (digits: its one
input type; ResNet: every TFM input type, one signature each, through `--function_keys`), and
loaded in a fresh Python that never imports lite_launcher. Each signature's outputs are
compared with the Keras model's on the same inputs: JPEGs and tf.Examples against the
evaluation pipeline's images (served = evaluated), decoded images and a PNG against a centre
crop + resize + normalisation written here in numpy.
"""

import gc
import inspect
import os
import re
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest
import tensorflow as tf
import yaml
from tensorflow.core.framework import types_pb2
from tensorflow.core.protobuf import saved_model_pb2

from lite_launcher import optimization
import lite_launcher as ll
from lite_launcher.commands import export as export_lib

from test_modes import ROOT, subprocess_env

NUM_CLASSES = 5
SIZE = 32
MEAN = np.array([0.485, 0.456, 0.406], np.float32) * 255
STD = np.array([0.229, 0.224, 0.225], np.float32) * 255
TIMEOUT = 300
# What Keras 3's ExportArchive writes for a SavedModel.
SAVED_MODEL_FILES = ["assets", "fingerprint.pb", "saved_model.pb", "variables"]
RESNET_SIGNATURES = {"image_tensor": "serving_default", "image_bytes": "serving_image_bytes",
                     "tf_example": "serving_tf_example",
                     "serve_examples": "serving_serve_examples", "tflite": "serving_tflite"}


def lite_export(*args, expect_rc=0):
    result = subprocess.run([sys.executable, "-m", "lite_launcher.commands.export"] + [str(a) for a in args],
                            cwd=ROOT, env=subprocess_env(), capture_output=True, text=True,
                            timeout=TIMEOUT)
    assert result.returncode == expect_rc, result.stderr[-4000:]
    return result


def _images(rng, count, height, width):
    """Smooth random uint8 images (JPEG keeps them close, so the classes stay apart)."""
    small = rng.uniform(0, 255, (count, 6, 6, 3)).astype(np.float32)
    return tf.cast(tf.image.resize(small, [height, width]), tf.uint8).numpy()


def _example(encoded, label):
    return tf.train.Example(features=tf.train.Features(feature={
        "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[encoded])),
        "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
    })).SerializeToString()


def _reference_preprocess(image):
    """TFM's evaluation preprocessing of one decoded image, written out: centre crop of 0.875
    of the short side, bilinear resize to SIZE, ImageNet mean/std."""
    height, width = image.shape[:2]
    side = 0.875 * min(height, width)
    top, left = int((height - side) / 2), int((width - side) / 2)
    crop = image[top:top + int(side), left:left + int(side)].astype(np.float32)
    resized = tf.image.resize(crop, [SIZE, SIZE], method="bilinear").numpy()
    return (resized - MEAN) / STD


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """A TFRecord of 8 JPEG tf.Examples (40x48), plus the images themselves."""
    root = tmp_path_factory.mktemp("records")
    rng = np.random.default_rng(0)
    images = _images(rng, 8, 40, 48)
    labels = [i % NUM_CLASSES for i in range(len(images))]
    jpegs = [tf.io.encode_jpeg(image, quality=95).numpy() for image in images]
    examples = [_example(jpeg, label) for jpeg, label in zip(jpegs, labels)]
    path = str(root / "data.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for example in examples:
            writer.write(example)
    png_image = _images(rng, 1, 36, 30)[0]
    return types.SimpleNamespace(path=path, jpegs=jpegs, examples=examples,
                                 decoded=np.stack([tf.io.decode_jpeg(j).numpy() for j in jpegs]),
                                 png=tf.io.encode_png(png_image).numpy(), png_image=png_image)


def resnet_params(input_path, **trainer):
    params = ll.get_exp_config("resnet_imagenet")
    params.override({
        "runtime": {"distribution_strategy": "off", "num_gpus": 0, "enable_xla": False},
        "task": {"model": {"num_classes": NUM_CLASSES, "input_size": [SIZE, SIZE, 3],
                           "backbone": {"resnet": {"model_id": 10}}},
                 "train_data": {"input_path": input_path, "global_batch_size": 4},
                 "validation_data": {"input_path": input_path, "global_batch_size": 8,
                                     "drop_remainder": False}},
        "trainer": {"train_steps": 2, "steps_per_loop": 2, "checkpoint_interval": 2,
                    "summary_interval": 2, "validation_interval": 2, "validation_steps": 1,
                    **trainer}})
    return params


RESNET_OVERRIDE = ("runtime.distribution_strategy=off,runtime.num_gpus=0,"
                   "runtime.enable_xla=false,task.model.num_classes=5,"
                   "task.model.input_size=[32,32,3],task.model.backbone.resnet.model_id=10")


def train(params, model_dir, mode="train"):
    """Trains in this process; returns (task, the trained Keras model)."""
    params.validate()
    task = ll.get_task(params.task, logging_dir=str(model_dir))
    model, _ = ll.run_experiment(distribution_strategy=tf.distribute.get_strategy(), task=task,
                                 mode=mode, params=params, model_dir=str(model_dir))
    gc.collect()  # the run's tf.data iterators while young (see conftest.pytest_fixture_setup)
    return task, model


@pytest.fixture(scope="module")
def trained(tmp_path_factory, records):
    """Both experiments trained, exported with lite-export, and served in a fresh process."""
    root = tmp_path_factory.mktemp("export")
    digits_params = ll.get_exp_config("digits_mlp")
    digits_params.override({"trainer": {"train_steps": 4, "steps_per_loop": 2,
                                        "checkpoint_interval": 4}})
    _, digits_model = train(digits_params, root / "digits")
    _, resnet_model = train(resnet_params(records.path), root / "resnet")

    # Both through lite-export's flags-to-export code in this process (its defaults: the
    # flags' own; the `lite-export` process runs in test_cli_bad_input_... and in
    # tests/vision's exports).
    export_lib._main(_flags(  # pylint: disable=protected-access
        checkpoint_path=str(root / "digits"), export_dir=str(root / "digits_export")))
    export_lib._main(_flags(  # pylint: disable=protected-access
        experiment="resnet_imagenet", params_override=RESNET_OVERRIDE,
        checkpoint_path=str(root / "resnet"), export_dir=str(root / "resnet_export"),
        input_image_size=f"{SIZE},{SIZE}",
        function_keys=",".join(f"{k}:{v}" for k, v in RESNET_SIGNATURES.items())))

    # The same inputs for the Keras models (here) and the SavedModels (a fresh process).
    digits_inputs = np.random.default_rng(1).uniform(0, 1, (5, 8, 8)).astype(np.float32)
    # The images as TFM's evaluation preprocessing makes them, computed here independently of
    # lite's input pipeline and serving code (the 8 records in file order).
    eval_images = np.stack([_reference_preprocess(i) for i in records.decoded])
    mixed_bytes = records.jpegs[:3] + [records.png]
    inputs = {
        "digits/serving_default": digits_inputs,
        "resnet/serving_default": records.decoded,
        "resnet/serving_image_bytes": np.array(mixed_bytes, dtype=object),
        "resnet/serving_tf_example": np.array(records.examples, dtype=object),
        "resnet/serving_serve_examples": np.array(records.examples, dtype=object),
        "resnet/serving_tflite": eval_images,
    }
    png_image = _reference_preprocess(records.png_image)[None]
    keras_inputs = {
        "digits/serving_default": digits_inputs,
        "resnet/serving_default": np.stack([_reference_preprocess(i) for i in records.decoded]),
        "resnet/serving_image_bytes": np.concatenate([eval_images[:3], png_image]),
        "resnet/serving_tf_example": eval_images,
        "resnet/serving_serve_examples": eval_images,
        "resnet/serving_tflite": eval_images,
    }
    keras_logits = {key: (digits_model if key.startswith("digits") else resnet_model)(
        x, training=False).numpy() for key, x in keras_inputs.items()}
    np.savez(root / "inputs.npz", **{k.replace("/", "__"): v for k, v in inputs.items()})
    served = serve_in_fresh_process(root)
    return types.SimpleNamespace(root=root, keras_logits=keras_logits, served=served,
                                 digits_params=digits_params, digits_model=digits_model,
                                 resnet_model=resnet_model, inputs=inputs)


FRESH_SERVER = textwrap.dedent("""
    import os, sys
    import numpy as np
    import tensorflow as tf
    root = sys.argv[1]
    inputs = np.load(os.path.join(root, "inputs.npz"), allow_pickle=True)
    outputs, loaded = {}, {}
    for key in inputs.files:
        experiment, signature = key.split("__")
        if experiment not in loaded:
            loaded[experiment] = tf.saved_model.load(os.path.join(root, experiment + "_export"))
        x = inputs[key]
        x = tf.constant(list(x)) if x.dtype == object else tf.constant(x)
        for name, value in loaded[experiment].signatures[signature](inputs=x).items():
            outputs[key + "__" + name] = value.numpy()
    np.savez(os.path.join(root, "outputs.npz"), **outputs)
    assert not [m for m in sys.modules if m.startswith("lite_launcher")]
""")


def serve_in_fresh_process(root):
    script = root / "serve.py"
    script.write_text(FRESH_SERVER)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("PYTHONPATH", None)  # nothing of this repository on the path
    result = subprocess.run([sys.executable, str(script), str(root)], cwd=str(root), env=env,
                            capture_output=True, text=True, timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr[-4000:]
    with np.load(root / "outputs.npz") as outputs:
        return {key: outputs[key] for key in outputs.files}


@pytest.mark.parametrize("key", ["digits/serving_default", "resnet/serving_default",
                                 "resnet/serving_image_bytes", "resnet/serving_tf_example",
                                 "resnet/serving_serve_examples", "resnet/serving_tflite"])
def test_saved_model_serves_what_the_keras_model_computes(trained, key):
    served_key = key.replace("/", "__")
    expected = trained.keras_logits[key]
    if key.startswith("digits"):  # the base Task's signature: the model's output
        np.testing.assert_allclose(trained.served[served_key + "__outputs"], expected,
                                   atol=1e-5)
        return
    logits = trained.served[served_key + "__logits"]
    np.testing.assert_allclose(logits, expected, atol=1e-5)
    np.testing.assert_allclose(trained.served[served_key + "__probs"],
                               tf.nn.softmax(expected).numpy(), atol=1e-5)
    assert logits.shape == (len(trained.inputs[key]), NUM_CLASSES)


def test_evaluation_pipeline_preprocesses_as_the_reference(records):
    # The served image signatures preprocess as training's evaluation does: both equal the
    # reference written out above.
    params = resnet_params(records.path)
    dataset = ll.get_task(params.task).build_inputs(params.task.validation_data)
    images = next(iter(dataset))[0].numpy()
    np.testing.assert_allclose(images, np.stack([_reference_preprocess(i)
                                                 for i in records.decoded]), atol=1e-4)


def _signature_defs(saved_model_dir):
    """{signature name: SignatureDef} of a SavedModel's serving graph, read from saved_model.pb
    as `saved_model_cli show --all` reads it."""
    saved_model = saved_model_pb2.SavedModel()
    saved_model.ParseFromString((saved_model_dir / "saved_model.pb").read_bytes())
    (meta_graph,) = [graph for graph in saved_model.meta_graphs
                     if "serve" in graph.meta_info_def.tags]
    return dict(meta_graph.signature_def)


def _tensor_info(info):
    """(dtype name, shape) of a TensorInfo, as saved_model_cli prints them (-1: any size)."""
    return types_pb2.DataType.Name(info.dtype), tuple(d.size for d in info.tensor_shape.dim)


def test_saved_model_signatures_have_tfm_names_dtypes_and_shapes(trained):
    signatures = _signature_defs(trained.root / "resnet_export")
    assert set(RESNET_SIGNATURES.values()) <= set(signatures)
    image_tensor = signatures["serving_default"]
    assert {name: _tensor_info(info) for name, info in image_tensor.inputs.items()} == {
        "inputs": ("DT_UINT8", (-1, -1, -1, 3))}
    assert {name: _tensor_info(info) for name, info in image_tensor.outputs.items()} == {
        name: ("DT_FLOAT", (-1, NUM_CLASSES)) for name in ("logits", "probs")}
    for name in ("serving_image_bytes", "serving_tf_example", "serving_serve_examples"):
        assert _tensor_info(signatures[name].inputs["inputs"]) == ("DT_STRING", (-1,)), name
    assert _tensor_info(signatures["serving_tflite"].inputs["inputs"]) == (
        "DT_FLOAT", (-1, SIZE, SIZE, 3))


def test_export_dir_has_tfm_layout(trained):
    export_dir = trained.root / "digits_export"
    # TFM's export_inference_graph layout: the SavedModel in export_dir itself.
    assert sorted(os.listdir(export_dir)) == sorted(SAVED_MODEL_FILES + ["checkpoint",
                                                                         "params.yaml"])
    # The config lite-export built the model from (the experiment's, no overrides given).
    assert yaml.safe_load((export_dir / "params.yaml").read_text()) == yaml.safe_load(
        ll.get_exp_config("digits_mlp").to_yaml())
    # The exported checkpoint holds the served weights, readable as TFM's (model=...).
    model = ll.get_task(trained.digits_params.task).build_model()
    tf.train.Checkpoint(model=model).read(
        tf.train.latest_checkpoint(str(export_dir / "checkpoint"))).assert_existing_objects_matched()
    for mine, theirs in zip(model.weights, trained.digits_model.weights):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
    # No temporary directory left beside the exports.
    assert not [p for p in os.listdir(trained.root) if ".tmp-" in p]


def test_lite_export_and_export_saved_model_share_their_defaults():
    export_lib.define_flags()
    defaults = inspect.signature(ll.export_saved_model).parameters
    for name, value in (("export_saved_model_subdir", ""),
                        ("export_checkpoint_subdir", "checkpoint")):
        assert export_lib.FLAGS[name].default == defaults[name].default == value, name


def test_export_saved_model_subdir_saved_model_gives_the_layout_before_issue_45(trained):
    saved = export_lib._main(_flags(  # pylint: disable=protected-access
        checkpoint_path=str(trained.root / "digits"), export_dir=str(trained.root / "old"),
        export_saved_model_subdir="saved_model"))
    assert saved == str(trained.root / "old" / "saved_model")
    assert sorted(os.listdir(trained.root / "old")) == ["checkpoint", "params.yaml",
                                                         "saved_model"]
    assert sorted(os.listdir(saved)) == SAVED_MODEL_FILES
    x = np.random.default_rng(1).uniform(0, 1, (5, 8, 8)).astype(np.float32)  # the fixture's
    served = tf.saved_model.load(saved).signatures["serving_default"](inputs=x)["outputs"]
    np.testing.assert_allclose(served.numpy(), trained.served["digits__serving_default__outputs"],
                               atol=1e-6)


def test_tfm_export_inference_graph_writes_the_saved_model_into_export_dir(trained, records):
    # TFM's image classification tutorial's cell, imports changed only.
    from lite_launcher.vision.serving import export_saved_model_lib

    export_dir = str(trained.root / "tutorial_export")
    export_saved_model_lib.export_inference_graph(
        input_type="image_tensor", batch_size=1, input_image_size=[SIZE, SIZE],
        params=resnet_params(records.path),
        checkpoint_path=tf.train.latest_checkpoint(str(trained.root / "resnet")),
        export_dir=export_dir)
    # TFM's defaults: no checkpoint subdirectory, the SavedModel in export_dir.
    assert sorted(os.listdir(export_dir)) == sorted(SAVED_MODEL_FILES + ["params.yaml"])
    model_fn = tf.saved_model.load(export_dir).signatures["serving_default"]
    logits = model_fn(inputs=tf.constant(records.decoded[:1]))["logits"].numpy()
    assert logits.shape == (1, NUM_CLASSES)  # batch_size=1 in the signature
    np.testing.assert_allclose(logits, trained.served["resnet__serving_default__logits"][:1],
                               atol=1e-5)


@pytest.mark.parametrize("change, message", [
    (dict(checkpoint_path=None), "checkpoint_path is required"),
    (dict(num_channels=1), "num_channels= is not supported by lite"),
    (dict(export_module=object()), "export_module= is not supported by lite"),
    (dict(add_tpu_function_alias=True), "add_tpu_function_alias= is not supported"),
    (dict(function_keys=["image_tensor", "image_bytes"]), "as a list must hold one input"),
    (dict(input_image_size=[0, 32]), "--input_image_size '0,32' must be two positive"),
])
def test_tfm_export_inference_graph_refuses_in_one_line_and_writes_nothing(
        trained, records, tmp_path, change, message):
    from lite_launcher.vision.serving import export_saved_model_lib

    arguments = dict(input_type="image_tensor", batch_size=None, input_image_size=[SIZE, SIZE],
                     params=resnet_params(records.path),
                     checkpoint_path=str(trained.root / "resnet"),
                     export_dir=str(tmp_path / "export"))
    with pytest.raises(ll.ConfigError, match=re.escape(message)) as error:
        export_saved_model_lib.export_inference_graph(**{**arguments, **change})
    assert len(str(error.value).splitlines()) == 1
    assert os.listdir(tmp_path) == []


def test_ema_exports_the_averages_from_a_checkpoint_and_from_the_best_checkpoint(tmp_path):
    params = ll.get_exp_config("digits_mlp")
    params.override({"trainer": {
        "train_steps": 6, "steps_per_loop": 3, "summary_interval": 3, "checkpoint_interval": 6,
        "validation_interval": 6, "best_checkpoint_export_subdir": "best",
        "best_checkpoint_eval_metric": "accuracy", "best_checkpoint_metric_comp": "higher",
        "optimizer_config": {"ema": {"average_decay": 0.9, "dynamic_decay": False}}}})
    task, raw_model = train(params, tmp_path / "model", mode="train_and_eval")
    # The averages, read from the checkpoint's optimizer (not through lite-export's swap).
    averaged = task.build_model()
    optimizer = task.create_optimizer(params.trainer.optimizer_config, params.runtime)
    optimization.create_optimizer_variables(optimizer, averaged)
    tf.train.Checkpoint(model=averaged, optimizer=optimizer).read(
        tf.train.latest_checkpoint(str(tmp_path / "model"))).expect_partial()
    for variable, average in zip(averaged.trainable_variables,
                                 optimization.ema_variables(optimizer)):
        variable.assign(average)
    x = np.random.default_rng(2).uniform(0, 1, (4, 8, 8)).astype(np.float32)
    expected = averaged(x, training=False).numpy()
    assert np.abs(expected - raw_model(x, training=False).numpy()).max() > 1e-3
    # A model_dir, its best-checkpoint subdir, and an export's checkpoint (model only).
    for source in ("model", "model/best", "export/model/checkpoint"):
        saved = ll.export_saved_model(params, str(tmp_path / source),
                                      str(tmp_path / "export" / source))
        served = tf.saved_model.load(saved).signatures["serving_default"](inputs=x)["outputs"]
        np.testing.assert_allclose(served.numpy(), expected, atol=1e-5, err_msg=source)


def test_serving_at_another_image_size_uses_the_trained_weights(trained, records):
    params = resnet_params(records.path)
    task = ll.get_task(params.task)
    fn, spec = task.build_serving_fn(trained.resnet_model, "tflite", input_image_size=[40, 40])
    assert spec.shape.as_list() == [None, 40, 40, 3]
    reference = ll.get_task(params.task.replace(model={"input_size": [40, 40, 3]})).build_model()
    reference.set_weights(trained.resnet_model.get_weights())
    x = np.random.default_rng(3).normal(size=(2, 40, 40, 3)).astype(np.float32)
    np.testing.assert_allclose(fn(tf.constant(x))["logits"].numpy(),
                               reference(x, training=False).numpy(), atol=1e-5)


def test_log_model_flops_and_params(trained):
    export_dir = trained.root / "digits_flops"
    ll.export_saved_model(trained.digits_params, str(trained.root / "digits"), str(export_dir),
                          log_model_flops_and_params=True)
    params_text = (export_dir / "model_params.txt").read_text()
    assert params_text.endswith(f"Total params: {trained.digits_model.count_params()}\n")
    # 64 -> 128 -> 10: two matmuls (2mn each) and two bias adds, one image.
    flops = 2 * 64 * 128 + 128 + 2 * 128 * 10 + 10
    report = (export_dir / "model_flops.txt").read_text()
    assert "dense_0_1/MatMul (16.38k/16.38k flops)" in report
    assert report.endswith(f"Total float ops: {flops}\n")


# ------------------------------------------------------------------------------------------
# Bad input: one line, exit 2, nothing written.


def _flags(**values):
    defaults = dict(experiment="digits_mlp", config_file=None, params_override=None,
                    checkpoint_path=None, export_dir=None, input_type=None, batch_size=None,
                    input_image_size=None, export_checkpoint_subdir="checkpoint",
                    export_saved_model_subdir="", log_model_flops_and_params=False,
                    function_keys="", registry_imports=None)
    return types.SimpleNamespace(**{**defaults, **values})


def test_cli_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path):
    export_dir = tmp_path / "never"
    result = lite_export("--experiment", "digits_mlp", "--checkpoint_path", tmp_path,
                         "--export_dir", export_dir, "--input_image_size", "224", expect_rc=2)
    assert result.stderr.strip().splitlines() == [
        "lite-export: error: --input_image_size '224' must be two positive integers, "
        "height,width (e.g. 224,224)."]
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("change, message", [
    (dict(checkpoint_path="{root}/nothing"), "is neither a checkpoint directory nor"),
    (dict(checkpoint_path="{root}"), "is a directory with no checkpoint"),
    (dict(experiment="resnet_imagenet", params_override=RESNET_OVERRIDE,
          checkpoint_path="{root}/digits"), "does not fit the model's model weights"),
    (dict(export_dir="{root}/digits_export"), "already holds an export (saved_model.pb, "
                                              "variables, assets, fingerprint.pb, "
                                              "checkpoint, params.yaml)"),
    (dict(input_image_size="32"), "--input_image_size '32' must be two positive integers"),
    (dict(input_image_size="32,32"), "--input_image_size applies to image tasks"),
    (dict(function_keys="tensor"), "must be distinct 'input_type:signature_name' pairs"),
    (dict(batch_size=0), "--batch_size (0) must be a positive integer"),
    (dict(params_override="trainer.nope=1"), "nope"),
    (dict(params_override="{trainer: {optimizer_config: {ema: {average_decay: 0.9}}}}"),
     "does not fit the model's optimizer weights"),
    (dict(input_type="image_bytes"), "--input_type 'image_bytes' is not served by "
                                     "DigitsClassificationTask; valid: tensor."),
    (dict(experiment="resnet_imagenet", params_override=RESNET_OVERRIDE, input_type="tensor",
          checkpoint_path="{root}/resnet"), "valid: image_tensor, image_bytes, tf_example, "
                                            "serve_examples, tflite"),
])
def test_bad_input_is_a_config_error_and_writes_nothing(trained, change, message):
    values = dict(checkpoint_path="{root}/digits", export_dir="{root}/bad_export")
    values.update(change)
    values = {k: v.replace("{root}", str(trained.root)) if isinstance(v, str) else v
              for k, v in values.items()}
    before = sorted(os.listdir(trained.root))
    with pytest.raises(ll.ConfigError) as error:
        export_lib._main(_flags(**values))  # pylint: disable=protected-access
    assert message in str(error.value)
    assert sorted(os.listdir(trained.root)) == before


def test_an_unreadable_checkpoint_exits_1_and_writes_nothing(trained, tmp_path):
    prefix = tf.train.latest_checkpoint(str(trained.root / "digits"))
    for path in tf.io.gfile.glob(prefix + ".*"):
        data = open(path, "rb").read()
        # The data file cut short, as a full disk leaves it.
        (tmp_path / os.path.basename(path)).write_bytes(data[:len(data) // 2] if ".data" in path
                                                        else data)
    truncated = str(tmp_path / os.path.basename(prefix))
    with pytest.raises(ll.NoReadableCheckpointError, match="cannot be read"):
        ll.export_saved_model(trained.digits_params, truncated, str(tmp_path / "export"))
    assert not (tmp_path / "export").exists()


def test_a_failed_write_leaves_no_partial_export(trained, monkeypatch):
    def fail(self, path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(type(trained.digits_params), "save_yaml", fail)
    before = sorted(os.listdir(trained.root))
    with pytest.raises(ll.ModelDirWriteError, match="No space left on device"):
        ll.export_saved_model(trained.digits_params, str(trained.root / "digits"),
                              str(trained.root / "full_disk"))
    assert sorted(os.listdir(trained.root)) == before
