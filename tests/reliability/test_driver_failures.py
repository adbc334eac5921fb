"""The driver's own failures: bad gin and config files (exit 2, one line and nothing else),
an evaluation on a read-only model_dir (exit 2), params.yaml that cannot be written (exit 1,
no temporary file left).

The bad files are refused before TensorFlow loads, so their `lite-train` processes are cheap;
the full disk needs a process (its file size limit); the read-only model_dir is refused by the
driver in this process (`cli.run_lite_train_in_process`)."""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import subprocess
import sys

import pytest

from cli import run_lite_train_in_process
from reliability_utils import (ERROR_PREFIX, REPO_ROOT, lite_train_command, run_lite_train,
                               subprocess_env, train_mock)

pytestmark = pytest.mark.slow


def _write(path, data: bytes):
    with open(path, "wb") as f:
        f.write(data)
    return path


def _train(model_dir, *extra):
    return ["--experiment=mock", "--mode=train", f"--model_dir={model_dir}", *extra]


def _run_with_file_size_limit(args, limit):
    """lite-train whose files may not grow beyond `limit` bytes (a full disk, without root)."""
    wrapper = ("import os, resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
               f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit})); "
               "os.execv(sys.argv[1], sys.argv[1:])")
    return subprocess.run([sys.executable, "-c", wrapper] + lite_train_command(args),
                          capture_output=True, text=True, timeout=240, env=subprocess_env(),
                          cwd=REPO_ROOT)


def _make_read_only(path):
    os.chmod(path, 0o555)
    if os.geteuid() == 0:  # root ignores permissions but not the immutable attribute
        if shutil.which("chattr") is None or subprocess.run(
                ["chattr", "+i", path], capture_output=True).returncode != 0:
            pytest.skip("running as root without chattr: cannot make a read-only directory")


def _make_writable(path):
    if os.geteuid() == 0 and shutil.which("chattr"):
        subprocess.run(["chattr", "-i", path], capture_output=True)
    os.chmod(path, 0o755)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("driver_failures")
    bad_gin = _write(str(root / "bad.gin"), b"Trainer.x = 1\nbaz = = 3\n")
    latin1 = _write(str(root / "latin1.yaml"), b"trainer:\n  train_steps: 10 # \xe9t\xe9\n")
    trained = str(root / "trained")
    train_mock(trained, 10)
    _make_read_only(trained)
    jobs = {
        "gin_syntax_error": lambda: run_lite_train(_train(root / "m1", f"--gin_file={bad_gin}")),
        "config_file_not_utf8": lambda: run_lite_train(
            _train(root / "m2", f"--config_file={latin1}")),
        "missing_gin_file": lambda: run_lite_train(
            _train(root / "m3", f"--gin_file={root / 'nowhere.gin'}")),
        "params_yaml_unwritable": lambda: _run_with_file_size_limit(
            _train(root / "m5", "--params_override=trainer.train_steps=10"), 1000),
    }
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
            futures = {name: pool.submit(job) for name, job in jobs.items()}
            # Meanwhile, in this thread (the driver's signal handlers need the main thread).
            outcome = {"eval_on_a_read_only_model_dir": run_lite_train_in_process(
                "--experiment=mock", "--mode=eval", f"--model_dir={trained}")}
            outcome.update({name: future.result() for name, future in futures.items()})
    finally:
        _make_writable(trained)
    return root, trained, outcome


@pytest.mark.parametrize("name,model_dir,expected", [
    ("gin_syntax_error", "m1", ["gin syntax error in ", "bad.gin, line 2 ('baz = = 3')"]),
    ("config_file_not_utf8", "m2", ["--config_file ", "latin1.yaml' is not valid UTF-8: byte "
                                                      "0xe9 on line 2"]),
    ("missing_gin_file", "m3", ["--gin_file ", "nowhere.gin' does not exist"]),
])
def test_a_bad_gin_or_config_file_is_one_line_naming_it_and_nothing_else(results, name,
                                                                          model_dir, expected):
    root, _, outcome = results
    completed = outcome[name]
    assert completed.returncode == 2, completed.stderr[-3000:]
    lines = completed.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(ERROR_PREFIX), completed.stderr[-3000:]
    assert all(text in lines[0] for text in expected), lines[0]
    assert not os.path.exists(root / model_dir)


def test_eval_on_a_read_only_model_dir_is_one_line_exit_2(results):
    _, trained, outcome = results
    refused = outcome["eval_on_a_read_only_model_dir"]
    assert refused.returncode == 2, (refused.stderr + refused.logged)[-3000:]
    assert "Traceback" not in refused.stderr
    # Checked before the config is printed.
    assert "Final experiment parameters" not in refused.stderr + refused.logged
    last = refused.stderr.strip().splitlines()[-1]
    assert last == (f"{ERROR_PREFIX}--mode eval writes its summaries to "
                    f"{os.path.join(trained, 'validation')}, which cannot be written (no write "
                    f"permission on {trained}); make it writable, or set "
                    f"trainer.validation_summary_subdir to a writable directory (an absolute "
                    f"path).")
    assert not os.path.exists(os.path.join(trained, "validation"))


def test_params_yaml_that_cannot_be_written_is_exit_1_and_leaves_no_temporary_file(results):
    root, _, outcome = results
    completed = outcome["params_yaml_unwritable"]
    model_dir = str(root / "m5")
    assert completed.returncode == 1, completed.stderr[-3000:]
    assert "Traceback" not in completed.stderr
    last = completed.stderr.strip().splitlines()[-1]
    assert last.startswith(f"{ERROR_PREFIX}Cannot write {os.path.join(model_dir, 'params.yaml')}")
    assert "File too large" in last
    # The refused run's model_dir lock removes the directories it created while they are
    # empty (model_dir_lock.locked): a temporary file left behind would keep model_dir.
    left = os.listdir(model_dir) if os.path.isdir(model_dir) else []
    assert not [name for name in left if ".tmp" in name], left
