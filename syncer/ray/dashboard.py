"""Client of one Ray head's dashboard: the Jobs and Serve REST APIs; the syncer's only HTTP code.

`HttpDashboard` implements `syncer.ray.types.Dashboard` (the protocol the rest of the
syncer uses) with stdlib `urllib` only. Replies are checked field by field and returned as
the TypedDicts of `syncer.ray.types`; every method raises only `TransientError` or
`PermanentError` (from `syncer.errors`). Shapes and error texts were checked against
Ray 2.60.0 (commit b7f4259e) on a loopback head, see `tests/e2e/test_dashboard.py` and
../shared/reference/ray-apis.md.
"""

from __future__ import annotations

import http.client
import json
import logging
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from syncer.errors import NotFoundError, PermanentError, TransientError, error_for_status
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
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception): .+")
_LOG = logging.getLogger(__name__)


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
        headers: Mapping[str, str] | None = None,
        serve_timeout: float = 30.0,
    ) -> None:
        """Create a client.

        Args:
            base_url: `http://host:port`, without the `/api/...` part.
            timeout: seconds per request.
            auth_token: Ray token for clusters started with `RAY_AUTH_MODE=token`.
            headers: extra headers sent with every request.
            serve_timeout: seconds for Serve PUT and DELETE, which block while Serve starts
                or shuts down (2 to 5 s observed on an idle head).

        Raises:
            ValueError: `base_url` is not an http(s) URL with a host.
        """
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"dashboard URL must be http or https with a host, got {base_url!r}")
        if parts.query or "#" in base_url or "@" in parts.netloc:
            raise ValueError(f"dashboard URL must have no user, query or fragment: {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.serve_timeout = max(timeout, serve_timeout)
        self._headers = {"Accept": "application/json", **(headers or {})}
        if auth_token:
            self._headers["X-Ray-Authorization"] = f"Bearer {auth_token}"
        # No proxies, and no redirects: a 3xx is an error, so the token never leaves for a
        # host the syncer did not derive itself (C2).
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())

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
        """Make one request; HTTP error statuses come back as a `_Reply`, not raised."""
        url = self.base_url + path
        headers = dict(self._headers)
        data = None
        if body is not None:
            try:
                data = json.dumps(body).encode()
            except (TypeError, ValueError) as exc:
                raise PermanentError(f"{method} {url}: body is not JSON: {exc}") from exc
            headers["Content-Type"] = "application/json"
        began = time.monotonic()
        try:
            request = urllib.request.Request(url, data=data, headers=headers, method=method)
            with self._opener.open(request, timeout=timeout) as response:
                reply = _Reply(method, url, response.status, response.read(), None)
        except urllib.error.HTTPError as exc:
            with exc:
                retry_after = exc.headers.get("Retry-After") if exc.headers else None
                reply = _Reply(method, url, exc.code, _error_body(exc), retry_after)
        except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
            # Refused or reset connections, DNS failures, timeouts (TimeoutError is an OSError),
            # and an error body cut short.
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            raise TransientError(f"{method} {url}: {reason or type(exc).__name__}") from exc
        except ValueError as exc:  # a malformed URL
            raise PermanentError(f"{method} {url}: {exc}") from exc
        _LOG.debug(
            "dashboard call method=%s url=%s status=%s seconds=%.3f",
            method,
            url,
            reply.status,
            time.monotonic() - began,
        )
        return reply


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
        """Return the body of a 2xx reply, or raise the error its status stands for."""
        if self.status < 400:
            return self.body
        summary = _summary(self.text()) or http.client.responses.get(self.status, "")
        raise error_for_status(
            self.status,
            f"{self.method} {self.url}: {self.status} {summary}",
            retry_after=_retry_after(self.retry_after_header),
        )


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Refuses every redirect: urllib then raises the 3xx as an HTTPError."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: Any,
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> None:
        return None


def _error_body(exc: urllib.error.HTTPError) -> bytes:
    try:
        return exc.read()
    except (OSError, http.client.HTTPException):  # the status alone still classifies it
        return b""


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
        message=_opt_str(obj, "message", where),
        error_type=_opt_str(obj, "error_type", where),
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
        message=_opt_str(app, "message", where, path) or "",
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
        message=_opt_str(deployment, "message", where, path) or "",
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
