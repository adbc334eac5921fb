"""TFM's driver for the benchmark experiments: the twin of `lite-train` in the driver row.

What a TFM training driver (official/vision/train.py) does, on TFM's public API: absl flags
from `official.common.flags`, gin, `train_utils.parse_configuration` (experiment, config
files, --params_override), params.yaml, the mixed-precision policy, the distribution strategy,
the task, `train_lib.run_experiment`, the operative gin config. The experiments are this
project's `mlp_tiny`, `cnn_small` and `mock`, registered by importing tfm_workloads.py;
the vision driver's own registry (every vision model) is not imported, which only makes TFM
start faster. Runs only in TFM's venv (`benchmarks/setup_tfm_env.sh`):

    .tfm_venv/bin/python benchmarks/tfm_driver.py --experiment mlp_tiny --mode train \
        --model_dir /tmp/tfm_mlp --params_override '{"trainer": {"train_steps": 20}}'

The runner (run.py) times the first `train | step: N | steps/sec` log line with N >= 1, as it
does for `lite-train`.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import gin  # noqa: E402
from official.common import distribute_utils  # noqa: E402
from official.common import flags as tfm_flags  # noqa: E402
from official.core import task_factory  # noqa: E402
from official.core import train_lib  # noqa: E402
from official.core import train_utils  # noqa: E402
from official.modeling import performance  # noqa: E402

import tfm_workloads  # noqa: E402,F401  (registers the experiments)

FLAGS = flags.FLAGS


def main(_):
    gin.parse_config_files_and_bindings(FLAGS.gin_file, FLAGS.gin_params)
    params = train_utils.parse_configuration(FLAGS)
    model_dir = FLAGS.model_dir
    if "train" in FLAGS.mode:
        train_utils.serialize_config(params, model_dir)
    if params.runtime.mixed_precision_dtype:
        performance.set_mixed_precision_policy(params.runtime.mixed_precision_dtype)
    strategy = distribute_utils.get_distribution_strategy(
        distribution_strategy=params.runtime.distribution_strategy,
        all_reduce_alg=params.runtime.all_reduce_alg,
        num_gpus=params.runtime.num_gpus,
        tpu_address=params.runtime.tpu)
    with strategy.scope():
        task = task_factory.get_task(params.task, logging_dir=model_dir)
    train_lib.run_experiment(distribution_strategy=strategy, task=task, mode=FLAGS.mode,
                             params=params, model_dir=model_dir)
    train_utils.save_gin_config(FLAGS.mode, model_dir)


if __name__ == "__main__":
    tfm_flags.define_flags()
    flags.mark_flags_as_required(["experiment", "mode", "model_dir"])
    app.run(main)
