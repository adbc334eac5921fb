"""Registers the built-in experiments and tasks on import, as TFM's `registry_imports`.

The driver imports it before parsing flags; the top-level `ll.get_exp_config`, `ll.get_task`
and `ll.registered_experiments` are the registry's lookups taken from here, so they find the
built-ins. Which experiments are built in, and the module registering each, is one table:
`lite_launcher.common.builtin_experiments.BUILTIN_EXPERIMENTS` (this module imports every module it
names, each experiment module before its task's).
"""

import importlib

from lite_launcher.common import builtin_experiments
from lite_launcher.core.registry import (  # noqa: F401  (the lookups, built-ins loaded)
    get_exp_config, get_task, get_task_cls, registered_experiments)

for _module in builtin_experiments.registering_modules():
    importlib.import_module(_module)
