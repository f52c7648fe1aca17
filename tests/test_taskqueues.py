"""Task queues (issue 12): the class-based matcher agrees with the per-job matcher.

Both matchers are driven with the same seed over the same random workload (JDLs from a small
pool, random CE ads, owners, exclusions, ISM refreshes that replace the ads and reset the
feedback counters); after each choice the chosen CE's feedback counter is incremented, as the
broker does. The sequences of chosen CEs must be identical.
"""
import random

from hypothesis import HealthCheck, given, settings, strategies as st

import jdl as jdlmod
from broker.matchmaker import Matchmaker
from broker.taskqueues import TaskQueues, signature, text_signature
from infosys.feedback import FeedbackCounters

POOL = [
    '[ Executable = "/bin/true"; Arguments = "{i}"; ]',
    '[ Executable = "/bin/true"; Arguments = "{i}"; Requirements = other.GlueCEInfoTotalCPUs >= 4; ]',
    '[ Executable = "/bin/true"; Arguments = "{i}"; Requirements = other.GlueCEInfoTotalCPUs >= MinCPUs; '
    'MinCPUs = {m}; Rank = other.GlueCEStateFreeCPUs; FeteRank = false; ]',
    '[ Executable = "/bin/true"; Arguments = "{i}"; Rank = -other.GlueCEStateWaitingJobs; FeteRank = false; ]',
    '[ Executable = "/bin/true"; Arguments = "{i}"; Rank = other.GlueCEStateFreeCPUs; FuzzyRank = true; ]',
    '[ Executable = "/bin/true"; Arguments = "{i}"; Rank = other.GlueCEStateFreeCPUs / 2; FuzzyRank = true; '
    'FeteRank = false; ]',
    '[ Executable = "/bin/true"; Arguments = "{i}"; VirtualOrganisation = "{vo}"; FeteRank = true; ]',
    '[ Executable = "/bin/true"; Arguments = "{i}"; Requirements = other.GlueHostBenchmarkSI00 > {m} * 100 '
    '&& other.GlueCEStateStatus == "Production"; ]',
    '[ Executable = "/bin/true"; Arguments = "{i}"; Requirements = member("{vo}", other.Tags); ]',
    '[ Executable = "/bin/true"; Arguments = "{i}"; Rank = other.GlueCEStateFreeCPUs; ]',
]
VOS = ["dteam", "atlas", "cms"]


def ce_ads(draw_rng: random.Random, n: int, generation: int) -> tuple:
    ads = []
    for j in range(n):
        vos = draw_rng.sample(VOS, draw_rng.randint(0, 3))
        ads.append({
            "GlueCEUniqueID": f"ce{j}.example.org:8443/cream-pbs-q",
            "GlueCEInfoTotalCPUs": draw_rng.choice([0, 1, 2, 4, 8, 8, 16]),
            "GlueHostBenchmarkSI00": draw_rng.choice([500, 1000, 1000, 2000]),
            "GlueCEStateTotalJobs": draw_rng.choice([0, 0, 1, 3, 10]),
            "GlueCEStateWaitingJobs": draw_rng.choice([0, 1, 2, 5]),
            "GlueCEStateFreeCPUs": draw_rng.choice([0, 1, 2, 2, 8]),
            "GlueCEStateStatus": draw_rng.choice(["Production", "Production", "Draining"]),
            "GlueCEAccessControlBaseRule": [f"VO:{v}" for v in vos] + (
                ["VOMS:/atlas/Role=production"] if draw_rng.random() < 0.3 else []),
            "Tags": vos,
            "Generation": generation,
        })
    return tuple(ads)


@st.composite
def workloads(draw):
    seed = draw(st.integers(0, 2 ** 32 - 1))
    n_ces = draw(st.integers(1, 12))
    policy = draw(st.sampled_from(["sfete", "max", "fuzzy"]))
    steps = draw(st.lists(st.tuples(
        st.integers(0, len(POOL) - 1),              # JDL
        st.integers(0, 3),                          # MinCPUs / benchmark parameter
        st.sampled_from([None] + VOS),              # owner VO (None: from the JDL)
        st.booleans(),                              # owner has the production role
        st.lists(st.integers(0, 11), max_size=2),   # excluded CEs
        st.integers(0, 30),                         # < 2: an ISM refresh first
    ), min_size=1, max_size=60))
    return seed, n_ces, policy, steps


def run(matcher: str, seed: int, n_ces: int, policy: str, steps) -> list:
    feedback = FeedbackCounters()
    mm = Matchmaker(feedback, default_policy=policy, rng=random.Random(seed))
    queues = TaskQueues(mm)
    ad_rng = random.Random(seed ^ 0x5EED)
    ads = ce_ads(ad_rng, n_ces, 0)
    chosen = []
    for i, (which, m, vo, role, excl, refresh) in enumerate(steps):
        if refresh < 2:
            ads = ce_ads(ad_rng, n_ces, i) if refresh == 0 else tuple(ads)   # new tuple, same dicts
            feedback.reset()
        text = POOL[which].format(i=i, m=m, vo=VOS[m % 3])
        desc = jdlmod.parse_jdl(text, "w.jdl", local_files=False)
        fqans = (f"/{vo}", f"/{vo}/Role=production") if vo and role else ((f"/{vo}",) if vo else ())
        exclude = {f"ce{k}.example.org:8443/cream-pbs-q" for k in excl}
        if matcher == "per-job":
            c = mm.select(mm.match(desc, ads, now=1000.0, vo=vo, fqans=fqans, exclude=exclude))
        else:
            c = queues.choose(desc, ads, now=1000.0, vo=vo, fqans=fqans, exclude=exclude)
        if c is not None:
            feedback.increment(c.ce_id)
        chosen.append(None if c is None else (c.ce_id, c.n_jobs))
    return chosen


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_class_matcher_agrees_with_per_job_matcher(work):
    assert run("classes", *work) == run("per-job", *work)


def test_agreement_holds_when_the_classes_restart():
    """With room for 2 classes only (they restart often) the choices are still the same."""
    import broker.taskqueues as tq
    saved = tq.MAX_CLASSES
    tq.MAX_CLASSES = 2
    try:
        for seed in range(40):
            r = random.Random(seed)
            steps = [(r.randrange(len(POOL)), r.randrange(4), r.choice([None] + VOS), r.random() < 0.5,
                      [r.randrange(12)] if r.random() < 0.2 else [], r.randrange(40)) for _ in range(50)]
            work = (seed, r.randint(1, 12), r.choice(["sfete", "max", "fuzzy"]), steps)
            assert run("classes", *work) == run("per-job", *work)
    finally:
        tq.MAX_CLASSES = saved


def test_one_class_is_matched_once_per_snapshot():
    feedback = FeedbackCounters()
    mm = Matchmaker(feedback, rng=random.Random(1))
    queues = TaskQueues(mm)
    ads = ce_ads(random.Random(2), 20, 0)
    for i in range(200):
        desc = jdlmod.parse_jdl(POOL[i % 2].format(i=i), "w.jdl", local_files=False)
        c = queues.choose(desc, ads, now=0.0)
        feedback.increment(c.ce_id)
    assert queues.matched == 2 and len(queues) == 2 and queues.per_job == 0


def test_classes_with_the_same_candidates_share_one_sfete_order():
    """Session 7: classes whose Requirements keep the same CEs share one SFETE order (one move
    per dispatch, not one per class) and still choose what the per-job matcher chooses."""
    texts = ['[ Executable = "/bin/true"; Arguments = "{i}"; Requirements = other.GlueCEInfoTotalCPUs >= 0; ]',
             '[ Executable = "/bin/true"; Arguments = "{i}"; Requirements = other.GlueHostBenchmarkSI00 > 0; ]',
             '[ Executable = "/bin/true"; Arguments = "{i}"; Requirements = other.GlueCEInfoTotalCPUs >= 4; ]']
    ads = ce_ads(random.Random(3), 40, 0)
    chosen = {}
    for matcher in ("classes", "per-job"):
        feedback = FeedbackCounters()
        mm = Matchmaker(feedback, default_policy="sfete", rng=random.Random(9))
        queues = TaskQueues(mm)
        seq = []
        for i in range(300):
            desc = jdlmod.parse_jdl(texts[i % 3].format(i=i), "w.jdl", local_files=False)
            c = (queues.choose(desc, ads, now=0.0) if matcher == "classes"
                 else mm.select(mm.match(desc, ads, now=0.0)))
            feedback.increment(c.ce_id)
            seq.append((c.ce_id, c.n_jobs))
        chosen[matcher] = seq
        if matcher == "classes":
            assert queues.matched == 3 and len(queues._orders) == 2
    assert chosen["classes"] == chosen["per-job"]


def test_signature_reads_what_the_match_reads():
    parse = lambda t: jdlmod.parse_jdl(t, "s.jdl", local_files=False)  # noqa: E731
    a = parse('[ Executable = "/bin/a"; Arguments = "1"; Requirements = other.X > MinX; MinX = 2; ]')
    b = parse('[ Executable = "/bin/b"; Arguments = "2"; Requirements = other.X > MinX; MinX = 2; ]')
    c = parse('[ Executable = "/bin/a"; Requirements = other.X > MinX; MinX = 3; ]')
    assert text_signature(a) == text_signature(b) != text_signature(c)
    # the owner and the exclusions are part of it
    assert signature(a, "dteam", ("/dteam",), ()) != signature(a, "atlas", ("/atlas",), ())
    assert signature(a, None, (), {"x"}) != signature(a, None, (), ())
    # a match that reads the clock or the dispatch counters is made per job
    assert text_signature(parse('[ Executable = "/bin/a"; Requirements = time() > 0; ]')) is None
    assert text_signature(parse('[ Executable = "/bin/a"; Rank = -other.VGridDispatchedSinceRefresh; ]')) is None
    # eval() can read any attribute: the whole record is the signature
    d = parse('[ Executable = "/bin/a"; Requirements = eval("other.X > 1"); ]')
    e = parse('[ Executable = "/bin/b"; Requirements = eval("other.X > 1"); ]')
    assert text_signature(d) != text_signature(e)


def test_live_broker_matches_each_class_once(tmp_path):
    """A real broker on loopback dispatching to two receivers: 12 jobs (each its own JDL text)
    in 2 classes are matched with 2 filtering runs, and SFETE spreads them evenly over the two
    equal CEs (the feedback counters move between the jobs of a class)."""
    import requests

    from broker.service import BrokerSettings
    from vgrid_runtime.clock import SimulatedClock

    from .broker_site import start_broker
    from .test_broker_api import ce_ad, wait_state
    from .test_broker_blacklist import FakeCE

    ces = [FakeCE(), FakeCE()]
    ads = [{**ce_ad(f"ce-{i}:8443/vgrid-vwn-long", 4, 1000), "GlueCEInfoContactString": [ce.url]}
           for i, ce in enumerate(ces)]
    server, broker = start_broker(tmp_path, ads, SimulatedClock(1000.0),
                                  BrokerSettings(match_interval_s=0.05))
    try:
        keys = []
        for i in range(12):
            req = "other.GlueCEInfoTotalCPUs >= 2" if i % 2 else "other.GlueHostBenchmarkSI00 > 10"
            jdl = f'Executable = "/bin/true"; Arguments = "{i}"; Requirements = {req};'
            keys.append(requests.post(f"{server.url}/jobs", data={"jdl": jdl, "filename": "t.jdl"},
                                      timeout=5).json()["key"])
        jobs = [wait_state(server.url, k, {"Scheduled", "Aborted"}) for k in keys]
        assert {j["state"] for j in jobs} == {"Scheduled"}
        assert broker.queues.matched == 2 and broker.queues.per_job == 0
        assert [c.submissions for c in ces] == [6, 6]
    finally:
        broker.stop()
        server.close()
        for ce in ces:
            ce.server.close()
        broker.store.close()
