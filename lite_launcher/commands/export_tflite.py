"""`lite-export-tflite`: a SavedModel as a `.tflite` file for phones, with post-training
quantization (TFM's official/vision/serving/export_tflite.py, on
`lite_launcher.vision.serving.export_tflite_lib`).

    lite-export --experiment mobilenet_imagenet --config_file my.yaml --checkpoint_path /tmp/m \
      --export_dir /tmp/m_tflite_sm --input_type tflite --batch_size 1
    lite-export-tflite --experiment mobilenet_imagenet --config_file my.yaml \
      --saved_model_dir /tmp/m_tflite_sm --tflite_path /tmp/m_int8.tflite --quant_type int8

The SavedModel must be one `lite-export --input_type tflite` wrote (its signature takes the
preprocessed image; batch size 1 for the integer types), and the config flags the ones it was
exported with: they name the task and, for the integer quant types, the calibration data
(`task.train_data`, the first `--calibration_steps` images). Quant types and what each writes:
`export_tflite_lib`'s docstring. Prints the file's path, size and input / output types.

Bad input (an unknown or QAT quant type, an integer type with no data to calibrate on, a
SavedModel of another task or of another input type, an unwritable `--tflite_path`, ...)
prints one line `lite-export-tflite: error: ...` and exits 2 with nothing written; the file is
written to a temporary name and renamed, so no half-written `.tflite` is ever left.
"""

from __future__ import annotations

from absl import flags
from absl import logging

from lite_launcher.common import flags as lite_flags
from lite_launcher.common.errors import ConfigError

FLAGS = flags.FLAGS
PROG = "lite-export-tflite"

_HELP_INTRO = """\
USAGE: lite-export-tflite --experiment=NAME --saved_model_dir=DIR --tflite_path=FILE [flags]

Converts a SavedModel written by lite-export --input_type tflite into a .tflite file, with
post-training quantization (--quant_type; the integer types calibrate on the experiment's
train_data). The config is built as lite-train's: the experiment's defaults, each
--config_file, --params_override.
Exit codes: 0 done, 1 the environment failed (disk), 2 bad input (one line on stderr).
"""


def define_flags() -> None:
    """Defines `lite-export-tflite`'s flags (TFM's names and meanings): the config flags it
    shares with `lite-train` and its own. Safe to call more than once."""
    lite_flags.define_config_flags()
    lite_flags.define_registry_imports_flag()
    if "tflite_path" in FLAGS:
        return
    flags.DEFINE_string("saved_model_dir", None, "The SavedModel lite-export --input_type "
                        "tflite wrote (batch size 1 for the integer quant types).")
    flags.DEFINE_string("tflite_path", None, "The .tflite file to write.")
    flags.DEFINE_string("quant_type", None, "Post-training quantization: none (default), "
                        "default (dynamic range), fp16, int8 (float fallback), int8_full "
                        "(integer only, uint8 input / output), int8_full_int8_io (int8 input / "
                        "output), uint8 (TFM's; as default under TensorFlow 2). qat and "
                        "qat_fp32_io need a quantization-aware-trained model: refused.")
    flags.DEFINE_integer("calibration_steps", 500, "How many train_data images calibrate the "
                         "integer quant types.")
    flags.DEFINE_string("denylisted_ops", "", "Comma-separated TFLite ops the integer types "
                        "leave in float, in capitals (e.g. MEAN,SOFTMAX); not the "
                        "quantization-friendly ones (CONV_2D, DEPTHWISE_CONV_2D, ...).")


def parse_denylisted_ops(text: str):
    """`'MEAN,SOFTMAX'` -> ['MEAN', 'SOFTMAX']; empty -> None (TFM's)."""
    ops = [op.strip() for op in (text or "").split(",") if op.strip()]
    bad = [op for op in ops if op != op.upper() or not op.replace("_", "").isalnum()]
    if bad:
        raise ConfigError(f"--denylisted_ops {text!r}: {bad[0]!r} is not a TFLite op name "
                          f"(capitals, e.g. MEAN,SOFTMAX).")
    return ops or None


def export_tflite(params, saved_model_dir: str, tflite_path: str, quant_type=None,
                  calibration_steps: int = 500, denylisted_ops=None) -> str:
    """Converts `saved_model_dir` and writes `tflite_path` atomically; returns a line about the
    file (its path, size, input and output types)."""
    from lite_launcher.vision.serving import export_tflite_lib as lib  # pylint: disable=C0415

    content = lib.convert_tflite_model(
        saved_model_dir=saved_model_dir, quant_type=quant_type, params=params,
        calibration_steps=calibration_steps, denylisted_ops=denylisted_ops)
    try:
        lib.write_tflite(tflite_path, content)
    except OSError as error:
        from lite_launcher.common.errors import ModelDirWriteError  # pylint: disable=C0415
        raise ModelDirWriteError(f"Cannot write {tflite_path}: "
                                 f"{error.strerror or error}.") from error
    logging.info("TFLite model converted and saved to %s.", tflite_path)
    return f"{tflite_path}: {lib.describe(content)}"


def _main(flags_obj) -> str:
    from lite_launcher.vision.serving import export_tflite_lib as lib  # pylint: disable=C0415

    # Every check that needs no TensorFlow first (parse_params loads it last).
    if not flags_obj.experiment:
        raise ConfigError("--experiment is required: the experiment the SavedModel was "
                          "exported from.")
    quant_type = lib.normalize_quant_type(flags_obj.quant_type)
    denylisted_ops = parse_denylisted_ops(flags_obj.denylisted_ops)
    if denylisted_ops and not lib.needs_calibration(quant_type):
        raise ConfigError(f"--denylisted_ops keeps ops out of integer quantization; it needs "
                          f"an integer --quant_type (int8, int8_full, int8_full_int8_io), not "
                          f"{quant_type or 'none'}.")
    if not flags_obj.saved_model_dir:
        raise ConfigError("--saved_model_dir is required: the SavedModel lite-export "
                          "--input_type tflite wrote.")
    lib.check_tflite_path(flags_obj.tflite_path)
    params = lite_flags.parse_params(flags_obj)
    lib.check_supported(params)
    lib.check_calibration_data(params, quant_type, flags_obj.calibration_steps)
    return export_tflite(params, flags_obj.saved_model_dir, flags_obj.tflite_path, quant_type,
                         flags_obj.calibration_steps, denylisted_ops)


def main(argv) -> None:
    """Runs `lite-export-tflite` with parsed FLAGS; bad input exits 2 with one line."""
    lite_flags.run_command(_main, argv, PROG)


def run() -> None:
    """Console-script entry point for `lite-export-tflite`."""
    lite_flags.start_command(define_flags, main, PROG, _HELP_INTRO, "tflite_path")


if __name__ == "__main__":
    run()
