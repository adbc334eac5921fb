"""What the model builders of every vision family share (TFM's official/vision/modeling/factory.py
holds the builders themselves; here each family's builder sits beside its model class,
`classification_model.build_classification_model`, `segmentation_model.build_segmentation_model`,
so that a run imports only its own family).

L2 on kernels as TFM: `l2(decay / 2)` on every kernel (i.e. decay * tf.nn.l2_loss).
"""

from __future__ import annotations

from lite_launcher.vision.modeling.layers.nn_layers import L2KernelRegularizer, NormSettings


def norm_settings(model_config, l2_weight_decay: float = 0.0) -> NormSettings:
    """The norm / activation / L2 settings every part of a model shares (`model_config`: any
    model config with `norm_activation`)."""
    norm = model_config.norm_activation
    regularizer = L2KernelRegularizer(l2_weight_decay / 2.0) if l2_weight_decay else None
    return NormSettings(momentum=norm.norm_momentum, epsilon=norm.norm_epsilon,
                        synchronized=norm.use_sync_bn, activation=norm.activation,
                        kernel_regularizer=regularizer)
