"""3D backbone configs with TFM's field names and defaults (official/vision/configs/
backbones_3d.py): `ResNet3D` (its block plan given per group), `ResNet3D50`, `ResNet3DRS` and
the `Backbone3D` one-of that the video classification model holds.

TensorFlow-free, as all of `configs/`.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

from lite_launcher.core.base_config import Config, ConfigError, OneOfConfig

# The depths of TFM's 3D ResNet (resnet_3d.RESNET_SPECS): block repeats of the four groups.
RESNET_3D_REPEATS = {
    50: (3, 4, 6, 3),
    101: (3, 4, 23, 3),
    152: (3, 8, 36, 3),
    200: (3, 24, 36, 3),
    270: (4, 29, 53, 4),
    300: (4, 36, 54, 4),
    350: (4, 36, 72, 4),
}
RESNET_3D_MODEL_IDS = tuple(RESNET_3D_REPEATS)


@dataclasses.dataclass
class ResNet3DBlock(Config):
    """One block group of a 3D ResNet: its temporal stride (first block), the temporal kernel
    size of each block, and whether its last block gates itself (S3D-G)."""

    temporal_strides: int = 1
    temporal_kernel_sizes: Tuple[int, ...] = ()
    use_self_gating: bool = False


@dataclasses.dataclass
class ResNet3D(Config):
    """TFM's 3D ResNet (`backbone.type: resnet_3d`); `block_specs` holds one entry per group,
    with one temporal kernel size per block of it."""

    model_id: int = 50
    stem_type: str = "v0"
    stem_conv_temporal_kernel_size: int = 5
    stem_conv_temporal_stride: int = 2
    stem_pool_temporal_stride: int = 2
    block_specs: Tuple[ResNet3DBlock, ...] = ()
    stochastic_depth_drop_rate: float = 0.0
    se_ratio: float = 0.0

    def check(self, path: str, repeat_kernel_sizes: bool = False) -> None:
        """Raises ConfigError (naming `path`) for what TFM's builder would stop on;
        `repeat_kernel_sizes` as `kernel_sizes`."""
        if self.model_id not in RESNET_3D_REPEATS:
            raise ConfigError(f"{path}.model_id {self.model_id} is not one of "
                              f"{', '.join(map(str, RESNET_3D_MODEL_IDS))}.")
        if self.stem_type not in ("v0", "v1"):
            raise ConfigError(f"{path}.stem_type {self.stem_type!r} must be 'v0' or 'v1'.")
        for name in ("stem_conv_temporal_kernel_size", "stem_conv_temporal_stride",
                     "stem_pool_temporal_stride"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{path}.{name} ({getattr(self, name)}) must be >= 1.")
        if not 0.0 <= self.stochastic_depth_drop_rate <= 1.0:
            raise ConfigError(f"{path}.stochastic_depth_drop_rate "
                              f"({self.stochastic_depth_drop_rate}) must be within [0, 1].")
        repeats = RESNET_3D_REPEATS[self.model_id]
        if len(self.block_specs) != len(repeats):
            raise ConfigError(f"{path}.block_specs has {len(self.block_specs)} entries; "
                              f"model_id {self.model_id} has {len(repeats)} block groups.")
        for i, (spec, repeat) in enumerate(zip(self.block_specs, repeats)):
            sizes = list(spec.temporal_kernel_sizes)
            if repeat_kernel_sizes:
                sizes = sizes * repeat
            if len(sizes) != repeat:
                raise ConfigError(
                    f"{path}.block_specs[{i}].temporal_kernel_sizes has {len(sizes)} sizes; "
                    f"group {i} of model_id {self.model_id} has {repeat} blocks (one size "
                    f"per block).")
            if spec.temporal_strides < 1 or min(sizes) < 1:
                raise ConfigError(f"{path}.block_specs[{i}] needs temporal_strides and "
                                  f"temporal_kernel_sizes >= 1.")

    def kernel_sizes(self, group: int, repeat_kernel_sizes: bool = False) -> Tuple[int, ...]:
        """The temporal kernel size of each block of `group`: as written (TFM's `resnet_3d`
        builder) or, with `repeat_kernel_sizes`, the group's sizes repeated once per block
        (TFM's `resnet_3d_rs` builder)."""
        sizes = tuple(self.block_specs[group].temporal_kernel_sizes)
        if repeat_kernel_sizes:
            sizes = sizes * RESNET_3D_REPEATS[self.model_id][group]
        return sizes


def _resnet3d50_blocks():
    return (ResNet3DBlock(temporal_strides=1, temporal_kernel_sizes=(3, 3, 3),
                          use_self_gating=True),
            ResNet3DBlock(temporal_strides=1, temporal_kernel_sizes=(3, 1, 3, 1),
                          use_self_gating=True),
            ResNet3DBlock(temporal_strides=1, temporal_kernel_sizes=(3, 1, 3, 1, 3, 1),
                          use_self_gating=True),
            ResNet3DBlock(temporal_strides=1, temporal_kernel_sizes=(1, 3, 1),
                          use_self_gating=True))


def _resnet3drs_blocks():
    return tuple(ResNet3DBlock(temporal_strides=1, temporal_kernel_sizes=(size,),
                               use_self_gating=True) for size in (1, 1, 3, 3))


@dataclasses.dataclass
class ResNet3D50(ResNet3D):
    """TFM's 3D ResNet-50 block plan (temporal kernels 3/1 alternating, self-gating)."""

    model_id: int = 50
    block_specs: Tuple[ResNet3DBlock, ...] = dataclasses.field(
        default_factory=_resnet3d50_blocks)


@dataclasses.dataclass
class ResNet3DRS(ResNet3D):
    """TFM's 3D ResNet-RS block plan: stem v1, SE 0.2, stochastic depth 0.1, one temporal
    kernel size per group (the `resnet_3d_rs` builder repeats it over the group's blocks, so
    it fits every model_id)."""

    model_id: int = 50
    stem_type: str = "v1"
    stem_conv_temporal_kernel_size: int = 5
    stem_conv_temporal_stride: int = 2
    stem_pool_temporal_stride: int = 2
    stochastic_depth_drop_rate: float = 0.1
    se_ratio: float = 0.2
    block_specs: Tuple[ResNet3DBlock, ...] = dataclasses.field(
        default_factory=_resnet3drs_blocks)


@dataclasses.dataclass
class Backbone3D(OneOfConfig):
    """TFM's 3D backbone one-of: `type` is 'resnet_3d' or 'resnet_3d_rs'."""

    type: Optional[str] = None
    resnet_3d: ResNet3D = dataclasses.field(default_factory=ResNet3D50)
    resnet_3d_rs: ResNet3D = dataclasses.field(default_factory=ResNet3DRS)

    def check_built(self, path: str = "task.model.backbone") -> None:
        """Raises ConfigError unless `type` names a 3D backbone whose config builds."""
        if self.type not in self.choices():
            raise ConfigError(f"{path}.type {self.type!r} must be one of "
                              f"{', '.join(self.choices())}.")
        self.get().check(f"{path}.{self.type}", self.repeats_kernel_sizes())

    def repeats_kernel_sizes(self) -> bool:
        """Whether the chosen builder repeats each group's kernel sizes (`resnet_3d_rs`)."""
        return self.type == "resnet_3d_rs"
