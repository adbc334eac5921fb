"""Configs: TFM's fields and defaults, strict overrides in TFM's order, round trips, validation."""

import dataclasses
import json
import logging
import os
import types
from typing import Dict, List, Optional, Sequence, Tuple, Union

import pytest
import yaml

import lite_launcher as ll
from lite_launcher.core import registry
from lite_launcher.core.base_config import (Config, ConfigError, OneOfConfig, load_config_file,
                                            override_config, parse_params_override,
                                            UnknownConfigKeyError)
from lite_launcher.core.config_definitions import (DataConfig, ExperimentConfig, RuntimeConfig,
                                                   TaskConfig, TrainerConfig)
from lite_launcher.vision.configs.backbones import BUILT_BACKBONE_TYPES

# A representative set of TFM's defaults (official/core/config_definitions.py, TFM 2.20).
TFM_DEFAULTS = {
    DataConfig: dict(input_path="", tfds_name="", tfds_split="", global_batch_size=0,
                     is_training=None, drop_remainder=True, shuffle_buffer_size=100,
                     cache=False, cycle_length=None, block_length=1, deterministic=None,
                     sharding=True, seed=None, prefetch_buffer_size=None),
    RuntimeConfig: dict(distribution_strategy="mirrored", enable_xla=False, num_gpus=0,
                        tpu=None, worker_hosts=None, task_index=-1, all_reduce_alg=None,
                        num_packs=1, mixed_precision_dtype=None, loss_scale=None,
                        run_eagerly=False, per_gpu_thread_count=0),
    TrainerConfig: dict(train_tf_while_loop=True, train_tf_function=True,
                        eval_tf_function=True, eval_tf_while_loop=False,
                        allow_tpu_summary=False, steps_per_loop=1000, summary_interval=1000,
                        checkpoint_interval=1000, max_to_keep=5, continuous_eval_timeout=3600,
                        train_steps=0, validation_steps=-1, validation_interval=1000,
                        best_checkpoint_export_subdir="", best_checkpoint_eval_metric="",
                        best_checkpoint_metric_comp="higher", loss_upper_bound=1e6,
                        recovery_begin_steps=0, recovery_max_trials=0,
                        validation_summary_subdir="validation",
                        preemption_on_demand_checkpoint=True),
    TaskConfig: dict(init_checkpoint="", model=None, name=None),
}


# ----- fields and defaults -----------------------------------------------------------------


@pytest.mark.parametrize("cls", list(TFM_DEFAULTS), ids=lambda c: c.__name__)
def test_defaults_match_tfm(cls):
    config = cls()
    got = {name: getattr(config, name) for name in TFM_DEFAULTS[cls]}
    assert got == TFM_DEFAULTS[cls]


def test_structure_of_task_and_experiment_configs():
    assert TaskConfig.field_names()[:5] == ["init_checkpoint", "model", "train_data",
                                            "validation_data", "name"]
    task = TaskConfig()
    assert isinstance(task.train_data, DataConfig) and isinstance(task.validation_data,
                                                                  DataConfig)
    assert task.train_data is not task.validation_data
    assert ExperimentConfig.field_names() == ["task", "trainer", "runtime"]
    experiment = ExperimentConfig()
    assert isinstance(experiment.trainer.optimizer_config, ll.OptimizationConfig)
    assert experiment.trainer.optimizer_config.ema is None
    assert isinstance(experiment.runtime, RuntimeConfig)
    # Fresh defaults per instance: no shared mutable sub-configs.
    assert ExperimentConfig().task.train_data is not experiment.task.train_data


TFM_SNAPSHOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data",
                            "tfm_2_20_config_defaults.json")

# TFM 2.20 fields lite_launcher does not have (README, "Differences from TFM").
TFM_FIELDS_NOT_IN_LITE = {
    "OptimizerConfig": {"slide", "adafactor", "adafactor_keras"},
}
# lite_launcher's own fields (off by default).
LITE_FIELDS_NOT_IN_TFM = {
    "DataConfig": {"file_type"},
    "RuntimeConfig": {"deterministic_ops", "cluster_failure_timeout_s"},
    "TrainerConfig": {"checkpoint_train_iterator", "continuous_eval_all_checkpoints"},
    "OptimizerConfig": {"lion"},
}


def _tfm_fields(snapshot, name):
    """A TFM class's fields with their defaults, inherited ones included."""
    entry = snapshot[name]
    fields = {}
    for base in entry["bases"]:
        if base in snapshot:
            fields.update(_tfm_fields(snapshot, base))
    fields.update(entry["fields"])
    return fields


def _lite_config_classes():
    from lite_launcher.core import config_definitions as config_lib
    from lite_launcher.optimization import configs as optimization_configs
    modules = (config_lib, optimization_configs)
    return {cls.__name__: cls for module in modules for cls in vars(module).values()
            if isinstance(cls, type) and issubclass(cls, Config) and cls.__module__ ==
            module.__name__}


def test_config_fields_and_defaults_match_the_tfm_2_20_snapshot():
    """Every TFM 2.20 config field (tests/data, made by make_tfm_defaults_snapshot.py) exists
    here with TFM's default, unless listed as a difference; and no unlisted field is added."""
    with open(TFM_SNAPSHOT) as f:
        snapshot = json.load(f)
    ours = _lite_config_classes()
    compared = 0
    for name in sorted(set(snapshot) & set(ours)):
        cls, tfm = ours[name], _tfm_fields(snapshot, name)
        instance = cls()
        missing = set(tfm) - set(cls.field_names()) - TFM_FIELDS_NOT_IN_LITE.get(name, set())
        assert not missing, f"{name} lacks TFM fields {sorted(missing)}"
        extra = set(cls.field_names()) - set(tfm) - LITE_FIELDS_NOT_IN_TFM.get(name, set())
        assert not extra, f"{name} has fields TFM does not: {sorted(extra)}"
        for field, default in tfm.items():
            if field not in cls.field_names():
                continue
            value = getattr(instance, field)
            if isinstance(default, dict) and "factory" in default:
                assert type(value).__name__ == default["factory"], f"{name}.{field}"
            elif not (isinstance(default, dict) and "expr" in default):
                same = value == default and isinstance(value, bool) == isinstance(default, bool)
                assert same, f"{name}.{field}: {value!r} here, {default!r} in TFM"
            compared += 1
    assert compared >= 200  # the snapshot really was compared
    covered = set(snapshot) & set(ours)
    assert {"DataConfig", "RuntimeConfig", "TrainerConfig", "TaskConfig", "ExperimentConfig",
            "OptimizationConfig", "OptimizerConfig", "LrConfig", "WarmupConfig", "EMAConfig",
            "LARSConfig", "StepCosineLrConfig", "PowerAndLinearDecayLrConfig"} <= covered


# ----- overrides ---------------------------------------------------------------------------


@dataclasses.dataclass
class LayerConfig(Config):
    units: int = 8
    activation: str = "relu"
    dropout: float = 0.0


@dataclasses.dataclass
class NetConfig(Config):
    layers: List[LayerConfig] = dataclasses.field(
        default_factory=lambda: [LayerConfig(units=16), LayerConfig(units=4, dropout=0.5)])
    input_shape: Tuple[int, ...] = (28, 28)
    name_and_size: Tuple[str, int] = ("net", 2)
    tags: Sequence[str] = ("a",)
    table: Dict[str, float] = dataclasses.field(default_factory=dict)
    head: Optional[LayerConfig] = None
    width: Union[int, str] = 1


@dataclasses.dataclass
class PickConfig(OneOfConfig):
    first: LayerConfig = dataclasses.field(default_factory=LayerConfig)
    second: NetConfig = dataclasses.field(default_factory=NetConfig)


@dataclasses.dataclass
class NetTaskConfig(TaskConfig):
    model: NetConfig = dataclasses.field(default_factory=NetConfig)
    pick: PickConfig = dataclasses.field(default_factory=PickConfig)
    ratios: List[float] = dataclasses.field(default_factory=lambda: [0.5])


def test_unknown_key_is_an_error_naming_the_dotted_path_and_valid_keys():
    config = ExperimentConfig()
    with pytest.raises(ConfigError) as error:
        config.override({"trainer": {"optimizer_config": {"learning_rat": {}}}})
    message = str(error.value)
    assert "'trainer.optimizer_config.learning_rat'" in message
    assert "Did you mean 'learning_rate'?" in message
    assert "Valid keys at this level: ema, learning_rate, optimizer, warmup." in message


def test_freeze_backbone_on_a_task_without_it_says_which_tasks_have_it():
    # TFM's tutorials set task.freeze_backbone; a task config without the field says where
    # TFM and lite have it, by assignment and by override alike.
    where = ("TFM has task.freeze_backbone on image classification, RetinaNet, Mask R-CNN, "
             "video classification and (newer TFM) semantic segmentation; lite on image "
             "classification, RetinaNet and semantic segmentation.")
    config = ll.get_exp_config("digits_mlp")
    with pytest.raises(UnknownConfigKeyError) as assigned:
        config.task.freeze_backbone = True
    with pytest.raises(UnknownConfigKeyError) as overridden:
        config.override({"task": {"freeze_backbone": True}})
    for error in (assigned, overridden):
        assert where in str(error.value) and len(str(error.value).splitlines()) == 1
    for name in ("image_classification", "retinanet", "semantic_segmentation"):
        assert ll.get_exp_config(name).task.freeze_backbone is False, name


def test_unknown_key_inside_a_list_of_configs_names_the_index():
    config = NetTaskConfig()
    with pytest.raises(ConfigError, match=r"'model\.layers\[1\]\.unit'.*Did you mean 'units'.*"
                                          r"Valid keys at this level: activation, dropout, "
                                          r"units\."):
        config.override({"model": {"layers": [{}, {"unit": 3}]}})


@pytest.mark.parametrize("override, pattern", [
    ({"trainer": {"train_steps": "10"}}, r"'trainer\.train_steps' expects int, got str"),
    ({"trainer": {"train_steps": 1.5}}, r"'trainer\.train_steps' expects int, got float"),
    ({"trainer": {"train_steps": True}}, r"'trainer\.train_steps' expects int, got bool"),
    ({"trainer": {"loss_upper_bound": "big"}},
     r"'trainer\.loss_upper_bound' expects float, got str"),
    ({"runtime": {"enable_xla": 1}}, r"'runtime\.enable_xla' expects bool, got int"),
    ({"task": {"init_checkpoint": 3}}, r"'task\.init_checkpoint' expects str, got int"),
    ({"task": {"train_data": {"input_path": 5}}},
     r"'task\.train_data\.input_path' expects Sequence\[str\] or str, got int"),
    ({"task": {"train_data": {"input_path": ["a", 2]}}},
     r"'task\.train_data\.input_path' expects Sequence\[str\] or str, got list"),
    ({"task": {"train_data": 3}}, r"'task\.train_data' expects a mapping for DataConfig"),
    ({"trainer": {"steps_per_loop": None}}, r"'trainer\.steps_per_loop' expects int, got None"),
    ({"runtime": {"loss_scale": [1]}}, r"'runtime\.loss_scale' expects str or float, got list"),
])
def test_wrong_type_is_an_error_naming_field_expected_and_given_type(override, pattern):
    with pytest.raises(ConfigError, match=pattern):
        ExperimentConfig().override(override)


def test_typed_containers_are_checked_item_by_item():
    config = NetConfig()
    with pytest.raises(ConfigError, match=r"'input_shape\[1\]' expects int, got str"):
        config.override({"input_shape": [3, "x"]})
    with pytest.raises(ConfigError, match=r"'name_and_size' expects 2 items"):
        config.override({"name_and_size": ["x"]})
    with pytest.raises(ConfigError, match=r"'table\.a' expects float, got str"):
        config.override({"table": {"a": "x"}})
    with pytest.raises(ConfigError, match=r"'tags' expects a list"):
        config.override({"tags": "abc"})
    config.override({"input_shape": [32, 32, 3], "name_and_size": ["big", 3],
                     "tags": ["x", "y"], "table": {"a": 1}, "width": "wide"})
    assert config.input_shape == (32, 32, 3)  # a tuple stays a tuple
    assert config.name_and_size == ("big", 3)
    assert config.tags == ("x", "y")
    assert config.table == {"a": 1.0} and isinstance(config.table["a"], float)
    assert config.width == "wide"


def test_int_is_accepted_and_converted_where_a_float_is_expected():
    config = ExperimentConfig()
    config.override({"trainer": {"loss_upper_bound": 5}, "runtime": {"loss_scale": 128}})
    assert config.trainer.loss_upper_bound == 5.0
    assert isinstance(config.trainer.loss_upper_bound, float)
    assert config.runtime.loss_scale == 128.0 and isinstance(config.runtime.loss_scale, float)
    config.override({"runtime": {"loss_scale": "dynamic"}})
    assert config.runtime.loss_scale == "dynamic"


def test_nested_configs_override_field_by_field_in_place():
    config = ExperimentConfig()
    train_data = config.task.train_data
    config.override({"task": {"train_data": {"global_batch_size": 32}}})
    config.override({"task": {"train_data": {"is_training": True}}})
    assert config.task.train_data is train_data  # the same object, updated
    assert (train_data.global_batch_size, train_data.is_training) == (32, True)
    assert train_data.shuffle_buffer_size == 100  # untouched fields keep their values


def test_lists_of_configs_of_the_same_length_override_each_item_field_by_field():
    config = NetConfig()
    config.override({"layers": [{"activation": "gelu"}, {"units": 2}]})
    assert config.layers == [LayerConfig(units=16, activation="gelu"),
                             LayerConfig(units=2, dropout=0.5)]
    # A different length rebuilds the list from the item type's defaults.
    config.override({"layers": [{"units": 3}, {}, {"dropout": 0.1}]})
    assert config.layers == [LayerConfig(units=3), LayerConfig(), LayerConfig(dropout=0.1)]


def test_oneof_type_chooses_the_sub_config_and_only_it_is_serialised():
    optimization = ll.OptimizationConfig()
    optimization.override({"optimizer": {"type": "adam", "adam": {"beta_1": 0.8}},
                           "learning_rate": {"type": "cosine",
                                             "cosine": {"initial_learning_rate": 0.2,
                                                        "decay_steps": 100}}})
    assert optimization.optimizer.get().beta_1 == 0.8
    assert optimization.optimizer.get() is optimization.optimizer.adam
    as_dict = optimization.as_dict()
    assert set(as_dict["optimizer"]) == {"type", "adam"}
    assert as_dict["learning_rate"]["cosine"]["decay_steps"] == 100
    assert as_dict["warmup"] == {"type": None}
    with pytest.raises(ConfigError, match=r"Unknown value 'adamm' for 'optimizer\.type'\. "
                                          r"Did you mean 'adam'\?"):
        optimization.override({"optimizer": {"type": "adamm"}})


def test_override_with_a_config_instance_and_optional_sub_config_created_from_its_type():
    config = ExperimentConfig()
    trainer = TrainerConfig(train_steps=7)
    config.override({"trainer": trainer})
    assert config.trainer.train_steps == 7 and config.trainer is not trainer
    config.override(ExperimentConfig(runtime=RuntimeConfig(num_gpus=2)))
    assert config.runtime.num_gpus == 2 and config.trainer.train_steps == 0

    config.override({"trainer": {"optimizer_config": {"ema": {"average_decay": 0.5}}}})
    ema = config.trainer.optimizer_config.ema
    assert type(ema).__name__ == "EMAConfig"
    assert (ema.average_decay, ema.dynamic_decay) == (0.5, True)  # others: EMAConfig defaults
    config.override({"trainer": {"optimizer_config": {"ema": None}}})
    assert config.trainer.optimizer_config.ema is None


def test_non_strict_override_adds_unknown_keys_and_serialises_them():
    config = ExperimentConfig()
    config.override({"task": {"extra_field": 3, "model": {"depth": 2}},
                     "trainer": {"train_steps": 4}}, is_strict=False)
    assert config.task.extra_field == 3
    assert config.task.model.depth == 2
    assert config.trainer.train_steps == 4
    as_dict = config.as_dict()
    assert as_dict["task"]["extra_field"] == 3 and as_dict["task"]["model"] == {"depth": 2}
    again = ExperimentConfig().override(yaml.safe_load(config.to_yaml()), is_strict=False)
    assert again.as_dict() == as_dict
    with pytest.raises(ConfigError, match=r"'task\.extra_field'"):
        ExperimentConfig().override({"task": {"extra_field": 3}})
    with pytest.raises(ConfigError, match="name of a TaskConfig attribute"):
        ExperimentConfig().override({"task": {"override": 1}}, is_strict=False)


def test_replace_copies_and_from_dict_builds_from_defaults():
    config = ExperimentConfig()
    changed = config.replace(trainer={"train_steps": 9})
    assert changed.trainer.train_steps == 9 and config.trainer.train_steps == 0
    built = ExperimentConfig.from_dict({"runtime": {"num_gpus": 1}})
    assert built == ExperimentConfig(runtime=RuntimeConfig(num_gpus=1))
    assert ExperimentConfig.from_dict(config.as_dict()) == config


# ----- files and --params_override ---------------------------------------------------------


def _args(**kwargs):
    defaults = dict(experiment=None, config_file=None, tpu=None, params_override=None)
    defaults.update(kwargs)
    return types.SimpleNamespace(**defaults)


@pytest.fixture
def net_experiment():
    """A registered experiment with lists, tuples and oneofs; unregistered afterwards."""
    name = "test_config_net_experiment"

    @registry.register_config_factory(name)
    def factory():
        config = ExperimentConfig(task=NetTaskConfig())
        config.override({
            "task": {"pick": {"type": "second", "second": {"layers": [{"units": 5}]}},
                     "ratios": [0.25, 0.75],
                     "train_data": {"global_batch_size": 16, "is_training": True}},
            "trainer": {"steps_per_loop": 10, "summary_interval": 20,
                        "optimizer_config": {
                            "optimizer": {"type": "sgd", "sgd": {"momentum": 0.9}},
                            "learning_rate": {"type": "stepwise", "stepwise": {
                                "boundaries": [10, 20], "values": [0.1, 0.01, 0.001]}},
                            "ema": {"average_decay": 0.999}}},
            "runtime": {"loss_scale": 256}})
        return config

    yield name
    registry._EXPERIMENTS.pop(name, None)  # pylint: disable=protected-access


def test_override_order_default_then_config_files_then_params_override(tmp_path,
                                                                       net_experiment):
    first = tmp_path / "first.yaml"
    first.write_text("trainer:\n  train_steps: 100\n  max_to_keep: 2\n"
                     "task:\n  init_checkpoint: /from/yaml\n")
    second = tmp_path / "second.json"
    second.write_text(json.dumps({"trainer": {"train_steps": 200},
                                  "task": {"model": {"input_shape": [8, 8]}}}))
    params = ll.parse_configuration(_args(
        experiment=net_experiment, config_file=[str(first), str(second)],
        params_override="trainer.train_steps=300,task.init_checkpoint='/from/flag'"))
    assert params.trainer.train_steps == 300  # params_override beats both files
    assert params.trainer.max_to_keep == 2  # first file, untouched afterwards
    assert params.task.init_checkpoint == "/from/flag"
    assert params.task.model.input_shape == (8, 8)  # the JSON file
    assert params.trainer.steps_per_loop == 10  # the experiment's own default
    assert params.trainer.validation_steps == -1  # TFM's default

    same = override_config(registry.get_exp_config(net_experiment),
                           [str(first), str(second)],
                           "trainer.train_steps=300,task.init_checkpoint='/from/flag'")
    assert same == params


@pytest.mark.parametrize("text", [
    "trainer:\n  train_steps: 5\n  optimizer_config: {learning_rate: {type: constant}}",
    '{"trainer": {"train_steps": 5, "optimizer_config": {"learning_rate": '
    '{"type": "constant"}}}}',
    "trainer.train_steps=5,trainer.optimizer_config.learning_rate.type='constant'",
    "trainer.train_steps=5, trainer.optimizer_config.learning_rate.type=constant",
])
def test_params_override_forms_agree(text):
    assert parse_params_override(text) == {
        "trainer": {"train_steps": 5,
                    "optimizer_config": {"learning_rate": {"type": "constant"}}}}


def test_params_override_from_a_yaml_file_path(tmp_path):
    path = tmp_path / "override.yaml"
    path.write_text("runtime:\n  num_gpus: 3\n")
    config = override_config(ExperimentConfig(), params_override=str(path))
    assert config.runtime.num_gpus == 3


def test_params_override_values_are_yaml_typed():
    parsed = parse_params_override(
        "a.lr=1e-4,a.big=3E5,a.n=7,a.flag=true,a.none=null,a.s='x,y',a.l=[1, 2],"
        "a.path=/a/b=c,a.neg=-2.5e-3,a.dot=.5e1,a.word=e5")
    assert parsed == {"a": {"lr": 1e-4, "big": 3e5, "n": 7, "flag": True, "none": None,
                            "s": "x,y", "l": [1, 2], "path": "/a/b=c", "neg": -2.5e-3,
                            "dot": 5.0, "word": "e5"}}
    assert isinstance(parsed["a"]["lr"], float)
    # The same in YAML form and in config files.
    assert parse_params_override("a: {lr: 1e-4}") == {"a": {"lr": 1e-4}}


@pytest.mark.parametrize("text, pattern", [
    ("trainer.train_steps=5,oops", r"item 'oops' is not of the form key=value"),
    ("a.b=1,a=2", r"sets 'a' and keys below it"),
    ("a=1,a.b=2", r"sets both 'a' and 'a\.b'"),
    ("a=1,a=2", r"sets 'a' and it twice"),
    ("missing_file.yaml", r"file 'missing_file\.yaml' does not exist"),
    ("[1, 2]", r"must be a mapping"),
    ("a: [1, 2", r"not valid YAML/JSON"),
])
def test_bad_params_override_is_a_one_line_config_error(text, pattern):
    with pytest.raises(ConfigError, match=pattern) as error:
        parse_params_override(text)
    assert "\n" not in str(error.value)


def test_config_file_errors_name_the_file(tmp_path):
    with pytest.raises(ConfigError, match=r"'.*nope\.yaml' does not exist"):
        load_config_file(str(tmp_path / "nope.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("trainer: [1, 2\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml' is not valid YAML/JSON"):
        load_config_file(str(bad))
    listing = tmp_path / "list.json"
    listing.write_text("[1, 2]")
    with pytest.raises(ConfigError, match=r"must hold a mapping at the top level, got list"):
        load_config_file(str(listing))
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_config_file(str(empty)) == {}


# ----- round trips -------------------------------------------------------------------------


def test_every_registered_experiment_round_trips_through_params_yaml(tmp_path, net_experiment):
    names = ll.registered_experiments()
    assert net_experiment in names and "digits_mlp" in names
    for name in names:
        original = ll.get_exp_config(name)
        path = ll.serialize_config(original, str(tmp_path / name))
        assert os.path.basename(path) == "params.yaml"
        with open(path) as f:
            text = f.read()
        loaded = ll.get_exp_config(name).override(yaml.safe_load(text))
        assert loaded == original, name
        assert loaded.to_yaml() == text, name  # serialising again gives the same file


def test_round_trip_keeps_lists_of_configs_tuples_and_the_chosen_oneof(tmp_path, net_experiment):
    original = ll.get_exp_config(net_experiment)
    original.override({"task": {"model": {"layers": [{"units": 1}, {"units": 2},
                                                     {"activation": "tanh"}]}}})
    path = tmp_path / "params.yaml"
    original.save_yaml(str(path))
    saved = yaml.safe_load(path.read_text())
    assert [layer["units"] for layer in saved["task"]["model"]["layers"]] == [1, 2, 8]
    assert saved["task"]["pick"] == {"type": "second", "second": saved["task"]["pick"]["second"]}
    assert saved["trainer"]["optimizer_config"]["ema"]["average_decay"] == 0.999
    loaded = ll.get_exp_config(net_experiment).override(saved)
    assert loaded == original
    assert loaded.task.pick.get().layers == [LayerConfig(units=5)]
    assert loaded.task.model.input_shape == (28, 28)
    # Also from a plain default config (no experiment factory) of the same classes.
    fresh = ExperimentConfig(task=NetTaskConfig()).override(saved)
    assert fresh.as_dict() == original.as_dict()


def test_as_dict_is_plain_data():
    as_dict = ExperimentConfig(task=NetTaskConfig()).as_dict()

    def walk(value):
        if isinstance(value, dict):
            return all(isinstance(k, str) and walk(v) for k, v in value.items())
        if isinstance(value, list):
            return all(walk(v) for v in value)
        return value is None or isinstance(value, (bool, int, float, str))

    assert walk(as_dict)
    assert as_dict["task"]["model"]["input_shape"] == [28, 28]


# ----- validate() --------------------------------------------------------------------------


@pytest.mark.parametrize("trainer, pattern", [
    (dict(steps_per_loop=0), r"trainer\.steps_per_loop \(0\) must be a positive integer"),
    (dict(steps_per_loop=100, summary_interval=150),
     r"trainer\.summary_interval \(150\) must be a multiple of trainer\.steps_per_loop \(100\)"),
    (dict(summary_interval=0), r"trainer\.summary_interval \(0\) must be a positive"),
    (dict(best_checkpoint_metric_comp="bigger"),
     r"best_checkpoint_metric_comp 'bigger' must be 'higher' or 'lower'"),
    (dict(eval_tf_while_loop=True),
     r"validation_steps is -1 .* but trainer\.eval_tf_while_loop is true"),
    (dict(train_tf_while_loop=True, train_tf_function=False),
     r"train_tf_while_loop requires trainer\.train_tf_function"),
    (dict(eval_tf_while_loop=True, eval_tf_function=False, validation_steps=5),
     r"eval_tf_while_loop requires trainer\.eval_tf_function"),
    (dict(validation_steps=0), r"validation_steps \(0\) must be > 0, or -1"),
    (dict(train_steps=-1), r"train_steps \(-1\) must be >= 0"),
    (dict(validation_interval=0), r"validation_interval \(0\) must be >= 1"),
    (dict(checkpoint_interval=-5), r"checkpoint_interval \(-5\) must be >= 0"),
    (dict(max_to_keep=0), r"max_to_keep \(0\) must be >= 1"),
])
def test_validate_rejects_bad_trainer_settings_before_training(trainer, pattern):
    config = ExperimentConfig()
    config.override({"trainer": trainer})
    with pytest.raises(ConfigError, match=pattern):
        config.validate()


@pytest.mark.parametrize("override, pattern", [
    ({"runtime": {"mixed_precision_dtype": "float8"}}, r"mixed_precision_dtype 'float8'"),
    ({"runtime": {"loss_scale": "auto"}}, r"loss_scale 'auto' must be 'dynamic'"),
    ({"runtime": {"loss_scale": -1}}, r"loss_scale \(-1\.0\) must be a positive number"),
    ({"task": {"train_data": {"global_batch_size": -8}}}, r"global_batch_size \(-8\)"),
    ({"trainer": {"optimizer_config": {"optimizer": {"type": "sgd"},
                                       "learning_rate": {"type": "stepwise"}}}},
     r"stepwise"),
])
def test_validate_reaches_runtime_data_and_optimizer_configs(override, pattern):
    config = ExperimentConfig().override(override)
    with pytest.raises(ConfigError, match=pattern):
        config.validate()


def _accepted_unchanged(config):
    """validate() passes and leaves every value as it was."""
    before = config.as_dict()
    assert config.validate() is None
    assert config.as_dict() == before
    return before


def test_validate_accepts_defaults_and_every_registered_experiment():
    _accepted_unchanged(ExperimentConfig())
    trainer = _accepted_unchanged(TrainerConfig(steps_per_loop=10, summary_interval=30,
                                                eval_tf_while_loop=True, validation_steps=4))
    assert (trainer["summary_interval"], trainer["validation_steps"]) == (30, 4)
    # The same TrainerConfig one step off is refused: validate checks what it accepted.
    with pytest.raises(ConfigError, match="must be a multiple"):
        TrainerConfig(steps_per_loop=10, summary_interval=35).validate()
    names = ll.registered_experiments()
    assert {"image_classification", "resnet_imagenet", "resnet_rs_imagenet",
            "mobilenet_imagenet", "deit_imagenet_pretrain"} <= set(names)
    for name in names:
        backbone = getattr(getattr(ll.get_exp_config(name).task, "model", None), "backbone",
                           None)
        # The 3D backbones (video) have their own one-of, every type of which is built.
        built = BUILT_BACKBONE_TYPES + ("resnet_3d", "resnet_3d_rs")
        if backbone is not None and backbone.type not in built:
            # An experiment on a backbone lite does not build yet (SpineNet, MobileDet): its
            # defaults are refused in one line naming the backbone.
            with pytest.raises(ConfigError, match="not built yet"):
                ll.get_exp_config(name).validate()
            continue
        _accepted_unchanged(ll.get_exp_config(name))
        # Each experiment's validate runs its checks (a bad runtime value is refused).
        broken = ll.get_exp_config(name)
        broken.runtime.mixed_precision_dtype = "float8"
        with pytest.raises(ConfigError, match="float8"):
            broken.validate()


def test_override_config_validates_after_overriding():
    with pytest.raises(ConfigError, match="must be a multiple"):
        override_config(ExperimentConfig(), params_override="trainer.steps_per_loop=300")
    config = override_config(ExperimentConfig(), params_override=(
        "trainer.steps_per_loop=250,trainer.summary_interval=500"))
    assert (config.trainer.steps_per_loop, config.trainer.summary_interval) == (250, 500)


def test_configs_with_unresolvable_string_annotations_still_override():
    # Classes local to a function, annotated by name (as under `from __future__ import
    # annotations`): the field falls back to its default's type.
    @dataclasses.dataclass
    class LocalInner(Config):
        size: int = 1

    @dataclasses.dataclass
    class LocalOuter(Config):
        inner: "LocalInner" = dataclasses.field(default_factory=LocalInner)
        count: "int" = 0

    config = LocalOuter().override({"inner": {"size": 3}, "count": 2})
    assert config == LocalOuter(inner=LocalInner(size=3), count=2)
    with pytest.raises(ConfigError, match=r"'inner\.sise'.*Did you mean 'size'"):
        config.override({"inner": {"sise": 3}})
    with pytest.raises(ConfigError, match=r"'count' expects int, got str"):
        config.override({"count": "2"})


def test_from_yaml_reads_a_file_strictly(tmp_path):
    path = tmp_path / "experiment.yaml"
    path.write_text("trainer:\n  train_steps: 11\n  loss_upper_bound: 1e3\n")
    config = ExperimentConfig.from_yaml(str(path))
    assert config.trainer.train_steps == 11 and config.trainer.loss_upper_bound == 1000.0
    path.write_text("trainer:\n  train_step: 11\n")
    with pytest.raises(ConfigError, match=r"'trainer\.train_step'.*Did you mean 'train_steps'"):
        ExperimentConfig.from_yaml(str(path))


def test_yaml_on_off_yes_no_are_strings_only_true_false_are_booleans():
    from lite_launcher.core import base_config

    parsed = base_config.parse_params_override(
        "runtime.distribution_strategy=off,trainer.train_tf_function=false")
    assert parsed == {"runtime": {"distribution_strategy": "off"},
                      "trainer": {"train_tf_function": False}}
    config = ll.ExperimentConfig()
    config.override(parsed)
    assert config.runtime.distribution_strategy == "off"
    assert base_config.load_yaml("a: yes\nb: True\nc: [on, 1e-3]") == {
        "a": "yes", "b": True, "c": ["on", 0.001]}


# ----- TFM's construction idioms, lock, exception types (issue 10, items 2 and 7) ----------


def _tfm_style_optimization_dict():
    return {"optimizer": {"type": "sgd", "sgd": {"momentum": 0.9}},
            "learning_rate": {"type": "stepwise",
                              "stepwise": {"boundaries": [10], "values": [0.1, 0.01]}}}


def test_a_dict_passed_positionally_builds_the_typed_sub_configs():
    config = ll.OptimizationConfig(_tfm_style_optimization_dict())
    assert isinstance(config.optimizer, ll.OptimizationConfig().optimizer.__class__)
    assert config.optimizer.type == "sgd" and config.optimizer.sgd.momentum == 0.9
    assert config.learning_rate.get().values == [0.1, 0.01]
    assert config.learning_rate.stepwise.boundaries == [10]
    # The same strict checks as `override`.
    with pytest.raises(KeyError, match=r"optimizer\.sgd\.momentun.*Did you mean 'momentum'"):
        ll.OptimizationConfig({"optimizer": {"type": "sgd", "sgd": {"momentun": 0.9}}})
    with pytest.raises(ConfigError, match=r"learning_rate\.constant\.learning_rate.*float"):
        ll.OptimizationConfig({"learning_rate": {"constant": {"learning_rate": "fast"}}})


def test_keyword_dicts_build_typed_sub_configs():
    config = ExperimentConfig(trainer={"train_steps": 7,
                                       "optimizer_config": _tfm_style_optimization_dict()},
                              task={"train_data": {"global_batch_size": 4}})
    assert isinstance(config.trainer, TrainerConfig) and config.trainer.train_steps == 7
    assert config.trainer.steps_per_loop == 1000  # the rest keeps TrainerConfig's defaults
    assert config.trainer.optimizer_config.optimizer.sgd.momentum == 0.9
    assert isinstance(config.task.train_data, DataConfig)
    assert config.task.train_data.global_batch_size == 4
    config.validate()
    with pytest.raises(KeyError, match=r"'trainer\.train_step'.*Did you mean 'train_steps'"):
        ExperimentConfig(trainer={"train_step": 7})
    with pytest.raises(ConfigError, match=r"'trainer'.*mapping for TrainerConfig"):
        ExperimentConfig(trainer="fast")


def test_experiment_config_rebuilt_from_its_own_as_dict():
    config = ExperimentConfig(trainer={"train_steps": 7,
                                       "optimizer_config": _tfm_style_optimization_dict()},
                              runtime={"loss_scale": 128})
    rebuilt = ExperimentConfig(**config.as_dict())
    assert rebuilt == config
    assert isinstance(rebuilt.trainer.optimizer_config.learning_rate.stepwise, type(
        config.trainer.optimizer_config.learning_rate.stepwise))
    # A task of its own class cannot come back from a plain dict: one error naming the key.
    own = ExperimentConfig(task=NetTaskConfig())
    with pytest.raises(KeyError, match=r"task.*pass an instance of it") as info:
        ExperimentConfig(**own.as_dict())
    assert "\n" not in str(info.value)


def test_assigning_a_dict_overrides_the_sub_config_in_place():
    config = ExperimentConfig()
    trainer = config.trainer
    config.trainer = {"train_steps": 11, "optimizer_config": {"optimizer": {"type": "adam"}}}
    assert config.trainer is trainer and trainer.train_steps == 11
    assert config.trainer.optimizer_config.optimizer.type == "adam"
    config.task.train_data = {"global_batch_size": 32, "is_training": True}
    assert isinstance(config.task.train_data, DataConfig)
    assert config.task.train_data.global_batch_size == 32
    assert config.task.train_data.drop_remainder is True
    config.trainer.optimizer_config.ema = {"average_decay": 0.5}  # an Optional sub-config
    assert config.trainer.optimizer_config.ema.average_decay == 0.5
    with pytest.raises(KeyError, match=r"'train_data\.global_batch'"):
        config.task.train_data = {"global_batch": 1}
    with pytest.raises(ConfigError, match=r"'train_steps' expects int"):
        config.trainer.train_steps = "many"
    config.task.validation_data = None  # None is stored as None, as TFM's
    assert config.task.validation_data is None
    other = TrainerConfig(train_steps=3)
    config.trainer = other  # a config of the declared type is stored as a copy, as TFM
    assert config.trainer == other and config.trainer is not other


def test_assigning_an_unknown_attribute_is_a_key_error_naming_the_fix():
    config = ExperimentConfig()
    with pytest.raises(KeyError, match=r"TrainerConfig has no config key 'train_step'\. Did "
                                       r"you mean 'train_steps'\?.*is_strict=False"):
        config.trainer.train_step = 3
    config.trainer.override({"my_key": 1}, is_strict=False)
    config.trainer.my_key = 2  # keys added by a non-strict override can be set
    assert config.trainer.as_dict()["my_key"] == 2


def test_lock_refuses_changes_with_tfm_semantics():
    config = ExperimentConfig(trainer={"train_steps": 5})
    assert config.lock() is config and config._locked  # pylint: disable=protected-access
    with pytest.raises(ValueError, match=r"ExperimentConfig is locked, so 'trainer' cannot"):
        config.trainer = {"train_steps": 6}
    with pytest.raises(ValueError, match="locked"):
        config.override({"runtime": {"num_gpus": 1}})
    with pytest.raises(ValueError, match="locked"):
        del config.runtime
    assert config.trainer.train_steps == 5 and config.runtime.num_gpus == 0
    changed = config.replace(trainer={"train_steps": 9})  # an unlocked, changed copy
    assert changed.trainer.train_steps == 9 and not changed._locked  # pylint: disable=protected-access
    changed.runtime = {"num_gpus": 2}
    assert config.trainer.train_steps == 5
    # As TFM's lock (one object's flag): a sub-config keeps its own state.
    config.trainer.lock()
    with pytest.raises(ValueError, match="TrainerConfig is locked"):
        config.trainer.train_steps = 1


def test_parse_configuration_locks_unless_lock_return_is_false(net_experiment):
    params = ll.parse_configuration(_args(experiment=net_experiment))
    with pytest.raises(ValueError, match="locked"):
        params.trainer = {"train_steps": 1}
    unlocked = ll.parse_configuration(_args(experiment=net_experiment), lock_return=False,
                                      print_return=False)
    unlocked.trainer = {"train_steps": 1}
    assert unlocked.trainer.train_steps == 1


def test_unknown_key_is_a_key_error_and_a_config_error_with_a_clean_message(capsys):
    with pytest.raises(KeyError) as info:
        ExperimentConfig().override({"trainer": {"bogus": 1}})
    assert isinstance(info.value, ConfigError)
    assert str(info.value).startswith("Unknown config key 'trainer.bogus'.")
    from lite_launcher.core import train_utils
    try:
        with pytest.raises(SystemExit) as exit_info:
            train_utils.exit_with_error(info.value)
    finally:
        logging.disable(logging.NOTSET)  # exit_with_error silences logging for the exit
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.startswith(
        "lite-train: error: Unknown config key 'trainer.bogus'.")


@dataclasses.dataclass
class _DumpConfig1(Config):
    a: int = 1
    b: str = "text"


@dataclasses.dataclass
class _DumpConfig2(Config):
    c: int = 2
    d: str = "text"
    e: _DumpConfig1 = dataclasses.field(default_factory=_DumpConfig1)


@dataclasses.dataclass
class _DumpConfig3(_DumpConfig2):
    g: Tuple[_DumpConfig1, ...] = (_DumpConfig1(),)


def test_replace_follows_the_instance_class_as_tfm_base_config_test():
    # TFM's base_config_test.test_replace: the sub-config's instance, not the declared type,
    # decides which keys an override may set.
    new = _DumpConfig2().replace(e={"a": 2})
    assert new.e.a == 2 and type(new.e) is _DumpConfig1
    new = _DumpConfig2(e=_DumpConfig2()).replace(e={"c": 4})
    assert new.e.c == 4 and type(new.e) is _DumpConfig2
    new = _DumpConfig3().replace(g=[{"a": 4, "b": "new text 3"}])
    assert type(new.g[0]) is _DumpConfig1 and (new.g[0].a, new.g[0].b) == (4, "new text 3")
    with pytest.raises(KeyError, match="e.a"):  # a _DumpConfig2 has no `a`
        _DumpConfig2(e=_DumpConfig2()).replace(e={"a": 1})
