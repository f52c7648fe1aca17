"""Write leases as Haizea 1.1's XML lease workload (LWF), so that Haizea and vgrid run on the
same inputs (issue 16: the HPDC'08 VM configurations lease for lease).

``write_lwf(leases, path)`` writes each lease as ``<lease-request arrival=..>`` with its id,
``<realduration>`` (when known), ``<nodes><node-set numnodes>`` (CPU in Haizea's units of 100
per CPU, memory in MB), ``<start/>`` (best-effort), ``<start><now/></start>`` (immediate) or
``<start><exact time=..>`` (an advance reservation, seconds from the trace's start),
``<duration>`` and ``<software>``: ``<disk-image id size>`` (MB, whole) when the lease has an
image, ``<none/>`` otherwise. Times are ``HH:MM:SS.ss``; ``traces.read_trace`` reads the file
back to the same leases (ids, times, sizes, images; ``tests/test_haizea_vm_parity.py``).
Leases are written in submission order (then id), the order in which Haizea's reader
submits them. Only what Haizea 1.1's ``Lease.from_xml_element`` reads is written (not seed
002's request type); a local lease or one with a deadline raises ValueError.
"""
from __future__ import annotations

from pathlib import Path

from lxml import etree

from .model import CPU, MEM, Lease, LeaseType


def hms(seconds: float) -> str:
    """``seconds`` (>= 0) as Haizea's ``HH:MM:SS.ss``."""
    cs = int(round(float(seconds) * 100))
    h, rest = divmod(cs, 360000)
    m, rest = divmod(rest, 6000)
    return f"{h:02d}:{m:02d}:{rest // 100:02d}.{rest % 100:02d}"


def _request(lease: Lease) -> etree._Element:
    if lease.local or lease.deadline_s is not None:
        raise ValueError(f"lease {lease.id}: local requests and deadlines have no Haizea 1.1 LWF form")
    req = etree.Element("lease-request", arrival=hms(lease.submit_s))
    if lease.real_duration_s is not None:
        etree.SubElement(req, "realduration", time=hms(lease.real_duration_s))
    el = etree.SubElement(req, "lease", id=str(lease.id), preemptible="true" if lease.preemptible else "false")
    ns = etree.SubElement(etree.SubElement(el, "nodes"), "node-set", numnodes=str(lease.n_vms))
    etree.SubElement(ns, "res", type="CPU", amount=str(int(round(lease.per_vm[CPU]))))
    etree.SubElement(ns, "res", type="Memory", amount=str(int(round(lease.per_vm[MEM]))))
    start = etree.SubElement(el, "start")
    if lease.type is LeaseType.ADVANCE_RESERVATION:
        etree.SubElement(start, "exact", time=hms(lease.requested_start_s))
    elif lease.type is LeaseType.IMMEDIATE:
        etree.SubElement(start, "now")
    etree.SubElement(el, "duration", time=hms(lease.duration_s))
    sw = etree.SubElement(el, "software")
    if lease.image_mb > 0:
        etree.SubElement(sw, "disk-image", id=lease.image_id, size=str(int(round(lease.image_mb))))
    else:
        etree.SubElement(sw, "none")
    return req


def write_lwf(leases: list[Lease], path: str | Path, name: str = "vgrid") -> int:
    """Write ``leases`` to ``path`` as Haizea XML LWF; returns the number written."""
    root = etree.Element("lease-workload", name=name)
    reqs = etree.SubElement(root, "lease-requests")
    ordered = sorted(leases, key=lambda l: (l.submit_s, l.id))
    for lease in ordered:
        reqs.append(_request(lease))
    Path(path).write_bytes(etree.tostring(root, pretty_print=True, xml_declaration=False))
    return len(ordered)
