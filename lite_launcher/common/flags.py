"""The command-line library of `lite-train`, `lite-export` and `lite-convert`: their flags (TFM's
official/common/flags.py), the flags parser, the config their flags describe (`parse_params`)
and a command's start and error handling (`start_command`, `run_command`). No command imports
another; each stands on this module and `train_utils`. TensorFlow-free, so `--help` and bad
flags answer at once.

Each flag is defined here once: `define_config_flags` (which experiment and how its config is
built: both CLIs), `define_flags` (TFM's driver flags, which include those), and
`define_registry_imports_flag` (both CLIs; not TFM's). A CLI's own flags are defined in its
module (`main.define_lite_train_flags`, `export.define_flags`).
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Sequence

from absl import app
from absl import flags

from lite_launcher.common.errors import ConfigError, ENVIRONMENT_FAILURES
from lite_launcher.core import train_utils

FLAGS = flags.FLAGS


def define_config_flags() -> None:
    """Defines `--experiment`, `--config_file` and `--params_override` (TFM's names and
    meanings): the flags that pick the experiment and build its config, shared by `lite-train`
    and `lite-export`. Safe to call more than once."""
    if "experiment" in FLAGS:
        return
    flags.DEFINE_string("experiment", None, "The registered experiment to run, or that the "
                        "checkpoint was trained with (see lite-train --list_experiments).")
    flags.DEFINE_multi_string("config_file", None, "YAML/JSON files overriding the experiment "
                              "config, applied in order.")
    flags.DEFINE_string("params_override", None, "A YAML/JSON string, a YAML file path, or "
                        "'a.b=1,c.d=x' pairs, applied after --config_file.")


def define_flags() -> None:
    """Defines TFM's driver flags (`official/common/flags.define_flags`), with its names and
    meanings; safe to call more than once.

    Only those, so a forked driver can define its own (TFM's vision `train.py` defines
    `--enable_async_checkpointing` itself). Not defined: TFM's `--tpu_platform`,
    `--tfhub_handle` and `--tflex_output_uri`, which no TFM library reads (a forked driver that
    uses them defines them). `--tf_data_service` is defined, and refused when set (lite has no
    tf.data service).
    """
    define_config_flags()
    if "mode" in FLAGS:
        return
    # A plain string (not an enum) so that a bad mode gets our one-line error and exit code 2.
    flags.DEFINE_string("mode", None, "One of: train, train_and_post_eval, train_and_eval, "
                        "eval, continuous_eval.")
    flags.DEFINE_string("model_dir", None, "Directory for checkpoints, summaries and "
                        "params.yaml.")
    # As TFM's: a library may have defined the gin flags already.
    for name, text in (("gin_file", "Gin config files."),
                       ("gin_params", "Gin bindings, e.g. 'f.x = 1'.")):
        if name not in FLAGS:
            flags.DEFINE_multi_string(name, None, text)
    flags.DEFINE_string("tpu", None, "TPU address (sets runtime.tpu).")
    flags.DEFINE_string("tf_data_service", None, "The tf.data service address (TFM's flag; "
                        "lite_launcher has no tf.data service, so setting it is an error).")


def define_registry_imports_flag() -> None:
    """Defines `--registry_imports` (both CLIs): modules to import that register experiments."""
    if "registry_imports" not in FLAGS:
        flags.DEFINE_multi_string("registry_imports", None, "Modules to import that register "
                                  "experiments and tasks (repeatable).")


# absl's own --help lists only the flags of the `__main__` module (the console-script shim,
# which defines none), so the CLIs print their flags themselves.
_SHORT_HELP_ARGS = ("--help", "-h", "-?", "--helpshort")
_HELP_ARGS = _SHORT_HELP_ARGS + ("--helpfull",)


def _cli_modules(cli_flag: str) -> Sequence[str]:
    # By a flag the CLI defines: its module is `__main__` when run as `python -m`.
    return (__name__, FLAGS.find_module_defining_flag(cli_flag))


def help_text(intro: str, cli_flag: str) -> str:
    """A CLI's `--help`: `intro`, then the flags defined here and in the CLI's module (the one
    that defines `cli_flag`), each with its help."""
    by_module = FLAGS.flags_by_module_dict()
    sections = [FLAGS.module_help(module) for module in _cli_modules(cli_flag)
                if by_module.get(module)]
    return (f"{intro}\n" + "\n\n".join(sections) +
            "\n\nTry --helpfull to get a list of all flags (absl's and TensorFlow's too).\n")


def _wants_short_help(argv) -> bool:
    args = argv[1:]
    if "--" in args:  # arguments after "--" are not flags
        args = args[:args.index("--")]
    return any(arg in _SHORT_HELP_ARGS for arg in args)


def parse_flags(argv, prog: str, intro: str, cli_flag: str):
    """absl's flags parser for a CLI (`app.run(..., flags_parser=...)`): its short `--help`,
    bad flags as one line and exit code 2, and the defaults back on every call, so that
    `run()` may be called again in one process. `cli_flag`: a flag the CLI's module defines
    (its flags are listed in `--help`)."""
    if _wants_short_help(argv):
        sys.stdout.write(help_text(intro, cli_flag))
        sys.stdout.flush()
        sys.exit(0)
    # The CLI's flags absent from argv get their defaults, not the values of an earlier run()
    # in this process (absl keeps parsed values; a multi-string flag would accumulate). absl's
    # own flags are left alone: resetting --verbosity resets the log level.
    by_module = FLAGS.flags_by_module_dict()
    for module in _cli_modules(cli_flag):
        for flag in by_module.get(module, ()):
            flag.unparse()
    try:
        return FLAGS(argv)
    except flags.Error as error:
        train_utils.exit_with_error(f"{error} (see {prog} --help)", prog=prog)
    except SystemExit:
        # absl exits with 1 after printing --help; asking for help is not a failure.
        if any(arg in _HELP_ARGS for arg in argv[1:]):
            sys.exit(0)
        raise


# ----- what the commands share: the config their flags describe, the run of a command

def parse_params(flags_obj):
    """The experiment config the config flags describe, as lite-train builds it."""
    train_utils.check_input_files(flags_obj)
    train_utils.load_user_registrations(flags_obj.registry_imports)
    train_utils.check_experiment_inputs(flags_obj)
    train_utils.load_builtin_registrations()
    return train_utils.parse_configuration(train_utils.ParseConfigOptions(
        experiment=flags_obj.experiment, config_file=list(flags_obj.config_file or []),
        params_override=flags_obj.params_override or ""), print_return=False)


def run_command(command, argv, prog: str) -> None:
    """Prints `command(FLAGS)`; bad input exits 2 with one line, an environment failure 1."""
    if len(argv) > 1:
        train_utils.exit_with_error(
            f"unexpected arguments {argv[1:]}; every option is a --flag.", prog=prog)
    try:
        result = command(FLAGS)
    except ConfigError as error:
        train_utils.exit_with_error(error, prog=prog)
    except ENVIRONMENT_FAILURES as error:
        train_utils.exit_with_error(error, train_utils.RUNTIME_ERROR_EXIT_CODE, prog=prog)
    print(result)


def start_command(define, main_fn, prog: str, intro: str, cli_flag: str) -> None:
    """A lite command's console-script start: its flags, then absl's app with lite's parser."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    define()
    app.run(main_fn, flags_parser=functools.partial(
        parse_flags, prog=prog, intro=intro, cli_flag=cli_flag))
