"""The video input (vision/dataloaders/video_input.py, vision/ops/preprocess_ops_3d.py) against
TFM 2.20's on the same SequenceExample records: tests/vision/data/
make_tfm_video_input_reference.py (run in TFM's venv) wrote the records and TFM's outputs."""

import numpy as np
import pytest
import tensorflow as tf

from lite_launcher.common.errors import input_record_error
from lite_launcher.vision.dataloaders import video_input
from lite_launcher.vision.ops import preprocess_ops_3d
from video_clips import CONFIGS, RECORDS, REFERENCE, config, records

def tfm_frames(key, cfg):
    """TFM's float frames from the stored pixels (see the generator's `to_pixels`)."""
    pixels = REFERENCE[key].astype(np.float32)
    return pixels * (2.0 / 255.0) - 1.0 if cfg.zero_centering_image else pixels / 255.0


def decoder_for(cfg):
    return video_input.make_decoder(cfg, cfg.output_audio, cfg.audio_feature)


@pytest.mark.parametrize("name", sorted(CONFIGS["eval"]))
def test_eval_clips_equal_tfm(name):
    cfg = config(CONFIGS["eval"][name], is_training=False)
    decode = decoder_for(cfg)
    parse = video_input.Parser(cfg).parse_fn(False)
    for index, record in enumerate(records()):
        features, label = parse(decode(tf.constant(record)))
        expected = tfm_frames(f"eval/{name}/{index}/pixels", cfg)
        assert features["image"].shape == expected.shape
        np.testing.assert_allclose(features["image"].numpy(), expected, rtol=0, atol=1e-6)
        tfm_label = REFERENCE[f"eval/{name}/{index}/label"]
        assert label.dtype.as_numpy_dtype == tfm_label.dtype
        np.testing.assert_array_equal(label.numpy(), tfm_label)
        if cfg.output_audio:
            np.testing.assert_array_equal(features["audio"].numpy(),
                                          REFERENCE[f"eval/{name}/{index}/audio"])


@pytest.mark.parametrize("name", ["centre_audio", "three_by_three"])
def test_batched_views_equal_tfm_post_batch(name, tmp_path):
    """The dataset (InputReader) batches the clips and moves the views into the batch."""
    cfg = config(CONFIGS["eval"][name], is_training=False, input_path=RECORDS,
                 global_batch_size=3)
    features, label = next(iter(video_input.build_dataset(cfg)))
    expected = tfm_frames(f"eval/{name}/batch/pixels", cfg)
    views = cfg.num_test_clips * cfg.num_test_crops
    assert features["image"].shape == (3 * views,) + tuple(cfg.feature_shape)
    np.testing.assert_allclose(features["image"].numpy(), expected, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(label.numpy(), REFERENCE[f"eval/{name}/batch/label"])


def _train_draws(cfg, record, count):
    decode = decoder_for(cfg)
    parse = tf.function(video_input.Parser(cfg).parse_fn(True))
    decoded = decode(tf.constant(record))
    return [parse(decoded) for _ in range(count)]


def _match(pixels, candidates):
    return [i for i, c in enumerate(candidates) if np.array_equal(c, pixels)]


def test_train_clips_are_tfm_outputs():
    """With the crop pinned to the whole frame, every training clip is one of TFM's outputs
    for some start frame and flip, and the draws reach many of them (both flips)."""
    tf.random.set_seed(11)  # draws independent of the tests run before
    cfg = config(CONFIGS["train"], is_training=True)
    for index, record in enumerate(records()):
        candidates = REFERENCE[f"train/{index}/candidates"]
        seen = set()
        for features, label in _train_draws(cfg, record, 30):
            pixels = np.round(features["image"].numpy() * 255).astype(np.uint8)
            match = _match(pixels, candidates)
            assert match, f"clip {index}: a training clip that TFM's parser cannot give"
            seen.add(match[0])
        np.testing.assert_array_equal(label.numpy(), REFERENCE[f"train/{index}/label"])
        # Candidates alternate (start, no flip), (start, flip).
        assert {i % 2 for i in seen} == {0, 1} and len(seen) >= len(candidates) // 2


def test_train_rotation_turns_tfm_outputs():
    """aug_random_rotation: each clip is a quarter-turn of one of TFM's clips, all four turns
    drawn (square frames keep their shape)."""
    tf.random.set_seed(12)  # draws independent of the tests run before
    cfg = config(CONFIGS["train"], is_training=True, aug_random_rotation=True)
    candidates = REFERENCE["train/0/candidates"]
    turns = set()
    for features, _ in _train_draws(cfg, records()[0], 24):
        pixels = np.round(features["image"].numpy() * 255).astype(np.uint8)
        for k in range(4):
            # rot90 by k counter-clockwise; undo it.
            if _match(np.rot90(pixels, -k, axes=(1, 2)), candidates):
                turns.add(k)
                break
        else:
            pytest.fail("a rotated clip that is no quarter-turn of a TFM clip")
    assert turns == {0, 1, 2, 3}


def test_random_strides_are_tfm_strides():
    """stride 2, random_stride_range 1: TFM draws from {1, 2} (its upper bound is excluded)."""
    tf.random.set_seed(13)  # draws independent of the tests run before
    cfg = config(CONFIGS["stride_train"], is_training=True)
    frames = [tf.io.encode_png(tf.fill((8, 8, 3), tf.constant(10 * i, tf.uint8)))
              for i in range(24)]
    decoded = {"image/encoded": tf.stack(frames),
               "clip/label/index": tf.constant([0], tf.int64)}
    parse = tf.function(video_input.Parser(cfg).parse_fn(True))
    strides = set()
    for _ in range(40):
        first = np.round(parse(decoded)[0]["image"].numpy()[:, 0, 0, 0] * 255 / 10)
        strides.add(int(first[1] - first[0]))
    assert strides == set(REFERENCE["train/strides"].tolist())


@pytest.mark.parametrize("name", ["single_one_hot", "multi_one_hot", "one_class",
                                  "sparse_int64", "scalar_one_hot"])
def test_process_label_equals_tfm(name):
    cases = {"single_one_hot": ([3], dict(one_hot_label=True, num_classes=5)),
             "multi_one_hot": ([0, 4, 4], dict(one_hot_label=True, num_classes=5)),
             "one_class": ([0], dict(one_hot_label=True, num_classes=1)),
             "sparse_int64": ([2, 1], dict(one_hot_label=False, num_classes=5,
                                           label_dtype=tf.int64)),
             "scalar_one_hot": (4, dict(one_hot_label=True, num_classes=6))}
    label, kwargs = cases[name]
    result = video_input.process_label(tf.constant(label, tf.int64), **kwargs).numpy()
    expected = REFERENCE[f"label/{name}"]
    assert result.dtype == expected.dtype
    np.testing.assert_array_equal(result, expected)


# ------------------------------------------------------------------------------------------
# Bad input: one line naming the clip (errors.BAD_RECORD_MARKER), or TFM's behaviour.
# ------------------------------------------------------------------------------------------

def _record(frames, labels=(1,), path=b"bad/clip.mp4", key="image/encoded"):
    example = tf.train.SequenceExample()
    example.context.feature["clip/label/index"].int64_list.value[:] = list(labels)
    example.context.feature["clip/data_path"].bytes_list.value[:] = [path]
    frame_list = example.feature_lists.feature_list[key]
    for frame in frames:
        frame_list.feature.add().bytes_list.value[:] = [frame]
    return example.SerializeToString()


def _png(value, size=(8, 8)):
    return tf.io.encode_png(tf.fill(size + (3,), tf.constant(value, tf.uint8))).numpy()


def _parse_error(record, is_training=False, **overrides):
    """The one line the driver would print for `record` (via errors.input_record_error)."""
    cfg = config(dict(feature_shape=(2, 8, 8, 3), min_image_size=8, num_classes=3),
                 is_training=is_training, **overrides)
    dataset = tf.data.Dataset.from_tensors(record).map(video_input.make_decoder(cfg)).map(
        video_input.Parser(cfg).parse_fn(is_training))
    with pytest.raises(tf.errors.InvalidArgumentError) as caught:
        next(iter(dataset))
    return caught.value.message, input_record_error(caught.value.message)


@pytest.mark.parametrize("is_training", [False, True])
def test_record_without_frames_is_one_line(is_training):
    record = _record([_png(0)], key="frames/elsewhere")
    _, error = _parse_error(record, is_training)
    assert error is not None, "TensorFlow's own 'Feature list ... is required' error"
    text = str(error)
    assert "\n" not in text and "bad/clip.mp4" in text and "image/encoded" in text
    assert "make_video_tfrecords" in text


def test_label_out_of_range_is_one_line():
    _, error = _parse_error(_record([_png(0), _png(1)], labels=(1, 7)))
    assert error is not None, "TFM gives an all-zero one-hot label silently"
    text = str(error)
    assert "bad/clip.mp4" in text and "7" in text and "num_classes 3" in text


def test_negative_label_is_one_line_without_one_hot():
    _, error = _parse_error(_record([_png(0)], labels=(-1,)), one_hot=False)
    assert error is not None and "-1" in str(error)


def test_frame_that_is_no_image_is_one_line():
    _, error = _parse_error(_record([_png(0), b"not an image at all", _png(2)]))
    assert error is not None, "TensorFlow's own decode error"
    text = str(error)
    assert "bad/clip.mp4" in text and "frames 1 " in text and "re-encode" in text


def test_truncated_jpeg_frame_fails_as_tfm():
    """A frame cut short past its header: TensorFlow's decode error, as TFM's (no hang)."""
    jpeg = tf.io.encode_jpeg(tf.fill((8, 8, 3), tf.constant(9, tf.uint8))).numpy()
    message, error = _parse_error(_record([jpeg, jpeg[:len(jpeg) // 2]]))
    assert error is None and "jpeg" in message.lower()


def test_short_clip_wraps_around_as_tfm():
    """3 frames, a window of 4 every 2 frames: TFM repeats the clip, frames 0, 2, 1, 0 (the
    centred window starts at max(0, (3 - 8) // 2) = 0); in training the start is uniform in
    [0, 3) and the window wraps the same way."""
    tf.random.set_seed(14)  # draws independent of the tests run before
    frames = [_png(40 * i) for i in range(3)]
    cfg = config(dict(feature_shape=(4, 8, 8, 3), temporal_stride=2, min_image_size=8,
                      num_classes=3, aug_min_area_ratio=1.0), is_training=False)
    decoded = video_input.make_decoder(cfg)(tf.constant(_record(frames)))
    image = video_input.Parser(cfg).parse_fn(False)(decoded)[0]["image"].numpy()
    np.testing.assert_array_equal(np.round(image[:, 0, 0, 0] * 255 / 40), [0, 2, 1, 0])
    cfg.is_training = True
    parse = tf.function(video_input.Parser(cfg).parse_fn(True))
    windows = set()
    for _ in range(30):
        first = np.round(parse(decoded)[0]["image"].numpy()[:, 0, 0, 0] * 255 / 40)
        windows.add(tuple(int(i) for i in first))
    assert windows == {(0, 2, 1, 0), (1, 0, 2, 1), (2, 1, 0, 2)}


def test_bad_parameters_are_refused_before_tensorflow_runs():
    with pytest.raises(ValueError, match="num_test_crops"):
        video_input.Parser(config({}, num_test_crops=2, num_classes=3))
    with pytest.raises(ValueError, match="input_image_format 'gif'"):
        video_input.Parser(config({}, input_image_format="gif", num_classes=3))
    with pytest.raises(ValueError, match="num_classes"):
        video_input.Parser(config({}))
    with pytest.raises(ValueError, match="random_stride_range"):
        video_input.Parser(config({}, random_stride_range=-1, num_classes=3))


# ------------------------------------------------------------------------------------------
# The clip ops on frame indices, and the TFDS path.
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", CONFIGS["linspace"], ids=str)
def test_sample_linspace_sequence_equals_tfm(case):
    length, windows, steps, stride = case
    out = preprocess_ops_3d.sample_linspace_sequence(tf.range(length), windows, steps, stride)
    np.testing.assert_array_equal(
        out.numpy(), REFERENCE[f"ops/linspace/{length}_{windows}_{steps}_{stride}"])


@pytest.mark.parametrize("case", CONFIGS["centre"], ids=str)
def test_centred_sample_sequence_equals_tfm(case):
    length, steps, stride = case
    out = preprocess_ops_3d.sample_sequence(tf.range(length), steps, False, stride)
    np.testing.assert_array_equal(out.numpy(), REFERENCE[f"ops/centre/{length}_{steps}_{stride}"])


@pytest.mark.parametrize("case", CONFIGS["segment"], ids=str)
def test_sample_segment_sequence_equals_tfm(case):
    """Evaluation: the middle of each segment; training: each position takes the values TFM's
    draws took (one frame uniform in its segment)."""
    tf.random.set_seed(15)  # draws independent of the tests run before
    length, frames = case
    out = preprocess_ops_3d.sample_segment_sequence(tf.range(length), frames, False)
    np.testing.assert_array_equal(out.numpy(), REFERENCE[f"ops/segment_eval/{length}_{frames}"])
    sample = tf.function(lambda: preprocess_ops_3d.sample_segment_sequence(
        tf.range(length), frames, True))
    draws = np.stack([sample().numpy() for _ in range(60)])
    expected = REFERENCE[f"ops/segment_train/{length}_{frames}"]
    for position in range(frames):
        tfm_values = set(expected[position].tolist()) - {-1}
        assert set(draws[:, position].tolist()) == tfm_values


def test_decode_jpeg_equals_tfm():
    encoded = video_input.Decoder().decode(tf.constant(records()[0]))["image/encoded"]
    np.testing.assert_array_equal(preprocess_ops_3d.decode_jpeg(encoded[:2], 3).numpy(),
                                  REFERENCE["ops/decode_jpeg"])


def test_tfds_videos_equal_tfm():
    """VideoTfdsDecoder: decoded uint8 frames and a scalar label, parsed as TFM's."""
    fields = {k: v for k, v in CONFIGS["eval"]["centre_audio"].items() if "audio" not in k}
    cfg = config(fields, is_training=False, tfds_name="ucf101")
    decode = video_input.make_decoder(cfg)
    parse = video_input.Parser(cfg).parse_fn(False)
    labels = [2, 0, 1]  # each clip's first label
    for index, record in enumerate(records()):
        encoded = video_input.Decoder().decode(tf.constant(record))["image/encoded"]
        video = preprocess_ops_3d.decode_image(encoded, 3)
        features, label = parse(decode({"video": video, "label": tf.constant(labels[index],
                                                                             tf.int64)}))
        np.testing.assert_allclose(features["image"].numpy(),
                                   tfm_frames(f"tfds/{index}/pixels", cfg), rtol=0, atol=1e-6)
        np.testing.assert_array_equal(label.numpy(), REFERENCE[f"tfds/{index}/label"])
    with pytest.raises(ValueError, match="no label feature"):
        decode({"video": video})


def test_training_clips_build_under_deterministic_ops():
    """runtime.deterministic_ops turns op determinism on: the crop-box op then needs a seed
    (TFM's has none and stops there); every training augmentation still runs."""
    from tensorflow.python.framework import config as tf_config  # pylint: disable=import-outside-toplevel

    cfg = config(CONFIGS["train"], is_training=True, input_path=RECORDS,
                 aug_min_area_ratio=0.3, aug_random_rotation=True, random_stride_range=1)
    tf.random.set_seed(1)  # the driver seeds TensorFlow with deterministic_ops
    tf.config.experimental.enable_op_determinism()
    try:
        features, labels = next(iter(video_input.build_dataset(cfg)))
    finally:
        # Process-wide: the tests after this one run as before (TensorFlow has no public off).
        tf_config.disable_op_determinism()
    assert features["image"].shape == (2, 4, 16, 16, 3) and labels.shape == (2, 5)
