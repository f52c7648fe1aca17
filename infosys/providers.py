"""Information providers feeding a BDII: LDIF files and CE agents' GIPs (``GET /glue``).

``load_source`` reads one provider; ``BdiiFeeder`` is the BDII's update loop: every
``interval_s`` it reads all providers and loads them into the BDII by difference
(:func:`infosys.bdii_update.update_bdii`). A provider that fails keeps its last good output in
the BDII (as the BDII's provider cache does), and the failure is reported.
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path

from infosys.bdii_update import UpdateReport, update_bdii
from vgrid_runtime.clock import Clock, WallClock
from infosys.periodic import Periodic
from infosys.gip import ce_state_from_ad, glue2_entries
from infosys.glue import AD_ID, glue13_ce_ads
from infosys.ldapclient import LdapError
from infosys.ldif import LdifEntry, LdifError, parse_ldif
from infosys.sources import SourceError, fetch_glue, glue_url

log = logging.getLogger(__name__)


def fetch_ce_glue(url: str, timeout_s: float = 10.0, session=None) -> str:
    """The GLUE 1.3 LDIF a CE agent publishes at ``<url>/glue`` (``sources.fetch_glue``;
    ``session``: a ``requests.Session``, e.g. one with a client certificate). Raises SourceError."""
    return fetch_glue(url, timeout_s, session)


def load_source(source: str, glue2: bool = True, timeout_s: float = 10.0,
                session=None) -> list[LdifEntry]:
    """Entries of one provider: an LDIF file, ``-`` (stdin) or a CE agent URL (``GET /glue``,
    through ``session`` when given).

    With ``glue2``, a CE agent's GLUE 1.3 CEs are also published as GLUE 2.0 (``glue2_entries``).
    Raises SourceError (unreachable, unreadable) or LdifError (malformed, ``source:line``).
    """
    if source.startswith(("http://", "https://")):
        entries = parse_ldif(fetch_ce_glue(source, timeout_s, session), source=glue_url(source))
        if glue2:
            ads, _ = glue13_ce_ads(entries)
            for ad in ads:
                if ad[AD_ID] == ad["GlueCEUniqueID"]:
                    entries += glue2_entries(ce_state_from_ad(ad))
        return entries
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SourceError(f"{source}: cannot read: {e}") from None
    return parse_ldif(text, source="<stdin>" if source == "-" else source)


class BdiiFeeder:
    """Keeps a BDII up to date from providers (file paths or CE agent URLs).

    ``run_once()`` -> (UpdateReport, errors); ``start()``/``stop()`` repeat it every
    ``interval_s`` seconds in a daemon thread. ``update_bdii`` raising LdapError (BDII down)
    is reported in the errors, never raised from the thread.
    """

    def __init__(self, bdii_url: str, sources: list[str], interval_s: float = 60.0,
                 clock: Clock | None = None, glue2: bool = True, timeout_s: float = 10.0,
                 session=None) -> None:
        self.bdii_url = bdii_url
        self.sources = list(sources)
        self.interval_s = interval_s
        self.clock = clock or WallClock()
        self.glue2 = glue2
        self.timeout_s = timeout_s
        self.session = session           # for CE agents served over mutual TLS
        self._last_good: dict[str, list[LdifEntry]] = {}
        self._loop = Periodic(self._run_and_log, interval_s, self.clock, "bdii-feeder")
        self.last_report: UpdateReport | None = None
        self.last_errors: list[str] = []

    def run_once(self) -> tuple[UpdateReport | None, list[str]]:
        entries: list[LdifEntry] = []
        errors: list[str] = []
        for s in self.sources:
            try:
                self._last_good[s] = load_source(s, self.glue2, self.timeout_s, self.session)
            except (SourceError, LdifError) as e:
                errors.append(str(e))
            entries += self._last_good.get(s, [])
        report = None
        try:
            report = update_bdii(self.bdii_url, entries)
        except LdapError as e:
            errors.append(str(e))
        self.last_report, self.last_errors = report, errors
        return report, errors

    def start(self) -> None:
        """Update now, then every interval_s seconds until ``stop()``."""
        self._loop.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._loop.stop(timeout)

    def _run_and_log(self) -> None:
        _, errors = self.run_once()
        for e in errors:
            log.warning("BDII update: %s", e)
