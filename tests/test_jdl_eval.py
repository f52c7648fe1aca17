"""ClassAd evaluation: three-valued logic, operators, functions, matching against CE ads."""
import pytest

from jdl import (ERROR, UNDEFINED, MappingAd, evaluate, matches, parse_ad, parse_expr,
                 parse_jdl, rank_value)

from .paths import SHARED_JDL


def ev(text, ad=None, other=None):
    return evaluate(parse_expr(text), ad, other)


CE = {
    "GlueCEUniqueID": "ce1.example.org:8443/cream-pbs-long",
    "GlueCEStateStatus": "Production",
    "GlueCEInfoTotalCPUs": 8,
    "GlueCEInfoLRMSType": "pbs",
    "GlueCEStateEstimatedResponseTime": 120,
    "GlueCEStateWaitingJobs": 3,
    "GlueHostApplicationSoftwareRunTimeEnvironment": ["MPICH", "VO-dteam-sw"],
    "GlueCEPolicyMaxWallClockTime": 2880.5,
}


@pytest.mark.parametrize("text,expected", [
    ("false && undefined", False), ("undefined && false", False),
    ("true || undefined", True), ("undefined || true", True),
    ("true && error", ERROR), ("error || true", ERROR), ("true || error", True),
    ("!undefined", UNDEFINED), ("1 && true", True), ("0 || 0.0", False),
    ('"a" && true', ERROR), ("undefined ? 1 : 2", UNDEFINED), ("0.0 ? 1 : 2", 2),
])
def test_three_valued_logic(text, expected):
    assert ev(text) is expected or ev(text) == expected and type(ev(text)) is type(expected)


@pytest.mark.parametrize("text,expected", [
    ("undefined == 1", UNDEFINED), ("error == undefined", ERROR), ("undefined + error", ERROR),
    ('"abc" == "ABC"', True), ('"abc" =?= "ABC"', False), ('"abc" is "abc"', True),
    ('"a" < "B"', True), ("1 == 1.0", True), ("1 =?= 1.0", False), ("true == 1", True),
    ("undefined =?= undefined", True), ("undefined isnt 1", True), ('"1" == 1', ERROR),
    ("7 / 2", 3), ("-7 / 2", -3), ("-7 % 3", -1), ("7.0 / 2", 3.5), ("1 / 0", ERROR),
    ("1.0 / 0", ERROR), ("5 % 0", ERROR), ("5.5 % 2", ERROR), ("true + 1", 2),
    ("9223372036854775807 + 1", -9223372036854775808), ("-true", ERROR),
    ("1 << 3", 8), ("-5 >> 1", -3), ("6 & 3", 2), ("6 | 3", 7), ("6 ^ 3", 5), ("~0", -1),
    ("1 + 2 * 3 - 4", 3), ("(1 + 2) * 3", 9), ("2 < 3 == true", True),
    ("{1, 2, 3}[1]", 2), ("{1, 2}[2]", ERROR), ('[a = 1; b = a + 1].b', 2),
    ('[a = 1]["A"]', 1), ("undefined ?: 5", 5), ("3 ?: 5", 3),
])
def test_operators(text, expected):
    v = ev(text)
    assert v is expected or (v == expected and type(v) is type(expected))


@pytest.mark.parametrize("text,expected", [
    ('member("mpich", {"MPICH", "x"})', True), ('member(3, {1, 2})', False),
    ("member(1, undefined)", UNDEFINED), ("member(1, 2)", ERROR),
    ('identicalMember("mpich", {"MPICH"})', False), ('Member("MPICH", {"MPICH"})', True),
    ('regexp("pbs", "PBSPro")', False), ('regexp("pbs", "PBSPro", "i")', True),
    ('RegExp("^lcg-", "lcg-pbs")', True), ('regexp("(", "x")', ERROR),
    ('regexp("a", undefined)', UNDEFINED),
    ('isUndefined(nope)', True), ("isError(1/0)", True), ('isString("x")', True),
    ("isInteger(1.0)", False), ("isReal(1.0)", True), ("isList({})", True),
    ('strcat("a", 1, "b")', "a1b"), ('substr("abcdef", 2, 2)', "cd"), ('substr("abc", -1)', "c"),
    ('toUpper("aB")', "AB"), ('toLower("aB")', "ab"), ('size("abc")', 3), ("size({1,2})", 2),
    ("int(3.9)", 3), ('int("12")', 12), ("real(2)", 2.0), ("string(3)", "3"),
    ("floor(2.5)", 2), ("ceiling(2.1)", 3), ("round(2.5)", 2), ("pow(2, 10)", 1024),
    ("ifThenElse(true, 1, 1/0)", 1), ("ifThenElse(undefined, 1, 2)", UNDEFINED),
    ('anyCompare("<", {1, 2, 3}, 2)', True), ('allCompare(">", {3, 4}, 2)', True),
    ('stringListMember("b", "a, b,c")', True), ("nosuchfunction(1)", ERROR),
])
def test_functions(text, expected):
    v = ev(text)
    assert v is expected or (v == expected and type(v) is type(expected))


def test_undefined_reference_and_scopes():
    job = parse_jdl('Executable = "/bin/x"; CpuNumber = 4; '
                    "Requirements = other.GlueCEInfoTotalCPUs >= CpuNumber && other.Missing =?= undefined;")
    assert matches(job, CE, now=0.0)
    assert not matches(job, {**CE, "GlueCEInfoTotalCPUs": 2}, now=0.0)


def test_requirements_default_and_rank_default():
    job = parse_jdl('Executable = "/bin/x";')
    assert matches(job, CE, now=0.0)
    assert not matches(job, {**CE, "GlueCEStateStatus": "Draining"}, now=0.0)
    assert not matches(job, {"GlueCEUniqueID": "x"}, now=0.0)  # undefined -> no match
    assert rank_value(job, CE, now=0.0) == -120.0
    assert rank_value(job, {"GlueCEUniqueID": "x"}, now=0.0) is None


def test_mpi_file_against_ces():
    with open(SHARED_JDL / "02_mpi_member_totalcpus.jdl") as f:
        job = parse_jdl(f.read())
    assert matches(job, CE, now=0.0)
    assert matches(job, {**CE, "GlueCEInfoLRMSType": "torque"}, now=0.0)
    assert not matches(job, {**CE, "GlueCEInfoLRMSType": "lsf"}, now=0.0)
    assert not matches(job, {**CE, "GlueHostApplicationSoftwareRunTimeEnvironment": ["LAM"]},
                       now=0.0)
    assert not matches(job, {**CE, "GlueCEInfoTotalCPUs": 2}, now=0.0)


def test_case_insensitive_ad_lookup_and_prebuilt_ad():
    job = parse_jdl('Executable = "/bin/x"; Requirements = other.gluecestatestatus == "production"; '
                    "Rank = other.GLUECEINFOTOTALCPUS * 2;")
    ad = MappingAd(CE)
    assert matches(job, ad, now=0.0) and matches(job, CE, now=0.0)
    assert rank_value(job, ad, now=0.0) == 16.0


def test_only_boolean_true_matches_and_rank_types():
    assert not matches(parse_jdl('Executable = "/bin/x"; Requirements = 1;', validate=False), CE,
                       now=0.0)
    assert not matches(parse_jdl('Executable = "/bin/x"; Requirements = 1/0;', validate=False), CE,
                       now=0.0)
    assert matches(parse_jdl('Executable = "/bin/x"; Requirements = true;'), CE, now=0.0)
    assert rank_value(parse_jdl('Executable = "/bin/x"; Rank = "high";', validate=False),
                      CE, now=0.0) is None
    assert rank_value(parse_jdl('Executable = "/bin/x"; Rank = other.GlueCEPolicyMaxWallClockTime;'),
                      CE, now=0.0) == 2880.5


def test_ce_ad_given_as_classad_sees_the_job():
    ce = parse_ad('[ GlueCEStateStatus = "Production"; '
                  'Requirements = other.VirtualOrganisation == "dteam"; Free = 10 - 3 ]')
    job = parse_jdl('Executable = "/bin/x"; VirtualOrganisation = "dteam"; '
                    "Requirements = other.Requirements && other.Free > 5;")
    assert matches(job, ce, now=0.0)
    job2 = parse_jdl('Executable = "/bin/x"; VirtualOrganisation = "atlas"; '
                     "Requirements = other.Requirements;")
    assert not matches(job2, ce, now=0.0)


def test_circular_definitions_are_undefined_not_crash():
    job = parse_jdl('Executable = "/bin/x"; a = b; b = a; Requirements = a;')
    assert job.value("a") is UNDEFINED  # as HTCondor
    assert not matches(job, CE, now=0.0)


def test_gang_matching_functions():
    ce = {**CE, "storage": {"CloseSEs": [{"name": "se1", "free": 10}, {"name": "se2", "free": 900}]}}
    job = parse_jdl('Executable = "/bin/x"; Requirements = anyMatch(other.storage.CloseSEs, free > 500);'
                    'Rank = whichMatch(other.storage.CloseSEs, free > 500).free;')
    assert matches(job, ce, now=0.0)
    assert rank_value(job, ce, now=0.0) == 900.0
    job2 = parse_jdl('Executable = "/bin/x"; Requirements = allMatch(other.storage.CloseSEs, free > 500);')
    assert not matches(job2, ce, now=0.0)


def test_time_is_the_callers_now_never_the_wall_clock():
    job = parse_jdl('Executable = "/bin/x"; Requirements = time() < other.GlueCEDeadline; '
                    "Rank = time();")
    ce = {"GlueCEDeadline": 1000}
    assert matches(job, ce, now=999.5) and not matches(job, ce, now=1000)
    assert matches(job, ce, 0.0)  # a simulated clock at t = 0 (the wall clock is far past 1000)
    assert rank_value(job, ce, now=42.7) == 42.0
    assert evaluate(parse_expr("time()"), now=5) == 5
    assert job.requirements.evaluate(ce, now=7) is True and job.rank.evaluate(ce, 7) == 7
    with pytest.raises(TypeError):
        matches(job, ce)  # the caller must say what time it is
    with pytest.raises(TypeError):
        rank_value(job, ce)
    # no now: time() is error (never the wall clock), so nothing that calls it matches
    assert not matches(job, ce, None) and rank_value(job, ce, None) is None
    assert evaluate(parse_expr("time()")) is ERROR
    assert evaluate(parse_expr("time(1)"), now=5) is ERROR


def test_a_jdl_calling_time_is_valid_and_evaluated_with_the_callers_now():
    job = parse_jdl('Executable = "/bin/x"; ExpiryTime = time() + 3600; '
                    "Requirements = time() < 1000;")
    assert matches(job, CE, now=0.0) and not matches(job, CE, now=1000.0)
    assert job.get("ExpiryTime") is None  # evaluated without a now
