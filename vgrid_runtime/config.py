"""Typed configuration for the vwn_agents services: one dataclass per service is the schema.

``load(cls, d, source)`` builds the dataclass ``cls`` from a mapping, rejecting unknown fields,
missing required fields and ill-typed values with a ``ConfigError`` naming the field (and the file).
Field types understood: str, int, float (an int is accepted), bool, ``list[str]``, a
dataclass (a TOML table, loaded by the same rules; ``list[D]`` an array of tables), and
``X | None``. Each field's documentation is its ``metadata["help"]``.
"""
from __future__ import annotations

import dataclasses
import tomllib
import types
import typing
from pathlib import Path


class ConfigError(ValueError):
    """Bad configuration; ``str()`` names the source and the field."""


def _type_name(tp) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _check(value, tp, where: str):
    """``value`` converted to ``tp`` or ConfigError."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _check(value, inner[0], where)
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return [_check(v, item_tp, f"{where}[{i}]") for i, v in enumerate(value)]
    if dataclasses.is_dataclass(tp):         # a nested table ([[peers]] in the broker's)
        return load(tp, value, where)
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is int and isinstance(value, bool):
        raise ConfigError(f"{where}: expected an integer, got {value!r}")
    if not isinstance(value, tp):
        raise ConfigError(f"{where}: expected {_type_name(tp)}, got {value!r}")
    return value


def load(cls, d: dict, source: str = "config"):
    """An instance of dataclass ``cls`` from mapping ``d``; raises ConfigError naming the field."""
    if not isinstance(d, dict):
        raise ConfigError(f"{source}: expected a table of fields, got {type(d).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - set(fields))
    if unknown:
        raise ConfigError(f"{source}: unknown field {unknown[0]!r} (known: {', '.join(fields)})")
    kwargs = {}
    for name, f in fields.items():
        if name not in d:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ConfigError(f"{source}: missing required field {name!r}")
            continue
        kwargs[name] = _check(d[name], hints[name], f"{source}: field {name!r}")
    obj = cls(**kwargs)
    validate = getattr(obj, "validate", None)
    if validate:
        problem = validate()
        if problem:
            raise ConfigError(f"{source}: {problem}")
    return obj


def read_toml(path: str | Path, error: type[Exception] = None, what: str = "") -> dict:
    """The parsed TOML file ``path``. An unreadable file or a TOML syntax error (with its line
    and column) raises ``error`` (default ConfigError) naming the file; ``what`` names what the
    file is for in the unreadable case (e.g. "CE spec")."""
    error = error or ConfigError
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise error(f"{path}: cannot read{' ' + what if what else ''}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{path}: {exc}") from None


def load_toml(cls, path: str | Path):
    """``load(cls, <parsed TOML file>, source=path)``; a TOML syntax error is a ConfigError."""
    return load(cls, read_toml(path), str(path))


class ConfigSchema:
    """Mixin for a configuration dataclass: ``from_dict`` and ``from_toml`` through
    :func:`load` / :func:`load_toml` (ConfigError naming the unknown, missing or ill-typed
    field). ``SOURCE`` names the configuration in messages about a dict."""

    SOURCE = "config"

    @classmethod
    def from_dict(cls, d: dict, source: str | None = None):
        return load(cls, d, source or cls.SOURCE)

    @classmethod
    def from_toml(cls, path: str | Path):
        return load_toml(cls, path)


def describe(cls) -> list[dict]:
    """The schema as ``[{"name", "type", "default", "help"}]`` (for documentation)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        default = None if f.default is dataclasses.MISSING else f.default
        if f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        out.append({"name": f.name, "type": _type_name(hints[f.name]), "default": default,
                    "help": f.metadata.get("help", "")})
    return out
