"""docs/api.md is generated (``vgrid api-doc``) from the four services' OpenAPI documents and
the committed file equals the generated text, so it never goes stale; ``--check`` says so."""
from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from vgrid_cli.api_doc import render
from vgrid_cli.main import main

API_MD = Path(__file__).resolve().parent.parent / "docs" / "api.md"


def test_the_committed_api_md_is_the_generated_text():
    assert API_MD.read_text(encoding="utf-8") == render(), \
        "docs/api.md is stale: run `vgrid api-doc --out docs/api.md`"


def test_every_route_of_every_service_is_in_the_page():
    from broker.api_models import SPEC
    from vwn_agents.api_models import CE_SPEC, NODE_SPEC
    from vwn_agents.images.repo_api import REPO_SPEC
    text = render()
    for spec in (SPEC, CE_SPEC, NODE_SPEC, REPO_SPEC):
        section = text.split(f"## {spec.title}\n", 1)[1].split("\n## ", 1)[0]
        for op in spec.ops:
            assert f"| {op.method} | `{op.path}` |" in section, (spec.title, op.method, op.path)


def test_check_refuses_a_stale_page(tmp_path):
    stale = tmp_path / "api.md"
    stale.write_text(render().replace("POST", "PUSH", 1), encoding="utf-8")
    r = CliRunner().invoke(main, ["api-doc", "--check", str(stale)])
    assert r.exit_code == 1 and "stale" in r.output
    ok = CliRunner().invoke(main, ["api-doc", "--check", str(API_MD)])
    assert ok.exit_code == 0, ok.output
