"""Where the tests' inputs are: all inside the repository (a clone with nothing beside it passes).

``tests/data/jdl`` (real gLite JDL), ``tests/data/ldif`` (GLUE LDIF), ``examples/traces``
(workload traces, named in vgrid_runtime/traces.py) and ``examples/jdl`` (the demo's JDLs).
"""
import shutil
import sys
from pathlib import Path

from vgrid_runtime.traces import TRACES_DIR

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
JDL = DATA / "jdl"
LDIF = DATA / "ldif"
TRACES = TRACES_DIR
EXAMPLES = REPO / "examples" / "jdl"

# The names the test modules import (they predate the bundling; kept so concurrent branches merge).
SHARED_JDL = JDL
SHARED_LDIF = LDIF

# A Python interpreter a job can run: jobs run as pool accounts, which cannot reach an interpreter
# under /root (where the test's own .venv Python may point).
JOB_PYTHON = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
