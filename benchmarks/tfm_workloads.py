"""The benchmark workloads as TFM tasks and experiments, and a CLI that measures one row.

Runs only inside TFM's own virtual environment (`benchmarks/setup_tfm_env.sh`): it imports
tf-models-official, Orbit and tf_keras. The tasks, configs and registrations here are this
project's own code written against TFM's public API (base_task.Task, cfg.ExperimentConfig,
exp_factory, task_factory); nothing is copied from TFM.

    .tfm_venv/bin/python benchmarks/tfm_workloads.py --workload mlp_tiny [--rows train100 eval]

runs the rows one after the other and prints one `BENCH_RESULT {json}` line per row (see
measure.py). Rows and timing are the same as on the lite_launcher side (lite_workloads.py):
both call their framework's `run_experiment` with the default strategy, the overrides of
`workloads.run_plan`, and a `measure.LoopClock`'s actions. Importing this module registers the
experiments `mlp_tiny`, `cnn_small` and `mock` with TFM (tfm_driver.py uses that).
"""

import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import measure  # noqa: E402  (after sys.path: stdlib-only, shared with the other sides)
import workloads  # noqa: E402

# TFM's import path: everything the driver needs, imported before anything is timed so that
# the first-step figure includes it, as it would for `official/vision/train.py`.
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402
from official.common import distribute_utils  # noqa: E402
from official.core import base_task  # noqa: E402
from official.core import config_definitions as cfg  # noqa: E402
from official.core import exp_factory  # noqa: E402
from official.core import task_factory  # noqa: E402
from official.core import train_lib  # noqa: E402
from official.modeling import optimization  # noqa: E402


@dataclasses.dataclass
class BenchTaskConfig(cfg.TaskConfig):
    """Task config: which WORKLOADS.md workload to train."""

    workload: str = "mlp_tiny"


@task_factory.register_task_cls(BenchTaskConfig)
class BenchTask(base_task.Task):
    """A WORKLOADS.md workload as a TFM task; TFM's default train/validation steps run it."""

    def __init__(self, params, logging_dir=None, name=None):
        super().__init__(params, logging_dir=logging_dir, name=name)
        self._workload = workloads.get(params.workload)

    def build_model(self):
        return workloads.build_model(self._workload, tf_keras)

    def build_inputs(self, params, input_context=None):
        del params, input_context  # one fixed batch, the same for train and validation
        return workloads.make_dataset(self._workload)

    def build_losses(self, labels, model_outputs, aux_losses=None):
        loss = workloads.compute_loss(self._workload, labels, model_outputs)
        if aux_losses:
            loss += tf.add_n(aux_losses)
        return loss

    def build_metrics(self, training=True):
        del training
        return [tf_keras.metrics.SparseCategoricalAccuracy(name="accuracy")]

    def process_metrics(self, metrics, labels, model_outputs, **kwargs):
        # tf_keras's sparse accuracy cannot squeeze labels [batch] against `mock`'s single
        # output column [batch, 1] (Keras 3's can); labels [batch, 1] give the same matches.
        if model_outputs.shape[-1] == 1:
            labels = tf.expand_dims(labels, -1)
        super().process_metrics(metrics, labels, model_outputs, **kwargs)


def _experiment_config(name):
    workload = workloads.get(name)
    data = dict(global_batch_size=workload.global_batch_size)
    return cfg.ExperimentConfig(
        task=BenchTaskConfig(
            workload=name,
            train_data=cfg.DataConfig(is_training=True, **data),
            validation_data=cfg.DataConfig(is_training=False, **data)),
        trainer=cfg.TrainerConfig(
            optimizer_config=optimization.OptimizationConfig(
                workloads.optimizer_config(workload))),
        runtime=cfg.RuntimeConfig(distribution_strategy="off"),
    )


for _name in workloads.WORKLOADS:
    exp_factory.register_config_factory(_name)(
        lambda _name=_name: _experiment_config(_name))


def measure_row(workload_name, row, loops, model_dir, runtime=None):
    """Runs one row through `train_lib.run_experiment`; returns the result dict. `runtime`:
    overrides of the runtime config (only the default, CPU, is benchmarked on this side)."""
    workload = workloads.get(workload_name)
    mode, trainer_overrides, save_summary = workloads.run_plan(workload, row, loops, "tfm")
    params = exp_factory.get_exp_config(workload_name)
    params.override({"trainer": trainer_overrides, "runtime": runtime or {}}, is_strict=True)
    params.validate()
    params.lock()
    task = task_factory.get_task(params.task, logging_dir=model_dir)
    clock = measure.LoopClock()
    # 'off' (the default strategy), as on the lite_launcher side.
    strategy = distribute_utils.get_distribution_strategy(params.runtime.distribution_strategy)
    train_lib.run_experiment(
        distribution_strategy=strategy,
        task=task,
        mode=mode,
        params=params,
        model_dir=model_dir,
        train_actions=[clock.train_action],
        eval_actions=[clock.eval_action],
        save_summary=save_summary,
    )
    versions = {"tensorflow": tf.__version__, "tf_keras": tf_keras.__version__}
    return workloads.row_result("tfm", workload, row, loops, clock,
                                trainer_overrides["steps_per_loop"], versions)


def main(argv=None):
    workloads.rows_main(measure_row, "tfm_bench_", __doc__, argv)


if __name__ == "__main__":
    main()
