"""The grid simulator's event loop: the live broker's matchmaking on a simulated clock.

Per job, in submission order (seed 004 Sections 3.2, 4.2, 6.2):

1. every ``ism_refresh_s`` seconds the ISM (:class:`infosys.ism.ISM`, the live broker's) takes a
   snapshot of the CEs' GLUE 1.3 state, which resets the feedback counters
   (:class:`infosys.feedback.FeedbackCounters`); between refreshes the broker sees the state at
   the last refresh. The simulator takes the snapshot at the refresh instant k x R (the CE
   events up to that instant applied first), also when it is only needed by a later job;
   Each CE publishes through its GIP (:class:`SimulatedGlueSource`:
   :func:`infosys.gip.glue13_ads` of a :class:`infosys.gip.CEState`);
2. matchmaking with the live broker's :class:`broker.matchmaker.Matchmaker`: filtering with the
   job's ``Requirements`` and its ``Rank``, evaluated once per CE ad and snapshot for the
   workload's one JDL text (the matchmaker groups identical JDLs), then selection with
   :mod:`broker.selection` (SFETE with N_j = published jobs + feedback counter, or published
   jobs only without feedback; Max Rank; Fuzzy Rank), ties and draws from a
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
from vgrid_runtime.clock import SimulatedClock
from infosys.feedback import FeedbackCounters
from infosys.gip import CEState, glue13_ads, glue13_ads_update
from infosys.ism import ISM

from broker.matchmaker import Matchmaker
from broker.selection import policy_by_name

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
    """ISM source publishing the simulated CEs' GLUE 1.3 state through the CEs' GIP.

    Each CE is an :class:`infosys.gip.CEState` (static part from its :class:`CESpec`, running
    and waiting jobs from its model) turned into an ad by :func:`infosys.gip.glue13_ads`, as a
    live CE's ``GET /glue`` is by the ISM (later changes: :func:`infosys.gip.glue13_ads_update`,
    only the GlueCEState attributes). ``fetch()`` returns one ad per CE; an ad object is
    rebuilt only when its CE changed since the last fetch, so unchanged CEs keep the same dict
    (and the matchmaker its evaluation) across snapshots.
    """

    blocking = False

    def __init__(self, specs: Sequence[CESpec], models: Sequence) -> None:
        self.name = "simulated-grid"
        self.rejected: list = []
        self._states = [ce_state(spec) for spec in specs]
        self._models = list(models)
        self._versions = [-1] * len(specs)
        self._ads: list[list[dict]] = [[] for _ in specs]  # per CE: its ads

    def fetch(self) -> list[dict]:
        for i, model in enumerate(self._models):
            if model.version != self._versions[i]:
                state = self._states[i]
                state.running, state.waiting = model.running, model.waiting
                state.free_cpus = max(0, state.total_cpus - model.running)
                self._ads[i] = (glue13_ads_update(self._ads[i], state) if self._ads[i]
                                else glue13_ads(state))
                self._versions[i] = model.version
        return [ad for ads in self._ads for ad in ads]


def ce_state(spec: CESpec) -> CEState:
    """The GIP state of an idle simulated CE: ``spec``'s CPUs and SI00, VO ``vgrid``, in
    production; host and queue from its GlueCEUniqueID ``host:port/queue``."""
    host = spec.ce_id.split("/", 1)[0].rsplit(":", 1)[0] or spec.ce_id
    return CEState(ce_id=spec.ce_id, host=host, site=host, queue=spec.ce_id.rsplit("/", 1)[-1],
                   lrms_type="pbs", total_cpus=spec.cpus, free_cpus=spec.cpus,
                   si00=int(spec.si00), vos=[SIMULATED_VO])


def simulate(ces: Sequence[CESpec], jobs: Sequence[Job], config: SimConfig,
             progress: ProgressFn | None = None) -> SimResult:
    """Run ``jobs`` (outcomes are written into them) on ``ces`` under ``config``.

    Raises ValueError for bad VWN parameters, jdl.JDLSyntaxError for a bad JDL, and
    SimulationError when no CE matches the JDL's Requirements.
    """
    models = [make_ce(spec, config.vwns, config.vwn_overhead, config.vwn_startup_s) for spec in ces]
    index = {spec.ce_id: i for i, spec in enumerate(ces)}
    ordered = sorted(jobs, key=lambda j: (j.submit_s, j.job_id))
    clock = SimulatedClock(min(0.0, ordered[0].submit_s) if ordered else 0.0)
    feedback = FeedbackCounters()
    ism = ISM([SimulatedGlueSource(ces, models)], config.ism_refresh_s, clock, feedback=feedback)
    # Without feedback SFETE's N_j is the published jobs only: the matchmaker reads counters
    # nobody increments (Rank can still read the ISM's through VGridDispatchedSinceRefresh).
    matchmaker = Matchmaker(feedback if config.feedback else FeedbackCounters(),
                            default_policy=config.policy.lower(), fuzzy_factor=config.fuzzy_factor,
                            rng=random.Random(f"gridsim:{config.seed}"))
    job_desc = jdl.parse_jdl(config.jdl, config.jdl_filename)
    events = CEEventQueue(models)
    refresh_s, last_refresh, refreshes, ads = config.ism_refresh_s, None, 0, ()
    for n, job in enumerate(ordered):
        t = job.submit_s
        k = int(t // refresh_s)
        if last_refresh is None or k > last_refresh:
            boundary = k * refresh_s
            events.run_until(boundary)
            clock.advance_to(max(clock.now(), boundary))
            if not ism.maybe_refresh(boundary):  # k R < last + R only by float rounding
                ism.refresh(boundary)
            ads = ism.candidates(boundary)
            last_refresh, refreshes = k, refreshes + 1
        events.run_until(t)
        clock.advance_to(t)
        chosen = matchmaker.select(matchmaker.match(job_desc, ads, now=clock.now()))
        if chosen is None:
            raise SimulationError(f"job {job.job_id} at t={t:.0f} s: no CE matches the Requirements")
        feedback.increment(chosen.ce_id)
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
