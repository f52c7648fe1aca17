"""The one client of the image repository's HTTP API (``repository``; docs/architecture.md).

``ImageRepositoryClient(base_url, session=None, timeout_s=30.0)``: ``images`` (GET /images),
``manifest`` (GET /images/<name>/manifest), ``open`` (GET /images/<name> from a byte offset,
streamed). Every failure raises ``ImageRepositoryError`` (``kind``: unreachable, timeout, http,
bad-answer; ``status`` when the repository answered). Used by the node image pool (``pool``) and
the CE agent's staging (``staging``).
"""
from __future__ import annotations

from vgrid_runtime.httpclient import ErrorKind, ServiceClient, ServiceError

__all__ = ["ErrorKind", "ImageRepositoryClient", "ImageRepositoryError"]


class ImageRepositoryError(ServiceError):
    """An image repository call failed (``ServiceError``: kind, status, url, body)."""


class ImageRepositoryClient(ServiceClient):
    """Client of one image repository at ``base_url`` (``timeout_s``: connect and read timeout
    of each call, seconds; a download's read timeout applies between received chunks)."""

    Error = ImageRepositoryError

    def images(self) -> list[dict]:
        """GET /images: ``[{"name","size","sha256","format"}]``. Raises ImageRepositoryError."""
        return self._call("GET", "/images", required=("images",))["images"]

    def manifest(self, name: str) -> dict:
        """GET /images/<name>/manifest: ``{"name","size" (bytes),"sha256" (hex),"format"}``.
        Raises ImageRepositoryError (HTTP 404 for an unknown image)."""
        return self._call("GET", f"/images/{name}/manifest", required=("size", "sha256"))

    def open(self, name: str, offset: int = 0, etag: str | None = None, chunk_bytes: int = 65536):
        """GET /images/<name> from byte ``offset`` (``Range: bytes=<offset>-`` when > 0, with
        ``If-Range: "<etag>"`` when given, so a changed image comes whole, status 200, instead of
        a wrong tail). Returns ``(status, headers, chunks)``: 206 = the tail from ``offset``,
        200 = the whole file. Raises ImageRepositoryError (416 for an offset past the end)."""
        headers = {}
        if offset > 0:
            headers["Range"] = f"bytes={offset}-"
            if etag:
                headers["If-Range"] = f'"{etag}"'
        return self._get_stream(f"/images/{name}", headers=headers, chunk_bytes=chunk_bytes)
