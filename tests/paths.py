"""Where the shared inputs are: ``../shared`` beside the repository (CI clones it that way).

``$VGRID_SHARED`` overrides the location.
"""
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("VGRID_SHARED", REPO.parent / "shared"))
SHARED_JDL = SHARED / "data" / "jdl"
SHARED_LDIF = SHARED / "data" / "ldif"
TRACES = SHARED / "traces"
EXAMPLES = REPO / "examples" / "jdl"
