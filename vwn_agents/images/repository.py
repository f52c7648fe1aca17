"""The image repository: ``vgrid serve images`` serves VM images over HTTPS with mutual TLS.

Seed 000 (Section 6.2) stages VM images from an *image repository* to the nodes before their
leases start; this is that repository. It serves the files of one directory (``images_dir``,
flat: a name is ``[A-Za-z0-9][A-Za-z0-9._-]*``), each with its SHA-256 checksum, and answers
byte-range requests (RFC 9110 Section 14: ``Range: bytes=a-b``, 206 with ``Content-Range``,
416 for an unsatisfiable range, ``If-Range`` against the strong ETag = the checksum), so a node
whose download was cut resumes where it stopped.

Checksums: a ``SHA256SUMS`` file in ``images_dir`` (``sha256sum`` format, as image publishers
ship it) is authoritative; an image it does not list is hashed on first use and the result is
cached for its (size, mtime). A corrupted file therefore no longer matches its published sum
and every node refuses it (``pool.ImageFailure.CHECKSUM_MISMATCH``).

HTTP (JSON unless said otherwise; docs/architecture.md, "image repository"):

* ``GET /images`` -> ``{"images": [{"name","size","sha256","format"}]}`` (format: qcow2 | raw);
* ``GET /images/<name>/manifest`` -> one entry; 404 ``{"error": {"message","image"}}``;
* ``GET /images/<name>`` -> the bytes (``application/octet-stream``; ``ETag`` = sha256 hex,
  ``Digest: sha-256=<base64>`` of the whole file, ``Accept-Ranges: bytes``); ranges as above;
* ``GET /status`` -> ``{"images": n, "bytes": total}``.

Who may read (TLS mode): the DNs of ``node_dns`` (node agents' host certificates: they pull)
and ``ce_dns`` (CE agents: they read manifests); anyone else 403, no certificate 401. In plain
HTTP mode (loopback only) nothing is checked. Source: seed 000 Section 6.2; RFC 9110.
"""
from __future__ import annotations

import base64
import hashlib
import logging
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

from flask import Flask, jsonify, request, send_file

from vgrid_runtime.authn import TLSOptions, authorize, caller, install_authentication
from vgrid_runtime.clock import Clock, WallClock
from vgrid_runtime.config import ConfigSchema
from vgrid_runtime.httpjson import ApiError, install_error_handlers
from vgrid_runtime.serving import ServeOptions

log = logging.getLogger(__name__)

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
SUMS_FILE = "SHA256SUMS"
QCOW2_MAGIC = b"QFI\xfb"


@dataclass
class ImageRepositoryConfig(ConfigSchema, TLSOptions, ServeOptions):
    """Configuration of ``vgrid serve images`` (TOML; docs/vwn.md, "Image repository")."""

    SOURCE = "image repository config"

    images_dir: str = field(metadata={"help": "directory whose files are the served images "
                                              "(plus an optional SHA256SUMS file)"})
    bind: str = field(default="127.0.0.1", metadata={"help": "listen address"})
    port: int = field(default=0, metadata={"help": "listen port (0 = a free port)"})
    node_dns: list[str] = field(default_factory=list, metadata={
        "help": "DNs of the node agents' host certificates that may download images (TLS mode)"})
    ce_dns: list[str] = field(default_factory=list, metadata={
        "help": "DNs of the CE agents that may read the manifest and images (TLS mode)"})

    def validate(self) -> str | None:
        if self.tls_problem():
            return self.tls_problem()
        if self.serve_problem():
            return self.serve_problem()
        if not Path(self.images_dir).is_dir():
            return f"field 'images_dir': {self.images_dir!r} is not a directory"
        return None


def image_format(path: Path) -> str:
    """``"qcow2"`` when the file starts with the qcow2 magic, else ``"raw"``."""
    with open(path, "rb") as f:
        return "qcow2" if f.read(4) == QCOW2_MAGIC else "raw"


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def read_sums(path: Path) -> dict[str, str]:
    """``{name: sha256 hex}`` from a ``sha256sum``-format file (``<hex>  <name>`` or
    ``<hex> *<name>``); lines that are not of that form are skipped (logged)."""
    sums = {}
    for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        m = re.fullmatch(r"([0-9a-fA-F]{64}) [ *](.+)", line.strip())
        if m:
            sums[m.group(2)] = m.group(1).lower()
        elif line.strip():
            log.warning("%s:%d: not a sha256sum line, skipped", path, n)
    return sums


class ImageCatalog:
    """The images of one directory with their checksums (see module doc). Thread-safe."""

    def __init__(self, images_dir: str | Path) -> None:
        self.root = Path(images_dir).resolve()
        self._cache: dict[str, tuple[tuple, str]] = {}
        self._lock = threading.Lock()

    def path(self, name: str) -> Path:
        """The file of image ``name``; ApiError 404 for a bad or unknown name."""
        if not NAME_RE.fullmatch(name) or name == SUMS_FILE:
            raise ApiError(404, f"no image {name!r}", image=name)
        p = self.root / name
        if not p.is_file() or p.resolve().parent != self.root:
            raise ApiError(404, f"no image {name!r}", image=name)
        return p

    def entry(self, name: str) -> dict:
        """``{"name","size","sha256","format"}`` of image ``name`` (ApiError 404)."""
        p = self.path(name)
        st = p.stat()
        sums_path = self.root / SUMS_FILE
        published = read_sums(sums_path).get(name) if sums_path.is_file() else None
        if published:
            digest = published
        else:
            stamp = (st.st_size, st.st_mtime_ns)
            with self._lock:
                cached = self._cache.get(name)
            if cached and cached[0] == stamp:
                digest = cached[1]
            else:
                digest = sha256_file(p)
                with self._lock:
                    self._cache[name] = (stamp, digest)
        return {"name": name, "size": st.st_size, "sha256": digest, "format": image_format(p)}

    def entries(self) -> list[dict]:
        names = sorted(p.name for p in self.root.iterdir()
                       if p.is_file() and NAME_RE.fullmatch(p.name) and p.name != SUMS_FILE)
        return [self.entry(n) for n in names]


def create_app(config: ImageRepositoryConfig, clock: Clock | None = None) -> Flask:
    """The repository's Flask app (see module doc). ValueError for an invalid ``images_dir``."""
    problem = config.validate()
    if problem:
        raise ValueError(problem)
    catalog = ImageCatalog(config.images_dir)
    app = Flask("vgrid-images")
    app.config["VGRID_SERVICE_NAME"] = "image repository"
    app.config["VGRID_STATE_DIR"] = str(catalog.root)
    app.config["VGRID_CATALOG"] = catalog
    install_error_handlers(app, max_body_bytes=65536)
    install_authentication(app, config.tls_files(), clock or WallClock())
    readers = list(config.node_dns) + list(config.ce_dns)

    def reader(what: str) -> None:
        authorize(caller().is_one_of(readers), what)

    @app.get("/images")
    def list_images():
        reader("list images")
        return jsonify({"images": catalog.entries()})

    @app.get("/images/<name>/manifest")
    def manifest(name):
        reader(f"read the manifest of image {name}")
        return jsonify(catalog.entry(name))

    @app.get("/images/<name>")
    def download(name):
        reader(f"download image {name}")
        entry = catalog.entry(name)
        suffix = re.fullmatch(r"\s*bytes\s*=\s*-(\d+)\s*", request.headers.get("Range", ""))
        if suffix and int(suffix.group(1)) > entry["size"]:   # RFC 9110 14.1.2: the whole file
            request.environ["HTTP_RANGE"] = "bytes=0-"
        resp = send_file(catalog.path(name), mimetype="application/octet-stream", conditional=True,
                         etag=entry["sha256"], max_age=0)
        resp.headers["Digest"] = "sha-256=" + base64.b64encode(bytes.fromhex(entry["sha256"])).decode()
        resp.headers["Accept-Ranges"] = "bytes"
        return resp

    @app.get("/status")
    def status():
        entries = catalog.entries() if caller().is_one_of(readers) or not caller().authenticated else []
        return jsonify({"images": len(entries), "bytes": sum(e["size"] for e in entries)})

    return app


def serve_images(config_file: str | None, ready_file: str | None, port: int | None) -> None:
    """``vgrid serve images --config FILE``: run the repository in the foreground."""
    from vgrid_runtime.config import ConfigError
    from vgrid_runtime.wsgi import serve
    if not config_file:
        raise ConfigError("vgrid serve images needs --config FILE (see docs/cli.md)")
    config = ImageRepositoryConfig.from_toml(config_file)
    if port is not None:
        config.port = port
    try:
        app = create_app(config)
    except ValueError as exc:
        raise ConfigError(f"{config_file}: {exc}") from None
    log.info("image repository: %d image(s) in %s", len(os.listdir(config.images_dir)), config.images_dir)
    serve(app, host=config.bind, port=config.port, ready_file=ready_file, tls=config.tls_files(),
          limits=config.serve_limits())
