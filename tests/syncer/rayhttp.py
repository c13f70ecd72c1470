"""A Ray Jobs API over real HTTP on 127.0.0.1, honest or hostile, that records every request.

`RayHttp` serves `FakeDashboard` (the in-memory Jobs API) through `ThreadingHTTPServer`,
so the syncer's real `HttpDashboard` talks to it over sockets. Every request is recorded
with its Host header (which names the head Service, hence the namespace, the syncer
meant), its `X-Ray-Authorization` header and what was answered. Per-host behaviour:
`tokens` (the token a head Service, else each namespace's heads, accept; a wrong or
missing one gets 401) and `mode` by head Service, else by namespace: `honest`,
`trickle` (one byte every `trickle_s`), `huge` (a reply of `huge_bytes`, counted as
written) or `down` (503). Started and stopped by the test that
owns it (`close`), never by name.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from syncer.errors import SyncerError
from tests.syncer.fakedashboard import FakeDashboard


@dataclass(frozen=True)
class Seen:
    """One request as the server saw it."""

    method: str
    path: str
    host: str
    auth: str | None
    status: int

    @property
    def service(self) -> str:
        """The head Service the request was addressed to (Host header)."""
        return self.host.split(".")[0]

    @property
    def namespace(self) -> str:
        """The namespace of the head Service the request was addressed to (Host header)."""
        parts = self.host.split(".")
        return parts[1] if len(parts) > 1 else ""


@dataclass
class RayHttp:
    """The server, its Ray state and its record (see the module docstring)."""

    dashboard: FakeDashboard
    tokens: dict[str, str] = field(default_factory=dict)
    mode: dict[str, str] = field(default_factory=dict)
    trickle_s: float = 0.1
    trickle_bytes: int = 400
    huge_bytes: int = 64 * 1024 * 1024
    replies: dict[str, bytes] = field(default_factory=dict)  # fixed 200 replies by path
    seen: list[Seen] = field(default_factory=list)
    written: dict[str, int] = field(default_factory=dict)  # hostile bytes by head Service
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None
    thread: threading.Thread | None = None

    def start(self) -> RayHttp:
        """Listen on 127.0.0.1 (an ephemeral port)."""
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                owner.handle(self)

            def log_message(self, format: str, *args: Any) -> None:
                return

        for verb in ("GET", "POST", "PUT", "DELETE"):
            setattr(Handler, f"do_{verb}", Handler._answer)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()
        return self

    @property
    def port(self) -> int:
        """The port it listens on."""
        assert self.server is not None
        return int(self.server.server_address[1])

    def close(self) -> None:
        """Stop serving and close the socket (this server only)."""
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        if self.thread is not None:
            self.thread.join(5)

    def requests(self, namespace: str | None = None, service: str | None = None) -> list[Seen]:
        """A snapshot of the record, optionally for one namespace's or Service's hosts."""
        with self.lock:
            return [
                s
                for s in self.seen
                if namespace in (None, s.namespace) and service in (None, s.service)
            ]

    # --- answering -----------------------------------------------------------------------

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        """Answer one request as the namespace's mode says."""
        length = int(request.headers.get("Content-Length") or 0)
        body = request.rfile.read(length) if length else b""
        host = str(request.headers.get("Host") or "")
        auth = request.headers.get("X-Ray-Authorization")
        seen = Seen(request.command, request.path, host, auth, 0)
        namespace, service = seen.namespace, seen.service
        mode = self.mode.get(service) or self.mode.get(namespace, "honest")
        expected = self.tokens.get(service) or self.tokens.get(namespace)
        if expected is not None and auth != f"Bearer {expected}":
            status, payload = 401, b"Unauthorized: invalid token"
        elif mode == "down":
            status, payload = 503, b"no healthy upstream"
        elif mode in ("trickle", "huge"):
            self._record(request, host, auth, 200)
            self._hostile(request, service, mode)
            return
        elif request.path in self.replies:
            status, payload = 200, self.replies[request.path]
        else:
            with self.lock:  # FakeDashboard is not thread-safe
                status, payload = self._ray(request.command, request.path, body)
        self._record(request, host, auth, status)
        try:
            request.send_response(status)
            request.send_header("Content-Type", "application/json")
            request.send_header("Content-Length", str(len(payload)))
            request.end_headers()
            request.wfile.write(payload)
        except OSError:
            return

    def _record(
        self, request: BaseHTTPRequestHandler, host: str, auth: str | None, status: int
    ) -> None:
        with self.lock:
            self.seen.append(Seen(request.command, request.path, host, auth, status))

    def _count(self, namespace: str, count: int) -> None:
        with self.lock:
            self.written[namespace] = self.written.get(namespace, 0) + count

    def _hostile(self, request: BaseHTTPRequestHandler, namespace: str, mode: str) -> None:
        request.close_connection = True
        try:
            if mode == "trickle":
                # Headers promise a short body, then one byte at a time.
                request.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
                for _ in range(self.trickle_bytes):
                    request.wfile.write(b"[")
                    request.wfile.flush()
                    self._count(namespace, 1)
                    time.sleep(self.trickle_s)
                return
            request.send_response(200)
            request.send_header("Content-Type", "application/json")
            request.send_header("Content-Length", str(self.huge_bytes))
            request.end_headers()
            chunk = b"[" + b" " * (64 * 1024 - 1)
            sent = 0
            while sent < self.huge_bytes:
                request.wfile.write(chunk)
                sent += len(chunk)
                self._count(namespace, len(chunk))
                chunk = b" " * len(chunk)
        except OSError:  # the client gave up: what it was sent so far is counted
            return

    def _ray(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        ray = self.dashboard
        try:
            if method == "GET" and path == "/api/jobs/":
                return 200, json.dumps(ray.list_jobs()).encode()
            if method == "POST" and path == "/api/jobs/":
                request: Mapping[str, Any] = json.loads(body)
                created = ray.submit_job(str(request["submission_id"]), str(request["entrypoint"]))
                if not created:
                    return 500, b"ValueError: Job with submission_id already exists."
                return 200, json.dumps({"submission_id": request["submission_id"]}).encode()
            if method == "POST" and path.endswith("/stop"):
                stopped = ray.stop_job(path.split("/")[3])
                return 200, json.dumps({"stopped": stopped}).encode()
            if method == "GET" and path == "/api/version":
                return 200, json.dumps(dict(ray.version())).encode()
        except SyncerError as exc:
            return exc.status or 500, str(exc).encode()
        return 404, b"no route"
