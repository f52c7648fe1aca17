"""Test-suite settings.

Hypothesis explores new random examples on every developer run (and keeps failures in
.hypothesis/ to replay them). Under CI (``CI`` set in the environment) it is derandomized: the
same examples every run and no per-example deadline, so a submission's CI result depends
neither on luck nor on how loaded the machine is; exploration
happens in developers' runs, where a new failure is found, fixed and given a regression test.
"""
import os

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(scope="module")
def receiver():
    """A loopback HTTP receiver standing where the broker is (vwn_agents.testing.Receiver)."""
    from vwn_agents.testing import Receiver
    r = Receiver()
    yield r
    r.close()


@pytest.fixture(scope="module")
def pg_url():
    """A fresh PostgreSQL database for a test module (its SQLAlchemy URL); skips, saying why,
    where PostgreSQL is not installed (tests/pg_server.py)."""
    from .pg_server import postgres_server, unavailable_reason
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    with postgres_server() as url:
        yield url
