"""An in-memory `Dashboard` for unit tests and benchmarks: no network, a settable clock.

Jobs follow a `JobPlan` (how long they stay PENDING and RUNNING, how they end) and Serve
applications an `AppPlan` (DEPLOYING for a while, then RUNNING or DEPLOY_FAILED). States
are computed from the clock on every read, so advancing the clock is all a test does.
Calls are counted per method in `calls`; `fail_next` and `available` inject failures.
Texts and transitions follow Ray 2.60 as recorded in ../shared/reference/ray-apis.md.
"""

from __future__ import annotations

import copy
import math
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from syncer.errors import NotFoundError, PermanentError, SyncerError, TransientError
from syncer.ray.types import (
    ApplicationDetails,
    ApplicationStatus,
    DeploymentDetails,
    JobInfo,
    JobStatus,
    Manifest,
    ProxyDetails,
    ReplicaDetails,
    ServeDetails,
    VersionInfo,
)

RAY_VERSION = "2.60.0"
NODE_ID = "fake-node-0"
# Ray's fixed job messages.
PENDING_MESSAGE = "Job has not started yet."
RUNNING_MESSAGE = "Job is currently running."
SUCCEEDED_MESSAGE = "Job finished successfully."
STOPPED_MESSAGE = "Job was intentionally stopped."
GHOST_ENTRYPOINT = "Entrypoint not found."
GHOST_MESSAGE = "Job supervisor actor died: The actor died unexpectedly before finishing this task."


class ManualClock:
    """Seconds since the epoch that move only when told to."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass(frozen=True)
class JobPlan:
    """How a submitted job behaves.

    `pending_s=None` waits for resources that never come: the job stays PENDING (a stop is
    acknowledged but ignored, as in Ray) until `start_timeout_s`, then FAILED.
    `running_s=None` runs until stopped. A stop ends a running job after `stop_s`.
    """

    pending_s: float | None = 1.0
    running_s: float | None = 0.2
    outcome: Literal["SUCCEEDED", "FAILED"] = "SUCCEEDED"
    exit_code: int = 1
    logs: str = ""
    stop_s: float = 1.2
    start_timeout_s: float = 900.0


@dataclass(frozen=True)
class AppPlan:
    """How a Serve application behaves after each (re)deploy."""

    deploy_s: float = 5.0
    outcome: Literal["RUNNING", "DEPLOY_FAILED"] = "RUNNING"
    message: str = "Deploying app failed with exception:\nModuleNotFoundError: (fake)"
    scale_s: float = 2.0
    delete_s: float = 1.0


@dataclass
class _Job:
    submission_id: str
    entrypoint: str
    plan: JobPlan
    submitted: float
    runtime_env: Manifest | None
    metadata: dict[str, str] | None
    stop_requested: float | None = None
    ghost_end: float | None = None


@dataclass
class _Deployment:
    name: str
    num_replicas: int
    config: Manifest
    target: int
    previous: int
    settle_at: float


@dataclass
class _App:
    name: str
    config: Manifest
    plan: AppPlan
    deployed_at: float
    deployments: list[_Deployment]
    deleting_since: float | None = None


@dataclass
class _Serve:
    proxy_location: str
    target_capacity: float | None
    apps: dict[str, _App] = field(default_factory=dict)


def target_replicas(num_replicas: int, target_capacity: float | None) -> int:
    """Serve's rule: round half up of num_replicas x tc / 100, never below 1 unless tc is 0."""
    if target_capacity is None:
        return num_replicas
    if target_capacity == 0 or num_replicas == 0:
        return 0
    return max(1, math.floor(num_replicas * target_capacity / 100 + 0.5))


class FakeDashboard:
    """`syncer.dashboard.Dashboard` in memory, for one simulated Ray head."""

    def __init__(
        self,
        clock: Callable[[], float] | None = None,
        *,
        job_plan: JobPlan | None = None,
        app_plan: AppPlan | None = None,
        ghost_on_quick_delete: bool = False,
    ) -> None:
        """Create an empty head.

        Args:
            clock: seconds since the epoch; a `ManualClock` of its own when omitted.
            job_plan: the plan of jobs that `plan_job` did not name.
            app_plan: the plan of apps that `plan_app` did not name.
            ghost_on_quick_delete: deleting a job within 1 s of its end brings it back as
                a FAILED ghost, as Ray does; a second delete removes it.
        """
        self.clock: Callable[[], float] = clock if clock is not None else ManualClock()
        self.default_job_plan = job_plan or JobPlan()
        self.default_app_plan = app_plan or AppPlan()
        self.ghost_on_quick_delete = ghost_on_quick_delete
        self.job_plans: dict[str, JobPlan] = {}
        self.app_plans: dict[str, AppPlan] = {}
        self.calls: Counter[str] = Counter()
        self.available = True
        self.put_bodies: list[Manifest] = []
        self._failures: dict[str, deque[SyncerError]] = {}
        self._jobs: dict[str, _Job] = {}
        self._serve: _Serve | None = None

    # --- scripting ---------------------------------------------------------------------

    def advance(self, seconds: float) -> None:
        """Move the clock on; only for the fake's own `ManualClock`."""
        if not isinstance(self.clock, ManualClock):
            raise TypeError("advance() needs the fake's own ManualClock; move your clock")
        self.clock.advance(seconds)

    def plan_job(self, submission_id: str, plan: JobPlan) -> None:
        """Set how the job with this submission id will behave once submitted."""
        self.job_plans[submission_id] = plan

    def plan_app(self, name: str, plan: AppPlan) -> None:
        """Set how the Serve application with this name behaves on its next deploy."""
        self.app_plans[name] = plan

    def fail_next(self, method: str, error: SyncerError, times: int = 1) -> None:
        """Make the next `times` calls of `method` raise `error`."""
        self._failures.setdefault(method, deque()).extend([error] * times)

    def stop_failing(self, method: str) -> None:
        """Drop the failures still queued for `method`."""
        self._failures.pop(method, None)

    def restart(self) -> None:
        """Lose every job and Serve application, like a head restart without GCS FT."""
        self._jobs.clear()
        self._serve = None

    def _call(self, method: str) -> float:
        self.calls[method] += 1
        if not self.available:
            raise TransientError(f"{method}: [Errno 111] Connection refused (fake)")
        queued = self._failures.get(method)
        if queued:
            raise queued.popleft()
        return self.clock()

    # --- Dashboard: health --------------------------------------------------------------

    def version(self) -> VersionInfo:
        """Return a fixed Ray 2.60 version record."""
        self._call("version")
        return VersionInfo(
            version="4", ray_version=RAY_VERSION, ray_commit="fake", session_name="session_fake"
        )

    def is_healthy(self) -> bool:
        """Return `available`; injected PermanentErrors still raise."""
        try:
            self._call("is_healthy")
        except TransientError:
            return False
        return True

    # --- Dashboard: jobs ----------------------------------------------------------------

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
        """Record the job; False when the submission id exists (in any state)."""
        now = self._call("submit_job")
        if submission_id in self._jobs:
            return False
        if metadata is not None:
            for value in metadata.values():
                if not isinstance(value, str):
                    raise PermanentError(
                        f"TypeError: metadata values must be strings, got {type(value)}",
                        status=400,
                    )
        self._jobs[submission_id] = _Job(
            submission_id=submission_id,
            entrypoint=entrypoint,
            plan=self.job_plans.get(submission_id, self.default_job_plan),
            submitted=now,
            runtime_env=copy.deepcopy(runtime_env),
            metadata=None if metadata is None else dict(metadata),
        )
        return True

    def get_job(self, submission_id: str) -> JobInfo | None:
        """Return the job as of the clock, or None."""
        now = self._call("get_job")
        job = self._jobs.get(submission_id)
        return None if job is None else _job_info(job, now)

    def list_jobs(self) -> list[JobInfo]:
        """Return every job as of the clock, oldest first."""
        now = self._call("list_jobs")
        jobs = [_job_info(job, now) for job in self._jobs.values()]
        jobs.sort(key=lambda job: (job["start_time"] or 0, job["submission_id"] or ""))
        return jobs

    def stop_job(self, submission_id: str) -> bool:
        """Request a stop; False when the job had already ended."""
        now = self._call("stop_job")
        job = self._jobs.get(submission_id)
        if job is None:
            raise NotFoundError(f"Job {submission_id} does not exist", status=404)
        if _job_info(job, now)["status"] in ("STOPPED", "SUCCEEDED", "FAILED"):
            return False
        if job.stop_requested is None:
            job.stop_requested = now
        return True

    def delete_job(self, submission_id: str) -> bool:
        """Delete an ended job; False when unknown; TransientError while it runs."""
        now = self._call("delete_job")
        job = self._jobs.get(submission_id)
        if job is None:
            return False
        info = _job_info(job, now)
        if info["status"] not in ("STOPPED", "SUCCEEDED", "FAILED"):
            raise TransientError(
                f"RuntimeError: Attempted to delete job '{submission_id}', but it is in a "
                f"non-terminal state {info['status']}.",
                status=500,
            )
        end_s = (info["end_time"] or 0) / 1000
        if self.ghost_on_quick_delete and job.ghost_end is None and now - end_s < 1.0:
            job.ghost_end = now
        else:
            del self._jobs[submission_id]
        return True

    def get_job_logs(self, submission_id: str) -> str:
        """Return the driver log written so far."""
        now = self._call("get_job_logs")
        job = self._jobs.get(submission_id)
        if job is None:
            raise NotFoundError(f"Job {submission_id} does not exist", status=404)
        if job.ghost_end is not None or _job_info(job, now)["driver_node_id"] is None:
            return ""
        return f"Running entrypoint for job {submission_id}: {job.entrypoint}\n{job.plan.logs}"

    # --- Dashboard: Serve ---------------------------------------------------------------

    def put_serve_applications(
        self, config: Manifest, *, target_capacity: float | None = None
    ) -> None:
        """Replace the application set; changed or failed apps redeploy, others stay."""
        now = self._call("put_serve_applications")
        body = copy.deepcopy(config)
        if target_capacity is not None:
            body["target_capacity"] = target_capacity
        apps = _check_serve_config(body)
        self.put_bodies.append(body)
        tc = body.get("target_capacity")
        tc = None if tc is None else float(tc)
        serve = self._serve
        if serve is None:
            serve = self._serve = _Serve(body.get("proxy_location", "EveryNode"), tc)
        self._settle_deletions(now)
        old_tc = serve.target_capacity
        serve.target_capacity = tc
        for app_config in apps:
            name = app_config["name"]
            app = serve.apps.get(name)
            plan = self.app_plans.get(name, self.default_app_plan)
            failed = app is not None and _app_status(app, now) == "DEPLOY_FAILED"
            if app is None or app.deleting_since is not None or app.config != app_config or failed:
                serve.apps[name] = _App(
                    name, app_config, plan, now, _deployments(app_config, tc, now)
                )
            elif old_tc != tc:
                for deployment in app.deployments:
                    deployment.previous = _running(deployment, now)
                    deployment.target = target_replicas(deployment.num_replicas, tc)
                    deployment.settle_at = now + app.plan.scale_s
        sent = {app_config["name"] for app_config in apps}
        for name, app in serve.apps.items():
            if name not in sent and app.deleting_since is None:
                app.deleting_since = now

    def get_serve_details(self) -> ServeDetails:
        """Return the applications as of the clock."""
        now = self._call("get_serve_details")
        serve = self._serve
        if serve is None:
            return ServeDetails(
                controller_actor=None,
                proxy_location=None,
                target_capacity=None,
                proxies={},
                applications={},
            )
        self._settle_deletions(now)
        return ServeDetails(
            controller_actor="SERVE_CONTROLLER_ACTOR",
            proxy_location=serve.proxy_location,
            target_capacity=serve.target_capacity,
            proxies={
                NODE_ID: ProxyDetails(
                    node_id=NODE_ID,
                    node_ip="127.0.0.1",
                    actor_name=f"SERVE_PROXY_ACTOR-{NODE_ID}",
                    status="HEALTHY",
                )
            },
            applications={name: _app_details(app, now) for name, app in serve.apps.items()},
        )

    def delete_serve_applications(self) -> None:
        """Shut Serve down at once (Ray blocks 2 to 5 s)."""
        self._call("delete_serve_applications")
        self._serve = None

    def _settle_deletions(self, now: float) -> None:
        serve = self._serve
        if serve is None:
            return
        for name, app in list(serve.apps.items()):
            if app.deleting_since is not None and now >= app.deleting_since + app.plan.delete_s:
                del serve.apps[name]


def _job_info(job: _Job, now: float) -> JobInfo:
    plan = job.plan
    info = JobInfo(
        type="SUBMISSION",
        job_id=None,
        submission_id=job.submission_id,
        driver_info=None,
        status="PENDING",
        entrypoint=job.entrypoint,
        message=PENDING_MESSAGE,
        error_type=None,
        start_time=_ms(job.submitted),
        end_time=None,
        metadata=None if job.metadata is None else dict(job.metadata),
        runtime_env=copy.deepcopy(job.runtime_env),
        driver_agent_http_address=None,
        driver_node_id=None,
        driver_exit_code=None,
    )
    if job.ghost_end is not None:
        info.update(
            {
                "status": "FAILED",
                "entrypoint": GHOST_ENTRYPOINT,
                "error_type": "JOB_SUPERVISOR_ACTOR_DIED",
                "message": GHOST_MESSAGE,
                "start_time": None,
                "end_time": _ms(job.ghost_end),
            }
        )
        return info
    if plan.pending_s is None:
        timeout_at = job.submitted + plan.start_timeout_s
        if now >= timeout_at:
            info.update(
                {
                    "status": "FAILED",
                    "end_time": _ms(timeout_at),
                    "error_type": "JOB_SUPERVISOR_ACTOR_START_TIMEOUT",
                    "message": (
                        f"Job supervisor actor failed to start within {plan.start_timeout_s} "
                        "seconds. This timeout can be configured by setting the environment "
                        "variable RAY_JOB_START_TIMEOUT_SECONDS."
                    ),
                }
            )
        else:
            info["message"] = (
                f"{PENDING_MESSAGE} It may be waiting for resources (CPUs, GPUs, memory, "
                "custom resources) to become available."
            )
        return info
    running_at = job.submitted + plan.pending_s
    natural_end = None if plan.running_s is None else running_at + plan.running_s
    stop_end = None if job.stop_requested is None else job.stop_requested + plan.stop_s
    status: JobStatus = "PENDING"
    end = None
    if stop_end is not None and (natural_end is None or stop_end < natural_end):
        if now >= stop_end:
            status, end = "STOPPED", stop_end
    elif natural_end is not None and now >= natural_end:
        status, end = plan.outcome, natural_end
    if status == "PENDING" and now >= running_at:
        status = "RUNNING"
    if status != "PENDING":
        info.update(
            {"driver_agent_http_address": "http://127.0.0.1:52365", "driver_node_id": NODE_ID}
        )
    info["status"] = status
    info["end_time"] = None if end is None else _ms(end)
    if status == "RUNNING":
        info["message"] = RUNNING_MESSAGE
    elif status == "STOPPED":
        info["message"] = STOPPED_MESSAGE
    elif status == "SUCCEEDED":
        info.update({"message": SUCCEEDED_MESSAGE, "driver_exit_code": 0})
    elif status == "FAILED":
        info.update(
            {
                "error_type": "JOB_ENTRYPOINT_COMMAND_ERROR",
                "driver_exit_code": plan.exit_code,
                "message": f"Job entrypoint command failed with exit code {plan.exit_code}, last "
                f"available logs (truncated to 20,000 chars):\n{plan.logs}",
            }
        )
    return info


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


def _check_serve_config(body: Manifest) -> list[Manifest]:
    """The checks Ray's PUT does before answering; failures are 400s."""
    tc = body.get("target_capacity")
    if tc is not None and (isinstance(tc, bool) or not isinstance(tc, int | float)):
        raise PermanentError("target_capacity\n  Input should be a valid number", status=400)
    if tc is not None and not 0 <= tc <= 100:
        raise PermanentError(
            "1 validation error for ServeDeploySchema\ntarget_capacity\n  Input should be "
            f"{'less' if tc > 100 else 'greater'} than or equal to {100 if tc > 100 else 0}",
            status=400,
        )
    apps = body.get("applications")
    if not isinstance(apps, list) or not all(isinstance(app, dict) for app in apps):
        raise PermanentError("applications\n  Input should be a valid list", status=400)
    names: set[str] = set()
    prefixes: set[str] = set()
    for index, app in enumerate(apps):
        if not isinstance(app.get("import_path"), str):
            raise PermanentError(f"applications.{index}.import_path\n  Field required", status=400)
        name = app.setdefault("name", "default")
        prefix = app.get("route_prefix", "/")
        if name in names:
            raise PermanentError(f'Found multiple configs for application "{name}".', status=400)
        if prefix is not None and prefix in prefixes:
            raise PermanentError(
                f'Found duplicate applications for route prefix "{prefix}".', status=400
            )
        names.add(name)
        if prefix is not None:
            prefixes.add(prefix)
    return apps


def _deployments(app_config: Manifest, tc: float | None, now: float) -> list[_Deployment]:
    listed = app_config.get("deployments") or [
        {"name": str(app_config["import_path"]).rpartition(":")[2] or "Deployment"}
    ]
    deployments = []
    for config in listed:
        replicas = config.get("num_replicas")
        if not isinstance(replicas, int):  # absent, or "auto": start from the autoscaling bounds
            autoscaling = config.get("autoscaling_config") or {}
            replicas = int(autoscaling.get("initial_replicas", autoscaling.get("min_replicas", 1)))
        target = target_replicas(replicas, tc)
        deployments.append(_Deployment(str(config["name"]), replicas, config, target, target, now))
    return deployments


def _app_status(app: _App, now: float) -> ApplicationStatus:
    if app.deleting_since is not None:
        return "DELETING"
    if now < app.deployed_at + app.plan.deploy_s:
        return "DEPLOYING"
    return app.plan.outcome


def _running(deployment: _Deployment, now: float) -> int:
    return deployment.target if now >= deployment.settle_at else deployment.previous


def _app_details(app: _App, now: float) -> ApplicationDetails:
    status = _app_status(app, now)
    ready = status == "RUNNING" or (status == "DELETING" and app.plan.outcome == "RUNNING")
    return ApplicationDetails(
        name=app.name,
        status=status,
        message=app.plan.message if status == "DEPLOY_FAILED" else "",
        route_prefix=app.config.get("route_prefix", "/") if ready else None,
        last_deployed_time_s=app.deployed_at,
        deployed_app_config=copy.deepcopy(app.config),
        source="declarative",
        deployments={d.name: _deployment_details(app, d, now) for d in app.deployments}
        if ready
        else {},
    )


def _deployment_details(app: _App, deployment: _Deployment, now: float) -> DeploymentDetails:
    running = _running(deployment, now)
    if running == deployment.target:
        status, trigger = "HEALTHY", "CONFIG_UPDATE_COMPLETED"
    elif deployment.target > running:
        status, trigger = "UPSCALING", "CONFIG_UPDATE_STARTED"
    else:
        status, trigger = "DOWNSCALING", "CONFIG_UPDATE_STARTED"
    replicas = [
        ReplicaDetails(
            replica_id=f"{deployment.name.lower()}{index}",
            state="RUNNING",
            actor_name=f"SERVE_REPLICA::{app.name}#{deployment.name}#{index}",
            node_id=NODE_ID,
            node_ip="127.0.0.1",
            pid=None,
            start_time_s=app.deployed_at + app.plan.deploy_s,
        )
        for index in range(running)
    ]
    config = copy.deepcopy(deployment.config)
    config["num_replicas"] = deployment.num_replicas
    return DeploymentDetails(
        name=deployment.name,
        status=status,
        status_trigger=trigger,
        message="",
        target_num_replicas=deployment.target,
        deployment_config=config,
        replicas=replicas,
    )
