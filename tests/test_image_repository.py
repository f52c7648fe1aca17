"""The image repository (``vgrid serve images``'s app) over real mutual TLS on loopback: who may
read, byte ranges against the file (hypothesis), If-Range, published checksums; and the token
bucket that throttles pulls (hypothesis, on a fake clock)."""
from __future__ import annotations

import base64
import hashlib

import pytest
import requests
from hypothesis import given, settings, strategies as st

from vgrid_runtime.wsgi import BackgroundServer
from vwn_agents.images.repository import ImageRepositoryConfig, create_app
from vwn_agents.images.tokenbucket import TokenBucket

from .image_site import ADDR, make_image, make_pki, session

SIZE_MB = 0.3


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    dns = make_pki(d)
    images = tmp_path_factory.mktemp("images")
    make_image(images / "a.img", SIZE_MB, seed=1)
    cfg = ImageRepositoryConfig(images_dir=str(images), node_dns=[dns["node1"]], ce_dns=[dns["ce"]],
                                tls_cert=str(d / "repo.pem"), tls_key=str(d / "repo.key"),
                                cert_dir=str(d / "certs"), voms_dir=str(d / "vomsdir"))
    srv = BackgroundServer(create_app(cfg), host=ADDR["repo"], tls=cfg.tls_files())
    yield {"url": srv.url, "d": d, "images": images, "data": (images / "a.img").read_bytes(),
           "node": session(d, "node1")}
    srv.close()


def test_nodes_and_ces_read_everyone_else_is_refused(repo):
    d, url = repo["d"], repo["url"]
    for who in ("node1", "ce"):
        s = session(d, who)
        listing = s.get(f"{url}/images", timeout=10)
        assert listing.status_code == 200, listing.text
        assert [i["name"] for i in listing.json()["images"]] == ["a.img"]
        assert s.get(f"{url}/images/a.img", timeout=10).content == repo["data"]
    for who in ("alice.proxy", "rogue", "node2"):          # a user; hosts not listed
        s = session(d, who)
        for path in ("/images", "/images/a.img", "/images/a.img/manifest"):
            r = s.get(f"{url}{path}", timeout=10)
            assert r.status_code == 403, (who, path, r.text)
            assert r.json()["error"]["reason"] == "forbidden"
    anon = requests.get(f"{url}/images/a.img", verify=str(d / "certs" / "ca.pem"), timeout=10)
    assert anon.status_code == 401 and anon.json()["error"]["reason"] == "no-certificate"


def test_manifest_digest_and_etag_are_the_files_sha256(repo):
    s, url, data = repo["node"], repo["url"], repo["data"]
    digest = hashlib.sha256(data).hexdigest()
    man = s.get(f"{url}/images/a.img/manifest", timeout=10).json()
    assert man == {"name": "a.img", "size": len(data), "sha256": digest, "format": "raw"}
    r = s.get(f"{url}/images/a.img", timeout=10)
    assert r.headers["ETag"].strip('"') == digest
    assert r.headers["Digest"] == "sha-256=" + base64.b64encode(hashlib.sha256(data).digest()).decode()
    assert r.headers["Accept-Ranges"] == "bytes"
    for bad in ("..%2Fetc%2Fpasswd", "SHA256SUMS", ".hidden", "nope.img"):
        r = s.get(f"{url}/images/{bad}", timeout=10)
        assert r.status_code == 404, bad


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_range_requests_return_exactly_the_requested_bytes(repo, data):
    s, url, body = repo["node"], repo["url"], repo["data"]
    n = len(body)
    kind = data.draw(st.sampled_from(["closed", "open", "suffix", "past"]))
    if kind == "closed":
        a = data.draw(st.integers(0, n - 1))
        b = data.draw(st.integers(a, n + 1000))
        header, want, first, last = f"bytes={a}-{b}", body[a:b + 1], a, min(b, n - 1)
    elif kind == "open":
        a = data.draw(st.integers(0, n - 1))
        header, want, first, last = f"bytes={a}-", body[a:], a, n - 1
    elif kind == "suffix":
        k = data.draw(st.integers(1, n + 1000))
        header, want, first, last = f"bytes=-{k}", body[-k:], max(0, n - k), n - 1
    else:
        a = data.draw(st.integers(n, n + 10**6))
        r = s.get(f"{url}/images/a.img", headers={"Range": f"bytes={a}-"}, timeout=10)
        assert r.status_code == 416
        return
    r = s.get(f"{url}/images/a.img", headers={"Range": header}, timeout=10)
    assert r.status_code == 206, (header, r.status_code)
    assert r.content == want
    assert r.headers["Content-Range"] == f"bytes {first}-{last}/{n}"


def test_a_suffix_range_longer_than_the_image_is_the_whole_image(repo):
    """RFC 9110 14.1.2 (found by the hypothesis test above: ``bytes=-300001`` of a 300,000-byte
    image was a 416)."""
    s, url, data = repo["node"], repo["url"], repo["data"]
    r = s.get(f"{url}/images/a.img", headers={"Range": f"bytes=-{len(data) + 1}"}, timeout=10)
    assert r.status_code == 206 and r.content == data
    assert r.headers["Content-Range"] == f"bytes 0-{len(data) - 1}/{len(data)}"


def test_if_range_with_another_version_sends_the_whole_file(repo):
    s, url, data = repo["node"], repo["url"], repo["data"]
    etag = hashlib.sha256(data).hexdigest()
    same = s.get(f"{url}/images/a.img", headers={"Range": "bytes=100-", "If-Range": f'"{etag}"'}, timeout=10)
    assert same.status_code == 206 and same.content == data[100:]
    other = s.get(f"{url}/images/a.img", headers={"Range": "bytes=100-", "If-Range": '"' + "0" * 64 + '"'},
                  timeout=10)
    assert other.status_code == 200 and other.content == data


def test_published_sha256sums_are_authoritative(repo):
    s, url, images = repo["node"], repo["url"], repo["images"]
    make_image(images / "b.img", 0.01, seed=2)
    (images / "SHA256SUMS").write_text(f"{'ab' * 32}  b.img\nnot a line\n")
    try:
        assert s.get(f"{url}/images/b.img/manifest", timeout=10).json()["sha256"] == "ab" * 32
        names = [i["name"] for i in s.get(f"{url}/images", timeout=10).json()["images"]]
        assert names == ["a.img", "b.img"]                 # SHA256SUMS itself is no image
    finally:
        (images / "SHA256SUMS").unlink()
        (images / "b.img").unlink()


def test_qcow2_images_are_recognised(repo):
    s, url, images = repo["node"], repo["url"], repo["images"]
    (images / "q.qcow2").write_bytes(b"QFI\xfb" + bytes(508))
    try:
        assert s.get(f"{url}/images/q.qcow2/manifest", timeout=10).json()["format"] == "qcow2"
    finally:
        (images / "q.qcow2").unlink()


class FakeTime:
    def __init__(self):
        self.t = 100.0

    def monotonic(self):
        return self.t

    def sleep(self, s):
        assert s >= 0
        self.t += s


@settings(max_examples=200, deadline=None)
@given(rate=st.floats(1e3, 1e8), burst=st.one_of(st.none(), st.floats(1e3, 1e7)),
       chunks=st.lists(st.tuples(st.integers(1, 2_000_000), st.floats(0, 2.0)), min_size=1, max_size=30))
def test_token_bucket_never_exceeds_rate_plus_burst(rate, burst, chunks):
    """Over any interval from the start, bytes passed <= rate x elapsed + burst, and the bucket
    never waits longer than needed: elapsed <= total / rate + idle time (it starts empty)."""
    clock = FakeTime()
    bucket = TokenBucket(rate, burst, monotonic=clock.monotonic, sleep=clock.sleep)
    t0, passed, idle = clock.t, 0, 0.0
    for n, pause in chunks:
        clock.t += pause
        idle += pause
        bucket.take(n)
        passed += n
        assert passed <= rate * (clock.t - t0) + bucket.burst + 1e-6 * passed
    assert clock.t - t0 <= passed / rate + idle + 1e-6 * (clock.t - t0) + 1e-9


def test_token_bucket_rejects_nonsense():
    with pytest.raises(ValueError):
        TokenBucket(0)
    with pytest.raises(ValueError):
        TokenBucket(10, burst=0)
    TokenBucket(float("inf")).take(10**12)                 # unlimited: returns at once


def test_a_suffix_longer_than_the_image_is_the_whole_image(repo):
    """RFC 9110 14.1.2: ``bytes=-k`` with k above the size selects the whole representation (206),
    not 416 (found by hypothesis in a developer run: ``bytes=-300001``)."""
    s, url, body = repo["node"], repo["url"], repo["data"]
    r = s.get(f"{url}/images/a.img", headers={"Range": f"bytes=-{len(body) + 1}"}, timeout=10)
    assert r.status_code == 206 and r.content == body
    assert r.headers["Content-Range"] == f"bytes 0-{len(body) - 1}/{len(body)}"
