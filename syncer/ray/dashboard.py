"""Client of one Ray head's dashboard: the Jobs and Serve REST APIs; the syncer's only HTTP code.

`HttpDashboard` implements `syncer.ray.types.Dashboard` (the protocol the rest of the
syncer uses) with stdlib `http.client` only. Replies are checked field by field and returned
as the TypedDicts of `syncer.ray.types`; every method raises only `TransientError` or
`PermanentError` (from `syncer.errors`; `DashboardError` and `CircuitOpenError` are of
those). Shapes and error texts were checked against Ray 2.60.0 (commit b7f4259e) on a
loopback head, see `tests/e2e/test_dashboard.py` and ../shared/reference/ray-apis.md.

Every request is bounded (security review M3): a wall-clock deadline for the whole
exchange (connect, send, every receive: a server that trickles bytes cannot hold a worker
past it), a reply size cap (a bigger reply is refused after reading one byte over the cap,
never read to its end), a per-URL circuit breaker (`syncer.ray.breaker`), no redirects,
no proxies, and Ray's free-text messages capped before they reach any status.
"""

from __future__ import annotations

import http.client
import io
import json
import logging
import re
import socket
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeGuard

from syncer.errors import (
    NotFoundError,
    NotLeaderError,
    PermanentError,
    TransientError,
    error_for_status,
)
from syncer.ray.breaker import CircuitBreaker
from syncer.ray.types import (
    APPLICATION_STATUSES,
    JOB_STATUSES,
    ApplicationDetails,
    ApplicationStatus,
    DeploymentDetails,
    DriverInfo,
    JobInfo,
    JobStatus,
    JobType,
    ProxyDetails,
    ReplicaDetails,
    ServeDetails,
    VersionInfo,
)

Manifest = dict[str, Any]

# Ray answers a duplicate submission id with a 500 whose traceback holds this text.
_DUPLICATE_TEXT = "already exists"
_MAX_ERROR_TEXT = 500
MAX_REPLY_BYTES: Final = 4 * 1024 * 1024  # a 2 MB job list is ~5,000 jobs (review M3)
MAX_ERROR_BYTES: Final = 64 * 1024  # of an error body only a summary line is kept
MAX_MESSAGE_CHARS: Final = 1024  # Ray's job and Serve messages, as they reach status (L3)
_TRUNCATED: Final = " [... truncated ...] "
# Statuses that say the head itself is down (a proxy in front of it answered): the breaker
# counts them as failures, like no answer at all. A 500 is Ray's own answer (a duplicate
# submission is one), so it is not.
_DOWN_STATUSES: Final = frozenset({502, 503, 504})
_MUTATING: Final = frozenset({"POST", "PUT", "DELETE"})
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception): .+")
_LOG = logging.getLogger(__name__)


class DashboardError(PermanentError):
    """A dashboard address or reply the client refuses: a bad URL, a reply over the cap."""


def require_lease(is_fresh: Callable[[], bool], what: str) -> None:
    """Raise NotLeaderError unless the leader lease is fresh now (right before a mutation)."""
    if not is_fresh():
        raise NotLeaderError(f"not sending {what}: no fresh leader lease")


class TokenSource(Protocol):
    """Where a client gets its Ray token, per request (a per-namespace Secret, H4)."""

    def token(self) -> str | None:
        """The token to send now (None: send none)."""
        ...

    def refresh(self, rejected: str | None) -> str | None:
        """After a 401 to `rejected`: the token read again (at most so often), or None."""
        ...


class _StaticToken:
    def __init__(self, value: str | None) -> None:
        self._value = value or None

    def token(self) -> str | None:
        return self._value

    def refresh(self, rejected: str | None) -> str | None:
        return self._value


@dataclass(frozen=True, slots=True)
class Target:
    """Where a client connects: its URL's host and path, and the port to dial now."""

    host: str
    port: int
    path: str
    connect_host: str


def parse_url(base_url: object) -> tuple[str, int, str]:
    """(host, port, path prefix) of an `http://host[:port][/path]` URL, else DashboardError."""
    if not isinstance(base_url, str) or not base_url:
        raise DashboardError(f"dashboard URL must be http://host[:port], got {base_url!r}")
    try:
        parts = urllib.parse.urlsplit(base_url)
        port = parts.port or 80
    except ValueError as exc:
        raise DashboardError(f"dashboard URL {base_url!r} is malformed: {exc}") from exc
    if parts.scheme != "http" or not parts.hostname:
        raise DashboardError(f"dashboard URL must be http://host[:port], got {base_url!r}")
    if parts.query or "#" in base_url or "@" in parts.netloc:
        raise DashboardError(f"dashboard URL must have no user, query or fragment: {base_url!r}")
    if any(ord(c) <= 32 or ord(c) >= 127 for c in base_url):
        raise DashboardError(f"dashboard URL has spaces or control characters: {base_url!r}")
    return parts.hostname, port, parts.path.rstrip("/")


class HttpDashboard:
    """`Dashboard` over HTTP, one instance per Ray head.

    Environment proxies (`HTTP_PROXY`) are ignored: the dashboard is a cluster-internal
    Service. `base_url` may carry a path (the API server's service proxy). The token goes
    in `X-Ray-Authorization`, as KubeRay sends it, because a proxy in between may consume
    `Authorization`.
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float,
        auth_token: str | None = None,
        auth: TokenSource | None = None,
        headers: Mapping[str, str] | None = None,
        serve_timeout: float = 30.0,
        max_reply_bytes: int = MAX_REPLY_BYTES,
        breaker: CircuitBreaker | None = None,
        port: Callable[[], int] | None = None,
        resolve: Callable[[str], str] | None = None,
        fence: Callable[[], bool] | None = None,
    ) -> None:
        """Create a client.

        Args:
            base_url: `http://host:port`, without the `/api/...` part.
            timeout: seconds per request, wall clock, from connect to the last byte.
            auth_token: a fixed Ray token (clusters started with `RAY_AUTH_MODE=token`).
            auth: where to read the token per request instead (re-read after a 401).
            headers: extra headers sent with every request.
            serve_timeout: seconds for Serve PUT and DELETE, which block while Serve starts
                or shuts down (2 to 5 s observed on an idle head).
            max_reply_bytes: the largest reply body accepted.
            breaker: the URL's circuit breaker (shared between clients of one URL).
            port: the port to dial, asked before every request (the live head Service's
                `dashboard` port); default the URL's.
            resolve: host name -> address to connect to (tests play DNS); default as is.
            fence: asked right before a POST, PUT or DELETE goes out; False refuses it
                with NotLeaderError (the syncer's fresh-lease check).

        Raises:
            DashboardError: `base_url` is not an http URL with a host.
        """
        self._host, self._port, self._path = parse_url(base_url)
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.serve_timeout = max(timeout, serve_timeout)
        self.max_reply_bytes = max(1, max_reply_bytes)
        self._headers = {"Accept": "application/json", "Connection": "close", **(headers or {})}
        self._auth: TokenSource = auth if auth is not None else _StaticToken(auth_token)
        self.breaker = breaker if breaker is not None else CircuitBreaker(self.base_url)
        self._live_port = port
        self._resolve = resolve
        self._fence = fence
        self.sent = 0  # requests that went out (tests, metrics)

    def __repr__(self) -> str:
        return f"HttpDashboard({self.base_url!r})"

    def version(self) -> VersionInfo:
        """Return the Ray and Jobs API versions (`GET /api/version`)."""
        where = "GET /api/version"
        obj = _object(self._get_json("/api/version"), where)
        return VersionInfo(
            version=_str(obj, "version", where),
            ray_version=_str(obj, "ray_version", where),
            ray_commit=_str(obj, "ray_commit", where),
            session_name=_str(obj, "session_name", where),
        )

    def is_healthy(self) -> bool:
        """Return whether `GET /api/gcs_healthz` says `success`; False on transient errors."""
        try:
            body = self._send("GET", "/api/gcs_healthz", None, self.timeout)
        except TransientError as exc:
            _LOG.debug("dashboard not healthy url=%s error=%s", self.base_url, exc)
            return False
        return b"success" in body

    def submit_job(
        self,
        submission_id: str,
        entrypoint: str,
        *,
        runtime_env: Manifest | None = None,
        metadata: Mapping[str, str] | None = None,
        entrypoint_num_cpus: float | None = None,
        entrypoint_num_gpus: float | None = None,
        entrypoint_memory: int | None = None,
        entrypoint_resources: Mapping[str, float] | None = None,
    ) -> bool:
        """Submit a job with `POST /api/jobs/`.

        Returns:
            True when this call created the job; False when a job with this submission id
            already existed (in any state), which Ray answers with a 500 "already exists".
            The existing job's entrypoint is not compared.
        """
        body: Manifest = {"entrypoint": entrypoint, "submission_id": submission_id}
        optional: Manifest = {
            "runtime_env": runtime_env,
            "metadata": None if metadata is None else dict(metadata),
            "entrypoint_num_cpus": entrypoint_num_cpus,
            "entrypoint_num_gpus": entrypoint_num_gpus,
            "entrypoint_memory": entrypoint_memory,
            "entrypoint_resources": None
            if entrypoint_resources is None
            else dict(entrypoint_resources),
        }
        body.update({key: value for key, value in optional.items() if value is not None})
        reply = self._exchange("POST", "/api/jobs/", body, self.timeout)
        if reply.status == 500 and _DUPLICATE_TEXT in reply.text():
            return False
        obj = _object(_decode(reply.checked(), "POST /api/jobs/"), "POST /api/jobs/")
        _str(obj, "submission_id", "POST /api/jobs/")
        return True

    def get_job(self, submission_id: str) -> JobInfo | None:
        """Return `GET /api/jobs/{id}`, or None on 404."""
        path = f"/api/jobs/{_quote(submission_id)}"
        try:
            return _job_info(self._get_json(path), f"GET {path}")
        except NotFoundError:
            return None

    def list_jobs(self) -> list[JobInfo]:
        """Return the SUBMISSION jobs of `GET /api/jobs/`, by start time, then id."""
        where = "GET /api/jobs/"
        reply = self._get_json("/api/jobs/")
        if not isinstance(reply, list):
            raise _shape(where, "$", "a list", reply)
        jobs = [_job_info(item, f"{where} $[{index}]") for index, item in enumerate(reply)]
        jobs = [job for job in jobs if job["type"] == "SUBMISSION"]
        # Ray returns its internal dict order, not time order.
        jobs.sort(key=lambda job: (job["start_time"] or 0, job["submission_id"] or ""))
        return jobs

    def stop_job(self, submission_id: str) -> bool:
        """Return `stopped` of `POST /api/jobs/{id}/stop`.

        True does not mean the job will end soon: a job PENDING on resources stays PENDING
        until Ray's start timeout (RAY_JOB_START_TIMEOUT_SECONDS, 900 s by default).
        """
        path = f"/api/jobs/{_quote(submission_id)}/stop"
        obj = _object(_decode(self._send("POST", path, None, self.timeout), path), path)
        return _bool(obj, "stopped", f"POST {path}")

    def delete_job(self, submission_id: str) -> bool:
        """Return True after `DELETE /api/jobs/{id}`, False on 404.

        Deleting within about a second of the job's end can make Ray re-create it as a
        FAILED ghost (error type JOB_SUPERVISOR_ACTOR_DIED, entrypoint
        "Entrypoint not found."); a second delete removes it.
        """
        path = f"/api/jobs/{_quote(submission_id)}"
        try:
            reply = self._send("DELETE", path, None, self.timeout)
        except NotFoundError:
            return False
        return _bool(_object(_decode(reply, path), path), "deleted", f"DELETE {path}")

    def get_job_logs(self, submission_id: str) -> str:
        """Return `logs` of `GET /api/jobs/{id}/logs`."""
        path = f"/api/jobs/{_quote(submission_id)}/logs"
        return _str(_object(self._get_json(path), path), "logs", f"GET {path}")

    def put_serve_applications(
        self, config: Manifest, *, target_capacity: float | None = None
    ) -> None:
        """`PUT /api/serve/applications/` with the whole multi-application config."""
        body = dict(config)
        if target_capacity is not None:
            body["target_capacity"] = target_capacity
        self._send("PUT", "/api/serve/applications/", body, self.serve_timeout)

    def get_serve_details(self) -> ServeDetails:
        """Return `GET /api/serve/applications/?api_type=declarative`, checked."""
        path = "/api/serve/applications/?api_type=declarative"
        return _serve_details(self._get_json(path), f"GET {path}")

    def delete_serve_applications(self) -> None:
        """`DELETE /api/serve/applications/`; blocks until Serve has shut down."""
        self._send("DELETE", "/api/serve/applications/", None, self.serve_timeout)

    def _get_json(self, path: str) -> object:
        return _decode(self._send("GET", path, None, self.timeout), f"GET {path}")

    def _send(self, method: str, path: str, body: Manifest | None, timeout: float) -> bytes:
        return self._exchange(method, path, body, timeout).checked()

    def _exchange(self, method: str, path: str, body: Manifest | None, timeout: float) -> _Reply:
        """Make one request; HTTP error statuses come back as a `_Reply`, not raised.

        Order: the token (it may be read from a Secret), the port (the live Service), the
        circuit breaker, the lease fence; then the request. A 401 re-reads the token once
        and repeats the request only when the Secret now holds another token.
        """
        url = self.base_url + path
        data = None
        headers = dict(self._headers)
        if body is not None:
            try:
                data = json.dumps(body).encode()
            except (TypeError, ValueError) as exc:
                raise PermanentError(f"{method} {url}: body is not JSON: {exc}") from exc
            headers["Content-Type"] = "application/json"
        token = self._auth.token()
        port = self._live_port() if self._live_port is not None else self._port
        self.breaker.before()
        answered = False
        try:
            if method in _MUTATING and self._fence is not None:
                require_lease(self._fence, f"{method} {url}")
            began = time.monotonic()
            reply = self._attempt(method, path, data, headers, token, port, timeout)
            if reply.status == 401:
                fresh = self._auth.refresh(token)
                if fresh is not None and fresh != token:
                    reply = self._attempt(method, path, data, headers, fresh, port, timeout)
            answered = reply.status not in _DOWN_STATUSES
        finally:
            if answered:
                self.breaker.success()
            else:
                self.breaker.failure()
        _LOG.debug(
            "dashboard call method=%s url=%s port=%s status=%s seconds=%.3f",
            method,
            url,
            port,
            reply.status,
            time.monotonic() - began,
        )
        return reply

    def _attempt(
        self,
        method: str,
        path: str,
        data: bytes | None,
        headers: dict[str, str],
        token: str | None,
        port: int,
        timeout: float,
    ) -> _Reply:
        """One request on a new connection, bounded by `timeout` seconds of wall clock."""
        url = self.base_url + path
        if token:
            headers = {**headers, "X-Ray-Authorization": f"Bearer {token}"}
        address = (self._resolve(self._host) if self._resolve else self._host, port)
        connection = _Connection(self._host, port, address, time.monotonic() + timeout, timeout)
        try:
            self.sent += 1
            connection.request(method, self._path + path, body=data, headers=headers)
            response = connection.getresponse()
            ok = 200 <= response.status < 300
            limit = self.max_reply_bytes if ok else MAX_ERROR_BYTES
            raw = response.read(limit + 1)
            if len(raw) > limit:
                if ok:
                    raise DashboardError(
                        f"{method} {url}: reply larger than {limit} bytes; not read further"
                    )
                raw = raw[:limit]  # an error body: its first part says enough
            return _Reply(method, url, response.status, raw, response.getheader("Retry-After"))
        except (http.client.HTTPException, OSError) as exc:
            # Refused or reset connections, DNS failures, the deadline (TimeoutError is an
            # OSError), a malformed or cut-short reply.
            raise TransientError(f"{method} {url}: {exc or type(exc).__name__}") from exc
        finally:
            connection.release()


@dataclass(frozen=True, slots=True)
class _Reply:
    method: str
    url: str
    status: int
    body: bytes
    retry_after_header: str | None

    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def checked(self) -> bytes:
        """Return the body of a 2xx reply, or raise the error its status stands for.

        A 3xx is an error too: no redirect is followed, so the token never leaves for a
        host the syncer did not derive itself (C2).
        """
        if 200 <= self.status < 300:
            return self.body
        summary = _summary(self.text()) or http.client.responses.get(self.status, "")
        raise error_for_status(
            self.status,
            f"{self.method} {self.url}: {self.status} {summary}",
            retry_after=_retry_after(self.retry_after_header),
        )


class _Connection(http.client.HTTPConnection):
    """An HTTP connection whose socket enforces one deadline for the whole exchange."""

    def __init__(
        self, host: str, port: int, address: tuple[str, int], deadline: float, timeout: float
    ) -> None:
        super().__init__(host, port)
        self._address = address
        self._deadline = deadline
        self._limit = timeout
        self._raw: socket.socket | None = None

    def connect(self) -> None:
        """Connect to `address` (not the Host header's name) within the time left."""
        left = _time_left(self._deadline, self._limit)
        sock = socket.create_connection(self._address, timeout=left)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._raw = sock
        # http.client only calls sendall, makefile and close on its socket.
        self.sock = _DeadlineSocket(sock, self._deadline, self._limit)

    def release(self) -> None:
        """Close the socket (http.client's `close` may run before the body is read)."""
        self.close()
        if self._raw is not None:
            self._raw.close()
            self._raw = None


def _time_left(deadline: float, limit: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(f"timed out: the request's {limit:g}s deadline passed")
    return left


class _DeadlineSocket:
    """A socket whose every send and receive may take only the time left until the deadline.

    The socket timeout alone bounds each `recv`, so a server sending a byte just before
    each timeout could hold the caller for ever; here the timeout shrinks with every call
    and the call fails once the deadline has passed.
    """

    def __init__(self, sock: socket.socket, deadline: float, limit: float) -> None:
        self._sock = sock
        self._deadline = deadline
        self._limit = limit

    def sendall(self, data: bytes) -> None:
        self._sock.settimeout(_time_left(self._deadline, self._limit))
        self._sock.sendall(data)

    def recv_into(self, buffer: Any, nbytes: int = 0) -> int:
        self._sock.settimeout(_time_left(self._deadline, self._limit))
        return self._sock.recv_into(buffer, nbytes)

    def makefile(self, mode: str = "rb", **_: Any) -> io.BufferedReader:
        return io.BufferedReader(_DeadlineReader(self))

    def close(self) -> None:
        # http.client closes a `Connection: close` connection as soon as the headers are
        # in, trusting a real socket to stay open while its file is; `release` closes it.
        return


class _DeadlineReader(io.RawIOBase):
    """The raw stream under http.client's buffered reader: receives through the deadline."""

    def __init__(self, sock: _DeadlineSocket) -> None:
        super().__init__()
        self._sock = sock

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self._sock.recv_into(buffer)


def _retry_after(value: str | None) -> float | None:
    # Only the delay-seconds form; an HTTP date would need the clock, which belongs to the loop.
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def _summary(text: str) -> str:
    """One line out of a text/plain error body: the last exception line of a traceback."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    exception_lines = [line for line in lines if _EXCEPTION_LINE.match(line)]
    line = exception_lines[-1] if exception_lines else " ".join(lines)
    return line[:_MAX_ERROR_TEXT]


def _capped(text: str | None) -> str | None:
    """Ray's free text as it may reach a status ConfigMap: at most MAX_MESSAGE_CHARS (L3).

    A longer text keeps its start and its end (a traceback's last line names the error).
    """
    if text is None or len(text) <= MAX_MESSAGE_CHARS:
        return text
    head = text[: MAX_MESSAGE_CHARS // 4]
    tail = text[len(head) + len(_TRUNCATED) - MAX_MESSAGE_CHARS :]
    return head + _TRUNCATED + tail


def _quote(submission_id: str) -> str:
    return urllib.parse.quote(submission_id, safe="")


def _decode(reply: bytes, where: str) -> object:
    try:
        value: object = json.loads(reply)
    except ValueError as exc:
        raise PermanentError(f"{where}: expected a JSON reply, got {reply[:200]!r}") from exc
    return value


def _shape(where: str, path: str, expected: str, got: object) -> PermanentError:
    # `got` comes out of json.loads, so it can be shown as JSON.
    shown = json.dumps(got)[:100]
    return PermanentError(f"unexpected reply to {where}: {path}: expected {expected}, got {shown}")


def _object(value: object, where: str, path: str = "$") -> dict[str, object]:
    if not isinstance(value, dict):
        raise _shape(where, path, "an object", value)
    return {str(key): item for key, item in value.items()}


def _str(obj: Mapping[str, object], key: str, where: str, path: str = "$") -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise _shape(where, f"{path}.{key}", "a string", value)
    return value


def _opt_str(obj: Mapping[str, object], key: str, where: str, path: str = "$") -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise _shape(where, f"{path}.{key}", "a string or null", value)
    return value


def _bool(obj: Mapping[str, object], key: str, where: str, path: str = "$") -> bool:
    value = obj.get(key)
    if not isinstance(value, bool):
        raise _shape(where, f"{path}.{key}", "a boolean", value)
    return value


def _opt_int(obj: Mapping[str, object], key: str, where: str, path: str = "$") -> int | None:
    value = obj.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise _shape(where, f"{path}.{key}", "an integer or null", value)
    return value


def _opt_float(obj: Mapping[str, object], key: str, where: str, path: str = "$") -> float | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _shape(where, f"{path}.{key}", "a number or null", value)
    return float(value)


def _opt_manifest(
    obj: Mapping[str, object], key: str, where: str, path: str = "$"
) -> Manifest | None:
    value = obj.get(key)
    if value is None:
        return None
    return dict(_object(value, where, f"{path}.{key}"))


def _str_map(obj: Mapping[str, object], key: str, where: str, path: str = "$") -> dict[str, str]:
    mapping = _object(obj.get(key), where, f"{path}.{key}")
    return {name: _str(mapping, name, where, f"{path}.{key}") for name in mapping}


def _is_job_status(value: object) -> TypeGuard[JobStatus]:
    return value in JOB_STATUSES


def _is_job_type(value: object) -> TypeGuard[JobType]:
    return value in ("SUBMISSION", "DRIVER")


def _is_application_status(value: object) -> TypeGuard[ApplicationStatus]:
    return value in APPLICATION_STATUSES


def _job_info(value: object, where: str) -> JobInfo:
    obj = _object(value, where)
    status = obj.get("status")
    if not _is_job_status(status):
        raise _shape(where, "$.status", f"one of {sorted(JOB_STATUSES)}", status)
    job_type = obj.get("type", "SUBMISSION")
    if not _is_job_type(job_type):
        raise _shape(where, "$.type", "SUBMISSION or DRIVER", job_type)
    driver = obj.get("driver_info")
    driver_info = None
    if driver is not None:
        driver_obj = _object(driver, where, "$.driver_info")
        path = "$.driver_info"
        driver_info = DriverInfo(
            id=_str(driver_obj, "id", where, path),
            node_ip_address=_str(driver_obj, "node_ip_address", where, path),
            # A string in Ray 2.60; tolerate a number.
            pid=str(driver_obj.get("pid", "")),
        )
    return JobInfo(
        type=job_type,
        job_id=_opt_str(obj, "job_id", where),
        submission_id=_opt_str(obj, "submission_id", where),
        driver_info=driver_info,
        status=status,
        entrypoint=_str(obj, "entrypoint", where),
        message=_capped(_opt_str(obj, "message", where)),
        error_type=_capped(_opt_str(obj, "error_type", where)),
        start_time=_opt_int(obj, "start_time", where),
        end_time=_opt_int(obj, "end_time", where),
        metadata=None if obj.get("metadata") is None else _str_map(obj, "metadata", where),
        runtime_env=_opt_manifest(obj, "runtime_env", where),
        driver_agent_http_address=_opt_str(obj, "driver_agent_http_address", where),
        driver_node_id=_opt_str(obj, "driver_node_id", where),
        driver_exit_code=_opt_int(obj, "driver_exit_code", where),
    )


def _serve_details(value: object, where: str) -> ServeDetails:
    obj = _object(value, where)
    controller = _object(obj.get("controller_info", {}), where, "$.controller_info")
    proxies_obj = _object(obj.get("proxies", {}), where, "$.proxies")
    apps_obj = _object(obj.get("applications", {}), where, "$.applications")
    proxies: dict[str, ProxyDetails] = {}
    for node, proxy_value in proxies_obj.items():
        path = f"$.proxies[{node!r}]"
        proxy = _object(proxy_value, where, path)
        proxies[node] = ProxyDetails(
            node_id=_opt_str(proxy, "node_id", where, path) or node,
            node_ip=_opt_str(proxy, "node_ip", where, path),
            actor_name=_opt_str(proxy, "actor_name", where, path),
            status=_str(proxy, "status", where, path),
        )
    return ServeDetails(
        controller_actor=_opt_str(controller, "actor_name", where, "$.controller_info"),
        proxy_location=_opt_str(obj, "proxy_location", where),
        target_capacity=_opt_float(obj, "target_capacity", where),
        proxies=proxies,
        applications={
            name: _application(app, where, f"$.applications[{name!r}]")
            for name, app in apps_obj.items()
        },
    )


def _application(value: object, where: str, path: str) -> ApplicationDetails:
    app = _object(value, where, path)
    status = app.get("status")
    if not _is_application_status(status):
        raise _shape(where, f"{path}.status", f"one of {sorted(APPLICATION_STATUSES)}", status)
    deployments_obj = _object(app.get("deployments", {}), where, f"{path}.deployments")
    return ApplicationDetails(
        name=_str(app, "name", where, path),
        status=status,
        message=_capped(_opt_str(app, "message", where, path)) or "",
        route_prefix=_opt_str(app, "route_prefix", where, path),
        last_deployed_time_s=_opt_float(app, "last_deployed_time_s", where, path),
        deployed_app_config=_opt_manifest(app, "deployed_app_config", where, path),
        source=_opt_str(app, "source", where, path),
        deployments={
            name: _deployment(item, where, f"{path}.deployments[{name!r}]")
            for name, item in deployments_obj.items()
        },
    )


def _deployment(value: object, where: str, path: str) -> DeploymentDetails:
    deployment = _object(value, where, path)
    replicas = deployment.get("replicas", [])
    if not isinstance(replicas, list):
        raise _shape(where, f"{path}.replicas", "a list", replicas)
    return DeploymentDetails(
        name=_str(deployment, "name", where, path),
        status=_str(deployment, "status", where, path),
        status_trigger=_opt_str(deployment, "status_trigger", where, path) or "",
        message=_capped(_opt_str(deployment, "message", where, path)) or "",
        target_num_replicas=_opt_int(deployment, "target_num_replicas", where, path),
        deployment_config=_opt_manifest(deployment, "deployment_config", where, path) or {},
        replicas=[
            _replica(item, where, f"{path}.replicas[{index}]")
            for index, item in enumerate(replicas)
        ],
    )


def _replica(value: object, where: str, path: str) -> ReplicaDetails:
    replica = _object(value, where, path)
    return ReplicaDetails(
        replica_id=_str(replica, "replica_id", where, path),
        state=_str(replica, "state", where, path),
        actor_name=_opt_str(replica, "actor_name", where, path) or "",
        node_id=_opt_str(replica, "node_id", where, path),
        node_ip=_opt_str(replica, "node_ip", where, path),
        pid=_opt_int(replica, "pid", where, path),
        start_time_s=_opt_float(replica, "start_time_s", where, path),
    )
