"""Decoder configs with TFM's field names and defaults (official/vision/configs/decoders.py):
Identity, FPN, NASFPN (kept so that a YAML naming it loads), ASPP and the `Decoder` one-of.
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional

from lite_launcher.core.base_config import Config, OneOfConfig

DECODER_TYPES = ("identity", "aspp", "fpn")

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
    """TFM's decoders.NASFPN (not implemented: kept so that a YAML naming it loads)."""

    num_filters: int = 256
    num_repeats: int = 5
    use_separable_conv: bool = False


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
    """`type`: 'identity', 'aspp' or 'fpn' (TFM's decoders.Decoder; 'nasfpn' is not
    implemented)."""

    type: Optional[str] = None
    fpn: FPN = dataclasses.field(default_factory=FPN)
    nasfpn: NASFPN = dataclasses.field(default_factory=NASFPN)
    identity: Identity = dataclasses.field(default_factory=Identity)
    aspp: ASPP = dataclasses.field(default_factory=ASPP)
