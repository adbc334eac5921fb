"""The module dependencies the README's "How it fits together" promises, read from the source.

Static (no imports): each module's `import` statements name the lite_launcher modules it uses.
"""

import ast
import os

import pytest

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       "lite_launcher")


def _module_level(tree):
    """The statements that run on import: not those inside a function's body."""
    pending = list(tree.body)
    while pending:
        node = pending.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            pending.extend(ast.iter_child_nodes(node))


def _imports(relative_path):
    """The modules a file imports when it is imported (lite_launcher ones by full name)."""
    with open(os.path.join(PACKAGE, relative_path)) as f:
        tree = ast.parse(f.read())
    names = set()
    for node in _module_level(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            if node.module == "lite_launcher":
                names.update(f"lite_launcher.{alias.name}" for alias in node.names)
    return names


def _lite_modules(relative_path):
    return {n for n in _imports(relative_path) if n.startswith("lite_launcher.")}


def test_loops_only_repeat_what_they_are_given():
    # The runner layer knows neither the Trainer nor the Task: it calls only the step and
    # loop functions handed to it, so a step is followed trainer.py -> task.py.
    assert _lite_modules("loops.py") <= {"lite_launcher.base_config"}


def test_one_way_data_flow_between_the_layers():
    assert "lite_launcher.controller" not in _lite_modules("trainer.py")
    assert "lite_launcher.trainer" not in _lite_modules("task.py")
    for module in ("task.py", "trainer.py", "loops.py"):
        assert "lite_launcher.experiment" not in _lite_modules(module)
    # The registry registers nothing itself: registry_imports loads the built-ins.
    assert not {n for n in _lite_modules("registry.py") if "experiments" in n}


@pytest.mark.parametrize("module", ["errors.py", "base_config.py", "config.py", "modes.py",
                                    "atomic_write.py", "optimization/configs.py"])
def test_modules_the_driver_reads_before_tensorflow_do_not_import_it(module):
    assert not {n for n in _imports(module) if n.split(".")[0] in ("tensorflow", "keras")}


@pytest.mark.parametrize("module", ["vision/decoders.py", "vision/segmentation_heads.py",
                                    "vision/segmentation_model.py"])
def test_segmentation_model_pieces_know_no_task_data_or_metrics(module):
    # TFM's cut: the model pieces are reusable layers; only the task wires them to the input,
    # the loss and the metrics.
    wiring = {"lite_launcher.task", "lite_launcher.vision.semantic_segmentation",
              "lite_launcher.vision.segmentation_input", "lite_launcher.vision.segmentation_losses",
              "lite_launcher.vision.segmentation_metrics", "lite_launcher.input_reader",
              "lite_launcher.trainer"}
    assert not _lite_modules(module) & wiring


def test_segmentation_configs_load_without_tensorflow():
    # The driver validates a segmentation config before TensorFlow is imported.
    assert not {n for n in _imports("vision/segmentation_configs.py")
                if n.split(".")[0] in ("tensorflow", "keras")}
    assert not {n for n in _lite_modules("vision/segmentation_configs.py")
                if n not in ("lite_launcher.base_config", "lite_launcher.config",
                             "lite_launcher.registry", "lite_launcher.vision.configs")}
