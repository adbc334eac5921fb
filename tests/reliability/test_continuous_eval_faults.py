"""continuous_eval over a model_dir with a pruned and a broken checkpoint, and a trainer that
stopped short of train_steps: each restore stands alone, and the opt-in limit ends the wait."""

from __future__ import annotations

import json
import os
import re

import pytest

from cli import run_lite_train_in_process
from reliability_utils import ERROR_PREFIX, train_mock

pytestmark = pytest.mark.slow

_EVAL_STEP = re.compile(r" eval \| step:\s+(\d+) \| eval time")


def test_pruned_and_broken_checkpoints_are_told_apart_and_the_wait_ends_at_the_limit(tmp_path):
    model_dir = str(tmp_path / "model")
    train_mock(model_dir, 50)  # ckpt-10 ... ckpt-50; the "trainer" stopped short of 100.
    for name in os.listdir(model_dir):  # ckpt-20: pruned after the state file listed it.
        if name.startswith("ckpt-20."):
            os.remove(os.path.join(model_dir, name))
    data = os.path.join(model_dir, "ckpt-30.data-00000-of-00001")
    os.truncate(data, os.path.getsize(data) // 2)  # ckpt-30: broken.

    completed = run_lite_train_in_process(
        "--experiment=mock", "--mode=continuous_eval", f"--model_dir={model_dir}",
        "--continuous_eval_max_wait_s=3",
        "--params_override=trainer.train_steps=100,trainer.validation_steps=2,"
        "trainer.continuous_eval_timeout=1,trainer.continuous_eval_all_checkpoints=true")
    log = completed.logged
    assert completed.returncode == 0, (completed.stderr + log)[-3000:]
    assert ERROR_PREFIX not in completed.stderr and "Traceback" not in completed.stderr + log

    # Every intact checkpoint is evaluated, also the ones right after the bad ones.
    assert [int(s) for s in _EVAL_STEP.findall(log)] == [10, 40, 50]
    with open(os.path.join(model_dir, "validation", "evaluated_checkpoints.json")) as f:
        assert json.load(f)["evaluated_steps"] == [10, 40, 50]
    ckpt = os.path.join(model_dir, "ckpt-")
    assert f"Skipping checkpoint {ckpt}20: it was pruned" in log
    assert "retrying once" not in log.split(f"{ckpt}20")[1].split("\n")[0]
    assert len(re.findall(rf"Could not restore checkpoint {ckpt}30 \(\S*Error: .*\); "
                          r"retrying once", log)) == 1
    assert f"Skipping checkpoint {ckpt}30: it could not be restored twice" in log
    assert "probably deleted" not in log

    # It said why it kept waiting, then stopped at the limit with one line.
    waits = re.findall(r"No new checkpoint in \S+ for \d+ s; newest step seen: 50, target step: "
                       r"100\. Still waiting", log)
    assert len(waits) >= 1
    last = [line for line in log.splitlines() if line.strip()][-1]
    assert re.search(r"Stopping continuous evaluation: no new checkpoint in \S+ for [3-9]\d* s "
                     r"\(max_wait 3 s, --continuous_eval_max_wait_s\); newest step seen: 50, "
                     r"target step: 100\.$", last), last
