"""Hypothesis properties of the jdl parser and printer."""
import string
import pytest

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jdl import JDLError, JDLSyntaxError, parse_classad, parse_expr, parse_jdl, unparse
from jdl import nodes as n
from jdl.printer import quote, record_text

NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True).filter(
    lambda s: s.lower() not in {"true", "false", "undefined", "error", "is", "isnt"})
BINOPS = ["+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">=", "=?=", "=!=", "is", "isnt",
          "&&", "||", "&", "|", "^", "<<", ">>", ">>>"]

literals = st.one_of(
    st.integers(0, 2**63 - 1).map(n.Literal),
    st.floats(0, 1e300, allow_nan=False, allow_infinity=False).map(n.Literal),
    st.text(max_size=12).map(n.Literal),
    st.booleans().map(n.Literal),
)
attrs = st.one_of(NAMES.map(n.AttrRef), NAMES.map(lambda s: n.Select(n.AttrRef("other"), s)))


def _extend(children):
    return st.one_of(
        st.tuples(st.sampled_from(BINOPS), children, children).map(lambda t: n.Binary(*t)),
        st.tuples(st.sampled_from(["-", "+", "!", "~"]), children).map(lambda t: n.Unary(*t)),
        st.tuples(children, children, children).map(lambda t: n.Conditional(*t)),
        st.tuples(NAMES, st.lists(children, max_size=3)).map(lambda t: n.Call(t[0], tuple(t[1]))),
        st.lists(children, max_size=3).map(lambda xs: n.ListExpr(tuple(xs))),
        st.tuples(children, children).map(lambda t: n.Subscript(*t)),
        st.tuples(children, NAMES).map(lambda t: n.Select(*t)),
        st.lists(st.tuples(NAMES, children), max_size=3).map(
            lambda xs: n.RecordExpr(tuple(n.AttrDef(k, v) for k, v in xs))),
    )


exprs = st.recursive(st.one_of(literals, attrs), _extend, max_leaves=25)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(exprs)
def test_printed_expression_parses_back_equal(node):
    text = unparse(node)
    assert parse_expr(text) == node, text


@settings(max_examples=200)
@given(st.lists(st.tuples(NAMES, exprs), min_size=1, max_size=6), st.booleans())
def test_printed_record_parses_back_equal(pairs, brackets):
    rec = n.RecordExpr(tuple(n.AttrDef(k, v) for k, v in pairs))
    text = record_text(rec, indent=2)
    if not brackets:
        text = text[1:-1]
    assert parse_classad(text) == rec


@settings(max_examples=300)
@given(st.text(max_size=12))
def test_string_literals_round_trip(s):
    assert parse_expr(quote(s)).value == s


JDL_ALPHABET = string.ascii_letters + string.digits + ' \t\n;=[]{}()"\'.,+-*/%<>!&|?:#_\\'


@settings(max_examples=1000)
@given(st.text(alphabet=JDL_ALPHABET, max_size=80))
def test_random_text_fails_only_with_located_jdl_errors(text):
    try:
        parse_jdl(text, "r.jdl")
    except JDLError as e:
        lines = text.split("\n")
        for p in e.problems:
            assert p.filename == "r.jdl"
            assert 1 <= p.line <= len(lines) + 1
            assert p.column >= 1
        if isinstance(e, JDLSyntaxError):
            assert str(e).startswith(f"r.jdl:{e.line}:{e.column}: ")


VALID = ('[\n  Executable = "/bin/ls";\n  Arguments = "-l";\n  StdOutput = "o";\n'
         '  OutputSandbox = {"o", "e"};\n  Requirements = other.GlueCEInfoTotalCPUs >= 2 && '
         'member("X", other.Tags);\n  Rank = -other.GlueCEStateEstimatedResponseTime;\n]\n')


@settings(max_examples=1000)
@given(st.data())
def test_mutated_valid_jdl_never_crashes(data):
    text = VALID
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(text)))
        op = data.draw(st.sampled_from(["insert", "delete", "replace"]))
        ch = data.draw(st.sampled_from(JDL_ALPHABET))
        if op == "insert":
            text = text[:i] + ch + text[i:]
        elif op == "delete":
            text = text[:i] + text[i + 1:]
        else:
            text = text[:i] + ch + text[i + 1:]
    try:
        job = parse_jdl(text, "m.jdl")
    except JDLError as e:
        assert e.problems and all(p.line >= 1 and p.column >= 1 for p in e.problems)
    else:
        job.requirements.evaluate({"GlueCEInfoTotalCPUs": 4, "Tags": ["X"]})
        job.rank.evaluate({})


# ---- the fast parser against the normative lark grammar -------------------------------------

def _positions(node):
    out, stack = [], [node]
    while stack:
        x = stack.pop()
        out.append((type(x).__name__, x.line, x.column))
        stack.extend(x.children())
        if isinstance(x, n.RecordExpr):
            out.extend((d.name, d.line, d.column) for d in x.defs)
    return out


def _both(text):
    from jdl.fastparse import FastParseError, parse_defs
    from jdl.parser import _parse_with_lark
    try:
        fast = n.RecordExpr(parse_defs(text), 1, 1)
    except FastParseError:
        fast = None
    try:
        slow = _parse_with_lark(text, "t.jdl")
    except JDLSyntaxError:
        slow = None
    return fast, slow


def _assert_agree(text):
    fast, slow = _both(text)
    if fast is not None:
        assert slow is not None, f"fast parser accepted what lark rejects: {text!r}"
        assert fast == slow, text
        assert _positions(fast) == _positions(slow), text
    else:
        assert slow is None, f"lark accepts what the fast parser rejects: {text!r}"


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(NAMES, exprs), min_size=1, max_size=4), st.booleans(),
       st.sampled_from([" ", "\n", "\t", " /* c */ ", "\n// c\n", "\n# c\n"]))
def test_fast_parser_builds_the_same_tree_as_lark(pairs, brackets, sep):
    rec = n.RecordExpr(tuple(n.AttrDef(k, v) for k, v in pairs))
    text = record_text(rec, indent=2).replace(" = ", sep + "=" + sep).replace(";", sep + ";")
    if not brackets:
        text = text[1:-1]
    _assert_agree(text)


@settings(max_examples=1500)
@given(st.text(alphabet=JDL_ALPHABET, max_size=60))
def test_fast_parser_accepts_exactly_what_lark_accepts(text):
    _assert_agree(text)


@settings(max_examples=1000)
@given(st.data())
def test_fast_parser_agrees_on_mutated_jdl(data):
    text = VALID
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(text)))
        text = text[:i] + data.draw(st.sampled_from(JDL_ALPHABET)) + text[i + 1:]
    _assert_agree(text)


# ---- the canonical printer on whole job descriptions ----------------------------------------

SAFE_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=15)
PATHS = st.from_regex(r"/[a-z]{1,8}(/[a-z0-9_.]{1,8}){0,2}", fullmatch=True)


@st.composite
def job_descriptions(draw):
    attrs = {"Executable": quote(draw(PATHS)), "Arguments": quote(draw(SAFE_TEXT)),
             "StdOutput": quote(draw(SAFE_TEXT)),
             "InputSandbox": "{ " + ", ".join(quote(p) for p in draw(st.lists(PATHS, max_size=3)))
                             + " }",
             "RetryCount": str(draw(st.integers(0, 10))),
             "FuzzyRank": draw(st.sampled_from(["true", "false"])),
             "Requirements": unparse(draw(exprs)), "Rank": unparse(draw(exprs))}
    for name in draw(st.lists(NAMES, max_size=3)):
        attrs.setdefault(name, unparse(draw(exprs)))
    return "[\n" + "".join(f"  {k} = {v};\n" for k, v in attrs.items()) + "]\n"


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(job_descriptions())
def test_printed_job_description_parses_back_to_an_equal_model(text):
    from jdl import to_jdl
    try:
        job = parse_jdl(text, "gen.jdl")
    except JDLError:  # e.g. a generated constant Requirements that is not boolean
        job = parse_jdl(text, "gen.jdl", validate=False)
    again = parse_jdl(to_jdl(job), "printed.jdl", validate=False)
    assert again == job
    for prop in ("executable", "arguments", "std_output", "input_sandbox", "retry_count",
                 "fuzzy_rank"):
        assert getattr(again, prop) == getattr(job, prop)
    assert again.requirements.text == job.requirements.text and again.rank == job.rank
    assert to_jdl(again) == to_jdl(job)


@pytest.mark.parametrize("word", ["IS", "isnt", "True", "false", "UNDEFINED", "error"])
def test_reserved_words_are_not_attribute_names(word):
    # found by test_fast_parser_accepts_exactly_what_lark_accepts ('IS=0'): both parsers refuse it
    from jdl.parser import parse_classad
    with pytest.raises(JDLSyntaxError, match=rf"t.jdl:1:1: {word} is a reserved word"):
        parse_classad(f"{word} = 0;", "t.jdl")
    assert parse_classad(f"'{word}' = 0;", "t.jdl").defs[0].name == word
    _assert_agree(f"{word}=0")
