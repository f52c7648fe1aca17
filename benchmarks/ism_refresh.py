"""Benchmark: a full ISM refresh from a real BDII holding 10,000 GLUE 1.3 CEs (issue 4).

Generates N CEs (4 queues per cluster host, one GlueSubCluster per cluster, ``--views`` GlueVOViews
per CE, default 1), loads them into a fresh slapd with ``slapadd`` (offline bulk load), then
runs ``ISM([BdiiSource(url)]).refresh()`` in a separate process and reports the wall time of the
first refresh (includes reading the server schema), the median of the following ones, the
number of ads and the peak RSS of that process. Target: <= 2 s and <= 300 MB.

    .venv/bin/python benchmarks/ism_refresh.py [--ces 10000] [--views 1] [--repeat 3]
        [--client auto|ldap3|ldapsearch] [--json]
    .venv/bin/python benchmarks/ism_refresh.py --update [--ces 1000]   # time vgrid bdii update
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infosys.bdii import start_bdii, stop_bdii  # noqa: E402
from infosys.ldif import LdifEntry, format_ldif  # noqa: E402

VOS = ("atlas", "cms", "dteam", "vgrid")
QUEUES = ("long", "short", "medium", "grid")


def ce_entries(i: int, views: int = 1) -> list[LdifEntry]:
    """GLUE 1.3 entries of the cluster of host i: cluster, subcluster, 4 CEs, ``views`` VO views
    each."""
    host, site = f"ce{i:05d}.example", f"SITE-{i // 25:04d}"
    base = f"Mds-Vo-name={site},Mds-Vo-name=local,o=grid"
    cl = f"GlueClusterUniqueID={host},{base}"
    v13 = {"GlueSchemaVersionMajor": ["1"], "GlueSchemaVersionMinor": ["3"]}
    ce_ids = [f"{host}:8443/cream-pbs-{q}" for q in QUEUES]
    out = [LdifEntry(cl, {"objectClass": ["GlueClusterTop", "GlueCluster", "GlueKey",
                                          "GlueSchemaVersion"],
                          "GlueClusterUniqueID": [host], "GlueClusterName": [host],
                          "GlueForeignKey": [f"GlueSiteUniqueID={site}"]
                          + [f"GlueCEUniqueID={c}" for c in ce_ids], **v13}),
           LdifEntry(f"GlueSubClusterUniqueID={host},{cl}", {
               "objectClass": ["GlueClusterTop", "GlueSubCluster", "GlueHostBenchmark",
                               "GlueHostMainMemory", "GlueHostArchitecture",
                               "GlueHostOperatingSystem", "GlueHostApplicationSoftware",
                               "GlueKey", "GlueSchemaVersion"],
               "GlueSubClusterUniqueID": [host], "GlueChunkKey": [f"GlueClusterUniqueID={host}"],
               "GlueSubClusterPhysicalCPUs": [str(8 + i % 64)],
               "GlueSubClusterLogicalCPUs": [str(32 + i % 256)],
               "GlueHostBenchmarkSI00": [str(1000 + i % 2000)],
               "GlueHostMainMemoryRAMSize": [str(2048 * (1 + i % 8))],
               "GlueHostArchitecturePlatformType": ["x86_64"],
               "GlueHostOperatingSystemName": ["ScientificSL"],
               "GlueHostApplicationSoftwareRunTimeEnvironment": ["MPICH", "VO-atlas-sw"],
               **v13})]
    for q, ce_id in zip(QUEUES, ce_ids):
        ce_dn = f"GlueCEUniqueID={ce_id},{base}"
        out.append(LdifEntry(ce_dn, {
            "objectClass": ["GlueCETop", "GlueCE", "GlueCEAccessControlBase", "GlueCEInfo",
                            "GlueCEPolicy", "GlueCEState", "GlueKey", "GlueSchemaVersion"],
            "GlueCEUniqueID": [ce_id], "GlueCEName": [q], "GlueCEInfoHostName": [host],
            "GlueCEInfoLRMSType": ["pbs"], "GlueCEInfoTotalCPUs": [str(32 + i % 256)],
            "GlueCEStateStatus": ["Production"], "GlueCEStateRunningJobs": [str(i % 97)],
            "GlueCEStateWaitingJobs": [str(i % 13)], "GlueCEStateTotalJobs": [str(i % 97 + i % 13)],
            "GlueCEStateFreeCPUs": [str(i % 7)], "GlueCEStateEstimatedResponseTime": [str(i % 600)],
            "GlueCEPolicyMaxWallClockTime": ["2880"], "GlueCEPolicyMaxCPUTime": ["2880"],
            "GlueCEAccessControlBaseRule": [f"VO:{v}" for v in VOS],
            "GlueForeignKey": [f"GlueClusterUniqueID={host}"], **v13}))
        for vo in VOS[:views]:
            out.append(LdifEntry(f"GlueVOViewLocalID={vo},{ce_dn}", {
                "objectClass": ["GlueCETop", "GlueVOView", "GlueCEState",
                                "GlueCEAccessControlBase", "GlueKey", "GlueSchemaVersion"],
                "GlueVOViewLocalID": [vo], "GlueCEAccessControlBaseRule": [f"VO:{vo}"],
                "GlueCEStateRunningJobs": [str(i % 11)], "GlueCEStateWaitingJobs": [str(i % 5)],
                "GlueChunkKey": [f"GlueCEUniqueID={ce_id}"], **v13}))
    return out


def site_entries(n_clusters: int) -> list[LdifEntry]:
    sites = sorted({f"SITE-{i // 25:04d}" for i in range(n_clusters)})
    base = [LdifEntry("o=grid", {"objectClass": ["organization"], "o": ["grid"]}),
            LdifEntry("Mds-Vo-name=local,o=grid", {"objectClass": ["MDS"],
                                                    "Mds-Vo-name": ["local"]})]
    return base + [LdifEntry(f"Mds-Vo-name={s},Mds-Vo-name=local,o=grid",
                             {"objectClass": ["MDS"], "Mds-Vo-name": [s]}) for s in sites]


def load(dir_: Path, n_ces: int, views: int = 1) -> tuple[int, float]:
    """Bulk-load n_ces CEs into a stopped BDII in dir_ with slapadd; (entries, seconds)."""
    n_clusters = (n_ces + len(QUEUES) - 1) // len(QUEUES)
    entries = site_entries(n_clusters)
    for i in range(n_clusters):
        entries += ce_entries(i, views)
    ldif = dir_ / "grid.ldif"
    ldif.write_text(format_ldif(entries))
    t0 = time.perf_counter()
    subprocess.run(["slapadd", "-q", "-f", str(dir_ / "slapd.conf"), "-b", "o=grid",
                    "-l", str(ldif)], check=True, capture_output=True)
    return len(entries), time.perf_counter() - t0


def measure(url: str, repeat: int, client: str) -> dict:
    """Run in a fresh process: ISM refreshes from the BDII at url."""
    from vgrid_runtime.clock import WallClock
    from infosys.ism import ISM, BdiiSource
    src = BdiiSource(url, timeout_s=60, client=client)
    ism = ISM([src], refresh_s=240, clock=WallClock())
    times, cpus = [], []
    for _ in range(repeat + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        snap = ism.refresh()
        times.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return {"client": src.client, "ads": len(snap.ads), "rejected": len(snap.rejected), "stale": snap.stale,
            "errors": list(snap.errors), "first_refresh_s": round(times[0], 3),
            "refresh_s_median": round(statistics.median(times[1:]), 3),
            "refresh_s_all": [round(t, 3) for t in times],
            "python_cpu_s_median": round(statistics.median(cpus[1:]), 3),
            "load_average_1min": round(os.getloadavg()[0], 2),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def measure_update(n_ces: int, views: int) -> dict:
    """Seconds of update_bdii into a fresh BDII: first load and unchanged reload, per client."""
    from infosys.bdii_update import update_bdii
    n_clusters = (n_ces + len(QUEUES) - 1) // len(QUEUES)
    entries = site_entries(n_clusters)[2:]
    for i in range(n_clusters):
        entries += ce_entries(i, views)
    out = {}
    for client in ("ldapmodify", "ldap3"):
        with tempfile.TemporaryDirectory(prefix="vgrid-bench-upd-") as tmp:
            server = start_bdii(Path(tmp) / "bdii")
            try:
                t0 = time.perf_counter()
                first = update_bdii(server.url, entries, client=client)
                t1 = time.perf_counter()
                update_bdii(server.url, entries, client=client)
                t2 = time.perf_counter()
            finally:
                stop_bdii(Path(tmp) / "bdii")
        out[client] = {"entries": len(entries), "added": first.added,
                       "refused": len(first.rejected), "first_s": round(t1 - t0, 2),
                       "unchanged_s": round(t2 - t1, 2)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ces", type=int, default=10_000)
    ap.add_argument("--views", type=int, default=1, choices=range(0, 5))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--client", choices=("auto", "ldap3", "ldapsearch"), default="auto")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--measure", metavar="LDAP_URL", help=argparse.SUPPRESS)
    ap.add_argument("--update", action="store_true",
                    help="time loading by difference (update_bdii, both clients) instead")
    args = ap.parse_args()
    if args.update:
        res = measure_update(args.ces, args.views)
        print(json.dumps(res, indent=2) if args.json else "\n".join(
            f"update_bdii client={c}: first load {r['first_s']} s, unchanged reload "
            f"{r['unchanged_s']} s ({r['entries']} entries)" for c, r in res.items()))
        return 0
    if args.measure:
        print(json.dumps(measure(args.measure, args.repeat, args.client)))
        return 0
    with tempfile.TemporaryDirectory(prefix="vgrid-bench-bdii-") as tmp:
        d = Path(tmp) / "bdii"
        start_bdii(d)
        stop_bdii(d)  # slapadd needs the server stopped; the config and databases stay
        for db in ("db-grid",):
            for f in (d / db).glob("*.mdb"):
                f.unlink()
        n_entries, load_s = load(d, args.ces, args.views)
        server = start_bdii(d)
        try:
            out = subprocess.run([sys.executable, __file__, "--measure", server.url,
                                  "--repeat", str(args.repeat), "--client", args.client],
                                 check=True, capture_output=True, text=True)
            res = json.loads(out.stdout)
        finally:
            stop_bdii(d)
    res.update({"ces": args.ces, "views_per_ce": args.views, "entries": n_entries,
                "slapadd_s": round(load_s, 2)})
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print(f"{args.ces} CEs ({n_entries} LDAP entries, slapadd {res['slapadd_s']} s), "
              f"client {res['client']}: "
              f"{res['ads']} ads; first refresh {res['first_refresh_s']} s, then median "
              f"{res['refresh_s_median']} s (Python CPU {res['python_cpu_s_median']} s, load "
              f"{res['load_average_1min']}); peak RSS {res['peak_rss_mb']} MB")
    ok = res["refresh_s_median"] <= 2.0 and res["peak_rss_mb"] <= 300 and not res["stale"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
