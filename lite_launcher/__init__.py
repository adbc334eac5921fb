"""lite_launcher: TFM's registry / task / trainer / controller / five modes on Keras 3.

The public API lives at the top level (`import lite_launcher as ll; ll.Task`, ...). Names are
resolved lazily so that `import lite_launcher` (and `lite-train --help`) does not import
TensorFlow until something that needs it is used.
"""

import importlib

from lite_launcher import legacy

__version__ = "0.1.0"

# Public name -> module that defines it.
_EXPORTS = {
    # TFM's `tfm.core` (task_factory, train_lib, exp_factory) for its tutorials' lines
    "core": "lite_launcher.core",
    # configs
    "Config": "lite_launcher.core.base_config",
    "OneOfConfig": "lite_launcher.core.base_config",
    "ConfigError": "lite_launcher.core.base_config",
    "ExperimentConfig": "lite_launcher.core.config_definitions",
    "TaskConfig": "lite_launcher.core.config_definitions",
    "TrainerConfig": "lite_launcher.core.config_definitions",
    "RuntimeConfig": "lite_launcher.core.config_definitions",
    "DataConfig": "lite_launcher.core.config_definitions",
    "override_config": "lite_launcher.core.config_definitions",
    "OptimizationConfig": "lite_launcher.optimization",
    "OptimizerFactory": "lite_launcher.optimization",
    "register_optimizer_cls": "lite_launcher.optimization",
    "register_learning_rate_cls": "lite_launcher.optimization",
    "register_warmup_cls": "lite_launcher.optimization",
    # registries; the lookups come with the built-in experiments registered
    "register_config_factory": "lite_launcher.core.registry",
    "get_exp_config": "lite_launcher.common.registry_imports",
    "registered_experiments": "lite_launcher.common.registry_imports",
    "register_task_cls": "lite_launcher.core.registry",
    "get_task": "lite_launcher.common.registry_imports",
    # task / trainer / controller / experiment
    "Task": "lite_launcher.core.base_task",
    "Trainer": "lite_launcher.core.base_trainer",
    "Controller": "lite_launcher.orbit.controller",
    "ExperimentRunner": "lite_launcher.core.train_lib",
    "run_experiment": "lite_launcher.core.train_lib",
    # the errors the driver reports in one line (TensorFlow-free)
    "ModelDirLockedError": "lite_launcher.common.errors",
    "ModelDirWriteError": "lite_launcher.common.errors",
    "CheckpointWriteError": "lite_launcher.common.errors",
    "TrainingDivergedError": "lite_launcher.common.errors",
    "NoReadableCheckpointError": "lite_launcher.common.errors",
    "BestCheckpointExporter": "lite_launcher.core.exporter",
    "InputReader": "lite_launcher.core.input_reader",
    "get_distribution_strategy": "lite_launcher.common.distribute_utils",
    "define_flags": "lite_launcher.common.flags",
    "parse_configuration": "lite_launcher.core.train_utils",
    "serialize_config": "lite_launcher.core.train_utils",
    "ExperimentParser": "lite_launcher.core.train_utils",
    "ParseConfigOptions": "lite_launcher.core.train_utils",
    "SummaryManager": "lite_launcher.orbit.summaries",
    "create_trainer": "lite_launcher.core.train_lib",
    "maybe_create_best_ckpt_exporter": "lite_launcher.core.exporter",
    "get_train_actions": "lite_launcher.core.actions",
    "get_eval_actions": "lite_launcher.core.actions",
    "strategy_from_runtime": "lite_launcher.common.distribute_utils",
    "set_mixed_precision_policy": "lite_launcher.common.distribute_utils",
    "export_saved_model": "lite_launcher.core.export_lib",
    "convert_checkpoint": "lite_launcher.commands.convert",
    "is_tfm_checkpoint": "lite_launcher.checkpointing.tfm_checkpoint",
    "TfmResumingCheckpointManager": "lite_launcher.checkpointing.checkpoints",
    # TFM's vision train.py helpers (train_utils / summary_manager), for forked drivers
    "save_gin_config": "lite_launcher.core.train_utils",
    "maybe_build_eval_summary_manager": "lite_launcher.orbit.summaries",
    "learning_rate_value": "lite_launcher.optimization",
}

__all__ = sorted(_EXPORTS)


# Old module names (`lite_launcher.trainer`, `lite_launcher.vision.resnet`, ...) import as
# their modules now: any `import lite_launcher.<x>` runs this file first.
legacy.install()


def __getattr__(name):
    module_name = _EXPORTS.get(name)
    if module_name is None and f"{__name__}.{name}" in legacy.MOVED:
        # An old module name read as an attribute (`ll.trainer.distribute_dataset`).
        return importlib.import_module(f"{__name__}.{name}")
    if module_name is None:
        raise AttributeError(f"module 'lite_launcher' has no attribute {name!r}")
    module = importlib.import_module(module_name)
    # A submodule exported by name (`core`: `import lite_launcher as tfm; tfm.core...`).
    value = module if module_name == f"{__name__}.{name}" else getattr(module, name)
    globals()[name] = value  # cache: later lookups skip __getattr__
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
