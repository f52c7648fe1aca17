"""Robustness: random and mutated inputs never crash; huge, deep and pathological inputs end
quickly with a clear, located error (or a value)."""
import random
import time

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from jdl import ERROR, JDLError, JDLSyntaxError, evaluate, matches, parse_expr, parse_jdl, to_jdl
from jdl import regex as jdl_regex
from .paths import SHARED_JDL

SEEDS = [open(SHARED_JDL / name).read() for name in (
    "01_hostname_nobrackets.jdl", "06_parametric_list.jdl", "09_wmsfeedback_nobrackets.jdl")]
ALPHABET = 'abcxyzAZ0129_ \t\n;=[]{}()"\'.,+-*/%<>!~^&|?:#\\'
TOKENS = ["[", "]", "{", "}", "(", ")", ";", "=", "==", "=?=", "&&", "||", "?", ":", "?:", ",",
          ".", "other.", '"s"', "'q'", "1", "2.5e3", "true", "undefined", "error", "is", "//c\n",
          "/*", "*/", "#", "\n", "member(", "RegExp(", "Executable", "-", "!"]
CE = {"GlueCEStateStatus": "Production", "GlueCEInfoTotalCPUs": 4, "Tags": ["X", "MPICH"],
      "GlueCEStateEstimatedResponseTime": 10, "GlueCEInfoLRMSType": "pbs"}
BATCH, BATCHES = 12_500, 8  # 100,000 inputs


def mutate(rnd: random.Random, text: str) -> str:
    for _ in range(rnd.randint(1, 5)):
        i = rnd.randrange(len(text) + 1)
        k = rnd.randrange(5)
        piece = rnd.choice(ALPHABET) if k < 3 else rnd.choice(TOKENS)
        if k in (0, 3):
            text = text[:i] + piece + text[i:]
        elif k == 1:
            text = text[:i] + text[i + rnd.randint(1, 6):]
        else:
            text = text[:i] + piece + text[i + len(piece):]
    return text


def random_text(rnd: random.Random) -> str:
    return "".join(rnd.choice(TOKENS) if rnd.random() < 0.5 else rnd.choice(ALPHABET)
                   for _ in range(rnd.randint(0, 40)))


def check_one(text: str, round_trip: bool = True):
    try:
        job = parse_jdl(text, "fuzz.jdl")
    except JDLError as e:
        assert e.problems
        for p in e.problems:
            assert p.line >= 1 and p.column >= 1 and p.message
        if isinstance(e, JDLSyntaxError):
            assert str(e).startswith(f"fuzz.jdl:{e.line}:{e.column}: ")
        return False
    matches(job, CE, now=0.0)
    job.rank.evaluate(CE)
    if round_trip:
        assert parse_jdl(to_jdl(job), "again.jdl", validate=False) == job
    return True


@pytest.mark.slow  # 100,000 inputs, about 80 s
@pytest.mark.timeout(900)
@settings(max_examples=BATCHES, deadline=None, database=None, phases=[Phase.generate],
          derandomize=True,  # the same 100,000 cases on every run (CI must not flake)
          suppress_health_check=list(HealthCheck))
@given(st.integers(0, 2**32 - 1))
def test_100000_random_and_mutated_inputs_never_crash(seed):
    rnd = random.Random(seed)
    accepted = 0
    for i in range(BATCH):
        text = random_text(rnd) if i % 2 == 0 else mutate(rnd, rnd.choice(SEEDS))
        accepted += check_one(text, round_trip=i % 8 == 1)
    assert accepted > 0  # the mutations keep some inputs valid, so evaluation is exercised too


def _timed(fn):
    """``(fn(), CPU seconds it took)``: the CPU time of this thread, which is what "quickly"
    means here (no quadratic work on hostile input) and which a loaded host does not stretch
    as it stretches wall time."""
    t = time.thread_time()
    result = fn()
    return result, time.thread_time() - t


def test_one_megabyte_jdl_is_refused_quickly():
    text = 'Executable = "/bin/x";\nArguments = "' + "x" * (1 << 20) + '";\n'
    with pytest.raises(JDLSyntaxError) as info:
        _, took = _timed(lambda: parse_jdl(text, "big.jdl"))
    assert "more than the" in info.value.message and "allowed" in info.value.message
    _, took = _timed(lambda: pytest.raises(JDLSyntaxError, parse_jdl, text, "big.jdl"))
    assert took < 1.0


@pytest.mark.parametrize("text", [
    "a = " + "[b = " * 10_000 + "1" + "]" * 10_000 + ";",
    "a = " + "(" * 10_000 + "1" + ")" * 10_000 + ";",
    "a = " + "{" * 10_000 + "}" * 10_000 + ";",
    "a = " + "-" * 10_000 + "1;",
    "a = x" + ".y" * 10_000 + ";",
    "a = f(" * 10_000 + ")" * 10_000 + ";",
])
def test_ten_thousand_deep_nesting_is_a_located_error_within_a_second(text):
    with pytest.raises(JDLSyntaxError) as info:
        _, took = _timed(lambda: parse_jdl(text, "deep.jdl"))
    assert "deeper than" in info.value.message and info.value.line == 1
    _, took = _timed(lambda: pytest.raises(JDLSyntaxError, parse_jdl, text, "deep.jdl"))
    assert took < 1.0


def test_long_flat_chains_are_fine():
    req = " || ".join(f'other.GlueCEUniqueID == "ce{i}:8443/cream-pbs-q"' for i in range(3000))
    job = parse_jdl(f'Executable = "/bin/x"; Requirements = {req};')
    assert matches(job, {"GlueCEUniqueID": "ce2999:8443/cream-pbs-q"}, now=0.0)
    assert not matches(job, {"GlueCEUniqueID": "other"}, now=0.0)
    assert parse_jdl(to_jdl(job)).requirements.text == job.requirements.text


@pytest.mark.parametrize("pattern,target", [
    ("(a+)+$", "a" * 40 + "b"), ("(x+x+)+y", "x" * 60), ("(a|aa|aaa)*b", "a" * 80),
    ("^(\\\\w+\\\\s?)*$", "a" * 60 + "!"), ("(.*a){12}[xy]", "a" * 2000),
    ("(.*)(.*)(.*)(.*)(.*)[yz]", "a" * 2000),
])
def test_pathological_regexp_ends_within_a_second(pattern, target):
    v, took = _timed(lambda: evaluate(parse_expr(f'regexp("{pattern}", "{target}")')))
    assert v in (False, ERROR) and took < 1.0


def test_regexp_running_past_the_timeout_is_error(monkeypatch):
    monkeypatch.setattr(jdl_regex, "TIMEOUT_S", 0.05)
    expr = parse_expr('regexp("(.*a){12}[xy]", "' + "a" * 2000 + '")')
    v, took = _timed(lambda: evaluate(expr))
    assert v is ERROR and took < 1.0
