"""What the model builders of every vision family share (TFM's official/vision/modeling/factory.py
holds the builders themselves; here each family's builder sits beside its model class,
`classification_model.build_classification_model`, `segmentation_model.build_segmentation_model`,
so that a run imports only its own family).

TFM's builder names resolve here too, on first use (`factory.build_maskrcnn(...)`, as a TFM
user writes it): `BUILDERS` names each one's module, imported only when asked for (each
model module imports this one, so these are lazy look-ups, not imports).

L2 on kernels as TFM: `l2(decay / 2)` on every kernel (i.e. decay * tf.nn.l2_loss).
The detection models (RetinaNet, Mask R-CNN) share how their heads meet the decoder
(`decoder_inputs`, `feature_specs`) and how they come back from a `.keras` file
(`model_from_config`).
"""

from __future__ import annotations

import importlib
from typing import Any, Dict, Optional, Sequence

import keras

from lite_launcher.common.errors import ConfigError
from lite_launcher.vision.modeling.layers.nn_layers import L2KernelRegularizer, NormSettings

# TFM's factory function -> the lite module it lives in (beside its model class).
BUILDERS = {
    "build_classification_model": "lite_launcher.vision.modeling.classification_model",
    "build_segmentation_model": "lite_launcher.vision.modeling.segmentation_model",
    "build_retinanet": "lite_launcher.vision.modeling.retinanet_model",
    "build_maskrcnn": "lite_launcher.vision.modeling.maskrcnn_model",
}


def __getattr__(name):
    if name in BUILDERS:
        return getattr(importlib.import_module(BUILDERS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def norm_settings(model_config, l2_weight_decay: float = 0.0) -> NormSettings:
    """The norm / activation / L2 settings every part of a model shares (`model_config`: any
    model config with `norm_activation`)."""
    norm = model_config.norm_activation
    regularizer = L2KernelRegularizer(l2_weight_decay / 2.0) if l2_weight_decay else None
    return NormSettings(momentum=norm.norm_momentum, epsilon=norm.norm_epsilon,
                        synchronized=norm.use_sync_bn, activation=norm.activation,
                        kernel_regularizer=regularizer)


# The parts `init_checkpoint_modules` may name one by one (TFM's tasks: 'all' or these).
_PARTIAL_MODULES = ("backbone", "decoder")


def select_init_checkpoint_items(checkpoint_items: Dict[str, Any],
                                 modules: Sequence[str]) -> Dict[str, Any]:
    """The items of a model's `checkpoint_items` that `task.init_checkpoint_modules` restores,
    as TFM's tasks: all of them for 'all', else the backbone and / or decoder named.

    Raises:
      ConfigError: a module the model does not have (no decoder, or another name).
    """
    if "all" in modules:
        return dict(checkpoint_items)
    items = {}
    for module in modules:
        item = checkpoint_items.get(module) if module in _PARTIAL_MODULES else None
        if item is None:
            has = [m for m in _PARTIAL_MODULES if m in checkpoint_items]
            raise ConfigError(
                f"task.init_checkpoint_modules names {module!r}, which this model does not "
                f"have; use 'all' or {' / '.join(has)}.")
        items[module] = item
    return items


class BackboneDecoderHead:
    """What a backbone -> decoder -> head model shows (a mixin for `keras.Model` subclasses
    that set `_backbone`, `_decoder` (None for none) and `_head`): its parts, the checkpoint
    items TFM saves, and those an `init_checkpoint_modules` list restores."""

    @property
    def backbone(self):
        return self._backbone

    @property
    def decoder(self):
        return self._decoder

    @property
    def head(self):
        return self._head

    @property
    def checkpoint_items(self) -> Dict[str, Any]:
        """Saved in checkpoints besides the model, as TFM's: backbone, decoder (when there is
        one) and head; `init_checkpoint_modules` restores them by these names."""
        items = {"backbone": self._backbone, "head": self._head}
        if self._decoder is not None:
            items["decoder"] = self._decoder
        return items

    def init_checkpoint_items(self, modules: Sequence[str]) -> Dict[str, Any]:
        """The items `task.init_checkpoint_modules` restores (`select_init_checkpoint_items`)."""
        return select_init_checkpoint_items(self.checkpoint_items, modules)


def decoder_inputs(decoder: Optional[keras.layers.Layer], features) -> dict:
    """The backbone features `decoder` takes: a Functional decoder is given exactly its
    inputs (MobileNet's final map is not one); otherwise all of them."""
    inputs = getattr(decoder, "input", None) if isinstance(decoder, keras.Model) else None
    if isinstance(inputs, dict):
        return {key: features[key] for key in inputs}
    return dict(features)


def feature_specs(backbone: keras.Model,
                  decoder: Optional[keras.layers.Layer]) -> Dict[str, keras.KerasTensor]:
    """{str(level): symbolic features} a detection head reads: the decoder's outputs on the
    (Functional) backbone's symbolic outputs, or the backbone's with no decoder; nothing is
    traced again."""
    features = decoder_inputs(decoder, backbone.output)
    if decoder is None:
        return features
    if isinstance(decoder, keras.Model):
        return dict(decoder.output)
    return decoder.compute_output_spec(features)


def model_from_config(cls, config, layer_keys, custom_objects=None):
    """`cls(**config)` from a model's `get_config`: the entries `layer_keys` name (a layer, a
    list of layers, or None) deserialised, `trainable` applied after construction."""
    config = dict(config)
    deserialize = lambda value: keras.saving.deserialize_keras_object(
        value, custom_objects=custom_objects)
    for key in layer_keys:
        value = config.get(key)
        if value is not None:
            config[key] = ([deserialize(v) for v in value] if isinstance(value, list)
                           else deserialize(value))
    trainable = config.pop("trainable", True)
    model = cls(**config)
    model.trainable = trainable
    return model
