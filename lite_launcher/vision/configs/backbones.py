"""Backbone configs with TFM's field names and defaults (official/vision/configs/backbones.py
and vit_specs.py): ResNet, DilatedResNet, MobileNet, VisionTransformer, SpineNet,
SpineNetMobile, MobileDet and the `Backbone` one-of that every task family's model config holds.
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional, Tuple

from lite_launcher.core.base_config import Config, ConfigError, OneOfConfig
from lite_launcher.vision.configs.common import reject_unimplemented

RESNET_MODEL_IDS = (10, 18, 26, 34, 50, 101, 152, 200, 270, 350, 420)
MOBILENET_MODEL_IDS = (
    "MobileNetV1", "MobileNetV2", "MobileNetV3Large", "MobileNetV3Small", "MobileNetMultiAVG",
    "MobileNetMultiAVGSeg", "MobileNetV4ConvSmall", "MobileNetV4ConvMedium",
    "MobileNetV4ConvLarge", "MobileNetV4ConvMediumSeg", "MobileNetV4HybridMedium",
    "MobileNetV4HybridLarge")
DILATED_RESNET_MODEL_IDS = (50, 101, 152, 200)


@dataclasses.dataclass
class ResNet(Config):
    """TFM's ResNet / ResNet-RS backbone (backbones.ResNet)."""

    model_id: int = 50
    depth_multiplier: float = 1.0
    stem_type: str = "v0"
    se_ratio: float = 0.0
    stochastic_depth_drop_rate: float = 0.0
    scale_stem: bool = True
    resnetd_shortcut: bool = False
    replace_stem_max_pool: bool = False
    bn_trainable: bool = True

    def _validate(self):
        if self.model_id not in RESNET_MODEL_IDS:
            raise ConfigError(
                f"task.model.backbone.resnet.model_id {self.model_id} is not one of "
                f"{', '.join(map(str, RESNET_MODEL_IDS))}.")
        if self.stem_type not in ("v0", "v1"):
            raise ConfigError(
                f"task.model.backbone.resnet.stem_type {self.stem_type!r} must be 'v0' or 'v1'.")
        if not 0.0 <= self.stochastic_depth_drop_rate <= 1.0:
            raise ConfigError(
                f"task.model.backbone.resnet.stochastic_depth_drop_rate "
                f"({self.stochastic_depth_drop_rate}) must be within [0, 1].")


@dataclasses.dataclass
class DilatedResNet(Config):
    """TFM's DeepLab ResNet backbone (backbones.DilatedResNet, `type: dilated_resnet`)."""

    model_id: int = 50
    output_stride: int = 16
    multigrid: Optional[List[int]] = None
    stem_type: str = "v0"
    last_stage_repeats: int = 1
    se_ratio: float = 0.0
    stochastic_depth_drop_rate: float = 0.0
    resnetd_shortcut: bool = False
    replace_stem_max_pool: bool = False

    def _validate(self):
        path = "task.model.backbone.dilated_resnet"
        if self.model_id not in DILATED_RESNET_MODEL_IDS:
            raise ConfigError(
                f"{path}.model_id {self.model_id} is not one of "
                f"{', '.join(map(str, DILATED_RESNET_MODEL_IDS))}.")
        if self.output_stride not in (8, 16, 32):
            raise ConfigError(f"{path}.output_stride ({self.output_stride}) must be 8, 16 "
                              f"or 32.")
        if self.stem_type not in ("v0", "v1"):
            raise ConfigError(f"{path}.stem_type {self.stem_type!r} must be 'v0' or 'v1'.")
        if self.last_stage_repeats < 1:
            raise ConfigError(f"{path}.last_stage_repeats ({self.last_stage_repeats}) must be "
                              f">= 1.")
        if self.multigrid is not None and len(self.multigrid) != 3:
            # TFM: one factor per block of the last (3-block) stage.
            raise ConfigError(f"{path}.multigrid {list(self.multigrid)} must have 3 entries, "
                              f"one per block of the last stage.")
        if not 0.0 <= self.stochastic_depth_drop_rate <= 1.0:
            raise ConfigError(f"{path}.stochastic_depth_drop_rate "
                              f"({self.stochastic_depth_drop_rate}) must be within [0, 1].")


@dataclasses.dataclass
class MobileNet(Config):
    """TFM's MobileNet backbone (backbones.MobileNet): V1, V2, V3, MultiAVG and V4 models."""

    model_id: str = "MobileNetV2"
    filter_size_scale: float = 1.0
    stochastic_depth_drop_rate: float = 0.0
    flat_stochastic_depth_drop_rate: bool = True
    output_stride: Optional[int] = None
    output_intermediate_endpoints: bool = False

    def _validate(self):
        path = "task.model.backbone.mobilenet"
        if self.model_id not in MOBILENET_MODEL_IDS:
            raise ConfigError(
                f"{path}.model_id {self.model_id!r} is not implemented; "
                f"use one of {', '.join(MOBILENET_MODEL_IDS)}.")
        if not self.filter_size_scale > 0:
            raise ConfigError(f"{path}.filter_size_scale ({self.filter_size_scale}) must be "
                              f"> 0.")
        stride = self.output_stride
        if stride is not None:
            if self.model_id == "MobileNetV1" and stride not in (8, 16, 32):
                raise ConfigError(f"{path}.output_stride ({stride}) must be 8, 16 or 32 for "
                                  f"MobileNetV1.")
            if stride < 1 or (stride > 1 and stride % 2):
                raise ConfigError(f"{path}.output_stride ({stride}) must be null, 1 or a "
                                  f"multiple of 2.")
        if not 0.0 <= self.stochastic_depth_drop_rate <= 1.0:
            raise ConfigError(f"{path}.stochastic_depth_drop_rate "
                              f"({self.stochastic_depth_drop_rate}) must be within [0, 1].")


# SpineNet's model ids (TFM's spinenet.SCALING_MAP) and mobile SpineNet's
# (spinenet_mobile.SCALING_MAP); the sizes each id stands for are tables beside the families.
SPINENET_MODEL_IDS = ("49S", "49", "96", "143", "143L", "190")
SPINENET_MOBILE_MODEL_IDS = ("49", "49S", "49XS")


def _check_spinenet_levels(config, path: str, lowest: int) -> None:
    """min_level / max_level within the levels the network outputs (`lowest`..7)."""
    if not lowest <= config.min_level <= config.max_level <= 7:
        raise ConfigError(
            f"{path}: min_level ({config.min_level}) and max_level ({config.max_level}) must "
            f"satisfy {lowest} <= min_level <= max_level <= 7.")
    if not 0.0 <= config.stochastic_depth_drop_rate <= 1.0:
        raise ConfigError(f"{path}.stochastic_depth_drop_rate "
                          f"({config.stochastic_depth_drop_rate}) must be within [0, 1].")


@dataclasses.dataclass
class SpineNet(Config):
    """TFM's SpineNet backbone (backbones.SpineNet, `type: spinenet`). `model_id` chooses the
    endpoint width, filter scale, resampling alpha and block repeats (SPINENET_MODEL_IDS)."""

    model_id: str = "49"
    stochastic_depth_drop_rate: float = 0.0
    min_level: int = 3
    max_level: int = 7

    def _validate(self):
        path = "task.model.backbone.spinenet"
        if str(self.model_id) not in SPINENET_MODEL_IDS:
            raise ConfigError(f"{path}.model_id {self.model_id!r} is not one of "
                              f"{', '.join(SPINENET_MODEL_IDS)}.")
        _check_spinenet_levels(self, path, 2)


@dataclasses.dataclass
class SpineNetMobile(Config):
    """TFM's mobile SpineNet backbone (backbones.SpineNetMobile, `type: spinenet_mobile`).
    `use_keras_upsampling_2d` only chooses TFM's upsampling op: lite always uses
    `keras.layers.UpSampling2D` (the same nearest-neighbour values)."""

    model_id: str = "49"
    stochastic_depth_drop_rate: float = 0.0
    se_ratio: float = 0.2
    expand_ratio: int = 6
    min_level: int = 3
    max_level: int = 7
    use_keras_upsampling_2d: bool = False

    def _validate(self):
        path = "task.model.backbone.spinenet_mobile"
        if str(self.model_id) not in SPINENET_MOBILE_MODEL_IDS:
            raise ConfigError(f"{path}.model_id {self.model_id!r} is not one of "
                              f"{', '.join(SPINENET_MOBILE_MODEL_IDS)}.")
        _check_spinenet_levels(self, path, 3)
        if self.expand_ratio < 1:
            raise ConfigError(f"{path}.expand_ratio ({self.expand_ratio}) must be >= 1.")
        if not 0.0 <= self.se_ratio <= 1.0:
            raise ConfigError(f"{path}.se_ratio ({self.se_ratio}) must be within [0, 1].")


MOBILEDET_MODEL_IDS = ("MobileDetCPU", "MobileDetDSP", "MobileDetEdgeTPU", "MobileDetGPU")


@dataclasses.dataclass
class MobileDet(Config):
    """TFM's MobileDet backbone (backbones.MobileDet, `type: mobiledet`)."""

    model_id: str = "MobileDetCPU"
    filter_size_scale: float = 1.0

    def _validate(self):
        path = "task.model.backbone.mobiledet"
        if self.model_id not in MOBILEDET_MODEL_IDS:
            raise ConfigError(f"{path}.model_id {self.model_id!r} is not one of "
                              f"{', '.join(MOBILEDET_MODEL_IDS)}.")
        if not self.filter_size_scale > 0:
            raise ConfigError(f"{path}.filter_size_scale ({self.filter_size_scale}) must be "
                              f"> 0.")


# The backbone types lite builds; the other fields of `Backbone` are TFM's configs only.
BUILT_BACKBONE_TYPES = ("resnet", "dilated_resnet", "mobilenet", "vit", "spinenet",
                        "spinenet_mobile", "mobiledet")


@dataclasses.dataclass
class Backbone(OneOfConfig):
    """`type`: 'resnet', 'dilated_resnet', 'mobilenet', 'vit', 'spinenet', 'spinenet_mobile'
    or 'mobiledet' (`BUILT_BACKBONE_TYPES`); TFM's other backbones (EfficientNet, RevNet) are
    absent, and `check_built` refuses a type lite does not build in one line."""

    type: Optional[str] = None
    resnet: ResNet = dataclasses.field(default_factory=ResNet)
    dilated_resnet: DilatedResNet = dataclasses.field(default_factory=DilatedResNet)
    spinenet: SpineNet = dataclasses.field(default_factory=SpineNet)
    spinenet_mobile: SpineNetMobile = dataclasses.field(default_factory=SpineNetMobile)
    mobilenet: MobileNet = dataclasses.field(default_factory=MobileNet)
    mobiledet: MobileDet = dataclasses.field(default_factory=MobileDet)
    vit: "VisionTransformer" = dataclasses.field(default_factory=lambda: VisionTransformer())

    def check_built(self, path: str = "task.model.backbone") -> None:
        """Raises ConfigError (one line) unless `type` is one lite builds."""
        if self.type in BUILT_BACKBONE_TYPES:
            return
        if self.type in self.choices():
            raise ConfigError(
                f"{path}: backbone type {self.type!r} is not built yet: lite_launcher builds "
                f"{', '.join(BUILT_BACKBONE_TYPES)}; set {path}.type to one of them.")
        raise ConfigError(f"{path}.type {self.type!r} must be one of "
                          f"{', '.join(BUILT_BACKBONE_TYPES)}.")


# model_name -> the sizes TFM's builder writes over the config's own (TFM's vit_specs).
VIT_SPECS = {
    "vit-ti16": dict(hidden_size=192, patch_size=16, mlp_dim=768, num_heads=3, num_layers=12),
    "vit-s16": dict(hidden_size=384, patch_size=16, mlp_dim=1536, num_heads=6, num_layers=12),
    "vit-b16": dict(hidden_size=768, patch_size=16, mlp_dim=3072, num_heads=12, num_layers=12),
    "vit-b32": dict(hidden_size=768, patch_size=32, mlp_dim=3072, num_heads=12, num_layers=12),
    "vit-l16": dict(hidden_size=1024, patch_size=16, mlp_dim=4096, num_heads=16, num_layers=24),
    "vit-l32": dict(hidden_size=1024, patch_size=32, mlp_dim=4096, num_heads=16, num_layers=24),
    "vit-h14": dict(hidden_size=1280, patch_size=14, mlp_dim=5120, num_heads=16, num_layers=32),
    "vit-g14": dict(hidden_size=1408, patch_size=14, mlp_dim=5632, num_heads=16, num_layers=40),
    "vit-G14": dict(hidden_size=1664, patch_size=14, mlp_dim=8192, num_heads=16, num_layers=48),
    "vit-e14": dict(hidden_size=1792, patch_size=14, mlp_dim=15360, num_heads=16,
                    num_layers=56),
}
VIT_POOLERS = ("token", "gap", "none")


@dataclasses.dataclass
class Transformer(Config):
    """The encoder blocks of a ViT (TFM's backbones.Transformer)."""

    mlp_dim: int = 1
    num_heads: int = 1
    num_layers: int = 1
    attention_dropout_rate: float = 0.0
    dropout_rate: float = 0.0


@dataclasses.dataclass
class VisionTransformer(Config):
    """TFM's ViT backbone (backbones.VisionTransformer), built by `vision.vit.build_vit`.

    As in TFM, a `model_name` of `VIT_SPECS` sets hidden_size, patch_size and transformer's
    mlp_dim / num_heads / num_layers, over what the config says (TFM's ViT-H YAMLs say
    patch_size 16 and get 14). `model_name: null` (not in TFM, whose builder fails on it) keeps
    the config's own sizes, for small custom models.

    pooler: 'token' (a class token, its output is `pre_logits`), 'gap' (the mean of the tokens)
      or 'none' (all tokens, as `encoded_tokens` when output_encoded_tokens).
    representation_size: > 0: a dense layer with tanh before `pre_logits`.
    init_stochastic_depth_rate: block i of n drops its residual branches at rate * i / n.
    original_init: True: lecun_normal patch / pre-logits kernels and glorot_uniform encoder
      kernels; False: he_uniform and truncated normal (stddev 0.02).
    pos_embed_shape: (rows, cols) of the learned position-embedding grid; None: the input's
      patch grid. Another input size then interpolates it bilinearly (TFM's), which is how a
      model fine-tunes at 384 from a checkpoint trained at 224: set it to the pretraining grid.
      With the token pooler, the class token's embedding is kept as it is (TFM's layer cannot
      add an interpolated grid to the class token's sequence, lite keeps TFM's 1 + rows * cols
      embedding and interpolates the grid part).
    output_2d_feature_maps: also output the patch tokens as a (rows, cols) feature map under
      the level round(log2(patch_size)).
    layer_scale_init_value: > 0: learned per-channel scales (CaiT's LayerScale) on both
      residual branches of each block.
    output_attention_scores: also output the last block's attention probabilities.
    transformer_partition_dims: TFM's TPU spatial partitioning; not implemented (null only).
    """

    model_name: Optional[str] = "vit-b16"
    pooler: str = "token"
    representation_size: int = 0
    hidden_size: int = 1
    patch_size: int = 16
    transformer: Transformer = dataclasses.field(default_factory=Transformer)
    init_stochastic_depth_rate: float = 0.0
    original_init: bool = True
    pos_embed_shape: Optional[Tuple[int, int]] = None
    output_encoded_tokens: bool = True
    output_2d_feature_maps: bool = False
    layer_scale_init_value: float = 0.0
    transformer_partition_dims: Optional[Tuple[int, int, int, int]] = None
    output_attention_scores: bool = False

    def _validate(self):
        path = "task.model.backbone.vit"
        if self.model_name is not None and self.model_name not in VIT_SPECS:
            raise ConfigError(
                f"{path}.model_name {self.model_name!r} is not one of {', '.join(VIT_SPECS)} "
                f"(or null to use hidden_size, patch_size and transformer as given).")
        if self.pooler not in VIT_POOLERS:
            raise ConfigError(f"{path}.pooler {self.pooler!r} must be one of "
                              f"{', '.join(VIT_POOLERS)}.")
        if not 0.0 <= self.init_stochastic_depth_rate <= 1.0:
            raise ConfigError(f"{path}.init_stochastic_depth_rate "
                              f"({self.init_stochastic_depth_rate}) must be within [0, 1].")
        if self.pos_embed_shape is not None and (
                len(self.pos_embed_shape) != 2 or min(self.pos_embed_shape) < 1):
            raise ConfigError(f"{path}.pos_embed_shape {list(self.pos_embed_shape)} must be "
                              f"[rows, cols] of the pretraining patch grid (e.g. [14, 14]).")
        for name in ("representation_size", "layer_scale_init_value"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{path}.{name} ({getattr(self, name)}) must be >= 0.")
        reject_unimplemented(self, path, ("transformer_partition_dims",))
        sizes = self.sizes()
        for name, value in sizes.items():
            if value < 1:
                raise ConfigError(f"{path}: {name} ({value}) must be >= 1.")
        if sizes["hidden_size"] % sizes["num_heads"]:
            raise ConfigError(f"{path}: hidden_size {sizes['hidden_size']} must be a multiple of "
                              f"transformer.num_heads {sizes['num_heads']}.")
        for name in ("attention_dropout_rate", "dropout_rate"):
            if not 0.0 <= getattr(self.transformer, name) < 1.0:
                raise ConfigError(f"{path}.transformer.{name} "
                                  f"({getattr(self.transformer, name)}) must be in [0, 1).")

    def sizes(self) -> dict:
        """hidden_size, patch_size, mlp_dim, num_heads, num_layers: `model_name`'s, as TFM's
        builder writes them over the config, or the config's own for `model_name: null`."""
        if self.model_name is not None and self.model_name in VIT_SPECS:
            return dict(VIT_SPECS[self.model_name])
        t = self.transformer
        return dict(hidden_size=self.hidden_size, patch_size=self.patch_size,
                    mlp_dim=t.mlp_dim, num_heads=t.num_heads, num_layers=t.num_layers)
