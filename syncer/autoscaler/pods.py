"""A dynamic worker Pod from its git-declared template, and how the actuator sees its Pods. Pure.

`build` copies the template (reference/autoscaling.md §4.3): the exact desired name, the
lowest free `ray.io/worker-group-replica-index`, an ownerReference to the head Pod (so
Argo CD never counts it as app-managed and Kubernetes GC removes it with the head),
`app.kubernetes.io/managed-by: kuberay-syncer`, and none of the GitOps tools' tracking
keys: `argocd.argoproj.io/*`, `*.toolkit.fluxcd.io/*`,
`kubectl.kubernetes.io/last-applied-configuration`.
"""

from __future__ import annotations

import copy
from typing import Any, Final

from renderer import naming
from syncer.autoscaler import plan
from syncer.autoscaler.spec import Group
from syncer.kube import meta

Manifest = dict[str, Any]

MANAGED_BY_SYNCER: Final = meta.SYNCER_MADE
LAST_APPLIED: Final = "kubectl.kubernetes.io/last-applied-configuration"
# Server-set or identity fields a template must not carry into a new object.
_DROPPED_META: Final = (
    "name",
    "generateName",
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "ownerReferences",
    "managedFields",
    "generation",
    "finalizers",
)


def is_tracking_key(key: str) -> bool:
    """Whether a label or annotation key is a GitOps tool's tracking or apply record."""
    prefix = key.split("/", 1)[0] if "/" in key else ""
    return (
        key == LAST_APPLIED
        or prefix == "argocd.argoproj.io"
        or prefix.endswith(".toolkit.fluxcd.io")
        or prefix == "toolkit.fluxcd.io"
    )


def _clean(values: Any) -> dict[str, str]:
    if not isinstance(values, dict):
        return {}
    return {k: v for k, v in values.items() if not is_tracking_key(k)}


def build(
    group: Group, name: str, index: int, namespace: str, head_name: str, head_uid: str
) -> Manifest:
    """The worker Pod `name` of `group` (a new object: the template is not changed)."""
    template = copy.deepcopy(group.template)
    metadata = template.get("metadata") or {}
    for key in _DROPPED_META:
        metadata.pop(key, None)
    labels = _clean(metadata.get("labels"))
    labels[naming.MANAGED_BY] = MANAGED_BY_SYNCER
    labels[naming.RAY_REPLICA_INDEX] = str(index)
    metadata["labels"] = labels
    annotations = _clean(metadata.get("annotations"))
    if annotations:
        metadata["annotations"] = annotations
    else:
        metadata.pop("annotations", None)
    metadata["name"] = name
    metadata["namespace"] = namespace
    metadata["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": head_name, "uid": head_uid}
    ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]}


def is_dynamic(pod: Manifest) -> bool:
    """Whether the actuator made `pod` (its label; the owner is checked separately)."""
    return meta.is_syncer_made(pod)


def is_released(pod: Manifest) -> bool:
    """Whether a finished RayJob released the Pod (`kuberay.io/shutdown-requested`)."""
    return naming.SHUTDOWN_REQUESTED in (meta.metadata(pod).get("annotations") or {})


def owner_uids(pod: Manifest) -> set[str]:
    """The uids of the Pod's owners."""
    refs = meta.metadata(pod).get("ownerReferences") or []
    return {str(ref.get("uid")) for ref in refs if isinstance(ref, dict) and ref.get("uid")}


def is_alive(pod: Manifest) -> bool:
    """Neither being deleted nor in a final phase (the cached projection's fields)."""
    phase = (pod.get("status") or {}).get("phase")
    return not meta.metadata(pod).get("deletionTimestamp") and phase not in ("Failed", "Succeeded")


def worker(pod: Manifest) -> plan.Worker:
    """A cached dynamic Pod as the plan sees it.

    Dead: a final phase, or a container that ended (dynamic workers run under
    `restartPolicy: Never`, so an ended container does not come back).
    """
    status = pod.get("status") or {}
    phase = status.get("phase")
    index_text = meta.label(pod, naming.RAY_REPLICA_INDEX)
    index = int(index_text) if index_text.isdigit() else None
    dead = phase in ("Failed", "Succeeded") or bool(status.get("ends"))
    return plan.Worker(
        name=meta.name(pod),
        group=meta.label(pod, naming.RAY_GROUP),
        index=index,
        dead=dead,
        ready=bool(status.get("ready")) and phase == "Running",
        deleting=bool(meta.metadata(pod).get("deletionTimestamp")),
        released=is_released(pod),
    )
