"""A fork of TFM's ranking driver (`official/recommendation/ranking/train.py`) on lite.

The TFM driver with its imports changed: parse the config from the flags, build the task,
the strategy (`ll.get_distribution_strategy`), the model inside `strategy.scope()` and the
datasets with `strategy.distribute_datasets_from_function`, then the `RankingTrainer` with
the model's own two-optimizer `MultiOptimizer`, and `run_experiment(trainer=...)`. As TFM's
vision driver it parses gin first and defines its own `--enable_async_checkpointing`.

Run: `python examples/ranking/driver.py --experiment=ranking_tiny --mode=train_and_eval
      --model_dir=/tmp/ranking` (and `--mode=continuous_eval` beside it on the same dir).
"""

import os
import sys

from absl import app
from absl import flags
import gin

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # ranking.py

import lite_launcher as ll  # noqa: E402
from lite_launcher.core import train_lib  # noqa: E402,F401  (TFM's train_lib: gin configurables)

import ranking  # noqa: E402  (registers ranking_tiny)

FLAGS = flags.FLAGS

flags.DEFINE_bool("enable_async_checkpointing", default=False,
                  help="Whether to write checkpoints asynchronously.")


def main(_) -> None:
    """Train and evaluate the ranking model."""
    gin.parse_config_files_and_bindings(FLAGS.gin_file, FLAGS.gin_params)
    params = ll.parse_configuration(FLAGS)
    mode = FLAGS.mode
    model_dir = FLAGS.model_dir
    if "train" in mode:
        # Pure evaluation writes no params.yaml, so it never races the training job for it.
        ll.serialize_config(params, model_dir)

    task = ll.get_task(params.task, logging_dir=model_dir)
    strategy = ll.get_distribution_strategy(
        distribution_strategy=params.runtime.distribution_strategy,
        all_reduce_alg=params.runtime.all_reduce_alg,
        num_gpus=params.runtime.num_gpus,
        tpu_address=params.runtime.tpu)
    trainer = ranking.build_ranking_trainer(params, task, strategy, mode, model_dir)
    train_lib.run_experiment(
        distribution_strategy=strategy, task=task, mode=mode, params=params,
        model_dir=model_dir, trainer=trainer,
        enable_async_checkpointing=FLAGS.enable_async_checkpointing)
    if "train" in mode:
        ll.save_gin_config(mode, model_dir)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    ll.define_flags()
    flags.mark_flags_as_required(["experiment", "mode", "model_dir"])
    app.run(main)
