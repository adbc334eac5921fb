"""Tests of the `lite-train` driver (lite_launcher/commands/train.py): --dry_run, gin, preemption retry.

`--dry_run` and the gin flags are the CLI's behaviour: they run the driver from its flags in
this process (`cli.run_lite_train_in_process`; `--help`, whose exit code is the point, in a
subprocess); the retry after a preemption-style error runs in-process through
`main.run_with_preemption_recovery`, with a train action that raises the error.

The `mock` experiment trains in closed form: its bias after `s` steps is `b0 - 0.01 s`
(b0 = 1 unless a gin binding changes it), so checkpoints tell exactly how many steps ran.
"""

import os
import textwrap

import numpy as np
import pytest
import tensorflow as tf
import yaml

import lite_launcher as ll
from lite_launcher.commands import train as main_lib
from lite_launcher.common import model_dir_lock
from lite_launcher.core import actions as actions_lib

from cli import run_lite_train_in_process
from test_modes import checkpoint_files, lite_train, lite_train_here, mock_bias, overrides

MOCK = dict(steps_per_loop=5, checkpoint_interval=5, max_to_keep=10, summary_interval=5)


# ------------------------------------------------------------------------------------------
# --dry_run

def test_dry_run_prints_the_resolved_config_and_writes_nothing(tmp_path):
    model_dir = tmp_path / "model"
    config_file = tmp_path / "extra.yaml"
    config_file.write_text("trainer:\n  train_steps: 55\n  steps_per_loop: 5\n")
    result = lite_train_here("--experiment=mock", "--dry_run", f"--model_dir={model_dir}",
                             f"--config_file={config_file}",
                             "--params_override=" + overrides(train_steps=77, max_to_keep=3))
    printed = yaml.safe_load(result.stdout)
    # Default -> config file -> params_override, in TFM's order.
    assert printed["trainer"]["train_steps"] == 77
    assert printed["trainer"]["steps_per_loop"] == 5
    assert printed["trainer"]["max_to_keep"] == 3
    assert printed["task"]["workload"] == "mock"
    expected = ll.get_exp_config("mock")
    expected.override({"trainer": {"train_steps": 77, "steps_per_loop": 5, "max_to_keep": 3}})
    assert printed == yaml.safe_load(expected.to_yaml())
    assert not model_dir.exists()  # a dry run writes nothing, even with --model_dir


def test_dry_run_needs_no_mode_or_model_dir_and_still_rejects_a_bad_override(tmp_path):
    result = lite_train_here("--experiment=mock", "--dry_run")
    assert yaml.safe_load(result.stdout)["task"]["workload"] == "mock"
    bad = run_lite_train_in_process("--experiment=mock", "--dry_run",
                                    "--params_override=trainer.train_stepz=5")
    assert bad.returncode == 2
    assert "train_stepz" in bad.stderr and bad.stdout == ""


# ------------------------------------------------------------------------------------------
# --help

DRIVER_FLAGS = ("experiment", "mode", "model_dir", "config_file", "params_override", "gin_file",
                "gin_params", "registry_imports", "list_experiments", "dry_run",
                "continuous_eval_max_wait_s", "enable_async_checkpointing", "tpu")


def test_help_lists_the_driver_flags_with_their_help_and_exits_0():
    result = lite_train("--help")
    assert "USAGE: lite-train" in result.stdout
    main_lib.define_lite_train_flags()
    for name in DRIVER_FLAGS:
        # A bool flag prints as --[no]name.
        assert (f"--{name}:" in result.stdout or f"--[no]{name}:" in result.stdout), name
        first_words = " ".join(main_lib.FLAGS[name].help.split()[:4])
        assert first_words in " ".join(result.stdout.split()), (name, first_words)
    assert "Try --helpfull" in result.stdout
    # -h and --helpshort print the same; --helpfull still prints absl's full list.
    assert lite_train("-h").stdout == result.stdout
    full = lite_train("--helpfull").stdout
    assert "--experiment" in full and "--verbosity" in full


def test_driver_applies_the_runtime_thread_settings(tmp_path):
    # A bad gpu_thread_mode is refused by strategy.apply_performance_settings, which the
    # driver calls before building the strategy: one line, exit 2, model_dir untouched.
    model_dir = tmp_path / "model"
    result = run_lite_train_in_process("--experiment=mock", "--mode=train",
                                       f"--model_dir={model_dir}",
                                       "--params_override=runtime.gpu_thread_mode=gpu_privat")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "lite-train: error: runtime.gpu_thread_mode 'gpu_privat' is not one of global, "
        "gpu_private, gpu_shared.")
    assert not model_dir.exists()


# ------------------------------------------------------------------------------------------
# --gin_file / --gin_params

GIN_REGISTRY = '''
"""Registers `gin_mock`: the mock experiment whose initial bias is a gin-configurable value."""
import dataclasses

import gin

import lite_launcher as ll
from lite_launcher.experiments import workloads


@gin.configurable
def initial_bias(value=1.0):
    return value


@gin.configurable
def label_smoothing_note(text="none"):
    return text


@dataclasses.dataclass
class GinMockConfig(workloads.WorkloadTaskConfig):
    pass


@ll.register_task_cls(GinMockConfig)
class GinMockTask(workloads.WorkloadTask):
    def build_model(self):
        model = super().build_model()
        model.get_layer("dense_0").bias.assign([initial_bias()])
        label_smoothing_note()  # bound in the gin file: shows in the operative config
        return model


@ll.register_config_factory("gin_mock")
def gin_mock():
    config = workloads.mock()
    task = GinMockConfig()
    task.override(config.task.as_dict(), is_strict=False)
    config.task = task
    return config
'''


def test_gin_file_and_gin_params_configure_the_run_and_are_saved(tmp_path, monkeypatch):
    (tmp_path / "gin_mock_registry.py").write_text(textwrap.dedent(GIN_REGISTRY))
    monkeypatch.syspath_prepend(str(tmp_path))  # --registry_imports finds it
    gin_file = tmp_path / "run.gin"
    gin_file.write_text("initial_bias.value = 2.0\nlabel_smoothing_note.text = 'from file'\n")
    model_dir = tmp_path / "model"
    common = ["--experiment=gin_mock", "--registry_imports=gin_mock_registry", "--mode=train",
              f"--model_dir={model_dir}",
              "--params_override=" + overrides(train_steps=10, **MOCK)]
    lite_train_here(*common, f"--gin_file={gin_file}")
    # The bias started at the gin file's 2.0 and took 10 steps of 0.01.
    assert abs(mock_bias(str(model_dir / "ckpt-10")) - (2.0 - 0.1)) < 1e-6
    with open(model_dir / "operative_config.train.gin") as f:
        operative = f.read()
    assert "initial_bias.value = 2.0" in operative
    assert "label_smoothing_note.text = 'from file'" in operative

    # --gin_params after --gin_file: its binding wins. A resumed run keeps the restored bias,
    # so this one starts in a new model_dir.
    other_dir = tmp_path / "model2"
    lite_train_here(*[a.replace(str(model_dir), str(other_dir)) for a in common],
                    f"--gin_file={gin_file}", "--gin_params=initial_bias.value = -0.5")
    assert abs(mock_bias(str(other_dir / "ckpt-10")) - (-0.5 - 0.1)) < 1e-6
    with open(other_dir / "operative_config.train.gin") as f:
        assert "initial_bias.value = -0.5" in f.read()


# ------------------------------------------------------------------------------------------
# Retry after a preemption-style error.

def mock_params(**trainer):
    params = ll.get_exp_config("mock")
    params.override({"trainer": dict(MOCK, **trainer)})
    return params


@pytest.fixture
def failing_action(monkeypatch):
    """Adds a train action that raises `errors[attempt]` at the loop ending at `fail_at`.

    Returns the record: `seen` holds (attempt, global step) for every loop end.
    """
    record = {"seen": [], "attempt": 0, "errors": [], "fail_at": None}
    original = actions_lib.get_train_actions

    def get_train_actions(params, trainer, model_dir, checkpoint_manager=None, **kwargs):
        attempt = record["attempt"]
        record["attempt"] += 1

        def action(_):
            step = int(trainer.global_step.numpy())
            record["seen"].append((attempt, step))
            errors = record["errors"]
            if step == record["fail_at"] and attempt < len(errors) and errors[attempt]:
                raise errors[attempt](None, None, f"injected at step {step}")

        return original(params, trainer, model_dir, checkpoint_manager=checkpoint_manager,
                        **kwargs) + [action]

    monkeypatch.setattr(actions_lib, "get_train_actions", get_train_actions)
    return record


def test_a_preemption_error_is_retried_from_the_last_checkpoint(tmp_path, failing_action):
    failing_action.update(fail_at=15, errors=[tf.errors.UnavailableError])
    main_lib.run_with_preemption_recovery(mock_params(train_steps=20), "train", str(tmp_path))
    # Attempt 0 saved 5 and 10 and failed at the end of loop 15, before saving it; attempt 1
    # restored ckpt-10 and trained on.
    assert failing_action["seen"] == [(0, 5), (0, 10), (0, 15), (1, 15), (1, 20)]
    assert checkpoint_files(str(tmp_path)) == [5, 10, 15, 20]
    # 20 steps in all, as in a straight run: the lost 5 steps were trained again, not twice.
    assert abs(mock_bias(str(tmp_path / "ckpt-20")) - 0.8) < 1e-6


def test_other_errors_are_not_retried_and_retries_are_bounded(tmp_path, failing_action):
    failing_action.update(fail_at=10, errors=[tf.errors.InvalidArgumentError])
    with pytest.raises(tf.errors.InvalidArgumentError, match="injected at step 10"):
        main_lib.run_with_preemption_recovery(mock_params(train_steps=20), "train",
                                              str(tmp_path / "a"))
    assert failing_action["attempt"] == 1

    failing_action.update(attempt=0, seen=[],
                          errors=[tf.errors.AbortedError] * (main_lib.MAX_PREEMPTION_RETRIES + 1))
    with pytest.raises(tf.errors.AbortedError):
        main_lib.run_with_preemption_recovery(mock_params(train_steps=20), "train",
                                              str(tmp_path / "b"))
    assert failing_action["attempt"] == main_lib.MAX_PREEMPTION_RETRIES + 1
    # Every attempt resumed from ckpt-5 and failed again at 10.
    assert failing_action["seen"] == [(0, 5), (0, 10)] + [
        (attempt, 10) for attempt in range(1, main_lib.MAX_PREEMPTION_RETRIES + 1)]
    np.testing.assert_allclose(mock_bias(str(tmp_path / "b" / "ckpt-5")), 0.95, atol=1e-6)


# ------------------------------------------------------------------------------------------
# One config check, one model_dir lock per run

def test_an_in_process_lite_train_validates_the_config_once_and_releases_the_lock(
        tmp_path, monkeypatch):
    checked = []
    original = ll.ExperimentConfig.validate

    def counting_validate(self):
        checked.append(self.trainer.train_steps)
        original(self)

    monkeypatch.setattr(ll.ExperimentConfig, "validate", counting_validate)
    model_dir = tmp_path / "model"
    monkeypatch.setattr("sys.argv", [
        "lite-train", "--experiment=mock", "--mode=train", f"--model_dir={model_dir}",
        "--params_override=" + overrides(train_steps=2, steps_per_loop=2,
                                         checkpoint_interval=2, summary_interval=2)])
    with pytest.raises(SystemExit) as exit_request:
        main_lib.run()
    assert exit_request.value.code in (0, None)
    # The driver checks the config before TensorFlow loads; the runner finds it unchanged.
    assert checked == [2]
    assert checkpoint_files(str(model_dir)) == [2]
    assert not model_dir_lock.held(str(model_dir))


def test_a_runner_refused_while_being_built_leaves_no_directory_and_no_lock(
        tmp_path, monkeypatch):
    model_dir = tmp_path / "new" / "model"

    def refuse(self):
        assert model_dir_lock.held(str(model_dir))  # locked before anything is built
        raise ll.ConfigError("no model today")

    params = mock_params(train_steps=2)
    task = ll.get_task(params.task)
    monkeypatch.setattr(type(task), "build_model", refuse)
    with pytest.raises(ll.ConfigError, match="no model today"):
        ll.ExperimentRunner(distribution_strategy=None, task=task, mode="train", params=params,
                            model_dir=str(model_dir))
    assert not model_dir_lock.held(str(model_dir))
    assert os.listdir(tmp_path) == []  # both directories it created are gone


def test_a_runner_runs_once(tmp_path):
    params = mock_params(train_steps=2, steps_per_loop=2, checkpoint_interval=2,
                         summary_interval=2)
    runner = ll.ExperimentRunner(distribution_strategy=None, task=ll.get_task(params.task),
                                 mode="train", params=params, model_dir=str(tmp_path))
    assert model_dir_lock.held(str(tmp_path))
    runner.run()
    assert not model_dir_lock.held(str(tmp_path))
    with pytest.raises(RuntimeError, match="runs once"):
        runner.run()
