"""The TFRecord input (TFM's decoder and parser semantics) and the make_tfrecords CLI."""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import lite_launcher as ll
from lite_launcher.vision import classification_input as ci
from lite_launcher.vision import make_tfrecords

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MEAN = np.array([0.485, 0.456, 0.406]) * 255
STD = np.array([0.229, 0.224, 0.225]) * 255


def position_image(height, width):
    """uint8 image whose pixel (y, x) is (y, x, y + x): a crop reveals where it came from."""
    y, x = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
    return np.stack([y, x, (y + x) % 256], axis=-1).astype(np.uint8)


def example(encoded, label):
    feature = {"image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[encoded])),
               "image/class/label": tf.train.Feature(
                   int64_list=tf.train.Int64List(value=np.atleast_1d(label).tolist()))}
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def parse(parser, encoded, label=3, training=True, multilabel=False):
    decoded = ci.make_decoder(is_multilabel=multilabel)(example(encoded, label))
    return parser.parse_fn(training)(decoded)


def test_eval_center_crop_resize_normalize_matches_numpy():
    pixels = position_image(40, 60)
    png = tf.io.encode_png(pixels).numpy()
    parser = ci.Parser(output_size=[20, 20], num_classes=10, decode_jpeg_only=False,
                       center_crop_fraction=0.5)
    image, label = parse(parser, png, training=False)
    # Centre square of side 0.5 * 40 = 20 at offset ((40 - 20) / 2, (60 - 20) / 2) = (10, 20).
    expected = (pixels[10:30, 20:40].astype(np.float64) - MEAN) / STD
    np.testing.assert_allclose(image.numpy(), expected, rtol=1e-5, atol=1e-5)
    assert image.dtype == tf.float32 and int(label) == 3


def test_eval_jpeg_path_decodes_only_the_center_window():
    pixels = position_image(48, 64)
    jpeg = tf.io.encode_jpeg(pixels, quality=100).numpy()
    parser = ci.Parser(output_size=[24, 24], num_classes=10, center_crop_fraction=0.5)
    image, _ = parse(parser, jpeg, training=False)
    full = tf.io.decode_jpeg(jpeg).numpy().astype(np.float64)
    expected = (full[12:36, 20:44] - MEAN) / STD
    np.testing.assert_allclose(image.numpy(), expected, atol=0.05)


def test_train_without_crop_or_flip_is_resize_and_normalize():
    pixels = position_image(16, 16)
    parser = ci.Parser(output_size=[8, 8], num_classes=10, aug_crop=False,
                       aug_rand_hflip=False, decode_jpeg_only=False)
    image, _ = parse(parser, tf.io.encode_png(pixels).numpy())
    resized = tf.image.resize(pixels.astype(np.float32), [8, 8], method="bilinear").numpy()
    np.testing.assert_allclose(image.numpy(), (resized - MEAN) / STD, rtol=1e-5, atol=1e-5)
    nearest = ci.Parser(output_size=[8, 8], num_classes=10, aug_crop=False,
                        aug_rand_hflip=False, decode_jpeg_only=False,
                        tf_resize_method="nearest")
    image, _ = parse(nearest, tf.io.encode_png(pixels).numpy())
    # Half-pixel centres: nearest picks the odd rows and columns.
    np.testing.assert_allclose(image.numpy() * STD + MEAN, pixels[1::2, 1::2], atol=1e-3)


def test_train_flip_gives_the_image_or_its_mirror_and_both_occur():
    pixels = position_image(8, 8)
    parser = ci.Parser(output_size=[8, 8], num_classes=10, aug_crop=False,
                       decode_jpeg_only=False)
    png = tf.io.encode_png(pixels).numpy()
    seen = set()
    for _ in range(40):
        image = np.round(parse(parser, png)[0].numpy() * STD + MEAN)
        if np.array_equal(image, pixels):
            seen.add("same")
        elif np.array_equal(image, pixels[:, ::-1]):
            seen.add("flipped")
        else:
            pytest.fail("neither the image nor its mirror")
    assert seen == {"same", "flipped"}


def _window_of(crop, pixels):
    y0, x0 = int(crop[0, 0, 0]), int(crop[0, 0, 1])
    h, w = crop.shape[:2]
    np.testing.assert_array_equal(crop, pixels[y0:y0 + h, x0:x0 + w])
    return h, w


@pytest.mark.parametrize("jpeg", [False, True])
def test_random_crop_respects_area_and_aspect_ranges(jpeg):
    pixels = position_image(100, 120)
    areas = []
    for _ in range(20):
        if jpeg:
            # Lossless check on the window's position needs exact pixels: compare shapes only.
            crop = ci.decode_and_random_crop_jpeg(
                tf.io.encode_jpeg(pixels, quality=100), (0.3, 0.5)).numpy()
            h, w = crop.shape[:2]
        else:
            h, w = _window_of(ci.random_crop(tf.constant(pixels), (0.3, 0.5)).numpy(), pixels)
        areas.append(h * w / (100 * 120))
        assert 0.75 * 0.95 <= w / h <= 4 / 3 * 1.05
    assert min(areas) >= 0.3 * 0.95 and max(areas) <= 0.5 * 1.05
    assert len(set(areas)) > 1  # random


@pytest.mark.parametrize("jpeg", [False, True])
def test_random_crop_runs_under_deterministic_ops(jpeg):
    # runtime.deterministic_ops turns op determinism on; the crop op then needs a seed (issue
    # 34: every ImageNet experiment with aug_crop failed to build its input). Graph mode, as
    # in the input pipeline, is where TensorFlow checks.
    pixels = position_image(40, 48)
    encoded = tf.io.encode_jpeg(pixels, quality=100)
    crop = tf.function(lambda: ci.decode_and_random_crop_jpeg(encoded, (0.3, 0.5)) if jpeg
                       else ci.random_crop(tf.constant(pixels), (0.3, 0.5)))
    from tensorflow.python.framework import config as tf_config  # pylint: disable=import-outside-toplevel
    tf.config.experimental.enable_op_determinism()
    try:
        h, w = crop().numpy().shape[:2]
    finally:
        # Process-wide: the tests after this one run as before (TensorFlow has no public off).
        tf_config.disable_op_determinism()
    assert 0.3 * 0.9 <= h * w / (40 * 48) <= 0.5 * 1.1


def test_random_crop_falls_back_to_the_center_crop():
    # A "crop" that is the whole image (area range 1..1) becomes the centre crop (0.875 of
    # the short side), as TFM's parser does.
    pixels = position_image(8, 8)
    crop = ci.random_crop(tf.constant(pixels), (1.0, 1.0)).numpy()
    np.testing.assert_array_equal(crop, pixels[0:7, 0:7])


def test_dtype_and_multilabel():
    pixels = position_image(8, 8)
    parser = ci.Parser(output_size=[4, 4], num_classes=5, dtype="bfloat16", is_multilabel=True,
                       decode_jpeg_only=False)
    image, label = parse(parser, tf.io.encode_png(pixels).numpy(), label=[1, 3],
                         multilabel=True)
    assert image.dtype == tf.bfloat16 and image.shape == (4, 4, 3)
    np.testing.assert_array_equal(label.numpy(), [0, 1, 0, 1, 0])
    with pytest.raises(ValueError, match="float64"):
        ci.Parser(output_size=[4, 4], num_classes=5, dtype="float64")


def test_decode_jpeg_only_rejects_png_while_decode_any_reads_it():
    png = tf.io.encode_png(position_image(8, 8)).numpy()
    jpeg_only = ci.Parser(output_size=[4, 4], num_classes=5)
    with pytest.raises(tf.errors.InvalidArgumentError):
        parse(jpeg_only, png, training=False)
    assert parse(ci.Parser(output_size=[4, 4], num_classes=5, decode_jpeg_only=False), png,
                 training=False)[0].shape == (4, 4, 3)


# ----- make_tfrecords ------------------------------------------------------------------------


def _make_folder(root, classes, per_class=3, fmt="jpeg"):
    for c in classes:
        os.makedirs(os.path.join(root, c), exist_ok=True)
        for i in range(per_class):
            pixels = np.full((10 + i, 12, 3), 20 * i, np.uint8)
            data = (tf.io.encode_jpeg(pixels) if fmt == "jpeg" else tf.io.encode_png(pixels))
            with open(os.path.join(root, c, f"{i}.{'jpg' if fmt == 'jpeg' else 'png'}"),
                      "wb") as f:
                f.write(data.numpy())


def _read(paths):
    keys = {"image/encoded": tf.io.FixedLenFeature((), tf.string),
            "image/format": tf.io.FixedLenFeature((), tf.string),
            "image/height": tf.io.FixedLenFeature((), tf.int64),
            "image/class/label": tf.io.FixedLenFeature((), tf.int64),
            "image/class/text": tf.io.FixedLenFeature((), tf.string)}
    return [tf.io.parse_single_example(r, keys) for r in tf.data.TFRecordDataset(paths)]


def test_make_tfrecords_writes_tfm_format_shards(tmp_path):
    image_dir = str(tmp_path / "images")
    _make_folder(image_dir, ["zebra", "ant", "cat"], per_class=3)
    prefix = str(tmp_path / "train")
    assert make_tfrecords.main(["--image_dir", image_dir, "--output_prefix", prefix,
                                "--num_shards", "2"]) == 0
    shards = [f"{prefix}-00000-of-00002", f"{prefix}-00001-of-00002"]
    assert all(os.path.exists(s) for s in shards)
    with open(f"{prefix}-labels.txt") as f:
        assert f.read().split() == ["ant", "cat", "zebra"]  # sorted -> label ids
    records = _read(shards)
    assert len(records) == 9 and len(_read(shards[:1])) == 5
    names = ["ant", "cat", "zebra"]
    for r in records:
        assert names[int(r["image/class/label"])] == r["image/class/text"].numpy().decode()
        image = tf.io.decode_jpeg(r["image/encoded"])
        assert image.shape[0] == int(r["image/height"]) and r["image/format"] == b"jpeg"
    # The shards feed the task's parser directly.
    parser = ci.Parser(output_size=[8, 8], num_classes=3)
    decoded = ci.make_decoder()(next(iter(tf.data.TFRecordDataset(shards))))
    assert parser.parse_fn(True)(decoded)[0].shape == (8, 8, 3)


def test_make_tfrecords_reencodes_png_as_jpeg_unless_keep_format(tmp_path):
    image_dir = str(tmp_path / "images")
    _make_folder(image_dir, ["a", "b"], per_class=1, fmt="png")
    make_tfrecords.main(["--image_dir", image_dir, "--output_prefix", str(tmp_path / "j")])
    make_tfrecords.main(["--image_dir", image_dir, "--output_prefix", str(tmp_path / "p"),
                         "--keep_format"])
    jpeg = _read([str(tmp_path / "j-00000-of-00001")])
    png = _read([str(tmp_path / "p-00000-of-00001")])
    assert {r["image/format"].numpy() for r in jpeg} == {b"jpeg"}
    assert all(r["image/encoded"].numpy()[:3] == b"\xff\xd8\xff" for r in jpeg)
    assert {r["image/format"].numpy() for r in png} == {b"png"}
    assert all(r["image/encoded"].numpy()[:4] == b"\x89PNG" for r in png)


@pytest.mark.parametrize("setup, args, message", [
    ("none", [], "is not a directory"),
    ("empty", [], "has no class sub-folders"),
    ("empty_class", [], "holds no images"),
    ("bad_image", [], "is not a readable image"),
    ("ok", ["--num_shards", "0"], "--num_shards (0) must be >= 1"),
    ("ok", ["--num_shards", "99"], "more than the 2 images"),
])
def test_make_tfrecords_bad_input_is_one_line_and_exit_2(tmp_path, capsys, setup, args, message):
    image_dir = tmp_path / "images"
    if setup != "none":
        image_dir.mkdir()
    if setup == "empty_class":
        (image_dir / "a").mkdir()
    if setup in ("bad_image", "ok"):
        _make_folder(str(image_dir), ["a", "b"], per_class=1)
    if setup == "bad_image":
        (image_dir / "a" / "broken.jpg").write_bytes(b"not an image")
    rc = make_tfrecords.main(["--image_dir", str(image_dir), "--output_prefix",
                              str(tmp_path / "out")] + args)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and message in err, err
    assert not list(tmp_path.glob("out-*-of-*"))


def test_make_tfrecords_module_cli_exit_code(tmp_path):
    # `python -m` runs main() (the writing itself is tested in-process above); the bad path is
    # caught before TensorFlow is imported, so this subprocess is quick.
    bad = subprocess.run([sys.executable, "-m", "lite_launcher.vision.make_tfrecords",
                          "--image_dir", str(tmp_path / "nope"), "--output_prefix",
                          str(tmp_path / "u")], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        f"make_tfrecords: error: --image_dir {str(tmp_path / 'nope')!r} is not a directory."]


def test_task_inputs_read_through_input_reader(tmp_path):
    image_dir = str(tmp_path / "images")
    _make_folder(image_dir, ["a", "b"], per_class=4)
    make_tfrecords.main(["--image_dir", image_dir, "--output_prefix", str(tmp_path / "t"),
                         "--num_shards", "2"])
    config = ll.get_exp_config("image_classification")
    config.override({"task": {
        "model": {"num_classes": 2, "input_size": [16, 16, 3]},
        "train_data": {"input_path": str(tmp_path / "t-*"), "global_batch_size": 3},
        "validation_data": {"input_path": str(tmp_path / "t-*"), "global_batch_size": 3,
                            "drop_remainder": False, "dtype": "float16"}}})
    task = ll.get_task(config.task)
    images, labels = next(iter(task.build_inputs(config.task.train_data)))
    assert images.shape == (3, 16, 16, 3) and images.dtype == tf.float32
    assert labels.dtype == tf.int32 and set(labels.numpy()) <= {0, 1}
    batches = list(task.build_inputs(config.task.validation_data))  # read once, not repeated
    assert [b[0].shape[0] for b in batches] == [3, 3, 2]
    assert batches[0][0].dtype == tf.float16
    assert sorted(np.concatenate([b[1].numpy() for b in batches]).tolist()) == [0] * 4 + [1] * 4


# ----- augmentation wiring (augment.py's interface, faked here) ------------------------------


class _Recorder:
    calls = []

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        _Recorder.calls.append((type(self).__name__, kwargs))


class _FakeRandAugment(_Recorder):
    def distort(self, image):
        assert image.dtype == tf.uint8  # the augmenters get pixels
        return 255 - image


class _FakeRandomErasing(_Recorder):
    def distort(self, image):
        assert image.dtype == tf.float32  # after normalisation
        return tf.zeros_like(image)


class _FakeMixup(_Recorder):
    def __call__(self, images, labels):
        return images, tf.one_hot(labels, self.kwargs["num_classes"])


def _fake_augment_module(monkeypatch):
    import types  # pylint: disable=import-outside-toplevel
    from lite_launcher.vision import ops  # pylint: disable=import-outside-toplevel
    module = types.ModuleType("lite_launcher.vision.ops.augment")
    module.RandAugment = type("RandAugment", (_FakeRandAugment,), {})
    module.AutoAugment = type("AutoAugment", (_FakeRandAugment,), {})
    module.RandomErasing = type("RandomErasing", (_FakeRandomErasing,), {})
    module.MixupAndCutmix = type("MixupAndCutmix", (_FakeMixup,), {})
    module.color_jitter = lambda image, b, c, s, seed=None: (
        _Recorder.calls.append(("color_jitter", (b, c, s))) or image)
    # The parser imports the augmentations from their home when it needs them.
    monkeypatch.setitem(sys.modules, "lite_launcher.vision.ops.augment", module)
    monkeypatch.setattr(ops, "augment", module, raising=False)
    _Recorder.calls = []


def test_parser_calls_the_augmentations_with_the_config_values(monkeypatch):
    _fake_augment_module(monkeypatch)
    config = ll.get_exp_config("image_classification").task.train_data
    config.override({"aug_type": {"type": "randaug", "randaug": {"magnitude": 7,
                                                                 "exclude_ops": ["Cutout"]}},
                     "color_jitter": 0.4})
    parser = ci.Parser(output_size=[4, 4], num_classes=3, aug_crop=False, aug_rand_hflip=False,
                       decode_jpeg_only=False, aug_type=config.aug_type,
                       color_jitter=config.color_jitter)
    pixels = np.full((4, 4, 3), 10, np.uint8)
    image, _ = parse(parser, tf.io.encode_png(pixels).numpy())
    # RandAugment's output (255 - 10) is what gets normalised.
    np.testing.assert_allclose(image.numpy(), (245 - MEAN) / STD * np.ones((4, 4, 1)), rtol=1e-5)
    assert _Recorder.calls[0] == ("RandAugment", dict(
        num_layers=2, magnitude=7.0, cutout_const=40.0, translate_const=10.0,
        magnitude_std=0.0, prob_to_apply=None, exclude_ops=["Cutout"]))
    assert ("color_jitter", (0.4, 0.4, 0.4)) in _Recorder.calls
    erasing = ci.Parser(output_size=[4, 4], num_classes=3, aug_crop=False,
                        decode_jpeg_only=False,
                        random_erasing=ll.get_exp_config("image_classification").task.train_data
                        .override({"random_erasing": {"probability": 0.5}}).random_erasing)
    assert float(tf.reduce_max(tf.abs(parse(erasing, tf.io.encode_png(pixels).numpy())[0]))) == 0
    assert _Recorder.calls[-1][1]["probability"] == 0.5
    # Evaluation never augments.
    assert float(parse(erasing, tf.io.encode_png(pixels).numpy(), training=False)[0][0, 0, 0]) \
        == pytest.approx((10 - MEAN[0]) / STD[0], rel=1e-5)


def test_mixup_and_cutmix_applies_to_training_batches_only(monkeypatch, tmp_path):
    _fake_augment_module(monkeypatch)
    image_dir = str(tmp_path / "images")
    _make_folder(image_dir, ["a", "b"], per_class=2)
    make_tfrecords.main(["--image_dir", image_dir, "--output_prefix", str(tmp_path / "t")])
    config = ll.get_exp_config("image_classification")
    mixup = {"mixup_and_cutmix": {"mixup_alpha": 0.3}, "input_path": str(tmp_path / "t-*"),
             "global_batch_size": 2}
    config.override({"task": {"model": {"num_classes": 2, "input_size": [8, 8, 3]},
                              "train_data": mixup, "validation_data": mixup}})
    task = ll.get_task(config.task)
    _, labels = next(iter(task.build_inputs(config.task.train_data)))
    assert labels.shape == (2, 2)  # one-hot from MixupAndCutmix
    assert _Recorder.calls[-1] == ("MixupAndCutmix", dict(
        mixup_alpha=0.3, cutmix_alpha=1.0, prob=1.0, switch_prob=0.5, label_smoothing=0.1,
        num_classes=2))
    _, labels = next(iter(task.build_inputs(config.task.validation_data)))
    assert labels.shape == (2,)
