"""A clone with nothing beside it passes: no input is read from outside the repository.

Fails if a file under tests/, benchmarks/, examples/, scripts/ or a package refers to the old
shared directory beside the repository, or to the environment variable that once located it.
"""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .test_layering import ORDER

REPO = Path(__file__).resolve().parents[1]
# Spelled in pieces so that this file does not match itself.
OUTSIDE = re.compile(rb"\.\./" + rb"shared|/work/" + rb"shared|VGRID_" + rb"SHARED"
                     rb"|parents\[2\]\s*/\s*[\"']" + rb"shared")


def test_no_file_refers_to_a_shared_directory_outside_the_repository():
    offenders = []
    for top in ["tests", "benchmarks", "examples", "scripts", ".ci", *ORDER]:
        for path in sorted((REPO / top).rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            for lineno, line in enumerate(path.read_bytes().splitlines(), 1):
                if OUTSIDE.search(line):
                    offenders.append(f"{path.relative_to(REPO)}:{lineno}: {line.strip()[:100]!r}")
    assert offenders == []


@pytest.mark.parametrize("script,args,named", [
    ("jdl_eval.py", ["--jdl-dir", "{tmp}", "--seconds", "0.01"], "{tmp}/01_hostname_nobrackets.jdl"),
    ("grid_sim.py", ["--trace", "{tmp}/LCG.swf.gz"], "{tmp}/LCG.swf.gz"),
    ("lease_engine.py", ["--days", "30", "--inject", "{tmp}/ar.lwf"], "{tmp}/ar.lwf"),
    ("hpdc08_run.py", ["NOVM-SR", "none", "--spec", "{tmp}/hpdc08.toml"], "{tmp}/hpdc08.toml"),
])
def test_a_benchmark_without_its_input_names_it_and_reports_nothing(tmp_path, script, args, named):
    args = [a.format(tmp=tmp_path) for a in args]
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and named.format(tmp=tmp_path) in r.stderr
    assert r.stdout == "" and "Traceback" not in r.stderr
