"""Video classification end to end on a CPU: synthetic clips (frame folders) -> records
(make_video_tfrecords) -> `lite-train` train_and_eval in this process (the Kinetics-400
experiment's bfloat16 runtime kept) -> `lite-export` (image_tensor at frames,height,width and
serialized SequenceExamples) -> the SavedModel's predictions. The model is a narrow 3D ResNet
(model id TINY_ID added to the spec table, as the TFM checkpoint tests do), the 3D ResNet-RS
block plan.

The learning run (40 steps to a validation accuracy >= 0.9) is `release`; its sibling in the
suite takes the same path for 4 steps (in one run of the suite the learning run took 38
worker-seconds: 29 of CPU, 10 waiting in the test's garbage collection)."""

import glob
import os

import numpy as np
import pytest
import tensorflow as tf
import yaml

from cli import run_lite_train_in_process

NUM_CLASSES = 4
FRAMES, SIZE = 8, 16
TINY_ID = 8
TINY_SPECS = [("bottleneck3d", 4, 1), ("bottleneck3d", 8, 1), ("bottleneck3d", 8, 1),
              ("bottleneck3d", 8, 1)]
# A colour per class; every clip adds its own noise, brightness and a moving square.
COLOURS = np.array([[200, 40, 40], [40, 200, 40], [40, 40, 200], [200, 200, 40]], np.float32)


def _clip(rng, label):
    frames = np.empty((FRAMES, SIZE + 8, SIZE + 8, 3), np.float32)
    colour = COLOURS[label] * rng.uniform(0.85, 1.0)
    start = rng.integers(0, SIZE)
    for t in range(FRAMES):
        frames[t] = colour + rng.normal(0, 10, frames.shape[1:])
        y = (start + 2 * t) % SIZE
        frames[t, y:y + 6, y:y + 6] = 128
    return np.clip(frames, 0, 255).astype(np.uint8)


def _write_clips(root, rng, per_class):
    for label in range(NUM_CLASSES):
        for i in range(per_class):
            folder = os.path.join(root, f"class_{label}", f"clip_{i:02d}")
            os.makedirs(folder)
            for t, frame in enumerate(_clip(rng, label)):
                tf.io.write_file(os.path.join(folder, f"{t:03d}.png"), tf.io.encode_png(frame))


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """(train glob, validation glob) of SequenceExample shards made by the data tool."""
    from lite_launcher.vision.data.make_video_tfrecords import make_video_tfrecords
    root = tmp_path_factory.mktemp("clips")
    rng = np.random.default_rng(0)
    os.makedirs(root / "records")
    for split, per_class, shards in (("train", 16, 2), ("valid", 6, 1)):
        _write_clips(str(root / split), rng, per_class)
        make_video_tfrecords(str(root / split), str(root / "records" / split), shards)
    return str(root / "records" / "train-*-of-*"), str(root / "records" / "valid-*-of-*")


@pytest.fixture()
def tiny_id(monkeypatch):
    from lite_launcher.vision.configs import backbones_3d
    from lite_launcher.vision.modeling.backbones import resnet_3d
    monkeypatch.setitem(resnet_3d.RESNET_SPECS, TINY_ID, TINY_SPECS)
    monkeypatch.setitem(backbones_3d.RESNET_3D_REPEATS, TINY_ID,
                        tuple(s[2] for s in TINY_SPECS))


def _yaml(tmp_path, records, steps):
    train, valid = records
    data = {"num_classes": NUM_CLASSES, "feature_shape": [FRAMES // 2, SIZE, SIZE, 3],
            "temporal_stride": 2, "min_image_size": SIZE + 2}
    config = {
        "runtime": {"distribution_strategy": "off"},
        "task": {
            # ResNet3D-RS's stem v1, SE, stochastic depth and self-gating; a 1-frame stem
            # kernel: TensorFlow's own (non-oneDNN) Conv3D gradient, which the tests get on a
            # CPU without AVX-512, takes seconds for a strided 5x3x3 one.
            "model": {"backbone": {"type": "resnet_3d_rs", "resnet_3d_rs": {
                "model_id": TINY_ID, "stem_conv_temporal_kernel_size": 1,
                "stem_conv_temporal_stride": 1, "stem_pool_temporal_stride": 1}},
                "dropout_rate": 0.0},
            "losses": {"label_smoothing": 0.1},
            "train_data": dict(data, input_path=train, global_batch_size=8,
                               shuffle_buffer_size=64, seed=1),
            "validation_data": dict(data, input_path=valid, global_batch_size=12,
                                    num_test_clips=2, num_test_crops=1)},
        "trainer": {
            "train_steps": steps, "steps_per_loop": steps, "summary_interval": steps,
            "checkpoint_interval": steps, "validation_interval": steps, "validation_steps": -1,
            "optimizer_config": {
                "optimizer": {"type": "adam"}, "warmup": {"type": None},
                # Decayed to zero: at a constant 0.01 the weights still move at the last
                # step, and 1 run in 4 evaluated at 0.75 (one class lost); cosine: 12 of 12
                # runs at 1.0 (seeds 0-3, 10-17).
                "learning_rate": {"type": "cosine", "cosine": {
                    "initial_learning_rate": 0.01, "decay_steps": steps}}}}}
    path = str(tmp_path / "video.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(config, f)
    return path


def _train(records, tmp_path, steps):
    """A train_and_eval run of `steps` steps of the Kinetics-400 experiment on the records
    (bfloat16, as the experiment's runtime): (config file, model_dir, the run)."""
    import keras
    keras.utils.set_random_seed(0)
    config_file = _yaml(tmp_path, records, steps)
    model_dir = str(tmp_path / "model")
    run = run_lite_train_in_process(
        "--experiment", "video_classification_kinetics400", "--config_file", config_file,
        "--mode", "train_and_eval", "--model_dir", model_dir)
    assert run.returncode == 0, (run.stderr + run.logged)[-3000:]
    params = yaml.safe_load(open(os.path.join(model_dir, "params.yaml")))
    assert params["runtime"]["mixed_precision_dtype"] == "bfloat16"
    return config_file, model_dir, run


def _export_and_serve(config_file, model_dir, records, tmp_path):
    """Exports the run's checkpoint with both signatures (image_tensor at frames,height,width;
    serialized SequenceExamples), serves every validation clip through each, checks that they
    agree, and returns (the served probabilities, the clips' labels)."""
    import lite_launcher as ll
    from lite_launcher.core import export_lib
    from lite_launcher.core.base_config import load_config_file
    config = ll.get_exp_config("video_classification_kinetics400")
    config.override(load_config_file(config_file))
    config.validate()
    exported = export_lib.export_saved_model(
        config, model_dir, str(tmp_path / "export"),
        function_keys={"image_tensor": "serving_default", "tf_example": "serve_examples"},
        input_image_size=[FRAMES, SIZE + 8, SIZE + 8])
    served = tf.saved_model.load(exported)
    tensor_fn, example_fn = served.signatures["serving_default"], served.signatures[
        "serve_examples"]
    spec = tensor_fn.structured_input_signature[1]["inputs"]
    assert spec.dtype == tf.uint8 and spec.shape.as_list() == [None, FRAMES, SIZE + 8,
                                                               SIZE + 8, 3]
    serialized = [r.numpy() for r in tf.data.TFRecordDataset(glob.glob(records[1]))]
    clips, labels = [], []
    for record in serialized:
        context, sequence = tf.io.parse_single_sequence_example(
            record, {"clip/label/index": tf.io.FixedLenFeature((), tf.int64)},
            {"image/encoded": tf.io.FixedLenSequenceFeature((), tf.string)})
        clips.append(tf.map_fn(tf.io.decode_png, sequence["image/encoded"],
                               fn_output_signature=tf.uint8))
        labels.append(int(context["clip/label/index"]))
    from_tensors = tensor_fn(inputs=tf.stack(clips))
    from_examples = example_fn(inputs=tf.constant(serialized))
    np.testing.assert_allclose(from_tensors["logits"], from_examples["logits"], atol=1e-5)
    np.testing.assert_allclose(from_tensors["probs"], tf.nn.softmax(from_tensors["logits"]),
                               atol=1e-6)
    return from_tensors["probs"].numpy(), np.array(labels)


SIBLING = ("tests/vision/test_video_train.py::"
           "test_a_tiny_3d_resnet_trains_evaluates_and_exports_in_bfloat16")


def test_a_tiny_3d_resnet_trains_evaluates_and_exports_in_bfloat16(records, tmp_path, tiny_id):
    """The learning run's path, 4 steps: the driver's train_and_eval in bfloat16, its
    checkpoint and validation accuracy, the export served through both signatures."""
    config_file, model_dir, _ = _train(records, tmp_path, steps=4)
    assert tf.train.latest_checkpoint(model_dir).endswith("ckpt-4")
    accuracy = _eval_metric(model_dir, "accuracy", step=4)
    assert 0.0 <= accuracy <= 1.0
    probs, labels = _export_and_serve(config_file, model_dir, records, tmp_path)
    assert probs.shape == (len(labels), NUM_CLASSES) and len(labels) == 6 * NUM_CLASSES


@pytest.mark.release(sibling=SIBLING)
def test_a_tiny_3d_resnet_learns_the_clips_in_bfloat16_and_exports(records, tmp_path, tiny_id):
    """40 steps learn the four classes (validation accuracy >= 0.9 against chance 0.25), and
    the exported SavedModel classifies the clips as well."""
    config_file, model_dir, run = _train(records, tmp_path, steps=40)
    accuracy = _eval_metric(model_dir, "accuracy", step=40)
    assert accuracy >= 0.9, run.logged[-2000:]  # chance: 0.25
    probs, labels = _export_and_serve(config_file, model_dir, records, tmp_path)
    assert np.mean(np.argmax(probs, -1) == labels) >= 0.9


def _eval_metric(model_dir, name, step):
    """The validation summary `name` at `step` (the run's only evaluation)."""
    from test_modes import read_scalars
    scalars = read_scalars(os.path.join(model_dir, "validation"))[name]
    assert list(scalars) == [step], scalars
    return scalars[step]
