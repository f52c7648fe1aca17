"""Lease-for-lease parity with Haizea 1.1 (issue 16): run vgrid on the inputs of a Haizea run and
compare every lease's start and end with Haizea's per-lease CSV (format: vwn_agents/leasing/parity.py).

    .venv/bin/python benchmarks/haizea_parity.py --haizea HAIZEA.csv [--trace blue-30days]
        [--inject work_10-dur_3h-size_2medium] [--config FILE] [--compat haizea-1.1|none]
        [--suspension all|none] [--haizea-cmd "COMMAND"]

Without --config the engine runs HPDC'08's NOVM-SR (aggressive backfilling, suspension of all
leases at 50 MB/s, no migration, ``ar-preempts-everything``, 144 nodes of 1 CPU and 1024 MB);
--suspension none gives NOVM-NOSR. --config reads a Haizea INI file (compat on) or a vgrid TOML
file. --haizea-cmd runs Haizea first (a command that writes HAIZEA.csv) so both sides' CPU time
is measured in one invocation; otherwise Haizea's CPU is taken from the CSV's
``# haizea wall_s=.. cpu_s=..`` line when present. Prints one JSON line (identical leases /
total, the first difference with lease id and time, AR decisions, all-best-effort on both
sides, CPU and wall seconds, the load average); exits 2 when an input is missing.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vgrid_runtime import traces  # noqa: E402
from vwn_agents.leasing import LeaseConfig, simulate, uniform_site  # noqa: E402
from vwn_agents.leasing.traces import read_with_injection  # noqa: E402
from vwn_agents.leasing.parity import ParityInputError, compare, read_haizea_csv  # noqa: E402

NOVM_SR = {"backfilling": "aggressive", "suspension": "all", "suspend-rate": 50.0, "resume-rate": 50.0,
           "migration": "no", "lease-preparation": "unmanaged", "policy-preemption": "ar-preempts-everything"}


def _fail(msg: str) -> None:
    print(f"haizea_parity: {msg}", file=sys.stderr)
    sys.exit(2)


def _config(args) -> LeaseConfig:
    if args.config:
        from vwn_agents.leasing.config import load_config
        from vwn_agents.leasing.haizeaconf import is_haizea_file, load_haizea
        cfg = load_haizea(args.config).config if is_haizea_file(args.config) else load_config(args.config)
    else:
        cfg = LeaseConfig(dict(NOVM_SR, suspension=args.suspension))
    return cfg.with_options(compat=args.compat) if args.compat else cfg


def _haizea_cpu(path: Path) -> dict:
    first = path.read_text(encoding="utf-8").splitlines()[:1]
    m = re.match(r"# haizea wall_s=([\d.]+) cpu_s=([\d.]+)", first[0]) if first else None
    return {"wall_s": float(m.group(1)), "cpu_s": float(m.group(2)), "measured": "earlier run"} if m else {}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--haizea", required=True, help="Haizea's per-lease CSV (vgrid ids)")
    ap.add_argument("--trace", default="blue-30days", help="bundled trace name or file")
    ap.add_argument("--inject", default="", help="AR set name or LWF file")
    ap.add_argument("--days", type=float, default=0.0, help="keep only leases submitted in the first DAYS days")
    ap.add_argument("--config", default="", help="Haizea INI or vgrid TOML (default: NOVM-SR)")
    ap.add_argument("--suspension", default="all", choices=("all", "none"))
    ap.add_argument("--compat", default="haizea-1.1", choices=("haizea-1.1", "none", ""))
    ap.add_argument("--haizea-cmd", default="", help="run Haizea first (writes --haizea)")
    args = ap.parse_args(argv)
    hz = {}
    if args.haizea_cmd:
        c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        rc = subprocess.call(args.haizea_cmd, shell=True)
        c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        if rc != 0:
            _fail(f"the Haizea command exited {rc}")
        hz = {"wall_s": time.perf_counter() - t0, "measured": "this run",
              "cpu_s": (c1.ru_utime + c1.ru_stime) - (c0.ru_utime + c0.ru_stime)}
    path = Path(args.haizea)
    if not path.is_file():
        _fail(f"{path}: no such Haizea per-lease CSV (produce it with Haizea 1.1; docs/leasing.md)")
    try:
        haizea = read_haizea_csv(path)
        trace = traces.resolve(args.trace)
        inject = traces.resolve(args.inject) if args.inject else None
    except (ParityInputError, traces.TraceNameError) as exc:
        _fail(str(exc))
    hz = hz or _haizea_cpu(path)
    cfg = _config(args)
    t0, c0 = time.perf_counter(), time.process_time()
    leases = read_with_injection(trace, inject)
    if args.days:
        leases = [l for l in leases if l.submit_s < args.days * 86400]
    result = simulate(leases, uniform_site(144, 1, 1024), cfg)
    records = result.report()["leases"]
    vg = {"wall_s": round(time.perf_counter() - t0, 2), "cpu_s": round(time.process_time() - c0, 2)}
    out = compare(haizea, records)
    out.update({"trace": Path(trace).name, "inject": Path(inject).name if inject else None,
                "compat": cfg.compat, "suspension": cfg.suspension, "vgrid": vg, "haizea": hz,
                "loadavg": os.getloadavg()[0]})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
