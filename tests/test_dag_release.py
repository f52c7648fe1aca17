"""DAG release order (the race test_e2e caught in CI): a node is released to Waiting no
earlier than the moment its parent was recorded Done, even when the parent's Done event is
stored by another thread while a matcher pass is releasing nodes."""
from __future__ import annotations

import random

from broker.db import JobStore
from broker.matchmaker import Matchmaker
from broker.service import Broker, BrokerSettings
from infosys.ism import ISM
from infosys.sources import StaticSource
from vgrid_runtime.clock import SimulatedClock
from vgrid_runtime.job_states import JobState

DAG = """[ Type = "dag"; nodes = [
  first = [ description = [ Executable = "/bin/true"; ]; ];
  second = [ description = [ Executable = "/bin/true"; ]; ];
  dependencies = { { first, second } }; ]; ]"""
S = JobState


class RacingClock(SimulatedClock):
    """Runs ``hook`` (once) at the first reading after it is armed, then moves on by 1 s: an
    event thread that records a Done just after the matcher read the clock."""

    hook = None

    def now(self) -> float:
        hook, self.hook = self.hook, None
        t = super().now()
        if hook:
            self.advance(1.0)
            hook()
        return t


def test_a_node_is_never_released_before_its_parent_is_done(tmp_path):
    clock = RacingClock(1000.0)
    ism = ISM([StaticSource([])], refresh_s=3600, clock=clock)
    broker = Broker(JobStore(f"sqlite:///{tmp_path / 'jobs.db'}"), ism, Matchmaker(ism.feedback, rng=random.Random(1)),
                    clock, tmp_path / "sandboxes", BrokerSettings())
    dag = broker.submit(DAG, "dag.jdl", {})
    nodes = {j.node_name: j for j in broker.store.list(parent=dag.key, history=False)}
    first, second = nodes["first"], nodes["second"]
    assert second.state is S.SUBMITTED and first.state is S.WAITING

    def first_done():
        state = first.state
        for step in (S.READY, S.SCHEDULED, S.RUNNING, S.DONE):
            broker.store.transition(first.key, step, clock.now(), expect=state, **({"exit_code": 0} if step is S.DONE else {}))
            state = step
    clock.hook = first_done
    released = broker.release_dag_nodes()          # the Done lands while this pass runs
    clock.advance(1.0)
    assert released + broker.release_dag_nodes() == 1
    done_at = next(h["time"] for h in broker.store.get(first.key).history if h["state"] == "Done")
    waiting = [h["time"] for h in broker.store.get(second.key).history if h["state"] == "Waiting"]
    assert waiting and waiting[0] >= done_at, (waiting, done_at)
