"""slotfit.first_fit (issue 16, session 10): the chunked candidate-start test gives the first start
and the row of free slots that the whole (starts x slots) matrix gives, for chunks of 8, 32, ..."""
import numpy as np
from hypothesis import given, settings, strategies as st

from vwn_agents.leasing.slotfit import first_fit

INF = np.inf


def whole_matrix(A, B, S, n, length=None, ends=None, ready=None):
    end = S[:, None] + length if ends is None else ends[:, None]
    ok = (A[None, :] <= S[:, None]) & (B[None, :] >= end) & (B[None, :] > S[:, None])
    if ready is not None:
        ok &= ready[None, :] <= S[:, None]
    hits = np.nonzero(ok.sum(axis=1) >= n)[0]
    return None if len(hits) == 0 else (int(hits[0]), ok[int(hits[0])])


times = st.integers(0, 60).map(float)


@settings(max_examples=300, deadline=None)
@given(slots=st.lists(st.tuples(times, st.integers(0, 40), st.booleans(), times), min_size=1, max_size=60),
       starts=st.lists(times, min_size=1, max_size=200), n=st.integers(1, 6), length=st.integers(0, 20),
       mode=st.sampled_from(["length", "ends", "ready"]))
def test_first_fit_equals_the_whole_matrix(slots, starts, n, length, mode):
    A = np.array([a for a, _, _, _ in slots])
    B = np.array([INF if open_end else a + d for a, d, open_end, _ in slots])
    S = np.unique(np.array(starts))
    ready = np.array([r for _, _, _, r in slots]) if mode == "ready" else None
    ends = np.minimum(S + length, 30.0) if mode == "ends" else None
    kw = dict(length=None if mode == "ends" else float(length), ends=ends, ready=ready)
    got, want = first_fit(A, B, S, n, **kw), whole_matrix(A, B, S, n, **kw)
    assert (got is None) == (want is None)
    if got is not None:
        assert got[0] == want[0] and (got[1] == want[1]).all()


def test_a_start_past_the_first_chunks_is_found():
    # 200 starts, one slot free only from t = 150: the chunks of 8 and 32 have no fit
    A, B = np.array([150.0, 0.0]), np.array([INF, 10.0])
    S = np.arange(200, dtype=float)
    got = first_fit(A, B, S, 1, 5.0)
    assert got[0] == 0 and got[1].tolist() == [False, True]
    assert first_fit(A, B, S, 2, 5.0) is None
    got = first_fit(A, B, S, 1, 20.0)
    assert got[0] == 150 and got[1].tolist() == [True, False]
