"""Building a functional model runs no lite block's `call`.

Keras 3 builds a layer that has no `build` by tracing its `call` on symbolic inputs, and infers
the output of one without `compute_output_shape` by tracing `call` again: MobileNetV2's blocks
and the detection heads each ran twice while a model was built (MobileNetV2's build took about
twice as long), the segmentation head too. The blocks now build their sublayers in `call`'s
order and give their output shapes (`nn_layers.ChainBlock`, the heads' `_walk`,
`SegmentationHead._head_shape`); these tests count `call` runs.
"""

import collections
import functools

import keras
import numpy as np
import pytest

from lite_launcher.vision.configs import backbones as backbone_configs
from lite_launcher.vision.modeling.backbones import mobilenet
from lite_launcher.vision.modeling.backbones.factory import build_backbone
from lite_launcher.vision.modeling.heads.dense_prediction_heads import RetinaNetHead, RPNHead
from lite_launcher.vision.modeling.heads.segmentation_heads import SegmentationHead
from lite_launcher.vision.modeling.layers.nn_layers import NormSettings

COUNTED = (mobilenet.Conv2DBNBlock, mobilenet.InvertedBottleneckBlock,
           mobilenet.UniversalInvertedBottleneckBlock, mobilenet.MultiHeadSelfAttentionBlock,
           RetinaNetHead, RPNHead, SegmentationHead)


@pytest.fixture
def calls(monkeypatch):
    """{class name: call() runs} of the `COUNTED` classes while the test runs."""
    runs = collections.Counter()

    def counting(cls):
        original = cls.call

        @functools.wraps(original)  # Keras reads call()'s signature
        def call(self, *args, **kwargs):
            runs[cls.__name__] += 1
            return original(self, *args, **kwargs)
        return call

    for cls in COUNTED:
        monkeypatch.setattr(cls, "call", counting(cls))
    return runs


def _mobilenet(model_id):
    config = backbone_configs.Backbone(type="mobilenet")
    config.mobilenet.model_id = model_id
    config.mobilenet.filter_size_scale = 0.25
    return build_backbone([32, 32, 3], config, NormSettings())


def test_mobilenet_v2_builds_without_running_its_blocks(calls):
    model = _mobilenet("MobileNetV2")
    assert calls == {}
    blocks = [layer for layer in model.layers
              if isinstance(layer, mobilenet.InvertedBottleneckBlock)]
    assert len(blocks) == 17 and all(block.built for block in blocks)
    # The shapes Keras inferred without a call are those a call gives.
    outputs = model(np.zeros((2, 32, 32, 3), np.float32))
    assert calls["InvertedBottleneckBlock"] == 17 and calls["Conv2DBNBlock"] == 2
    assert {k: tuple(v.shape) for k, v in outputs.items()} == {
        k: (2,) + tuple(v.shape[1:]) for k, v in model.output.items()}


def test_mobilenet_v4_hybrid_builds_without_running_its_blocks(calls):
    # UIB and attention blocks (the attention's key / value downsampling built by `build`).
    model = _mobilenet("MobileNetV4HybridMedium")
    assert calls == {}
    outputs = model(np.zeros((1, 32, 32, 3), np.float32))
    assert calls["MultiHeadSelfAttentionBlock"] == 8
    assert {k: tuple(v.shape) for k, v in outputs.items()} == {
        k: (1,) + tuple(v.shape[1:]) for k, v in model.output.items()}


def _head_model(head):
    features = {str(level): keras.Input((16 // 2 ** (level - 3),) * 2 + (8,),
                                        name=str(level))
                for level in (3, 4)}
    return keras.Model(features, head(features))


@pytest.mark.parametrize("head", [
    lambda: RPNHead(min_level=3, max_level=4, num_anchors_per_location=3, num_convs=2,
                    num_filters=8),
    lambda: RetinaNetHead(
        min_level=3, max_level=4, num_classes=3, num_anchors_per_location=2, num_convs=1,
        num_filters=8, share_level_convs=False,
        attribute_heads=[{"name": "depth", "type": "regression", "size": 1}]),
], ids=["rpn", "retinanet"])
def test_dense_heads_build_without_running(calls, head):
    model = _head_model(head())
    assert calls == {}
    outputs = model({"3": np.ones((1, 16, 16, 8), np.float32),
                     "4": np.ones((1, 8, 8, 8), np.float32)})
    assert sum(calls.values()) == 1
    assert (keras.tree.map_structure(lambda t: tuple(t.shape[1:]), outputs)
            == keras.tree.map_structure(lambda t: tuple(t.shape[1:]), model.output))


_SEGMENTATION_HEADS = {
    "plain": dict(num_convs=2, upsample_factor=2),
    "depthwise": dict(num_convs=1, use_depthwise_convolution=True, prediction_kernel_size=3),
    "deeplabv3plus": dict(feature_fusion="deeplabv3plus", low_level=3, low_level_num_filters=4),
    "sum_to_merge": dict(feature_fusion="deeplabv3plus_sum_to_merge", low_level=3,
                         low_level_num_filters=8),
    "pyramid_fusion": dict(feature_fusion="pyramid_fusion"),
    "panoptic_fpn_fusion": dict(feature_fusion="panoptic_fpn_fusion", decoder_min_level=4,
                                decoder_max_level=5, num_filters=32, num_decoder_filters=8),
}


def _segmentation_inputs(batch=None):
    """(backbone, decoder) {level: input or array}: backbone level 3 at 16x16 (DeepLab v3+'s
    low level), decoder levels 4-5 with 8 channels."""
    make = ((lambda shape, name: keras.Input(shape, name=name)) if batch is None else
            (lambda shape, name: np.random.default_rng(len(name)).normal(
                size=(batch,) + shape).astype(np.float32)))
    backbone = {"3": make((16, 16, 6), "b3")}
    decoder = {"4": make((8, 8, 8), "d4"), "5": make((4, 4, 8), "d5")}
    return backbone, decoder


@pytest.mark.parametrize("variant", sorted(_SEGMENTATION_HEADS))
def test_segmentation_head_builds_without_running_in_calls_order(calls, variant):
    def head():
        return SegmentationHead(num_classes=3, level=4,
                                **{"num_convs": 0, "num_filters": 8,
                                   **_SEGMENTATION_HEADS[variant]})

    inputs = _segmentation_inputs()
    built = head()
    model = keras.Model(inputs, built(inputs))
    assert calls == {}
    arrays = _segmentation_inputs(batch=2)
    output = model(arrays)
    assert calls["SegmentationHead"] == 1
    assert tuple(output.shape) == (2,) + tuple(model.output.shape[1:])
    # The variables are those (names, shapes, order) of a head built by a call.
    by_call = head()
    by_call(arrays)
    assert ([(v.path.split("/", 1)[1], tuple(v.shape)) for v in built.weights]
            == [(v.path.split("/", 1)[1], tuple(v.shape)) for v in by_call.weights])
