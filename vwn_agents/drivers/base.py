"""The VWN driver interface: what a node agent asks of the thing a VWN runs in (issue 14).

Two implementations, chosen by the node agent's ``driver`` option (docs/vwn.md, "Drivers"):

* ``cgroup`` (``drivers.cgroup.CgroupDriver``, the default): the VWN is the job wrapper's process
  tree in its own cgroups, capped with ``cpu.max``/``cpu.cfs_quota_us`` (``cgroups``), suspended
  with the cgroup freezer (``freezer``); the node agent starts and watches the wrapper itself;
* ``libvirt`` (``drivers.libvirt_vwn.LibvirtDriver``): the VWN is a qemu domain (one vCPU capped
  with ``<cputune>`` quota/period, ``VMMemory`` MB), suspended by saving its memory image to disk;
  the driver runs the job inside the guest (``runs_jobs``; ``drivers.vm_job``).

A driver also presents the two narrower faces the node agent's modules already use: ``cg`` (the
CPU-cap face of ``cgroups.CpuCgroups``: create, set_cap, read_cap, kill, remove, adopt, ...)
and ``fz`` (the suspend face of ``freezer.Freezer``: freeze, thaw, available, missing, ...), so
``node_agent``, ``node_suspend`` and ``node_recovery`` drive either without knowing which.
"""
from __future__ import annotations

from abc import ABC, abstractmethod


class VWNDriver(ABC):
    """One node agent's VWN driver (module doc). ``kind``: "cgroup" or "libvirt"; ``why``: one
    line saying what it uses and why (e.g. "libvirt, TCG: /dev/kvm present but unusable")."""

    kind: str = ""
    why: str = ""
    #: True when the driver runs the job itself (the node agent does not start the wrapper).
    runs_jobs: bool = False

    @property
    @abstractmethod
    def cg(self):
        """The CPU-cap face (``cgroups.CpuCgroups`` methods)."""

    @property
    @abstractmethod
    def fz(self):
        """The suspend face (``freezer.Freezer`` methods)."""

    def describe(self) -> dict:
        """``{"kind", "why", ...}`` for GET /status."""
        return {"kind": self.kind, "why": self.why}

    # The lifecycle, in the driver's own words (seed 004 Section 5.1 caps; seed 000/002 suspend).
    def create(self, vwn: str) -> None:
        """Prepare the VWN's container (cgroups; a domain is started with its job)."""
        self.cg.create(vwn)

    def set_cap(self, vwn: str, fraction: float) -> None:
        """Cap the VWN at ``fraction`` of one core (CPU fraction)."""
        self.cg.set_cap(vwn, fraction)

    def read_cap(self, vwn: str) -> float | None:
        """The cap as the kernel / libvirt has it (CPU fraction), None when unknown."""
        return self.cg.read_cap(vwn)

    def suspend(self, vwn: str) -> None:
        """Stop the VWN where it is (freeze; pause + save memory)."""
        self.fz.freeze(vwn)

    def resume(self, vwn: str) -> None:
        """Let it continue from there (thaw; restore + unpause)."""
        self.fz.thaw(vwn)

    def destroy(self, vwn: str) -> None:
        """Kill every process / the domain of the VWN at once (suspended too)."""
        self.fz.kill(vwn)
        self.cg.kill(vwn)

    def adopt(self, vwn: str, home: str | None) -> None:
        """After an agent restart: take over the VWN's container made by an earlier agent."""
        if home:
            self.cg.adopt(vwn, home)

    @abstractmethod
    def state(self, vwn: str) -> str:
        """"running", "suspended" or "gone" (as the driver sees it, not the database)."""
