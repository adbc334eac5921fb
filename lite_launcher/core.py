"""TFM's `official.core` modules a tutorial imports, under lite's names.

TFM's Colab tutorials write `from official.core import exp_factory` and, through
`import tensorflow_models as tfm`, `tfm.core.task_factory.get_task(...)` and
`tfm.core.train_lib.run_experiment(...)`. With `from lite_launcher.core import exp_factory`
and `import lite_launcher as tfm` the same lines run on lite: `exp_factory` and
`task_factory` are the registry's lookups with the built-in experiments registered
(`ll.get_exp_config`, `ll.get_task`), `train_lib` is `lite_launcher.train_lib` and
`config_definitions` is `lite_launcher.config`. `import lite_launcher.core.train_lib` (TFM:
`import official.core.train_lib`) works too: the four names are also registered as this
module's submodules. Importing this module imports TensorFlow.
"""

import sys

from lite_launcher import config as config_definitions  # noqa: F401
from lite_launcher import registry_imports as exp_factory  # noqa: F401
from lite_launcher import registry_imports as task_factory  # noqa: F401
from lite_launcher import train_lib  # noqa: F401

# `import lite_launcher.core.<name>` looks in sys.modules before it searches for a file.
for _name in ("config_definitions", "exp_factory", "task_factory", "train_lib"):
    sys.modules.setdefault(f"{__name__}.{_name}", globals()[_name])
