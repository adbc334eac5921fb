"""The experiment configs, with TFM's field names and defaults (official/core/config_definitions).

Re-exports the config base (`Config`, `OneOfConfig`, `ConfigError`, override helpers) so users
need one import.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence, Union

from lite_launcher.core.base_config import (  # noqa: F401  (re-exported)
    Config, ConfigError, ConfigRestrictionError, OneOfConfig, load_config_file, override_config,
    parse_params_override, validate_once)
from lite_launcher.optimization import OptimizationConfig

# ---------------------------------------------------------------------------
# The experiment configs (TFM's official/core/config_definitions.py).
# ---------------------------------------------------------------------------



@dataclasses.dataclass
class DataConfig(Config):
    """How to build one dataset. Field names and defaults follow TFM's DataConfig."""

    input_path: Union[Sequence[str], str] = ""
    tfds_name: str = ""
    tfds_split: str = ""
    global_batch_size: int = 0
    is_training: Optional[bool] = None
    drop_remainder: bool = True
    shuffle_buffer_size: int = 100
    cache: bool = False
    cycle_length: Optional[int] = None
    block_length: int = 1
    deterministic: Optional[bool] = None
    sharding: bool = True
    seed: Optional[int] = None
    prefetch_buffer_size: Optional[int] = None
    file_type: str = "tfrecord"
    # tf.data options TFM sets on the dataset (InputReader applies them).
    autotune_algorithm: Optional[str] = None
    ram_budget: Optional[int] = None
    # TFM's TensorFlow Datasets and tf.data service fields. The tfds_* fields are read with
    # tfds_name (InputReader, the `tfds` extra); the service only when both
    # enable_tf_data_service and tf_data_service_address are set (refused here), so every
    # other value is accepted and changes nothing, as in TFM.
    enable_tf_data_service: bool = False
    tf_data_service_address: Optional[str] = None
    tf_data_service_job_name: Optional[str] = None
    tfds_data_dir: str = ""
    tfds_as_supervised: bool = False
    tfds_skip_decoding_feature: str = ""
    enable_shared_tf_data_service_between_parallel_trainers: bool = False
    apply_tf_data_service_before_batching: bool = False
    trainer_id: Optional[str] = None

    AUTOTUNE_ALGORITHMS = ("DEFAULT", "HILL_CLIMB", "GRADIENT_DESCENT", "MAX_PARALLELISM",
                           "STAGE_BASED")

    def _validate(self):
        if self.global_batch_size < 0:
            raise ConfigError(
                f"global_batch_size ({self.global_batch_size}) must be >= 0.")
        if self.block_length < 1:
            raise ConfigError(f"block_length ({self.block_length}) must be >= 1.")
        if self.enable_tf_data_service and self.tf_data_service_address:
            raise ConfigError(
                f"enable_tf_data_service with tf_data_service_address "
                f"{self.tf_data_service_address!r}: the tf.data service is not implemented by "
                f"lite_launcher; remove tf_data_service_address (or set "
                f"enable_tf_data_service: false) to read the files directly.")
        if (self.autotune_algorithm is not None
                and self.autotune_algorithm not in self.AUTOTUNE_ALGORITHMS):
            raise ConfigError(
                f"autotune_algorithm {self.autotune_algorithm!r} is not one of "
                f"{', '.join(self.AUTOTUNE_ALGORITHMS)}.")
        if self.ram_budget is not None and self.ram_budget < 0:
            raise ConfigError(f"ram_budget ({self.ram_budget}) must be >= 0 (GiB).")


@dataclasses.dataclass
class RuntimeConfig(Config):
    """Where and how to run. Field names and defaults follow TFM's RuntimeConfig."""

    distribution_strategy: str = "mirrored"
    enable_xla: bool = False
    gpu_thread_mode: Optional[str] = None
    dataset_num_private_threads: Optional[int] = None
    per_gpu_thread_count: int = 0
    tpu: Optional[str] = None
    num_gpus: int = 0
    worker_hosts: Optional[str] = None
    task_index: int = -1
    all_reduce_alg: Optional[str] = None
    num_packs: int = 1
    mixed_precision_dtype: Optional[str] = None
    loss_scale: Optional[Union[str, float]] = None
    run_eagerly: bool = False
    batchnorm_spatial_persistent: bool = False
    # TFM's TPU-only fields: read only under distribution_strategy 'tpu', where lite refuses
    # any value but the default (TPUStrategy is built with TFM's defaults).
    tpu_enable_xla_dynamic_padder: Optional[bool] = None
    num_cores_per_replica: int = 1
    default_shard_dim: int = -1
    use_tpu_mp_strategy: bool = False
    # lite_launcher addition (off by default): the driver calls
    # tf.config.experimental.enable_op_determinism() and seeds Python, NumPy and TensorFlow
    # with 0, so that a run (and a resumed run) gives bit-identical results on CPU.
    deterministic_ops: bool = False
    # lite_launcher addition: under multi_worker_mirrored, how long a worker waits for a peer
    # that never starts (cluster registration; TensorFlow's default is an hour) or stops
    # sending heartbeats before it exits with one line naming that task.
    cluster_failure_timeout_s: float = 120.0

    def _validate(self):
        if not self.cluster_failure_timeout_s > 0:
            raise ConfigError(
                f"runtime.cluster_failure_timeout_s ({self.cluster_failure_timeout_s!r}) must "
                f"be a positive number of seconds.")
        if self.mixed_precision_dtype not in (None, "float32", "float16", "bfloat16"):
            raise ConfigError(
                f"runtime.mixed_precision_dtype {self.mixed_precision_dtype!r} is not one of "
                f"float32, float16, bfloat16.")
        if isinstance(self.loss_scale, str) and self.loss_scale != "dynamic":
            raise ConfigError(
                f"runtime.loss_scale {self.loss_scale!r} must be 'dynamic' or a number.")
        if isinstance(self.loss_scale, float) and not self.loss_scale > 0:
            raise ConfigError(
                f"runtime.loss_scale ({self.loss_scale}) must be a positive number or "
                f"'dynamic'.")
        if self.distribution_strategy == "tpu":
            defaults = RuntimeConfig()
            for name in ("tpu_enable_xla_dynamic_padder", "num_cores_per_replica",
                         "default_shard_dim", "use_tpu_mp_strategy"):
                if getattr(self, name) != getattr(defaults, name):
                    raise ConfigError(
                        f"runtime.{name} = {getattr(self, name)!r} is not implemented by "
                        f"lite_launcher's TPU strategy; remove it or set it back to "
                        f"{getattr(defaults, name)!r}.")


@dataclasses.dataclass
class TrainerConfig(Config):
    """How to train and evaluate. Field names and defaults follow TFM's TrainerConfig."""

    optimizer_config: OptimizationConfig = dataclasses.field(default_factory=OptimizationConfig)
    train_tf_while_loop: bool = True
    train_tf_function: bool = True
    eval_tf_function: bool = True
    eval_tf_while_loop: bool = False
    allow_tpu_summary: bool = False
    steps_per_loop: int = 1000
    summary_interval: int = 1000
    checkpoint_interval: int = 1000
    max_to_keep: int = 5
    continuous_eval_timeout: int = 60 * 60
    train_steps: int = 0
    validation_steps: int = -1
    validation_interval: int = 1000
    best_checkpoint_export_subdir: str = ""
    best_checkpoint_eval_metric: str = ""
    best_checkpoint_metric_comp: str = "higher"
    loss_upper_bound: float = 1e6
    recovery_begin_steps: int = 0
    recovery_max_trials: int = 0
    validation_summary_subdir: str = "validation"
    preemption_on_demand_checkpoint: bool = True
    # lite_launcher additions (off by default, so TFM configs behave as before).
    checkpoint_train_iterator: bool = False
    continuous_eval_all_checkpoints: bool = False

    def validate_loop_options(self) -> None:
        """Checks that each tf.while_loop inner loop runs inside a tf.function.

        Part of `validate()`; the Trainer also calls it, for a config built in code.
        """
        if self.train_tf_while_loop and not self.train_tf_function:
            raise ConfigError(
                "trainer.train_tf_while_loop requires trainer.train_tf_function: set "
                "train_tf_function=true or train_tf_while_loop=false.")
        if self.eval_tf_while_loop and not self.eval_tf_function:
            raise ConfigError(
                "trainer.eval_tf_while_loop requires trainer.eval_tf_function: set "
                "eval_tf_function=true or eval_tf_while_loop=false.")

    def validate_for_strategy(self, parameter_servers: bool, evaluates: bool = True) -> None:
        """Checks the settings that depend on the strategy, which the caller knows (the config
        need not name it): under parameter servers the coordinator schedules only
        tf.functions, per-worker iterators cannot be saved, and an evaluation is one
        tf.while_loop of a fixed length."""
        if not parameter_servers:
            return
        if not (self.train_tf_function and self.eval_tf_function):
            raise ConfigError(
                "The parameter_server strategy needs trainer.train_tf_function=true and "
                "trainer.eval_tf_function=true.")
        if self.checkpoint_train_iterator:
            raise ConfigError(
                "trainer.checkpoint_train_iterator is not supported with the "
                "parameter_server strategy (per-worker iterators cannot be saved).")
        if evaluates and self.validation_steps == -1:
            raise ConfigError(
                "The parameter_server strategy evaluates a fixed number of steps: set "
                "trainer.validation_steps > 0 (it is -1, the whole validation set).")

    def _validate(self):
        if self.steps_per_loop < 1:
            raise ConfigError(
                f"trainer.steps_per_loop ({self.steps_per_loop}) must be a positive integer.")
        if self.summary_interval < 1:
            raise ConfigError(
                f"trainer.summary_interval ({self.summary_interval}) must be a positive "
                f"integer (a multiple of trainer.steps_per_loop, {self.steps_per_loop}).")
        if self.summary_interval % self.steps_per_loop:
            raise ConfigError(
                f"trainer.summary_interval ({self.summary_interval}) must be a multiple of "
                f"trainer.steps_per_loop ({self.steps_per_loop}).")
        if self.checkpoint_interval is not None and self.checkpoint_interval < 0:
            raise ConfigError(
                f"trainer.checkpoint_interval ({self.checkpoint_interval}) must be >= 0.")
        if self.best_checkpoint_metric_comp not in ("higher", "lower"):
            raise ConfigError(
                f"trainer.best_checkpoint_metric_comp {self.best_checkpoint_metric_comp!r} "
                f"must be 'higher' or 'lower'.")
        if self.validation_steps == 0 or self.validation_steps < -1:
            raise ConfigError(
                f"trainer.validation_steps ({self.validation_steps}) must be > 0, or -1 to "
                f"evaluate the whole validation set.")
        if self.validation_steps == -1 and self.eval_tf_while_loop:
            raise ConfigError(
                "trainer.validation_steps is -1 (whole dataset) but trainer.eval_tf_while_loop "
                "is true: a tf.while_loop needs a fixed number of steps; set validation_steps "
                "> 0 or eval_tf_while_loop=false.")
        self.validate_loop_options()
        if self.train_steps < 0:
            raise ConfigError(f"trainer.train_steps ({self.train_steps}) must be >= 0.")
        if self.validation_interval < 1:
            raise ConfigError(
                f"trainer.validation_interval ({self.validation_interval}) must be >= 1.")
        if self.max_to_keep is not None and self.max_to_keep < 1:
            raise ConfigError(f"trainer.max_to_keep ({self.max_to_keep}) must be >= 1.")


@dataclasses.dataclass
class DifferentialPrivacyConfig(Config):
    """TFM's official.modeling.privacy.configs.DifferentialPrivacyConfig (not implemented)."""

    clipping_norm: float = 100000000.0
    noise_multiplier: float = 0.0


@dataclasses.dataclass
class TaskConfig(Config):
    """What to train. Tasks subclass it and add their own fields."""

    init_checkpoint: str = ""
    model: Optional[Config] = None
    train_data: DataConfig = dataclasses.field(default_factory=DataConfig)
    validation_data: DataConfig = dataclasses.field(default_factory=DataConfig)
    name: Optional[str] = None
    differential_privacy_config: Optional[DifferentialPrivacyConfig] = None
    # TFM writes image-valued logs of a task as image summaries when this is set; no lite
    # task logs images, so it is accepted either way.
    allow_image_summary: bool = False

    def check_extras(self, mode: str) -> None:
        """Refuses, in one line (`errors.MissingExtraError`), an optional package the task
        needs in run `mode` that is not installed; the driver calls it before building
        anything. None here; a task with an extra overrides it."""

    def _validate(self):
        if self.differential_privacy_config is not None:
            raise ConfigError(
                "task.differential_privacy_config is not implemented by lite_launcher (TFM "
                "clips and noises the gradients with it); remove it or set it to null.")


@dataclasses.dataclass
class ExperimentConfig(Config):
    """The whole experiment: task, trainer and runtime."""

    task: TaskConfig = dataclasses.field(default_factory=TaskConfig)
    trainer: TrainerConfig = dataclasses.field(default_factory=TrainerConfig)
    runtime: RuntimeConfig = dataclasses.field(default_factory=RuntimeConfig)

    def _validate(self):
        # TFM's experiments that set `task.train_data.is_training` restrict it to stay set
        # (`restrictions`); lite has none, so `get_exp_config` marks such configs instead
        # (copies and `replace` keep the mark). A null there reads the training data as
        # evaluation data (no shuffling, no repeat).
        if not self.__dict__.get("_lite_train_data_sets_is_training", False):
            return
        data = getattr(self.task, "train_data", None)
        if isinstance(data, DataConfig) and data.is_training is None:
            raise ConfigRestrictionError(
                "task.train_data.is_training is null; set it to true: null would read the "
                "training data as evaluation data (TFM's experiments refuse it too).")


def validate_for_trainer(config, *, parameter_servers: bool, builds_train_data: bool,
                         builds_validation_data: bool) -> None:
    """The checks a `Trainer` makes of the config it is given, which may have been built in
    code and never validated: the `trainer` and `task` sections, the loop options, the
    strategy-dependent settings, and the data config of each dataset it builds itself."""
    for attribute in ("trainer", "task"):
        if getattr(config, attribute, None) is None:
            raise ConfigError(
                f"The trainer requires the configuration to have a `{attribute}` section; "
                f"got {type(config).__name__} without it.")
    config.trainer.validate_loop_options()
    # validation_steps is the runner's to check: evaluate(-1) itself is refused by the loop.
    config.trainer.validate_for_strategy(parameter_servers, evaluates=False)
    if builds_train_data and getattr(config.task, "train_data", None) is None:
        raise ConfigError(
            "The trainer needs `task.train_data` to build the training dataset (or pass "
            "train_dataset=, or train=False).")
    if builds_validation_data and getattr(config.task, "validation_data", None) is None:
        raise ConfigError(
            "The trainer needs `task.validation_data` to build the validation dataset (or "
            "pass validation_dataset=, or evaluate=False).")
