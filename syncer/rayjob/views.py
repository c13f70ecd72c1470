"""Projections of live objects: what the syncer caches (small) and reads (typed views).

Informers store projected objects, so ten thousand pods cost kilobytes each rather
than their full specs (`cached_pod` and `cached_job` are the projections the caches
use; the pod cache is shared with the RayService reconciler). `pod_view` and
`submitter_view` turn projections into the state machine's inputs; `cluster_of` and
`job_of` are the pod indexes. Pure.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Final

from renderer import naming
from schemas import cluster as contract
from syncer.kube import meta
from syncer.kube.compact import share_shape
from syncer.kube.meta import SYNCER_MADE
from syncer.rayjob.machine import PodView, SubmitterView
from syncer.status import STATUS_ANNOTATION_PREFIX

Manifest = dict[str, Any]

JOB_NAME_LABELS: Final = ("batch.kubernetes.io/job-name", "job-name")
# The pod annotations the cache keeps: the shutdown request and the cluster's shape.
_POD_ANNOTATIONS: Final = (naming.SHUTDOWN_REQUESTED, contract.ANN_CLUSTER_SHAPE)
SIDECAR_CONTAINER: Final = "ray-job-submitter"

# Projected pod parts that repeat across pods (every submitter's spec, a worker group's,
# the Ready condition of every ready pod): cached once each (`syncer.kube.compact`).
_SHARED_POD_PARTS: Final = (
    ("restartPolicy", "containers"),
    ("restartPolicy", "containers", "schedulingGates"),
    ("status", "reason", "message"),
)
# And the parts that an end writes, which jobs ending in the same second share: a
# container's end (exit code, reason, time), a submitter pod's ends and whole status (a
# running one's too: it has no IP kept), and a finished Job's whole status.
_SHARED_END_PARTS: Final = (
    ("exitCode", "reason", "finishedAt"),
    (SIDECAR_CONTAINER,),
    ("phase", "ready"),
    ("phase", "ready", "ends"),
    ("conditions", "completionTime"),
)
for keys in (*_SHARED_POD_PARTS, *_SHARED_END_PARTS):
    share_shape(*keys)


def _projected_meta(obj: Manifest, *, annotations: bool = True) -> Manifest:
    meta = obj.get("metadata") or {}
    kept: Manifest = {
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "resourceVersion": meta.get("resourceVersion"),
        "uid": meta.get("uid"),
        "labels": dict(meta.get("labels") or {}),
    }
    if annotations:
        kept["annotations"] = dict(meta.get("annotations") or {})
    if meta.get("deletionTimestamp"):
        kept["deletionTimestamp"] = meta["deletionTimestamp"]
    if meta.get("ownerReferences"):
        kept["ownerReferences"] = [
            {k: ref.get(k) for k in ("kind", "name", "uid", "controller")}
            for ref in meta["ownerReferences"]
        ]
    return kept


def project_pod(pod: Manifest) -> Manifest:
    """A pod cut down to identity, labels, gates, phase, readiness and container ends."""
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    meta = _projected_meta(pod)
    created = (pod.get("metadata") or {}).get("creationTimestamp")
    if naming.RAY_CLUSTER in meta["labels"] and isinstance(created, str):
        meta["creationTimestamp"] = created  # the cluster's provisioning time (RayCluster)
    annotations = meta.pop("annotations")
    kept = {k: annotations[k] for k in _POD_ANNOTATIONS if k in annotations}
    shape = kept.get(contract.ANN_CLUSTER_SHAPE)
    if not isinstance(shape, str) or len(shape) > contract.MAX_SHAPE_BYTES:
        kept.pop(contract.ANN_CLUSTER_SHAPE, None)  # bounded: the syncer reports it missing
    if kept:
        meta["annotations"] = kept
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    ends = {}
    for container in status.get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated")
        if terminated:
            ends[container.get("name")] = {
                "exitCode": terminated.get("exitCode"),
                "reason": terminated.get("reason") or "",
                "finishedAt": terminated.get("finishedAt"),
            }
    # Empty `ends` and `schedulingGates` are left out (readers default them): ~120 bytes
    # a pod, for every running pod.
    projected_status: Manifest = {"phase": status.get("phase") or "Pending", "ready": ready}
    if ends:
        projected_status["ends"] = ends
    if naming.RAY_CLUSTER in meta["labels"]:
        # Only a Ray cluster's pods are read by the RayCluster status and recovery: a
        # submitter pod does without its IP, Ready condition and stopped containers
        # (~350 bytes a finished job).
        projected_status.update(_cluster_status(status))
    projected_spec = _cluster_spec(spec)
    gates = [dict(g) for g in spec.get("schedulingGates") or []]
    if gates:
        projected_spec["schedulingGates"] = gates
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": projected_spec,
        "status": projected_status,
    }


def _text(value: Any, limit: int = 1024) -> str:
    return value[:limit] if isinstance(value, str) else ""


def _cluster_status(status: Manifest) -> Manifest:
    """What the RayCluster status and recovery read: IP, reason, Ready, stopped containers."""
    out: Manifest = {}
    for key in ("podIP", "reason"):
        if _text(status.get(key)):
            out[key] = _text(status.get(key))
    for condition in status.get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == "Ready":
            out["readyCondition"] = {
                k: _text(condition.get(k)) for k in ("status", "reason", "message")
            }
    stopped = []
    for container in (status.get("containerStatuses") or [])[:16]:
        state = container.get("state") if isinstance(container, dict) else None
        for kind in ("waiting", "terminated"):
            detail = (state or {}).get(kind)
            if isinstance(detail, dict):
                reason, message = _text(detail.get("reason")), _text(detail.get("message"))
                stopped.append(
                    {
                        "name": _text(container.get("name")),
                        "state": {kind: {"reason": reason, "message": message}},
                    }
                )
                break
    if stopped:
        out["containerStatuses"] = stopped
    return out


def _cluster_spec(spec: Manifest) -> Manifest:
    """The restart policy and the Ray (first) container's name, for recovery."""
    out: Manifest = {}
    if _text(spec.get("restartPolicy")):
        out["restartPolicy"] = _text(spec.get("restartPolicy"))
    containers = spec.get("containers") or []
    if containers and isinstance(containers[0], dict):
        out["containers"] = [{"name": _text(containers[0].get("name"))}]
    return out


def project_job(job: Manifest) -> Manifest:
    """A batch Job cut down to identity, its conditions and whether it is suspended.

    The Complete/Failed kinds are the machine's; Suspended and `spec.suspend` are what
    Argo CD's built-in Job health reads besides (`job_health`).
    """
    status = job.get("status") or {}
    true = {c.get("type") for c in status.get("conditions") or [] if c.get("status") == "True"}
    # The forerunner of a final condition says nothing once that is there: not kept.
    implied = {early for early, final in _FORERUNNERS if final in true}
    conditions = [
        {k: c.get(k) for k in ("type", "status", "reason", "message", "lastTransitionTime")}
        for c in status.get("conditions") or []
        if c.get("type") in _JOB_CONDITIONS and c.get("type") not in implied
    ]
    projected: Manifest = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _projected_meta(job, annotations=False),
    }
    # A running Job's status is left out (readers default it): ~200 bytes a running job.
    if conditions or status.get("completionTime"):
        projected["status"] = {
            "conditions": conditions,
            "completionTime": status.get("completionTime"),
        }
    if (job.get("spec") or {}).get("suspend") is True:
        projected["spec"] = {"suspend": True}
    return projected


_JOB_CONDITIONS: Final = ("Complete", "Failed", "FailureTarget", "SuccessCriteriaMet", "Suspended")
_FORERUNNERS: Final = (("SuccessCriteriaMet", "Complete"), ("FailureTarget", "Failed"))


def job_health(job: Manifest) -> str:
    """Argo CD's built-in health verdict of a (projected) Job.

    As `renderer/health/job.lua` gives it to a Job without the syncer's annotations.
    """
    true = {
        c.get("type")
        for c in (job.get("status") or {}).get("conditions") or []
        if c.get("status") == "True"
    }
    if "Failed" in true:
        return "Degraded"
    if "Complete" in true:
        return "Healthy"
    if "Suspended" in true or (job.get("spec") or {}).get("suspend") is True:
        return "Suspended"
    return "Progressing"


def success_criteria_met(job: Manifest) -> bool:
    """Whether a (projected) Job has met its success criteria: `Complete` comes next.

    The Job controller (Kubernetes 1.31 and later) sets `SuccessCriteriaMet` as soon as
    the Job succeeded and `Complete` once its pods have terminated.
    """
    return any(
        c.get("type") == "SuccessCriteriaMet" and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
        if isinstance(c, dict)
    )


def _time(text: Any) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def pod_view(pod: Manifest, *, sidecar: str | None = None) -> PodView:
    """The state machine's view of a projected pod."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    status = pod.get("status") or {}
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    end = (status.get("ends") or {}).get(sidecar) if sidecar else None
    return PodView(
        name=str(meta.get("name")),
        node_type=str(labels.get(naming.RAY_NODE_TYPE) or ""),
        phase=str(status.get("phase") or "Pending"),
        ready=bool(status.get("ready")),
        gated=any(g.get("name") == naming.CLUSTER_READY_GATE for g in gates),
        shutdown_requested=naming.SHUTDOWN_REQUESTED in (meta.get("annotations") or {}),
        deleting=bool(meta.get("deletionTimestamp")),
        dynamic=labels.get(naming.MANAGED_BY) == SYNCER_MADE
        and labels.get(naming.RAY_NODE_TYPE) == "worker",
        sidecar_exit_code=None if end is None else int(end.get("exitCode") or 0),
        sidecar_reason="" if end is None else str(end.get("reason") or ""),
        sidecar_finished_at=None if end is None else _time(end.get("finishedAt")),
    )


def submitter_view(job: Manifest | None, pods: list[Manifest]) -> SubmitterView:
    """The state machine's view of a submitter Job and the pods its controller made."""
    gated = tuple(
        sorted(
            str(p["metadata"]["name"])
            for p in pods
            if pod_view(p).gated and not (p.get("metadata") or {}).get("deletionTimestamp")
        )
    )
    if job is None:
        return SubmitterView(exists=False, gated_pods=gated)
    conditions = {
        c.get("type"): c
        for c in (job.get("status") or {}).get("conditions") or []
        if c.get("status") == "True"
    }
    failed = conditions.get("Failed") or conditions.get("FailureTarget")
    complete = conditions.get("Complete") or conditions.get("SuccessCriteriaMet")
    finished = failed or complete
    finished_at = None
    if finished is not None:
        finished_at = _time(finished.get("lastTransitionTime")) or _time(
            (job.get("status") or {}).get("completionTime")
        )
    return SubmitterView(
        exists=True,
        failed=failed is not None,
        complete=complete is not None,
        reason=str((failed or {}).get("reason") or ""),
        message=str((failed or {}).get("message") or ""),
        finished_at=finished_at,
        gated_pods=gated,
    )


def owner_job(pod: Manifest) -> str | None:
    """The name of the Job that controls a pod, if any."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "Job" and ref.get("controller"):
            return str(ref.get("name"))
    return None


# --- what the caches keep -------------------------------------------------------------------

# The labels the syncer reads of a RayJob's submitter Job and its pods: they route events,
# find a Job's pods and mark what the renderer made. The Job controller's and KubeRay's
# labels (two of them UIDs) are not kept; Ray cluster pods keep all theirs.
_SUBMITTER_LABELS: Final = frozenset(
    {naming.MANAGED_BY, naming.ORIGIN_KIND, naming.ORIGIN_NAME, *JOB_NAME_LABELS}
)


def _submitter_labels_only(
    project: Callable[[Manifest], Manifest],
) -> Callable[[Manifest], Manifest]:
    """`project`, keeping of a RayJob's submitter objects only the labels the syncer reads."""

    def projected(obj: Manifest) -> Manifest:
        out = project(obj)
        kept = out["metadata"]
        labels = kept.get("labels") or {}
        if labels.get(naming.ORIGIN_KIND) == "RayJob" and naming.RAY_CLUSTER not in labels:
            kept["labels"] = {k: v for k, v in labels.items() if k in _SUBMITTER_LABELS}
        return out

    return projected


def _keeping_status(project: Callable[[Manifest], Manifest]) -> Callable[[Manifest], Manifest]:
    """`project`, keeping the syncer's own status annotations (`status.kuberay.io/...`)."""

    def projected(obj: Manifest) -> Manifest:
        kept = {
            key: value
            for key, value in (meta.metadata(obj).get("annotations") or {}).items()
            if key.startswith(STATUS_ANNOTATION_PREFIX)
        }
        out = project(obj)
        if kept:
            out["metadata"] = {**out["metadata"]}
            out["metadata"]["annotations"] = {**(out["metadata"].get("annotations") or {}), **kept}
        return out

    return projected


cached_pod: Final = _keeping_status(_submitter_labels_only(project_pod))
cached_job: Final = _keeping_status(_submitter_labels_only(project_job))


def cluster_of(pod: Manifest) -> list[tuple[str, str]]:
    """The pod's (namespace, Ray cluster), if it has one (index values)."""
    cluster = meta.label(pod, naming.RAY_CLUSTER)
    return [(meta.namespace(pod), cluster)] if cluster else []


def job_of(pod: Manifest) -> list[tuple[str, str]]:
    """The pod's (namespace, batch Job name), if it has one (index values)."""
    job = meta.label(pod, JOB_NAME_LABELS[0]) or meta.label(pod, JOB_NAME_LABELS[1])
    return [(meta.namespace(pod), job)] if job else []
