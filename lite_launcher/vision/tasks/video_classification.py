"""The video classification task (TFM's official/vision/tasks/video_classification.py).

As TFM's: the model's logits become probabilities (softmax, or sigmoid for multi-label data)
before the loss and the metrics; the loss is categorical cross-entropy on them with label
smoothing (`losses.one_hot`), sparse categorical cross-entropy otherwise, each averaged over
the batch, or for multi-label data binary cross-entropy per clip, whose sum over the batch
TFM differentiates (its loss is the per-clip vector, the L2 terms added to each clip); plus
the L2 terms. Metrics: accuracy, top-1 and top-5 accuracy (sparse or one-hot); for
multi-label data also ROC-AUC, recall at 95 % precision, PR-AUC and, with
`metrics.use_per_class_recall`, each class's recall. Evaluation averages the probabilities
over `num_test_clips x num_test_crops` views of each clip. `init_checkpoint` restores the whole
model ('all') or its backbone ('backbone'), TFM-written checkpoints included;
`freeze_backbone` trains the head alone.
"""

from __future__ import annotations

from typing import Optional

import keras
import tensorflow as tf

from lite_launcher.core.base_task import Task, _split_inputs, is_loss_scale_optimizer
from lite_launcher.core.registry import register_task_cls
from lite_launcher.vision.configs import video_classification as configs
from lite_launcher.vision.modeling import video_classification_model
from lite_launcher.vision.serving import video_classification as serving
from lite_launcher.vision.tasks import common


@register_task_cls(configs.VideoClassificationTask)
class VideoClassificationTask(Task):
    """Classifies clips read from SequenceExample TFRecords (or TFDS)."""

    def _num_classes(self) -> int:
        return self.task_config.train_data.num_classes

    def _is_multilabel(self) -> bool:
        return self.task_config.train_data.is_multilabel

    def _num_test_views(self) -> int:
        data = self.task_config.validation_data
        return data.num_test_clips * data.num_test_crops

    def build_model(self) -> keras.Model:
        config = self.task_config
        configs.check_buildable(config)
        model = video_classification_model.build_video_classification_model(
            video_classification_model.feature_shape(config), config.model,
            self._num_classes(), config.losses.l2_weight_decay)
        if config.freeze_backbone:
            model.backbone.trainable = False
        return model

    def initialize(self, model: keras.Model) -> None:
        """Restores `init_checkpoint`: the whole model ('all') or its backbone ('backbone');
        a TFM-written checkpoint is mapped onto it by `tfm_checkpoint`."""
        common.restore_init_checkpoint(model, self.task_config)

    def build_inputs(self, params, input_context: Optional[tf.distribute.InputContext] = None):
        """TFM's video input (`video_input.build_dataset`): the SequenceExample (or TFDS)
        decoder, the clip parser of `params` and the post-batch reshape of evaluation views;
        audio as `train_data` says, as TFM's task reads it."""
        # The input modules load only with a run that reads data (serving needs neither).
        from lite_launcher.vision.dataloaders import video_input  # pylint: disable=import-outside-toplevel
        configs.check_buildable(self.task_config)
        return video_input.build_dataset(params, input_context,
                                         train_data=self.task_config.train_data)

    @staticmethod
    @tf.autograph.experimental.do_not_convert
    def _model_inputs(features):
        """What the model takes of the parsed features: the clips (TFM's model reads
        `image` only; `audio`, when the data outputs it, is not its input)."""
        if isinstance(features, dict):
            return {"image": features["image"]}
        return {"image": features}

    # ----- losses and metrics on probabilities (TFM's) ------------------------------------

    @tf.autograph.experimental.do_not_convert
    def _probabilities(self, logits):
        logits = tf.cast(logits, tf.float32)
        return tf.sigmoid(logits) if self._is_multilabel() else tf.nn.softmax(logits)

    @tf.autograph.experimental.do_not_convert
    def build_losses(self, labels, model_outputs, aux_losses=None) -> tf.Tensor:
        """The loss of `model_outputs`, the probabilities (TFM's contract), plus
        `aux_losses`: see the module docstring."""
        losses = self.task_config.losses
        probs = tf.cast(model_outputs, tf.float32)
        aux = (tf.add_n([tf.cast(l, tf.float32) for l in aux_losses]) if aux_losses
               else tf.constant(0.0))
        if self._is_multilabel():
            per_clip = keras.losses.binary_crossentropy(tf.cast(labels, tf.float32), probs,
                                                        from_logits=False)
            return tf.reduce_sum(per_clip + aux)
        if losses.one_hot:
            per_clip = keras.losses.categorical_crossentropy(
                tf.cast(labels, tf.float32), probs, from_logits=False,
                label_smoothing=losses.label_smoothing)
        else:
            per_clip = keras.losses.sparse_categorical_crossentropy(labels, probs,
                                                                    from_logits=False)
        per_clip = tf.cast(per_clip, tf.float32)
        mean = tf.math.divide_no_nan(tf.reduce_sum(per_clip),
                                     tf.cast(tf.size(per_clip), tf.float32))
        return mean + aux

    def build_metrics(self, training: bool = True):
        del training
        if not self.task_config.losses.one_hot:
            return [keras.metrics.SparseCategoricalAccuracy(name="accuracy"),
                    keras.metrics.SparseTopKCategoricalAccuracy(k=1, name="top_1_accuracy"),
                    keras.metrics.SparseTopKCategoricalAccuracy(k=5, name="top_5_accuracy")]
        metrics = [keras.metrics.CategoricalAccuracy(name="accuracy"),
                   keras.metrics.TopKCategoricalAccuracy(k=1, name="top_1_accuracy"),
                   keras.metrics.TopKCategoricalAccuracy(k=5, name="top_5_accuracy")]
        if self._is_multilabel():
            num_classes = self._num_classes()
            metrics += [
                keras.metrics.AUC(curve="ROC", multi_label=True, num_labels=num_classes,
                                  name="ROC-AUC"),
                keras.metrics.RecallAtPrecision(0.95, name="RecallAtPrecision95"),
                keras.metrics.AUC(curve="PR", multi_label=True, num_labels=num_classes,
                                  name="PR-AUC")]
            if self.task_config.metrics.use_per_class_recall:
                metrics += [keras.metrics.Recall(class_id=i, name=f"recall-{i}")
                            for i in range(num_classes)]
        return metrics

    # ----- steps ----------------------------------------------------------------------------

    def compute_gradients(self, inputs, model: keras.Model, optimizer):
        """TFM's train step up to the update: the loss of the probabilities; returns the
        probabilities as the outputs the metrics read."""
        features, labels = _split_inputs(inputs)
        with tf.GradientTape() as tape:
            probs = self._probabilities(model(self._model_inputs(features), training=True))
            loss = self.build_losses(labels, probs, aux_losses=model.losses)
            num_replicas = tf.distribute.get_strategy().num_replicas_in_sync
            scaled_loss = loss / num_replicas if num_replicas > 1 else loss
            if is_loss_scale_optimizer(optimizer):
                scaled_loss = optimizer.scale_loss(scaled_loss)
        grads = tape.gradient(scaled_loss, model.trainable_variables)
        return grads, loss, probs

    @tf.autograph.experimental.do_not_convert
    def inference_step(self, inputs, model: keras.Model):
        """The probabilities of each clip, averaged over its evaluation views (TFM's)."""
        probs = self._probabilities(model(self._model_inputs(inputs), training=False))
        views = self._num_test_views()
        if views > 1:
            probs = tf.reduce_mean(tf.reshape(probs, [-1, views, probs.shape[-1]]), axis=1)
        return probs

    # ----- serving --------------------------------------------------------------------------

    serving_input_types = serving.INPUT_TYPES

    def build_serving_fn(self, model: keras.Model, input_type: str, batch_size=None,
                         input_image_size=None):
        """`image_tensor` (uint8 clips) or `tf_example` / `serve_examples` (serialized
        SequenceExamples) -> `logits`, `probs` (TFM's video export module)."""
        return serving.build_serving_fn(self, model, input_type, batch_size, input_image_size)
