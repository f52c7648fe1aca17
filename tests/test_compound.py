"""Compound requests in the broker: parent state from nodes, DAG release rules (pure logic)."""
from hypothesis import given, strategies as st

from broker.compound import nodes_to_release, parent_target, path_to
from broker.db import Job
from vgrid_runtime.job_states import ENDED, TRANSITIONS, JobState

S = JobState


def job(key, state, exit_code=None, depends_on=(), name=None):
    return Job(key=key, jdl="", filename="f", state=state, submitted_at=0, updated_at=0,
               exit_code=exit_code, depends_on=list(depends_on), node_name=name or key, kind="node")


def test_parent_follows_nodes():
    assert parent_target([job("a", S.WAITING), job("b", S.SCHEDULED)]) == (None, None)
    assert parent_target([job("a", S.RUNNING), job("b", S.WAITING)])[0] is S.RUNNING
    assert parent_target([job("a", S.DONE, 0), job("b", S.DONE, 3)])[0] is S.DONE
    state, reason = parent_target([job("a", S.DONE, 0), job("b", S.ABORTED)])
    assert state is S.ABORTED and "1 of 2 nodes did not end Done: b (Aborted)" == reason
    assert parent_target([job("a", S.CANCELLED), job("b", S.DONE)])[0] is S.CANCELLED


def test_dag_release_needs_every_parent_done_with_exit_0():
    a, b = job("a", S.DONE, 0), job("b", S.RUNNING)
    c = job("c", S.SUBMITTED, depends_on=["a", "b"])
    assert nodes_to_release([c], {"a": a, "b": b, "c": c}) == ([], [])
    b = job("b", S.DONE, 0)
    assert nodes_to_release([c], {"a": a, "b": b, "c": c}) == ([c], [])
    b = job("b", S.DONE, 2)
    ready, doomed = nodes_to_release([c], {"a": a, "b": b, "c": c})
    assert ready == [] and doomed == [(c, "DAG dependency did not succeed: b (Done, exit code 2)")]


@given(st.lists(st.sampled_from(list(JobState)), min_size=1, max_size=8),
       st.sampled_from([S.WAITING, S.RUNNING]))
def test_parent_path_is_always_legal(states, current):
    nodes = [job(str(i), s, 0) for i, s in enumerate(states)]
    target, _ = parent_target(nodes)
    if target is None:
        return
    if target is S.RUNNING:
        assert any(s in (S.RUNNING, S.DONE, S.CLEARED) for s in states)
    if target in ENDED:
        assert all(s in ENDED for s in states)
    state = current
    for step in path_to(current, target):
        assert step in TRANSITIONS[state], (state, step)
        state = step
    assert state is target or current is target
