"""Seed 002's requests from a Lublin-Feitelson workload, written as LWF and SWF text.

Seed 002 (Amini Salehi, Javadi, Buyya) Section 7.2: "Because Lublin workload does not provide
us the request types, we generated these types uniformly and assigned them to the generated
workloads"; local requests are a fixed number (1,000) or a percentage (20 % to 70 %) of the
whole workload; local requests are all Deadline-Constraint-Non-Preemptable (Section 4.2).
External requests are split among the four request types of Section 4.2 by the percentages of
``type_mix`` (default 25 % each).

How we do it (the paper does not say more):

* the local requests are a uniformly random subset of exactly ``n_local`` jobs;
* each external type gets exactly its share (largest-remainder rounding) of the external
  requests, assigned in a uniformly random order;
* the ready time is the arrival; the duration is the job's runtime (the model's runtime is what
  the lease asks for, no over-estimate);
* deadline-constrained requests get ``deadline = ready + duration * (1 + slack)``, with
  ``slack`` uniform on ``external_slack`` (default [0, 1]) for external ones and equal to
  ``local_slack`` (default 0: the local request must start when it arrives, as the local
  request of Table II does) for local ones; best-effort requests have no deadline.

Units: seconds, MB. Deterministic given the seed. The request types are plain strings here
(``REQUEST_TYPES``: the short names of :class:`.requesttypes.RequestType`), carried in LWF as
the attributes of ``<lease>`` that ``traces.py`` reads: ``request-type``, ``origin``
("local"/"external") and ``deadline`` (``HH:MM:SS`` from the start of the trace).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from xml.sax.saxutils import quoteattr

import numpy as np

from .requesttypes import RequestType
from .lublin import BATCH, INTERACTIVE, LublinModel, ModelJob, rescale_runtimes

BEST_EFFORT_CANCELLABLE = RequestType.BEST_EFFORT_CANCELLABLE.value
BEST_EFFORT_SUSPENDABLE = RequestType.BEST_EFFORT_SUSPENDABLE.value
DEADLINE_MIGRATABLE = RequestType.DEADLINE_CONSTRAINT_MIGRATABLE.value
DEADLINE_NON_PREEMPTABLE = RequestType.DEADLINE_CONSTRAINT_NON_PREEMPTABLE.value
#: Seed 002 Section 4.2's request types, in the paper's order.
REQUEST_TYPES = (BEST_EFFORT_CANCELLABLE, BEST_EFFORT_SUSPENDABLE, DEADLINE_MIGRATABLE, DEADLINE_NON_PREEMPTABLE)
DEADLINE_TYPES = (DEADLINE_MIGRATABLE, DEADLINE_NON_PREEMPTABLE)
UNIFORM_MIX = {t: 25.0 for t in REQUEST_TYPES}


@dataclass(frozen=True)
class Request:
    """One request: ready (arrival) time, VMs, duration and deadline in seconds."""
    id: int
    ready_s: int
    n_vms: int
    duration_s: int
    request_type: str
    local: bool
    deadline_s: int | None
    job_class: str = ""

    @property
    def preemptible(self) -> bool:
        return not self.local and self.request_type != DEADLINE_NON_PREEMPTABLE


def local_count(n_jobs: int, local: int | float | str) -> int:
    """The number of local requests: an int count, a fraction in [0, 1] (float), or a
    percentage string like ``"30%"``. ValueError if out of range or malformed."""
    if isinstance(local, str):
        text = local.strip()
        try:
            value = float(text[:-1]) / 100 if text.endswith("%") else int(text)
        except ValueError:
            raise ValueError(f"local requests {local!r}: expected a count (1000) or a percentage (30%)") from None
        return local_count(n_jobs, value)
    if isinstance(local, float):
        if not 0 <= local <= 1:
            raise ValueError(f"local fraction {local} is outside [0, 1]")
        return round(local * n_jobs)
    if not 0 <= local <= n_jobs:
        raise ValueError(f"{local} local requests asked of a workload of {n_jobs}")
    return int(local)


def _quotas(n: int, mix: dict) -> dict:
    unknown = set(mix) - set(REQUEST_TYPES)
    if unknown:
        raise ValueError(f"unknown request type(s) {sorted(unknown)}; expected {REQUEST_TYPES}")
    if any(v < 0 for v in mix.values()) or not math.isclose(sum(mix.values()), 100.0, abs_tol=1e-6):
        raise ValueError(f"the request-type percentages must be >= 0 and add up to 100, got {mix}")
    exact = {t: n * mix.get(t, 0.0) / 100 for t in REQUEST_TYPES}
    counts = {t: math.floor(v) for t, v in exact.items()}
    by_remainder = sorted(REQUEST_TYPES, key=lambda t: (-(exact[t] - counts[t]), REQUEST_TYPES.index(t)))
    for t in by_remainder[: n - sum(counts.values())]:
        counts[t] += 1
    return counts


def assign_requests(jobs: list[ModelJob], seed: int, local: int | float | str = 0,
                    type_mix: dict | None = None, external_slack: tuple = (0.0, 1.0),
                    local_slack: float = 0.0) -> list[Request]:
    """Turn model jobs into seed 002 requests (ids 1..n in arrival order), see the module
    docstring. ValueError on a bad split, mix or slack (slacks must be >= 0)."""
    n = len(jobs)
    n_local = local_count(n, local)
    lo, hi = external_slack
    if lo < 0 or hi < lo or local_slack < 0:
        raise ValueError(f"slacks must be >= 0 with low <= high, got {external_slack} and {local_slack}")
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, 2])))
    is_local = np.zeros(n, dtype=bool)
    is_local[rng.choice(n, size=n_local, replace=False)] = True
    counts = _quotas(n - n_local, UNIFORM_MIX if type_mix is None else type_mix)
    ext_types = np.array([t for t in REQUEST_TYPES for _ in range(counts[t])], dtype=object)
    rng.shuffle(ext_types)
    slack = rng.uniform(lo, hi, n)
    out, k = [], 0
    for i, job in enumerate(jobs):
        if is_local[i]:
            rtype, s = DEADLINE_NON_PREEMPTABLE, local_slack
        else:
            rtype, s = ext_types[k], slack[i]
            k += 1
        deadline = job.submit_s + math.ceil(job.runtime_s * (1 + s)) if rtype in DEADLINE_TYPES else None
        out.append(Request(i + 1, job.submit_s, job.size, job.runtime_s, str(rtype), bool(is_local[i]),
                           deadline, job.job_class))
    return out


def section_7_2_requests(seed: int, n_jobs: int = 3000, days: float = 14.0, nodes: int = 32,
                         local: int | float | str = 1000, type_mix: dict | None = None,
                         mean_size: float = 4.0, mean_runtime_s: float = 7200.0,
                         exact_mean_runtime: bool = False, classes: tuple = (BATCH, INTERACTIVE),
                         external_slack: tuple = (0.0, 1.0), local_slack: float = 0.0) -> list[Request]:
    """Seed 002 Section 7.2's workload in one call (defaults: 3,000 requests in 14 days on 32
    nodes, 4 VMs and 2 h on average, 1,000 local, the four external types 25 % each):
    ``LublinModel.adjusted`` sampled with ``seed``, optionally with the sample's runtimes
    rescaled to a mean of exactly ``mean_runtime_s`` (``rescale_runtimes``), then
    ``assign_requests``. ValueError as those raise."""
    model = LublinModel.adjusted(nodes, n_jobs, days, mean_size, mean_runtime_s, classes=classes)
    jobs = model.sample(n_jobs, seed)
    if exact_mean_runtime:
        jobs = rescale_runtimes(jobs, mean_runtime_s)
    return assign_requests(jobs, seed, local, type_mix, external_slack, local_slack)


# ---- text formats -----------------------------------------------------------------------------

def hms(seconds: float) -> str:
    """Seconds -> ``HH:MM:SS`` (hours unbounded), the LWF time format."""
    s = int(round(seconds))
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def to_lwf(requests: list[Request], nodes: int, name: str = "lublin", memory_mb: int = 1024,
           image_mb: int = 2048, description: str = "") -> str:
    """LWF XML (Haizea 1.1, read by ``traces.read_lwf_xml``) with the site embedded: ``nodes``
    single-core nodes of ``memory_mb``; each VM one core and ``memory_mb``; one disk image of
    ``image_mb`` (seed 002 Section 7.2: 1,024 MB VMs, 2 GB images). Best-effort start."""
    lines = ['<?xml version="1.0" encoding="UTF-8"?>', f"<lease-workload name={quoteattr(name)}>"]
    if description:
        lines.append(f"  <description>{_xml_text(description)}</description>")
    res = f'<res type="CPU" amount="100"/><res type="Memory" amount="{memory_mb}"/>'
    lines += ["  <site>", '    <resource-types names="CPU Memory"/>',
              f'    <nodes><node-set numnodes="{nodes}">{res}</node-set></nodes>', "  </site>",
              "  <lease-requests>"]
    for r in requests:
        deadline = f' deadline="{hms(r.deadline_s)}"' if r.deadline_s is not None else ""
        lines += [
            f'    <lease-request arrival="{hms(r.ready_s)}">',
            f'      <lease id="{r.id}" preemptible="{str(r.preemptible).lower()}" request-type="{r.request_type}"'
            f' origin="{"local" if r.local else "external"}"{deadline}>',
            f'        <nodes><node-set numnodes="{r.n_vms}">{res}</node-set></nodes>',
            "        <start/>",
            f'        <duration time="{hms(r.duration_s)}"/>',
            f'        <software><disk-image id="vm.img" size="{image_mb}"/></software>',
            "      </lease>",
            "    </lease-request>"]
    lines += ["  </lease-requests>", "</lease-workload>", ""]
    return "\n".join(lines)


def _xml_text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


SWF_CLASS = {"interactive": 0, "whole-sample": 0, "batch": 1}


def to_swf(requests: list[Request], nodes: int, comment: str = "") -> str:
    """SWF (version 2) text: one job per request, runtime = requested time = duration,
    processors = VMs; group (field 13) is 1 for local and 2 for external requests, the queue
    (field 15) the model class (0 interactive or whole sample, 1 batch, as m_lublin99.c
    writes it) and the partition (field 16) the request type, 1..4 in ``REQUEST_TYPES``'
    order; the header says so."""
    head = [
        "; Version: 2",
        "; Computer: Lublin-Feitelson 1999 model (vgrid workload lublin)",
        "; Acknowledge: Uri Lublin and Dror Feitelson, Hebrew University (the model)",
        f"; MaxJobs: {len(requests)}",
        f"; MaxRecords: {len(requests)}",
        f"; MaxNodes: {nodes}",
        f"; MaxProcs: {nodes}",
        f"; MaxRuntime: {max((r.duration_s for r in requests), default=0)}",
        "; Note: group (field 13) 1 = local request, 2 = external request (seed 002 Section 4.1)",
        "; Note: queue (field 15) = model class: 0 interactive (or whole sample), 1 batch",
        "; Note: partition (field 16) = request type: "
        + ", ".join(f"{i} {t}" for i, t in enumerate(REQUEST_TYPES, 1)),
    ]
    head += [f"; Note: {line}" for line in comment.splitlines() if line.strip()]
    rows = [f"{r.id} {r.ready_s} -1 {r.duration_s} {r.n_vms} -1 -1 {r.n_vms} {r.duration_s} -1 1 -1 "
            f"{1 if r.local else 2} -1 {SWF_CLASS.get(r.job_class, 0)} {REQUEST_TYPES.index(r.request_type) + 1} -1 -1"
            for r in requests]
    return "\n".join(head + rows) + "\n"
