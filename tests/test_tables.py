"""The job tables of `vgrid demo` and `vgrid status` (vgrid_cli/tables.py)."""
from hypothesis import given, strategies as st
from rich.console import Console

from vgrid_cli.tables import ce_aliases, jobs_table


def _job(n: int, ce: str, file: str, state: str = "Done", **kw) -> dict:
    key = f"K{n:021d}"
    return {"id": f"https://127.0.0.1:43939/jobs/{key}", "key": key, "filename": f"/tmp/x/{file}",
            "state": state, "ce": ce, "node": f"{ce.split('.')[0]}-node{n % 2 + 1}", "vwn": f"vwn-{n:06d}",
            "cpu_caps": [1.0, 0.5, 1.0], "cpu_capped": True, "exit_code": 0, "stdout_head": f"host{n}", **kw}


def _render(table, width: int = 100) -> list[str]:
    console = Console(width=width, record=True, color_system=None)
    console.print(table)
    return console.export_text().splitlines()


def test_demo_results_fit_100_columns_one_line_per_job_naming_the_jdl_file():
    ces = ["ce1.vgrid.local:8443/vgrid-vwn-long", "ce2.vgrid.local:8443/vgrid-vwn-long"]
    files = ["01_hostname_nobrackets.jdl", "02_sleep.jdl", "03_compute_pi.jdl", "04_env.jdl"]
    jobs = [_job(i, ces[i % 2], files[i]) for i in range(4)]
    lines = _render(jobs_table(jobs, title="vgrid demo results", keys=False))
    assert all(len(line) <= 100 for line in lines)
    for i, job in enumerate(jobs):
        rows = [line for line in lines if f"host{i}" in line]
        assert len(rows) == 1, lines                     # the whole job on one line
        stem = files[i][:12]
        assert stem in rows[0]                             # the JDL file is named
        assert "1.00→0.50→1.00" in rows[0]
    # the caption says which CE each alias is
    assert any("ce1 = ce1.vgrid.local:8443/vgrid-vwn-long" in line for line in lines)
    assert any("ce2 = ce2.vgrid.local:8443/vgrid-vwn-long" in line for line in lines)


def test_status_table_keeps_the_full_key_at_100_columns():
    jobs = [_job(1, "ce1.vgrid.local:8443/vgrid-vwn-long", "sleep.jdl")]
    lines = _render(jobs_table(jobs))
    assert all(len(line) <= 100 for line in lines)
    assert any(jobs[0]["key"] in line and "sleep.jdl" in line for line in lines)
    assert any("job id = https://127.0.0.1:43939/jobs/<key>" in line for line in lines)


def test_a_reason_folds_but_is_kept_whole():
    reason = "no CE matches Requirements (other.GlueCEPolicyMaxCPUTime >= 99999)"
    jobs = [_job(1, "", "pi.jdl", state="Aborted", reason=reason, exit_code=None, stdout_head=None)]
    text = "".join(line.strip() for line in _render(jobs_table(jobs, keys=False)))
    assert reason.replace(" ", "") in text.replace(" ", "")


_host = st.from_regex(r"[a-c]{1,2}(\.[a-c]{1,3})?", fullmatch=True)
_ce = st.builds(lambda h, q: f"{h}:8443/{q}", _host, st.sampled_from(["q1", "q2", "long"]))


@given(st.lists(_ce, max_size=8))
def test_ce_aliases_are_distinct_for_distinct_ces(ces):
    aliases = ce_aliases(ces)
    assert set(aliases) == set(ces)
    assert len(set(aliases.values())) == len(aliases)
