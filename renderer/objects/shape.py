"""The cluster-shape annotation of a head Pod (the contract in `schemas.cluster`).

KubeRay's status reads the spec: the worker groups' replica bounds and the desired
resources it sums from the templates (`CalculateDesiredResources`, raycluster.md §7.1):
the head template plus, per non-suspended group, the template's resources x numOfHosts x
raw `replicas` (unset: 0). A template's resources are the sum over its `containers` of
each container's requests, falling back to its limits per resource name. Sums keep the
format of their first operand, as Go's `Quantity.Add` does; the GPU total starts from a
zero quantity and prints in Go's default (decimal exponent) form. Pure.
"""

from __future__ import annotations

from fractions import Fraction

from renderer import naming
from renderer.manifest import Manifest
from renderer.model.raycluster import MAX_INT32, RayCluster
from renderer.objects.startparams import is_gpu_like
from renderer.quantity import (
    DECIMAL_EXPONENT,
    format_quantity,
    parse_quantity,
    quantity_format,
)
from schemas.cluster import ANN_CLUSTER_SHAPE, SHAPE_VERSION, ClusterShape, GroupShape

_TPU = "google.com/tpu"
Totals = dict[str, tuple[Fraction, str]]  # resource name -> (value, Go format)


def _add(totals: Totals, name: str, value: Fraction, fmt: str) -> None:
    if name in totals:
        totals[name] = (totals[name][0] + value, totals[name][1])
    else:
        totals[name] = (value, fmt)


def pod_resources(template: Manifest) -> Totals:
    """`CalculatePodResource`: Σ over `containers` of requests, limits filling the gaps."""
    totals: Totals = {}
    for container in (template.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        merged = dict(resources.get("requests") or {})
        for name, value in (resources.get("limits") or {}).items():
            merged.setdefault(name, value)
        for name, raw in merged.items():
            value = parse_quantity(raw)
            if value is not None:
                _add(totals, str(name), value, quantity_format(raw))
    return totals


def desired_resources(cluster: RayCluster) -> Totals:
    """`CalculateDesiredResources`: the head plus each live group x hosts x raw replicas."""
    totals = pod_resources(cluster.head.get("template") or {})
    for group in cluster.workers:
        if group.suspended:
            continue
        raw = group.spec.get("replicas")
        count = (int(raw) if isinstance(raw, int) else 0) * group.num_of_hosts
        for name, (value, fmt) in pod_resources(group.spec.get("template") or {}).items():
            _add(totals, name, value * count, fmt)
    return totals


def _text(totals: Totals, name: str) -> str:
    value, fmt = totals.get(name, (Fraction(0), ""))
    return format_quantity(value, fmt)


def _group(cluster: RayCluster, index: int) -> GroupShape:
    group = cluster.workers[index]
    spec = group.spec
    raw = spec.get("replicas")
    high = spec.get("maxReplicas")
    return {
        "name": group.name,
        "replicas": int(raw) if isinstance(raw, int) else None,
        "minReplicas": int(spec.get("minReplicas") or 0),
        "maxReplicas": int(high) if isinstance(high, int) else MAX_INT32,
        "numOfHosts": group.num_of_hosts,
        "suspend": group.suspended,
    }


def cluster_shape(cluster: RayCluster) -> ClusterShape:
    """The annotation's payload for `cluster`."""
    totals = desired_resources(cluster)
    gpus = sum(
        (value for name, (value, _) in totals.items() if is_gpu_like(name.lower()) and value),
        Fraction(0),
    )
    suspend = cluster.spec.get("suspend")
    return {
        "version": SHAPE_VERSION,
        "cluster": cluster.name,
        "suspend": suspend if isinstance(suspend, bool) else None,
        "groups": [_group(cluster, i) for i in range(len(cluster.workers))],
        "desired": {
            "cpu": _text(totals, "cpu"),
            "memory": _text(totals, "memory"),
            "gpu": format_quantity(gpus, DECIMAL_EXPONENT),
            "tpu": _text(totals, _TPU),
        },
    }


def annotate(cluster: RayCluster, head: Manifest) -> None:
    """Write the annotation on a built head Pod (after its template hash is taken).

    Also on the head Service of a suspended cluster, which has no head Pod.
    """
    annotations = head["metadata"].setdefault("annotations", {})
    annotations[ANN_CLUSTER_SHAPE] = naming.canonical_json(cluster_shape(cluster))
