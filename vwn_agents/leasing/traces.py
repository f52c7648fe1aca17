"""Trace input: Haizea LWF (XML and the older text format) and SWF (Haizea's conversion).

* LWF XML (Haizea 1.0/1.1): ``<lease-workload>`` with an optional ``<site>`` and
  ``<lease-requests>``; each ``<lease-request arrival="HH:MM:SS">`` has an optional
  ``<realduration time=...>`` and a ``<lease>`` with ``<nodes><node-set numnodes=N><res
  type= amount=>``, ``<start>`` (empty: best-effort; ``<exact time=>``: advance reservation;
  ``<now/>``: immediate), ``<duration time=>``, ``<software><disk-image id= size=>``.
  Seed 002 attributes of ``<lease>``: ``request-type`` (``cancellable``, ``suspendable``,
  ``migratable``, ``non-preemptable``; absent: from ``preemptible``), ``origin`` (``local`` or
  ``external``, the default; a local request without ``<exact>`` starts at its arrival) and
  ``deadline`` (``HH:MM:SS``).
* Old LWF text: one lease per line, ``submit start duration realduration numnodes cpu memory
  disk image imagesize`` (seconds, ``start = -1`` for best-effort, cpu 1 = 100), '#' comments.
  vgrid extension for seed 002: after the 10 fields, optional ``name=value`` fields
  ``request-type=`` (as the XML attribute), ``origin=local|external`` and ``deadline=`` (seconds
  from the start, or ``HH:MM:SS``); a local request with ``start = -1`` starts at its arrival
  (as in the XML). Any other extra field is an error naming its line and column.
* SWF (Standard Workload Format): Haizea's conversion -- requested time (field 9) > 0; jobs
  cancelled while queued (status 5, run time < 0) are skipped; VMs = requested processors
  (field 8) / ``cpus_per_node``; duration = requested time; real duration = run time (0 -> 1,
  capped at the requested time); each VM takes one node's CPU and ``memory_mb``; no image.
  The shared ``haizea/blue/*.swf`` files were already divided by 8 by Haizea's filter, so
  ``cpus_per_node`` defaults to 1. Logs that do not record the requested time or processors
  (-1, e.g. model-generated ones) use the run time and the allocated processors instead.

Errors raise ``TraceError`` naming ``file:line[:column]``. Times are seconds from the start.
"""
from __future__ import annotations

import gzip
import re
from dataclasses import dataclass
from pathlib import Path

from lxml import etree

from .model import Lease, LeaseType, Node, resource_vector
from .requesttypes import LOCAL, origin, request_type

_TIME = re.compile(r"^\s*(?:(\d+):)?(\d+):(\d+):(\d+(?:\.\d*)?)\s*$")


class TraceError(ValueError):
    """A trace that cannot be read; ``str()`` is ``file:line:col: message``."""

    def __init__(self, path, line, message, column=None) -> None:
        where = f"{path}:{line}" + (f":{column}" if column else "")
        super().__init__(f"{where}: {message}")
        self.path, self.line, self.column, self.message = str(path), line, column, message


@dataclass
class Workload:
    """Leases of a trace (sorted by submission) and the site it embeds, if any."""
    leases: list
    nodes: list | None = None
    name: str = ""


def parse_time(text: str) -> float:
    """``[D:]HH:MM:SS[.ss]`` -> seconds; ValueError if malformed."""
    m = _TIME.match(text or "")
    if not m:
        raise ValueError(f"bad time {text!r}; expected [D:]HH:MM:SS[.ss]")
    d, h, mi, s = m.groups()
    return (int(d or 0) * 86400) + int(h) * 3600 + int(mi) * 60 + float(s)


def _open_text(path: Path) -> str:
    if path.suffix == ".gz":
        with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
            return f.read()
    return path.read_text(encoding="utf-8", errors="replace")


def read_trace(path: str | Path, cpus_per_node: int = 1, memory_mb: int = 1024, id_offset: int = 0) -> Workload:
    """Read an LWF (XML or text) or SWF file by content/extension. Raises TraceError."""
    p = Path(path)
    try:
        text = _open_text(p)
    except OSError as exc:
        raise TraceError(p, 0, f"cannot read: {exc.strerror}") from None
    name = p.name[:-3] if p.name.endswith(".gz") else p.name
    if text.lstrip().startswith("<"):
        return read_lwf_xml(text, p, id_offset)
    if name.endswith(".swf"):
        return read_swf(text, p, cpus_per_node, memory_mb, id_offset)
    return read_lwf_text(text, p, id_offset)


def read_with_injection(path: str | Path, inject: str | Path | None = None, cpus_per_node: int = 1,
                        memory_mb: int = 1024, min_offset: int = 0) -> list[Lease]:
    """The leases of trace ``path`` followed by those of an injected request file ``inject``
    (an AR set, HPDC'08), whose ids are offset by the trace's largest id (at least
    ``min_offset``) so that both keep distinct ids. Raises TraceError."""
    leases = list(read_trace(path, cpus_per_node, memory_mb).leases)
    if inject:
        offset = max(max((l.id for l in leases), default=0), min_offset)
        leases += read_trace(inject, id_offset=offset).leases
    return leases


def _res_vector(nodeset, path) -> tuple:
    amounts = {}
    for res in nodeset.findall("res"):
        rtype = (res.get("type") or "").strip()
        try:
            amounts[rtype] = float(res.get("amount"))
        except (TypeError, ValueError):
            raise TraceError(path, res.sourceline, f"res {rtype!r}: amount must be a number") from None
    try:
        return resource_vector(**amounts)
    except ValueError as exc:
        raise TraceError(path, nodeset.sourceline, str(exc)) from None


def _site(root, path) -> list[Node] | None:
    site = root.find("site")
    if site is None:
        return None
    nodes = []
    for ns in site.findall("nodes/node-set"):
        try:
            count = int(ns.get("numnodes"))
        except (TypeError, ValueError):
            raise TraceError(path, ns.sourceline, "node-set needs an integer numnodes") from None
        cap = _res_vector(ns, path)
        for _ in range(count):
            nodes.append(Node(len(nodes), f"P{len(nodes) + 1}", cap))
    return nodes or None


def read_lwf_xml(text: str, path: Path, id_offset: int = 0) -> Workload:
    try:
        root = etree.fromstring(text.encode("utf-8"), etree.XMLParser(remove_comments=True))
    except etree.XMLSyntaxError as exc:
        line, col = exc.position if hasattr(exc, "position") else (exc.lineno, exc.offset)
        raise TraceError(path, line, exc.msg, col) from None
    if root.tag != "lease-workload":
        raise TraceError(path, root.sourceline, f"root element is <{root.tag}>, expected <lease-workload>")
    leases = []
    seen: dict = {}
    for i, req in enumerate(root.findall("lease-requests/lease-request")):
        lease = _lwf_lease(req, path, id_offset + i + 1, id_offset)
        if lease.id in seen:
            raise TraceError(path, req.sourceline, f"lease id {lease.id - id_offset} already used on line {seen[lease.id]}")
        seen[lease.id] = req.sourceline
        leases.append(lease)
    leases.sort(key=lambda l: (l.submit_s, l.id))
    return Workload(leases, _site(root, path), root.get("name", path.name))


def _lwf_lease(req, path, default_id, id_offset=0) -> Lease:
    def t(elem, attr="time"):
        try:
            return parse_time(elem.get(attr))
        except ValueError as exc:
            raise TraceError(path, elem.sourceline, str(exc)) from None
    lease_el = req.find("lease")
    if lease_el is None:
        raise TraceError(path, req.sourceline, "<lease-request> without <lease>")
    submit = t(req, "arrival")
    real = req.find("realduration")
    nodeset = lease_el.find("nodes/node-set")
    dur = lease_el.find("duration")
    if nodeset is None or dur is None:
        raise TraceError(path, lease_el.sourceline, "<lease> needs <nodes><node-set> and <duration>")
    start = lease_el.find("start")
    deadline_el = lease_el.find("deadline")
    if deadline_el is not None:   # Haizea's deadline leases: not an AR, not modelled here
        raise TraceError(path, deadline_el.sourceline, "deadline leases (<deadline>) are not supported "
                         "by vgrid's lease engine; give the lease an <exact> start (an advance "
                         "reservation) or no start (best-effort)")
    for child in (start if start is not None else ()):
        if isinstance(child.tag, str) and child.tag not in ("exact", "now"):
            raise TraceError(path, child.sourceline, f"<start> may hold <exact> or <now>, not <{child.tag}>")
    exact = start.find("exact") if start is not None else None
    now = start.find("now") if start is not None else None
    ltype = LeaseType.BEST_EFFORT
    if exact is not None:
        ltype = LeaseType.ADVANCE_RESERVATION
    elif now is not None:
        ltype = LeaseType.IMMEDIATE
    img = lease_el.find("software/disk-image")
    try:
        rtype = lease_el.get("request-type")
        local = origin(lease_el.get("origin", "external")) == LOCAL
        deadline = t(lease_el, "deadline") if lease_el.get("deadline") is not None else None
        if local and ltype is LeaseType.BEST_EFFORT:  # a local request starts at its ready time
            ltype, exact_s = LeaseType.ADVANCE_RESERVATION, submit
        else:
            exact_s = t(exact) if exact is not None else None
        lid = default_id if lease_el.get("id") is None else id_offset + int(lease_el.get("id"))
        return Lease(
            id=lid, type=ltype, submit_s=submit, duration_s=t(dur),
            n_vms=int(nodeset.get("numnodes")), per_vm=_res_vector(nodeset, path),
            image_id=img.get("id") if img is not None else "none.img",
            image_mb=float(img.get("size", 0)) if img is not None else 0.0,
            preemptible=(lease_el.get("preemptible", "true").lower() == "true"),
            requested_start_s=exact_s,
            real_duration_s=t(real) if real is not None else None,
            request_type=request_type(rtype) if rtype is not None else None,
            local=local, deadline_s=deadline)
    except (TypeError, ValueError) as exc:
        raise TraceError(path, lease_el.sourceline, str(exc)) from None


#: The ``name=value`` fields the old LWF text format accepts after its 10 fields (vgrid).
TEXT_EXTRAS = ("request-type", "origin", "deadline")


def _text_extras(line: str, lineno: int, path: Path) -> dict:
    """``{name: value}`` of the ``name=value`` fields after field 10 of an old-LWF text line
    (``TEXT_EXTRAS``); TraceError naming the line and column of a bad or repeated one."""
    out: dict = {}
    for i, m in enumerate(re.finditer(r"\S+", line)):
        if i < 10:
            continue
        name, eq, value = m.group().partition("=")
        col = m.start() + 1
        if not eq or name not in TEXT_EXTRAS or not value:
            raise TraceError(path, lineno, f"field {i + 1} {m.group()!r}: expected name=value with name one of "
                                           f"{', '.join(TEXT_EXTRAS)} after the 10 fields", col)
        if name in out:
            raise TraceError(path, lineno, f"field {name!r} given twice", col)
        out[name] = (value, col)
    return out


def _seed002_text(extras: dict, lineno: int, path: Path) -> dict:
    """Lease keyword arguments of the seed 002 extras (``_text_extras``); TraceError with column."""
    args: dict = {}
    for name, (value, col) in extras.items():
        try:
            if name == "request-type":
                args["request_type"] = request_type(value)
            elif name == "origin":
                args["local"] = origin(value) == LOCAL
            else:
                args["deadline_s"] = float(value) if ":" not in value else parse_time(value)
        except ValueError as exc:
            raise TraceError(path, lineno, f"{name}: {exc}", col) from None
    return args


def read_lwf_text(text: str, path: Path, id_offset: int = 0) -> Workload:
    leases = []
    for lineno, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        f = s.split()
        if len(f) < 10:
            raise TraceError(path, lineno, f"expected 10 fields (submit start duration realduration numnodes "
                                           f"cpu memory disk image imagesize), found {len(f)}")
        try:
            submit, start, dur, real, n = (int(float(x)) for x in f[:5])
            cpu, mem, disk = int(f[5]), int(f[6]), int(f[7])
            size = float(f[9])
        except ValueError as exc:
            raise TraceError(path, lineno, f"bad number: {exc}") from None
        extra = _seed002_text(_text_extras(line, lineno, path), lineno, path)
        ar = start != -1
        if extra.get("local") and not ar:      # a local request starts at its ready time
            ar, start = True, submit
        try:
            leases.append(Lease(
                id=id_offset + len(leases) + 1,
                type=LeaseType.ADVANCE_RESERVATION if ar else LeaseType.BEST_EFFORT,
                submit_s=submit, duration_s=dur, n_vms=n,
                per_vm=resource_vector(cpu=cpu * 100, memory=mem, disk=disk),
                image_id=f[8].strip("'\""), image_mb=size, preemptible=not ar,
                requested_start_s=start if ar else None,
                real_duration_s=real if real != dur else None, **extra))
        except ValueError as exc:
            raise TraceError(path, lineno, str(exc)) from None
    leases.sort(key=lambda l: (l.submit_s, l.id))
    return Workload(leases, None, path.name)


def read_swf(text: str, path: Path, cpus_per_node: int = 1, memory_mb: int = 1024, id_offset: int = 0) -> Workload:
    if cpus_per_node < 1:
        raise TraceError(path, 0, "cpus_per_node must be >= 1")
    leases = []
    for lineno, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s.startswith(";"):
            continue
        f = s.split()
        if len(f) < 11:
            raise TraceError(path, lineno, f"SWF line has {len(f)} fields, expected 18")
        try:
            submit, runtime, nprocs, reqtime, status = int(f[1]), int(f[3]), int(f[7]), float(f[8]), int(f[10])
            alloc = int(f[4])
        except ValueError as exc:
            raise TraceError(path, lineno, f"bad number: {exc}") from None
        if reqtime == -1 and runtime > 0:  # not recorded (e.g. model-generated logs): the run time
            reqtime = float(runtime)
        if nprocs == -1:
            nprocs = alloc
        if reqtime <= 0 or nprocs <= 0 or (runtime < 0 and status == 5):
            continue
        n = max(nprocs // cpus_per_node, 1)
        real = min(max(runtime, 1), reqtime)
        leases.append(Lease(
            id=id_offset + (int(f[0]) if f[0].isdigit() else len(leases) + 1),
            type=LeaseType.BEST_EFFORT, submit_s=float(submit), duration_s=reqtime, n_vms=n,
            per_vm=resource_vector(cpu=100, memory=memory_mb), preemptible=True,
            real_duration_s=real if real < reqtime else None))
    leases.sort(key=lambda l: (l.submit_s, l.id))
    return Workload(leases, None, path.name)


def uniform_site(n_nodes: int, cpus_per_node: int = 1, mem_per_node: int = 1024,
                 disk_mb: int = 0, net_mbps: int = 0) -> list[Node]:
    """``n_nodes`` identical nodes P1..Pn (CPU = 100 x cpus). Disk/net 0 = not limited."""
    if n_nodes < 1 or cpus_per_node < 1 or mem_per_node < 1:
        raise ValueError("nodes, CPUs per node and memory per node must be >= 1")
    big = 10**12
    cap = (100 * cpus_per_node, mem_per_node, disk_mb or big, net_mbps or big)
    return [Node(i, f"P{i + 1}", cap) for i in range(n_nodes)]


def read_site(path: str | Path) -> list[Node]:
    """Nodes from a site file: an LWF-style XML ``<site>`` (root ``<site>`` or inside a
    ``<lease-workload>``). Raises TraceError."""
    p = Path(path)
    try:
        root = etree.fromstring(p.read_bytes(), etree.XMLParser(remove_comments=True))
    except OSError as exc:
        raise TraceError(p, 0, f"cannot read: {exc.strerror}") from None
    except etree.XMLSyntaxError as exc:
        raise TraceError(p, exc.lineno, exc.msg, exc.offset) from None
    if root.tag == "site":
        wrapper = etree.Element("w")
        wrapper.append(root)
        root = wrapper
    nodes = _site(root, p)
    if not nodes:
        raise TraceError(p, root.sourceline, "no <site><nodes><node-set> found")
    return nodes
