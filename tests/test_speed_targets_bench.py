"""Issue 55's speed rows: the detection generator A/B's inputs (benchmarks/nms_ab.py) and the
targets table (benchmarks/speed_targets.py, rendered by report.py --targets). No timing is
asserted: the A/B needs TFM's venv, the table reads committed results files."""

import json
import os
import sys

import numpy as np
import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
sys.path.insert(0, BENCH)

import nms_ab  # noqa: E402
import speed_targets  # noqa: E402


def _scores(raw_scores):
    logits = np.concatenate([s.reshape(nms_ab.BATCH, -1, nms_ab.NUM_CLASSES)[..., 1:]
                             for s in raw_scores.values()], axis=1)
    return 1.0 / (1.0 + np.exp(-logits))


@pytest.mark.parametrize("above", [0.0, 0.01])
def test_the_generator_inputs_have_the_rows_anchors_and_the_asked_share_above_threshold(above):
    raw_boxes, raw_scores, anchor_boxes, image_shape = nms_ab.generator_inputs(above)
    scores = _scores(raw_scores)
    assert scores.shape == (2, 12276, 90)  # levels 3-7 at 256x256, 9 a cell; background dropped
    share = (scores > nms_ab.GENERATOR["pre_nms_score_threshold"]).mean()
    assert share == pytest.approx(above, abs=0.001)
    # The rest sit near the focal-loss prior 0.01, as an initialised RetinaNet's sigmoids do.
    assert np.median(scores) == pytest.approx(0.01, abs=0.002)
    assert set(raw_boxes) == set(anchor_boxes) == {"3", "4", "5", "6", "7"}
    assert anchor_boxes["3"].shape == (2, 32, 32, 36) and image_shape.tolist() == [[256, 256]] * 2


def _results(tmp_path, name, ratios_by_round):
    rounds = [{"order": ["lite", "tfm"], "loadavg": [load, 0, 0],
               "ms_per_step": {"lite": {"eval": 100.0}, "tfm": {"eval": 100.0 * ratio}}}
              for ratio, load in ratios_by_round]
    data = {"kind": "step_vs_tfm", "commit": "abc1234", "records": [
        {"model": "m", "dtype": "float32", "cpu_model": "Some CPU", "rounds": rounds}]}
    (tmp_path / name).write_text(json.dumps(data))


def test_the_targets_table_judges_the_median_of_per_round_ratios(tmp_path, monkeypatch):
    monkeypatch.setattr(speed_targets, "RESULTS", str(tmp_path))
    _results(tmp_path, "a.json", [(1.5, 2.0), (1.1, 3.5), (1.3, 1.0)])
    _results(tmp_path, "b.json", [(1.0, 0.5), (0.9, 0.5)])
    text = speed_targets.render([
        ("row a", ">=", 1.2, "a.json", speed_targets.step_vs_tfm_row, ("m", "eval")),
        ("row b", ">=", 1.2, "b.json", speed_targets.step_vs_tfm_row, ("m", "eval"))])
    assert ("| row a | >= 1.2 | 1.300 [1.100–1.500] | 3/3 | met | Some CPU, 1.0–3.5 | "
            "`abc1234`, `benchmarks/results/a.json` |") in text
    assert "| row b | >= 1.2 | 0.950 [0.900–1.000] | 0/2 | MISS |" in text
    assert text.rstrip().endswith("1 of 2 targets met on the median.")


def test_every_target_reads_a_committed_results_file():
    names = {target[3] for target in speed_targets.TARGETS}
    assert names and all(os.path.exists(os.path.join(speed_targets.RESULTS, n)) for n in names)
    assert len(speed_targets.rows()) == len(speed_targets.TARGETS)
