"""Configuration of the broker service (``vgrid serve broker --config broker.toml``).

One declarative schema: the fields of :class:`BrokerConfig`, whose ``metadata["help"]`` documents
each option (rendered in docs/cli.md). Loading, validation and the errors naming the file and the
option are the shared ones of :mod:`vgrid_runtime.config` (the agents use the same loader).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vgrid_runtime.authn import TLSOptions
from vgrid_runtime.metrics import MetricsOptions
from vgrid_runtime.serving import ServeOptions
from vgrid_runtime.config import ConfigError, ConfigSchema, describe
from vgrid_runtime.sqldb import DBPool

from .federation.peers import PeerConfig

__all__ = ["BrokerConfig", "ConfigError", "describe"]


def opt(default: Any, doc: str):
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"help": doc})
    return field(default=default, metadata={"help": doc})


@dataclass
class BrokerConfig(ConfigSchema, TLSOptions, ServeOptions, MetricsOptions):
    """Options of ``vgrid serve broker`` (top-level keys of the TOML file)."""

    SOURCE = "broker config"

    bind: str = opt("127.0.0.1", "address to listen on")
    port: int = opt(8440, "TCP port; 0 takes a free one")
    database_url: str = opt("", "SQLAlchemy URL of the job database; empty = SQLite file in state_dir")
    db_pool_size: int = opt(10, "database connections the broker keeps open (per process; "
                            "PostgreSQL: size the server's max_connections for every broker)")
    db_pool_overflow: int = opt(10, "extra connections opened under load above db_pool_size")
    db_pool_timeout_s: float = opt(30.0, "seconds a request waits for a free connection (then 503)")
    db_pool_recycle_s: float = opt(3600.0, "seconds after which a connection is replaced; -1: never")
    sqlite_busy_timeout_s: float = opt(30.0, "seconds a write waits for another writer's lock "
                                       "(SQLite only)")
    state_dir: str = opt("vgrid-broker", "directory for the SQLite database and the sandboxes")
    ce_urls: list[str] = opt([], "CE agent URLs whose GLUE LDIF (GET /glue) feeds the ISM (embedded default)")
    bdii: str = opt("", "LDAP URL of a BDII; when set, the ISM reads GLUE from it instead of ce_urls")
    ism_refresh_s: float = opt(30.0, "seconds between ISM refreshes (gLite's default is 240)")
    ism_timeout_s: float = opt(10.0, "seconds a source may take to answer a refresh")
    selection: str = opt("sfete", "default selection policy: sfete, max or fuzzy")
    fuzzy_factor: float = opt(1.0, "FuzzyFactor of Fuzzy Rank (dimensionless, > 0)")
    matcher: bool = opt(True, "run the matcher loop in this process (matching, dispatch, Stalled "
                         "scans, restart recovery); false: a submission and status front end over "
                         "a database another broker process matches from (PostgreSQL)")
    match_interval_s: float = opt(0.5, "seconds between matcher passes over Waiting jobs")
    matcher_workers: int = opt(1, "matcher worker threads, each with its own database connection; "
                               "several brokers may also share one PostgreSQL database (claims are atomic)")
    match_batch: int = opt(5000, "Waiting jobs a matcher worker claims at once (one transaction); "
                           "the jobs of a batch chosen for one CE go in one POST /jobs/bulk")
    claim_lease_s: float = opt(600.0, "seconds a matcher worker's claim on a job (Ready) lasts; "
                               "older claims (a worker or broker that died) go back to Waiting "
                               "and are matched again by any broker; 0: never")
    gc_threshold0: int = opt(50_000, "allocations between two collections of the youngest generation of "
                             "Python's cyclic garbage collector in the broker process (gc.set_threshold); "
                             "the matcher allocates ~30 objects per job, and at Python's default (700) a pass "
                             "spent ~15 % of its CPU collecting; 0 keeps Python's default")
    dispatch_senders: int = opt(4, "bulk dispatch POSTs a matcher worker keeps in flight at once (sender "
                                "threads shared by the workers); every POST has answered before a batch is "
                                "recorded; 1: one after another")
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
    front_ends: int = opt(1, "processes serving this broker's port (SO_REUSEPORT) over one database: "
                          "this one (the matcher) and front_ends - 1 request-only ones (broker.front_ends)")
    record_cache_size: int = opt(10000, "job records kept rendered (JSON and ETag) for GET /jobs/<key>, "
                                 "revalidated against the database on every read (broker.records); 0: none")
    lean_reads: bool = opt(True, "answer GET /jobs/<key> (200 and 304 to a caller who may see the job) in "
                           "front of Flask, with the same authentication and answers (broker.read_path); "
                           "false: every request through Flask")
    max_body_mb: float = opt(110.0, "largest request body (MB; submissions carry the input sandbox)")
    # federation (docs/federation.md): this broker as a gateway to peer brokers
    peers: list[PeerConfig] = field(default_factory=list, metadata={
        "help": "peering arrangements, one [[peers]] table each: name, url, dn, send_vos, "
                "accept_vos, share_cpus, priority (docs/federation.md); none: no federation"})
    forward_wait_threshold_s: float = opt(600.0, "a job whose chosen local CE publishes an "
                                          "EstimatedResponseTime above this (s) goes to a peer "
                                          "publishing a lower one; < 0: only jobs no local CE "
                                          "matches are forwarded")
    federation_max_hops: int = opt(2, "the most gateways a job may be forwarded through")
    federation_relay_s: float = opt(5.0, "seconds between reports of received jobs to their "
                                    "origin (events and heartbeats)")
    federation_note_give_up_s: float = opt(604800.0, "a note of a received job (suspended, resumed, "
                                           "requeued) is retried to its origin this long (s) before "
                                           "it is dropped (docs/federation.md, \"Notes\")")
    delegation_lifetime_s: float = opt(3600.0, "lifetime (s) of the proxy delegated to a peer "
                                       "with a forwarded job (never beyond the user's)")

    def db_pool(self) -> DBPool:
        """The job database's connection pool (:class:`vgrid_runtime.sqldb.DBPool`)."""
        return DBPool(size=self.db_pool_size, overflow=self.db_pool_overflow,
                      timeout_s=self.db_pool_timeout_s, recycle_s=self.db_pool_recycle_s,
                      busy_timeout_s=self.sqlite_busy_timeout_s)

    def validate(self) -> str | None:
        if self.tls_problem():
            return self.tls_problem()
        if self.serve_problem():
            return self.serve_problem()
        if self.db_pool().problem():
            return f"fields db_pool_*/sqlite_busy_timeout_s: {self.db_pool().problem()}"
        if self.selection not in ("sfete", "max", "fuzzy"):
            return f"field 'selection' must be sfete, max or fuzzy, got {self.selection!r}"
        for name in ("ism_refresh_s", "match_interval_s", "fuzzy_factor"):
            if getattr(self, name) <= 0:
                return f"field {name!r} must be > 0"
        for name in ("matcher_workers", "match_batch", "front_ends", "dispatch_senders"):
            if getattr(self, name) < 1:
                return f"field {name!r} must be >= 1"
        if self.blacklist_s < 0:
            return "field 'blacklist_s' must be >= 0"
        for name in ("max_retry_count", "max_shallow_retry_count", "stalled_resubmit_s",
                     "default_ce_interval_s", "claim_lease_s", "record_cache_size", "gc_threshold0"):
            if getattr(self, name) < 0:
                return f"field {name!r} must be >= 0"
        if self.federation_max_hops < 1 or self.federation_relay_s <= 0 or self.delegation_lifetime_s <= 0 \
                or self.federation_note_give_up_s <= 0:
            return ("fields 'federation_max_hops' (>= 1), 'federation_relay_s', 'delegation_lifetime_s' and "
                    "'federation_note_give_up_s' (> 0)")
        if self.front_ends > 1 and self.peers:
            return "field 'front_ends': several processes are not supported with federation peers"
        for p in self.peers:
            if p.validate():
                return f"field 'peers': {p.validate()}"
        if len({p.name for p in self.peers}) != len(self.peers):
            return "field 'peers': names must be unique"
        for name in ("default_retry_count", "default_shallow_retry_count"):
            if getattr(self, name) < -1:
                return f"field {name!r} must be >= -1"
        return None
