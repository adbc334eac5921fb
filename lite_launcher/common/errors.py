"""The errors the `lite-train` driver turns into one-line messages (TensorFlow-free).

`ConfigError` (and its subclasses) is the user's fault: one line, exit code 2. The others
here are failures of the environment raised while a run is under way: one line, exit code 1,
and the checkpoints written before are intact. Defining them in one TensorFlow-free module
lets the driver catch them with a plain `except` before (or without) importing TensorFlow.
The modules that raise them re-export them under their old names.
"""

from __future__ import annotations

from lite_launcher.core.base_config import ConfigError


class ModelDirLockedError(ConfigError):
    """Another training process holds the model_dir's lock."""


class ModelDirWriteError(OSError):
    """A file of the driver (params.yaml) could not be written to model_dir (exit code 1)."""


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (disk full, file too large, no permission, ...).

    The message names the directory and the failing file; checkpoints written before are
    intact, and a restart resumes from the newest of them.
    """


class TrainingDivergedError(RuntimeError):
    """The loss diverged more often than `trainer.recovery_max_trials` allows."""


class NoReadableCheckpointError(RuntimeError):
    """model_dir holds checkpoints but none of them reads (an environment failure: exit 1)."""


class ClusterTaskLostError(RuntimeError):
    """A multi-worker peer died, hung or never started (exit code 1); restart the cluster."""


class MissingExtraError(ConfigError):
    """An optional dependency (an extra of lite_launcher) is not installed: one line naming
    the extra to install, exit code 2."""


def import_extra(module: str, purpose: str, extra: str):
    """Imports and returns `module`; `MissingExtraError` in one line when it is not installed:
    "`purpose`, which is not installed (...): pip install 'lite_launcher[`extra`]'"."""
    import sys  # pylint: disable=import-outside-toplevel

    try:
        __import__(module)  # through builtins.__import__, which tests may patch
    except ImportError as error:
        raise MissingExtraError(f"{purpose}, which is not installed ({error}): "
                                f"pip install 'lite_launcher[{extra}]'") from None
    return sys.modules[module]


class InputRecordError(ConfigError):
    """An input record the task cannot use (a mask of another size than its image, ...): the
    user's data, so one line naming the record and exit code 2; checkpoints stay intact."""


# An input pipeline's `tf.debugging.Assert` that starts its message with this marks a bad
# record of the user's data; the driver turns the op error it raises into `InputRecordError`.
BAD_RECORD_MARKER = "Bad input record:"


def input_record_error(message: str):
    """The `InputRecordError` for a TensorFlow op error's message, or None if the message is
    not a bad-record assertion (see `BAD_RECORD_MARKER`)."""
    start = message.find(BAD_RECORD_MARKER)
    if start < 0:
        return None
    # Assert prints each data item in brackets: "[Bad input record:] [The mask of] [a.png]",
    # on the line after TensorFlow's "Graph execution error:" header.
    line = message[start + len(BAD_RECORD_MARKER):].split("\n", 1)[0]
    text = line.replace("] [", " ").strip(" []")
    return InputRecordError(f"{BAD_RECORD_MARKER} {' '.join(text.split())}")


# What the driver reports as a failure of the environment (one line, exit code 1).
ENVIRONMENT_FAILURES = (ModelDirWriteError, CheckpointWriteError, TrainingDivergedError,
                        NoReadableCheckpointError, ClusterTaskLostError)

__all__ = ["ConfigError", "ModelDirLockedError", "ModelDirWriteError", "CheckpointWriteError",
           "TrainingDivergedError", "NoReadableCheckpointError", "ClusterTaskLostError",
           "ENVIRONMENT_FAILURES", "InputRecordError", "BAD_RECORD_MARKER",
           "input_record_error"]
