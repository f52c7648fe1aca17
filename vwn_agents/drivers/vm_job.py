"""A job in a libvirt VWN: stage in, boot the guest with the job, watch, collect, stage out.

``run(agent, v)`` is the node agent's monitor thread body for the ``libvirt`` driver (the
``cgroup`` driver's is ``NodeAgent._run``; ``_finish`` ends both). Steps:

1. stage in the input sandbox into the VWN's work directory on the host (``confinement``);
2. build the job archive (``guest.job_archive``: run.sh from Executable / Arguments /
   Environment / StdInput, the input files, the names to send back: StdOutput, StdError,
   OutputSandbox) and start the domain, booting from the overlay of the request's ``image``
   when it names one (``images.vwn_disk``), with ``VMMemory`` MB (the request's ``memory_mb``, else
   the node's ``vm_memory_mb``; at least ``MIN_MEMORY_MB``, what the guest needs to boot) and
   the cap the node agent computed; its qemu pid and start time are recorded (the "wrapper" of
   the VWN: a restarted agent adopts the domain, ``node_recovery``);
3. watch the channel (``VGRID-RUNNING`` -> the ``running`` event; the time from the start
   to it is the boot time, ``last_boot_s`` in GET /status ``driver``) and the domain (every
   ``POLL_S``) until it has powered off; a suspended (saved) domain is waited for;
4. the guest's ``VGRID-RESULT`` exit code -> ``done``; the output files it sent are written into
   the work directory (only the names asked for, plain files) and staged out as usual; no result
   (the guest crashed, was destroyed, its channel is too large) -> ``aborted`` (wrapper-error,
   naming the console log).
"""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from vgrid_runtime.outcomes import Outcome

from ..images import vwn_disk
from ..jobpaths import PathError, check_relative
from ..vwn_process import stage_in_and_start, start_time, write_spec
from ..vwn_states import VWNState
from .guest import job_archive, parse_channel
from .libvirt_driver import VMError

log = logging.getLogger(__name__)

POLL_S = 0.25
MIN_MEMORY_MB = 128


def _outputs(r) -> list[str]:
    names = [n for n in (r.std_output, r.std_error) if n]
    return list(dict.fromkeys(names + list(r.output_sandbox)))


def _start(agent, v) -> None:
    drv, r = agent.driver, v.request
    spec = write_spec(v)
    try:
        cpio = job_archive(spec, v.jail.workdir, _outputs(r))
    except ValueError as exc:
        v.fail(Outcome.WRAPPER_ERROR, str(exc))
        return
    if r.image and getattr(drv.vms.guest, "disk", None) is not None:      # its one disk is its root
        v.fail(Outcome.WRAPPER_ERROR, f"cannot start the VWN's VM: the {agent.config.guest} guest boots "
                                      f"from its root disk; a pool image disk ({r.image}) is not supported")
        return
    memory = max(MIN_MEMORY_MB, r.memory_mb or drv.memory_mb)
    cap = v.cpu_caps[-1][1] if v.cpu_caps else agent.config.capacity
    drv.vms.destroy(v.vwn)                         # a domain an earlier agent started unrecorded
    try:
        pid = drv.vms.start(v.vwn, cpio, memory, cap, disk=_disk(agent, v))
    except VMError as exc:
        v.fail(Outcome.WRAPPER_ERROR, f"cannot start the VWN's VM: {exc}")
        return
    with agent._lock:
        v.wrapper_pid, v.wrapper_start = pid, start_time(pid) if pid else None
        agent._save(v)


def _disk(agent, v) -> Path | None:
    """The VWN's overlay (``images.vwn_disk``), None without an image; VMError when its image
    was named but the overlay is gone."""
    path = vwn_disk.disk(agent, v)
    if v.request.image and path is None:
        raise VMError(f"{v.vwn}: the overlay of image {v.request.image!r} is missing")
    return Path(path) if path else None


def _write_outputs(agent, v, files: dict) -> None:
    """The guest's output files into the work directory: only the names asked for."""
    for name in _outputs(v.request):
        data = files.get(name)
        if data is None:
            continue
        try:
            check_relative(name, "output")
        except PathError:
            continue
        path = Path(v.jail.workdir) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        try:
            os.write(fd, data)
            os.fchown(fd, v.jail.account.uid, v.jail.account.gid)
        finally:
            os.close(fd)


def run(agent, v) -> None:
    """Module doc. Always returns (the caller's ``_finish`` ends and reports the VWN)."""
    drv = agent.driver
    if v.outcome is not None and v.outcome is not Outcome.EXIT:
        return                                     # failed before it ran (a failed migration)
    booted_at = None
    if v.wrapper_pid is None:
        def boot(v) -> None:
            nonlocal booted_at
            booted_at = time.monotonic()
            _start(agent, v)
        if not stage_in_and_start(agent, v, boot, hold_lock=False) or v.wrapper_pid is None:
            return
    else:
        drv.vms.adopt(v.vwn)
    channel = drv.vms.files(v.vwn) / "channel.out"
    limit = int(agent.config.max_sandbox_mb * 1.4e6) + 1_000_000      # base64 + markers
    while True:
        ended = drv.vms.state(v.vwn) == "gone"
        try:
            size = channel.stat().st_size
        except OSError:
            size = 0
        if size > limit:
            drv.vms.destroy(v.vwn)
            v.fail(Outcome.WRAPPER_ERROR, f"the VM's channel exceeds {limit} bytes: destroyed")
            return
        st = parse_channel(channel.read_bytes()) if size else parse_channel(b"")
        if st.running and v.state is VWNState.STARTING:
            if booted_at is not None:
                drv.record_boot(time.monotonic() - booted_at, drv.cpu_usage_s(v.vwn))
            with agent._lock:
                v.to(VWNState.RUNNING)
                agent._emit(v, "running")
                agent._save(v)
        if ended or v.cancelled or agent._stopping:
            break
        time.sleep(POLL_S)
    if v.cancelled:
        return
    if st.exit_code is None or not st.complete:
        if agent._stopping:
            v.fail(Outcome.NODE_SHUTDOWN, f"node agent {agent.config.node} shut down")
        else:
            console = drv.vms.files(v.vwn) / "console.log"
            tail = console.read_text(errors="replace")[-600:] if console.exists() else ""
            log.warning("%s: the VM powered off without a result (state %s, channel %d bytes); "
                        "console tail:\n%s", v.vwn, drv.vms.state(v.vwn), size, tail)
            v.fail(Outcome.WRAPPER_ERROR, f"the VM powered off without a result; see {console}")
        return
    _write_outputs(agent, v, st.files or {})
    v.exit_code, v.outcome = st.exit_code, Outcome.EXIT
    agent._stage_out(v)
