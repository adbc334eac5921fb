"""TFM's `modeling/layers/roi_aligner.py` (`MultilevelROIAligner`): ROI Align over an FPN."""

from lite_launcher.vision.modeling.layers.nn_layers import Float32Layer
from lite_launcher.vision.modeling.layers.nn_layers import register_serializable
from lite_launcher.vision.ops import spatial_transform_ops


@register_serializable
class MultilevelROIAligner(Float32Layer):
    """Crops `crop_size` x `crop_size` features per box from its FPN level.

    Called as `layer(features, boxes, training=None)`: features dict `str(level)` ->
    [B, H_l, W_l, C], boxes [B, N, 4] (yxyx pixels) -> [B, N, crop_size, crop_size, C]
    (`ops.spatial_transform_ops.multilevel_crop_and_resize`), in the features' dtype: the
    inputs are not cast to the layer's dtype.
    """

    def __init__(self, crop_size=7, sample_offset=0.5, **kwargs):
        kwargs.setdefault("autocast", False)  # features keep their dtype (bfloat16 crops)
        super().__init__(**kwargs)
        self._config_dict = {"crop_size": crop_size, "sample_offset": sample_offset}

    def call(self, features, boxes, training=None):
        del training
        return spatial_transform_ops.multilevel_crop_and_resize(
            features, boxes, output_size=self._config_dict["crop_size"],
            sample_offset=self._config_dict["sample_offset"])
