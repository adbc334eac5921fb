"""Writes legacy_keras/*.keras (+ .npz with an input and the output it gave): small models of
every custom vision layer saved by the code before the shared vision-layers refactor (commit
b786280), whose ViT layers were registered under the Keras package 'lite_launcher.vit' and
whose two LayerScales differed. tests/vision/test_vision_layout.py loads them with today's
code, so `.keras` files users saved then keep loading, to the same outputs.

Run from the repository root with lite's own venv, at the commit to record:

    PYTHONPATH=. .venv/bin/python tests/vision/data/make_legacy_keras_files.py
"""

import os

import keras
import numpy as np

from lite_launcher.vision import configs, mobilenet, modeling, resnet, vit

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "legacy_keras")


def vit_backbone():
    """A 2-block, 16-wide ViT with every ViT layer (class token, interpolated position
    table, layer scale, attention scores, pre-logits)."""
    config = configs.VisionTransformer(
        model_name=None, hidden_size=16, patch_size=8, representation_size=8,
        layer_scale_init_value=0.1, output_attention_scores=True, pos_embed_shape=[2, 2],
        transformer=configs.Transformer(mlp_dim=32, num_heads=2, num_layers=2))
    return vit.build_vit([32, 32, 3], config), (2, 32, 32, 3)


def convnet_blocks():
    """The ResNet and MobileNet blocks (SE, ResNet-D, dilation, UIB with layer scale,
    multi-query attention with layer scale) in one Functional model."""
    settings = modeling.NormSettings(activation="swish",
                                     kernel_regularizer=modeling.L2KernelRegularizer(1e-4))
    inputs = keras.Input((16, 16, 16))
    x = resnet.BottleneckBlock(4, 2, True, settings, se_ratio=0.25, resnetd_shortcut=True,
                               stochastic_depth_drop_rate=0.1, name="bottleneck")(inputs)
    x = resnet.ResidualBlock(16, 1, False, settings, dilation_rate=2, name="residual")(x)
    x = mobilenet.Conv2DBNBlock(16, 3, 1, settings=settings, name="convbn")(x)
    x = mobilenet.InvertedBottleneckBlock(16, 16, 4.0, 1, se_ratio=0.25, divisible_by=8,
                                          settings=settings, name="ib")(x)
    x = mobilenet.UniversalInvertedBottleneckBlock(
        16, 16, 4.0, 1, start_dw_kernel_size=3, middle_dw_kernel_size=3,
        use_layer_scale=True, layer_scale_init_value=0.5, settings=settings, name="uib")(x)
    x = mobilenet.MultiHeadSelfAttentionBlock(num_heads=2, key_dim=8, value_dim=8,
                                              kv_strides=2, layer_scale_init_value=0.5,
                                              settings=settings, name="mhsa")(x)
    x = mobilenet.DepthwiseSeparableConvBlock(8, settings=settings, name="depsepconv")(x)
    return keras.Model(inputs, x, name="convnet_blocks"), (2, 16, 16, 16)


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(0)
    for name, make in (("vit", vit_backbone), ("convnet_blocks", convnet_blocks)):
        model, shape = make()
        # Non-trivial weights: layer scales and BN statistics off their initial values.
        model.set_weights([rng.normal(0.5, 0.2, w.shape).astype(w.dtype) if "variance" in w.path
                           else rng.normal(0, 0.2, w.shape).astype(w.dtype)
                           for w in model.weights])
        x = rng.uniform(0, 1, shape).astype("float32")
        y = keras.tree.map_structure(np.asarray, model(x, training=False))
        model.save(os.path.join(OUT, f"{name}.keras"))
        outputs = y if isinstance(y, dict) else {"output": y}
        np.savez(os.path.join(OUT, f"{name}.npz"), input=x, **outputs)
        print(name, model.count_params(), "parameters")


if __name__ == "__main__":
    main()
