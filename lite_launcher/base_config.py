"""The config base: dataclasses with strict overrides, (de)serialisation and validation.

`Config` is the base of every config: a dataclass that can be overridden from a dict
(field by field, recursively), serialised to and from dicts / YAML, and validated.
`OneOfConfig` is TFM's "oneof" pattern: a `type` field picks one of the sub-config fields.

Override order (as TFM's driver): default config -> each `--config_file` -> `--params_override`.
The experiment configs themselves live in `lite_launcher.config`.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import os
import types
import typing
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import yaml


class ConfigError(ValueError):
    """A user-facing configuration error (bad key, bad type, bad value, bad file)."""


def _closest(name: str, candidates) -> str:
    match = difflib.get_close_matches(str(name), [str(c) for c in candidates], n=1)
    return f" Did you mean {match[0]!r}?" if match else ""


def _type_name(tp) -> str:
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


def _unwrap_optional(tp):
    """Returns (inner_type, is_optional)."""
    origin = typing.get_origin(tp)
    if origin in (Union, getattr(types, "UnionType", Union)):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        optional = len(args) != len(typing.get_args(tp))
        if len(args) == 1:
            return args[0], optional
        return Union[tuple(args)], optional
    return tp, False


def _is_config_type(tp) -> bool:
    return isinstance(tp, type) and issubclass(tp, Config)


@dataclasses.dataclass
class Config:
    """Base class of all configs.

    Subclasses are dataclasses; every field needs a default (use
    `dataclasses.field(default_factory=...)` for sub-configs and lists).
    """

    # ----- introspection -------------------------------------------------
    @classmethod
    def _field_types(cls) -> Dict[str, Any]:
        cache = cls.__dict__.get("_lite_field_types_cache")
        if cache is None:
            hints = typing.get_type_hints(cls)
            cache = {f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls)}
            setattr(cls, "_lite_field_types_cache", cache)
        return cache

    @classmethod
    def field_names(cls) -> List[str]:
        return [f.name for f in dataclasses.fields(cls)]

    # ----- (de)serialisation ---------------------------------------------
    def as_dict(self) -> Dict[str, Any]:
        """Returns a plain nested dict (lists, dicts, scalars) of this config."""
        return {name: _to_plain(getattr(self, name)) for name in self.field_names()}

    @classmethod
    def from_dict(cls, params: Dict[str, Any]):
        """Builds a config of this class from the defaults overridden by `params`."""
        config = cls()
        config.override(params, is_strict=True)
        return config

    @classmethod
    def from_yaml(cls, path: str):
        config = cls()
        config.override(load_config_file(path), is_strict=True)
        return config

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.as_dict(), default_flow_style=False, sort_keys=False)

    def save_yaml(self, path: str) -> None:
        """Writes this config as YAML (atomically: a crash never leaves half a file)."""
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(self.to_yaml())
        os.replace(tmp, path)

    def replace(self, **kwargs):
        """Returns a copy with `kwargs` overridden."""
        new = copy.deepcopy(self)
        new.override(kwargs, is_strict=True)
        return new

    def copy(self):
        return copy.deepcopy(self)

    # ----- overrides -----------------------------------------------------
    def override(self, override_params, is_strict: bool = True, _path: str = "") -> "Config":
        """Overrides fields from a dict (or another Config), recursively, in place.

        With `is_strict`, an unknown key is an error naming its full dotted path and the valid
        keys at that level; without it, unknown keys are added as plain attributes. A value of
        the wrong type is always an error naming the field, the expected and the given type.
        """
        if isinstance(override_params, Config):
            override_params = override_params.as_dict()
        if override_params is None:
            return self
        if not isinstance(override_params, dict):
            raise ConfigError(
                f"Cannot override config {_path or type(self).__name__!s} with a "
                f"{type(override_params).__name__} ({override_params!r}); expected a mapping.")
        field_types = self._field_types()
        # The `type` of a OneOfConfig goes first, so that the chosen sub-config exists.
        items = sorted(override_params.items(), key=lambda kv: kv[0] != "type")
        for key, value in items:
            dotted = f"{_path}.{key}" if _path else str(key)
            if key not in field_types:
                if is_strict:
                    valid = ", ".join(sorted(field_types))
                    raise ConfigError(
                        f"Unknown config key {dotted!r}.{_closest(key, field_types)} "
                        f"Valid keys at this level: {valid}.")
                setattr(self, key, value)
                continue
            setattr(self, key, _coerce(getattr(self, key), field_types[key], value, dotted,
                                       is_strict))
        return self

    # ----- validation ----------------------------------------------------
    def validate(self) -> None:
        """Checks cross-field constraints of this config and all sub-configs.

        Subclasses add their own checks in `_validate` and raise `ConfigError`.
        """
        self._validate()
        for name in self.field_names():
            value = getattr(self, name)
            if isinstance(value, Config):
                value.validate()
            elif isinstance(value, (list, tuple)):
                for item in value:
                    if isinstance(item, Config):
                        item.validate()

    def _validate(self) -> None:
        pass

    # Dict-style access, handy for ports from TFM's ParamsDict.
    def get(self, key, default=None):
        return getattr(self, key, default)

    def __contains__(self, key):
        return hasattr(self, key)


def _to_plain(value):
    if isinstance(value, Config):
        return value.as_dict()
    if isinstance(value, (list, tuple)):
        return [_to_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_plain(v) for k, v in value.items()}
    return value


def _coerce(current, tp, value, dotted: str, is_strict: bool):
    """Returns the new value of a field of type `tp` overridden by `value`."""
    inner, optional = _unwrap_optional(tp)
    if value is None:
        if optional or inner is Any:
            return None
        if isinstance(current, Config) or _is_config_type(inner):
            return current  # `field: {}` / `field: null` in YAML keeps a sub-config as is
        raise ConfigError(f"Config field {dotted!r} expects {_type_name(inner)}, got None.")
    if isinstance(value, Config):
        value = value.as_dict()
    if _is_config_type(inner):
        if not isinstance(value, dict):
            raise ConfigError(
                f"Config field {dotted!r} expects a mapping for {inner.__name__}, "
                f"got {type(value).__name__} ({value!r}).")
        # An Optional sub-config that is None (TFM's `ema`, say) is created from its type.
        target = current if isinstance(current, Config) else inner()
        target.override(value, is_strict=is_strict, _path=dotted)
        return target
    return _check_value(inner, value, dotted, is_strict)


def _check_value(tp, value, dotted, is_strict):
    if tp is Any or tp is object:
        return value
    origin = typing.get_origin(tp)
    if origin in (Union, getattr(types, "UnionType", Union)):
        errors = []
        for option in typing.get_args(tp):
            if option is type(None):
                continue
            try:
                return _check_value(option, value, dotted, is_strict)
            except ConfigError as e:
                errors.append(e)
        raise ConfigError(
            f"Config field {dotted!r} expects {_type_name(tp)}, got "
            f"{type(value).__name__} ({value!r}).")
    if origin in (list, List, Sequence, tuple, Tuple) or tp in (list, tuple):
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            raise ConfigError(
                f"Config field {dotted!r} expects a list ({_type_name(tp)}), got "
                f"{type(value).__name__} ({value!r}).")
        args = typing.get_args(tp)
        item_tp = args[0] if args and args[-1] is not Ellipsis or len(args) == 2 else Any
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            item_tp = args[0]
        out = []
        for i, item in enumerate(value):
            item_inner, _ = _unwrap_optional(item_tp)
            if _is_config_type(item_inner):
                if isinstance(item, Config):
                    item = item.as_dict()
                if not isinstance(item, dict):
                    raise ConfigError(
                        f"Config field {dotted}[{i}] expects a mapping for "
                        f"{item_inner.__name__}, got {type(item).__name__}.")
                sub = item_inner()
                sub.override(item, is_strict=is_strict, _path=f"{dotted}[{i}]")
                out.append(sub)
            else:
                out.append(_check_value(item_tp, item, f"{dotted}[{i}]", is_strict))
        return tuple(out) if origin is tuple or tp is tuple else out
    if origin in (dict, Dict) or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(
                f"Config field {dotted!r} expects a mapping, got {type(value).__name__} "
                f"({value!r}).")
        return dict(value)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(
                f"Config field {dotted!r} expects float, got {type(value).__name__} ({value!r}).")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(
                f"Config field {dotted!r} expects int, got {type(value).__name__} ({value!r}).")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(
                f"Config field {dotted!r} expects bool, got {type(value).__name__} ({value!r}).")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(
                f"Config field {dotted!r} expects str, got {type(value).__name__} ({value!r}).")
        return value
    if isinstance(tp, type) and not isinstance(value, tp):
        raise ConfigError(
            f"Config field {dotted!r} expects {_type_name(tp)}, got {type(value).__name__} "
            f"({value!r}).")
    return value


@dataclasses.dataclass
class OneOfConfig(Config):
    """TFM's oneof pattern: `type` names which sub-config field is in use.

    `get()` returns the chosen sub-config (or None when `type` is None).
    """

    type: Optional[str] = None

    def get(self, key=None, default=None):  # pylint: disable=arguments-renamed
        if key is not None:
            return getattr(self, key, default)
        if self.type is None:
            return None
        return getattr(self, self.type)

    def as_dict(self):
        # Only the chosen branch is serialised, as TFM does; the rest keep their defaults.
        if self.type is None:
            return {"type": None}
        return {"type": self.type, self.type: _to_plain(getattr(self, self.type))}

    def _validate(self):
        choices = [n for n in self.field_names() if n != "type"]
        if self.type is not None and self.type not in choices:
            raise ConfigError(
                f"Unknown {type(self).__name__}.type {self.type!r}.{_closest(self.type, choices)} "
                f"Valid types: {', '.join(choices)}.")

    def override(self, override_params, is_strict=True, _path=""):
        if isinstance(override_params, dict) and "type" in override_params:
            choice = override_params["type"]
            choices = [n for n in self.field_names() if n != "type"]
            if choice is not None and choice not in choices:
                where = f"{_path}.type" if _path else "type"
                raise ConfigError(
                    f"Unknown value {choice!r} for {where!r}.{_closest(choice, choices)} "
                    f"Valid values: {', '.join(choices)}.")
        return super().override(override_params, is_strict=is_strict, _path=_path)


# ---------------------------------------------------------------------------
# Loading config files and --params_override strings.
# ---------------------------------------------------------------------------


def load_config_file(path: str) -> Dict[str, Any]:
    """Reads a YAML or JSON config file into a dict; errors name the file."""
    if not os.path.exists(path):
        raise ConfigError(f"Config file {path!r} does not exist; check the --config_file path.")
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise ConfigError(f"Config file {path!r} cannot be read: {e.strerror}.") from e
    try:
        if path.endswith(".json"):
            data = json.loads(text)
        else:
            data = yaml.safe_load(text)
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


def _set_dotted(target: dict, dotted: str, value) -> None:
    keys = dotted.split(".")
    node = target
    for key in keys[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ConfigError(f"--params_override sets both {key!r} and keys below it.")
    node[keys[-1]] = value


def parse_params_override(params_override: str) -> Dict[str, Any]:
    """Parses `--params_override`: a YAML/JSON string, a YAML file path, or `a.b=1,c.d='x'`."""
    text = (params_override or "").strip()
    if not text:
        return {}
    if os.path.isfile(text):
        return load_config_file(text)
    if text.endswith((".yaml", ".yml", ".json")) and "=" not in text and ":" not in text:
        raise ConfigError(f"--params_override file {text!r} does not exist.")
    is_csv = "=" in text and not text.lstrip().startswith(("{", "["))
    if is_csv:
        result: Dict[str, Any] = {}
        for part in _split_top_level(text):
            key, sep, raw = part.partition("=")
            key = key.strip()
            if not sep or not key:
                raise ConfigError(
                    f"--params_override item {part!r} is not of the form key=value "
                    f"(e.g. trainer.train_steps=100).")
            try:
                value = yaml.safe_load(raw.strip()) if raw.strip() else ""
            except yaml.YAMLError as e:
                raise ConfigError(
                    f"--params_override value for {key!r} is not valid YAML: {raw.strip()!r}.") from e
            _set_dotted(result, key, value)
        return result
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        detail = " ".join(str(e).split())
        raise ConfigError(f"--params_override is not valid YAML/JSON: {detail}") from e
    if not isinstance(data, dict):
        raise ConfigError(
            f"--params_override must be a mapping, 'a.b=1,c=2' pairs or a YAML file path; "
            f"got {text!r}.")
    return data


def override_config(config: Config, config_files: Sequence[str] = (),
                    params_override: str = "", is_strict: bool = True) -> Config:
    """Applies config files, then a params_override string, in TFM's order, then validates."""
    for path in config_files or ():
        config.override(load_config_file(path), is_strict=is_strict)
    if params_override:
        config.override(parse_params_override(params_override), is_strict=is_strict)
    config.validate()
    return config
