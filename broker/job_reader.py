"""Jobs from bulk result rows by position, not by name (issue 12, session 6).

A matcher pass claims thousands of rows at once (``UPDATE ... RETURNING``); building each
:class:`broker.db.Job` by looking its ~40 columns up by name cost ~25 µs per job, a sixth of
the matcher's CPU per job. :func:`row_reader` makes, once per column list, a function that
builds a Job from a row tuple by index with the same conversions as ``JobStore._to_job``
(gLite state, JSON lists, typed outcome, the dispatch key column); history is left empty.

Also the JSON list helpers of the job store (:func:`json_list`).
"""
from __future__ import annotations

import dataclasses
import json
from functools import lru_cache
from typing import Any, Callable, Sequence

from vgrid_runtime.job_states import JobState
from vgrid_runtime.outcomes import Outcome


def json_list(text: str | None) -> list:
    """A JSON list column, a fresh list (``"[]"`` and NULL without the JSON parser: most rows
    hold them; equal texts, e.g. one owner's FQANs, parsed once)."""
    return [] if not text or text == "[]" else list(_json_tuple(text))


@lru_cache(maxsize=4096)
def _json_tuple(text: str) -> tuple:
    value = json.loads(text)
    return tuple(value) if isinstance(value, list) else (value,)


def _fresh_json(text: str | None) -> Any:
    """A JSON column whose value may hold mutable lists (``cpu_caps``): parsed per row."""
    return [] if not text or text == "[]" else json.loads(text)


def _or_zero(value: int | None) -> int:
    return value or 0


def _optional_list(text: str | None) -> list | None:
    return None if text is None else json_list(text)


#: Job field -> (its column, conversion of the stored value or None); other fields are the
#: column of the same name, unconverted.
CONVERSIONS: dict[str, tuple[str | None, Callable | None]] = {
    "state": ("state", {s.value: s for s in JobState}.__getitem__), "cpu_caps": ("cpu_caps", _fresh_json),
    "depends_on": ("depends_on", json_list), "owner_fqans": ("owner_fqans", json_list),
    "failed_ces": ("failed_ces", json_list), "dispatch_key_col": ("dispatch_key", None),
    "attempt": ("attempt", _or_zero), "deep_count": ("deep_count", _or_zero),
    "shallow_count": ("shallow_count", _or_zero), "outcome": ("outcome", Outcome.parse),
    "input_sandbox": ("input_sandbox", _optional_list), "history": (None, None)}


@lru_cache(maxsize=64)
def row_reader(job_cls: type, names: tuple[str, ...]) -> Callable[[Sequence], Any]:
    """A function ``row -> job_cls`` for rows whose columns are ``names`` (in that order; e.g.
    ``tuple(result.keys())``). A field without a column gets its default (``history``: a
    fresh empty list). Raises TypeError when a field has neither a column nor a default.

    The function is generated once per column list (as ``dataclasses`` and ``namedtuple``
    generate theirs): one call with every field as a positional argument, each ``row[i]``
    or ``convert_i(row[i])``, so a row costs no lookup by name."""
    index = {n: i for i, n in enumerate(names)}
    env: dict[str, Any] = {"Job": job_cls}
    args: list[str] = []
    for n, f in enumerate(dataclasses.fields(job_cls)):
        if not f.init:
            continue
        column, convert = CONVERSIONS.get(f.name, (f.name, None))
        if column in index:
            if convert is None:
                args.append(f"row[{index[column]}]")
            else:
                env[f"c{n}"] = convert
                args.append(f"c{n}(row[{index[column]}])")
        elif f.default_factory is not dataclasses.MISSING:
            env[f"c{n}"] = f.default_factory
            args.append(f"c{n}()")
        elif f.default is not dataclasses.MISSING:
            env[f"d{n}"] = f.default
            args.append(f"d{n}")
        else:
            raise TypeError(f"no column for job field {f.name!r} in {names!r}")
    exec(f"def read(row):\n    return Job({', '.join(args)})\n", env)   # noqa: S102 - our own text
    return env["read"]
