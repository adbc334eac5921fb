"""TFM's Vision Transformer backbone (`backbone.type: vit`) from Keras 3 layers.

The network of official/vision/modeling/backbones/vit.py (tf-models-official 2.20): a strided
convolution cuts the image into patches, an optional class token is prepended, learned
position embeddings are added (interpolated bilinearly when the patch grid differs from
`pos_embed_shape`), then pre-norm encoder blocks (`keras.layers.MultiHeadAttention`, a GELU
MLP, stochastic depth, optional LayerScale) and a final LayerNormalization. Parameter counts
equal TFM's for every model of TFM's ViT / DeiT YAMLs (tests/vision/data/vit_tfm_numbers.json).

Mixed precision as TFM: the LayerNormalizations compute in float32, the GELU too under
mixed_bfloat16, LayerScale keeps float32 weights; the attention softmax always runs in
float32 (Keras's fused attention does so; the dropout path here too).
"""

from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

import keras
import tensorflow as tf
from absl import logging
from keras import ops

from lite_launcher.common import keras_adapter
from lite_launcher.core.base_config import ConfigError
from lite_launcher.vision.configs import backbones as backbone_configs
from lite_launcher.vision.modeling.backbones.factory import register_backbone_builder
from lite_launcher.vision.modeling.layers.nn_layers import (
    LayerScale, StochasticDepth, get_stochastic_depth_rate, register_legacy_name,
    register_serializable, use_matmul_projections)

# Before the shared layers module, ViT's layers were registered under the Keras package
# 'lite_launcher.vit' (LayerScale in ViT's layout): files saved then keep loading.
_LEGACY_PACKAGE = "lite_launcher.vit"
_LAYER_NORM_EPSILON = 1e-6  # TFM's, after the JAX ViT


def interpolate_position_embeddings(embeddings, from_shape: Sequence[int],
                                    to_shape: Sequence[int]):
    """(1, rows * cols, dim) embeddings of a (rows, cols) grid resized bilinearly to
    `to_shape`, as TFM's AddPositionEmbs (tf.image.resize, half-pixel centres)."""
    grid = tf.reshape(embeddings, [1, int(from_shape[0]), int(from_shape[1]), -1])
    grid = tf.image.resize(grid, [int(to_shape[0]), int(to_shape[1])], method="bilinear")
    return tf.reshape(grid, [1, int(to_shape[0]) * int(to_shape[1]), -1])


@register_serializable
class AddPositionEmbs(keras.layers.Layer):
    """Adds learned position embeddings (initialised N(0, 0.02)) to a token sequence.

    With `grid_shape` the embedding holds `num_prefix_tokens + rows * cols` entries whatever
    the input; an input of another length takes the grid part resized to `target_shape` (the
    prefix, i.e. the class token's entry, unchanged). Without it the embedding has the input's
    length.
    """

    def __init__(self, grid_shape: Optional[Sequence[int]] = None,
                 target_shape: Optional[Sequence[int]] = None, num_prefix_tokens: int = 0,
                 **kwargs):
        super().__init__(**kwargs)
        self.grid_shape = tuple(grid_shape) if grid_shape is not None else None
        self.target_shape = tuple(target_shape) if target_shape is not None else None
        self.num_prefix_tokens = int(num_prefix_tokens)

    def build(self, input_shape):
        if self.grid_shape is not None:
            length = self.num_prefix_tokens + self.grid_shape[0] * self.grid_shape[1]
        else:
            length = input_shape[1]
        self.pos_embedding = self.add_weight(
            name="pos_embedding", shape=(1, length, input_shape[2]),
            initializer=keras.initializers.RandomNormal(stddev=0.02))

    def call(self, inputs):
        embedding = self.pos_embedding
        if inputs.shape[1] != embedding.shape[1]:
            expected = self.num_prefix_tokens + self.target_shape[0] * self.target_shape[1]
            if self.grid_shape is None or inputs.shape[1] != expected:
                raise ValueError(
                    f"{self.name}: {inputs.shape[1]} tokens do not fit position embeddings "
                    f"of {embedding.shape[1]} (grid {self.grid_shape}, target "
                    f"{self.target_shape}).")
            prefix = embedding[:, :self.num_prefix_tokens]
            grid = interpolate_position_embeddings(
                embedding[:, self.num_prefix_tokens:], self.grid_shape, self.target_shape)
            embedding = ops.concatenate([prefix, grid], axis=1)
        return inputs + ops.cast(embedding, inputs.dtype)

    def get_config(self):
        return {**super().get_config(), "grid_shape": self.grid_shape,
                "target_shape": self.target_shape,
                "num_prefix_tokens": self.num_prefix_tokens}


@register_serializable
class TokenLayer(keras.layers.Layer):
    """Prepends a learned class token (initialised to zeros) to the sequence."""

    def build(self, input_shape):
        self.cls = self.add_weight(name="cls", shape=(1, 1, input_shape[-1]),
                                   initializer="zeros")

    def call(self, inputs):
        token = ops.cast(self.cls, inputs.dtype)
        token = ops.tile(token, [ops.shape(inputs)[0], 1, 1])
        return ops.concatenate([token, inputs], axis=1)

    def compute_output_shape(self, input_shape):
        length = None if input_shape[1] is None else input_shape[1] + 1
        return (input_shape[0], length, input_shape[2])


@register_serializable
class Float32SoftmaxAttention(keras_adapter.AttentionSoftmaxHook,
                              keras.layers.MultiHeadAttention):
    """`keras.layers.MultiHeadAttention` whose explicit softmax (the path taken with attention
    dropout or returned scores) runs in float32 under mixed precision, as Keras's fused path
    does; the probabilities return in the compute dtype. Its projections contract as one 2-D
    matmul (`layers.MatmulEinsumDense`), as TensorFlow's Einsum kernel does under TFM."""

    def build(self, query_shape, value_shape, key_shape=None):
        super().build(query_shape, value_shape, key_shape)
        use_matmul_projections(self)  # TFM's cost for the projections' gradients

    def attention_softmax(self, attention_scores, attention_mask, keras_softmax):
        if attention_mask is not None or len(self.attention_axes) != 1:
            return keras_softmax(attention_scores, attention_mask)
        probs = ops.softmax(ops.cast(attention_scores, "float32"), axis=-1)
        return ops.cast(probs, attention_scores.dtype)


@register_serializable
class TransformerEncoderBlock(keras.layers.Layer):
    """A pre-norm encoder block (TFM's nn_blocks.TransformerEncoderBlock, norm_first):

        x += drop_path(scale_1(dropout_a(attention(norm_1(x)))))
        x += drop_path(scale_2(dropout_o(dense_2(gelu(dense_1(norm_2(x)))))))

    `attention_dropout_rate` drops attention probabilities and (TFM's) the attention output;
    `dropout_rate` the MLP output. With `return_attention_scores` the call also returns the
    attention probabilities.
    """

    def __init__(self, num_heads: int, mlp_dim: int, dropout_rate: float = 0.0,
                 attention_dropout_rate: float = 0.0, stochastic_depth_rate: float = 0.0,
                 layer_scale_init_value: float = 0.0, kernel_initializer="glorot_uniform",
                 return_attention_scores: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = int(num_heads)
        self.mlp_dim = int(mlp_dim)
        self.dropout_rate = float(dropout_rate)
        self.attention_dropout_rate = float(attention_dropout_rate)
        self.stochastic_depth_rate = float(stochastic_depth_rate)
        self.layer_scale_init_value = float(layer_scale_init_value)
        self.kernel_initializer = kernel_initializer
        self.return_attention_scores = bool(return_attention_scores)
        # TFM keeps the GELU in float32 under mixed_bfloat16 only.
        self._gelu_in_float32 = keras.config.dtype_policy().name == "mixed_bfloat16"
        # Sublayers are attributes, never lists: tf.train.Checkpoint must see them.
        self.attention_norm = keras.layers.LayerNormalization(
            epsilon=_LAYER_NORM_EPSILON, dtype="float32", name="self_attention_layer_norm")
        self.attention_dropout = keras.layers.Dropout(self.attention_dropout_rate)
        self.mlp_norm = keras.layers.LayerNormalization(
            epsilon=_LAYER_NORM_EPSILON, dtype="float32", name="output_layer_norm")
        self.intermediate = keras.layers.Dense(
            self.mlp_dim, kernel_initializer=keras.initializers.get(kernel_initializer),
            name="intermediate")
        self.output_dropout = keras.layers.Dropout(self.dropout_rate)
        self.drop_path = (StochasticDepth(self.stochastic_depth_rate)
                          if self.stochastic_depth_rate else None)
        if self.layer_scale_init_value:
            self.layer_scale_attention = LayerScale(
                self.layer_scale_init_value, name="layer_scale_attn", **LayerScale.VIT_LAYOUT)
            self.layer_scale_mlp = LayerScale(
                self.layer_scale_init_value, name="layer_scale_mlp", **LayerScale.VIT_LAYOUT)

    def build(self, input_shape):
        hidden = input_shape[-1]
        self.attention = Float32SoftmaxAttention(
            num_heads=self.num_heads, key_dim=hidden // self.num_heads,
            dropout=self.attention_dropout_rate, output_shape=hidden,
            kernel_initializer=keras.initializers.get(self.kernel_initializer),
            name="self_attention")
        self.output_dense = keras.layers.Dense(
            hidden, kernel_initializer=keras.initializers.get(self.kernel_initializer),
            name="output")
        self.attention_norm.build(input_shape)
        self.attention.build(input_shape, input_shape)
        self.mlp_norm.build(input_shape)
        self.intermediate.build(input_shape)
        self.output_dense.build(tuple(input_shape[:-1]) + (self.mlp_dim,))
        if self.layer_scale_init_value:
            self.layer_scale_attention.build(input_shape)
            self.layer_scale_mlp.build(input_shape)

    def _residual(self, x, branch, scale, training):
        if self.layer_scale_init_value:
            branch = scale(branch)
        if self.drop_path is not None:
            branch = self.drop_path(branch, training=training)
        return x + ops.cast(branch, x.dtype)

    def call(self, inputs, training=None):
        y = self.attention_norm(inputs)
        attended = self.attention(y, y, training=training,
                                  return_attention_scores=self.return_attention_scores)
        scores = None
        if self.return_attention_scores:
            attended, scores = attended
        attended = self.attention_dropout(attended, training=training)
        x = self._residual(inputs, attended, getattr(self, "layer_scale_attention", None),
                           training)
        y = self.intermediate(self.mlp_norm(x))
        if self._gelu_in_float32:
            y = ops.cast(y, "float32")
        y = keras.activations.gelu(y, approximate=True)  # TFM's (tanh) approximation
        y = self.output_dropout(self.output_dense(y), training=training)
        x = self._residual(x, y, getattr(self, "layer_scale_mlp", None), training)
        return (x, scores) if self.return_attention_scores else x

    def compute_output_shape(self, input_shape):
        if not self.return_attention_scores:
            return input_shape
        length = input_shape[1]
        return input_shape, (input_shape[0], self.num_heads, length, length)

    def get_config(self):
        return {**super().get_config(), "num_heads": self.num_heads, "mlp_dim": self.mlp_dim,
                "dropout_rate": self.dropout_rate,
                "attention_dropout_rate": self.attention_dropout_rate,
                "stochastic_depth_rate": self.stochastic_depth_rate,
                "layer_scale_init_value": self.layer_scale_init_value,
                "kernel_initializer": keras.initializers.serialize(
                    keras.initializers.get(self.kernel_initializer)),
                "return_attention_scores": self.return_attention_scores}


for _cls in (AddPositionEmbs, TokenLayer, Float32SoftmaxAttention, TransformerEncoderBlock):
    register_legacy_name(f"{_LEGACY_PACKAGE}>{_cls.__name__}", _cls)
register_legacy_name(f"{_LEGACY_PACKAGE}>LayerScale", LayerScale, **LayerScale.VIT_LAYOUT)


def patch_grid(input_size: Sequence[int], patch_size: int) -> Tuple[int, int]:
    """(rows, cols) of patches a `patch_size` convolution ('valid', strided) makes."""
    return int(input_size[0]) // patch_size, int(input_size[1]) // patch_size


def build_vit(input_shape, config: backbone_configs.VisionTransformer, kernel_regularizer=None,
              name: str = "backbone") -> keras.Model:
    """TFM's VisionTransformer as a Functional model with TFM's endpoints.

    Outputs {'pre_logits': (batch, 1, 1, representation_size or hidden_size)} for the
    'token' and 'gap' poolers, {'encoded_tokens': (batch, tokens, hidden_size)} for 'none'
    (when output_encoded_tokens); plus {str(round(log2(patch_size))): patch feature map} with
    output_2d_feature_maps and {'attention_scores': last block's} with
    output_attention_scores. L2 (`kernel_regularizer`) goes where TFM's goes: the patch
    embedding and pre-logits kernels (TFM's encoder blocks take no kernel regularizer).
    """
    config.validate()
    sizes = config.sizes()
    hidden, patch = sizes["hidden_size"], sizes["patch_size"]
    num_layers = sizes["num_layers"]
    if config.original_init:
        embed_init, encoder_init = "lecun_normal", "glorot_uniform"
    else:
        embed_init = "he_uniform"
        encoder_init = keras.initializers.TruncatedNormal(stddev=0.02)
    logging.info("ViT %s: hidden_size %d, patch_size %d, mlp_dim %d, num_heads %d, "
                 "num_layers %d, representation_size %d.", config.model_name or "(custom)",
                 hidden, patch, sizes["mlp_dim"], sizes["num_heads"], num_layers,
                 config.representation_size)
    rows, cols = patch_grid(input_shape, patch)
    if rows < 1 or cols < 1:
        raise ConfigError(
            f"task.model.input_size {list(input_shape)} is smaller than the ViT patch size "
            f"{patch}.")

    inputs = keras.Input(shape=tuple(input_shape))
    x = keras.layers.Conv2D(hidden, patch, strides=patch, padding="valid",
                            kernel_initializer=embed_init,
                            kernel_regularizer=kernel_regularizer, name="patch_embedding")(inputs)
    x = keras.layers.Reshape((rows * cols, hidden))(x)
    prefix = 0
    if config.pooler == "token":
        x = TokenLayer(name="cls")(x)
        prefix = 1
    x = AddPositionEmbs(grid_shape=config.pos_embed_shape, target_shape=(rows, cols),
                        num_prefix_tokens=prefix, name="posembed_input")(x)
    x = keras.layers.Dropout(config.transformer.dropout_rate)(x)
    scores = None
    for i in range(num_layers):
        last = i == num_layers - 1
        x = TransformerEncoderBlock(
            num_heads=sizes["num_heads"], mlp_dim=sizes["mlp_dim"],
            dropout_rate=config.transformer.dropout_rate,
            attention_dropout_rate=config.transformer.attention_dropout_rate,
            # TFM's rate for block i (1-based) of n.
            stochastic_depth_rate=get_stochastic_depth_rate(config.init_stochastic_depth_rate,
                                                            i + 1, num_layers),
            layer_scale_init_value=config.layer_scale_init_value,
            kernel_initializer=encoder_init,
            return_attention_scores=config.output_attention_scores and last,
            name=f"encoderblock_{i}")(x)
        if config.output_attention_scores and last:
            x, scores = x
    x = keras.layers.LayerNormalization(epsilon=_LAYER_NORM_EPSILON, dtype="float32",
                                        name="encoder_norm")(x)

    endpoints = {}
    if scores is not None:
        endpoints["attention_scores"] = scores
    if config.pooler == "token":
        features, x = x[:, 1:], x[:, 0]
    elif config.pooler == "gap":
        features, x = x, ops.mean(x, axis=1)
    else:
        features = x
    if config.output_2d_feature_maps:
        level = str(round(math.log2(patch)))
        endpoints[level] = keras.layers.Reshape((rows, cols, hidden))(features)
    if config.representation_size:
        x = keras.layers.Dense(config.representation_size, kernel_initializer=embed_init,
                               kernel_regularizer=kernel_regularizer, name="pre_logits")(x)
        x = ops.tanh(x)
    width = config.representation_size or hidden
    if config.pooler == "none":
        if config.output_encoded_tokens:
            endpoints["encoded_tokens"] = x
    else:
        endpoints["pre_logits"] = keras.layers.Reshape((1, 1, width))(x)
    if not endpoints:
        raise ConfigError(
            "task.model.backbone.vit with pooler 'none' outputs nothing: set "
            "output_encoded_tokens or output_2d_feature_maps.")
    return keras.Model(inputs, endpoints, name=name)


@register_backbone_builder("vit")
def _build_vit_backbone(input_shape, config: backbone_configs.VisionTransformer,
                        settings) -> keras.Model:
    """The backbone factory's entry: ViT has no BatchNormalization, so of the shared
    `NormSettings` it takes only the L2 regularizer."""
    return build_vit(input_shape, config, settings.kernel_regularizer)
