"""Class ids stored at submission (issue 12): the matcher parses one job per class.

The submission stores each plain job's class id and input sandbox
(:func:`broker.taskqueues.match_fields`); the matcher then parses only the first job of each
class it meets, and rows of an older broker (no class stored) are parsed once and written
back. The choices equal those of the per-job matcher (hypothesis, with stored ids and
representatives standing in for the jobs' own parsed JDL).
"""
from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings

import jdl as jdlmod
from broker import matcher_worker
from broker.matchmaker import Matchmaker
from broker.taskqueues import PER_JOB, TaskQueues, class_id, match_fields, text_signature
from infosys.feedback import FeedbackCounters
from vgrid_runtime.job_states import JobState

from .test_matcher_worker import make_broker, simulated_site
from .test_taskqueues import POOL, VOS, ce_ads, workloads

JOB = ('[ Executable = "/bin/sh"; Arguments = "{i}"; InputSandbox = {{"in{i}.txt"}};\n'
       '  Requirements = other.GlueCEInfoTotalCPUs >= {c}; Rank = -other.GlueCEStateWaitingJobs; ]')


def parse(text: str):
    return jdlmod.parse_jdl(text, "t.jdl", local_files=False)


def test_class_ids_name_signatures():
    texts = [POOL[w].format(i=i, m=m, vo=VOS[m % 3]) for w in range(len(POOL)) for i in (1, 2) for m in (0, 1)]
    descs = [parse(t) for t in texts]
    for a in descs:
        for b in descs:
            assert (class_id(a) == class_id(b)) == (text_signature(a) == text_signature(b))
    assert class_id(parse('[ Executable = "/bin/a"; Requirements = time() > 0; ]')) == PER_JOB
    assert len(class_id(descs[0])) == 32


def _counting_parse(monkeypatch) -> list:
    calls: list = []
    real = matcher_worker.jdlmod.parse_jdl

    def counted(*a, **kw):
        calls.append(a[0])
        return real(*a, **kw)

    monkeypatch.setattr(matcher_worker.jdlmod, "parse_jdl", counted)
    return calls


def _spy_dispatch(broker) -> list:
    sent: list = []
    real = broker.dispatcher.dispatch

    def dispatch(target, batch):
        sent.extend(broker.dispatcher.body(job, payload) for job, payload in batch)
        return real(target, batch)

    broker.dispatcher.dispatch = dispatch
    return sent


def test_submitted_jobs_are_matched_without_parsing_each(tmp_path, monkeypatch):
    """60 jobs (each its own text) in 2 classes through the submission path, one collection of
    3 nodes in 2 classes: the matcher parses 4 JDLs, dispatches every job with its own input
    sandbox."""
    ces, server, ads = simulated_site(4)
    broker = make_broker(tmp_path, f"sqlite:///{tmp_path / 'jobs.db'}", ads, seed=3)
    broker.settings.base_url = "https://broker.example.org:8440"
    try:
        broker.ism.refresh()
        keys = []
        for i in range(60):
            name = f"in{i}.txt"
            job, _ = broker.submit_once(JOB.format(i=i, c=4 + i % 2), "t.jdl", {name: b"x"})
            keys.append(job.key)
            stored = broker.store.get(job.key)
            assert stored.input_sandbox == [name] and len(stored.match_class) == 32
        coll = ('[ Type = "collection"; InputSandbox = {"shared.txt"}; Nodes = {\n'
                '  [ Executable = "/bin/a"; Requirements = other.GlueCEInfoTotalCPUs >= 5; ],\n'
                '  [ Executable = "/bin/b"; Requirements = other.GlueCEInfoTotalCPUs >= 5; ],\n'
                '  [ Executable = "/bin/c"; Requirements = other.GlueCEInfoTotalCPUs >= 4; ] }; ]')
        parent, _ = broker.submit_once(coll, "c.jdl", {"shared.txt": b"s"})
        nodes = sorted(broker.store.list(parent=parent.key), key=lambda n: n.node_name)
        assert [n.input_sandbox for n in nodes] == [["shared.txt"]] * 3
        assert nodes[0].match_class == nodes[1].match_class != nodes[2].match_class
        calls = _counting_parse(monkeypatch)
        sent = _spy_dispatch(broker)
        done = matcher_worker.match_pass(broker, broker.store)
        assert done == 63
        assert len(calls) == 4      # one JDL per class: 2 classes of jobs, 2 of nodes
        by_id = {b["job_id"]: b for b in sent}
        for i, k in enumerate(keys):
            names = [u["name"] for u in by_id[broker.job_id(k)]["input_sandbox"]]
            assert names == [f"in{i}.txt"]
        assert all(broker.store.get(k).state is JobState.SCHEDULED for k in keys)
    finally:
        broker.store.close()
        server.close()


def test_rows_without_a_class_are_parsed_once_and_written_back(tmp_path, monkeypatch):
    """Rows an older broker stored (no class id) still match; their class is computed once
    and stored, equal to what the submission path stores."""
    ces, server, ads = simulated_site(3)
    broker = make_broker(tmp_path, f"sqlite:///{tmp_path / 'jobs.db'}", ads, seed=4)
    broker.settings.base_url = "https://broker.example.org:8440"
    try:
        broker.ism.refresh()
        texts = [JOB.format(i=i, c=4 + i % 2) for i in range(20)]
        jobs = broker.store.create_many([{"jdl": t, "filename": "t.jdl", "state": JobState.WAITING}
                                         for t in texts], 1000.0)
        assert all(j.match_class is None for j in jobs)
        calls = _counting_parse(monkeypatch)
        sent = _spy_dispatch(broker)
        assert matcher_worker.match_pass(broker, broker.store) == 20
        assert len(calls) == 20
        for j, t in zip(jobs, texts):
            stored = broker.store.get(j.key)
            assert {"match_class": stored.match_class, "input_sandbox": stored.input_sandbox} == \
                match_fields(parse(t), t)
        assert sorted(u["name"] for b in sent for u in b["input_sandbox"]) == sorted(f"in{i}.txt" for i in range(20))
    finally:
        broker.store.close()
        server.close()


def run_stored(seed: int, n_ces: int, policy: str, steps) -> list:
    """test_taskqueues.run with each job's class id computed at "submission" and the matcher
    handed the first parsed job of the class (its representative), as the matcher worker does."""
    feedback = FeedbackCounters()
    mm = Matchmaker(feedback, default_policy=policy, rng=random.Random(seed))
    queues = TaskQueues(mm)
    ad_rng = random.Random(seed ^ 0x5EED)
    ads = ce_ads(ad_rng, n_ces, 0)
    chosen = []
    for i, (which, m, vo, role, excl, refresh) in enumerate(steps):
        if refresh < 2:
            ads = ce_ads(ad_rng, n_ces, i) if refresh == 0 else tuple(ads)
            feedback.reset()
        text = POOL[which].format(i=i, m=m, vo=VOS[m % 3])
        desc = parse(text)
        klass = match_fields(desc, text)["match_class"]
        rep = queues.representative(klass)
        if rep is None:
            queues.remember(klass, desc)
            rep = desc
        fqans = (f"/{vo}", f"/{vo}/Role=production") if vo and role else ((f"/{vo}",) if vo else ())
        exclude = {f"ce{k}.example.org:8443/cream-pbs-q" for k in excl}
        c = queues.choose(rep, ads, now=1000.0, vo=vo, fqans=fqans, exclude=exclude, klass=klass)
        if c is not None:
            feedback.increment(c.ce_id)
        chosen.append(None if c is None else (c.ce_id, c.n_jobs))
    return chosen


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_stored_classes_agree_with_the_per_job_matcher(work):
    from .test_taskqueues import run
    assert run_stored(*work) == run("per-job", *work)

