"""The `lite-train` driver (TFM's official/vision/train.py + official/common/flags.py).

It only assembles: flags -> gin -> config -> mixed precision -> strategy -> task -> run_experiment.
TensorFlow is imported inside `main`, so `lite-train --help` stays fast.

A user error (unknown experiment or mode, bad override, missing --model_dir, unreadable config
file, ...) prints one line to stderr and exits with code 2.
"""

from __future__ import annotations

import os
import sys

from absl import app
from absl import flags
from absl import logging

from lite_launcher.base_config import ConfigError

FLAGS = flags.FLAGS

USER_ERROR_EXIT_CODE = 2
# Preemption-style errors retried by the driver before giving up.
MAX_PREEMPTION_RETRIES = 3


def define_flags():
    """Defines the driver's flags (TFM's names and meanings). Safe to call more than once."""
    if "experiment" in FLAGS:
        return
    flags.DEFINE_string("experiment", None, "The registered experiment to run (see "
                        "--list_experiments).")
    # A plain string (not an enum) so that a bad mode gets our one-line error and exit code 2.
    flags.DEFINE_string("mode", None, "One of: train, train_and_post_eval, train_and_eval, "
                        "eval, continuous_eval.")
    flags.DEFINE_string("model_dir", None, "Directory for checkpoints, summaries and "
                        "params.yaml.")
    flags.DEFINE_multi_string("config_file", None, "YAML/JSON files overriding the experiment "
                              "config, applied in order.")
    flags.DEFINE_string("params_override", None, "A YAML/JSON string, a YAML file path, or "
                        "'a.b=1,c.d=x' pairs, applied after --config_file.")
    flags.DEFINE_multi_string("gin_file", None, "Gin config files.")
    flags.DEFINE_multi_string("gin_params", None, "Gin bindings, e.g. 'f.x = 1'.")
    flags.DEFINE_string("tpu", None, "TPU address (sets runtime.tpu).")
    flags.DEFINE_bool("enable_async_checkpointing", False, "Write checkpoints asynchronously.")
    flags.DEFINE_multi_string("registry_imports", None, "Modules to import that register "
                              "experiments and tasks (repeatable).")
    flags.DEFINE_bool("list_experiments", False, "Print the registered experiments and exit.")
    flags.DEFINE_bool("dry_run", False, "Print the resolved config as YAML and exit.")


def _user_error(message) -> None:
    """Prints one line to stderr and exits with code 2."""
    sys.stderr.write(f"lite-train: error: {' '.join(str(message).split())}\n")
    sys.stderr.flush()
    sys.exit(USER_ERROR_EXIT_CODE)


def load_registrations(registry_imports) -> None:
    """Imports the built-ins, installed entry-point plugins and `--registry_imports`."""
    from lite_launcher import registry

    registry.load_entry_point_plugins()
    registry.import_registry_modules(registry_imports)


def parse_configuration(flags_obj):
    """The experiment config from the flags: default -> config files -> params_override."""
    from lite_launcher import config as config_lib
    from lite_launcher import registry

    if not flags_obj.experiment:
        raise ConfigError("--experiment is required; see --list_experiments.")
    params = registry.get_exp_config(flags_obj.experiment)
    for path in flags_obj.config_file or ():
        params.override(config_lib.load_config_file(path), is_strict=True)
    if flags_obj.tpu:
        params.override({"runtime": {"tpu": flags_obj.tpu}}, is_strict=True)
    if flags_obj.params_override:
        params.override(config_lib.parse_params_override(flags_obj.params_override),
                        is_strict=True)
    params.validate()
    return params


def serialize_config(params, model_dir: str) -> str:
    """Writes `model_dir/params.yaml`; returns its path."""
    os.makedirs(model_dir, exist_ok=True)
    path = os.path.join(model_dir, "params.yaml")
    params.save_yaml(path)
    return path


def save_gin_config(mode: str, model_dir: str) -> str:
    import gin

    path = os.path.join(model_dir, f"operative_config.{mode}.gin")
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(gin.operative_config_str())
    os.replace(tmp, path)
    return path


def maybe_run_cluster_server(params) -> None:
    """Serves as a parameter-server cluster's worker or ps task, when TF_CONFIG names one.

    With `runtime.distribution_strategy: parameter_server` the same `lite-train` command runs
    on every machine: the 'chief' task trains (it is the coordinator), while 'worker' and
    'ps' tasks start their `tf.distribute.Server` here and serve until they are stopped
    (this function then never returns). Other strategies and tasks return at once.
    """
    if params.runtime.distribution_strategy != "parameter_server":
        return
    from lite_launcher import strategy as strategy_lib

    server = strategy_lib.start_server_from_tf_config()
    if server is None:
        return
    logging.info("Serving as a worker/ps task of the parameter-server cluster at %s (TF_CONFIG); "
                 "stop the process to end it.", server.target)
    server.join()


def _is_preemption_error(error) -> bool:
    import tensorflow as tf

    return isinstance(error, (tf.errors.UnavailableError, tf.errors.AbortedError))


def run_with_preemption_recovery(params, mode: str, model_dir: str,
                                 enable_async_checkpointing: bool = False):
    """Builds strategy and task and runs the experiment; retries after a worker preemption.

    A retry starts from the last checkpoint in model_dir.
    """
    import tensorflow as tf

    from lite_launcher import experiment, registry, strategy as strategy_lib

    for attempt in range(MAX_PREEMPTION_RETRIES + 1):
        try:
            distribution_strategy = strategy_lib.strategy_from_runtime(params.runtime)
            distribution_strategy = distribution_strategy or tf.distribute.get_strategy()
            with distribution_strategy.scope():
                task = registry.get_task(params.task, logging_dir=model_dir)
            return experiment.run_experiment(
                distribution_strategy=distribution_strategy, task=task, mode=mode,
                params=params, model_dir=model_dir,
                enable_async_checkpointing=enable_async_checkpointing)
        except tf.errors.OpError as error:
            if not _is_preemption_error(error) or attempt == MAX_PREEMPTION_RETRIES:
                raise
            logging.warning("Preemption-style error (%s); restarting from the last checkpoint "
                            "(retry %d of %d).", type(error).__name__, attempt + 1,
                            MAX_PREEMPTION_RETRIES)


def main(argv):
    """Runs the driver with parsed FLAGS; user errors exit 2 with one line."""
    if len(argv) > 1:
        _user_error(f"unexpected arguments {argv[1:]}; every option is a --flag.")
    try:
        _main()
    except ConfigError as error:
        _user_error(error)


def _main():
    import gin

    from lite_launcher import modes

    # Cheap checks first, before TensorFlow is imported.
    if not FLAGS.list_experiments and not FLAGS.dry_run:
        if not FLAGS.mode:
            raise ConfigError(f"--mode is required; valid modes: {', '.join(modes.MODES)}.")
        modes.check_mode(FLAGS.mode)
        if not FLAGS.model_dir:
            raise ConfigError("--model_dir is required (the directory for checkpoints and "
                              "summaries).")
    load_registrations(FLAGS.registry_imports)
    if FLAGS.list_experiments:
        from lite_launcher import registry
        print("\n".join(registry.registered_experiments()))
        return
    params = parse_configuration(FLAGS)
    try:
        gin.parse_config_files_and_bindings(FLAGS.gin_file, FLAGS.gin_params)
    except (ValueError, IOError, OSError) as error:
        raise ConfigError(f"gin: {error}") from error
    if FLAGS.dry_run:
        print(params.to_yaml(), end="")
        return
    mode, model_dir = FLAGS.mode, FLAGS.model_dir

    from lite_launcher import strategy as strategy_lib

    maybe_run_cluster_server(params)
    # TF_CONFIG from runtime.worker_hosts first: it tells whether this process is the chief.
    strategy_lib.configure_cluster(params.runtime.worker_hosts, params.runtime.task_index)
    # Only the chief writes params.yaml and the gin config (as checkpoints and summaries).
    chief = strategy_lib.is_chief_process(params.runtime.distribution_strategy)
    if modes.mode_trains(mode) and chief:
        serialize_config(params, model_dir)
    if params.runtime.mixed_precision_dtype:
        strategy_lib.set_mixed_precision_policy(params.runtime.mixed_precision_dtype)
    if params.runtime.run_eagerly:
        import tensorflow as tf
        tf.config.run_functions_eagerly(True)
    run_with_preemption_recovery(params, mode, model_dir,
                                 enable_async_checkpointing=FLAGS.enable_async_checkpointing)
    if modes.mode_trains(mode) and chief:
        save_gin_config(mode, model_dir)


def _flags_parser(argv):
    try:
        return FLAGS(argv)
    except flags.Error as error:
        _user_error(f"{error} (see lite-train --help)")
    except SystemExit as exit_request:
        # absl exits with 1 after printing --help; asking for help is not a failure.
        if any(arg in ("--help", "-h", "--helpfull", "--helpshort", "-?") for arg in argv[1:]):
            sys.exit(0)
        raise


def run():
    """Console-script entry point for `lite-train`."""
    # Quiet TensorFlow's C++ start-up chatter unless the user asked for it.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    define_flags()
    app.run(main, flags_parser=_flags_parser)


if __name__ == "__main__":
    run()
