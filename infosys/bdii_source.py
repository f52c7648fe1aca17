"""An ISM source reading a BDII over LDAP (ldap3), as the gLite WMS ISM purchaser does."""
from __future__ import annotations

import ldap3

from infosys.glue import AD_ID, Rejected, glue13_ce_ads
from infosys.glue2 import glue2_ce_ads
from infosys.ldapclient import LdapError, connect, search_entries, server_schema_types
from infosys.schema import SchemaTypes
from infosys.sources import SourceError

GLUE13_FILTER = ("(|(objectClass=GlueCE)(objectClass=GlueCluster)(objectClass=GlueSubCluster)"
                 "(objectClass=GlueVOView)(objectClass=GlueCESEBind))")
GLUE2_FILTER = ("(|(objectClass=GLUE2ComputingShare)(objectClass=GLUE2ComputingEndpoint)"
                "(objectClass=GLUE2ComputingService)(objectClass=GLUE2ComputingManager)"
                "(objectClass=GLUE2ExecutionEnvironment)(objectClass=GLUE2Benchmark)"
                "(objectClass=GLUE2ApplicationEnvironment)(objectClass=GLUE2MappingPolicy)"
                "(objectClass=GLUE2AccessPolicy))")


class BdiiSource:
    """CE ads from a BDII at ``ldap_url`` (``ldap://host:port``).

    glue: "1.3" (``o=grid`` only), "2.0" (``o=glue`` only) or "both" (default: GLUE 1.3 ads,
    plus GLUE 2.0 ads of CEs that publish no GLUE 1.3). Paged subtree searches of
    ``page_size`` entries; each connection attempt and answer bounded by ``timeout_s`` seconds,
    ``retries`` more attempts with back-off. Values typed from the server's own schema (read
    once, at the first successful fetch). Raises SourceError when the BDII cannot be read.
    """

    blocking = True

    def __init__(self, ldap_url: str, timeout_s: float = 30.0, retries: int = 2,
                 page_size: int = 1000, glue: str = "both") -> None:
        if glue not in ("1.3", "2.0", "both"):
            raise ValueError(f"glue must be '1.3', '2.0' or 'both', not {glue!r}")
        self.url = ldap_url
        self.name = ldap_url
        self.timeout_s = timeout_s
        self.retries = retries
        self.page_size = page_size
        self.glue = glue
        self.types: SchemaTypes | None = None
        self.rejected: list[Rejected] = []

    def fetch(self) -> list[dict]:
        try:
            if self.types is None:
                self.types = server_schema_types(self.url, self.timeout_s, self.retries)
            conn = connect(self.url, timeout_s=self.timeout_s, retries=self.retries)
            try:
                g13 = (search_entries(conn, "o=grid", GLUE13_FILTER, page_size=self.page_size)
                       if self.glue != "2.0" else [])
                g2 = (search_entries(conn, "o=glue", GLUE2_FILTER, page_size=self.page_size)
                      if self.glue != "1.3" else [])
            finally:
                conn.unbind()
        except LdapError as e:
            raise SourceError(str(e)) from None
        except ldap3.core.exceptions.LDAPException as e:
            raise SourceError(f"{self.url}: {type(e).__name__}: {e}") from None
        ads, rejected = glue13_ce_ads(g13, self.types)
        if g2:
            ads2, rejected2 = glue2_ce_ads(g2, self.types)
            have = {a["GlueCEUniqueID"] for a in ads}
            ads.extend(a for a in ads2 if a["GlueCEUniqueID"] not in have)
            rejected.extend(rejected2)
        self.rejected = rejected
        return ads


__all__ = ["BdiiSource", "AD_ID"]
