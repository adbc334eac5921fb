"""Tests of lite_launcher.common.atomic_write (write then rename) and lite_launcher.common.errors."""

import os
import subprocess
import sys

import pytest

from lite_launcher.common import atomic_write
from lite_launcher.common import errors

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_write_text_replaces_the_file_and_leaves_no_temporary(tmp_path):
    path = str(tmp_path / "info.json")
    atomic_write.write_text(path, "old\n")
    atomic_write.write_text(path, "new\n")
    assert open(path).read() == "new\n"
    assert os.listdir(tmp_path) == ["info.json"]


def test_a_failed_write_keeps_the_old_content_and_removes_the_temporary(tmp_path):
    path = str(tmp_path / "params.yaml")
    atomic_write.write_text(path, "old\n")
    with pytest.raises(RuntimeError, match="disk full"):
        with atomic_write.atomic_path(path) as temporary:
            with open(temporary, "w") as f:
                f.write("half a fi")
            raise RuntimeError("disk full")
    assert open(path).read() == "old\n"
    assert os.listdir(tmp_path) == ["params.yaml"]


def test_a_write_into_a_missing_directory_raises_and_leaves_nothing(tmp_path):
    with pytest.raises(OSError):
        atomic_write.write_text(str(tmp_path / "missing" / "x.txt"), "x")
    assert os.listdir(tmp_path) == []


def test_atomic_write_and_errors_import_without_tensorflow():
    code = ("import sys, lite_launcher.common.atomic_write, lite_launcher.common.errors, lite_launcher.commands.train, "
            "lite_launcher.commands.export, lite_launcher.core.train_utils, lite_launcher.common.flags\n"
            "print('tensorflow' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "False"


def test_run_time_errors_keep_their_old_import_paths():
    from lite_launcher.core import actions
    from lite_launcher.checkpointing import checkpoints
    from lite_launcher.orbit import controller
    from lite_launcher.commands import train as main
    from lite_launcher.common import model_dir_lock
    from lite_launcher.core import train_utils
    assert controller.CheckpointWriteError is errors.CheckpointWriteError
    assert actions.TrainingDivergedError is errors.TrainingDivergedError
    assert checkpoints.NoReadableCheckpointError is errors.NoReadableCheckpointError
    assert model_dir_lock.ModelDirLockedError is errors.ModelDirLockedError
    assert main.ModelDirWriteError is errors.ModelDirWriteError
    assert train_utils.ModelDirWriteError is errors.ModelDirWriteError  # serialize_config's
    assert issubclass(errors.ModelDirLockedError, errors.ConfigError)  # exit 2, not 1


@pytest.mark.parametrize("error, exit_code", [
    (errors.CheckpointWriteError("Cannot write checkpoint in /m: disk full"), 1),
    (errors.TrainingDivergedError("loss diverged 3 times"), 1),
    (errors.NoReadableCheckpointError("no checkpoint in /m reads"), 1),
    (errors.ModelDirWriteError("Cannot write /m/params.yaml"), 1),
    (errors.ModelDirLockedError("/m is held by pid 1"), 2),
])
def test_driver_turns_run_time_errors_into_one_line_and_exit_code(monkeypatch, capsys, error,
                                                                  exit_code):
    from lite_launcher.commands import train as main_lib

    def fail():
        raise error

    monkeypatch.setattr(main_lib, "_main", fail)
    monkeypatch.setattr(main_lib.signal, "signal", lambda *args: None)
    monkeypatch.setattr(main_lib.std_logging, "disable", lambda level: None)
    with pytest.raises(SystemExit) as exited:
        main_lib.main(["lite-train"])
    assert exited.value.code == exit_code
    assert capsys.readouterr().err == f"lite-train: error: {error}\n"


def test_driver_lets_other_runtime_errors_through(monkeypatch):
    from lite_launcher.commands import train as main_lib

    def fail():
        raise RuntimeError("a bug, not the environment")

    monkeypatch.setattr(main_lib, "_main", fail)
    monkeypatch.setattr(main_lib.signal, "signal", lambda *args: None)
    with pytest.raises(RuntimeError, match="a bug"):
        main_lib.main(["lite-train"])
