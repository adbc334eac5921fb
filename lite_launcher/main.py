"""The `lite-train` driver (TFM's official/vision/train.py + official/common/flags.py).

It only assembles: flags -> config (the experiment's defaults, --config_file,
--params_override) -> gin (--gin_file, --gin_params) -> mixed precision -> strategy -> task ->
run_experiment.
TensorFlow is imported inside `main`, so `lite-train --help` stays fast.

A user error (unknown experiment or mode, bad override, missing --model_dir, unreadable config
file, a checkpoint of another model in model_dir, a model_dir another trainer holds, ...) prints
one line to stderr and exits with code 2, before anything is written to model_dir. A failure of
the environment (a checkpoint or params.yaml that cannot be written, no checkpoint that reads)
prints one line and exits with code 1; earlier checkpoints are intact. SIGTERM exits 143 (a
trainer saves a checkpoint first).
"""

from __future__ import annotations

import dataclasses
import json
import logging as std_logging
import os
import re
import signal
import sys
import tokenize
from typing import List

from absl import app
from absl import flags
from absl import logging

from lite_launcher import atomic_write
from lite_launcher import model_dir_lock
from lite_launcher.errors import (ClusterTaskLostError, ConfigError, ENVIRONMENT_FAILURES,
                                  ModelDirWriteError)

FLAGS = flags.FLAGS

USER_ERROR_EXIT_CODE = 2
# A failure of the environment rather than of the input (e.g. a full disk).
RUNTIME_ERROR_EXIT_CODE = 1
# Terminated by SIGTERM (128 + 15), as a shell reports it; a trainer checkpoints first.
TERMINATED_EXIT_CODE = 143
# Preemption-style errors retried by the driver before giving up.
MAX_PREEMPTION_RETRIES = 3


def define_flags():
    """Defines TFM's driver flags (`official/common/flags.define_flags`), with its names and
    meanings; safe to call more than once.

    Only those, so a forked driver can define its own (TFM's vision `train.py` defines
    `--enable_async_checkpointing` itself). `lite-train`'s extra flags are
    `define_lite_train_flags`'s. Not defined: TFM's `--tpu_platform`, `--tfhub_handle` and
    `--tflex_output_uri`, which no TFM library reads (a forked driver that uses them defines
    them). `--tf_data_service` is defined, and refused when set (lite has no tf.data
    service).
    """
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
    # As TFM's: a library may have defined the gin flags already.
    for name, text in (("gin_file", "Gin config files."),
                       ("gin_params", "Gin bindings, e.g. 'f.x = 1'.")):
        if name not in FLAGS:
            flags.DEFINE_multi_string(name, None, text)
    flags.DEFINE_string("tpu", None, "TPU address (sets runtime.tpu).")
    flags.DEFINE_string("tf_data_service", None, "The tf.data service address (TFM's flag; "
                        "lite_launcher has no tf.data service, so setting it is an error).")


def define_lite_train_flags():
    """Defines `define_flags()`'s flags and `lite-train`'s own; safe to call more than once.

    The extras, defined here as TFM's `train.py` defines its own: `--enable_async_checkpointing`,
    `--continuous_eval_max_wait_s`, `--registry_imports`, `--list_experiments`, `--dry_run`.
    """
    define_flags()
    if "dry_run" in FLAGS:
        return
    flags.DEFINE_bool("enable_async_checkpointing", False, "Write checkpoints asynchronously.")
    flags.DEFINE_float("continuous_eval_max_wait_s", None, "continuous_eval: exit 0 after this "
                       "many seconds without a new checkpoint, even below train_steps (default: "
                       "wait on, as TFM, since a preempted trainer may resume).")
    flags.DEFINE_multi_string("registry_imports", None, "Modules to import that register "
                              "experiments and tasks (repeatable).")
    flags.DEFINE_bool("list_experiments", False, "Print the registered experiments and exit.")
    flags.DEFINE_bool("dry_run", False, "Print the resolved config as YAML and exit.")


def _user_error(message, exit_code: int = USER_ERROR_EXIT_CODE,
                prog: str = "lite-train") -> None:
    """Prints one line `<prog>: error: ...` to stderr and exits with `exit_code` (2: the user's
    input is wrong)."""
    # gin appends "In call to configurable ..." lines to errors raised inside a configurable
    # (Trainer, create_trainer, ...); the message before them is the user's error.
    text = str(message).split("\n  In call to configurable ")[0]
    sys.stderr.write(f"{prog}: error: {' '.join(text.split())}\n")
    sys.stderr.flush()
    # Keep the error the last line: nothing logged while the process shuts down (e.g. TF's
    # warnings about a half-restored checkpoint being garbage-collected).
    std_logging.disable(std_logging.WARNING)
    sys.exit(exit_code)


def check_model_dir(model_dir: str, mode: str) -> None:
    """Rejects a local `--model_dir` that cannot be (or be written as) a directory.

    TensorFlow-free and writes nothing. Paths with a scheme (gs://, ...) are left to TensorFlow.
    """
    from lite_launcher import modes

    check_output_dir(model_dir, "--model_dir", writable=modes.mode_trains(mode))


def check_output_dir(directory: str, flag: str, writable: bool = True) -> None:
    """Rejects a local directory flag (`--model_dir`, `--export_dir`) that cannot be a
    directory or, with `writable`, cannot be written. TensorFlow-free; writes nothing."""
    if "://" in directory:
        return
    path = os.path.abspath(directory)
    if os.path.exists(path) and not os.path.isdir(path):
        raise ConfigError(f"{flag} {directory!r} is a file, not a directory; pass a "
                          f"directory path.")
    existing = path
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ConfigError(f"{flag} {directory!r} cannot be created: {existing!r} is a file, "
                          f"not a directory.")
    if writable and not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag} {directory!r} is not writable: no write permission on "
                          f"{existing!r}.")


def check_eval_dir_writable(model_dir: str, validation_summary_subdir: str, mode: str) -> None:
    """Rejects an evaluation whose summary directory cannot be written (e.g. a read-only
    model_dir). TensorFlow-free and writes nothing. Paths with a scheme are left to TF."""
    eval_dir = os.path.join(model_dir, validation_summary_subdir)
    if "://" in eval_dir:
        return
    existing = os.path.abspath(eval_dir)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(
            f"--mode {mode} writes its summaries to {eval_dir}, which cannot be written (no "
            f"write permission on {existing}); make it writable, or set "
            f"trainer.validation_summary_subdir to a writable directory (an absolute path).")


def _gin_syntax_error(error: SyntaxError, source: str) -> ConfigError:
    """One line naming the gin file (or binding), the line and what gin could not parse."""
    where = f"{error.filename}, line {error.lineno}" if error.filename else source
    text = f" ({error.text.strip()!r})" if error.text and error.text.strip() else ""
    detail = (str(error.msg).strip().splitlines() or [""])[-1].strip()
    return ConfigError(f"gin syntax error in {where}{text}: {detail}")


def _check_gin_syntax(flags_obj) -> None:
    """Parses every --gin_file and --gin_params for syntax only (no configurable needed)."""
    from gin import config as gin_config
    from gin import config_parser

    sources = [(path, path) for path in flags_obj.gin_file or ()]
    sources += [(None, binding) for binding in flags_obj.gin_params or ()]
    for path, text in sources:
        try:
            if path is None:
                parser = config_parser.ConfigParser(
                    text, gin_config.ParserDelegate(skip_unknown=True))
                list(parser)
            else:
                with open(path, encoding="utf-8") as f:
                    list(config_parser.ConfigParser(
                        f, gin_config.ParserDelegate(skip_unknown=True)))
        except SyntaxError as error:
            raise _gin_syntax_error(error, f"--gin_params {text!r}") from None
        except tokenize.TokenError as error:  # e.g. an unclosed bracket at the end
            message, (line, _) = error.args
            where = f"{path}, line {line}" if path else f"--gin_params {text!r}"
            raise ConfigError(f"gin syntax error in {where}: {message}.") from None


def _check_input_files(flags_obj) -> None:
    """Every --gin_file exists and parses, and every existing --config_file and --gin_file is
    UTF-8.

    TensorFlow-free: bad input files get their one line before anything heavy starts.
    """
    for path in flags_obj.gin_file or ():
        if not os.path.isfile(path):
            raise ConfigError(f"--gin_file {path!r} does not exist (or is not a file).")
    for flag, paths in (("--config_file", flags_obj.config_file),
                        ("--gin_file", flags_obj.gin_file)):
        for path in paths or ():
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except OSError:
                continue  # A missing config file is reported where the config is parsed.
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as error:
                line = data.count(b"\n", 0, error.start) + 1
                raise ConfigError(f"{flag} {path!r} is not valid UTF-8: byte "
                                  f"0x{data[error.start]:02x} on line {line}; save it as "
                                  f"UTF-8.") from None
    _check_gin_syntax(flags_obj)


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


def _may_be_non_chief(flags_obj) -> bool:
    """Whether this process might be a non-chief worker, judged without TensorFlow.

    TF_CONFIG, or `worker_hosts` in --params_override or a --config_file, may make it one;
    only the chief locks model_dir, so such a process locks once its config is known.
    """
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


def load_registrations(registry_imports) -> None:
    """Imports the built-ins, installed entry-point plugins and `--registry_imports`.

    Also the modules of TFM's gin configurables (`Trainer`, `create_trainer`, the actions,
    `run_experiment`, `build_optimizer`: `train_lib`), so that gin files parsed next can bind
    them (gin refuses a configurable registered after it parsed).
    """
    from lite_launcher import train_lib  # noqa: F401  pylint: disable=unused-import
    from lite_launcher import registry
    import lite_launcher.registry_imports  # noqa: F401  (registers the built-ins)

    registry.load_entry_point_plugins()
    registry.import_registry_modules(registry_imports)


@dataclasses.dataclass
class ParseConfigOptions:
    """TFM's stand-in for FLAGS when calling `parse_configuration` / `ExperimentParser`."""

    experiment: str
    config_file: List[str]
    tpu: str = ""
    tf_data_service: str = ""
    params_override: str = ""

    def __contains__(self, name):
        return name in (f.name for f in dataclasses.fields(self))


class ExperimentParser:
    """Builds the experiment config from flags (or `ParseConfigOptions`), as TFM's.

    `parse()` runs, in order: `base_experiment` (the registered config), `parse_config_file`
    (each `config_file`), `parse_runtime` (`tpu`), `parse_data_service` and
    `parse_params_override`; override one step in a subclass to change it. Overrides are
    strict (unknown keys are `UnknownConfigKeyError`s, a `KeyError`).
    """

    def __init__(self, flags_obj):
        self._flags_obj = flags_obj

    def _flag(self, name):
        return getattr(self._flags_obj, name, None)

    def parse(self):
        """The config: default -> config files -> runtime flags -> params_override."""
        params = self.base_experiment()
        params = self.parse_config_file(params)
        params = self.parse_runtime(params)
        params = self.parse_data_service(params)
        return self.parse_params_override(params)

    def base_experiment(self):
        """A fresh config of `--experiment`."""
        from lite_launcher import registry_imports as registry  # the built-ins registered

        if not self._flag("experiment"):
            raise ConfigError("--experiment is required; see --list_experiments.")
        return registry.get_exp_config(self._flag("experiment"))

    def parse_config_file(self, params):
        """Applies each `--config_file` in order."""
        from lite_launcher import config as config_lib

        for path in self._flag("config_file") or ():
            params.override(config_lib.load_config_file(path), is_strict=True)
        return params

    def parse_runtime(self, params):
        """Sets `runtime.tpu` from `--tpu` when given."""
        if self._flag("tpu"):
            params.override({"runtime": {"tpu": self._flag("tpu")}}, is_strict=True)
        return params

    def parse_data_service(self, params):
        """TFM's tf.data service address: not supported here, so a set one is an error."""
        if self._flag("tf_data_service"):
            raise ConfigError(
                f"tf_data_service ({self._flag('tf_data_service')!r}) is not supported by "
                f"lite_launcher; leave it empty.")
        return params

    def parse_params_override(self, params):
        """Applies `--params_override` (YAML/JSON string, file path or `a.b=1` pairs)."""
        from lite_launcher import config as config_lib

        if self._flag("params_override"):
            params.override(config_lib.parse_params_override(self._flag("params_override")),
                            is_strict=True)
        return params


def parse_configuration(flags_obj, lock_return: bool = True, print_return: bool = True):
    """The experiment config from the flags (`ExperimentParser(flags_obj).parse()`).

    As TFM's: validated, then locked with `lock_return` (a locked config refuses changes;
    `params.replace(...)` gives a changed copy), and logged with `print_return`.
    """
    params = ExperimentParser(flags_obj).parse()
    params.validate()
    if lock_return:
        params.lock()
    if print_return:
        logging.info("Final experiment parameters:\n%s", params.to_yaml())
    return params


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


def _is_multi_worker_mirrored(params) -> bool:
    return str(params.runtime.distribution_strategy).lower() == "multi_worker_mirrored"


_TASK_NAME = re.compile(r"/job:(\w+)/(?:replica:\d+/)?task:(\d+)")


def _op_error_reason(message: str) -> str:
    """The cause in a TensorFlow op error's message, without the graph node's traceback."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    last_frame = max((i for i, line in enumerate(lines) if line.startswith("File \"")),
                     default=None)
    if last_frame is not None and last_frame + 2 < len(lines):
        lines = lines[last_frame + 2:]  # after the last frame and its source line
    reason = lines[0] if lines else message.strip()
    return reason if len(reason) <= 200 else reason[:200] + "..."


def _cluster_task_lost(error, model_dir: str) -> ClusterTaskLostError:
    """The one-line error of a MultiWorkerMirrored worker whose collectives failed: names the
    first other task the TensorFlow error mentions."""
    tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    me = tf_config.get("task") or {}
    others = [(job, int(index)) for job, index in _TASK_NAME.findall(error.message)
              if (job, int(index)) != (me.get("type"), int(me.get("index", 0)))]
    who = f"task {others[0][0]} {others[0][1]}" if others else "a task"
    reason = _op_error_reason(error.message)
    return ClusterTaskLostError(
        f"Lost contact with cluster {who} ({type(error).__name__}: {reason}). Restart every "
        f"task of the cluster: training resumes from the last checkpoint in {model_dir}.")


def run_with_preemption_recovery(params, mode: str, model_dir: str,
                                 enable_async_checkpointing: bool = False, before_run=None,
                                 continuous_eval_max_wait_s=None):
    """Builds strategy and task and runs the experiment; retries after a worker preemption.

    A retry starts from the last checkpoint in model_dir. `before_run()` is called once the
    experiment is built and model_dir's checkpoint restored, before the mode runs (the driver
    writes params.yaml there, so a run refused at restore leaves model_dir as it was).
    """
    import tensorflow as tf

    from lite_launcher import experiment, registry, strategy as strategy_lib

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
                continuous_eval_max_wait_s=continuous_eval_max_wait_s)
            if before_run is not None:
                before_run()
            return runner.run()
        except tf.errors.OpError as error:
            if _is_multi_worker_mirrored(params):
                # A worker's collectives cannot be set up twice in one process, and the peer
                # they lost stays lost: retrying here waits forever. Stop with one line.
                raise _cluster_task_lost(error, model_dir) from error
            if not _is_preemption_error(error) or attempt == MAX_PREEMPTION_RETRIES:
                raise
            logging.warning("Preemption-style error (%s); restarting from the last checkpoint "
                            "(retry %d of %d).", type(error).__name__, attempt + 1,
                            MAX_PREEMPTION_RETRIES)


def _exit_on_sigterm(signum, frame):  # pylint: disable=unused-argument
    """The driver's SIGTERM handler outside a preemption save: exit 143, once."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # Exiting already: later ones change nothing.
    raise SystemExit(TERMINATED_EXIT_CODE)


def main(argv):
    """Runs the driver with parsed FLAGS; user errors exit 2 with one line."""
    # An earlier run() in this process that ended in an error silenced logging for its exit.
    std_logging.disable(std_logging.NOTSET)
    if len(argv) > 1:
        _user_error(f"unexpected arguments {argv[1:]}; every option is a --flag.")
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
        _user_error(error)
    except ENVIRONMENT_FAILURES as error:
        _user_error(error, RUNTIME_ERROR_EXIT_CODE)


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
        check_model_dir(FLAGS.model_dir, FLAGS.mode)
        if FLAGS.continuous_eval_max_wait_s is not None and (
                FLAGS.mode != "continuous_eval" or FLAGS.continuous_eval_max_wait_s < 0):
            raise ConfigError(f"--continuous_eval_max_wait_s "
                              f"({FLAGS.continuous_eval_max_wait_s:g}) needs --mode "
                              f"continuous_eval and a value >= 0.")
        if modes.mode_trains(FLAGS.mode) and not _may_be_non_chief(FLAGS):
            # Refuse a second trainer now, in well under a second, before TensorFlow loads.
            model_dir_lock.hold(FLAGS.model_dir)
    _check_input_files(FLAGS)
    load_registrations(FLAGS.registry_imports)
    if FLAGS.list_experiments:
        from lite_launcher import registry
        print("\n".join(registry.registered_experiments()))
        return
    # Printed once every check of the input has passed (in before_run below): a bad input
    # gets its one line, not the whole config before it.
    params = parse_configuration(FLAGS, print_return=False)
    if FLAGS.mode in ("eval", "continuous_eval") and not FLAGS.dry_run:
        check_eval_dir_writable(FLAGS.model_dir, params.trainer.validation_summary_subdir,
                                FLAGS.mode)
    if gin.config_is_locked():
        # An earlier run() in this process (a notebook, a sweep) configured gin: start afresh.
        gin.clear_config()
    try:
        gin.parse_config_files_and_bindings(FLAGS.gin_file, FLAGS.gin_params)
    except SyntaxError as error:
        raise _gin_syntax_error(error, "--gin_params") from None
    except (ValueError, IOError, OSError) as error:
        raise ConfigError(f"gin: {error}") from error
    if FLAGS.dry_run:
        print(params.to_yaml(), end="")
        return
    mode, model_dir = FLAGS.mode, FLAGS.model_dir

    from lite_launcher import strategy as strategy_lib

    # Before TensorFlow creates a device: the GPU runtime reads these variables then.
    strategy_lib.apply_performance_settings(params)
    maybe_run_cluster_server(params)
    # TF_CONFIG from runtime.worker_hosts first: it tells whether this process is the chief.
    strategy_lib.configure_cluster(params.runtime.worker_hosts, params.runtime.task_index)
    # Only the chief writes params.yaml and the gin config (as checkpoints and summaries).
    chief = strategy_lib.is_chief_process(params.runtime.distribution_strategy)
    if modes.mode_trains(mode):
        if chief:
            model_dir_lock.hold(model_dir)  # Held until the process ends.
        elif model_dir_lock.held(model_dir):
            model_dir_lock.release(model_dir)  # A non-chief worker: the chief locks.
    if params.runtime.mixed_precision_dtype:
        strategy_lib.set_mixed_precision_policy(params.runtime.mixed_precision_dtype)
    if params.runtime.run_eagerly:
        import tensorflow as tf
        tf.config.run_functions_eagerly(True)
    if params.runtime.deterministic_ops:
        configure_determinism()

    printed = []

    def before_run():
        if not printed:
            printed.append(True)
            logging.info("Final experiment parameters:\n%s", params.to_yaml())
        if modes.mode_trains(mode) and chief:
            model_dir_lock.hold(model_dir, create=True)  # A fresh model_dir is locked now.
            serialize_config(params, model_dir)

    run_with_preemption_recovery(params, mode, model_dir,
                                 enable_async_checkpointing=FLAGS.enable_async_checkpointing,
                                 before_run=before_run,
                                 continuous_eval_max_wait_s=FLAGS.continuous_eval_max_wait_s)
    if modes.mode_trains(mode) and chief:
        save_gin_config(mode, model_dir)


# absl's own --help lists only the flags of the `__main__` module (the console-script shim,
# which defines none), so the driver prints its flags itself.
_SHORT_HELP_ARGS = ("--help", "-h", "-?", "--helpshort")

_HELP_INTRO = """\
USAGE: lite-train --experiment=NAME --mode=MODE --model_dir=DIR [flags]

Trains and/or evaluates a registered experiment (TFM's official/vision/train.py). The config
is the experiment's defaults, then each --config_file, then --params_override; gin files and
bindings are applied after it. Exit codes: 0 done, 1 the environment failed (disk, unreadable
checkpoints, divergence), 2 bad input (one line on stderr), 143 SIGTERM.
"""


def driver_help(intro: str = _HELP_INTRO) -> str:
    """The text of `lite-train --help`: usage and the driver's own flags with their help."""
    module = FLAGS.find_module_defining_flag("experiment")
    return (f"{intro}\n{FLAGS.module_help(module)}\n\n"
            f"Try --helpfull to get a list of all flags (absl's and TensorFlow's too).\n")


def _wants_short_help(argv) -> bool:
    args = argv[1:]
    if "--" in args:  # arguments after "--" are not flags
        args = args[:args.index("--")]
    return any(arg in _SHORT_HELP_ARGS for arg in args)


def _flags_parser(argv, prog: str = "lite-train", intro: str = _HELP_INTRO):
    if _wants_short_help(argv):
        sys.stdout.write(driver_help(intro))
        sys.stdout.flush()
        sys.exit(0)
    # The driver's flags absent from argv get their defaults, not the values of an earlier
    # run() in this process (absl keeps parsed values; a multi-string flag would accumulate).
    # absl's own flags are left alone: resetting --verbosity resets the log level.
    module = FLAGS.find_module_defining_flag("experiment")
    for flag in FLAGS.flags_by_module_dict().get(module, ()):
        flag.unparse()
    try:
        return FLAGS(argv)
    except flags.Error as error:
        _user_error(f"{error} (see {prog} --help)", prog=prog)
    except SystemExit as exit_request:
        # absl exits with 1 after printing --help; asking for help is not a failure.
        if any(arg in ("--help", "-h", "--helpfull", "--helpshort", "-?") for arg in argv[1:]):
            sys.exit(0)
        raise


def run():
    """Console-script entry point for `lite-train`."""
    # Quiet TensorFlow's C++ start-up chatter unless the user asked for it.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # oneDNN's CPU kernels where TensorFlow left them off (read once, when TensorFlow loads).
    from lite_launcher import onednn
    onednn.enable_by_default()
    define_lite_train_flags()
    app.run(main, flags_parser=_flags_parser)


if __name__ == "__main__":
    run()
