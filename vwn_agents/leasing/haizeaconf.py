"""Haizea 1.1 configuration files (INI) read unchanged by ``vgrid simulate --config FILE``.

Haizea's files are INI (``option: value``) in the sections ``[general]``, ``[scheduling]``,
``[simulation]``, ``[accounting]``, ``[deploy-imagetransfer]`` and ``[tracefile]``. Every option
Haizea 1.1 defines (its ``core/configfile.py``) is classified here (:data:`RULES`):

- ``map``: the lease engine's option of the same name (:mod:`.config`), with Haizea's default
  when the file leaves it out (Haizea's defaults differ from vgrid's: no preemption, no
  migration, no image reuse, no backfilling);
- ``ignore``: no effect on a simulation's results (logging, output files, probes, the real
  clock's wake-up interval); listed in :attr:`HaizeaFile.notes`;
- ``default-only``: the only value vgrid (and, for ``mapper``, Haizea 1.1 itself) has; another
  value is an error naming the file, line and option (``mode``, ``clock``, ``mapper``);
- a few are read into :class:`HaizeaFile` (``tracefile``, ``injectionfile``, ``annotationfile``,
  ``resources``, ``starttime``).

Every value is checked where it is read: a bad one is an error naming file:line and the option.

An option Haizea does not define is an error naming it, as for vgrid's TOML files.
"""
from __future__ import annotations

import configparser
import datetime as _dt
import re
from dataclasses import dataclass, field
from pathlib import Path

from .config import OPTIONS, ConfigError, LeaseConfig
from .traces import parse_time

#: Haizea 1.1's defaults for options whose vgrid default differs (used when the file omits them).
HAIZEA_DEFAULTS = {"policy-preemption": "no-preemption", "migration": "no", "diskimage-reuse": "none",
                   "lease-preparation": "unmanaged", "backfilling": "off", "transfer-mechanism": "unicast",
                   "avoid-redundant-transfers": True, "scheduling-threshold-factor": 1.0,
                   "runtime-slowdown-rule": "haizea", "multicast-join": True,
                   "diskimage-cache-full": "uncached",   # Haizea's _add_diskimages (imagepool.py)
                   "imagetransfer-link": "shared",       # one list of transfers (compat_staging.py)
                   "compat": "haizea-1.1"}   # vgrid's Haizea-compatible mode (compat.py)

_MAP = ("lease-preparation", "policy-preemption", "policy-host-selection", "backfilling",
        "backfilling-reservations", "suspension", "suspend-rate", "resume-rate",
        "suspendresume-exclusion", "scheduling-threshold-factor", "migration",
        "imagetransfer-bandwidth", "stop-when", "transfer-mechanism", "avoid-redundant-transfers",
        "diskimage-reuse", "diskimage-cache-size", "runtime-slowdown-overhead", "add-overhead",
        "bootshutdown-overhead", "override-suspend-time", "override-resume-time", "enactment-overhead",
        "shutdown-time", "force-scheduling-threshold", "policy-admission", "force-imagetransfer-time",
        "override-memory", "stop-when-time", "status-message-interval")
_IGNORE = {"loglevel": "logging", "logfile": "logging", "persistence-file": "live mode only",
           "lease-failure-handling": "simulated enactment never fails", "wakeup-interval":
           "the real clock's period", "datafile":
           "use --out DIR / --json", "probes": "every metric is computed", "attributes": "output labels",
           "sanity-check": "SimulatedNodes always checks that no node is over-committed",
           "non-schedulable-interval": "Haizea 1.1 uses it with the real clock only: no effect on a "
           "simulation", "policy-pricing": "pricing applies to negotiated leases, which traces lack",
           "host": "OpenNebula mode only", "port": "OpenNebula mode only", "dry-run": "OpenNebula mode only",
           "stop-when-no-more-leases": "OpenNebula mode only", "imagefile": "Haizea 1.1 defines it "
           "but never reads it (images come from the trace or an annotation file)"}
#: ignored options whose value is still checked (Haizea 1.1 reads them as integers)
_IGNORED_INT = ("wakeup-interval", "non-schedulable-interval")
#: option -> the only value vgrid supports (strings compared case-insensitively; None: absent)
_DEFAULT_ONLY = {"mode": "simulated", "clock": "simulated", "mapper": "greedy"}
_READ = ("tracefile", "injectionfile", "annotationfile", "resources", "starttime")
_HAIZEA_VALUES = {"stop-when": {"best-effort-done": "besteffort-done"},
                  "migration": {"true": "yes", "false": "no"}, "policy-admission": {"no-ars": "no-ARs"}}
OPTION_TYPES = {o.name: o.type for o in OPTIONS}
#: every option name this reader knows (all of Haizea 1.1's)
KNOWN_OPTIONS = frozenset(_MAP) | frozenset(_IGNORE) | frozenset(_DEFAULT_ONLY) | frozenset(_READ)
_RESOURCES = re.compile(r"^(\d+)\s+(.*)$")


@dataclass
class HaizeaFile:
    """A Haizea configuration as vgrid reads it: ``config`` (LeaseConfig), ``tracefile`` and
    ``injectionfile`` and ``annotationfile`` (as written, None if absent), ``nodes``/``cpus_per_node``/``mem_per_node``
    from ``resources`` (None: ``in-tracefile``), ``starttime`` (datetime or None: vgrid's
    times are relative to the trace's start), ``notes`` [(option, why ignored)]."""

    config: LeaseConfig
    tracefile: str | None = None
    injectionfile: str | None = None
    annotationfile: str | None = None
    nodes: int | None = None
    cpus_per_node: int = 1
    mem_per_node: int = 1024
    starttime: _dt.datetime | None = None
    notes: list = field(default_factory=list)


def is_haizea_file(path: str | Path) -> bool:
    """Whether ``path`` looks like a Haizea INI file: its first setting line uses ``name: value``
    or ``name = value`` without TOML quoting, under a Haizea section."""
    section = None
    for raw in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]").strip()
            continue
        if section is None:
            return False
        key, sep, value = line.partition(":")
        if sep and "=" not in key:
            return True
        value = line.partition("=")[2].strip()
        return bool(value) and not value.startswith(('"', "'", "[", "{")) and not re.fullmatch(
            r"-?\d+(\.\d+)?|true|false", value)
    return False


def _line_of(lines: list[str], section: str, option: str) -> int:
    current = None
    for i, raw in enumerate(lines, 1):
        line = raw.strip()
        if line.startswith("["):
            current = line.strip("[]").strip()
        elif current == section and re.match(rf"{re.escape(option)}\s*[:=]", line):
            return i
    return 0


def _value(opt: str, text: str, where: str):
    """A Haizea value of a mapped option as the type the lease engine's schema gives it
    (``config.OPTIONS``); ConfigError naming ``where`` when it is not one."""
    text = _HAIZEA_VALUES.get(opt, {}).get(text.strip().lower(), text.strip())
    if opt == "stop-when-time":        # Haizea: DD:HH:MM:SS after the start
        try:
            return parse_time(text)
        except ValueError:
            raise ConfigError(f"{where}: expected DD:HH:MM:SS, got {text!r}") from None
    kind = OPTION_TYPES[opt]
    if kind is bool:
        low = text.lower()
        if low not in ("true", "false", "yes", "no", "1", "0"):
            raise ConfigError(f"{where}: {opt} must be True or False, got {text!r}")
        return low in ("true", "yes", "1")
    if kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            noun = "an integer" if kind is int else "a number"
            raise ConfigError(f"{where}: {opt} must be {noun}, got {text!r}") from None
    return text


def load_haizea(path: str | Path) -> HaizeaFile:
    """Read a Haizea 1.1 configuration file; ConfigError naming file:line and the option for an
    unknown option, a bad value or a value vgrid does not support."""
    p = Path(path)
    text = p.read_text(encoding="utf-8", errors="replace")
    lines = text.splitlines()
    parser = configparser.RawConfigParser(delimiters=(":", "="), comment_prefixes=("#", ";"),
                                          inline_comment_prefixes=None, strict=True)
    parser.optionxform = str
    try:
        parser.read_string(text, source=str(p))
    except (configparser.DuplicateOptionError, configparser.DuplicateSectionError) as exc:
        what = f"option {exc.option!r}" if isinstance(exc, configparser.DuplicateOptionError) else "section"
        raise ConfigError(f"{p}:{exc.lineno}: [{exc.section}] {what} given twice") from None
    except configparser.Error as exc:
        line = getattr(exc, "lineno", None) or (exc.errors[0][0] if getattr(exc, "errors", None) else "")
        raise ConfigError(f"{p}:{line}: not a Haizea configuration file: "
                          f"{type(exc).__name__.replace('Error', '').lower() or 'error'}") from None
    values: dict = dict(HAIZEA_DEFAULTS)
    lines_of: dict = {}
    out = HaizeaFile(LeaseConfig())
    for section in parser.sections():
        for opt, raw in parser.items(section):
            where = f"{p}:{_line_of(lines, section, opt)}: [{section}] {opt}"
            if opt in _MAP:
                values[opt] = _value(opt, raw, where)
                LeaseConfig({opt: values[opt]}, where.rsplit(": [", 1)[0])  # the value's own check
                lines_of[opt] = where
            elif opt in _IGNORE:
                if opt in _IGNORED_INT and not re.fullmatch(r"\s*\d+\s*", raw):
                    raise ConfigError(f"{where}: must be a whole number of seconds, got {raw.strip()!r}")
                out.notes.append((opt, _IGNORE[opt]))
            elif opt in _DEFAULT_ONLY:
                only = _DEFAULT_ONLY[opt]
                if only is None or raw.strip().lower() != only:
                    why = " (Haizea 1.1 has no other mapper)" if opt == "mapper" else ""
                    raise ConfigError(f"{where} = {raw.strip()!r}: vgrid supports only "
                                      f"{'leaving it out' if only is None else repr(only)}{why} "
                                      f"(docs/leasing.md, 'Haizea configuration files')")
            elif opt == "resources":
                _resources(out, raw.strip(), where)
            elif opt == "starttime":
                try:
                    out.starttime = _dt.datetime.strptime(raw.strip(), "%Y-%m-%d %H:%M:%S")
                except ValueError:
                    raise ConfigError(f"{where}: expected YYYY-MM-DD HH:MM:SS, got {raw.strip()!r}") from None
            elif opt in ("tracefile", "injectionfile", "annotationfile"):
                setattr(out, opt, raw.strip())
            else:
                raise ConfigError(f"{where}: unknown option {opt!r} (not a Haizea 1.1 option)")
    if values.get("stop-when") == "exact" and "stop-when-time" not in values:
        raise ConfigError(f"{lines_of['stop-when']}: 'exact' needs stop-when-time (DD:HH:MM:SS)")
    try:
        out.config = LeaseConfig(values, str(p))
    except ConfigError as exc:
        raise ConfigError(str(exc).replace(str(p), f"{p} (Haizea file)", 1)) from None
    return out


def _resources(out: HaizeaFile, text: str, where: str) -> None:
    if text.lower() == "in-tracefile":
        return
    m = _RESOURCES.match(text)
    if not m:
        raise ConfigError(f"{where}: expected 'in-tracefile' or 'N CPU:100 Memory:1024', got {text!r}")
    out.nodes = int(m.group(1))
    for item in re.split(r"[,\s]+", m.group(2).strip()):   # Haizea 1.1: CPU:100,Memory:1024
        name, _, amount = item.partition(":")
        try:
            value = int(amount)
        except ValueError:
            raise ConfigError(f"{where}: bad resource {item!r}") from None
        if name.lower() == "cpu":
            if value % 100:
                raise ConfigError(f"{where}: CPU must be a multiple of 100 (one CPU), got {value}")
            out.cpus_per_node = value // 100
        elif name.lower() in ("memory", "mem"):
            out.mem_per_node = value
        else:
            raise ConfigError(f"{where}: vgrid sites have CPU and Memory only, got {name!r}")
