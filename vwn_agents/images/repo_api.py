"""The image repository's HTTP API as models and routes (:mod:`vgrid_runtime.openapi`):
``GET /openapi.json`` of ``vgrid serve images`` (module :mod:`.repository`; docs/api.md).
It has no request bodies: every route is a GET."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from vgrid_runtime.openapi import ApiSpec, Op


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ImageEntry(_Open):
    name: str
    size: int = Field(description="bytes")
    sha256: str
    format: str = Field(description="qcow2 | raw")


class ImageList(_Open):
    images: list[ImageEntry]


class RepoStatus(_Open):
    images: int
    bytes: int


_READERS = "node agents (node_dns) and CE agents (ce_dns)"
_REPO_OPS = [
    Op("GET", "/images", "every image with its checksum", _READERS, {200: ImageList}),
    Op("GET", "/images/{name}/manifest", "one image's entry", _READERS, {200: ImageEntry},
       errors={404: "no such image"}),
    Op("GET", "/images/{name}", "the image's bytes (Range, If-Range; ETag = sha256)", _READERS,
       {200: "binary", 206: "binary", 304: "empty"}, errors={404: "no such image", 416: "range not satisfiable"}),
    Op("GET", "/status", "how many images and bytes", "any authenticated caller (counts: readers only)",
       {200: RepoStatus}),
    Op("GET", "/openapi.json", "this document", "any authenticated caller", {200: None}),
    Op("GET", "/metrics", "Prometheus metrics (text format)", "metrics_dns, the repository's own host "
       "certificate", {200: "text"}),
]
REPO_SPEC = ApiSpec(title="vgrid image repository", ops=_REPO_OPS,
                    description="VM images over HTTPS with byte ranges and SHA-256 checksums (seed 000 "
                                "Section 6.2; docs/vwn.md).")
