"""A forked `lite-train` driver: the TFM pattern of copying train.py and changing a few lines.

What it changes:
- imports its own registry module (`my_registry`) so its experiments exist;
- adds a flag (`--progress_log`) and a train action that appends one line per inner loop to
  that file (step, training loss);
- builds a custom Trainer (examples/custom_trainer.py) inside `strategy.scope()` and passes it
  to `run_experiment(trainer=...)`.

Run: `python examples/forked_driver/driver.py --experiment=linear_digits --mode=train_and_eval
      --model_dir=/tmp/forked --progress_log=/tmp/forked/progress.txt`
"""

import os
import sys

import tensorflow as tf
from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # my_registry
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # custom_trainer

import lite_launcher as ll  # noqa: E402
from lite_launcher import main as lite_main  # noqa: E402
import custom_trainer  # noqa: E402
import my_registry  # noqa: E402,F401  (registers linear_digits)

FLAGS = flags.FLAGS
flags.DEFINE_string("progress_log", None, "A file that receives one line per train loop.")


class ProgressLog:
    """A train action: appends `step loss` after each inner loop."""

    def __init__(self, path, global_step):
        self.path = path
        self.global_step = global_step

    def __call__(self, output):
        with open(self.path, "a") as f:
            f.write(f"{int(self.global_step.numpy())} {float(output['training_loss']):.6f}\n")


def main(_):
    params = lite_main.parse_configuration(FLAGS)
    model_dir = FLAGS.model_dir
    if "train" in FLAGS.mode:
        lite_main.serialize_config(params, model_dir)
    strategy = ll.get_distribution_strategy(params.runtime.distribution_strategy) or \
        tf.distribute.get_strategy()
    with strategy.scope():
        task = ll.get_task(params.task, logging_dir=model_dir)
    trainer = custom_trainer.build_custom_trainer(params, task, model_dir, strategy)
    train_actions = []
    if FLAGS.progress_log:
        os.makedirs(os.path.dirname(os.path.abspath(FLAGS.progress_log)), exist_ok=True)
        train_actions.append(ProgressLog(FLAGS.progress_log, trainer.global_step))
    _, eval_logs = ll.run_experiment(distribution_strategy=strategy, task=task,
                                     mode=FLAGS.mode, params=params, model_dir=model_dir,
                                     trainer=trainer, train_actions=train_actions,
                                     run_post_eval=True)
    print(f"accuracy {float(eval_logs['accuracy']):.4f} best {trainer.best_accuracy:.4f}")


if __name__ == "__main__":
    ll.define_flags()
    app.run(main)
