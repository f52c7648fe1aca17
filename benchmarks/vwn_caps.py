"""Measured CPU share of CPU-bound VWNs against the cap rule C/n (seed 004, Section 5.1).

For n = 1..max_jobs, starts n CPU-bound jobs (each a busy loop) as VWNs of one node agent of
capacity C, waits ``--settle`` seconds, then measures each VWN's CPU time over ``--window`` seconds
from its cgroup (cpuacct.usage or cpu.stat usage_usec) and reports the measured share (CPU seconds
per wall second) next to the configured cap C/n: a share never exceeds its cap (max(share-cap)
<= ~0) and the n VWNs get equal shares (small spread); a share below the cap means the CPUs were
busy with other work. Needs a writable CPU cgroup.

    .venv/bin/python benchmarks/vwn_caps.py [--capacity 1.0] [--max-jobs 4] [--window 3] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vwn_agents.node_agent import NodeAgent, NodeAgentConfig, VWNRequest  # noqa: E402

BUSY = "-c 'while True: pass'"


def measure(agent: NodeAgent, n: int, settle_s: float, window_s: float) -> dict:
    vwns = [agent.create_vwn(VWNRequest(job_id=f"bench-{n}-{i}", key=f"bench-{n}-{i}",
                                        executable=sys.executable, arguments=BUSY))[0]
            for i in range(n)]
    time.sleep(settle_s)
    t0, u0 = time.monotonic(), [agent.cg.cpu_usage_s(v.vwn) for v in vwns]
    time.sleep(window_s)
    t1, u1 = time.monotonic(), [agent.cg.cpu_usage_s(v.vwn) for v in vwns]
    caps = [agent.read_cap(v.vwn) for v in vwns]
    for v in vwns:
        agent.delete_vwn(v.vwn)
    shares = [(b - a) / (t1 - t0) for a, b in zip(u0, u1)]
    return {"jobs": n, "cap": caps[0], "shares": [round(s, 3) for s in shares],
            "total": round(sum(shares), 3),
            "max_over_cap": round(max(s - caps[0] for s in shares), 3),
            "spread": round(max(shares) - min(shares), 3)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--capacity", type=float, default=1.0)
    p.add_argument("--max-jobs", type=int, default=4)
    p.add_argument("--settle", type=float, default=0.5)
    p.add_argument("--window", type=float, default=3.0)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as work:
        agent = NodeAgent(NodeAgentConfig(node="bench", capacity=a.capacity, work_dir=work))
        try:
            if not agent.cg.capped:
                print(f"no writable CPU cgroup: {agent.cg.reason}", file=sys.stderr)
                return 1
            rows = [measure(agent, n, a.settle, a.window) for n in range(1, a.max_jobs + 1)]
        finally:
            agent.shutdown()
    load = os.getloadavg()[0]
    if a.json:
        print(json.dumps({"capacity": a.capacity, "cgroup": agent.cg.version, "load1": load,
                          "cpus": os.cpu_count(), "rows": rows}))
        return 0
    print(f"capacity C = {a.capacity} core, cgroup {agent.cg.version}, window {a.window} s, "
          f"{os.cpu_count()} CPUs, load average {load:.2f} (other work competes for the CPUs)")
    print("jobs  cap C/n  measured shares (core)        total  max(share-cap)  spread")
    for r in rows:
        print(f"{r['jobs']:>4}  {r['cap']:>7.3f}  {str(r['shares']):<28}  {r['total']:>5.3f}  "
              f"{r['max_over_cap']:>14.3f}  {r['spread']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
