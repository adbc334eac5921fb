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

The export itself is a library, `lite_launcher.core.export_lib` (this module parses flags and
calls it). `lite-export` and `export_saved_model` take the same defaults (TFM's own command puts the
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

from typing import Dict, List, Optional

from absl import flags

from lite_launcher.common import flags as lite_flags
from lite_launcher.common.errors import ConfigError
# The library this command is a layer of flags over (its names, as this module had them).
from lite_launcher.core.export_lib import (  # noqa: F401
    CHECKPOINT_SUBDIR, SAVED_MODEL_SUBDIR, check_export_dir, export_saved_model,
    resolve_checkpoint, restore_for_serving)

FLAGS = flags.FLAGS
PROG = "lite-export"

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
    `lite-train` (`lite_launcher.common.flags`) and its own. Safe to call more than once."""
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
    """`'224,224'` -> [224, 224]; None or empty -> None."""
    if not text:
        return None
    try:
        size = [int(part) for part in text.split(",")]
    except ValueError:
        size = []
    if len(size) != 2 or min(size) < 1:
        raise ConfigError(f"--input_image_size {text!r} must be two positive integers, "
                          f"height,width (e.g. 224,224).")
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
