"""The config base: dataclasses with strict overrides, (de)serialisation and validation.

`Config` is the base of every config: a dataclass that can be overridden from a dict
(field by field, recursively), serialised to and from dicts / YAML, and validated.
`OneOfConfig` is TFM's "oneof" pattern: a `type` field picks one of the sub-config fields.

Override order (as TFM's driver): default config -> each `--config_file` -> `--params_override`.
The experiment configs themselves live in `lite_launcher.core.config_definitions`.
"""

from __future__ import annotations

import collections.abc
import copy
import dataclasses
import difflib
import json
import numbers
import os
import re
import sys
import types
import typing
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import yaml


class ConfigError(ValueError):
    """A user-facing configuration error (bad key, bad type, bad value, bad file)."""


class UnknownConfigKeyError(ConfigError, KeyError):
    """A key the config does not have: a `KeyError`, as TFM's, and a `ConfigError`."""

    def __str__(self):
        # KeyError's str() quotes its message; keep the one-line message as written.
        return str(self.args[0]) if self.args else ""


class ConfigRestrictionError(ConfigError, KeyError):
    """A config that breaks a restriction of its experiment (TFM's `restrictions`): a
    `KeyError`, as TFM's `validate()` raises, and a `ConfigError`."""

    __str__ = UnknownConfigKeyError.__str__


class LockedConfigError(ConfigError):
    """A change to a locked config (`Config.lock()`); a `ValueError`, as TFM's."""


_UNION_ORIGINS = (Union, types.UnionType)
_SEQUENCE_ORIGINS = (list, tuple, collections.abc.Sequence, collections.abc.MutableSequence)
_MAPPING_ORIGINS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)


# TFM task fields that only some task configs have: where an unknown key is one of them, the
# error says which tasks take it (TFM's tutorials set them on the task they train).
_TASK_FIELD_HOMES = {
    "freeze_backbone": "TFM has task.freeze_backbone on image classification, RetinaNet, "
                       "Mask R-CNN, video classification and (newer TFM) semantic "
                       "segmentation; lite on image classification, RetinaNet and semantic "
                       "segmentation.",
}


def _closest(name: str, candidates) -> str:
    """A hint for the unknown key `name`: the valid key it is closest to, or where it exists."""
    if str(name) in _TASK_FIELD_HOMES:
        return " " + _TASK_FIELD_HOMES[str(name)]
    match = difflib.get_close_matches(str(name), [str(c) for c in candidates], n=1)
    return f" Did you mean {match[0]!r}?" if match else ""


def _type_name(tp) -> str:
    if tp is type(None):
        return "None"
    if typing.get_origin(tp) in _UNION_ORIGINS:
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__name__
    return str(tp).replace("typing.", "").replace("collections.abc.", "")


def _unwrap_optional(tp):
    """Returns (type without None, whether None was allowed)."""
    if typing.get_origin(tp) in _UNION_ORIGINS:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        optional = len(args) != len(typing.get_args(tp))
        if len(args) == 1:
            return args[0], optional
        return Union[tuple(args)], optional
    return tp, False


def _is_config_type(tp) -> bool:
    return isinstance(tp, type) and issubclass(tp, Config)


def _resolve_field_types(cls) -> Dict[str, Any]:
    """The annotation of each field, resolved to a type.

    `typing.get_type_hints` fails on string annotations naming classes that are local to a
    function; those fields fall back to the type of their default (or Any).
    """
    fields = dataclasses.fields(cls)
    try:
        hints = typing.get_type_hints(cls)
        return {f.name: hints.get(f.name, Any) for f in fields}
    except (NameError, TypeError):
        pass
    out = {}
    for f in fields:
        tp = f.type
        if isinstance(tp, str):
            module = sys.modules.get(cls.__module__)
            try:
                tp = eval(tp, dict(vars(typing)), dict(vars(module)) if module else {})  # pylint: disable=eval-used
            except Exception:  # pylint: disable=broad-except
                default = _field_default(f)
                tp = type(default) if isinstance(default, Config) else Any
        out[f.name] = tp
    return out


def _field_default(f):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return None


@dataclasses.dataclass
class Config:
    """Base class of all configs.

    Subclasses are dataclasses; every field needs a default (use
    `dataclasses.field(default_factory=...)` for sub-configs and lists). A field whose default
    is None accepts None even when its annotation is not `Optional`, as TFM's configs expect.

    As in TFM, the first positional argument is a dict of overrides
    (`OptimizationConfig({"optimizer": {...}})`), and a dict given for a sub-config, as a
    keyword (`ExperimentConfig(trainer={...})`) or by assignment (`cfg.trainer = {...}`),
    builds the typed sub-config. Both apply the strict checks of `override`: an unknown key is
    an `UnknownConfigKeyError` (a `KeyError`), a wrong type a `ConfigError`. Assigning a dict
    to a sub-config overrides it in place (TFM's `_set`); assigning a config stores a copy.
    Assigning an attribute that is not a field (nor a key added by a non-strict override) is
    an `UnknownConfigKeyError` (TFM would add the key; a typo here is almost always a bug).
    """

    # TFM's `default_params`: overrides applied once the fields are set (strictly).
    default_params: dataclasses.InitVar[Optional[Dict[str, Any]]] = None
    # TFM's lock flag (`lock()`); a class attribute, not a field.
    _locked = False

    def __post_init__(self, default_params=None, restrictions=None):
        if restrictions:
            raise ConfigError(
                f"{type(self).__name__}: TFM's `restrictions` are not supported; check "
                f"cross-field constraints in `_validate` instead.")
        _import_constructor_values(self)
        object.__setattr__(self, "_lite_ready", True)
        if default_params is not None:
            self.override(default_params, is_strict=True)

    def __setattr__(self, name, value):
        state = self.__dict__
        if not state.get("_lite_ready") or name.startswith("_"):
            # The dataclass __init__ (checked in __post_init__) and private attributes.
            object.__setattr__(self, name, value)
            return
        self._check_unlocked(name)
        field_types = self._field_types()
        if name in field_types:
            value = _assigned_value(getattr(self, name), field_types[name], value, name,
                                    nullable=name in self._nullable_fields())
        elif name not in state.get("_lite_extra_keys", ()) and \
                not isinstance(getattr(type(self), name, None), property):
            valid = ", ".join(sorted(field_types)) or "(none)"
            raise UnknownConfigKeyError(
                f"{type(self).__name__} has no config key {name!r}."
                f"{_closest(name, field_types)} Valid keys: {valid}. To add a key, use "
                f"override({{{name!r}: ...}}, is_strict=False).")
        object.__setattr__(self, name, value)

    def __delattr__(self, name):
        self._check_unlocked(name)
        object.__delattr__(self, name)

    def _check_unlocked(self, name) -> None:
        if self._locked:
            raise LockedConfigError(
                f"{type(self).__name__} is locked, so {name!r} cannot be changed; use "
                f"config.replace(...) for a changed (unlocked) copy.")

    # ----- locking (TFM's ParamsDict.lock) ---------------------------------
    def lock(self) -> "Config":
        """Makes this config refuse changes (assignment, `override`, deletion); returns self.

        As TFM's, the lock covers this object: `locked.trainer = ...` and
        `locked.override(...)` raise `LockedConfigError` (a `ValueError`), while a
        sub-config object reached through it keeps its own lock state. `replace` returns an
        unlocked copy.
        """
        object.__setattr__(self, "_locked", True)
        return self

    # ----- introspection -------------------------------------------------
    @classmethod
    def _field_types(cls) -> Dict[str, Any]:
        cache = cls.__dict__.get("_lite_field_types_cache")
        if cache is None:
            cache = _resolve_field_types(cls)
            setattr(cls, "_lite_field_types_cache", cache)
        return cache

    @classmethod
    def _nullable_fields(cls) -> frozenset:
        cache = cls.__dict__.get("_lite_nullable_cache")
        if cache is None:
            cache = frozenset(f.name for f in dataclasses.fields(cls)
                              if f.default is None)
            setattr(cls, "_lite_nullable_cache", cache)
        return cache

    @classmethod
    def field_names(cls) -> List[str]:
        """The dataclass field names, in declaration order."""
        return [f.name for f in dataclasses.fields(cls)]

    def extra_keys(self) -> List[str]:
        """Keys added by a non-strict override (not dataclass fields)."""
        return list(self.__dict__.get("_lite_extra_keys", ()))

    # ----- (de)serialisation ---------------------------------------------
    def as_dict(self) -> Dict[str, Any]:
        """Returns a plain nested dict (lists, dicts, scalars) of this config.

        Keys added by a non-strict override are included, so they survive a round trip.
        """
        out = {name: _to_plain(getattr(self, name)) for name in self.field_names()}
        for key in self.extra_keys():
            out[key] = _to_plain(getattr(self, key))
        return out

    @classmethod
    def from_dict(cls, params: Dict[str, Any], is_strict: bool = True):
        """Builds a config of this class from the defaults overridden by `params`."""
        config = cls()
        config.override(params, is_strict=is_strict)
        return config

    @classmethod
    def from_yaml(cls, path: str, is_strict: bool = True):
        """Builds a config of this class from the defaults overridden by a YAML/JSON file."""
        config = cls()
        config.override(load_config_file(path), is_strict=is_strict)
        return config

    def to_yaml(self) -> str:
        """The config as YAML text (what `save_yaml` writes)."""
        return yaml.safe_dump(self.as_dict(), default_flow_style=False, sort_keys=False)

    def save_yaml(self, path: str) -> None:
        """Writes this config as YAML (atomically: a crash never leaves half a file)."""
        from lite_launcher.common import atomic_write  # pylint: disable=import-outside-toplevel
        atomic_write.write_text(path, self.to_yaml())

    def replace(self, **kwargs):
        """Returns an unlocked copy with `kwargs` overridden (strictly); `self` is unchanged."""
        new = copy.deepcopy(self)
        object.__setattr__(new, "_locked", False)
        new.override(kwargs, is_strict=True)
        return new

    # ----- overrides -----------------------------------------------------
    def override(self, override_params, is_strict: bool = True, _path: str = "") -> "Config":
        """Overrides fields from a dict (or another Config), recursively, in place; returns self.

        Sub-configs and lists of sub-configs of the same length are overridden field by field;
        an Optional sub-config that is None is first created from its type. With `is_strict`,
        an unknown key is an error naming its full dotted path and the valid keys at that
        level; without it, unknown keys are added (and serialised by `as_dict`). A value of the
        wrong type is always an error naming the field, the expected and the given type (an
        int where a float is expected is converted).
        """
        if self._locked:
            keys = list(override_params) if isinstance(override_params,
                                                       collections.abc.Mapping) else []
            self._check_unlocked(keys[0] if keys else "any key")
        if isinstance(override_params, Config):
            override_params = override_params.as_dict()
        if override_params is None:
            return self
        if not isinstance(override_params, collections.abc.Mapping):
            raise ConfigError(
                f"Cannot override config {_path or type(self).__name__!s} with a "
                f"{type(override_params).__name__} ({override_params!r}); expected a mapping.")
        field_types = self._field_types()
        nullable = self._nullable_fields()
        # The `type` of a OneOfConfig goes first, so that the chosen sub-config exists.
        items = sorted(override_params.items(), key=lambda kv: kv[0] != "type")
        for key, value in items:
            dotted = f"{_path}.{key}" if _path else str(key)
            if key not in field_types:
                if is_strict:
                    valid = ", ".join(sorted(field_types)) or "(none)"
                    raise UnknownConfigKeyError(
                        f"Unknown config key {dotted!r}.{_closest(key, field_types)} "
                        f"Valid keys at this level: {valid}.")
                self._set_extra(key, value, dotted)
                continue
            object.__setattr__(self, key, _coerce(getattr(self, key), field_types[key], value,
                                                  dotted, is_strict, nullable=key in nullable))
        return self

    def _set_extra(self, key, value, dotted: str) -> None:
        if not isinstance(key, str) or not key.isidentifier():
            raise ConfigError(f"Cannot add config key {dotted!r}: not a valid name.")
        extras = self.__dict__.setdefault("_lite_extra_keys", [])
        if key not in extras and hasattr(self, key):
            raise ConfigError(
                f"Cannot add config key {dotted!r}: it is the name of a "
                f"{type(self).__name__} attribute.")
        plain = _to_plain(value)
        old = getattr(self, key, None) if key in extras else None
        if isinstance(old, dict) and isinstance(plain, dict):
            plain = _merge_dicts(old, plain)
        object.__setattr__(self, key, plain)
        if key not in extras:
            extras.append(key)

    # ----- validation ----------------------------------------------------
    def validate(self) -> None:
        """Checks cross-field constraints of this config and all sub-configs.

        Subclasses add their own checks in `_validate` and raise `ConfigError`.
        """
        self._validate()
        for name in self.field_names():
            _validate_value(getattr(self, name))

    def _validate(self) -> None:
        pass

    # Dict-style access, handy for ports from TFM's ParamsDict.
    def get(self, key, default=None):
        """`getattr(self, key, default)`."""
        return getattr(self, key, default)

    def __contains__(self, key):
        return hasattr(self, key)


def _needs_import(tp, value) -> bool:
    """Whether a constructor value must be converted: a dict, a list holding dicts, or a
    non-config value where the annotation asks for a config."""
    if isinstance(value, collections.abc.Mapping):
        return True
    if isinstance(value, (list, tuple)):
        return any(isinstance(v, collections.abc.Mapping) for v in value)
    if value is None or isinstance(value, Config):
        return False
    return _mentions_config(tp)


def _mentions_config(tp) -> bool:
    if _is_config_type(tp):
        return True
    return any(_mentions_config(a) for a in typing.get_args(tp) if a is not Ellipsis)


def _import_constructor_values(config: Config) -> None:
    """Turns the dicts given to a config's constructor into typed sub-configs (strictly)."""
    field_types = config._field_types()  # pylint: disable=protected-access
    nullable = config._nullable_fields()  # pylint: disable=protected-access
    for f in dataclasses.fields(config):
        value = config.__dict__.get(f.name)
        if not _needs_import(field_types[f.name], value):
            continue
        default = _field_default(f)
        try:
            imported = _coerce(default, field_types[f.name], value, f.name, is_strict=True,
                               nullable=f.name in nullable)
        except ConfigError as error:
            if isinstance(default, Config) and isinstance(value, collections.abc.Mapping):
                # TFM's `ExperimentConfig(**cfg.as_dict())` with a task of its own class.
                error.args = (f"{error} A dict for {type(config).__name__}.{f.name} builds a "
                              f"{type(default).__name__}; for the fields of a subclass pass "
                              f"an instance of it ({f.name}=MyConfig(...)).",)
            raise
        object.__setattr__(config, f.name, imported)


def _assigned_value(current, tp, value, name: str, nullable: bool):
    """The value stored by `config.name = value`: coerced as by `override` (a dict overrides
    the current sub-config in place), a config of the declared type as a copy, None as None
    (as TFM's; a required section set to None is reported where it is used)."""
    if value is None:
        return None
    inner, _ = _unwrap_optional(tp)
    if isinstance(value, Config) and _mentions_config(inner):
        config_types = [inner] if _is_config_type(inner) else [
            a for a in typing.get_args(inner) if _is_config_type(a)]
        if any(isinstance(value, t) for t in config_types):
            return copy.deepcopy(value)
    return _coerce(current, tp, value, name, is_strict=True, nullable=nullable)


def _validate_value(value) -> None:
    if isinstance(value, Config):
        value.validate()
    elif isinstance(value, (list, tuple)):
        for item in value:
            _validate_value(item)
    elif isinstance(value, dict):
        for item in value.values():
            _validate_value(item)


def _merge_dicts(old: dict, new: dict) -> dict:
    out = dict(old)
    for key, value in new.items():
        if isinstance(out.get(key), dict) and isinstance(value, dict):
            out[key] = _merge_dicts(out[key], value)
        else:
            out[key] = value
    return out


def _to_plain(value):
    if isinstance(value, Config):
        return value.as_dict()
    if isinstance(value, (list, tuple)):
        return [_to_plain(v) for v in value]
    if isinstance(value, collections.abc.Mapping):
        return {k: _to_plain(v) for k, v in value.items()}
    return value


def _bad_type(dotted: str, expected: str, value) -> ConfigError:
    return ConfigError(
        f"Config field {dotted!r} expects {expected}, got {type(value).__name__} ({value!r}).")


def _coerce(current, tp, value, dotted: str, is_strict: bool, nullable: bool = False):
    """Returns the new value of a field of type `tp` (now `current`) overridden by `value`."""
    inner, optional = _unwrap_optional(tp)
    if value is None:
        if optional or nullable or inner is Any or inner is object:
            return None
        if isinstance(current, Config):
            return current  # `field: null` / `field: {}` in YAML keeps a sub-config as is
        raise ConfigError(f"Config field {dotted!r} expects {_type_name(inner)}, got None.")
    if inner is Any or inner is object:
        if isinstance(current, Config) and isinstance(value, (collections.abc.Mapping, Config)):
            return current.override(value, is_strict=is_strict, _path=dotted)
        return copy.deepcopy(value)
    if isinstance(value, Config) and not _is_config_type(inner):
        value = value.as_dict()
    origin = typing.get_origin(inner)
    if origin in _UNION_ORIGINS:
        return _coerce_union(current, inner, value, dotted, is_strict)
    if _is_config_type(inner):
        return _coerce_config(current, inner, value, dotted, is_strict)
    if inner in (list, tuple) or origin in _SEQUENCE_ORIGINS:
        return _coerce_sequence(current, inner, value, dotted, is_strict)
    if inner is dict or origin in _MAPPING_ORIGINS:
        if not isinstance(value, collections.abc.Mapping):
            raise _bad_type(dotted, "a mapping", value)
        args = typing.get_args(inner)
        value_tp = args[1] if len(args) == 2 else Any
        old = current if isinstance(current, dict) else {}
        return {k: _coerce(old.get(k), value_tp, v, f"{dotted}.{k}", is_strict)
                for k, v in value.items()}
    if origin is typing.Literal:
        if value not in typing.get_args(inner):
            choices = ", ".join(repr(a) for a in typing.get_args(inner))
            raise ConfigError(f"Config field {dotted!r} must be one of {choices}, got {value!r}.")
        return value
    return _coerce_scalar(inner, value, dotted)


def _coerce_union(current, tp, value, dotted, is_strict):
    options = [a for a in typing.get_args(tp) if a is not type(None)]
    # A mapping goes to the config option, so that errors inside it keep their detail.
    config_options = [o for o in options if _is_config_type(o)]
    if isinstance(value, (collections.abc.Mapping, Config)) and config_options:
        chosen = next((o for o in config_options if isinstance(current, o)), config_options[0])
        return _coerce_config(current, chosen, value, dotted, is_strict)
    for option in options:
        try:
            return _coerce(current, option, value, dotted, is_strict)
        except ConfigError:
            continue
    raise _bad_type(dotted, _type_name(tp), value)


def _coerce_config(current, cls, value, dotted, is_strict):
    if isinstance(value, Config):
        value = value.as_dict()
    if not isinstance(value, collections.abc.Mapping):
        raise _bad_type(dotted, f"a mapping for {cls.__name__}", value)
    if isinstance(current, Config):
        # As TFM: the instance's class decides the valid keys, not the declared one (a field
        # declared `Cfg1` may hold a `Cfg2`).
        return current.override(value, is_strict=is_strict, _path=dotted)
    # An Optional sub-config that is None (TFM's `ema`, say) is created from its type.
    if is_strict and value and not dataclasses.fields(cls):
        raise UnknownConfigKeyError(
            f"Config field {dotted!r} is None and typed as {cls.__name__}, which has no "
            f"fields, so its keys ({', '.join(map(str, value))}) are unknown. Declare the field "
            f"with a concrete config class (or set a default instance) in "
            f"the enclosing config.")
    return cls().override(value, is_strict=is_strict, _path=dotted)


def _coerce_sequence(current, tp, value, dotted, is_strict):
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise _bad_type(dotted, f"a list ({_type_name(tp)})", value)
    origin = typing.get_origin(tp) or tp
    args = typing.get_args(tp)
    if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
        if args == ((),):
            args = ()
        if len(value) != len(args):
            raise ConfigError(
                f"Config field {dotted!r} expects {len(args)} items ({_type_name(tp)}), got "
                f"{len(value)} ({value!r}).")
        item_types = list(args)
    else:
        item_types = [args[0] if args else Any] * len(value)
    # Same length: each item is overridden in place (field by field for sub-configs), as TFM.
    same_length = isinstance(current, (list, tuple)) and len(current) == len(value)
    olds = list(current) if same_length else [None] * len(value)
    out = [_coerce(old, item_tp, item, f"{dotted}[{i}]", is_strict)
           for i, (old, item_tp, item) in enumerate(zip(olds, item_types, value))]
    as_tuple = origin is tuple or (origin is not list and isinstance(current, tuple))
    return tuple(out) if as_tuple else out


def _coerce_scalar(tp, value, dotted):
    if tp is float:
        if isinstance(value, (bool, _numpy_bool_types())) or not isinstance(value, numbers.Real):
            raise _bad_type(dotted, "float", value)
        return float(value)
    if tp is int:
        if isinstance(value, (bool, _numpy_bool_types())) or not isinstance(value, numbers.Integral):
            raise _bad_type(dotted, "int", value)
        return int(value)
    if tp is bool:
        if not isinstance(value, (bool, _numpy_bool_types())):
            raise _bad_type(dotted, "bool", value)
        return bool(value)
    if tp is str:
        if not isinstance(value, str):
            raise _bad_type(dotted, "str", value)
        return value
    if isinstance(tp, type) and not isinstance(value, tp):
        raise _bad_type(dotted, _type_name(tp), value)
    return value


def _numpy_bool_types() -> tuple:
    """numpy's bool type when numpy is already imported (it is not imported for this)."""
    numpy = sys.modules.get("numpy")
    return (numpy.bool_,) if numpy is not None else ()


@dataclasses.dataclass
class OneOfConfig(Config):
    """TFM's oneof pattern: `type` names which sub-config field is in use.

    `get()` returns the chosen sub-config (or None when `type` is None). `as_dict()` holds only
    `type` and the chosen sub-config, as TFM's.
    """

    type: Optional[str] = None

    def get(self, key=None, default=None):  # pylint: disable=arguments-renamed
        """The chosen sub-config with no argument; `getattr(self, key, default)` with one."""
        if key is not None:
            return getattr(self, key, default)
        if self.type is None:
            return None
        return getattr(self, self.type)

    def choices(self) -> List[str]:
        """The names `type` may take."""
        return [n for n in self.field_names() if n != "type"]

    def as_dict(self):
        # Only the chosen branch is serialised, as TFM does; the rest keep their defaults.
        out = {"type": self.type}
        if self.type is not None:
            out[self.type] = _to_plain(getattr(self, self.type))
        for key in self.extra_keys():
            out[key] = _to_plain(getattr(self, key))
        return out

    def validate(self) -> None:
        """Checks `type` and the chosen sub-config only: as in TFM, the others are never built,
        so values a YAML leaves in them (TFM's MobileDet YAML sets `mobilenet.model_id:
        MobileDetCPU` beside `type: mobiledet`) are not refused."""
        self._validate()
        _validate_value(self.get())
        for key in self.extra_keys():
            _validate_value(getattr(self, key))

    def _validate(self):
        choices = self.choices()
        if self.type is not None and self.type not in choices:
            raise ConfigError(
                f"Unknown {type(self).__name__}.type {self.type!r}.{_closest(self.type, choices)} "
                f"Valid types: {', '.join(choices)}.")

    def override(self, override_params, is_strict=True, _path=""):
        if isinstance(override_params, collections.abc.Mapping) and "type" in override_params:
            choice = override_params["type"]
            choices = self.choices()
            if choice is not None and choice not in choices:
                where = f"{_path}.type" if _path else "type"
                raise ConfigError(
                    f"Unknown value {choice!r} for {where!r}.{_closest(choice, choices)} "
                    f"Valid values: {', '.join(choices)}.")
        return super().override(override_params, is_strict=is_strict, _path=_path)


# ---------------------------------------------------------------------------
# Loading config files and --params_override strings.
# ---------------------------------------------------------------------------


class _YamlLoader(yaml.SafeLoader):  # pylint: disable=too-many-ancestors
    """`yaml.SafeLoader` with two changes for configs.

    - `1e-4` / `3E5` (no dot) are floats, as with TFM's loader.
    - Only true/false are booleans (YAML 1.2): YAML 1.1 also reads on/off/yes/no as booleans,
      which turned `runtime.distribution_strategy=off` into False.
    """

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}


_YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    list("tTfF"))

_YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+.0123456789"))


def load_yaml(text: str):
    """Parses YAML (or JSON) text the way config files and overrides are read."""
    return yaml.load(text, Loader=_YamlLoader)  # nosec: a SafeLoader subclass


def load_config_file(path: str) -> Dict[str, Any]:
    """Reads a YAML or JSON config file into a dict; errors name the file."""
    if not os.path.exists(path):
        raise ConfigError(f"Config file {path!r} does not exist; check the --config_file path.")
    if os.path.isdir(path):
        raise ConfigError(f"Config file {path!r} is a directory, not a YAML/JSON file.")
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise ConfigError(f"Config file {path!r} cannot be read: {e.strerror}.") from e
    try:
        data = json.loads(text) if path.endswith(".json") else load_yaml(text)
    except (yaml.YAMLError, json.JSONDecodeError) as e:
        detail = " ".join(str(e).split())
        raise ConfigError(f"Config file {path!r} is not valid YAML/JSON: {detail}") from e
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"Config file {path!r} must hold a mapping at the top level, got "
            f"{type(data).__name__}.")
    return data


def _split_top_level(text: str, sep: str = ","):
    """Splits on `sep` outside quotes and brackets."""
    parts, depth, quote, start = [], 0, None, 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


# `a.b.c=` at the start of one `--params_override` item.
_CSV_KEY = re.compile(r"^\s*[A-Za-z_][\w.]*\s*=")


def _set_dotted(target: dict, dotted: str, value) -> None:
    keys = dotted.split(".")
    if not all(keys):
        raise ConfigError(f"--params_override key {dotted!r} has an empty part.")
    node = target
    for i, key in enumerate(keys[:-1]):
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ConfigError(
                f"--params_override sets both {'.'.join(keys[:i + 1])!r} and {dotted!r}.")
    if keys[-1] in node:
        kind = "keys below it" if isinstance(node[keys[-1]], dict) else "it twice"
        raise ConfigError(f"--params_override sets {dotted!r} and {kind}.")
    node[keys[-1]] = value


def parse_params_override(params_override: str) -> Dict[str, Any]:
    """Parses `--params_override`: a YAML/JSON string, a YAML file path, or `a.b=1,c.d='x'`.

    Values of `a.b=v` items are read as YAML (`1` is an int, `0.5` and `1e-4` floats,
    `true` a bool, `'x'` or `x` a string, `[1, 2]` a list).
    """
    text = (params_override or "").strip()
    if not text:
        return {}
    if os.path.isfile(text):
        return load_config_file(text)
    if text.endswith((".yaml", ".yml", ".json")) and "=" not in text and ":" not in text:
        raise ConfigError(f"--params_override file {text!r} does not exist.")
    parts = _split_top_level(text)
    if parts and _CSV_KEY.match(parts[0]):
        result: Dict[str, Any] = {}
        for part in parts:
            if not _CSV_KEY.match(part):
                raise ConfigError(
                    f"--params_override item {part!r} is not of the form key=value "
                    f"(e.g. trainer.train_steps=100); quote values holding commas.")
            key, _, raw = part.partition("=")
            raw = raw.strip()
            try:
                value = load_yaml(raw) if raw else ""
            except yaml.YAMLError as e:
                raise ConfigError(
                    f"--params_override value for {key.strip()!r} is not valid YAML: "
                    f"{raw!r}.") from e
            _set_dotted(result, key.strip(), value)
        return result
    try:
        data = load_yaml(text)
    except yaml.YAMLError as e:
        detail = " ".join(str(e).split())
        raise ConfigError(f"--params_override is not valid YAML/JSON: {detail}") from e
    if not isinstance(data, dict):
        raise ConfigError(
            f"--params_override must be a mapping, 'a.b=1,c=2' pairs or a YAML file path; "
            f"got {text!r}.")
    return data


def validate_once(config: Config) -> None:
    """Validates `config` for a run, unless this function already did with its present values.

    The one home of a run's config check: the driver calls it before TensorFlow loads (a bad
    config is one line at once) and the experiment runner calls it for a config built in code;
    on the driver's path the checks run once. A config changed since its last check is checked
    again.
    """
    values = config.as_dict()
    if config.__dict__.get("_lite_validated_values") == values:
        return
    config.validate()
    object.__setattr__(config, "_lite_validated_values", values)


def override_config(config: Config, config_files: Sequence[str] = (),
                    params_override: str = "", is_strict: bool = True) -> Config:
    """Applies config files, then a params_override string, in TFM's order, then validates."""
    for path in config_files or ():
        config.override(load_config_file(path), is_strict=is_strict)
    if params_override:
        config.override(parse_params_override(params_override), is_strict=is_strict)
    config.validate()
    return config
