"""The image classification task (TFM's official/vision/tasks/image_classification.py).

Losses: sparse or one-hot cross-entropy with label smoothing, soft labels, binary
cross-entropy, multi-label, `loss_weight`, and L2 weight decay on kernels. Metrics: accuracy and
top-k accuracy (plus precision / recall at thresholds; PR-AUC for multi-label evaluation).
`init_checkpoint` restores the whole model or, with `init_checkpoint_modules: backbone`, the
backbone only; `freeze_backbone` trains the head alone.
"""

from __future__ import annotations

from typing import Optional

import keras
import tensorflow as tf

from lite_launcher.core.base_config import ConfigError
from lite_launcher.core.base_task import Task, _split_inputs
from lite_launcher.core.registry import register_task_cls
from lite_launcher.vision.configs import image_classification as configs
from lite_launcher.vision.dataloaders import classification_input
from lite_launcher.vision.modeling import classification_model
from lite_launcher.vision.serving import image_classification as serving
from lite_launcher.vision.tasks import common

# Soft labels below label_smoothing / num_classes + this are negatives for binary CE (TFM's).
_EPSILON = 1e-6


def _vit_grid_hint(detail: str) -> str:
    """The fix for a ViT checkpoint pretrained at another input size, when `detail` says the
    position embedding does not fit."""
    if "pos_embedding" not in detail:
        return ""
    return (" (set task.model.backbone.vit.pos_embed_shape to the pretraining patch grid, "
            "e.g. [14, 14] for 224x224 with 16x16 patches)")


@register_task_cls(configs.ImageClassificationTask)
class ImageClassificationTask(Task):
    """Classifies images read from `tf.train.Example` TFRecords."""

    def build_model(self) -> keras.Model:
        config = self.task_config
        configs.check_buildable(config)
        model = classification_model.build_classification_model(
            config.model, config.losses.l2_weight_decay)
        if config.freeze_backbone:
            model.backbone.trainable = False
        return model

    def initialize(self, model: keras.Model) -> None:
        """Restores `init_checkpoint`: the whole model ('all') or its backbone ('backbone').

        A lite checkpoint restores as it is; a TFM-written one (a tf_keras object graph) is
        mapped onto the model by `tfm_checkpoint` (its optimizer and global step ignored)."""
        try:
            common.restore_init_checkpoint(model, self.task_config)
        except ConfigError as e:
            hint = _vit_grid_hint(str(e))
            if not hint:
                raise
            raise ConfigError(f"{e}{hint}") from e

    def build_inputs(self, params, input_context: Optional[tf.distribute.InputContext] = None):
        configs.check_buildable(self.task_config)
        return classification_input.build_dataset(params, self.task_config, input_context)

    # TFM's serving input types (official/vision/serving/image_classification.py).
    serving_input_types = serving.INPUT_TYPES

    def build_serving_fn(self, model: keras.Model, input_type: str, batch_size=None,
                         input_image_size=None):
        """`inputs` (TFM's image_tensor, image_bytes, tf_example, ...) -> `logits`, `probs`."""
        return serving.build_serving_fn(self, model, input_type, batch_size, input_image_size)

    # ----- labels, losses, metrics ---------------------------------------------------

    # do_not_convert: graph-safe as written (no Python control flow on tensors, no user code
    # called), so AutoGraph's conversion would only add time to the first trace (issue 31).
    @tf.autograph.experimental.do_not_convert
    def _loss_labels(self, labels, training: bool):
        """Labels in the form the loss expects (TFM's train_step / validation_step)."""
        config = self.task_config
        losses = config.losses
        num_classes = config.model.num_classes
        if config.train_data.is_multilabel:
            return labels
        sparse = labels.shape.rank == 1
        if sparse and (losses.one_hot or losses.use_binary_cross_entropy
                       or (losses.soft_labels and not training)):
            return tf.one_hot(labels, num_classes)
        if (training and losses.use_binary_cross_entropy
                and config.train_data.mixup_and_cutmix is not None):
            threshold = config.train_data.mixup_and_cutmix.label_smoothing / num_classes
            return tf.where(labels < threshold + _EPSILON, 0.0, 1.0)
        return labels

    @tf.autograph.experimental.do_not_convert
    def build_losses(self, labels, model_outputs, aux_losses=None) -> tf.Tensor:
        """The mean loss over the batch (0 for an empty batch), plus `aux_losses`, weighted.

        `labels` as the loss expects them: one-hot / soft with `one_hot` or `soft_labels`,
        class ids otherwise, multi-hot for multi-label data.
        """
        config = self.task_config
        losses = config.losses
        logits = tf.cast(model_outputs, tf.float32)
        if config.train_data.is_multilabel:
            per_example = keras.losses.binary_crossentropy(
                tf.cast(labels, tf.float32), logits, from_logits=True,
                label_smoothing=losses.label_smoothing, axis=-1)
            per_example = per_example * config.model.num_classes  # a sum over classes
        elif losses.use_binary_cross_entropy:
            per_example = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
                labels=tf.cast(labels, tf.float32), logits=logits), axis=-1)
        elif losses.one_hot:
            per_example = keras.losses.categorical_crossentropy(
                tf.cast(labels, tf.float32), logits, from_logits=True,
                label_smoothing=losses.label_smoothing)
        elif losses.soft_labels:
            per_example = tf.nn.softmax_cross_entropy_with_logits(
                tf.cast(labels, tf.float32), logits)
        else:
            per_example = keras.losses.sparse_categorical_crossentropy(
                labels, logits, from_logits=True)
        per_example = tf.cast(per_example, tf.float32)
        total = tf.math.divide_no_nan(tf.reduce_sum(per_example),
                                      tf.cast(tf.size(per_example), tf.float32))
        if aux_losses:
            total += tf.add_n([tf.cast(l, tf.float32) for l in aux_losses])
        return losses.loss_weight * total

    def build_metrics(self, training: bool = True):
        config = self.task_config
        if config.train_data.is_multilabel:
            if training:  # TFM leaves PR-AUC out of training (memory)
                return []
            return [keras.metrics.AUC(name="globalPR-AUC", curve="PR", multi_label=False,
                                      from_logits=True),
                    keras.metrics.AUC(name="meanPR-AUC", curve="PR", multi_label=True,
                                      num_labels=config.model.num_classes, from_logits=True)]
        k = config.evaluation.top_k
        if not (config.losses.one_hot or config.losses.soft_labels):
            return [keras.metrics.SparseCategoricalAccuracy(name="accuracy"),
                    keras.metrics.SparseTopKCategoricalAccuracy(k=k, name=f"top_{k}_accuracy")]
        metrics = [keras.metrics.CategoricalAccuracy(name="accuracy"),
                   keras.metrics.TopKCategoricalAccuracy(k=k, name=f"top_{k}_accuracy")]
        thresholds = config.evaluation.precision_and_recall_thresholds or []
        class_ids = [None]
        if config.evaluation.report_per_class_precision_and_recall:
            class_ids += list(range(config.model.num_classes))
        for class_id in class_ids:
            suffix = "" if class_id is None else f"/{class_id}"
            for kind, cls in (("precision", keras.metrics.Precision),
                              ("recall", keras.metrics.Recall)):
                metrics += [cls(thresholds=t, top_k=1, class_id=class_id,
                                name=f"{kind}_at_threshold_{t}{suffix}") for t in thresholds]
        return metrics

    @tf.autograph.experimental.do_not_convert
    def process_metrics(self, metrics, labels, model_outputs, **kwargs):
        outputs = tf.cast(model_outputs, tf.float32)
        if self.task_config.model.output_softmax:
            outputs = tf.nn.softmax(outputs, axis=-1)
        super().process_metrics(metrics, labels, outputs, **kwargs)

    # ----- steps: the base steps on converted labels ------------------------------------

    @tf.autograph.experimental.do_not_convert
    def _with_loss_labels(self, inputs, training: bool):
        features, labels = _split_inputs(inputs)
        return features, self._loss_labels(labels, training)

    def compute_gradients(self, inputs, model: keras.Model, optimizer):
        return super().compute_gradients(self._with_loss_labels(inputs, True), model, optimizer)

    def apply_update(self, inputs, grads, loss, model_outputs, model: keras.Model, optimizer,
                     metrics=None):
        return super().apply_update(self._with_loss_labels(inputs, True), grads, loss,
                                    model_outputs, model=model, optimizer=optimizer,
                                    metrics=metrics)

    def validation_step(self, inputs, model: keras.Model, metrics=None):
        return super().validation_step(self._with_loss_labels(inputs, False), model,
                                       metrics=metrics)
