"""The syncer's two small HTTP endpoints: health probes and Prometheus metrics.

`HealthServer` answers `/healthz` and `/readyz` from two callables; `MetricsServer` serves
a `Registry` at `/metrics`. Each is a stdlib `ThreadingHTTPServer` in a daemon thread,
started and stopped explicitly. They serve no other paths and read no other state. A
connection that sends nothing for `SOCKET_TIMEOUT_S` is closed, and at most
`MAX_CONNECTIONS` are served at once (more are closed at once): a client that opens
connections and sends nothing cannot pile up threads (review M7). A failed check answers
500, as controller-runtime's health endpoints do.
"""

from __future__ import annotations

import http.server
import logging
import socket
import threading
from collections.abc import Callable
from typing import Any, Final

from syncer.metrics import CONTENT_TYPE, Registry

# A check answers True (fine), False, or (ok, reason) to say why it is not fine.
Check = Callable[[], bool | tuple[bool, str]]
_TEXT: Final = "text/plain; charset=utf-8"
# How often serve_forever looks for a shutdown request: bounds how long stop() takes.
_POLL_INTERVAL_S: Final = 0.05
SOCKET_TIMEOUT_S: Final = 5.0
MAX_CONNECTIONS: Final = 16
_LOG = logging.getLogger(__name__)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    # Serve immediately after a restart on the same port (TIME_WAIT sockets of the old one).
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[http.server.BaseHTTPRequestHandler],
        routes: dict[str, Callable[[], tuple[int, str, bytes]]],
        *,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.routes = routes
        self.slots = threading.BoundedSemaphore(max_connections)
        self.refused = 0  # connections closed because every slot was taken
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve in a thread if a slot is free, else close the connection at once."""
        if not self.slots.acquire(blocking=False):
            self.refused += 1
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        """Serve one connection, then give its slot back."""
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    timeout = SOCKET_TIMEOUT_S  # on the connection's socket: a silent client is dropped

    def _answer(self, with_body: bool) -> None:
        path = self.path.split("?", 1)[0]
        route = self.server.routes.get(path)
        if route is None:
            status, content_type, body = 404, _TEXT, f"no such path: {path}\n".encode()
        else:
            try:
                status, content_type, body = route()
            except Exception as exc:  # noqa: BLE001 - a failing check is an answer, not a crash
                _LOG.exception("handler for %s failed", path)
                status, content_type, body = 500, _TEXT, f"internal error: {exc}\n".encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if with_body:
            self.wfile.write(body)

    def do_GET(self) -> None:
        """Answer a GET."""
        self._answer(with_body=True)

    def do_HEAD(self) -> None:
        """Answer a HEAD (the same status and headers, no body)."""
        self._answer(with_body=False)

    def log_message(self, format: str, *args: object) -> None:
        """Log requests at debug level only: probes come every few seconds."""
        if _LOG.isEnabledFor(logging.DEBUG):
            _LOG.debug("%s %s", self.address_string(), format % args)


class _Endpoint:
    """A server on one address and port, serving in a daemon thread between start and stop."""

    _name = "http"

    def __init__(
        self, address: str, port: int, routes: dict[str, Callable[[], tuple[int, str, bytes]]]
    ) -> None:
        self._address = address
        self._requested_port = port
        self._routes = routes
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port (the real one when 0 was asked for); only after `start()`."""
        if self._server is None:
            raise RuntimeError(f"the {self._name} server is not started")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """`http://<address>:<port>`, for logs and tests."""
        host = f"[{self._address}]" if ":" in self._address else self._address
        return f"http://{host}:{self.port}"

    def start(self) -> None:
        """Bind and serve in a daemon thread (OSError when the port is taken)."""
        if self._server is not None:
            raise RuntimeError(f"the {self._name} server is already started")
        server = _Server((self._address, self._requested_port), _Handler, self._routes)
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            args=(_POLL_INTERVAL_S,),
            name=f"{self._name}-server",
            daemon=True,
        )
        self._thread.start()
        _LOG.info("%s server listening", self._name, extra={"url": self.url})

    def stop(self) -> None:
        """Stop serving and close the socket; a server not started is left alone."""
        server, thread = self._server, self._thread
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5.0)
        self._server = self._thread = None

    def __enter__(self) -> _Endpoint:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _probe(check: Check, what: str) -> Callable[[], tuple[int, str, bytes]]:
    def answer() -> tuple[int, str, bytes]:
        try:
            result = check()
        except Exception as exc:  # noqa: BLE001 - a check that raises is a failed check
            result = (False, f"{what} check failed: {type(exc).__name__}: {exc}")
        ok, reason = result if isinstance(result, tuple) else (result, f"not {what}")
        if ok:
            return 200, _TEXT, b"ok\n"
        return 500, _TEXT, f"{reason}\n".encode()

    return answer


class HealthServer(_Endpoint):
    """`/healthz` (liveness) and `/readyz` (readiness): 200 "ok", or 500 with the reason."""

    _name = "health"

    def __init__(self, address: str, port: int, *, healthz: Check, readyz: Check) -> None:
        super().__init__(
            address,
            port,
            {"/healthz": _probe(healthz, "healthy"), "/readyz": _probe(readyz, "ready")},
        )


class MetricsServer(_Endpoint):
    """`/metrics`: `registry` in the Prometheus text format 0.0.4."""

    _name = "metrics"

    def __init__(self, address: str, port: int, registry: Registry) -> None:
        def metrics() -> tuple[int, str, bytes]:
            return 200, CONTENT_TYPE, registry.render().encode()

        super().__init__(address, port, {"/metrics": metrics})
