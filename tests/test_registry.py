"""Registries: experiment factories, task classes, registry imports and entry-point plugins."""

import dataclasses
import importlib
import json
import os
import subprocess
import sys
import textwrap

import pytest

import lite_launcher as ll
from lite_launcher.core import registry
from lite_launcher.core.registry import RegistryError
from cli import lite_train_command, run_lite_train_in_process

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def clean_registry():
    """Removes whatever a test registers (experiments, tasks, imported modules)."""
    importlib.import_module("lite_launcher.common.registry_imports")  # built-ins first, so they stay
    experiments = dict(registry._EXPERIMENTS)  # pylint: disable=protected-access
    tasks = dict(registry._TASKS)  # pylint: disable=protected-access
    modules = set(sys.modules)
    yield
    registry._EXPERIMENTS.clear()  # pylint: disable=protected-access
    registry._EXPERIMENTS.update(experiments)  # pylint: disable=protected-access
    registry._TASKS.clear()  # pylint: disable=protected-access
    registry._TASKS.update(tasks)  # pylint: disable=protected-access
    for name in set(sys.modules) - modules:
        if name.startswith("regtest_"):
            del sys.modules[name]


@dataclasses.dataclass
class RegTestTaskConfig(ll.TaskConfig):
    width: int = 4


@dataclasses.dataclass
class RegTestChildTaskConfig(RegTestTaskConfig):
    depth: int = 1


class RegTestTask(ll.Task):
    pass


def test_get_exp_config_returns_a_fresh_config_each_call(clean_registry):
    shared = ll.ExperimentConfig()

    @ll.register_config_factory("regtest_fresh")
    def factory():
        return shared  # even a factory that hands out one object

    first = ll.get_exp_config("regtest_fresh")
    first.trainer.train_steps = 123
    first.task.train_data.override({"global_batch_size": 7})
    second = ll.get_exp_config("regtest_fresh")
    assert second is not first
    assert second.trainer.train_steps == 0
    assert second.task.train_data.global_batch_size == 0
    assert shared.trainer.train_steps == 0


def test_registered_experiments_lists_built_ins_and_new_names_sorted(clean_registry):
    @ll.register_config_factory("regtest_listed")
    def factory():
        return ll.ExperimentConfig()

    names = ll.registered_experiments()
    assert names == sorted(names)
    assert {"digits_mlp", "digits_cnn", "mlp_tiny", "cnn_small", "mock",
            "regtest_listed"} <= set(names)


def test_registering_an_experiment_twice_names_both_registrants(clean_registry):
    @ll.register_config_factory("regtest_twice")
    def first_factory():
        return ll.ExperimentConfig()

    with pytest.raises(KeyError) as error:  # TFM's type, and a RegistryError
        @ll.register_config_factory("regtest_twice")
        def second_factory():
            return ll.ExperimentConfig()

    assert isinstance(error.value, RegistryError)
    message = str(error.value)
    assert message.startswith("Experiment 'regtest_twice' is registered twice")
    assert "first_factory" in message and "second_factory" in message
    assert __file__ in message  # where each registrant lives
    assert ll.get_exp_config("regtest_twice") is not None  # the first one stays


def test_experiment_names_must_be_non_empty_strings():
    with pytest.raises(RegistryError, match="non-empty string"):
        ll.register_config_factory("")


def test_unknown_experiment_lists_known_names_and_the_closest_match():
    with pytest.raises(LookupError) as error:  # TFM's type
        ll.get_exp_config("digits_mpl")
    assert isinstance(error.value, ll.ConfigError)  # the CLI's one-line error, exit code 2
    message = str(error.value)
    assert "Unknown experiment 'digits_mpl'. Did you mean 'digits_mlp'?" in message
    for name in ("cnn_small", "digits_cnn", "digits_mlp", "mlp_tiny", "mock"):
        assert name in message
    assert "--registry_imports" in message


def test_get_task_builds_the_registered_task(clean_registry, tmp_path):
    ll.register_task_cls(RegTestTaskConfig)(RegTestTask)
    config = RegTestTaskConfig(width=9)
    task = ll.get_task(config, logging_dir=str(tmp_path), name="regtest_task")
    assert type(task) is RegTestTask
    assert task.task_config is config
    assert task.logging_dir == str(tmp_path)
    assert task.name == "regtest_task"
    default = ll.get_task(config)
    assert default.logging_dir == "" and default.name == "reg_test_task"
    # A config subclass without its own task uses its parent's (TFM needs its own entry).
    assert type(ll.get_task(RegTestChildTaskConfig())) is RegTestTask


def test_registering_a_task_config_twice_names_both_registrants(clean_registry):
    ll.register_task_cls(RegTestTaskConfig)(RegTestTask)

    class OtherRegTestTask(ll.Task):
        pass

    with pytest.raises(KeyError) as error:  # TFM's type, and a RegistryError
        ll.register_task_cls(RegTestTaskConfig)(OtherRegTestTask)
    assert isinstance(error.value, RegistryError)
    message = str(error.value)
    assert message.startswith("Task config RegTestTaskConfig is registered twice")
    assert "RegTestTask" in message and "OtherRegTestTask" in message


def test_unknown_task_config_lists_known_configs_and_the_closest_match():
    @dataclasses.dataclass
    class DigitTaskConfig(ll.TaskConfig):
        pass

    with pytest.raises(LookupError) as error:  # TFM's type
        ll.get_task(DigitTaskConfig())
    assert isinstance(error.value, ll.ConfigError)
    message = str(error.value)
    assert "No task registered for config DigitTaskConfig." in message
    assert "Did you mean 'DigitsTaskConfig'?" in message
    assert "WorkloadTaskConfig" in message


def test_register_and_lookup_store_path_keys_in_nested_folders():
    collection = {}
    registry.register(collection, "models/resnet/v1")(len)
    registry.register(collection, min)(max)  # any hashable key, stored as is
    assert collection == {"models": {"resnet": {"v1": len}}, min: max}
    assert registry.lookup(collection, "models/resnet/v1") is len
    assert registry.lookup(collection, "models/resnet") == {"v1": len}
    assert registry.lookup(collection, min) is max


def test_register_and_lookup_errors_are_tfm_types_with_one_line_messages():
    collection = {}
    registry.register(collection, "models/resnet")(len)
    with pytest.raises(KeyError) as twice:
        registry.register(collection, "models/resnet")(abs)
    assert str(twice.value).startswith("'models/resnet' is registered twice: by builtins.len")
    with pytest.raises(KeyError, match=r"'models/resnet' is already registered as builtins\.len"
                                       r", not a folder"):
        registry.register(collection, "models/resnet/v2")(abs)
    with pytest.raises(LookupError, match=r"'models/vgg' is not registered \(looking up "
                                          r"'models/vgg/v1'\); registered there: resnet\."):
        registry.lookup(collection, "models/vgg/v1")
    with pytest.raises(LookupError, match="is not registered"):
        registry.lookup(collection, abs)


# ----- registry imports and entry-point plugins ---------------------------------------------


def _write_module(directory, name, experiment):
    (directory / f"{name}.py").write_text(textwrap.dedent(f"""
        import lite_launcher as ll


        @ll.register_config_factory({experiment!r})
        def _factory():
            config = ll.ExperimentConfig()
            config.trainer.train_steps = 42
            return config
    """))


def _write_plugin(directory, module, entry_name="fake"):
    """A `fake_plugin` distribution (no install): importlib.metadata finds its dist-info."""
    dist_info = directory / "fake_plugin-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake_plugin\n"
                                        "Version: 0.1\n")
    (dist_info / "entry_points.txt").write_text(
        f"[{registry.ENTRY_POINT_GROUP}]\n{entry_name} = {module}\n")


def test_import_registry_modules_registers_their_experiments(clean_registry, tmp_path,
                                                             monkeypatch):
    _write_module(tmp_path, "regtest_imported", "regtest_imported_exp")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.import_registry_modules(["regtest_imported"])
    assert ll.get_exp_config("regtest_imported_exp").trainer.train_steps == 42
    with pytest.raises(RegistryError, match=r"--registry_imports module 'regtest_missing' "
                                            r"cannot be imported"):
        registry.import_registry_modules(["regtest_missing"])


def test_entry_point_plugins_are_loaded_in_process(clean_registry, tmp_path, monkeypatch):
    _write_module(tmp_path, "regtest_plugin_mod", "regtest_plugin_exp")
    _write_plugin(tmp_path, "regtest_plugin_mod", entry_name="regtest_plugin")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    loaded = registry.load_entry_point_plugins()
    assert "regtest_plugin" in loaded
    assert ll.get_exp_config("regtest_plugin_exp").trainer.train_steps == 42


def test_a_broken_entry_point_plugin_is_a_clear_error(clean_registry, tmp_path, monkeypatch):
    _write_plugin(tmp_path, "regtest_no_such_module", entry_name="regtest_broken")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    with pytest.raises(RegistryError, match=r"Installed plugin 'regtest_broken' "
                                            r"\(regtest_no_such_module, from distribution "
                                            r"'fake_plugin'.*cannot be imported"):
        registry.load_entry_point_plugins()


def _lite_train():
    """The installed `lite-train` script next to this Python, else the module."""
    return lite_train_command(installed=True)


def _env(*paths):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    env["PYTHONPATH"] = os.pathsep.join([*paths, ROOT, env.get("PYTHONPATH", "")])
    return env


def test_lite_train_lists_plugin_and_registry_import_experiments(tmp_path):
    _write_module(tmp_path, "regtest_cli_plugin", "regtest_cli_plugin_exp")
    _write_plugin(tmp_path, "regtest_cli_plugin")
    _write_module(tmp_path, "regtest_cli_import", "regtest_cli_import_exp")
    _write_module(tmp_path, "regtest_cli_import2", "regtest_cli_import2_exp")
    result = subprocess.run(
        _lite_train() + ["--list_experiments", "--registry_imports=regtest_cli_import",
                         "--registry_imports", "regtest_cli_import2"],  # repeatable
        env=_env(str(tmp_path)), cwd=str(tmp_path), capture_output=True, text=True,
        timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    names = result.stdout.split()
    assert "regtest_cli_plugin_exp" in names  # found through the entry point alone
    assert "regtest_cli_import_exp" in names and "regtest_cli_import2_exp" in names
    assert "digits_mlp" in names
    assert {"deit_imagenet_pretrain", "vit_imagenet_pretrain", "vit_imagenet_finetune"} <= set(
        names)  # TFM's ViT experiments (lite_launcher.vision)
    assert names == sorted(names)


def test_lite_train_unimportable_registry_import_exits_2_with_one_line(tmp_path):
    result = subprocess.run(
        _lite_train() + ["--list_experiments", "--registry_imports=regtest_nowhere"],
        env=_env(), cwd=str(tmp_path), capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("lite-train:")]
    assert len(errors) == 1 and "'regtest_nowhere' cannot be imported" in errors[0]


def test_lite_train_help_does_not_import_tensorflow():
    code = textwrap.dedent("""
        import sys
        import lite_launcher.commands.train as main
        assert "tensorflow" not in sys.modules
        sys.argv = ["lite-train", "--help"]
        try:
            main.run()
        except SystemExit:
            pass
        assert "tensorflow" not in sys.modules, "lite-train --help imported TensorFlow"
        print("OK")
    """)
    result = subprocess.run([sys.executable, "-c", code], env=_env(), cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "USAGE" in result.stdout and result.stdout.rstrip().endswith("OK")


# ----- gin: TFM's configurables (Trainer, create_trainer, actions, run_experiment) ---------

_GIN_TRAINER_MODULE = '''
import json
import os

import gin

import lite_launcher as ll


@gin.configurable
class GinTestTrainer(ll.Trainer):
    """Records its class and a gin-set argument, then trains as the base Trainer."""

    def __init__(self, *args, note="unset", record_dir=None, **kwargs):
        super().__init__(*args, **kwargs)
        with open(os.path.join(record_dir, "trainer.json"), "w") as f:
            json.dump({"class": type(self).__name__, "note": note,
                       "steps_per_loop": self.config.trainer.steps_per_loop}, f)
'''


def _train_with_gin(tmp_path, monkeypatch, *gin_flags):
    """`lite-train` (in this process) of digits_mlp for 4 steps, with the module of
    `GinTestTrainer` as a --registry_imports and the gin flags given."""
    (tmp_path / "regtest_gin_trainer.py").write_text(_GIN_TRAINER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    model_dir = tmp_path / "model"
    result = run_lite_train_in_process(
        "--experiment=digits_mlp", "--mode=train", f"--model_dir={model_dir}",
        "--registry_imports=regtest_gin_trainer", *gin_flags,
        "--params_override=trainer.train_steps=4,trainer.steps_per_loop=2,"
        "trainer.summary_interval=2,runtime.distribution_strategy=off")
    assert result.returncode == 0, (result.stderr + result.logged)[-3000:]
    return model_dir


def test_lite_train_gin_file_swaps_the_trainer_class_and_sets_its_arguments(tmp_path,
                                                                           monkeypatch):
    record_dir = tmp_path / "record"
    record_dir.mkdir()
    gin_file = tmp_path / "trainer.gin"
    gin_file.write_text(f"create_trainer.trainer_cls = @GinTestTrainer\n"
                        f"GinTestTrainer.note = 'from the gin file'\n"
                        f"GinTestTrainer.record_dir = '{record_dir}'\n")
    # As after a forked driver's run in this process (a notebook): gin parsed, hence locked.
    # The registry module registers a configurable, which gin refuses while locked. Any
    # in-process `lite-train` run earlier in this worker left it locked already.
    import gin  # pylint: disable=import-outside-toplevel
    if not gin.config_is_locked():
        gin.parse_config_files_and_bindings([], [])
    assert gin.config_is_locked()
    model_dir = _train_with_gin(tmp_path, monkeypatch, f"--gin_file={gin_file}")
    record = json.loads((record_dir / "trainer.json").read_text())
    assert record == {"class": "GinTestTrainer", "note": "from the gin file",
                      "steps_per_loop": 2}
    assert (model_dir / "ckpt-4.index").exists()  # the swapped trainer trained to the end
    operative = (model_dir / "operative_config.train.gin").read_text()
    assert "create_trainer.trainer_cls = @GinTestTrainer" in operative


def test_lite_train_gin_params_set_an_argument_of_the_base_trainer(tmp_path, monkeypatch):
    record_dir = tmp_path / "record"
    record_dir.mkdir()
    # TFM's Trainer is gin-configurable: its bindings reach a subclass's super().__init__.
    # A binding of an argument the caller passes explicitly is ignored (gin's rule), so bind
    # one that create_trainer leaves at its default.
    model_dir = _train_with_gin(
        tmp_path, monkeypatch, "--gin_params=create_trainer.trainer_cls = @GinTestTrainer",
        f"--gin_params=GinTestTrainer.record_dir = '{record_dir}'",
        "--gin_params=Trainer.checkpoint_exporter = None",
        "--gin_params=get_train_actions.checkpoint_manager = None",
        "--gin_params=get_eval_actions.model_dir = ''")
    assert json.loads((record_dir / "trainer.json").read_text())["note"] == "unset"
    operative = (model_dir / "operative_config.train.gin").read_text()
    assert "GinTestTrainer.record_dir" in operative


def test_an_error_raised_inside_a_gin_configurable_stays_one_clean_line(capsys):
    import logging  # pylint: disable=import-outside-toplevel

    from lite_launcher.core import train_utils  # pylint: disable=import-outside-toplevel
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import tiny  # pylint: disable=import-outside-toplevel
    config = tiny.make_config()
    config.task.train_data = None
    with pytest.raises(ll.ConfigError) as error:
        tiny.make_trainer(config)  # Trainer is gin-configurable: gin annotates the error
    try:
        with pytest.raises(SystemExit):
            train_utils.exit_with_error(error.value)
    finally:
        logging.disable(logging.NOTSET)
    assert capsys.readouterr().err == (
        "lite-train: error: The trainer needs `task.train_data` to build the training dataset "
        "(or pass train_dataset=, or train=False).\n")


def test_registry_knows_no_built_ins_until_registry_imports_loads_them():
    """One-way dependency: `registry` imports no experiments; `registry_imports` (which the
    driver and `ll.get_exp_config` load) registers the built-ins."""
    code = textwrap.dedent("""
        import sys
        from lite_launcher import registry
        print(registry.registered_experiments(), "lite_launcher.experiments" in sys.modules)
        import lite_launcher as ll
        mock = ll.get_exp_config("mock")
        print(mock.task.workload, "digits_mlp" in registry.registered_experiments())
    """)
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=120, env=_env())
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split("\n")[:2] == ["[] False", "mock True"]


def test_the_built_in_names_the_driver_knows_early_are_exactly_those_registered():
    # The driver refuses a wrong --experiment before TensorFlow loads, from a table of the
    # built-ins' names: it must name every built-in experiment, each with the module that
    # registers it, and nothing else (a new experiment missing there would be refused).
    import lite_launcher.common.registry_imports  # noqa: F401  pylint: disable=import-outside-toplevel
    from lite_launcher.common import builtin_experiments  # pylint: disable=import-outside-toplevel

    registered = {name: registry._EXPERIMENTS[name].__module__  # pylint: disable=protected-access
                  for name in registry.registered_experiments()
                  if registry._EXPERIMENTS[name].__module__.startswith(  # pylint: disable=protected-access
                      "lite_launcher.")}
    assert builtin_experiments.BUILTIN_EXPERIMENTS == registered


def test_the_early_name_check_knows_user_registered_experiments(tmp_path, monkeypatch):
    # An experiment registered by a --registry_imports module is known to the TensorFlow-free
    # check (and an unknown name is refused with the registry's own message).
    from lite_launcher.core import train_utils  # pylint: disable=import-outside-toplevel

    (tmp_path / "regtest_early_names.py").write_text(textwrap.dedent("""
        from lite_launcher import registry
        from lite_launcher.core.config_definitions import ExperimentConfig
        registry.register_config_factory("regtest_early_user")(ExperimentConfig)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    options = train_utils.ParseConfigOptions(experiment="regtest_early_user", config_file=[])
    with pytest.raises(registry.UnknownEntryError, match="'regtest_early_user'"):
        train_utils.check_experiment_inputs(options)
    train_utils.load_user_registrations(["regtest_early_names"])
    train_utils.check_experiment_inputs(options)
    assert "regtest_early_user" in train_utils.known_experiments()
    assert "digits_mlp" in train_utils.known_experiments()
