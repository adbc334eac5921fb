"""An evaluator (`continuous_eval`) beside a trainer writing the same model_dir.

In-process: a truncated checkpoint is skipped with a warning and the next one evaluated; with
`trainer.continuous_eval_all_checkpoints` every checkpoint is evaluated in step order and a
restarted evaluator does not evaluate the recorded ones again. Subprocesses: a real trainer
writing a checkpoint every 10 steps (max_to_keep 2) next to a real evaluator.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time

import pytest
import tensorflow as tf

from reliability_utils import (FAST_DIGITS, override_json, poison_params, read_text,
                               run_poison_task, start_lite_train, summary_steps, wait_for)

EVALUATED_RECORD = "evaluated_checkpoints.json"


class _Messages(logging.Handler):
    """Collects log messages (thread-safe), so a helper thread can wait for one."""

    def __init__(self):
        super().__init__(level=logging.INFO)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())

    def matching(self, text):
        return [m for m in list(self.messages) if text in m]


@pytest.fixture
def messages():
    handler = _Messages()
    root = logging.getLogger()
    previous_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield handler
    root.removeHandler(handler)
    root.setLevel(previous_level)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """A training run's checkpoints at steps 5, 10, ..., 25 (to copy into evaluators' dirs)."""
    source = str(tmp_path_factory.mktemp("source"))
    run_poison_task(poison_params(trainer={"train_steps": 25}), source)
    return source


def _publish(source, model_dir, steps):
    """Copies checkpoints `steps` of `source` into `model_dir` (data first), then lists them."""
    os.makedirs(model_dir, exist_ok=True)
    for step in steps:
        for suffix in (".data-00000-of-00001", ".index"):
            name = f"ckpt-{step}{suffix}"
            if not os.path.exists(os.path.join(model_dir, name)):
                shutil.copy(os.path.join(source, name), os.path.join(model_dir, name))
    listed = state_steps(model_dir) + [s for s in steps if s not in state_steps(model_dir)]
    paths = [os.path.join(model_dir, f"ckpt-{s}") for s in listed]
    tf.compat.v1.train.update_checkpoint_state(model_dir, paths[-1],
                                               all_model_checkpoint_paths=paths)


def state_steps(model_dir):
    state = tf.train.get_checkpoint_state(model_dir)
    if state is None:
        return []
    return [int(p.rsplit("-", 1)[1]) for p in state.all_model_checkpoint_paths]


def _truncate(model_dir, step):
    data = os.path.join(model_dir, f"ckpt-{step}.data-00000-of-00001")
    size = os.path.getsize(data)
    with open(data, "r+b") as f:
        f.truncate(size // 2)


def _evaluate(model_dir, train_steps, evaluate_all=False):
    params = poison_params(trainer={"train_steps": train_steps, "continuous_eval_timeout": 60,
                                    "continuous_eval_all_checkpoints": evaluate_all})
    run_poison_task(params, model_dir, mode="continuous_eval")


def test_a_truncated_checkpoint_is_skipped_with_a_warning_and_the_next_one_evaluated(
        tmp_path, checkpoints, messages):
    model_dir = str(tmp_path / "model")
    _publish(checkpoints, model_dir, [5, 10, 15, 20])
    _truncate(model_dir, 20)  # the newest: what the evaluator looks at first
    truncated = os.path.join(model_dir, "ckpt-20")

    def write_the_next_checkpoint():
        # Once the evaluator has given up on ckpt-20, the trainer "writes" ckpt-25.
        wait_for(lambda: messages.matching(f"Skipping checkpoint {truncated}"), timeout=60,
                 what="the skip of the truncated checkpoint")
        _publish(checkpoints, model_dir, [25])

    writer = threading.Thread(target=write_the_next_checkpoint)
    writer.start()
    try:
        _evaluate(model_dir, train_steps=25)
    finally:
        writer.join()
    skipped = messages.matching("Skipping checkpoint")
    assert len(skipped) == 1 and skipped[0].startswith(f"Skipping checkpoint {truncated}:")
    assert "could not be restored" in skipped[0]
    # Only ckpt-25 was evaluated, once; the evaluator stopped after the final step.
    assert summary_steps(os.path.join(model_dir, "validation"), "validation_loss") == [25]
    assert messages.matching("Evaluated checkpoint at step 25 >= stop_at_step 25: done.")


def test_evaluate_all_checkpoints_in_order_and_a_restarted_evaluator_skips_evaluated_ones(
        tmp_path, checkpoints, messages):
    model_dir = str(tmp_path / "model")
    record = os.path.join(model_dir, "validation", EVALUATED_RECORD)
    _publish(checkpoints, model_dir, [5, 10, 15, 20])
    _truncate(model_dir, 15)
    _evaluate(model_dir, train_steps=20, evaluate_all=True)
    summaries = os.path.join(model_dir, "validation")
    assert summary_steps(summaries, "validation_loss") == [5, 10, 20]
    with open(record) as f:
        assert json.load(f) == {"evaluated_steps": [5, 10, 20]}
    assert len(messages.matching("Skipping checkpoint")) == 1

    # The trainer goes on to step 25; a restarted evaluator evaluates only what is new (and
    # tries the broken ckpt-15 again, which it skips again).
    _publish(checkpoints, model_dir, [25])
    _evaluate(model_dir, train_steps=25, evaluate_all=True)
    assert summary_steps(summaries, "validation_loss") == [5, 10, 20, 25]
    with open(record) as f:
        assert json.load(f) == {"evaluated_steps": [5, 10, 20, 25]}
    skipped = messages.matching("Skipping checkpoint")
    assert len(skipped) == 2 and all(os.path.join(model_dir, "ckpt-15") in m for m in skipped)


@pytest.mark.slow
@pytest.mark.release(sibling="tests/reliability/test_side_by_side_eval.py::"
                             "test_evaluate_all_checkpoints_in_order_and_a_restarted_evaluator_skips_evaluated_ones")
def test_continuous_eval_beside_a_trainer_that_writes_every_5_steps(tmp_path):
    model_dir = str(tmp_path / "model")
    train_steps = 1000
    # A checkpoint every 5 steps: 200 checkpoints over a few seconds of training.
    flat = {**FAST_DIGITS, "trainer.train_steps": train_steps, "trainer.max_to_keep": 2,
            "trainer.steps_per_loop": 5, "trainer.checkpoint_interval": 5,
            "trainer.continuous_eval_timeout": 120}
    common = ["--experiment", "digits_mlp", "--model_dir", model_dir,
              "--params_override", override_json(flat)]
    eval_log, train_log = str(tmp_path / "eval.log"), str(tmp_path / "train.log")
    evaluator = start_lite_train(["--mode", "continuous_eval", *common], eval_log)
    trainer = None
    try:
        # The evaluator is up and waiting before the first checkpoint is written.
        wait_for(lambda: evaluator.poll() is not None
                 or "Waiting for a new checkpoint" in read_text(eval_log),
                 timeout=180, interval=0.05, what="the evaluator to wait")
        assert evaluator.poll() is None, read_text(eval_log)[-3000:]
        trainer = start_lite_train(["--mode", "train", *common], train_log)
        assert trainer.wait(timeout=300) == 0, read_text(train_log)[-3000:]
        trainer_done = time.monotonic()
        assert evaluator.wait(timeout=120) == 0, read_text(eval_log)[-3000:]
        evaluator_lag = time.monotonic() - trainer_done
    finally:
        for process in (trainer, evaluator):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
    train_text, eval_text = read_text(train_log), read_text(eval_log)
    assert "Traceback" not in eval_text
    assert train_text.count("Saved checkpoint") == train_steps // 5
    evaluated = summary_steps(os.path.join(model_dir, "validation"), "accuracy")
    # Every evaluated step once, in order, each a checkpoint step; the last is the final step,
    # and at least one was evaluated while the trainer was still writing.
    assert evaluated == sorted(set(evaluated)) and evaluated[-1] == train_steps
    assert len(evaluated) >= 2 and all(step % 5 == 0 for step in evaluated)
    assert eval_text.count(" eval | step:") == 2 * len(evaluated)  # "running" + result lines
    assert f"Evaluated checkpoint at step {train_steps} >= stop_at_step {train_steps}: done." \
        in eval_text
    # It exited after the final checkpoint, not after the 120 s continuous_eval_timeout.
    assert evaluator_lag < 60
