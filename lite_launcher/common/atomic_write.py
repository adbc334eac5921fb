"""Write then rename: a file is either its old content or its new one, never half written.

Every file lite_launcher writes outside a checkpoint (params.yaml, the gin config, the best
checkpoint's info.json, checkpoint state files, continuous evaluation's record, TFRecord
shards) goes through `atomic_path` / `write_text`. TensorFlow-free for local paths, so the
driver can use it before TensorFlow loads; paths with a scheme (gs://, ...) go through
`tf.io.gfile`, imported only then.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator


def _is_url(path: str) -> bool:
    return "://" in path


def temporary_path(path: str) -> str:
    """The temporary file `atomic_path(path)` writes first (same directory, so the rename is
    atomic; named per process, so two writers never share one)."""
    return f"{path}.tmp-{os.getpid()}"


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
    """Yields a temporary path to write; on success it is renamed to `path`.

    If the body raises, the temporary file is removed and `path` is left as it was.
    """
    temporary = temporary_path(path)
    try:
        yield temporary
        if _is_url(path):
            import tensorflow as tf  # pylint: disable=import-outside-toplevel
            tf.io.gfile.rename(temporary, path, overwrite=True)
        else:
            os.replace(temporary, path)
    except BaseException:
        _remove_quietly(temporary)
        raise


def write_text(path: str, text: str) -> None:
    """Writes `text` to `path` atomically (see `atomic_path`)."""
    with atomic_path(path) as temporary:
        if _is_url(path):
            import tensorflow as tf  # pylint: disable=import-outside-toplevel
            with tf.io.gfile.GFile(temporary, "w") as f:
                f.write(text)
        else:
            with open(temporary, "w", encoding="utf-8") as f:
                f.write(text)


def _remove_quietly(path: str) -> None:
    try:
        if _is_url(path):
            import tensorflow as tf  # pylint: disable=import-outside-toplevel
            if tf.io.gfile.exists(path):
                tf.io.gfile.remove(path)
        elif os.path.exists(path):
            os.remove(path)
    except Exception:  # pylint: disable=broad-except  (the write's own error matters more)
        pass
