"""The renderer's bounds on the work of one render: Pods per cluster, before anything is built.

A typo such as `replicas: 2147483647` (KubeRay's default maxReplicas) would otherwise build
millions of Pods for hours. The count is KubeRay's desired Pod count (raycluster.md §1.6:
replicas clamped to [minReplicas, maxReplicas], * numOfHosts, none while suspended), summed
over the worker groups; the problem sits at the field that pushed it over. Pure.
"""

from __future__ import annotations

from typing import Final

from renderer.errors import JsonPath, Problem
from renderer.manifest import Manifest
from renderer.options import RenderOptions
from renderer.rules.document import Unchecked, as_dict, as_list

MAX_INT32: Final = 2147483647


def _count(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def group_pods(group: Manifest) -> tuple[int, int, int]:
    """KubeRay's desired (replicas, numOfHosts, Pods) of one worker group."""
    low = max(_count(group.get("minReplicas"), 0), 0)
    high = _count(group.get("maxReplicas"), MAX_INT32)
    raw = group.get("replicas")
    replicas = max(low, min(high, _count(raw, low)))
    hosts = max(_count(group.get("numOfHosts"), 1), 0)
    if group.get("suspend") is True:
        return replicas, hosts, 0
    return replicas, hosts, replicas * hosts


def cluster_pods(spec: Manifest) -> int:
    """The worker Pods a cluster spec asks for (the head adds one); none while suspended."""
    if spec.get("suspend") is True:
        return 0
    return sum(
        group_pods(group)[2]
        for group in as_list(spec.get("workerGroupSpecs"))
        if isinstance(group, dict) and not isinstance(group, Unchecked)
    )


def check_cluster_size(spec: Manifest, base: JsonPath, options: RenderOptions) -> list[Problem]:
    """One problem when the worker Pods of the cluster exceed `options.max_pods`."""
    if spec.get("suspend") is True:
        return []
    total = 0
    for index, raw in enumerate(as_list(spec.get("workerGroupSpecs"))):
        if isinstance(raw, Unchecked):
            continue
        group = as_dict(raw)
        replicas, hosts, pods = group_pods(group)
        total += pods
        if total <= options.max_pods:
            continue
        at: JsonPath = (*base, "workerGroupSpecs", index)
        if hosts > options.max_pods:
            field = "numOfHosts"
        else:
            field = "replicas" if "replicas" in group else "minReplicas"
        return [
            Problem(
                (*at, field),
                f"the cluster asks for {total} worker Pods so far (this group: replicas "
                f"{replicas} * numOfHosts {hosts} = {pods}), more than the limit of "
                f"{options.max_pods} per cluster; lower {field}, or raise the limit with "
                "--max-pods N",
            )
        ]
    return []
