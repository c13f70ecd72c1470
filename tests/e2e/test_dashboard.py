"""HttpDashboard against a real Ray head (e2e) and against a scripted loopback HTTP stub.

The e2e tests use the session's `ray_head`; they poll with deadlines and never depend on a
sleep. Deleting a job races Ray's ghost re-creation (see `delete_until_gone`), so a delete is
judged by what the server shows over an observation window, not after a fixed wait.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TypeVar

import pytest

from syncer.errors import NotFoundError, PermanentError, TransientError
from syncer.ray.dashboard import DashboardError, HttpDashboard
from syncer.ray.types import (
    Dashboard,
    DeploymentDetails,
    JobInfo,
    Manifest,
    ReplicaDetails,
    ServeDetails,
    is_terminal,
    replica_state_counts,
)
from tests.e2e.rayhead import RayHead, free_ports

T = TypeVar("T")
e2e = pytest.mark.e2e


def wait_for(probe: Callable[[], T | None], *, timeout: float, what: str) -> T:
    """Poll `probe` every 0.1 s until it returns something other than None."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def dashboard(ray_head: RayHead) -> HttpDashboard:
    return HttpDashboard(ray_head.dashboard_url, timeout=30)  # a loaded 2-core machine


def wait_job(dashboard: Dashboard, submission_id: str, statuses: set[str]) -> JobInfo:
    def probe() -> JobInfo | None:
        job = dashboard.get_job(submission_id)
        return job if job is not None and job["status"] in statuses else None

    return wait_for(probe, timeout=60, what=f"job {submission_id} in {sorted(statuses)}")


@dataclass
class Deletion:
    """What `delete_until_gone` saw: how many deletes said True, and the ghosts it removed."""

    deleted: int
    ghosts: list[JobInfo]


def delete_until_gone(
    dashboard: Dashboard, submission_id: str, *, window: float = 3.0, timeout: float = 60.0
) -> Deletion:
    """Delete a job until `get_job` stays absent for `window` seconds.

    Ray re-creates a job deleted shortly after its end as a FAILED ghost (error type
    JOB_SUPERVISOR_ACTOR_DIED; ray-test-head.md, section 4, hazard 1); how long "shortly" is
    depends on the machine's load, so no fixed wait is safe. A ghost is deleted in turn and the
    observation window starts again.
    """
    deleted, ghosts = 0, []
    deadline = time.monotonic() + timeout
    while True:
        try:
            if dashboard.delete_job(submission_id):
                deleted += 1
        except TransientError:  # a ghost not yet settled into its terminal state
            time.sleep(0.1)
            continue
        quiet_until = time.monotonic() + window
        while time.monotonic() < quiet_until:
            ghost = dashboard.get_job(submission_id)
            if ghost is not None:
                ghosts.append(ghost)
                break
            time.sleep(0.1)
        else:
            return Deletion(deleted, ghosts)
        if time.monotonic() > deadline:
            pytest.fail(f"job {submission_id} kept coming back after {len(ghosts)} deletes")


# --- Jobs API ---------------------------------------------------------------------------


@e2e
def test_version_names_the_installed_ray(dashboard: HttpDashboard) -> None:
    version = dashboard.version()
    assert version["ray_version"] == importlib.metadata.version("ray")
    assert version["version"].isdigit()
    assert version["session_name"].startswith("session_")
    assert dashboard.is_healthy() is True


@e2e
@pytest.mark.timeout(120)
def test_jobs_end_succeeded_and_failed_with_their_messages(dashboard: HttpDashboard) -> None:
    ok, bad = unique("ok"), unique("fail")
    assert dashboard.submit_job(
        ok,
        "python -c 'print(\"hello-from-job\")'",
        metadata={"owner": "syncer"},
        runtime_env={"env_vars": {"FOO": "bar"}},
        entrypoint_num_cpus=0.5,
    )
    assert dashboard.submit_job(bad, "python -c 'import sys; print(\"boom\"); sys.exit(3)'")

    done = wait_job(dashboard, ok, {"SUCCEEDED", "FAILED", "STOPPED"})
    assert done["status"] == "SUCCEEDED", done["message"]
    assert done["message"] == "Job finished successfully."
    assert done["type"] == "SUBMISSION"
    assert done["submission_id"] == ok
    assert done["job_id"] is None  # the entrypoint never called ray.init()
    assert done["error_type"] is None
    assert done["driver_exit_code"] == 0
    assert done["metadata"] == {"owner": "syncer"}
    assert done["runtime_env"] == {"env_vars": {"FOO": "bar"}}
    assert done["start_time"] is not None
    assert done["end_time"] is not None
    assert done["end_time"] >= done["start_time"]
    logs = dashboard.get_job_logs(ok)
    assert f"Running entrypoint for job {ok}" in logs
    assert "hello-from-job" in logs

    failed = wait_job(dashboard, bad, {"SUCCEEDED", "FAILED", "STOPPED"})
    assert failed["status"] == "FAILED"
    assert failed["error_type"] == "JOB_ENTRYPOINT_COMMAND_ERROR"
    assert failed["driver_exit_code"] == 3
    assert failed["message"] is not None
    assert "exit code 3" in failed["message"]
    assert "boom" in failed["message"]

    deletion = delete_until_gone(dashboard, ok)
    assert deletion.deleted == 1 + len(deletion.ghosts)
    for ghost in deletion.ghosts:  # Ray's ghost: the same id, failed, without its entrypoint
        assert ghost["submission_id"] == ok
        assert ghost["status"] == "FAILED"
        assert ghost["error_type"] == "JOB_SUPERVISOR_ACTOR_DIED"
    assert dashboard.get_job(ok) is None
    assert dashboard.delete_job(ok) is False


@e2e
def test_resubmitting_a_submission_id_is_idempotent(dashboard: HttpDashboard) -> None:
    job = unique("twice")
    assert dashboard.submit_job(job, "python -c 'print(1)'") is True
    assert dashboard.submit_job(job, "python -c 'print(1)'") is False
    assert dashboard.submit_job(job, "echo something else") is False
    listed = [item for item in dashboard.list_jobs() if item["submission_id"] == job]
    assert len(listed) == 1
    assert listed[0]["entrypoint"] == "python -c 'print(1)'"


@e2e
@pytest.mark.timeout(120)
def test_stopping_a_running_job_ends_it_stopped(dashboard: HttpDashboard) -> None:
    job = unique("long")
    entrypoint = "python -c 'import time; print(\"started\", flush=True); time.sleep(300)'"
    dashboard.submit_job(job, entrypoint)
    wait_job(dashboard, job, {"RUNNING"})
    wait_for(
        lambda: True if "started" in dashboard.get_job_logs(job) else None,
        timeout=30,
        what="the running job's first log line",
    )
    with pytest.raises(TransientError, match="non-terminal state") as refused:
        dashboard.delete_job(job)
    assert refused.value.status == 500

    assert dashboard.stop_job(job) is True
    stopped = wait_job(dashboard, job, {"STOPPED", "SUCCEEDED", "FAILED"})
    assert stopped["status"] == "STOPPED"
    assert stopped["message"] == "Job was intentionally stopped."
    assert stopped["error_type"] is None
    assert stopped["driver_exit_code"] is None
    assert is_terminal(stopped["status"])
    # The status reads STOPPED a moment before Ray's job supervisor is gone, and until then
    # another stop still answers True (seen on a loaded machine); it settles to False.
    wait_for(
        lambda: True if dashboard.stop_job(job) is False else None,
        timeout=30,
        what="a stop of the stopped job to answer False",
    )
    final = dashboard.get_job(job)
    assert final is not None
    assert final["status"] == "STOPPED"


@e2e
def test_list_jobs_returns_submissions_oldest_first(dashboard: HttpDashboard) -> None:
    first, second = unique("list-a"), unique("list-b")
    dashboard.submit_job(first, "python -c 'print(1)'")
    dashboard.submit_job(second, "python -c 'print(2)'")
    jobs = dashboard.list_jobs()
    ids = [job["submission_id"] for job in jobs]
    assert {first, second} <= set(ids)
    assert ids.index(first) < ids.index(second)
    assert all(job["type"] == "SUBMISSION" for job in jobs)
    starts = [job["start_time"] or 0 for job in jobs]
    assert starts == sorted(starts)


@e2e
def test_unknown_job_ids(dashboard: HttpDashboard) -> None:
    assert dashboard.get_job("no-such-job") is None
    assert dashboard.delete_job("no-such-job") is False
    with pytest.raises(NotFoundError, match="Job no-such-job does not exist") as stop:
        dashboard.stop_job("no-such-job")
    assert stop.value.status == 404
    with pytest.raises(NotFoundError):
        dashboard.get_job_logs("no-such-job")


# --- Serve API --------------------------------------------------------------------------

_GREET = """
from ray import serve


@serve.deployment(ray_actor_options={"num_cpus": 0})
class Greeter:
    def __call__(self, request):
        return {"app": "greet"}


app = Greeter.bind()
"""

_ECHO = """
from ray import serve


@serve.deployment(ray_actor_options={"num_cpus": 0})
class Echo:
    def __init__(self, word):
        self.word = word

    def __call__(self, request):
        return {"app": "echo", "word": self.word}


def build(args):
    return Echo.bind(args["word"])
"""


@dataclass
class ServeSetup:
    dashboard: HttpDashboard
    config: Manifest
    proxy_url: str
    details: ServeDetails
    setup_s: float = 0.0


def _settled(details: ServeDetails) -> bool:
    apps = details["applications"]
    return (
        set(apps) == {"greet", "echo", "broken"}
        and apps["greet"]["status"] == "RUNNING"
        and apps["echo"]["status"] == "RUNNING"
        and apps["broken"]["status"] == "DEPLOY_FAILED"
    )


@pytest.fixture(scope="module")
def serve(
    dashboard: HttpDashboard, ray_head: RayHead, tmp_path_factory: pytest.TempPathFactory
) -> ServeSetup:
    """Two working apps and one broken one, deployed once at target_capacity 50."""
    apps = tmp_path_factory.mktemp("serve_apps")
    (apps / "greet_app.py").write_text(_GREET)
    (apps / "echo_app.py").write_text(_ECHO)
    runtime_env = {"env_vars": {"PYTHONPATH": str(apps)}}
    config: Manifest = {
        "proxy_location": "HeadOnly",
        "http_options": {"host": "127.0.0.1", "port": ray_head.serve_port},
        "applications": [
            {
                "name": "greet",
                "route_prefix": "/greet",
                "import_path": "greet_app:app",
                "runtime_env": runtime_env,
                "deployments": [{"name": "Greeter", "num_replicas": 4}],
            },
            {
                "name": "echo",
                "route_prefix": "/echo",
                "import_path": "echo_app:build",
                "args": {"word": "from-args"},
                "runtime_env": runtime_env,
            },
            {"name": "broken", "route_prefix": "/broken", "import_path": "no_such_module_xyz:app"},
        ],
    }
    began = time.monotonic()
    dashboard.put_serve_applications(config, target_capacity=50)

    def probe() -> ServeDetails | None:
        details = dashboard.get_serve_details()
        return details if _settled(details) else None

    details = wait_for(probe, timeout=90, what="greet and echo RUNNING, broken DEPLOY_FAILED")
    return ServeSetup(
        dashboard=dashboard,
        config=config,
        proxy_url=f"http://127.0.0.1:{ray_head.serve_port}",
        details=details,
        setup_s=time.monotonic() - began,
    )


def _get_json(url: str) -> object:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=10) as reply:
        return json.loads(reply.read())


@e2e
@pytest.mark.timeout(150)
def test_serve_apps_reach_running_at_half_capacity(serve: ServeSetup) -> None:
    details = serve.details
    assert details["target_capacity"] == 50.0
    assert details["proxy_location"] == "HeadOnly"
    assert details["controller_actor"] == "SERVE_CONTROLLER_ACTOR"
    assert [proxy["status"] for proxy in details["proxies"].values()] == ["HEALTHY"]
    greet = details["applications"]["greet"]
    assert greet["route_prefix"] == "/greet"
    assert greet["source"] == "declarative"
    assert greet["message"] == ""
    greeter = greet["deployments"]["Greeter"]
    assert greeter["status"] == "HEALTHY"
    assert greeter["deployment_config"]["num_replicas"] == 4
    assert greeter["target_num_replicas"] == 2  # round_half_up(4 * 50 / 100)
    assert replica_state_counts(greeter) == {"RUNNING": 2}
    echo = details["applications"]["echo"]
    assert replica_state_counts(echo["deployments"]["Echo"]) == {"RUNNING": 1}
    assert _get_json(f"{serve.proxy_url}/greet") == {"app": "greet"}
    assert _get_json(f"{serve.proxy_url}/echo") == {"app": "echo", "word": "from-args"}


@e2e
def test_broken_import_path_is_deploy_failed(serve: ServeSetup) -> None:
    broken = serve.details["applications"]["broken"]
    assert broken["status"] == "DEPLOY_FAILED"
    assert "ModuleNotFoundError" in broken["message"]
    assert "no_such_module_xyz" in broken["message"]
    assert broken["deployments"] == {}
    assert broken["route_prefix"] is None
    assert broken["deployed_app_config"] is not None
    assert broken["deployed_app_config"]["import_path"] == "no_such_module_xyz:app"


@e2e
def test_invalid_serve_config_is_a_permanent_error(serve: ServeSetup) -> None:
    with pytest.raises(PermanentError, match="less than or equal to 100") as error:
        serve.dashboard.put_serve_applications(serve.config, target_capacity=150)
    assert error.value.status == 400
    assert serve.dashboard.get_serve_details()["target_capacity"] == 50.0


@e2e
@pytest.mark.timeout(120)
def test_raising_target_capacity_adds_replicas(serve: ServeSetup) -> None:
    serve.dashboard.put_serve_applications(serve.config, target_capacity=100)

    def probe() -> ServeDetails | None:
        details = serve.dashboard.get_serve_details()
        greeter = details["applications"]["greet"]["deployments"]["Greeter"]
        full = greeter["target_num_replicas"] == 4
        return details if full and replica_state_counts(greeter) == {"RUNNING": 4} else None

    details = wait_for(probe, timeout=60, what="4 RUNNING Greeter replicas at capacity 100")
    assert details["target_capacity"] == 100.0


@e2e
@pytest.mark.timeout(120)
def test_deleting_serve_applications_shuts_serve_down(serve: ServeSetup) -> None:
    serve.dashboard.delete_serve_applications()
    details = serve.dashboard.get_serve_details()
    assert details == {
        "controller_actor": None,
        "proxy_location": None,
        "target_capacity": None,
        "proxies": {},
        "applications": {},
    }


# --- Transport, against a scripted stub (no Ray) ----------------------------------------


@dataclass
class Stub:
    """A loopback HTTP server that answers (status, headers, body) per (method, path)."""

    url: str
    routes: dict[tuple[str, str], tuple[int, dict[str, str], bytes]]
    seen: list[tuple[str, str, dict[str, str], bytes]]
    release: threading.Event


@pytest.fixture
def stub() -> Iterator[Stub]:
    routes: dict[tuple[str, str], tuple[int, dict[str, str], bytes]] = {}
    seen: list[tuple[str, str, dict[str, str], bytes]] = []
    release = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            seen.append((self.command, self.path, dict(self.headers), self.rfile.read(length)))
            if self.path.endswith("/hang"):
                release.wait(10)
            status, headers, body = routes.get((self.command, self.path), (404, {}, b"no route"))
            # The client of the /hang route has given up by now.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    # http.server dispatches on methods named do_<VERB>.
    for verb in ("GET", "POST", "PUT", "DELETE"):
        setattr(Handler, f"do_{verb}", Handler._answer)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield Stub(f"http://127.0.0.1:{server.server_address[1]}", routes, seen, release)
    finally:
        release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


JOB = {
    "type": "SUBMISSION",
    "job_id": None,
    "submission_id": "j1",
    "driver_info": None,
    "status": "RUNNING",
    "entrypoint": "python x.py",
    "message": "Job is currently running.",
    "error_type": None,
    "start_time": 1795993978778,
    "end_time": None,
    "metadata": None,
    "runtime_env": None,
    "driver_agent_http_address": "http://127.0.0.1:1",
    "driver_node_id": "n1",
    "driver_exit_code": None,
}


def test_http_status_codes_map_to_transient_and_permanent(stub: Stub) -> None:
    client = HttpDashboard(stub.url, timeout=5)
    stub.routes[("GET", "/api/jobs/busy")] = (429, {"Retry-After": "7"}, b"slow down")
    stub.routes[("GET", "/api/jobs/down")] = (503, {}, b"")
    stub.routes[("GET", "/api/jobs/conflict")] = (409, {"Retry-After": "soon"}, b"")
    stub.routes[("GET", "/api/jobs/secret")] = (403, {}, b"forbidden")
    stub.routes[("GET", "/api/jobs/crash")] = (
        500,
        {},
        b"Traceback (most recent call last):\n  File x\nRuntimeError: it broke\n",
    )
    with pytest.raises(TransientError) as busy:
        client.get_job("busy")
    assert (busy.value.status, busy.value.retry_after) == (429, 7.0)
    assert "slow down" in busy.value.message
    with pytest.raises(TransientError) as down:
        client.get_job("down")
    assert (down.value.status, down.value.retry_after) == (503, None)
    assert "Service Unavailable" in down.value.message
    with pytest.raises(TransientError) as conflict:
        client.get_job("conflict")
    assert conflict.value.retry_after is None
    with pytest.raises(PermanentError) as secret:
        client.get_job("secret")
    assert not isinstance(secret.value, NotFoundError)
    with pytest.raises(TransientError, match=r"500 RuntimeError: it broke$"):
        client.get_job("crash")
    assert client.get_job("unknown") is None


def test_unexpected_replies_are_permanent_errors(stub: Stub) -> None:
    client = HttpDashboard(stub.url, timeout=5)
    stub.routes[("GET", "/api/jobs/html")] = (200, {}, b"<html>login</html>")
    stub.routes[("GET", "/api/jobs/odd")] = (200, {}, json.dumps({**JOB, "status": "ODD"}).encode())
    stub.routes[("GET", "/api/jobs/")] = (200, {}, b"{}")
    with pytest.raises(PermanentError, match="expected a JSON reply"):
        client.get_job("html")
    with pytest.raises(PermanentError, match=r"\$\.status: expected one of .*got \"ODD\""):
        client.get_job("odd")
    with pytest.raises(PermanentError, match=r"\$: expected a list"):
        client.list_jobs()


def test_unreachable_and_slow_dashboards_are_transient(stub: Stub) -> None:
    (port,) = free_ports(1)
    with pytest.raises(TransientError, match="refused"):
        HttpDashboard(f"http://127.0.0.1:{port}", timeout=2).version()
    assert HttpDashboard(f"http://127.0.0.1:{port}", timeout=2).is_healthy() is False
    slow = HttpDashboard(stub.url, timeout=0.3)
    with pytest.raises(TransientError, match="timed out"):
        slow.get_job("hang")
    with pytest.raises(PermanentError, match="body is not JSON"):
        slow.put_serve_applications({"applications": {1, 2}})
    # A bad address is a DashboardError (a PermanentError), never a ValueError (L3).
    for bad in ("127.0.0.1:8265", "", "ftp://head:8265", "https://head:8265", "http://h:99999"):
        with pytest.raises(DashboardError) as refused:
            HttpDashboard(bad, timeout=1)
        assert isinstance(refused.value, PermanentError)
        assert not isinstance(refused.value, ValueError)


def test_requests_carry_token_headers_and_base_path(stub: Stub) -> None:
    client = HttpDashboard(
        f"{stub.url}/proxy/", timeout=5, auth_token="tok", headers={"X-Extra": "1"}
    )
    stub.routes[("POST", "/proxy/api/jobs/")] = (
        200,
        {},
        b'{"job_id": "a b", "submission_id": "a b"}',
    )
    stub.routes[("POST", "/proxy/api/jobs/a%20b/stop")] = (200, {}, b'{"stopped": true}')
    stub.routes[("PUT", "/proxy/api/serve/applications/")] = (200, {}, b"")
    stub.routes[("GET", "/proxy/api/gcs_healthz")] = (200, {}, b"success")
    assert client.submit_job("a b", "echo hi", entrypoint_memory=10, metadata={"k": "v"}) is True
    assert client.stop_job("a b") is True
    client.put_serve_applications({"applications": [], "target_capacity": 10}, target_capacity=0)
    assert client.is_healthy() is True
    submit, stop, put, _ = stub.seen
    assert submit[2]["X-Ray-Authorization"] == "Bearer tok"
    assert submit[2]["X-Extra"] == "1"
    assert submit[2]["Content-Type"] == "application/json"
    assert json.loads(submit[3]) == {
        "entrypoint": "echo hi",
        "submission_id": "a b",
        "metadata": {"k": "v"},
        "entrypoint_memory": 10,
    }
    assert stop[1] == "/proxy/api/jobs/a%20b/stop"
    assert json.loads(put[3]) == {"applications": [], "target_capacity": 0}


def test_duplicate_submission_is_not_an_error_but_other_500s_are(stub: Stub) -> None:
    client = HttpDashboard(stub.url, timeout=5)
    duplicate = b"Traceback ...\nValueError: Job with submission_id j1 already exists. Please use"
    stub.routes[("POST", "/api/jobs/")] = (500, {}, duplicate)
    assert client.submit_job("j1", "true") is False
    stub.routes[("POST", "/api/jobs/")] = (500, {}, b"No available agent to submit job")
    with pytest.raises(TransientError, match="No available agent"):
        client.submit_job("j1", "true")
    stub.routes[("POST", "/api/jobs/")] = (400, {}, b"TypeError: bad field")
    with pytest.raises(PermanentError, match="bad field"):
        client.submit_job("j1", "true")


def test_job_info_tolerates_missing_nullable_keys(stub: Stub) -> None:
    client = HttpDashboard(stub.url, timeout=5)
    older = {"status": "SUCCEEDED", "entrypoint": "x", "submission_id": "j1"}
    listing = [{**JOB, "submission_id": "b", "start_time": 2}, older, {**JOB, "type": "DRIVER"}]
    stub.routes[("GET", "/api/jobs/")] = (200, {}, json.dumps(listing).encode())
    jobs = client.list_jobs()
    assert [job["submission_id"] for job in jobs] == ["j1", "b"]
    assert jobs[0]["type"] == "SUBMISSION"
    assert jobs[0]["driver_exit_code"] is None


def test_replica_state_counts_sorts_states() -> None:
    replicas = [
        ReplicaDetails(
            replica_id=name,
            state=state,
            actor_name="",
            node_id=None,
            node_ip=None,
            pid=None,
            start_time_s=None,
        )
        for name, state in [("a", "STARTING"), ("b", "RUNNING"), ("c", "RUNNING")]
    ]
    deployment = DeploymentDetails(
        name="D",
        status="UPSCALING",
        status_trigger="CONFIG_UPDATE_STARTED",
        message="",
        target_num_replicas=3,
        deployment_config={},
        replicas=replicas,
    )
    assert replica_state_counts(deployment) == {"RUNNING": 2, "STARTING": 1}
