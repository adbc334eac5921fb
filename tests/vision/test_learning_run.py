"""learning_run.record: a release learning run's numbers as a results file when
LITE_LEARNING_RUN_OUT names one, nothing otherwise (the learning runs themselves are release)."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import learning_run  # noqa: E402

VALIDATION = {"AP50": {300: 0.965, 0: 0.0}, "AP": {0: 0.0, 300: 0.478}}


def test_without_the_variable_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.delenv(learning_run.ENV_VAR, raising=False)
    monkeypatch.chdir(tmp_path)
    assert learning_run.record("t.py::test_x", VALIDATION, 300, 1.0) is None
    assert not os.listdir(tmp_path)


def test_the_run_is_written_where_the_variable_says_with_its_machine(tmp_path, monkeypatch):
    out = str(tmp_path / "results" / "learning.json")
    monkeypatch.setenv(learning_run.ENV_VAR, out)
    assert learning_run.record("t.py::test_x", VALIDATION, 300, 12.5,
                               untrained={"AP50": 0.0}) == out
    with open(out) as f:
        data = json.load(f)
    assert data["file"] == out and data["kind"] == "learning_run"
    assert data["command"].startswith(f"LITE_LEARNING_RUN_OUT={out} ")
    assert data["test"] == "t.py::test_x" and data["train_steps"] == 300
    assert data["validation"] == {"AP": {"0": 0.0, "300": 0.478},
                                  "AP50": {"0": 0.0, "300": 0.965}}
    assert data["untrained"] == {"AP50": 0.0} and data["wall_s"] == 12.5
    assert data["machine"]["cores"] == os.cpu_count()
    assert data["machine"]["cpu_model"] and data["machine"]["tensorflow"]
    assert isinstance(data["machine"]["onednn"], bool) and len(data["machine"]["loadavg"]) == 3
    assert len(data["commit"]) == 7
