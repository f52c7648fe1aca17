"""A submission front end (``matcher = false``) and a matching broker over one PostgreSQL
database (issue 12, "Production database settings"): real ``vgrid serve broker`` processes."""
import requests

from vgrid_cli.services import ServiceGroup

from .waiting import wait_until

JDL = '[ Executable = "/bin/true"; ]'


def test_a_front_end_stores_and_another_broker_matches_from_the_same_database(pg_url, tmp_path):
    (tmp_path / "svc").mkdir()
    with ServiceGroup(tmp_path / "svc") as group:
        # one database and one state directory (sandboxes, transfer key) for both processes
        common = (f'port = 0\ndatabase_url = "{pg_url}"\nce_urls = []\ndb_pool_size = 4\n'
                  f'state_dir = "{tmp_path / "broker"}"\n')
        front = group.start("broker", "front", common + "matcher = false\n")
        key = requests.post(f"{front.url}/jobs", data={"jdl": JDL, "filename": "f.jdl"}, timeout=30).json()["key"]
        assert requests.get(f"{front.url}/ism", timeout=30).json()["taken_at"] in (None, 0)  # never refreshed
        back = group.start("broker", "back", common + "match_expiry_s = 0.2\nmatch_interval_s = 0.05\n")
        wait_until(lambda: requests.get(f"{back.url}/ism", timeout=30).json()["taken_at"],
                   "the matching broker's first ISM refresh")
        job = wait_until(lambda: (lambda j: j if j["state"] == "Aborted" else None)(
            requests.get(f"{front.url}/jobs/{key}", timeout=30).json()), "the back end to match the job")
        assert job["reason"].startswith("no compatible resources") and job["outcome"] == "no-resources"
        assert "Ready" in [h["state"] for h in job["history"]]       # claimed by the matching broker
