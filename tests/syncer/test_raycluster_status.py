"""KubeRay's calculateStatus rules (raycluster.md §7) over pod sets, as its unit tests pose them."""

from __future__ import annotations

import pytest

from syncer.raycluster.status import (
    HEAD_POD_READY,
    PROVISIONED,
    REPLICA_FAILURE,
    SUSPENDED_CONDITION,
    SUSPENDING,
    ClusterSpecView,
    ClusterStatus,
    Condition,
    ContainerView,
    GroupView,
    PodView,
    ReconcileError,
    StatusError,
    compute,
    set_condition,
)

T0, T1, T2 = "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z", "2026-01-01T00:02:00Z"
READY = Condition("Ready", "True", "", "", T0)
NOT_READY = Condition(
    "Ready", "False", "ContainersNotReady", "containers with unready status: [ray-head]", T0
)
SPEC = ClusterSpecView(groups=(GroupView(replicas=1, min_replicas=1, max_replicas=5),))


def head(phase: str = "Running", ready: Condition | None = READY, **kw: object) -> PodView:
    return PodView("c-head-x", "head", phase, ip="10.0.0.1", ready=ready, **kw)  # type: ignore[arg-type]


def worker(i: int = 0, phase: str = "Running", ready: Condition | None = READY) -> PodView:
    return PodView(f"c-g-worker-x-{i}", "worker", phase, ip=f"10.0.1.{i}", ready=ready)


def status_of(kind: str, status: ClusterStatus) -> tuple[str, str, str] | None:
    found = status.condition(kind)
    return None if found is None else (found.status, found.reason, found.message)


def test_all_pods_running_and_the_count_matches_is_ready() -> None:
    out = compute(ClusterStatus(), SPEC, [head(), worker()], T0)
    assert out.state == "ready"
    assert out.state_transition_times == {"ready": T0}
    assert (out.ready_worker_replicas, out.available_worker_replicas) == (1, 1)
    assert (out.desired_worker_replicas, out.min_worker_replicas, out.max_worker_replicas) == (
        1,
        1,
        5,
    )
    assert (out.head_pod_name, out.head_pod_ip) == ("c-head-x", "10.0.0.1")
    assert status_of(HEAD_POD_READY, out) == ("True", "HeadPodRunningAndReady", "")
    assert status_of(PROVISIONED, out) == (
        "True",
        "AllPodRunningAndReadyFirstTime",
        "All Ray Pods are ready for the first time",
    )
    # A healthy, never-suspended cluster carries both suspension conditions False.
    assert status_of(SUSPENDED_CONDITION, out) == ("False", SUSPENDED_CONDITION, "")
    assert status_of(SUSPENDING, out) == ("False", SUSPENDING, "")
    assert out.condition(REPLICA_FAILURE) is None


def test_a_missing_worker_leaves_the_state_as_it_was() -> None:
    out = compute(ClusterStatus(), SPEC, [head()], T0)
    assert out.state == ""
    assert out.state_transition_times == {}
    # The pods that exist are all running: provisioned regardless of the count.
    assert status_of(PROVISIONED, out)[0] == "True"  # type: ignore[index]


def test_ready_is_not_left_when_a_worker_fails_and_provisioned_stays_true() -> None:
    ready = compute(ClusterStatus(), SPEC, [head(), worker()], T0)
    failed = compute(ready, SPEC, [head(), worker(phase="Failed", ready=None)], T1)
    assert failed.state == "ready"  # KubeRay never moves ready back except to suspended
    assert (failed.ready_worker_replicas, failed.available_worker_replicas) == (0, 0)
    provisioned = failed.condition(PROVISIONED)
    assert provisioned is not None and (provisioned.status, provisioned.last_transition_time) == (
        "True",
        T0,
    )


def test_a_running_pod_without_a_ready_condition_counts_as_running() -> None:
    out = compute(ClusterStatus(), SPEC, [head(ready=None), worker(ready=None)], T0)
    assert out.state == "ready"
    assert out.ready_worker_replicas == 0  # ready needs the condition True
    assert out.available_worker_replicas == 1
    assert status_of(HEAD_POD_READY, out) == ("False", "Unknown", "")


def test_an_unready_pod_blocks_ready_and_provisioning() -> None:
    out = compute(
        ClusterStatus(), SPEC, [head(), worker(ready=Condition("Ready", "False", "", "", T0))], T0
    )
    assert out.state == ""
    assert status_of(PROVISIONED, out) == (
        "False",
        "RayClusterPodsProvisioning",
        "RayCluster Pods are being provisioned for first time",
    )


def test_head_pod_not_found() -> None:
    out = compute(ClusterStatus(), SPEC, [worker()], T0)
    assert status_of(HEAD_POD_READY, out) == ("False", "HeadPodNotFound", "Head Pod not found")
    assert (out.head_pod_name, out.head_pod_ip) == ("", "")


def test_head_containers_not_ready_takes_the_first_waiting_or_terminated_container() -> None:
    pod = head(
        ready=NOT_READY,
        containers=(
            ContainerView("autoscaler", "running"),
            ContainerView("ray-head", "waiting", "CrashLoopBackOff", "back-off 5m0s"),
            ContainerView("other", "terminated", "Error", "exit 1"),
        ),
    )
    out = compute(ClusterStatus(), SPEC, [pod, worker()], T0)
    assert status_of(HEAD_POD_READY, out) == (
        "False",
        "CrashLoopBackOff",
        "containers with unready status: [ray-head]; ray-head: back-off 5m0s",
    )


def test_two_head_pods_fail_the_computation() -> None:
    with pytest.raises(StatusError, match="2 head pods"):
        compute(ClusterStatus(), SPEC, [head(), head()], T0)


def test_suspended_groups_count_nothing_and_max_is_capped() -> None:
    spec = ClusterSpecView(
        groups=(
            GroupView(replicas=3, min_replicas=1, max_replicas=5, suspended=True),
            GroupView(replicas=None, min_replicas=2, num_of_hosts=2),
            GroupView(replicas=9, min_replicas=0, max_replicas=4),
        )
    )
    out = compute(ClusterStatus(), spec, [], T0)
    # null replicas counts as min (2 x 2 hosts); 9 is clamped to max 4; the suspended group is 0.
    assert out.desired_worker_replicas == 8
    assert out.min_worker_replicas == 4
    assert out.max_worker_replicas == 2147483647  # int32 max x 2 + 4, capped


def test_replica_failure_set_by_a_marker_and_removed_by_a_clean_pass() -> None:
    error = ReconcileError("pods is forbidden: exceeded quota", "FailedCreateWorkerPod")
    failed = compute(ClusterStatus(), SPEC, [head()], T0, error)
    assert status_of(REPLICA_FAILURE, failed) == (
        "True",
        "FailedCreateWorkerPod",
        "FailedCreateWorkerPod\npods is forbidden: exceeded quota",
    )
    assert failed.state == ""  # an error blocks ready
    other = compute(failed, SPEC, [head()], T1, ReconcileError("conflict"))
    assert other.condition(REPLICA_FAILURE) == failed.condition(REPLICA_FAILURE)  # unchanged
    clean = compute(other, SPEC, [head(), worker()], T2)
    assert clean.condition(REPLICA_FAILURE) is None
    assert clean.state == "ready"


def test_suspend_runs_suspending_then_suspended_then_resumes() -> None:
    running = compute(ClusterStatus(), SPEC, [head(), worker()], T0)
    spec = ClusterSpecView(groups=SPEC.groups, suspend=True)
    suspending = compute(running, spec, [head(), worker()], T1)
    assert status_of(SUSPENDING, suspending)[0] == "True"  # type: ignore[index]
    done = compute(suspending, spec, [], T2)
    assert done.state == "suspended"
    assert done.state_transition_times == {"ready": T0, "suspended": T2}
    assert status_of(SUSPENDED_CONDITION, done)[0] == "True"  # type: ignore[index]
    assert status_of(SUSPENDING, done)[0] == "False"  # type: ignore[index]
    assert status_of(PROVISIONED, done) == (
        "False",
        "RayClusterPodsProvisioning",
        "RayCluster has been suspended",
    )
    # Still suspended with suspend unset: only an explicit false resumes.
    unset = compute(done, ClusterSpecView(groups=SPEC.groups), [], T2)
    assert status_of(SUSPENDED_CONDITION, unset)[0] == "True"  # type: ignore[index]
    resumed = compute(done, ClusterSpecView(groups=SPEC.groups, suspend=False), [], T2)
    assert status_of(SUSPENDED_CONDITION, resumed)[0] == "False"  # type: ignore[index]


def test_set_condition_moves_the_transition_time_only_with_the_status() -> None:
    first = set_condition((), "X", "False", "A", "a", T0)
    same = set_condition(first, "X", "False", "B", "b", T1)
    assert same == (Condition("X", "False", "B", "b", T0),)
    flipped = set_condition(same, "X", "True", "C", "c", T2)
    assert flipped == (Condition("X", "True", "C", "c", T2),)


def test_head_ready_condition_keeps_its_time_while_the_head_stays_ready() -> None:
    first = compute(ClusterStatus(), SPEC, [head(), worker()], T0)
    later = compute(first, SPEC, [head(), worker()], T2)
    assert later.condition(HEAD_POD_READY) == first.condition(HEAD_POD_READY)
    assert later.state_transition_times == {"ready": T0}
