"""TFM's SegmentationModel: backbone -> decoder -> head, outputs {'logits': ...}.

The DeepLab v3+ fusion lives in the head (it reads the backbone's low-level endpoint), not in
the decoder, so decoders and fusions combine freely, as in TFM. `factory.build_segmentation_model`
builds the model a `SemanticSegmentationModel` config describes.
"""

from __future__ import annotations

from typing import Dict, Optional

import keras

from lite_launcher.vision.modeling.layers.nn_layers import register_serializable


@register_serializable
class SegmentationModel(keras.Model):
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

    @property
    def backbone(self) -> keras.Model:
        return self._backbone

    @property
    def decoder(self) -> Optional[keras.layers.Layer]:
        return self._decoder

    @property
    def head(self) -> keras.layers.Layer:
        return self._head

    @property
    def checkpoint_items(self) -> Dict[str, keras.layers.Layer]:
        """Saved in checkpoints besides the model, as TFM's: backbone, decoder (when there is
        one) and head; `init_checkpoint_modules` restores them by these names."""
        items = {"backbone": self._backbone, "head": self._head}
        if self._decoder is not None:
            items["decoder"] = self._decoder
        return items

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
