"""Decoder configs with TFM's field names and defaults (official/vision/configs/decoders.py):
Identity, FPN, NASFPN, ASPP and the `Decoder` one-of.
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional

from lite_launcher.core.base_config import Config, ConfigError, OneOfConfig

DECODER_TYPES = ("identity", "aspp", "fpn", "nasfpn")

@dataclasses.dataclass
class Identity(Config):
    """No decoder: the head reads the backbone's endpoints (TFM's decoders.Identity)."""


@dataclasses.dataclass
class FPN(Config):
    """Feature pyramid network (TFM's decoders.FPN)."""

    num_filters: int = 256
    fusion_type: str = "sum"
    use_separable_conv: bool = False
    use_keras_layer: bool = False


@dataclasses.dataclass
class NASFPN(Config):
    """TFM's NAS-FPN decoder (decoders.NASFPN): `num_repeats` searched cells of
    `num_filters` channels, separable 3x3 convolutions with `use_separable_conv`."""

    num_filters: int = 256
    num_repeats: int = 5
    use_separable_conv: bool = False


# The levels TFM's searched NAS-FPN cell outputs: a model's min_level..max_level must be these.
NASFPN_LEVELS = (3, 7)


def check_decoder_levels(model, path: str = "task.model") -> None:
    """Refuses a NAS-FPN decoder on levels its cell does not output (TFM fails on them when
    the next cell reads its inputs)."""
    if model.decoder.type == "nasfpn" and (model.min_level, model.max_level) != NASFPN_LEVELS:
        raise ConfigError(
            f"{path}: the nasfpn decoder's cell outputs levels {NASFPN_LEVELS[0]}.."
            f"{NASFPN_LEVELS[1]}; set min_level {NASFPN_LEVELS[0]} and max_level "
            f"{NASFPN_LEVELS[1]} (they are {model.min_level}..{model.max_level}).")


@dataclasses.dataclass
class ASPP(Config):
    """Atrous spatial pyramid pooling (TFM's decoders.ASPP).

    pool_kernel_size: [height, width] of the image-pooling branch's average pool, in input
      pixels (divided by 2**level); None: global average pooling.
    spp_layer_version: 'v1' (TFM's layers.deeplab) or 'v2' (TFM's nn_layers; the same
      weights, the pooled branch resized by a layer that needs a fixed input size).
    """

    level: int = 4
    dilation_rates: List[int] = dataclasses.field(default_factory=list)
    dropout_rate: float = 0.0
    num_filters: int = 256
    use_depthwise_convolution: bool = False
    pool_kernel_size: Optional[List[int]] = None
    spp_layer_version: str = "v1"
    output_tensor: bool = False


@dataclasses.dataclass
class Decoder(OneOfConfig):
    """`type`: 'identity', 'aspp', 'fpn' or 'nasfpn' (TFM's decoders.Decoder)."""

    type: Optional[str] = None
    fpn: FPN = dataclasses.field(default_factory=FPN)
    nasfpn: NASFPN = dataclasses.field(default_factory=NASFPN)
    identity: Identity = dataclasses.field(default_factory=Identity)
    aspp: ASPP = dataclasses.field(default_factory=ASPP)
