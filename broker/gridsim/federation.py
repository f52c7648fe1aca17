"""The simulated federation: several Grids, each its own broker, peering through gateways
(issue 15; seed 002 Section 4.1, InterGrid), on the grid simulator's clock.

Each :class:`SimGrid` is a broker of its own: its CEs (FCFS LRMS, :mod:`.ce_models`), its ISM
(:class:`infosys.ism.ISM`) over its CEs' GLUE (:class:`FedGlueSource`) and, with peering, over
each peer's aggregate ad (:class:`PeerGlueSource`: :func:`broker.federation.glue.aggregate`,
what a live gateway answers at ``GET /federation/glue``), its own matchmaker and feedback
counters, and its chooser -- the live broker's :class:`~broker.taskqueues.TaskQueues` wrapped in
the live gateway's :class:`~broker.federation.policy.FederatedChooser`, so the forwarding
decision (no local match, or local wait above ``threshold_s`` and the peer's published wait
lower; shares; hop limit; gateways passed) is made by the SAME code as in a live broker.

A job arrives at its home Grid at its submission time. The chosen ad is a local CE (the job
enters it) or a peer's aggregate: the receiving gateway refuses it when the origin's share
there is used up (the live 429 ``share``; the origin chooses again without that peer),
otherwise the job arrives at the peer ``gateway_delay_s`` later, carrying
``VgridGateways``/``VgridHops`` in its JDL as a received job does, and is chosen for again
there. A job nothing matches waits and is matched again at every ISM refresh; after
``match_expiry_s`` at one Grid it is rejected (the live broker's Aborted ``no-resources``).

Units: seconds of simulated time, CPUs, SI00. Every job ends exactly once: run at one CE, or
rejected; ``path`` lists the Grids it passed (never one twice).
"""
from __future__ import annotations

import heapq
import itertools
import math
import random
from dataclasses import dataclass, field
from typing import Callable, Sequence

import jdl
from infosys.feedback import FeedbackCounters
from infosys.gip import CEState, glue13_ads, glue13_ads_update
from infosys.ism import ISM
from vgrid_runtime.clock import SimulatedClock

from broker.federation.glue import aggregate
from broker.federation.peers import PeerConfig, Peers
from broker.federation.policy import FederatedChooser
from broker.matchmaker import Matchmaker
from broker.taskqueues import TaskQueues

from .ce_models import CEEventQueue, FcfsLrms
from .engine import DEFAULT_JDL, SimulationError
from .model import CESpec, Job


@dataclass(eq=False)
class FedJob(Job):
    """A trace job in the federation: ``vo`` (its group), ``home`` (the Grid it is submitted
    to), ``limit_s`` (its wall-clock limit, s: the trace's requested time, else its run time).
    Outcome: ``grid`` (where it ran), ``path`` (Grids it passed, home first), ``rejected``."""

    vo: str = ""
    home: str = ""
    limit_s: float = 0.0
    grid: str | None = None
    path: list = field(default_factory=list)
    rejected: bool = False
    placed: int = 0         # times it entered a CE (1 if it ran, 0 if rejected)


@dataclass(frozen=True)
class FedConfig:
    """One federated run. ``peering``: gateways on (each Grid peers with every other);
    ``threshold_s``: ``forward_wait_threshold_s`` (< 0: forward only unmatched jobs);
    ``max_hops``: ``federation_max_hops``; ``share_fraction``: each peer's ``share_cpus`` as a
    fraction of the receiving Grid's CPUs; ``gateway_delay_s``: one forwarding hop;
    ``match_expiry_s``: how long an unmatched job waits at a Grid before rejection;
    ``ism_refresh_s``, ``policy``, ``seed``: as :class:`broker.gridsim.engine.SimConfig`."""

    peering: bool = True
    threshold_s: float = 600.0
    max_hops: int = 2
    share_fraction: float = 0.25
    gateway_delay_s: float = 2.0
    match_expiry_s: float = 1800.0
    ism_refresh_s: float = 240.0
    policy: str = "sfete"
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.ism_refresh_s > 0 or self.gateway_delay_s < 0 or self.match_expiry_s < 0:
            raise ValueError("ism_refresh_s must be > 0 s; gateway_delay_s and match_expiry_s >= 0 s")
        if not 0 <= self.share_fraction <= 1 or self.max_hops < 0:
            raise ValueError("share_fraction must be in [0, 1] and max_hops >= 0")


def grid_url(name: str) -> str:
    """The base URL of simulated Grid ``name``'s broker (its gateway identity)."""
    return f"https://broker.{name}.gridsim.vgrid.local:8440"


class _Lrms(FcfsLrms):
    """An FCFS LRMS that tells its Grid when a job ends (the gateway's share accounting)."""

    def __init__(self, spec: CESpec, on_end: Callable[[FedJob], None]) -> None:
        super().__init__(spec)
        self._on_end = on_end

    def fire(self, now: float) -> list[Job]:
        done = super().fire(now)
        for job in done:
            self._on_end(job)
        return done


def _limit(job: FedJob) -> float:
    return job.limit_s


class FedGlueSource:
    """A Grid's CEs as GLUE 1.3 ads (:func:`infosys.gip.glue13_ads`) with their VOs and their
    EstimatedResponseTime (:meth:`FcfsLrms.estimated_response_s`, wall-clock limits)."""

    blocking = False

    def __init__(self, specs: Sequence[CESpec], vos: Sequence[Sequence[str]], models: Sequence[_Lrms],
                 clock: SimulatedClock) -> None:
        self.name, self.rejected, self.clock = "simulated-ces", [], clock
        self.models = list(models)
        self.states = [CEState(ce_id=s.ce_id, host=s.ce_id.split(":", 1)[0], site=s.ce_id.split(":", 1)[0],
                               queue="lcg", lrms_type="pbs", total_cpus=s.cpus, free_cpus=s.cpus,
                               si00=int(s.si00), vos=sorted(v)) for s, v in zip(specs, vos)]
        self._ads: list[list[dict]] = [[] for _ in specs]
        self._key: list = [None] * len(specs)

    def fetch(self) -> list[dict]:
        now = self.clock.now()
        for i, m in enumerate(self.models):
            ert = int(round(m.estimated_response_s(now, _limit)))
            key = (m.version, ert)
            if key != self._key[i]:
                st = self.states[i]
                st.running, st.waiting, st.ert_s = m.running, m.waiting, ert
                st.free_cpus = max(0, st.total_cpus - m.running)
                self._ads[i] = glue13_ads_update(self._ads[i], st) if self._ads[i] else glue13_ads(st)
                self._key[i] = key
        return [ad for ads in self._ads for ad in ads]


class PeerGlueSource:
    """What Grid ``reader`` reads from peer Grid ``grid``: ``grid``'s aggregate for it
    (:func:`broker.federation.glue.aggregate` over ``grid``'s CE ads, the share ``grid`` gives
    ``reader`` and the CPUs ``reader``'s jobs hold there)."""

    blocking = False

    def __init__(self, grid: "SimGrid", reader: "SimGrid") -> None:
        self.name, self.rejected = f"peer-{grid.name}", []
        self.grid, self.reader = grid, reader

    def fetch(self) -> list[dict]:
        g = self.grid
        cfg = g.peers.by_name(self.reader.name)
        state = aggregate(g.local.fetch(), g.peers, cfg, g.url, g.used.get(self.reader.name, 0))
        return glue13_ads(state)


class SimGrid:
    """One Grid: its broker (ISM, matchmaker, chooser with the forwarding policy) and CEs."""

    def __init__(self, name: str, specs: Sequence[CESpec], vos: Sequence[Sequence[str]],
                 config: FedConfig, clock: SimulatedClock, on_end: Callable[[FedJob], None]) -> None:
        self.name, self.url, self.specs = name, grid_url(name), tuple(specs)
        self.cpus = sum(s.cpus for s in specs)
        self.models = [_Lrms(s, on_end) for s in specs]
        self.local = FedGlueSource(specs, vos, self.models, clock)
        self.feedback = FeedbackCounters()
        self.matchmaker = Matchmaker(self.feedback, default_policy=config.policy,
                                     rng=random.Random(f"fedsim:{config.seed}:{name}"))
        self.peers = Peers([])
        self.chooser = TaskQueues(self.matchmaker)
        self.ism: ISM | None = None
        self.clock, self.config = clock, config
        self.used: dict[str, int] = {}    # origin Grid -> CPUs its forwarded jobs hold here

    def peer_with(self, others: Sequence["SimGrid"], all_vos: Sequence[str]) -> None:
        """Peer with every Grid of ``others`` (each direction: all VOs, share = fraction of the
        receiving Grid's CPUs, equal priorities: the selection code chooses among peers)."""
        self.peers = Peers([PeerConfig(name=o.name, url=o.url, send_vos=list(all_vos),
                                       accept_vos=list(all_vos),
                                       share_cpus=int(self.config.share_fraction * self.cpus))
                            for o in others])
        self.chooser = FederatedChooser(TaskQueues(self.matchmaker), self.peers, lambda: self.url,
                                        self.config.threshold_s, self.config.max_hops)

    def start_ism(self, sources: Sequence) -> None:
        self.ism = ISM([self.local, *sources], self.config.ism_refresh_s, self.clock, feedback=self.feedback)


@dataclass
class FedResult:
    config: FedConfig
    grids: tuple[str, ...]
    cpus: dict
    jobs: list
    refreshes: int = 0
    loop_refusals: int = 0      # forwards a receiving gateway refused as loops (policy: 0)
    held_at_end: dict = field(default_factory=dict)   # grid -> {sender: CPUs still held} (all 0)


class _Descs:
    """The parsed JDL of a job by the gateways it passed (``VgridGateways``, ``VgridHops``
    appended as the receiving gateway rewrites it), parsed once per distinct path."""

    def __init__(self, base: str) -> None:
        self.base, self.cache = base.rstrip().rstrip("]"), {}

    def get(self, gateways: tuple[str, ...]):
        if gateways not in self.cache:
            extra = "" if not gateways else (
                "VgridGateways = {" + ", ".join(f'"{g}"' for g in gateways) + "};\n"
                f"VgridHops = {len(gateways)};\n")
            self.cache[gateways] = jdl.parse_jdl(self.base + extra + "]\n", "<fedsim job>")
        return self.cache[gateways]


def simulate_federation(grid_specs: dict[str, tuple[Sequence[CESpec], Sequence[Sequence[str]]]],
                        jobs: Sequence[FedJob], config: FedConfig,
                        progress: Callable[[int, int], None] | None = None) -> FedResult:
    """Run ``jobs`` (each with ``home`` a key of ``grid_specs``) on the Grids ``grid_specs``
    (name -> (CE specs, each CE's VOs)) under ``config``; outcomes are written into the jobs.
    Raises SimulationError for a job whose home is not a Grid."""
    ordered = sorted(jobs, key=lambda j: (j.submit_s, j.job_id))
    clock = SimulatedClock(min(0.0, ordered[0].submit_s) if ordered else 0.0)
    by_url: dict[str, SimGrid] = {}
    ce_home: dict[str, tuple[SimGrid, int]] = {}

    def on_end(job: FedJob) -> None:
        _release(job, grids)

    grids = {n: SimGrid(n, specs, vos, config, clock, on_end) for n, (specs, vos) in grid_specs.items()}
    all_vos = sorted({v for _, vos in grid_specs.values() for ce in vos for v in ce} | {j.vo for j in jobs})
    for g in grids.values():
        by_url[g.url] = g
        others = [o for o in grids.values() if o is not g] if config.peering else []
        if others:
            g.peer_with(others, all_vos)
        for i, spec in enumerate(g.specs):
            ce_home[spec.ce_id] = (g, i)
    for g in grids.values():
        g.start_ism([PeerGlueSource(o, g) for o in grids.values() if g.peers.by_name(o.name)])
    models = [m for g in grids.values() for m in g.models]
    index = {id(m): i for i, m in enumerate(models)}
    events = CEEventQueue(models)
    descs = _Descs(DEFAULT_JDL)
    for j in ordered:
        if j.home not in grids:
            raise SimulationError(f"job {j.job_id}: home Grid {j.home!r} is not one of {sorted(grids)}")
    # heap of (time, seq, kind, job, grid, arrived at that grid); kind 0 = arrival, 1 = retry
    heap: list = [(j.submit_s, j.job_id, 0, j, j.home, j.submit_s) for j in ordered]
    heapq.heapify(heap)
    seq = itertools.count(max((j.job_id for j in ordered), default=0) + 1)
    pending: list = []      # (job, grid name, arrived at) waiting for a match
    refresh_s, last_k, refreshes, ads = config.ism_refresh_s, None, 0, {}
    done_n, loops = 0, [0]

    def place(job: FedJob, gname: str, arrived: float, t: float) -> bool:
        """Choose for ``job`` at Grid ``gname`` at ``t``; False when nothing matches."""
        g = grids[gname]
        gateways = tuple(grids[p].url for p in job.path[:-1])
        desc = descs.get(gateways)
        exclude: set = set()
        while True:
            chosen = g.chooser.choose(desc, ads[gname], now=t, vo=job.vo, exclude=frozenset(exclude))
            if chosen is None:
                return False
            peer = g.peers.of_ad(chosen.ad)
            if peer is None:
                g.feedback.increment(chosen.ce_id)
                job.ce, job.grid = chosen.ce_id, gname
                job.placed += 1
                m = ce_home[chosen.ce_id][0].models[ce_home[chosen.ce_id][1]]
                m.submit(job, t)
                events.reschedule(index[id(m)])
                return True
            dest = by_url[peer.base]
            if dest.name in job.path:           # the receiving gateway's 409 loop
                loops[0] += 1
                exclude.add(chosen.ce_id)
                continue
            if dest.used.get(gname, 0) >= dest.peers.by_name(gname).share_cpus:
                exclude.add(chosen.ce_id)       # its 429 share: choose again without it
                continue
            g.feedback.increment(chosen.ce_id)
            _release(job, grids)                # it leaves a Grid that held it for a sender
            dest.used[gname] = dest.used.get(gname, 0) + 1
            job.path.append(dest.name)
            heapq.heappush(heap, (t + config.gateway_delay_s, next(seq), 0, job, dest.name,
                                  t + config.gateway_delay_s))
            return True

    while heap:
        t, _, kind, job, gname, arrived = heapq.heappop(heap)
        k = int(t // refresh_s)
        if last_k is None or k > last_k:
            boundary = k * refresh_s
            events.run_until(boundary)
            clock.advance_to(max(clock.now(), boundary))
            for g in grids.values():
                if not g.ism.maybe_refresh(boundary):
                    g.ism.refresh(boundary)
                ads[g.name] = g.ism.candidates(boundary)
            last_k, refreshes = k, refreshes + 1
            retry, pending[:] = list(pending), []
            for pjob, pgrid, parrived in retry:     # unmatched jobs are matched again
                if not place(pjob, pgrid, parrived, boundary):
                    if boundary - parrived >= config.match_expiry_s:
                        _reject(pjob, grids)
                    else:
                        pending.append((pjob, pgrid, parrived))
            if pending:
                heapq.heappush(heap, ((k + 1) * refresh_s, next(seq), 1, None, "", 0.0))
        if kind == 1:
            continue
        events.run_until(t)
        clock.advance_to(t)
        if not job.path:
            job.path.append(gname)
            done_n += 1
            if progress is not None and done_n % 5000 == 0:
                progress(done_n, len(ordered))
        if not place(job, gname, arrived, t):
            if config.match_expiry_s <= 0:
                _reject(job, grids)
            else:
                pending.append((job, gname, arrived))
                heapq.heappush(heap, ((k + 1) * refresh_s, next(seq), 1, None, "", 0.0))
    events.run_until(math.inf)
    if progress is not None:
        progress(len(ordered), len(ordered))
    return FedResult(config, tuple(grids), {n: g.cpus for n, g in grids.items()}, list(jobs), refreshes,
                     loops[0], {n: dict(g.used) for n, g in grids.items()})


def _release(job: FedJob, grids: dict) -> None:
    """The CPU of the share the Grid holding ``job`` gave its sender is free again (the job
    ended there, was rejected there, or left it for another peer)."""
    if len(job.path) > 1:
        host = grids[job.path[-1]]
        host.used[job.path[-2]] -= 1


def _reject(job: FedJob, grids: dict) -> None:
    """``job`` ends rejected where it is."""
    job.rejected = True
    _release(job, grids)
