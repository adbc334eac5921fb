"""The `lite-train` driver (TFM's official/vision/train.py).

It only assembles: flags -> checks of the input -> config (the experiment's defaults,
--config_file, --params_override) -> gin (--gin_file, --gin_params) -> mixed precision ->
strategy -> task -> the experiment runner. The flags are `lite_launcher.common.flags`', the config and
the input checks `lite_launcher.core.train_utils`'; model_dir's lock is the experiment runner's (the
driver only asks, before TensorFlow loads, whether another trainer holds it).

A user error (unknown experiment or mode, bad override, missing --model_dir, unreadable config
file, a checkpoint of another model in model_dir, a model_dir another trainer holds, ...) prints
one line to stderr and exits with code 2, before anything is written to model_dir; a wrong
experiment name, a missing or malformed config file or override and a bad gin file are refused
before TensorFlow is imported (as `--help`). A failure of the environment (a checkpoint or
params.yaml that cannot be written, no checkpoint that reads) prints one line and exits with
code 1; earlier checkpoints are intact. SIGTERM exits 143 (a trainer saves a checkpoint first).
"""

from __future__ import annotations

import json
import logging as std_logging
import os
import re
import signal

from absl import app
from absl import flags
from absl import logging

from lite_launcher.common import errors
from lite_launcher.common import flags as lite_flags
from lite_launcher.common import model_dir_lock
from lite_launcher.common.errors import (  # noqa: F401  (ModelDirWriteError: its old import path)
    ClusterTaskLostError, ConfigError, ENVIRONMENT_FAILURES, ModelDirWriteError)
from lite_launcher.core import train_utils

FLAGS = flags.FLAGS

# Preemption-style errors retried by the driver before giving up.
MAX_PREEMPTION_RETRIES = 3


def define_lite_train_flags():
    """Defines TFM's driver flags (`lite_launcher.common.flags.define_flags`) and `lite-train`'s own;
    safe to call more than once.

    The extras, defined here as TFM's `train.py` defines its own: `--enable_async_checkpointing`,
    `--continuous_eval_max_wait_s`, `--list_experiments`, `--dry_run`; and `--registry_imports`
    (`lite_launcher.common.flags`, shared with `lite-export`).
    """
    lite_flags.define_flags()
    lite_flags.define_registry_imports_flag()
    if "dry_run" in FLAGS:
        return
    flags.DEFINE_bool("enable_async_checkpointing", False, "Write checkpoints asynchronously.")
    flags.DEFINE_float("continuous_eval_max_wait_s", None, "continuous_eval: exit 0 after this "
                       "many seconds without a new checkpoint, even below train_steps (default: "
                       "wait on, as TFM, since a preempted trainer may resume).")
    flags.DEFINE_bool("list_experiments", False, "Print the registered experiments and exit.")
    flags.DEFINE_bool("dry_run", False, "Print the resolved config as YAML and exit.")


def configure_determinism() -> None:
    """Deterministic TensorFlow ops, and seed 0 for Python, NumPy and TensorFlow.

    Applied by the driver for `runtime.deterministic_ops`; process-wide, so call it before the
    model is built.
    """
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    tf.config.experimental.enable_op_determinism()
    logging.info("Deterministic ops on (runtime.deterministic_ops); Python, NumPy and "
                 "TensorFlow seeded with 0.")


def maybe_run_cluster_server(params) -> None:
    """Serves as a parameter-server cluster's worker or ps task, when TF_CONFIG names one.

    With `runtime.distribution_strategy: parameter_server` the same `lite-train` command runs
    on every machine: the 'chief' task trains (it is the coordinator), while 'worker' and
    'ps' tasks start their `tf.distribute.Server` here and serve until they are stopped
    (this function then never returns). Other strategies and tasks return at once.
    """
    if params.runtime.distribution_strategy != "parameter_server":
        return
    from lite_launcher.common import distribute_utils as strategy_lib

    server = strategy_lib.start_server_from_tf_config()
    if server is None:
        return
    logging.info("Serving as a worker/ps task of the parameter-server cluster at %s (TF_CONFIG); "
                 "stop the process to end it.", server.target)
    server.join()


def _is_preemption_error(error) -> bool:
    import tensorflow as tf

    return isinstance(error, (tf.errors.UnavailableError, tf.errors.AbortedError))


def _is_multi_worker_mirrored(params) -> bool:
    return str(params.runtime.distribution_strategy).lower() == "multi_worker_mirrored"


def _lost_parameter_server(params, error) -> bool:
    """A parameter-server run's error from a lost ps task: TF names the task in the message
    (TF's own ps-failure check reads it there) and cannot recover from it."""
    return (str(params.runtime.distribution_strategy).lower() == "parameter_server"
            and "/job:ps/" in error.message)


_TASK_NAME = re.compile(r"/job:(\w+)/(?:replica:\d+/)?task:(\d+)")


_ERROR_HEADER = re.compile(r"Graph execution error:$|Detected at node |<stack traces "
                           r"unavailable>$|\d+ root error\(s\) found\.$")


def _op_error_reason(message: str) -> str:
    """The cause in a TensorFlow op error's message: its first line that is neither one of
    TF's headers nor the graph node's traceback (`  File ...` frames and their indented
    source lines). A cause that ends in ':' goes on on the next line (a task list)."""
    causes = [line.strip() for line in message.splitlines()
              if line.strip() and not line.startswith(("  File \"", "    "))
              and not _ERROR_HEADER.match(line.strip())]
    if not causes:
        return message.strip()[:200]
    reason = causes[0]
    if reason.endswith(":") and len(causes) > 1:
        reason = f"{reason} {causes[1]}"
    reason = re.sub(r"^\(\d+\) [A-Z_]+:\s*", "", reason)  # "(0) UNAVAILABLE:  why" -> "why"
    return reason if len(reason) <= 200 else reason[:200] + "..."


def _cluster_task_lost(error, model_dir: str) -> ClusterTaskLostError:
    """The one-line error of a cluster task that lost a peer (a MultiWorkerMirrored worker
    whose collectives failed, a parameter-server coordinator whose ps died): names the first
    other task the TensorFlow error mentions, a ps first (workers relay a ps's failure, so
    the message names them too)."""
    tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    me = tf_config.get("task") or {}
    others = [(job, int(index)) for job, index in _TASK_NAME.findall(error.message)
              if (job, int(index)) != (me.get("type"), int(me.get("index", 0)))]
    others.sort(key=lambda task: task[0] != "ps")  # stable: otherwise in message order
    who = f"task {others[0][0]} {others[0][1]}" if others else "a task"
    reason = _op_error_reason(error.message)
    return ClusterTaskLostError(
        f"Lost contact with cluster {who} ({type(error).__name__}: {reason}). Restart every "
        f"task of the cluster: training resumes from the last checkpoint in {model_dir}.")


def run_with_preemption_recovery(params, mode: str, model_dir: str,
                                 enable_async_checkpointing: bool = False,
                                 continuous_eval_max_wait_s=None):
    """Builds strategy and task and runs the experiment; retries after a worker preemption.

    A retry starts from the last checkpoint in model_dir. The runner writes lite-train's
    params.yaml and gin config (`write_run_config`) when it owns model_dir.
    """
    import tensorflow as tf

    from lite_launcher.core import train_lib as experiment
    from lite_launcher.core import registry
    from lite_launcher.common import distribute_utils as strategy_lib

    for attempt in range(MAX_PREEMPTION_RETRIES + 1):
        try:
            distribution_strategy = strategy_lib.strategy_from_runtime(params.runtime)
            distribution_strategy = distribution_strategy or tf.distribute.get_strategy()
            with distribution_strategy.scope():
                task = registry.get_task(params.task, logging_dir=model_dir)
            runner = experiment.ExperimentRunner(
                distribution_strategy=distribution_strategy, task=task, mode=mode,
                params=params, model_dir=model_dir,
                enable_async_checkpointing=enable_async_checkpointing,
                continuous_eval_max_wait_s=continuous_eval_max_wait_s, write_run_config=True)
            return runner.run()
        except tf.errors.OpError as error:
            bad_record = errors.input_record_error(error.message)
            if bad_record is not None:
                raise bad_record from None
            if _is_multi_worker_mirrored(params) or _lost_parameter_server(params, error):
                # A worker's collectives cannot be set up twice in one process, and the peer
                # they lost stays lost: retrying here waits forever (so does a coordinator
                # reconnecting to a dead ps, and the ps's variables are gone). One line.
                raise _cluster_task_lost(error, model_dir) from error
            if not _is_preemption_error(error) or attempt == MAX_PREEMPTION_RETRIES:
                raise
            logging.warning("Preemption-style error (%s); restarting from the last checkpoint "
                            "(retry %d of %d).", type(error).__name__, attempt + 1,
                            MAX_PREEMPTION_RETRIES)


def _exit_on_sigterm(signum, frame):  # pylint: disable=unused-argument
    """The driver's SIGTERM handler outside a preemption save: exit 143, once."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # Exiting already: later ones change nothing.
    raise SystemExit(train_utils.TERMINATED_EXIT_CODE)


def main(argv):
    """Runs the driver with parsed FLAGS; user errors exit 2 with one line."""
    # An earlier run() in this process that ended in an error silenced logging for its exit.
    std_logging.disable(std_logging.NOTSET)
    if len(argv) > 1:
        train_utils.exit_with_error(
            f"unexpected arguments {argv[1:]}; every option is a --flag.")
    # The preemption action puts its own handler in place while training and this one back
    # after: a SIGTERM arriving while the process exits must not kill it with -15 (the log
    # already said 143) or cut a checkpoint write short.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        _main()
    except SystemExit:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise
    except ConfigError as error:
        train_utils.exit_with_error(error)
    except ENVIRONMENT_FAILURES as error:
        train_utils.exit_with_error(error, train_utils.RUNTIME_ERROR_EXIT_CODE)


def _check_flags():
    """The flags on their own (TensorFlow-free)."""
    from lite_launcher.core import modes

    if FLAGS.list_experiments or FLAGS.dry_run:
        return
    if not FLAGS.mode:
        raise ConfigError(f"--mode is required; valid modes: {', '.join(modes.MODES)}.")
    modes.check_mode(FLAGS.mode)
    if not FLAGS.model_dir:
        raise ConfigError("--model_dir is required (the directory for checkpoints and "
                          "summaries).")
    train_utils.check_model_dir(FLAGS.model_dir, FLAGS.mode)
    if FLAGS.continuous_eval_max_wait_s is not None and (
            FLAGS.mode != "continuous_eval" or FLAGS.continuous_eval_max_wait_s < 0):
        raise ConfigError(f"--continuous_eval_max_wait_s "
                          f"({FLAGS.continuous_eval_max_wait_s:g}) needs --mode "
                          f"continuous_eval and a value >= 0.")
    if modes.mode_trains(FLAGS.mode) and not _may_be_non_chief(FLAGS):
        # A second trainer is told at once, before TensorFlow loads. Only asked, not locked:
        # the experiment runner takes the lock (and refuses it too, if this answer is stale).
        model_dir_lock.refuse_if_held(FLAGS.model_dir)


def _may_be_non_chief(flags_obj) -> bool:
    """Whether this process might be a non-chief worker (which shares the chief's model_dir),
    judged without TensorFlow: TF_CONFIG, or `worker_hosts` in --params_override or a
    --config_file, may make it one."""
    if os.environ.get("TF_CONFIG"):
        return True
    texts = [flags_obj.params_override or ""]
    for path in flags_obj.config_file or ():
        try:
            with open(path, "rb") as f:
                texts.append(f.read().decode("utf-8", "replace"))
        except OSError:
            texts.append("")  # Reported when the config is parsed.
    return any("worker_hosts" in text for text in texts)


def _main():
    # Everything up to load_registrations is TensorFlow-free: bad input is refused at once.
    _check_flags()
    train_utils.check_input_files(FLAGS)
    _unlock_gin()
    train_utils.load_user_registrations(FLAGS.registry_imports)
    if FLAGS.list_experiments:
        print("\n".join(train_utils.known_experiments()))
        return
    train_utils.check_experiment_inputs(FLAGS)
    # Parsed and checked before the task's modules load TensorFlow (a built-in experiment's
    # config module is TensorFlow-free), so a bad key or value is refused at once; logged by
    # the runner once every check has passed: a bad input gets one line, not the whole config.
    params = train_utils.parse_configuration(FLAGS, print_return=False, register_tasks=False)
    train_utils.load_builtin_registrations(FLAGS.experiment)
    if FLAGS.mode in ("eval", "continuous_eval") and not FLAGS.dry_run:
        train_utils.check_eval_dir_writable(
            FLAGS.model_dir, params.trainer.validation_summary_subdir, FLAGS.mode)
    _parse_gin()
    if FLAGS.dry_run:
        print(params.to_yaml(), end="")
        return
    mode, model_dir = FLAGS.mode, FLAGS.model_dir
    train_utils.check_init_checkpoint(params, mode, model_dir)
    check_extras = getattr(params.task, "check_extras", None)  # a user's task may lack it
    if check_extras:
        check_extras(mode)

    from lite_launcher.common import distribute_utils as strategy_lib

    # Before TensorFlow creates a device: the GPU runtime reads these variables then.
    strategy_lib.apply_performance_settings(params)
    maybe_run_cluster_server(params)
    # TF_CONFIG from runtime.worker_hosts: it tells the runner whether this process is the chief.
    strategy_lib.configure_cluster(params.runtime.worker_hosts, params.runtime.task_index)
    if params.runtime.mixed_precision_dtype:
        strategy_lib.set_mixed_precision_policy(params.runtime.mixed_precision_dtype)
    if params.runtime.run_eagerly:
        import tensorflow as tf
        tf.config.run_functions_eagerly(True)
    if params.runtime.deterministic_ops:
        configure_determinism()

    run_with_preemption_recovery(params, mode, model_dir,
                                 enable_async_checkpointing=FLAGS.enable_async_checkpointing,
                                 continuous_eval_max_wait_s=FLAGS.continuous_eval_max_wait_s)


def _unlock_gin():
    """Starts gin afresh when an earlier run in this process (a notebook, a sweep, a forked
    driver) parsed gin files and so locked its config: a `--registry_imports` module may
    register configurables, which gin refuses once locked."""
    import gin

    if gin.config_is_locked():
        gin.clear_config()


def _parse_gin():
    import gin

    try:
        gin.parse_config_files_and_bindings(FLAGS.gin_file, FLAGS.gin_params)
    except SyntaxError as error:
        raise train_utils.gin_syntax_error(error, "--gin_params") from None
    except (ValueError, IOError, OSError) as error:
        raise ConfigError(f"gin: {error}") from error


_HELP_INTRO = """\
USAGE: lite-train --experiment=NAME --mode=MODE --model_dir=DIR [flags]

Trains and/or evaluates a registered experiment (TFM's official/vision/train.py). The config
is the experiment's defaults, then each --config_file, then --params_override; gin files and
bindings are applied after it. Exit codes: 0 done, 1 the environment failed (disk, unreadable
checkpoints, divergence), 2 bad input (one line on stderr), 143 SIGTERM.
"""


def driver_help() -> str:
    """The text of `lite-train --help`: usage and the driver's flags with their help."""
    return lite_flags.help_text(_HELP_INTRO, cli_flag="dry_run")


def _flags_parser(argv):
    return lite_flags.parse_flags(argv, prog="lite-train", intro=_HELP_INTRO, cli_flag="dry_run")


def run():
    """Console-script entry point for `lite-train`."""
    # Quiet TensorFlow's C++ start-up chatter unless the user asked for it.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # oneDNN's CPU kernels where TensorFlow left them off (read once, when TensorFlow loads).
    from lite_launcher.common import onednn
    onednn.enable_by_default()
    # Keras's scikit-learn / matplotlib / pandas integrations: unused by a driver, hidden from
    # TensorFlow's import (a third of its CPU time where they are installed; lean_imports).
    from lite_launcher.common import lean_imports
    lean_imports.hide_while_tensorflow_loads()
    define_lite_train_flags()
    app.run(main, flags_parser=_flags_parser)


if __name__ == "__main__":
    run()
