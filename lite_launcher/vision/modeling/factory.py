"""The model factory (TFM's official/vision/modeling/factory.py): a task family's model from its
config, wired from the backbone, decoder and head factories.

L2 on kernels as TFM: `l2(decay / 2)` on every kernel (i.e. decay * tf.nn.l2_loss).
"""

from __future__ import annotations

from lite_launcher.vision.configs.image_classification import ImageClassificationModel
from lite_launcher.vision.configs.semantic_segmentation import SemanticSegmentationModel
from lite_launcher.vision.modeling.backbones.factory import build_backbone
from lite_launcher.vision.modeling.classification_model import ClassificationModel
from lite_launcher.vision.modeling.decoders.factory import build_decoder
from lite_launcher.vision.modeling.heads.segmentation_heads import SegmentationHead
from lite_launcher.vision.modeling.layers.nn_layers import L2KernelRegularizer, NormSettings
# The model class beside its builder, as the former segmentation_model module held them.
from lite_launcher.vision.modeling.segmentation_model import SegmentationModel


def norm_settings(model_config, l2_weight_decay: float = 0.0) -> NormSettings:
    """The norm / activation / L2 settings every part of a model shares (`model_config`: any
    model config with `norm_activation`)."""
    norm = model_config.norm_activation
    regularizer = L2KernelRegularizer(l2_weight_decay / 2.0) if l2_weight_decay else None
    return NormSettings(momentum=norm.norm_momentum, epsilon=norm.norm_epsilon,
                        synchronized=norm.use_sync_bn, activation=norm.activation,
                        kernel_regularizer=regularizer)


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
