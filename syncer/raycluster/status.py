"""KubeRay's RayCluster status from the cluster's spec and pods (raycluster.md §7).

`compute` is `calculateStatus` as a pure function: the previous status, the spec's worker
groups, the cluster's pod views and the time of this pass in, the next status out. It owns
the replica counters, `state` and its transition times, the head pod name and IP, and the
conditions `ReplicaFailure`, `HeadPodReady`, `RayClusterProvisioned`, `RayClusterSuspending`
and `RayClusterSuspended` with `metav1.Condition` semantics (`set_condition`: the transition
time moves only when the status does). Not here yet: desired CPU/memory/GPU/TPU, the head
Service and endpoints (they need Quantity arithmetic and the Service), and any writing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final

MAX_INT32: Final = 2147483647

READY: Final = "ready"
SUSPENDED: Final = "suspended"

HEAD_POD_READY: Final = "HeadPodReady"
PROVISIONED: Final = "RayClusterProvisioned"
REPLICA_FAILURE: Final = "ReplicaFailure"
SUSPENDING: Final = "RayClusterSuspending"
SUSPENDED_CONDITION: Final = "RayClusterSuspended"

# The reconcile error markers that set ReplicaFailure (§7.3 item 1).
FAILURE_MARKERS: Final = frozenset(
    {
        "FailedDeleteAllPods",
        "FailedDeleteHeadPod",
        "FailedCreateHeadPod",
        "FailedDeleteWorkerPod",
        "FailedCreateWorkerPod",
    }
)


class StatusError(ValueError):
    """The status cannot be computed (KubeRay then writes nothing)."""


@dataclass(frozen=True, slots=True)
class Condition:
    """One `metav1.Condition` (no observedGeneration, as KubeRay)."""

    type: str
    status: str
    reason: str
    message: str
    last_transition_time: str


@dataclass(frozen=True, slots=True)
class ContainerView:
    """One entry of `status.containerStatuses`: its state (`waiting`, `terminated`, ...)."""

    name: str
    state: str
    reason: str = ""
    message: str = ""


@dataclass(frozen=True, slots=True)
class PodView:
    """What the status reads of one pod of the cluster."""

    name: str
    node_type: str  # `ray.io/node-type`: head or worker
    phase: str
    ip: str = ""
    ready: Condition | None = None  # the pod's Ready condition, if it has one
    containers: tuple[ContainerView, ...] = ()


@dataclass(frozen=True, slots=True)
class GroupView:
    """One worker group's counts as the spec holds them (None: absent)."""

    replicas: int | None = None
    min_replicas: int = 0
    max_replicas: int = MAX_INT32
    num_of_hosts: int = 1
    suspended: bool = False


@dataclass(frozen=True, slots=True)
class ClusterSpecView:
    """The parts of a RayCluster spec the status reads; `suspend` None means unset."""

    groups: tuple[GroupView, ...] = ()
    suspend: bool | None = None


@dataclass(frozen=True, slots=True)
class ReconcileError:
    """The error of the pass that computes the status; `marker` as KubeRay's, or None."""

    text: str
    marker: str | None = None


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    """The fields of `RayCluster.status` this module computes."""

    state: str = ""
    reason: str = ""
    ready_worker_replicas: int = 0
    available_worker_replicas: int = 0
    desired_worker_replicas: int = 0
    min_worker_replicas: int = 0
    max_worker_replicas: int = 0
    head_pod_name: str = ""
    head_pod_ip: str = ""
    state_transition_times: Mapping[str, str] = field(default_factory=dict)
    conditions: tuple[Condition, ...] = ()

    def condition(self, kind: str) -> Condition | None:
        """The condition of type `kind`, if present."""
        return next((c for c in self.conditions if c.type == kind), None)


def set_condition(
    conditions: Sequence[Condition],
    kind: str,
    status: str,
    reason: str,
    message: str,
    now: str,
) -> tuple[Condition, ...]:
    """`meta.SetStatusCondition`: add or update; the transition time moves with the status."""
    out: list[Condition] = []
    found = False
    for existing in conditions:
        if existing.type != kind:
            out.append(existing)
            continue
        found = True
        moved = existing.status != status
        out.append(
            Condition(
                kind, status, reason, message, now if moved else existing.last_transition_time
            )
        )
    if not found:
        out.append(Condition(kind, status, reason, message, now))
    return tuple(out)


def remove_condition(conditions: Sequence[Condition], kind: str) -> tuple[Condition, ...]:
    """`meta.RemoveStatusCondition`."""
    return tuple(c for c in conditions if c.type != kind)


def _clamp(group: GroupView) -> int:
    replicas = group.min_replicas if group.replicas is None else group.replicas
    return max(group.min_replicas, min(group.max_replicas, replicas))


def desired_workers(spec: ClusterSpecView) -> int:
    """Σ `clamp(replicas, min, max) x numOfHosts`, 0 for suspended groups or cluster (§1.6)."""
    if spec.suspend is True:
        return 0
    return sum(_clamp(g) * g.num_of_hosts for g in spec.groups if not g.suspended)


def all_pods_running(pods: Sequence[PodView]) -> bool:
    """At least one pod, all Running, none with a Ready condition other than True (§7.2)."""
    return bool(pods) and all(
        p.phase == "Running" and (p.ready is None or p.ready.status == "True") for p in pods
    )


def _head_ready(
    head: PodView | None, conditions: tuple[Condition, ...], now: str
) -> tuple[Condition, ...]:
    if head is None:
        return set_condition(
            conditions, HEAD_POD_READY, "False", "HeadPodNotFound", "Head Pod not found", now
        )
    if head.ready is None:
        return set_condition(conditions, HEAD_POD_READY, "False", "Unknown", "", now)
    reason, message = head.ready.reason, head.ready.message
    if head.ready.status == "True" and not reason:
        reason = "HeadPodRunningAndReady"
    if reason == "ContainersNotReady":
        for container in head.containers:
            if container.state in ("waiting", "terminated"):
                reason = container.reason
                detail = f"{container.name}: {container.message}"
                message = f"{message}; {detail}" if message else detail
                break
    return set_condition(conditions, HEAD_POD_READY, head.ready.status, reason, message, now)


def _is_true(conditions: Sequence[Condition], kind: str) -> bool:
    return any(c.type == kind and c.status == "True" for c in conditions)


def compute(
    previous: ClusterStatus,
    spec: ClusterSpecView,
    pods: Sequence[PodView],
    now: str,
    error: ReconcileError | None = None,
) -> ClusterStatus:
    """The next status of one cluster (§7): counters, state, head, conditions in KubeRay's order."""
    heads = [p for p in pods if p.node_type == "head"]
    if len(heads) > 1:
        raise StatusError(f"{len(heads)} head pods found: {', '.join(p.name for p in heads)}")
    head = heads[0] if heads else None
    workers = [p for p in pods if p.node_type == "worker"]
    live = [g for g in spec.groups if not g.suspended]
    desired = desired_workers(spec)
    running = all_pods_running(pods)

    state, reason = previous.state, previous.reason
    if error is None and len(pods) == desired + 1 and running:
        state, reason = READY, ""
    elif spec.suspend is True and not pods:
        state = SUSPENDED
    times = dict(previous.state_transition_times)
    if state != previous.state and state:
        times[state] = now

    conditions = previous.conditions
    if error is None:
        conditions = remove_condition(conditions, REPLICA_FAILURE)
    elif error.marker in FAILURE_MARKERS:
        message = f"{error.marker}\n{error.text}"
        conditions = set_condition(
            conditions, REPLICA_FAILURE, "True", error.marker or "", message, now
        )
    conditions = _head_ready(head, conditions, now)
    if not _is_true(conditions, PROVISIONED) and not _is_true(conditions, SUSPENDED_CONDITION):
        if running:
            conditions = set_condition(
                conditions,
                PROVISIONED,
                "True",
                "AllPodRunningAndReadyFirstTime",
                "All Ray Pods are ready for the first time",
                now,
            )
        else:
            conditions = set_condition(
                conditions,
                PROVISIONED,
                "False",
                "RayClusterPodsProvisioning",
                "RayCluster Pods are being provisioned for first time",
                now,
            )
    if _is_true(conditions, SUSPENDING) and not pods:
        conditions = set_condition(
            conditions,
            PROVISIONED,
            "False",
            "RayClusterPodsProvisioning",
            "RayCluster has been suspended",
            now,
        )
        conditions = set_condition(conditions, SUSPENDING, "False", SUSPENDING, "", now)
        conditions = set_condition(
            conditions, SUSPENDED_CONDITION, "True", SUSPENDED_CONDITION, "", now
        )
    elif _is_true(conditions, SUSPENDED_CONDITION):
        if spec.suspend is False:
            conditions = set_condition(
                conditions, SUSPENDED_CONDITION, "False", SUSPENDED_CONDITION, "", now
            )
    else:
        conditions = set_condition(
            conditions, SUSPENDED_CONDITION, "False", SUSPENDED_CONDITION, "", now
        )
        suspending = "True" if spec.suspend is True else "False"
        conditions = set_condition(conditions, SUSPENDING, suspending, SUSPENDING, "", now)

    return replace(
        previous,
        state=state,
        reason=reason,
        ready_worker_replicas=sum(
            1
            for p in workers
            if p.phase == "Running" and p.ready is not None and p.ready.status == "True"
        ),
        available_worker_replicas=sum(1 for p in workers if p.phase == "Running"),
        desired_worker_replicas=desired,
        min_worker_replicas=sum(g.min_replicas * g.num_of_hosts for g in live),
        max_worker_replicas=min(sum(g.max_replicas * g.num_of_hosts for g in live), MAX_INT32),
        head_pod_name=head.name if head else "",
        head_pod_ip=head.ip if head else "",
        state_transition_times=times,
        conditions=conditions,
    )
