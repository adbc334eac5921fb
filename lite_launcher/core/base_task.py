"""The `Task` base class: what to train (model, data, loss, metrics), with TFM's contract.

A Task knows nothing about loops, checkpoints or summaries: the Trainer calls `train_step` /
`validation_step` once per step (per replica, under a distribution strategy) and the Controller
schedules the Trainer.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import tensorflow as tf
import keras
from absl import logging

from lite_launcher import optimization
from lite_launcher.checkpointing import checkpoints
from lite_launcher.core.base_config import ConfigError


# do_not_convert: graph-safe as written (no Python control flow on tensors, no user code
# called), so AutoGraph's conversion would only add time to the first trace (issue 31).
@tf.autograph.experimental.do_not_convert
def _split_inputs(inputs):
    if isinstance(inputs, (tuple, list)) and len(inputs) == 2:
        return inputs[0], inputs[1]
    return inputs, inputs


@tf.autograph.experimental.do_not_convert
def is_loss_scale_optimizer(optimizer) -> bool:
    return isinstance(optimizer, keras.optimizers.LossScaleOptimizer)


def sync_non_finite_gradients(grads):
    """Makes every replica's gradients non-finite when any replica's are.

    Keras 3's LossScaleOptimizer judges finiteness on the local, not yet summed, gradients of
    one replica: an Inf on another replica would be applied and the scale not lowered. One
    all-reduced flag fixes that, so all replicas skip the step together.
    """
    replica_context = tf.distribute.get_replica_context()
    if replica_context is None or replica_context.num_replicas_in_sync == 1:
        return grads
    present = [g for g in grads if g is not None]
    if not present:
        return grads
    local_non_finite = tf.logical_not(tf.reduce_all(
        [tf.reduce_all(tf.math.is_finite(g)) for g in present]))
    any_non_finite = replica_context.all_reduce(
        tf.distribute.ReduceOp.SUM, tf.cast(local_non_finite, tf.float32)) > 0
    return [None if g is None else
            tf.where(any_non_finite, tf.fill(tf.shape(g), tf.constant(float("nan"), g.dtype)), g)
            for g in grads]


class Task(tf.Module):
    """A training task: builds the model, inputs, losses, metrics and one step.

    Subclass it, register it for its config class with `@ll.register_task_cls(MyTaskConfig)`,
    and override at least `build_model`, `build_inputs` and `build_losses`.
    """

    # Key of the loss in the logs returned by `train_step` / `validation_step`.
    loss = "loss"

    def __init__(self, params, logging_dir: Optional[str] = None, name: Optional[str] = None):
        super().__init__(name=name)
        self._task_config = params
        # An empty directory means the current working directory, as in TFM.
        self._logging_dir = logging_dir or ""

    @property
    def task_config(self):
        return self._task_config

    @property
    def logging_dir(self) -> str:
        return self._logging_dir

    @classmethod
    def create_optimizer(cls, optimizer_config, runtime_config=None):
        """Builds a Keras 3 optimizer from `OptimizationConfig`.

        With `runtime_config.mixed_precision_dtype == "float16"` the optimizer is wrapped in a
        `keras.optimizers.LossScaleOptimizer` (dynamic, or fixed by `runtime_config.loss_scale`).
        """
        factory = optimization.OptimizerFactory(optimizer_config)
        optimizer = factory.build_optimizer(factory.build_learning_rate())
        if runtime_config is not None:
            optimizer = optimization.configure_loss_scale(
                optimizer,
                use_float16=runtime_config.mixed_precision_dtype == "float16",
                loss_scale=runtime_config.loss_scale)
        return optimizer

    def initialize(self, model: keras.Model) -> None:
        """Restores `task_config.init_checkpoint` into the model, when one is set.

        Called by the checkpoint manager only when model_dir has no checkpoint. A directory
        means its latest checkpoint.
        """
        ckpt_dir_or_file = getattr(self.task_config, "init_checkpoint", "")
        if not ckpt_dir_or_file:
            return
        logging.info("Loading pretrained checkpoint from %s", ckpt_dir_or_file)
        items = getattr(model, "checkpoint_items", None) or {"model": model}
        checkpoints.read_weights(items, ckpt_dir_or_file)

    def build_model(self) -> keras.Model:
        """Creates the model. Override it."""
        raise NotImplementedError(f"{type(self).__name__} must implement build_model().")

    def build_inputs(self, params, input_context: Optional[tf.distribute.InputContext] = None):
        """Returns a `tf.data.Dataset` with the per-replica batch size for `params`.

        Under a distribution strategy this runs once per input pipeline with its
        `input_context`. Override it.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement build_inputs().")

    def build_losses(self, labels, model_outputs, aux_losses=None) -> tf.Tensor:
        """Returns the scalar loss. The base version adds up `aux_losses` only."""
        del labels, model_outputs
        if not aux_losses:
            return tf.constant(0.0, dtype=tf.float32)
        return tf.add_n([tf.cast(l, tf.float32) for l in aux_losses])

    def build_metrics(self, training: bool = True):
        """Returns a list of `keras.metrics.Metric` updated by `process_metrics`."""
        del training
        return []

    # Unconverted as Keras 3's own train step calls metrics (Keras metrics are graph-safe
    # without AutoGraph); a subclass's override is still converted (issue 31).
    @tf.autograph.experimental.do_not_convert
    def process_metrics(self, metrics, labels, model_outputs, **kwargs):
        """Updates every metric with (labels, model_outputs)."""
        del kwargs
        for metric in metrics:
            metric.update_state(labels, model_outputs)

    def train_step(self, inputs, model: keras.Model, optimizer, metrics=None) -> Dict[str, Any]:
        """One forward/backward pass and update on one replica's batch.

        `compute_gradients` then `apply_update`; override either part, or this whole method.
        With `runtime.enable_xla` the Trainer compiles this method whole under the default
        strategy; under any other strategy it compiles `compute_gradients` alone (the update
        synchronises replicas, which XLA cannot compile), so there an overridden `train_step`
        runs without XLA. Returns `{self.loss: loss}` (the unscaled per-replica loss).
        """
        grads, loss, outputs = self.compute_gradients(inputs, model, optimizer)
        return self.apply_update(inputs, grads, loss, outputs, model=model, optimizer=optimizer,
                                 metrics=metrics)

    def compute_gradients(self, inputs, model: keras.Model, optimizer):
        """Forward pass, loss and gradients on one replica's batch; applies no update.

        The loss used for the gradient is divided by `num_replicas_in_sync`, since Keras 3
        optimizers sum gradients across replicas: the update then follows the global-batch
        mean. With a `LossScaleOptimizer` the gradients are of the scaled loss.

        Returns:
          `(grads, loss, model_outputs)`: one gradient per `model.trainable_variables`, the
          unscaled per-replica loss, and the model outputs (for metrics).
        """
        features, labels = _split_inputs(inputs)
        with tf.GradientTape() as tape:
            outputs = model(features, training=True)
            loss = self.build_losses(labels=labels, model_outputs=outputs,
                                     aux_losses=model.losses)
            num_replicas = tf.distribute.get_strategy().num_replicas_in_sync
            # Dividing by 1 is exact; skipping it saves ops in every step.
            scaled_loss = loss / num_replicas if num_replicas > 1 else loss
            if is_loss_scale_optimizer(optimizer):
                scaled_loss = optimizer.scale_loss(scaled_loss)
        grads = tape.gradient(scaled_loss, model.trainable_variables)
        return grads, loss, outputs

    def apply_update(self, inputs, grads, loss, model_outputs, model: keras.Model, optimizer,
                     metrics=None) -> Dict[str, Any]:
        """Applies `compute_gradients`' results and updates the metrics; returns the logs.

        With a `LossScaleOptimizer`, a non-finite gradient on any replica makes every replica
        skip the step (see `sync_non_finite_gradients`); `apply_gradients` then unscales the
        gradients, skips the step and lowers the loss scale. Several optimizers: pass a
        `keras.optimizers.MultiOptimizer` (it sends each variable to its optimizer); with a
        dict or list of optimizers override this method, since which variables each one
        trains is the model's to say.
        """
        if isinstance(optimizer, (dict, list, tuple)):
            raise TypeError(
                f"Task.apply_update got a {type(optimizer).__name__} of {len(optimizer)} "
                f"optimizers and cannot tell which variables each one trains: use "
                f"keras.optimizers.MultiOptimizer, or override {type(self).__name__}."
                f"apply_update to apply each to its variables.")
        if is_loss_scale_optimizer(optimizer):
            grads = sync_non_finite_gradients(grads)
        optimizer.apply_gradients(list(zip(grads, model.trainable_variables)))
        if metrics:
            self.process_metrics(metrics, _split_inputs(inputs)[1], model_outputs)
        return {self.loss: loss}

    def validation_step(self, inputs, model: keras.Model, metrics=None) -> Dict[str, Any]:
        """Forward pass, loss and metric updates on one replica's batch."""
        features, labels = _split_inputs(inputs)
        outputs = self.inference_step(features, model)
        loss = self.build_losses(labels=labels, model_outputs=outputs, aux_losses=model.losses)
        if metrics:
            self.process_metrics(metrics, labels, outputs)
        return {self.loss: loss}

    def inference_step(self, inputs, model: keras.Model):
        """The forward pass in inference mode."""
        return model(inputs, training=False)

    # The `lite-export --input_type` values `build_serving_fn` accepts; the first is the default.
    serving_input_types = ("tensor",)

    def build_serving_fn(self, model: keras.Model, input_type: str, batch_size=None,
                         input_image_size=None):
        """What `lite-export` saves as a serving signature (TFM's `ExportModule.serve`).

        Returns `(fn, input_spec)`: `fn(inputs)` maps one batch of `input_spec` (a named
        `tf.TensorSpec`) to a dict of named output tensors, calling `inference_step`. Override
        it (and `serving_input_types`) to serve another input, e.g. encoded bytes. The base
        serves input type "tensor": the model's own input (its shape and dtype, batch size
        `batch_size` or any) under the name "inputs", and returns {"outputs": the model's
        output} (or the model's dict of outputs).

        Raises:
          ConfigError: `input_type` is not one of `serving_input_types`, `input_image_size`
            is given, or the model has not one input of a known shape.
        """
        if input_type not in self.serving_input_types:
            raise ConfigError(f"--input_type {input_type!r} is not served by "
                              f"{type(self).__name__}; valid: "
                              f"{', '.join(self.serving_input_types)}.")
        if input_image_size:
            raise ConfigError(f"--input_image_size applies to image tasks; "
                              f"{type(self).__name__} serves the model's own input, so leave "
                              f"it out.")
        model_inputs = getattr(model, "inputs", None)
        if not model_inputs or len(model_inputs) != 1:
            raise ConfigError(
                f"{type(self).__name__}'s model ({type(model).__name__}) has "
                f"{len(model_inputs or [])} fixed inputs; the base serving function needs "
                f"exactly one: override Task.build_serving_fn.")
        shape = [batch_size] + list(model_inputs[0].shape[1:])
        spec = tf.TensorSpec(shape, tf.as_dtype(model_inputs[0].dtype), name="inputs")

        def serve(inputs):
            outputs = self.inference_step(inputs, model)
            return dict(outputs) if isinstance(outputs, dict) else {"outputs": outputs}

        return serve, spec

    def aggregate_logs(self, state=None, step_logs=None):
        """Folds one eval step's outputs into `state` on the host. The base keeps nothing."""
        del step_logs
        return state

    def reduce_aggregated_logs(self, aggregated_logs, global_step=None) -> Dict[str, Any]:
        """Turns the aggregated state into final eval logs. The base returns none."""
        del aggregated_logs, global_step
        return {}
