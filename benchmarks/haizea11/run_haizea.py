"""Run Haizea 1.1 in simulated time on CONF and write the parity CSV (vgrid parity.py format).

    HAIZEA_SRC=/path/to/haizea-1.1/src python2.7 run_haizea.py CONF OUT.csv

Our measurement driver (issue 16, session 10), not part of vgrid: Haizea 1.1 itself is never
vendored; extract it outside the repository (benchmarks/haizea11/README.md). Writes OUT.csv (one
line per completed lease, first line Haizea's wall and CPU s) and OUT.place.csv (every
``__schedule_lease`` call: decision time, lease, its last VM reservation's start, end, nodes).
While it runs, each call is also appended to OUT.live (one ``time|lease|start|end|nodes`` line,
flushed), so a run's progress and a partial record can be read before it ends (session 13).
Runs under CPython 2.7 or PyPy 2.7 (README.md, step 2).
"""
import os
import sys
import time

sys.path[0:0] = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "stub"),
                 os.environ.get("HAIZEA_SRC") or sys.exit("run_haizea.py: set HAIZEA_SRC to Haizea 1.1's src directory")]

from haizea.core.configfile import HaizeaConfig
from haizea.core.manager import Manager
from haizea.core.leases import Lease


class _LivePlace(list):
    """The record of ``__schedule_lease`` calls, each also written to a file as it happens."""

    def __init__(self):
        list.__init__(self)
        self.f = None

    def append(self, x):
        list.append(self, x)
        if self.f is not None:
            self.f.write("%r|%d|%r|%r|%r\n" % x)


PLACE = _LivePlace()


def _wrap_schedule():
    """Record each __schedule_lease call: clock time, lease id, its last VM reservation (start,
    end, 0-based nodes in vnode order) or the exception's class name."""
    from haizea.core.scheduler.lease_scheduler import LeaseScheduler
    from haizea.common.utils import get_clock
    orig = LeaseScheduler._LeaseScheduler__schedule_lease

    def wrapped(self, lease, nexttime):
        now = get_clock().get_time()
        try:
            r = orig(self, lease, nexttime)
        except Exception as exc:
            PLACE.append((now, lease.id, None, None, type(exc).__name__))
            raise
        vmrr = lease.get_last_vmrr() if lease.vm_rrs else None
        if vmrr is None:
            PLACE.append((now, lease.id, None, None, "none"))
        else:
            nodes = "+".join(str(vmrr.nodes[v] - 1) for v in sorted(vmrr.nodes))
            PLACE.append((now, lease.id, vmrr.start, vmrr.end, nodes))
        return r
    LeaseScheduler._LeaseScheduler__schedule_lease = wrapped


def main(conf, out):
    t0, c0 = time.time(), os.times()
    PLACE.f = open(out.replace(".csv", "") + ".live", "w", 1)     # line-buffered
    _wrap_schedule()
    config = HaizeaConfig.from_file(conf)
    manager = Manager(config, False, None)
    manager.start()
    c1 = os.times()
    wall, cpu = time.time() - t0, (c1[0] + c1[1]) - (c0[0] + c0[1])
    start = config.get("starttime")
    rows = []
    for l in manager.scheduler.completed_leases.entries.values():
        kind = "BE" if l.get_type() == Lease.BEST_EFFORT else "AR"
        st = Lease.state_str[l.get_state()]
        sub = (l.submit_time - start).seconds
        s = "" if l.start.actual is None else "%.1f" % (l.start.actual - start).seconds
        e = "" if l.end is None else "%.1f" % (l.end - start).seconds
        rows.append((sub, l.id, "%d,%s,%s,%.3f,%s,%s," % (l.id, kind, st, sub, s, e)))
    rows.sort()
    f = open(out, "w")
    f.write("# haizea wall_s=%.1f cpu_s=%.1f\n" % (wall, cpu))
    f.write("id,type,state,submit_s,start_s,end_s,segments\n")
    for r in rows:
        f.write(r[2] + "\n")
    f.close()
    f = open(out.replace(".csv", "") + ".place.csv", "w")
    f.write("# every __schedule_lease call: decision time, lease, last VM reservation start, end, 0-based nodes (vnode order)\n")
    f.write("t_s,id,start_s,end_s,nodes\n")
    sec = lambda t: "" if t is None else "%.1f" % (t - start).seconds
    for now, lid, s, e, nodes in PLACE:
        f.write("%s,%d,%s,%s,%s\n" % (sec(now), lid, sec(s), sec(e), nodes))
    f.close()
    sys.stderr.write("wrote %s: %d leases, wall %.1f s, cpu %.1f s\n" % (out, len(rows), wall, cpu))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
