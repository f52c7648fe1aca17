"""mount(2) and umount2(2) without a ``mount``/``umount`` process (issue 12: a VWN's start and end
must not wait for a fork and exec under load; ~0.05 ms against 10-130 ms measured).

``move(src, dst)`` moves the mount at ``src`` to the (existing, empty) directory ``dst``
(``MS_MOVE``); where the kernel refuses (``src`` below a shared mount: EINVAL) it bind-mounts
``src`` on ``dst`` and detaches ``src``. ``unmount(path)`` unmounts, lazily (``MNT_DETACH``) when
the file system is still busy. Both raise ``OSError`` with the errno (e.g. EPERM without
CAP_SYS_ADMIN). A loop device set up by ``mount -o loop`` has the autoclear flag: it is released
when its file system is unmounted, whichever of these did it.
"""
from __future__ import annotations

import ctypes
import errno
import os

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
