"""What the RayCluster reconciler reads of live objects, as the pure status's inputs.

`shape` decodes the head Pod's cluster-shape annotation (`schemas.cluster`, written by the
renderer) into the spec view and desired resources, refusing a malformed or oversized one;
`pod_view` turns a cached Pod (`syncer.rayjob.views.cached_pod` keeps what is read here)
into `status.PodView`; `cached_service` is the projection of the one Services cache (the
dashboard clients read it too) and `head_service` picks the cluster's head Service from
it. Pure.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from renderer import naming
from schemas import cluster as contract
from syncer.kube import meta
from syncer.kube.compact import share_shape
from syncer.kube.timestamps import parse_time
from syncer.raycluster import status

Manifest = dict[str, Any]
_MAX_GROUPS: Final = 1000
_MAX_COUNT: Final = status.MAX_INT32


class ShapeError(ValueError):
    """The head Pod's cluster-shape annotation is missing or malformed."""


@dataclass(frozen=True, slots=True)
class Shape:
    """The spec view and KubeRay's desired resources of one cluster."""

    spec: status.ClusterSpecView
    cpu: str = "0"
    memory: str = "0"
    gpu: str = "0"
    tpu: str = "0"


def _count(value: Any, path: str, *, allow_none: bool = False) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_COUNT:
        raise ShapeError(f"{path} is not an integer in 0..{_MAX_COUNT}: {value!r}")
    return value


def _quantity(value: Any, path: str) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= 64:
        raise ShapeError(f"{path} is not a quantity string")
    return value


def has_shape(obj: Manifest) -> bool:
    """Whether a (cached) head Pod or Service carries a cluster-shape annotation."""
    return bool((meta.metadata(obj).get("annotations") or {}).get(contract.ANN_CLUSTER_SHAPE))


def shape(pod: Manifest, cluster: str) -> Shape:
    """The shape a head Pod (or a suspended cluster's head Service) carries for `cluster`.

    Raises ShapeError when it is absent or malformed.
    """
    text = (meta.metadata(pod).get("annotations") or {}).get(contract.ANN_CLUSTER_SHAPE)
    if not isinstance(text, str) or not text:
        raise ShapeError(
            f"head {pod.get('kind') or 'Pod'} {meta.name(pod)} has no (or an oversized) "
            f"{contract.ANN_CLUSTER_SHAPE}"
        )
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ShapeError(f"{contract.ANN_CLUSTER_SHAPE} is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ShapeError(f"{contract.ANN_CLUSTER_SHAPE} is not a JSON object")
    if data.get("version") != contract.SHAPE_VERSION:
        raise ShapeError(f"{contract.ANN_CLUSTER_SHAPE} has version {data.get('version')!r}")
    if data.get("cluster") != cluster:
        raise ShapeError(f"{contract.ANN_CLUSTER_SHAPE} is for {data.get('cluster')!r}")
    groups = data.get("groups")
    if not isinstance(groups, list) or len(groups) > _MAX_GROUPS:
        raise ShapeError("groups is not a list of at most 1000 entries")
    views = []
    for index, group in enumerate(groups):
        path = f"groups[{index}]"
        if not isinstance(group, dict):
            raise ShapeError(f"{path} is not an object")
        replicas = _count(group.get("replicas"), f"{path}.replicas", allow_none=True)
        views.append(
            status.GroupView(
                replicas=replicas,
                min_replicas=_count(group.get("minReplicas"), f"{path}.minReplicas") or 0,
                max_replicas=_count(group.get("maxReplicas"), f"{path}.maxReplicas") or 0,
                num_of_hosts=_count(group.get("numOfHosts"), f"{path}.numOfHosts") or 0,
                suspended=group.get("suspend") is True,
            )
        )
    suspend = data.get("suspend")
    desired = data.get("desired")
    if not isinstance(desired, dict):
        raise ShapeError("desired is not an object")
    return Shape(
        spec=status.ClusterSpecView(
            groups=tuple(views), suspend=suspend if isinstance(suspend, bool) else None
        ),
        **{k: _quantity(desired.get(k), f"desired.{k}") for k in ("cpu", "memory", "gpu", "tpu")},
    )


def _condition(raw: Any) -> status.Condition | None:
    if not isinstance(raw, dict):
        return None
    return status.Condition(
        "Ready",
        str(raw.get("status") or ""),
        str(raw.get("reason") or ""),
        str(raw.get("message") or ""),
        "",
    )


def pod_view(pod: Manifest) -> status.PodView:
    """The status's view of one cached Pod."""
    labels = meta.metadata(pod).get("labels") or {}
    pod_status = pod.get("status") or {}
    containers = []
    for entry in pod_status.get("containerStatuses") or []:
        state = entry.get("state") or {}
        kind = next(iter(state), "")
        detail = state.get(kind) or {}
        containers.append(
            status.ContainerView(
                str(entry.get("name") or ""),
                kind,
                str(detail.get("reason") or ""),
                str(detail.get("message") or ""),
            )
        )
    return status.PodView(
        name=meta.name(pod),
        node_type=str(labels.get(naming.RAY_NODE_TYPE) or ""),
        phase=str(pod_status.get("phase") or "Pending"),
        ip=str(pod_status.get("podIP") or ""),
        ready=_condition(pod_status.get("readyCondition")),
        containers=tuple(containers),
    )


# The named ports of a Service: what the status reads (nodePort, targetPort) and what the
# dashboard clients dial (the `dashboard` port's `port`).
_PORT_FIELDS: Final = ("name", "port", "nodePort", "targetPort")
_MAX_PORTS: Final = 64
# Every head Service the renderer writes has the same ports (and a headless one the same
# clusterIP): one copy of its spec, and of each port, for all of them (`syncer.kube.compact`).
share_shape("clusterIP", "ports")
for _fields in itertools.chain.from_iterable(
    itertools.combinations(_PORT_FIELDS[1:], n) for n in range(len(_PORT_FIELDS))
):
    share_shape("name", *_fields)  # a port: its name and any of the other fields, in order


def cached_service(svc: Manifest) -> Manifest:
    """A Service cut down to identity, labels, deletion, clusterIP and named ports.

    The one projection of the one Services cache: the RayCluster status reads it, and the
    dashboard clients dial the `port` of its port named `dashboard` (review C2).
    """
    metadata = meta.metadata(svc)
    spec = svc.get("spec") or {}
    ports = [
        {k: p.get(k) for k in _PORT_FIELDS if p.get(k) is not None}
        for p in (spec.get("ports") or [])[:_MAX_PORTS]
        if isinstance(p, dict)
    ]
    kept = {k: metadata.get(k) for k in ("name", "namespace", "uid", "resourceVersion", "labels")}
    if metadata.get("deletionTimestamp"):
        kept["deletionTimestamp"] = metadata["deletionTimestamp"]
    # A suspended cluster's shape is on its head Service (it has no head Pod); bounded.
    text = (metadata.get("annotations") or {}).get(contract.ANN_CLUSTER_SHAPE)
    if isinstance(text, str) and len(text) <= contract.MAX_SHAPE_BYTES:
        kept["annotations"] = {contract.ANN_CLUSTER_SHAPE: text}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": kept,
        "spec": {"clusterIP": spec.get("clusterIP") or "", "ports": ports},
    }


def head_service_of(svc: Manifest) -> list[tuple[str, str]]:
    """The (namespace, cluster) of a head Service (index values)."""
    if meta.label(svc, naming.RAY_NODE_TYPE) != "head":
        return []
    cluster = meta.label(svc, naming.RAY_CLUSTER)
    return [(meta.namespace(svc), cluster)] if cluster else []


def head_service(services: Sequence[Manifest], cluster: str) -> Manifest | None:
    """The cluster's head Service: `<C>-head-svc` if present, else the only one, else None."""
    own = [s for s in services if meta.name(s) == naming.head_service_name(cluster)]
    if own:
        return own[0]
    return services[0] if len(services) == 1 else None


def endpoints(svc: Manifest | None) -> dict[str, str]:
    """KubeRay's endpoints: per named port, nodePort if set, else targetPort (as strings)."""
    out: dict[str, str] = {}
    for port in ((svc or {}).get("spec") or {}).get("ports") or []:
        name = port.get("name")
        if not name:
            continue
        node_port, target = port.get("nodePort"), port.get("targetPort")
        if node_port:
            out[str(name)] = str(node_port)
        elif target not in (None, "", 0):
            out[str(name)] = str(target)
    return out


def created_at(pods: Sequence[Manifest]) -> float | None:
    """The earliest `creationTimestamp` of the pods (epoch seconds; None if none has one).

    KubeRay counts the time to provisioned from its RayCluster's creation; the renderer's
    pods are created when the GitOps tool applies the cluster, so the earliest is that.
    """
    stamps = [parse_time(meta.metadata(p).get("creationTimestamp")) for p in pods]
    known = [t for t in stamps if t is not None]
    return min(known) if known else None


_COUNTS: Final = ("desiredWorkerReplicas", "minWorkerReplicas", "maxWorkerReplicas")


def shape_of_record(document: Manifest) -> Shape:
    """A cluster's shape as its published status records it, for a pass without a head Pod.

    One group whose replicas, min and max are the recorded desired, min and max workers
    (so KubeRay's sums give them back) and the recorded desired resources.
    """
    raw = document.get("status")
    body: Manifest = raw if isinstance(raw, dict) else {}
    counts: dict[str, int] = {}
    for name in _COUNTS:
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_COUNT:
            counts[name] = value
        else:
            counts[name] = 0
    group = status.GroupView(
        replicas=counts["desiredWorkerReplicas"],
        min_replicas=counts["minWorkerReplicas"],
        max_replicas=counts["maxWorkerReplicas"],
    )
    fields = {"cpu": "desiredCPU", "memory": "desiredMemory", "gpu": "desiredGPU"}
    fields["tpu"] = "desiredTPU"
    desired = {
        key: text if isinstance(text := body.get(field), str) and text else "0"
        for key, field in fields.items()
    }
    return Shape(status.ClusterSpecView(groups=(group,)), **desired)
