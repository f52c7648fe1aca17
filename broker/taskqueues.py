"""Task queues: Waiting jobs grouped by matching signature, each class matched once per snapshot.

The idea is DIRAC's task queues (issue 12): jobs whose match reads the same inputs get the
same candidate CEs, so the filtering phase (Requirements + VO rule, Rank values, C_j and
published jobs) runs once per class and ISM snapshot; per job only the selection phase runs:

- SFETE: the class keeps its candidates in buckets of equal score with a heap of the scores
  (:class:`broker.sfete_order.SfeteOrder`, session 7); before each choice it re-reads the
  feedback counters of the candidates tied at the least score only (counters only grow between
  refreshes, so a stored score is a lower bound) and moves the stale ones to their new bucket,
  so a choice costs O(ties + moved candidates x log scores), not O(CEs). Ties are the least
  bucket, in ISM order; a reset of the counters re-reads every counter.
- Max Rank: the tied best candidates are computed once (Rank does not change with N_j).
- Fuzzy Rank: the cumulative weights are computed once; one draw per job.

Every choice consumes the matchmaker's ``random.Random`` exactly as
:meth:`broker.matchmaker.Matchmaker.select` does on :meth:`~Matchmaker.match`'s candidates,
so for the same seed the chosen CEs are the same as the per-job matcher's
(``tests/test_taskqueues.py`` checks it with hypothesis). Jobs whose match may change with
the clock (``time()``) or with the dispatch counters (``VGridDispatchedSinceRefresh`` in the
JDL) take the per-job path.

The signature (:func:`signature`): Requirements and Rank and every job attribute they name
(as expression trees compared structurally, i.e. by their canonical jdl-printer text) (transitively; the whole record when they use ``eval``
or a subscript), the evaluated FeteRank / FuzzyRank, the owner's VO and FQANs (or the JDL's
VirtualOrganisation when there is no owner), and the excluded CEs.

Class ids (session 5): the JDL part of the signature is named by :func:`class_id` (a hash of
its canonical text, or :data:`PER_JOB`), computed **at submission** and stored with the job
(``jobs.match_class``, with its ``InputSandbox`` in ``jobs.input_sandbox``:
:func:`match_fields`), as DIRAC assigns a task queue when a job is inserted. The matcher then
parses only the first job of each class it meets (:attr:`TaskQueues.representatives`) and
passes the stored id to :meth:`TaskQueues.choose` (``klass``); rows stored before the column
existed get their id computed once from their JDL (and written back by the matcher).
"""
from __future__ import annotations

import hashlib
import json
import math
import threading
from itertools import accumulate
from typing import Any, Mapping, Sequence

import jdl as jdlmod
from infosys.ism import DISPATCHED
from jdl import nodes as jn
from jdl.nodes import unparse

from .class_filter import RANK_LATER
from .matchmaker import CE_ID, Matchmaker
from .sfete_order import SfeteOrder
from .selection import (Candidate, FuzzyRankSelection, MaxRankSelection, SfeteSelection,
                        ad_value, sfete_score)

#: Signatures of at most this many JDL texts are remembered (then the memo restarts).
MAX_TEXTS = 4096
#: At most this many classes, holding at most MAX_ROWS candidates together, are kept per
#: snapshot (then they restart: memory stays bounded when every job is its own class).
MAX_CLASSES = 4096
MAX_ROWS = 1_000_000


def _names(expr: jn.Node) -> tuple[set[str], bool]:
    """Lower-case attribute names an expression mentions, and whether it reads attributes in a
    way names cannot tell (``eval(...)``, ``x[...]``)."""
    names: set[str] = set()
    wide = False
    stack = [expr]
    while stack:
        x = stack.pop()
        if isinstance(x, (jn.AttrRef, jn.Select)):
            names.add(x.lname)
        elif isinstance(x, jn.Subscript) or (isinstance(x, jn.Call) and x.lname == "eval"):
            wide = True
        stack.extend(x.children())
    return names, wide


def text_signature(desc: "jdlmod.JobDescription", text: str | None = None) -> tuple | None:
    """The part of a job's signature that depends on its JDL only, or None when the job must
    be matched on its own (its match reads the clock or the dispatch counters).

    Shape: ``(body, fete_rank, fuzzy_rank, virtual_organisation)`` where ``body`` is a sorted
    tuple of ``(attribute, expression node or None)`` for Requirements, Rank and what they name
    (nodes hash and compare structurally, positions ignored: equal iff their canonical texts
    are), or the canonical text of the whole record. ``text``: the JDL text the job is stored
    with (default ``desc.text``; an expanded node's description may carry its parent's)."""
    low = (desc.text if text is None else text).lower()
    if "time(" in low or DISPATCHED.lower() in low:
        return None
    attrs = desc.record.attrs
    seen: dict[str, jn.Node | None] = {}
    need = ["requirements", "rank"]
    wide = False
    while need and not wide:
        name = need.pop()
        if name in seen:
            continue
        d = attrs.get(name)
        seen[name] = None if d is None else d.expr   # hashed and compared structurally
        if d is not None:
            more, wide = _names(d.expr)
            need.extend(more)
    body: Any = jdlmod.record_text(desc.record) if wide else tuple(sorted(seen.items()))
    return (body, desc.fete_rank, desc.fuzzy_rank, desc.virtual_organisation)


#: The class id of a job matched on its own (its match reads the clock or dispatch counters).
PER_JOB = ""


def class_id(desc: "jdlmod.JobDescription", text: str | None = None) -> str:
    """The stored name of a job's class: 32 hex digits of SHA-256 over the canonical text of
    :func:`text_signature` (equal ids <=> equal signatures, short of a hash collision), or
    :data:`PER_JOB`. ``text`` as for :func:`text_signature`."""
    part = text_signature(desc, text)
    if part is None:
        return PER_JOB
    body, fete, fuzzy, vo = part
    canon = body if isinstance(body, str) else [[name, None if node is None else unparse(node)]
                                                for name, node in body]
    raw = json.dumps([canon, fete, fuzzy, vo], separators=(",", ":"), default=repr)
    return hashlib.sha256(raw.encode()).hexdigest()[:32]


def match_fields(desc: "jdlmod.JobDescription", text: str) -> dict[str, Any]:
    """What the submission stores for the matcher (keys of a ``create_many`` spec):
    ``match_class`` (:func:`class_id`) and ``input_sandbox`` (the JDL's names, a list)."""
    return {"match_class": class_id(desc, text), "input_sandbox": list(desc.input_sandbox)}


def class_aware(chooser) -> bool:
    """Whether ``chooser.choose`` takes a stored class id (``klass``) and any job of the class
    as ``desc``: a :class:`TaskQueues`, or a wrapper whose **class** defines
    ``class_aware(self)`` (looked up on the type, so a wrapper forwarding unknown attributes,
    like the federated chooser that reads other JDL attributes, is not mistaken for one)."""
    method = getattr(type(chooser), "class_aware", None)
    return bool(method(chooser)) if callable(method) else False


def signature(desc, vo: str | None, fqans: Sequence[str], exclude) -> tuple | None:
    """The matching signature of one job (None: match it on its own); see the module doc."""
    part = text_signature(desc)
    if part is None:
        return None
    return part + (vo, tuple(fqans) if vo is not None else None, frozenset(exclude))


class TaskQueue:
    """One class on one snapshot: its candidates (ISM order) and the selection state.

    ``rows``: ``(key, ad, rank, published jobs, C_j)`` per candidate, ``key`` being the
    feedback counter's key (CE id or CE/VO view key), ``rank`` :data:`RANK_LATER` when not
    evaluated yet (SFETE ignores it: ``rank_of(ad)`` gives the chosen candidate's);
    ``policy``: the class's policy object; ``order``: the SFETE order of these candidates
    (shared with the classes that have the same candidates), else a new one."""

    __slots__ = ("keys", "ads", "ranks", "published", "capacities", "policy", "rank_of",
                 "order", "ties", "cum", "jobs")

    def __init__(self, rows: list[tuple], policy, rank_of=None, order: SfeteOrder | None = None) -> None:
        self.keys = [r[0] for r in rows]
        self.ads = [r[1] for r in rows]
        self.ranks = [r[2] for r in rows]
        self.published = [r[3] for r in rows]
        self.capacities = [r[4] for r in rows]
        self.policy = policy
        self.rank_of = rank_of
        if order is None and isinstance(policy, SfeteSelection):
            order = SfeteOrder(self.keys, self.published, self.capacities)
        self.order = order
        self.ties: list[int] | None = None
        self.cum: list[float] | None = None
        self.jobs = 0   # choices made from this class (reported by benchmarks)
        if isinstance(policy, MaxRankSelection):
            scores = [r if r is not None else -math.inf for r in self.ranks]
            if scores:
                best = max(scores)
                self.ties = [i for i, s in enumerate(scores) if s == best]
        elif isinstance(policy, FuzzyRankSelection) and rows:
            weights = policy.scores([Candidate(k, {}, r, 0, 1.0) for k, r in zip(self.keys, self.ranks)])
            self.cum = list(accumulate(weights)) if sum(weights) > 0 else []

    def choose(self, feedback, rng) -> Candidate | None:
        """The chosen candidate for the next job of this class (None: no candidate)."""
        n = len(self.keys)
        if n == 0:
            return None
        self.jobs += 1
        if isinstance(self.policy, SfeteSelection):
            ties = self.order.best(feedback)
            pos = ties[0] if len(ties) == 1 else rng.choice(ties)
        elif self.ties is not None:
            pos = self.ties[0] if len(self.ties) == 1 else rng.choice(self.ties)
        elif self.cum is not None:
            pos = rng.choices(range(n), cum_weights=self.cum, k=1)[0] if self.cum \
                else rng.randrange(n)
        else:   # another policy: the generic path
            cands = self.candidates(feedback)
            return self.policy.select(cands, rng)
        return self._candidate(pos, feedback.get(self.keys[pos]))

    def candidates(self, feedback) -> list[Candidate]:
        return [self._candidate(i, feedback.get(k)) for i, k in enumerate(self.keys)]

    def _candidate(self, i: int, count: int) -> Candidate:
        c, rank = self.capacities[i], self.ranks[i]
        if rank is RANK_LATER:
            rank = self.ranks[i] = self.rank_of(self.ads[i])
        return Candidate(self.keys[i], self.ads[i], rank, self.published[i] + count, c,
                         sfete_score(self.published[i], count, c))


class TaskQueues:
    """Class-based matching over a :class:`~broker.matchmaker.Matchmaker` (its feedback
    counters, policies and ``random.Random``). Thread-safe.

    ``choose(desc, ads, ...)`` answers what ``matchmaker.select(matchmaker.match(desc, ads,
    ...))`` answers for the same seed and the same history of choices, at the cost of a
    selection per job once the job's class has been matched on ``ads``.

    ``representatives``: class id -> a parsed JobDescription of that class (the matcher parses
    only the first job of a class it meets; at most MAX_TEXTS, then it restarts)."""

    def class_aware(self) -> bool:
        """``choose`` takes ``klass`` (see :func:`class_aware`)."""
        return True

    def __init__(self, matchmaker: Matchmaker) -> None:
        self.matchmaker = matchmaker
        self._lock = threading.Lock()
        self._snapshot: tuple | None = None
        self._queues: dict[tuple, TaskQueue] = {}
        self._rows = 0      # candidates held by the classes of this snapshot
        #: SFETE orders shared by the classes with the same candidates (feedback key,
        #: published jobs, C_j in ISM order) on this snapshot: one move per dispatch, not one per class
        self._orders: dict[tuple, SfeteOrder] = {}
        self._texts: dict[str, str] = {}
        self.representatives: dict[str, "jdlmod.JobDescription"] = {}
        self.matched = 0    # classes matched (filtering runs) since creation
        self.per_job = 0    # jobs that took the per-job path

    def __len__(self) -> int:
        return len(self._queues)

    def class_of(self, desc) -> str:
        """:func:`class_id` of ``desc``, remembered per JDL text (at most MAX_TEXTS)."""
        texts = self._texts
        klass = texts.get(desc.text)
        if klass is None:
            if len(texts) >= MAX_TEXTS:
                texts.clear()
            klass = texts[desc.text] = class_id(desc)
        return klass

    def representative(self, klass: str | None):
        """A parsed job of class ``klass`` seen before, or None."""
        return self.representatives.get(klass) if klass else None

    def remember(self, klass: str, desc) -> None:
        """Keep ``desc`` as the representative of ``klass`` (not for PER_JOB)."""
        if klass:
            if len(self.representatives) >= MAX_TEXTS and klass not in self.representatives:
                self.representatives.clear()
            self.representatives[klass] = desc

    def choose(self, desc: "jdlmod.JobDescription", ads: Sequence[Mapping[str, Any]],
               blacklist: frozenset[str] = frozenset(), *, now: float, vo: str | None = None,
               fqans: Sequence[str] = (), exclude=frozenset(), klass: str | None = None) -> Candidate | None:
        """The CE chosen for one job (a Candidate), or None when no CE matches.

        Arguments as :meth:`Matchmaker.match` (``ads``: one ISM snapshot's ads, not mutated
        while in use; ``now``: the clock's seconds). ``klass``: the job's stored class id
        (:func:`class_id`; ``desc`` may then be any job of that class, e.g. its
        representative), None to compute it from ``desc``. The caller increments the chosen
        CE's feedback counter (``feedback.increment(chosen.ce_id)``) before the next choice,
        as with the per-job matcher. Raises nothing for bad ads (skipped)."""
        mm = self.matchmaker
        with self._lock:
            if klass is None:
                klass = self.class_of(desc)
            if klass == PER_JOB:
                self.per_job += 1
                return mm.select(mm.match(desc, ads, blacklist, now=now, vo=vo,
                                          fqans=tuple(fqans), exclude=exclude))
            key = (klass, vo, tuple(fqans) if vo is not None else None, frozenset(exclude))
            if self._snapshot is None or self._snapshot[0] is not ads or self._snapshot[1] != blacklist:
                self._snapshot, self._queues, self._rows = (ads, blacklist), {}, 0
                self._orders = {}
            queue = self._queues.get(key)
            if queue is None:
                policy = mm.policy_for(desc)
                sfete = isinstance(policy, SfeteSelection)   # Rank only for the chosen CEs
                rows = mm.filtered(desc, ads, blacklist, now=now, vo=vo, fqans=tuple(fqans),
                                   ranks=not sfete)
                if exclude:
                    rows = [r for r in rows if ad_value(r[1], CE_ID) not in exclude]
                if len(self._queues) >= MAX_CLASSES or self._rows + len(rows) > MAX_ROWS:
                    self._queues, self._rows, self._orders = {}, 0, {}
                self._rows += len(rows)
                same = tuple((r[0], r[3], r[4]) for r in rows) if sfete else None
                queue = self._queues[key] = TaskQueue(
                    rows, policy, (lambda ad, d=desc: jdlmod.rank_value(d, ad, now)) if sfete else None,
                    self._orders.get(same))
                if sfete:                       # a new order (TaskQueue made it) is shared from now on
                    self._orders.setdefault(same, queue.order)
                self.matched += 1
            return queue.choose(mm.feedback, mm.rng)
