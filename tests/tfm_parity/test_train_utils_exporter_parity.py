"""TFM parity: the BestCheckpointExporter tests of official/core/train_utils_test.py restated
on lite_launcher.core.exporter.BestCheckpointExporter."""

import json
import os

import tensorflow as tf

from lite_launcher.core.exporter import BestCheckpointExporter


def restored_value(path):
    value = tf.Variable(2.0)
    tf.train.Checkpoint(v=value).restore(path)
    return float(value.numpy())


def test_maybe_export(tmp_path):
    """Restates train_utils_test.BestCheckpointExporterTest.test_maybe_export: the first
    evaluation and a better one are exported to `best_ckpt-1` (each from a fresh checkpoint
    object, so each is its first save), a worse one is not."""
    model_dir = str(tmp_path)
    best_ckpt_path = os.path.join(model_dir, "best_ckpt-1")
    exporter = BestCheckpointExporter(model_dir, "test_metric|metric_1", "higher")

    checkpoint = tf.train.Checkpoint(v=tf.Variable(1.0))
    assert exporter.maybe_export_checkpoint(checkpoint, {"test_metric": {"metric_1": 5.0}},
                                            100) is True
    assert restored_value(best_ckpt_path) == 1.0

    checkpoint = tf.train.Checkpoint(v=tf.Variable(3.0))
    assert exporter.maybe_export_checkpoint(checkpoint, {"test_metric": {"metric_1": 6.0}},
                                            200) is True
    assert restored_value(best_ckpt_path) == 3.0

    checkpoint = tf.train.Checkpoint(v=tf.Variable(5.0))
    assert exporter.maybe_export_checkpoint(checkpoint, {"test_metric": {"metric_1": 1.0}},
                                            300) is False
    assert restored_value(best_ckpt_path) == 3.0


def read_info(model_dir):
    with tf.io.gfile.GFile(os.path.join(model_dir, "info.json"), "rb") as reader:
        return json.loads(reader.read())


def test_export_best_eval_metric(tmp_path):
    """Restates train_utils_test.BestCheckpointExporterTest.test_export_best_eval_metric."""
    exporter = BestCheckpointExporter(str(tmp_path), "test_metric|metric_1", "higher")
    exporter.export_best_eval_metric({"test_metric": {"metric_1": 5.0}}, 100)
    assert read_info(str(tmp_path)) == {"test_metric": {"metric_1": 5.0},
                                        "best_ckpt_global_step": 100.0}


def test_export_best_eval_metric_skips_non_scalar_values(tmp_path):
    """Restates train_utils_test.BestCheckpointExporterTest
    .test_export_best_eval_metric_skips_non_scalar_values: an image log is left out."""
    exporter = BestCheckpointExporter(str(tmp_path), "test_metric|metric_1", "higher")
    eval_logs = {"test_metric": {"metric_1": 5.0, "image": tf.zeros(shape=[16, 8, 1])}}
    exporter.export_best_eval_metric(eval_logs, 100)
    assert read_info(str(tmp_path)) == {"test_metric": {"metric_1": 5.0},
                                        "best_ckpt_global_step": 100.0}
