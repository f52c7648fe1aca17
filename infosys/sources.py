"""Where the ISM gets CE ads from: a source is any object with ``fetch() -> list[dict]``.

``fetch`` returns CE ads (see :mod:`infosys.glue`) or raises ``SourceError``; after a fetch,
``rejected`` lists the entries left out (with reasons). ``name`` identifies the source in
errors; ``blocking`` says whether fetch does I/O (the ISM fetches those in parallel).

- ``StaticSource``: ads held in memory (simulation, tests of the logic around it);
- ``LdifFileSource``: a GLUE 1.3 LDIF file;
- ``HttpLdifSource``: a CE agent's ``GET /glue`` (GLUE 1.3 LDIF over HTTP, fetched with requests);
- ``BdiiSource`` (in :mod:`infosys.bdii_source`): a BDII over LDAP.
"""
from __future__ import annotations

from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit, urlunsplit

import requests

from vgrid_runtime.httpclient import new_session
from infosys.glue import Rejected, glue13_ce_ads
from infosys.glue2 import glue2_ce_ads, merge_glue_ads
from infosys.ldif import LdifError, parse_ldif


class SourceError(Exception):
    """A source could not deliver its ads (unreachable, timed out, unparsable); str() says why."""


class Source(Protocol):
    name: str

    def fetch(self) -> list[dict]: ...


class StaticSource:
    """In-memory ads, returned as given (the list is copied, the dicts are not).

    ``set_ads`` replaces them (what a simulated CE "publishes"); ``fail(message)`` makes the next
    fetches raise SourceError until ``set_ads`` or ``recover()`` is called (simulated outage).
    """

    blocking = False

    def __init__(self, ads: list[dict] | None = None, name: str = "static") -> None:
        self.name = name
        self._ads: list[dict] = list(ads or [])
        self._failure: str | None = None
        self.rejected: list[Rejected] = []

    def set_ads(self, ads: list[dict]) -> None:
        self._ads = list(ads)
        self._failure = None

    def fail(self, message: str = "source unavailable") -> None:
        self._failure = message

    def recover(self) -> None:
        self._failure = None

    def fetch(self) -> list[dict]:
        if self._failure is not None:
            raise SourceError(f"{self.name}: {self._failure}")
        return list(self._ads)


class LdifFileSource:
    """CE ads from an LDIF file, read at every fetch.

    glue: "1.3", "2.0" or "both" (default: GLUE 1.3 ads plus GLUE 2.0 ads of CEs without
    GLUE 1.3, as BdiiSource). Raises SourceError for an unreadable file or malformed LDIF
    (``file:line: message``).
    """

    blocking = True

    def __init__(self, path: str | Path, glue: str = "both") -> None:
        if glue not in ("1.3", "2.0", "both"):
            raise ValueError(f"glue must be '1.3', '2.0' or 'both', not {glue!r}")
        self.path = Path(path)
        self.name = str(path)
        self.glue = glue
        self.rejected: list[Rejected] = []

    def fetch(self) -> list[dict]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise SourceError(f"{self.path}: cannot read: {e}") from None
        try:
            entries = parse_ldif(text, source=str(self.path))
        except LdifError as e:
            raise SourceError(str(e)) from None
        ads, rejected = glue13_ce_ads(entries) if self.glue != "2.0" else ([], [])
        if self.glue != "1.3":
            ads2, rejected2 = glue2_ce_ads(entries)
            ads = merge_glue_ads(ads, ads2)
            rejected += rejected2
        self.rejected = rejected
        return ads


def glue_url(url: str) -> str:
    """The GIP URL of a CE agent: ``url`` itself if its path ends with ``/glue``, else
    ``<url>/glue``."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    if not path.endswith("/glue"):
        path = path + "/glue"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def fetch_glue(url: str, timeout_s: float = 5.0, session: requests.Session | None = None) -> str:
    """The LDIF text a CE agent publishes at ``glue_url(url)`` (``GET /glue``): the one reader
    of that endpoint (the ISM's ``HttpLdifSource``, the BDII feeder's providers, ``vgrid
    info``). ``timeout_s``: connect and read timeout in seconds; ``session``: a
    ``requests.Session`` (default: a new one). Raises SourceError on connection errors,
    timeouts and non-200 answers (the message names the URL)."""
    url = glue_url(url)
    own = session is None
    session = session or new_session()
    try:
        r = session.get(url, timeout=timeout_s)
    except requests.RequestException as e:
        raise SourceError(f"{url}: {type(e).__name__}: {e}") from None
    finally:
        if own:
            session.close()
    if r.status_code != 200:
        raise SourceError(f"{url}: HTTP {r.status_code}")
    return r.text


class HttpLdifSource:
    """GLUE 1.3 CE ads from a CE agent's ``GET /glue`` (text/plain LDIF).

    ``url``: the CE agent's base URL or its ``/glue`` URL; ``timeout_s``: connect and read
    timeout in seconds. Raises SourceError on connection errors, timeouts, non-200 answers and
    malformed LDIF (the error names the URL and line).
    """

    blocking = True

    def __init__(self, url: str, timeout_s: float = 5.0,
                 session: requests.Session | None = None) -> None:
        self.url = glue_url(url)
        self.name = self.url
        self.timeout_s = timeout_s
        self._session = session or new_session()
        self.rejected: list[Rejected] = []

    def fetch(self) -> list[dict]:
        text = fetch_glue(self.url, self.timeout_s, self._session)
        try:
            entries = parse_ldif(text, source=self.url)
        except LdifError as e:
            raise SourceError(str(e)) from None
        ads, self.rejected = glue13_ce_ads(entries)
        return ads
