"""A forked `lite-train` driver: TFM's pattern of copying vision/train.py and changing lines.

It has the shape of TFM's `official/vision/train.py` with the imports changed: it defines its
own `--enable_async_checkpointing` beside `ll.define_flags()`'s, parses gin first in `main()`,
writes params.yaml, sets mixed precision, builds the strategy with
`ll.get_distribution_strategy`, the task inside `strategy.scope()`, and calls
`run_experiment(eval_summary_manager=ll.maybe_build_eval_summary_manager(...))`, then
`ll.save_gin_config`. What it changes:
- imports its own registry module (`my_registry`), so its experiment `linear_digits` exists
  without --registry_imports;
- adds a flag, `--progress_log`, and a train action that appends `<step> <training_loss>` to
  that file after each inner loop;
- builds the custom Trainer of examples/custom_trainer.py inside `strategy.scope()` and passes
  it to `run_experiment(trainer=...)`; it exports its best checkpoint to
  `<model_dir>/custom_best`;
- reports a bad --mode or a config error in one line with exit code 2.

Run: `python examples/forked_driver/driver.py --experiment=linear_digits --mode=train_and_eval
      --model_dir=/tmp/forked --progress_log=/tmp/forked/progress.txt`
"""

import os
import sys

from absl import app, flags
import gin

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # my_registry
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # custom_trainer

import lite_launcher as ll  # noqa: E402
from lite_launcher.core import modes  # noqa: E402

FLAGS = flags.FLAGS

# As TFM's vision train.py: the driver's own flag, beside ll.define_flags()'s.
flags.DEFINE_bool("enable_async_checkpointing", default=False,
                  help="A boolean indicating whether to enable async checkpoint saving.")


class ProgressLog:
    """A train action: appends `<step> <training_loss>` to `path` after each inner loop."""

    def __init__(self, path, global_step):
        self.path = path
        self.global_step = global_step

    def __call__(self, output):
        with open(self.path, "a") as f:
            f.write(f"{int(self.global_step.numpy())} {float(output['training_loss']):.6f}\n")


def run(mode, model_dir, progress_log=None):
    """The forked part of the driver: gin -> config -> strategy -> custom trainer -> run."""
    # TFM's train_lib registers the gin configurables; imported here, not at the top, so that
    # a bad --mode is reported before TensorFlow loads (and prints its start-up lines).
    from lite_launcher.core import train_lib  # noqa: F401  pylint: disable=unused-import
    import custom_trainer
    import my_registry  # noqa: F401  (registers linear_digits)

    try:
        gin.parse_config_files_and_bindings(FLAGS.gin_file, FLAGS.gin_params)
    except (ValueError, IOError, OSError) as error:
        raise ll.ConfigError(f"gin: {error}") from error
    params = ll.parse_configuration(FLAGS)
    if modes.mode_trains(mode):
        ll.serialize_config(params, model_dir)
    if params.runtime.mixed_precision_dtype:
        ll.set_mixed_precision_policy(params.runtime.mixed_precision_dtype)
    strategy = ll.get_distribution_strategy(
        distribution_strategy=params.runtime.distribution_strategy,
        all_reduce_alg=params.runtime.all_reduce_alg,
        num_gpus=params.runtime.num_gpus,
        tpu_address=params.runtime.tpu)
    with strategy.scope():
        task = ll.get_task(params.task, logging_dir=model_dir)
    trainer = custom_trainer.build_custom_trainer(
        params, task, strategy, mode, best_dir=os.path.join(model_dir, "custom_best"))
    train_actions = []
    if progress_log and modes.mode_trains(mode):
        os.makedirs(os.path.dirname(os.path.abspath(progress_log)), exist_ok=True)
        train_actions.append(ProgressLog(progress_log, trainer.global_step))
    ll.run_experiment(
        distribution_strategy=strategy, task=task, mode=mode, params=params,
        model_dir=model_dir, trainer=trainer, train_actions=train_actions,
        eval_summary_manager=ll.maybe_build_eval_summary_manager(params=params,
                                                                 model_dir=model_dir),
        enable_async_checkpointing=FLAGS.enable_async_checkpointing)
    from lite_launcher.common.distribute_utils import should_write  # pylint: disable=import-outside-toplevel
    if modes.mode_trains(mode) and should_write(strategy):  # only the chief writes model_dir
        ll.save_gin_config(mode, model_dir)
    if trainer.last_eval_logs:
        print(f"accuracy {float(trainer.last_eval_logs['accuracy']):.4f} "
              f"best {trainer.best_accuracy:.4f}")


def main(argv):
    try:
        if len(argv) > 1:
            raise ll.ConfigError(f"unexpected arguments {argv[1:]}; every option is a --flag.")
        if not FLAGS.mode:
            raise ll.ConfigError(f"--mode is required; valid modes: {', '.join(modes.MODES)}.")
        modes.check_mode(FLAGS.mode)
        if not FLAGS.model_dir:
            raise ll.ConfigError("--model_dir is required.")
        run(FLAGS.mode, FLAGS.model_dir, FLAGS.progress_log)
    except ll.ConfigError as error:
        sys.stderr.write(f"driver.py: error: {error}\n")
        sys.exit(2)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    ll.define_flags()
    flags.DEFINE_string("progress_log", None, "A file receiving `<step> <training_loss>` after "
                        "each inner training loop.")
    app.run(main)
