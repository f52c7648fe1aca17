"""Benchmark of vgrid's jdl: Requirements+Rank evaluations/s against 1,000 GLUE CE ads, in
the same run for vgrid and for HTCondor's classad2, and JDL parses/s.

    .venv/bin/python benchmarks/jdl_eval.py [--ads 1000] [--seconds 3] [--jdl-dir DIR] [--json]

Inputs: the real gLite JDL files of tests/data/jdl (01, 02, 09 are matched, all five parsed);
if one is missing the benchmark names it and exits 2 without reporting any figure.

Rates are per CPU second of the benchmark process (time.process_time).
One evaluation = Requirements and Rank of one job against one CE ad, each job compiled once,
each CE ad built once (vgrid: jdl.MappingAd over the infosys-style dict; classad2: a
classad2.ClassAd). Targets (issue 3): vgrid >= 2x classad2, >= 2,000 parses/s.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import jdl  # noqa: E402

NOW = 1_700_000_000.0  # what time() returns: a fixed instant, so that runs are comparable
DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "jdl"
MATCHED = ("01_hostname_nobrackets.jdl", "02_mpi_member_totalcpus.jdl", "09_wmsfeedback_nobrackets.jdl")
PARSED = MATCHED + ("05_collection_fuzzyrank.jdl", "06_parametric_list.jdl")
REALISTIC_JOB = """[
  Executable = "analysis.sh";
  InputSandbox = {"analysis.sh", "cuts.xml"};
  VirtualOrganisation = "dteam";
  Requirements = other.GlueCEStateStatus == "Production"
      && Member("VO:dteam", other.GlueCEAccessControlBaseRule)
      && Member("VO-dteam-ROOT-5.34", other.GlueHostApplicationSoftwareRunTimeEnvironment)
      && other.GlueHostMainMemoryRAMSize >= 2048
      && other.GlueCEPolicyMaxWallClockTime > 720
      && !RegExp("^lsf", other.GlueCEInfoLRMSType);
  Rank = other.GlueCEStateFreeCPUs / (other.GlueCEStateWaitingJobs + 1.0);
]"""


def glue_ads(count: int, seed: int = 2026) -> list[dict]:
    """`count` GLUE 1.3 CE ads with the attributes published by gLite sites (infosys shape)."""
    rnd = random.Random(seed)
    tags = ["MPICH", "MPI-START", "OPENMPI", "VO-dteam-ROOT-5.34", "VO-atlas-release-17",
            "LCG-2", "GLITE-3_2_0", "R-GMA", "VO-cms-CMSSW_5_3_11", "SI00MeanPerCPU_1500"]
    lrms = ["pbs", "torque", "lsf", "sge", "condor", "slurm"]
    ads = []
    for i in range(count):
        total = rnd.choice([8, 16, 64, 128, 512, 2048])
        free = rnd.randint(0, total)
        ads.append({
            "GlueCEUniqueID": f"ce{i:04d}.site{i % 97}.example.org:8443/cream-{lrms[i % 6]}-q{i % 4}",
            "GlueCEStateStatus": rnd.choices(["Production", "Draining", "Closed"], [90, 7, 3])[0],
            "GlueCEInfoTotalCPUs": total, "GlueCEStateFreeCPUs": free,
            "GlueCEStateRunningJobs": total - free,
            "GlueCEStateWaitingJobs": rnd.randint(0, 500),
            "GlueCEStateEstimatedResponseTime": rnd.randint(0, 86400),
            "GlueCEStateWorstResponseTime": rnd.randint(0, 172800),
            "GlueCEInfoLRMSType": lrms[i % 6], "GlueCEInfoLRMSVersion": "2.5.7",
            "GlueCEPolicyMaxWallClockTime": rnd.choice([60, 720, 1440, 2880, 4320]),
            "GlueCEPolicyMaxCPUTime": rnd.choice([60, 720, 1440, 2880]),
            "GlueHostMainMemoryRAMSize": rnd.choice([1024, 2048, 4096, 16384]),
            "GlueHostOperatingSystemName": rnd.choice(["ScientificSL", "CentOS", "Debian"]),
            "GlueHostArchitecturePlatformType": rnd.choice(["x86_64", "i686"]),
            "GlueHostBenchmarkSI00": rnd.randint(1000, 3000),
            "GlueHostApplicationSoftwareRunTimeEnvironment": rnd.sample(tags, rnd.randint(2, 8)),
            "GlueCEAccessControlBaseRule": rnd.sample(["VO:dteam", "VO:atlas", "VO:cms",
                                                       "VO:alice", "VO:lhcb"], rnd.randint(1, 4)),
            "GlueSiteName": f"SITE-{i % 97}",
        })
    return ads


def read_inputs(data: Path, names: tuple[str, ...]) -> list[tuple[str, str]]:
    """(name, text) of each file; exits 2 naming the first missing file (no fallback input)."""
    out = []
    for name in names:
        try:
            out.append((name, (data / name).read_text(encoding="utf-8")))
        except OSError as exc:
            print(f"jdl_eval.py: input {data / name} cannot be read ({exc.strerror}); no figures reported",
                  file=sys.stderr)
            sys.exit(2)
    return out


def jobs_texts(data: Path = DATA) -> list[tuple[str, str]]:
    return read_inputs(data, MATCHED) + [("realistic", REALISTIC_JOB)]


def _rate(fn, seconds: float) -> float:
    """Units per CPU second of this process (fn does `n` units and returns n). CPU time, not
    wall time, so that other load on a shared machine does not distort the comparison."""
    fn()  # warm-up: compile, caches
    done, start = 0, time.process_time()
    while True:
        done += fn()
        elapsed = time.process_time() - start
        if elapsed >= seconds:
            return done / elapsed


def bench_vgrid(texts, ads, seconds):
    jobs = [jdl.parse_jdl(t, name) for name, t in texts]
    mads = [jdl.MappingAd(a) for a in ads]
    matches, rank_value = jdl.matches, jdl.rank_value
    now = NOW

    def run():
        for job in jobs:
            for ad in mads:
                matches(job, ad, now)
                rank_value(job, ad, now)
        return len(jobs) * len(mads)
    return _rate(run, seconds), sum(matches(j, a, now) for j in jobs for a in mads)


def bench_classad2(texts, ads, seconds):
    import classad2
    jobs = []
    for _, t in texts:
        body = t.strip()
        body = "\n".join(ln for ln in body.splitlines() if not ln.lstrip().startswith("#"))
        ad = classad2.ClassAd(body if body.lstrip().startswith("[") or "\n[" in body
                              else "[" + body + "]")
        req = ad.lookup("Requirements") if "Requirements" in ad else classad2.ExprTree(
            jdl.DEFAULT_REQUIREMENTS)
        rank = ad.lookup("Rank") if "Rank" in ad else classad2.ExprTree(jdl.DEFAULT_RANK)
        jobs.append((ad, req, rank))
    cads = [classad2.ClassAd(a) for a in ads]

    def run():
        for ad, req, rank in jobs:
            for ce in cads:
                req.eval(scope=ad, target=ce)
                rank.eval(scope=ad, target=ce)
        return len(jobs) * len(cads)
    hits = sum(req.eval(scope=ad, target=ce) is True for ad, req, _ in jobs for ce in cads)
    return _rate(run, seconds), hits


def bench_parse(seconds, data: Path = DATA):
    texts = read_inputs(data, PARSED)

    def run():
        for name, t in texts:
            jdl.parse_jdl(t, name)
        return len(texts)
    return _rate(run, seconds)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ads", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--jdl-dir", type=Path, default=DATA, help=f"directory of the JDL files {', '.join(PARSED)}")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    read_inputs(a.jdl_dir, PARSED)  # every input present before any measurement
    texts, ads = jobs_texts(a.jdl_dir), glue_ads(a.ads)
    vg, vg_hits = bench_vgrid(texts, ads, a.seconds)
    try:
        c2, c2_hits = bench_classad2(texts, ads, a.seconds)
    except ImportError:
        c2, c2_hits = None, None
    parses = bench_parse(a.seconds, a.jdl_dir)
    res = {"ads": a.ads, "jobs": len(texts), "vgrid_evals_per_s": round(vg),
           "classad2_evals_per_s": None if c2 is None else round(c2),
           "speedup": None if c2 is None else round(vg / c2, 2),
           "matches_vgrid": vg_hits, "matches_classad2": c2_hits,
           "parses_per_s": round(parses), "python": platform.python_version(),
           "cpu": platform.processor() or platform.machine()}
    if a.json:
        print(json.dumps(res, indent=2))
    else:
        for k, v in res.items():
            print(f"{k:22} {v}")
    return res


if __name__ == "__main__":
    main()
