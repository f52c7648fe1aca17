"""Where the tests' inputs are: all inside the repository (a clone with nothing beside it passes).

``tests/data/jdl`` (real gLite JDL), ``tests/data/ldif`` (GLUE LDIF), ``examples/traces``
(workload traces, named in vgrid_runtime/traces.py) and ``examples/jdl`` (the demo's JDLs).
"""
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
