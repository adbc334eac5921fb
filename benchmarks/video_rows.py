"""The video row of `step_vs_tfm.py` (issue 53 "Speed"): 3D ResNet-50 as TFM's
`video_classification_kinetics400` builds it (TFM's ResNet3D50 block plan, stem v0 with a
5-frame temporal kernel, Kinetics-400's 400 classes, dropout 0.2, L2 1e-4, SGD with Nesterov
momentum), at a CPU-sized clip of 8 frames x 112 x 112, batch 2, built by lite_launcher and by
TFM from the same experiment and overrides (TFM's field names), on synthetic SequenceExample
clips in TFM's format (context `clip/label/index`, feature list `image/encoded` of JPEG frames).

Each side runs its own input pipeline on the same records with the same settings: training
takes a random 8-frame window (stride 1) and a random area / aspect crop resized to 112 x 112
with a random flip; evaluation resizes the smallest side to `min_image_size` 128 and takes one
centre crop of one clip (num_test_clips = num_test_crops = 1). The source frames are 128 x 128,
16 per clip.
"""

import os

# name -> (experiment, task.model overrides): the experiment's model as it is.
MODELS = {"resnet3d50_kinetics400": ("video_classification_kinetics400", {})}
FRAMES, SIZE = 8, 112
SOURCE_FRAMES, SOURCE_SIZE = 16, 128
BATCH = 2
NUM_CLASSES = 400  # Kinetics-400, the experiment's
NUM_CLIPS = 16


def input_glob_for(model, data_dir):
    """The records `model`'s row reads (written if missing)."""
    del model  # one row, one kind of record
    return write_synthetic_tfrecords(data_dir)


def write_synthetic_tfrecords(data_dir, num_clips=NUM_CLIPS, frames=SOURCE_FRAMES,
                              size=SOURCE_SIZE):
    """Clips of noise JPEG frames with random labels in TFM's SequenceExample format, written
    once per data_dir (seeded), so both sides read the same files. Returns the file glob."""
    import numpy as np
    import tensorflow as tf

    pattern = os.path.join(data_dir, "video-*.tfrecord")
    if tf.io.gfile.glob(pattern):
        return pattern
    os.makedirs(data_dir, exist_ok=True)
    rng = np.random.default_rng(0)
    path = pattern.replace("*", "0")
    with tf.io.TFRecordWriter(path + ".tmp") as writer:
        for _ in range(num_clips):
            example = tf.train.SequenceExample()
            example.context.feature["clip/label/index"].int64_list.value.append(
                int(rng.integers(0, NUM_CLASSES)))
            encoded = example.feature_lists.feature_list["image/encoded"]
            for _ in range(frames):
                pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
                encoded.feature.add().bytes_list.value.append(
                    tf.io.encode_jpeg(pixels, quality=90).numpy())
            writer.write(example.SerializeToString())
    os.replace(path + ".tmp", path)  # a cut-short write never leaves a half file behind
    return pattern


def overrides(model, input_glob, steps, dtype=None, eval_steps=0):
    """The experiment's overrides for `model` (TFM's field names: the same dict for both)."""
    _, model_overrides = MODELS[model]
    # XLA off on both, stated; the experiment's bfloat16 is replaced by `dtype` (float32 on a
    # CPU without bf16 instructions).
    runtime = {"distribution_strategy": "off", "enable_xla": False}
    if dtype is not None:
        runtime["mixed_precision_dtype"] = dtype
    data = {"input_path": input_glob, "global_batch_size": BATCH,
            "feature_shape": [FRAMES, SIZE, SIZE, 3], "temporal_stride": 1,
            "min_image_size": SOURCE_SIZE, "num_classes": NUM_CLASSES}
    task = {"model": dict(model_overrides),
            "train_data": dict(data, shuffle_buffer_size=NUM_CLIPS)}
    if eval_steps:
        task["validation_data"] = dict(data, num_test_clips=1, num_test_crops=1,
                                       drop_remainder=True)
    trainer = {"steps_per_loop": steps, "train_steps": 10 ** 6, "summary_interval": steps,
               "validation_steps": eval_steps or 1}
    return {"runtime": runtime, "task": task, "trainer": trainer}

