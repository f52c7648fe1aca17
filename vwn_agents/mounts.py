"""mount(2) and umount2(2) without a ``mount``/``umount`` process (issue 12: a VWN's start and end
must not wait for a fork and exec under load; ~0.05 ms against 10-130 ms measured).

``move(src, dst)`` moves the mount at ``src`` to the (existing, empty) directory ``dst``
(``MS_MOVE``); where the kernel refuses (``src`` below a shared mount: EINVAL) it bind-mounts
``src`` on ``dst`` and detaches ``src``. ``unmount(path)`` unmounts, lazily (``MNT_DETACH``) when
the file system is still busy. ``detach(path)`` takes the mount out of the tree at once and
leaves the kernel's teardown (writing back the file system, releasing its loop device: 50-100 ms
at load 20-30) to a background thread: it holds an ``O_PATH`` descriptor of the mount's root,
detaches (``MNT_DETACH``, ~0.1 ms), and a daemon thread closes the descriptor, which is where
the kernel then does the work (a VWN's end does not wait for it; at the process's exit the kernel
closes what is left). All raise ``OSError`` with the errno (e.g. EPERM without CAP_SYS_ADMIN).
A loop device set up by ``mount -o loop`` has the autoclear flag: it is released when its file
system is torn down, whichever of these did it.
"""
from __future__ import annotations

import ctypes
import errno
import os
import queue
import threading

MS_BIND = 4096
MS_MOVE = 8192
MNT_DETACH = 2

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


def _check(result: int, what: str, path) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}", str(path))


def move(src, dst) -> None:
    """Move the mount at ``src`` to ``dst`` (module doc); OSError when neither way works."""
    s, d = os.fsencode(src), os.fsencode(dst)
    if _libc.mount(s, d, None, MS_MOVE, None) == 0:
        return
    if ctypes.get_errno() != errno.EINVAL:
        _check(-1, "mount --move", dst)
    _check(_libc.mount(s, d, None, MS_BIND, None), "mount --bind", dst)
    _check(_libc.umount2(s, MNT_DETACH), "umount -l", src)


def unmount(path) -> None:
    """Unmount ``path`` (lazily when busy); OSError (EINVAL: not a mount point)."""
    p = os.fsencode(path)
    if _libc.umount2(p, 0) == 0:
        return
    if ctypes.get_errno() != errno.EBUSY:
        _check(-1, "umount", path)
    _check(_libc.umount2(p, MNT_DETACH), "umount -l", path)


_closing: queue.SimpleQueue = queue.SimpleQueue()
_closer: threading.Thread | None = None
_closer_lock = threading.Lock()


def _close_loop() -> None:
    while True:
        os.close(_closing.get())


def detach(path) -> None:
    """Take the mount at ``path`` out of the tree now; its teardown happens in a background
    thread (module doc). OSError (EINVAL: not a mount point)."""
    global _closer
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        _check(_libc.umount2(os.fsencode(path), MNT_DETACH), "umount -l", path)
    except OSError:
        os.close(fd)
        raise
    with _closer_lock:
        if _closer is None:
            _closer = threading.Thread(target=_close_loop, name="unmount-teardown", daemon=True)
            _closer.start()
    _closing.put(fd)


def mounted_below(root) -> list[str]:
    """The mount points strictly below directory ``root`` (``/proc/self/mounts``), deepest
    first; [] when the table cannot be read."""
    prefix = os.path.realpath(root).rstrip("/") + "/"
    try:
        with open("/proc/self/mounts") as f:
            points = [line.split()[1] for line in f]
    except OSError:
        return []
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        points = [p.replace(code, char) for p in points]     # the kernel's octal escapes
    return sorted({p for p in points if p.startswith(prefix)}, key=len, reverse=True)


def unmount_below(root) -> tuple[list[str], dict[str, str]]:
    """Unmount (lazily when busy) every mount below ``root``, deepest first: ``(unmounted,
    {mount point: error})``; never raises."""
    done, failed = [], {}
    for point in mounted_below(root):
        try:
            unmount(point)
            done.append(point)
        except OSError as exc:
            failed[point] = exc.strerror or str(exc)
    return done, failed
