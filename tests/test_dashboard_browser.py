"""The dashboard in a real browser (issue 17): Playwright drives Debian's chromium, headless.

The demo site runs as real processes over mutual TLS (``vgrid_cli.demo.start_site``: a broker,
2 CE agents, 4 node agents with cgroup CPU caps). The browser presents the users' RFC 3820
proxies (proxy certificate, its key and the user certificate: a chain) as TLS client
certificates through Playwright's ``client_certificates``, and trusts the demo CA through
``NODE_EXTRA_CA_CERTS`` (a server certificate from another CA is refused: no
``ignore_https_errors``). Screenshots of every view are saved under the test's tmp directory
(``VGRID_DASHBOARD_SHOTS=DIR`` saves them there too, e.g. docs/dashboard/).
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from broker.client import BrokerClient
from vgrid_cli.demo import site_pki, start_site
from vgrid_cli.services import ServiceGroup
from vgrid_runtime.clock import WallClock
from vgrid_runtime.tls import TLSFiles

from .waiting import SLACK, wait_until

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
CE1, CE2 = "ce1.vgrid.local:8443/vgrid-vwn-long", "ce2.vgrid.local:8443/vgrid-vwn-long"
TIMEOUT_MS = int(60_000 * SLACK)


def sleeper(ce: str, seconds: int, extra: str = "") -> str:
    return (f'[ Executable = "/bin/sleep"; Arguments = "{seconds}"; {extra}\n'
            f'  Requirements = other.GlueCEUniqueID == "{ce}"; ]\n')


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("site")
    pki = site_pki(tmp / "pki", 2, users=("Bob",))
    with ServiceGroup(tmp) as group:
        url = start_site(group, n_ces=2, ism_refresh_s=1.0, state_dir=tmp, pki=pki)
        alice = BrokerClient(url, credentials=pki.user_credentials())
        _, bob_proxy = pki.users["Bob"]
        bob = BrokerClient(url, credentials=TLSFiles(cert=str(bob_proxy), key=None, cert_dir=str(pki.cert_dir),
                                                     voms_dir=str(pki.voms_dir)))
        wait_until(lambda: {c["id"] for c in alice.ism()["ces"]} >= {CE1, CE2}, "the ISM to list both CEs")
        yield {"url": url, "pki": pki, "alice": alice, "bob": bob, "bob_proxy": bob_proxy, "tmp": tmp}


@pytest.fixture(scope="module")
def browser(site):
    from playwright.sync_api import sync_playwright
    old = os.environ.get("NODE_EXTRA_CA_CERTS")
    os.environ["NODE_EXTRA_CA_CERTS"] = str(site["pki"].cert_dir / "vgrid-demo-ca.pem")
    try:
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=CHROMIUM, headless=True)
            yield b
            b.close()
    finally:
        if old is None:
            os.environ.pop("NODE_EXTRA_CA_CERTS", None)
        else:
            os.environ["NODE_EXTRA_CA_CERTS"] = old


def context(browser, site, proxy: Path, javascript: bool = True):
    ctx = browser.new_context(client_certificates=[{"origin": site["url"], "certPath": str(proxy),
                                                    "keyPath": str(proxy)}],
                              java_script_enabled=javascript, viewport={"width": 1280, "height": 900})
    ctx.set_default_timeout(TIMEOUT_MS)
    return ctx


def shot(page, site, name: str) -> None:
    path = site["tmp"] / "screenshots" / f"{name}.png"
    path.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(path), full_page=True)
    if os.environ.get("VGRID_DASHBOARD_SHOTS"):
        dest = Path(os.environ["VGRID_DASHBOARD_SHOTS"])
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, dest / path.name)


def running(client, key: str) -> dict:
    return wait_until(lambda: (lambda j: j if j["state"] == "Running" and j["node"] else None)(client.job(key)),
                      f"job {key} to run", timeout_s=60)


def test_grid_view_lists_both_ces(browser, site):
    page = context(browser, site, site["pki"].proxy).new_page()
    page.goto(f"{site['url']}/dashboard/grid")
    rows = page.locator("#ces tbody tr[data-ce]")
    assert sorted(rows.evaluate_all("rs => rs.map(r => r.dataset.ce)")) == [CE1, CE2]
    assert page.locator("#who").inner_text().endswith("CN=vgrid demo user")
    shot(page, site, "grid")


def test_a_running_vwn_shows_cap_one_half_once_a_second_job_shares_its_node(browser, site):
    alice = site["alice"]
    first = alice.submit_text(sleeper(CE1, 240), "first.jdl")["key"]
    node = running(alice, first)["node"]
    page = context(browser, site, site["pki"].proxy).new_page()
    page.goto(f"{site['url']}/dashboard/site?ce={CE1}")
    row = f'tr[data-job="{first}"]'
    page.wait_for_function(f"() => document.querySelector('{row}')?.dataset.cap === '1'")
    # the page is not reloaded from here on: it polls and redraws itself
    others = []
    while True:       # the lease engine spreads jobs over the 2 nodes: the 2nd or 3rd shares it
        others.append(alice.submit_text(sleeper(CE1, 240), f"other{len(others)}.jdl")["key"])
        if running(alice, others[-1])["node"] == node:
            break
        assert len(others) < 3, "no job landed on the first job's node"
    page.wait_for_function(f"() => document.querySelector('{row}')?.dataset.cap === '0.5'")
    assert page.locator(f"{row} td.cap").inner_text() == "0.5"
    steps = page.locator(f"{row} svg.caps title").text_content()
    assert steps.startswith("CPU cap steps: 1 ") and steps.endswith("0.5")
    shot(page, site, "site")
    page.goto(f"{site['url']}/dashboard/jobs/{first}")
    assert page.locator("#job td.cap").inner_text().startswith("0.5")
    assert [li.split(" ", 2)[1] for li in page.locator("#history li").all_inner_texts()][-1] == "Running"
    shot(page, site, "job")
    for key in [first, *others]:
        alice.cancel(key)


def test_the_gantt_chart_shows_an_advance_reservation_at_its_start_time(browser, site):
    start = int(WallClock().now()) + 90
    key = site["alice"].submit_text(sleeper(CE2, 5, f'LeaseType = "advance-reservation"; LeaseStart = {start}; '
                                                    'LeaseDuration = 60;'), "ar.jdl")["key"]
    wait_until(lambda: site["alice"].job(key)["state"] == "Scheduled", "the AR to reach its CE")
    page = context(browser, site, site["pki"].proxy).new_page()
    page.goto(f"{site['url']}/dashboard/site?ce={CE2}")
    bar = page.locator(f'svg.gantt rect[data-job="{key}"]')
    bar.wait_for()
    assert bar.get_attribute("data-lease-type") == "AR" and bar.get_attribute("data-kind") == "VM"
    assert float(bar.get_attribute("data-start")) == start
    geometry = page.evaluate("""() => { const s = document.querySelector('svg.gantt');
        return {t0: +s.dataset.t0, k: +s.dataset.pxPerS, left: +s.dataset.left,
                now: +s.querySelector('line.now').getAttribute('x1')}; }""")
    x = float(bar.get_attribute("x"))
    assert x == pytest.approx(geometry["left"] + (start - geometry["t0"]) * geometry["k"], abs=0.05)
    assert geometry["now"] < x            # not started yet: "now" is left of the bar
    assert re.search(r"\d\d:\d\d:\d\d - \d\d:\d\d:\d\d \(scheduled\)", bar.locator("title").text_content())
    # "now" moves between polls without a reload
    page.wait_for_function(f"() => +document.querySelector('svg.gantt line.now').getAttribute('x1') > "
                           f"{geometry['now'] + 0.5}")
    shot(page, site, "gantt")
    site["alice"].cancel(key)


def test_one_user_cannot_see_another_users_job(browser, site):
    bobs = site["bob"].submit_text(sleeper(CE2, 1), "bob.jdl")["key"]
    alices = site["alice"].submit_text(sleeper(CE2, 1), "alice.jdl")["key"]
    bob = context(browser, site, site["bob_proxy"]).new_page()
    bob.goto(f"{site['url']}/dashboard/jobs")
    assert bob.locator(f'#jobs tr[data-job="{bobs}"]').count() == 1
    assert bob.locator(f'#jobs tr[data-job="{alices}"]').count() == 0
    alice = context(browser, site, site["pki"].proxy).new_page()
    alice.goto(f"{site['url']}/dashboard/jobs")
    alice.locator(f'#jobs tr[data-job="{alices}"]').wait_for()
    assert alice.locator(f'#jobs tr[data-job="{bobs}"]').count() == 0
    assert bobs not in alice.content()
    shot(alice, site, "jobs")
    answer = alice.goto(f"{site['url']}/dashboard/jobs/{bobs}")
    assert answer.status == 403 and "not theirs" in alice.locator("#error").inner_text()
    assert "bob.jdl" not in alice.content()
    # the tables need no JavaScript
    static = context(browser, site, site["bob_proxy"], javascript=False).new_page()
    static.goto(f"{site['url']}/dashboard/jobs?q=bob.jdl")
    assert static.locator(f'#jobs tr[data-job="{bobs}"]').count() == 1
    assert static.locator("#live-status").inner_text().startswith("static page")
