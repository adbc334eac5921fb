"""Bad input to `lite-train`: one line on stderr, exit code 2, model_dir untouched.

Every row runs the real driver, `lite_launcher.commands.train.run()` with the row's argv, in this
process (`run()` runs afresh each time); two rows also run as a `lite-train` subprocess, for
the real exit code and a stderr that stays one line while the process shuts down.
"Untouched" means the same files, sizes, mtimes and SHA-256 digests before and after; a
model_dir that did not exist must still not exist. The rows a user most often gets wrong (a
wrong experiment name, a missing config file, a malformed override, a vision experiment's unknown
key or bad value) and `--help` are refused before TensorFlow is imported: checked in a fresh
interpreter.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from typing import Callable, List, Optional, Sequence

import gin
import pytest
import tensorflow as tf

from lite_launcher.commands import train as main_lib
from reliability_utils import (ERROR_PREFIX, FAST_DIGITS, REPO_ROOT, nested, override_json,
                               run_lite_train, snapshot, subprocess_env)

# The shipped checkpoint of the "trained" model_dir: digits_mlp with one hidden layer of 16.
TRAINED_HIDDEN = 16


@dataclasses.dataclass(frozen=True)
class Row:
    """One bad input: the flags (given the row's model_dir and a scratch dir) and what the
    one-line error must say."""

    name: str
    args: Callable[[str, str], Sequence[str]]
    expect: Sequence[str]
    # "trained": model_dir holds a digits_mlp checkpoint, params.yaml and summaries;
    # "fresh": model_dir does not exist; "file": model_dir is a regular file;
    # "under_file": model_dir's parent is a regular file; None: no --model_dir flag.
    model_dir: Optional[str] = "trained"


def _train(model_dir, *extra):
    return ["--experiment", "digits_mlp", "--mode", "train", "--model_dir", model_dir, *extra]


def _override(model_dir, flat):
    return _train(model_dir, "--params_override", override_json(flat))


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


ROWS: List[Row] = [
    Row("unknown_experiment",
        lambda d, w: ["--experiment", "digits_mpl", "--mode", "train", "--model_dir", d],
        ["Unknown experiment 'digits_mpl'", "Did you mean 'digits_mlp'"]),
    Row("unknown_mode",
        lambda d, w: ["--experiment", "digits_mlp", "--mode", "trian", "--model_dir", d],
        ["Unknown mode 'trian'", "train_and_eval", "continuous_eval"]),
    Row("missing_model_dir",
        lambda d, w: ["--experiment", "digits_mlp", "--mode", "train"],
        ["--model_dir is required"], model_dir=None),
    Row("unknown_override_key",
        lambda d, w: _train(d, "--params_override", "task.model.hidden_sizez=[8]"),
        ["'task.model.hidden_sizez'", "Did you mean 'hidden_sizes'"]),
    Row("unknown_nested_override_key",
        lambda d, w: _override(d, {"trainer.optimizer_config.optimizer.adam.beta_3": 0.5}),
        ["'trainer.optimizer_config.optimizer.adam.beta_3'"]),
    Row("wrong_value_type",
        lambda d, w: _train(d, "--params_override", "trainer.train_steps=many"),
        ["trainer.train_steps", "int", "'many'"]),
    Row("malformed_yaml_config_file",
        lambda d, w: _train(d, "--config_file",
                            _write(os.path.join(w, "bad.yaml"), "trainer: {train_steps: [\n")),
        ["bad.yaml", "not valid YAML"]),
    Row("malformed_json_config_file",
        lambda d, w: _train(d, "--config_file",
                            _write(os.path.join(w, "bad.json"), '{"trainer": {"train_steps": }')),
        ["bad.json", "not valid"]),
    Row("malformed_yaml_params_override",
        lambda d, w: _train(d, "--params_override", "{trainer: [1,"),
        ["--params_override", "not valid YAML"]),
    Row("malformed_json_params_override",
        lambda d, w: _train(d, "--params_override", '{"trainer": {"train_steps": }'),
        ["--params_override", "not valid"]),
    Row("missing_config_file",
        lambda d, w: _train(d, "--config_file", os.path.join(w, "no_such.yaml")),
        ["no_such.yaml", "does not exist"]),
    Row("steps_per_loop_zero",
        lambda d, w: _train(d, "--params_override", "trainer.steps_per_loop=0"),
        ["trainer.steps_per_loop (0)", "positive"]),
    Row("steps_per_loop_negative",
        lambda d, w: _train(d, "--params_override", "trainer.steps_per_loop=-5"),
        ["trainer.steps_per_loop (-5)", "positive"]),
    Row("summary_interval_not_a_multiple",
        lambda d, w: _train(d, "--params_override",
                            "trainer.steps_per_loop=100,trainer.summary_interval=150"),
        ["trainer.summary_interval (150)", "multiple of trainer.steps_per_loop (100)"]),
    Row("whole_set_eval_in_a_while_loop",
        lambda d, w: _train(d, "--params_override",
                            "trainer.validation_steps=-1,trainer.eval_tf_while_loop=true"),
        ["validation_steps", "eval_tf_while_loop"]),
    Row("unknown_distribution_strategy",
        lambda d, w: _train(d, "--params_override", "runtime.distribution_strategy=mirorred"),
        ["'mirorred'", "mirrored"]),
    Row("unknown_optimizer",
        lambda d, w: _train(d, "--params_override",
                            "trainer.optimizer_config.optimizer.type=adamm"),
        ["'adamm'", "trainer.optimizer_config.optimizer.type", "Did you mean 'adam'"]),
    Row("unknown_schedule",
        lambda d, w: _train(d, "--params_override",
                            "trainer.optimizer_config.learning_rate.type=cosin"),
        ["'cosin'", "trainer.optimizer_config.learning_rate.type", "Did you mean 'cosine'"]),
    Row("missing_init_checkpoint",
        lambda d, w: _override(d, {**FAST_DIGITS, "trainer.train_steps": 10,
                                   "task.init_checkpoint": os.path.join(w, "nowhere", "ckpt-7")}),
        ["task.init_checkpoint", os.path.join("nowhere", "ckpt-7"), "does not exist"],
        model_dir="fresh"),
    Row("checkpoint_of_another_model",
        lambda d, w: _override(d, {**FAST_DIGITS, "trainer.train_steps": 30,
                                   "task.model.hidden_sizes": [32]}),
        ["dense_0/kernel", f"(64, {TRAINED_HIDDEN})", "(64, 32)"]),
    Row("iterator_checkpoint_under_a_distribution_strategy",
        lambda d, w: _override(d, {**FAST_DIGITS, "trainer.train_steps": 30,
                                   "task.model.hidden_sizes": [TRAINED_HIDDEN],
                                   "runtime.distribution_strategy": "mirrored",
                                   "trainer.checkpoint_train_iterator": True}),
        ["trainer.checkpoint_train_iterator", "MirroredStrategy", "'off'"]),
    Row("unknown_gin_configurable",
        lambda d, w: _train(d, "--gin_params", "no_such_configurable.units = 3"),
        ["gin", "no_such_configurable"]),
    Row("model_dir_is_a_file",
        lambda d, w: _train(d), ["--model_dir", "model", "not a directory"], model_dir="file"),
    Row("model_dir_under_a_file",
        lambda d, w: _train(d), ["--model_dir", "not a directory"], model_dir="under_file"),
]


def _make_trained_model_dir(model_dir: str) -> None:
    """Trains digits_mlp (hidden 16) for 10 steps in-process and writes its params.yaml."""
    from lite_launcher.core import train_lib as experiment
    from lite_launcher.core import registry

    params = registry.get_exp_config("digits_mlp")
    params.override(nested({**FAST_DIGITS, "trainer.train_steps": 10,
                            "task.model.hidden_sizes": [TRAINED_HIDDEN]}), is_strict=True)
    strategy = tf.distribute.get_strategy()
    with strategy.scope():
        task = registry.get_task(params.task, logging_dir=model_dir)
    experiment.run_experiment(distribution_strategy=strategy, task=task, mode="train",
                              params=params, model_dir=model_dir)
    params.save_yaml(os.path.join(model_dir, "params.yaml"))


def _prepare_model_dir(kind: Optional[str], row_dir: str, trained: str) -> Optional[str]:
    model_dir = os.path.join(row_dir, "model")
    if kind is None:
        return None
    if kind == "trained":
        shutil.copytree(trained, model_dir)
    elif kind == "file":
        with open(model_dir, "w") as f:
            f.write("not a directory\n")
    elif kind == "under_file":
        blocker = os.path.join(row_dir, "blocker")
        with open(blocker, "w") as f:
            f.write("a regular file\n")
        model_dir = os.path.join(blocker, "model")
    return model_dir


@pytest.fixture(scope="module")
def trained_model_dir(tmp_path_factory):
    trained = str(tmp_path_factory.mktemp("bad_input_trained") / "trained")
    _make_trained_model_dir(trained)
    return trained


@dataclasses.dataclass
class Outcome:
    exit_code: object
    stderr: str
    stdout: str
    logged: str
    model_dir: str
    before: object
    after: object


def _prepare(row, tmp_path, trained):
    row_dir = str(tmp_path / row.name)
    os.makedirs(row_dir)
    model_dir = _prepare_model_dir(row.model_dir, row_dir, trained)
    args = list(row.args(model_dir or "", row_dir))
    watched = model_dir or os.path.join(row_dir, "model")
    return args, watched


@pytest.fixture
def run_in_process(monkeypatch, capsys, caplog):
    """Runs `lite-train args` as `main.run()` in this process; returns (exit code, stderr,
    stdout, what was logged)."""
    sigterm = signal.getsignal(signal.SIGTERM)

    def run(args):
        monkeypatch.setattr(sys, "argv", ["lite-train", *args])
        capsys.readouterr()
        caplog.clear()
        with caplog.at_level(logging.INFO):
            try:
                main_lib.run()
                code = 0
            except SystemExit as exit_request:
                code = exit_request.code
            finally:
                logging.disable(logging.NOTSET)  # the driver silences logging for its exit
                signal.signal(signal.SIGTERM, sigterm)  # and ignores SIGTERM once it exits
        captured = capsys.readouterr()
        return code, captured.err, captured.out, caplog.text

    yield run
    gin.clear_config()  # a refused gin binding must not reach the next test


def _assert_refused(outcome: Outcome, row: Row) -> None:
    lines = [line for line in outcome.stderr.splitlines() if line.strip()]
    assert outcome.exit_code == 2, outcome.stderr[-3000:]
    assert "Traceback" not in outcome.stderr, outcome.stderr[-3000:]
    assert lines and lines[-1].startswith(ERROR_PREFIX), outcome.stderr[-3000:]
    errors = [line for line in lines if line.startswith(ERROR_PREFIX)]
    assert errors == [lines[-1]]  # exactly one error line, and it is the last line
    # Checked before anything is printed: no config dump before the error.
    assert "Final experiment parameters" not in outcome.stderr + outcome.logged
    for text in row.expect:
        assert text in lines[-1], f"{text!r} not in {lines[-1]!r}"
    assert outcome.stdout == ""
    assert outcome.after == outcome.before, f"{outcome.model_dir} changed"
    if row.model_dir == "fresh":
        assert outcome.before is None and not os.path.exists(outcome.model_dir)
    if row.model_dir == "trained":
        assert outcome.before and "params.yaml" in outcome.before
        assert "ckpt-10.index" in outcome.before


def test_the_table_covers_the_issue():
    assert len(ROWS) >= 21
    assert len({row.name for row in ROWS}) == len(ROWS)


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_bad_input_is_one_line_exit_2_and_model_dir_untouched(run_in_process, trained_model_dir,
                                                              tmp_path, row):
    args, model_dir = _prepare(row, tmp_path, trained_model_dir)
    before = snapshot(model_dir)
    code, stderr, stdout, logged = run_in_process(args)
    _assert_refused(Outcome(code, stderr, stdout, logged, model_dir, before,
                            snapshot(model_dir)), row)


# The second loads TensorFlow and restores a checkpoint before it refuses (~10 s): `release`,
# its sibling the same row in this process.
_SUBPROCESS_ROWS = [
    next(row for row in ROWS if row.name == "unknown_experiment"),
    pytest.param(next(row for row in ROWS if row.name == "checkpoint_of_another_model"),
                 marks=pytest.mark.release(
                     sibling="tests/reliability/test_bad_input.py::test_bad_input_is_one_line_"
                             "exit_2_and_model_dir_untouched[checkpoint_of_another_model]"),
                 id="checkpoint_of_another_model"),
]


@pytest.mark.slow
@pytest.mark.parametrize("row", _SUBPROCESS_ROWS, ids=lambda row: row.name)
def test_the_lite_train_process_exits_2_with_one_line(trained_model_dir, tmp_path, row):
    # What only a process shows: its exit status, and that nothing is printed after the
    # error while it shuts down (e.g. TensorFlow's warnings about a half-restored checkpoint).
    args, model_dir = _prepare(row, tmp_path, trained_model_dir)
    before = snapshot(model_dir)
    completed = run_lite_train(args, timeout=240)
    _assert_refused(Outcome(completed.returncode, completed.stderr, completed.stdout, "",
                            model_dir, before, snapshot(model_dir)), row)


# ---------------------------------------------------------------------------------------------
# Refused before TensorFlow loads.

# Runs lite-train's run() once per argv in a fresh interpreter and reports, for each, the exit
# code, the last stderr line and whether TensorFlow had been imported by then.
_PROBE = textwrap.dedent("""
    import io, json, sys, types
    if sys.argv[1] == "import_tensorflow_first":
        # A stand-in: the probe reads sys.modules, and a real import is a TensorFlow start-up.
        sys.modules["tensorflow"] = types.ModuleType("tensorflow")
    from lite_launcher import main
    report = []
    for args in json.loads(sys.argv[2]):
        sys.argv = ["lite-train", *args]
        err, sys.stderr = sys.stderr, io.StringIO()
        out, sys.stdout = sys.stdout, io.StringIO()
        try:
            main.run()
            code = 0
        except SystemExit as exit_request:
            code = exit_request.code
        finally:
            text, sys.stderr, sys.stdout = sys.stderr.getvalue(), err, out
        report.append({"code": code, "last_line": (text.strip().splitlines() or [""])[-1],
                       "tensorflow": "tensorflow" in sys.modules})
    print(json.dumps(report))
""")


def _probe(argvs, import_tensorflow_first=False):
    completed = subprocess.run(
        [sys.executable, "-c", _PROBE,
         "import_tensorflow_first" if import_tensorflow_first else "-", json.dumps(argvs)],
        capture_output=True, text=True, timeout=240, env=subprocess_env(), cwd=REPO_ROOT)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


def _early_rows(tmp_path):
    model_dir = str(tmp_path / "model")
    train = ["--mode", "train", "--model_dir", model_dir]
    return [
        (["--experiment", "no_such_thing", *train],
         f"{ERROR_PREFIX}Unknown experiment 'no_such_thing'. Registered experiments: "),
        (["--experiment", "digits_mlp", *train, "--config_file", "missing.yaml"],
         f"{ERROR_PREFIX}Config file 'missing.yaml' does not exist; check the --config_file "
         f"path."),
        (["--experiment", "digits_mlp", *train, "--params_override", "{trainer: [1,"],
         f"{ERROR_PREFIX}--params_override is not valid YAML"),
        # A vision experiment's config is parsed and validated before its task loads
        # TensorFlow: an unknown key and a bad value.
        (["--experiment", "resnet_imagenet", *train, "--params_override", "task.model.foo=1"],
         f"{ERROR_PREFIX}Unknown config key 'task.model.foo'. Valid keys at this level: "),
        (["--experiment", "retinanet_resnetfpn_coco", *train, "--params_override",
          "task.model.backbone.resnet.model_id=7"],
         f"{ERROR_PREFIX}task.model.backbone.resnet.model_id 7 is not one of 10, 18, "),
        (["--help"], ""),
    ], model_dir


def test_a_wrong_name_file_override_or_vision_config_and_help_need_no_tensorflow(
        tmp_path):
    rows, model_dir = _early_rows(tmp_path)
    report = _probe([args for args, _ in rows])
    for (args, message), result in zip(rows, report):
        assert result["code"] == (0 if args == ["--help"] else 2), (args, result)
        assert result["last_line"].startswith(message), (args, result)
        assert not result["tensorflow"], args
    assert not os.path.exists(model_dir)


def test_the_probe_sees_tensorflow_when_it_is_loaded():
    # The check above can fail: with a `tensorflow` module loaded first the probe reports it.
    report = _probe([["--experiment", "no_such_thing", "--mode", "train", "--model_dir",
                      "/nonexistent/model"]], import_tensorflow_first=True)
    assert report[0]["code"] == 2 and report[0]["tensorflow"]
