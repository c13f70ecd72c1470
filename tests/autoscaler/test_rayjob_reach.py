"""RayJob stop mode reaches the actuator's dynamic workers (reference/autoscaling.md §5.4).

The RayJob machine's cluster pods are the rendered names plus the cluster's dynamic
workers (label `app.kubernetes.io/managed-by: kuberay-syncer`), so a finished job's
DeleteWorkers/DeleteCluster shutdown also releases them; the pod cache's selector is
widened to see them.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from renderer import naming
from syncer.cli import pod_selector
from syncer.rayjob import machine, views
from syncer.rayjob.intent import JobIntent


def _pod(name: str, managed_by: str, node_type: str = "worker") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "labels": {naming.MANAGED_BY: managed_by, naming.RAY_NODE_TYPE: node_type},
        },
        "status": {"phase": "Running", "ready": True},
    }


def test_dynamic_workers_are_cluster_pods_of_a_rendered_job() -> None:
    intent = cast(JobIntent, SimpleNamespace(uses_selector=False, cluster_pods=("head-x", "w-x-0")))
    pods = tuple(
        views.pod_view(p)
        for p in (
            _pod("head-x", "kuberay-render", "head"),
            _pod("w-x-0", "kuberay-render"),
            _pod("demo-small-worker-bcdfg", "kuberay-syncer"),
            _pod("stranger", "someone-else"),
        )
    )
    obs = machine.Observation(intent, None, pods, None, None, 0.0)
    names = [p.name for p in machine.cluster_pods(obs)]
    assert names == ["head-x", "w-x-0", "demo-small-worker-bcdfg"]


def test_the_pod_selector_is_widened_to_the_actuators_pods_only() -> None:
    default = f"{naming.MANAGED_BY}={naming.MANAGED_BY_VALUE}"
    widened = pod_selector(default)
    assert widened == f"{naming.MANAGED_BY} in (kuberay-render,kuberay-syncer)"
    assert pod_selector(f"{default},team=a") == f"{widened},team=a"
    assert pod_selector("team=a") == "team=a"
