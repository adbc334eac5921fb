"""The module dependencies the README's "How it fits together" promises, read from the source.

Static (no imports): each module's `import` statements name the lite_launcher modules it uses.
"""

import ast
import os
import re

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


def _is_lite_module(name):
    """Whether `name` (lite_launcher.a.b) is a module or package of lite's source."""
    path = os.path.join(PACKAGE, *name.split(".")[1:])
    return os.path.isfile(path + ".py") or os.path.isfile(os.path.join(path, "__init__.py"))


def _from_import_names(node):
    """The modules an `ImportFrom` names: its module, and each imported name that is a lite
    module itself (`from lite_launcher.checkpointing import checkpoints`)."""
    if node.module.split(".")[0] != "lite_launcher":
        return {node.module}
    modules = {f"{node.module}.{alias.name}" for alias in node.names
               if _is_lite_module(f"{node.module}.{alias.name}")}
    # A package whose names are all its submodules counts as those alone.
    return modules if len(modules) == len(node.names) else modules | {node.module}


def _imports(relative_path):
    """The modules a file imports when it is imported (lite_launcher ones by full name)."""
    with open(os.path.join(PACKAGE, relative_path)) as f:
        tree = ast.parse(f.read())
    names = set()
    for node in _module_level(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.update(_from_import_names(node))
    return names


def _lite_modules(relative_path):
    return {n for n in _imports(relative_path) if n.startswith("lite_launcher.")}


def _module_name(relative_path):
    parts = relative_path[:-len(".py")].split(os.sep)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["lite_launcher"] + parts)


def import_graph(package=PACKAGE):
    """{module: the lite_launcher modules it imports anywhere}, function bodies included: an
    import deferred into a function still makes the two modules depend on each other."""
    modules = {_module_name(os.path.relpath(os.path.join(d, f), package))
               for d, _, files in os.walk(package) for f in files if f.endswith(".py")}
    graph = {}
    for module in modules:
        relative = module.split(".", 1)[1].replace(".", os.sep) if "." in module else ""
        path = os.path.join(package, relative)
        path = os.path.join(path, "__init__.py") if os.path.isdir(path) else path + ".py"
        with open(path) as f:
            tree = ast.parse(f.read())
        targets = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    targets.add(sub if sub in modules else node.module)
        graph[module] = {t for t in targets if t in modules and t != module}
    return graph


def import_cycles(graph):
    """The strongly connected groups of more than one module (each an import circle)."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_no_import_circle_among_lites_modules_counting_function_level_imports():
    cycles = import_cycles(import_graph())
    assert not cycles, f"import circles: {cycles}"


def test_the_cycle_scan_sees_an_import_inside_a_function(tmp_path):
    # The circle round three removed, as it stood: checkpoints imported tfm_checkpoint inside
    # two functions, tfm_checkpoint imported checkpoints at the top.
    (tmp_path / "checkpointing").mkdir()
    (tmp_path / "checkpointing" / "checkpoints.py").write_text(
        "def read_weights():\n    from lite_launcher.checkpointing import tfm_checkpoint\n")
    (tmp_path / "checkpointing" / "tfm_checkpoint.py").write_text(
        "from lite_launcher.checkpointing import checkpoints\n")
    (tmp_path / "errors.py").write_text("")
    graph = import_graph(str(tmp_path))
    assert import_cycles(graph) == [["lite_launcher.checkpointing.checkpoints",
                                     "lite_launcher.checkpointing.tfm_checkpoint"]]


def test_loops_only_repeat_what_they_are_given():
    # The runner layer knows neither the Trainer nor the Task: it calls only the step and
    # loop functions handed to it, so a step is followed trainer.py -> task.py.
    assert _lite_modules("orbit/loops.py") <= {"lite_launcher.core.base_config",
                                                "lite_launcher.common.tf_adapter"}


def test_one_way_data_flow_between_the_layers():
    assert "lite_launcher.orbit.controller" not in _lite_modules("core/base_trainer.py")
    assert "lite_launcher.core.base_trainer" not in _lite_modules("core/base_task.py")
    for module in ("core/base_task.py", "core/base_trainer.py", "orbit/loops.py"):
        assert "lite_launcher.core.train_lib" not in _lite_modules(module)
    # The registry registers nothing itself: registry_imports loads the built-ins.
    assert not {n for n in _lite_modules("core/registry.py") if "experiments" in n}


@pytest.mark.parametrize("module", ["common/errors.py", "core/base_config.py", "core/config_definitions.py", "core/modes.py",
                                    "common/atomic_write.py", "optimization/configs.py",
                                    "common/lean_imports.py"])
def test_modules_the_driver_reads_before_tensorflow_do_not_import_it(module):
    assert not {n for n in _imports(module) if n.split(".")[0] in ("tensorflow", "keras")}


# ----- vision: the families build on one shared layers module (TFM's nn_layers / nn_blocks) --

VISION_FAMILIES = ["vision/modeling/backbones/resnet.py",
                   "vision/modeling/backbones/resnet_deeplab.py",
                   "vision/modeling/backbones/mobilenet.py", "vision/modeling/backbones/vit.py",
                   "vision/modeling/backbones/efficientnet.py"]
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
    package, _, name = f"lite_launcher.{module}".rpartition(".")
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == f"lite_launcher.{module}" and alias.asname:
                    aliases.add(alias.asname)
        elif isinstance(node, ast.ImportFrom):
            if node.module == package:
                aliases.update(alias.asname or alias.name for alias in node.names
                               if alias.name == name)
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
    assert not _private_names_used("commands/export.py", "commands.train")
    assert not _private_names_used("commands/train.py", "commands.export")
    assert "lite_launcher.commands.train" not in _all_lite_imports("commands/export.py")
    assert "lite_launcher.commands.export" not in _all_lite_imports("commands/train.py")
    # lite-convert and lite-export-tflite too: the commands share flags.py and train_utils,
    # none another.
    commands = {"lite_launcher.commands.train", "lite_launcher.commands.export",
                "lite_launcher.commands.convert", "lite_launcher.commands.export_tflite"}
    for command in ("commands/train.py", "commands/export.py", "commands/convert.py",
                    "commands/export_tflite.py"):
        assert not _all_lite_imports(command) & commands - {_module_name(command)}
    # The library they share is TensorFlow-free on import (the input checks run before TF).
    for module in ("core/train_utils.py", "common/flags.py", "common/builtin_experiments.py", "core/registry.py"):
        assert not {n for n in _imports(module) if n.split(".")[0] in ("tensorflow", "keras")}


def _all_lite_imports(relative_path):
    """The lite_launcher modules a file imports anywhere (function bodies too)."""
    names = set()
    for node in ast.walk(_tree(relative_path)):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.startswith("lite_launcher"))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lite_launcher"):
            names.update(_from_import_names(node))
    return names


def _package_files():
    for directory, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                yield os.path.relpath(os.path.join(directory, name), PACKAGE)


_LOCK_FUNCTIONS = {"hold", "release", "locked"}


def _lock_calls(relative_path):
    """The calls of `model_dir_lock.hold` / `release` / `locked` (or of those names imported)
    in a file, one entry per call site."""
    tree = _tree(relative_path)
    aliases, imported = _module_aliases(tree, "common.model_dir_lock")
    calls = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        function = node.func
        if (isinstance(function, ast.Attribute) and isinstance(function.value, ast.Name)
                and function.value.id in aliases and function.attr in _LOCK_FUNCTIONS):
            calls.append(function.attr)
        elif isinstance(function, ast.Name) and function.id in imported & _LOCK_FUNCTIONS:
            calls.append(function.id)
    return calls


def test_one_module_takes_the_model_dir_lock():
    # One owner for model_dir: the experiment runner, which the driver and a forked driver
    # (run_experiment(trainer=...)) both go through, decides "chief of a training mode" and
    # holds the lock through one context, entered at one place, that releases it itself. The
    # driver only asks (refuse_if_held) before TF loads.
    takers = {path for path in _package_files()
              if path != "common/model_dir_lock.py" and _lock_calls(path)}
    assert takers == {"core/train_lib.py"}
    assert _lock_calls("core/train_lib.py") == ["locked"]
def _names_in(node):
    return ({n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            | {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)})


@pytest.mark.parametrize("module", VISION_FAMILIES)
def test_vision_families_take_their_shared_blocks_from_the_layers_module(module):
    tree = _tree(module)
    assert "lite_launcher.vision.modeling.layers.nn_layers" in _lite_modules(module)
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


@pytest.mark.parametrize("module", ["vision/modeling/backbones/resnet.py",
                                    "vision/modeling/backbones/mobilenet.py",
                                    "vision/modeling/backbones/revnet.py",
                                    "vision/modeling/decoders/nasfpn.py"])
def test_convnet_blocks_serialise_through_the_one_block_base(module):
    # Every layer class of a convnet family derives from layers.SettingsBlock (directly, through
    # its subclass layers.ChainBlock, or through a class of its module) and none writes its own
    # get_config.
    classes = {n.name: n for n in _tree(module).body if isinstance(n, ast.ClassDef)}

    def derives_from_settings_block(node):
        bases = {b.id if isinstance(b, ast.Name) else b.attr for b in node.bases}
        return bool({"SettingsBlock", "ChainBlock"} & bases) or any(
            derives_from_settings_block(classes[b]) for b in bases if b in classes)

    layers = [node for node in classes.values() if node.bases]  # dataclasses have none
    assert layers
    for node in layers:
        assert derives_from_settings_block(node), f"{module}: {node.name}"
        assert "get_config" not in {f.name for f in node.body if isinstance(f, ast.FunctionDef)}


def test_mobilenet_dispatches_blocks_through_its_table():
    # As ResNet's BLOCKS: block_fn -> builder in BLOCK_BUILDERS, no if/elif on the name.
    [builder] = [n for n in _tree("vision/modeling/backbones/mobilenet.py").body
                 if isinstance(n, ast.FunctionDef) and n.name == "build_mobilenet"]
    compared = [node.lineno for node in ast.walk(builder) if isinstance(node, ast.Compare)
                and "block_fn" in _names_in(node)
                and any(isinstance(c, (ast.Constant, ast.Tuple)) for c in node.comparators)]
    assert not compared, f"build_mobilenet compares block names at lines {compared}"
    assert "BLOCK_BUILDERS" in _names_in(builder)


def test_dilated_resnet_builds_on_resnets_stem_and_blocks():
    tree = _tree("vision/modeling/backbones/resnet_deeplab.py")
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and node.module == "lite_launcher.vision.modeling.backbones.resnet"
                for alias in node.names}
    assert {"BLOCKS", "stem", "build_from_plan"} <= imported
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]


# ---------------------------------------------------------------------------------------------
# The checkpoint lifecycle has one home: lite_launcher/checkpointing/checkpoints.py.
# ---------------------------------------------------------------------------------------------

CHECKPOINTS_HOME = "checkpointing/checkpoints.py"
# Modules that delete, move or rename files, and why none of them is a checkpoint's file.
FILE_REMOVERS = {
    "common/atomic_write.py": "its own temporary file, then the rename into place",
    "core/export_lib.py": "its own unfinished export, written beside the export directory",
    "commands/convert.py": "its own unfinished conversion, written beside the output directory",
    "common/model_dir_lock.py": "the empty directories a run refused while being built created "
                         "(os.rmdir removes empty directories only)",
}
_WRITE_METHODS = {"save", "write", "save_checkpoint_if_preempted"}
_CHECKPOINT_RECEIVER = re.compile(r"checkpoint|ckpt|manager|handler", re.IGNORECASE)
_FILE_REMOVALS = {"tf.io.gfile.remove", "tf.io.gfile.rmtree", "tf.io.gfile.rename",
                  "shutil.rmtree", "shutil.move", "os.remove", "os.unlink", "os.rmdir",
                  "os.rename", "os.replace", "os.removedirs"}
_FILE_WRITERS = re.compile(r"(^|\.)(write_text|write_bytes|GFile|open)$")


def _parse(relative_path, package=PACKAGE):
    with open(os.path.join(package, relative_path)) as f:
        return ast.parse(f.read())


def _names_state_file(node):
    return any((isinstance(n, ast.Constant) and n.value == "checkpoint")
               or (isinstance(n, ast.Name) and n.id == "STATE_FILE")
               or (isinstance(n, ast.Attribute) and n.attr == "STATE_FILE")
               for n in ast.walk(node))


def checkpoint_file_writes(tree, relative_path):
    """Where a module writes or deletes checkpoint files itself (not through the home).

    Flags: a `tf.train.CheckpointManager` built or subclassed (its saves and restores bypass
    the home); `.save` / `.write` / `.save_checkpoint_if_preempted` called on a checkpoint,
    manager or preemption handler; a file named `checkpoint` (a state file) written; and any
    file deleted, moved or renamed by a module not in FILE_REMOVERS.
    """
    found = []
    for node in ast.walk(tree):
        where = f"{relative_path}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                if ast.unparse(base).endswith("train.CheckpointManager"):
                    found.append(f"{where} subclasses {ast.unparse(base)}")
        if not isinstance(node, ast.Call):
            continue
        function = ast.unparse(node.func)
        if function.endswith("train.CheckpointManager"):
            found.append(f"{where} builds {function}")
        if isinstance(node.func, ast.Attribute) and node.func.attr in _WRITE_METHODS:
            receiver = node.func.value
            if ast.unparse(receiver) != "checkpoints" and (
                    _CHECKPOINT_RECEIVER.search(ast.unparse(receiver))
                    or any(k.arg == "checkpoint_number" for k in node.keywords)):
                found.append(f"{where} calls {function}(...)")
        if _FILE_WRITERS.search(function) and any(_names_state_file(a) for a in node.args):
            found.append(f"{where} writes a checkpoint state file with {function}(...)")
        if function in _FILE_REMOVALS and relative_path not in FILE_REMOVERS:
            found.append(f"{where} calls {function}(...)")
    return found


def _scan_outside(home, scan):
    """`scan(tree, relative_path)` over every module of lite but `home`, findings joined."""
    return [finding for relative_path in _package_files() if relative_path != home
            for finding in scan(_parse(relative_path), relative_path)]


def test_only_the_checkpoints_home_writes_or_deletes_checkpoint_files():
    found = _scan_outside(CHECKPOINTS_HOME, checkpoint_file_writes)
    assert not found, "write or delete checkpoint files through lite_launcher.checkpointing.checkpoints:\n" + \
        "\n".join(found)


@pytest.mark.parametrize("violation", [
    "manager.save(checkpoint_number=step)",
    "self._checkpoint_manager.save(checkpoint_number=step, check_interval=False)",
    "tf.train.Checkpoint(model=model).save(prefix)",
    "checkpoint.write(os.path.join(directory, name))",
    "self._handler.save_checkpoint_if_preempted(checkpoint_number=step)",
    "tf.train.CheckpointManager(checkpoint, directory, max_to_keep=1)",
    "class Manager(tf.train.CheckpointManager):\n    pass",
    "tf.io.gfile.remove(path)",
    "shutil.rmtree(directory)",
    "atomic_write.write_text(os.path.join(directory, 'checkpoint'), text)",
])
def test_the_checkpoint_write_scan_finds_each_kind_of_violation(violation):
    # Each line the scan must catch, as main's modules wrote them before the home existed.
    assert checkpoint_file_writes(ast.parse(violation), "core/actions.py")


def test_the_checkpoint_write_scan_lets_ordinary_writes_through():
    ordinary = ("checkpoints.save(manager, step)\nf.write(text)\nwriter.write(example)\n"
                "summary_manager.write_summaries(output)\narchive.write_out(path)\n"
                "params.save_yaml(path)\natomic_write.write_text(path, text)")
    assert checkpoint_file_writes(ast.parse(ordinary), "core/actions.py") == []


# Restores not yet through `checkpoints.restore` (each a partial `Checkpoint.read`); the reader
# of TFM checkpoints routes these through the home.
DIRECT_CHECKPOINT_READS = {}


def checkpoint_reads(tree, relative_path):
    """Where a module restores or reads a checkpoint itself (not through the home)."""
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("restore", "read", "restore_or_initialize")
                and ast.unparse(node.func.value) != "checkpoints"
                and _CHECKPOINT_RECEIVER.search(ast.unparse(node.func.value))):
            found.append(f"{relative_path}:{node.lineno} calls {ast.unparse(node.func)}(...)")
    return found


def test_restores_go_through_the_checkpoints_home():
    # `checkpoints.restore` is the seam where a reader of other checkpoint formats hooks in.
    found, direct = [], set()
    for relative_path in _package_files():
        if relative_path == CHECKPOINTS_HOME:
            continue
        reads = checkpoint_reads(_parse(relative_path), relative_path)
        if relative_path in DIRECT_CHECKPOINT_READS:
            direct.update([relative_path] if reads else [])
        else:
            found += reads
    assert not found, "restore checkpoints with lite_launcher.checkpointing.checkpoints.restore:\n" + \
        "\n".join(found)
    # An entry whose module now restores through the home goes from the list.
    assert direct == set(DIRECT_CHECKPOINT_READS)


def _public_names(relative_path):
    names = set()
    for node in _parse(relative_path).body:
        targets = []
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            targets = [node.name]
        elif isinstance(node, ast.Assign):
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.ImportFrom):
            targets = [alias.asname or alias.name for alias in node.names]
        names.update(n for n in targets if not n.startswith("_"))
    return names


def test_the_controller_uses_only_the_checkpoints_homes_public_api():
    lite_modules = _lite_modules("orbit/controller.py")
    assert "lite_launcher.checkpointing.checkpoints" in lite_modules
    assert "lite_launcher.checkpoint_recovery" not in lite_modules
    public = _public_names(CHECKPOINTS_HOME)
    used = set()
    for node in ast.walk(_parse("orbit/controller.py")):
        if isinstance(node, ast.Attribute) and ast.unparse(node.value) == "checkpoints":
            used.add(node.attr)
        elif isinstance(node, ast.ImportFrom) and node.module == "lite_launcher.checkpointing.checkpoints":
            used.update(alias.name for alias in node.names)
    assert used and used <= public, f"not public in checkpoints.py: {sorted(used - public)}"


def checkpoint_internals_used(tree, relative_path="orbit/controller.py"):
    """Where a module finds, restores or saves checkpoints itself, or reads another object's
    private attributes (a manager's `_last_checkpoint_step`, ...)."""
    found = []
    for node in ast.walk(tree):
        where = f"{relative_path}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("getattr", "setattr") \
                and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) \
                and str(node.args[1].value).startswith("_"):
            found.append(f"{where} {ast.unparse(node)}")
        if not isinstance(node, ast.Attribute):
            continue
        text, owner = ast.unparse(node), ast.unparse(node.value)
        if text.startswith(("tf.io.gfile", "tf.train.latest_checkpoint",
                            "tf.train.get_checkpoint_state", "tf.train.checkpoints_iterator")):
            found.append(f"{where} {text}")
        elif node.attr.startswith("_") and not node.attr.startswith("__") and owner != "self":
            found.append(f"{where} {text}")
        elif (node.attr in ("restore", "restore_or_initialize", "save", "write")
              and owner != "checkpoints"):
            found.append(f"{where} {text}")
    return found


def test_the_controller_touches_no_checkpoint_files_or_manager_internals():
    # Finding, restoring and saving checkpoints is the home's work: the Controller says when.
    found = checkpoint_internals_used(_parse("orbit/controller.py"))
    assert not found, "\n".join(found)


def test_the_controller_schedules_on_the_checkpoint_and_summary_homes_alone():
    # Orbit's seam: the Controller drives any object with train(n) / evaluate(n); what it may
    # reach is the checkpoint home (when to save / restore), summaries (what to write) and the
    # error types. A rule on what it touches, not on its length.
    assert _all_lite_imports("orbit/controller.py") - {"lite_launcher"} <= {
        "lite_launcher.checkpointing.checkpoints", "lite_launcher.orbit.summaries", "lite_launcher.common.errors"}
    names = _names_in(_parse("orbit/controller.py"))
    assert not names & {"Trainer", "Task", "ExperimentRunner", "build_model", "model_dir_lock"}


# ---------------------------------------------------------------------------------------------
# The core is laid out by role, as TFM's official/core, official/common and Orbit, in floors
# that import only downwards (function-level imports count). A rule on what a module may
# import, not on its length.
# ---------------------------------------------------------------------------------------------

CORE_FLOORS = {"common": 0, "optimization": 1, "checkpointing": 2, "orbit": 3, "core": 4,
               "experiments": 5, "vision": 5, "commands": 6}
# Imported from every floor: the typed config machinery (TFM's hyperparams base_config),
# TensorFlow-free, which itself imports only common.atomic_write.
FOUNDATION = {"lite_launcher.core.base_config"}
# common's command-line half (TFM's official/common/flags.py and registry_imports.py) stands
# on core's driver library (train_utils, the registry), below the commands.
COMMAND_LINE_COMMON = {"lite_launcher.common.flags", "lite_launcher.common.registry_imports"}


def _floor_folder(module):
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in CORE_FLOORS else None


def core_layer_violations(graph):
    """Imports from a folder up to a higher or sideways one (`CORE_FLOORS`), but for the
    foundation and common's command-line half. `graph`: {module: {imported modules}}."""
    found = []
    for module, targets in sorted(graph.items()):
        source = _floor_folder(module)
        for target in sorted(targets):
            folder = _floor_folder(target)
            if (source and folder and folder != source
                    and CORE_FLOORS[folder] >= CORE_FLOORS[source]
                    and target not in FOUNDATION and module not in COMMAND_LINE_COMMON):
                found.append(f"{module} (floor {CORE_FLOORS[source]}) imports {target} "
                             f"(floor {CORE_FLOORS[folder]})")
    return found


def test_the_core_is_laid_out_by_role():
    for folder in ("core", "orbit", "common", "checkpointing", "commands"):
        assert os.path.isfile(os.path.join(PACKAGE, folder, "__init__.py")), folder
    # Nothing loose at the top but the package's front door and the old names' table.
    loose = sorted(name for name in os.listdir(PACKAGE) if name.endswith(".py"))
    assert loose == ["__init__.py", "legacy.py"], loose
    assert set(CORE_FLOORS) <= set(os.listdir(PACKAGE))


def test_core_modules_import_only_downwards():
    found = core_layer_violations(import_graph())
    assert not found, "\n".join(found)


@pytest.mark.parametrize("module, imported", [
    ("lite_launcher.vision.serving.export_saved_model_lib", "lite_launcher.commands.export"),
    ("lite_launcher.core.train_lib", "lite_launcher.commands.train"),
    ("lite_launcher.orbit.controller", "lite_launcher.core.base_trainer"),
    ("lite_launcher.checkpointing.checkpoints", "lite_launcher.orbit.summaries"),
    ("lite_launcher.common.errors", "lite_launcher.checkpointing.checkpoints"),
    ("lite_launcher.vision.tasks.retinanet", "lite_launcher.experiments.workloads"),
])
def test_the_core_layer_scan_finds_each_kind_of_violation(module, imported):
    assert core_layer_violations({module: {imported}})


def test_no_library_imports_a_command():
    # The commands parse flags and call the libraries; vision stands below them.
    graph = import_graph()
    found = [f"{module} imports {target}" for module, targets in sorted(graph.items())
             for target in sorted(targets)
             if target.startswith("lite_launcher.commands.")
             and not module.startswith("lite_launcher.commands") and module != "lite_launcher"]
    assert not found, "\n".join(found)


def test_lite_imports_no_module_by_its_old_name():
    # The old names are for users' code (lite_launcher.legacy); lite's own code names the
    # modules where they are.
    from lite_launcher import legacy  # pylint: disable=import-outside-toplevel

    found = [f"{path} imports {name}" for path in _package_files()
             for name in _all_lite_imports(path) if name in legacy.MOVED]
    assert not found, "\n".join(found)


# Private TensorFlow names: read only in lite_launcher/common/tf_adapter.py.
TF_ADAPTER = "common/tf_adapter.py"
_TF_PRIVATE_MODULES = ("tensorflow.python", "tensorflow.compiler", "tensorflow.core.function")


def tf_private_uses(tree, relative_path):
    """Where a module imports a private TensorFlow module, reads `tf.__internal__`, or reads a
    private name the adapter owns (as an attribute or through getattr)."""
    from lite_launcher.common import tf_adapter  # pylint: disable=import-outside-toplevel

    owned = {name for owner, names in tf_adapter.PRIVATE_NAMES.items() if owner != "modules"
             for name in names if name.startswith("_")}
    found = []
    for node in ast.walk(tree):
        where = f"{relative_path}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                _TF_PRIVATE_MODULES):
            found.append(f"{where} imports {node.module}")
        elif isinstance(node, ast.Import) and any(
                a.name.startswith(_TF_PRIVATE_MODULES) for a in node.names):
            found.append(f"{where} imports {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Attribute) and (node.attr in owned
                                                   or node.attr == "__internal__"):
            found.append(f"{where} reads {ast.unparse(node)}")
        elif (isinstance(node, ast.Call) and ast.unparse(node.func) in ("getattr", "hasattr")
              and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
              and node.args[1].value in owned):
            found.append(f"{where} {ast.unparse(node)}")
    return found


def test_private_tensorflow_names_only_in_the_adapter():
    found = _scan_outside(TF_ADAPTER, tf_private_uses)
    assert not found, "use lite_launcher.common.tf_adapter for private TensorFlow names:\n" + \
        "\n".join(found)


@pytest.mark.parametrize("violation", [
    "from tensorflow.python.eager import context",
    "import tensorflow.python.framework.ops as ops",
    "ok = isinstance(it, tf.__internal__.tracking.Trackable)",
    "return concrete._call_flat(inputs, concrete.captured_inputs)",
    "resolver = getattr(strategy, '_cluster_resolver', None)",
])
def test_the_private_tensorflow_scan_finds_each_kind_of_use(violation):
    assert tf_private_uses(ast.parse(violation), "x.py")


@pytest.mark.parametrize("module", ["vision/modeling/decoders/aspp.py",
                                    "vision/modeling/decoders/fpn.py",
                                    "vision/modeling/decoders/factory.py",
                                    "vision/modeling/heads/segmentation_heads.py",
                                    "vision/modeling/segmentation_model.py"])
def test_segmentation_model_pieces_know_no_task_data_or_metrics(module):
    # TFM's cut: the model pieces are reusable layers; only the task wires them to the input,
    # the loss and the metrics.
    wiring = {"lite_launcher.core.base_task", "lite_launcher.vision.tasks.semantic_segmentation",
              "lite_launcher.vision.dataloaders.segmentation_input",
              "lite_launcher.vision.losses.segmentation_losses",
              "lite_launcher.vision.evaluation.segmentation_metrics", "lite_launcher.core.input_reader",
              "lite_launcher.core.base_trainer"}
    assert not _vision_imports(module) & wiring
    assert not _lite_modules(module) & wiring


@pytest.mark.parametrize("module", ["common", "backbones", "decoders", "image_classification",
                                    "semantic_segmentation"])
def test_vision_configs_load_without_tensorflow(module):
    # The driver validates a vision config before TensorFlow is imported.
    path = f"vision/configs/{module}.py"
    assert not {n for n in _imports(path) if n.split(".")[0] in ("tensorflow", "keras")}
    assert not {n for n in _lite_modules(path)
                if n not in ("lite_launcher.core.base_config", "lite_launcher.core.config_definitions",
                             "lite_launcher.core.registry")
                and not n.startswith("lite_launcher.vision.configs")}


# ---------------------------------------------------------------------------------------------
# vision/ is laid out by role, as TFM's official/vision/, in floors that import only downwards.
# ---------------------------------------------------------------------------------------------

VISION = os.path.join(PACKAGE, "vision")
# Role folder -> its floor: a module imports vision modules of its own folder or lower floors.
# `data` (the record writers, scripts) and `utils` (TFM's visualization helpers) stand on
# ops / evaluation (the converter takes pycocotools' mask codec through coco_utils).
VISION_FLOORS = {"configs": 0, "ops": 1, "evaluation": 1, "data": 2, "modeling": 2,
                 "dataloaders": 2, "utils": 2, "losses": 3, "serving": 3, "tasks": 4}
# Each task family's own modules: none imports another family's.
VISION_TASK_FAMILIES = {
    "image_classification": {
        "configs/image_classification.py", "dataloaders/classification_input.py",
        "modeling/classification_model.py", "serving/image_classification.py",
        "tasks/image_classification.py"},
    "semantic_segmentation": {
        "configs/semantic_segmentation.py", "dataloaders/segmentation_input.py",
        "modeling/segmentation_model.py", "modeling/heads/segmentation_heads.py",
        "losses/segmentation_losses.py", "evaluation/segmentation_metrics.py",
        "serving/semantic_segmentation.py", "tasks/semantic_segmentation.py"},
    # One- and two-stage detection: both tasks stand on tasks/detection.py; Mask R-CNN builds
    # on RetinaNet's configs and RPN head. The detection ops, losses, decoders, serving and
    # COCO evaluator are shared.
    "detection": {
        "configs/retinanet.py", "dataloaders/retinanet_input.py",
        "modeling/retinanet_model.py", "modeling/heads/dense_prediction_heads.py",
        "serving/detection.py", "tasks/detection.py", "tasks/retinanet.py",
        "configs/maskrcnn.py", "dataloaders/maskrcnn_input.py", "modeling/maskrcnn_model.py",
        "modeling/heads/instance_heads.py", "tasks/maskrcnn.py"},
}


def _vision_module_path(name):
    """'lite_launcher.vision.a.b' -> 'a/b.py' or 'a/b/__init__.py' under vision/ (None if
    neither exists, e.g. a name imported from a module)."""
    relative = name.split(".")[2:]
    for candidate in (os.path.join(*relative) + ".py" if relative else None,
                      os.path.join(*relative, "__init__.py") if relative else "__init__.py"):
        if candidate and os.path.exists(os.path.join(VISION, candidate)):
            return candidate
    return None


def _vision_imports(relative_path):
    """The lite_launcher.vision modules a file imports anywhere (function bodies too), by
    module name: `from lite_launcher.vision.x import y` counts `x.y` when y is a module."""
    names = set()
    for node in ast.walk(_tree(relative_path)):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names
                         if a.name.startswith("lite_launcher.vision"))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "lite_launcher.vision"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                names.add(full if _vision_module_path(full) else node.module)
    return names


def vision_layer_violations(imports_by_file):
    """Imports that go up or sideways across vision's floors, or from one task family's
    module into another's. `imports_by_file`: {path under vision/: {imported module names}}."""
    found = []
    family_of = {path: family for family, paths in VISION_TASK_FAMILIES.items()
                 for path in paths}
    for path, imported in sorted(imports_by_file.items()):
        folder = path.split(os.sep)[0]
        for name in sorted(imported):
            target = _vision_module_path(name) or name
            target_folder = name.split(".")[2] if len(name.split(".")) > 2 else None
            if folder in VISION_FLOORS and target_folder in VISION_FLOORS and (
                    target_folder != folder
                    and VISION_FLOORS[target_folder] >= VISION_FLOORS[folder]):
                found.append(f"vision/{path} (floor {VISION_FLOORS[folder]}) imports {name} "
                             f"(floor {VISION_FLOORS[target_folder]})")
            if path in family_of and family_of.get(target, family_of[path]) != family_of[path]:
                found.append(f"vision/{path} ({family_of[path]}) imports {name} "
                             f"({family_of[target]})")
            if folder != "__init__.py" and target_folder in _MOVED_NAMES:
                found.append(f"vision/{path} imports {name} by its old name")
    return found


def _moved_module_names():
    """The old module names under vision/ that the legacy finder serves (`legacy.MOVED`)."""
    from lite_launcher import legacy  # pylint: disable=import-outside-toplevel

    return {name.split(".")[2] for name in legacy.MOVED
            if name.startswith("lite_launcher.vision.")}


# Code inside vision/ imports the new names; only users' code relies on the old ones.
_MOVED_NAMES = _moved_module_names()


def _vision_files():
    return [os.path.relpath(path, VISION) for path in
            (os.path.join(PACKAGE, p) for p in _package_files())
            if os.path.commonpath([path, VISION]) == VISION]


def test_vision_is_laid_out_by_role_with_at_most_three_loose_modules():
    for folder in VISION_FLOORS:
        assert os.path.isfile(os.path.join(VISION, folder, "__init__.py")), folder
    for folder in ("backbones", "decoders", "heads", "layers"):
        assert os.path.isfile(os.path.join(VISION, "modeling", folder, "__init__.py")), folder
    # Each model role picks its piece by the config's `type` in one factory module.
    for folder in ("backbones", "decoders"):
        assert os.path.isfile(os.path.join(VISION, "modeling", folder, "factory.py")), folder
    loose = [name for name in os.listdir(VISION) if name.endswith(".py")]
    assert len(loose) <= 3, loose
    assert not set(os.listdir(VISION)) - set(VISION_FLOORS) - set(loose) - {"__pycache__"}


def test_vision_families_are_where_the_tree_puts_them():
    for path in VISION_FAMILIES + [f"vision/{p}" for paths in VISION_TASK_FAMILIES.values()
                                   for p in paths]:
        assert os.path.isfile(os.path.join(PACKAGE, path)), path


def test_vision_modules_import_only_downwards_and_within_their_family():
    imports = {path: _vision_imports(os.path.join("vision", path)) for path in _vision_files()}
    assert imports["tasks/semantic_segmentation.py"]  # the scan sees the imports
    found = vision_layer_violations(imports)
    assert not found, "\n".join(found)


@pytest.mark.parametrize("path, imported", [
    ("ops/preprocess_ops.py", "lite_launcher.vision.modeling.layers.nn_layers"),  # up
    ("modeling/backbones/resnet.py", "lite_launcher.vision.dataloaders.classification_input"),
    ("configs/common.py", "lite_launcher.vision.ops.preprocess_ops"),
    ("serving/image_classification.py", "lite_launcher.vision.serving.semantic_segmentation"),
    ("tasks/semantic_segmentation.py", "lite_launcher.vision.tasks.image_classification"),
    ("modeling/segmentation_model.py", "lite_launcher.vision.resnet"),  # an old name
])
def test_the_vision_layer_scan_finds_each_kind_of_violation(path, imported):
    assert vision_layer_violations({path: {imported}})


# ---------------------------------------------------------------------------------------------
# Private Keras names: read, written or overridden only in lite_launcher/common/keras_adapter.py.
# ---------------------------------------------------------------------------------------------

KERAS_ADAPTER = "common/keras_adapter.py"


def _keras_private_names():
    """The private names (`_x`) of the Keras objects lite builds on, read off the installed
    Keras: built optimizers (with EMA, loss scaling), a model, layers, a variable, a metric,
    attention, a schedule."""
    import keras  # pylint: disable=import-outside-toplevel
    import numpy as np  # pylint: disable=import-outside-toplevel

    variables = [keras.Variable(np.zeros((2, 2), "float32"))]
    objects = []
    for cls in (keras.optimizers.Adam, keras.optimizers.AdamW, keras.optimizers.SGD,
                keras.optimizers.RMSprop):
        optimizer = cls(use_ema=True)
        optimizer.build(variables)
        objects.append(optimizer)
    scaled = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD())
    scaled.build(variables)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2),
                              keras.layers.BatchNormalization()])
    objects += [scaled, model, *model.layers, variables[0], keras.metrics.Mean(),
                keras.layers.MultiHeadAttention(2, 4), keras.layers.EinsumDense("ab,bc->ac", 3),
                keras.optimizers.schedules.CosineDecay(0.1, 10)]
    names = set()
    for obj in objects:
        for source in (dir(obj), vars(obj), dir(type(obj))):
            names.update(n for n in source if n.startswith("_") and not n.startswith("__"))
    return names


def keras_private_uses(tree, relative_path, keras_names):
    """Where a module reads, writes or overrides a private Keras name: a method named like
    one, or an attribute of that name that the module's own classes never assign (an
    attribute a class sets on itself, `self._dtype = ...`, is its own)."""
    own = {target.attr for node in ast.walk(tree) if isinstance(node, ast.Assign)
           for target in node.targets if isinstance(target, ast.Attribute)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            found += [f"{relative_path}:{item.lineno} overrides {item.name}"
                      for item in node.body if isinstance(item, ast.FunctionDef)
                      and item.name in keras_names]
        elif (isinstance(node, ast.Attribute) and node.attr in keras_names
              and node.attr not in own):
            found.append(f"{relative_path}:{node.lineno} reads {ast.unparse(node)}")
    return found


def test_private_keras_names_only_in_the_adapter():
    keras_names = _keras_private_names()
    found = _scan_outside(KERAS_ADAPTER, lambda tree, path: keras_private_uses(tree, path,
                                                                             keras_names))
    assert not found, "use lite_launcher.common.keras_adapter for private Keras names:\n" + \
        "\n".join(found)


@pytest.mark.parametrize("violation", [
    "def f(self):\n    return self._learning_rate",
    "class A:\n    def _apply_weight_decay(self, variables):\n        pass",
    "index = optimizer._get_variable_index(variable)",
    "slot = self._momentums[0]",
])
def test_the_private_keras_scan_finds_each_kind_of_use(violation):
    assert keras_private_uses(ast.parse(violation), "x.py", _keras_private_names())


def test_the_private_keras_scan_lets_a_classs_own_attributes_through():
    own = ("class A:\n    def __init__(self):\n        self._dtype = 1\n"
           "    def f(self):\n        return self._dtype")
    assert keras_private_uses(ast.parse(own), "x.py", _keras_private_names()) == []


def test_tests_build_the_lite_train_command_in_one_place():
    tests_dir = os.path.dirname(os.path.abspath(__file__))
    by_hand = []
    for directory, _, files in os.walk(tests_dir):
        for name in files:
            path = os.path.join(directory, name)
            if name.endswith(".py") and name != "cli.py" and path != os.path.abspath(__file__):
                with open(path) as f:
                    if '"-m", "lite_launcher.commands.train"' in f.read():
                        by_hand.append(os.path.relpath(path, tests_dir))
    assert not by_hand, f"use tests/cli.py's lite_train_command: {by_hand}"
