"""Registries: experiment configs by name, and task classes by config type.

`register_config_factory(name)` / `get_exp_config(name)` follow TFM's exp_factory;
`register_task_cls(config_cls)` / `get_task(task_config)` follow TFM's task_factory. The
registries hold what has been registered, nothing more: modules register their experiments
when imported, and the built-in ones are imported by `lite_launcher.common.registry_imports` (as
TFM's `registry_imports`), which the driver and the top-level `ll.get_exp_config` /
`ll.get_task` / `ll.registered_experiments` load.
"""

from __future__ import annotations

import copy
import difflib
import importlib
import inspect
from typing import Callable, Dict, List, Optional, Type

from lite_launcher.core.base_config import ConfigError

_EXPERIMENTS: Dict[str, Callable] = {}
_TASKS: Dict[type, type] = {}

# Entry-point group through which installed packages register experiments.
ENTRY_POINT_GROUP = "lite_launcher.experiments"


class RegistryError(ConfigError):
    """A registry error: an unknown or duplicate entry, or a registry module that fails."""


class UnknownEntryError(RegistryError, LookupError):
    """An experiment, task config or key that is not registered: a `LookupError`, as TFM's."""


class DuplicateEntryError(RegistryError, KeyError):
    """A name or key registered twice: a `KeyError`, as TFM's."""

    def __str__(self):
        # KeyError's str() quotes its message; keep the one-line message as written.
        return str(self.args[0]) if self.args else ""


def register(registered_collection: dict, reg_key):
    """TFM's `registry.register`: a decorator storing a function or class under `reg_key`.

    A string key may be a path, `"models/resnet/v1"`, stored in nested dicts
    (`collection["models"]["resnet"]["v1"]`); any other hashable key is stored as is.
    Registering an existing key, or a path through an entry that is not a folder, is a
    `DuplicateEntryError` (a `KeyError`).
    """

    def decorator(fn_or_cls):
        collection, leaf = registered_collection, reg_key
        if isinstance(reg_key, str):
            *folders, leaf = reg_key.split("/")
            for depth, folder in enumerate(folders):
                collection = collection.setdefault(folder, {})
                if not isinstance(collection, dict):
                    raise DuplicateEntryError(
                        f"Cannot register {reg_key!r}: {'/'.join(folders[:depth + 1])!r} is "
                        f"already registered as {_describe(collection)}, not a folder.")
        if leaf in collection:
            raise DuplicateEntryError(
                f"{reg_key!r} is registered twice: by {_describe(collection[leaf])} and by "
                f"{_describe(fn_or_cls)}.")
        collection[leaf] = fn_or_cls
        return fn_or_cls

    return decorator


def lookup(registered_collection: dict, reg_key):
    """TFM's `registry.lookup`: what `register` stored under `reg_key` (a path for strings).

    An unknown key is an `UnknownEntryError` (a `LookupError`) naming the missing part.
    """
    if not isinstance(reg_key, str):
        if reg_key not in registered_collection:
            raise UnknownEntryError(
                f"{reg_key!r} is not registered; import the module that registers it.")
        return registered_collection[reg_key]
    node = registered_collection
    parts = reg_key.split("/")
    for depth, part in enumerate(parts):
        if not isinstance(node, dict) or part not in node:
            known = ", ".join(sorted(map(str, node))) if isinstance(node, dict) else "(none)"
            raise UnknownEntryError(
                f"{'/'.join(parts[:depth + 1])!r} is not registered (looking up "
                f"{reg_key!r}); registered there: {known or '(none)'}. Import the module "
                f"that registers it.")
        node = node[part]
    return node


def _describe(obj) -> str:
    module = getattr(obj, "__module__", "?")
    name = getattr(obj, "__qualname__", repr(obj))
    try:
        where = f" ({inspect.getsourcefile(obj)}:{inspect.getsourcelines(obj)[1]})"
    except (TypeError, OSError):
        where = ""
    return f"{module}.{name}{where}"


def _closest(name: str, known) -> str:
    match = difflib.get_close_matches(name, list(known), n=1, cutoff=0.5)
    return f" Did you mean {match[0]!r}?" if match else ""


def register_config_factory(name: str):
    """Decorator registering a function that returns a fresh `ExperimentConfig`.

    Registering a name twice is a `RegistryError` naming both registrants.
    """
    if not isinstance(name, str) or not name:
        raise RegistryError(f"An experiment name must be a non-empty string, got {name!r}.")

    def decorator(factory):
        if name in _EXPERIMENTS:
            raise DuplicateEntryError(
                f"Experiment {name!r} is registered twice: by {_describe(_EXPERIMENTS[name])} "
                f"and by {_describe(factory)}.")
        _EXPERIMENTS[name] = factory
        return factory

    return decorator


def registered_experiments() -> List[str]:
    """Names of all registered experiments, sorted."""
    return sorted(_EXPERIMENTS)


def unknown_experiment_error(name: str, known) -> UnknownEntryError:
    """The error for an experiment `name` not among the `known` names: it lists them and
    suggests the closest."""
    listed = ", ".join(sorted(known)) or "(none)"
    return UnknownEntryError(
        f"Unknown experiment {name!r}.{_closest(name, known)} Registered experiments: "
        f"{listed}. Use --registry_imports to load your own (the built-ins register on "
        f"`import lite_launcher.common.registry_imports`).")


def get_exp_config(name: str):
    """Returns a fresh config of experiment `name` (a new object on each call)."""
    if name not in _EXPERIMENTS:
        raise unknown_experiment_error(name, _EXPERIMENTS)
    config = _EXPERIMENTS[name]()
    # A deep copy, so that a factory returning a shared object still gives a fresh config.
    config = copy.deepcopy(config)
    # TFM's experiments that set `task.train_data.is_training` also restrict it to be set
    # (`restrictions`, which lite lacks): validate() checks this mark instead.
    train_data = getattr(getattr(config, "task", None), "train_data", None)
    if getattr(train_data, "is_training", None) is not None:
        object.__setattr__(config, "_lite_train_data_sets_is_training", True)
    return config


def register_task_cls(task_config_cls: type):
    """Decorator registering a `Task` class for a `TaskConfig` subclass."""

    def decorator(task_cls):
        if task_config_cls in _TASKS:
            raise DuplicateEntryError(
                f"Task config {task_config_cls.__name__} is registered twice: by "
                f"{_describe(_TASKS[task_config_cls])} and by {_describe(task_cls)}.")
        _TASKS[task_config_cls] = task_cls
        return task_cls

    return decorator


def get_task_cls(task_config_cls: type) -> Type:
    """The Task class registered for `task_config_cls` or its nearest registered base class."""
    # Walk the MRO so a config subclass finds its parent's task, as in TFM.
    for cls in getattr(task_config_cls, "__mro__", (task_config_cls,)):
        if cls in _TASKS:
            return _TASKS[cls]
    names = {c.__name__: c for c in _TASKS}
    known = ", ".join(sorted(names)) or "(none)"
    raise UnknownEntryError(
        f"No task registered for config {task_config_cls.__name__}."
        f"{_closest(task_config_cls.__name__, names)} Registered task configs: {known}.")


def get_task(task_config, logging_dir: Optional[str] = None, name: Optional[str] = None):
    """Builds the task registered for `type(task_config)`."""
    task_cls = get_task_cls(type(task_config))
    return task_cls(task_config, logging_dir=logging_dir, name=name)


def import_registry_modules(modules) -> None:
    """Imports user `registry_imports` modules; errors name the module."""
    for module in modules or ():
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as e:
            raise RegistryError(
                f"--registry_imports module {module!r} cannot be imported ({e}); check the "
                f"name and that its package is on PYTHONPATH.") from e


def load_entry_point_plugins() -> List[str]:
    """Imports every module registered under the `lite_launcher.experiments` entry-point group."""
    from importlib import metadata

    loaded = []
    try:
        entry_points = metadata.entry_points(group=ENTRY_POINT_GROUP)
    except TypeError:  # Python < 3.10 style API
        entry_points = metadata.entry_points().get(ENTRY_POINT_GROUP, [])
    for entry_point in entry_points:
        try:
            entry_point.load()
        except ImportError as e:
            # One broken plugin would otherwise break every `lite-train` run with a traceback.
            dist = getattr(getattr(entry_point, "dist", None), "name", None) or "?"
            raise RegistryError(
                f"Installed plugin {entry_point.name!r} ({entry_point.value}, from "
                f"distribution {dist!r}, entry-point group {ENTRY_POINT_GROUP!r}) cannot be "
                f"imported: {e}. Fix or uninstall that package.") from e
        loaded.append(entry_point.name)
    return loaded
