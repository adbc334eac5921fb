"""TFM's SegmentationModel: backbone -> decoder -> head, outputs {'logits': ...}.

The DeepLab v3+ fusion lives in the head (it reads the backbone's low-level endpoint), not in
the decoder, so decoders and fusions combine freely, as in TFM. `build_segmentation_model`
builds the model a `SemanticSegmentationModel` config describes (TFM's factory function).
"""

from __future__ import annotations

from typing import Optional

import keras

from lite_launcher.vision.configs.semantic_segmentation import SemanticSegmentationModel
from lite_launcher.vision.modeling.backbones.factory import build_backbone
from lite_launcher.vision.modeling.decoders.factory import build_decoder
from lite_launcher.vision.modeling.factory import BackboneDecoderHead, norm_settings
from lite_launcher.vision.modeling.heads.segmentation_heads import SegmentationHead
from lite_launcher.vision.modeling.layers.nn_layers import register_serializable


@register_serializable
class SegmentationModel(BackboneDecoderHead, keras.Model):
    """A Functional model image -> {'logits': [batch, h, w, num_classes]} of a backbone
    ({level: features}), an optional decoder and a `SegmentationHead` (TFM's)."""

    def __init__(self, backbone: keras.Model, decoder: Optional[keras.layers.Layer],
                 head: keras.layers.Layer, input_shape=None, **kwargs):
        shape = tuple(input_shape) if input_shape is not None else tuple(backbone.input.shape[1:])
        inputs = keras.Input(shape=shape, name="image")
        backbone_features = backbone(inputs)
        decoder_features = decoder(backbone_features) if decoder is not None else (
            backbone_features)
        logits = head((backbone_features, decoder_features))
        super().__init__(inputs=inputs, outputs={"logits": logits}, **kwargs)
        self._backbone, self._decoder, self._head = backbone, decoder, head
        self._input_shape = list(shape)

    def get_config(self):
        serialize = keras.saving.serialize_keras_object
        return {"name": self.name, "trainable": self.trainable,
                "backbone": serialize(self._backbone),
                "decoder": serialize(self._decoder) if self._decoder is not None else None,
                "head": serialize(self._head), "input_shape": self._input_shape}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        for key in ("backbone", "decoder", "head"):
            if config.get(key) is not None:
                config[key] = keras.saving.deserialize_keras_object(
                    config[key], custom_objects=custom_objects)
        trainable = config.pop("trainable", True)
        model = cls(**config)
        model.trainable = trainable
        return model


def build_segmentation_model(model_config: SemanticSegmentationModel,
                             l2_weight_decay: float = 0.0) -> SegmentationModel:
    """TFM's `factory.build_segmentation_model` for `model_config`."""
    settings = norm_settings(model_config, l2_weight_decay)
    input_shape = list(model_config.input_size)
    backbone = build_backbone(input_shape, model_config.backbone, settings)
    specs = {key: tuple(tensor.shape) for key, tensor in backbone.output.items()}
    decoder = build_decoder(specs, model_config, settings)
    head_config = model_config.head
    # TFM's factory leaves decoder_min/max_level out (its panoptic fusion then fails); lite
    # passes the config's.
    head = SegmentationHead(
        num_classes=model_config.num_classes, level=head_config.level,
        num_convs=head_config.num_convs, num_filters=head_config.num_filters,
        use_depthwise_convolution=head_config.use_depthwise_convolution,
        prediction_kernel_size=head_config.prediction_kernel_size,
        upsample_factor=head_config.upsample_factor,
        feature_fusion=head_config.feature_fusion,
        decoder_min_level=head_config.decoder_min_level,
        decoder_max_level=head_config.decoder_max_level, low_level=head_config.low_level,
        low_level_num_filters=head_config.low_level_num_filters,
        logit_activation=head_config.logit_activation, settings=settings, name="head")
    return SegmentationModel(backbone, decoder, head, input_shape=input_shape,
                             name="segmentation_model")
