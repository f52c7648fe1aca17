"""Cold migration of a libvirt VWN between two node agents (seed 002, Section 3: suspend,
transfer the memory image, resume elsewhere).

``migrate(src, vwn, dst)``: ``src`` and ``dst`` are ``NodeAgent``s with the ``libvirt`` driver in
one process (a direct directory copy; tests and tools). Between node agents -- other hosts, or
the CE agent's lease engine -- the same steps go over HTTPS: ``node_migration`` (the node
endpoints) and ``ce_migration`` (the CE side). Steps, each measured:

1. on A, suspend the VWN (pause + save its memory image, ``node_suspend.suspend``: a
   ``suspended`` event) unless it already is;
2. copy its directory (memory image, the initramfs carrying the job, channel and console; a disk
   overlay would travel the same way) into B's ``vm_dir`` and restore it there under a new VWN
   name of B (a new record, same request and owner, state starting -> running when the guest's
   channel says so; B's monitor then watches it to its end, stage out and events as usual);
3. end the VWN on A as cancelled with reason ``migrated to node B as <vwn>`` (no ``done``
   event from A; the job's end comes from B).

The returned dict: ``{"vwn": <B's VWN>, "save_s", "copy_s", "restore_s", "mb"}``.
Errors: ApiError 409 (not running/suspended, or not a libvirt VWN), 503 (libvirt failed; the
VWN stays suspended on A).
"""
from __future__ import annotations

from vgrid_runtime.httpjson import ApiError
from vgrid_runtime.outcomes import Outcome

from .. import fairshare, node_suspend
from ..pool_accounts import AccountError, Owner
from ..vwn_model import VWN
from ..vwn_states import VWNState
from ..vwn_process import start_time
from .libvirt_driver import VMError


def migrate(src, vwn: str, dst) -> dict:
    """Module doc."""
    if not (src.driver.kind == dst.driver.kind == "libvirt"):
        raise ApiError(409, f"cannot migrate {vwn}: both nodes need the libvirt driver")
    v = src.get(vwn)
    if v.state not in (VWNState.RUNNING, VWNState.SUSPENDED):
        raise ApiError(409, f"cannot migrate {vwn}: it is {v.state.value}")
    before = src.driver.vms.last_save
    node_suspend.suspend(src, vwn)
    save = src.driver.vms.last_save if src.driver.vms.last_save is not before else None
    path = src.driver.vms.export(vwn)
    with dst._lock:
        name = f"vwn-{dst.config.node}-{dst._store_call(dst.store.next_number)}"
        try:
            jail = dst.conf.open(name, Owner.from_json(v.request.owner), v.request.memory_mb)
        except AccountError as exc:
            raise ApiError(503, f"no pool account on {dst.config.node}: {exc}") from None
        share = fairshare.vwn_cap(dst.config.capacity, len(dst.sharing()))
        w = VWN(name, v.request, VWNState.STARTING, dst.clock.now(), True, None, jail=jail,
                agent_pid=None)
        dst.store.insert(w)
        dst.vwns[name] = w
        dst.by_key[v.request.key] = name
        dst._readjust(share, arriving=w)
        try:
            copy_s, restore = dst.driver.vms.import_(name, path, vwn, share)
        except VMError as exc:
            w.fail(Outcome.WRAPPER_ERROR, f"migration from {src.config.node} failed: {exc}")
            dst._launch(w)                       # ends it (no domain), reported aborted
            raise ApiError(503, f"cannot restore {vwn} on {dst.config.node}: {exc}") from None
        pid = dst.driver.vms.qemu_pid(name)
        w.wrapper_pid, w.wrapper_start = pid, start_time(pid) if pid else None
        dst._save(w)
        dst._launch(w)
    src.driver.vms.left.add(vwn)                 # one libvirtd may host both: keep its hands off
    src.delete_vwn(vwn, reason=f"migrated to node {dst.config.node} as {name}")
    return {"vwn": name, "save_s": round(save.seconds, 3) if save else None,
            "copy_s": round(copy_s, 3), "restore_s": round(restore.seconds, 3),
            "mb": round(restore.mb, 1)}
