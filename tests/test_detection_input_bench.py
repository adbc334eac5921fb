"""benchmarks/detection_input.py (issue 55, detection input alone): what its rows read and how
they are summarised, on lite's side (TFM's side runs in TFM's venv, by the benchmark itself).

The row's datasets are each side's own `task.build_inputs`; the stage rows take the two
functions that build maps (decoder, parser) and run them apart. Here, on four records: lite's
caught functions are its decoder and parser, a training call reads its batches, an evaluation
call one whole pass, the parse stage reads decoded records from memory; rounds alternate the
sides and the ratios are TFM's time over lite's."""

import os
import sys

import numpy as np
import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
sys.path.insert(0, BENCH)

import detection_input  # noqa: E402

MODEL = "retinanet_resnet50_fpn"
NUM_IMAGES = 4


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    return detection_input.records(str(tmp_path_factory.mktemp("records")), MODEL, NUM_IMAGES)


def test_lites_caught_map_functions_are_its_decoder_and_parser(records):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    decoder, parser = detection_input.map_functions("lite", MODEL, records, "train")
    record = next(iter(tf.data.TFRecordDataset(tf.io.gfile.glob(records))))
    decoded = decoder(record)
    assert decoded["image"].shape == (256, 256, 3) and decoded["image"].dtype == tf.uint8
    image, labels = parser(decoded)
    assert image.shape == (256, 256, 3)
    # RetinaNet's levels 3..7, 9 anchors a cell: 32x32x9 on level 3.
    assert labels["cls_targets"]["3"].shape == (32, 32, 9)
    assert sorted(labels["cls_targets"]) == ["3", "4", "5", "6", "7"]


def test_a_training_call_reads_its_batches_and_an_eval_call_one_pass(records):
    train = detection_input.Reader(
        detection_input.build_dataset("lite", MODEL, records, "train"), "train", batches=3,
        warmup=1)
    images, seconds, cpu_seconds = train()
    assert images == 3 * detection_input.detection_rows.BATCH and seconds > 0 and cpu_seconds > 0
    evaluate = detection_input.Reader(
        detection_input.build_dataset("lite", MODEL, records, "eval"), "eval", batches=3,
        warmup=1)
    assert evaluate()[0] == NUM_IMAGES  # the whole eval set, whatever `batches`
    assert evaluate()[0] == NUM_IMAGES  # again from the top: a new iterator per call


def test_the_parse_stage_reads_decoded_records_from_memory(records):
    functions = detection_input.map_functions("lite", MODEL, records, "eval")
    reader = detection_input.StageReader(*functions, records, "parse", count=5, warmup=1,
                                         num_images=NUM_IMAGES)
    assert reader()[0] == 5  # more than the records: the cache repeats


def test_rounds_alternate_and_ratios_are_tfms_time_over_lites():
    calls = []

    def side(name, images_per_sec, cpu_ms):
        def call():
            calls.append(name)
            return 10, 10 / images_per_sec, cpu_ms * 10 / 1000.0
        return call

    per_round = detection_input.compare({"lite": side("lite", 30.0, 20.0),
                                         "tfm": side("tfm", 20.0, 30.0)}, 4, "test")
    assert calls == ["lite", "tfm", "tfm", "lite"] * 2
    summary = detection_input.summarize(per_round)
    assert summary["lite_over_tfm"]["median"] == pytest.approx(1.5)
    assert summary["cpu_tfm_over_lite"]["median"] == pytest.approx(1.5)
    assert summary["rounds_lite_faster"] == 4
    assert np.isclose(summary["lite"]["median"], 30.0)
