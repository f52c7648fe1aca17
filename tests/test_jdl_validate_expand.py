"""Semantic validation (every problem, located) and expansion into plain jobs."""
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jdl import JDLValidationError, expand, parse_jdl, to_jdl
from jdl.attributes import ATTRIBUTES, table_markdown

from .paths import SHARED_JDL as DATA  # noqa: E402


def problems(text, filename="v.jdl"):
    with pytest.raises(JDLValidationError) as info:
        parse_jdl(text, filename)
    return [(p.line, p.column, p.message) for p in info.value.problems]


def test_every_problem_is_reported_with_its_position():
    text = ('[\n'
            '  Executable = "run.sh";\n'
            '  RetryCount = "three";\n'
            '  FuzzyRank = 1;\n'
            '  Environment = {"PATH=/bin", "no equals"};\n'
            '  JobType = "weird";\n'
            ']\n')
    got = problems(text)
    assert (2, 16, "relative Executable 'run.sh' is not in InputSandbox") in got
    assert (3, 16, "RetryCount must be an integer, not a string") in got
    assert (4, 15, "FuzzyRank must be a boolean, not an integer") in got
    assert (5, 17, "Environment entry 'no equals' is not \"NAME=value\"") in got
    assert any(p[:2] == (6, 13) and p[2].startswith("JobType must be one of") for p in got)
    assert len(got) == 5


def test_relative_executable_in_input_sandbox_is_fine():
    job = parse_jdl('Executable = "run.sh"; InputSandbox = {"/home/u/run.sh"};')
    assert job.executable == "run.sh"


def test_parametric_needs_parameters_and_sane_range():
    assert problems('JobType = "parametric"; Executable = "/bin/x";')[0][2] == \
        "a parametric job needs Parameters"
    assert "must be greater than ParameterStart" in problems(
        'JobType = "parametric"; Executable = "/bin/x"; Parameters = 2; ParameterStart = 5;')[0][2]


def test_interactive_and_mpich_rules():
    got = problems('JobType = "interactive"; Executable = "/bin/sh"; StdOutput = "o";')
    assert got == [(1, 62, "StdOutput is not allowed in an interactive job")]
    got = problems('JobType = "MPICH"; Executable = "/bin/mpi";')
    assert got == [(1, 11, "an MPICH job needs CpuNumber (or NodeNumber)")]


def test_lease_extension_attributes():
    job = parse_jdl('Executable = "/bin/x"; LeaseType = "advance-reservation"; '
                    'LeaseStart = "2026-11-21T10:00:00Z"; LeaseDuration = 3600; '
                    'VMImage = "http://images/sl5.img"; VMImageSize = 1024; VMMemory = 512; '
                    'PreemptionClass = "suspendable"; FeteRank = true;')
    assert job.fete_rank is True and job.get("LeaseDuration") == 3600
    got = problems('Executable = "/bin/x"; LeaseType = "advance-reservation"; '
                   'VMMemory = 0; PreemptionClass = "never"; LeaseStart = "tomorrow";')
    messages = [m for _, _, m in got]
    assert "an advance-reservation lease needs LeaseDuration" in messages
    assert "VMMemory must be >= 1, not 0" in messages
    assert "LeaseStart is not an ISO 8601 time: 'tomorrow'" in messages
    assert any(m.startswith("PreemptionClass must be one of") for m in messages)


def test_constant_requirements_must_be_boolean():
    assert problems('Executable = "/bin/x"; Requirements = "yes";')[0][2] == \
        "Requirements must be a boolean expression, not a string"


def test_output_sandbox_dest_uri_length():
    got = problems('Executable = "/bin/x"; OutputSandbox = {"a", "b"}; '
                   'OutputSandboxDestURI = {"gsiftp://h/a"};')
    assert got[0][2] == "OutputSandboxDestURI has 1 entries, OutputSandbox 2"


def test_collection_expands_to_three_jobs_inheriting_attributes():
    path = DATA / "05_collection_fuzzyrank.jdl"
    x = expand(parse_jdl(path.read_text(), str(path)))
    assert x.kind == "collection"
    assert [j.name for j in x.jobs] == ["first", "second", "third"]
    for j in x.jobs:
        d = j.description
        assert d.type == "job" and d.executable == "/bin/ls"
        assert d.virtual_organisation == "dteam" and d.fuzzy_rank is True
        assert d.retry_count == 17 and d.shallow_retry_count == 13
        assert j.parents == ()


def test_parametric_list_expands_to_two_jobs():
    path = DATA / "06_parametric_list.jdl"
    x = expand(parse_jdl(path.read_text(), str(path)))
    assert x.kind == "parametric"
    assert [j.parameter for j in x.jobs] == ["test", 2]
    assert [j.description.std_output for j in x.jobs] == ["echotest.out", "echo2.out"]
    assert x.jobs[1].description.environment == ["MYPATH2=$PATH:/bin:/usr/bin:$HOME"]
    assert all(j.description.job_type == "normal" for j in x.jobs)
    assert all("Parameters" not in j.description for j in x.jobs)


def test_parametric_number_with_start_and_step():
    job = parse_jdl('JobType = "parametric"; Executable = "/bin/echo"; Arguments = "_PARAM_"; '
                    'Parameters = 10; ParameterStart = 2; ParameterStep = 3;')
    assert [j.description.arguments for j in expand(job).jobs] == ["2", "5", "8"]


def test_plain_job_expands_to_itself():
    job = parse_jdl('Executable = "/bin/x";')
    x = expand(job)
    assert x.kind == "job" and len(x.jobs) == 1 and x.jobs[0].description is job


def test_dag_with_files_descriptions_and_dependencies(tmp_path):
    (tmp_path / "b.jdl").write_text('Executable = "/bin/b"; Arguments = "from file";')
    (tmp_path / "dag.jdl").write_text(
        '[ Type = "dag"; VirtualOrganisation = "dteam"; DefaultNodeRetryCount = 2;\n'
        '  Nodes = [ a = [ description = [ Executable = "/bin/a" ] ];\n'
        '            b = [ file = "b.jdl" ];\n'
        '            c = [ description = [ Executable = "/bin/c"; RetryCount = 0 ] ];\n'
        '            dependencies = { {a, b}, {a, c}, {{b, c}, d} } ];\n'
        '  NodeFour = 1 ]\n')
    path = tmp_path / "dag.jdl"
    with pytest.raises(JDLValidationError) as info:
        parse_jdl(path.read_text(), str(path))
    assert [(p.line, p.column, p.message) for p in info.value.problems] == [
        (5, 55, "dependency on unknown node 'd'")]
    path.write_text(path.read_text().replace("{{b, c}, d}", "{{b, c}, e}").replace(
        "c = [ description", "e = [ description = [ Executable = \"/bin/e\" ] ];\n"
        "            c = [ description"))
    x = expand(parse_jdl(path.read_text(), str(path)))
    assert x.kind == "dag"
    names = [j.name for j in x.jobs]
    assert names.index("a") < names.index("b") < names.index("e")
    jobs = {j.name: j for j in x.jobs}
    assert jobs["b"].description.arguments == "from file"
    assert jobs["b"].description.filename == str(tmp_path / "b.jdl")
    assert set(jobs["e"].parents) == {"b", "c"} and jobs["a"].parents == ()
    assert jobs["b"].description.retry_count == 2 and jobs["c"].description.retry_count == 0
    assert jobs["a"].description.virtual_organisation == "dteam"
    assert sorted(x.children_of("a")) == ["b", "c"]


def test_dag_cycle_and_missing_file(tmp_path):
    path = tmp_path / "d.jdl"
    path.write_text('[ Type = "dag";\n  Nodes = { [ NodeName = "x"; file = "missing.jdl" ],\n'
                    '    [ NodeName = "y"; Executable = "/bin/y" ], [ NodeName = "z"; '
                    'Executable = "/bin/z" ] };\n  Dependencies = { {y, z}, {z, y} } ]\n')
    with pytest.raises(JDLValidationError) as info:
        parse_jdl(path.read_text(), str(path))  # file= nodes are read next to the JDL file
    msgs = [(p.line, p.message) for p in info.value.problems]
    assert (2, "cannot read node file 'missing.jdl': No such file or directory") in msgs
    assert (4, "dependency cycle among nodes 'y', 'z'") in msgs


def test_attribute_table_covers_the_specification():
    for name in ["Executable", "Arguments", "StdInput", "StdOutput", "StdError", "InputSandbox",
                 "InputSandboxBaseURI", "OutputSandbox", "OutputSandboxDestURI",
                 "OutputSandboxBaseDestURI", "Environment", "Requirements", "Rank", "FuzzyRank",
                 "VirtualOrganisation", "RetryCount", "ShallowRetryCount", "ExpiryTime",
                 "NodeNumber", "CpuNumber", "DataRequirements", "UserTags", "MyProxyServer",
                 "PerusalFileEnable", "Prologue", "Epilogue", "LeaseType", "LeaseStart",
                 "LeaseDuration", "VMImage", "VMImageSize", "VMMemory", "PreemptionClass",
                 "FeteRank"]:
        assert name.lower() in ATTRIBUTES, name
    assert "| LeaseType | string |" in table_markdown()


def test_unknown_attributes_are_kept_and_usable():
    job = parse_jdl('Executable = "/bin/x"; MyThreshold = 7; Requirements = other.Free > MyThreshold;')
    from jdl import matches
    assert matches(job, {"Free": 8}, now=0.0) and not matches(job, {"Free": 6}, now=0.0)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(DATA.glob("*.jdl"))))
def test_canonical_printer_round_trips_the_real_files(path):
    job = parse_jdl(path.read_text(), str(path))
    again = parse_jdl(to_jdl(job), "printed.jdl")
    assert again == job
    assert [j.description for j in expand(again).jobs] == [j.description for j in expand(job).jobs]


def test_file_nodes_of_a_jdl_not_read_from_a_file_are_refused():
    job = parse_jdl('[ Type = "collection"; Nodes = { [ file = "/etc/hostname" ] } ]', "sent.jdl")
    with pytest.raises(JDLValidationError) as info:
        expand(job)
    assert "was not read from a file" in info.value.problems[0].message


def test_local_files_false_never_reads_node_files(tmp_path):
    (tmp_path / "n.jdl").write_text('Executable = "/bin/n";')
    path = tmp_path / "c.jdl"
    path.write_text('[ Type = "collection"; Nodes = { [ file = "n.jdl" ] } ]')
    assert len(expand(parse_jdl(path.read_text(), str(path))).jobs) == 1
    job = parse_jdl(path.read_text(), str(path), local_files=False)
    with pytest.raises(JDLValidationError):
        expand(job, local_files=False)


def test_inline_nodes_replaces_file_nodes_in_both_syntaxes(tmp_path):
    from jdl import expand, inline_nodes
    (tmp_path / "n.jdl").write_text('Executable = "/bin/hostname";\nStdOutput = "h";\n')
    coll = tmp_path / "coll.jdl"
    coll.write_text('[ Type = "collection"; VirtualOrganisation = "dteam";\n'
                    '  nodes = { [ NodeName = "x"; file = "n.jdl"; ], [ NodeName = "y"; Executable = "/bin/ls"; ] }; ]')
    job = parse_jdl(coll.read_text(), str(coll))
    text = inline_nodes(job)
    assert "file" not in text.lower().replace("filename", "")
    again = expand(parse_jdl(text, "sent.jdl", local_files=False), local_files=False)
    assert [(j.name, j.description.executable) for j in again.jobs] == [("x", "/bin/hostname"), ("y", "/bin/ls")]
    assert all(j.description.virtual_organisation == "dteam" for j in again.jobs)
    plain = parse_jdl('Executable = "/bin/true";', str(tmp_path / "p.jdl"))
    assert inline_nodes(plain) == plain.text  # nothing to inline: the text is sent as written
