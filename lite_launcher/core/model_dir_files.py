"""What the chief of a training run writes into model_dir besides checkpoints and summaries:
`params.yaml` and the operative gin config. `ExperimentRunner` writes them when it owns
model_dir (`write_run_config`, set by lite-train); `train_utils` re-exports both under TFM's
names. TensorFlow-free on import."""

from __future__ import annotations

import os

from lite_launcher.common import atomic_write
from lite_launcher.common.errors import ModelDirWriteError


def serialize_config(params, model_dir: str) -> str:
    """Writes `model_dir/params.yaml`; returns its path.

    Raises:
      ModelDirWriteError: it cannot be written (the environment's failure: exit 1); no
        temporary file is left behind.
    """
    import tensorflow as tf

    path = os.path.join(model_dir, "params.yaml")
    try:
        tf.io.gfile.makedirs(model_dir)  # Not os.makedirs: model_dir may be a URL (gs://...).
        params.save_yaml(path)  # Write then rename: a failed write leaves no temporary file.
    except (OSError, tf.errors.OpError) as error:
        detail = getattr(error, "strerror", None) or getattr(error, "message", None) or error
        raise ModelDirWriteError(f"Cannot write {path} (--model_dir {model_dir!r}): "
                                 f"{detail}.") from error
    return path


def save_gin_config(mode: str, model_dir: str) -> str:
    """Writes `model_dir/operative_config.<mode>.gin` (write then rename); returns its path."""
    import gin

    path = os.path.join(model_dir, f"operative_config.{mode}.gin")
    try:
        atomic_write.write_text(path, gin.operative_config_str())
    except OSError as error:
        raise ModelDirWriteError(f"Cannot write {path}: {error.strerror or error}.") from error
    return path
