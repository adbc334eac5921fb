"""Test set-up shared by the whole suite.

Two logical CPU devices are configured before TensorFlow initialises its devices, so that
MirroredStrategy tests can run in-process with 2 replicas; everything else uses CPU:0.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import tensorflow as tf  # noqa: E402

_cpus = tf.config.list_physical_devices("CPU")
try:
    tf.config.set_logical_device_configuration(
        _cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)
except RuntimeError:  # devices already initialised by an earlier import
    pass


# Interpreter shutdown after a TF-heavy session can stall for minutes: garbage collection during
# finalisation destroys the remaining tf.data iterators, whose thread pools wait on threads
# that are already stopping. The results are reported by then, so the session leaves at once.
_exit_status = None


def pytest_sessionfinish(session, exitstatus):
    global _exit_status
    _exit_status = int(exitstatus)


def pytest_unconfigure(config):
    if _exit_status is None or os.environ.get("LITE_TESTS_NORMAL_EXIT"):
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_exit_status)
