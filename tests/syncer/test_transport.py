"""The daemon's own HTTP connections to the API server (`syncer.kube.transport.Connections`).

A Pod's syncer talks to the API server through the standard library, not urllib3: these
tests hold it to what the urllib3 pool did, against the fake API server (keep-alive,
outages, Retry-After, broken watches) and a loopback TLS server (the cluster CA, names).
"""

from __future__ import annotations

import http.server
import shutil
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from syncer.errors import TransientError
from syncer.kube.client import CONFIGMAPS, KubeClient
from syncer.kube.incluster import ServiceAccount
from syncer.kube.transport import Connections, TransportError
from tests.fakeapi.server import FakeApiServer

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "default"


def _configmap(name: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "data": {"k": name},
    }


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[FakeApiServer, KubeClient, Connections]]:
    (tmp_path / "token").write_text("t\n")
    sleeps: list[float] = []
    with FakeApiServer() as server:
        kube = KubeClient(
            ServiceAccount(server.url, "", str(tmp_path / "token")), sleep=sleeps.append
        )
        transport = kube._transport
        assert isinstance(transport, Connections)
        try:
            yield server, kube, transport
        finally:
            kube.close()


def test_requests_share_one_kept_alive_connection(
    served: tuple[FakeApiServer, KubeClient, Connections],
) -> None:
    server, kube, transport = served
    server.put_object(_configmap("a"))
    for _ in range(20):
        cm = kube.get(CONFIGMAPS, NAMESPACE, "a")
        assert cm is not None and cm["data"] == {"k": "a"}
    assert kube.get(CONFIGMAPS, NAMESPACE, "missing") is None  # a 404's body is read too
    kube.create(CONFIGMAPS, NAMESPACE, _configmap("b"))
    assert transport.opened == 1


def test_an_outage_is_transient_and_the_next_request_opens_a_new_connection(
    served: tuple[FakeApiServer, KubeClient, Connections],
) -> None:
    server, kube, transport = served
    server.put_object(_configmap("a"))
    assert kube.get(CONFIGMAPS, NAMESPACE, "a") is not None
    with server.faults.outage("refused"), pytest.raises(TransientError, match="GET"):
        kube.get(CONFIGMAPS, NAMESPACE, "a")
    assert kube.get(CONFIGMAPS, NAMESPACE, "a") is not None  # the closed one is not reused
    assert transport.opened >= 2
    assert kube.calls[("GET", "error")] == 1


def test_retry_after_is_waited_for_then_the_request_repeated(
    served: tuple[FakeApiServer, KubeClient, Connections],
) -> None:
    server, kube, _ = served
    server.put_object(_configmap("a"))
    server.faults.fail(429, verb="get", resource="configmaps", times=1, retry_after=2)
    assert kube.get(CONFIGMAPS, NAMESPACE, "a") is not None
    assert kube.retried_after == 1
    server.faults.fail(503, verb="get", resource="configmaps", times=None, retry_after=60)
    with pytest.raises(TransientError) as caught:  # too long to wait here: the engine backs off
        kube.get(CONFIGMAPS, NAMESPACE, "a")
    assert caught.value.retry_after == 60


def test_a_watch_cut_off_is_transient_and_one_closed_cleanly_ends(
    served: tuple[FakeApiServer, KubeClient, Connections],
) -> None:
    server, kube, _ = served
    _, version = kube.list(CONFIGMAPS, NAMESPACE)
    for abrupt in (False, True):
        events = kube.watch(CONFIGMAPS, NAMESPACE, resource_version=version, timeout_s=30)
        server.put_object(_configmap(f"w-{abrupt}"))
        first = next(events)
        assert first.type == "ADDED" and first.object["metadata"]["name"] == f"w-{abrupt}"
        version = first.object["metadata"]["resourceVersion"]
        server.faults.drop_watches(abrupt=abrupt)
        if abrupt:
            with pytest.raises(TransientError, match="watch configmaps"):
                list(events)
        else:
            assert list(events) == []
    assert kube.get(CONFIGMAPS, NAMESPACE, "w-True") is not None


# --- TLS ---------------------------------------------------------------------------------


def _certificate(directory: Path, name: str, san: str) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no openssl command to make a test certificate")
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(
        [
            *(openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"),
            *("-nodes", "-days", "1", "-subj", f"/CN={name}"),
            *("-addext", f"subjectAltName={san}", "-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


class _Ok(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = b'{"kind": "Status", "status": "Success"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    cert, key = _certificate(tmp_path, "apiserver", "IP:127.0.0.1")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], cert
    finally:
        server.shutdown()
        server.server_close()


def _get(connections: Connections) -> int:
    answer = connections.request("GET", "/version", None, {}, connect_s=5, read_s=5)
    answer.read()
    return answer.status


def test_tls_is_verified_against_the_cluster_ca(
    tls_server: tuple[int, Path], tmp_path: Path
) -> None:
    port, ca = tls_server
    trusted = Connections(f"https://127.0.0.1:{port}", ca_file=str(ca))
    try:
        assert _get(trusted) == 200 and _get(trusted) == 200
        assert trusted.opened == 1
    finally:
        trusted.close()
    other_ca, _ = _certificate(tmp_path, "other", "IP:127.0.0.1")
    with pytest.raises(TransportError, match="CERTIFICATE_VERIFY_FAILED"):
        _get(Connections(f"https://127.0.0.1:{port}", ca_file=str(other_ca)))
    # The certificate names 127.0.0.1, not localhost: the name is checked too.
    with pytest.raises(TransportError, match=r"CERTIFICATE_VERIFY_FAILED|match"):
        _get(Connections(f"https://localhost:{port}", ca_file=str(ca)))


def test_a_url_that_is_not_http_is_refused() -> None:
    with pytest.raises(ValueError, match="expected http"):
        Connections("ftp://127.0.0.1:21")


def test_the_daemon_path_imports_neither_kubernetes_nor_urllib3() -> None:
    code = (
        "import sys, syncer.cli, syncer.kube.client; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'kubernetes', 'urllib3'}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("name", ["http://127.0.0.2:9/x", "//127.0.0.2:9/x", "../../../version"])
def test_a_name_a_tenant_chose_reaches_only_the_api_server_quoted(
    served: tuple[FakeApiServer, KubeClient, Connections], name: str
) -> None:
    # An object name is read from objects a tenant writes: it is a quoted path segment on
    # the one configured server, never a host or a path of its own.
    _, kube, transport = served
    assert kube.get(CONFIGMAPS, NAMESPACE, name) is None  # 404 for the quoted name
    assert transport.opened == 1 and kube.calls[("GET", "404")] == 1
