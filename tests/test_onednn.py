"""oneDNN by default in `lite-train` (lite_launcher/common/onednn.py), its numerics and determinism,
and the Trainer's XLA choice for convnets on a CPU-only machine (issue 21)."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import lite_launcher as ll
from lite_launcher.common import onednn
from lite_launcher.core import base_trainer as trainer_lib

import tiny
import xla_checks

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV_VAR = onednn.ENV_VAR
# oneDNN and Eigen sum in different orders; over 50 digits_cnn SGD steps the loss curves
# differed by at most 5e-7 relative on the machine this was measured on.
LOSS_RTOL = 1e-5


def _env(onednn_value):
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop(ENV_VAR, None)
    if onednn_value is not None:
        env[ENV_VAR] = onednn_value
    return env


@pytest.fixture
def x86_without_tensorflow(monkeypatch):
    monkeypatch.setattr(onednn.platform, "machine", lambda: "x86_64")
    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)


def test_sets_onednn_only_when_the_user_did_not(x86_without_tensorflow):
    environ = {}
    assert onednn.enable_by_default(environ) == "set"
    assert environ == {ENV_VAR: "1"}
    for users in ("0", "1", ""):
        environ = {ENV_VAR: users}
        assert onednn.enable_by_default(environ) == "user"
        assert environ == {ENV_VAR: users}


def test_leaves_it_alone_once_tensorflow_is_loaded_or_off_x86(monkeypatch):
    environ = {}
    monkeypatch.setitem(sys.modules, "tensorflow", tf)
    assert onednn.enable_by_default(environ) == "loaded"
    monkeypatch.delitem(sys.modules, "tensorflow")
    monkeypatch.setattr(onednn.platform, "machine", lambda: "aarch64")
    assert onednn.enable_by_default(environ) == "not_x86"
    assert environ == {}


# Records TF_ENABLE_ONEDNN_OPTS as it is when `tensorflow` is first imported (TensorFlow reads
# it then), runs the driver, and prints that value and TensorFlow's resulting oneDNN state;
# then, in the same process (one TensorFlow start-up), trains digits_cnn for argv[1] steps in
# model_dir argv[2] (tests/onednn_losses.py) and prints its losses.
_DRIVER_THEN_LOSSES = """
import json, os, sys

steps, model_dir = int(sys.argv[1]), sys.argv[2]
seen = []


class TensorFlowImportWatch:
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow" and not seen:
            seen.append(os.environ.get("TF_ENABLE_ONEDNN_OPTS"))
        return None


sys.meta_path.insert(0, TensorFlowImportWatch())
from lite_launcher import main
sys.argv = ["lite-train", "--list_experiments"]
try:
    main.run()
except SystemExit:
    pass
from tensorflow.python.util import _pywrap_util_port
print("STATE", json.dumps({"seen_by_tensorflow": seen,
                           "onednn": bool(_pywrap_util_port.IsMklEnabled())}))
sys.path.insert(0, os.path.join(os.getcwd(), "tests"))
import onednn_losses
onednn_losses.run(steps, model_dir)
"""

_X86 = onednn.platform.machine().lower() in onednn._X86


@pytest.fixture(scope="module")
def driver_runs(tmp_path_factory):
    """{TF_ENABLE_ONEDNN_OPTS as the user set it: (the driver's state, 5 steps' losses)} for
    the user's unset (on x86 the driver sets "1"; elsewhere the test sets it) and "0"."""
    root = tmp_path_factory.mktemp("onednn")
    runs = {}
    for name, value in (("unset", None if _X86 else "1"), ("0", "0")):
        out = subprocess.run([sys.executable, "-c", _DRIVER_THEN_LOSSES, "5", str(root / name)],
                             env=_env(value), capture_output=True, text=True, timeout=600,
                             cwd=REPO)
        assert out.returncode == 0, out.stderr[-2000:]
        lines = out.stdout.splitlines()
        (state,) = [json.loads(l[len("STATE "):]) for l in lines if l.startswith("STATE ")]
        runs[name] = state, json.loads(lines[-1])
    return runs


@pytest.mark.skipif(not _X86, reason="oneDNN's default is only chosen on x86")
def test_lite_train_turns_onednn_on_before_tensorflow_loads_unless_the_user_chose(driver_runs):
    # TensorFlow turns oneDNN on by itself on CPUs with AVX-512 VNNI/BF16 or AMX, so its final
    # state alone cannot show the driver's choice: what TensorFlow saw when it loaded does.
    assert driver_runs["unset"][0]["seen_by_tensorflow"] == ["1"]
    # A user's explicit off is kept, and TensorFlow honours it on every x86 CPU.
    assert driver_runs["0"][0] == {"seen_by_tensorflow": ["0"], "onednn": False}


def _losses(onednn_value, tmp_path, name, steps=50):
    out = subprocess.run([sys.executable, os.path.join(REPO, "tests", "onednn_losses.py"),
                          str(steps), str(tmp_path / name)], env=_env(onednn_value),
                         capture_output=True, text=True, timeout=600, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_five_steps_of_digits_cnn_with_and_without_onednn_agree(driver_runs):
    """The release loss-curve test's two processes (oneDNN on, off) for 5 steps, after the
    driver's choice."""
    on, off = driver_runs["unset"][1], driver_runs["0"][1]
    assert on["onednn"] and not off["onednn"]
    assert len(on["losses"]) == len(off["losses"]) == 5
    np.testing.assert_allclose(on["losses"], off["losses"], rtol=LOSS_RTOL)


@pytest.mark.release(
    sibling="tests/test_onednn.py::test_five_steps_of_digits_cnn_with_and_without_onednn_agree")
def test_digits_cnn_loss_curve_with_and_without_onednn_agree_and_repeat_exactly(tmp_path):
    on_a = _losses("1", tmp_path, "on_a")
    on_b = _losses("1", tmp_path, "on_b")
    off = _losses("0", tmp_path, "off")
    assert on_a["onednn"] and on_b["onednn"] and not off["onednn"]
    assert len(on_a["losses"]) == len(off["losses"]) == 50
    # runtime.deterministic_ops with oneDNN on: two runs give the same curve, bit for bit.
    assert on_a["losses"] == on_b["losses"]
    np.testing.assert_allclose(on_a["losses"], off["losses"], rtol=LOSS_RTOL)
    assert on_a["losses"][-1] < 0.8 * on_a["losses"][0]  # it trains


class _ConvTinyTask(tiny.TinyTask):
    """TinyTask's data through a 1x1 convolution (a rank-4 kernel)."""

    def build_model(self):
        return keras.Sequential([keras.Input((tiny.NUM_FEATURES,)),
                                 keras.layers.Reshape((2, 2, 1)),
                                 keras.layers.Conv2D(2, 1),
                                 keras.layers.Flatten(),
                                 keras.layers.Dense(tiny.NUM_CLASSES)])


@pytest.mark.skipif(bool(tf.config.list_logical_devices("GPU")), reason="CPU-only rule")
@pytest.mark.parametrize("strategy", ["default", "one_device"])
def test_enable_xla_leaves_a_convnet_uncompiled_on_a_cpu_only_machine(strategy):
    # one_device: TFM's tutorials train under tf.distribute.OneDeviceStrategy on a CPU.
    scope = (tf.distribute.OneDeviceStrategy("/cpu:0") if strategy == "one_device"
             else tf.distribute.get_strategy()).scope()
    config = tiny.make_config()
    config.runtime.enable_xla = True
    with scope:
        task = _ConvTinyTask(config.task)
        model = task.build_model()
        trainer = ll.Trainer(config, task, model, keras.optimizers.SGD(0.1))
        trainer.train(tf.constant(3))
    assert int(trainer.global_step.numpy()) == 3
    assert xla_checks.xla_compiled_calls(trainer) == []
    # The same choice for a dense model compiles (test_trainer.test_xla_matches_non_xla).
    dense = tiny.TinyTask(config.task).build_model()
    assert not trainer_lib._convnet_on_cpu_only(dense)
    assert trainer_lib._convnet_on_cpu_only(model)
