"""Haizea 1.1's rules for image staging and VM overheads (``compat = "haizea-1.1"``; issue 16,
the HPDC'08 VM configurations lease for lease).

Found by running Haizea 1.1 (branch ``1.1``) and vgrid on the same Haizea XML trace with the
same images (``lwfwrite.py``; ``benchmarks/haizea_parity.py --trace FILE.xml``) and comparing
their placements; docs/leasing.md, "Haizea-compatible mode", gives each rule's measured effect.
The policies here are called from ``staging.Staging`` and ``compat.reevaluate`` (the rounding of the VM overheads is
``runtime-slowdown-rule = haizea``, ``tracefile.py``); with
``compat = "none"`` nothing here runs and vgrid's schedules are unchanged.

1. Transfer time (:func:`transfer_time`): Haizea's ``estimate_transfer_time`` rounds every
   transfer up to the whole second (``round_datetime_delta``: ``ceil`` of the seconds), so a
   4,096 MB image at 80 Mb/s takes 410 s, not 409.6 s; FIFO transfers back to back drift apart
   by 0.4 s each without it.
2. Re-placing a lease forgets its images (:func:`forget_copies`): ``reevaluate_schedule``
   cancels a re-placed lease's preparation with ``remove_files = True`` (state SCHEDULED or
   READY), so its own copies on its nodes are deleted even when their transfer has finished,
   and the new placement needs a new transfer (at the FIFO tail). A lease suspended before
   (SUSPENDED_SCHEDULED) keeps them. vgrid keeps a private copy that arrived, so the lease
   re-placed on the same nodes needs no transfer. With ``diskimage-reuse = image-caches`` the
   pool's copy stays in both (Haizea only drops the lease's mapping).
3. A lease whose own transfer is under way is not re-placed (:func:`reevaluable`): Haizea
   re-evaluates leases in states READY, SCHEDULED and SUSPENDED_SCHEDULED only, and a lease
   is PREPARING from its transfer's start to its end (``_handle_start_filetransfer``; leases
   riding on another lease's transfer stay SCHEDULED).
4. Resuming with ``migration = yes`` (:func:`migration_ready`): Haizea 1.1 gives *every* node
   (the lease's own too) the earliest start now + the migration estimate, n VMs x (ceil(image
   MB / bw) + ceil(memory MB / bw)) at bw = ``imagetransfer-bandwidth`` / 8 MB/s
   (``ImageTransferPreparationScheduler.estimate_migration_time`` plus
   ``VMScheduler.estimate_migration_time``; ``LeaseScheduler.__schedule_besteffort_lease``),
   and the resumption starts there; the copies themselves (rounds node to node) use only the
   nodes' network, not their CPU or memory. vgrid reserves the new nodes for the migration
   (a MIGRATE reservation before the resumption) and tries the lease's own nodes without one.
   This rule applies with image transfers (``lease-preparation = imagetransfer``), the
   configurations it was measured on; without them Haizea's estimate is the memory part only.
   Placed at that earliest start, it is not a *future* (backfilled) lease: Haizea's
   ``__schedule_asap`` found it at one of the earliest-start changepoints, so no
   re-evaluation moves it; one placed later is re-evaluated like any future lease (Haizea
   re-placed lease 570 of the 3-day VM-MULT + 20 % AR run so at t = 63,250 s, its migration
   under way).
5. Host selection (:class:`GreedyScore`): Haizea 1.1's ``greedy`` host score
   (``GreedyPolicy.get_host_score``) never looks at images; they count only through each
   node's earliest start (a reusable image or a joinable multicast). It is 0.5 x (4 - leases
   on the node at the start, at most 4) / 4 + 0.25 + 0.25 x min(1, time until the node's
   availability next changes / requested duration), on an availability window that holds
   *every* reservation: an image transfer reserves the receiving nodes' network (Net-in),
   so a node about to receive another lease's image comes after an idle one -- but only the
   nodes the transfer was created for: a lease riding on it (``piggyback``) adds its nodes to
   the transfer's list, not to its reserved resources. vgrid's
   ``greedy`` puts nodes whose image is usable first (seed 000 Section 6.3; it also keeps a
   resumed lease on its own nodes) and otherwise takes free nodes by index.
6. The next best-effort transfer (:func:`next_transfer_slot`): Haizea's
   ``__get_next_transfer_slot`` starts it now if it ends before the first scheduled transfer
   starts, else at the end of the first transfer followed by a hole long enough, else after
   the last one -- over the transfers not yet ended, so the slot of a cancelled transfer (a
   re-placed lease's) is reused. vgrid appends every transfer after the latest one ever
   scheduled (``Staging.be_tail``), which a cancellation does not move back.
7. One link (``imagetransfer-link = shared``, the default for Haizea files): Haizea keeps
   AR and best-effort transfers in one list, so a best-effort transfer takes a hole between
   AR transfers too (rule 6 over both).
8. An AR's transfer (:func:`stage_ar`): Haizea's ``__schedule_imagetransfer_edf`` puts it in
   the *latest* hole of that list that ends by the AR's start (``__get_last_transfer_slot``,
   with its quirks: no hole before the first transfer unless the deadline is there too) and
   rejects the AR when that hole starts before now; no other transfer moves. vgrid's EDF
   (seed 000 Algorithm 2) lays every AR transfer that has not started out again by deadline.
   With ``avoid-redundant-transfers`` a best-effort lease may ride on such a transfer of its
   image before it starts, as on any other (Haizea's ``self.transfers`` holds both kinds;
   ``multicastjoin.py`` joins best-effort transfers only in vgrid's own mode).
9. The queue at a transfer's start and end (``LeaseScheduler._start_transfer``,
   ``_end_transfer``): Haizea processes its queue at every time step, and a transfer that
   starts (no longer joinable) or ends (out of the list of rule 6) changes queued leases'
   earliest starts; vgrid passes over the queue only when something it tracks changed.
   A queued lease whose image has a joinable multicast is always tested in full: the bulk
   test of ``queuescan`` assumes it is ready at the FIFO tail (:func:`joinable_images`).
10. Reuse only what has arrived (``Staging._usable``): with ``diskimage-reuse =
   image-caches`` Haizea adds an image to a node's pool when its transfer ends
   (``_handle_end_filetransfer``), so another lease reuses it only from then on; before, it
   may only ride on the transfer while it has not started (rule 8's join). vgrid lets a lease
   count on a copy still on its way (its guaranteed arrival).
11. Earliest starts first (:func:`earliest`): Haizea's ``__schedule_asap`` tries the nodes'
   earliest starts (each with the nodes ready by then) and only when none fits the *future*
   changepoints after the last of them; vgrid's mapper takes the earliest start of all, so
   with reuse it may wait for a busy node that has the image instead of starting after a new
   transfer elsewhere. A lease is a *future* (backfilled) one when the second pass placed it
   (:func:`future_pass`), not whenever it starts after its nodes' ready times.
12. The queue pass stops (:func:`skip_queue`) when no future reservation may be taken and no
   node has any CPU free now (``__process_queue``: "Used up all future reservations and slot
   table is full. Skipping rest of queue."), even though a lease whose images arrive later
   could be placed then without a future reservation; vgrid tries every lease. Applied with
   image transfers (without them a lease that is not future starts now, so nothing changes).
13. Pools make room when an image arrives (``compat_pools.py``, ``diskimage-reuse =
   image-caches``): Haizea's ``_add_diskimages`` purges the oldest unused image (smallest
   ``timeout``) of a full pool at the arrival, or caches nothing; vgrid flags victims when it
   plans the transfer, so they cannot be reused meanwhile.
14. Equal host scores (:meth:`GreedyScore.order_by`, ``compat_order.py``): Haizea's stable sort
   keeps the iteration order of the Python 2.7 set of the nodes ready by the start, which is
   not ascending for a subset of high node ids (reuse: the nodes holding the image).
15. Nodes in score order (``GreedyScore.score_order``, read by ``Mapper.earliest``): Haizea's
   ``GreedyMapper`` with suspension allowed takes the best-scored nodes even when one is free
   for less than the full duration (the lease then ends early, suspended); vgrid prefers nodes
   free for the whole duration when there are enough. Rule 23 extends it to every free node.
16. A lease preempted while its own image is on its way (:func:`cancel_transfers`): Haizea's
   ``__preempt_lease`` cancels and requeues it (``cancel_preparation`` removes the transfer
   under way when nobody else rides on it); vgrid treated the started transfer like a
   resumption under way and refused to preempt, so the AR was rejected.
17. The migration's time steps (:func:`migration_rounds`): with rule 4 Haizea still puts the
   migration's image and memory rounds in its slot table (they end well before its estimate),
   and its clock stops at their starts and ends, so the queue is processed there (3 days of
   VM-MULT: lease 1156's resumption placed at t = 242,531 s, the end of lease 1177's image
   round, where vgrid waited for the next event, 39 s later).
18. The migration rounds in the host score (:func:`vnode_pairs`, :func:`haizea_rounds`,
   :meth:`GreedyScore.vnodes`): Haizea moves virtual node i from the node it ran on to the
   i-th node of the mapper's order and puts a pair in a round when neither node is in it yet;
   each round reserves its nodes' network, so it counts as a lease there and ends their
   unchanged availability in the greedy score (3 days of VM-MULT + 20 % ARs: lease 1117 at
   t = 223,582 s, beside lease 640's rounds). vgrid keeps mappings in node order and had
   paired the nodes that change in index order, scoring no round.
19. An arrival is a time step (``LeaseScheduler.submit``) and 20. one queue pass per step
   (``LeaseScheduler.process``): see docs/leasing.md. 25. Every time step, also one where only
   a VM or a resumption starts, has that pass (``LeaseScheduler.process``).
21. An AR reuses a pool image only if the image's ``timeout`` is at least the AR's start
   (``Staging.stage_ar``): Haizea's ``__schedule_deadline`` asks
   ``exists_reusable_image(pnode, image, after = start)``, which skips images whose timeout
   (the latest end of their users, ``compat_pools.py``) is earlier, and transfers the image
   to that node again; vgrid pinned any arrived copy (3 days of VM-REUSE + 30 % ARs: AR 8734
   pinned image_29 on node 18, whose timeout was 16,573 s, so Haizea purged it at 62,708 s
   and vgrid another image, and lease 584's nodes differed at 64,817 s).
22. A migration unpins the pool images it leaves (:func:`migration_rounds`' ``origins``,
   ``compat.copy_step``, which calls ``ImagePools.lease_ended`` for those nodes): at the end of each disk-image round Haizea's
   ``_handle_end_migrate`` removes the lease's virtual nodes from the pool images of the nodes
   they left (``remove_diskimage(origin, ...)``), so those images become unused and may be
   purged; vgrid kept them pinned until the lease ended (same run: lease 525, migrated away
   from nodes 17-34 at 50,711-51,121 s, kept image_19 pinned there in vgrid only).
23. A start whose best nodes are too short (``compat_mapper.greedy_start``, for a lease that may be
   suspended): Haizea's ``GreedyMapper`` walks every node free at the start in score order,
   even one free for less than the minimum duration, and shrinks the mapping's end to the
   shortest (``latest_fit``); ``__find_fit_at_points`` then rejects the start and tries the
   next changepoint. vgrid offered only slots free for the minimum duration (3 days of
   VM-REUSE + 30 % ARs: lease 1087's resumption at t = 205,797 s took nodes 123-126 at once;
   Haizea's mapper took 49-50, free until 206,015 s, failed, and placed it 220 s later).
24. A migration starts where the images are (:func:`image_nodes`, :func:`copied`): Haizea's
   ``schedule_migration`` pairs each virtual node's *current* disk (memory) image node, which
   each round's ``_handle_end_migrate`` moved, with its new node, and copies only the virtual
   nodes whose image is elsewhere; vgrid paired from the last segment's nodes every time, so a
   lease re-placed after its migration ended (``reevaluate``) got its rounds again (3 days of
   VM-MULT + 20 % ARs: lease 640's six rounds at t = 244,436 s changed the host score of nodes
   50-51 at 245,599 s, so lease 1159 resumed on 140-141 and was suspended once more).
26. An AR that cancels a lease before its start deletes its images (``compat.preempt``, via
   :func:`forget_copies`): Haizea's ``__preempt_lease`` calls ``cancel_preparation(lease)`` with
   ``remove_files`` true unless the lease is suspended, so the lease queued again needs a new
   transfer; rule 2 did it for ``reevaluate`` only (15 days of VM-MULT + 30 % ARs: AR 8776 at t =
   423,457 s cancelled lease 638, whose new transfer put lease 2096's 410 s later in Haizea).
"""
from __future__ import annotations

import math

from .compat_order import haizea_node_order
from .config import haizea
from .mapper import StartScore
from .model import MEM, resource_vector
from .slottable import INF
from .slottable import Reservation, ResKind, ResState


def transfer_time(mb: float, mb_per_s: float) -> float:
    """Seconds to send ``mb`` MB at ``mb_per_s`` MB/s in Haizea 1.1, rounded up to the whole
    second (``haizea.common.utils.estimate_transfer_time``); vgrid's own mode uses mb / mb_per_s."""
    return float(math.ceil(mb / mb_per_s))


def reevaluable(sched, lease) -> bool:
    """False when ``lease`` owns an image transfer that has started and not ended (Haizea's
    PREPARING: ``reevaluate_schedule`` leaves it alone); True otherwise."""
    return not any(r.kind is ResKind.TRANSFER and r.state is ResState.ACTIVE and r.lease is lease
                   for r in sched.st.of_lease(lease))


def forget_copies(sched, lease, now: float) -> None:
    """After ``reevaluate`` (rule 2) or an AR's preemption (rule 26) unscheduled ``lease`` at
    ``now`` (s): delete its private image copies (no reuse), unless it has run before (a
    suspended lease keeps its disk images)."""
    if lease.time_run > 0 or not sched.staging.enabled:
        return
    sched.staging.pools.drop_private(lease.image_id, lease.id, now)


def cancel_transfers(sched, lease) -> None:
    """Rule 16: a lease preempted (cancelled and queued again) while its own image transfer
    is under way leaves it, and a transfer nobody else rides on is cancelled: Haizea's
    ``__remove_transfers`` drops the lease from every transfer in its list, started or not
    (``cancel_preparation``), and removes the emptied ones from the slot table. vgrid's
    ``unschedule`` leaves a started transfer alone. Inside the caller's transaction."""
    stg = sched.staging
    if not stg.enabled:
        return
    for res in list(sched.st.of_lease(lease)):
        if res.kind is not ResKind.TRANSFER or res.state is not ResState.ACTIVE:
            continue
        others = [u for u in res.users if u != lease.id]
        if others:
            sched.st.set(res, "users", others)
            continue
        sched.st.remove(res)
        stg.pools.forget_transfer(res)
        if stg.pending is not None:
            stg.pending.changed(res.image_id)


def haizea_migration(sched, resuming: bool) -> bool:
    """Whether rule 4 places this resumption (compat mode, ``migration = yes``, image transfers)."""
    cfg = sched.cfg
    return resuming and cfg.migration == "yes" and sched.staging.enabled and haizea(cfg)


def migration_ready(lease, cfg, now: float) -> float:
    """Haizea 1.1's earliest start (s) of a resumption that may migrate, on every node."""
    bw = cfg.imagetransfer_bandwidth / 8.0
    per_vm = math.ceil(lease.image_mb / bw) + math.ceil(lease.per_vm[MEM] / bw)
    return now + lease.n_vms * per_vm


def migration_rounds(lease, mapping: tuple, cfg, now: float, vnodes: tuple = ()) -> list:
    """Rule 17: Haizea 1.1's migration reservations of a resumption placed by rule 4 on
    ``mapping`` at ``now`` (s), as time steps only (``ResKind.COPY``, no resources): the disk
    image rounds, then the memory rounds, back to back from ``now``
    (``ImageTransferPreparationScheduler.schedule_migration``, then
    ``VMScheduler.schedule_migration``), each ceil(MB / bw) s, bw = ``imagetransfer-bandwidth``
    / 8 MB/s. Haizea's clock stops at each of their starts and ends and processes its queue
    there; vgrid passes over the queue at those times too (``compat.copy_step``).
    Rule 18: the rounds are Haizea's (:func:`haizea_rounds` of :func:`vnode_pairs`, ``vnodes``:
    the new nodes per virtual node in the mapper's order), and each COPY carries in ``dest`` the
    nodes whose network it reserves, which :class:`GreedyScore` counts. Rule 22: a disk-image
    round carries in ``origins`` the nodes it moves the lease's images away from (no virtual
    node of the lease stays there), whose pool images the lease stops pinning at the round's
    end (``compat.copy_step``). Rule 24: the copies start where the images are now
    (:func:`image_nodes`: rounds that ended moved them), each kind on its own, and only the
    virtual nodes whose image is elsewhere are copied. Empty when none is."""
    disk_at, memory_at = image_nodes(lease)
    out, t = [], now
    bw = cfg.imagetransfer_bandwidth / 8.0
    for link, old, mb in (("disk", disk_at, lease.image_mb), ("memory", memory_at, lease.per_vm[MEM])):
        pairs = vnode_pairs(lease, mapping, vnodes, old)
        staying = {a for a, b in pairs if a == b}
        dur = math.ceil(mb / bw)
        for moves in haizea_rounds(pairs):
            nodes = tuple(sorted({n for _, a, b in moves for n in (a, b)}))
            origins = tuple(sorted({a for _, a, _ in moves} - staying)) if link == "disk" else ()
            out.append(Reservation(ResKind.COPY, lease, t, t + dur, mapping=mapping, dest=nodes,
                                   origins=origins, link=link, moves=tuple(moves)))
            t += dur
    return out


def image_nodes(lease) -> tuple:
    """Rule 24: (disk, memory) node per virtual node of a suspended ``lease``'s images: those
    of its last segment (Haizea's ``last_vmrr.nodes``), moved by the migration rounds that
    ended since (``Lease.migrated``; Haizea's ``get_disk_image_mappings`` and
    ``get_ram_image_mappings``, which ``_handle_end_migrate`` updates)."""
    moved = lease.migrated
    if moved and moved[0] == len(lease.segments):
        return moved[1], moved[2]
    last = lease.segments[-1] if lease.segments else None
    old = tuple((last.vnodes or last.nodes) if last is not None else lease.mapping)
    return old, old


def copied(st, lease, res) -> None:
    """Rule 24: the end of migration round ``res`` (a COPY of ``lease``) moved its virtual
    nodes' disk or memory images to their destinations (``_handle_end_migrate``)."""
    disk, memory = (list(x) for x in image_nodes(lease))
    at = disk if res.link == "disk" else memory
    for vnode, _origin, dest in res.moves:
        if vnode < len(at):
            at[vnode] = dest
    st.set(lease, "migrated", (len(lease.segments), tuple(disk), tuple(memory)))


def vnode_pairs(lease, mapping: tuple, vnodes: tuple, old: tuple) -> list:
    """Rule 18: (origin, destination) node per virtual node of a migration to ``mapping``:
    virtual node i moves from ``old[i]`` (its disk or memory image's node, :func:`image_nodes`)
    to ``vnodes[i]``, the i-th node of the mapper's order (``GreedyMapper.map`` gives the
    best-scored node the first virtual node). Without a recorded order (a lease placed in
    vgrid's own mode) the nodes in index order."""
    new = vnodes if vnodes and sorted(vnodes) == sorted(mapping) else mapping
    if len(old) != len(new):
        return list(zip(sorted(lease.mapping), sorted(mapping)))
    return list(zip(old, new))


def haizea_rounds(pairs: list) -> list:
    """Haizea 1.1's migration rounds (``schedule_migration``) of ``pairs`` (origin,
    destination per virtual node): the virtual nodes whose image is elsewhere, in virtual node
    order; one joins the current round when neither of its nodes is in it yet, so a node sends
    or receives one copy per round. Returns the rounds, each a list of (virtual node, origin,
    destination); none when no virtual node moves."""
    rounds, left = [], [(i, a, b) for i, (a, b) in enumerate(pairs) if a != b]
    while left:
        used, this, rest = set(), [], []
        for i, a, b in left:
            if a in used or b in used:
                rest.append((i, a, b))
            else:
                used.update((a, b))
                this.append((i, a, b))
        rounds.append(this)
        left = rest
    return rounds


def _transfers(st, links, now: float) -> list:
    """(start, end) s of the image transfers on ``links`` not yet ended at ``now``, sorted:
    Haizea's one list of transfers (rules 6-8)."""
    return sorted((r.start, r.end) for r in st.reservations()
                  if r.kind is ResKind.TRANSFER and r.link in links and r.end > now)


def next_transfer_slot(st, now: float, dur: float, links=("be",)) -> float:
    """Start (s) of a new best-effort transfer of ``dur`` s at ``now`` (rule 6), among the
    transfers on ``links`` (the AR ones too on a shared link, as Haizea's one list)."""
    busy = _transfers(st, links, now)
    if not busy or now + dur <= busy[0][0]:
        return now
    for (_s0, e0), (s1, _e1) in zip(busy, busy[1:]):
        if e0 != s1 and s1 - e0 >= dur:
            return e0
    return busy[-1][1]


class GreedyScore(StartScore):
    """Haizea 1.1's greedy host score for a best-effort lease (rule 5), with transfers.

    ``at(s)`` gives ``score(node, hostable) -> (score,)`` for a start at ``s`` (s), which the
    mapper calls once it knows the start (``Mapper.earliest``); called directly, the object
    scores at ``t_start``. The leases on a node are those of its reservations (``use``), of
    the image transfers it receives (``dest``) for the lease that created them, and of the
    migration rounds it sends or receives in (``COPY``, rule 18)."""

    horizon = 4
    score_order = True   # rule 15: the mapper takes nodes in score order, even short ones

    def __init__(self, st, lease, t_start: float) -> None:
        self.st, self.lease, self.t_start = st, lease, t_start
        self._memo: dict = {}
        self._ready = None

    def order_by(self, ready) -> None:
        """Rule 14: equal scores in Haizea's set order of the nodes ready by the start
        (``ready``: per-node earliest starts, s, of ``__schedule_asap``'s first pass), or by
        node index (None: the future pass, where Haizea passes no node set)."""
        if ready is not self._ready:
            self._ready = ready
            self._memo = {}

    def at(self, s: float):
        hit = self._memo.get(s)
        if hit is not None:
            return hit
        into: dict = {}
        for r in self.st.reservations():
            if r.kind is ResKind.TRANSFER and r.end > s and r.end > r.start:
                own = set(r.lease.mapping) if r.lease is not None else set(r.dest)
                for node in own.intersection(r.dest):   # joined nodes reserve nothing
                    into.setdefault(node, []).append(r)
            elif r.kind is ResKind.COPY and r.end > s and r.end > r.start:   # rule 18
                for node in r.dest:
                    into.setdefault(node, []).append(r)
        scores: dict = {}
        requested = self.lease.duration_s
        pos = None
        if self._ready is not None:
            ready = self._ready
            pos = haizea_node_order(sorted((n for n in range(len(ready)) if ready[n] <= s),
                                           key=lambda n: (ready[n], n)))

        def score(node: int, hostable: int) -> tuple:
            got = scores.get(node)
            if got is None:
                got = (self._score(node, s, into.get(node, ()), requested),)
                got = scores[node] = got if pos is None else got + (-pos.get(node, node),)
            return got
        self._memo = {s: score}
        return score

    def _score(self, node: int, s: float, transfers, requested: float) -> float:
        res = [r for r in self.st.on_node(node) if r.end > r.start and r.end > s] + list(transfers)

        def state(t):
            on = [r for r in res if r.start <= t < r.end]
            use = tuple(sum(r.use.get(node, (0, 0, 0, 0))[i] for r in on) for i in range(4))
            net = frozenset(id(r) for r in on if r.kind is ResKind.TRANSFER or r.kind is ResKind.COPY)
            return use, net, frozenset(id(r.lease) for r in on)
        now = state(s)
        k = min(len(now[2]), self.horizon)
        dur = None
        for b in sorted({x for r in res for x in (r.start, r.end) if x > s}):
            if state(b) != now:
                dur = b - s
                break
        d_score = 1.0 if dur is None or dur >= requested else dur / requested
        return 0.5 * (self.horizon - k) / self.horizon + 0.25 + 0.25 * d_score

    def __call__(self, node: int, hostable: int) -> tuple:
        return self.at(self.t_start)(node, hostable)

    def vnodes(self, s: float, mapping: tuple) -> tuple:
        """Rule 18: the nodes of ``mapping`` (chosen for a start at ``s``, s) in the mapper's
        order -- best score first, as ``Mapper._pick`` sorted them --, i.e. the node of each
        virtual node in Haizea's ``GreedyMapper``."""
        score = self.at(s)
        return tuple(sorted(mapping, key=lambda n: (tuple(-x for x in score(n, 1)), n)))


def last_transfer_slot(st, deadline: float, dur: float, links, now: float) -> float | None:
    """Haizea's ``__get_last_transfer_slot``: the start (s) of a ``dur`` s transfer ending by
    ``deadline`` in the latest hole among the transfers on ``links`` not yet ended at ``now``;
    None when there is none."""
    busy = _transfers(st, links, now)
    if not busy or busy[-1][1] + dur <= deadline:
        return deadline - dur
    for i in range(len(busy) - 1, 0, -1):
        hole_start, hole_end = busy[i - 1][1], busy[i][0]
        inside = hole_start < deadline <= hole_end
        length = deadline - hole_start if inside else hole_end - hole_start
        if length < dur or hole_start >= deadline:
            continue
        return deadline - dur if inside else hole_end - dur
    return deadline - dur if deadline <= busy[0][0] else None


def stage_ar(stg, lease, groups: list, deadline: float, t_e: float, now: float) -> bool:
    """Rule 8: one transfer per group of nodes (multicast: one), each in the latest hole
    before ``deadline`` (s); False (the caller rolls back) when one would start before now or
    a pool has no room."""
    links = ("be", "ar") if stg.shared else ("ar",)
    dur = stg.transfer_time(lease.image_mb, "ar")
    for dest in groups:
        start = last_transfer_slot(stg.st, deadline, dur, links, now)
        if start is None or start < now:
            return False
        res = stg._new_transfer(lease, "ar", start, dest, deadline)
        if stg.join:   # best-effort leases may ride on it (find_earliest_starting_times)
            stg.pending.register(res, now)
        for node in dest:
            if stg.pools.add(node, lease.image_id, lease.image_mb, res, lease.id, t_e, deadline) is None:
                return False
    return True


def joinable_images(stg, now: float) -> frozenset:
    """Compat mode with ``multicast-join``: the images with a transfer a lease may join at
    ``now`` (s); empty otherwise (vgrid's own mode keeps its bulk test as it was)."""
    if not stg._haizea or not stg.join:
        return frozenset()
    return frozenset(img for img in stg.pending.images() if stg.pending.best(img, now) is not None)


def earliest(sched, need, n: int, base: float, now: float, min_dur, ready, allow_future: bool, score):
    """``Mapper.earliest`` for a best-effort placement with per-node ready times (s); in compat
    mode with a future reservation allowed, rule 11's two passes."""
    mapper = sched.mapper
    sched.haizea_future_pass = False
    if ready is not None and isinstance(score, StartScore):   # GreedyScore: compat mode only
        score.order_by(ready)
    if ready is None or not allow_future or not haizea(sched.cfg):
        return mapper.earliest(need, n, base, now, min_dur, ready, None, allow_future, score)
    found = mapper.earliest(need, n, base, now, min_dur, ready, None, False, score)
    if found is not None:
        return found
    if isinstance(score, StartScore):
        score.order_by(None)
    sched.haizea_future_pass = True
    last = max((t for t in ready if t < INF), default=now)
    return mapper.earliest(need, n, base, max(now, last), min_dur, ready, None, True, score)


def future_pass(sched, own: bool) -> bool:
    """Whether the best-effort placement just made is a future one: rule 11's second pass in
    compat mode, ``own`` (vgrid's test: it starts after its nodes are ready) otherwise."""
    return sched.haizea_future_pass if haizea(sched.cfg) else own


_ONE_CPU_UNIT = resource_vector(cpu=1)


def skip_queue(sched, now: float) -> bool:
    """Rule 12: compat mode with image transfers and no CPU free on any node at ``now`` (s)."""
    if not haizea(sched.cfg) or not sched.staging.enabled:
        return False
    return sched.mapper.count_now(_ONE_CPU_UNIT, now, 0.0) == 0
