"""pytest fixtures: a real BDII (OpenLDAP slapd + Debian glue-schema) in a temporary directory.

Use with ``pytest_plugins = ["tests.slapd_fixture"]`` in tests/conftest.py, or import the
fixture names into a test module. Needs the Debian packages slapd, ldap-utils and glue-schema
(scripts/test.sh installs them); without them the tests using these fixtures are skipped with
that reason, since a real LDAP server cannot exist here otherwise.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from infosys.bdii import SCHEMA_DIR, BdiiServer, start_bdii, stop_bdii


def slapd_missing() -> str | None:
    """Why a real slapd cannot run here, or None."""
    if not (shutil.which("slapd") or Path("/usr/sbin/slapd").exists()):
        return "slapd not installed (apt-get install -y slapd ldap-utils glue-schema)"
    if not (SCHEMA_DIR / "GLUE20.schema").exists():
        return "glue-schema not installed (apt-get install -y glue-schema)"
    return None


@pytest.fixture
def bdii(tmp_path) -> BdiiServer:
    """A fresh BDII (o=grid, o=glue) on a free loopback port; stopped by PID afterwards."""
    why = slapd_missing()
    if why:
        pytest.skip(why)
    d = tmp_path / "bdii"
    server = start_bdii(d)
    try:
        yield server
    finally:
        stop_bdii(d)
