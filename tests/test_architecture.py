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


# ----- vision: the families build on one shared layers module (TFM's nn_layers / nn_blocks) --

VISION_FAMILIES = ["vision/resnet.py", "vision/resnet_deeplab.py", "vision/mobilenet.py",
                   "vision/vit.py"]
SHARED_VISION_LAYERS = {"SettingsBlock", "_Block", "LayerScale", "StochasticDepth",
                        "SqueezeExcitation", "NormSettings", "FusedBatchNormalization",
                        "get_stochastic_depth_rate", "add_residual", "make_divisible",
                        "round_filters"}


def _tree(relative_path):
    with open(os.path.join(PACKAGE, relative_path)) as f:
        return ast.parse(f.read())


def _module_aliases(tree, module):
    """The names a file binds to `lite_launcher.<module>` anywhere (function bodies too), and
    the names it imports from it."""
    aliases, imported = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == f"lite_launcher.{module}" and alias.asname:
                    aliases.add(alias.asname)
        elif isinstance(node, ast.ImportFrom):
            if node.module == "lite_launcher":
                aliases.update(alias.asname or alias.name for alias in node.names
                               if alias.name == module)
            elif node.module == f"lite_launcher.{module}":
                imported.update(alias.name for alias in node.names)
    return aliases, imported


def _private_names_used(relative_path, module):
    """Private names (`_x`) of `lite_launcher.<module>` that a file imports or reads."""
    tree = _tree(relative_path)
    aliases, imported = _module_aliases(tree, module)
    used = {name for name in imported if name.startswith("_")}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in aliases and node.attr.startswith("_")):
            used.add(node.attr)
    return used


def test_the_two_drivers_are_thin_on_the_driver_library_not_on_each_other():
    # lite-train and lite-export share train_utils (config, input checks, exit codes) and
    # flags; neither reaches into the other.
    assert not _private_names_used("export.py", "main")
    assert not _private_names_used("main.py", "export")
    assert "lite_launcher.main" not in _all_lite_imports("export.py")
    assert "lite_launcher.export" not in _all_lite_imports("main.py")
    # The library they share is TensorFlow-free on import (the input checks run before TF).
    for module in ("train_utils.py", "flags.py", "builtin_experiments.py", "registry.py"):
        assert not {n for n in _imports(module) if n.split(".")[0] in ("tensorflow", "keras")}


def _all_lite_imports(relative_path):
    """The lite_launcher modules a file imports anywhere (function bodies too)."""
    names = set()
    for node in ast.walk(_tree(relative_path)):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.startswith("lite_launcher"))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lite_launcher"):
            names.add(node.module)
            if node.module == "lite_launcher":
                names.update(f"lite_launcher.{a.name}" for a in node.names)
    return names


def _package_files():
    for directory, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                yield os.path.relpath(os.path.join(directory, name), PACKAGE)


def _lock_calls(relative_path):
    """The calls of `model_dir_lock.hold` / `release` (or of those names imported) in a file."""
    tree = _tree(relative_path)
    aliases, imported = _module_aliases(tree, "model_dir_lock")
    calls = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        function = node.func
        if (isinstance(function, ast.Attribute) and isinstance(function.value, ast.Name)
                and function.value.id in aliases and function.attr in ("hold", "release")):
            calls.add(function.attr)
        elif isinstance(function, ast.Name) and function.id in imported & {"hold", "release"}:
            calls.add(function.id)
    return calls


def test_one_module_takes_the_model_dir_lock():
    # One owner for model_dir: the experiment runner, which the driver and a forked driver
    # (run_experiment(trainer=...)) both go through, decides "chief of a training mode" and
    # takes and releases the lock. The driver only asks (refuse_if_held) before TF loads.
    takers = {path for path in _package_files()
              if path != "model_dir_lock.py" and _lock_calls(path)}
    assert takers == {"experiment.py"}
    assert _lock_calls("experiment.py") == {"hold", "release"}
def _names_in(node):
    return ({n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            | {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)})


@pytest.mark.parametrize("module", VISION_FAMILIES)
def test_vision_families_take_their_shared_blocks_from_the_layers_module(module):
    tree = _tree(module)
    assert "lite_launcher.vision.layers" in _lite_modules(module)
    defined = {n.name for n in ast.walk(tree)
               if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))}
    assert not defined & SHARED_VISION_LAYERS
    # One Keras registration package: families register through layers.register_serializable.
    assert "register_keras_serializable" not in _names_in(tree)
    # One stochastic-depth schedule: rates come from layers.get_stochastic_depth_rate, never
    # from a formula on the configured rate written in the family.
    assert "get_stochastic_depth_rate" in _names_in(tree)
    inline = [node.lineno for node in ast.walk(tree)
              if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div))
              and any("stochastic_depth" in name for name in _names_in(node))]
    assert not inline, f"{module}: stochastic-depth rate computed inline at lines {inline}"


@pytest.mark.parametrize("module", ["vision/resnet.py", "vision/mobilenet.py"])
def test_convnet_blocks_serialise_through_the_one_block_base(module):
    # Every layer class of a convnet family derives from layers.SettingsBlock (directly or
    # through a class of its module) and none writes its own get_config.
    classes = {n.name: n for n in _tree(module).body if isinstance(n, ast.ClassDef)}

    def derives_from_settings_block(node):
        bases = {b.id if isinstance(b, ast.Name) else b.attr for b in node.bases}
        return "SettingsBlock" in bases or any(
            derives_from_settings_block(classes[b]) for b in bases if b in classes)

    layers = [node for node in classes.values() if node.bases]  # dataclasses have none
    assert layers
    for node in layers:
        assert derives_from_settings_block(node), f"{module}: {node.name}"
        assert "get_config" not in {f.name for f in node.body if isinstance(f, ast.FunctionDef)}


def test_mobilenet_dispatches_blocks_through_its_table():
    # As ResNet's BLOCKS: block_fn -> builder in BLOCK_BUILDERS, no if/elif on the name.
    [builder] = [n for n in _tree("vision/mobilenet.py").body
                 if isinstance(n, ast.FunctionDef) and n.name == "build_mobilenet"]
    compared = [node.lineno for node in ast.walk(builder) if isinstance(node, ast.Compare)
                and "block_fn" in _names_in(node)
                and any(isinstance(c, (ast.Constant, ast.Tuple)) for c in node.comparators)]
    assert not compared, f"build_mobilenet compares block names at lines {compared}"
    assert "BLOCK_BUILDERS" in _names_in(builder)


def test_dilated_resnet_builds_on_resnets_stem_and_blocks():
    tree = _tree("vision/resnet_deeplab.py")
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and node.module == "lite_launcher.vision.resnet" for alias in node.names}
    assert {"BLOCKS", "stem", "build_from_plan"} <= imported
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
