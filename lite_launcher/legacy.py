"""Old module names, each imported as the module that holds its code now.

lite's modules moved twice: the vision families into TFM's `official/vision/` tree
(`lite_launcher.vision.resnet` -> `lite_launcher.vision.modeling.backbones.resnet`), and the
core out of 33 flat modules into TFM's roles (`lite_launcher.trainer` ->
`lite_launcher.core.base_trainer`, `lite_launcher.controller` -> `lite_launcher.orbit.controller`,
`lite_launcher.main` -> `lite_launcher.commands.train`, ...). Code written against the old names
(user drivers, gin files, saved `.keras` files naming a layer's old module, `python -m` lines)
keeps working: `MOVED` maps each old name to its module now, and the finder installed by
`lite_launcher/__init__.py` hands that module out under the old name — the same object, so
patching either name patches both. TFM's `official.core` names that lite keeps in one module
(`exp_factory` and `task_factory` are the registry's lookups with the built-ins registered)
are entries here too.

This module imports no lite module: the table is data, looked up on import of an old name.
"""

import importlib
import importlib.abc
import importlib.util
import sys

# Old full module name -> the full name of the module that holds its code now.
MOVED = {
    f"lite_launcher.{old}": f"lite_launcher.{new}" for old, new in {
        # The core, by role (TFM's official/core, official/common, orbit; the commands).
        "actions": "core.actions",
        "base_config": "core.base_config",
        "config": "core.config_definitions",
        "registry": "core.registry",
        "task": "core.base_task",
        "trainer": "core.base_trainer",
        "experiment": "core.train_lib",
        "train_lib": "core.train_lib",
        "train_utils": "core.train_utils",
        "input_reader": "core.input_reader",
        "exporter": "core.exporter",
        "modes": "core.modes",
        "model_dir_files": "core.model_dir_files",
        "core.exp_factory": "common.registry_imports",
        "core.task_factory": "common.registry_imports",
        "controller": "orbit.controller",
        "loops": "orbit.loops",
        "summaries": "orbit.summaries",
        "strategy": "common.distribute_utils",
        "flags": "common.flags",
        "registry_imports": "common.registry_imports",
        "builtin_experiments": "common.builtin_experiments",
        "errors": "common.errors",
        "atomic_write": "common.atomic_write",
        "model_dir_lock": "common.model_dir_lock",
        "onednn": "common.onednn",
        "autograph_policy": "common.autograph_policy",
        "keras_adapter": "common.keras_adapter",
        "checkpoints": "checkpointing.checkpoints",
        "tfm_checkpoint": "checkpointing.tfm_checkpoint",
        "main": "commands.train",
        "export": "commands.export",
        "convert": "commands.convert",
        # The vision families, into TFM's official/vision tree.
        "vision.segmentation_configs": "vision.configs.semantic_segmentation",
        "vision.layers": "vision.modeling.layers.nn_layers",
        "vision.resnet": "vision.modeling.backbones.resnet",
        "vision.resnet_deeplab": "vision.modeling.backbones.resnet_deeplab",
        "vision.mobilenet": "vision.modeling.backbones.mobilenet",
        "vision.vit": "vision.modeling.backbones.vit",
        "vision.decoders": "vision.modeling.decoders.factory",
        "vision.segmentation_heads": "vision.modeling.heads.segmentation_heads",
        "vision.segmentation_model": "vision.modeling.segmentation_model",
        "vision.augment": "vision.ops.augment",
        "vision.classification_input": "vision.dataloaders.classification_input",
        "vision.segmentation_input": "vision.dataloaders.segmentation_input",
        "vision.segmentation_losses": "vision.losses.segmentation_losses",
        "vision.segmentation_metrics": "vision.evaluation.segmentation_metrics",
        "vision.image_classification": "vision.tasks.image_classification",
        "vision.semantic_segmentation": "vision.tasks.semantic_segmentation",
        "vision.segmentation_serving": "vision.serving.semantic_segmentation",
        "vision.make_tfrecords": "vision.data.make_tfrecords",
    }.items()
}


class MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old module name as its module now (one object under both names)."""

    def find_spec(self, fullname, path=None, target=None):  # pylint: disable=unused-argument
        if fullname not in MOVED:
            return None
        # The new module's file as the origin: `python -m <old name>` sets sys.argv[0] to it.
        new_spec = importlib.util.find_spec(MOVED[fullname])
        return importlib.util.spec_from_loader(fullname, self,
                                               origin=new_spec.origin if new_spec else None)

    def create_module(self, spec):  # pylint: disable=unused-argument
        return None  # a placeholder; exec_module swaps the real module in

    def exec_module(self, module):
        # The import system returns what sys.modules holds under the name after exec_module.
        sys.modules[module.__name__] = importlib.import_module(MOVED[module.__name__])

    def get_code(self, fullname):
        """The new module's code: `python -m <old name>` runs it."""
        new_name = MOVED[fullname]
        return importlib.util.find_spec(new_name).loader.get_code(new_name)


def install() -> None:
    """Puts the finder on `sys.meta_path` once (after the path finders: a real module of an
    old name, should one come back, wins)."""
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder())
