"""parse_ldif / format_ldif: RFC 2849 content records, errors naming source:line."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infosys.ldif import LdifEntry, LdifError, format_ldif, parse_ldif
from tests.paths import SHARED_LDIF

DATA = SHARED_LDIF


def test_continuation_base64_comments_version_and_several_entries():
    text = (
        "version: 1\n"
        "# a comment\n"
        "#  folded comment\n"
        " still the comment\n"
        "dn: GlueCEUniqueID=ce1.example:8443/cream-pbs-lo\n"
        " ng,mds-vo-name=resource,o=grid\n"
        "objectClass: GlueCE\n"
        "GlueCEUniqueID: ce1.example:8443/cream-pbs-long\n"
        "GlueCEInfoContactString:: aHR0cHM6Ly9jZTEuZXhhbXBsZTo4NDQzLw==\n"
        "glueceaccesscontrolbaserule: VO:dteam\n"
        "GlueCEAccessControlBaseRule: VO:atlas\n"
        "\n\n"
        "dn: o=grid\n"
        "o: grid\n")
    entries = parse_ldif(text, "x.ldif")
    assert [e.dn for e in entries] == [
        "GlueCEUniqueID=ce1.example:8443/cream-pbs-long,mds-vo-name=resource,o=grid", "o=grid"]
    ce = entries[0]
    assert ce.line == 5 and ce.source == "x.ldif"
    assert ce.attrs["GlueCEInfoContactString"] == ["https://ce1.example:8443/"]
    # first spelling kept, later spellings merged into it
    assert ce.attrs["glueceaccesscontrolbaserule"] == ["VO:dteam", "VO:atlas"]
    assert ce.values("GLUECEACCESSCONTROLBASERULE") == ["VO:dteam", "VO:atlas"]
    assert ce.first("objectclass") == "GlueCE" and ce.object_classes == {"gluece"}
    assert entries[1].line == 14


def test_version_line_followed_by_blank_line():
    assert [e.dn for e in parse_ldif("version: 1\n\ndn: o=grid\no: grid\n")] == ["o=grid"]


def test_crlf_line_ends():
    e = parse_ldif("dn: o=grid\r\no: grid\r\n\r\ndn: o=glue\r\no: glue\r\n")
    assert [x.attrs for x in e] == [{"o": ["grid"]}, {"o": ["glue"]}]


@pytest.mark.parametrize("text, line, fragment", [
    ("dn: o=grid\nthis line has no colon\n", 2, "expected 'attribute: value'"),
    ("o: grid\n", 1, "must start with 'dn:'"),
    ("dn: o=grid\ndescription:: !!notbase64\n", 2, "invalid base64"),
    ("dn: o=grid\ndescription:: /w==\n", 2, "not UTF-8"),
    ("dn: o=grid\no: grid\ndn: o=glue\n", 3, "second 'dn:'"),
    ("dn: o=grid\nchangetype: delete\n", 2, "change records"),
    ("dn: o=grid\nphoto:< file:///etc/passwd\n", 2, "URL values"),
    ("\n\n dangling\n", 3, "continuation line"),
    ("dn:\n", 1, "empty DN"),
    ("version: 2\ndn: o=grid\n", 1, "unsupported LDIF version"),
    ("dn: o=grid\nbad name: x\n", 2, "invalid attribute name"),
])
def test_errors_name_source_and_line(text, line, fragment):
    with pytest.raises(LdifError) as ei:
        parse_ldif(text, "site.ldif")
    assert ei.value.line == line and ei.value.source == "site.ldif"
    assert str(ei.value).startswith(f"site.ldif:{line}: ") and fragment in str(ei.value)


def test_real_fixtures_parse():
    counts = {p.name: len(parse_ldif(p.read_text(encoding="utf-8"), str(p)))
              for p in sorted(DATA.glob("*.ldif"))}
    assert counts == {"glue13_service_servicedata.ldif": 6, "glue13_site2_cache.ldif": 3,
                      "glue13_subcluster_specint_vs_hepspec.ldif": 1,
                      "glue2_service_endpoint_policy.ldif": 6, "synthetic_site.ldif": 18}
    long_key = parse_ldif((DATA / "glue13_service_servicedata.ldif").read_text())[4]
    assert len(long_key.first("GlueServiceDataKey")) > 100


_names = st.sampled_from(["cn", "GlueCEUniqueID", "description", "GLUE2EntityOtherInfo", "o"])
_values = st.text(st.characters(blacklist_categories=("Cs",)), max_size=120)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.text("abcdefgh=,.:/ -", min_size=1, max_size=90).map(lambda s: "cn=" + s.strip() + "x"),
                          st.dictionaries(_names, st.lists(_values, min_size=1, max_size=3),
                                          max_size=4)), max_size=5))
def test_format_then_parse_round_trips(records):
    entries = [LdifEntry(dn, attrs) for dn, attrs in records]
    back = parse_ldif(format_ldif(entries, width=40))
    assert [(e.dn, e.attrs) for e in back] == [(e.dn, e.attrs) for e in entries]


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=1, max_value=200), st.integers(min_value=0, max_value=3))
def test_stream_parse_equals_parse_at_any_chunk_size(chunk, extra_blank):
    import io
    from infosys.ldif import parse_ldif_stream
    text = ("version: 1\n# c\n" + ("\n\n" + "\n" * extra_blank).join(
        (DATA / "synthetic_site.ldif").read_text().split("\n\n")) + "\n# trailer\n")
    want = parse_ldif(text, "s")
    got = parse_ldif_stream(io.BytesIO(text.encode()), "s", chunk_size=chunk)
    assert [(e.dn, e.attrs, e.line) for e in got] == [(e.dn, e.attrs, e.line) for e in want]


def test_stream_parse_reports_the_exact_line_of_an_error():
    import io
    from infosys.ldif import parse_ldif_stream
    text = "dn: o=a\no: a\n\n" * 50 + "dn: o=b\nbroken line\n"
    with pytest.raises(LdifError) as ei:
        parse_ldif_stream(io.BytesIO(text.encode()), "big.ldif", chunk_size=16)
    assert ei.value.line == 152 and str(ei.value).startswith("big.ldif:152:")


def test_stream_fallback_reads_the_rest_of_a_pipe():
    import os
    import threading
    from infosys.ldapclient import _Drain
    from infosys.ldif import parse_ldif_stream
    text = ("dn: o=a\no: a\n\n" * 200 + "dn: o=b\nO: b\no: c\n").encode()  # two spellings
    r, w = os.pipe()
    threading.Thread(target=lambda: (os.write(w, text), os.close(w)), daemon=True).start()
    with os.fdopen(r, "rb") as stream:
        entries = parse_ldif_stream(_Drain(stream), "pipe", chunk_size=64)
    assert len(entries) == 201 and entries[-1].attrs == {"O": ["b", "c"]}
