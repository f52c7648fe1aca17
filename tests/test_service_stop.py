"""``ServiceGroup.stop_all``: the services stop in the direction events flow (node agents, CE
agents, then the rest), one kind at a time, and a service that outlives its grace period is
SIGKILLed and named (docs/operations.md, "Stopping a site")."""
from __future__ import annotations

import subprocess

from vgrid_cli import services
from vgrid_cli.services import Service, ServiceGroup


def _fake(group: ServiceGroup, kind: str, name: str, record, ignore_term: bool = False) -> None:
    """A process standing for a service: it writes its name to ``record`` on SIGTERM, then exits
    (or ignores SIGTERM). Started in its own session, as ``ServiceGroup`` starts services."""
    trap = "" if ignore_term else f'echo {name} >> {record}; exit 0'
    script = f"trap '{trap}' TERM; echo up > {record}.{name}; while :; do sleep 0.2; done"
    proc = subprocess.Popen(["/bin/sh", "-c", script], start_new_session=True)
    group.services.append(Service(name, proc, "", record, kind))


def test_stop_all_stops_node_agents_then_ce_agents_then_the_broker(tmp_path, monkeypatch):
    from .waiting import wait_until
    record = tmp_path / "stopped"
    group = ServiceGroup(tmp_path)
    for kind, name in [("node", "wn1"), ("node", "wn2"), ("ce", "ce1"), ("broker", "broker"),
                       ("node", "wn3"), ("ce", "ce2")]:       # started in any order
        _fake(group, kind, name, record)
    _fake(group, "node", "stuck", record, ignore_term=True)
    wait_until(lambda: len(list(tmp_path.glob("stopped.*"))) == 7, "the 7 processes to start")
    monkeypatch.setattr(services, "STOP_GRACE_S", 2.0)
    procs = [s.process for s in group.services]
    group.stop_all()
    order = record.read_text().split()
    kinds = {"wn1": "node", "wn2": "node", "wn3": "node", "ce1": "ce", "ce2": "ce", "broker": "broker"}
    assert [kinds[n] for n in order] == ["node"] * 3 + ["ce"] * 2 + ["broker"], order
    assert group.killed == ["stuck"] and group.services == []
    assert group.stop_s is not None and group.stop_s >= 2.0       # the stuck one's grace
    assert all(p.poll() is not None for p in procs)
