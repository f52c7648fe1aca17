"""Configuration of the broker service (``vgrid serve broker --config broker.toml``).

One declarative schema: the fields of :class:`BrokerConfig`, whose ``metadata["help"]`` documents
each option (rendered in docs/cli.md). Loading, validation and the errors naming the file and the
option are the shared ones of :mod:`vgrid_runtime.config` (the agents use the same loader).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vgrid_runtime.authn import TLSOptions
from vgrid_runtime.serving import ServeOptions
from vgrid_runtime.config import ConfigError, ConfigSchema, describe

__all__ = ["BrokerConfig", "ConfigError", "describe"]


def opt(default: Any, doc: str):
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"help": doc})
    return field(default=default, metadata={"help": doc})


@dataclass
class BrokerConfig(ConfigSchema, TLSOptions, ServeOptions):
    """Options of ``vgrid serve broker`` (top-level keys of the TOML file)."""

    SOURCE = "broker config"

    bind: str = opt("127.0.0.1", "address to listen on")
    port: int = opt(8440, "TCP port; 0 takes a free one")
    database_url: str = opt("", "SQLAlchemy URL of the job database; empty = SQLite file in state_dir")
    state_dir: str = opt("vgrid-broker", "directory for the SQLite database and the sandboxes")
    ce_urls: list[str] = opt([], "CE agent URLs whose GLUE LDIF (GET /glue) feeds the ISM (embedded default)")
    bdii: str = opt("", "LDAP URL of a BDII; when set, the ISM reads GLUE from it instead of ce_urls")
    ism_refresh_s: float = opt(30.0, "seconds between ISM refreshes (gLite's default is 240)")
    ism_timeout_s: float = opt(10.0, "seconds a source may take to answer a refresh")
    selection: str = opt("sfete", "default selection policy: sfete, max or fuzzy")
    fuzzy_factor: float = opt(1.0, "FuzzyFactor of Fuzzy Rank (dimensionless, > 0)")
    match_interval_s: float = opt(0.5, "seconds between matcher passes over Waiting jobs")
    matcher_workers: int = opt(1, "matcher worker threads, each with its own database connection; "
                               "several brokers may also share one PostgreSQL database (claims are atomic)")
    match_batch: int = opt(5000, "Waiting jobs a matcher worker claims at once (one transaction); "
                           "the jobs of a batch chosen for one CE go in one POST /jobs/bulk")
    match_expiry_s: float = opt(30.0, "a job that no CE matches for this long ends Aborted")
    max_dispatch_attempts: int = opt(5, "dispatch attempts before a job ends Aborted")
    blacklist_s: float = opt(300.0, "seconds a CE that timed out, was unreachable or answered "
                             "5xx on dispatch is left out of matching; 0 disables the blacklist")
    max_retry_count: int = opt(10, "gLite MaxRetryCount: the most deep resubmissions of any job "
                               "(caps the JDL's RetryCount)")
    max_shallow_retry_count: int = opt(10, "gLite MaxShallowRetryCount: the most shallow "
                                       "resubmissions of any job (caps ShallowRetryCount)")
    default_retry_count: int = opt(0, "RetryCount of a JDL that sets none")
    default_shallow_retry_count: int = opt(3, "ShallowRetryCount of a JDL that sets none")
    stalled_resubmit_s: float = opt(60.0, "seconds a job stays Stalled (its CE did not report it "
                                    "for 3 heartbeat intervals) before it is resubmitted or Aborted")
    default_ce_interval_s: float = opt(0.0, "heartbeat interval (s) assumed for a CE agent that "
                                       "never sent one; 0 = its jobs are never marked Stalled")
    seed: int = opt(-1, "random seed for tie-breaks and Fuzzy Rank; -1 = from the OS")
    admins: list[str] = opt([], "DNs that see and may cancel every user's jobs (TLS mode)")
    max_body_mb: float = opt(110.0, "largest request body (MB; submissions carry the input sandbox)")

    def validate(self) -> str | None:
        if self.tls_problem():
            return self.tls_problem()
        if self.serve_problem():
            return self.serve_problem()
        if self.selection not in ("sfete", "max", "fuzzy"):
            return f"field 'selection' must be sfete, max or fuzzy, got {self.selection!r}"
        for name in ("ism_refresh_s", "match_interval_s", "fuzzy_factor"):
            if getattr(self, name) <= 0:
                return f"field {name!r} must be > 0"
        for name in ("matcher_workers", "match_batch"):
            if getattr(self, name) < 1:
                return f"field {name!r} must be >= 1"
        if self.blacklist_s < 0:
            return "field 'blacklist_s' must be >= 0"
        for name in ("max_retry_count", "max_shallow_retry_count", "stalled_resubmit_s",
                     "default_ce_interval_s"):
            if getattr(self, name) < 0:
                return f"field {name!r} must be >= 0"
        for name in ("default_retry_count", "default_shallow_retry_count"):
            if getattr(self, name) < -1:
                return f"field {name!r} must be >= -1"
        return None
