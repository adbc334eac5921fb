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
