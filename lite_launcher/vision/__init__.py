"""TFM's vision families on Keras 3, laid out as TFM's `official/vision/` (docs/architecture.md):

- `configs/`: TensorFlow-free configs and experiment factories (`common`, `backbones`,
  `decoders`, one module per task family).
- `ops/`: image ops (`preprocess_ops`, `augment`); `evaluation/`: metrics.
- `modeling/`: `backbones/`, `decoders/`, `heads/` (each with a `factory` keyed by the config's
  `type`), `layers/` (the shared blocks), each family's model with its builder.
- `dataloaders/`: decoders and parsers into `tf.data`; `losses/`; `serving/` (one export base,
  a module per family); `tasks/` (one per family: wires the pieces); `data/`: TFRecord writers.

The experiments and tasks register with the built-ins (`lite_launcher.common.registry_imports`). This
package imports nothing heavy itself, so that `python -m lite_launcher.vision.make_tfrecords`
starts without TensorFlow until it is needed.

The modules' names before this layout (`lite_launcher.vision.resnet`, ...) still import
(`lite_launcher.legacy`). The old `configs`, `modeling` and `serving` modules are now packages
whose `__getattr__` (`reexport`) serves the old modules' names on first use.
"""

import importlib
import importlib.util
import sys


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
