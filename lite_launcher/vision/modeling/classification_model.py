"""TFM's ClassificationModel (official/vision/modeling/classification_model.py): backbone ->
[BN] -> global average pool -> dropout -> dense; `model.backbone` and `model.checkpoint_items`
as TFM's; `build_classification_model` builds it from a config (TFM's factory function).

Every layer has `get_config` (and `from_config` where its arguments are not plain values), so
`model.save("m.keras")` / `keras.models.load_model` and `keras.models.clone_model` round-trip.
Layers follow the global Keras dtype policy, so `mixed_float16` / `mixed_bfloat16` work; the
logits come out in the policy's compute dtype (the task casts them to float32).
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence

import keras

from lite_launcher.vision.configs.image_classification import ImageClassificationModel
from lite_launcher.vision.modeling.backbones.factory import build_backbone
from lite_launcher.vision.modeling.factory import norm_settings
from lite_launcher.vision.modeling.layers.nn_layers import (
    NormSettings, register_serializable, serialize_value)


@register_serializable
class ClassificationModel(keras.Model):
    """backbone -> [BN] -> global average pooling -> dropout -> dense logits (TFM's head)."""

    def __init__(self, backbone: keras.Model, num_classes: int, input_shape,
                 dropout_rate: float = 0.0, kernel_initializer="random_uniform",
                 kernel_regularizer=None, add_head_batch_norm: bool = False,
                 norm_settings: Optional[NormSettings] = None, **kwargs):
        norm_settings = NormSettings.of(norm_settings)
        inputs = keras.Input(shape=tuple(input_shape), name="image")
        endpoints = backbone(inputs)
        # TFM's head reads the endpoint with the largest key, compared as strings (the last
        # feature map; ViT's named 'pre_logits' / 'encoded_tokens' sort above the levels).
        x = endpoints[max(endpoints)] if isinstance(endpoints, dict) else endpoints
        if add_head_batch_norm:
            x = norm_settings.norm(name="head_norm")(x)
        if len(x.shape) == 3:  # a token sequence (ViT's encoded_tokens)
            x = keras.layers.GlobalAveragePooling1D()(x)
        else:
            x = keras.layers.GlobalAveragePooling2D()(x)
        x = keras.layers.Dropout(dropout_rate)(x)
        logits = keras.layers.Dense(num_classes, kernel_initializer=kernel_initializer,
                                    kernel_regularizer=kernel_regularizer, name="logits")(x)
        super().__init__(inputs=inputs, outputs=logits, **kwargs)
        self._backbone = backbone
        self._head_config = dict(
            num_classes=num_classes, input_shape=list(input_shape), dropout_rate=dropout_rate,
            kernel_initializer=serialize_value(kernel_initializer),
            kernel_regularizer=serialize_value(kernel_regularizer),
            add_head_batch_norm=add_head_batch_norm, norm_settings=norm_settings.get_config())

    @property
    def backbone(self) -> keras.Model:
        """The backbone (restored alone by `init_checkpoint_modules: backbone`)."""
        return self._backbone

    @property
    def checkpoint_items(self) -> Dict[str, keras.Model]:
        """Saved in checkpoints besides the model, as TFM's: `backbone`."""
        return {"backbone": self._backbone}

    def init_checkpoint_items(self, modules: Sequence[str]) -> Dict[str, keras.Model]:
        """The items `task.init_checkpoint_modules` restores, as TFM's task: 'all' reads the
        checkpoint's `model`, 'backbone' its `backbone`."""
        return {"model": self} if "all" in modules else {"backbone": self._backbone}

    def get_config(self):
        return {"name": self.name, "trainable": self.trainable,
                "backbone": keras.saving.serialize_keras_object(self._backbone),
                **self._head_config}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(
            config["backbone"], custom_objects=custom_objects)
        for key, deserialize in (("kernel_regularizer", keras.regularizers.deserialize),
                                 ("kernel_initializer", keras.initializers.deserialize)):
            if isinstance(config.get(key), dict):
                config[key] = deserialize(config[key])
        trainable = config.pop("trainable", True)
        model = cls(**config)
        model.trainable = trainable
        return model


def build_classification_model(model_config: ImageClassificationModel,
                               l2_weight_decay: float = 0.0) -> ClassificationModel:
    """The classifier `model_config` describes (TFM's `build_classification_model`)."""
    settings = norm_settings(model_config, l2_weight_decay)
    input_shape = list(model_config.input_size)
    backbone = build_backbone(input_shape, model_config.backbone, settings)
    norm = model_config.norm_activation
    # TFM's head batch norm takes no activation and no regularizer.
    head_settings = NormSettings(momentum=norm.norm_momentum, epsilon=norm.norm_epsilon,
                                 synchronized=norm.use_sync_bn)
    return ClassificationModel(
        backbone, model_config.num_classes, input_shape,
        dropout_rate=model_config.dropout_rate,
        kernel_initializer=model_config.kernel_initializer,
        kernel_regularizer=settings.kernel_regularizer,
        add_head_batch_norm=model_config.add_head_batch_norm,
        norm_settings=head_settings, name="classification_model")
