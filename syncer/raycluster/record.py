"""A RayCluster's status record: KubeRay's `status` as JSON, read back and compared.

`to_json` writes `RayCluster.status` in KubeRay's shape (camelCase, integers and strings
omitted when 0 or empty, quantities always present) under `status`; `from_json` reads the
previous status back for the next `status.compute`; `meaningful` is the part whose change
KubeRay writes (§7: state, reason, the replica counters, endpoints, head, conditions),
so a pass that only moves `lastUpdateTime` or the desired resources writes nothing.
`flat_fields` are the few `kubectl`/health keys beside `status.json`. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from syncer.raycluster import status as cluster_status

Manifest = dict[str, Any]

_COUNTERS: Final = (
    ("readyWorkerReplicas", "ready_worker_replicas"),
    ("availableWorkerReplicas", "available_worker_replicas"),
    ("desiredWorkerReplicas", "desired_worker_replicas"),
    ("minWorkerReplicas", "min_worker_replicas"),
    ("maxWorkerReplicas", "max_worker_replicas"),
)
_MEANINGFUL: Final = ("state", "reason", *(k for k, _ in _COUNTERS), "endpoints", "head")


@dataclass(frozen=True, slots=True)
class Record:
    """The computed status plus what `status.compute` leaves to the reconciler."""

    status: cluster_status.ClusterStatus
    desired: Mapping[str, str] = field(default_factory=dict)  # cpu, memory, gpu, tpu
    head_service_name: str = ""
    head_service_ip: str = ""
    endpoints: Mapping[str, str] = field(default_factory=dict)
    last_update_time: str = ""


def _condition_json(c: cluster_status.Condition) -> Manifest:
    out: Manifest = {
        "type": c.type,
        "status": c.status,
        "lastTransitionTime": c.last_transition_time,
    }
    if c.reason:
        out["reason"] = c.reason
    out["message"] = c.message
    return out


def to_json(record: Record) -> Manifest:
    """The status ConfigMap's `status.json`: `{"status": <KubeRay's RayCluster status>}`."""
    s = record.status
    body: Manifest = {}
    if s.state:
        body["state"] = s.state
    if s.reason:
        body["reason"] = s.reason
    for key, attr in _COUNTERS:
        value = getattr(s, attr)
        if value:
            body[key] = value
    body["desiredCPU"] = record.desired.get("cpu", "0")
    body["desiredMemory"] = record.desired.get("memory", "0")
    body["desiredGPU"] = record.desired.get("gpu", "0")
    body["desiredTPU"] = record.desired.get("tpu", "0")
    if record.endpoints:
        body["endpoints"] = dict(sorted(record.endpoints.items()))
    head = {
        "podIP": s.head_pod_ip,
        "podName": s.head_pod_name,
        "serviceIP": record.head_service_ip,
        "serviceName": record.head_service_name,
    }
    body["head"] = {k: v for k, v in head.items() if v}
    if record.last_update_time:
        body["lastUpdateTime"] = record.last_update_time
    if s.state_transition_times:
        body["stateTransitionTimes"] = dict(sorted(s.state_transition_times.items()))
    if s.conditions:
        body["conditions"] = [_condition_json(c) for c in s.conditions]
    return {"status": body}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def from_json(document: Manifest) -> Record:
    """A record read back (only the fields the next computation carries over)."""
    body = document.get("status")
    if not isinstance(body, dict):
        raise ValueError("no status object")
    conditions = tuple(
        cluster_status.Condition(
            _text(c.get("type")),
            _text(c.get("status")),
            _text(c.get("reason")),
            _text(c.get("message")),
            _text(c.get("lastTransitionTime")),
        )
        for c in body.get("conditions") or []
        if isinstance(c, dict) and _text(c.get("type"))
    )
    times = body.get("stateTransitionTimes") or {}
    endpoints = body.get("endpoints") or {}
    head = body.get("head") or {}
    previous = cluster_status.ClusterStatus(
        state=_text(body.get("state")),
        reason=_text(body.get("reason")),
        state_transition_times={str(k): v for k, v in times.items() if isinstance(v, str)},
        conditions=conditions,
        head_pod_name=_text(head.get("podName")),
        head_pod_ip=_text(head.get("podIP")),
    )
    return Record(
        status=previous,
        endpoints={str(k): v for k, v in endpoints.items() if isinstance(v, str)},
        head_service_name=_text(head.get("serviceName")),
        head_service_ip=_text(head.get("serviceIP")),
    )


def meaningful(document: Manifest) -> Manifest:
    """The part of a `to_json` document whose change is written (KubeRay's comparison)."""
    body = document.get("status") or {}
    kept = {k: body.get(k) for k in _MEANINGFUL}
    kept["conditions"] = [
        {k: c.get(k) for k in ("type", "status", "reason", "message")}
        for c in body.get("conditions") or []
    ]
    return kept


def condition_status(s: cluster_status.ClusterStatus, kind: str) -> str:
    """`True`, `False` or `` (absent) for one condition."""
    found = s.condition(kind)
    return found.status if found is not None else ""


def flat_fields(record: Record) -> dict[str, str]:
    """The flat keys beside `status.json` (for `kubectl` and the Argo CD health script)."""
    s = record.status
    return {
        "state": s.state,
        "desiredWorkers": str(s.desired_worker_replicas),
        "availableWorkers": str(s.available_worker_replicas),
        "readyWorkers": str(s.ready_worker_replicas),
        "headPodReady": condition_status(s, cluster_status.HEAD_POD_READY),
        "provisioned": condition_status(s, cluster_status.PROVISIONED),
        "replicaFailure": condition_status(s, cluster_status.REPLICA_FAILURE),
        "suspended": condition_status(s, cluster_status.SUSPENDED_CONDITION),
        "desiredCPU": record.desired.get("cpu", "0"),
        "desiredMemory": record.desired.get("memory", "0"),
        "desiredGPU": record.desired.get("gpu", "0"),
    }
