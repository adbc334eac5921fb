"""Building a functional model runs no lite block's `call`.

Keras 3 builds a layer that has no `build` by tracing its `call` on symbolic inputs, and infers
the output of one without `compute_output_shape` by tracing `call` again: MobileNetV2's blocks
and the detection heads each ran twice while a model was built (MobileNetV2's build took about
twice as long). The blocks now build their sublayers in `call`'s order and give their output
shapes (`nn_layers.ChainBlock`, the heads' `_walk`); these tests count `call` runs.
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
from lite_launcher.vision.modeling.layers.nn_layers import NormSettings

COUNTED = (mobilenet.Conv2DBNBlock, mobilenet.InvertedBottleneckBlock,
           mobilenet.UniversalInvertedBottleneckBlock, mobilenet.MultiHeadSelfAttentionBlock,
           RetinaNetHead, RPNHead)


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
