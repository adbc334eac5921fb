"""TFM's vision families on Keras 3, laid out as TFM's `official/vision/` (docs/architecture.md):

- `configs/`: TensorFlow-free configs and experiment factories (`common`, `backbones`,
  `decoders`, one module per task family).
- `ops/`: image ops (`preprocess_ops`, `augment`); `evaluation/`: metrics.
- `modeling/`: `backbones/`, `decoders/`, `heads/` (each with a `factory` keyed by the config's
  `type`), `layers/` (the shared blocks), each family's model with its builder.
- `dataloaders/`: decoders and parsers into `tf.data`; `losses/`; `serving/` (one export base,
  a module per family); `tasks/` (one per family: wires the pieces); `data/`: TFRecord writers.

The experiments and tasks register with the built-ins (`lite_launcher.registry_imports`). This
package imports nothing heavy itself, so that `python -m lite_launcher.vision.make_tfrecords`
starts without TensorFlow until it is needed.

The modules' names before this layout (`lite_launcher.vision.resnet`, `.segmentation_configs`,
...) still import: `_MOVED` maps each to its new module, and a meta-path finder hands that
module object out under the old name (the same object, so patching either name patches both).
The old `configs`, `modeling` and `serving` modules are now packages whose `__getattr__`
(`reexport`) serves the old modules' names on first use.
"""

import importlib
import importlib.abc
import importlib.util
import sys

# Old module (under lite_launcher.vision) -> its module now (under lite_launcher.vision).
_MOVED = {
    "segmentation_configs": "configs.semantic_segmentation",
    "layers": "modeling.layers.nn_layers",
    "resnet": "modeling.backbones.resnet",
    "resnet_deeplab": "modeling.backbones.resnet_deeplab",
    "mobilenet": "modeling.backbones.mobilenet",
    "vit": "modeling.backbones.vit",
    "decoders": "modeling.decoders.factory",
    "segmentation_heads": "modeling.heads.segmentation_heads",
    "segmentation_model": "modeling.segmentation_model",
    "augment": "ops.augment",
    "classification_input": "dataloaders.classification_input",
    "segmentation_input": "dataloaders.segmentation_input",
    "segmentation_losses": "losses.segmentation_losses",
    "segmentation_metrics": "evaluation.segmentation_metrics",
    "image_classification": "tasks.image_classification",
    "semantic_segmentation": "tasks.semantic_segmentation",
    "segmentation_serving": "serving.semantic_segmentation",
    "make_tfrecords": "data.make_tfrecords",
}


def _target(fullname):
    package, _, name = fullname.rpartition(".")
    if package == __name__ and name in _MOVED:
        return f"{__name__}.{_MOVED[name]}"
    return None


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old module name as its new module (one object under both names)."""

    def find_spec(self, fullname, path=None, target=None):  # pylint: disable=unused-argument
        if _target(fullname) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):  # pylint: disable=unused-argument
        return None  # a placeholder; exec_module swaps the real module in

    def exec_module(self, module):
        # The import system returns what sys.modules holds under the name after exec_module.
        sys.modules[module.__name__] = importlib.import_module(_target(module.__name__))

    def get_code(self, fullname):
        """The new module's code: `python -m <old name>` runs it."""
        new_name = _target(fullname)
        return importlib.util.find_spec(new_name).loader.get_code(new_name)


if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModuleFinder())


def reexport(package: str, homes):
    """A module `__getattr__` for `package` that serves names from the modules `homes` (full
    names, searched in order, imported on first use): a package keeps the public names of the
    module it replaced without importing them, or TensorFlow, until they are asked for."""

    def __getattr__(name):
        # `from package import submodule` asks here first: a submodule's name imports nothing.
        if not name.startswith("__") and importlib.util.find_spec(f"{package}.{name}") is None:
            for home in homes:
                value = getattr(importlib.import_module(home), name, None)
                if value is not None and not isinstance(value, type(sys)):
                    return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
