"""Health and metrics endpoints over real loopback HTTP (127.0.0.1, ephemeral ports)."""

from __future__ import annotations

import http.client
import logging
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from syncer.httpserver import MAX_CONNECTIONS, HealthServer, MetricsServer
from syncer.metrics import Counter, Registry

LOOPBACK = "127.0.0.1"


def get(url: str, method: str = "GET") -> tuple[int, str, str]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.headers["Content-Type"], error.read().decode()


class Switch:
    def __init__(self) -> None:
        self.healthy: bool = True
        self.ready: bool | tuple[bool, str] = False

    def healthz(self) -> bool:
        return self.healthy

    def readyz(self) -> bool | tuple[bool, str]:
        return self.ready


@pytest.fixture
def switch() -> Switch:
    return Switch()


@pytest.fixture
def health(switch: Switch) -> Iterator[HealthServer]:
    server = HealthServer(LOOPBACK, 0, healthz=switch.healthz, readyz=switch.readyz)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_healthz_and_readyz_follow_their_checks(health: HealthServer, switch: Switch) -> None:
    assert get(f"{health.url}/healthz") == (200, "text/plain; charset=utf-8", "ok\n")
    assert get(f"{health.url}/readyz")[::2] == (500, "not ready\n")
    switch.ready = True
    assert get(f"{health.url}/readyz")[::2] == (200, "ok\n")
    switch.ready = (False, "not the leader and no informer synced yet")
    assert get(f"{health.url}/readyz")[::2] == (500, "not the leader and no informer synced yet\n")
    switch.healthy = False
    assert get(f"{health.url}/healthz")[::2] == (500, "not healthy\n")


def test_a_check_that_raises_is_a_failed_check(switch: Switch) -> None:
    def broken() -> bool:
        raise RuntimeError("lease client gone")

    with HealthServer(LOOPBACK, 0, healthz=broken, readyz=switch.readyz) as server:
        assert get(f"{server.url}/healthz")[::2] == (
            500,
            "healthy check failed: RuntimeError: lease client gone\n",
        )


def test_unknown_paths_are_404_and_queries_are_ignored(health: HealthServer) -> None:
    assert get(f"{health.url}/metrics")[0] == 404
    assert get(f"{health.url}/healthz?verbose=1")[0] == 200


def test_head_answers_without_a_body(health: HealthServer) -> None:
    connection = http.client.HTTPConnection(LOOPBACK, health.port, timeout=5)
    try:
        connection.request("HEAD", "/healthz")
        response = connection.getresponse()
        assert (response.status, response.getheader("Content-Length")) == (200, "3")
        assert response.read() == b""
    finally:
        connection.close()


def test_metrics_serves_the_registry_in_text_format() -> None:
    registry = Registry()
    counter = registry.register(Counter("t_total", "T.", ["code"]))
    counter.labels(code="200").inc(3)
    with MetricsServer(LOOPBACK, 0, registry) as server:
        status, content_type, body = get(f"{server.url}/metrics")
        assert (status, content_type) == (200, "text/plain; version=0.0.4; charset=utf-8")
        assert body == registry.render()
        assert 't_total{code="200"} 3\n' in body
        counter.labels(code="200").inc()
        assert 't_total{code="200"} 4\n' in get(f"{server.url}/metrics")[2]
        assert get(f"{server.url}/healthz")[0] == 404


def test_port_zero_binds_a_free_port_and_stop_releases_it(switch: Switch) -> None:
    server = HealthServer(LOOPBACK, 0, healthz=switch.healthz, readyz=switch.readyz)
    with pytest.raises(RuntimeError, match="not started"):
        _ = server.port
    server.start()
    port = server.port
    assert port > 0
    with pytest.raises(RuntimeError, match="already started"):
        server.start()
    server.stop()
    server.stop()  # stopping twice is harmless
    with (
        pytest.raises(ConnectionRefusedError),
        socket.create_connection((LOOPBACK, port), timeout=5),
    ):
        pass


def test_a_taken_port_fails_at_start(health: HealthServer, switch: Switch) -> None:
    clash = HealthServer(LOOPBACK, health.port, healthz=switch.healthz, readyz=switch.readyz)
    with pytest.raises(OSError, match="in use"):
        clash.start()


def test_a_failing_route_is_a_500_and_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(Registry):
        def render(self) -> str:
            raise RuntimeError("cannot render")

    caplog.set_level(logging.DEBUG, logger="syncer.httpserver")
    with MetricsServer(LOOPBACK, 0, Broken()) as server:
        assert get(f"{server.url}/metrics")[::2] == (500, "internal error: cannot render\n")
    messages = [r.getMessage() for r in caplog.records]
    assert "handler for /metrics failed" in messages
    assert any('"GET /metrics HTTP/1.1" 500' in m for m in messages)


def test_ipv6_addresses_are_served(switch: Switch) -> None:
    try:
        probe = socket.socket(socket.AF_INET6)
        probe.bind(("::1", 0))
        probe.close()
    except OSError:
        pytest.skip("no IPv6 loopback here")
    with HealthServer("::1", 0, healthz=switch.healthz, readyz=switch.readyz) as server:
        assert server.url.startswith("http://[::1]:")
        assert get(f"{server.url}/healthz")[0] == 200


def test_a_silent_connection_is_closed_after_the_socket_timeout(health: HealthServer) -> None:
    # A client that connects and sends nothing: the server ends the connection (M7).
    with socket.create_connection(("127.0.0.1", health.port), timeout=30) as silent:
        assert silent.recv(1) == b""  # closed by the server, not by our 30 s timeout
    assert get(f"{health.url}/healthz")[0] == 200


def test_connections_past_the_cap_are_closed_and_the_probe_still_answers(
    switch: Switch,
) -> None:
    server = HealthServer(LOOPBACK, 0, healthz=switch.healthz, readyz=switch.readyz)
    server.start()
    held: list[socket.socket] = []
    try:
        for _ in range(MAX_CONNECTIONS):
            conn = socket.create_connection(("127.0.0.1", server.port), timeout=30)
            conn.sendall(b"GET /healthz HTTP/1.1\r\n")  # a request that never ends
            held.append(conn)
        extra = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        assert extra.recv(1) == b""  # every slot taken: closed at once, no thread for it
        extra.close()
        assert server._server is not None
        assert server._server.refused >= 1
    finally:
        for conn in held:
            conn.close()
    # The held connections gone, the probe answers again.
    assert wait_for_ok(f"{server.url}/healthz")
    server.stop()


def wait_for_ok(url: str) -> bool:
    for _ in range(100):
        try:
            if get(url)[0] == 200:
                return True
        except (OSError, http.client.HTTPException):
            pass
        threading.Event().wait(0.1)
    return False
