"""jdl parsing: the real gLite JDL files, the syntax surface, error locations."""

import pytest

from jdl import (ERROR, UNDEFINED, JDLSyntaxError, JDLValidationError, parse_ad, parse_expr,
                 parse_jdl)
from jdl import nodes as n

from .paths import SHARED_JDL as DATA  # noqa: E402


def load(name: str):
    path = DATA / name
    return parse_jdl(path.read_text(), str(path))


def test_hostname_without_brackets():
    job = load("01_hostname_nobrackets.jdl")
    assert job.type == "job" and job.job_type == "normal"
    assert job.executable == "/bin/hostname"
    assert job.std_output == "std.out" and job.std_error == "std.err"
    assert job.output_sandbox == ["std.out", "std.err"]
    assert job.arguments == "" and job.std_input is None and job.input_sandbox == []
    assert not job.requirements.is_default
    assert job.requirements.text == 'other.GlueCEStateStatus == "Production"'
    assert job.rank.text == "-other.GlueCEStateEstimatedResponseTime"


def test_mpi_job_attributes_case_insensitive():
    job = load("02_mpi_member_totalcpus.jdl")
    assert job.executable == "30308_exe.sh"
    assert job.arguments == "cpi 4"
    assert job.input_sandbox == ["30308_exe.sh", "exe/cpi"]
    assert job.get("CPUNUMBER") == 4 and job.get("cpuNumber") == 4
    assert job.get("NodeNumber") is None  # commented out with //
    assert job.get("UserTags") == {"bug": "30308"}


def test_collection():
    job = load("05_collection_fuzzyrank.jdl")
    assert job.type == "collection"
    assert job.fuzzy_rank is True
    assert job.virtual_organisation == "dteam"
    assert job.get("DefaultNodeRetryCount") == 17
    nodes = job.get("nodes")
    assert [x["nodeName"] for x in nodes] == ["first", "second", "third"]
    assert all(x["executable"] == "/bin/ls" for x in nodes)


def test_parametric():
    job = load("06_parametric_list.jdl")
    assert job.job_type == "parametric"
    assert job.environment == ["MYPATH_PARAM_=$PATH:/bin:/usr/bin:$HOME"]
    params = job.ad.definition("Parameters").expr
    assert isinstance(params, n.ListExpr)
    assert isinstance(params.items[0], n.AttrRef) and params.items[0].name == "test"
    assert job.get("Parameters") == [None, 2]  # `test` is an undefined reference
    assert "requirements" not in job  # only in a // comment


def test_feedback_retry_counts():
    job = load("09_wmsfeedback_nobrackets.jdl")
    assert job.retry_count == 0 and job.shallow_retry_count == 0
    assert job.get("EnableWMSFeedback") is True
    assert job.fete_rank is None and job.fuzzy_rank is False


def test_defaults():
    job = parse_jdl('Executable = "/bin/true";')
    assert job.requirements.is_default and job.rank.is_default
    assert job.requirements.text == 'other.GlueCEStateStatus == "Production"'
    assert job.rank.text == "-other.GlueCEStateEstimatedResponseTime"
    assert job.retry_count is None and job.virtual_organisation is None


@pytest.mark.parametrize("text", [
    '[ Executable = "/a"; ]', '[ Executable = "/a" ]', 'Executable = "/a"', 'Executable = "/a";',
    '# comment\nExecutable = "/a";', '/* block\n comment */ [ Executable = /* in */ "/a" ]',
    '[\n// line comment\nExecutable =\n   "/a"\n;\n]', 'EXECUTABLE = "/a"',
])
def test_surface_variants(text):
    assert parse_jdl(text).executable == "/a"


def test_literals():
    job = parse_jdl(r'''[ Executable = "/bin/x"; s = "a\"b\\c\n\t"; i = 42; r = 1.5e3; r2 = .5;
        t = TRUE; f = false; u = undefined; e = error; l = {1, "two", {3}};
        rec = [ x = 1; y = [ z = "deep" ] ]; 'odd name' = 5 ]''')
    assert job.get("s") == 'a"b\\c\n\t'
    assert job.get("i") == 42 and job.get("r") == 1500.0 and job.get("r2") == 0.5
    assert job.get("t") is True and job.get("f") is False
    assert job.value("u") is UNDEFINED and job.value("e") is ERROR
    assert job.get("l") == [1, "two", [3]]
    assert job.get("rec") == {"x": 1, "y": {"z": "deep"}}
    assert job.get("odd name") == 5 and job.get("ODD NAME") == 5


def test_syntax_error_names_file_line_column():
    text = '[\n  Executable = "/bin/ls";\n  StdOutput = "out"\n  Myproxyserver = "px";\n]\n'
    with pytest.raises(JDLSyntaxError) as info:
        parse_jdl(text, "job.jdl")
    err = info.value
    assert (err.filename, err.line, err.column) == ("job.jdl", 4, 3)
    assert err.message == "expected ';' after attribute value, found 'Myproxyserver'"
    lines = str(err).split("\n")
    assert lines[0] == "job.jdl:4:3: expected ';' after attribute value, found 'Myproxyserver'"
    assert lines[1] == '  Myproxyserver = "px";'
    assert lines[2] == "  ^"


@pytest.mark.parametrize("text,line,col,fragment", [
    ('a = ;', 1, 5, "expected an expression"),
    ('a = "open', 1, 5, "unterminated string"),
    ('a = 1;\nb = 2 $ 3;', 2, 7, "unexpected character '$'"),
    ('[ a = 1;', 1, 9, "end of input"),
    ('a = (1 + 2', 1, 11, "end of input"),
    ('a 1', 1, 3, "expected '='"),
    ('a = 1 /* never closed', 1, 7, "unterminated comment"),
])
def test_syntax_error_positions(text, line, col, fragment):
    with pytest.raises(JDLSyntaxError) as info:
        parse_jdl(text, "t.jdl")
    assert (info.value.line, info.value.column) == (line, col)
    assert fragment in info.value.message


def test_validation_missing_executable():
    with pytest.raises(JDLValidationError) as info:
        parse_jdl('[\n  Type = "Job";\n  Arguments = "x";\n]', "j.jdl")
    err = info.value
    assert len(err.problems) == 1
    assert err.problems[0].message == "a job needs an Executable"
    assert str(err).startswith("j.jdl:1:1: a job needs an Executable")


def test_validation_executable_type():
    with pytest.raises(JDLValidationError) as info:
        parse_jdl('Executable = 3;', "j.jdl")
    p = info.value.problems[0]
    assert (p.line, p.column, p.message) == (1, 14, "Executable must be a string, not an integer")


def test_validation_collection_node_without_executable():
    with pytest.raises(JDLValidationError) as info:
        parse_jdl('[ Type = "collection"; Nodes = { [ Executable = "/a" ], [ StdOutput = "o" ] } ]')
    assert [p.message for p in info.value.problems] == ["a job needs an Executable"]
    assert info.value.problems[0].column == 57


def test_parse_expr_positions_and_ad():
    node = parse_expr('other.X  ==  "y"')
    assert isinstance(node, n.Binary) and (node.line, node.column) == (1, 1)
    assert node.right.column == 14
    ad = parse_ad('[ GlueCEStateStatus = "Production"; GlueCEInfoTotalCPUs = 2 * 4 ]')
    job = parse_jdl('Executable = "/bin/x"; Requirements = other.GlueCEInfoTotalCPUs == 8;')
    from jdl import matches
    assert matches(job, ad, now=0.0)


def test_deep_nesting_is_a_clear_error():
    text = "a = " + "(" * 10000 + "1" + ")" * 10000 + ";"
    with pytest.raises(JDLSyntaxError) as info:
        parse_jdl(text, "deep.jdl")
    assert "nesting deeper than" in info.value.message
    assert info.value.line == 1
