"""End-to-end tests of the five modes: `lite-train` in this process and in subprocesses, and
`run_experiment` in-process.

The driver runs in this process (`cli.run_lite_train_in_process`: `main.run()` from flag
parsing to exit, without the ~6 CPU-seconds of a TensorFlow start-up); the runs are
module-scoped fixtures shared by several tests, chained on the same model_dir where a later
mode naturally follows an earlier one (train -> resume, train_and_eval -> eval on a copy). What
only processes show runs in subprocesses: a trainer and a continuous evaluator side by side
(`release`), and the exit code of a refused command.

The `mock` experiment (TFM's MockTask) has closed-form training: one fixed batch `x`, loss =
mean(Dense(1)(x)), SGD lr 0.01. After `s` steps the bias is `1 - 0.01 s` and the loss on that
batch is `L0 - 0.01 s (|mean(x)|^2 + 1)`, so logged values can be checked exactly.
"""

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from collections import defaultdict

import keras
import numpy as np
import pytest
import tensorflow as tf
import yaml

import cli
from cli import run_lite_train_in_process

import lite_launcher as ll
from lite_launcher.experiments import workloads

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEARNING_RATE = 0.01  # the mock experiment's SGD learning rate
SUBPROCESS_TIMEOUT = 180


# ------------------------------------------------------------------------------------------
# Helpers (also used by test_examples.py).

def lite_train_command():
    """The `lite-train` script next to this Python, else `python -m lite_launcher.commands.train`."""
    return cli.lite_train_command(installed=True)


def subprocess_env(extra_pythonpath=None):
    env = dict(os.environ)
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    paths = [ROOT] + ([extra_pythonpath] if extra_pythonpath else [])
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def start_lite_train(*args, extra_pythonpath=None):
    """Starts `lite-train args...`; stdout and stderr are captured as text."""
    return subprocess.Popen(lite_train_command() + [str(a) for a in args], cwd=ROOT,
                            env=subprocess_env(extra_pythonpath), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def lite_train(*args, expect_rc=0, extra_pythonpath=None):
    """Runs `lite-train args...` to completion; asserts the exit code; returns the result."""
    result = subprocess.run(lite_train_command() + [str(a) for a in args], cwd=ROOT,
                            env=subprocess_env(extra_pythonpath), capture_output=True, text=True,
                            timeout=SUBPROCESS_TIMEOUT)
    if expect_rc is not None:
        assert result.returncode == expect_rc, (
            f"lite-train {' '.join(map(str, args))} exited {result.returncode}:\n"
            f"{result.stderr[-4000:]}")
    return result


def lite_train_here(*args):
    """`lite-train args...` in this process (`cli.run_lite_train_in_process`); asserts exit
    code 0; returns the run (its log lines in `.logged`)."""
    run = run_lite_train_in_process(*args)
    assert run.returncode == 0, (
        f"lite-train {' '.join(map(str, args))} exited {run.returncode}:\n"
        f"{(run.stderr + run.logged)[-4000:]}")
    return run


def overrides(**trainer):
    """A --params_override string setting `trainer.<key>=<value>` for each keyword."""
    return ",".join(f"trainer.{key}={value}" for key, value in trainer.items())


def read_scalars(directory):
    """{tag: {step: value}} of every scalar in the event files directly under `directory`."""
    scalars = defaultdict(dict)
    for _, events in read_event_files(directory):
        for step, tag, value in events:
            scalars[tag][step] = value
    return dict(scalars)


def read_event_files(directory):
    """[(path, [(step, tag, value), ...]), ...] for each event file, oldest first: by the
    wall time of the file's first summary. The name and the file-version event hold whole
    seconds only, and two runs in one process can open their files within the same second."""
    def opened_at(path):
        return next((event.wall_time for event in tf.compat.v1.train.summary_iterator(path)
                     if event.HasField("summary")), 0.0)  # no summary yet: oldest

    files = sorted(glob.glob(os.path.join(directory, "events.out.tfevents.*")), key=opened_at)
    result = []
    for path in files:
        events = []
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                assert value.metadata.plugin_data.plugin_name in ("scalars", ""), value
                events.append((event.step, value.tag, float(tf.make_ndarray(value.tensor))))
        result.append((path, events))
    return result


def event_wall_times(directory, tag):
    """[(wall_time, step)] of `tag` in the event files under `directory`."""
    times = []
    for path in glob.glob(os.path.join(directory, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            if any(v.tag == tag for v in event.summary.value):
                times.append((event.wall_time, event.step))
    return sorted(times)


def kept_checkpoints(model_dir):
    """Steps of the checkpoints in the state file, asserting that their files exist."""
    state = tf.train.get_checkpoint_state(model_dir)
    assert state is not None, f"no checkpoint state in {model_dir}"
    steps = []
    for path in state.all_model_checkpoint_paths:
        path = path if os.path.isabs(path) else os.path.join(model_dir, path)
        assert os.path.exists(path + ".index"), path
        steps.append(int(path.rsplit("-", 1)[1]))
    assert os.path.basename(state.model_checkpoint_path) == f"ckpt-{steps[-1]}"
    return steps


def checkpoint_files(model_dir):
    """Steps of every `ckpt-N.index` on disk (pruned checkpoints are gone)."""
    return sorted(int(re.match(r"ckpt-(\d+)\.index$", name).group(1))
                  for name in os.listdir(model_dir) if re.match(r"ckpt-\d+\.index$", name))


def saved_steps(log):
    """Steps of the 'Saved checkpoint .../ckpt-N.' lines of a run's log, in order."""
    return [int(n) for n in re.findall(r"Saved checkpoint \S*ckpt-(\d+)\.\s*$", log, re.M)]


def checkpoint_values(path):
    """{variable name: array} of a checkpoint, without the object graph."""
    reader = tf.train.load_checkpoint(path)
    # Skips the object graph and dataset iterator states (variant tensors NumPy cannot hold).
    return {name: reader.get_tensor(name)
            for name, dtype in reader.get_variable_to_dtype_map().items()
            if name != "_CHECKPOINTABLE_OBJECT_GRAPH" and dtype != tf.variant}


def mock_bias(path):
    """The mock model's bias (its only variable of shape [1]) in a checkpoint."""
    (bias,) = [v for v in checkpoint_values(path).values() if v.shape == (1,)]
    return float(bias[0])


def mock_loss_slope():
    """d(loss)/d(step) of the mock experiment: -lr * (|mean(x)|^2 + 1)."""
    x, _ = workloads.make_workload_batch("mock", 2, seed=0)
    return -LEARNING_RATE * (float(np.sum(np.mean(x, axis=0) ** 2)) + 1.0)


def copy_checkpoints(source, destination):
    """Copies only the checkpoints (and their state file) of `source` into a new directory."""
    os.makedirs(destination)
    for name in os.listdir(source):
        if name == "checkpoint" or name.startswith("ckpt-"):
            shutil.copy2(os.path.join(source, name), destination)
    return destination


# ------------------------------------------------------------------------------------------
# mock: train to 20, then resume to 40.

MOCK = dict(steps_per_loop=5, summary_interval=10, checkpoint_interval=10, max_to_keep=2,
            validation_interval=10, validation_steps=2)


@pytest.fixture(scope="module")
def mock_runs(tmp_path_factory):
    """mock `train` to 20, then again with train_steps=40 on the same model_dir.

    Returns the first run's directory as a snapshot, the resumed directory and both logs.
    """
    base = tmp_path_factory.mktemp("mock_train")
    model_dir = str(base / "model")
    first = lite_train_here("--experiment=mock", "--mode=train", f"--model_dir={model_dir}",
                            "--params_override=" + overrides(train_steps=20, **MOCK))
    snapshot = str(base / "after_20")
    shutil.copytree(model_dir, snapshot)
    second = lite_train_here("--experiment=mock", "--mode=train", f"--model_dir={model_dir}",
                             "--params_override=" + overrides(train_steps=40, **MOCK))
    return dict(first_dir=snapshot, first_log=first.logged, dir=model_dir,
                second_log=second.logged)


def test_train_checkpoints_at_interval_and_prunes_to_max_to_keep(mock_runs):
    # The first loop end saves (nothing saved yet), then every checkpoint_interval, then the end.
    assert saved_steps(mock_runs["first_log"]) == [5, 15, 20]
    assert kept_checkpoints(mock_runs["first_dir"]) == [15, 20]
    assert checkpoint_files(mock_runs["first_dir"]) == [15, 20]
    assert abs(mock_bias(os.path.join(mock_runs["first_dir"], "ckpt-20")) - 0.8) < 1e-6


def test_train_writes_params_and_gin_config_and_training_summaries(mock_runs):
    model_dir = mock_runs["first_dir"]
    with open(os.path.join(model_dir, "params.yaml")) as f:
        params = yaml.safe_load(f)
    assert params["trainer"]["train_steps"] == 20
    assert params["trainer"]["steps_per_loop"] == 5
    assert params["task"]["workload"] == "mock"
    assert sorted(os.listdir(model_dir)) == sorted(
        ["checkpoint", "ckpt-15.data-00000-of-00001", "ckpt-15.index",
         "ckpt-20.data-00000-of-00001", "ckpt-20.index", "operative_config.train.gin",
         "params.yaml", "train"])  # no evaluation directory in mode train
    scalars = read_scalars(os.path.join(model_dir, "train"))
    assert {"training_loss", "learning_rate", "steps_per_second", "accuracy"} <= set(scalars)
    for tag in ("training_loss", "learning_rate", "steps_per_second"):
        # After every loop of 5 steps, as Orbit writes them (summary_interval=10 only governs
        # summaries written inside the steps).
        assert sorted(scalars[tag]) == [5, 10, 15, 20], tag
    np.testing.assert_allclose(scalars["learning_rate"][20], LEARNING_RATE, rtol=1e-6)
    # Loop 15..20 averages the losses before steps 16..20, i.e. at weights after 15..19 steps.
    slope = mock_loss_slope()
    np.testing.assert_allclose(scalars["training_loss"][20] - scalars["training_loss"][10],
                               10 * slope, rtol=1e-4)
    assert scalars["steps_per_second"][20] > 0


def test_train_resumes_from_the_last_checkpoint(mock_runs):
    log = mock_runs["second_log"]
    assert re.search(r"Restored checkpoint \S*ckpt-20 \(global step 20\)", log), log[-3000:]
    assert re.findall(r"train \| step:\s+(\d+) \| steps/sec", log) == ["25", "30", "35", "40"]
    assert saved_steps(log) == [30, 40]
    assert kept_checkpoints(mock_runs["dir"]) == [30, 40]
    assert checkpoint_files(mock_runs["dir"]) == [30, 40]
    # The resumed run's summaries continue at 25..40 in a new event file.
    files = read_event_files(os.path.join(mock_runs["dir"], "train"))
    assert len(files) == 2
    assert sorted({step for step, _, _ in files[0][1]}) == [5, 10, 15, 20]
    assert sorted({step for step, _, _ in files[1][1]}) == [25, 30, 35, 40]
    scalars = read_scalars(os.path.join(mock_runs["dir"], "train"))
    diffs = np.diff([scalars["training_loss"][s] for s in (10, 20, 30, 40)])
    np.testing.assert_allclose(diffs, [10 * mock_loss_slope()] * 3, rtol=1e-4)


def test_resumed_weights_equal_a_straight_run(mock_runs, tmp_path):
    params = ll.get_exp_config("mock")
    params.override({"trainer": dict(MOCK, train_steps=40)})
    strategy = tf.distribute.get_strategy()
    with strategy.scope():
        task = ll.get_task(params.task)
    ll.run_experiment(distribution_strategy=strategy, task=task, mode="train", params=params,
                      model_dir=str(tmp_path), save_summary=False)
    straight = checkpoint_values(str(tmp_path / "ckpt-40"))
    resumed = checkpoint_values(os.path.join(mock_runs["dir"], "ckpt-40"))
    first = checkpoint_values(os.path.join(mock_runs["first_dir"], "ckpt-20"))
    assert sorted(straight) == sorted(resumed)
    for name in straight:
        np.testing.assert_array_equal(resumed[name], straight[name], err_msg=name)
    assert abs(mock_bias(os.path.join(mock_runs["dir"], "ckpt-40")) - 0.6) < 1e-6
    global_step = [n for n in straight if n.startswith("global_step")]
    assert global_step and int(resumed[global_step[0]]) == 40 and int(first[global_step[0]]) == 20


# ------------------------------------------------------------------------------------------
# mock: train_and_eval, train_and_post_eval, eval.

@pytest.fixture(scope="module")
def mock_train_and_eval(tmp_path_factory):
    model_dir = str(tmp_path_factory.mktemp("mock_tae") / "model")
    result = lite_train_here("--experiment=mock", "--mode=train_and_eval",
                             f"--model_dir={model_dir}", "--params_override=" + overrides(
                                 train_steps=20, validation_summary_subdir="my_eval", **MOCK))
    return model_dir, result.logged


def test_train_and_eval_evaluates_at_each_interval(mock_train_and_eval):
    model_dir, log = mock_train_and_eval
    assert saved_steps(log) == [5, 15, 20]
    assert kept_checkpoints(model_dir) == [15, 20]
    assert os.path.exists(os.path.join(model_dir, "operative_config.train_and_eval.gin"))
    assert os.path.exists(os.path.join(model_dir, "params.yaml"))
    assert not os.path.exists(os.path.join(model_dir, "validation"))
    scalars = read_scalars(os.path.join(model_dir, "my_eval"))
    assert set(scalars) == {"accuracy", "validation_loss", "steps_per_second"}
    assert sorted(scalars["validation_loss"]) == [10, 20]
    np.testing.assert_allclose(
        scalars["validation_loss"][20] - scalars["validation_loss"][10],
        10 * mock_loss_slope(), rtol=1e-4)
    train_scalars = read_scalars(os.path.join(model_dir, "train"))
    assert sorted(train_scalars["training_loss"]) == [5, 10, 15, 20]
    assert "validation_loss" not in train_scalars


@pytest.fixture(scope="module")
def mock_train_and_post_eval(tmp_path_factory):
    model_dir = str(tmp_path_factory.mktemp("mock_tpe") / "model")
    result = lite_train_here("--experiment=mock", "--mode=train_and_post_eval",
                             f"--model_dir={model_dir}",
                             "--params_override=" + overrides(train_steps=10, **MOCK))
    return model_dir, result.logged


def test_train_and_post_eval_evaluates_once_at_the_end(mock_train_and_post_eval):
    model_dir, log = mock_train_and_post_eval
    assert saved_steps(log) == [5, 10]
    assert kept_checkpoints(model_dir) == [5, 10]
    assert os.path.exists(os.path.join(model_dir, "operative_config.train_and_post_eval.gin"))
    assert os.path.exists(os.path.join(model_dir, "params.yaml"))
    scalars = read_scalars(os.path.join(model_dir, "validation"))
    assert sorted(scalars["validation_loss"]) == [10]
    assert sorted(scalars["accuracy"]) == [10]
    assert sorted(read_scalars(os.path.join(model_dir, "train"))["training_loss"]) == [5, 10]


def test_eval_evaluates_the_latest_checkpoint_and_writes_no_config(mock_runs, tmp_path):
    model_dir = copy_checkpoints(mock_runs["dir"], str(tmp_path / "model"))
    before = sorted(os.listdir(model_dir))
    result = lite_train_here("--experiment=mock", "--mode=eval", f"--model_dir={model_dir}",
                             "--params_override=" + overrides(train_steps=40, **MOCK))
    assert re.search(r"Restored checkpoint \S*ckpt-40 \(global step 40\)", result.logged)
    assert saved_steps(result.logged) == []
    # Pure evaluation: no params.yaml, no gin config, no new checkpoint, no training summaries.
    assert sorted(os.listdir(model_dir)) == sorted(before + ["validation"])
    scalars = read_scalars(os.path.join(model_dir, "validation"))
    assert sorted(scalars["validation_loss"]) == [40]
    # The trainer's last loop (35..40) averaged the losses after 35..39 steps: 3 steps before 40.
    train_loss_40 = read_scalars(os.path.join(mock_runs["dir"], "train"))["training_loss"][40]
    np.testing.assert_allclose(scalars["validation_loss"][40] - train_loss_40,
                               3 * mock_loss_slope(), rtol=1e-3)


# ------------------------------------------------------------------------------------------
# mock: continuous_eval beside a training process.

SLOW_MOCK_REGISTRY = '''
"""Registers `slow_mock`: the mock experiment with a sleep in each training step.

With `wait_for_eval_dir`, training step `wait_at_step` waits until an evaluation result (a
`validation_loss` event) is in that directory, so that an evaluator beside the trainer has
evaluated an early checkpoint before the later ones exist.
"""
import dataclasses
import glob
import os
import time

import tensorflow as tf

import lite_launcher as ll
from lite_launcher.experiments import workloads


@dataclasses.dataclass
class SlowMockConfig(workloads.WorkloadTaskConfig):
    step_seconds: float = 0.2
    wait_for_eval_dir: str = ""
    wait_at_step: int = 0


def has_evaluation(directory):
    for path in glob.glob(os.path.join(directory, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            if any(value.tag == "validation_loss" for value in event.summary.value):
                return True
    return False


@ll.register_task_cls(SlowMockConfig)
class SlowMockTask(workloads.WorkloadTask):
    # The sleep is in the step, not in the input pipeline: a numpy_function in tf.data
    # deadlocks the interpreter's exit (its prefetch thread waits for the GIL while the
    # garbage collector, holding it, waits for that thread).
    def train_step(self, inputs, model, optimizer, metrics=None):
        config = self.task_config
        seconds = config.step_seconds
        steps = [0]

        def sleep():
            steps[0] += 1
            if config.wait_for_eval_dir and steps[0] == config.wait_at_step:
                deadline = time.monotonic() + 300
                while not has_evaluation(config.wait_for_eval_dir):
                    if time.monotonic() > deadline:
                        raise RuntimeError("no evaluation result after 300 s")
                    time.sleep(0.2)
            time.sleep(seconds)
            return 0.0

        with tf.control_dependencies([tf.numpy_function(sleep, [], tf.float64, stateful=True)]):
            inputs = tf.nest.map_structure(tf.identity, inputs)
        return super().train_step(inputs, model, optimizer, metrics)


@ll.register_config_factory("slow_mock")
def slow_mock():
    config = workloads.mock()
    task = SlowMockConfig()
    task.override(config.task.as_dict(), is_strict=False)
    config.task = task
    return config
'''


@pytest.mark.slow
@pytest.mark.release(sibling="tests/test_soak_harness.py::"
                             "test_tiny_soak_run_samples_both_processes_and_writes_the_results_file")
def test_continuous_eval_beside_a_trainer(tmp_path):
    """A `continuous_eval` process beside a `train` process on one model_dir (the soak
    harness's tiny run in the suite starts the same pair, evaluating to the last step)."""
    (tmp_path / "slow_mock_registry.py").write_text(textwrap.dedent(SLOW_MOCK_REGISTRY))
    model_dir = str(tmp_path / "model")
    eval_dir = os.path.join(model_dir, "validation")
    # Step 6 waits for the evaluator's first result: ckpt-5 is then the only checkpoint, so the
    # order of events does not depend on how fast either process runs.
    config = overrides(train_steps=30, steps_per_loop=5, summary_interval=5,
                       checkpoint_interval=5, max_to_keep=10, validation_steps=2,
                       continuous_eval_timeout=600)
    config += f",task.step_seconds=0.1,task.wait_for_eval_dir={eval_dir},task.wait_at_step=6"
    common = ["--experiment=slow_mock", "--registry_imports=slow_mock_registry",
              f"--model_dir={model_dir}", "--params_override=" + config]
    evaluator = start_lite_train("--mode=continuous_eval", *common,
                                 extra_pythonpath=str(tmp_path))
    trainer = start_lite_train("--mode=train", *common, extra_pythonpath=str(tmp_path))
    try:
        _, trainer_log = trainer.communicate(timeout=SUBPROCESS_TIMEOUT)
        assert trainer.returncode == 0, trainer_log[-4000:]
        # It must stop by itself after the last checkpoint, not after the 600 s timeout.
        _, evaluator_log = evaluator.communicate(timeout=SUBPROCESS_TIMEOUT)
    finally:
        for process in (trainer, evaluator):
            if process.poll() is None:
                process.kill()
                process.wait()
    assert evaluator.returncode == 0, evaluator_log[-4000:]
    assert saved_steps(trainer_log) == [5, 10, 15, 20, 25, 30]

    scalars = read_scalars(eval_dir)
    evaluated = sorted(scalars["validation_loss"])
    # The newest checkpoint at each look: the first, maybe some while training ran, the last.
    assert evaluated[0] == 5 and evaluated[-1] == 30, evaluator_log[-3000:]
    assert set(evaluated) <= {5, 10, 15, 20, 25, 30}
    restored = [int(n) for n in re.findall(r"restoring model from \S*ckpt-(\d+)", evaluator_log)]
    assert restored == evaluated
    # Each evaluation saw the weights of its own checkpoint (the loss is linear in the step).
    slope = mock_loss_slope()
    losses = scalars["validation_loss"]
    for step in evaluated:
        np.testing.assert_allclose(losses[step] - losses[30], (step - 30) * slope, rtol=1e-3,
                                   atol=1e-6)
    # Checkpoints were evaluated as they appeared, not all after the trainer finished.
    first_eval_time = event_wall_times(eval_dir, "validation_loss")[0][0]
    last_checkpoint_time = os.path.getmtime(os.path.join(model_dir, "ckpt-30.index"))
    assert first_eval_time < last_checkpoint_time


# ------------------------------------------------------------------------------------------
# digits_mlp: train_and_eval -> eval and continuous_eval on a copy -> train -> train_and_post_eval.

DIGITS = dict(steps_per_loop=10, summary_interval=10, checkpoint_interval=20, max_to_keep=2,
              validation_interval=20)


def digits_args(mode, model_dir, train_steps):
    return ["--experiment=digits_mlp", f"--mode={mode}", f"--model_dir={model_dir}",
            "--params_override=" + overrides(train_steps=train_steps,
                                             continuous_eval_timeout=600, **DIGITS)]


@pytest.fixture(scope="module")
def digits_runs(tmp_path_factory):
    """digits_mlp through the driver in this process: train_and_eval to 40; eval and
    continuous_eval on a copy of its checkpoints; then train to 60 and train_and_post_eval to
    80 on the same model_dir."""
    base = tmp_path_factory.mktemp("digits")
    model_dir = str(base / "model")
    runs = {"dir": model_dir}
    runs["train_and_eval"] = lite_train_here(*digits_args("train_and_eval", model_dir, 40)).logged
    runs["after_tae"] = str(base / "after_tae")
    shutil.copytree(model_dir, runs["after_tae"])
    runs["eval_dir"] = copy_checkpoints(model_dir, str(base / "eval_only"))
    # Two evaluation-only runs on one directory, one after the other.
    runs["eval"] = lite_train_here(*digits_args("eval", runs["eval_dir"], 40)).logged
    start = time.monotonic()
    runs["continuous_eval"] = lite_train_here(
        *digits_args("continuous_eval", runs["eval_dir"], 40)).logged
    runs["continuous_eval_seconds"] = time.monotonic() - start
    for mode, steps in (("train", 60), ("train_and_post_eval", 80)):
        runs[mode] = lite_train_here(*digits_args(mode, model_dir, steps)).logged
    return runs


def test_digits_train_and_eval(digits_runs):
    model_dir = digits_runs["after_tae"]
    assert saved_steps(digits_runs["train_and_eval"]) == [10, 30, 40]
    assert kept_checkpoints(model_dir) == [30, 40]
    assert os.path.exists(os.path.join(model_dir, "operative_config.train_and_eval.gin"))
    with open(os.path.join(model_dir, "params.yaml")) as f:
        assert yaml.safe_load(f)["trainer"]["validation_interval"] == 20
    val = read_scalars(os.path.join(model_dir, "validation"))
    assert {"accuracy", "validation_loss"} <= set(val)
    assert sorted(val["accuracy"]) == [20, 40]
    assert 0.8 < val["accuracy"][40] <= 1.0  # chance is 0.1
    assert val["validation_loss"][40] < val["validation_loss"][20] < np.log(10)
    train = read_scalars(os.path.join(model_dir, "train"))
    assert {"training_loss", "learning_rate", "steps_per_second", "accuracy"} <= set(train)
    assert sorted(train["training_loss"]) == [10, 20, 30, 40]
    np.testing.assert_allclose(train["learning_rate"][40], 0.003, rtol=1e-6)


def test_digits_eval_and_continuous_eval_on_checkpoints_only(digits_runs):
    eval_dir = digits_runs["eval_dir"]
    # No params.yaml / gin config: those are written by training modes only.
    assert sorted(os.listdir(eval_dir)) == sorted(
        ["checkpoint", "ckpt-30.data-00000-of-00001", "ckpt-30.index",
         "ckpt-40.data-00000-of-00001", "ckpt-40.index", "validation"])
    files = read_event_files(os.path.join(eval_dir, "validation"))
    assert len(files) == 2  # one per run: eval and continuous_eval
    trained = read_scalars(os.path.join(digits_runs["after_tae"], "validation"))
    for _, events in files:
        values = {tag: value for step, tag, value in events if step == 40}
        assert {step for step, _, _ in events} == {40}
        # Same weights, same data: the training run's evaluation at step 40, exactly.
        assert values["accuracy"] == trained["accuracy"][40]
        assert values["validation_loss"] == trained["validation_loss"][40]
    assert re.search(r"Restored checkpoint \S*ckpt-40", digits_runs["eval"])
    # ckpt-40 is at train_steps: continuous_eval stops after it, not after the 600 s timeout.
    assert re.search(r"restoring model from \S*ckpt-40", digits_runs["continuous_eval"])
    assert digits_runs["continuous_eval_seconds"] < 120


def test_digits_train_then_train_and_post_eval_resume(digits_runs):
    model_dir = digits_runs["dir"]
    assert re.search(r"Restored checkpoint \S*ckpt-40 \(global step 40\)", digits_runs["train"])
    assert saved_steps(digits_runs["train"]) == [60]
    assert saved_steps(digits_runs["train_and_post_eval"]) == [80]
    assert kept_checkpoints(model_dir) == [60, 80]
    for mode in ("train_and_eval", "train", "train_and_post_eval"):
        assert os.path.exists(os.path.join(model_dir, f"operative_config.{mode}.gin")), mode
    with open(os.path.join(model_dir, "params.yaml")) as f:
        assert yaml.safe_load(f)["trainer"]["train_steps"] == 80  # the latest run's
    train = read_scalars(os.path.join(model_dir, "train"))
    assert sorted(train["training_loss"]) == [10, 20, 30, 40, 50, 60, 70, 80]
    val = read_scalars(os.path.join(model_dir, "validation"))
    # train_and_eval at 20 and 40; mode train does not evaluate; the post-evaluation at 80.
    assert sorted(val["accuracy"]) == [20, 40, 80]
    assert val["accuracy"][80] > 0.85


# ------------------------------------------------------------------------------------------
# User errors: one line, exit code 2.

@pytest.mark.parametrize("args, message", [
    (["--experiment=mock", "--mode=trian", "--model_dir={tmp}"], "Unknown mode 'trian'"),
    (["--experiment=mock", "--mode=train"], "--model_dir is required"),
    (["--experiment=mokc", "--mode=train", "--model_dir={tmp}"],
     "Unknown experiment 'mokc'. Did you mean 'mock'?"),
])
def test_user_errors_exit_2_with_one_line(tmp_path, args, message):
    model_dir = str(tmp_path / "model")
    result = lite_train(*[a.format(tmp=model_dir) for a in args], expect_rc=2)
    lines = [line for line in result.stderr.splitlines() if line.startswith("lite-train: ")]
    assert len(lines) == 1 and message in lines[0], result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert not os.path.exists(model_dir)  # nothing written for a bad command


# ------------------------------------------------------------------------------------------
# In-process: eval_logs of run_experiment, best-checkpoint export.

def mock_params(**trainer):
    params = ll.get_exp_config("mock")
    params.override({"trainer": dict(MOCK, **trainer)})
    return params


def run_mock(mode, model_dir, params, **kwargs):
    strategy = tf.distribute.get_strategy()
    with strategy.scope():
        task = ll.get_task(params.task)
    return ll.run_experiment(distribution_strategy=strategy, task=task, mode=mode,
                             params=params, model_dir=str(model_dir), **kwargs)


def test_eval_logs_hold_post_eval_metrics_only_with_a_post_evaluation(tmp_path):
    params = mock_params(train_steps=10)
    slope = mock_loss_slope()
    logs = {}
    for name, mode, post in [("train", "train", False), ("train_post", "train", True),
                             ("tpe", "train_and_post_eval", False),
                             ("tae", "train_and_eval", False)]:
        model, logs[name] = run_mock(mode, tmp_path / name, params, run_post_eval=post)
        assert isinstance(model, keras.Model)
    for mode in ("eval", "continuous_eval"):
        _, logs[mode] = run_mock(mode, tmp_path / "tae", params)
    assert logs["train"] == {} and logs["tae"] == {}
    assert logs["eval"] == {} and logs["continuous_eval"] == {}
    for name in ("train_post", "tpe"):
        assert {"accuracy", "validation_loss"} <= set(logs[name]), logs[name]
    # Same training (deterministic): same post-evaluation. The loss at step 10 is 10 slopes below
    # the untrained model's.
    assert float(logs["train_post"]["validation_loss"]) == float(logs["tpe"]["validation_loss"])
    x, _ = workloads.make_workload_batch("mock", 2, seed=0)
    initial = float(np.mean(workloads.build_workload_model("mock")(x)))
    np.testing.assert_allclose(float(logs["tpe"]["validation_loss"]), initial + 10 * slope,
                               rtol=1e-4)


def test_checkpoint_interval_zero_saves_nothing_and_an_interval_saves_as_tfm(tmp_path):
    # TFM hands trainer.checkpoint_interval to the CheckpointManager; Orbit's outer loop saves
    # only with a truthy interval: with 0, no checkpoint at all, not even at the end.
    run_mock("train_and_eval", tmp_path / "zero", mock_params(train_steps=10,
                                                              checkpoint_interval=0))
    assert tf.train.latest_checkpoint(str(tmp_path / "zero")) is None
    assert checkpoint_files(str(tmp_path / "zero")) == []
    assert sorted(read_scalars(str(tmp_path / "zero" / "train"))["training_loss"]) == [5, 10]
    # TFM's default interval (1000): the first loop's end (nothing saved yet) and the end.
    run_mock("train", tmp_path / "default", mock_params(train_steps=10,
                                                        checkpoint_interval=1000))
    assert checkpoint_files(str(tmp_path / "default")) == [5, 10]


def test_resumed_train_and_eval_counts_eval_interval_from_the_restart(tmp_path):
    run_mock("train", tmp_path, mock_params(train_steps=5))
    run_mock("train_and_eval", tmp_path, mock_params(train_steps=25, validation_interval=10))
    # As Orbit: every validation_interval steps from step 5, then at train_steps.
    files = read_event_files(str(tmp_path / "validation"))
    assert [sorted({s for s, tag, _ in events if tag == "validation_loss"})
            for _, events in files] == [[15, 25]]
    checkpoints = checkpoint_files(str(tmp_path))
    modified = os.path.getmtime(tmp_path / "ckpt-25.index")
    # Already trained: train_and_eval does nothing (no evaluation, no new checkpoint).
    _, logs = run_mock("train_and_eval", tmp_path,
                       mock_params(train_steps=25, validation_interval=10))
    assert logs == {}
    assert len(read_event_files(str(tmp_path / "validation"))) == 1
    assert checkpoint_files(str(tmp_path)) == checkpoints
    assert os.path.getmtime(tmp_path / "ckpt-25.index") == modified


@pytest.mark.parametrize("comp, expected_step", [("higher", 5), ("lower", 20)])
def test_best_exporter_picks_the_right_checkpoint(tmp_path, comp, expected_step):
    # The mock's validation loss falls linearly: "higher" keeps the first, "lower" the last.
    params = mock_params(train_steps=20, validation_interval=5, checkpoint_interval=5,
                         max_to_keep=10, best_checkpoint_export_subdir="best",
                         best_checkpoint_eval_metric="validation_loss",
                         best_checkpoint_metric_comp=comp)
    _, eval_logs = run_mock("train_and_eval", tmp_path, params, run_post_eval=True)
    pick = max if comp == "higher" else min
    evaluations = read_scalars(str(tmp_path / "validation"))
    losses = evaluations["validation_loss"]
    assert sorted(losses) == [5, 10, 15, 20]
    for step, best in evaluations["best_validation_loss"].items():
        assert best == pick(v for s, v in losses.items() if s <= step), step
    assert float(eval_logs["best_validation_loss"]) == pytest.approx(losses[expected_step])
    with open(tmp_path / "best" / "info.json") as f:
        info = json.load(f)
    assert info["best_ckpt_global_step"] == expected_step
    assert info["validation_loss"] == pytest.approx(losses[expected_step], rel=1e-6)
    exported = tf.train.latest_checkpoint(str(tmp_path / "best"))
    # Named as TFM names it: best_ckpt-<the checkpoint's save counter after this save>.
    number = int(checkpoint_values(exported)["save_counter/.ATTRIBUTES/VARIABLE_VALUE"])
    assert exported == str(tmp_path / "best" / f"best_ckpt-{number}")
    assert sorted(os.listdir(tmp_path / "best")) == sorted(
        ["checkpoint", "info.json", f"best_ckpt-{number}.index",
         f"best_ckpt-{number}.data-00000-of-00001"])
    # The exported weights are those of the regular checkpoint at that step.
    regular = checkpoint_values(str(tmp_path / f"ckpt-{expected_step}"))
    best = checkpoint_values(exported)
    assert sorted(best) == sorted(regular)
    for name, value in regular.items():
        if not name.startswith("save_counter"):  # counts saves, not part of the state
            np.testing.assert_array_equal(best[name], value, err_msg=name)
    assert abs(mock_bias(exported) - (1 - LEARNING_RATE * expected_step)) < 1e-6


def test_digits_resume_with_iterator_checkpoint_equals_straight_run(tmp_path):
    # Without trainer.checkpoint_train_iterator a restart reads the shuffled data from the top,
    # so only with it does a resumed run match a straight one.
    def run(model_dir, train_steps):
        params = ll.get_exp_config("digits_mlp")
        params.override({"trainer": dict(DIGITS, train_steps=train_steps,
                                         checkpoint_train_iterator=True)})
        strategy = tf.distribute.get_strategy()
        with strategy.scope():
            task = ll.get_task(params.task)
        ll.run_experiment(distribution_strategy=strategy, task=task, mode="train",
                          params=params, model_dir=str(model_dir), save_summary=False)

    run(tmp_path / "resumed", 20)
    run(tmp_path / "resumed", 40)
    run(tmp_path / "straight", 40)
    resumed = checkpoint_values(str(tmp_path / "resumed" / "ckpt-40"))
    straight = checkpoint_values(str(tmp_path / "straight" / "ckpt-40"))
    compared = 0
    for name, value in straight.items():
        if value.dtype.kind in "fi":
            np.testing.assert_array_equal(resumed[name], value, err_msg=name)
            compared += 1
    assert compared >= 4
