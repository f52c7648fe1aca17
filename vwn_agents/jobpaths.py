"""Names of files in a job's work directory: the checks shared by the node agent and the wrapper.

StdInput/StdOutput/StdError and OutputSandbox entries must be paths relative to the work
directory without ``..`` components; InputSandbox names are plain file names. (The JDL is checked
the same way at submission, ``jdl.validate``; this is the node's own defence.)
"""
from __future__ import annotations

import os


class PathError(ValueError):
    """A file name that could leave the work directory; the message names the field and value."""


def check_relative(name, what: str) -> str:
    """``name`` if it is a non-empty path relative to the work directory without ``..``
    components (``res/n.dat`` is fine; ``/etc/x``, ``../x``, ``a/../../b`` are not);
    PathError naming ``what`` otherwise."""
    if not isinstance(name, str) or not name or "\x00" in name or os.path.isabs(name):
        raise PathError(f"{what} file name {name!r} is not relative to the work directory")
    if ".." in name.split("/"):             # the path's components (stdlib only: the wrapper imports this)
        raise PathError(f"{what} file name {name!r} leaves the work directory")
    return name


def check_plain(name, what: str) -> str:
    """``name`` if it is a plain file name (no ``/``, not ``.``/``..``); PathError otherwise."""
    if not isinstance(name, str) or not name or "/" in name or name in (".", "..") or "\x00" in name:
        raise PathError(f"{what} file name {name!r} is not a plain file name")
    return name
