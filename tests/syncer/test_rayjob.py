"""The RayJob state machine (`syncer/rayjob.py`) as a pure function: a fixed clock, no I/O.

Each test builds a JobIntent from an intent ConfigMap shaped like the renderer's, an
observation of the cluster pods, the submitter and the dashboard, and pins the decided
status (KubeRay's reasons, messages and counters, reference rayjob.md §4-§5) and actions.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from renderer import naming
from syncer.ray.types import RayFacts
from syncer.rayjob.intent import JobIntent, parse_job_intent
from syncer.rayjob.machine import (
    POLICY_RANK,
    Action,
    Decision,
    DeleteSubmitter,
    Event,
    Observation,
    PodView,
    Record,
    Settings,
    Shutdown,
    StopJob,
    Submit,
    SubmitterView,
    Ungate,
    cluster_counts,
    decide,
    needs_dashboard,
)
from tests.manifests import rayjob
from tests.syncer.harness import render

Manifest = dict[str, Any]

T0 = 1_767_261_600.0  # 2026-01-01 10:00:00 UTC
T0_GO = "2026-01-01 10:00:00 +0000 UTC"
NS = "ml"
JOB = "train"
CLUSTER = "train-abc12"
SUBMISSION = "train-xyz89"
HEAD = f"{CLUSTER}-head-h1"
WORKERS = (f"{CLUSTER}-small-worker-w1-0", f"{CLUSTER}-small-worker-w1-1")
URL = f"http://{CLUSTER}-head-svc.{NS}.svc.cluster.local:8265"
SUBMITTER_POD = "train-q7x2d"
K8S, HTTP, SIDECAR, INTERACTIVE = "K8sJobMode", "HTTPMode", "SidecarMode", "InteractiveMode"


# --- building inputs ---------------------------------------------------------------------------


def make_intent(
    mode: str = K8S,
    *,
    selector: bool = False,
    cluster: str = CLUSTER,
    submission: str | None = SUBMISSION,
    annotations: Mapping[str, str] | None = None,
    **spec: Any,
) -> JobIntent:
    """A JobIntent read from an intent ConfigMap written the way the renderer writes it."""
    spec = {"entrypoint": "python main.py", "submissionMode": mode, **spec}
    if selector:
        spec["clusterSelector"] = {"ray.io/cluster": cluster}
    rendered = not selector and spec.get("suspend") is not True
    if mode == INTERACTIVE:
        submission = spec.get("jobId")
    elif spec.get("jobId"):
        submission = spec["jobId"]
    derived = {
        "submissionMode": mode,
        "clusterName": cluster,
        "clusterRendered": rendered,
        "submissionId": submission,
        "headServiceName": f"{cluster}-head-svc",
        "jobHeadServiceName": f"{JOB}-head-svc" if rendered else None,
        "dashboardURL": f"http://{cluster}-head-svc.{NS}.svc.cluster.local:8265",
        "submitterJobName": JOB if mode == K8S and spec.get("suspend") is not True else None,
        "submitterContainerName": "ray-job-submitter" if mode == SIDECAR and rendered else None,
        "headPodName": f"{cluster}-head-h1" if rendered else None,
        "workerPodNames": [w.replace(CLUSTER, cluster) for w in WORKERS] if rendered else [],
        "runtimeEnv": None,
    }
    doc = {
        "version": 1,
        "kind": "RayJob",
        "metadata": {"name": JOB, "namespace": NS, "labels": {}, "annotations": {}},
        "spec": spec,
        "derived": derived,
    }
    config_map: Manifest = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": naming.intent_configmap_name(JOB),
            "namespace": NS,
            "labels": {naming.ORIGIN_KIND: "RayJob", naming.ORIGIN_NAME: JOB},
            "annotations": dict(annotations or {}),
        },
        "data": {naming.INTENT_KEY: naming.canonical_json(doc)},
    }
    return parse_job_intent(config_map)


def head(**fields: Any) -> PodView:
    return PodView(name=HEAD, node_type="head", **{"phase": "Running", "ready": True, **fields})


def worker(index: int, **fields: Any) -> PodView:
    return PodView(
        name=WORKERS[index], node_type="worker", **{"phase": "Running", "ready": True, **fields}
    )


UP: tuple[PodView, ...] = (head(), worker(0), worker(1))
DOWN = RayFacts(reachable=False, error="connection refused")


def gated(*pods: str) -> SubmitterView:
    return SubmitterView(exists=True, gated_pods=pods)


def finished(at: float, **fields: Any) -> SubmitterView:
    """A submitter Job with condition Complete (or Failed, with failed=True) since `at`."""
    if fields.get("failed"):
        return SubmitterView(exists=True, finished_at=at, **fields)
    return SubmitterView(exists=True, complete=True, finished_at=at, **fields)


def ray_job(
    status: str, message: str = "", *, start: float | None = None, end: float | None = None
) -> Manifest:
    """One entry of `GET /api/jobs/` (times in milliseconds, as Ray gives them)."""
    info: Manifest = {"status": status, "message": message}
    if start is not None:
        info["start_time"] = int(start * 1000)
    if end is not None:
        info["end_time"] = int(end * 1000)
    return info


def ray(**jobs: Manifest) -> RayFacts:
    return RayFacts(reachable=True, jobs=jobs)


def facts(job_id: str, status: str, message: str = "", **times: float) -> RayFacts:
    return RayFacts(reachable=True, jobs={job_id: ray_job(status, message, **times)})


def step(
    intent: JobIntent,
    record: Record | None,
    *,
    now: float,
    pods: tuple[PodView, ...] = UP,
    submitter: SubmitterView | None = None,
    ray: RayFacts | None = None,
    timers: Settings | None = None,
) -> Decision:
    observation = Observation(intent, record, pods, submitter, ray, now)
    return decide(observation, timers)


def effects(decision: Decision) -> list[Action]:
    """The actions that change something outside the status (not Events)."""
    return [a for a in decision.actions if not isinstance(a, Event)]


def events(decision: Decision) -> list[tuple[str, str]]:
    return [(a.type, a.reason) for a in decision.actions if isinstance(a, Event)]


def started(intent: JobIntent) -> Record:
    """The record after the first pass at T0 (no pods yet)."""
    decision = step(intent, None, now=T0, pods=())
    return decision.record


def running(
    intent: JobIntent, *, now: float = T0 + 10, submitter: SubmitterView | None = None
) -> Record:
    """The record once the cluster came up at `now` (K8sJobMode: submitter ungated)."""
    reachable = ray()
    if intent.mode == HTTP:
        reachable = facts(SUBMISSION, "PENDING")
    decision = step(intent, started(intent), now=now, submitter=submitter, ray=reachable)
    assert decision.record.job_deployment_status == "Running", decision
    return decision.record


# --- New, changed intents, suspend -------------------------------------------------------------


def test_a_new_job_moves_to_initializing_with_its_names_and_start_time() -> None:
    intent = make_intent()
    decision = step(intent, None, now=T0, pods=())
    record = decision.record
    assert record.job_deployment_status == "Initializing"
    assert (record.job_id, record.ray_cluster_name, record.attempt) == (SUBMISSION, CLUSTER, 0)
    assert (record.start_time, record.end_time, record.job_status) == (T0, None, "")
    assert record.run_id == intent.run_id
    assert decision.actions == (
        Event("Normal", "Initializing", f"waiting for cluster {CLUSTER} to be ready"),
    )
    assert decision.wake_after is None  # no deadline: pod events bring the next pass
    assert record.to_status() == {
        "jobDeploymentStatus": "Initializing",
        "jobId": SUBMISSION,
        "rayClusterName": CLUSTER,
        "startTime": "2026-01-01T10:00:00Z",
        "succeeded": 0,
        "failed": 0,
        "rayClusterStatus": {
            "desiredWorkerReplicas": 2,
            "readyWorkerReplicas": 0,
            "availableWorkerReplicas": 0,
        },
    }


def test_spec_job_id_is_the_submission_id() -> None:
    record = started(make_intent(jobId="my-own-id"))
    assert record.job_id == "my-own-id"


def test_an_interactive_job_has_no_job_id_before_waiting_ends() -> None:
    # KubeRay sets status.jobId in New for every mode but InteractiveMode (§4.3 New).
    intent = make_intent(INTERACTIVE, jobId="typed-by-hand")
    assert started(intent).job_id is None


def test_a_changed_intent_starts_a_new_run_with_fresh_counters() -> None:
    old = make_intent(HTTP)
    done = step(old, running(old), now=T0 + 50, ray=facts(SUBMISSION, "SUCCEEDED")).record
    assert (done.job_deployment_status, done.succeeded) == ("Complete", 1)
    new = make_intent(HTTP, cluster="train-def34", submission="train-uvw56")
    assert new.run_id != old.run_id
    decision = step(new, done, now=T0 + 100, pods=())
    record = decision.record
    assert record.run_id == new.run_id
    assert record.job_deployment_status == "Initializing"
    assert (record.job_id, record.ray_cluster_name) == ("train-uvw56", "train-def34")
    assert (record.start_time, record.end_time) == (T0 + 100, None)
    assert (record.succeeded, record.failed, record.job_status, record.cleanup) == (0, 0, "", ())
    assert effects(decision) == []


def test_suspending_a_running_job_stops_it_and_keeps_counters_and_times() -> None:
    intent = make_intent(HTTP, backoffLimit=2, shutdownAfterJobFinishes=True)
    # Attempt 0 failed and was retried; attempt 1 is running.
    first = step(intent, running(intent), now=T0 + 20, ray=facts(SUBMISSION, "FAILED", "boom"))
    record = step(intent, first.record, now=T0 + 30, ray=facts(f"{SUBMISSION}-1", "RUNNING")).record
    assert (record.job_deployment_status, record.attempt, record.failed) == ("Running", 1, 1)
    suspended = make_intent(
        HTTP, backoffLimit=2, shutdownAfterJobFinishes=True, suspend=True, cluster="train-s0s0s"
    )
    decision = step(suspended, record, now=T0 + 40, pods=())
    assert effects(decision) == [StopJob(f"{SUBMISSION}-1", URL)]  # on the old cluster
    assert events(decision) == [("Normal", "Suspended")]
    out = decision.record
    assert out.job_deployment_status == "Suspended"
    assert (out.job_id, out.ray_cluster_name, out.job_status, out.reason) == (None, "", "", "")
    # KubeRay keeps startTime, endTime, succeeded and failed through Suspending (§4.3).
    assert (out.failed, out.succeeded, out.start_time) == (1, 0, record.start_time)
    assert out.to_status() == {
        "jobDeploymentStatus": "Suspended",
        "startTime": "2026-01-01T10:00:20Z",
        "succeeded": 0,
        "failed": 1,
    }
    # Nothing more while suspended.
    again = step(suspended, out, now=T0 + 500, pods=())
    assert (again.record, again.actions, again.wake_after) == (out, (), None)
    # Resuming starts a new run from New, counters kept: one retry is left of two.
    resumed = step(intent, out, now=T0 + 600, pods=()).record
    assert resumed.job_deployment_status == "Initializing"
    assert (resumed.job_id, resumed.attempt, resumed.failed) == (SUBMISSION, 0, 1)
    assert resumed.start_time == T0 + 600


def test_a_job_created_suspended_goes_straight_to_suspended() -> None:
    intent = make_intent(suspend=True, shutdownAfterJobFinishes=True)
    decision = step(intent, None, now=T0, pods=())
    assert decision.record.job_deployment_status == "Suspended"
    assert effects(decision) == []
    assert decision.record.start_time == T0


# --- Initializing ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pods", "ready", "available"),
    [
        ((), 0, 0),
        ((head(), worker(0)), 1, 1),  # a worker is missing
        ((head(), worker(0), worker(1, ready=False)), 1, 2),  # Running, not Ready
        ((head(), worker(0), worker(1, phase="Pending")), 1, 1),
        ((head(ready=False), worker(0), worker(1)), 2, 2),  # the head is not Ready
        ((worker(0), worker(1)), 2, 2),  # no head
        ((head(deleting=True), worker(0), worker(1)), 2, 2),
    ],
)
def test_initializing_waits_until_head_and_every_worker_are_running_and_ready(
    pods: tuple[PodView, ...], ready: int, available: int
) -> None:
    intent = make_intent()
    decision = step(intent, started(intent), now=T0 + 5, pods=pods, ray=ray(), submitter=gated("p"))
    record = decision.record
    assert record.job_deployment_status == "Initializing"
    assert effects(decision) == []
    assert (record.desired_workers, record.ready_workers, record.available_workers) == (
        2,
        ready,
        available,
    )
    assert record.to_status()["rayClusterStatus"] == {
        "desiredWorkerReplicas": 2,
        "readyWorkerReplicas": ready,
        "availableWorkerReplicas": available,
    }
    assert decision.wake_after is None


def test_pods_of_other_clusters_do_not_count() -> None:
    intent = make_intent()
    stranger = PodView(name="other-head", node_type="head", phase="Running", ready=True)
    decision = step(intent, started(intent), now=T0 + 5, pods=(stranger, head(), worker(0)))
    assert decision.record.job_deployment_status == "Initializing"


def test_cluster_selector_waits_for_the_selected_clusters_pods_whatever_their_names() -> None:
    intent = make_intent(HTTP, selector=True, cluster="shared")
    assert intent.cluster_pods == ()
    shared_head = PodView(name="shared-head-x", node_type="head", phase="Running", ready=True)
    shared_worker = PodView(name="shared-w-y", node_type="worker", phase="Running", ready=False)
    record = started(intent)
    waiting = step(intent, record, now=T0 + 1, pods=(shared_head, shared_worker), ray=ray())
    assert waiting.record.job_deployment_status == "Initializing"
    assert (waiting.record.desired_workers, waiting.record.ready_workers) == (1, 0)
    no_head = step(
        intent, record, now=T0 + 1, pods=(dataclasses.replace(shared_worker, ready=True),)
    )
    assert no_head.record.job_deployment_status == "Initializing"
    ready_worker = dataclasses.replace(shared_worker, ready=True)
    up = step(intent, record, now=T0 + 2, pods=(shared_head, ready_worker), ray=ray())
    assert up.record.job_deployment_status == "Running"
    assert effects(up) == [Submit(SUBMISSION)]
    assert up.record.ready_workers == 1


def test_ready_pods_wait_for_a_dashboard_that_answers() -> None:
    intent = make_intent()
    record = started(intent)
    for answer in (None, DOWN):
        decision = step(intent, record, now=T0 + 5, ray=answer, submitter=gated(SUBMITTER_POD))
        assert decision.record.job_deployment_status == "Initializing"
        assert effects(decision) == []
        assert decision.wake_after == 3.0
        assert decision.record.cluster_state == "ready"
        assert decision.record.ready_workers == 2
        assert decision.record.check_failure_start is None  # not a status check yet


def test_k8s_job_mode_ungates_the_submitter_and_runs_once_the_cluster_is_ready() -> None:
    intent = make_intent()
    decision = step(intent, started(intent), now=T0 + 5, ray=ray(), submitter=gated(SUBMITTER_POD))
    record = decision.record
    assert record.job_deployment_status == "Running"
    assert effects(decision) == [Ungate((SUBMITTER_POD,))]
    assert ("Normal", "ClusterReady") in events(decision)
    assert record.ungated
    assert record.dashboard_url == URL
    assert record.to_status()["rayClusterStatus"] == {
        "state": "ready",
        "desiredWorkerReplicas": 2,
        "readyWorkerReplicas": 2,
        "availableWorkerReplicas": 2,
    }
    assert decision.wake_after == 3.0


def test_k8s_job_mode_runs_even_before_the_job_controller_made_the_submitter_pod() -> None:
    intent = make_intent()
    decision = step(intent, started(intent), now=T0 + 5, ray=ray(), submitter=gated())
    assert decision.record.job_deployment_status == "Running"
    assert effects(decision) == []
    # A pod the Job controller makes later (or after a submitter pod failed) is ungated too.
    later = step(intent, decision.record, now=T0 + 8, ray=ray(), submitter=gated("train-late"))
    assert effects(later) == [Ungate(("train-late",))]


def test_http_mode_submits_and_runs_once_the_cluster_is_ready() -> None:
    intent = make_intent(HTTP)
    decision = step(intent, started(intent), now=T0 + 5, ray=ray())
    assert decision.record.job_deployment_status == "Running"
    assert effects(decision) == [Submit(SUBMISSION)]


def test_http_mode_does_not_submit_a_job_ray_already_has() -> None:
    # The syncer submitted, then stopped before it published Running: the restart must not
    # submit again.
    intent = make_intent(HTTP)
    decision = step(intent, started(intent), now=T0 + 5, ray=facts(SUBMISSION, "RUNNING"))
    assert decision.record.job_deployment_status == "Running"
    assert decision.record.job_status == "RUNNING"
    assert effects(decision) == []


def test_sidecar_mode_just_runs_once_the_cluster_is_ready() -> None:
    intent = make_intent(SIDECAR)
    decision = step(intent, started(intent), now=T0 + 5, ray=ray())
    assert decision.record.job_deployment_status == "Running"
    assert effects(decision) == []


def test_interactive_mode_waits_for_a_job_id_then_runs() -> None:
    intent = make_intent(INTERACTIVE)
    decision = step(intent, started(intent), now=T0 + 5, ray=ray())
    record = decision.record
    assert (record.job_deployment_status, record.job_id) == ("Waiting", None)
    assert effects(decision) == []
    assert decision.wake_after is None  # the intent ConfigMap's change brings the next pass
    assert not needs_dashboard(intent, record, cluster_ready=True)
    # The user hands the job id over with the intent ConfigMap's annotation.
    given_id = make_intent(INTERACTIVE, annotations={"kuberay.io/job-id": "raysubmit_42"})
    assert given_id.run_id == intent.run_id
    later = step(given_id, record, now=T0 + 9, ray=None)
    assert (later.record.job_deployment_status, later.record.job_id) == ("Running", "raysubmit_42")
    assert effects(later) == []
    polled = step(given_id, later.record, now=T0 + 12, ray=ray())
    assert polled.record.job_deployment_status == "Running"
    assert effects(polled) == []  # a missing job is only waited for, never submitted
    done = step(given_id, polled.record, now=T0 + 15, ray=facts("raysubmit_42", "SUCCEEDED"))
    assert (done.record.job_deployment_status, done.record.succeeded) == ("Complete", 1)


# --- deadlines ---------------------------------------------------------------------------------


def test_active_deadline_fails_an_initializing_job_without_a_retry() -> None:
    intent = make_intent(activeDeadlineSeconds=60, backoffLimit=3)
    record = started(intent)
    before = step(intent, record, now=T0 + 59, pods=())
    assert before.record.job_deployment_status == "Initializing"
    assert before.wake_after == 1.0
    decision = step(intent, record, now=T0 + 60, pods=())
    out = decision.record
    assert (out.job_deployment_status, out.reason) == ("Failed", "DeadlineExceeded")
    assert out.message == (
        f"The RayJob has passed the activeDeadlineSeconds. StartTime: {T0_GO}. "
        "ActiveDeadlineSeconds: 60"
    )
    assert (out.failed, out.succeeded, out.attempt, out.end_time) == (1, 0, 0, T0 + 60)
    assert effects(decision) == []  # nothing was submitted yet
    assert ("Warning", "Failed") in events(decision)


def test_pre_running_deadline_fails_an_initializing_job_and_is_retried() -> None:
    intent = make_intent(preRunningDeadlineSeconds=30)
    decision = step(intent, started(intent), now=T0 + 30, pods=())
    out = decision.record
    assert (out.job_deployment_status, out.reason) == ("Failed", "PreRunningDeadlineExceeded")
    assert out.message == (
        f"The RayJob has passed the preRunningDeadlineSeconds. StartTime: {T0_GO}. "
        "PreRunningDeadlineSeconds: 30"
    )
    retried = step(
        make_intent(preRunningDeadlineSeconds=30, backoffLimit=1),
        started(intent),
        now=T0 + 30,
        pods=(),
    )
    assert retried.record.job_deployment_status == "Initializing"
    assert (retried.record.attempt, retried.record.failed) == (1, 1)
    assert retried.record.start_time == T0 + 30  # deadlines count per attempt


def test_the_earliest_deadline_sets_the_wake_up() -> None:
    intent = make_intent(activeDeadlineSeconds=100, preRunningDeadlineSeconds=40)
    assert step(intent, started(intent), now=T0 + 10, pods=()).wake_after == 30.0


def test_pre_running_deadline_fails_a_waiting_job_but_the_active_deadline_does_not() -> None:
    intent = make_intent(INTERACTIVE, preRunningDeadlineSeconds=100, activeDeadlineSeconds=50)
    waiting = step(intent, started(intent), now=T0 + 5, ray=ray()).record
    assert waiting.job_deployment_status == "Waiting"
    # KubeRay checks only preRunningDeadlineSeconds in Waiting (§4.3).
    still = step(intent, waiting, now=T0 + 99, ray=ray())
    assert still.record.job_deployment_status == "Waiting"
    assert still.wake_after == 1.0
    out = step(intent, waiting, now=T0 + 100, ray=ray()).record
    assert (out.job_deployment_status, out.reason) == ("Failed", "PreRunningDeadlineExceeded")
    assert out.message == (
        f"The RayJob has passed the preRunningDeadlineSeconds. StartTime: {T0_GO}. "
        "PreRunningDeadlineSeconds: 100"
    )


def test_active_deadline_fails_a_running_job_stops_it_and_is_not_retried() -> None:
    intent = make_intent(HTTP, activeDeadlineSeconds=120, backoffLimit=2)
    record = running(intent)
    polled = step(intent, record, now=T0 + 100, ray=facts(SUBMISSION, "RUNNING"))
    assert polled.wake_after == 3.0
    decision = step(intent, polled.record, now=T0 + 120, ray=facts(SUBMISSION, "RUNNING"))
    out = decision.record
    assert effects(decision) == [StopJob(SUBMISSION)]
    assert (out.job_deployment_status, out.reason, out.job_status) == (
        "Failed",
        "DeadlineExceeded",
        "RUNNING",
    )
    assert out.message == (
        f"The RayJob has passed the activeDeadlineSeconds. StartTime: {T0_GO}. "
        "ActiveDeadlineSeconds: 120"
    )
    assert (out.failed, out.attempt, out.end_time) == (1, 0, T0 + 120)


def test_a_deadline_does_not_stop_a_job_ray_already_ended() -> None:
    intent = make_intent(K8S, activeDeadlineSeconds=120)
    record = running(intent, submitter=gated())
    ended = step(
        intent,
        record,
        now=T0 + 100,
        submitter=gated(),
        ray=facts(SUBMISSION, "SUCCEEDED", end=T0 + 99),
    ).record
    assert (ended.job_deployment_status, ended.job_status) == ("Running", "SUCCEEDED")
    decision = step(intent, ended, now=T0 + 120, submitter=gated(), ray=ray())
    assert decision.record.reason == "DeadlineExceeded"
    assert effects(decision) == []


# --- Running -----------------------------------------------------------------------------------


def test_running_copies_rays_status_message_and_times() -> None:
    intent = make_intent(HTTP)
    decision = step(
        intent,
        running(intent),
        now=T0 + 20,
        ray=facts(SUBMISSION, "RUNNING", "Job is running.", start=T0 + 12.5),
    )
    out = decision.record
    assert (out.job_deployment_status, out.job_status, out.message) == (
        "Running",
        "RUNNING",
        "Job is running.",
    )
    assert out.ray_start_time == T0 + 12.5
    assert out.to_status()["rayJobInfo"] == {"startTime": "2026-01-01T10:00:12Z"}
    assert effects(decision) == []


def test_running_keeps_the_cluster_status_current() -> None:
    # KubeRay copies the RayCluster status on every Running poll (§1.5).
    intent = make_intent(HTTP)
    decision = step(
        intent,
        running(intent),
        now=T0 + 20,
        pods=(head(), worker(0)),
        ray=facts(SUBMISSION, "RUNNING"),
    )
    out = decision.record
    assert (out.cluster_state, out.desired_workers, out.ready_workers) == ("ready", 2, 1)


@pytest.mark.parametrize(
    ("ray_status", "deployment", "reason", "succeeded", "failed"),
    [
        ("SUCCEEDED", "Complete", "", 1, 0),
        ("STOPPED", "Complete", "", 0, 0),  # STOPPED counts as neither (§4.5)
        ("FAILED", "Failed", "AppFailed", 0, 1),
    ],
)
def test_a_terminal_ray_status_ends_an_http_mode_job(
    ray_status: str, deployment: str, reason: str, succeeded: int, failed: int
) -> None:
    intent = make_intent(HTTP)
    answer = facts(SUBMISSION, ray_status, "the end", start=T0 + 11, end=T0 + 40)
    decision = step(intent, running(intent), now=T0 + 41, ray=answer)
    out = decision.record
    assert (out.job_deployment_status, out.reason, out.message) == (deployment, reason, "the end")
    assert (out.job_status, out.succeeded, out.failed) == (ray_status, succeeded, failed)
    assert out.end_time == T0 + 41  # when the syncer noticed, not Ray's end
    assert out.to_status()["rayJobInfo"] == {
        "startTime": "2026-01-01T10:00:11Z",
        "endTime": "2026-01-01T10:00:40Z",
    }
    assert effects(decision) == []
    assert decision.wake_after is None


def test_with_a_submitter_the_job_ends_only_once_the_submitter_finished() -> None:
    intent = make_intent(K8S)
    record = running(intent, submitter=gated())
    ended = step(
        intent,
        record,
        now=T0 + 40,
        submitter=gated(),
        ray=facts(SUBMISSION, "SUCCEEDED", end=T0 + 39),
    )
    assert (ended.record.job_deployment_status, ended.record.job_status) == (
        "Running",
        "SUCCEEDED",
    )
    assert ended.wake_after is not None
    assert ended.wake_after <= 30.0
    done = step(
        intent,
        ended.record,
        now=T0 + 42,
        submitter=finished(T0 + 41),
        ray=facts(SUBMISSION, "SUCCEEDED", end=T0 + 39),
    )
    assert (done.record.job_deployment_status, done.record.succeeded) == ("Complete", 1)


def test_a_failed_submitter_job_is_a_submission_failure() -> None:
    intent = make_intent(K8S)
    record = running(intent, submitter=gated())
    broken = finished(
        T0 + 30,
        failed=True,
        reason="BackoffLimitExceeded",
        message="Job has reached the specified backoff limit",
    )
    decision = step(intent, record, now=T0 + 31, submitter=broken, ray=ray())
    out = decision.record
    assert (out.job_deployment_status, out.reason, out.job_status) == (
        "Failed",
        "SubmissionFailed",
        "",
    )
    assert out.message == (
        "Job submission has failed. Reason: BackoffLimitExceeded. "
        "Message: Job has reached the specified backoff limit"
    )
    assert out.failed == 1


def test_a_failed_submitter_with_a_failed_ray_job_is_an_app_failure() -> None:
    intent = make_intent(K8S)
    record = running(intent, submitter=gated())
    seen = step(
        intent,
        record,
        now=T0 + 20,
        submitter=gated(),
        ray=facts(SUBMISSION, "FAILED", "exit 1", end=T0 + 19),
    ).record
    assert (seen.job_deployment_status, seen.job_status) == ("Running", "FAILED")
    broken = finished(T0 + 21, failed=True, reason="BackoffLimitExceeded", message="limit")
    # The dashboard answers: Ray's outcome decides, with Ray's message.
    out = step(
        intent,
        seen,
        now=T0 + 22,
        submitter=broken,
        ray=facts(SUBMISSION, "FAILED", "exit 1", end=T0 + 19),
    ).record
    assert (out.job_deployment_status, out.reason, out.message) == ("Failed", "AppFailed", "exit 1")
    # The dashboard is down: the stored jobStatus FAILED makes it AppFailed (§4.4), and
    # KubeRay keeps the message it had.
    out = step(intent, seen, now=T0 + 22, submitter=broken, ray=DOWN).record
    assert (out.job_deployment_status, out.reason, out.message) == ("Failed", "AppFailed", "exit 1")


def test_a_finished_submitter_whose_job_ray_does_not_know_is_an_app_failure() -> None:
    intent = make_intent(K8S)
    record = running(intent, submitter=gated())
    out = step(intent, record, now=T0 + 31, submitter=finished(T0 + 30), ray=ray()).record
    assert (out.job_deployment_status, out.reason) == ("Failed", "AppFailed")
    assert out.message == "Submitter completed but Ray job not found in RayCluster."


def test_a_finished_submitter_gives_ray_30_seconds_to_end_the_job() -> None:
    intent = make_intent(K8S)
    record = running(intent, submitter=gated())
    done_at = T0 + 60
    still = step(
        intent,
        record,
        now=done_at + 29,
        submitter=finished(done_at),
        ray=facts(SUBMISSION, "RUNNING"),
    )
    assert still.record.job_deployment_status == "Running"
    assert still.wake_after == 1.0
    out = step(
        intent,
        still.record,
        now=done_at + 30,
        submitter=finished(done_at),
        ray=facts(SUBMISSION, "RUNNING"),
    ).record
    assert (out.job_deployment_status, out.reason, out.job_status) == (
        "Failed",
        "JobDeploymentStatusTransitionGracePeriodExceeded",
        "FAILED",
    )
    assert out.message == (
        "The RayJob submitter finished at 2026-01-01 10:01:00 but the ray job did not reach "
        "terminal state within 30s"
    )
    # With the dashboard down the same timeout applies.
    down = step(intent, record, now=done_at + 30, submitter=finished(done_at), ray=DOWN).record
    assert down.reason == "JobDeploymentStatusTransitionGracePeriodExceeded"


def test_the_dashboard_is_asked_before_the_submitter_timeout_fails_a_job() -> None:
    # A deliberate difference: KubeRay checks the 30 s first and can fail a succeeded job.
    intent = make_intent(K8S)
    record = running(intent, submitter=gated())
    out = step(
        intent,
        record,
        now=T0 + 500,
        submitter=finished(T0 + 60),
        ray=facts(SUBMISSION, "SUCCEEDED", end=T0 + 59),
    ).record
    assert (out.job_deployment_status, out.reason, out.succeeded) == ("Complete", "", 1)


def test_the_dashboard_is_asked_before_a_failed_submitter_fails_a_job() -> None:
    # The same deliberate difference: a submitter that failed after Ray finished the job
    # (its log stream broke, say) does not turn a success into SubmissionFailed.
    intent = make_intent(K8S)
    broken = finished(T0 + 60, failed=True, reason="BackoffLimitExceeded", message="limit")
    out = step(
        intent,
        running(intent, submitter=gated()),
        now=T0 + 61,
        submitter=broken,
        ray=facts(SUBMISSION, "SUCCEEDED", end=T0 + 59),
    ).record
    assert (out.job_deployment_status, out.reason, out.succeeded) == ("Complete", "", 1)


@pytest.mark.parametrize(
    ("ray_status", "deployment"), [("SUCCEEDED", "Complete"), ("FAILED", "Failed")]
)
def test_the_transition_grace_period_ends_a_job_whose_submitter_never_finishes(
    ray_status: str, deployment: str
) -> None:
    intent = make_intent(K8S)
    record = running(intent, submitter=gated())
    ended = step(
        intent,
        record,
        now=T0 + 100,
        submitter=gated(),
        ray=facts(SUBMISSION, ray_status, end=T0 + 90),
    ).record
    assert ended.job_deployment_status == "Running"
    before = step(intent, ended, now=T0 + 389, submitter=gated(), ray=DOWN)
    assert before.record.job_deployment_status == "Running"
    out = step(intent, ended, now=T0 + 390, submitter=gated(), ray=DOWN).record
    assert (out.job_deployment_status, out.reason) == (
        deployment,
        "JobDeploymentStatusTransitionGracePeriodExceeded",
    )
    assert out.message == (
        "JobDeploymentStatus does not transition to Complete or Failed within the grace period "
        "after JobStatus reaches a terminal state."
    )
    assert (out.succeeded, out.failed) == ((1, 0) if ray_status == "SUCCEEDED" else (0, 1))


def test_an_unreachable_dashboard_fails_the_job_after_the_status_check_timeout() -> None:
    intent = make_intent(HTTP, backoffLimit=2)
    record = running(intent)
    first = step(intent, record, now=T0 + 60, ray=DOWN)
    assert first.record.job_deployment_status == "Running"
    assert first.record.check_failure_start == T0 + 60
    assert first.record.to_status()["jobStatusCheckFailureStartTime"] == "2026-01-01T10:01:00Z"
    assert first.wake_after == 3.0
    assert effects(first) == []
    later = step(intent, first.record, now=T0 + 359, ray=DOWN)
    assert later.record.check_failure_start == T0 + 60
    assert later.record.job_deployment_status == "Running"
    decision = step(intent, later.record, now=T0 + 360, ray=DOWN)
    out = decision.record
    assert (out.job_deployment_status, out.reason) == ("Failed", "JobStatusCheckTimeoutExceeded")
    assert out.message == (
        "Job status checks have been failing since 2026-01-01 10:01:00; exceeded timeout of 300s"
    )
    assert (out.failed, out.attempt) == (1, 0)  # never retried


def test_a_successful_status_check_clears_the_failure_timer() -> None:
    intent = make_intent(HTTP)
    first = step(intent, running(intent), now=T0 + 60, ray=DOWN).record
    ok = step(intent, first, now=T0 + 200, ray=facts(SUBMISSION, "RUNNING")).record
    assert ok.check_failure_start is None
    assert "jobStatusCheckFailureStartTime" not in ok.to_status()
    again = step(intent, ok, now=T0 + 400, ray=DOWN).record
    assert (again.job_deployment_status, again.check_failure_start) == ("Running", T0 + 400)


def test_the_status_check_timeout_follows_the_settings() -> None:
    intent = make_intent(HTTP)
    timers = Settings(status_check_timeout_s=10)
    first = step(intent, running(intent), now=T0 + 60, ray=DOWN, timers=timers).record
    out = step(intent, first, now=T0 + 70, ray=DOWN, timers=timers).record
    assert out.message.endswith("exceeded timeout of 10s")


def test_http_mode_resubmits_a_job_ray_lost() -> None:
    intent = make_intent(HTTP)
    seen = step(intent, running(intent), now=T0 + 20, ray=facts(SUBMISSION, "RUNNING")).record
    decision = step(intent, seen, now=T0 + 23, ray=ray())  # a new head without GCS FT
    assert decision.record.job_deployment_status == "Running"
    assert effects(decision) == [Submit(SUBMISSION)]


def test_k8s_job_mode_waits_for_its_submitter_to_submit() -> None:
    intent = make_intent(K8S)
    decision = step(
        intent, running(intent, submitter=gated()), now=T0 + 20, submitter=gated(), ray=ray()
    )
    assert decision.record.job_deployment_status == "Running"
    assert effects(decision) == []


def test_sidecar_mode_reads_the_submitter_containers_exit() -> None:
    intent = make_intent(SIDECAR)
    record = running(intent)
    # Ray finished but the sidecar still prints logs: not yet.
    out = step(intent, record, now=T0 + 30, ray=facts(SUBMISSION, "SUCCEEDED", end=T0 + 29))
    assert out.record.job_deployment_status == "Running"
    exited = (
        head(sidecar_exit_code=0, sidecar_reason="Completed", sidecar_finished_at=T0 + 31),
        worker(0),
        worker(1),
    )
    done = step(
        intent,
        out.record,
        now=T0 + 32,
        pods=exited,
        ray=facts(SUBMISSION, "SUCCEEDED", end=T0 + 29),
    ).record
    assert (done.job_deployment_status, done.succeeded) == ("Complete", 1)


def test_sidecar_mode_a_nonzero_exit_is_a_submission_failure() -> None:
    intent = make_intent(SIDECAR)
    crashed = (
        head(sidecar_exit_code=1, sidecar_reason="Error", sidecar_finished_at=T0 + 20),
        worker(0),
        worker(1),
    )
    out = step(
        intent, running(intent), now=T0 + 21, pods=crashed, ray=facts(SUBMISSION, "RUNNING")
    ).record
    assert (out.job_deployment_status, out.reason) == ("Failed", "SubmissionFailed")
    assert (
        out.message == "Ray head pod container ray-job-submitter terminated with exit code 1: Error"
    )


@pytest.mark.parametrize("pods", [(worker(0), worker(1)), (head(deleting=True), worker(0))])
def test_sidecar_mode_without_its_head_pod_is_an_app_failure(pods: tuple[PodView, ...]) -> None:
    intent = make_intent(SIDECAR)
    out = step(intent, running(intent), now=T0 + 21, pods=pods, ray=DOWN).record
    assert (out.job_deployment_status, out.reason, out.message) == (
        "Failed",
        "AppFailed",
        "Ray head pod not found.",
    )


# --- counters and retries (§4.5) ---------------------------------------------------------------


def test_backoff_limit_one_fail_then_succeed_counts_one_of_each() -> None:
    intent = make_intent(K8S, backoffLimit=1)
    record = running(intent, submitter=gated())
    broken = finished(T0 + 30, failed=True, reason="BackoffLimitExceeded", message="limit")
    decision = step(intent, record, now=T0 + 31, submitter=broken, ray=facts(SUBMISSION, "RUNNING"))
    retry = decision.record
    # The retry happens in the same pass: Failed is never published between attempts.
    assert (retry.job_deployment_status, retry.attempt, retry.job_id) == (
        "Running",
        1,
        f"{SUBMISSION}-1",
    )
    assert (retry.failed, retry.succeeded, retry.end_time, retry.start_time) == (
        1,
        0,
        None,
        T0 + 31,
    )
    assert (retry.reason, retry.message, retry.job_status) == ("", "", "")
    # The old attempt still runs in Ray: stop it; the rendered submitter has run, so the
    # retry is submitted over HTTP.
    assert effects(decision) == [StopJob(SUBMISSION), Submit(f"{SUBMISSION}-1")]
    assert ("Warning", "Retrying") in events(decision)
    # The old submitter's state no longer matters.
    ok = step(
        intent,
        retry,
        now=T0 + 60,
        submitter=broken,
        ray=ray(**{SUBMISSION: ray_job("STOPPED"), f"{SUBMISSION}-1": ray_job("SUCCEEDED")}),
    )
    out = ok.record
    assert (out.job_deployment_status, out.succeeded, out.failed) == ("Complete", 1, 1)
    assert out.end_time == T0 + 60
    assert out.to_status()["jobId"] == f"{SUBMISSION}-1"


def test_retries_are_counted_until_the_backoff_limit_is_used_up() -> None:
    intent = make_intent(HTTP, backoffLimit=1)
    first = step(intent, running(intent), now=T0 + 20, ray=facts(SUBMISSION, "FAILED", "e1"))
    assert (first.record.attempt, first.record.failed) == (1, 1)
    assert effects(first) == [Submit(f"{SUBMISSION}-1")]  # the old one had ended: no stop
    last = step(intent, first.record, now=T0 + 40, ray=facts(f"{SUBMISSION}-1", "FAILED", "e2"))
    out = last.record
    assert (out.job_deployment_status, out.reason, out.message) == ("Failed", "AppFailed", "e2")
    assert (out.failed, out.attempt, out.end_time) == (2, 1, T0 + 40)
    assert effects(last) == []


def test_a_sidecar_retry_is_submitted_over_http() -> None:
    intent = make_intent(SIDECAR, backoffLimit=1)
    crashed = (
        head(sidecar_exit_code=2, sidecar_reason="Error", sidecar_finished_at=T0 + 20),
        worker(0),
        worker(1),
    )
    decision = step(intent, running(intent), now=T0 + 21, pods=crashed, ray=ray())
    assert decision.record.attempt == 1
    assert Submit(f"{SUBMISSION}-1") in effects(decision)
    # The ended sidecar no longer fails the retry.
    later = step(
        intent, decision.record, now=T0 + 30, pods=crashed, ray=facts(f"{SUBMISSION}-1", "RUNNING")
    )
    assert later.record.job_deployment_status == "Running"


def test_a_submitter_timeout_retry_stops_the_job_ray_still_runs() -> None:
    # The 30 s timeout forces jobStatus FAILED, but Ray still runs the old attempt on the
    # cluster the retry reuses.
    intent = make_intent(K8S, backoffLimit=1)
    decision = step(
        intent,
        running(intent, submitter=gated()),
        now=T0 + 100,
        submitter=finished(T0 + 60),
        ray=DOWN,
    )
    assert decision.record.attempt == 1
    assert StopJob(SUBMISSION) in effects(decision)


def test_cluster_selector_jobs_are_not_retried() -> None:
    intent = make_intent(HTTP, selector=True, backoffLimit=2)
    shared = (PodView(name="h", node_type="head", phase="Running", ready=True),)
    record = step(intent, started(intent), now=T0 + 5, pods=shared, ray=ray()).record
    out = step(intent, record, now=T0 + 9, pods=shared, ray=facts(SUBMISSION, "FAILED")).record
    assert (out.job_deployment_status, out.failed, out.attempt) == ("Failed", 1, 0)


# --- cleanup (§5) ------------------------------------------------------------------------------

ALL_PODS = (HEAD, *WORKERS)
END = T0 + 100


def finish(
    intent: JobIntent, status: str = "SUCCEEDED", *, pods: tuple[PodView, ...] = UP
) -> Decision:
    """The pass in which an HTTPMode job ends, at END."""
    decision = step(
        intent, running(intent), now=END, pods=pods, ray=facts(SUBMISSION, status, end=END - 1)
    )
    assert decision.record.job_deployment_status in ("Complete", "Failed")
    assert decision.record.end_time == END
    return decision


def released(pods: tuple[PodView, ...], names: Iterable[str]) -> tuple[PodView, ...]:
    """The pods after a Shutdown in `stop` mode."""
    chosen = set(names)
    return tuple(
        dataclasses.replace(p, shutdown_requested=True) if p.name in chosen else p for p in pods
    )


def test_shutdown_after_finish_releases_every_cluster_pod_after_the_ttl() -> None:
    intent = make_intent(HTTP, shutdownAfterJobFinishes=True, ttlSecondsAfterFinished=60)
    done = finish(intent)
    assert effects(done) == []
    assert done.wake_after == 60.0
    waiting = step(intent, done.record, now=END + 59)
    assert (effects(waiting), waiting.wake_after) == ([], 1.0)
    decision = step(intent, done.record, now=END + 60)
    assert effects(decision) == [Shutdown(ALL_PODS, "DeleteCluster")]
    assert ("Normal", "DeleteCluster") in events(decision)
    assert decision.record.cleanup == ("DeleteCluster",)
    assert decision.wake_after is None
    # In the same world (the release failed after the status was published) the pods are
    # released again, with no second Event and no change to the record; once they are, not.
    again = step(intent, decision.record, now=END + 61)
    assert effects(again) == [Shutdown(ALL_PODS, "DeleteCluster")]
    assert events(again) == [] and again.record == decision.record
    assert effects(step(intent, decision.record, now=END + 61, pods=released(UP, ALL_PODS))) == []


@pytest.mark.parametrize("outcome", ["SUCCEEDED", "FAILED", "STOPPED"])
def test_shutdown_after_finish_applies_to_every_outcome(outcome: str) -> None:
    intent = make_intent(HTTP, shutdownAfterJobFinishes=True)
    assert effects(finish(intent, outcome)) == [Shutdown(ALL_PODS, "DeleteCluster")]


def test_shutdown_after_finish_applies_after_a_deadline_too() -> None:
    intent = make_intent(HTTP, shutdownAfterJobFinishes=True, activeDeadlineSeconds=50)
    decision = step(intent, running(intent), now=T0 + 50, ray=facts(SUBMISSION, "RUNNING"))
    assert effects(decision) == [StopJob(SUBMISSION), Shutdown(ALL_PODS, "DeleteCluster")]


def test_shutdown_skips_pods_that_ended_are_released_or_are_being_deleted() -> None:
    intent = make_intent(HTTP, shutdownAfterJobFinishes=True)
    pods = (head(), worker(0, phase="Succeeded"), worker(1, deleting=True))
    assert effects(finish(intent, pods=pods)) == [Shutdown((HEAD,), "DeleteCluster")]
    done = finish(intent)
    gone = (head(shutdown_requested=True),)
    decision = step(intent, done.record, now=END + 1, pods=gone)
    assert effects(decision) == []


def rules(*items: tuple[str, str, str, int]) -> Manifest:
    """deletionStrategy with rules of (policy, condition key, value, ttl)."""
    return {
        "deletionRules": [
            {"policy": policy, "condition": {key: value, "ttlSeconds": ttl}}
            for policy, key, value, ttl in items
        ]
    }


def test_deletion_rules_run_in_order_of_their_ttls() -> None:
    strategy = rules(
        ("DeleteWorkers", "jobStatus", "SUCCEEDED", 0),
        ("DeleteCluster", "jobStatus", "SUCCEEDED", 60),
        ("DeleteSelf", "jobStatus", "SUCCEEDED", 120),
    )
    intent = make_intent(HTTP, deletionStrategy=strategy)
    first = finish(intent)
    assert effects(first) == [Shutdown(WORKERS, "DeleteWorkers")]
    assert first.record.cleanup == ("DeleteWorkers",)
    world = released(UP, WORKERS)
    waiting = step(intent, first.record, now=END + 1, pods=world)
    assert (effects(waiting), waiting.wake_after) == ([], 59.0)
    second = step(intent, first.record, now=END + 60, pods=world)
    assert effects(second) == [Shutdown((HEAD,), "DeleteCluster")]
    assert second.record.cleanup == ("DeleteWorkers", "DeleteCluster")
    assert second.wake_after == 60.0
    world = released(world, (HEAD,))
    third = step(intent, second.record, now=END + 120, pods=world)
    assert effects(third) == [DeleteSubmitter()]
    assert third.record.cleanup == ("DeleteWorkers", "DeleteCluster", "DeleteSelf")
    assert third.wake_after is None
    assert effects(step(intent, third.record, now=END + 500, pods=world)) == []


def test_the_most_destructive_overdue_rule_wins_and_the_others_are_skipped() -> None:
    strategy = rules(
        ("DeleteWorkers", "jobStatus", "SUCCEEDED", 5),
        ("DeleteCluster", "jobStatus", "SUCCEEDED", 10),
        ("DeleteNone", "jobStatus", "SUCCEEDED", 0),
    )
    intent = make_intent(HTTP, deletionStrategy=strategy)
    ended = finish(intent)
    assert (effects(ended), ended.wake_after) == ([], 5.0)
    # The syncer was away until both were overdue: one action, the most destructive.
    done = step(intent, ended.record, now=END + 30)
    assert effects(done) == [Shutdown(ALL_PODS, "DeleteCluster")]
    assert done.record.cleanup == ("DeleteCluster",)
    later = step(intent, done.record, now=END + 90, pods=released(UP, ALL_PODS))
    assert effects(later) == [] and later.record == done.record


def test_delete_workers_releases_only_the_workers() -> None:
    strategy = rules(("DeleteWorkers", "jobDeploymentStatus", "Failed", 5))
    intent = make_intent(HTTP, deletionStrategy=strategy)
    done = finish(intent, "FAILED")
    assert done.wake_after == 5.0
    assert effects(step(intent, done.record, now=END + 5)) == [Shutdown(WORKERS, "DeleteWorkers")]


def test_delete_self_also_deletes_the_submitter() -> None:
    intent = make_intent(HTTP, deletionStrategy=rules(("DeleteSelf", "jobStatus", "FAILED", 0)))
    assert effects(finish(intent, "FAILED")) == [
        Shutdown(ALL_PODS, "DeleteSelf"),
        DeleteSubmitter(),
    ]


def test_delete_none_does_nothing() -> None:
    intent = make_intent(HTTP, deletionStrategy=rules(("DeleteNone", "jobStatus", "SUCCEEDED", 0)))
    done = finish(intent)
    later = step(intent, done.record, now=END + 500)
    assert (effects(done), effects(later), later.record.cleanup, later.wake_after) == (
        [],
        [],
        (),
        None,
    )


def test_rules_match_by_job_status_or_by_deployment_status() -> None:
    strategy = rules(
        ("DeleteWorkers", "jobStatus", "FAILED", 0),
        ("DeleteCluster", "jobDeploymentStatus", "Failed", 0),
    )
    intent = make_intent(HTTP, deletionStrategy=strategy)
    # An app failure is both FAILED and Failed: the cluster rule wins.
    assert effects(finish(intent, "FAILED")) == [Shutdown(ALL_PODS, "DeleteCluster")]
    # A success matches neither rule.
    assert effects(finish(intent, "SUCCEEDED")) == []
    # A deadline leaves jobStatus RUNNING: a jobStatus FAILED rule does not match.
    deadline = make_intent(
        HTTP,
        deletionStrategy=rules(("DeleteWorkers", "jobStatus", "FAILED", 0)),
        activeDeadlineSeconds=50,
    )
    out = step(deadline, running(deadline), now=T0 + 50, ray=facts(SUBMISSION, "RUNNING"))
    assert out.record.reason == "DeadlineExceeded"
    assert effects(out) == [StopJob(SUBMISSION)]


def test_a_stopped_job_matches_no_deletion_rule() -> None:
    strategy = rules(
        ("DeleteCluster", "jobStatus", "SUCCEEDED", 0),
        ("DeleteWorkers", "jobStatus", "FAILED", 0),
        ("DeleteSelf", "jobDeploymentStatus", "Failed", 0),
    )
    intent = make_intent(HTTP, deletionStrategy=strategy)
    done = finish(intent, "STOPPED")
    assert done.record.job_deployment_status == "Complete"
    assert (effects(done), done.wake_after) == ([], None)


def test_legacy_policies_follow_the_ray_outcome_and_the_top_level_ttl() -> None:
    strategy = {"onSuccess": {"policy": "DeleteWorkers"}, "onFailure": {"policy": "DeleteCluster"}}
    intent = make_intent(
        HTTP, deletionStrategy=strategy, shutdownAfterJobFinishes=True, ttlSecondsAfterFinished=10
    )
    ok = finish(intent, "SUCCEEDED")
    assert (effects(ok), ok.wake_after) == ([], 10.0)
    assert effects(step(intent, ok.record, now=END + 10)) == [Shutdown(WORKERS, "DeleteWorkers")]
    bad = finish(intent, "FAILED")
    assert effects(step(intent, bad.record, now=END + 10)) == [Shutdown(ALL_PODS, "DeleteCluster")]
    # STOPPED picks no policy, and neither does "" (a submission failure).
    stopped = finish(intent, "STOPPED")
    assert (effects(stopped), stopped.wake_after) == ([], None)
    k8s = make_intent(K8S, deletionStrategy=strategy, shutdownAfterJobFinishes=True)
    broken = finished(T0 + 30, failed=True, reason="DeadlineExceeded", message="too slow")
    out = step(k8s, running(k8s, submitter=gated()), now=T0 + 31, submitter=broken, ray=ray())
    assert out.record.reason == "SubmissionFailed"
    assert (effects(out), out.wake_after) == ([], None)


def test_legacy_delete_none_does_nothing() -> None:
    strategy = {"onSuccess": {"policy": "DeleteNone"}, "onFailure": {"policy": "DeleteNone"}}
    intent = make_intent(HTTP, deletionStrategy=strategy)
    assert effects(finish(intent)) == []


@pytest.mark.parametrize(
    "cleanup",
    [
        {"shutdownAfterJobFinishes": True},
        {"deletionStrategy": rules(("DeleteSelf", "jobStatus", "SUCCEEDED", 0))},
    ],
)
def test_cluster_selector_jobs_never_clean_up(cleanup: Manifest) -> None:
    intent = make_intent(HTTP, selector=True, **cleanup)
    shared = (PodView(name="h", node_type="head", phase="Running", ready=True),)
    record = step(intent, started(intent), now=T0 + 5, pods=shared, ray=ray()).record
    done = step(intent, record, now=T0 + 9, pods=shared, ray=facts(SUBMISSION, "SUCCEEDED"))
    assert done.record.job_deployment_status == "Complete"
    later = step(intent, done.record, now=T0 + 900, pods=shared)
    assert (effects(done), effects(later), later.wake_after) == ([], [], None)


def test_no_cleanup_configured_leaves_everything() -> None:
    intent = make_intent(HTTP)
    done = finish(intent)
    later = step(intent, done.record, now=END + 9999)
    assert (effects(done), effects(later), later.wake_after) == ([], [], None)


# --- idempotence: a restart that sees the same state decides the same --------------------------


@dataclasses.dataclass(frozen=True)
class World:
    """What the syncer observes, and how its actions change it."""

    pods: tuple[PodView, ...] = UP
    submitter: SubmitterView | None = None
    ray: RayFacts | None = None

    def after(self, actions: Iterable[Action]) -> World:
        world = self
        for action in actions:
            if isinstance(action, Ungate):
                assert world.submitter is not None
                left = tuple(p for p in world.submitter.gated_pods if p not in action.pods)
                world = dataclasses.replace(
                    world, submitter=dataclasses.replace(world.submitter, gated_pods=left)
                )
            elif isinstance(action, Submit):
                assert world.ray is not None
                jobs = {**world.ray.jobs, action.submission_id: ray_job("PENDING")}
                world = dataclasses.replace(world, ray=RayFacts(reachable=True, jobs=jobs))
            elif isinstance(action, StopJob) and world.ray is not None:
                jobs = dict(world.ray.jobs)
                if action.submission_id in jobs:
                    jobs[action.submission_id] = ray_job("STOPPED")
                world = dataclasses.replace(world, ray=RayFacts(world.ray.reachable, jobs))
            elif isinstance(action, Shutdown):
                world = dataclasses.replace(world, pods=released(world.pods, action.pods))
        return world


def check_restart_safe(intent: JobIntent, decision: Decision, world: World, now: float) -> None:
    """Deciding again on the published record: no new side effect, the same counters."""
    settled = world.after(decision.actions)
    again = step(
        intent,
        decision.record,
        now=now,
        pods=settled.pods,
        submitter=settled.submitter,
        ray=settled.ray,
    )
    assert effects(again) == [], (decision, again)
    out = decision.record
    assert (again.record.succeeded, again.record.failed) == (out.succeeded, out.failed)
    assert (again.record.job_deployment_status, again.record.attempt) == (
        out.job_deployment_status,
        out.attempt,
    )
    # Even when the world has not caught up yet (a stale cache), nothing is counted or
    # cleaned up twice, and the record is already where this world leads.
    stale = step(
        intent, decision.record, now=now, pods=world.pods, submitter=world.submitter, ray=world.ray
    )
    assert stale.record == out
    # A release may be issued again (it is idempotent, and a release that failed after the
    # publish must be), but only of the pods this pass released, and with no Event.
    freed = {pod for a in decision.actions if isinstance(a, Shutdown) for pod in a.pods}
    for action in stale.actions:
        assert not isinstance(action, DeleteSubmitter | Event), (decision, stale)
        if isinstance(action, Shutdown):
            assert set(action.pods) <= freed, (decision, stale)


@pytest.mark.parametrize("mode", [K8S, HTTP, SIDECAR])
def test_every_step_of_a_retried_job_is_restart_safe(mode: str) -> None:
    intent = make_intent(
        mode,
        backoffLimit=1,
        deletionStrategy=rules(
            ("DeleteWorkers", "jobStatus", "SUCCEEDED", 0),
            ("DeleteSelf", "jobStatus", "SUCCEEDED", 30),
        ),
    )
    retry_id = f"{SUBMISSION}-1"
    sub = gated(SUBMITTER_POD) if mode == K8S else None
    script: list[tuple[float, World]] = [
        (T0, World(pods=(), submitter=sub)),
        (T0 + 5, World(pods=(head(), worker(0)), submitter=sub, ray=ray())),
        (T0 + 10, World(submitter=sub, ray=ray())),
        (T0 + 20, World(submitter=gated(), ray=facts(SUBMISSION, "RUNNING"))),
        (T0 + 30, World(submitter=gated(), ray=facts(SUBMISSION, "FAILED", "boom", end=T0 + 29))),
        (
            T0 + 40,
            World(
                pods=(head(sidecar_exit_code=1, sidecar_finished_at=T0 + 35), worker(0), worker(1))
                if mode == SIDECAR
                else UP,
                submitter=finished(T0 + 35, failed=True, reason="BackoffLimitExceeded", message="x")
                if mode == K8S
                else None,
                ray=facts(SUBMISSION, "FAILED", "boom", end=T0 + 29),
            ),
        ),
        (T0 + 50, World(ray=ray(**{SUBMISSION: ray_job("FAILED"), retry_id: ray_job("RUNNING")}))),
        (T0 + 60, World(ray=ray(**{retry_id: ray_job("SUCCEEDED", end=T0 + 59)}))),
        (T0 + 90, World(ray=ray(**{retry_id: ray_job("SUCCEEDED", end=T0 + 59)}))),
        (T0 + 95, World(pods=released(UP, WORKERS))),
    ]
    record: Record | None = None
    seen: list[str] = []
    for now, world in script:
        decision = step(
            intent, record, now=now, pods=world.pods, submitter=world.submitter, ray=world.ray
        )
        check_restart_safe(intent, decision, world, now)
        record = decision.record
        seen.append(record.job_deployment_status)
    assert record is not None
    assert (record.job_deployment_status, record.succeeded, record.failed) == ("Complete", 1, 1)
    assert record.cleanup == ("DeleteWorkers", "DeleteSelf")
    assert "Running" in seen


MODES = st.sampled_from([K8S, HTTP, SIDECAR, INTERACTIVE])
RAY_STATUS = st.sampled_from(["PENDING", "RUNNING", "SUCCEEDED", "FAILED", "STOPPED", ""])
# Mostly healthy pods, so that random worlds reach Running and beyond.
POD_FAULTS: list[Manifest] = [{}] * 6 + [{"ready": False}, {"phase": "Pending", "ready": False}]
POD_STATE: st.SearchStrategy[Manifest] = st.sampled_from(POD_FAULTS) | st.fixed_dictionaries(
    {
        "phase": st.sampled_from(["Pending", "Running", "Succeeded", "Failed"]),
        "ready": st.booleans(),
        "deleting": st.booleans(),
        "shutdown_requested": st.booleans(),
    }
)


@st.composite
def worlds(draw: st.DrawFn) -> World:
    pods = []
    for name, kind in ((HEAD, "head"), (WORKERS[0], "worker"), (WORKERS[1], "worker")):
        if draw(st.integers(0, 7)) == 0:
            continue  # missing
        exit_code = draw(st.none() | st.integers(0, 2)) if kind == "head" else None
        state: Manifest = {"phase": "Running", "ready": True, **draw(POD_STATE)}
        pods.append(
            PodView(
                name=name,
                node_type=kind,
                sidecar_exit_code=exit_code,
                sidecar_finished_at=None if exit_code is None else T0 + draw(st.integers(0, 900)),
                **state,
            )
        )
    submitter = None
    if draw(st.integers(0, 3)) > 0:
        done = draw(st.sampled_from(["", "", "complete", "failed"]))
        submitter = SubmitterView(
            exists=draw(st.integers(0, 5)) > 0,
            failed=done == "failed",
            complete=done == "complete",
            reason="BackoffLimitExceeded" if done == "failed" else "",
            finished_at=T0 + draw(st.integers(0, 900)) if done else None,
            gated_pods=tuple(draw(st.lists(st.sampled_from(["s-1", "s-2"]), unique=True))),
        )
    answer = None
    choice = draw(st.integers(0, 5))
    if choice == 0:
        answer = DOWN
    elif choice > 1:
        ids = [SUBMISSION, f"{SUBMISSION}-1", f"{SUBMISSION}-2", "raysubmit_1"]
        jobs = {
            job_id: ray_job(
                draw(RAY_STATUS),
                start=T0 + draw(st.floats(0, 900)),
                end=draw(st.none() | st.floats(0, 900).map(lambda s: T0 + s)),
            )
            for job_id in draw(st.lists(st.sampled_from(ids), unique=True))
        }
        answer = RayFacts(reachable=True, jobs=jobs)
    return World(pods=tuple(pods), submitter=submitter, ray=answer)


SPECS = st.fixed_dictionaries(
    {},
    optional={
        "backoffLimit": st.integers(0, 2),
        "activeDeadlineSeconds": st.integers(1, 600),
        "preRunningDeadlineSeconds": st.integers(1, 600),
        "shutdownAfterJobFinishes": st.booleans(),
        "ttlSecondsAfterFinished": st.integers(0, 100),
        "deletionStrategy": st.sampled_from(
            [
                rules(
                    ("DeleteWorkers", "jobStatus", "SUCCEEDED", 0),
                    ("DeleteSelf", "jobDeploymentStatus", "Failed", 20),
                ),
                rules(
                    ("DeleteCluster", "jobStatus", "FAILED", 5),
                    ("DeleteNone", "jobStatus", "SUCCEEDED", 0),
                ),
                {"onSuccess": {"policy": "DeleteCluster"}, "onFailure": {"policy": "DeleteSelf"}},
            ]
        ),
    },
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mode=MODES,
    spec=SPECS,
    selector=st.booleans(),
    job_id=st.booleans(),
    steps=st.lists(st.tuples(st.integers(0, 400), worlds()), min_size=1, max_size=8),
)
def test_deciding_never_raises_and_a_second_decision_counts_nothing_new(
    mode: str, spec: Manifest, selector: bool, job_id: bool, steps: list[tuple[int, World]]
) -> None:
    annotations = {"kuberay.io/job-id": "raysubmit_1"} if job_id else {}
    intent = make_intent(mode, selector=selector, annotations=annotations, **spec)
    record: Record | None = None
    now = T0
    for gap, world in steps:
        now += gap
        decision = step(
            intent, record, now=now, pods=world.pods, submitter=world.submitter, ray=world.ray
        )
        again = step(
            intent,
            decision.record,
            now=now,
            pods=world.pods,
            submitter=world.submitter,
            ray=world.ray,
        )
        out = decision.record
        assert (again.record.succeeded, again.record.failed) == (out.succeeded, out.failed)
        assert again.record == out  # a fixed point: a restart decides the same
        # Nothing is deleted or announced twice; pods a recorded policy covers are released
        # again only while they are live (a release that failed after the publish).
        assert [a for a in again.actions if isinstance(a, DeleteSubmitter | Event)] == []
        live = {p.name for p in world.pods if not (p.shutdown_requested or p.ended or p.deleting)}
        for action in again.actions:
            if isinstance(action, Shutdown):
                strongest = max(out.cleanup, key=lambda x: POLICY_RANK.get(x, 0))
                assert action.policy == strongest
                assert set(action.pods) <= live
        assert decision.wake_after is None or decision.wake_after >= 0
        assert out.failed <= intent.backoff_limit + 1 or out.attempt == 0
        assert Record.from_json(json.loads(json.dumps(out.to_json()))) == out
        record = out


# --- the published record ----------------------------------------------------------------------


def test_to_status_uses_kuberays_field_names() -> None:
    record = Record(
        run_id="r",
        job_deployment_status="Failed",
        job_status="FAILED",
        job_id=SUBMISSION,
        ray_cluster_name=CLUSTER,
        dashboard_url=URL,
        start_time=T0,
        end_time=T0 + 60,
        reason="AppFailed",
        message="boom",
        ray_start_time=T0 + 1,
        ray_end_time=T0 + 59,
        succeeded=0,
        failed=1,
        check_failure_start=T0 + 30,
        cluster_state="ready",
        desired_workers=2,
        ready_workers=2,
        available_workers=2,
    )
    assert record.to_status() == {
        "jobDeploymentStatus": "Failed",
        "jobStatus": "FAILED",
        "jobId": SUBMISSION,
        "rayClusterName": CLUSTER,
        "dashboardURL": URL.removeprefix("http://"),  # no scheme, as KubeRay
        "startTime": "2026-01-01T10:00:00Z",
        "endTime": "2026-01-01T10:01:00Z",
        "reason": "AppFailed",
        "message": "boom",
        "succeeded": 0,
        "failed": 1,
        "jobStatusCheckFailureStartTime": "2026-01-01T10:00:30Z",
        "rayJobInfo": {"startTime": "2026-01-01T10:00:01Z", "endTime": "2026-01-01T10:00:59Z"},
        "rayClusterStatus": {
            "state": "ready",
            "desiredWorkerReplicas": 2,
            "readyWorkerReplicas": 2,
            "availableWorkerReplicas": 2,
        },
    }


RECORDS = st.builds(
    Record,
    run_id=st.text(max_size=20),
    job_deployment_status=st.sampled_from(
        ["Initializing", "Waiting", "Running", "Complete", "Failed", "Suspended"]
    ),
    job_status=RAY_STATUS,
    job_id=st.none() | st.text(min_size=1, max_size=20),
    ray_cluster_name=st.text(min_size=1, max_size=20),  # the counts are published with it
    dashboard_url=st.text(max_size=30),
    start_time=st.none() | st.floats(0, 4e9),
    end_time=st.none() | st.floats(0, 4e9),
    reason=st.text(max_size=20),
    message=st.text(max_size=40),
    ray_start_time=st.none() | st.floats(1, 4e9),
    ray_end_time=st.none() | st.floats(1, 4e9),
    succeeded=st.integers(0, 5),
    failed=st.integers(0, 5),
    check_failure_start=st.none() | st.floats(0, 4e9),
    attempt=st.integers(0, 5),
    cluster_state=st.sampled_from(["", "ready"]),
    desired_workers=st.integers(0, 9),
    ready_workers=st.integers(0, 9),
    available_workers=st.integers(0, 9),
    cleanup=st.lists(
        st.sampled_from(["DeleteWorkers", "DeleteCluster", "DeleteSelf"]), unique=True
    ).map(tuple),
    ungated=st.booleans(),
)


@settings(max_examples=60, deadline=None)
@given(record=RECORDS)
def test_a_record_survives_its_json_round_trip(record: Record) -> None:
    text = json.dumps(record.to_json(), sort_keys=True)
    assert Record.from_json(json.loads(text)) == record


def test_a_record_reads_back_from_kuberays_fields_alone() -> None:
    record = Record.from_json(
        {
            "status": {
                "jobDeploymentStatus": "Running",
                "jobId": SUBMISSION,
                "startTime": "2026-01-01T10:00:00Z",
                "rayJobInfo": {"startTime": "2026-01-01T10:00:05Z"},
                "failed": 1,
            }
        }
    )
    assert (record.job_deployment_status, record.job_id, record.start_time) == (
        "Running",
        SUBMISSION,
        T0,
    )
    assert (record.ray_start_time, record.failed, record.attempt) == (T0 + 5, 1, 0)
    assert Record.from_json({}) == Record()


def test_needs_dashboard_only_for_a_ready_initializing_or_a_running_job() -> None:
    intent = make_intent()
    record = started(intent)
    assert not needs_dashboard(intent, None, cluster_ready=True)
    assert not needs_dashboard(intent, record, cluster_ready=False)
    assert needs_dashboard(intent, record, cluster_ready=True)
    assert needs_dashboard(intent, running(intent, submitter=gated()), cluster_ready=False)
    other = make_intent(submission="train-other")
    assert not needs_dashboard(other, record, cluster_ready=True)
    done = dataclasses.replace(record, job_deployment_status="Complete")
    assert not needs_dashboard(intent, done, cluster_ready=True)


# --- the real renderer's intent -----------------------------------------------------------------


@pytest.mark.parametrize("mode", [K8S, HTTP])
def test_a_rendered_rayjob_runs_to_completion_and_shuts_its_cluster_down(mode: str) -> None:
    objects = render(rayjob("demo", mode=mode, workers=2, shutdownAfterJobFinishes=True), "team")
    config_map = next(o for o in objects if o["metadata"]["name"] == "demo-kuberay-intent")
    intent = parse_job_intent(config_map)
    pods = tuple(
        PodView(
            name=o["metadata"]["name"],
            node_type=o["metadata"]["labels"][naming.RAY_NODE_TYPE],
            phase="Running",
            ready=True,
        )
        for o in objects
        if o["kind"] == "Pod"
    )
    assert len(pods) == 3
    assert intent.cluster_pods == tuple(p.name for p in pods)
    sub = gated("demo-abcde") if mode == K8S else None
    record = step(intent, None, now=T0, pods=(), submitter=sub).record
    up = step(intent, record, now=T0 + 5, pods=pods, submitter=sub, ray=ray())
    assert up.record.job_deployment_status == "Running"
    job_id = intent.submission_id
    assert job_id is not None
    first_effect = Ungate(("demo-abcde",)) if mode == K8S else Submit(job_id)
    assert effects(up) == [first_effect]
    done_sub = finished(T0 + 20) if mode == K8S else None
    done = step(
        intent,
        up.record,
        now=T0 + 21,
        pods=pods,
        submitter=done_sub,
        ray=facts(job_id, "SUCCEEDED", end=T0 + 19),
    )
    assert (done.record.job_deployment_status, done.record.succeeded) == ("Complete", 1)
    assert effects(done) == [Shutdown(tuple(p.name for p in pods), "DeleteCluster")]


def test_sidecar_head_whose_submitter_already_ended_still_counts_as_ready() -> None:
    intent = make_intent("SidecarMode")
    head = PodView(
        name=intent.head_pod or "",
        node_type="head",
        phase="Running",
        ready=False,  # the ended sidecar makes the pod not Ready
        sidecar_exit_code=0,
        sidecar_finished_at=T0,
    )
    workers = tuple(
        PodView(name=n, node_type="worker", phase="Running", ready=True) for n in intent.worker_pods
    )
    obs = Observation(intent, None, (head, *workers), None, None, T0)
    assert cluster_counts(obs)[0] is True
