"""`lite-export`: a trained checkpoint as a SavedModel for serving (TFM's
official/vision/serving/export_saved_model.py and export_saved_model_lib.py).

    lite-export --experiment resnet_imagenet --checkpoint_path /tmp/resnet \
      --export_dir /tmp/resnet_export --input_type image_bytes --input_image_size 224,224

writes into `--export_dir` (TFM's `export_inference_graph` layout):

    saved_model.pb, variables/, ...   the SavedModel, in export_dir itself (TFM's default;
                     `--export_saved_model_subdir saved_model` puts it in export_dir/saved_model/,
                     lite's layout before issue 45)
    checkpoint/      the exported weights as a `tf.train.Checkpoint(model=...)` (`ckpt-1`;
                     `--export_checkpoint_subdir`, empty: none)
    params.yaml      the experiment config the model was built from
    model_params.txt, model_flops.txt   with --log_model_flops_and_params

`lite-export` and `export_saved_model` take the same defaults (TFM's own command puts the
SavedModel in `saved_model/`, its library in export_dir: lite follows the library, which TFM's
tutorials call). `lite_launcher.vision.serving.export_saved_model_lib.export_inference_graph`
is TFM's function with TFM's arguments and defaults (no checkpoint subdirectory unless asked).

The SavedModel is written with Keras 3's `keras.export.ExportArchive`; its `serving_default`
signature is the task's serving function (`Task.build_serving_fn`): for image classification
`inputs` -> `logits`, `probs` with TFM's input types (`lite_launcher.vision.serving`); for
other tasks the model's own input -> `outputs`. Load it anywhere with TensorFlow alone:
`tf.saved_model.load(dir).signatures["serving_default"](inputs=...)`.

`--checkpoint_path` is a checkpoint prefix (or its `.index` file), or a directory: a model_dir
(its newest checkpoint) or the best-checkpoint subdir. With `optimizer_config.ema` the served
weights are the moving averages: a regular checkpoint's averages are swapped in; a best
checkpoint (`best_ckpt-N`) holds them already, as evaluated.

Bad input (unknown experiment or key, no such checkpoint, a checkpoint of another model, an
input type the task does not serve, an export_dir that already holds an export, ...) prints
one line `lite-export: error: ...` and exits 2 with nothing written. Everything is written
into a temporary sibling of `--export_dir` first and moved into place at the end, so a failed
export leaves no partial one (for local paths; gs:// and other schemes are written in place).
"""

from __future__ import annotations

import functools
import math
import os
import shutil
from typing import Dict, List, Optional, Sequence

from absl import app
from absl import flags
from absl import logging

from lite_launcher import atomic_write
from lite_launcher import flags as lite_flags
from lite_launcher import train_utils
from lite_launcher.errors import (ConfigError, ENVIRONMENT_FAILURES, ModelDirWriteError,
                                  NoReadableCheckpointError)

FLAGS = flags.FLAGS
PROG = "lite-export"
# The subdirectories' defaults: the SavedModel in export_dir itself (TFM's library), the
# checkpoint in checkpoint/ (TFM's command).
SAVED_MODEL_SUBDIR = ""
CHECKPOINT_SUBDIR = "checkpoint"
# What a SavedModel directory holds (checked when it is export_dir itself).
_SAVED_MODEL_ENTRIES = ("saved_model.pb", "variables", "assets", "fingerprint.pb")

_HELP_INTRO = """\
USAGE: lite-export --experiment=NAME --checkpoint_path=CKPT --export_dir=DIR [flags]

Exports a trained checkpoint as a SavedModel for serving (TFM's export_saved_model.py): the
SavedModel in DIR itself (--export_saved_model_subdir=saved_model: DIR/saved_model), the
weights under DIR/checkpoint, DIR/params.yaml. The config
is built as lite-train's: the experiment's defaults, each --config_file, --params_override.
Exit codes: 0 done, 1 the environment failed (disk), 2 bad input (one line on stderr).
"""


def define_flags() -> None:
    """Defines `lite-export`'s flags (TFM's names and meanings): the config flags it shares with
    `lite-train` (`lite_launcher.flags`) and its own. Safe to call more than once."""
    lite_flags.define_config_flags()
    lite_flags.define_registry_imports_flag()
    if "export_dir" in FLAGS:
        return
    flags.DEFINE_string("checkpoint_path", None, "A checkpoint prefix (or its .index file), or "
                        "a directory: a model_dir (its newest checkpoint) or a best-checkpoint "
                        "subdir.")
    flags.DEFINE_string("export_dir", None, "The directory to write the export into (created).")
    flags.DEFINE_string("input_type", None, "The serving input: image classification takes "
                        "image_tensor (default), image_bytes, tf_example, serve_examples or "
                        "tflite; other tasks tensor (the model's own input).")
    flags.DEFINE_integer("batch_size", None, "The batch size of the signature (default: any).")
    flags.DEFINE_string("input_image_size", None, "height,width of the served image, e.g. "
                        "224,224 (default: the task's model.input_size).")
    flags.DEFINE_string("export_checkpoint_subdir", CHECKPOINT_SUBDIR, "The subdirectory for "
                        "the exported checkpoint (empty: none).")
    flags.DEFINE_string("export_saved_model_subdir", SAVED_MODEL_SUBDIR, "The subdirectory for "
                        "the SavedModel (empty, the default: export_dir itself, as TFM's "
                        "export_inference_graph; 'saved_model': lite's layout before issue 45).")
    flags.DEFINE_bool("log_model_flops_and_params", False, "Also write model_params.txt and "
                      "model_flops.txt (FLOPs of one image) into export_dir.")
    flags.DEFINE_string("function_keys", "", "Several signatures in one SavedModel: "
                        "'input_type:signature_name,...', e.g. "
                        "'tf_example:serving_default,image_tensor:serving_image_tensor' "
                        "(without a serving_default, Keras names the first one so too).")


# ---------------------------------------------------------------------------------------------
# Flag values (TensorFlow-free).
# ---------------------------------------------------------------------------------------------


def parse_image_size(text: Optional[str]) -> Optional[List[int]]:
    """`'224,224'` -> [224, 224] (video: `'16,224,224'`, frames first); None or empty ->
    None. The task checks the count it serves."""
    if not text:
        return None
    try:
        size = [int(part) for part in text.split(",")]
    except ValueError:
        size = []
    if len(size) not in (2, 3) or min(size) < 1:
        raise ConfigError(f"--input_image_size {text!r} must be two positive integers, "
                          f"height,width (e.g. 224,224), or three for video, "
                          f"frames,height,width (e.g. 16,224,224).")
    return size


def parse_function_keys(text: Optional[str]) -> Dict[str, str]:
    """`'tf_example:serving_default,image_tensor:serving_image_tensor'` -> a dict (TFM's)."""
    keys = {}
    for pair in (text or "").split(","):
        if not pair.strip():
            continue
        input_type, _, name = pair.partition(":")
        if not input_type.strip() or not name.strip() or input_type.strip() in keys:
            raise ConfigError(f"--function_keys {text!r} must be distinct "
                              f"'input_type:signature_name' pairs separated by commas.")
        keys[input_type.strip()] = name.strip()
    if keys and len(set(keys.values())) != len(keys):
        raise ConfigError(f"--function_keys {text!r} names a signature twice.")
    return keys


def _export_entries(saved_model_subdir: str, checkpoint_subdir: str) -> List[str]:
    """The top-level names an export writes into export_dir."""
    entries = [saved_model_subdir] if saved_model_subdir else list(_SAVED_MODEL_ENTRIES)
    return entries + ([checkpoint_subdir] if checkpoint_subdir else []) + ["params.yaml"]


def check_export_dir(export_dir: str, saved_model_subdir: str = SAVED_MODEL_SUBDIR,
                     checkpoint_subdir: str = CHECKPOINT_SUBDIR) -> None:
    """Rejects an `--export_dir` that cannot be written or already holds an export (TFM would
    overwrite it in place; a half-overwritten SavedModel serves neither model)."""
    if not export_dir:
        raise ConfigError("--export_dir is required (the directory to write the export into).")
    train_utils.check_output_dir(export_dir, "--export_dir")
    if "://" in export_dir or not os.path.isdir(export_dir):
        return
    taken = [e for e in _export_entries(saved_model_subdir, checkpoint_subdir)
             if os.path.exists(os.path.join(export_dir, e))]
    if taken:
        raise ConfigError(f"--export_dir {export_dir!r} already holds an export "
                          f"({', '.join(taken)}); pass a new directory or remove those.")


# ---------------------------------------------------------------------------------------------
# Checkpoint and weights.
# ---------------------------------------------------------------------------------------------


def resolve_checkpoint(checkpoint_path: str) -> str:
    """The checkpoint prefix `checkpoint_path` names: itself, its `.index` file's prefix, or a
    directory's newest checkpoint (a model_dir, a best-checkpoint subdir, an export's
    checkpoint subdir)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    if not checkpoint_path:
        raise ConfigError("--checkpoint_path is required: a checkpoint prefix, or a model_dir "
                          "(its newest checkpoint).")
    path = checkpoint_path
    if tf.io.gfile.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if not latest:
            raise ConfigError(f"--checkpoint_path {checkpoint_path!r} is a directory with no "
                              f"checkpoint (no 'checkpoint' state file naming one).")
        return latest
    if path.endswith(".index"):
        path = path[:-len(".index")]
    if not tf.io.gfile.exists(path + ".index"):
        raise ConfigError(f"--checkpoint_path {checkpoint_path!r} is neither a checkpoint "
                          f"directory nor a checkpoint prefix (no {path}.index).")
    return path


def _read(checkpoint, prefix: str, what: str) -> None:
    try:
        checkpoint.read(prefix).expect_partial().assert_existing_objects_matched()
    except (AssertionError, ValueError) as error:
        detail = " ".join(str(error).split())[:300]
        raise ConfigError(f"--checkpoint_path {prefix!r} does not fit the experiment's "
                          f"{what} (another model or config?): {detail}") from error
    except Exception as error:  # pylint: disable=broad-except
        # Truncated or corrupt files (TF raises OpErrors, IndexErrors, ...): as lite-train's
        # checkpoint recovery, any other failure means it does not read (exit 1).
        text = str(getattr(error, "message", None) or error or type(error).__name__)
        raise NoReadableCheckpointError(f"--checkpoint_path {prefix!r} cannot be read: "
                                        f"{text.splitlines()[0]}") from error


def restore_for_serving(task, model, params, checkpoint_prefix: str) -> bool:
    """Reads `checkpoint_prefix` into `model`; with `optimizer_config.ema`, swaps in the
    moving averages (`swap_ema_weights`) unless the checkpoint is a best checkpoint, which
    holds them already. Returns whether averages were swapped in.

    Raises:
      ConfigError: the checkpoint does not fit the model (or, with EMA, holds no averages).
      NoReadableCheckpointError: its files cannot be read (truncated, corrupt).
    """
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    # pylint: disable-next=import-outside-toplevel
    from lite_launcher import checkpoints, exporter, optimization, tfm_checkpoint

    # A checkpoint TFM wrote (a tf_keras object graph) is mapped onto the model; with EMA its
    # trainable weights are TFM's moving averages, where it kept them.
    averages = params.trainer.optimizer_config.ema is not None
    if tfm_checkpoint.is_tfm_checkpoint(checkpoint_prefix):
        checkpoints.read_weights({"model": model}, checkpoint_prefix, what="--checkpoint_path",
                                 averages=averages)
        return averages
    _read(tf.train.Checkpoint(model=model), checkpoint_prefix, "model")
    if params.trainer.optimizer_config.ema is None:
        return False
    if os.path.basename(checkpoint_prefix).startswith(exporter.BEST_CHECKPOINT_NAME + "-"):
        logging.info("%s is a best checkpoint: its weights are the evaluated averages.",
                     checkpoint_prefix)
        return False
    names = {name for name, _ in tf.train.list_variables(checkpoint_prefix)}
    if not any(name.startswith("optimizer/") for name in names):
        logging.info("%s holds no optimizer (an exported checkpoint): its weights are served "
                     "as they are.", checkpoint_prefix)
        return False
    optimizer = task.create_optimizer(params.trainer.optimizer_config, params.runtime)
    optimization.create_optimizer_variables(optimizer, model)
    _read(tf.train.Checkpoint(optimizer=optimizer), checkpoint_prefix,
          "optimizer with EMA (optimizer_config.ema)")
    optimization.swap_ema_weights(optimizer, model.trainable_variables)
    logging.info("Serving the moving averages of %s (optimizer_config.ema).", checkpoint_prefix)
    return True


# ---------------------------------------------------------------------------------------------
# The export.
# ---------------------------------------------------------------------------------------------


def _write_model_params(model, path: str) -> int:
    total, lines = 0, []
    for variable in model.variables:
        shape = [int(d) for d in variable.shape]
        total += math.prod(shape)
        lines.append(f"{variable.path} {shape}")
    atomic_write.write_text(path, "\n".join(lines) + f"\n\nTotal params: {total}\n")
    return total


def _write_model_flops(fn, spec, path: str) -> Optional[int]:
    """FLOPs of the serving function on one input (TensorFlow's profiler, as TFM's
    `try_count_flops`); its report goes to `path`."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    shape = [1] + list(spec.shape[1:])
    if any(d is None for d in shape):
        logging.info("FLOPs not counted: the input %s has unknown dimensions.", spec)
        return None
    graph = tf.function(fn, autograph=False).get_concrete_function(
        tf.TensorSpec(shape, spec.dtype)).graph
    options = tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
    options["output"] = f"file:outfile={path}"
    total = tf.compat.v1.profiler.profile(graph=graph, options=options).total_float_ops
    with open(path, "a", encoding="utf-8") as f:  # the report rounds; the exact count too
        f.write(f"\nTotal float ops: {total}\n")
    return total


def _move_into_place(staging: str, export_dir: str) -> None:
    if not os.path.exists(export_dir):
        os.rename(staging, export_dir)  # one atomic step
        return
    for entry in sorted(os.listdir(staging)):
        os.rename(os.path.join(staging, entry), os.path.join(export_dir, entry))
    os.rmdir(staging)


def export_saved_model(params, checkpoint_path: str, export_dir: str,
                       input_type: Optional[str] = None, batch_size: Optional[int] = None,
                       input_image_size: Optional[Sequence[int]] = None,
                       export_checkpoint_subdir: str = CHECKPOINT_SUBDIR,
                       export_saved_model_subdir: str = SAVED_MODEL_SUBDIR,
                       log_model_flops_and_params: bool = False,
                       function_keys: Optional[Dict[str, str]] = None) -> str:
    """Exports the checkpoint as a SavedModel in TFM's layout (TFM's `export_inference_graph`).

    Args:
      params: the experiment config (validated).
      checkpoint_path: a checkpoint prefix or directory (see `resolve_checkpoint`).
      export_dir: where the export goes (see the module docstring for the layout).
      input_type: the serving input of `serving_default` (default: the task's first
        `serving_input_types`).
      batch_size: the signature's batch size (None: any).
      input_image_size: [height, width] for image tasks (default: the model's input size).
      export_checkpoint_subdir, export_saved_model_subdir: TFM's subdirectories.
      log_model_flops_and_params: also write model_params.txt and model_flops.txt.
      function_keys: {input_type: signature name} for several signatures (TFM's); replaces
        `input_type`.

    Returns:
      The SavedModel's directory.

    Raises:
      ConfigError: bad input; nothing is written.
      NoReadableCheckpointError: the checkpoint's files cannot be read; nothing is written.
      ModelDirWriteError: the export could not be written; no partial export is left.
    """
    import keras  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    from lite_launcher import checkpoints, registry  # pylint: disable=import-outside-toplevel

    if batch_size is not None and batch_size < 1:
        raise ConfigError(f"--batch_size ({batch_size}) must be a positive integer (or left "
                          f"out: any batch size).")
    check_export_dir(export_dir, export_saved_model_subdir, export_checkpoint_subdir)
    local = "://" not in export_dir
    if local:
        export_dir = os.path.normpath(export_dir)
    prefix = resolve_checkpoint(checkpoint_path)
    task = registry.get_task(params.task)
    if function_keys:
        signatures = dict(function_keys)
    else:
        signatures = {input_type or task.serving_input_types[0]:
                      tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY}
    model = task.build_model()
    restore_for_serving(task, model, params, prefix)
    serving = {name: task.build_serving_fn(model, key, batch_size=batch_size,
                                           input_image_size=input_image_size)
               for key, name in signatures.items()}

    staging = atomic_write.temporary_path(export_dir) if local else export_dir
    saved_model_dir = (os.path.join(staging, export_saved_model_subdir)
                       if export_saved_model_subdir else staging)
    try:
        archive = keras.export.ExportArchive()
        archive.track(model)
        for name, (fn, spec) in serving.items():
            archive.add_endpoint(name, fn, input_signature=[spec])
        archive.write_out(saved_model_dir, verbose=False)
        if export_checkpoint_subdir:
            checkpoints.save_to(tf.train.Checkpoint(model=model),
                                os.path.join(staging, export_checkpoint_subdir, "ckpt"))
        params.save_yaml(os.path.join(staging, "params.yaml"))
        if log_model_flops_and_params:
            total = _write_model_params(model, os.path.join(staging, "model_params.txt"))
            fn, spec = next(iter(serving.values()))
            flops = _write_model_flops(fn, spec, os.path.join(staging, "model_flops.txt"))
            logging.info("Model: %d parameters, %s FLOPs per input.", total, flops)
        if local:
            _move_into_place(staging, export_dir)
    except (OSError, tf.errors.OpError) as error:
        if local:
            shutil.rmtree(staging, ignore_errors=True)
        text = getattr(error, "strerror", None) or getattr(error, "message", None) or error
        raise ModelDirWriteError(f"Cannot write the export to {export_dir}: {text}.") from error
    except BaseException:
        if local:
            shutil.rmtree(staging, ignore_errors=True)
        raise
    saved_model_dir = (os.path.join(export_dir, export_saved_model_subdir)
                       if export_saved_model_subdir else export_dir)
    logging.info("Exported %s as %s (signatures: %s).", prefix, saved_model_dir,
                 ", ".join(f"{name} <- {key}" for key, name in signatures.items()))
    return saved_model_dir


# ---------------------------------------------------------------------------------------------
# The command line.
# ---------------------------------------------------------------------------------------------


def _main(flags_obj) -> str:
    # Cheap checks first, before TensorFlow is imported.
    if not flags_obj.experiment:
        raise ConfigError("--experiment is required: the experiment the checkpoint was trained "
                          "with.")
    image_size = parse_image_size(flags_obj.input_image_size)
    function_keys = parse_function_keys(flags_obj.function_keys)
    if function_keys and flags_obj.input_type:
        raise ConfigError("Pass --input_type or --function_keys, not both.")
    check_export_dir(flags_obj.export_dir, flags_obj.export_saved_model_subdir,
                     flags_obj.export_checkpoint_subdir)
    params = lite_flags.parse_params(flags_obj)
    return export_saved_model(
        params, flags_obj.checkpoint_path, flags_obj.export_dir,
        input_type=flags_obj.input_type, batch_size=flags_obj.batch_size,
        input_image_size=image_size,
        export_checkpoint_subdir=flags_obj.export_checkpoint_subdir,
        export_saved_model_subdir=flags_obj.export_saved_model_subdir,
        log_model_flops_and_params=flags_obj.log_model_flops_and_params,
        function_keys=function_keys)


def main(argv) -> None:
    """Runs `lite-export` with parsed FLAGS; bad input exits 2 with one line."""
    lite_flags.run_command(_main, argv, PROG)


def run() -> None:
    """Console-script entry point for `lite-export`."""
    lite_flags.start_command(define_flags, main, PROG, _HELP_INTRO, "export_dir")


if __name__ == "__main__":
    run()
