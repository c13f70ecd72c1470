"""The shapes a Ray head's dashboard answers with, and the `Dashboard` protocol. Pure.

TypedDicts of the Jobs and Serve REST replies (checked field by field by
`syncer.ray.dashboard`), their status vocabularies, and the protocol the rest of the syncer
calls; kept apart from the urllib client so the state machines can name them without
importing any HTTP code.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypedDict, get_args

Manifest = dict[str, Any]

JobStatus = Literal["PENDING", "RUNNING", "STOPPED", "SUCCEEDED", "FAILED"]
JobType = Literal["SUBMISSION", "DRIVER"]
ApplicationStatus = Literal[
    "NOT_STARTED", "DEPLOYING", "RUNNING", "DEPLOY_FAILED", "DELETING", "UNHEALTHY"
]
JOB_STATUSES: frozenset[str] = frozenset(get_args(JobStatus))
TERMINAL_JOB_STATUSES: frozenset[str] = frozenset({"STOPPED", "SUCCEEDED", "FAILED"})
APPLICATION_STATUSES: frozenset[str] = frozenset(get_args(ApplicationStatus))


class VersionInfo(TypedDict):
    """`GET /api/version`; `version` is the Jobs REST API version ("4" in Ray 2.60)."""

    version: str
    ray_version: str
    ray_commit: str
    session_name: str


class DriverInfo(TypedDict):
    """The driver process of a job that called `ray.init()`; `pid` is a string."""

    id: str
    node_ip_address: str
    pid: str


class JobInfo(TypedDict):
    """One job of `GET /api/jobs/{id}` or `GET /api/jobs/`; times are Unix milliseconds.

    `job_id` is the Ray driver id (null unless the entrypoint called `ray.init()`); key
    everything on `submission_id`. `driver_exit_code` is null for STOPPED jobs.
    """

    type: JobType
    job_id: str | None
    submission_id: str | None
    driver_info: DriverInfo | None
    status: JobStatus
    entrypoint: str
    message: str | None
    error_type: str | None
    start_time: int | None
    end_time: int | None
    metadata: dict[str, str] | None
    runtime_env: Manifest | None
    driver_agent_http_address: str | None
    driver_node_id: str | None
    driver_exit_code: int | None


class ReplicaDetails(TypedDict):
    """One Serve replica; `state` is STARTING, RUNNING, STOPPING, STOPPED, UPDATING, ..."""

    replica_id: str
    state: str
    actor_name: str
    node_id: str | None
    node_ip: str | None
    pid: int | None
    start_time_s: float | None


class DeploymentDetails(TypedDict):
    """One deployment of a Serve application.

    `target_num_replicas` is what the controller aims for after `target_capacity`;
    `deployment_config["num_replicas"]` is what the config asked for. The REST reply has no
    replica-state counts: use `replica_state_counts`.
    """

    name: str
    status: str
    status_trigger: str
    message: str
    target_num_replicas: int | None
    deployment_config: Manifest
    replicas: list[ReplicaDetails]


class ApplicationDetails(TypedDict):
    """One Serve application.

    While DEPLOYING, and after a failed import, `deployments` is empty and `route_prefix` is
    null; `deployed_app_config` is what was sent.
    """

    name: str
    status: ApplicationStatus
    message: str
    route_prefix: str | None
    last_deployed_time_s: float | None
    deployed_app_config: Manifest | None
    source: str | None
    deployments: dict[str, DeploymentDetails]


class ProxyDetails(TypedDict):
    """One Serve HTTP proxy; `status` is HEALTHY, STARTING, UNHEALTHY, DRAINING or DRAINED."""

    node_id: str
    node_ip: str | None
    actor_name: str | None
    status: str


class ServeDetails(TypedDict):
    """`GET /api/serve/applications/`, reduced to what the syncer reads.

    Before Serve starts (and after a delete) `controller_actor` is None, `proxy_location`
    is None and the maps are empty. `target_capacity` is None when the config left it out.
    """

    controller_actor: str | None
    proxy_location: str | None
    target_capacity: float | None
    proxies: dict[str, ProxyDetails]
    applications: dict[str, ApplicationDetails]


class Dashboard(Protocol):
    """What the syncer asks of one Ray head's dashboard."""

    def version(self) -> VersionInfo:
        """Return the Ray and Jobs API versions; the cheapest "does it answer" call."""
        ...

    def is_healthy(self) -> bool:
        """Return whether the dashboard answers and reports the GCS healthy.

        Raises:
            PermanentError: the dashboard refuses the request (for example a bad token).
        """
        ...

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
        """Submit a job; return False when this submission id already existed (idempotent)."""
        ...

    def get_job(self, submission_id: str) -> JobInfo | None:
        """Return one job, or None when the dashboard does not know the id."""
        ...

    def list_jobs(self) -> list[JobInfo]:
        """Return every submitted job (no DRIVER entries), oldest first, in one call."""
        ...

    def stop_job(self, submission_id: str) -> bool:
        """Ask a job to stop; return False when it had already ended.

        Raises:
            NotFoundError: no such job.
        """
        ...

    def delete_job(self, submission_id: str) -> bool:
        """Delete an ended job; return False when there was no such job.

        Raises:
            TransientError: the job has not ended yet.
        """
        ...

    def get_job_logs(self, submission_id: str) -> str:
        """Return the whole driver log (stdout and stderr merged).

        Raises:
            NotFoundError: no such job.
        """
        ...

    def put_serve_applications(
        self, config: Manifest, *, target_capacity: float | None = None
    ) -> None:
        """Replace the whole Serve application set; returns before anything is deployed.

        `target_capacity`, when given, overrides the config's top-level value.
        """
        ...

    def get_serve_details(self) -> ServeDetails:
        """Return the declaratively deployed Serve applications and the proxies."""
        ...

    def delete_serve_applications(self) -> None:
        """Delete every Serve application and shut Serve down."""
        ...


def is_terminal(status: str) -> bool:
    """Return whether a job status is final (STOPPED, SUCCEEDED or FAILED)."""
    return status in TERMINAL_JOB_STATUSES


def replica_state_counts(deployment: DeploymentDetails) -> dict[str, int]:
    """Count a deployment's replicas per state, e.g. `{"RUNNING": 2, "STARTING": 1}`."""
    counts = Counter(replica["state"] for replica in deployment["replicas"])
    return dict(sorted(counts.items()))


@dataclass(frozen=True, slots=True)
class RayFacts:
    """One answer of the cluster's dashboard (`GET /api/jobs/`), or why there is none."""

    reachable: bool
    jobs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    error: str = ""
