"""One trainer per model_dir: an exclusive OS lock on the model_dir directory.

A training process holds `flock(LOCK_EX)` on the model_dir directory itself for as long as it
may write there. The OS drops the lock when the process ends, however it ends (kill -9
included), so a lock is never stale. Locking the directory, rather than a lock file in it,
writes nothing: a run refused for bad input leaves model_dir exactly as it was.

A second trainer is refused with `ModelDirLockedError` (a `ConfigError`: the driver prints one
line and exits 2) naming the holder's pid and host (read from /proc/locks on Linux).
Evaluation modes take no lock and are never refused; under multi-worker strategies only the
chief locks. Caveat: on file systems without flock support (some NFS or FUSE mounts) the lock
cannot be taken; that is logged, and two trainers are then not prevented. A model_dir given as
a URL (gs://, s3://, hdfs://, ram://) is never locked (no OS lock spans an object store);
that is logged once per model_dir and process.

`ExperimentRunner` (which the driver and a forked driver's `run_experiment` both go through)
holds the lock through one context, `locked`, for the whole run. TensorFlow-free, so that
the driver can ask `refuse_if_held` before importing TensorFlow, which refuses a second
trainer at once without taking the lock. Holds are counted per process, and a process never refuses itself.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import socket
import threading
from typing import Dict, Iterator, Optional, Tuple

from lite_launcher.common.errors import ModelDirLockedError

_log = logging.getLogger("absl")

# realpath -> [descriptor, hold count]; a process never refuses itself.
_held: Dict[str, list] = {}
_held_guard = threading.Lock()
# URL model_dirs whose missing lock was logged (once per model_dir and process).
_unlocked_logged = set()


def _key(model_dir: str) -> str:
    return os.path.realpath(model_dir)


def lockable(model_dir: str) -> bool:
    """Whether `model_dir` is a local path (URLs such as gs://... cannot be flock-ed)."""
    return "://" not in model_dir


def _lock_holder(fd: int) -> Tuple[Optional[int], str]:
    """(pid, host) of the process holding a flock on the file of `fd`, from /proc/locks."""
    pid = _flock_holder_pid(os.fstat(fd))
    if pid:
        return pid, socket.gethostname()
    return None, "unknown (not listed in /proc/locks: another host or container)"


def _flock_holder_pid(stat) -> Optional[int]:
    """The pid of a process holding a flock on the file of `stat` (Linux's /proc/locks), or
    None (nobody, or it cannot be told)."""
    device_inode = (f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:"
                    f"{stat.st_ino}")
    try:
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 4321 08:01:1234 0 EOF"; waiters have a "->" field.
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == device_inode:
            try:
                pid = int(fields[4])
            except ValueError:
                continue
            if pid > 0:
                return pid
    return None


def _locked_error(model_dir: str, holder: str) -> ModelDirLockedError:
    return ModelDirLockedError(
        f"model_dir {model_dir} is in use by another trainer ({holder}); two trainers would "
        f"overwrite each other's checkpoints. Wait for it to end or stop it, or train in "
        f"another model_dir (evaluation modes may share it).")


def refuse_if_held(model_dir: str) -> None:
    """Raises `ModelDirLockedError` if another process holds the lock on `model_dir`, read
    from /proc/locks without taking the lock (so it never stands in a trainer's way).

    The driver's early answer, before TensorFlow loads; `hold` stays the lock. Where it
    cannot be told (not Linux, a URL, no such directory yet), it does not refuse.
    """
    if not lockable(model_dir) or not os.path.isdir(model_dir):
        return
    pid = _flock_holder_pid(os.stat(model_dir))
    if pid and pid != os.getpid():
        raise _locked_error(model_dir, f"pid {pid} on host {socket.gethostname()}")


def hold(model_dir: str, create: bool = False) -> bool:
    """Takes (or counts one more hold of) the exclusive lock on `model_dir`.

    Args:
      model_dir: The directory to lock.
      create: Create the directory first. Without it, a model_dir that does not exist yet is
        not locked (nothing there to protect, and nothing is created) and False is returned.

    Returns:
      Whether this process now holds the lock (False also for URLs and for file systems
      without flock support).

    Raises:
      ModelDirLockedError: another process holds it.
    """
    if not lockable(model_dir):
        with _held_guard:
            if model_dir not in _unlocked_logged:
                _unlocked_logged.add(model_dir)
                _log.warning("model_dir %s is not on a local file system, so it is not locked: "
                             "a second trainer on it would not be refused (run one trainer per "
                             "model_dir; evaluators may share it).", model_dir)
        return False
    if create:
        os.makedirs(model_dir, exist_ok=True)
    if not os.path.isdir(model_dir):
        return False
    key = _key(model_dir)
    with _held_guard:
        entry = _held.get(key)
        if entry is not None:
            entry[1] += 1
            return True
        fd = os.open(key, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                pid, host = _lock_holder(fd)
                os.close(fd)
                holder = f"pid {pid} on host {host}" if pid else f"host {host}"
                raise _locked_error(model_dir, holder) from None
            os.close(fd)
            _log.warning("Cannot lock model_dir %s (%s): this file system does not support "
                         "flock, so a second trainer on it would not be refused.", model_dir,
                         error.strerror or error)
            return False
        _held[key] = [fd, 1]
        return True


def release(model_dir: str) -> None:
    """Drops one hold taken by `hold`; the lock itself goes with the last one."""
    if not lockable(model_dir):
        return
    key = _key(model_dir)
    with _held_guard:
        entry = _held.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            del _held[key]
            os.close(entry[0])  # Closing the only descriptor releases the flock.


def held(model_dir: str) -> bool:
    """Whether this process holds the lock on `model_dir`."""
    return lockable(model_dir) and _key(model_dir) in _held


def _first_missing(path: str) -> Optional[str]:
    """The outermost directory of `path` that does not exist yet (None: it all exists)."""
    missing = None
    path = os.path.abspath(path)
    while not os.path.exists(path):
        missing = path
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return missing


@contextlib.contextmanager
def locked(model_dir: str) -> Iterator[bool]:
    """Holds the lock on `model_dir` for the `with` block: a training run's one lock context.

    The directory is created (and locked) on entry. When the block raises and the directories
    created here are still empty, they are removed again: a run refused for bad input leaves
    the file system as it was. Yields whether the lock is held (see `hold`).

    Raises:
      ModelDirLockedError: another process holds it (on entry; nothing is created then).
    """
    created = _first_missing(model_dir) if lockable(model_dir) else None
    held_here = False
    try:
        held_here = hold(model_dir, create=True)
        yield held_here
    except BaseException:
        if created is not None:
            _remove_empty(os.path.abspath(model_dir), created)
        raise
    finally:
        if held_here:
            release(model_dir)


def _remove_empty(path: str, outermost: str) -> None:
    """Removes `path` and its parents up to `outermost`, while they are empty."""
    while True:
        try:
            os.rmdir(path)
        except OSError:
            return  # Not empty (something was written) or gone: leave it.
        if path == outermost:
            return
        path = os.path.dirname(path)
