"""GLUE 1.3 entries -> CE ads, assembled the way the gLite WMS ISM purchaser does.

A CE ad is a plain dict keyed by GLUE 1.3 attribute names (schema spelling, e.g.
``GlueCEStateWaitingJobs``; ``GlueCEStateFreeCPUs`` as gLite and JDL write it), values typed from
the schema (int for integerMatch, bool for booleanMatch, list for multi-valued attributes such
as GlueCEAccessControlBaseRule, str otherwise). Assembly (gLite org.glite.wms.ism
purchaser/ldap-utils.cpp, described in issue 4):

1. a GlueCE is joined to its GlueCluster through ``GlueForeignKey: GlueClusterUniqueID=<id>``
   (falling back to GlueCEInfoHostName, as gLite does);
2. the ad is updated with the cluster's *first* GlueSubCluster (GlueHost*, GlueSubCluster*);
   a cluster without a subcluster is skipped, its CEs reported as rejected;
3. ``GlueSiteUniqueID`` comes from the cluster's ``GlueForeignKey: GlueSiteUniqueID=<site>``;
4. ``CloseStorageElements`` is a list of ``{"name": GlueCESEBindSEUniqueID,
   "mount": GlueCESEBindCEAccesspoint}`` from the CE's GlueCESEBind entries;
5. each GlueVOView of the CE with a non-empty GlueCEAccessControlBaseRule gives one more ad,
   the CE ad updated with the view's attributes, keyed ``<GlueCEUniqueID>/<GlueVOViewLocalID>``;
   the rules covered by views are removed from the CE's own ad, which is dropped when none is
   left (so a job of that VO matches the view, not the CE twice).

Every ad carries ``VGridAdID`` (its key: the CE id or the VO-view key) and, for views,
``GlueVOViewLocalID``. Inconsistent entries never raise: they are returned as ``Rejected``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Protocol

from ldap3.utils.dn import parse_dn

from infosys.schema import GLUE_TYPES, SchemaTypes

AD_ID = "VGridAdID"
"""Key of an ad's identity: GlueCEUniqueID, or ``<GlueCEUniqueID>/<GlueVOViewLocalID>``."""

_CANONICAL_OVERRIDES = {"gluecestatefreecpus": "GlueCEStateFreeCPUs"}
_STRUCTURAL = {"objectclass", "gluechunkkey", "glueforeignkey", "glueinformationserviceurl",
               "glueschemaversionmajor", "glueschemaversionminor"}
_COUNTS = ("GlueCEStateRunningJobs", "GlueCEStateWaitingJobs", "GlueCEStateTotalJobs",
           "GlueCEInfoTotalCPUs", "GlueCEStateFreeCPUs")


class EntryLike(Protocol):
    dn: str
    attrs: dict[str, list[str]]


@dataclass(frozen=True)
class Rejected:
    """An entry left out of the ISM, with the reason; source/line when it came from a file."""

    dn: str
    reason: str
    source: str = ""
    line: int = 0

    def __str__(self) -> str:
        where = (f"{self.source}:{self.line}: " if self.line else f"{self.source}: ") \
            if self.source else ""
        return f"{where}{self.dn}: {self.reason}"

    def as_dict(self) -> dict:
        return {"dn": self.dn, "reason": self.reason, "source": self.source, "line": self.line}


class _Typed:
    """An entry with typed attributes; its first two RDNs parsed on first use."""

    __slots__ = ("entry", "attrs", "classes", "_rdns")

    def __init__(self, entry: EntryLike, attrs: dict[str, object],
                 classes: frozenset[str]) -> None:
        self.entry, self.attrs, self.classes, self._rdns = entry, attrs, classes, None

    @property
    def rdn(self) -> tuple[str, str]:
        if self._rdns is None:
            self._rdns = _rdns(self.entry.dn)
        return self._rdns[0]

    @property
    def parent(self) -> tuple[str, str]:
        if self._rdns is None:
            self._rdns = _rdns(self.entry.dn)
        return self._rdns[1]


@dataclass
class _Cluster:
    typed: _Typed
    subclusters: list[_Typed] = field(default_factory=list)


def canonical_name(name: str, types: SchemaTypes = GLUE_TYPES) -> str:
    """The attribute spelling used as an ad key (schema spelling; unknown names as given)."""
    low = name.lower()
    if low in _CANONICAL_OVERRIDES:
        return _CANONICAL_OVERRIDES[low]
    t = types.get(name)
    return t.name if t is not None else name


def _rdns(dn: str) -> tuple[tuple[str, str], tuple[str, str]]:
    """(attr lower, value) of the first two RDNs of ``dn``."""
    if "\\" not in dn and '"' not in dn and "+" not in dn:
        parts = dn.split(",", 2)
        out = []
        for p in parts[:2]:
            a, _, v = p.partition("=")
            out.append((a.strip().lower(), v.strip()))
    else:
        try:
            parsed = parse_dn(dn, escape=False, strip=True)
        except Exception:  # ldap3 raises LDAPInvalidDnError and others on a bad DN
            return ("", ""), ("", "")
        out = [(a.lower(), v) for a, v, _ in parsed[:2]]
    while len(out) < 2:
        out.append(("", ""))
    return out[0], out[1]


_KIND_BY_CLASS = (("gluece", "ce"), ("gluecluster", "cluster"), ("gluesubcluster", "subcluster"),
                  ("gluevoview", "view"), ("gluecesebind", "bind"))
_KIND_BY_RDN = {"glueceuniqueid": "ce", "glueclusteruniqueid": "cluster",
                "gluesubclusteruniqueid": "subcluster", "gluevoviewlocalid": "view",
                "gluecesebindseuniqueid": "bind"}


_KIND_CACHE: dict[tuple, tuple[str | None, frozenset[str]]] = {}


def _entry_kind(entry: EntryLike) -> tuple[str | None, frozenset[str]]:
    """What GLUE 1.3 object an entry is (by objectClass, else by its RDN attribute), and its
    lower-cased object classes. Memoised on the objectClass values (they repeat)."""
    vals = entry.attrs.get("objectClass")
    if vals is None:
        vals = [v for k, vs in entry.attrs.items() if k.lower() == "objectclass" for v in vs]
    key = tuple(vals)
    hit = _KIND_CACHE.get(key)
    if hit is None:
        classes = frozenset(v.lower() for v in vals)
        kind = next((k for cls, k in _KIND_BY_CLASS if cls in classes), None)
        hit = (kind, classes)
        if len(_KIND_CACHE) < 10_000:
            _KIND_CACHE[key] = hit
    if hit[0] is None and not hit[1]:
        rdn_attr = entry.dn.split("=", 1)[0].strip().lower()
        return _KIND_BY_RDN.get(rdn_attr), hit[1]
    return hit


def _spec(types: SchemaTypes, name: str) -> tuple[str, str | None, bool]:
    """(ad key, kind or None if unknown or objectClass, single-valued) of an attribute name."""
    spec = types.cache.get(name)
    if spec is None:
        t = types.get(name)
        if name.lower() == "objectclass":
            spec = (name, "skip", False)
        else:
            canon = _CANONICAL_OVERRIDES.get(name.lower()) or (t.name if t else name)
            spec = (canon, t.kind if t else None, t.single_value if t else False)
        types.cache[name] = spec
    return spec


def _type_entry(entry: EntryLike, types: SchemaTypes, classes: frozenset[str]) -> _Typed:
    """Typed attributes of an entry; raises ValueError naming the bad attribute.

    Value lists are shared with the entry, not copied (ads are read-only)."""
    attrs: dict[str, object] = {}
    cache = types.cache
    for name, values in entry.attrs.items():
        spec = cache.get(name) or _spec(types, name)
        canon, kind, single = spec
        if kind == "string":
            if single:
                if len(values) != 1:
                    raise ValueError(f"{canon} is single-valued but has {len(values)} values")
                attrs[canon] = values[0]
            else:
                attrs[canon] = values
        elif kind == "integer" and single and len(values) == 1:
            try:
                attrs[canon] = int(values[0])
            except ValueError:
                raise ValueError(f"{canon}: {values[0]!r} is not an integer") from None
        elif kind == "skip":
            continue
        elif kind is None:
            attrs[canon] = values[0] if len(values) == 1 else values
        else:
            attrs[canon] = types.convert(name, values)
    return _Typed(entry, attrs, classes)


def glue_typed(attrs: dict[str, list[str]], types: SchemaTypes = GLUE_TYPES) -> dict[str, object]:
    """LDIF attribute values (name -> list of str) typed as in a CE ad: canonical names,
    integers for integer attributes, single values unwrapped. ValueError names a bad attribute."""
    return _type_entry(_AttrsOnly(attrs), types, frozenset()).attrs


class _AttrsOnly:
    """An EntryLike without a DN (only its attributes are typed)."""

    __slots__ = ("attrs",)
    dn = ""

    def __init__(self, attrs: dict[str, list[str]]) -> None:
        self.attrs = attrs


def _rejected(entry: EntryLike, reason: str) -> Rejected:
    return Rejected(entry.dn, reason, getattr(entry, "source", "") or "",
                    getattr(entry, "line", 0) or 0)


def _key_value(values: object, attr: str) -> str | None:
    """The id in the first ``<attr>=<id>`` of a GlueForeignKey/GlueChunkKey value list."""
    if isinstance(values, str):
        values = [values]
    prefix = attr.lower() + "="
    for v in values or []:
        s = str(v).strip()
        if s.lower().startswith(prefix):
            return s[len(prefix):].strip()
    return None


def _ref(t: _Typed, parent_attr: str) -> str | None:
    """The id of the parent object: from the DN's second RDN, else from GlueChunkKey."""
    if t.parent[0] == parent_attr.lower():
        return t.parent[1]
    return _key_value(t.attrs.get("GlueChunkKey"), parent_attr)


def _check_ce(t: _Typed) -> str | None:
    ce_id = t.attrs.get("GlueCEUniqueID")
    if not isinstance(ce_id, str) or not ce_id.strip():
        return "GlueCE without GlueCEUniqueID"
    for name in _COUNTS:
        v = t.attrs.get(name)
        if isinstance(v, int) and v < 0:
            return f"{name} is negative ({v})"
    return None


def _classify(entries: Iterable[EntryLike], types: SchemaTypes, rejected: list[Rejected]):
    ces: list[_Typed] = []
    clusters: dict[str, _Cluster] = {}
    pending_sc: list[_Typed] = []
    views: dict[str, list[_Typed]] = {}
    binds: dict[str, list[_Typed]] = {}
    for entry in entries:
        kind, classes = _entry_kind(entry)
        if kind is None:
            continue
        try:
            t = _type_entry(entry, types, classes)
        except ValueError as e:
            rejected.append(_rejected(entry, str(e)))
            continue
        if kind == "ce":
            ces.append(t)
        elif kind == "cluster":
            cid = t.attrs.get("GlueClusterUniqueID") or t.rdn[1]
            clusters.setdefault(str(cid), _Cluster(t)).typed = t
        elif kind == "subcluster":
            pending_sc.append(t)
        elif kind == "view":
            ce_id = _ref(t, "GlueCEUniqueID")
            local = str(t.attrs.get("GlueVOViewLocalID") or t.rdn[1])
            if ce_id is None:
                rejected.append(_rejected(entry, "GlueVOView without its GlueCE (DN or GlueChunkKey)"))
            elif any(str(v.attrs.get("GlueVOViewLocalID") or v.rdn[1]) == local
                     for v in views.get(ce_id, [])):
                rejected.append(_rejected(entry, f"duplicate GlueVOView {local!r} of {ce_id}"))
            else:
                views.setdefault(ce_id, []).append(t)
        elif kind == "bind":
            ce_id = t.attrs.get("GlueCESEBindCEUniqueID") or _ref(t, "GlueCESEBindGroupCEUniqueID")
            se = t.attrs.get("GlueCESEBindSEUniqueID") or t.rdn[1]
            if ce_id and not any((b.attrs.get("GlueCESEBindSEUniqueID") or b.rdn[1]) == se
                                 for b in binds.get(str(ce_id), [])):
                binds.setdefault(str(ce_id), []).append(t)
    for sc in pending_sc:
        cid = _ref(sc, "GlueClusterUniqueID")
        if cid is None or cid not in clusters:
            rejected.append(_rejected(sc.entry, f"GlueSubCluster of unknown GlueCluster {cid!r}"))
        else:
            clusters[cid].subclusters.append(sc)
    return ces, clusters, views, binds


def glue13_ce_ads(entries: Iterable[EntryLike], types: SchemaTypes = GLUE_TYPES
                  ) -> tuple[list[dict], list[Rejected]]:
    """CE ads (and VO-view ads) from GLUE 1.3 entries, plus the entries rejected with reasons.

    ``entries``: LdifEntry-like objects (``.dn``, ``.attrs`` name -> list of str) in server or
    file order; ``types``: attribute types (the glue-schema table by default, or a live server's).
    Returns (ads in CE order, rejected). Never raises on bad data. See the module docstring.
    """
    rejected: list[Rejected] = []
    ces, clusters, views, binds = _classify(entries, types, rejected)
    ads: list[dict] = []
    seen: dict[str, str] = {}
    for ce in ces:
        problem = _check_ce(ce)
        ce_id = str(ce.attrs.get("GlueCEUniqueID", ""))
        if problem is None and ce_id in seen:
            problem = f"duplicate GlueCEUniqueID (first published by {seen[ce_id]})"
        cid = _key_value(ce.attrs.get("GlueForeignKey"), "GlueClusterUniqueID") \
            or ce.attrs.get("GlueCEInfoHostName")
        if problem is None:
            if cid is None:
                problem = "no GlueForeignKey: GlueClusterUniqueID=<id> and no GlueCEInfoHostName"
            elif str(cid) not in clusters:
                problem = f"GlueCluster {cid!r} (GlueForeignKey) not found"
            elif not clusters[str(cid)].subclusters:
                problem = f"GlueCluster {cid!r} has no GlueSubCluster (skipped, as gLite does)"
        if problem is not None:
            rejected.append(_rejected(ce.entry, problem))
            continue
        seen[ce_id] = ce.entry.dn
        ads.extend(_assemble(ce, ce_id, clusters[str(cid)], views.get(ce_id, []),
                             binds.get(ce_id, [])))
    return ads, rejected


def _assemble(ce: _Typed, ce_id: str, cluster: _Cluster, views: list[_Typed],
              binds: list[_Typed]) -> list[dict]:
    ad = dict(ce.attrs)
    for k, v in cluster.subclusters[0].attrs.items():
        if k.lower() not in _STRUCTURAL:
            ad[k] = v
    ad["GlueClusterUniqueID"] = str(cluster.typed.attrs.get("GlueClusterUniqueID")
                                    or cluster.typed.rdn[1])
    site = _key_value(cluster.typed.attrs.get("GlueForeignKey"), "GlueSiteUniqueID")
    if site:
        ad["GlueSiteUniqueID"] = site
    ad["CloseStorageElements"] = [
        {"name": b.attrs.get("GlueCESEBindSEUniqueID") or b.rdn[1],
         "mount": b.attrs.get("GlueCESEBindCEAccesspoint", "")} for b in binds]
    ad[AD_ID] = ce_id
    rules = list(ad.get("GlueCEAccessControlBaseRule") or [])
    out: list[dict] = []
    for view in views:
        view_rules = view.attrs.get("GlueCEAccessControlBaseRule") or []
        if not view_rules:
            continue
        vad = dict(ad)
        for k, v in view.attrs.items():
            if k.lower() not in _STRUCTURAL:
                vad[k] = v
        local_id = str(view.attrs.get("GlueVOViewLocalID") or view.rdn[1])
        vad["GlueVOViewLocalID"] = local_id
        vad[AD_ID] = f"{ce_id}/{local_id}"
        out.append(vad)
        rules = [r for r in rules if r not in view_rules]
    if not out:
        return [ad]
    if rules:
        ad["GlueCEAccessControlBaseRule"] = rules
        out.insert(0, ad)
    return out


def vos_of(ad: dict) -> list[str]:
    """VO names in an ad's GlueCEAccessControlBaseRule (``VO:<name>`` rules; also ``VOMS:/<name>/...``)."""
    out = []
    for r in ad.get("GlueCEAccessControlBaseRule") or []:
        r = str(r)
        if r[:3].upper() == "VO:":
            out.append(r[3:])
        elif r[:5].upper() == "VOMS:":
            out.append(r[5:].lstrip("/").split("/", 1)[0])
    return out
