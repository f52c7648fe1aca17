"""The grid simulator's event loop: the live broker's matchmaking on a simulated clock.

Per job, in submission order (seed 004 Sections 3.2, 4.2, 6.2):

1. every ``ism_refresh_s`` seconds the ISM (:class:`infosys.ism.ISM`, the live broker's) takes a
   snapshot of the CEs' GLUE 1.3 state, which resets the feedback counters
   (:class:`infosys.feedback.FeedbackCounters`); between refreshes the broker sees the state at
   the last refresh. The simulator takes the snapshot at the refresh instant k x R (the CE
   events up to that instant applied first), also when it is only needed by a later job;
2. filtering with the job's ``Requirements`` and its ``Rank`` (jdl.matches, jdl.rank_value),
   evaluated once per CE and snapshot (every job has the same JDL, and an ad does not change
   between refreshes);
3. selection with :mod:`broker.selection` (SFETE with N_j = published jobs + feedback counter,
   or published jobs only without feedback; Max Rank; Fuzzy Rank), ties and draws from a
   ``random.Random`` seeded with ``seed``;
4. dispatch: the counter of the chosen CE is incremented and the job enters the CE
   (:mod:`broker.gridsim.ce_models`) at once.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Callable, Sequence

import jdl
from vgrid_runtime.clock import Clock, SimulatedClock
from infosys.feedback import FeedbackCounters
from infosys.ism import DISPATCHED, ISM

from broker.matchmaker import vo_allowed
from broker.selection import Candidate, ce_capacity, policy_by_name, published_jobs

from .ce_models import CEEventQueue, make_ce
from .model import CESpec, Job

#: The JDL of every simulated job (seed 004 Section 6.2.1: Requirements select every production
#: CE; Max and Fuzzy Rank use the dynamic rank "fewest jobs in the queue").
DEFAULT_JDL = """[
  Executable = "/bin/sleep";
  Arguments = "600";
  Requirements = other.GlueCEStateStatus == "Production";
  Rank = -other.GlueCEStateWaitingJobs;
]
"""

#: The one VO of the simulated grid; it gets all of every CE (seed 004 Section 6.2).
SIMULATED_VO = "vgrid"

ProgressFn = Callable[[int, int], None]


class SimulationError(RuntimeError):
    """The simulation cannot go on (no CE matches the workload's Requirements)."""


@dataclass(frozen=True)
class SimConfig:
    """One simulation run.

    ``policy`` "sfete" | "max" | "fuzzy"; ``feedback`` uses the feedback counters in SFETE's
    N_j; ``ism_refresh_s`` R > 0 (s); ``vwns`` None for FCFS LRMS CEs, else the maximum number
    K of virtual worker nodes per CE; ``vwn_overhead`` F (fraction of C per VWN);
    ``vwn_startup_s`` (s); ``seed`` for tie-breaks, Fuzzy draws and Poisson workloads;
    ``fuzzy_factor`` (> 0); ``jdl`` the JDL text every job carries, ``jdl_filename`` its name
    in error messages.
    """

    policy: str = "sfete"
    feedback: bool = True
    ism_refresh_s: float = 30.0
    vwns: int | None = None
    vwn_overhead: float = 0.0
    vwn_startup_s: float = 0.0
    seed: int = 0
    fuzzy_factor: float = 1.0
    jdl: str = DEFAULT_JDL
    jdl_filename: str = "<gridsim job>"

    def __post_init__(self) -> None:
        if not self.ism_refresh_s > 0:
            raise ValueError(f"the ISM refresh interval must be > 0 s, got {self.ism_refresh_s}")
        policy_by_name(self.policy)  # ValueError naming the choices


@dataclass
class SimResult:
    """A finished run: its configuration, CEs and jobs (outcomes filled in), ISM refreshes."""

    config: SimConfig
    ces: tuple[CESpec, ...]
    jobs: list[Job]
    refreshes: int = 0
    events: int = 0
    extra: dict = field(default_factory=dict)


class SimulatedGlueSource:
    """ISM source publishing the simulated CEs' GLUE 1.3 state (what each CE's GIP would say).

    ``fetch()`` returns one ad per CE; an ad object is rebuilt only when its CE changed since the
    last fetch, so unchanged CEs keep the same dict (and their cached Rank) across snapshots.
    """

    blocking = False

    def __init__(self, specs: Sequence[CESpec], models: Sequence) -> None:
        self.name = "simulated-grid"
        self.rejected: list = []
        self._specs = list(specs)
        self._models = list(models)
        self._versions = [-1] * len(specs)
        self._ads: list[dict] = [{} for _ in specs]

    def _ad(self, spec: CESpec, model) -> dict:
        running, waiting = model.running, model.waiting
        return {"VGridAdID": spec.ce_id, "GlueCEUniqueID": spec.ce_id,
                "GlueCEStateStatus": "Production", "GlueCEInfoTotalCPUs": spec.cpus,
                "GlueCEAccessControlBaseRule": [f"VO:{SIMULATED_VO}"],
                "GlueHostBenchmarkSI00": spec.si00, "GlueCEStateRunningJobs": running,
                "GlueCEStateWaitingJobs": waiting, "GlueCEStateTotalJobs": running + waiting,
                "GlueCEStateFreeCPUs": max(0, spec.cpus - running)}

    def fetch(self) -> list[dict]:
        for i, model in enumerate(self._models):
            if model.version != self._versions[i]:
                self._ads[i] = self._ad(self._specs[i], model)
                self._versions[i] = model.version
        return list(self._ads)


class CandidateBoard:
    """The matchmaker's candidates for the workload's one JDL, kept up to date incrementally.

    Filtering is the matchmaker's: the VO rule (``broker.matchmaker.vo_allowed``) and
    ``jdl.matches``. ``refresh`` takes the ads the ISM offers to matching (``ISM.candidates``: AdViews of the
    snapshot). Equivalent to building, for every job, ``Candidate(ce_id, ad, jdl.rank_value(job, ad, now),
    published_jobs(ad) + feedback.get(ce_id), ce_capacity(ad))`` for each ad of the snapshot
    that ``jdl.matches`` (as :class:`broker.matchmaker.Matchmaker` does), but only recomputes
    what changed: ads replaced by a refresh, and the CE a job was just dispatched to.
    ``clock`` (the simulated clock) gives ``now`` to every evaluation (the JDL's ``time()``).
    """

    def __init__(self, job: "jdl.JobDescription", feedback: FeedbackCounters | None,
                 rank_uses_feedback: bool = False, *, clock: Clock) -> None:
        self.job = job
        self.clock = clock
        self.feedback = feedback
        self.rank_uses_feedback = rank_uses_feedback
        self.candidates: list[Candidate] = []
        self._index: dict[str, int] = {}        # CE id -> index in candidates
        self._raws: list = []                    # the raw ad dicts of the last snapshot
        self._ids: list[str] = []                # their CE ids
        self._cand_at: list[int | None] = []     # their index in candidates (None: no match)
        self._positions: dict[str, int] | None = None  # CE id -> position in the snapshot
        self._dispatched: set[str] = set()       # CEs dispatched to since the last refresh
        # per CE: (raw ad dict, matches, rank, published jobs, capacity) of the last ad seen
        self._evaluated: dict[str, tuple[object, bool, float | None, int, float]] = {}

    def _evaluate(self, ce_id: str, ad) -> tuple[object, bool, float | None, int, float]:
        raw = getattr(ad, "ad", ad)  # an AdView's underlying dict: same object = same data
        seen = self._evaluated.get(ce_id)
        if seen is None or seen[0] is not raw:
            now = self.clock.now()
            ok = vo_allowed(ad, self.job.virtual_organisation) and jdl.matches(self.job, ad, now)
            seen = (raw, ok, jdl.rank_value(self.job, ad, now) if ok else None,
                    published_jobs(raw), ce_capacity(raw))
            self._evaluated[ce_id] = seen
        return seen

    def _n_jobs(self, ce_id: str) -> int:
        published = self._evaluated[ce_id][3]
        return published + self.feedback.get(ce_id) if self.feedback is not None else published

    def refresh(self, ads: Sequence) -> None:
        """Rebuild from the ads of a new ISM snapshot (dicts or AdViews of dicts).

        Fast path: when the snapshot lists the same CEs in the same order as the last one,
        only the ads that were replaced and the CEs with a feedback count are looked at again.
        """
        raws = [getattr(ad, "ad", ad) for ad in ads]  # an AdView's dict: same object, same data
        if len(raws) == len(self._raws) and self._positions is not None:
            stale = {p for p, (a, b) in enumerate(zip(raws, self._raws)) if a is not b}
            stale.update(self._positions[ce] for ce in self._dispatched)
            if self._patch(ads, raws, sorted(stale)):
                return
        self._rebuild(ads, raws)

    def _patch(self, ads: Sequence, raws: list, stale: list[int]) -> bool:
        """Rebuild the candidates at positions ``stale``; False if a CE's match status changed."""
        for p in stale:
            ce_id = ads[p]["GlueCEUniqueID"]
            old = self._cand_at[p]
            if ce_id != self._ids[p]:
                return False
            raw, ok, rank, _, capacity = self._evaluate(ce_id, ads[p])
            if ok != (old is not None):
                return False
            if ok:
                self.candidates[old] = Candidate(ce_id, ads[p], rank, self._n_jobs(ce_id), capacity)
        self._raws = raws
        self._dispatched = set()
        return True

    def _rebuild(self, ads: Sequence, raws: list) -> None:
        cands, cand_at, ids = [], [], []
        for ad in ads:
            ce_id = ad["GlueCEUniqueID"]
            raw, ok, rank, _, capacity = self._evaluate(ce_id, ad)
            ids.append(ce_id)
            cand_at.append(len(cands) if ok else None)
            if ok:
                cands.append(Candidate(ce_id, ad, rank, self._n_jobs(ce_id), capacity))
        self.candidates, self._cand_at, self._ids, self._raws = cands, cand_at, ids, raws
        self._index = {c.ce_id: i for i, c in enumerate(cands)}
        self._positions = {ce: p for p, ce in enumerate(ids)} if len(set(ids)) == len(ids) else None
        self._dispatched = set()

    def dispatched(self, ce_id: str) -> None:
        """The feedback counter of ``ce_id`` changed: refresh its N_j (and its Rank when the Rank
        reads ``other.VGridDispatchedSinceRefresh``)."""
        self._dispatched.add(ce_id)
        if self.feedback is None and not self.rank_uses_feedback:
            return
        i = self._index[ce_id]
        c = self.candidates[i]
        rank = (jdl.rank_value(self.job, c.ad, self.clock.now()) if self.rank_uses_feedback
                else c.rank)
        self.candidates[i] = Candidate(ce_id, c.ad, rank, self._n_jobs(ce_id), c.capacity)


def simulate(ces: Sequence[CESpec], jobs: Sequence[Job], config: SimConfig,
             progress: ProgressFn | None = None) -> SimResult:
    """Run ``jobs`` (outcomes are written into them) on ``ces`` under ``config``.

    Raises ValueError for bad VWN parameters, jdl.JDLSyntaxError for a bad JDL, and
    SimulationError when no CE matches the JDL's Requirements.
    """
    models = [make_ce(spec, config.vwns, config.vwn_overhead, config.vwn_startup_s) for spec in ces]
    index = {spec.ce_id: i for i, spec in enumerate(ces)}
    options = {"fuzzy_factor": config.fuzzy_factor} if config.policy.lower() == "fuzzy" else {}
    policy = policy_by_name(config.policy, **options)
    ordered = sorted(jobs, key=lambda j: (j.submit_s, j.job_id))
    clock = SimulatedClock(min(0.0, ordered[0].submit_s) if ordered else 0.0)
    feedback = FeedbackCounters()
    ism = ISM([SimulatedGlueSource(ces, models)], config.ism_refresh_s, clock, feedback=feedback)
    board = CandidateBoard(jdl.parse_jdl(config.jdl, config.jdl_filename),
                           feedback if config.feedback else None,
                           DISPATCHED.lower() in config.jdl.lower(), clock=clock)
    rng = random.Random(f"gridsim:{config.seed}")
    events = CEEventQueue(models)
    refresh_s, last_refresh, refreshes = config.ism_refresh_s, None, 0
    for n, job in enumerate(ordered):
        t = job.submit_s
        k = int(t // refresh_s)
        if last_refresh is None or k > last_refresh:
            boundary = k * refresh_s
            events.run_until(boundary)
            clock.advance_to(max(clock.now(), boundary))
            if not ism.maybe_refresh(boundary):  # k R < last + R only by float rounding
                ism.refresh(boundary)
            board.refresh(ism.candidates(boundary))
            last_refresh, refreshes = k, refreshes + 1
        events.run_until(t)
        clock.advance_to(t)
        if not board.candidates:
            raise SimulationError(f"job {job.job_id} at t={t:.0f} s: no CE matches the Requirements")
        chosen = policy.select(board.candidates, rng)
        feedback.increment(chosen.ce_id)
        board.dispatched(chosen.ce_id)
        job.ce = chosen.ce_id
        i = index[chosen.ce_id]
        models[i].submit(job, t)
        events.reschedule(i)
        if progress is not None and n % 2000 == 0:
            progress(n, len(ordered))
    events.run_until(math.inf)
    if progress is not None:
        progress(len(ordered), len(ordered))
    return SimResult(config, tuple(ces), list(jobs), refreshes, events.fired)
