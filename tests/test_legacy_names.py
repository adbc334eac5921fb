"""The module names before the core's layout by role (issue 52) and before vision's (issue 40)
still import, as the same module objects: users' drivers, gin files, TFM-style imports and
`python -m` lines keep working (the saved `.keras` files naming old vision modules load in
tests/vision/test_vision_layout.py)."""

import importlib
import subprocess
import sys

import pytest

from lite_launcher import legacy


@pytest.mark.parametrize("old, new", sorted(legacy.MOVED.items()))
def test_an_old_name_imports_the_module_now(old, new):
    assert importlib.import_module(old) is importlib.import_module(new)


def test_patching_an_old_name_patches_the_module_now(monkeypatch):
    import lite_launcher.core.train_utils as now  # pylint: disable=import-outside-toplevel
    import lite_launcher.train_utils as before  # pylint: disable=import-outside-toplevel

    monkeypatch.setattr(before, "INIT_CHECKPOINT_PROBE_S", 0.25)
    assert now.INIT_CHECKPOINT_PROBE_S == 0.25


def test_tfm_style_core_imports():
    # TFM's Colab lines with the import changed: `from official.core import exp_factory`, ...
    from lite_launcher.core import config_definitions, exp_factory, task_factory, train_lib  # pylint: disable=import-outside-toplevel
    import lite_launcher as tfm  # pylint: disable=import-outside-toplevel

    config = exp_factory.get_exp_config("resnet_imagenet")
    assert isinstance(config, config_definitions.ExperimentConfig)
    assert tfm.core.task_factory is task_factory
    assert tfm.core.train_lib.run_experiment is train_lib.run_experiment
    assert train_lib.OrbitExperimentRunner is train_lib.ExperimentRunner


def test_the_old_driver_module_runs_with_python_dash_m():
    result = subprocess.run([sys.executable, "-m", "lite_launcher.main", "--help"],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "--experiment" in result.stdout and "--mode" in result.stdout


def test_an_old_module_name_reads_as_an_attribute_of_the_package():
    import lite_launcher as ll  # pylint: disable=import-outside-toplevel
    from lite_launcher.common import builtin_experiments  # pylint: disable=import-outside-toplevel
    from lite_launcher.core import base_trainer  # pylint: disable=import-outside-toplevel

    assert ll.trainer is base_trainer
    assert ll.builtin_experiments is builtin_experiments
    with pytest.raises(AttributeError):
        ll.no_such_module  # pylint: disable=pointless-statement
