"""Seed 000 Section 8.2: an inferred model of the thesis's SGE-based prototype (Traces III/IV).

The thesis measures Traces III and IV on its SGE-based implementation (seed 000 Section 7: "a
layer of scripts on top of ... Sun Grid Engine ... use SGE to schedule not only the virtual
resources, but also the preparation overhead"; Section 8.2: a 1.8 GB LFU cache per node). It
does not say when a VM's "deployment time" starts nor how transfers share the 100 Mb/s link.
Its 440 s per image without reuse is 4.9 times below what our engine's measure gives (2,135 s,
``seed000_be``: from when the lease is placed, through a FIFO transfer queue). This module is
**our inference** of what the prototype measured, to put beside ours -- not the thesis's code:

* SGE holds ``slots`` VM slots (the thesis's 16). A VW submission of n VMs is one parallel SGE
  job of n slots. At every event SGE scans its queue in submission order and dispatches each
  job that fits in the free slots (SGE without resource reservation: a small job may overtake
  a large one waiting for slots); with ``strict_fifo`` the queue's head blocks the rest.
  ``per_vm``: every VM is its own one-slot job instead (a VW then need not start at once).
* At dispatch each VM's slot starts its image transfer at once (the preparation overhead runs
  inside the SGE job). All transfers in flight share the link equally (processor sharing:
  k transfers each get ``bandwidth_mbps`` / k), so nothing waits in a transfer queue.
* A VM's **deployment time** runs from its dispatch to the end of its transfer: the wait in
  SGE's queue is not counted. A VM whose node's cache holds its image deploys in 0 s.
* A VW runs (its ``duration_s``) once all its VMs are deployed; its slots free when it ends.
* ``cache_images`` > 0: each node keeps that many images (the thesis: 1.8 GB = three 600 MB
  images), evicting the least frequently used (ties: least recently used). SGE does not know
  which node holds which image; free slots are taken lowest node number first, filling a node
  before the next (SGE's ``$fill_up`` allocation rule).
* ``slots_per_node`` > 1 (the testbed: 8 dual-CPU nodes): the VMs of one job on one node share
  one transfer of their image.

Units: seconds, MB, Mb/s. Entry point :func:`run_sge`; rows shaped like ``seed000_be.run``.
"""
from __future__ import annotations

from dataclasses import dataclass

MB_PER_MBIT = 1 / 8.0


@dataclass(frozen=True)
class SgeSpec:
    """The inferred prototype: ``slots`` (VM slots = nodes, one VM each), ``bandwidth_mbps`` of
    the shared link, ``cache_images`` per node (0 = no reuse), ``per_vm`` (one SGE job per VM
    instead of one per VW), ``strict_fifo`` (the queue's head blocks later jobs)."""
    slots: int = 16
    slots_per_node: int = 1
    bandwidth_mbps: float = 100.0
    cache_images: int = 0
    per_vm: bool = False
    strict_fifo: bool = False


class _Node:
    def __init__(self, slots: int) -> None:
        self.free = slots
        self.cache: dict[str, list] = {}     # image -> [uses, last use]

    def has(self, image: str) -> bool:
        return image in self.cache

    def use(self, image: str, now: float, capacity: int) -> None:
        if capacity <= 0:
            return
        if image not in self.cache and len(self.cache) >= capacity:
            victim = min(self.cache, key=lambda i: (self.cache[i][0], self.cache[i][1], i))
            del self.cache[victim]
        entry = self.cache.setdefault(image, [0, now])
        entry[0] += 1
        entry[1] = now


def _jobs(leases, per_vm: bool) -> list[dict]:
    jobs = []
    for lease in sorted(leases, key=lambda l: (l.submit_s, l.id)):
        parts = [1] * lease.n_vms if per_vm else [lease.n_vms]
        for n in parts:
            jobs.append({"lease": lease.id, "submit": lease.submit_s, "run": lease.duration_s, "n": n,
                         "image": lease.image_id, "mb": lease.image_mb})
    return jobs


def run_sge(leases, spec: SgeSpec = SgeSpec()) -> dict:
    """Simulate ``leases`` (``model.Lease``: submit_s, duration_s, n_vms, image_id, image_mb) on
    the inferred SGE prototype. Returns ``{"vms", "vms_started", "mean_deploy_s", "max_deploy_s",
    "mean_deploy_lease_s", "mean_queue_wait_s", "max_parallel_transfers", "mean_parallel_transfers",
    "cache_hits", "transfers", "mb_transferred", "all_best_effort_s", "deployed"}`` (``deployed``:
    [(s, MB deployed by then)] per VM). ValueError when a VW needs more than ``spec.slots``."""
    if spec.slots < 1 or spec.slots_per_node < 1 or spec.slots % spec.slots_per_node or spec.bandwidth_mbps <= 0:
        raise ValueError("slots must be a positive multiple of slots_per_node and bandwidth_mbps > 0")
    arrivals = _jobs(leases, spec.per_vm)
    too_big = [j for j in arrivals if j["n"] > spec.slots]
    if too_big:
        raise ValueError(f"VW {too_big[0]['lease']} needs {too_big[0]['n']} slots, the site has {spec.slots}")
    run = _SgeRun(spec)
    i = 0
    while i < len(arrivals) or run.queue or run.transfers or run.running or run.waiting_runs:
        t_arr = arrivals[i]["submit"] if i < len(arrivals) else float("inf")
        run.advance(t_arr)
        while i < len(arrivals) and arrivals[i]["submit"] <= run.now:
            run.queue.append(dict(arrivals[i]))
            i += 1
        run.dispatch()
        run.start_ready()
        run.k_max = max(run.k_max, len(run.transfers))
    return run.summary(sum(l.n_vms for l in leases))


class _SgeRun:
    """The state of one :func:`run_sge` (seconds, MB): SGE's queue, the transfers sharing the
    link, the dispatched VWs waiting for their VMs' images, the running VWs, the nodes."""

    def __init__(self, spec: SgeSpec) -> None:
        self.spec = spec
        self.rate = spec.bandwidth_mbps * MB_PER_MBIT       # MB/s of the whole link
        self.nodes = [_Node(spec.slots_per_node) for _ in range(spec.slots // spec.slots_per_node)]
        self.queue: list[dict] = []                         # submitted, not dispatched (submission order)
        self.transfers: list[dict] = []                     # in flight: {"left": MB, "vms": [VM records]}
        self.waiting_runs: list[dict] = []                  # dispatched jobs whose VMs are not all deployed
        self.running: list[tuple[float, list[int]]] = []    # (end, nodes)
        self.vms: list[dict] = []
        self.last_end = 0.0
        self.busy_time = self.area = 0.0                    # s with a transfer in flight; transfers x s
        self.k_max = self.n_transfers = 0
        self.mb = 0.0
        self.now = 0.0

    def advance(self, t_arr: float) -> None:
        """To the next event (a transfer's end, a VW's end, or the arrival at ``t_arr``):
        the transfers progress at an equal share of the link, ended ones deploy their VMs,
        ended VWs free their slots. RuntimeError when there is no next event."""
        transfers, now = self.transfers, self.now
        k = len(transfers)
        t_xfer = now + min(t["left"] for t in transfers) * k / self.rate if transfers else float("inf")
        t_end = min((e for e, _ in self.running), default=float("inf"))
        t = min(t_xfer, t_end, t_arr)
        if t == float("inf"):
            raise RuntimeError("SGE model stuck: jobs queued with no event to free slots")
        if k:
            done_mb = (t - now) * self.rate / k
            self.busy_time += t - now
            self.area += k * (t - now)
            for tr in transfers:
                tr["left"] -= done_mb
        self.now = now = t
        for tr in [tr for tr in transfers if tr["left"] <= 1e-6]:
            transfers.remove(tr)
            for vm in tr["vms"]:
                vm["ready"] = now
                vm["job"]["pending"] -= 1
        for end, held in [r for r in self.running if r[0] <= now]:
            self.running.remove((end, held))
            for k2 in held:
                self.nodes[k2].free += 1

    def dispatch(self) -> None:
        """SGE's scan: every queued job that fits in the free slots (lowest node first) is
        dispatched, its VMs' transfers started (or their images found in the node's cache)."""
        spec, nodes, now = self.spec, self.nodes, self.now
        kept = []
        blocked = False
        for job in self.queue:
            free = [k for k, n in enumerate(nodes) for _ in range(n.free)]
            if blocked or len(free) < job["n"]:
                kept.append(job)
                blocked = blocked or spec.strict_fifo
                continue
            job["nodes"], job["pending"] = free[:job["n"]], 0
            for k in sorted(set(job["nodes"])):
                here = [{"lease": job["lease"], "dispatch": now, "ready": None, "wait": now - job["submit"],
                         "job": job, "mb": job["mb"]} for _ in range(job["nodes"].count(k))]
                nodes[k].free -= len(here)
                self.vms.extend(here)
                if spec.cache_images and nodes[k].has(job["image"]):
                    for vm in here:
                        vm["ready"] = now
                else:                       # one transfer per node carries the image for its VMs
                    self.transfers.append({"left": job["mb"], "vms": here})
                    job["pending"] += len(here)
                    self.n_transfers += 1
                    self.mb += job["mb"]
                nodes[k].use(job["image"], now, spec.cache_images)
            self.waiting_runs.append(job)
        self.queue[:] = kept

    def start_ready(self) -> None:
        """Start the dispatched VWs whose VMs are all deployed."""
        for job in [j for j in self.waiting_runs if j["pending"] == 0]:
            self.waiting_runs.remove(job)
            end = self.now + job["run"]
            self.running.append((end, job["nodes"]))
            self.last_end = max(self.last_end, end)

    def summary(self, requested_vms: int) -> dict:
        """:func:`run_sge`'s answer once every VW has ended."""
        vms = self.vms
        times = [v["ready"] - v["dispatch"] for v in vms]
        per_lease: dict = {}
        for v in vms:
            per_lease[v["lease"]] = max(per_lease.get(v["lease"], 0.0), v["ready"] - v["dispatch"])
        deployed_at, total = [], 0.0
        for ready, vm_mb in sorted((v["ready"], v["mb"]) for v in vms):
            total += vm_mb
            deployed_at.append((ready, total))
        return {"vms": requested_vms, "vms_started": len(vms),
                "mean_deploy_s": sum(times) / len(times) if times else None,
                "max_deploy_s": max(times, default=None),
                "mean_deploy_lease_s": sum(per_lease.values()) / len(per_lease) if per_lease else None,
                "mean_queue_wait_s": sum(v["wait"] for v in vms) / len(vms) if vms else None,
                "max_parallel_transfers": self.k_max,
                "mean_parallel_transfers": self.area / self.busy_time if self.busy_time else 0.0,
                "cache_hits": sum(1 for x in times if x == 0.0), "transfers": self.n_transfers,
                "mb_transferred": self.mb, "all_best_effort_s": self.last_end, "deployed": deployed_at}


#: The inferred prototype's variants (name -> (what it is, SgeSpec)); "16x1" is the site of our
#: own runs (``seed000_be.BeSpec``: 16 one-slot nodes), "8x2" the thesis's testbed.
SGE_VARIANTS = {
    "16x1": ("16 one-slot nodes, one SGE job per VW (our site)", SgeSpec()),
    "16x1-per-vm": ("16 one-slot nodes, one SGE job per VM", SgeSpec(per_vm=True)),
    "16x1-fifo": ("16 one-slot nodes, strict FIFO (the queue's head blocks)", SgeSpec(strict_fifo=True)),
    "8x2": ("8 dual-slot nodes (the testbed; a VW's VMs on a node share a transfer)", SgeSpec(slots_per_node=2)),
}


def run_all(leases_by_trace: dict, cache_images: int = 3) -> list[dict]:
    """Every (variant, trace, reuse) run: ``{"variant", "trace", "config"}`` ("nocache" or
    "cache" -- an LFU cache of ``cache_images`` per node) plus :func:`run_sge`'s fields."""
    from dataclasses import replace
    rows = []
    for name, (_label, spec) in SGE_VARIANTS.items():
        for trace, leases in leases_by_trace.items():
            for cfg, images in (("nocache", 0), ("cache", cache_images)):
                rows.append({"variant": name, "trace": trace, "config": cfg,
                             **run_sge(leases, replace(spec, cache_images=images))})
    return rows


def table(rows, ours: dict, thesis: dict) -> str:
    """Markdown: deployment time per image (s) without reuse / with the cache, per trace, for
    every SGE variant, then our engine's (``ours``: trace -> (no reuse, cache)) and the
    thesis's (``thesis``: the same shape); the SGE queue wait (not counted) and the transfers
    in flight on average."""
    def get(v, t, c):
        return next(r for r in rows if r["variant"] == v and r["trace"] == t and r["config"] == c)
    traces = list(ours)
    lines = ["| model | " + " | ".join(f"{t}: no reuse / LFU cache (s)" for t in traces)
             + " | SGE queue wait per VM, no reuse (s) | transfers in flight, mean / max |",
             "|---|" + "---:|" * (len(traces) + 2)]
    for name, (label, _spec) in SGE_VARIANTS.items():
        cells = [f"{get(name, t, 'nocache')['mean_deploy_s']:.0f} / {get(name, t, 'cache')['mean_deploy_s']:.0f}"
                 for t in traces]
        r = get(name, traces[0], "nocache")
        lines.append(f"| SGE prototype (inferred): {label} | " + " | ".join(cells)
                     + f" | {r['mean_queue_wait_s']:.0f} | {r['mean_parallel_transfers']:.1f} / "
                       f"{r['max_parallel_transfers']} |")
    lines.append("| our engine (placement to image on node, FIFO link) | "
                 + " | ".join(f"{ours[t][0]:.0f} / {ours[t][1]:.0f}" for t in traces) + " | (in the deployment) | 1 / 1 |")
    lines.append("| the thesis | " + " | ".join(f"{thesis[t][0]:.0f} / {thesis[t][1]:.0f}" for t in traces)
                 + " | | |")
    return "\n".join(lines)
