"""Test helpers for the autoscaling provider and actuator: a rendered cluster, its ConfigMap.

Until the renderer emits the `<cluster>-autoscaling` ConfigMap (issue 14, the as-render
half), `autoscaling_configmap` builds it as the contract in notes/autoscaling-contract.md
says: the worker template is the Pod the renderer renders today for the group, without
`metadata.name` and the replica-index label. `TRACKING` are the GitOps tools' keys a
GitOps-applied template could carry; the actuator must drop every one.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from renderer import naming
from syncer.kube.client import CONFIGMAPS, PODS, Kube
from tests.syncer.harness import render

Manifest = dict[str, Any]

CLUSTER = "demo"
GROUP = "small"
CLUSTER_YAML = """
apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: demo
spec:
  rayVersion: "2.52.0"
  headGroupSpec:
    rayStartParams:
      num-cpus: "0"
    template:
      spec:
        containers:
        - name: ray-head
          image: rayproject/ray:2.52.0
  workerGroupSpecs:
  - groupName: small
    replicas: 1
    minReplicas: 0
    maxReplicas: 3
    template:
      spec:
        containers:
        - name: ray-worker
          image: rayproject/ray:2.52.0
"""
TRACKING_ANNOTATIONS = {
    "argocd.argoproj.io/tracking-id": "app:/Pod:ns/demo-head",
    "argocd.argoproj.io/installation-id": "argo-1",
    "kubectl.kubernetes.io/last-applied-configuration": "{}",
}
TRACKING_LABELS = {
    "kustomize.toolkit.fluxcd.io/name": "apps",
    "kustomize.toolkit.fluxcd.io/namespace": "flux-system",
    "helm.toolkit.fluxcd.io/name": "ray",
}


def rendered(namespace: str) -> tuple[Manifest, Manifest]:
    """(head Pod, one worker Pod) as the renderer renders the demo cluster."""
    objects = render(CLUSTER_YAML, namespace)
    pods = [o for o in objects if o["kind"] == "Pod"]
    head = next(p for p in pods if p["metadata"]["labels"][naming.RAY_NODE_TYPE] == "head")
    worker = next(p for p in pods if p["metadata"]["labels"][naming.RAY_NODE_TYPE] == "worker")
    return head, worker


def worker_template(worker: Manifest, *, tracking: bool = True) -> Manifest:
    """The rendered worker Pod as workers.json holds it (no name, no replica index)."""
    template = copy.deepcopy(worker)
    template["metadata"].pop("name")
    template["metadata"]["labels"].pop(naming.RAY_REPLICA_INDEX, None)
    template["spec"]["restartPolicy"] = "Never"
    if tracking:
        template["metadata"]["labels"].update(TRACKING_LABELS)
        template["metadata"].setdefault("annotations", {}).update(TRACKING_ANNOTATIONS)
    return template


def autoscaling_configmap(
    namespace: str,
    template: Manifest,
    *,
    cluster: str = CLUSTER,
    name: str | None = None,
    bounds: Manifest | None = None,
) -> Manifest:
    """`<cluster>-autoscaling` with groups.json and workers.json for the group `small`."""
    groups = {GROUP: bounds or {"min": 0, "max": 3, "replicas": 1}}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name or f"{cluster}-autoscaling",
            "namespace": namespace,
            "labels": {
                naming.MANAGED_BY: naming.MANAGED_BY_VALUE,
                naming.ORIGIN_KIND: "RayCluster",
                naming.ORIGIN_NAME: cluster,
                naming.RAY_CLUSTER: cluster,
                naming.ROLE: "autoscaling",
            },
        },
        "data": {
            "groups.json": json.dumps(groups, sort_keys=True),
            "workers.json": json.dumps({GROUP: template}, sort_keys=True),
            "autoscaling.yaml": "provider: {type: external}\n",
        },
    }


def apply_cluster(
    kube: Kube, namespace: str, *, bounds: Manifest | None = None
) -> tuple[Manifest, Manifest]:
    """Create the rendered head Pod and the autoscaling ConfigMap; (live head, template)."""
    head, worker = rendered(namespace)
    template = worker_template(worker)
    live = kube.create(PODS, namespace, head)
    kube.create(CONFIGMAPS, namespace, autoscaling_configmap(namespace, template, bounds=bounds))
    return live, template


def state_data(kube: Kube, namespace: str, cluster: str = CLUSTER) -> dict[str, Manifest]:
    """The desired set as the state ConfigMap holds it ({} when there is none)."""
    cm = kube.get(CONFIGMAPS, namespace, f"{cluster}-autoscaler-state")
    if cm is None:
        return {}
    return {k: json.loads(v) for k, v in (cm.get("data") or {}).items()}


def dynamic_pods(kube: Kube, namespace: str) -> list[Manifest]:
    """The Pods the actuator made, by name."""
    items, _ = kube.list(PODS, namespace, label_selector=f"{naming.MANAGED_BY}=kuberay-syncer")
    return sorted(items, key=lambda p: p["metadata"]["name"])
