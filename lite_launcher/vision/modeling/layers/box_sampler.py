"""TFM's `modeling/layers/box_sampler.py` (`BoxSampler`): picks a fixed number of boxes per
image, at most a fraction of them positive (`ops.sampling_ops`)."""

import tensorflow as tf

from lite_launcher.vision.modeling.layers.nn_layers import Float32Layer
from lite_launcher.vision.modeling.layers.nn_layers import register_serializable
from lite_launcher.vision.ops import sampling_ops


@register_serializable
class BoxSampler(Float32Layer):
    """Samples `num_samples` boxes per image, up to `foreground_fraction` of them positive.

    Called as `layer(positive_matches, negative_matches, ignored_matches)`, each [B, N] bool;
    returns the sampled indices [B, num_samples] (int32), ascending, as TFM's (a top-k over the
    sampled indicator, so when fewer are sampled the rest are the lowest unsampled indices).
    """

    def __init__(self, num_samples=512, foreground_fraction=0.25, **kwargs):
        super().__init__(**kwargs)
        self._config_dict = {"num_samples": num_samples,
                             "foreground_fraction": foreground_fraction}

    def call(self, positive_matches, negative_matches, ignored_matches):
        candidates = (positive_matches | negative_matches) & tf.logical_not(ignored_matches)
        sampled = sampling_ops.static_subsample(
            candidates, positive_matches, self._config_dict["num_samples"],
            self._config_dict["foreground_fraction"])
        return tf.nn.top_k(tf.cast(sampled, tf.int32), k=self._config_dict["num_samples"],
                           sorted=True).indices
