"""`mlp_tiny_printed`: `mlp_tiny` whose train step prints one line on the process that runs it.

Under the parameter_server strategy the steps run on the worker tasks, so each worker's log
counts the steps it ran (`PRINTED_STEP` lines): the fault tests read which worker trained,
before and after a worker is killed or restarted. Imported by the subprocesses through
`--registry_imports ps_step_printing` (tests/reliability on PYTHONPATH).
"""

import dataclasses
import sys

import tensorflow as tf

from lite_launcher.core.registry import register_config_factory, register_task_cls
from lite_launcher.experiments import workloads

PRINTED_STEP = "lite-test: ran a train step"


@dataclasses.dataclass
class PrintedWorkloadTaskConfig(workloads.WorkloadTaskConfig):
    """`WorkloadTaskConfig` of a task that prints each train step it runs."""


@register_task_cls(PrintedWorkloadTaskConfig)
class PrintedWorkloadTask(workloads.WorkloadTask):
    """`WorkloadTask` whose train step prints `PRINTED_STEP` after the optimizer update."""

    def train_step(self, inputs, model, optimizer, metrics=None):
        logs = super().train_step(inputs, model, optimizer, metrics=metrics)
        with tf.control_dependencies(tf.nest.flatten(logs)):
            tf.print(PRINTED_STEP, output_stream=sys.stderr)
        return logs


@register_config_factory("mlp_tiny_printed")
def mlp_tiny_printed():
    """`mlp_tiny` with `PrintedWorkloadTask`."""
    config = workloads.mlp_tiny()
    task = config.task
    config.task = PrintedWorkloadTaskConfig(
        workload=task.workload, seed=task.seed, train_data=task.train_data,
        validation_data=task.validation_data)
    return config
