"""TFM parity: the config parts of official/core/train_utils_test.py, on lite_launcher."""

import dataclasses

import pytest

import lite_launcher as ll
from lite_launcher.core import registry


@dataclasses.dataclass
class FooModelConfig(ll.Config):
    model_id: str = ""


@dataclasses.dataclass
class FooTaskConfig(ll.TaskConfig):
    model: FooModelConfig = dataclasses.field(default_factory=FooModelConfig)


@pytest.fixture
def foo_experiment():
    """TFM's `foo` experiment: built from a dict of defaults, registered for the test."""
    name = "tfm_parity_foo"

    @registry.register_config_factory(name)
    def foo():
        return ll.ExperimentConfig(
            {"runtime": {"tpu": "fake"}, "task": {"model": {"model_id": "bar"}},
             "trainer": {"train_steps": -1, "validation_steps": -1}},
            task=FooTaskConfig())

    yield name
    registry._EXPERIMENTS.pop(name, None)  # pylint: disable=protected-access


def test_construct_experiment_from_flags(foo_experiment):
    """Restates train_utils_test.TrainUtilsTest.test_construct_experiment_from_flags:
    ExperimentParser(options).parse() and parse_configuration(options) agree, and the tpu
    option and the params_override pairs are applied."""
    options = ll.ParseConfigOptions(
        experiment=foo_experiment, config_file=[], tpu="bar", tf_data_service="",
        params_override="task.model.model_id=new,trainer.train_steps=10,"
                        "trainer.validation_steps=11")
    from_parser = ll.ExperimentParser(options).parse()
    from_function = ll.parse_configuration(options)
    assert from_parser.as_dict() == from_function.as_dict()
    assert from_parser.runtime.tpu == "bar"
    assert from_parser.task.model.model_id == "new"
    assert from_parser.trainer.train_steps == 10
    assert from_parser.trainer.validation_steps == 11
    assert "tpu" in options and "not_an_option" not in options
