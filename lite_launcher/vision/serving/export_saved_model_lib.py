"""TFM's `official/vision/serving/export_saved_model_lib.py`: `export_inference_graph`, the call
TFM's vision tutorials make, with TFM's arguments and defaults, on `lite_launcher.core.export_lib`.

    from lite_launcher.vision.serving import export_saved_model_lib
    export_saved_model_lib.export_inference_graph(
        input_type="image_tensor", batch_size=1, input_image_size=[224, 224],
        params=exp_config, checkpoint_path=tf.train.latest_checkpoint(model_dir),
        export_dir="./exported_model")
    served = tf.saved_model.load("./exported_model").signatures["serving_default"]

The SavedModel goes into `export_dir` itself unless `export_saved_model_subdir` names a
subdirectory; the exported checkpoint is written only when `export_checkpoint_subdir` names
one (TFM's defaults: None for both); `params.yaml` always. The arguments lite does not
implement are refused in one line when set off TFM's default.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Union

from lite_launcher.common.errors import ConfigError
from lite_launcher.core import export_lib


def export_inference_graph(
        input_type: str, batch_size: Optional[int], input_image_size: Sequence[int],
        params, checkpoint_path: Optional[str], export_dir: str,
        num_channels: Optional[int] = 3, export_module=None,
        export_checkpoint_subdir: Optional[str] = None,
        export_saved_model_subdir: Optional[str] = None, save_options=None,
        log_model_flops_and_params: bool = False, checkpoint=None,
        input_name: Optional[str] = None,
        function_keys: Optional[Union[List[str], Dict[str, str]]] = None,
        add_tpu_function_alias: Optional[bool] = False) -> str:
    """Exports `checkpoint_path` as a SavedModel in `export_dir` (TFM's signature and layout).

    Args:
      input_type: the input of `serving_default` (`image_tensor`, `image_bytes`, `tf_example`,
        `tflite`, as the task serves).
      batch_size: the signature's batch size (None: any).
      input_image_size: [height, width] of the served image.
      params: the experiment config (`ll.get_exp_config(...)`, as trained).
      checkpoint_path: a checkpoint prefix or a directory (its newest checkpoint). Required:
        lite exports no untrained weights.
      export_dir: where the SavedModel and `params.yaml` go.
      num_channels: 3 only (lite serves 3-channel images).
      export_module, save_options, checkpoint, input_name, add_tpu_function_alias: TFM's
        options lite does not implement; refused unless left at TFM's default.
      export_checkpoint_subdir: a subdirectory of export_dir for the exported checkpoint
        (None: none written).
      export_saved_model_subdir: a subdirectory of export_dir for the SavedModel (None:
        export_dir itself).
      log_model_flops_and_params: also write model_params.txt and model_flops.txt.
      function_keys: replaces input_type: a one-item list (that input as `serving_default`)
        or {input_type: signature name} for several signatures.

    Returns:
      The SavedModel's directory.

    Raises:
      ConfigError: bad input, or an option lite does not implement; nothing is written.
    """
    unsupported = {"export_module": export_module is not None,
                   "save_options": save_options is not None,
                   "checkpoint": checkpoint is not None,
                   "input_name": input_name not in (None, "inputs"),
                   "add_tpu_function_alias": bool(add_tpu_function_alias),
                   "num_channels": num_channels not in (None, 3)}
    for name, is_set in unsupported.items():
        if is_set:
            raise ConfigError(f"export_inference_graph: {name}= is not supported by lite "
                              f"(leave it at TFM's default); lite serves the task's "
                              f"signatures (Task.build_serving_fn) with a checkpoint_path.")
    if checkpoint_path is None:
        raise ConfigError("export_inference_graph: checkpoint_path is required (TFM exports "
                          "untrained weights without one); pass tf.train.latest_checkpoint("
                          "model_dir) or the model_dir.")
    return export_lib.export_saved_model(
        params, checkpoint_path, export_dir, input_type=input_type, batch_size=batch_size,
        input_image_size=list(input_image_size) if input_image_size else None,
        export_checkpoint_subdir=export_checkpoint_subdir or "",
        export_saved_model_subdir=export_saved_model_subdir or "",
        log_model_flops_and_params=log_model_flops_and_params,
        function_keys=_signature_names(function_keys))


def _signature_names(function_keys) -> Optional[Dict[str, str]]:
    """TFM's `function_keys` as {input_type: signature name}: a list holds one input type,
    served as `serving_default` (TFM refuses a longer list too)."""
    if not function_keys:
        return None
    if isinstance(function_keys, dict):
        return dict(function_keys)
    keys = list(function_keys)
    if len(keys) != 1:
        raise ConfigError(f"export_inference_graph: function_keys {keys!r} as a list must hold "
                          f"one input type; name several signatures with a dict "
                          f"{{input_type: signature_name}}.")
    return {keys[0]: "serving_default"}
