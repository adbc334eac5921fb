"""What the model builders of every vision family share (TFM's official/vision/modeling/factory.py
holds the builders themselves; here each family's builder sits beside its model class,
`classification_model.build_classification_model`, `segmentation_model.build_segmentation_model`,
so that a run imports only its own family).

L2 on kernels as TFM: `l2(decay / 2)` on every kernel (i.e. decay * tf.nn.l2_loss).
"""

from __future__ import annotations

from typing import Any, Dict, Sequence

from lite_launcher.errors import ConfigError
from lite_launcher.vision.modeling.layers.nn_layers import L2KernelRegularizer, NormSettings


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
        """The items `task.init_checkpoint_modules` restores, as TFM's tasks: every checkpoint
        item for 'all', else the backbone and / or decoder named.

        Raises:
          ConfigError: a module this model does not have (no decoder, or another name).
        """
        if "all" in modules:
            return dict(self.checkpoint_items)
        items = {}
        for module in modules:
            item = self.checkpoint_items.get(module) if module in _PARTIAL_MODULES else None
            if item is None:
                has = [m for m in _PARTIAL_MODULES if m in self.checkpoint_items]
                raise ConfigError(
                    f"task.init_checkpoint_modules names {module!r}, which this model does not "
                    f"have; use 'all' or {' / '.join(has)}.")
            items[module] = item
        return items
