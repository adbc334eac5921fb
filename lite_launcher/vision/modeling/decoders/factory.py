"""The decoder factory (TFM's official/vision/modeling/decoders/factory.py): the decoder
`model.decoder.type` chooses ('identity': None, the head reads the backbone's endpoints).
"""

from __future__ import annotations

from typing import Dict, Optional

import keras

from lite_launcher.core.base_config import ConfigError
from lite_launcher.vision.modeling.decoders.aspp import ASPP, build_aspp_decoder  # noqa: F401
from lite_launcher.vision.modeling.decoders.fpn import build_fpn, build_fpn_decoder  # noqa: F401
from lite_launcher.vision.modeling.layers.nn_layers import NormSettings

# decoder.type -> fn(input_specs, model_config, settings) -> the decoder layer (None: none).
DECODER_BUILDERS = {
    "identity": lambda input_specs, model_config, settings: None,
    "aspp": build_aspp_decoder,
    "fpn": build_fpn_decoder,
}


def build_decoder(input_specs: Dict[str, tuple], model_config,
                  settings: NormSettings) -> Optional[keras.layers.Layer]:
    """The decoder of `model_config.decoder.type` on backbone features `input_specs` (level ->
    shape with batch): ASPP, FPN, or None for 'identity'."""
    decoder_type = model_config.decoder.type
    if decoder_type not in DECODER_BUILDERS:
        raise ConfigError(f"task.model.decoder.type {decoder_type!r} is not implemented; use "
                          f"{', '.join(DECODER_BUILDERS)}.")
    return DECODER_BUILDERS[decoder_type](input_specs, model_config, settings)
