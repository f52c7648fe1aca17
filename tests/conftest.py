"""Test-suite settings.

Hypothesis explores new random examples on every developer run (and keeps failures in
.hypothesis/ to replay them). Under CI (``CI`` set in the environment) it is derandomized: the
same examples every run and no per-example deadline, so a submission's CI result depends
neither on luck nor on how loaded the machine is; exploration
happens in developers' runs, where a new failure is found, fixed and given a regression test.
Neither profile has a per-example deadline (profile "dev": why).
"""
import os

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, deadline=None)
# Developer runs: random exploration, and no per-example deadline either. No property of this
# suite is about time (parsers, printers, state tables, schedulers on simulated clocks); the
# default 200 ms deadline only measured how loaded the host was (test_jdl_properties failed
# with DeadlineExceeded/Flaky at load 20-90, and 200 ms also sets HealthCheck.too_slow's bound
# to 1 s of input generation). A property that is about time names its own
# ``@settings(deadline=...)``.
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


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
