"""The suspend/resume rules of a VWN (``node_suspend._check`` over ``vwn_states.VWN_STATES``) as a
property: any sequence of suspend, resume and end requests either changes the state along the
table, changes nothing (a repeat), or is refused with 409 (or 501 without a freezer)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, strategies as st

from vgrid_runtime.httpjson import ApiError
from vwn_agents.node_suspend import _check
from vwn_agents.vwn_states import ACTIVE, SHARING, VWN_STATES, VWNState

OPS = st.lists(st.sampled_from(["suspend", "resume", "done", "cancelled", "aborted"]), max_size=12)


def agent(freezer: bool = True):
    fz = SimpleNamespace(available=freezer, missing={}, reason="" if freezer else "no freezer here")
    return SimpleNamespace(fz=fz, _stopping=False, config=SimpleNamespace(node="n1"))


@given(start=st.sampled_from([VWNState.STARTING, VWNState.RUNNING]), ops=OPS)
def test_suspend_and_resume_follow_the_state_table(start, ops):
    a, v = agent(), SimpleNamespace(vwn="vwn-n1-1", state=start, cancelled=False)
    for op in ops:
        want = {"suspend": VWNState.SUSPENDED, "resume": VWNState.RUNNING}.get(op)
        before = v.state
        if want is None:                               # the VWN ends (from any live state)
            if before in ACTIVE:
                v.state = VWN_STATES.transition(before, VWNState(op), v.vwn)
            continue
        try:
            changes = _check(a, v, want)
        except ApiError as exc:
            source = VWNState.RUNNING if want is VWNState.SUSPENDED else VWNState.SUSPENDED
            assert exc.status == 409 and before not in (want, source)
            continue
        if not changes:
            assert before is want                      # a repeat: nothing to do
            continue
        v.state = VWN_STATES.transition(before, want, v.vwn)   # never IllegalTransition
    assert (v.state in SHARING) == (v.state in (VWNState.STARTING, VWNState.RUNNING))


def test_no_freezer_is_501_naming_why():
    a, v = agent(freezer=False), SimpleNamespace(vwn="vwn-n1-1", state=VWNState.RUNNING, cancelled=False)
    with pytest.raises(ApiError) as err:
        _check(a, v, VWNState.SUSPENDED)
    assert err.value.status == 501 and "no freezer here" in str(err.value)
