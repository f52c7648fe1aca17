"""Configuration of the broker service: one declarative schema for validation, defaults and docs.

A TOML file with a ``[broker]`` table; every option is a field of :class:`BrokerConfig` whose
metadata gives its documentation (rendered in docs/cli.md). Unknown or ill-typed options raise
:class:`ConfigError` naming the file and the option.
"""
from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A configuration file or value is wrong; the message names the file and the option."""


def opt(default: Any, doc: str, **kw: Any):
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"doc": doc, **kw})
    return field(default=default, metadata={"doc": doc, **kw})


@dataclass
class BrokerConfig:
    """Options of ``vgrid serve broker`` (table ``[broker]``)."""

    host: str = opt("127.0.0.1", "address to listen on")
    port: int = opt(0, "TCP port; 0 takes a free one")
    database_url: str = opt("", "SQLAlchemy URL of the job database; empty = SQLite file in state_dir")
    state_dir: str = opt("vgrid-broker", "directory for the SQLite database and the sandboxes")
    ce_urls: list = opt([], "CE agent URLs whose GLUE LDIF (GET /glue) feeds the ISM (embedded default)")
    bdii: str = opt("", "LDAP URL of a BDII; when set, the ISM reads GLUE from it instead of ce_urls")
    ism_refresh_s: float = opt(30.0, "seconds between ISM refreshes (gLite default 240)")
    ism_timeout_s: float = opt(10.0, "seconds a source may take to answer a refresh")
    selection: str = opt("sfete", "default selection policy: sfete, max or fuzzy")
    fuzzy_factor: float = opt(1.0, "FuzzyFactor of Fuzzy Rank")
    match_interval_s: float = opt(0.5, "seconds between matcher passes over Waiting jobs")
    match_expiry_s: float = opt(30.0, "a job no CE matches for this long ends Aborted")
    max_dispatch_attempts: int = opt(5, "dispatch attempts before a job ends Aborted")
    seed: int = opt(-1, "random seed for tie-breaks and Fuzzy Rank; -1 = from the OS")

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<config>") -> "BrokerConfig":
        return from_dict(cls, data, source)

    @classmethod
    def from_toml(cls, path: str | Path, table: str = "broker") -> "BrokerConfig":
        return from_toml(cls, path, table)


def _check(name: str, value: Any, typ: Any, source: str) -> Any:
    if typ in ("float", float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    expected = {"str": str, "int": int, "float": float, "bool": bool, "list": list}.get(typ, typ)
    if expected is int and isinstance(value, bool) or not isinstance(value, expected):
        raise ConfigError(f"{source}: option {name!r} must be {expected.__name__}, "
                          f"got {type(value).__name__} {value!r}")
    return value


def from_dict(cls, data: dict[str, Any], source: str = "<config>"):
    """Build the dataclass ``cls`` from ``data``; ConfigError for unknown or ill-typed options."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"{source}: unknown option(s) {', '.join(unknown)}; "
                          f"known: {', '.join(fields)}")
    values = {k: _check(k, v, fields[k].type, source) for k, v in data.items()}
    return cls(**values)


def from_toml(cls, path: str | Path, table: str):
    """Read table ``[table]`` of a TOML file into ``cls`` (ConfigError names the file)."""
    try:
        doc = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    data = doc.get(table, {})
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: [{table}] must be a table")
    return from_dict(cls, data, f"{path} [{table}]")


def options_doc(cls) -> list[tuple[str, str, Any]]:
    """(name, doc, default) for every option of ``cls``, for the documentation."""
    out = []
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        out.append((f.name, f.metadata.get("doc", ""), default))
    return out
