"""Attribute typing: the built-in GLUE table equals the Debian glue-schema files; conversion."""
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infosys.schema import GLUE_TYPES, load_schema_files, parse_schema_text, table_from
from infosys import glue_types

SCHEMA_DIR = Path("/etc/ldap/schema")
FILES = sorted(SCHEMA_DIR.glob("Glue-*.schema")) + [SCHEMA_DIR / "GLUE20.schema"]


@pytest.mark.skipif(not (SCHEMA_DIR / "GLUE20.schema").exists(),
                    reason="Debian glue-schema not installed (scripts/test.sh installs it)")
def test_builtin_table_matches_installed_glue_schema():
    builtin = [(k, sv, " ".join(names.split())) for k, sv, names in glue_types.TABLE]
    assert table_from(load_schema_files(FILES)) == builtin


def test_conversion_by_kind():
    assert GLUE_TYPES.convert("gluecestatewaitingjobs", ["12"]) == 12
    assert GLUE_TYPES.convert("GlueCEAccessControlBaseRule", ["VO:a"]) == ["VO:a"]
    assert GLUE_TYPES.convert("GlueHostNetworkAdapterInboundIP", ["false"]) is False
    assert GLUE_TYPES.convert("GlueCEUniqueID", ["x"]) == "x"
    assert GLUE_TYPES.convert("NotInSchema", ["a", "b"]) == ["a", "b"]
    with pytest.raises(ValueError, match="GlueCEStateWaitingJobs: 'many' is not an integer"):
        GLUE_TYPES.convert("GlueCEStateWaitingJobs", ["many"])
    with pytest.raises(ValueError, match="single-valued but has 2 values"):
        GLUE_TYPES.convert("GlueCEStateWaitingJobs", ["1", "2"])
    with pytest.raises(ValueError, match="not TRUE or FALSE"):
        GLUE_TYPES.convert("GlueHostNetworkAdapterInboundIP", ["yes"])


def test_parse_schema_text_names_sup_and_single_value():
    text = """
# comment ( with a paren
attributetype ( 1.2.3.1 NAME ( 'aCount' 'aCountAlias' )
    EQUALITY integerMatch SYNTAX 1.3.6.1.4.1.1466.115.121.1.27 SINGLE-VALUE )
attributetype ( 1.2.3.2 NAME 'aChild' SUP aCount )
attributetype ( 1.2.3.3 NAME 'aText' DESC 'has ( parens )' SYNTAX 1.3.6.1.4.1.1466.115.121.1.15{256} )
objectclass ( 1.2.3.9 NAME 'x' MAY ( aCount ) )
"""
    got = {t.name: (t.kind, t.single_value) for t in parse_schema_text(text)}
    assert got == {"aCount": ("integer", True), "aCountAlias": ("integer", True),
                   "aChild": ("integer", False), "aText": ("string", False)}


_names = st.from_regex(r"[a-z][A-Za-z0-9]{0,15}", fullmatch=True)
_attr = st.tuples(_names, st.sampled_from(["integerMatch", "booleanMatch", "caseIgnoreMatch", None]),
                  st.booleans(), st.text(st.characters(blacklist_characters="'\n"), max_size=20))


@settings(max_examples=100, deadline=None)
@given(st.lists(_attr, max_size=8, unique_by=lambda a: a[0].lower()))
def test_parse_schema_text_recovers_every_declaration(attrs):
    blocks = []
    for i, (name, eq, single, desc) in enumerate(attrs):
        parts = [f"attributetype ( 1.2.3.{i}", f"NAME '{name}'", f"DESC '{desc}'"]
        if eq:
            parts.append(f"EQUALITY {eq}")
        parts.append("SYNTAX 1.3.6.1.4.1.1466.115.121.1.15")
        if single:
            parts.append("SINGLE-VALUE")
        blocks.append("\n    ".join(parts) + " )")
    got = {t.name: (t.kind, t.single_value) for t in parse_schema_text("\n\n".join(blocks))}
    kind = {"integerMatch": "integer", "booleanMatch": "boolean"}
    assert got == {n: (kind.get(eq, "string"), s) for n, eq, s, _ in attrs}


def test_a_description_with_a_unicode_line_separator_is_not_a_comment():
    """Regression (found by hypothesis under load): str.splitlines() breaks at \\x1e, so a DESC
    holding "\\x1e#" turned the rest of the declaration into a comment."""
    text = "attributetype ( 1.2.3 NAME 'a' DESC '\x1e#' EQUALITY integerMatch )\n"
    (at,) = parse_schema_text(text)
    assert at.name == "a" and at.kind == "integer"
