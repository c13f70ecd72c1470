"""The RayJob state machine (reference rayjob.md §4-§5), as a pure function.

`decide(observation, settings)` takes what the syncer saw — the rendered intent, the
last published status, the cluster and submitter pods, the Ray job list of the
cluster — and returns the status to publish and the actions to take. It reads no
clock (the time is part of the observation) and does no I/O, so every transition is
tested without sleeping, and a restart that sees the same state decides the same.

Differences from KubeRay, by design (DESIGN §3): readiness gates an already-rendered
submitter instead of creating it; a deadline or a suspension also stops the Ray job; a
retry reuses the cluster and submits `<id>-<attempt>` over HTTP; cleanup requests pod
shutdown (or deletes, in `delete` mode) instead of deleting a RayCluster object; the
dashboard is asked before the submitter's end (its failure, or the 30 s timeout after it
finished) can fail a job that succeeded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from syncer.kube.timestamps import format_time, parse_time
from syncer.ray.types import RayFacts
from syncer.rayjob.intent import JobIntent

Manifest = dict[str, Any]

# jobDeploymentStatus values.
NEW: Final = ""
INITIALIZING: Final = "Initializing"
WAITING: Final = "Waiting"
RUNNING: Final = "Running"
COMPLETE: Final = "Complete"
FAILED: Final = "Failed"
SUSPENDED: Final = "Suspended"
RETRYING: Final = "Retrying"
FINISHED: Final = frozenset({COMPLETE, FAILED})
# Ray job statuses.
TERMINAL_RAY: Final = frozenset({"STOPPED", "SUCCEEDED", "FAILED"})
# Reasons (rayjob.md §4.6).
DEADLINE: Final = "DeadlineExceeded"
PRE_RUNNING_DEADLINE: Final = "PreRunningDeadlineExceeded"
SUBMISSION_FAILED: Final = "SubmissionFailed"
APP_FAILED: Final = "AppFailed"
GRACE: Final = "JobDeploymentStatusTransitionGracePeriodExceeded"
CHECK_TIMEOUT: Final = "JobStatusCheckTimeoutExceeded"
NOT_RETRIED: Final = frozenset({DEADLINE, CHECK_TIMEOUT})
# Deletion policies, most destructive first.
POLICY_RANK: Final = {"DeleteSelf": 3, "DeleteCluster": 2, "DeleteWorkers": 1, "DeleteNone": 0}


def _with_scheme(url: str) -> str:
    return f"http://{url}" if url and "://" not in url else url


def _go_time(seconds: float) -> str:
    return datetime.fromtimestamp(int(seconds), UTC).strftime("%Y-%m-%d %H:%M:%S +0000 UTC")


@dataclass(frozen=True, slots=True)
class Settings:
    """Timers from the syncer config (KubeRay's defaults, rayjob.md §4.7)."""

    submitter_finished_timeout_s: float = 30.0
    transition_grace_period_s: float = 300.0
    status_check_timeout_s: float = 300.0
    poll_interval_s: float = 3.0


@dataclass(frozen=True, slots=True)
class Record:
    """KubeRay's RayJob status plus the syncer's bookkeeping: what the status ConfigMap holds."""

    run_id: str = ""
    job_deployment_status: str = NEW
    job_status: str = ""
    job_id: str | None = None
    ray_cluster_name: str = ""
    dashboard_url: str = ""
    start_time: float | None = None
    end_time: float | None = None
    reason: str = ""
    message: str = ""
    ray_start_time: float | None = None
    ray_end_time: float | None = None
    succeeded: int = 0
    failed: int = 0
    check_failure_start: float | None = None
    attempt: int = 0
    cluster_state: str = ""
    desired_workers: int = 0
    ready_workers: int = 0
    available_workers: int = 0
    cleanup: tuple[str, ...] = ()
    ungated: bool = False
    # A submission that may still start after the job failed on a deadline (a slow
    # submitter): the syncer keeps watching for it and stops it (DESIGN §3).
    stop_pending: str | None = None

    def to_status(self) -> Manifest:
        """KubeRay's `RayJob.status` field names and forms (empty values omitted)."""
        status: Manifest = {
            "jobDeploymentStatus": self.job_deployment_status,
            "jobStatus": self.job_status,
            "jobId": self.job_id,
            "rayClusterName": self.ray_cluster_name,
            # KubeRay's form has no scheme: `<head svc>.<ns>.svc.<domain>:<port>`.
            "dashboardURL": self.dashboard_url.removeprefix("http://"),
            "startTime": format_time(self.start_time),
            "endTime": format_time(self.end_time),
            "reason": self.reason,
            "message": self.message,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "jobStatusCheckFailureStartTime": format_time(self.check_failure_start),
        }
        info = {
            "startTime": format_time(self.ray_start_time),
            "endTime": format_time(self.ray_end_time),
        }
        if any(info.values()):
            status["rayJobInfo"] = {k: v for k, v in info.items() if v}
        if self.ray_cluster_name:
            cluster: Manifest = {"state": self.cluster_state} if self.cluster_state else {}
            status["rayClusterStatus"] = {
                **cluster,
                "desiredWorkerReplicas": self.desired_workers,
                "readyWorkerReplicas": self.ready_workers,
                "availableWorkerReplicas": self.available_workers,
            }
        return {k: v for k, v in status.items() if v not in (None, "")}

    def to_json(self) -> Manifest:
        """Everything, for the status ConfigMap (KubeRay's fields plus bookkeeping)."""
        return {
            "status": self.to_status(),
            "syncer": {
                "runId": self.run_id,
                "attempt": self.attempt,
                "cleanup": list(self.cleanup),
                "ungated": self.ungated,
                "stopPending": self.stop_pending,
                # Exact times: the status' RFC 3339 strings drop fractions.
                "startTime": self.start_time,
                "endTime": self.end_time,
                "checkFailureStart": self.check_failure_start,
                "dashboardURL": self.dashboard_url,
                "rayStartTime": self.ray_start_time,
                "rayEndTime": self.ray_end_time,
            },
        }

    @classmethod
    def from_json(cls, data: Manifest) -> Record:
        """Read back what `to_json` wrote (tolerant of missing keys)."""
        status = data.get("status") or {}
        own = data.get("syncer") or {}
        info = status.get("rayJobInfo") or {}
        cluster = status.get("rayClusterStatus") or {}
        return cls(
            run_id=str(own.get("runId") or ""),
            job_deployment_status=str(status.get("jobDeploymentStatus") or NEW),
            job_status=str(status.get("jobStatus") or ""),
            job_id=status.get("jobId"),
            ray_cluster_name=str(status.get("rayClusterName") or ""),
            dashboard_url=str(
                own.get("dashboardURL", _with_scheme(str(status.get("dashboardURL") or "")))
            ),
            start_time=own.get("startTime", parse_time(status.get("startTime"))),
            end_time=own.get("endTime", parse_time(status.get("endTime"))),
            reason=str(status.get("reason") or ""),
            message=str(status.get("message") or ""),
            ray_start_time=own.get("rayStartTime", parse_time(info.get("startTime"))),
            ray_end_time=own.get("rayEndTime", parse_time(info.get("endTime"))),
            succeeded=int(status.get("succeeded") or 0),
            failed=int(status.get("failed") or 0),
            check_failure_start=own.get(
                "checkFailureStart", parse_time(status.get("jobStatusCheckFailureStartTime"))
            ),
            attempt=int(own.get("attempt") or 0),
            cluster_state=str(cluster.get("state") or ""),
            desired_workers=int(cluster.get("desiredWorkerReplicas") or 0),
            ready_workers=int(cluster.get("readyWorkerReplicas") or 0),
            available_workers=int(cluster.get("availableWorkerReplicas") or 0),
            cleanup=tuple(own.get("cleanup") or ()),
            ungated=bool(own.get("ungated")),
            stop_pending=own.get("stopPending"),
        )


@dataclass(frozen=True, slots=True)
class PodView:
    """What the state machine needs of one Pod."""

    name: str
    node_type: str = ""
    phase: str = "Pending"
    ready: bool = False
    gated: bool = False
    shutdown_requested: bool = False
    deleting: bool = False
    # A worker the autoscaling actuator made (not in git): part of the cluster by its label.
    dynamic: bool = False
    # SidecarMode: the submitter container's end, if it has ended.
    sidecar_exit_code: int | None = None
    sidecar_reason: str = ""
    sidecar_finished_at: float | None = None

    @property
    def running_ready(self) -> bool:
        """Phase Running and the Ready condition True."""
        return self.phase == "Running" and self.ready and not self.deleting

    @property
    def ended(self) -> bool:
        """Phase Succeeded or Failed."""
        return self.phase in ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class SubmitterView:
    """The K8sJobMode submitter Job and its Pods."""

    exists: bool
    failed: bool = False
    complete: bool = False
    reason: str = ""
    message: str = ""
    finished_at: float | None = None
    gated_pods: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Observation:
    """Everything `decide` looks at."""

    intent: JobIntent
    record: Record | None
    pods: tuple[PodView, ...]
    submitter: SubmitterView | None
    ray: RayFacts | None
    now: float


# --- actions -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ungate:
    """Remove the `kuberay.io/cluster-ready` gate from these submitter pods."""

    pods: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Submit:
    """Submit the job over HTTP with this submission ID (idempotent)."""

    submission_id: str


@dataclass(frozen=True, slots=True)
class StopJob:
    """Stop a Ray job (`POST /api/jobs/<id>/stop`).

    `dashboard_url` names another cluster than the current one: that of a run a spec
    change or a suspension replaced.
    """

    submission_id: str
    dashboard_url: str = ""


@dataclass(frozen=True, slots=True)
class Shutdown:
    """Release these pods: annotate them (`stop` mode) or delete them (`delete` mode)."""

    pods: tuple[str, ...]
    policy: str


@dataclass(frozen=True, slots=True)
class DeleteSubmitter:
    """`delete` mode with DeleteSelf: delete the submitter Job as well."""


@dataclass(frozen=True, slots=True)
class Event:
    """A Kubernetes Event on the job's anchor object."""

    type: str
    reason: str
    message: str


Action = Ungate | Submit | StopJob | Shutdown | DeleteSubmitter | Event


@dataclass(frozen=True, slots=True)
class Decision:
    """What to publish and do, and when to look again (seconds; None = on events only)."""

    record: Record
    actions: tuple[Action, ...] = ()
    wake_after: float | None = None


# --- helpers -----------------------------------------------------------------------------------


def effective_mode(intent: JobIntent, record: Record) -> str:
    """Retries are submitted over HTTP: the rendered submitter has already run."""
    if record.attempt > 0 and intent.mode in ("K8sJobMode", "SidecarMode"):
        return "HTTPMode"
    return intent.mode


def attempt_id(intent: JobIntent, attempt: int) -> str | None:
    """`<id>` for the first attempt, `<id>-<attempt>` for retries."""
    if intent.submission_id is None:
        return None
    return intent.submission_id if attempt == 0 else f"{intent.submission_id}-{attempt}"


def cluster_pods(obs: Observation) -> tuple[PodView, ...]:
    """The pods of the job's cluster: rendered names and dynamic workers (or all, selected)."""
    if obs.intent.uses_selector:
        return tuple(p for p in obs.pods if p.node_type in ("head", "worker"))
    wanted = set(obs.intent.cluster_pods)
    return tuple(p for p in obs.pods if p.name in wanted or p.dynamic)


def _serving(pod: PodView, intent: JobIntent) -> bool:
    """Whether a pod counts as ready: Running and Ready.

    In SidecarMode a head whose submitter container has ended is no longer Ready, yet its
    Ray is up (the job may have finished before anyone looked).
    """
    if pod.running_ready:
        return True
    return (
        intent.mode == "SidecarMode"
        and pod.node_type == "head"
        and pod.phase == "Running"
        and not pod.deleting
        and pod.sidecar_exit_code is not None
    )


def cluster_counts(obs: Observation) -> tuple[bool, int, int, int]:
    """(ready, desired workers, ready workers, available workers) from the pods."""
    pods = cluster_pods(obs)
    workers = [p for p in pods if p.node_type == "worker"]
    if obs.intent.uses_selector:
        desired = len(workers)
        ready = bool(pods) and any(p.node_type == "head" for p in pods)
        ready = ready and all(p.running_ready for p in pods)
    else:
        desired = len(obs.intent.worker_pods)
        by_name = {p.name: p for p in pods}
        ready = bool(obs.intent.cluster_pods) and all(
            n in by_name and _serving(by_name[n], obs.intent) for n in obs.intent.cluster_pods
        )
    ready_workers = sum(1 for p in workers if p.running_ready)
    available = sum(1 for p in workers if p.phase == "Running")
    return ready, desired, ready_workers, available


def _deadline(start: float | None, seconds: int | None, now: float) -> tuple[bool, float | None]:
    """(passed, seconds until it passes)."""
    if start is None or seconds is None:
        return False, None
    remaining = start + seconds - now
    return remaining <= 0, max(remaining, 0.0)


def _earliest(*values: float | None) -> float | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


class _Pass:
    """One evaluation: accumulates the new record, actions and the next wake-up."""

    def __init__(self, obs: Observation, settings: Settings, record: Record) -> None:
        self.obs = obs
        self.settings = settings
        self.record = record
        self.actions: list[Action] = []
        self.wake: float | None = None
        # Ray's own status when a failure forced `job_status` (the 30 s submitter timeout).
        self.ray_status: str | None = None

    def update(self, **changes: Any) -> None:
        self.record = dataclasses.replace(self.record, **changes)

    def wake_in(self, seconds: float | None) -> None:
        self.wake = _earliest(self.wake, seconds)

    def event(self, reason: str, message: str, *, warning: bool = False) -> None:
        self.actions.append(Event("Warning" if warning else "Normal", reason, message))

    def fail(self, reason: str, message: str, *, job_status: str | None = None) -> None:
        """Move to Failed (and count it); the retry rule may turn it into a retry."""
        if job_status is not None:
            self.ray_status = self.record.job_status
        self.update(
            job_deployment_status=FAILED,
            reason=reason,
            message=message,
            job_status=self.record.job_status if job_status is None else job_status,
        )

    def complete(self) -> None:
        self.update(job_deployment_status=COMPLETE, reason="")


def _new_attempt(p: _Pass, attempt: int) -> None:
    intent, now = p.obs.intent, p.obs.now
    p.ray_status = None
    p.update(
        job_deployment_status=INITIALIZING,
        job_status="",
        # KubeRay sets jobId in New for every mode but InteractiveMode (rayjob.md §4.3).
        job_id=None if intent.mode == "InteractiveMode" else attempt_id(intent, attempt),
        ray_cluster_name=intent.cluster_name,
        dashboard_url="",
        start_time=now,
        end_time=None,
        reason="",
        message="",
        ray_start_time=None,
        ray_end_time=None,
        check_failure_start=None,
        attempt=attempt,
        cleanup=(),
        ungated=False,
    )


# --- the states --------------------------------------------------------------------------------


def _initializing(p: _Pass) -> None:
    obs, intent, rec = p.obs, p.obs.intent, p.record
    for limit, reason, label in (
        (intent.active_deadline_s, DEADLINE, "activeDeadlineSeconds"),
        (intent.pre_running_deadline_s, PRE_RUNNING_DEADLINE, "preRunningDeadlineSeconds"),
    ):
        passed, remaining = _deadline(rec.start_time, limit, obs.now)
        if passed:
            p.fail(
                reason,
                f"The RayJob has passed the {label}. StartTime: "
                f"{_go_time(rec.start_time or 0)}. {label[0].upper()}{label[1:]}: {limit}",
            )
            return
        p.wake_in(remaining)
    ready, desired, ready_workers, available = cluster_counts(obs)
    p.update(desired_workers=desired, ready_workers=ready_workers, available_workers=available)
    if not ready:
        return
    p.update(cluster_state="ready", dashboard_url=intent.dashboard_url)
    if obs.ray is None or not obs.ray.reachable:
        p.wake_in(p.settings.poll_interval_s)  # pods are ready; wait for the dashboard
        return
    mode = effective_mode(intent, rec)
    if mode == "InteractiveMode":
        p.update(job_deployment_status=WAITING)
        _waiting(p)
        return
    if mode == "K8sJobMode":
        gated = obs.submitter.gated_pods if obs.submitter is not None else ()
        if gated:
            p.actions.append(Ungate(gated))
        p.update(ungated=True)
        p.event("ClusterReady", "the Ray cluster is ready; the submitter may start")
    elif mode == "HTTPMode" and p.record.job_id is not None and p.record.job_id not in obs.ray.jobs:
        # Not when Ray has it: the syncer submitted, then stopped before publishing Running.
        p.actions.append(Submit(p.record.job_id))
    p.update(job_deployment_status=RUNNING)
    p.wake_in(p.settings.poll_interval_s)


def _waiting(p: _Pass) -> None:
    obs, intent, rec = p.obs, p.obs.intent, p.record
    passed, remaining = _deadline(rec.start_time, intent.pre_running_deadline_s, obs.now)
    if passed:
        p.fail(
            PRE_RUNNING_DEADLINE,
            f"The RayJob has passed the preRunningDeadlineSeconds. StartTime: "
            f"{_go_time(rec.start_time or 0)}. PreRunningDeadlineSeconds: "
            f"{intent.pre_running_deadline_s}",
        )
        return
    p.wake_in(remaining)
    if intent.submission_id:
        p.update(job_id=intent.submission_id, job_deployment_status=RUNNING)
        p.wake_in(p.settings.poll_interval_s)


def _sidecar(obs: Observation) -> PodView | None:
    if obs.intent.head_pod is None:
        return None
    return next((pod for pod in obs.pods if pod.name == obs.intent.head_pod), None)


def _grace_exceeded(p: _Pass) -> bool:
    """End a job whose Ray status has been terminal for the grace period (rayjob.md §4.3)."""
    rec = p.record
    if rec.job_status not in TERMINAL_RAY or rec.ray_end_time is None:
        return False
    passed, left = _deadline(rec.ray_end_time, int(p.settings.transition_grace_period_s), p.obs.now)
    if not passed:
        p.wake_in(left)
        return False
    message = (
        "JobDeploymentStatus does not transition to Complete or Failed within the grace "
        "period after JobStatus reaches a terminal state."
    )
    if rec.job_status == "FAILED":
        p.fail(GRACE, message)
    else:
        p.update(job_deployment_status=COMPLETE, reason=GRACE, message=message)
    return True


def _running(p: _Pass) -> None:
    obs, intent, settings = p.obs, p.obs.intent, p.settings
    _, desired, ready_workers, available = cluster_counts(obs)
    p.update(desired_workers=desired, ready_workers=ready_workers, available_workers=available)
    rec = p.record
    passed, remaining = _deadline(rec.start_time, intent.active_deadline_s, obs.now)
    if passed:
        if rec.job_id and rec.job_status not in TERMINAL_RAY:
            p.actions.append(StopJob(rec.job_id))
            p.update(stop_pending=rec.job_id)
        p.fail(
            DEADLINE,
            f"The RayJob has passed the activeDeadlineSeconds. StartTime: "
            f"{_go_time(rec.start_time or 0)}. ActiveDeadlineSeconds: {intent.active_deadline_s}",
        )
        return
    p.wake_in(remaining)
    if _grace_exceeded(p):
        return
    mode = effective_mode(intent, rec)
    # The submitter: K8sJobMode's Job, or SidecarMode's container in the head pod.
    finished_at: float | None = None
    submitter_failed = ""
    if mode == "K8sJobMode" and obs.submitter is not None:
        if obs.submitter.gated_pods:
            p.actions.append(Ungate(obs.submitter.gated_pods))
        if obs.submitter.failed or obs.submitter.complete:
            finished_at = obs.submitter.finished_at if obs.submitter.finished_at else obs.now
        if obs.submitter.failed:
            submitter_failed = (
                f"Job submission has failed. Reason: {obs.submitter.reason}. "
                f"Message: {obs.submitter.message}"
            )
    elif mode == "SidecarMode":
        head = _sidecar(obs)
        if head is None or head.deleting:
            p.fail(APP_FAILED, "Ray head pod not found.")
            return
        if head.sidecar_exit_code is not None:
            finished_at = head.sidecar_finished_at or obs.now
            if head.sidecar_exit_code != 0:
                submitter_failed = (
                    f"Ray head pod container ray-job-submitter terminated with exit code "
                    f"{head.sidecar_exit_code}: {head.sidecar_reason}"
                )
    has_submitter = mode in ("K8sJobMode", "SidecarMode")
    # The dashboard's word comes first: it may already know the job's outcome.
    ray = obs.ray
    info: Mapping[str, Any] | None = None
    if ray is not None and not ray.reachable:
        start = rec.check_failure_start if rec.check_failure_start is not None else obs.now
        p.update(check_failure_start=start)
        timeout_passed, left = _deadline(start, int(settings.status_check_timeout_s), obs.now)
        if timeout_passed:
            p.fail(
                CHECK_TIMEOUT,
                f"Job status checks have been failing since "
                f"{datetime.fromtimestamp(int(start), UTC).strftime('%Y-%m-%d %H:%M:%S')}; "
                f"exceeded timeout of {int(settings.status_check_timeout_s)}s",
            )
            return
        p.wake_in(min(left or settings.poll_interval_s, settings.poll_interval_s))
    elif ray is not None:
        p.update(check_failure_start=None)
        info = ray.jobs.get(rec.job_id or "") if rec.job_id else None
    if info is not None:
        status = str(info.get("status") or "")
        ray_start, ray_end = _epoch_ms(info.get("start_time")), _epoch_ms(info.get("end_time"))
        p.update(
            job_status=status,
            message=str(info.get("message") or "")[:MAX_MESSAGE],
            ray_start_time=ray_start if ray_start is not None else p.record.ray_start_time,
            ray_end_time=ray_end if ray_end is not None else p.record.ray_end_time,
        )
        terminal = status in TERMINAL_RAY and (not has_submitter or finished_at is not None)
        if status in TERMINAL_RAY and has_submitter and finished_at is None:
            # Ray is done; the submitter is still printing logs. It ends soon.
            p.wake_in(settings.submitter_finished_timeout_s)
        if terminal:
            if status == "FAILED":
                p.fail(APP_FAILED, p.record.message)
            else:
                p.complete()
            return
        if _grace_exceeded(p):  # again with Ray's fresh end time, so the pass is final
            return
    if submitter_failed:
        if p.record.job_status == "FAILED":
            p.fail(APP_FAILED, p.record.message)
        else:
            p.fail(SUBMISSION_FAILED, submitter_failed)
        return
    if finished_at is not None:
        timeout_passed, left = _deadline(
            finished_at, int(settings.submitter_finished_timeout_s), obs.now
        )
        if ray is not None and ray.reachable and info is None:
            p.fail(APP_FAILED, "Submitter completed but Ray job not found in RayCluster.")
            return
        if timeout_passed:
            p.fail(
                GRACE,
                f"The RayJob submitter finished at "
                f"{datetime.fromtimestamp(int(finished_at), UTC).strftime('%Y-%m-%d %H:%M:%S')} "
                f"but the ray job did not reach terminal state within "
                f"{int(settings.submitter_finished_timeout_s)}s",
                job_status="FAILED",
            )
            return
        p.wake_in(left)
    if mode == "HTTPMode" and ray is not None and ray.reachable and info is None and rec.job_id:
        p.actions.append(Submit(rec.job_id))  # Ray lost it, or the syncer stopped mid-submit
    p.wake_in(settings.poll_interval_s)


def _after_failure(p: _Pass, before: str) -> None:
    """Count a fresh Complete/Failed; turn a Failed with retries left into a new attempt."""
    rec, intent = p.record, p.obs.intent
    if rec.job_deployment_status not in FINISHED or before in FINISHED:
        return
    if rec.job_deployment_status == FAILED:
        failed = rec.failed + 1
        p.update(failed=failed)
        retries_left = failed < intent.backoff_limit + 1
        if retries_left and rec.reason not in NOT_RETRIED and not intent.uses_selector:
            old = rec.job_id
            # The retry reuses the cluster: stop the old attempt unless Ray ended it (a
            # forced jobStatus FAILED says nothing about Ray's own status).
            live = rec.job_status if p.ray_status is None else p.ray_status
            if old and live not in TERMINAL_RAY:
                p.actions.append(StopJob(old))
            p.event(
                "Retrying",
                f"attempt {rec.attempt + 1} failed ({rec.reason}); retrying "
                f"({failed} of {intent.backoff_limit + 1} attempts used)",
                warning=True,
            )
            _new_attempt(p, rec.attempt + 1)
            p.wake_in(0.0)
            return
    elif rec.job_status == "SUCCEEDED":
        p.update(succeeded=rec.succeeded + 1)
    p.update(end_time=p.obs.now)
    kind = "Warning" if p.record.job_deployment_status == FAILED else "Normal"
    p.actions.append(
        Event(
            kind,
            p.record.job_deployment_status,
            f"RayJob {p.record.job_deployment_status.lower()}: "
            f"{p.record.reason or p.record.job_status} {p.record.message}".strip(),
        )
    )


def _late_stop(p: _Pass) -> None:
    """Stop a submission that starts after the job already failed on its deadline."""
    obs, rec = p.obs, p.record
    if not rec.stop_pending:
        return
    ray = obs.ray
    if ray is None or not ray.reachable:
        p.wake_in(p.settings.poll_interval_s)
        return
    info = ray.jobs.get(rec.stop_pending)
    submitter = obs.submitter
    head = _sidecar(obs) if obs.intent.mode == "SidecarMode" else None
    submitter_done = (
        (submitter is None or submitter.failed or submitter.complete)
        if obs.intent.mode != "SidecarMode"
        else head is None or head.sidecar_exit_code is not None
    )
    if info is not None and str(info.get("status") or "") not in TERMINAL_RAY:
        p.actions.append(StopJob(rec.stop_pending))
        p.wake_in(p.settings.poll_interval_s)
    elif info is not None or submitter_done:
        p.update(stop_pending=None)  # stopped, ended, or never submitted
    else:
        p.wake_in(p.settings.poll_interval_s)


# --- cleanup (rayjob.md §5) --------------------------------------------------------------------


def _policy_pods(obs: Observation, policy: str) -> tuple[str, ...]:
    """The live pods a policy releases: the workers for DeleteWorkers, else the cluster."""
    pods = cluster_pods(obs)
    if policy == "DeleteWorkers":
        pods = tuple(pod for pod in pods if pod.node_type == "worker")
    return tuple(
        pod.name
        for pod in pods
        if not pod.shutdown_requested and not pod.ended and not pod.deleting
    )


def _cleanup(p: _Pass) -> None:
    obs, intent, rec = p.obs, p.obs.intent, p.record
    if intent.uses_selector or rec.end_time is None:
        return
    due: list[tuple[str, float]] = []  # (policy, moment)
    if intent.deletion_rules is not None:
        for rule in intent.deletion_rules:
            matches = (rule.job_status is not None and rule.job_status == rec.job_status) or (
                rule.deployment_status is not None
                and rule.deployment_status == rec.job_deployment_status
            )
            if matches:
                due.append((rule.policy, rec.end_time + rule.ttl_s))
    elif intent.legacy_on_success is not None or intent.legacy_on_failure is not None:
        policy = {"SUCCEEDED": intent.legacy_on_success, "FAILED": intent.legacy_on_failure}.get(
            rec.job_status
        )
        if policy is not None:
            due.append((policy, rec.end_time + intent.ttl_after_finished_s))
    elif intent.shutdown_after_finish:
        due.append(("DeleteCluster", rec.end_time + intent.ttl_after_finished_s))
    done_rank = max((POLICY_RANK.get(x, 0) for x in rec.cleanup), default=-1)
    overdue = []
    for policy, moment in due:
        if POLICY_RANK.get(policy, 0) <= done_rank and policy != "DeleteNone":
            continue
        if policy == "DeleteNone" or policy in rec.cleanup:
            continue
        if moment > obs.now:
            p.wake_in(moment - obs.now)
        else:
            overdue.append(policy)
    if not overdue:
        _release_again(p)
        return
    policy = max(overdue, key=lambda x: POLICY_RANK.get(x, 0))
    pods = _policy_pods(obs, policy)
    if pods:
        p.actions.append(Shutdown(pods, policy))
    if policy == "DeleteSelf":
        p.actions.append(DeleteSubmitter())
    p.update(cleanup=(*rec.cleanup, policy))
    p.event(policy, f"{policy}: releasing {len(pods)} pod(s) of cluster {intent.cluster_name}")
    # A later, more destructive rule set the wake-up for its moment in the loop above.


def _release_again(p: _Pass) -> None:
    """Release again what the strongest recorded policy covers and is still live.

    The syncer publishes a policy before it releases the pods (so that a failed publish
    never leaves a torn-down cluster under a running record); if the release then fails,
    or a pod of that cluster is re-created, this pass releases it.
    """
    done = [x for x in p.record.cleanup if POLICY_RANK.get(x, 0) > 0]
    if not done:
        return
    policy = max(done, key=lambda x: POLICY_RANK.get(x, 0))
    pods = _policy_pods(p.obs, policy)
    if pods:
        p.actions.append(Shutdown(pods, policy))


# --- entry point -------------------------------------------------------------------------------


def needs_dashboard(intent: JobIntent, record: Record | None, cluster_ready: bool) -> bool:
    """Whether this pass should ask the cluster's dashboard (one list call per cluster)."""
    if record is None or record.run_id != intent.run_id:
        return False
    if record.stop_pending:
        return True
    if record.job_deployment_status == INITIALIZING:
        return cluster_ready
    return record.job_deployment_status == RUNNING


# Ray's job times are epoch milliseconds; anything else (a string, a bool, a negative or
# far-future number: the dashboard answers what its cluster's users make it) is ignored.
_MAX_EPOCH_MS: Final = 253_402_300_799_000  # 9999-12-31T23:59:59Z
MAX_MESSAGE: Final = 4096  # characters of Ray's job message kept in the status record


def _epoch_ms(value: object) -> float | None:
    """Epoch seconds from Ray's milliseconds, or None when `value` is not such a time."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not 0 < value <= _MAX_EPOCH_MS:  # also false for NaN
        return None
    return value / 1000.0


def decide(obs: Observation, settings: Settings | None = None) -> Decision:
    """The next status and actions for one RayJob."""
    settings = settings or Settings()
    intent = obs.intent
    record = obs.record
    if record is None or record.run_id != intent.run_id:
        # A new run: the spec changed (new names), the job is new, or it was resumed.
        base = Record(run_id=intent.run_id)
        if record is not None and (intent.suspend or record.job_deployment_status == SUSPENDED):
            # KubeRay keeps the counters (and so the retries used) through a suspension,
            # and startTime/endTime while suspended (rayjob.md §4.3 Suspending).
            base = dataclasses.replace(
                base,
                succeeded=record.succeeded,
                failed=record.failed,
                start_time=record.start_time,
                end_time=record.end_time,
            )
        p = _Pass(obs, settings, base)
        replaced = record is not None and record.job_id and record.job_status not in TERMINAL_RAY
        if replaced and record is not None and record.job_id and record.dashboard_url:
            # The run this one replaces may still be running on its (old) cluster.
            p.actions.append(StopJob(record.job_id, record.dashboard_url))
        if intent.suspend:
            p.update(
                job_deployment_status=SUSPENDED,
                ray_cluster_name="",
                start_time=obs.now if base.start_time is None else base.start_time,
            )
            p.event("Suspended", "the RayJob is suspended: its cluster is not rendered")
            return Decision(p.record, tuple(p.actions), None)
        _new_attempt(p, 0)
        p.event("Initializing", f"waiting for cluster {intent.cluster_name} to be ready")
    else:
        p = _Pass(obs, settings, record)
    before = p.record.job_deployment_status
    # A pass moves through states until none changes, so that deciding again on its result
    # changes nothing (a restart is safe). An attempt makes at most four moves (Initializing,
    # Waiting, Running, Failed) and the backoff limit bounds the attempts.
    for _ in range(4 * (intent.backoff_limit + 2)):
        state = p.record.job_deployment_status
        attempt = p.record.attempt
        if state == INITIALIZING:
            _initializing(p)
        elif state == WAITING:
            _waiting(p)
        elif state == RUNNING:
            _running(p)
        if p.record.job_deployment_status in FINISHED:
            _after_failure(p, before)
            before = p.record.job_deployment_status
        if (p.record.job_deployment_status, p.record.attempt) == (state, attempt):
            break
    if p.record.job_deployment_status in FINISHED:
        _late_stop(p)
        _cleanup(p)
    return Decision(p.record, tuple(dict.fromkeys(p.actions)), p.wake)
