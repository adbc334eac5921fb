"""TFM's VideoClassificationModel (official/vision/modeling/video_classification_model.py):
a 3D backbone -> global average pooling over time and space -> dropout -> dense logits.

The input is a dict `{'image': clips}` ([batch, frames, height, width, 3]), as TFM's parser
gives it. The pooled features are the last endpoint's (default), those of
`require_endpoints` concatenated in that order, or every endpoint's (`aggregate_endpoints`).
`model.backbone` and `model.checkpoint_items` are TFM's; `build_video_classification_model`
builds it from a config (TFM's factory_3d function). Layers follow the global dtype policy
(the logits come out in its compute dtype; the task casts them to float32).
"""

from __future__ import annotations

from typing import Optional, Sequence

import keras

from lite_launcher.vision.configs.video_classification import VideoClassificationModel
from lite_launcher.vision.modeling.backbones.factory import build_backbone
from lite_launcher.vision.modeling.factory import BackboneHead, norm_settings
from lite_launcher.vision.modeling.layers.nn_layers import register_serializable, serialize_value


@register_serializable
class VideoClassificationModel(BackboneHead, keras.Model):
    """backbone -> pooled endpoint(s) -> dropout -> dense (TFM's video classifier)."""

    def __init__(self, backbone: keras.Model, num_classes: int, input_shape,
                 dropout_rate: float = 0.0, aggregate_endpoints: bool = False,
                 kernel_initializer="random_uniform", kernel_regularizer=None,
                 require_endpoints: Optional[Sequence[str]] = None, **kwargs):
        inputs = {"image": keras.Input(shape=tuple(input_shape), name="image")}
        endpoints = backbone(inputs["image"])
        if aggregate_endpoints:
            names = list(endpoints)
        elif require_endpoints:
            names = list(require_endpoints)
        else:
            names = [max(endpoints)]  # the last level (TFM: the largest key)
        pooled = [keras.layers.GlobalAveragePooling3D(name=f"pool_{name}")(endpoints[name])
                  for name in names]
        x = pooled[0] if len(pooled) == 1 else keras.layers.Concatenate(axis=1)(pooled)
        x = keras.layers.Dropout(dropout_rate)(x)
        logits = keras.layers.Dense(num_classes, kernel_initializer=kernel_initializer,
                                    kernel_regularizer=kernel_regularizer, name="logits")(x)
        super().__init__(inputs=inputs, outputs=logits, **kwargs)
        self._backbone = backbone
        self._head_config = dict(
            num_classes=num_classes, input_shape=list(input_shape), dropout_rate=dropout_rate,
            aggregate_endpoints=aggregate_endpoints,
            kernel_initializer=serialize_value(kernel_initializer),
            kernel_regularizer=serialize_value(kernel_regularizer),
            require_endpoints=list(require_endpoints) if require_endpoints else None)


def feature_shape(task_config) -> list:
    """The clip shape the model is built for: train and validation `feature_shape`, a
    dimension that differs between them left None (TFM's `_get_feature_shape`)."""
    return [a if a == b else None for a, b in zip(task_config.train_data.feature_shape,
                                                  task_config.validation_data.feature_shape)]


def build_video_classification_model(input_shape, model_config: VideoClassificationModel,
                                     num_classes: int, l2_weight_decay: float = 0.0
                                     ) -> VideoClassificationModel:
    """The video classifier `model_config` describes on clips of `input_shape` (frames,
    height, width, channels; None where it varies) (TFM's
    `factory_3d.build_video_classification_model`)."""
    settings = norm_settings(model_config, l2_weight_decay)
    backbone = build_backbone(list(input_shape), model_config.backbone, settings)
    return VideoClassificationModel(
        backbone, num_classes, input_shape, dropout_rate=model_config.dropout_rate,
        aggregate_endpoints=model_config.aggregate_endpoints,
        kernel_regularizer=settings.kernel_regularizer,
        require_endpoints=model_config.require_endpoints, name="video_classification_model")
