"""The layers the vision backbones share: TFM's `official/vision/modeling/layers/nn_layers.py`
and the shared part of its `nn_blocks.py`. Each family module (`resnet`, `resnet_deeplab`,
`mobilenet`, `vit`) keeps only its block table and its own blocks, built from these.

- `SERIALIZATION_PACKAGE`, `register_serializable`: the one Keras package every lite layer is
  registered under (`"lite_launcher>ClassName"` in `.keras` files); `register_legacy_name`
  keeps names that older files hold loadable.
- `NormSettings`: what every convolution / BatchNormalization of a backbone shares;
  `FusedBatchNormalization` and `L2KernelRegularizer` (tf_keras's fused kernels, see their
  docstrings).
- `get_activation`: Keras's activations by name, except TFM's `hard_swish` / `hard_sigmoid`
  (see `hard_swish`).
- `MatmulEinsumDense`: `keras.layers.EinsumDense` whose attention-style projections run as one
  2-D matmul (see its docstring).
- `SettingsBlock`: the base of every block built from plain values and `NormSettings`.
- `SqueezeExcitation`, `LayerScale` (MobileNetV4's and ViT's layouts), `StochasticDepth`, its
  one schedule `get_stochastic_depth_rate` and `add_residual`; TFM's `make_divisible` /
  `round_filters`.

Every layer has `get_config` (and `from_config` where its arguments are not plain values), so
`.keras` files and `keras.models.clone_model` round-trip; layers follow the global Keras dtype
policy.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import keras
import tensorflow as tf

SERIALIZATION_PACKAGE = "lite_launcher"
register_serializable = keras.saving.register_keras_serializable(package=SERIALIZATION_PACKAGE)


@register_serializable
def hard_swish(x):
    """TFM's hard swish, `x * relu6(x + 3) * (1/6)`.

    Keras 3's `hard_silu` divides by 6 instead; TensorFlow's gradient of that division also
    differentiates the constant divisor (a full-size RealDiv, Neg and Sum per activation), which
    made MobileNetV3's step ~110 ops longer than TFM's. Equal to Keras's to float rounding.
    """
    x = tf.convert_to_tensor(x)
    return x * tf.nn.relu6(x + tf.cast(3.0, x.dtype)) * (1.0 / 6.0)


@register_serializable
def hard_sigmoid(x):
    """TFM's hard sigmoid, `relu6(x + 3) * 0.16667` (TFM's constant, not 1/6; Keras 3 divides by
    6: see `hard_swish`)."""
    x = tf.convert_to_tensor(x)
    return tf.nn.relu6(x + tf.cast(3.0, x.dtype)) * 0.16667


_TFM_ACTIVATIONS = {"hard_swish": hard_swish, "hard_sigmoid": hard_sigmoid}


def get_activation(identifier):
    """The activation function for `identifier` as TFM's `tf_utils.get_activation` resolves the
    names its vision models use: TFM's own `hard_swish` / `hard_sigmoid`, Keras's otherwise."""
    if isinstance(identifier, str) and identifier in _TFM_ACTIVATIONS:
        return _TFM_ACTIVATIONS[identifier]
    return keras.activations.get(identifier)


def register_legacy_name(registered_name: str, cls, **config_defaults) -> None:
    """Loads what a `.keras` file holds under `registered_name` (a name an older lite wrote)
    as `cls`, with `config_defaults` for the config keys the older layer did not write."""

    class LegacyName:
        # Keras looks a registered name up and calls only `from_config` on what it finds.
        @staticmethod
        def from_config(config):
            return cls.from_config({**config_defaults, **config})

    keras.saving.get_custom_objects()[registered_name] = LegacyName


def variance_scaling():
    """The decoders' kernel initializer: TFM's pass the string 'VarianceScaling' (scale 1,
    fan_in, truncated normal)."""
    return keras.initializers.VarianceScaling()


def make_divisible(value: float, divisor: int, min_value: Optional[float] = None,
                   round_down_protect: bool = True) -> int:
    """`value` rounded to a multiple of `divisor` (TFM's nn_layers.make_divisible): at least
    `min_value` (default `divisor`) and, with `round_down_protect`, never 10% below `value`."""
    min_value = min_value or divisor
    new_value = max(min_value, int(value + divisor / 2) // divisor * divisor)
    if round_down_protect and new_value < 0.9 * value:
        new_value += divisor
    return int(new_value)


def round_filters(filters: int, multiplier: float, divisor: int = 8,
                  min_depth: Optional[int] = None) -> int:
    """`filters` scaled by a width multiplier and made divisible (TFM's round_filters)."""
    if not multiplier:
        return filters
    return make_divisible(filters * multiplier, divisor, min_value=min_depth)


class NormSettings:
    """What every BatchNormalization / Conv2D of a backbone shares.

    `kernel_regularizer` goes on Conv2D kernels only, never on depthwise kernels (TFM's
    `regularize_depthwise=False`).
    """

    def __init__(self, momentum=0.99, epsilon=1e-3, synchronized=False, trainable=True,
                 activation="relu", kernel_initializer="VarianceScaling",
                 kernel_regularizer=None):
        self.momentum = momentum
        self.epsilon = epsilon
        self.synchronized = synchronized
        self.trainable = trainable
        self.activation = activation
        self.kernel_initializer = kernel_initializer
        self.kernel_regularizer = kernel_regularizer

    def get_config(self) -> Dict[str, Any]:
        """Plain values (the regularizer serialised), for the layers' `get_config`."""
        return {"momentum": self.momentum, "epsilon": self.epsilon,
                "synchronized": self.synchronized, "trainable": self.trainable,
                "activation": self.activation,
                "kernel_initializer": serialize_value(self.kernel_initializer),
                "kernel_regularizer": serialize_value(self.kernel_regularizer)}

    @classmethod
    def from_config(cls, config) -> "NormSettings":
        config = dict(config)
        if isinstance(config.get("kernel_regularizer"), dict):
            config["kernel_regularizer"] = keras.regularizers.deserialize(
                config["kernel_regularizer"])
        if isinstance(config.get("kernel_initializer"), dict):
            config["kernel_initializer"] = keras.initializers.deserialize(
                config["kernel_initializer"])
        return cls(**config)

    @classmethod
    def of(cls, value) -> "NormSettings":
        """`value` itself, its config dict, or the defaults for None."""
        if isinstance(value, cls):
            return value
        return cls.from_config(value) if value else cls()

    def replace(self, **changes) -> "NormSettings":
        """A copy with `changes` applied."""
        return NormSettings(**{**vars(self), **changes})

    def norm(self, name=None):
        return FusedBatchNormalization(
            axis=-1, momentum=self.momentum, epsilon=self.epsilon,
            synchronized=self.synchronized, trainable=self.trainable, name=name)

    def conv(self, filters, kernel_size, strides=1, use_bias=False, dilation_rate=1,
             name=None):
        return keras.layers.Conv2D(
            filters, kernel_size, strides=strides, padding="same", use_bias=use_bias,
            dilation_rate=dilation_rate,
            kernel_initializer=keras.initializers.get(self.kernel_initializer),
            kernel_regularizer=self.kernel_regularizer, name=name)

    def depthwise(self, kernel_size, strides=1, dilation_rate=1, name=None):
        # Unregularised, as TFM's depthwise convolutions.
        return keras.layers.DepthwiseConv2D(
            kernel_size, strides=strides, padding="same", use_bias=False,
            dilation_rate=dilation_rate,
            depthwise_initializer=keras.initializers.get(self.kernel_initializer), name=name)

    def act(self, activation=None, name=None):
        return keras.layers.Activation(get_activation(activation or self.activation), name=name)


class SettingsBlock(keras.layers.Layer):
    """Base of every block built from plain values and a `NormSettings` (ResNet's, MobileNet's,
    squeeze-excitation): a subclass passes its arguments to `__init__` by keyword, and
    `get_config` returns them with the settings, so no block writes its own `get_config`.

    Sublayers are plain attributes, never lists: tf.train.Checkpoint does not see layers that
    Keras 3 tracks only inside a list, so their weights would be missing from checkpoints.
    """

    _LAYER_ARGUMENTS = ("name", "trainable", "dtype", "autocast", "activity_regularizer")

    def __init__(self, settings=None, **arguments):
        layer_arguments = {k: arguments.pop(k) for k in self._LAYER_ARGUMENTS if k in arguments}
        super().__init__(**layer_arguments)
        self._settings = NormSettings.of(settings)
        self._args = arguments

    def get_config(self):
        return {**super().get_config(), **self._args, "settings": self._settings.get_config()}


def build_in_call_order(input_shape, layers):
    """Builds each of `layers` (None skipped, built ones kept) on the output shape of the one
    before, as one call of them in that order would: the same variables, created in the same
    order, without running any `call`. Returns the last output shape."""
    shape = input_shape
    for layer in layers:
        if layer is None:
            continue
        if not layer.built:
            layer.build(shape)
        shape = layer.compute_output_shape(shape)
    return shape


def output_shape_through(input_shape, layers):
    """The output shape of calling `layers` (None skipped) one after another on
    `input_shape`."""
    shape = input_shape
    for layer in layers:
        if layer is not None:
            shape = layer.compute_output_shape(shape)
    return shape


class ChainBlock(SettingsBlock):
    """A `SettingsBlock` whose `call` runs the sublayers `_chain()` lists, in that order, plus
    steps that keep the shape (activation functions, the residual sum).

    Why: Keras 3 builds a layer without `build` by tracing its `call` on symbolic inputs, and
    infers the output of one without `compute_output_shape` by tracing `call` again: every
    block of a functional model ran twice at construction. Here `build` creates the
    sublayers' variables in `call`'s order (the same names and checkpoint structure) and
    `compute_output_shape` follows the chain, so building a model runs no `call` at all.
    With `_intermediate` (set by the blocks that return `(x, endpoints)`) the output is
    `(shape, _endpoint_shapes(input_shape))`.
    """

    _intermediate = False

    def _chain(self):
        """The sublayers `call` runs on the main path, in order (None: absent)."""
        raise NotImplementedError

    def _endpoint_shapes(self, input_shape):
        del input_shape
        return {}

    def build(self, input_shape):
        build_in_call_order(input_shape, self._chain())

    def compute_output_shape(self, input_shape):
        shape = output_shape_through(input_shape, self._chain())
        return (shape, self._endpoint_shapes(input_shape)) if self._intermediate else shape


class Float32Layer(keras.layers.Layer):
    """The base of the weightless detection layers (box decoding, sampling, NMS, ROI ops).

    They compute in float32 whatever the global dtype policy (unless a `dtype` is passed):
    Keras 3 casts every float argument of a call to the compute dtype, and boxes in bfloat16
    are off by whole pixels. Built at construction (no weights); `get_config` is Keras's plus
    the layer's `_config_dict` (its constructor arguments, TFM's names).
    """

    _config_dict: Dict[str, Any]

    def __init__(self, **kwargs):
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        self.built = True

    def get_config(self):
        return {**super().get_config(), **self._config_dict}


@register_serializable
class LayerScale(keras.layers.Layer):
    """Scales each channel of a residual branch by a learned factor initialised to
    `init_value` (CaiT's LayerScale).

    The factor's variable is laid out as the checkpoints of each family hold it: by default
    MobileNetV4's, `gamma` of shape (channels,) in the policy's variable dtype; with
    `gamma_rank=3, gamma_name="layerscale_gamma", gamma_dtype="float32"` ViT's (TFM's
    nn_blocks.LayerScale), (1, 1, channels) and float32 under any policy (`VIT_LAYOUT`).
    """

    VIT_LAYOUT = {"gamma_rank": 3, "gamma_name": "layerscale_gamma", "gamma_dtype": "float32"}

    def __init__(self, init_value: float = 1e-5, gamma_rank: int = 1,
                 gamma_name: str = "gamma", gamma_dtype: Optional[str] = None, **kwargs):
        super().__init__(**kwargs)
        self.init_value = float(init_value)
        self.gamma_rank = int(gamma_rank)
        self.gamma_name = gamma_name
        self.gamma_dtype = gamma_dtype

    def build(self, input_shape):
        self.gamma = self.add_weight(
            name=self.gamma_name, shape=(1,) * (self.gamma_rank - 1) + (input_shape[-1],),
            dtype=self.gamma_dtype, initializer=keras.initializers.Constant(self.init_value))

    def call(self, inputs):
        return inputs * keras.ops.cast(self.gamma, inputs.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "init_value": self.init_value,
                "gamma_rank": self.gamma_rank, "gamma_name": self.gamma_name,
                "gamma_dtype": self.gamma_dtype}


def serialize_value(value):
    """`value` as a config holds it: None and names as they are, objects serialised."""
    if value is None or isinstance(value, str):
        return value
    return keras.saving.serialize_keras_object(value)


# What tf.nn.fused_batch_norm takes: channels-last inputs in these dtypes (statistics, scale and
# offset in float32). Any epsilon, as tf_keras: TFM's ResNets (norm_epsilon 1e-5) run fused.
_FUSED_BN_INPUT_DTYPES = ("float32", "float16", "bfloat16")


@register_serializable
class FusedBatchNormalization(keras.layers.BatchNormalization):
    """`keras.layers.BatchNormalization` computed by TensorFlow's fused kernel where it applies.

    Keras 3 normalises with `moments` plus about a dozen element-wise ops (and as many in the
    gradient); tf_keras, which TFM's models use, runs one `FusedBatchNormV3` forward and one
    fused gradient for 4-D channels-last inputs. This layer does the same for 4-D inputs with
    `axis=-1` and dtype float32 / float16 / bfloat16, without a mask, renorm or synchronized
    statistics, whatever the epsilon (as tf_keras); anything else is Keras's own computation.
    The outputs are Keras's (the batch's biased variance normalises); the moving variance is
    updated with the unbiased (n / (n - 1)) batch variance, as tf_keras's fused path (TFM)
    updates it.
    """

    def _fusable(self, inputs, mask) -> bool:
        return (mask is None and not self.renorm and not self.synchronized
                and len(inputs.shape) == 4 and self.axis in (-1, 3)
                and keras.backend.standardize_dtype(inputs.dtype) in _FUSED_BN_INPUT_DTYPES)

    def call(self, inputs, training=None, mask=None):
        if not self._fusable(inputs, mask):
            return super().call(inputs, training=training, mask=mask)
        channels = inputs.shape[-1]
        scale = self.gamma if self.scale else tf.ones([channels], tf.float32)
        offset = self.beta if self.center else tf.zeros([channels], tf.float32)
        is_training = bool(training and self.trainable)  # Keras's rule: frozen BN infers
        outputs, mean, variance = tf.compat.v1.nn.fused_batch_norm(
            inputs, scale, offset, mean=self.moving_mean, variance=self.moving_variance,
            epsilon=self.epsilon, data_format="NHWC", is_training=is_training,
            # The kernel folds the batch statistics into the moving ones itself.
            exponential_avg_factor=(1.0 - self.momentum) if is_training else 1.0)
        if is_training:
            self.moving_mean.assign(mean)
            self.moving_variance.assign(variance)
        return keras.ops.cast(outputs, self.compute_dtype)


@register_serializable
class L2KernelRegularizer(keras.regularizers.L2):
    """`l2 * sum(x ** 2)`, computed as `2 * l2 * tf.nn.l2_loss(x)`: one op, and a one-op
    gradient, where Keras 3's `L2` runs Square + Sum forward and Tile + Mul backward per kernel
    (tf_keras, and so TFM, used `l2_loss`). The value is Keras's `L2` up to float rounding."""

    def __call__(self, x):
        return 2.0 * tf.cast(self.l2, x.dtype) * tf.nn.l2_loss(x)


def flat_contracted_axes(equation: str) -> Optional[int]:
    """How many trailing input axes `equation` contracts with the kernel's leading axes, when it
    is nothing else (`abc,cde->abde`: 1, `abcd,cde->abe`: 2, `abc,cd->abd`: 1); else None."""
    if "." in equation or "->" not in equation or equation.count(",") != 1:
        return None
    operands, out = equation.replace(" ", "").split("->")
    x_axes, kernel_axes = operands.split(",")
    if len(set(x_axes)) != len(x_axes) or len(set(kernel_axes)) != len(kernel_axes):
        return None
    contracted = "".join(axis for axis in x_axes if axis not in out)
    m = len(contracted)
    if (m == 0 or x_axes[-m:] != contracted or kernel_axes[:m] != contracted
            or out != x_axes[:-m] + kernel_axes[m:]):
        return None
    return m


@register_serializable
class MatmulEinsumDense(keras.layers.EinsumDense):
    """`keras.layers.EinsumDense` whose contraction runs as one 2-D matmul when its equation
    contracts the input's trailing axes with the kernel's leading ones and keeps the rest in
    order (`flat_contracted_axes`): every projection of `keras.layers.MultiHeadAttention`.

    Why: Keras 3's TensorFlow backend computes those equations as a matmul that broadcasts the
    kernel over the batch, so the kernel's gradient becomes one matmul per example summed over
    the batch (`BatchMatMulV2` to a batch x kernel-sized tensor, then `Sum`, slow in bfloat16).
    TensorFlow's own `Einsum` kernel, which tf_keras (and so TFM) ran, folds the batch axes into
    one matmul; this does the same. Same variables and config as EinsumDense, the same result
    up to float rounding. Other equations and quantized layers take Keras's path.
    """

    def call(self, inputs, training=None):
        contracted_axes = flat_contracted_axes(self.equation)
        if contracted_axes is None or self.quantization_mode is not None:
            return super().call(inputs, training=training)
        kernel = self.kernel  # LoRA's product included, as Keras's call reads it
        contracted = 1
        for size in kernel.shape[:contracted_axes]:
            contracted *= int(size)
        outputs = keras.ops.matmul(keras.ops.reshape(inputs, (-1, contracted)),
                                   keras.ops.reshape(kernel, (contracted, -1)))
        kept = tuple(keras.ops.shape(inputs)[:-contracted_axes])
        outputs = keras.ops.reshape(outputs, kept + tuple(kernel.shape[contracted_axes:]))
        if self.bias is not None:
            outputs = keras.ops.add(outputs, self.bias)
        if self.activation is not None:
            outputs = self.activation(outputs)
        return outputs


def use_matmul_projections(attention: keras.layers.MultiHeadAttention) -> None:
    """Makes a built `MultiHeadAttention`'s query / key / value / output projections
    `MatmulEinsumDense` (the same objects and variables; only how `call` contracts changes).

    Keras builds these sublayers inside `MultiHeadAttention.build` with no hook to pass a class,
    so the built layers' class is switched; `MatmulEinsumDense` adds no state to EinsumDense.
    """
    for dense in (attention.query_dense, attention.key_dense, attention.value_dense,
                  attention.output_dense):
        if type(dense) is keras.layers.EinsumDense:  # pylint: disable=unidiomatic-typecheck
            dense.__class__ = MatmulEinsumDense


def get_stochastic_depth_rate(init_rate: float, i: int, n: int) -> float:
    """The drop rate of block `i` of `n`: `init_rate * i / n` (TFM's)."""
    if not 0 <= init_rate <= 1:
        raise ValueError(f"stochastic depth rate ({init_rate}) must be within [0, 1].")
    return init_rate * float(i) / n



@register_serializable
class StochasticDepth(keras.layers.Layer):
    """Drops the whole residual branch of an example with probability `drop_rate` in training."""

    def __init__(self, drop_rate: float, **kwargs):
        super().__init__(**kwargs)
        self.drop_rate = drop_rate

    def call(self, inputs, training=None):
        if not training or not self.drop_rate:
            return inputs
        keep = 1.0 - self.drop_rate
        shape = [tf.shape(inputs)[0]] + [1] * (len(inputs.shape) - 1)
        mask = tf.floor(keep + tf.random.uniform(shape, dtype=inputs.dtype))
        return inputs / keep * mask

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "drop_rate": self.drop_rate}


def add_residual(branch, shortcut, drop: Optional[StochasticDepth] = None, training=None):
    """`shortcut + branch`, the branch first dropped per example by `drop` (when given): how
    every residual block of the convnets closes."""
    if drop is not None:
        branch = drop(branch, training=training)
    return branch + shortcut


@register_serializable
class SqueezeExcitation(SettingsBlock):
    """Channel gating (TFM's nn_layers.SqueezeExcitation): pool -> 1x1 conv to
    `make_divisible(in_filters * se_ratio)` filters (`activation`) -> 1x1 conv to `out_filters`
    (`gating_activation`) -> scale the input."""

    def __init__(self, in_filters: int, out_filters: int, se_ratio: float,
                 divisible_by: int = 1, round_down_protect: bool = True,
                 activation: str = "relu", gating_activation: str = "sigmoid",
                 settings: Optional[NormSettings] = None, **kwargs):
        super().__init__(settings, in_filters=in_filters, out_filters=out_filters,
                         se_ratio=se_ratio, divisible_by=divisible_by,
                         round_down_protect=round_down_protect, activation=activation,
                         gating_activation=gating_activation, **kwargs)
        reduced = make_divisible(max(1, int(in_filters * se_ratio)), divisor=divisible_by,
                                 round_down_protect=round_down_protect)
        self._reduce = self._settings.conv(reduced, 1, use_bias=True, name="se_reduce")
        self._expand = self._settings.conv(out_filters, 1, use_bias=True, name="se_expand")
        self._activation = get_activation(activation)
        self._gating = get_activation(gating_activation)

    def build(self, input_shape):
        pooled = (input_shape[0], 1, 1, input_shape[-1])
        self._reduce.build(pooled)
        self._expand.build(self._reduce.compute_output_shape(pooled))

    def compute_output_shape(self, input_shape):
        return input_shape

    def call(self, inputs):
        x = keras.ops.mean(inputs, axis=(1, 2), keepdims=True)
        x = self._activation(self._reduce(x))
        return self._gating(self._expand(x)) * inputs
