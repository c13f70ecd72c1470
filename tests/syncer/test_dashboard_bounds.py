"""The dashboard client's bounds against hostile heads on 127.0.0.1 (review M3, L3).

Real sockets: `tests.syncer.rayhttp.RayHttp` trickles, floods or is down, and counts what
it managed to send; each test asserts what must not happen (a worker held past the
deadline, a reply read past the cap, requests to a dead head beyond the breaker's few).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from syncer.errors import PermanentError, TransientError
from syncer.ray.breaker import Breakers, CircuitBreaker, CircuitOpenError
from syncer.ray.dashboard import MAX_MESSAGE_CHARS, DashboardError, HttpDashboard
from tests.syncer.fakedashboard import FakeDashboard, ManualClock
from tests.syncer.rayhttp import RayHttp

NS = "team-a"


@pytest.fixture
def ray() -> Iterator[RayHttp]:
    server = RayHttp(FakeDashboard()).start()
    yield server
    server.close()


def _client(server: RayHttp, **kwargs: object) -> HttpDashboard:
    # The Host header names a head Service in NS; the socket goes to the loopback server.
    return HttpDashboard(
        f"http://head-svc.{NS}.svc.cluster.local:{server.port}",
        resolve=lambda host: "127.0.0.1",
        **kwargs,  # type: ignore[arg-type]
    )


def test_a_trickling_dashboard_holds_a_request_only_until_its_deadline(ray: RayHttp) -> None:
    ray.mode[NS] = "trickle"
    ray.trickle_s = 0.05  # 400 bytes would take 20 s
    client = _client(ray, timeout=1.0)
    with pytest.raises(TransientError, match="timed out"):
        client.list_jobs()
    time.sleep(0.5)  # let the server notice the closed connection
    written = ray.written.get("head-svc", 0)
    # Not the 400 bytes a per-recv timeout would have waited for: about 1 s worth (20).
    assert 0 < written < 100
    assert client.sent == 1


def test_a_huge_reply_is_refused_after_the_cap_and_not_read_further(ray: RayHttp) -> None:
    ray.mode[NS] = "huge"
    ray.huge_bytes = 256 * 1024 * 1024
    client = _client(ray, timeout=10.0, max_reply_bytes=1024 * 1024)
    with pytest.raises(DashboardError, match="larger than 1048576 bytes"):
        client.list_jobs()
    time.sleep(0.5)
    # The server could push only the cap plus what the socket buffers held: far from 256 MiB.
    assert ray.written.get("head-svc", 0) < 32 * 1024 * 1024


def test_the_circuit_breaker_bounds_requests_to_a_dead_dashboard(ray: RayHttp) -> None:
    ray.mode[NS] = "down"
    clock = ManualClock(0.0)
    breaker = CircuitBreaker("head", threshold=3, base_s=1.0, max_s=8.0, clock=clock)
    client = _client(ray, timeout=2.0, breaker=breaker)
    refused = 0
    for _ in range(50):
        try:
            client.list_jobs()
        except CircuitOpenError:
            refused += 1
        except TransientError:
            pass
    assert len(ray.requests(NS)) == 3  # the threshold, then nothing while open
    assert refused == 47
    assert breaker.state == "open"
    # Half-open after the backoff: exactly one probe; it fails, the circuit opens for 2 s.
    clock.advance(1.0)
    for _ in range(10):
        with pytest.raises(TransientError):
            client.list_jobs()
    assert len(ray.requests(NS)) == 4
    clock.advance(1.0)
    with pytest.raises(CircuitOpenError):
        client.list_jobs()  # still open: the backoff doubled
    clock.advance(1.0)
    ray.mode[NS] = "honest"
    assert client.list_jobs() == []  # the probe succeeds: closed again
    assert breaker.state == "closed"
    assert len(ray.requests(NS)) == 5


def test_a_dashboard_that_answers_errors_is_not_cut_off(ray: RayHttp) -> None:
    # 404s are answers: the breaker stays closed and every request goes out.
    client = _client(ray, timeout=2.0)
    for _ in range(20):
        assert client.get_job("unknown") is None
    assert client.breaker.state == "closed"
    assert len(ray.requests(NS)) == 20


def test_breakers_are_kept_per_url_and_bounded() -> None:
    breakers = Breakers(limit=3)
    first = breakers.get("http://a:1")
    assert breakers.get("http://a:1") is first
    for name in "bcde":
        breakers.get(f"http://{name}:1")
    assert len(breakers) == 3
    assert breakers.get("http://a:1") is not first  # the oldest was dropped


@pytest.mark.parametrize(
    "url",
    ["", "ftp://head:8265", "https://head:8265", "head:8265", "http://:8265", "http://h:0x1"],
)
def test_every_bad_dashboard_url_is_a_dashboard_error(url: str) -> None:
    with pytest.raises(DashboardError) as refused:
        HttpDashboard(url, timeout=1.0)
    assert isinstance(refused.value, PermanentError)
    assert not isinstance(refused.value, ValueError)


def test_rays_messages_are_capped_before_they_reach_status(ray: RayHttp) -> None:
    job = {"submission_id": "j1", "status": "FAILED", "entrypoint": "x", "type": "SUBMISSION"}
    traceback = "Traceback (most recent call last):\n" + "  x\n" * 500_000 + "ValueError: boom"
    huge = {**job, "message": traceback, "error_type": "E" * 10_000}
    ray.replies["/api/jobs/"] = json.dumps([huge]).encode()
    client = _client(ray, timeout=5.0)
    (info,) = client.list_jobs()
    assert info["message"] is not None
    assert len(info["message"]) == MAX_MESSAGE_CHARS
    assert info["message"].startswith("Traceback (most recent call last):")
    assert "[... truncated ...]" in info["message"]
    assert info["message"].endswith("\nValueError: boom")  # the line that names the error
    assert info["error_type"] is not None
    assert len(info["error_type"]) == MAX_MESSAGE_CHARS
    assert len(json.dumps(info)) < 4 * MAX_MESSAGE_CHARS
