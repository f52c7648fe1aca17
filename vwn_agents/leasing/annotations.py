"""Haizea 1.1 lease annotation files (``.lwfa``): per-lease overrides applied to a trace.

An annotation file is XML::

    <lease-annotations>
      <attributes><attr name="..." value="..."/></attributes>      (labels; ignored)
      <lease-annotation id="3">                                     (id: that lease; no id:
        <start><exact time="+00:30:00"/></start>                     the i-th annotation goes
        <software><disk-image id="big.img" size="4096"/></software>  to the i-th request by
        <extra><attr name="..." value="..."/></extra>                submission time)
      </lease-annotation>
    </lease-annotations>

Each annotation changes its lease (Haizea 1.1 ``LeaseAnnotations.apply_to_leases``):

* ``<start>``: empty -- the lease becomes best-effort; ``<now/>`` -- immediate; ``<exact
  time="+[D:]HH:MM:SS"/>`` -- an advance reservation starting that long after its submission;
* ``<software>``: ``<none/>`` (no image) or ``<disk-image id size/>`` (size in MB);
* ``<extra>``: free-form attributes, which vgrid's leases do not carry: ignored, counted in
  ``Annotations.ignored_extras``.

A ``<deadline>`` (Haizea's deadline leases) is refused with file:line, as in LWF traces: vgrid's
lease engine does not model them. Annotations with and without ids in one file, or an id given
twice, are errors too (``TraceError``: file, line, what). As in Haizea, an annotation whose id no
lease has, and id-less annotations beyond the last request, change nothing; they are counted
in ``Annotations.unused``. Source: Haizea 1.1 ``core/leases.py`` (``LeaseAnnotation``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from lxml import etree

from .model import Lease, LeaseType
from .requesttypes import legacy_request_type
from .traces import TraceError, parse_time


@dataclass
class Annotation:
    """One ``<lease-annotation>``: ``lease_id`` (None: by position), ``start`` (None: keep;
    ``"besteffort"``, ``"now"`` or seconds after submission), ``image`` ((id, MB) or None: keep),
    ``line`` (in the file)."""
    lease_id: int | None
    start: object
    image: tuple | None
    line: int


@dataclass
class Annotations:
    """The annotations of a file: ``by_id`` or ``in_order`` (one of them is empty)."""
    path: Path
    by_id: dict = field(default_factory=dict)
    in_order: list = field(default_factory=list)
    ignored_extras: int = 0
    unused: int = 0


def read_annotations(path: str | Path) -> Annotations:
    """Parse an annotation file; TraceError naming file:line for anything malformed."""
    p = Path(path)
    try:
        root = etree.fromstring(p.read_bytes(), etree.XMLParser(remove_comments=True))
    except etree.XMLSyntaxError as exc:
        line, col = exc.position if hasattr(exc, "position") else (exc.lineno, exc.offset)
        raise TraceError(p, line, exc.msg, col) from None
    if root.tag != "lease-annotations":
        raise TraceError(p, root.sourceline, f"root element is <{root.tag}>, expected <lease-annotations>")
    out = Annotations(p)
    for el in root.findall("lease-annotation"):
        ann = _annotation(el, p)
        out.ignored_extras += len(el.findall("extra/attr"))
        if ann.lease_id is None:
            out.in_order.append(ann)
        elif ann.lease_id in out.by_id:
            raise TraceError(p, el.sourceline, f"lease {ann.lease_id} annotated twice (line "
                             f"{out.by_id[ann.lease_id].line})")
        else:
            out.by_id[ann.lease_id] = ann
    if out.by_id and out.in_order:
        raise TraceError(p, out.in_order[0].line, "annotations with and without an id in one file "
                         "(Haizea 1.1 refuses that too)")
    return out


def _time(el, path: Path) -> float:
    text = (el.get("time") or "").strip().lstrip("+")
    try:
        return parse_time(text)
    except ValueError as exc:
        raise TraceError(path, el.sourceline, str(exc)) from None


def _annotation(el, path: Path) -> Annotation:
    lid = el.get("id")
    try:
        lease_id = int(lid) if lid is not None else None
    except ValueError:
        raise TraceError(path, el.sourceline, f"lease-annotation id must be an integer, got {lid!r}") from None
    deadline = el.find("deadline")
    if deadline is not None:
        raise TraceError(path, deadline.sourceline, "deadline leases (<deadline>) are not supported by "
                         "vgrid's lease engine; annotate an <exact> start (an advance reservation) instead")
    start = None
    st = el.find("start")
    if st is not None:
        kids = [k for k in st if isinstance(k.tag, str)]
        if not kids:
            start = "besteffort"
        elif kids[0].tag == "now":
            start = "now"
        elif kids[0].tag == "exact":
            start = _time(kids[0], path)
        else:
            raise TraceError(path, kids[0].sourceline, f"<start> may hold <exact> or <now>, not <{kids[0].tag}>")
    image = None
    sw = el.find("software")
    if sw is not None:
        disk = sw.find("disk-image")
        if sw.find("none") is not None:
            image = ("none.img", 0.0)
        elif disk is not None:
            try:
                image = (disk.get("id"), float(disk.get("size")))
            except (TypeError, ValueError):
                raise TraceError(path, disk.sourceline, "<disk-image> needs an id and a numeric size (MB)") from None
            if not image[0]:
                raise TraceError(path, disk.sourceline, "<disk-image> needs an id")
        else:
            raise TraceError(path, sw.sourceline, "<software> must hold <none/> or <disk-image>")
    return Annotation(lease_id, start, image, el.sourceline)


def _apply(lease: Lease, ann: Annotation) -> Lease:
    changes: dict = {}
    if ann.start == "besteffort":
        changes.update(type=LeaseType.BEST_EFFORT, requested_start_s=None)
    elif ann.start == "now":
        changes.update(type=LeaseType.IMMEDIATE, requested_start_s=None)
    elif ann.start is not None:
        changes.update(type=LeaseType.ADVANCE_RESERVATION, requested_start_s=lease.submit_s + ann.start)
    if ann.image is not None:
        changes.update(image_id=ann.image[0], image_mb=ann.image[1])
    if changes.get("type", lease.type) is not lease.type and \
            lease.request_type is legacy_request_type(lease.is_be, lease.preemptible):
        changes["request_type"] = None      # derived again from the new type
    return dataclasses.replace(lease, **changes) if changes else lease


def apply_annotations(leases: list[Lease], ann: Annotations) -> list[Lease]:
    """New leases with the annotations applied (by id, or the i-th id-less annotation to the
    i-th lease in submission order); sets ``ann.unused`` (see module doc)."""
    if ann.by_id:
        ann.unused = len(set(ann.by_id) - {l.id for l in leases})
        return [_apply(l, ann.by_id[l.id]) if l.id in ann.by_id else l for l in leases]
    ordered = sorted(leases, key=lambda l: (l.submit_s, l.id))
    ann.unused = max(len(ann.in_order) - len(ordered), 0)
    return [_apply(l, a) for l, a in zip(ordered, ann.in_order)] + ordered[len(ann.in_order):]
