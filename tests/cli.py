"""The `lite-train` command line the tests run, built in one place, and the same command run
in the test's own process (no TensorFlow start-up: ~6 CPU-seconds a process saved)."""

import contextlib
import gc
import io
import logging
import os
import signal
import sys
from typing import List, NamedTuple

# The variables `lite-train` sets for TensorFlow when the user did not (main.run, onednn).
_DRIVER_ENVIRONMENT = ("TF_ENABLE_ONEDNN_OPTS", "TF_CPP_MIN_LOG_LEVEL")


def lite_train_command(*args, installed: bool = False) -> List[str]:
    """`python -m lite_launcher.commands.train ARGS` with this Python (each argument as text); with
    `installed`, the `lite-train` console script next to this Python where it exists (the
    entry point a user runs)."""
    script = os.path.join(os.path.dirname(sys.executable), "lite-train")
    command = ([script] if installed and os.path.exists(script)
               else [sys.executable, "-m", "lite_launcher.commands.train"])
    return command + [str(a) for a in args]


def reset_driver_flags() -> None:
    """The driver's flags back to their defaults: absl keeps parsed values in the process, so
    a flag one in-process run parsed was read again by the next run that did not give it."""
    from absl import flags as absl_flags
    for flag in absl_flags.FLAGS.get_flags_for_module("lite_launcher.common.flags"):
        if flag.present:
            flag.unparse()


class InProcessRun(NamedTuple):
    """What an in-process `lite-train` left: its exit code, what it wrote to stderr itself
    (the one error line), the messages it logged, one a line, and what it printed to stdout
    (`--dry_run`'s config, `--help`)."""
    returncode: int
    stderr: str
    logged: str
    stdout: str = ""


class _Messages(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def run_lite_train_in_process(*args) -> InProcessRun:
    """`lite-train ARGS` as `main.run()` in this process: the driver's own code from flag
    parsing to exit, without a process boundary. What the driver changes in the process
    (sys.argv, its flags, gin's bindings, Keras's dtype policy, the SIGTERM handler,
    logging's disable level, the environment variables it sets for TensorFlow) is put back afterwards."""
    import gin
    import keras
    from absl import logging as absl_logging
    import tensorflow as tf
    from lite_launcher.commands import train as main_lib

    policy = keras.mixed_precision.global_policy()
    enable_determinism, determinism_calls = tf.config.experimental.enable_op_determinism, []

    def record_determinism():
        determinism_calls.append(True)
        enable_determinism()

    saved_argv, sigterm = sys.argv, signal.getsignal(signal.SIGTERM)
    saved_environment = {name: os.environ.get(name) for name in _DRIVER_ENVIRONMENT}
    messages, stderr, stdout = _Messages(), io.StringIO(), io.StringIO()
    # The driver logs through absl's logger, at INFO whatever an earlier test left its
    # verbosity at (the record reaches this handler even where it does not propagate).
    absl_logger, verbosity = absl_logging.get_absl_logger(), absl_logging.get_verbosity()
    absl_logger.addHandler(messages)
    absl_logging.set_verbosity(absl_logging.INFO)
    sys.argv = ["lite-train"] + [str(a) for a in args]
    tf.config.experimental.enable_op_determinism = record_determinism
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(stdout):
            main_lib.run()
        code = 0
    except SystemExit as exit_request:
        code = exit_request.code or 0
    finally:
        tf.config.experimental.enable_op_determinism = enable_determinism
        sys.argv = saved_argv
        absl_logger.removeHandler(messages)
        absl_logging.set_verbosity(verbosity)
        logging.disable(logging.NOTSET)  # the driver silences logging for its exit
        signal.signal(signal.SIGTERM, sigterm)  # and ignores SIGTERM once it exits
        for name, value in saved_environment.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        reset_driver_flags()
        gin.clear_config()  # the run's gin bindings and operative config
        keras.mixed_precision.set_global_policy(policy)  # runtime.mixed_precision_dtype's
        # The run's tf.data iterators, left in reference cycles, destroyed now: an iterator's
        # destructor waits out its autotuning thread's current period, which doubles while
        # the iterator lives (to a minute; see conftest's _collect_the_tests_garbage).
        gc.collect()
    # runtime.deterministic_ops cannot be turned off again: such a run needs its own process.
    assert not determinism_calls, (
        "runtime.deterministic_ops changed this process for every later test: run it with "
        "lite_train_command in a subprocess")
    return InProcessRun(code, stderr.getvalue(), "\n".join(messages.lines), stdout.getvalue())


def run_lite_train(monkeypatch, *args) -> int:
    """`lite-train ARGS` in this process (`run_lite_train_in_process`); its exit code, with what
    it wrote to stderr passed on to this process's stderr (where `capsys` reads it).
    `monkeypatch` is kept for the callers' signature (the helper restores what it changes)."""
    del monkeypatch
    run = run_lite_train_in_process(*args)
    sys.stderr.write(run.stderr)
    return run.returncode
