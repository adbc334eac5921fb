"""A custom Trainer: the hooks TFM users override most, ported to lite_launcher.

- `train_step`: an XLA branch (the whole task step compiled with jit_compile=True) when
  `runtime.enable_xla` is on, else the plain step;
- `next_eval_inputs`: passes host-side logs (the batch's example ids) past the model;
- `eval_step`: counts examples on the device and merges the passthrough logs;
- `train_loop_end`: logs extra values (the global step and the weights' L2 norm);
- `eval_end`: a custom best-export rule: export only when accuracy improved *and* the
  validation loss did not get worse than `max_loss`.

Run it directly: `python examples/custom_trainer.py --model_dir /tmp/custom_trainer`.
"""

import sys

import numpy as np
import tensorflow as tf
from absl import app, flags, logging

import lite_launcher as ll


class CustomTrainer(ll.Trainer):
    """A Trainer overriding five hooks; everything else is the base behaviour."""

    max_loss = 10.0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._xla_step = tf.function(self.task.train_step, jit_compile=True)
        self.best_accuracy = -1.0
        self.exported_steps = []

    def train_step(self, iterator):
        use_xla = self.config.runtime.enable_xla
        task_step = self._xla_step if use_xla else self.task.train_step

        def step_fn(inputs):
            logs = task_step(inputs, model=self.model, optimizer=self.optimizer,
                             metrics=self.train_metrics)
            self.train_loss.update_state(logs[self.task.loss])
            self.global_step.assign_add(1)

        self.strategy.run(ll.trainer.after_inputs(step_fn),
                          args=(self.next_train_inputs(iterator),))

    def next_eval_inputs(self, iterator):
        features, labels = next(iterator)
        # Host-side logs: never sent to the device, merged into the step outputs.
        return (features, labels), {"num_labels": tf.shape(labels)[0]}

    def eval_step(self, iterator):
        outputs = super().eval_step(iterator)
        outputs["examples_seen"] = outputs.pop("num_labels")
        return outputs

    def eval_begin(self):
        super().eval_begin()
        return {"examples": 0}

    def eval_reduce(self, state=None, step_outputs=None):
        state["examples"] += int(step_outputs["examples_seen"])
        return state

    def train_loop_end(self):
        logs = super().train_loop_end()
        logs["global_step"] = self.global_step.numpy()
        logs["weights_l2"] = float(np.sqrt(sum(
            float(tf.reduce_sum(tf.square(w))) for w in self.model.trainable_variables)))
        return logs

    def eval_end(self, aggregated_logs=None):
        logs = super().eval_end()  # metrics and validation loss; no exporter configured
        logs["eval_examples"] = aggregated_logs["examples"]
        accuracy = float(logs["accuracy"])
        loss = float(logs.get("validation_loss", 0.0))
        if accuracy > self.best_accuracy and loss <= self.max_loss:
            self.best_accuracy = accuracy
            step = int(self.global_step.numpy())
            path = self.checkpoint.write(f"{self.best_dir}/best-{step}")
            self.exported_steps.append(step)
            logging.info("Exported best checkpoint %s (accuracy %.4f)", path, accuracy)
        logs["best_accuracy"] = self.best_accuracy
        return logs


def build_custom_trainer(params, task, model_dir, strategy):
    """Builds the custom trainer inside the strategy scope, as run_experiment would."""
    with strategy.scope():
        model = task.build_model()
        optimizer = task.create_optimizer(params.trainer.optimizer_config, params.runtime)
        trainer = CustomTrainer(params, task, model=model, optimizer=optimizer)
    trainer.best_dir = f"{model_dir}/custom_best"
    return trainer


def main(_):
    params = ll.get_exp_config("digits_mlp")
    params.override({"trainer": {"train_steps": 200, "validation_interval": 100,
                                 "steps_per_loop": 50, "summary_interval": 50,
                                 "checkpoint_interval": 100},
                     "runtime": {"enable_xla": True}})
    strategy = tf.distribute.get_strategy()
    task = ll.get_task(params.task, logging_dir=flags.FLAGS.model_dir)
    trainer = build_custom_trainer(params, task, flags.FLAGS.model_dir, strategy)
    _, logs = ll.run_experiment(distribution_strategy=strategy, task=task,
                                mode="train_and_eval", params=params,
                                model_dir=flags.FLAGS.model_dir, trainer=trainer,
                                run_post_eval=True)
    print(f"final accuracy {float(logs['accuracy']):.4f}; best exported at steps "
          f"{trainer.exported_steps}; eval examples {logs['eval_examples']}")


if __name__ == "__main__":
    flags.DEFINE_string("model_dir", None, "Where to write checkpoints.")
    flags.mark_flag_as_required("model_dir")
    app.run(main, argv=sys.argv)
