"""VWN drivers (issue 14): what a VWN is -- a process tree in cgroups or a libvirt VM.

``open_driver`` picks the node agent's driver from its configuration (``driver`` option); the
interface is ``base.VWNDriver`` (docs/vwn.md, "Drivers").
"""
from __future__ import annotations

from .base import VWNDriver


def open_driver(config, cpu, resumed: list) -> VWNDriver:
    """The driver of a node agent: ``config`` its NodeAgentConfig, ``cpu`` a ``cgroups.CpuCgroups``
    to use (tests) or None, ``resumed`` the VWNs a restarted agent adopts. RuntimeError (libvirt:
    what is missing)."""
    if config.driver == "libvirt":
        from .libvirt_vwn import open_libvirt
        return open_libvirt(config)
    from .. import cgroups, node_recovery, node_suspend
    from .cgroup import CgroupDriver
    cg = cpu or cgroups.open_cpu_cgroups(config.node, config.cgroup, config.cgroup_parent,
                                         keep=node_recovery.claimed(resumed))
    return CgroupDriver(cg, node_suspend.open_freezer(config, cg, resumed))
