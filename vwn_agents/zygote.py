"""A preforked job-wrapper starter per node agent (issue 12, "a lean job wrapper").

Starting the wrapper as ``sh`` -> ``setpriv`` -> ``python -S -m vwn_agents.wrapper`` costs three
``exec``s and a Python start (~25 ms CPU, 70-470 ms wall on a loaded host) per job. The zygote is
one root process per node agent, started once (``python -S -m vwn_agents.zygote FD``) with the
wrapper module already imported; per job it ``fork``s a child that does what that chain did and
then runs ``wrapper.run`` in-process -- no ``exec``, no interpreter start:

1. its own session (``setsid``: a kill of the agent or the zygote does not reach it);
2. descriptors 0/1/2 = ``/dev/null``, the VWN's ``wrapper.out`` and ``wrapper.log`` (opened by the
   agent as root and passed over the socket, ``SCM_RIGHTS``);
3. waits while the zygote (root) writes its pid into every ``cgroup.procs`` file of the request
   (CPU, memory, pids, freezer); a refused join kills the waiting child (nothing of the job has
   run) and is written as its result ``{"error": "cannot join the VWN's cgroup: ..."}``;
4. drops privileges for good: no supplementary groups, ``setresgid``/``setresuid`` to the pool
   account (never 0: refused), ``PR_SET_NO_NEW_PRIVS`` -- what ``setpriv --reuid --regid
   --clear-groups --no-new-privs`` did; then closes every other descriptor (the zygote's socket
   included: the job can never talk to the root zygote) and takes the request's environment;
5. runs the wrapper (``wrapper.run``) in the work directory and writes its ``running`` and
   ``result`` lines on descriptor 1, exactly as the exec'd wrapper does.

The zygote answers a request once the child is in its cgroups (step 3; it does not wait for the
child to be scheduled): once the agent records the pid, a restarted agent finds the wrapper in
the VWN's cgroup (``node_recovery``). It reaps its children and appends ``{"event": "exit",
"status": S}`` (``os.waitstatus_to_exitcode``: negative = killed by that signal) to the child's
``wrapper.out``, so the agent knows how a wrapper that wrote no result ended (the children are
not the agent's: it watches them through /proc and a pidfd, like adopted wrappers).

Security: the socket is a ``socketpair`` inherited by the zygote only (no path in the file
system: nobody else can ask it for anything); a request for uid or gid 0 is refused. The zygote
exits when the agent's end of the socket closes (the agent exited or was killed); running
wrappers go on in their own sessions and a restarted agent adopts them.

Protocol (``SOCK_SEQPACKET``, one JSON message each way): request ``{"uid", "gid", "procs":
[paths], "env": {..}, "cwd", "spec": {wrapper spec}}`` with two descriptors (out, log) and
optionally a third, the agent's doorbell (the child keeps it as descriptor 3, close-on-exec, and
the wrapper writes one byte on it when the job runs: ``notify_fd``);
answer ``{"pid", "start"}`` (start: /proc/<pid>/stat field 22) or ``{"error": text}``.

``Zygote`` is the agent's side: ``spawn(...)`` -> ``(pid, start)``, raising ``ZygoteError`` when
the zygote cannot be reached or refused (the agent then starts the wrapper the exec way).

This module imports only the standard library (it runs under ``python -S``, like the wrapper).
"""
from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import traceback

MAX_MESSAGE = 1 << 20          # bytes of one request (the spec: JDL arguments, environment)
JOIN_FAILED = 97               # exit status of a child that could not join its cgroups
PR_SET_NO_NEW_PRIVS = 38


class ZygoteError(RuntimeError):
    """The zygote cannot start a wrapper (gone, refused, bad answer); the message says why."""


def proc_start(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (start time, clock ticks after boot), a zombie's too."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[-1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


# -- the agent's side --------------------------------------------------------------------------

class Zygote:
    """The node agent's handle on its zygote process (module doc).

    ``python``: the interpreter; ``pythonpath``: where ``vwn_agents`` is; ``log_path``: the
    zygote's own stderr. Raises ZygoteError when it cannot be started. Thread-safe: requests
    are serialized (a fork takes ~1 ms)."""

    def __init__(self, python: str, pythonpath: str, log_path) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "LANG": os.environ.get("LANG", "C.UTF-8"), "PYTHONPATH": pythonpath,
               "PYTHONDONTWRITEBYTECODE": "1"}
        try:
            with open(log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    [python, "-S", "-m", "vwn_agents.zygote", str(theirs.fileno())],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, cwd="/",
                    pass_fds=(theirs.fileno(),), start_new_session=True)
        except OSError as exc:
            ours.close()
            raise ZygoteError(f"cannot start the zygote: {exc}") from None
        finally:
            theirs.close()
        self._sock = ours
        self._lock = threading.Lock()
        self.spawned = 0
        try:
            self._ask({"ping": True}, [])             # it has imported the wrapper and answers
        except ZygoteError:
            self.close()
            raise

    @property
    def alive(self) -> bool:
        return self._sock is not None and self.proc.poll() is None

    def spawn(self, uid: int, gid: int, procs: list[str], env: dict, cwd: str, spec: dict,
              out_fd: int, log_fd: int, notify_fd: int | None = None) -> tuple[int, int | None]:
        """Fork a wrapper child (module doc, steps 1-5); ``(pid, start time)`` once it has
        joined its cgroups. ``notify_fd``: the write end of the agent's doorbell pipe (the
        wrapper writes a byte on it once the job runs). ZygoteError when the zygote is gone or
        refused the request."""
        answer = self._ask({"uid": uid, "gid": gid, "procs": procs, "env": env, "cwd": cwd,
                            "spec": spec}, [out_fd, log_fd] + ([notify_fd] if notify_fd is not None else []))
        if "pid" not in answer:
            raise ZygoteError(f"the zygote refused: {answer.get('error', answer)}")
        self.spawned += 1
        return int(answer["pid"]), answer.get("start")

    def _ask(self, request: dict, fds: list[int]) -> dict:
        data = json.dumps(request).encode()
        if len(data) > MAX_MESSAGE:
            raise ZygoteError(f"request of {len(data)} bytes is over {MAX_MESSAGE}")
        with self._lock:
            if self._sock is None:
                raise ZygoteError("the zygote is closed")
            try:
                socket.send_fds(self._sock, [data], fds)
                reply = self._sock.recv(65536)
            except OSError as exc:
                raise ZygoteError(f"the zygote does not answer: {exc}") from None
        if not reply:
            raise ZygoteError(f"the zygote has exited (status {self.proc.poll()})")
        try:
            return json.loads(reply)
        except ValueError:
            raise ZygoteError(f"bad answer from the zygote: {reply[:100]!r}") from None

    def close(self) -> None:
        """Stop the zygote (running wrappers go on: their own sessions). Never raises."""
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# -- the zygote process ------------------------------------------------------------------------
# Everything a child needs is imported before it forks: once it runs as the pool account it may
# not be able to read the interpreter's library (e.g. under /root).
_LIBC = None


def _child(req: dict, out_fd: int, log_fd: int, go_r: int, wrapper, notify_fd: int | None) -> None:
    """In the forked child: steps 1-5 of the module doc (the zygote does step 3, joining the
    cgroups, while the child waits for its "go" on ``go_r``); never returns."""
    status = 0
    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(out_fd, 1)
        os.dup2(log_fd, 2)
        if os.read(go_r, 1) != b"g":               # the zygote could not put it in its cgroups
            os._exit(JOIN_FAILED)
        uid, gid = int(req["uid"]), int(req["gid"])
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
        _no_new_privs()
        if notify_fd is not None:                  # the agent's doorbell: fd 3, not inherited
            if notify_fd != 3:
                os.dup2(notify_fd, 3)
            os.set_inheritable(3, False)
            req["spec"]["notify_fd"] = 3
        os.closerange(3 if notify_fd is None else 4,
                      os.sysconf("SC_OPEN_MAX") if os.sysconf("SC_OPEN_MAX") < 65536 else 65536)
        os.environ.clear()
        os.environ.update(req.get("env") or {})
        try:
            os.chdir(req.get("cwd") or "/")
        except OSError:
            pass                                   # the wrapper reports the work directory
        sys.stdout = open(1, "w", closefd=False)
        spec = req["spec"]
        result = wrapper.run(spec)
        wrapper.report(spec, result)
    except BaseException:                          # noqa: BLE001 - never back into the zygote
        status = 1
        try:
            os.write(2, traceback.format_exc().encode())
        except BaseException:                      # noqa: BLE001
            pass
    finally:
        os._exit(status)


def _no_new_privs() -> None:
    if _LIBC.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")


def _handle(sock: socket.socket, children: dict, wrapper) -> bool:
    """Answer one request; False when the agent has gone (EOF)."""
    try:
        data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 4)
    except OSError:
        return False
    if not data:
        return False
    try:
        req = json.loads(data)
        if req.get("ping"):
            answer = {"pong": os.getpid()}
        elif len(fds) not in (2, 3):
            answer = {"error": f"expected 2 or 3 descriptors, got {len(fds)}"}
        elif int(req.get("uid", 0)) <= 0 or int(req.get("gid", 0)) <= 0:
            answer = {"error": "a job never runs as root (uid/gid 0 refused)"}
        else:
            answer = _fork(req, fds, children, wrapper)
    except (ValueError, TypeError, KeyError, OSError) as exc:
        answer = {"error": f"{type(exc).__name__}: {exc}"}
    for fd in fds:
        if fd not in children.values():
            os.close(fd)
    try:
        sock.send(json.dumps(answer).encode())
    except OSError:
        return False
    return True


def _fork(req: dict, fds: list[int], children: dict, wrapper) -> dict:
    """Fork the child, put it into its cgroups (it waits for that), let it go; the answer."""
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(go_w)
        _child(req, fds[0], fds[1], go_r, wrapper, fds[2] if len(fds) > 2 else None)
    os.close(go_r)
    try:
        start = proc_start(pid)
        try:
            for path in req["procs"]:
                with open(path, "w") as f:
                    f.write(str(pid))
        except OSError as exc:                     # nothing of the job ran: it waits for "go"
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.write(fds[0], (json.dumps({"event": "result", "exit_code": None, "signal": None,
                                          "wall_s": None, "cpu_s": None,
                                          "error": f"cannot join the VWN's cgroup: {exc}"}) + "\n").encode())
            return {"pid": pid, "start": start}
        os.write(go_w, b"g")
    finally:
        os.close(go_w)
    children[pid] = fds[0]                         # wrapper.out: the exit line goes there
    return {"pid": pid, "start": start}


def _reap(children: dict) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        out = children.pop(pid, None)
        if out is not None:
            try:
                os.write(out, (json.dumps({"event": "exit", "status": os.waitstatus_to_exitcode(status)})
                               + "\n").encode())
            except OSError:
                pass
            os.close(out)


def serve(fd: int) -> int:
    """The zygote's loop on socket descriptor ``fd`` until the agent closes it."""
    global _LIBC
    from . import wrapper                          # imported once: every child has it
    _LIBC = ctypes.CDLL(None, use_errno=True)
    sock = socket.socket(fileno=fd)
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: dict[int, int] = {}
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    poller.register(wake_r, select.POLLIN)
    while True:
        for fd_, _ in poller.poll():
            if fd_ == wake_r:
                try:
                    os.read(wake_r, 4096)
                except BlockingIOError:
                    pass
                _reap(children)
            elif not _handle(sock, children, wrapper):
                return 0
        _reap(children)


if __name__ == "__main__":
    sys.exit(serve(int(sys.argv[1])))
