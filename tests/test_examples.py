"""The examples run end to end: custom_trainer.py, forked_driver/ and ranking/ (TFM's ranking driver)."""

import gc
import json
import os
import re
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import tensorflow as tf
import yaml

import lite_launcher as ll

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_modes import checkpoint_values, read_scalars, subprocess_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
TIMEOUT = 180


def run_script(path, *args, expect_rc=0):
    result = subprocess.run([sys.executable, path] + [str(a) for a in args], cwd=ROOT,
                            env=subprocess_env(), capture_output=True, text=True,
                            timeout=TIMEOUT)
    if expect_rc is not None:
        assert result.returncode == expect_rc, result.stderr[-4000:]
    return result


def trainable_norm(checkpoint_path):
    """Global L2 norm of the trainable variables (tracked by the optimizer) in a checkpoint."""
    values = checkpoint_values(checkpoint_path)
    trainable = [v for name, v in values.items() if name.startswith("optimizer/_trainable")]
    assert trainable
    return float(np.sqrt(sum(np.sum(np.square(v.astype(np.float64))) for v in trainable)))


@pytest.fixture(scope="module")
def custom_trainer_run(tmp_path_factory):
    model_dir = str(tmp_path_factory.mktemp("custom_trainer") / "model")
    result = run_script(os.path.join(EXAMPLES, "custom_trainer.py"), "--model_dir", model_dir)
    return model_dir, result.stdout


@pytest.mark.release(sibling="tests/test_examples.py::"
                             "test_custom_trainer_xla_branch_matches_plain_step_under_mirrored")
def test_custom_trainer_example_trains_and_exports_its_best(custom_trainer_run):
    model_dir, stdout = custom_trainer_run
    match = re.search(r"final accuracy ([\d.]+); best exported at steps \[([\d, ]+)\]; "
                      r"eval examples (\d+)", stdout)
    assert match, stdout
    assert float(match.group(1)) > 0.9
    exported = [int(s) for s in match.group(2).split(",")]
    assert int(match.group(3)) == 297  # the whole validation split, counted from passthrough

    validation = read_scalars(os.path.join(model_dir, "validation"))
    assert sorted(validation["accuracy"]) == [100, 200]
    assert validation["eval_examples"] == {100: 297.0, 200: 297.0}
    # The custom rule exports whenever accuracy improves (the loss stays below max_loss).
    accuracies = [validation["accuracy"][s] for s in (100, 200)]
    expected = [100] + ([200] if accuracies[1] > accuracies[0] else [])
    assert exported == expected
    best_step = exported[-1]
    assert validation["best_accuracy"][200] == max(accuracies)
    assert validation["accuracy"][200] > 0.9

    best_dir = os.path.join(model_dir, "custom_best")
    assert sorted(os.listdir(best_dir)) == sorted(
        ["best.json", f"best-{best_step}.index", f"best-{best_step}.data-00000-of-00001"])
    with open(os.path.join(best_dir, "best.json")) as f:
        info = json.load(f)
    assert info["step"] == best_step
    assert info["accuracy"] == pytest.approx(validation["accuracy"][best_step], abs=1e-7)
    assert info["validation_loss"] == pytest.approx(validation["validation_loss"][best_step],
                                                    abs=1e-7)


@pytest.mark.release(sibling="tests/test_examples.py::"
                             "test_custom_trainer_xla_branch_matches_plain_step_under_mirrored")
def test_custom_trainer_example_logs_extra_values(custom_trainer_run):
    model_dir, _ = custom_trainer_run
    train = read_scalars(os.path.join(model_dir, "train"))
    assert train["global_step"] == {50: 50.0, 100: 100.0, 150: 150.0, 200: 200.0}
    assert sorted(train["weights_l2"]) == [50, 100, 150, 200]
    # weights_l2 is the global norm of the weights at that step: compare with the checkpoint.
    np.testing.assert_allclose(train["weights_l2"][200],
                               trainable_norm(os.path.join(model_dir, "ckpt-200")), rtol=1e-5)
    assert train["training_loss"][200] < train["training_loss"][50]


@pytest.fixture(scope="module")
def forked_driver_run(tmp_path_factory):
    model_dir = str(tmp_path_factory.mktemp("forked") / "model")
    progress = os.path.join(model_dir, "logs", "progress.txt")
    result = run_script(os.path.join(EXAMPLES, "forked_driver", "driver.py"),
                        "--experiment=linear_digits", "--mode=train_and_eval",
                        f"--model_dir={model_dir}", f"--progress_log={progress}")
    return model_dir, progress, result.stdout


def test_forked_driver_progress_log_matches_training_summaries(forked_driver_run):
    model_dir, progress, _ = forked_driver_run
    with open(progress) as f:
        lines = [line.split() for line in f.read().splitlines()]
    assert [int(step) for step, _ in lines] == [100, 200, 300]  # one line per inner loop
    train = read_scalars(os.path.join(model_dir, "train"))
    for step, loss in lines:
        assert float(loss) == pytest.approx(train["training_loss"][int(step)], abs=1e-6)
    assert float(lines[-1][1]) < float(lines[0][1])


def test_forked_driver_trains_its_registered_experiment(forked_driver_run):
    model_dir, _, stdout = forked_driver_run
    match = re.search(r"accuracy ([\d.]+) best ([\d.]+)", stdout)
    assert match, stdout
    assert float(match.group(1)) > 0.9
    validation = read_scalars(os.path.join(model_dir, "validation"))
    assert validation["accuracy"][300] == pytest.approx(float(match.group(1)), abs=1e-4)
    assert validation["eval_examples"] == {300: 297.0}
    # my_registry's linear_digits: softmax regression (one Dense 64 -> 10), SGD, L2 penalty.
    with open(os.path.join(model_dir, "params.yaml")) as f:
        params = yaml.safe_load(f)
    assert params["task"]["l2"] == pytest.approx(1e-4)
    assert params["trainer"]["optimizer_config"]["optimizer"]["type"] == "sgd"
    assert os.path.exists(os.path.join(model_dir, "operative_config.train_and_eval.gin"))
    values = checkpoint_values(os.path.join(model_dir, "ckpt-300"))
    shapes = sorted(v.shape for n, v in values.items() if n.startswith("optimizer/_trainable"))
    assert shapes == [(10,), (64, 10)]
    best_dir = os.path.join(model_dir, "custom_best")
    assert sorted(os.listdir(best_dir)) == ["best-300.data-00000-of-00001", "best-300.index",
                                             "best.json"]
    best = checkpoint_values(os.path.join(best_dir, "best-300"))
    for name, value in values.items():
        if not name.startswith("save_counter"):  # counts saves, not part of the state
            np.testing.assert_array_equal(best[name], value, err_msg=name)


def test_forked_driver_bad_mode_is_one_line_exit_2(tmp_path):
    result = run_script(os.path.join(EXAMPLES, "forked_driver", "driver.py"),
                        "--experiment=linear_digits", "--mode=evl",
                        f"--model_dir={tmp_path / 'model'}", expect_rc=2)
    assert result.stderr.strip().splitlines() == [
        "driver.py: error: Unknown mode 'evl'; valid modes: train, train_and_post_eval, "
        "train_and_eval, eval, continuous_eval."]


def test_custom_trainer_xla_branch_matches_plain_step_under_mirrored(tmp_path):
    # The release tests' example script, its trainer run in this process on a smaller case.
    # In-process with the suite's 2 logical CPUs: the XLA branch must work under
    # MirroredStrategy (update outside the compiled function) and give the plain step's weights;
    # the passthrough count must add up the replicas' labels.
    sys.path.insert(0, EXAMPLES)
    try:
        import custom_trainer
    finally:
        sys.path.remove(EXAMPLES)
    strategy = ll.get_distribution_strategy("mirrored", devices=["/cpu:0", "/cpu:1"])
    results = {}
    for enable_xla in (False, True):
        params = ll.get_exp_config("digits_mlp")
        params.override({"trainer": {"train_steps": 20, "steps_per_loop": 10,
                                     "summary_interval": 10, "checkpoint_interval": 20,
                                     "validation_interval": 20},
                         "runtime": {"enable_xla": enable_xla}})
        model_dir = str(tmp_path / f"xla_{enable_xla}")
        with strategy.scope():
            task = ll.get_task(params.task)
        trainer = custom_trainer.build_custom_trainer(params, task, strategy, "train_and_eval",
                                                      best_dir=os.path.join(model_dir, "best"))
        train_logs = []
        ll.run_experiment(distribution_strategy=strategy, task=task, mode="train_and_eval",
                          params=params, model_dir=model_dir, trainer=trainer,
                          save_summary=False, train_actions=[train_logs.append])
        compiled = getattr(trainer._forward_backward_fn, "_jit_compile", None)
        assert bool(compiled) == enable_xla
        assert int(trainer.global_step.numpy()) == 20
        assert int(trainer.last_eval_logs["eval_examples"]) == 297
        assert trainer.exported_steps == [20]
        results[enable_xla] = [v.numpy() for v in trainer.model.trainable_variables]
        # The example's extra logs (its train_loop_end): the step and the weights' global norm
        # after each loop, the last one of the final weights.
        assert [int(logs["global_step"]) for logs in train_logs] == [10, 20]
        final_norm = np.sqrt(sum(np.sum(np.square(v.astype(np.float64)))
                                 for v in results[enable_xla]))
        np.testing.assert_allclose(float(train_logs[-1]["weights_l2"]), final_norm, rtol=1e-5)
    for plain, xla in zip(results[False], results[True]):
        np.testing.assert_allclose(xla, plain, rtol=1e-4, atol=1e-6)


# ------------------------------------------------------------------------------------------
# examples/ranking: TFM's two-optimizer RankingTrainer and driver (issue 18).

RANKING = os.path.join(EXAMPLES, "ranking")

STALL_MODULE = '''
"""A train action that stops the process in place after its Nth inner loop (a test's kill
point: the process is SIGKILLed while it waits, so the kill lands at a known step)."""
import time

import gin


@gin.configurable
class StallAfterLoops:
    def __init__(self, loops=gin.REQUIRED, marker=gin.REQUIRED):
        self.loops, self.marker, self.calls = loops, marker, 0

    def __call__(self, output):
        self.calls += 1
        if self.calls == self.loops:
            with open(self.marker, "w") as f:
                f.write("stalled")
            time.sleep(600)
'''


def _ranking_command(*args):
    return [sys.executable, os.path.join(RANKING, "driver.py"), "--experiment=ranking_tiny",
            *[str(a) for a in args]]


def _ranking_straight_run(model_dir):
    """train_and_eval in this process, through the example's own trainer builder; returns
    the trainer's global step at the end."""
    sys.path.insert(0, RANKING)
    try:
        import ranking
    finally:
        sys.path.remove(RANKING)
    params = ll.get_exp_config("ranking_tiny")
    strategy = ll.get_distribution_strategy(distribution_strategy="off")
    task = ll.get_task(params.task, logging_dir=model_dir)
    trainer = ranking.build_ranking_trainer(params, task, strategy, "train_and_eval", model_dir)
    ll.run_experiment(distribution_strategy=strategy, task=task, mode="train_and_eval",
                      params=params, model_dir=model_dir, trainer=trainer)
    global_step = int(trainer.global_step.numpy())
    # Its tf.data iterators go now, while young: collected at the test's end, after the
    # processes below, each destructor waited out a long autotuning period (~20 s teardowns).
    del trainer, task
    gc.collect()
    return global_step


def test_ranking_example_driver_logs_one_learning_rate_per_optimizer(tmp_path):
    """The ranking driver end to end in one process (the release test below kills and resumes
    it beside an evaluator): both inner optimizers trained 20 steps, TFM's summary names."""
    model_dir = tmp_path / "model"
    result = subprocess.run(_ranking_command("--mode=train_and_eval", f"--model_dir={model_dir}"),
                            cwd=ROOT, env=subprocess_env(), capture_output=True, text=True,
                            timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr[-3000:]
    values = checkpoint_values(str(model_dir / "ckpt-20"))
    for i in (0, 1):
        assert values[f"optimizer/inner_optimizer_{i}/_iterations/.ATTRIBUTES/VARIABLE_VALUE"] \
            == 20
    train = read_scalars(str(model_dir / "train"))
    assert train["SGD_0_learning_rate"][20] == pytest.approx(0.3)
    # The rate of the next step, at Adam's 20 completed iterations: 0.02 * 0.5 ** (20 / 10).
    assert train["Adam_1_learning_rate"][20] == pytest.approx(0.005)
    assert "loss" not in train and "learning_rate" not in train
    validation = read_scalars(str(model_dir / "validation"))
    assert sorted(validation["auc"]) == [5, 10, 15, 20]
    assert "loss" not in validation
    assert os.path.exists(model_dir / "operative_config.train_and_eval.gin")


@pytest.mark.release(sibling="tests/test_examples.py::test_ranking_example_driver_logs_one_"
                             "learning_rate_per_optimizer")
def test_ranking_example_killed_and_resumed_equals_a_straight_run_with_an_evaluator_beside(
        tmp_path):
    straight_dir = str(tmp_path / "straight")
    straight_steps = _ranking_straight_run(straight_dir)

    model_dir = tmp_path / "killed"
    marker = tmp_path / "stalled"
    (tmp_path / "ranking_stall.py").write_text(STALL_MODULE)
    gin_file = tmp_path / "stall.gin"
    gin_file.write_text(textwrap.dedent(f"""
        import ranking_stall
        run_experiment.train_actions = [@ranking_stall.StallAfterLoops()]
        StallAfterLoops.loops = 3
        StallAfterLoops.marker = {str(marker)!r}
    """))
    env = subprocess_env(str(tmp_path))
    # 1. Train, stopped after its third loop (step 15, before that loop's checkpoint), killed.
    killed = subprocess.Popen(_ranking_command("--mode=train", f"--model_dir={model_dir}",
                                               f"--gin_file={gin_file}"),
                              cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + TIMEOUT
        while not marker.exists():
            assert killed.poll() is None, killed.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "the training job never reached step 15"
            time.sleep(0.05)
    finally:
        killed.kill()
        killed.wait()
    assert tf.train.latest_checkpoint(str(model_dir)).endswith("ckpt-10")
    # 2. An evaluator on the same model_dir (its own summary dir), then the resumed training.
    evaluator = subprocess.Popen(
        _ranking_command("--mode=continuous_eval", f"--model_dir={model_dir}",
                         "--params_override=trainer.validation_summary_subdir=ceval"),
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        resumed = subprocess.run(_ranking_command("--mode=train_and_eval",
                                                  f"--model_dir={model_dir}"),
                                 cwd=ROOT, env=env, capture_output=True, text=True,
                                 timeout=TIMEOUT)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        _, evaluator_err = evaluator.communicate(timeout=TIMEOUT)
    finally:
        if evaluator.poll() is None:
            evaluator.kill()
    assert evaluator.returncode == 0, evaluator_err[-3000:]

    # Resumed from step 10 (both inner optimizers' state restored) == the straight run.
    resumed_values = checkpoint_values(str(model_dir / "ckpt-20"))
    straight_values = checkpoint_values(os.path.join(straight_dir, "ckpt-20"))
    inner = [n for n in straight_values if n.startswith("optimizer/inner_optimizer_")]
    assert len([n for n in inner if n.endswith("_iterations/.ATTRIBUTES/VARIABLE_VALUE")]) == 2
    for name in inner + [n for n in straight_values if n.startswith("model/")]:
        np.testing.assert_allclose(resumed_values[name], straight_values[name], rtol=1e-5,
                                   atol=1e-6, err_msg=name)
    for i in (0, 1):
        assert resumed_values[f"optimizer/inner_optimizer_{i}/_iterations/"
                              f".ATTRIBUTES/VARIABLE_VALUE"] == 20
    assert straight_steps == 20

    # One learning rate per optimizer, TFM's names; no made-up `loss` from model.compile.
    train = read_scalars(str(model_dir / "train"))
    assert train["SGD_0_learning_rate"][20] == pytest.approx(0.3)
    # The rate of the next step, at Adam's 20 completed iterations: 0.02 * 0.5 ** (20 / 10).
    assert train["Adam_1_learning_rate"][20] == pytest.approx(0.005)
    assert "loss" not in train and "learning_rate" not in train
    straight_eval = read_scalars(os.path.join(straight_dir, "validation"))
    assert "loss" not in straight_eval
    # The evaluator beside it evaluated every checkpoint once, the last one as the trainer.
    beside = read_scalars(str(model_dir / "ceval"))
    assert sorted(beside["auc"]) == [5, 10, 15, 20]
    for metric in ("auc", "accuracy", "validation_loss"):
        assert beside[metric][20] == pytest.approx(straight_eval[metric][20], rel=1e-4)
