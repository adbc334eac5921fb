"""TFM-written checkpoints (tf_keras object graphs) load into lite's vision models.

The checkpoints and TFM's outputs on them come from TFM 2.20 itself
(data/make_tfm_checkpoints.py): every variable random, saved as TFM's Trainer saves.
"""

import json
import os
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf

import lite_launcher as ll
from lite_launcher.checkpointing import checkpoints
from lite_launcher.checkpointing import tfm_checkpoint
from lite_launcher.core.base_config import ConfigError

from fp32_noise import relative_error  # tests/vision is on sys.path

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "tfm_checkpoints")
with open(os.path.join(DATA, "index.json")) as _f:
    INDEX = json.load(_f)
MODELS = sorted(INDEX["models"])


def params_for(name, **task):
    entry = INDEX["models"][name]
    params = ll.get_exp_config(entry["experiment"])
    params.task.model.override(entry["model"], is_strict=True)
    if entry["lite_model"]:
        params.task.model.override(entry["lite_model"], is_strict=True)
    params.task.override(task, is_strict=True)
    return params


def reference(name):
    return np.load(os.path.join(DATA, name, "reference.npz"))


def features(model, images):
    endpoints = model.backbone(images, training=False)
    return (endpoints[max(endpoints)] if isinstance(endpoints, dict) else endpoints).numpy()




@pytest.mark.parametrize("name", MODELS)
def test_all_restores_tfm_logits(name):
    params = params_for(name, init_checkpoint=os.path.join(DATA, name),
                        init_checkpoint_modules="all")
    task = ll.get_task(params.task)
    model = task.build_model()
    ref = reference(name)
    assert relative_error(model(ref["images"], training=False).numpy(), ref["logits"]) > 1e-2
    task.initialize(model)
    assert relative_error(model(ref["images"], training=False).numpy(), ref["logits"]) <= 1e-4
    np.testing.assert_allclose(features(model, ref["images"]), ref["features"],
                               rtol=1e-4, atol=1e-4 * np.abs(ref["features"]).mean())


@pytest.mark.parametrize("name", ["resnet50", "mobilenetv3large", "vit_ti16"])
def test_backbone_restores_tfm_features_and_leaves_the_head(name):
    params = params_for(name, init_checkpoint=os.path.join(DATA, name),
                        init_checkpoint_modules="backbone")
    task = ll.get_task(params.task)
    model = task.build_model()
    head = {v.path: v.numpy() for v in model.weights if v.path.startswith("logits/")}
    assert len(head) == 2
    task.initialize(model)
    ref = reference(name)
    np.testing.assert_allclose(features(model, ref["images"]), ref["features"],
                               rtol=1e-4, atol=1e-4 * np.abs(ref["features"]).mean())
    for variable in model.weights:
        if variable.path in head:
            np.testing.assert_array_equal(variable.numpy(), head[variable.path])


def test_format_is_recognised(tmp_path):
    assert tfm_checkpoint.is_tfm_checkpoint(checkpoints.resolve(os.path.join(DATA, "resnet50")))
    model = ll.get_task(params_for("resnet50").task).build_model()
    lite_prefix = tf.train.Checkpoint(model=model).write(str(tmp_path / "lite"))
    assert not tfm_checkpoint.is_tfm_checkpoint(lite_prefix)
    # A lite checkpoint still restores as one.
    params = params_for("resnet50", init_checkpoint=lite_prefix)
    task = ll.get_task(params.task)
    other = task.build_model()
    task.initialize(other)
    for a, b in zip(model.weights, other.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_wrong_architecture_is_refused_in_one_line_before_any_assignment():
    params = params_for("mobilenetv2", init_checkpoint=os.path.join(DATA, "resnet50"))
    task = ll.get_task(params.task)
    model = task.build_model()
    before = [v.numpy() for v in model.weights]
    with pytest.raises(ConfigError) as error:
        task.initialize(model)
    message = str(error.value)
    assert "\n" not in message
    assert "a TFM checkpoint" in message and "model/layer_with_weights-0/" in message
    for variable, value in zip(model.weights, before):
        np.testing.assert_array_equal(variable.numpy(), value)


def initialize_error(params) -> str:
    """The one-line ConfigError the task's `initialize` raises on a fresh model."""
    task = ll.get_task(params.task)
    with pytest.raises(ConfigError) as error:
        task.initialize(task.build_model())
    message = str(error.value)
    assert "\n" not in message
    return message


def test_mis_shaped_variable_names_both_shapes():
    params = params_for("resnet50", init_checkpoint=os.path.join(DATA, "resnet50"))
    params.task.model.num_classes = 7
    message = initialize_error(params)
    assert "model/layer_with_weights-1/kernel/.ATTRIBUTES/VARIABLE_VALUE (64, 5)" in message
    assert "logits/kernel (64, 7)" in message


# `release`: its export of the TFM checkpoint is the moving-averages test's, which also checks
# the SavedModel serves the Keras model of the export's checkpoint (the weights themselves
# read for serving from a TFM checkpoint: test_lite_export_reads_a_tfm_segmentation_checkpoint).
@pytest.mark.release(sibling="tests/vision/test_tfm_checkpoint.py::"
                             "test_tfm_moving_averages_export_and_resume")
def test_export_from_a_tfm_checkpoint_matches_the_keras_model(tmp_path):
    name = "resnet18_v1"  # the fewest layers: an export traces every one of them
    params = params_for(name, init_checkpoint=os.path.join(DATA, name))
    task = ll.get_task(params.task)
    model = task.build_model()
    task.initialize(model)
    saved = ll.export_saved_model(params_for(name), os.path.join(DATA, name),
                                  str(tmp_path / "export"))
    images = np.random.default_rng(0).integers(0, 256, (2, 32, 32, 3)).astype(np.uint8)
    fn, _ = task.build_serving_fn(model, "image_tensor")
    expected = fn(tf.constant(images))
    served = tf.saved_model.load(saved).signatures["serving_default"](
        inputs=tf.constant(images))
    np.testing.assert_allclose(served["logits"].numpy(), expected["logits"].numpy(),
                               rtol=1e-5, atol=1e-5)
    # The export's checkpoint is a lite one holding TFM's weights.
    exported = ll.get_task(params_for(name).task).build_model()
    tf.train.Checkpoint(model=exported).read(
        tf.train.latest_checkpoint(str(tmp_path / "export" / "checkpoint"))).expect_partial()
    ref = reference(name)
    assert relative_error(exported(ref["images"], training=False).numpy(),
                          ref["logits"]) <= 1e-4


def _files(directory):
    return {name: open(os.path.join(directory, name), "rb").read()
            for name in os.listdir(directory) if name.startswith("ckpt-")}


def _train_loss(model, ref):
    logits = model(ref["train_images"], training=False)
    return float(tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
        ref["train_labels"], logits, from_logits=True)))


def _resuming(params, name, model_dir):
    """(model, optimizer, global step, TfmResumingCheckpointManager of model_dir) as the
    experiment builds them, with the optimizer config TFM's run used (no warmup)."""
    params.trainer.optimizer_config.override(
        dict(INDEX["models"][name]["optimizer"], warmup={"type": None}), is_strict=True)
    task = ll.get_task(params.task)
    model = task.build_model()
    optimizer = task.create_optimizer(params.trainer.optimizer_config, params.runtime)
    global_step = tf.Variable(0, dtype=tf.int64)
    checkpoint = tf.train.Checkpoint(global_step=global_step, model=model, optimizer=optimizer)
    manager = checkpoints.TfmResumingCheckpointManager(
        checkpoint, model_dir, max_to_keep=1, step_counter=global_step)
    return model, optimizer, global_step, manager


@pytest.mark.parametrize("name, slot_names", [("resnet18_v1", ("momentum",)),
                                              ("mobilenetv1", ("m", "v"))])
def test_resume_a_tfm_model_dir(tmp_path, name, slot_names, caplog):
    model_dir = str(tmp_path / "model")
    shutil.copytree(os.path.join(DATA, name), model_dir)
    tfm_files = _files(model_dir)
    entry, ref = INDEX["models"][name], reference(name)
    model, optimizer, global_step, manager = _resuming(params_for(name), name, model_dir)
    assert manager.restore_or_initialize().endswith("ckpt-3")
    assert int(global_step.numpy()) == entry["global_step"] == 3
    assert int(optimizer.iterations.numpy()) == int(ref["iterations"]) == 3
    # The slots a test reads: the first kernel's, against the checkpoint's tensors.
    reader = tf.train.load_checkpoint(model_dir)
    kernel = model.trainable_variables[0]
    keras_slots = tfm_checkpoint.SLOT_NAMES
    for tfm_name in slot_names:
        key = [k for k in reader.get_variable_to_shape_map()
               if k.startswith("backbone/layer_with_weights-0/")
               and "kernel/.OPTIMIZER_SLOT/" in k and k.split("/")[-3] == tfm_name]
        assert len(key) == 1
        slot = [v for v in optimizer.variables
                if v.name == f"{kernel.path.replace('/', '_')}_{keras_slots[tfm_name]}"][0]
        assert np.abs(reader.get_tensor(key[0])).max() > 0
        np.testing.assert_array_equal(slot.numpy(), reader.get_tensor(key[0]))
    # The loss continues where TFM's run stood, and the next step (slots and iterations
    # used) lands where TFM's did.
    np.testing.assert_allclose(_train_loss(model, ref), ref["next_loss"], rtol=1e-5)
    with tf.GradientTape() as tape:
        logits = model(ref["train_images"], training=False)
        loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
            ref["train_labels"], logits, from_logits=True))
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                  model.trainable_variables))
    np.testing.assert_allclose(_train_loss(model, ref), ref["loss_after_next_step"],
                               rtol=1e-4)
    # lite's checkpoints go beside TFM's, which stay as they were (max_to_keep 1 included).
    for step in (4, 5):
        global_step.assign(step)
        manager.save(checkpoint_number=step)
    assert {"ckpt-3.index", "ckpt-5.index"} <= set(os.listdir(model_dir))
    assert "ckpt-4.index" not in os.listdir(model_dir)
    after = _files(model_dir)
    for file_name, content in tfm_files.items():
        assert after[file_name] == content
    assert not tfm_checkpoint.is_tfm_checkpoint(tf.train.latest_checkpoint(model_dir))


def _write_records(path, count=8, size=32, num_classes=5):
    rng = np.random.default_rng(1)
    with tf.io.TFRecordWriter(path) as writer:
        for i in range(count):
            image = rng.integers(0, 256, (size, size, 3)).astype(np.uint8)
            feature = {
                "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(
                    value=[tf.io.encode_jpeg(image).numpy()])),
                "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(
                    value=[i % num_classes]))}
            writer.write(tf.train.Example(
                features=tf.train.Features(feature=feature)).SerializeToString())


def _train_with_zero_learning_rate(params, records, model_dir, steps, momentum):
    """run_experiment (mode train) to `steps` with SGD at learning rate 0; the losses."""
    params.override({
        "runtime": {"distribution_strategy": "off"},
        "task": {"train_data": {"input_path": records, "global_batch_size": 4,
                                "shuffle_buffer_size": 8}},
        "trainer": {"train_steps": steps, "steps_per_loop": 1, "summary_interval": 1,
                    "checkpoint_interval": steps, "validation_interval": 10**6,
                    "optimizer_config": {
                        "optimizer": {"type": "sgd", "sgd": {"momentum": momentum}},
                        "learning_rate": {"type": "constant",
                                          "constant": {"learning_rate": 0.0}},
                        "warmup": {"type": None}}}})
    losses = []
    ll.run_experiment(distribution_strategy=ll.get_distribution_strategy("off"),
                      task=ll.get_task(params.task), mode="train", params=params,
                      model_dir=model_dir, save_summary=False,
                      train_actions=[lambda out: losses.append(float(out["training_loss"]))])
    return losses


def test_lite_train_continues_a_tfm_model_dir(tmp_path):
    """run_experiment in a TFM model_dir: it starts at TFM's step with TFM's weights and
    momentum, and writes its checkpoint beside TFM's, which stays as it was."""
    name = "resnet18_v1"
    model_dir = str(tmp_path / "model")
    shutil.copytree(os.path.join(DATA, name), model_dir)
    tfm_files = _files(model_dir)
    records = str(tmp_path / "train.tfrecord")
    _write_records(records)
    losses = _train_with_zero_learning_rate(params_for(name), records, model_dir, steps=5,
                                            momentum=0.9)
    assert len(losses) == 2  # steps 4 and 5: TFM's run had done 3
    assert sorted(n for n in os.listdir(model_dir) if n.endswith(".index")) == [
        "ckpt-3.index", "ckpt-5.index"]
    after = _files(model_dir)
    for file_name, content in tfm_files.items():
        assert after[file_name] == content
    lite = tf.train.load_checkpoint(os.path.join(model_dir, "ckpt-5"))
    tfm = tf.train.load_checkpoint(os.path.join(model_dir, "ckpt-3"))
    assert int(lite.get_tensor("global_step/.ATTRIBUTES/VARIABLE_VALUE")) == 5
    resumed = ll.get_task(params_for(name).task).build_model()
    tf.train.Checkpoint(model=resumed).read(os.path.join(model_dir, "ckpt-5")).expect_partial()
    # With a zero learning rate only TFM's momentum moves the weights: two steps add
    # (0.9 + 0.81) times the momentum TFM saved (numpy on TFM's tensors).
    key = "backbone/layer_with_weights-0/kernel/"
    # (Under TFM's EMA the momentum is its base optimizer's slot.)
    momentum_key = [k for k in tfm.get_variable_to_shape_map()
                    if k.startswith(key + ".OPTIMIZER_SLOT/") and "/momentum/" in k]
    assert len(momentum_key) == 1
    momentum = tfm.get_tensor(momentum_key[0])
    expected = tfm.get_tensor(key + ".ATTRIBUTES/VARIABLE_VALUE") + (0.9 + 0.81) * momentum
    np.testing.assert_allclose(resumed.trainable_variables[0].numpy(), expected,
                               rtol=1e-5, atol=1e-6)


@pytest.fixture
def logits_of_each_step(monkeypatch):
    """[(labels, logits)] of every training step the classification task runs, recorded from
    inside its compiled step (the loss's inputs)."""
    from lite_launcher.vision import image_classification

    recorded = []
    original = image_classification.ImageClassificationTask.build_losses

    def recording(self, labels, model_outputs, aux_losses=None):
        record = tf.py_function(
            lambda l, o: recorded.append((l.numpy(), o.numpy())) or 0,
            [labels, model_outputs], tf.int32)
        with tf.control_dependencies([record]):
            return original(self, labels, tf.identity(model_outputs), aux_losses)

    monkeypatch.setattr(image_classification.ImageClassificationTask, "build_losses",
                        recording)
    return recorded


def _lite_train_in_process(monkeypatch, args):
    """`lite-train args` as `main.run()` in this process; its exit code."""
    import signal
    import sys
    import logging

    from lite_launcher.commands import train as main_lib

    sigterm = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(sys, "argv", ["lite-train", *args])
    # The variables the driver sets for TensorFlow return to their values after the test.
    for name in ("TF_ENABLE_ONEDNN_OPTS", "TF_CPP_MIN_LOG_LEVEL"):
        monkeypatch.setenv(name, os.environ.get(name, ""))
        if not os.environ[name]:
            monkeypatch.delenv(name)
    try:
        main_lib.run()
        return 0
    except SystemExit as exit_request:
        return exit_request.code or 0
    finally:
        logging.disable(logging.NOTSET)  # the driver silences logging for its exit
        signal.signal(signal.SIGTERM, sigterm)  # and ignores SIGTERM once it exits


def test_vit_fine_tunes_at_a_larger_input_from_a_tfm_checkpoint(tmp_path, monkeypatch,
                                                                  logits_of_each_step):
    """TFM's ViT weights (a 2x2 patch grid) in a 48x48 model: the position embedding is
    interpolated as TFM's model does (logits equal TFM's there), and `lite-train` fine-tunes 2
    steps from them: its first step's logits, on what its input pipeline makes of the
    records, equal TFM's on what TFM's parser makes of them."""
    import yaml

    name = "vit_ti16_gap"
    ref = reference(name)
    larger = {"input_size": [48, 48, 3], "backbone": {"vit": {"pos_embed_shape": [2, 2]}}}
    params = params_for(name, init_checkpoint=os.path.join(DATA, name))
    params.task.model.override(larger, is_strict=True)
    task = ll.get_task(params.task)
    model = task.build_model()
    task.initialize(model)
    assert relative_error(model(ref["finetune_images"], training=False).numpy(),
                          ref["finetune_logits"]) <= 1e-4
    # Without pos_embed_shape the grid does not fit: one line, both shapes, the fix.
    wrong = params_for(name, init_checkpoint=os.path.join(DATA, name))
    wrong.task.model.override({"input_size": [48, 48, 3]}, is_strict=True)
    assert re.search(r"\(1, 4, 32\).*\(1, 9, 32\).*pos_embed_shape", initialize_error(wrong))

    # lite-train: the experiment, the model TFM's checkpoint holds at 48x48 (no stochastic
    # depth, as TFM's reference step), the records with augmentation off, 2 SGD steps.
    entry = INDEX["models"][name]
    model_config = params_for(name).task.model.as_dict()
    model_config["input_size"] = [48, 48, 3]
    model_config["backbone"]["vit"].update(pos_embed_shape=[2, 2], init_stochastic_depth_rate=0.0)
    override = {
        "runtime": {"distribution_strategy": "off"},
        "task": {"init_checkpoint": os.path.join(DATA, name), "model": model_config,
                 "losses": {"label_smoothing": 0.0, "soft_labels": False},
                 "train_data": {"input_path": os.path.join(DATA, name, "finetune.tfrecord"),
                                "global_batch_size": 2, "aug_type": None,
                                "mixup_and_cutmix": None, "aug_rand_hflip": False,
                                "aug_crop": False, "decode_jpeg_only": False}},
        "trainer": {"train_steps": 2, "steps_per_loop": 1, "summary_interval": 1,
                    "checkpoint_interval": 2, "validation_interval": 10**6,
                    "optimizer_config": {
                        "optimizer": {"type": "sgd", "sgd": {"momentum": 0.0}},
                        "learning_rate": {"type": "constant",
                                          "constant": {"learning_rate": 0.5}},
                        "warmup": {"type": None}}}}
    override_file = tmp_path / "finetune.yaml"
    override_file.write_text(yaml.safe_dump(override))
    model_dir = str(tmp_path / "model")
    code = _lite_train_in_process(monkeypatch, [
        "--experiment", entry["experiment"], "--mode", "train", "--model_dir", model_dir,
        "--config_file", str(override_file)])
    assert code == 0
    assert tf.train.latest_checkpoint(model_dir).endswith("ckpt-2")
    assert len(logits_of_each_step) == 2
    # Each record has its own label: TFM's row for each example of lite's (shuffled, and
    # repeated: a batch may hold one record twice) batches.
    (labels, first), (second_labels, second) = logits_of_each_step
    tfm_row = {int(label): row for row, label in enumerate(ref["finetune_labels"])}
    assert relative_error(first, ref["finetune_logits"][[tfm_row[l] for l in labels]]) <= 1e-4
    # The second step ran on the updated weights.
    assert relative_error(
        second, ref["finetune_logits"][[tfm_row[l] for l in second_labels]]) > 1e-3


def test_lite_convert_writes_a_lite_checkpoint_and_a_keras_file(tmp_path):
    import types

    import keras
    import yaml

    from lite_launcher.commands import convert  # pylint: disable=import-outside-toplevel

    name = "mobilenetv1"
    entry, ref = INDEX["models"][name], reference(name)
    override = tmp_path / "model.yaml"
    override.write_text(yaml.safe_dump({"task": {"model": entry["model"]}}))
    output_dir = tmp_path / "converted"
    # lite-convert's flags-to-files code in this process (its command line's bad input runs
    # as a process in test_bad_input / the convert CLI tests).
    convert._main(types.SimpleNamespace(  # pylint: disable=protected-access
        experiment=entry["experiment"], config_file=None, params_override=str(override),
        checkpoint_path=os.path.join(DATA, name), output_dir=str(output_dir),
        registry_imports=None))
    step = entry["global_step"]  # the converted checkpoint is numbered with TFM's step
    assert sorted(os.listdir(output_dir)) == [
        "checkpoint", f"ckpt-{step}.data-00000-of-00001", f"ckpt-{step}.index", "model.keras",
        "params.yaml"]
    from lite_launcher.vision import mobilenet  # noqa: F401  (registers its layers for Keras)
    loaded = keras.saving.load_model(str(output_dir / "model.keras"))
    assert relative_error(loaded(ref["images"], training=False).numpy(), ref["logits"]) <= 1e-4
    # The lite checkpoint is one (restored as such by init_checkpoint).
    prefix = tf.train.latest_checkpoint(str(output_dir))
    assert not tfm_checkpoint.is_tfm_checkpoint(prefix)
    params = params_for(name, init_checkpoint=prefix)
    task = ll.get_task(params.task)
    model = task.build_model()
    task.initialize(model)
    assert relative_error(model(ref["images"], training=False).numpy(), ref["logits"]) <= 1e-4
    # Bad input: refused (the command's one line, exit 2), nothing written over.
    before = sorted(os.listdir(output_dir))
    with pytest.raises(ConfigError, match="exists"):
        convert._main(types.SimpleNamespace(  # pylint: disable=protected-access
            experiment=entry["experiment"], config_file=None, params_override=str(override),
            checkpoint_path=os.path.join(DATA, name), output_dir=str(output_dir),
            registry_imports=None))
    assert sorted(os.listdir(output_dir)) == before


def test_lite_convert_help_and_bad_input_do_not_import_tensorflow(tmp_path):
    """`lite-convert --help` and its bad input (one line, exit 2) are answered before
    TensorFlow loads, as lite-train's: one process runs the command for each row and checks
    `sys.modules` after each."""
    import subprocess
    import sys
    import textwrap

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from test_modes import ROOT, subprocess_env  # pylint: disable=import-outside-toplevel

    existing = tmp_path / "existing"
    existing.mkdir()
    new, ckpt = str(tmp_path / "new"), os.path.join(DATA, "resnet50")
    rows = [  # (argv, exit code, text of the one error line)
        (["--help"], 0, None),
        (["--experiment", "resnet_imagenet", "--checkpoint_path", ckpt], 2,
         "--output_dir is required"),
        (["--experiment", "resnet_imagenet", "--output_dir", new], 2,
         "--checkpoint_path is required"),
        (["--experiment", "resnet_imagenet", "--checkpoint_path", str(tmp_path / "nowhere"),
          "--output_dir", new], 2, "nowhere' does not exist"),
        (["--experiment", "resnet_imagenet", "--checkpoint_path", ckpt,
          "--output_dir", str(existing)], 2, "exists; pass a new directory"),
        (["--experiment", "no_such_thing", "--checkpoint_path", ckpt, "--output_dir", new], 2,
         "Unknown experiment 'no_such_thing'"),
    ]
    code = textwrap.dedent("""
        import json, sys
        import lite_launcher.commands.convert as convert
        results = []
        for argv in json.loads(sys.argv[1]):
            sys.argv = ["lite-convert", *argv]
            try:
                convert.run()
                code = 0
            except SystemExit as exit_request:
                code = exit_request.code or 0
            results.append([code, "tensorflow" in sys.modules])
        print(json.dumps(results))
    """)
    result = subprocess.run([sys.executable, "-c", code, json.dumps([r[0] for r in rows])],
                            cwd=ROOT, env=subprocess_env(), capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    outcomes = json.loads(result.stdout.strip().splitlines()[-1])
    errors = [line for line in result.stderr.splitlines() if line.startswith("lite-convert:")]
    assert "usage: lite-convert" in result.stdout and "--output_dir" in result.stdout
    assert outcomes == [[code, False] for _, code, _ in rows]
    assert len(errors) == len(rows) - 1
    for error, (_, _, text) in zip(errors, rows[1:]):
        assert text in error, error
    assert not os.path.exists(new) and os.listdir(existing) == []


def test_lite_convert_refuses_a_lite_checkpoint(tmp_path):
    from lite_launcher.commands import convert

    params = params_for("resnet50")
    model = ll.get_task(params.task).build_model()
    lite_prefix = tf.train.Checkpoint(model=model).write(str(tmp_path / "lite" / "ckpt"))
    with pytest.raises(ConfigError, match="not a TFM-written checkpoint"):
        convert.convert_checkpoint(params, lite_prefix, str(tmp_path / "out"))
    assert not os.path.exists(tmp_path / "out")


def test_tfm_moving_averages_export_and_resume(tmp_path, caplog):
    """resnet18_v1 was trained under TFM's ExponentialMovingAverage: lite-export with
    optimizer_config.ema serves its averages (TFM's averaged logits; the SavedModel serves the
    Keras model of the export's checkpoint), and a resume with EMA continues TFM's
    averages."""
    name = "resnet18_v1"
    ref = reference(name)
    assert relative_error(ref["average_logits"], ref["logits"]) > 1e-2
    ema = {"ema": {"average_decay": 0.5, "dynamic_decay": False}}
    params = params_for(name)
    params.trainer.optimizer_config.override(ema, is_strict=True)
    saved = ll.export_saved_model(params, os.path.join(DATA, name), str(tmp_path / "export"))
    task = ll.get_task(params.task)
    served = task.build_model()
    tf.train.Checkpoint(model=served).read(
        tf.train.latest_checkpoint(str(tmp_path / "export" / "checkpoint"))).expect_partial()
    assert relative_error(served(ref["images"], training=False).numpy(),
                          ref["average_logits"]) <= 1e-4
    images = np.random.default_rng(0).integers(0, 256, (2, 32, 32, 3)).astype(np.uint8)
    expected = task.build_serving_fn(served, "image_tensor")[0](tf.constant(images))
    by_saved_model = tf.saved_model.load(saved).signatures["serving_default"](
        inputs=tf.constant(images))
    np.testing.assert_allclose(by_saved_model["logits"].numpy(), expected["logits"].numpy(),
                               rtol=1e-5, atol=1e-5)
    # A resume with EMA: the averages are TFM's 'average' slots.
    model_dir = str(tmp_path / "model")
    shutil.copytree(os.path.join(DATA, name), model_dir)
    model, optimizer, _, manager = _resuming(params, name, model_dir)
    manager.restore_or_initialize()
    from lite_launcher import optimization
    reader = tf.train.load_checkpoint(model_dir)
    np.testing.assert_array_equal(
        optimization.ema_variables(optimizer)[0].numpy(),
        reader.get_tensor("backbone/layer_with_weights-0/kernel/.OPTIMIZER_SLOT/optimizer/"
                          "average/.ATTRIBUTES/VARIABLE_VALUE"))
    np.testing.assert_allclose(_train_loss(model, ref), ref["next_loss"], rtol=1e-5)


SEGMENTATION = INDEX["segmentation"]["models"]


def segmentation_params(monkeypatch, name, **task):
    """The experiment's config with the model TFM's checkpoint holds; a narrow dilated ResNet
    gets TFM's block widths (index.json) in lite's spec table too."""
    from lite_launcher.vision import resnet_deeplab
    from lite_launcher.vision.configs import backbones as configs  # where the ids are checked

    entry = SEGMENTATION[name]
    for model_id, specs in entry.get("dilated_resnet_specs", {}).items():
        monkeypatch.setitem(resnet_deeplab.DILATED_RESNET_SPECS, int(model_id),
                            [tuple(spec) for spec in specs])
        monkeypatch.setattr(configs, "DILATED_RESNET_MODEL_IDS",
                            configs.DILATED_RESNET_MODEL_IDS + (int(model_id),))
    params = ll.get_exp_config(entry["experiment"])
    params.task.model.override(entry["model"], is_strict=True)
    params.task.override(dict(task, init_checkpoint=os.path.join(DATA, name)), is_strict=True)
    return params


def _part_values(module):
    return [v.numpy() for v in module.weights]


def _decoded(model, features):
    level = str(model.decoder.get_config()["level"])
    return model.decoder(features, training=False)[level].numpy()


@pytest.mark.parametrize("name", sorted(SEGMENTATION))
def test_segmentation_all_restores_tfm_logits(monkeypatch, name):
    """DeepLab v3 / v3+ (ASPP decoder, TFM's SegmentationHead) on a dilated ResNet and on
    MobileNetV2: 'all' reads TFM's backbone, decoder and head items; logits equal TFM's."""
    task = ll.get_task(segmentation_params(monkeypatch, name,
                                           init_checkpoint_modules="all").task)
    model = task.build_model()
    ref = reference(name)
    assert relative_error(model(ref["images"], training=False)["logits"].numpy(),
                          ref["logits"]) > 1e-2
    task.initialize(model)
    assert relative_error(model(ref["images"], training=False)["logits"].numpy(),
                          ref["logits"]) <= 1e-4
    assert relative_error(_decoded(model, ref["features"]), ref["decoder"]) <= 1e-4


def test_segmentation_decoder_and_module_lists_from_a_tfm_checkpoint(monkeypatch):
    """'decoder' alone reads TFM's decoder (its output on TFM's backbone features equals
    TFM's) and leaves the rest; ['backbone', 'decoder'] reads both and leaves the head."""
    name = "seg_dilated_resnet"
    ref = reference(name)
    task = ll.get_task(segmentation_params(monkeypatch, name,
                                           init_checkpoint_modules="decoder").task)
    model = task.build_model()
    untouched = _part_values(model.backbone) + _part_values(model.head)
    assert relative_error(_decoded(model, ref["features"]), ref["decoder"]) > 1e-2
    task.initialize(model)
    assert relative_error(_decoded(model, ref["features"]), ref["decoder"]) <= 1e-4
    for value, after in zip(untouched, _part_values(model.backbone) + _part_values(model.head)):
        np.testing.assert_array_equal(value, after)

    task = ll.get_task(segmentation_params(
        monkeypatch, name, init_checkpoint_modules=["backbone", "decoder"]).task)
    model = task.build_model()
    head = _part_values(model.head)
    task.initialize(model)
    backbone = model.backbone(ref["images"], training=False)
    assert relative_error(_decoded(model, backbone), ref["decoder"]) <= 1e-4
    for value, after in zip(head, _part_values(model.head)):
        np.testing.assert_array_equal(value, after)


def test_lite_export_reads_a_tfm_segmentation_checkpoint(monkeypatch):
    """lite-export's read of its --checkpoint_path (`export.restore_for_serving`) maps a
    TFM-written segmentation checkpoint onto the whole model: TFM's logits."""
    from lite_launcher.commands import export

    name = "seg_dilated_resnet"
    params = segmentation_params(monkeypatch, name)
    task = ll.get_task(params.task)
    model = task.build_model()
    prefix = checkpoints.resolve(os.path.join(DATA, name))
    assert export.restore_for_serving(task, model, params, prefix) is False
    ref = reference(name)
    assert relative_error(model(ref["images"], training=False)["logits"].numpy(),
                          ref["logits"]) <= 1e-4


def test_segmentation_refuses_a_classification_tfm_checkpoint_in_one_line(monkeypatch):
    params = segmentation_params(monkeypatch, "seg_mobilenetv2",
                                 init_checkpoint_modules="decoder")
    params.task.init_checkpoint = os.path.join(DATA, "mobilenetv2")
    message = initialize_error(params)
    assert "(a TFM checkpoint) does not fit the model's decoder weights" in message
    assert "has no 'decoder' object" in message


BIG = os.environ.get("LITE_TFM_BIG_CHECKPOINTS", "")


@pytest.mark.skipif(not BIG, reason="tested only with LITE_TFM_BIG_CHECKPOINTS=DIR, which "
                    "neither the README's test command nor .ci/run sets: the TFM checkpoints "
                    "of the full-size dilated ResNet-50 (94 MB), MobileNet V4 Conv M / L, "
                    "Hybrid L, V3Small and MultiAVG are too large to commit; "
                    "data/make_tfm_checkpoints.py --big DIR writes them")
def test_big_tfm_checkpoints_restore():
    with open(os.path.join(BIG, "index.json")) as f:
        index = json.load(f)
    for name, entry in index["models"].items():
        params = ll.get_exp_config(entry["experiment"])
        params.task.model.override(entry["model"], is_strict=True)
        params.task.override({"init_checkpoint": os.path.join(BIG, name)}, is_strict=True)
        task = ll.get_task(params.task)
        model = task.build_model()
        task.initialize(model)
        ref = np.load(os.path.join(BIG, name, "reference.npz"))
        assert relative_error(model(ref["images"], training=False).numpy(),
                              ref["logits"]) <= 1e-4, name
        np.testing.assert_allclose(features(model, ref["images"]), ref["features"], rtol=1e-4,
                                   atol=1e-4 * np.abs(ref["features"]).mean())
