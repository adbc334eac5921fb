"""Exporting a trained checkpoint as a SavedModel: the library under `lite-export`
(`lite_launcher.commands.export`) and TFM's `export_inference_graph`
(`lite_launcher.vision.serving.export_saved_model_lib`).

`export_saved_model` writes TFM's `export_inference_graph` layout into `export_dir`:

    saved_model.pb, variables/, ...   the SavedModel, in export_dir itself (TFM's library
                     default; `export_saved_model_subdir="saved_model"` puts it in
                     export_dir/saved_model/)
    checkpoint/      the exported weights as a `tf.train.Checkpoint(model=...)` (`ckpt-1`;
                     `export_checkpoint_subdir`, empty: none)
    params.yaml      the experiment config the model was built from
    model_params.txt, model_flops.txt   with `log_model_flops_and_params`

The SavedModel is written with Keras 3's `keras.export.ExportArchive`; its `serving_default`
signature is the task's serving function (`Task.build_serving_fn`). The checkpoint is read
through the checkpoint home's one reader (`checkpoints.read_weights`), which maps a TFM-written
checkpoint too. With `optimizer_config.ema` the served weights are the moving averages: a
regular checkpoint's averages are swapped in; a best checkpoint (`best_ckpt-N`) holds them
already, as evaluated. Everything is written into a temporary sibling of `export_dir` first and
moved into place at the end, so a failed export leaves no partial one (for local paths; gs://
and other schemes are written in place).
"""

from __future__ import annotations

import math
import os
import shutil
from typing import Dict, List, Optional, Sequence

from absl import logging

from lite_launcher.common import atomic_write
from lite_launcher.common.errors import ConfigError, ModelDirWriteError
from lite_launcher.core import registry
from lite_launcher.core import train_utils

# The subdirectories' defaults: the SavedModel in export_dir itself (TFM's library), the
# checkpoint in checkpoint/ (TFM's command).
SAVED_MODEL_SUBDIR = ""
CHECKPOINT_SUBDIR = "checkpoint"
# What a SavedModel directory holds (checked when it is export_dir itself).
_SAVED_MODEL_ENTRIES = ("saved_model.pb", "variables", "assets", "fingerprint.pb")


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


def restore_for_serving(task, model, params, checkpoint_prefix: str) -> bool:
    """Reads `checkpoint_prefix` into `model`; with `optimizer_config.ema`, swaps in the
    moving averages (`swap_ema_weights`) unless the checkpoint is a best checkpoint, which
    holds them already. Returns whether averages were swapped in.

    Raises:
      ConfigError: the checkpoint does not fit the model (or, with EMA, holds no averages).
      NoReadableCheckpointError: its files cannot be read (truncated, corrupt).
    """
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    # pylint: disable=import-outside-toplevel  (TensorFlow: not before the input checks)
    from lite_launcher import optimization
    from lite_launcher.checkpointing import checkpoints
    from lite_launcher.core import exporter

    # A checkpoint TFM wrote (a tf_keras object graph) is mapped onto the model; with EMA its
    # trainable weights are TFM's moving averages, where it kept them.
    averages = params.trainer.optimizer_config.ema is not None
    _, tfm_written = checkpoints.read_weights({"model": model}, checkpoint_prefix,
                                              what="--checkpoint_path", averages=averages)
    if tfm_written:
        return averages
    if not averages:
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
    checkpoints.read_weights({"optimizer": optimizer}, checkpoint_prefix,
                             what="--checkpoint_path (optimizer_config.ema)")
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

    # pylint: disable-next=import-outside-toplevel
    from lite_launcher.checkpointing import checkpoints

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
