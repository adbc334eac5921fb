"""lite_launcher: TFM's registry / task / trainer / controller / five modes on Keras 3.

The public API lives at the top level (`import lite_launcher as ll; ll.Task`, ...). Names are
resolved lazily so that `import lite_launcher` (and `lite-train --help`) does not import
TensorFlow until something that needs it is used.
"""

import importlib

__version__ = "0.1.0"

# Public name -> module that defines it.
_EXPORTS = {
    # TFM's `tfm.core` (task_factory, train_lib, exp_factory) for its tutorials' lines
    "core": "lite_launcher.core",
    # configs
    "Config": "lite_launcher.base_config",
    "OneOfConfig": "lite_launcher.base_config",
    "ConfigError": "lite_launcher.base_config",
    "ExperimentConfig": "lite_launcher.config",
    "TaskConfig": "lite_launcher.config",
    "TrainerConfig": "lite_launcher.config",
    "RuntimeConfig": "lite_launcher.config",
    "DataConfig": "lite_launcher.config",
    "override_config": "lite_launcher.config",
    "OptimizationConfig": "lite_launcher.optimization",
    "OptimizerFactory": "lite_launcher.optimization",
    "register_optimizer_cls": "lite_launcher.optimization",
    "register_learning_rate_cls": "lite_launcher.optimization",
    "register_warmup_cls": "lite_launcher.optimization",
    # registries; the lookups come with the built-in experiments registered
    "register_config_factory": "lite_launcher.registry",
    "get_exp_config": "lite_launcher.registry_imports",
    "registered_experiments": "lite_launcher.registry_imports",
    "register_task_cls": "lite_launcher.registry",
    "get_task": "lite_launcher.registry_imports",
    # task / trainer / controller / experiment
    "Task": "lite_launcher.task",
    "Trainer": "lite_launcher.trainer",
    "Controller": "lite_launcher.controller",
    "ExperimentRunner": "lite_launcher.experiment",
    "run_experiment": "lite_launcher.experiment",
    # the errors the driver reports in one line (TensorFlow-free)
    "ModelDirLockedError": "lite_launcher.errors",
    "ModelDirWriteError": "lite_launcher.errors",
    "CheckpointWriteError": "lite_launcher.errors",
    "TrainingDivergedError": "lite_launcher.errors",
    "NoReadableCheckpointError": "lite_launcher.errors",
    "BestCheckpointExporter": "lite_launcher.exporter",
    "InputReader": "lite_launcher.input_reader",
    "get_distribution_strategy": "lite_launcher.strategy",
    "define_flags": "lite_launcher.flags",
    "parse_configuration": "lite_launcher.train_utils",
    "serialize_config": "lite_launcher.train_utils",
    "ExperimentParser": "lite_launcher.train_utils",
    "ParseConfigOptions": "lite_launcher.train_utils",
    "SummaryManager": "lite_launcher.summaries",
    "create_trainer": "lite_launcher.experiment",
    "maybe_create_best_ckpt_exporter": "lite_launcher.exporter",
    "get_train_actions": "lite_launcher.actions",
    "get_eval_actions": "lite_launcher.actions",
    "strategy_from_runtime": "lite_launcher.strategy",
    "set_mixed_precision_policy": "lite_launcher.strategy",
    "export_saved_model": "lite_launcher.export",
    "convert_checkpoint": "lite_launcher.convert",
    "is_tfm_checkpoint": "lite_launcher.tfm_checkpoint",
    "TfmResumingCheckpointManager": "lite_launcher.checkpoints",
    # TFM's vision train.py helpers (train_utils / summary_manager), for forked drivers
    "save_gin_config": "lite_launcher.train_utils",
    "maybe_build_eval_summary_manager": "lite_launcher.summaries",
    "learning_rate_value": "lite_launcher.optimization",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'lite_launcher' has no attribute {name!r}")
    module = importlib.import_module(module_name)
    # A submodule exported by name (`core`: `import lite_launcher as tfm; tfm.core...`).
    value = module if module_name == f"{__name__}.{name}" else getattr(module, name)
    globals()[name] = value  # cache: later lookups skip __getattr__
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
