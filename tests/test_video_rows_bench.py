"""The video row of the in-process lite-vs-TFM harness (benchmarks/step_vs_tfm.py,
benchmarks/video_rows.py, issue 53): registered with the harness, lite's config built from the
row's overrides (TFM's field names) with the stated sizes, dtype and model, and its synthetic
clips in TFM's SequenceExample format read by lite's video decoder. No timing is asserted (the
measurement needs TFM's venv), as for the other rows."""

import os
import sys

import numpy as np

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
sys.path.insert(0, BENCH)

import step_vs_tfm  # noqa: E402
import video_rows  # noqa: E402

MODEL = "resnet3d50_kinetics400"


def test_the_video_row_is_one_of_the_harness_rows_with_its_own_records():
    assert MODEL in step_vs_tfm.MODELS and step_vs_tfm.ROW_MODULES[MODEL] is video_rows
    assert step_vs_tfm.workload_name(MODEL) == (
        "video_classification_kinetics400_resnet3d50_kinetics400")
    assert video_rows.input_glob_for(MODEL, "/d").endswith("video-*.tfrecord")


def test_lites_config_is_tfms_kinetics400_experiment_at_the_rows_clip_size_in_float32():
    import lite_launcher as ll
    from lite_launcher.core import train_utils

    train_utils.load_builtin_registrations("video_classification_kinetics400")
    params = ll.get_exp_config("video_classification_kinetics400")
    assert params.runtime.mixed_precision_dtype == "bfloat16"  # the experiment's, replaced
    params.override(video_rows.overrides(MODEL, "/d/video-*.tfrecord", 4, "float32", 4))
    params.validate()
    assert (params.runtime.mixed_precision_dtype, params.runtime.enable_xla) == (
        "float32", False)
    for data in (params.task.train_data, params.task.validation_data):
        assert (list(data.feature_shape), data.global_batch_size, data.num_classes,
                data.temporal_stride, data.min_image_size) == ([8, 112, 112, 3], 2, 400, 1, 128)
    assert (params.task.validation_data.num_test_clips,
            params.task.validation_data.num_test_crops) == (1, 1)
    backbone = params.task.model.backbone
    # TFM's ResNet3D50: stem v0 over 5 frames, 3-4-6-3 blocks with 3/1 temporal kernels.
    assert (backbone.type, backbone.resnet_3d.model_id, backbone.resnet_3d.stem_type) == (
        "resnet_3d", 50, "v0")
    assert [list(b.temporal_kernel_sizes) for b in backbone.resnet_3d.block_specs] == [
        [3, 3, 3], [3, 1, 3, 1], [3, 1, 3, 1, 3, 1], [1, 3, 1]]
    assert (params.task.model.dropout_rate, params.task.losses.l2_weight_decay) == (0.2, 1e-4)
    assert params.trainer.optimizer_config.optimizer.sgd.nesterov
    assert (params.trainer.steps_per_loop, params.trainer.validation_steps) == (4, 4)


def test_the_rows_clips_are_tfm_sequence_examples_lites_decoder_reads(tmp_path):
    import tensorflow as tf
    from lite_launcher.vision.dataloaders import video_input

    glob = video_rows.write_synthetic_tfrecords(str(tmp_path), num_clips=2, frames=3, size=20)
    assert video_rows.write_synthetic_tfrecords(str(tmp_path)) == glob  # written once
    assert [os.path.basename(p) for p in tf.io.gfile.glob(glob)] == ["video-0.tfrecord"]
    decoder = video_input.Decoder()
    for serialized in tf.data.TFRecordDataset(tf.io.gfile.glob(glob)):
        decoded = decoder.decode(serialized)
        label = decoded["clip/label/index"].numpy()
        assert label.shape == (1,) and 0 <= label[0] < video_rows.NUM_CLASSES
        frames = [tf.io.decode_jpeg(f).numpy() for f in decoded["image/encoded"]]
        assert len(frames) == 3 and all(f.shape == (20, 20, 3) for f in frames)
        assert np.std(frames[0]) > 30  # noise (JPEG-smoothed), not a flat image
