"""A trainer's start in a model_dir whose newest checkpoint may be broken.

A checkpoint write can be cut short (kill -9, a full disk), a file truncated or flipped on
storage, the `checkpoint` state file left empty. `prepare_model_dir` runs once when the chief
trainer starts, holding the model_dir lock, before its `tf.train.CheckpointManager` reads the
directory:

- removes `ckpt-<N>_temp/` folders and `checkpoint.tmp*` files left by an interrupted
  checkpoint write (`remove_interrupted_writes`; the Controller also calls it when its own
  save fails, so an exit on a full disk leaves none);
- reads the checkpoints on disk, newest first, every tensor (so a truncated data file, a
  missing index or a checksum mismatch shows), until one reads: that is the one to resume;
- moves each newer checkpoint that does not read into `model_dir/corrupt/<time>/` (never
  deleting it), with one warning naming each and why. Moving them is needed: training resumes
  at an older step and would write new checkpoints with those numbers over them. A probe that
  cannot decide (the file system failed to answer, not the checkpoint to read) moves nothing:
  training resumes from that checkpoint and its restore decides;
- rewrites the `checkpoint` state file when it is unreadable (the bad one is moved aside too)
  or does not name the checkpoint to resume (e.g. a newer complete checkpoint whose state-file
  update failed), so the manager continues from the newest checkpoint that reads.

When checkpoints exist and none reads, `NoReadableCheckpointError` (the driver exits 1 with
one line naming model_dir and the files tried) and nothing is moved. Every path operation goes
through `tf.io.gfile`, so this works on any file system TensorFlow supports (gs://, ...).
"""

from __future__ import annotations

import os
import re
import time
from typing import Dict, List, Optional, Tuple

import tensorflow as tf
from absl import logging

from lite_launcher import atomic_write
from lite_launcher.errors import NoReadableCheckpointError

STATE_FILE = "checkpoint"
CORRUPT_SUBDIR = "corrupt"
_CHECKPOINT_FILE = re.compile(r"^ckpt-(\d+)\.(index|data-\d+-of-\d+)$")



def _first_line(error: BaseException, limit: int = 200) -> str:
    text = (getattr(error, "message", None) or str(error)).strip()
    # TF's eager-op decorations say nothing about the file.
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*|\s*\[Op:\w+\]", "", text)
    line = text.splitlines()[0] if text else ""
    line = f"{type(error).__name__}: {line}"
    return line if len(line) <= limit else line[:limit - 3] + "..."


# Errors that tell nothing about a checkpoint's bytes: the file system could not answer (an
# operation it does not implement, a network hiccup, a timeout, no permission). A probe that
# fails with one of them cannot decide, and must not move a checkpoint that may well be good.
_UNDECIDED_ERRORS = (tf.errors.UnimplementedError, tf.errors.UnavailableError,
                     tf.errors.DeadlineExceededError, tf.errors.AbortedError,
                     tf.errors.CancelledError, tf.errors.PermissionDeniedError,
                     tf.errors.ResourceExhaustedError)


def _probe(prefix: str) -> Tuple[Optional[str], bool]:
    """(why `prefix` does not read or None, whether the probe could decide)."""
    if not tf.io.gfile.exists(prefix + ".index"):
        return "its .index file is missing", True
    try:
        # The reader of the prefix itself: `tf.train.load_checkpoint` first asks whether the
        # prefix is a directory, which some file systems (ram://) answer yes for a prefix of
        # file names, and then looks for a `checkpoint` file in it.
        reader = tf.compat.v1.train.NewCheckpointReader(prefix)
        dtypes = reader.get_variable_to_dtype_map()
        if not dtypes:
            return "it holds no tensors", True
        with tf.device("CPU:0"):
            for name, dtype in dtypes.items():
                # RestoreV2 reads any dtype, variants (input iterator states) included.
                tf.raw_ops.RestoreV2(prefix=prefix, tensor_names=[name],
                                     shape_and_slices=[""], dtypes=[dtype])
    except _UNDECIDED_ERRORS as error:
        return _first_line(error), False
    except (tf.errors.OpError, IndexError) as error:  # IndexError: a truncated data file
        return _first_line(error), True
    except Exception as error:  # pylint: disable=broad-except  (the probe's own limits)
        return _first_line(error), False
    return None, True


def unreadable_reason(prefix: str) -> Optional[str]:
    """Why the checkpoint `prefix` cannot be restored, or None when every tensor reads.

    Reads each tensor once (checksums included), one at a time to bound memory. None also
    when the probe cannot decide (the file system, not the checkpoint, failed to answer).
    """
    reason, decided = _probe(prefix)
    return reason if decided else None


def _checkpoints_on_disk(model_dir: str) -> Dict[int, List[str]]:
    """{number: [file paths]} of the `ckpt-N.*` files in model_dir."""
    files: Dict[int, List[str]] = {}
    for name in tf.io.gfile.listdir(model_dir):
        match = _CHECKPOINT_FILE.match(name)
        if match:
            files.setdefault(int(match.group(1)), []).append(os.path.join(model_dir, name))
    return files


def _read_state(model_dir: str) -> Tuple[Optional[object], Optional[str]]:
    """(CheckpointState or None, why it is unreadable or None)."""
    path = os.path.join(model_dir, STATE_FILE)
    if not tf.io.gfile.exists(path):
        return None, None
    try:
        with tf.io.gfile.GFile(path, "r") as f:
            text = f.read()
        if not text.strip():
            return None, "it is empty"
        # Returns None (after logging) for text that does not parse.
        state = tf.compat.v1.train.get_checkpoint_state(model_dir)
    except Exception as error:  # pylint: disable=broad-except
        return None, _first_line(error)
    if state is None or not state.model_checkpoint_path:
        return None, "it does not parse as a checkpoint state"
    return state, None


def remove_interrupted_writes(directory: str) -> None:
    """Deletes what a checkpoint write cut short leaves in `directory`.

    TF writes a checkpoint's shards into `ckpt-<N>_temp/` before moving them into place, and
    the state file as `checkpoint.tmp<hex>` before renaming it; a write that is killed or
    fails (a full disk) leaves them behind for good. Only the chief trainer of a model_dir
    writes checkpoints (it holds the lock), so when it starts, or when its own write has
    just failed, any such file is debris.
    """
    for leftover in tf.io.gfile.glob(os.path.join(directory, "ckpt-*_temp")):
        if tf.io.gfile.isdir(leftover):
            logging.warning("Removing %s, left by an interrupted checkpoint write.", leftover)
            tf.io.gfile.rmtree(leftover)
    for leftover in tf.io.gfile.glob(os.path.join(directory, STATE_FILE + ".tmp*")):
        logging.warning("Removing %s, left by an interrupted write of the checkpoint state "
                        "file.", leftover)
        tf.io.gfile.remove(leftover)


def _new_incident_dir(model_dir: str) -> str:
    """A new `model_dir/corrupt/<UTC time>-pid<pid>[-n]` path: one per start that moves files."""
    base = os.path.join(model_dir, CORRUPT_SUBDIR,
                        time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f"-pid{os.getpid()}")
    path, suffix = base, 1
    while tf.io.gfile.exists(path):
        suffix += 1
        path = f"{base}-{suffix}"
    return path


def _move_aside(paths: List[str], destination: str) -> None:
    tf.io.gfile.makedirs(destination)
    for path in paths:
        tf.io.gfile.rename(path, os.path.join(destination, os.path.basename(path)))


def _write_state(model_dir: str, latest: int, numbers: List[int],
                 timestamps: List[float]) -> None:
    """Writes the state file as a CheckpointManager would (text proto, write then rename)."""
    lines = [f'model_checkpoint_path: "ckpt-{latest}"']
    lines += [f'all_model_checkpoint_paths: "ckpt-{n}"' for n in numbers]
    lines += [f"all_model_checkpoint_timestamps: {t!r}" for t in timestamps]
    atomic_write.write_text(os.path.join(model_dir, STATE_FILE), "\n".join(lines) + "\n")


def prepare_model_dir(model_dir: str) -> Optional[str]:
    """Makes the newest readable checkpoint of `model_dir` the one its manager resumes from.

    Call with the model_dir lock held, before building the trainer's CheckpointManager.

    Returns:
      The checkpoint prefix to resume from, or None when model_dir has no checkpoint.

    Raises:
      NoReadableCheckpointError: checkpoints exist and none reads.
    """
    if not tf.io.gfile.isdir(model_dir):
        return None
    remove_interrupted_writes(model_dir)
    on_disk = _checkpoints_on_disk(model_dir)
    state, state_problem = _read_state(model_dir)
    listed = {}
    if state is not None:
        for path in list(state.all_model_checkpoint_paths) + [state.model_checkpoint_path]:
            match = re.search(r"ckpt-(\d+)$", path)
            if match:
                listed[int(match.group(1))] = path
    numbers = sorted(set(on_disk) | set(listed), reverse=True)
    if not numbers:
        if state_problem:
            logging.warning("Checkpoint state file %s is unreadable (%s) and model_dir has no "
                            "checkpoint: starting from scratch.",
                            os.path.join(model_dir, STATE_FILE), state_problem)
        return None

    skipped: List[Tuple[int, str]] = []
    resume = None
    for number in numbers:
        prefix = os.path.join(model_dir, f"ckpt-{number}")
        reason, decided = (_probe(prefix) if number in on_disk
                           else ("listed in the checkpoint state file but missing on disk", True))
        if not decided:
            logging.warning("Cannot tell whether checkpoint %s reads (%s): resuming from it; "
                            "its restore decides.", prefix, reason)
        if reason is None or not decided:
            resume = number
            break
        skipped.append((number, reason))
    if resume is None:
        tried = "; ".join(f"ckpt-{n} ({why})" for n, why in skipped)
        raise NoReadableCheckpointError(
            f"No checkpoint in model_dir {model_dir} can be restored; tried {tried}. "
            f"Restore the files from a backup, or start in a new model_dir.")

    resume_prefix = os.path.join(model_dir, f"ckpt-{resume}")
    moved_to = None
    if skipped or state_problem:
        moved_to = _new_incident_dir(model_dir)
    if skipped:
        _move_aside([path for number, _ in skipped for path in on_disk.get(number, [])],
                    moved_to)
        logging.warning(
            "Skipping %d newer checkpoint(s) of %s that cannot be restored: %s. Resuming from "
            "ckpt-%d, the newest that reads; the skipped files were moved to %s (kept, out of "
            "the way of the new checkpoints).", len(skipped), model_dir,
            "; ".join(f"ckpt-{n}: {why}" for n, why in skipped), resume, moved_to)

    state_latest = (re.search(r"ckpt-(\d+)$", state.model_checkpoint_path)
                    if state is not None else None)
    if state_problem is None and state_latest and int(state_latest.group(1)) == resume:
        return resume_prefix
    if state_problem is not None:
        _move_aside([os.path.join(model_dir, STATE_FILE)], moved_to)
    # The manager's list: what remains on disk up to the resumed checkpoint, oldest first.
    kept = sorted(n for n in on_disk if n <= resume
                  and tf.io.gfile.exists(os.path.join(model_dir, f"ckpt-{n}.index")))
    if state is not None and state_problem is None:
        kept = [n for n in kept if n in listed or n == resume]
    timestamps = [tf.io.gfile.stat(os.path.join(model_dir, f"ckpt-{n}.index")).mtime_nsec / 1e9
                  for n in kept]  # The manager's keep_checkpoint_every_n_hours reads them.
    _write_state(model_dir, resume, kept, timestamps)
    if state_problem is not None:
        logging.warning("Checkpoint state file %s was unreadable (%s): rebuilt it from the "
                        "checkpoints on disk (latest: ckpt-%d); the old file was moved to %s.",
                        os.path.join(model_dir, STATE_FILE), state_problem, resume, moved_to)
    else:
        logging.warning("The checkpoint state file of %s named ckpt-%s; it now names ckpt-%d, "
                        "the newest checkpoint that reads.", model_dir,
                        state_latest.group(1) if state_latest else "?", resume)
    return resume_prefix
