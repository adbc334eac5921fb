"""The core, as TFM's `official/core`: configs, registry, task, trainer, the run of an
experiment (`train_lib`) and the driver library (`train_utils`, `actions`, `input_reader`).

TFM's Colab tutorials write `from official.core import exp_factory` and, through
`import tensorflow_models as tfm`, `tfm.core.task_factory.get_task(...)` and
`tfm.core.train_lib.run_experiment(...)`. With `from lite_launcher.core import exp_factory` and
`import lite_launcher as tfm` the same lines run on lite: `exp_factory` and `task_factory` are
the registry's lookups with the built-in experiments registered
(`lite_launcher.common.registry_imports`), `train_lib` and `config_definitions` are this
package's modules. Names load on first use: importing the package imports no TensorFlow.
"""

import importlib

# TFM's module names that lite keeps in one module of another package.
_ELSEWHERE = {"exp_factory": "lite_launcher.common.registry_imports",
              "task_factory": "lite_launcher.common.registry_imports"}


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    try:
        return importlib.import_module(_ELSEWHERE.get(name, f"{__name__}.{name}"))
    except ModuleNotFoundError as error:
        if error.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
