"""What a CPU test run of one of TFM's experiment YAMLs (tests/vision/data) changes in it."""

import yaml


def scaled_learning_rate_override(yaml_path, global_batch_size):
    """`--params_override` text that scales the YAML's learning rate to `global_batch_size`.

    TFM's recipes set the rate in proportion to the global batch (e.g. 0.1 per 256 images);
    the YAML's rate for its own batch (4,096 on a TPU) at a test's batch of 4 or 8 is ~1000x
    too large for it. Scales `initial_learning_rate` (cosine, exponential, ...) or a stepwise
    schedule's `values` by `global_batch_size / the YAML's train batch`.
    """
    with open(yaml_path) as f:
        config = yaml.safe_load(f)
    factor = global_batch_size / config["task"]["train_data"]["global_batch_size"]
    schedule = config["trainer"]["optimizer_config"]["learning_rate"]
    kind = schedule["type"]
    settings = schedule[kind]
    prefix = f"trainer.optimizer_config.learning_rate.{kind}"
    if "initial_learning_rate" in settings:
        return f"{prefix}.initial_learning_rate={settings['initial_learning_rate'] * factor!r}"
    if "values" in settings:
        values = ",".join(repr(v * factor) for v in settings["values"])
        return f"{prefix}.values=[{values}]"
    raise ValueError(f"{yaml_path}: no learning rate to scale in {schedule}")
