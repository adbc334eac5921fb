"""The drivers' library (the config half of TFM's official/core/train_utils.py): the experiment
config from flags (`ExperimentParser`, `parse_configuration`), what the chief writes next to
the checkpoints (`serialize_config`, `save_gin_config`), the checks of the user's input, and
the one-line error with its exit code.

TensorFlow-free on import, and so are the input checks: `lite-train` and `lite-export` refuse
a wrong experiment name, a missing or malformed config file, a malformed `--params_override`
or gin file before TensorFlow loads. Both CLIs (`main.py`, `export.py`) and a forked driver
import it.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging as std_logging
import os
import sys
import tokenize
from typing import List, Optional

from absl import logging

from lite_launcher.common import atomic_write, builtin_experiments
from lite_launcher.common.errors import ConfigError, ModelDirWriteError
# What the chief writes into model_dir (TFM's train_utils names; the runner writes them).
from lite_launcher.core.model_dir_files import save_gin_config, serialize_config  # noqa: F401

USER_ERROR_EXIT_CODE = 2
# A failure of the environment rather than of the input (e.g. a full disk).
RUNTIME_ERROR_EXIT_CODE = 1
# Terminated by SIGTERM (128 + 15), as a shell reports it; a trainer checkpoints first.
TERMINATED_EXIT_CODE = 143


def exit_with_error(message, exit_code: int = USER_ERROR_EXIT_CODE,
                    prog: str = "lite-train") -> None:
    """Prints one line `<prog>: error: ...` to stderr and exits with `exit_code` (2: the user's
    input is wrong; `RUNTIME_ERROR_EXIT_CODE`: the environment failed)."""
    # gin appends "In call to configurable ..." lines to errors raised inside a configurable
    # (Trainer, create_trainer, ...); the message before them is the user's error.
    text = str(message).split("\n  In call to configurable ")[0]
    sys.stderr.write(f"{prog}: error: {' '.join(text.split())}\n")
    sys.stderr.flush()
    # Keep the error the last line: nothing logged while the process shuts down (e.g. TF's
    # warnings about a half-restored checkpoint being garbage-collected).
    std_logging.disable(std_logging.WARNING)
    sys.exit(exit_code)


# ---------------------------------------------------------------------------------------------
# Input checks (TensorFlow-free; they write nothing).
# ---------------------------------------------------------------------------------------------


def check_model_dir(model_dir: str, mode: str) -> None:
    """Rejects a local `--model_dir` that cannot be (or be written as) a directory.

    Paths with a scheme (gs://, ...) are left to TensorFlow.
    """
    from lite_launcher.core import modes

    check_output_dir(model_dir, "--model_dir", writable=modes.mode_trains(mode))


def check_output_dir(directory: str, flag: str, writable: bool = True) -> None:
    """Rejects a local directory flag (`--model_dir`, `--export_dir`) that cannot be a
    directory or, with `writable`, cannot be written."""
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
    model_dir). Paths with a scheme are left to TensorFlow."""
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


def gin_syntax_error(error: SyntaxError, source: str) -> ConfigError:
    """One line naming the gin file (or binding), the line and what gin could not parse."""
    where = f"{error.filename}, line {error.lineno}" if error.filename else source
    text = f" ({error.text.strip()!r})" if error.text and error.text.strip() else ""
    detail = (str(error.msg).strip().splitlines() or [""])[-1].strip()
    return ConfigError(f"gin syntax error in {where}{text}: {detail}")


def _check_gin_syntax(gin_files, gin_params) -> None:
    """Parses every gin file and binding for syntax only (no configurable needed)."""
    from gin import config as gin_config
    from gin import config_parser

    sources = [(path, path) for path in gin_files or ()]
    sources += [(None, binding) for binding in gin_params or ()]
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
            raise gin_syntax_error(error, f"--gin_params {text!r}") from None
        except tokenize.TokenError as error:  # e.g. an unclosed bracket at the end
            message, (line, _) = error.args
            where = f"{path}, line {line}" if path else f"--gin_params {text!r}"
            raise ConfigError(f"gin syntax error in {where}: {message}.") from None


def check_input_files(flags_obj) -> None:
    """Every `--gin_file` exists and parses, every `--gin_params` binding parses, and every
    existing `--config_file` and `--gin_file` is UTF-8.

    `flags_obj`: FLAGS, or any object with those attributes (a missing one counts as unset).
    """
    config_files = getattr(flags_obj, "config_file", None)
    gin_files = getattr(flags_obj, "gin_file", None)
    for path in gin_files or ():
        if not os.path.isfile(path):
            raise ConfigError(f"--gin_file {path!r} does not exist (or is not a file).")
    for flag, paths in (("--config_file", config_files), ("--gin_file", gin_files)):
        for path in paths or ():
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except OSError:
                continue  # A missing config file is reported by check_experiment_inputs.
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as error:
                line = data.count(b"\n", 0, error.start) + 1
                raise ConfigError(f"{flag} {path!r} is not valid UTF-8: byte "
                                  f"0x{data[error.start]:02x} on line {line}; save it as "
                                  f"UTF-8.") from None
    _check_gin_syntax(gin_files, getattr(flags_obj, "gin_params", None))


def load_user_registrations(registry_imports) -> None:
    """Imports the installed entry-point plugins and the `--registry_imports` modules: every
    experiment a user registers. Imports no built-in experiment (see `load_registrations`)."""
    from lite_launcher.core import registry

    registry.load_entry_point_plugins()
    registry.import_registry_modules(registry_imports)


def known_experiments() -> List[str]:
    """The experiments a driver can run, sorted: the built-ins (by name, not imported) and
    those registered so far (`load_user_registrations` first)."""
    from lite_launcher.core import registry

    return sorted(set(builtin_experiments.BUILTIN_EXPERIMENTS) |
                  set(registry.registered_experiments()))


def check_experiment_inputs(flags_obj) -> None:
    """Refuses, without building the config, what `ExperimentParser` would refuse first: no or
    an unknown `--experiment` (after `load_user_registrations`), a `--config_file` that is
    missing or not YAML/JSON, a `--params_override` that does not parse. Same errors as the
    parser's; TensorFlow-free. Keys and values are checked when the config is built."""
    from lite_launcher.core import base_config
    from lite_launcher.core import registry

    name = getattr(flags_obj, "experiment", None)
    if not name:
        raise ConfigError("--experiment is required; see --list_experiments.")
    known = known_experiments()
    if name not in known:
        raise registry.unknown_experiment_error(name, known)
    for path in getattr(flags_obj, "config_file", None) or ():
        base_config.load_config_file(path)
    base_config.parse_params_override(getattr(flags_obj, "params_override", None) or "")


def load_builtin_registrations(experiment: Optional[str] = None) -> None:
    """Imports the built-in experiments and tasks (`lite_launcher.common.registry_imports`), and the
    modules of TFM's gin configurables (`Trainer`, `create_trainer`, the actions,
    `run_experiment`, `build_optimizer`: `train_lib`), so that gin files parsed next can bind
    them (gin refuses a configurable registered after it parsed). Imports TensorFlow.

    With `experiment` a built-in name, only the modules registering it and its task are
    imported (a classification run does not load segmentation, issue 31); any other name
    (a user's experiment may use a built-in task) loads every built-in.
    """
    from lite_launcher.core import train_lib  # noqa: F401  pylint: disable=unused-import

    load_builtin_experiment(experiment)


def load_builtin_experiment_config(experiment: Optional[str]) -> None:
    """Imports the module registering built-in `experiment`'s config factory, without its
    task's module: for the vision families, TensorFlow-free (`vision/configs`). Any other
    name loads every built-in, as `load_builtin_experiment` does (a user's experiment may
    use a built-in task)."""
    modules = builtin_experiments.modules_for(experiment) if experiment else None
    if modules is None:
        load_builtin_experiment(experiment)
    else:
        importlib.import_module(modules[0])


def load_builtin_experiment(experiment: Optional[str] = None) -> None:
    """Imports the modules registering built-in `experiment` and its task; every built-in
    (`lite_launcher.common.registry_imports`) when `experiment` is None or not a built-in."""
    modules = builtin_experiments.modules_for(experiment) if experiment else None
    if modules is None:
        import lite_launcher.common.registry_imports  # noqa: F401  (registers the built-ins)
        return
    for module in modules:
        importlib.import_module(module)


def load_registrations(registry_imports) -> None:
    """Imports everything that registers: `load_builtin_registrations` and
    `load_user_registrations` (a driver that checks its input first calls the two apart)."""
    load_builtin_registrations()
    load_user_registrations(registry_imports)


# ---------------------------------------------------------------------------------------------
# The experiment config.
# ---------------------------------------------------------------------------------------------


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

    # False: `base_experiment` imports only a built-in experiment's config module, not its
    # task's (the driver parses and checks the config before TensorFlow loads).
    register_tasks = True

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
        from lite_launcher.core import registry

        name = self._flag("experiment")
        if not name:
            raise ConfigError("--experiment is required; see --list_experiments.")
        load = load_builtin_experiment if self.register_tasks else load_builtin_experiment_config
        load(name)
        return registry.get_exp_config(name)

    def parse_config_file(self, params):
        """Applies each `--config_file` in order."""
        from lite_launcher.core import config_definitions as config_lib

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
        from lite_launcher.core import config_definitions as config_lib

        if self._flag("params_override"):
            params.override(config_lib.parse_params_override(self._flag("params_override")),
                            is_strict=True)
        return params


def parse_configuration(flags_obj, lock_return: bool = True, print_return: bool = True,
                        register_tasks: bool = True):
    """The experiment config from the flags (`ExperimentParser(flags_obj).parse()`).

    As TFM's: validated, then locked with `lock_return` (a locked config refuses changes;
    `params.replace(...)` gives a changed copy), and logged with `print_return`. With
    `register_tasks` False a built-in experiment's task is not imported (nor TensorFlow, for
    the vision families): `load_builtin_registrations` does that after the check.
    """
    from lite_launcher.core import base_config

    parser = ExperimentParser(flags_obj)
    parser.register_tasks = register_tasks
    params = parser.parse()
    base_config.validate_once(params)
    if lock_return:
        params.lock()
    if print_return:
        logging.info("Final experiment parameters:\n%s", params.to_yaml())
    return params


# How long the driver waits for a remote init_checkpoint to answer (an unreachable host can
# make TensorFlow's file systems retry for minutes).
INIT_CHECKPOINT_PROBE_S = 8.0


def check_init_checkpoint(params, mode: str, model_dir: str) -> None:
    """Refuses a remote `task.init_checkpoint` (gs://, http://, ...) that cannot be read, in one
    line, before any model is built: a built-in experiment's default points at TFM's buckets,
    which an offline machine cannot reach. Local paths are left to the task's restore (which
    names them); a training mode that resumes from a checkpoint in `model_dir` never reads it.

    Raises:
      ConfigError: the checkpoint does not answer within INIT_CHECKPOINT_PROBE_S, its host
        cannot be reached, or no such object exists.
    """
    import threading  # pylint: disable=import-outside-toplevel

    from lite_launcher.core import modes  # pylint: disable=import-outside-toplevel

    path = str(getattr(getattr(params, "task", None), "init_checkpoint", None) or "")
    if "://" not in path or not modes.mode_trains(mode):
        return
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    if model_dir and tf.train.latest_checkpoint(model_dir):
        return
    answer = {}

    def probe():
        try:
            answer["exists"] = (tf.io.gfile.exists(path + ".index")
                                or tf.io.gfile.exists(path))
        except Exception as error:  # pylint: disable=broad-except
            answer["error"] = error

    thread = threading.Thread(target=probe, daemon=True)  # left behind if it never answers
    thread.start()
    thread.join(INIT_CHECKPOINT_PROBE_S)
    if "error" in answer:
        first = str(answer["error"]).strip().splitlines()[0] if str(answer["error"]) else ""
        reason = f"it cannot be reached (no network?): {type(answer['error']).__name__}: {first}"
    elif "exists" not in answer:
        reason = f"no answer within {INIT_CHECKPOINT_PROBE_S:g} s (no network?)"
    elif not answer["exists"]:
        reason = "no such object"
    else:
        return
    raise ConfigError(
        f"task.init_checkpoint {path} cannot be read: {reason}. Start from scratch with "
        f"--params_override task.init_checkpoint=null, or give a local checkpoint path.")
