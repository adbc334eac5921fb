"""`lite-convert` (`python -m lite_launcher.commands.convert`): a TFM-written checkpoint, once, as lite's.

    lite-convert --experiment resnet_imagenet --config_file my_tfm.yaml \
        --checkpoint_path /tfm/model_dir --output_dir /lite/weights

reads the TFM checkpoint (a prefix, or a directory: its latest) into the model the experiment
config builds (`tfm_checkpoint`: every variable must be found) and writes
`output_dir/ckpt-<TFM's global step>` (a lite checkpoint of the model, as lite-export's, for
`task.init_checkpoint` or `--checkpoint_path`), `output_dir/model.keras` (the Keras model) and
`output_dir/params.yaml`. The optimizer is not converted (a run resumes from the TFM model_dir
itself: lite-train reads it). The output directory must not exist; it appears complete or not
at all. Exit codes: 0 done, 1 the environment failed (disk), 2 bad input (one line on stderr).
"""

from __future__ import annotations

import os
import shutil
from typing import Tuple

from absl import flags
from absl import logging

from lite_launcher.common import atomic_write
from lite_launcher.common import flags as lite_flags
from lite_launcher.common.errors import ConfigError, ModelDirWriteError
from lite_launcher.core import train_utils

FLAGS = flags.FLAGS
PROG = "lite-convert"
KERAS_FILE = "model.keras"
_EXPERIMENT_IS = "whose model the checkpoint holds"

_HELP_INTRO = """\
usage: lite-convert --experiment NAME [--config_file FILE ...] [--params_override ...]
                    --checkpoint_path TFM_CHECKPOINT --output_dir DIR

Converts a checkpoint TFM wrote (a tf_keras object graph) into lite's: DIR/ckpt-N (the model's
weights), DIR/model.keras and DIR/params.yaml. The config is built as lite-train's.
Exit codes: 0 done, 1 the environment failed (disk), 2 bad input (one line on stderr).
"""


def define_flags() -> None:
    """Defines `lite-convert`'s flags: the config flags it shares with lite-train and its own.
    Safe to call more than once."""
    lite_flags.define_config_flags()
    lite_flags.define_registry_imports_flag()
    if "output_dir" in FLAGS:
        return
    if "checkpoint_path" not in FLAGS:
        flags.DEFINE_string("checkpoint_path", None, "The TFM checkpoint: a prefix, or a "
                            "directory (its latest checkpoint).")
    flags.DEFINE_string("output_dir", None, "The directory to write (must not exist).")


def check_arguments(checkpoint_path: str, output_dir: str) -> None:
    """The paths on their own, before TensorFlow loads (local paths; a path with a scheme,
    gs://..., is checked by TensorFlow later): both given, the checkpoint there, the output
    directory new and creatable."""
    if not output_dir:
        raise ConfigError("--output_dir is required: the directory to write the converted "
                          "checkpoint into.")
    if not checkpoint_path:
        raise ConfigError("--checkpoint_path is required: the TFM checkpoint (a prefix or a "
                          "directory).")
    if "://" not in output_dir:
        if os.path.exists(output_dir):
            raise ConfigError(f"--output_dir {output_dir!r} exists; pass a new directory.")
        train_utils.check_output_dir(output_dir, "--output_dir")
    if "://" not in checkpoint_path and not (os.path.isdir(checkpoint_path)
                                             or os.path.exists(checkpoint_path + ".index")):
        raise ConfigError(f"--checkpoint_path {checkpoint_path!r} does not exist: it is neither "
                          f"a checkpoint directory nor a checkpoint prefix.")


def convert_checkpoint(params, checkpoint_path: str, output_dir: str) -> Tuple[str, str]:
    """Writes the TFM checkpoint `checkpoint_path` as lite's into `output_dir` (see the module
    docstring). Returns (the lite checkpoint prefix, the .keras file).

    Raises:
      ConfigError: not a TFM checkpoint, it does not fit the model, or output_dir exists.
      ModelDirWriteError: the files could not be written (nothing is left behind).
    """
    check_arguments(checkpoint_path, output_dir)
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    # pylint: disable-next=import-outside-toplevel
    from lite_launcher.checkpointing import checkpoints
    from lite_launcher.core import registry
    from lite_launcher.checkpointing import tfm_checkpoint

    if tf.io.gfile.exists(output_dir):
        raise ConfigError(f"--output_dir {output_dir!r} exists; pass a new directory.")
    prefix = checkpoints.resolve(checkpoint_path, what="--checkpoint_path")
    if not tfm_checkpoint.is_tfm_checkpoint(prefix):
        raise ConfigError(f"--checkpoint_path {prefix!r} is not a TFM-written checkpoint (a "
                          f"lite checkpoint needs no conversion).")
    task = registry.get_task(params.task)
    model = task.build_model()
    try:
        tfm_checkpoint.load_weights(model, prefix, "model")
    except ConfigError as error:
        raise ConfigError(f"--checkpoint_path {prefix!r} (a TFM checkpoint) does not fit the "
                          f"experiment's model: {error}") from error
    step = tfm_checkpoint.tfm_global_step(prefix) or 0
    local = "://" not in output_dir
    staging = atomic_write.temporary_path(output_dir) if local else output_dir
    try:
        tf.io.gfile.makedirs(staging)
        # As lite-export's checkpoint: the model alone, with a `checkpoint` state file.
        checkpoints.write(tf.train.Checkpoint(model=model), os.path.join(staging, f"ckpt-{step}"))
        checkpoints.write_state(staging, f"ckpt-{step}", [f"ckpt-{step}"])
        model.save(os.path.join(staging, KERAS_FILE))
        params.save_yaml(os.path.join(staging, "params.yaml"))
        if local:
            os.replace(staging, output_dir)
    except (OSError, tf.errors.OpError) as error:
        if local:
            shutil.rmtree(staging, ignore_errors=True)
        text = getattr(error, "strerror", None) or getattr(error, "message", None) or error
        raise ModelDirWriteError(f"Cannot write the conversion to {output_dir}: {text}.") \
            from error
    except BaseException:
        if local:
            shutil.rmtree(staging, ignore_errors=True)
        raise
    logging.info("Converted the TFM checkpoint %s into %s.", prefix, output_dir)
    return os.path.join(output_dir, f"ckpt-{step}"), os.path.join(output_dir, KERAS_FILE)


def _main(flags_obj) -> str:
    # Bad input is refused before TensorFlow loads (parse_params loads it last).
    if not flags_obj.experiment:
        raise ConfigError(f"--experiment is required: the experiment {_EXPERIMENT_IS}.")
    check_arguments(flags_obj.checkpoint_path, flags_obj.output_dir)
    params = lite_flags.parse_params(flags_obj)
    return "\n".join(convert_checkpoint(params, flags_obj.checkpoint_path,
                                        flags_obj.output_dir))


def main(argv) -> None:
    """Runs `lite-convert` with parsed FLAGS; bad input exits 2 with one line."""
    lite_flags.run_command(_main, argv, PROG)


def run() -> None:
    """Console-script entry point for `lite-convert`."""
    lite_flags.start_command(define_flags, main, PROG, _HELP_INTRO, "output_dir")


if __name__ == "__main__":
    run()
