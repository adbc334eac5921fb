"""The old home of the start-time checkpoint recovery, kept so its import paths still work.

Everything lives in `lite_launcher.checkpoints` now (see "Recovering" there).
"""

from lite_launcher.checkpoints import (  # noqa: F401  (re-exported)
    CORRUPT_SUBDIR, STATE_FILE, NoReadableCheckpointError, prepare_model_dir,
    remove_interrupted_writes, unreadable_reason)

__all__ = ["CORRUPT_SUBDIR", "STATE_FILE", "NoReadableCheckpointError", "prepare_model_dir",
           "remove_interrupted_writes", "unreadable_reason"]
