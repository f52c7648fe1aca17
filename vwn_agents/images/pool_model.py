"""The node image pool's records: image states and their table, typed failures, pull requests
and pool entries (``pool.ImagePool`` keeps them; docs/vwn.md, "The node image pool")."""
from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field

from vgrid_runtime.states import StateTable


class ImageState(enum.StrEnum):
    """State of an image in a node's pool (``IMAGE_STATES``)."""

    PULLING = "pulling"          # a download runs
    INTERRUPTED = "interrupted"  # the agent died during the download: resumed at start
    READY = "ready"              # on disk, checksum verified
    FAILED = "failed"            # the last pull failed (``failure``); a new pull retries
    EVICTED = "evicted"          # removed to make room; a new pull brings it back


S = ImageState
IMAGE_STATES = StateTable("pool image", ImageState, {
    S.PULLING: {S.READY, S.FAILED, S.INTERRUPTED},
    S.INTERRUPTED: {S.PULLING, S.EVICTED},
    S.READY: {S.EVICTED, S.PULLING},          # PULLING: the repository has a new version
    S.FAILED: {S.PULLING, S.EVICTED},
    S.EVICTED: {S.PULLING},
}, terminal=())


class ImageFailure(enum.StrEnum):
    """Why a pull failed (receivers branch on this code, never on the message)."""

    CHECKSUM_MISMATCH = "checksum-mismatch"   # the bytes' SHA-256 is not the manifest's / expected
    SIZE_MISMATCH = "size-mismatch"           # more or fewer bytes than the manifest says
    NOT_FOUND = "not-found"                   # the repository has no such image (404)
    REFUSED = "refused"                       # the repository refused us (401/403/4xx)
    UNREACHABLE = "unreachable"               # no answer for patience_s (retried with Range until then)
    NO_ROOM = "no-room"                       # the pool cannot make room without evicting pinned images
    DISK = "disk"                             # writing the pool directory failed (ENOSPC, ...)


class PoolError(Exception):
    """A pool operation was refused: ``code`` ("not-ready", "unknown-image", "overlay-failed",
    "bad-name") and a message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class PullRequest:
    """What to pull (the body of the node agent's ``POST /images/pulls``): ``image`` name;
    ``transfer`` the CE's id of the transfer reservation; ``rate_mbs`` MB/s (0 = unthrottled);
    ``pins`` lease keys that need it; ``scheduled_start``/``scheduled_end`` clock s (the lease
    engine's reservation, recorded for the comparison); ``sha256`` the checksum the caller
    expects ("" = the repository's)."""

    image: str
    transfer: str = ""
    rate_mbs: float = 0.0
    pins: list[str] = field(default_factory=list)
    scheduled_start: float | None = None
    scheduled_end: float | None = None
    sha256: str = ""


@dataclass
class PoolImage:
    """One image of the pool (persisted in ``pool.json``)."""

    name: str
    state: ImageState
    sha256: str = ""
    size: int = 0
    format: str = "raw"
    file: str = ""
    last_use: float = 0.0
    failure: str | None = None
    reason: str | None = None
    rate_mbs: float = 0.0
    transfer: dict | None = None      # the record of the running (or last) transfer

    def view(self, pins: list[str], overlays: list[str]) -> dict:
        d = asdict(self)
        d["state"] = self.state.value
        d.update(pins=pins, overlays=overlays)
        return d
