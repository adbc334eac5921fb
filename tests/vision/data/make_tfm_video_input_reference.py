"""Writes tfm_video_input_reference.tfrecord and tfm_video_input_reference.npz: three small
SequenceExample clips and what TFM 2.20's video input (official.vision.dataloaders.video_input:
Decoder, Parser, PostBatchProcessor, process_label) makes of them.

Run once with TFM 2.20 (tf-models-official 2.20, tensorflow 2.20, tf_keras):

    /work/tfm_venv/bin/python tests/vision/data/make_tfm_video_input_reference.py

The clips (smooth NumPy RandomState(3) frames, so that JPEG keeps them recognisable):
  0: 12 frames 40x48 JPEG, label 2, 10 audio steps;
  1: 12 frames 40x48 PNG, labels 0 and 3 (multi-label), 12 audio steps;
  2: 5 frames 48x40 (tall) JPEG, label 1, 4 audio steps: shorter than every window below.
Audio: feature list `audio/features`, 8 floats a step.

Keys:
  `eval/<config>/<clip>/pixels`, `.../label` (and `.../audio`): the evaluation parser's outputs
    for configs EVAL (below), the frames as the uint8 pixels they are made from (`to_pixels`:
    TFM's float frames are pixels / 255, or pixels * 2 / 255 - 1 with zero_centering_image);
  `eval/<config>/batch/pixels`, `.../label`: the three clips batched, after PostBatchProcessor;
  `train/<clip>/candidates`: for config TRAIN (crop pinned to the whole frame: area 1.0),
    every output TFM's training parser can give: one per (start frame, flip), made with TFM's
    own ops, each checked here to be what TFM's Parser gives for that start and flip; stored
    as uint8 (outputs x 255, exact: TFM divides uint8 pixels by 255);
  `train/strides`: the strides TFM's training parser draws (stride 2, random_stride_range 1),
    read off 64 draws on a clip whose frames carry their index;
  `label/<case>`: process_label on a few label vectors;
  `ops/...`: TFM's samplers on `tf.range(L)` (frame indices): `linspace/L_k_n_s`,
    `centre/L_n_s`, `segment_eval/L_n`, `segment_train/L_n` (the values each position took in
    200 draws, padded with -1); `ops/decode_jpeg`: clip 0's first two frames decoded;
  `tfds/<clip>/pixels`, `tfds/<clip>/label`: VideoTfdsDecoder + the evaluation parser
    (config `centre_audio` without audio) on the clips' decoded frames and first label.
"""

import io
import json
import os

import numpy as np
import tensorflow as tf

from official.vision.configs import video_classification as exp_cfg
from official.vision.dataloaders import video_input
from official.vision.ops import preprocess_ops_3d

HERE = os.path.dirname(os.path.abspath(__file__))
RECORDS = os.path.join(HERE, "tfm_video_input_reference.tfrecord")
OUTPUT = os.path.join(HERE, "tfm_video_input_reference.npz")
AUDIO_KEY = "audio/features"
# TFM's own index rule for a window at a given start (the parser draws the start).
window_indices = getattr(preprocess_ops_3d, "_sample_or_pad_sequence_indices")

CLIPS = [
    dict(frames=12, height=40, width=48, format="jpeg", labels=[2], audio_steps=10),
    dict(frames=12, height=40, width=48, format="png", labels=[0, 3], audio_steps=12),
    dict(frames=5, height=48, width=40, format="jpeg", labels=[1], audio_steps=4),
]

# DataConfig fields of each evaluation config (the rest TFM's defaults).
EVAL = {
    "centre_audio": dict(feature_shape=(4, 32, 32, 3), temporal_stride=2, min_image_size=36,
                         num_classes=5, output_audio=True, audio_feature=AUDIO_KEY,
                         audio_feature_shape=(6, 8)),
    "three_by_three": dict(feature_shape=(4, 24, 32, 3), temporal_stride=1, num_test_clips=3,
                           num_test_crops=3, min_image_size=32, zero_centering_image=True,
                           num_classes=5),
    "no_resize_sparse": dict(feature_shape=(3, 40, 40, 3), temporal_stride=3,
                             num_test_clips=2, min_image_size=40, one_hot=False,
                             num_classes=5, label_dtype="int64"),
}
TRAIN = dict(feature_shape=(4, 16, 16, 3), temporal_stride=2, aug_min_area_ratio=1.0,
             aug_max_area_ratio=1.0, num_classes=5)
STRIDE_TRAIN = dict(feature_shape=(3, 8, 8, 3), temporal_stride=2, random_stride_range=1,
                    aug_min_area_ratio=1.0, aug_max_area_ratio=1.0, num_classes=5)
LABEL_CASES = {
    "single_one_hot": ([3], dict(one_hot_label=True, num_classes=5)),
    "multi_one_hot": ([0, 4, 4], dict(one_hot_label=True, num_classes=5)),
    "one_class": ([0], dict(one_hot_label=True, num_classes=1)),
    "sparse_int64": ([2, 1], dict(one_hot_label=False, num_classes=5,
                                  label_dtype=tf.int64)),
    "scalar_one_hot": (4, dict(one_hot_label=True, num_classes=6)),
}


def smooth_frames(rng, count, height, width):
    """uint8 [count, height, width, 3]: a coarse random grid upsampled, drifting in time."""
    coarse = rng.uniform(0, 255, size=(count + 3, 6, 6, 3)).astype(np.float32)
    frames = []
    for t in range(count):
        mix = coarse[t] * 0.6 + coarse[t + 3] * 0.4
        up = tf.image.resize(mix[None], (height, width), method="bicubic")[0].numpy()
        frames.append(np.clip(up, 0, 255).astype(np.uint8))
    return np.stack(frames)


def encode(frame, image_format):
    if image_format == "png":
        return tf.io.encode_png(frame).numpy()
    return tf.io.encode_jpeg(frame, quality=90).numpy()


def make_records():
    rng = np.random.RandomState(3)
    records = []
    for index, clip in enumerate(CLIPS):
        frames = smooth_frames(rng, clip["frames"], clip["height"], clip["width"])
        example = tf.train.SequenceExample()
        example.context.feature["clip/label/index"].int64_list.value[:] = clip["labels"]
        example.context.feature["clip/data_path"].bytes_list.value[:] = [
            f"clip_{index}".encode()]
        frame_list = example.feature_lists.feature_list["image/encoded"]
        for frame in frames:
            frame_list.feature.add().bytes_list.value[:] = [encode(frame, clip["format"])]
        audio_list = example.feature_lists.feature_list[AUDIO_KEY]
        for step in range(clip["audio_steps"]):
            audio_list.feature.add().float_list.value[:] = (
                np.arange(8, dtype=np.float32) + 10 * step + 100 * index).tolist()
        records.append(example.SerializeToString())
    with tf.io.TFRecordWriter(RECORDS) as writer:
        for record in records:
            writer.write(record)
    return records


def decoder_for(config):
    decoder = video_input.Decoder()
    if config.output_audio:
        decoder.add_feature(config.audio_feature, tf.io.VarLenFeature(dtype=tf.float32))
    return decoder


def to_pixels(image, config):
    """TFM's float frames as the uint8 pixels they were made from (checked exact): x * 255, or
    (x + 1) * 255 / 2 with zero_centering_image. Stored so, the file stays small."""
    image = image.numpy()
    scaled = (image + 1.0) * 127.5 if config.zero_centering_image else image * 255.0
    pixels = np.round(scaled).astype(np.uint8)
    back = pixels * (2.0 / 255.0) - 1.0 if config.zero_centering_image else pixels / 255.0
    np.testing.assert_allclose(back.astype(np.float32), image, rtol=0, atol=1e-6)
    return pixels


def eval_outputs(records, out):
    for name, fields in EVAL.items():
        config = exp_cfg.DataConfig(is_training=False, **fields)
        decoder = decoder_for(config)
        parser = video_input.Parser(config)
        parse = parser.parse_fn(False)
        for index, record in enumerate(records):
            features, label = parse(decoder.decode(tf.constant(record)))
            out[f"eval/{name}/{index}/pixels"] = to_pixels(features["image"], config)
            if "audio" in features:
                out[f"eval/{name}/{index}/audio"] = features["audio"].numpy()
            out[f"eval/{name}/{index}/label"] = label.numpy()
        if config.one_hot:
            dataset = tf.data.Dataset.from_tensor_slices(records).map(decoder.decode).map(
                parse).batch(3).map(video_input.PostBatchProcessor(config))
            features, label = next(iter(dataset))
            out[f"eval/{name}/batch/pixels"] = to_pixels(features["image"], config)
            out[f"eval/{name}/batch/label"] = label.numpy()


def train_candidates(records, out):
    """Every (start, flip) output of TFM's training parser, from TFM's ops; then TFM's Parser's
    own draws are checked to be among them."""
    config = exp_cfg.DataConfig(is_training=True, **TRAIN)
    num_frames, height, width, channels = config.feature_shape
    stride = config.temporal_stride
    decoder = video_input.Decoder()
    parse = video_input.Parser(config).parse_fn(True)
    for index, record in enumerate(records):
        encoded = decoder.decode(tf.constant(record))["image/encoded"]
        length = int(encoded.shape[0])
        span = (num_frames - 1) * stride
        max_offset = length - span if length > span else length
        candidates = []
        for offset in range(max_offset):
            indices = window_indices(encoded, num_frames, stride, tf.constant(offset))
            frames = preprocess_ops_3d.decode_image(tf.gather(encoded, indices), channels)
            frames = preprocess_ops_3d.random_crop_resize(
                frames, height, width, num_frames, channels,
                (config.aug_min_aspect_ratio, config.aug_max_aspect_ratio),
                (config.aug_min_area_ratio, config.aug_max_area_ratio))
            for flip in (False, True):
                flipped = tf.image.flip_left_right(frames) if flip else frames
                pixels = preprocess_ops_3d.normalize_image(flipped, False).numpy()
                candidates.append(np.round(pixels * 255).astype(np.uint8))
        candidates = np.stack(candidates)
        seen = set()
        for _ in range(24):
            features, label = parse(decoder.decode(tf.constant(record)))
            pixels = np.round(features["image"].numpy() * 255).astype(np.uint8)
            match = [i for i, c in enumerate(candidates) if np.array_equal(c, pixels)]
            assert match, f"TFM's parser gave an output outside the candidates (clip {index})"
            seen.add(match[0])
        out[f"train/{index}/candidates"] = candidates
        out[f"train/{index}/label"] = label.numpy()
        print(f"clip {index}: {len(candidates)} candidates, {len(seen)} seen in 24 draws")


def train_strides(out):
    """Strides of TFM's random_stride_range, read off frames that carry their index."""
    config = exp_cfg.DataConfig(is_training=True, **STRIDE_TRAIN)
    frames = np.stack([np.full((8, 8, 3), 10 * i, np.uint8) for i in range(24)])
    example = tf.train.SequenceExample()
    example.context.feature["clip/label/index"].int64_list.value[:] = [0]
    frame_list = example.feature_lists.feature_list["image/encoded"]
    for frame in frames:
        frame_list.feature.add().bytes_list.value[:] = [encode(frame, "png")]
    decoded = video_input.Decoder().decode(tf.constant(example.SerializeToString()))
    parse = video_input.Parser(config).parse_fn(True)
    strides = set()
    for _ in range(64):
        image = parse(decoded)[0]["image"].numpy()
        index = np.round(image[:, 0, 0, 0] * 255 / 10).astype(int)
        strides.add(int(index[1] - index[0]))
    out["train/strides"] = np.array(sorted(strides))


def labels(out):
    for name, (label, kwargs) in LABEL_CASES.items():
        out[f"label/{name}"] = video_input.process_label(
            tf.constant(label, tf.int64), **kwargs).numpy()


LINSPACE = [(12, 3, 4, 1), (12, 2, 3, 3), (5, 3, 4, 2), (30, 4, 8, 2), (7, 5, 2, 1)]
CENTRE = [(12, 4, 2), (5, 4, 2), (13, 3, 3), (3, 4, 1)]
SEGMENT = [(12, 4), (30, 8), (5, 4), (3, 4)]


def samplers(records, out):
    for length, windows, steps, stride in LINSPACE:
        out[f"ops/linspace/{length}_{windows}_{steps}_{stride}"] = (
            preprocess_ops_3d.sample_linspace_sequence(tf.range(length), windows, steps,
                                                       stride).numpy())
    for length, steps, stride in CENTRE:
        out[f"ops/centre/{length}_{steps}_{stride}"] = preprocess_ops_3d.sample_sequence(
            tf.range(length), steps, False, stride).numpy()
    for length, frames in SEGMENT:
        out[f"ops/segment_eval/{length}_{frames}"] = (
            preprocess_ops_3d.sample_segment_sequence(tf.range(length), frames, False).numpy())
        draws = np.stack([preprocess_ops_3d.sample_segment_sequence(
            tf.range(length), frames, True).numpy() for _ in range(200)])
        values = [sorted(set(draws[:, i].tolist())) for i in range(frames)]
        width = max(len(v) for v in values)
        out[f"ops/segment_train/{length}_{frames}"] = np.array(
            [v + [-1] * (width - len(v)) for v in values])
    encoded = video_input.Decoder().decode(tf.constant(records[0]))["image/encoded"]
    out["ops/decode_jpeg"] = preprocess_ops_3d.decode_jpeg(encoded[:2], 3).numpy()


def tfds_outputs(records, out):
    fields = {k: v for k, v in EVAL["centre_audio"].items() if "audio" not in k}
    config = exp_cfg.DataConfig(is_training=False, **fields)
    decoder = video_input.VideoTfdsDecoder()
    parse = video_input.Parser(config).parse_fn(False)
    for index, record in enumerate(records):
        encoded = video_input.Decoder().decode(tf.constant(record))["image/encoded"]
        video = preprocess_ops_3d.decode_image(encoded, 3)
        decoded = decoder.decode({"video": video,
                                  "label": tf.constant(CLIPS[index]["labels"][0], tf.int64)})
        features, label = parse(decoded)
        out[f"tfds/{index}/pixels"] = to_pixels(features["image"], config)
        out[f"tfds/{index}/label"] = label.numpy()


def main():
    records = make_records()
    out = {}
    samplers(records, out)
    tfds_outputs(records, out)
    eval_outputs(records, out)
    train_candidates(records, out)
    train_strides(out)
    labels(out)
    out["configs"] = np.array(json.dumps({"eval": EVAL, "train": TRAIN,
                                          "stride_train": STRIDE_TRAIN, "linspace": LINSPACE,
                                          "centre": CENTRE, "segment": SEGMENT}))
    np.savez_compressed(OUTPUT, **out)
    print(f"wrote {RECORDS} ({os.path.getsize(RECORDS)} bytes) and {OUTPUT} "
          f"({os.path.getsize(OUTPUT)} bytes), {len(out)} arrays; strides "
          f"{out['train/strides'].tolist()}")


if __name__ == "__main__":
    main()
