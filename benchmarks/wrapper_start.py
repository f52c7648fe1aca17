"""Start cost of the job wrapper alone: wall and CPU of running ``/bin/true`` through it, the way
the node agent starts it (spec on stdin, ``PYTHONDONTWRITEBYTECODE=1``) -- issue 12, "a lean job
wrapper"; docs/benchmarks.md, "e2e latency".

``--zygote`` also starts it the node agent's default way (``wrapper_start = "zygote"``): forked
by a ``vwn_agents.zygote`` process as the account ``nobody`` (65534), no exec, no interpreter
start; wall = request until its ``exit`` line is in its output file, CPU = the zygote's own and
its reaped children's CPU over all runs (/proc, clock ticks), per run. Needs root.

``--compare DIR`` also starts the wrapper of another checkout (e.g. a worktree of an older
commit) the way that version was started (``python -m vwn_agents.wrapper -``, with site),
alternating with this one so both see the same machine load. Prints one JSON line
``{"benchmark": "wrapper_start", "runs", "this": {"wall_ms_p50", "wall_ms_p90", "cpu_ms_p50"},
"zygote": {"wall_ms_p50", "wall_ms_p90", "cpu_ms_mean"} | null, "compare": {...} | null}``; CPU is the child's user+system time (``wait4`` rusage). Exit 1 when
the wrapper fails.

    .venv/bin/python benchmarks/wrapper_start.py [--runs 40] [--zygote] [--compare /path/to/old/checkout]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vwn_agents.vwn_process import WRAPPER_ARGS, compile_wrapper  # noqa: E402
from vwn_agents.zygote import Zygote, ZygoteError  # noqa: E402

NOBODY = 65534
TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int) -> float:
    """utime+stime+cutime+cstime of ``pid`` in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / TICK


def zygote_runs(runs: int, d: str) -> dict:
    """Wall of ``runs`` zygote starts of ``/bin/true`` as nobody; CPU per run (module doc)."""
    os.chmod(d, 0o777)
    z = Zygote(sys.executable, str(ROOT), os.path.join(d, "zygote.log"))
    walls = []
    try:
        cpu0 = proc_cpu(z.proc.pid)
        for i in range(runs):
            out_path = os.path.join(d, f"out{i}")
            with open(out_path, "ab") as out, open(os.devnull, "wb") as log:
                t = time.perf_counter()
                z.spawn(NOBODY, NOBODY, [], {"PATH": "/usr/bin:/bin"}, d,
                        {"workdir": d, "executable": "/bin/true"}, out.fileno(), log.fileno())
            deadline = t + 30
            while b'"event": "exit"' not in open(out_path, "rb").read():
                if time.perf_counter() > deadline:
                    raise SystemExit(f"wrapper_start: zygote run {i} did not end")
                time.sleep(0.0005)
            walls.append((time.perf_counter() - t) * 1000)
            if b'"exit_code": 0' not in open(out_path, "rb").read():
                raise SystemExit(f"wrapper_start: zygote run {i} failed: {open(out_path).read()}")
        cpu = proc_cpu(z.proc.pid) - cpu0
    except ZygoteError as exc:
        raise SystemExit(f"wrapper_start: {exc}") from None
    finally:
        z.close()
    walls.sort()
    return {"wall_ms_p50": round(statistics.median(walls), 1),
            "wall_ms_p90": round(walls[int(0.9 * (len(walls) - 1))], 1),
            "cpu_ms_mean": round(cpu * 1000 / runs, 1)}


def one(argv: list[str], root: str, spec: bytes, cwd: str) -> tuple[float, float]:
    """(wall ms, CPU ms) of one wrapper run."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": root, "PYTHONDONTWRITEBYTECODE": "1"}
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(argv, input=spec, env=env, stdout=subprocess.DEVNULL, cwd=cwd)
    wall = time.perf_counter() - t
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"wrapper_start: {argv} exited {proc.returncode}")
    return wall * 1000, (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) * 1000


def stats(samples: list[tuple[float, float]]) -> dict:
    walls = sorted(w for w, _ in samples)
    return {"wall_ms_p50": round(statistics.median(walls), 1),
            "wall_ms_p90": round(walls[int(0.9 * (len(walls) - 1))], 1),
            "cpu_ms_p50": round(statistics.median(c for _, c in samples), 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--zygote", action="store_true", help="also the zygote way (needs root)")
    ap.add_argument("--compare", default=None, help="another checkout, started with python -m (site)")
    args = ap.parse_args(argv)
    compile_wrapper()                                 # as the node agent does at start
    cases = {"this": ([sys.executable, *WRAPPER_ARGS], str(ROOT))}
    if args.compare:
        if not (Path(args.compare) / "vwn_agents" / "wrapper.py").is_file():
            print(f"wrapper_start: no vwn_agents/wrapper.py in {args.compare}", file=sys.stderr)
            return 1
        cases["compare"] = ([sys.executable, "-m", "vwn_agents.wrapper", "-"], args.compare)
    samples: dict[str, list] = {k: [] for k in cases}
    with tempfile.TemporaryDirectory() as d:
        spec = json.dumps({"workdir": d, "executable": "/bin/true"}).encode()
        for _ in range(args.runs):
            for name, (cmd, root) in cases.items():
                samples[name].append(one(cmd, root, spec, d))
        zyg = zygote_runs(args.runs, d) if args.zygote else None
    print(json.dumps({"benchmark": "wrapper_start", "runs": args.runs, "this": stats(samples["this"]),
                      "zygote": zyg,
                      "compare": stats(samples["compare"]) if args.compare else None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
