"""Simulated enactment: how a CE runs the jobs dispatched to it (seed 004 Sections 5.1, 6.2).

Two local resource managers, both driven by the engine through the same small interface:
``submit(job, now)``, ``next_event_s()`` (the time of the CE's next state change, inf if none)
and ``fire(now)`` (apply the changes due at ``now``, return the jobs that finished). ``running``
and ``waiting`` are what the CE publishes as GlueCEStateRunningJobs / GlueCEStateWaitingJobs;
``version`` grows at every change (so the GLUE source re-renders only changed CEs).

- :class:`FcfsLrms`: a batch queue, one job per CPU, first come first served (Torque/PBS of
  the paper's testbed). A job of work w on a CPU of benchmark s runs w / s seconds.
- :class:`FairShareVwn`: one virtual worker node (VWN) per job, at most K at once, then a FCFS
  queue. Every working VWN gets the same share of the CE, readjusted at every arrival and
  departure (seed 004 Section 5.1, Figure 2); each VWN, booting or working, costs a fraction F
  of the CE's capacity C as overhead, and a VWN boots for S seconds before its job runs
  (seed 004 Section 6.2.2). A job's rate is min(s, C (1 - F n) / W) SI00 with n VWNs of which
  W are working: a serial job never runs faster than one CPU.

The fair-share CE is simulated in "virtual time" (the service every working job has received so
far), so an arrival or departure costs O(log n), not O(n) readjustments.
"""
from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from typing import Sequence

from .model import CESpec, Job

_EPS = 1e-9


class FcfsLrms:
    """FCFS batch system of ``spec.cpus`` CPUs of ``spec.si00`` each (seed 004 Section 6.2)."""

    def __init__(self, spec: CESpec) -> None:
        self.spec = spec
        self.version = 0
        self._free = spec.cpus
        self._queue: deque[Job] = deque()
        self._running: list[tuple[float, int, Job]] = []
        self._seq = itertools.count()

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def waiting(self) -> int:
        return len(self._queue)

    def _start(self, job: Job, now: float) -> None:
        self._free -= 1
        job.start_s = now
        heapq.heappush(self._running, (now + job.work / self.spec.si00, next(self._seq), job))

    def submit(self, job: Job, now: float) -> None:
        """Queue ``job`` at ``now``; it starts at once when a CPU is free."""
        self.version += 1
        if self._free > 0:
            self._start(job, now)
        else:
            self._queue.append(job)

    def next_event_s(self) -> float:
        return self._running[0][0] if self._running else math.inf

    def estimated_response_s(self, now: float, limit) -> float:
        """GlueCEStateEstimatedResponseTime (s) of one more job at ``now``: 0 with a free CPU,
        else the backlog of wall-clock limits (``limit(job)`` seconds: what is left of the
        running jobs' limits plus the queued jobs' limits) over the CPUs -- an estimate from
        what a CE knows (limits, not run times), as the live CE agent's lease engine computes
        it from leases' durations."""
        if self._free > 0:
            return 0.0
        left = sum(max(0.0, job.start_s + limit(job) - now) for _, _, job in self._running)
        return (left + sum(limit(job) for job in self._queue)) / self.spec.cpus

    def fire(self, now: float) -> list[Job]:
        """Finish the jobs due by ``now``, start queued jobs on the freed CPUs."""
        done = []
        while self._running and self._running[0][0] <= now:
            end, _, job = heapq.heappop(self._running)
            job.end_s = end
            self._free += 1
            done.append(job)
        while self._free > 0 and self._queue:
            self._start(self._queue.popleft(), now)
        if done:
            self.version += 1
        return done


class FairShareVwn:
    """Per-job virtual worker nodes with fair sharing (seed 004 Sections 5.1 and 6.2.2).

    ``max_vwns`` K >= 1, ``overhead`` F >= 0 (fraction of C per VWN) with F x K < 1,
    ``startup_s`` S >= 0 (seconds a VWN boots before its job runs). ValueError otherwise.
    """

    def __init__(self, spec: CESpec, max_vwns: int, overhead: float = 0.0,
                 startup_s: float = 0.0) -> None:
        if max_vwns < 1:
            raise ValueError(f"the maximum number of VWNs must be >= 1, got {max_vwns}")
        if overhead < 0 or overhead * max_vwns >= 1:
            raise ValueError(f"VWN overhead F={overhead} with K={max_vwns} VWNs leaves no capacity "
                             "for jobs: need 0 <= F and F x K < 1")
        if startup_s < 0:
            raise ValueError(f"VWN start-up delay must be >= 0 s, got {startup_s}")
        self.spec = spec
        self.max_vwns = max_vwns
        self.overhead = overhead
        self.startup_s = startup_s
        self.version = 0
        self._v = 0.0      # service (SI00-seconds) each working job has received since t=0
        self._t = 0.0      # time of the last _sync
        self._working: list[tuple[float, int, Job]] = []  # (finish tag in virtual time, seq, job)
        self._booting: deque[tuple[float, Job]] = deque()   # (ready time, job), FIFO = by time
        self._queue: deque[Job] = deque()
        self._seq = itertools.count()

    @property
    def running(self) -> int:
        return len(self._working) + len(self._booting)

    @property
    def waiting(self) -> int:
        return len(self._queue)

    def rate(self) -> float:
        """SI00 each working job gets now: min(s, C (1 - F n) / W); 0 when none works."""
        w = len(self._working)
        if not w:
            return 0.0
        share = self.spec.capacity * (1.0 - self.overhead * self.running) / w
        return min(self.spec.si00, share)

    def _sync(self, now: float) -> None:
        if self._working:
            self._v += self.rate() * (now - self._t)
        self._t = now

    def _work(self, job: Job) -> None:
        heapq.heappush(self._working, (self._v + job.work, next(self._seq), job))

    def _create(self, job: Job, now: float) -> None:
        job.start_s = now
        if self.startup_s > 0:
            self._booting.append((now + self.startup_s, job))
        else:
            self._work(job)

    def submit(self, job: Job, now: float) -> None:
        """``job`` arrives at ``now``: a new VWN when fewer than K exist, else the queue."""
        self._sync(now)
        self.version += 1
        if self.running < self.max_vwns:
            self._create(job, now)
        else:
            self._queue.append(job)

    def next_event_s(self) -> float:
        t = self._booting[0][0] if self._booting else math.inf
        if self._working:
            t = min(t, self._t + max(0.0, self._working[0][0] - self._v) / self.rate())
        return t

    def _finished(self, tag: float, tol: float, now: float) -> bool:
        """A job with finish tag ``tag`` is done: its remaining work is within rounding, or so
        small that finishing it would not move the clock (now + remaining / rate == now)."""
        left = tag - self._v
        return left <= tol or now + left / self.rate() <= now

    def fire(self, now: float) -> list[Job]:
        """Close the VWNs whose jobs finished by ``now``, start booted jobs, fill free VWN slots."""
        self._sync(now)
        done = []
        tol = _EPS * max(1.0, abs(self._v))
        while self._working and self._finished(self._working[0][0], tol, now):
            job = heapq.heappop(self._working)[2]
            job.end_s = now
            done.append(job)
        while self._booting and self._booting[0][0] <= now:
            self._work(self._booting.popleft()[1])
        while self._queue and self.running < self.max_vwns:
            self._create(self._queue.popleft(), now)
        self.version += 1
        return done


class CEEventQueue:
    """The next state changes of many CEs in one heap of (time, seq, CE index, version).

    Call ``reschedule(i)`` after anything changed CE i (a submit); ``run_until(t)`` fires every
    change due by ``t`` in time order. Entries made stale by a later reschedule are skipped.
    """

    def __init__(self, models: Sequence) -> None:
        self.models = models
        self.versions = [0] * len(models)
        self.heap: list[tuple[float, int, int, int]] = []
        self.seq = itertools.count()
        self.fired = 0

    def reschedule(self, i: int) -> None:
        self.versions[i] += 1
        t = self.models[i].next_event_s()
        if t < math.inf:
            heapq.heappush(self.heap, (t, next(self.seq), i, self.versions[i]))

    def run_until(self, t_max: float) -> None:
        """Fire the CEs' events with time <= ``t_max`` (all of them for ``math.inf``)."""
        heap, versions, models = self.heap, self.versions, self.models
        while heap and heap[0][0] <= t_max:
            t, _, i, v = heapq.heappop(heap)
            if v != versions[i]:
                continue
            models[i].fire(t)
            self.fired += 1
            self.reschedule(i)


def make_ce(spec: CESpec, vwns: int | None = None, overhead: float = 0.0,
            startup_s: float = 0.0) -> FcfsLrms | FairShareVwn:
    """A FCFS LRMS CE when ``vwns`` is None, else a fair-share VWN CE with at most ``vwns``."""
    if vwns is None:
        return FcfsLrms(spec)
    return FairShareVwn(spec, vwns, overhead, startup_s)
