"""The four state tables (gLite job, CE job, VWN, lease): random walks over each, the entities'
own ``to`` methods, and outcome codes: rewording a reason changes no decision."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from vgrid_runtime.job_states import JOB_STATES, JobState
from vgrid_runtime.outcomes import PENDING, Outcome
from vgrid_runtime.states import IllegalTransition, StateTable
from vwn_agents import ce_reconcile
from vwn_agents.ce_jobs import CE_JOB_STATES, CEJob, CEJobState, JobRequest
from vwn_agents.leasing.model import LEASE_STATES, Lease, LeaseState, LeaseType, resource_vector
from vwn_agents.vwn_states import VWN_STATES, VWNState
from vwn_agents.voc.pool import VOC_NODE_STATES

TABLES = {"job": JOB_STATES, "CE job": CE_JOB_STATES, "VWN": VWN_STATES, "lease": LEASE_STATES,
          "VOC node": VOC_NODE_STATES}
EXITS_OF_TERMINAL = {"job": {JobState.CLEARED}}     # gLite: Done/Aborted/Cancelled -> Cleared


@pytest.mark.parametrize("name", TABLES)
def test_table_is_complete_and_terminal_states_have_no_exits(name):
    table = TABLES[name]
    assert table.entity == name
    assert set(table.transitions) == set(table.states)
    assert table.terminal and table.terminal <= set(table.states)
    for s in table.terminal:
        assert table.allowed(s) <= EXITS_OF_TERMINAL.get(name, set())
    for s in set(table.states) - table.terminal:       # every live state can end somehow
        assert table.allowed(s), s


@pytest.mark.parametrize("name", TABLES)
@given(data=st.data())
def test_random_walk_legal_moves_succeed_illegal_ones_raise(name, data):
    table = TABLES[name]
    states = list(table.states)
    state = data.draw(st.sampled_from(states))
    for _ in range(data.draw(st.integers(1, 25))):
        new = data.draw(st.sampled_from(states))
        if new in table.allowed(state):
            assert table.transition(state, new, "x1") is new
            state = new
        else:
            with pytest.raises(IllegalTransition) as err:
                table.transition(state, new, "x1")
            assert err.value.entity == name and err.value.old is state and err.value.new is new
            assert f"{name} x1: illegal transition {state.value} -> {new.value}" in str(err.value)
        if state in table.terminal and not table.allowed(state):
            for other in states:
                with pytest.raises(IllegalTransition):
                    table.check(state, other)
            break


def test_a_table_giving_a_terminal_state_an_exit_is_refused():
    with pytest.raises(ValueError, match="terminal state done has exits"):
        StateTable("VWN", VWNState, {VWNState.DONE: {VWNState.RUNNING}}, terminal={VWNState.DONE})


def test_entities_change_state_only_through_their_table():
    lease = Lease(7, LeaseType.BEST_EFFORT, 0.0, 10.0, 1, resource_vector(cpu=100))
    lease.to(LeaseState.QUEUED)
    with pytest.raises(IllegalTransition, match="lease 7: illegal transition Queued -> Suspending"):
        lease.to(LeaseState.SUSPENDING)
    assert lease.state is LeaseState.QUEUED
    assert lease.checked(LeaseState.SCHEDULED) is LeaseState.SCHEDULED and lease.state is LeaseState.QUEUED
    job = CEJob(JobRequest("id", "k1", "[]"), None, CEJobState.SCHEDULED)
    job.to(CEJobState.RUNNING)
    job.to(CEJobState.SCHEDULED)            # a preempted lease that restarts
    job.to(CEJobState.CANCELLED)
    with pytest.raises(IllegalTransition, match="CE job k1: illegal transition Cancelled -> Running"):
        job.to(CEJobState.RUNNING)
    assert job.record()["state"] == "Cancelled"
    assert {s.value for s in CEJobState} <= {s.value for s in JobState}


def test_outcome_parse_tolerates_unknown_codes():
    assert Outcome.parse("wallclock-limit") is Outcome.WALLCLOCK_LIMIT
    assert Outcome.parse(Outcome.EXIT) is Outcome.EXIT
    assert Outcome.parse(None) is None and Outcome.parse("from-a-newer-sender") is None


# -- outcome codes drive the CE agent's decisions, not the words ------------------------------------

class FakeLeases:
    """Stands in for ce_leases.LeaseScheduling: a fixed lease view and outcome."""

    engine = None

    def __init__(self, outcome):
        self._outcome = outcome
        self.cancelled = []

    def view(self, key):
        return {"state": "Queued", "nodes": [], "vwns": [], "start_error": None}

    def outcome(self, req, view):
        return self._outcome


class FakeRequest:
    def __init__(self, restarts):
        self.restarts = restarts

    def to_json(self) -> dict:       # the CE agent stores the lease request with the job
        from vwn_agents.ce_leases import JobLeaseRequest
        return JobLeaseRequest("best-effort", 25, 256, 60.0, "max_wallclock_s", restarts=self.restarts).to_json()


@pytest.fixture
def agent():
    from vwn_agents.ce_agent import CEAgent, CEAgentConfig
    cfg = CEAgentConfig.from_dict({"ce_id": "ce:1/vgrid-vwn-q", "host": "ce", "site": "S", "queue": "q",
                                   "nodes": [], "scheduler": "fair-share"})
    a = CEAgent(cfg)
    a._stop.set()
    a._wake.set()
    a._placer.join(timeout=5)               # no background placing: the test drives the agent
    yield a
    a.outbox.close()
    a.http.close()


def _running_job(agent, key, restarts):
    job = CEJob(JobRequest("id-" + key, key, "[]"), None, CEJobState.RUNNING,
                vwn="vwn-x-1", node="x", node_url="http://x", lease_req=FakeRequest(restarts))
    job.in_engine = True
    agent.jobs[key] = job
    return job


@pytest.mark.parametrize("words", ["preempted by an advance reservation: its VWN was deleted",
                                   "Reworded: an AR needed the slot, VWN gone"])
def test_requeue_and_abort_follow_the_code_whatever_the_words(agent, monkeypatch, words):
    agent.leases = FakeLeases((Outcome.PREEMPTED, words))
    monkeypatch.setattr(agent, "_cancel_lease", lambda key: agent.leases.cancelled.append(key))
    requeued = _running_job(agent, "r1", restarts=True)
    ce_reconcile.reconcile(agent, requeued)
    assert requeued.state is CEJobState.SCHEDULED and requeued.outcome is Outcome.REQUEUED
    assert requeued.vwn is None and "restarts in a new VWN" in requeued.reason
    aborted = _running_job(agent, "a1", restarts=False)
    ce_reconcile.reconcile(agent, aborted)
    assert aborted.state is CEJobState.ABORTED and aborted.outcome is Outcome.PREEMPTED
    assert aborted.reason == words and agent.leases.cancelled == ["a1"]
    assert aborted.record()["outcome"] == "preempted"


@pytest.mark.parametrize("words", ["killed at its wall-clock limit", "time is up (reworded)"])
def test_wallclock_limit_waits_for_the_vwn_event_whatever_the_words(agent, monkeypatch, words):
    agent.leases = FakeLeases((Outcome.WALLCLOCK_LIMIT, words))
    monkeypatch.setattr(ce_reconcile, "vwn_finished", lambda agent, job: True)
    job = _running_job(agent, "w1", restarts=False)
    ce_reconcile.reconcile(agent, job)
    assert job.state is CEJobState.RUNNING               # its own done/aborted event is on the way
    monkeypatch.setattr(ce_reconcile, "vwn_finished", lambda agent, job: False)
    ce_reconcile.reconcile(agent, job)
    assert job.state is CEJobState.ABORTED and job.outcome is Outcome.WALLCLOCK_LIMIT


@pytest.mark.parametrize("code", sorted(PENDING))
def test_running_event_clears_a_pending_outcome_whatever_the_words(agent, code):
    job = CEJob(JobRequest("id", "p1", "[]"), None, CEJobState.SCHEDULED)
    job.note(code, "reworded: still waiting for a node")
    agent.jobs["p1"] = job
    agent.node_event({"key": "p1", "event": "running", "vwn": "vwn-x-1", "node": "x"})
    assert job.state is CEJobState.RUNNING and job.reason is None and job.outcome is None
    agent.node_event({"key": "p1", "event": "running", "vwn": "vwn-x-1"})     # a repeat: no change
    agent.node_event({"key": "p1", "event": "aborted", "vwn": "vwn-x-1", "reason": "any words",
                      "outcome": "wrapper-error"})
    assert job.state is CEJobState.ABORTED and job.outcome is Outcome.WRAPPER_ERROR


def test_lease_outcomes_are_codes():
    from vwn_agents.ce_leases import JobLeaseRequest, LeaseScheduling
    req = JobLeaseRequest("best-effort", 25, 256, 10.0, "LeaseDuration")
    view = {"state": "Rejected", "reason": "x", "start_s": None, "end_s": None}
    assert LeaseScheduling.outcome(req, view)[0] is Outcome.LEASE_REJECTED
    view = {"state": "Done", "reason": "", "start_s": 0.0, "end_s": 10.0}
    assert LeaseScheduling.outcome(req, view)[0] is Outcome.WALLCLOCK_LIMIT
    view = {"state": "Queued", "reason": "", "start_s": 0.0, "end_s": None}
    assert LeaseScheduling.outcome(req, view)[0] is Outcome.PREEMPTED
    view = {"state": "Active", "reason": "", "start_s": 0.0, "end_s": None}
    assert LeaseScheduling.outcome(req, view) is None


def test_stalled_is_dirac_s_detour_from_scheduled_and_running():
    """Stalled (issue 11): only a job at a CE can go silent; it comes back, or is resubmitted,
    aborted, cancelled, or its end is heard."""
    from vgrid_runtime.job_states import AT_CE
    S = JobState
    into = {old for old in S if S.STALLED in JOB_STATES.allowed(old)}
    assert into == {S.SCHEDULED, S.RUNNING}
    assert JOB_STATES.allowed(S.STALLED) == {S.SCHEDULED, S.RUNNING, S.WAITING, S.ABORTED,
                                             S.CANCELLED, S.DONE}
    assert S.STALLED in AT_CE and S.STALLED not in JOB_STATES.terminal


def test_a_lease_whose_vms_were_migrated_or_thawed_is_not_taken_for_preempted():
    # between a cold migration (or a thaw) and the start of its resumption reservation the lease
    # is still Suspended in the engine; its VMs run again, so the job must not be requeued
    from vwn_agents.ce_leases import LeaseScheduling
    req = FakeRequest(True)
    view = {"state": "Suspended", "start_s": 10.0, "end_s": None, "reason": "", "frozen": False}
    assert LeaseScheduling.outcome(req, {**view, "vms_kept": False})[0] is Outcome.PREEMPTED
    assert LeaseScheduling.outcome(req, {**view, "vms_kept": True}) is None      # thawed or migrated
    assert LeaseScheduling.outcome(req, {**view, "frozen": True, "vms_kept": True}) is None
