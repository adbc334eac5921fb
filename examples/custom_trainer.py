"""A custom Trainer: the hooks TFM users override most, ported to lite_launcher.

- `train_step`: an XLA branch when `runtime.enable_xla` is on: the forward and backward pass are
  compiled with `jit_compile=True` and the update is applied outside the compiled function (the
  optimizer's cross-replica gradient sum cannot be compiled under MirroredStrategy);
- `next_eval_inputs`: returns host-side passthrough logs (the number of labels in the batch)
  beside the inputs; `eval_step` turns them into the step's `examples_seen`;
- `eval_begin` / `eval_reduce`: count the evaluated examples over the whole evaluation;
- `train_loop_end`: logs extra values (the global step and the weights' global L2 norm), which
  the Controller logs and writes as training summaries;
- `eval_end`: a custom best-export rule: export only when accuracy improved *and* the
  validation loss is at most `max_loss`; keeps one exported checkpoint plus `best.json`.

Run it directly: `python examples/custom_trainer.py --model_dir /tmp/custom_trainer`.
The forked driver (examples/forked_driver/driver.py) reuses `CustomTrainer`.
"""

import json
import os

import keras
import tensorflow as tf
from absl import app, flags, logging

import lite_launcher as ll
from lite_launcher.checkpointing.checkpoints import worker_save_dir
from lite_launcher.common.atomic_write import write_text
from lite_launcher.common.distribute_utils import should_write
from lite_launcher.core.base_trainer import after_inputs
from lite_launcher.core.modes import mode_trains

BEST_INFO = "best.json"


class CustomTrainer(ll.Trainer):
    """A Trainer overriding seven hooks; everything else is the base behaviour.

    Args (beyond `ll.Trainer`'s):
      best_dir: Where `eval_end` exports the best checkpoint (`best-<step>`) and `best.json`;
        None disables the export. Only the chief writes (multi-worker safe).
      max_loss: The export rule's ceiling on `validation_loss`.
    """

    def __init__(self, *args, best_dir=None, max_loss=10.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.best_dir = best_dir
        self.max_loss = max_loss
        self.best_accuracy = -1.0
        self.exported_steps = []
        self.last_eval_logs = {}
        self._forward_backward_fn = None

    # ---------------------------------------------------------------------------- train
    def _forward_backward(self, inputs):
        """Loss, model outputs and gradients of one replica's batch (no update)."""
        features, labels = inputs
        with tf.GradientTape() as tape:
            outputs = self.model(features, training=True)
            loss = self.task.build_losses(labels, outputs, aux_losses=self.model.losses)
            # Keras optimizers sum gradients over replicas: differentiate the per-replica share.
            scaled_loss = loss / self.strategy.num_replicas_in_sync
            if isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer):
                scaled_loss = self.optimizer.scale_loss(scaled_loss)
        grads = tape.gradient(scaled_loss, self.model.trainable_variables)
        return loss, outputs, grads

    def train_step(self, iterator):
        if self._forward_backward_fn is None:
            if self.config.runtime.enable_xla:
                self._forward_backward_fn = tf.function(self._forward_backward,
                                                        jit_compile=True)
            else:
                self._forward_backward_fn = self._forward_backward
        forward_backward = self._forward_backward_fn

        def step_fn(inputs):
            loss, outputs, grads = forward_backward(inputs)
            # Outside the compiled function: apply_gradients synchronises the replicas.
            self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
            self.task.process_metrics(self.train_metrics, inputs[1], outputs)
            self.train_loss.update_state(loss)
            self.global_step.assign_add(1)

        # after_inputs: nothing (not even the step count) runs when the data has ended.
        self.strategy.run(after_inputs(step_fn), args=(self.next_train_inputs(iterator),))

    def train_loop_end(self):
        logs = super().train_loop_end()
        logs["global_step"] = self.global_step.value()
        logs["weights_l2"] = tf.linalg.global_norm(self.model.trainable_variables)
        return logs

    # ----------------------------------------------------------------------------- eval
    def next_eval_inputs(self, iterator):
        features, labels = next(iterator)
        # Host-side logs, never sent to the replicas; under a strategy `labels` holds one
        # tensor per replica.
        num_labels = tf.add_n([tf.shape(part)[0] for part in
                               self.strategy.experimental_local_results(labels)])
        return (features, labels), {"num_labels": num_labels}

    def eval_step(self, iterator):
        outputs = super().eval_step(iterator)  # the task's logs merged with the passthrough
        outputs["examples_seen"] = tf.cast(outputs.pop("num_labels"), tf.int64)
        return outputs

    def eval_begin(self):
        super().eval_begin()
        return {"examples": tf.constant(0, tf.int64)}

    def eval_reduce(self, state=None, step_outputs=None):
        # Tensor arithmetic, so that it also works inside a traced eval loop.
        return {"examples": state["examples"] + step_outputs["examples_seen"]}

    def eval_end(self, aggregated_logs=None):
        # The base gets no aggregated logs: this state is not the task's to reduce.
        logs = super().eval_end()
        logs["eval_examples"] = aggregated_logs["examples"]
        accuracy = float(logs["accuracy"])
        loss = float(logs.get("validation_loss", 0.0))
        if self.best_dir and accuracy > self.best_accuracy and loss <= self.max_loss:
            self.best_accuracy = accuracy
            self._export_best(int(self.global_step.numpy()), accuracy, loss)
        logs["best_accuracy"] = self.best_accuracy
        self.last_eval_logs = logs
        return logs

    def _export_best(self, step, accuracy, loss):
        """Writes `best-<step>` and `best.json`, then removes the previous best checkpoint."""
        # Every worker takes part in the write (variables sync on read); only the chief's
        # lands in best_dir.
        with worker_save_dir(self.best_dir, self.strategy) as directory:
            path = self.checkpoint.write(os.path.join(directory, f"best-{step}"))
        if not should_write(self.strategy):
            return
        write_text(os.path.join(self.best_dir, BEST_INFO),
                   json.dumps({"step": step, "accuracy": accuracy, "validation_loss": loss}))
        for old_step in self.exported_steps:
            for old_file in tf.io.gfile.glob(os.path.join(self.best_dir, f"best-{old_step}.*")):
                tf.io.gfile.remove(old_file)
        self.exported_steps.append(step)
        logging.info("Exported best checkpoint %s (accuracy %.4f)", path, accuracy)


def build_custom_trainer(params, task, strategy, mode="train_and_eval", best_dir=None):
    """Builds the custom trainer inside the strategy scope, as `run_experiment` would."""
    with strategy.scope():
        model = task.build_model()
        optimizer = task.create_optimizer(params.trainer.optimizer_config, params.runtime)
        return CustomTrainer(params, task, model=model, optimizer=optimizer,
                             train=mode_trains(mode), evaluate="eval" in mode,
                             best_dir=best_dir)


def main(_):
    model_dir = flags.FLAGS.model_dir
    params = ll.get_exp_config("digits_mlp")
    params.override({"trainer": {"train_steps": flags.FLAGS.train_steps,
                                 "validation_interval": flags.FLAGS.train_steps // 2,
                                 "steps_per_loop": 50, "summary_interval": 50,
                                 "checkpoint_interval": 100},
                     "runtime": {"enable_xla": True}})
    strategy = ll.strategy_from_runtime(params.runtime) or tf.distribute.get_strategy()
    with strategy.scope():
        task = ll.get_task(params.task, logging_dir=model_dir)
    trainer = build_custom_trainer(params, task, strategy, "train_and_eval",
                                   best_dir=os.path.join(model_dir, "custom_best"))
    ll.run_experiment(distribution_strategy=strategy, task=task, mode="train_and_eval",
                      params=params, model_dir=model_dir, trainer=trainer)
    logs = trainer.last_eval_logs
    print(f"final accuracy {float(logs['accuracy']):.4f}; best exported at steps "
          f"{trainer.exported_steps}; eval examples {int(logs['eval_examples'])}")


if __name__ == "__main__":
    flags.DEFINE_string("model_dir", None, "Where to write checkpoints and summaries.")
    flags.DEFINE_integer("train_steps", 200, "Training steps (evaluates at half and at the end).")
    flags.mark_flag_as_required("model_dir")
    app.run(main)
