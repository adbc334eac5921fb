"""The five run modes (TensorFlow-free, so the driver can check them before importing TF)."""

from lite_launcher.core.base_config import ConfigError

MODES = ("train", "train_and_post_eval", "train_and_eval", "eval", "continuous_eval")


def check_mode(mode: str) -> str:
    """Returns `mode` if it is one of the five modes, else raises a ConfigError listing them."""
    if mode not in MODES:
        raise ConfigError(f"Unknown mode {mode!r}; valid modes: {', '.join(MODES)}.")
    return mode


def mode_trains(mode: str) -> bool:
    """Whether the mode trains (and so writes params.yaml and the gin config)."""
    return mode.startswith("train")
