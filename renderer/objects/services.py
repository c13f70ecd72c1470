"""Head, serve and headless Services and the Ingress of a cluster (raycluster.md §3).

Also a RayJob's `<job>-head-svc`, the cluster head Service under a name stable across runs.

The default head Service sorts its ports as KubeRay does; where KubeRay follows Go
map order (custom head Service, serve Service) the ports are sorted by name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from renderer import naming
from renderer.manifest import Manifest, clone
from renderer.model.raycluster import RayCluster
from renderer.objects import shape
from renderer.options import RenderOptions
from schemas.intent import RAYJOB

if TYPE_CHECKING:  # a type only: a RayCluster render does not load the RayJob model
    from renderer.model.rayjob import RayJobPlan


def head_selector(cluster: RayCluster) -> dict[str, str]:
    """The head Service selector (§3.2): a template `app.kubernetes.io/name` is honoured."""
    template_labels = (cluster.head["template"].get("metadata") or {}).get("labels") or {}
    return {
        naming.RAY_CLUSTER: cluster.name,
        naming.RAY_NODE_TYPE: "head",
        naming.RAY_IDENTIFIER: naming.identifier(cluster.name, "head"),
        naming.APP_NAME: str(template_labels.get(naming.APP_NAME, naming.KUBERAY_APP)),
        naming.APP_CREATED_BY: naming.KUBERAY_OPERATOR,
    }


def _service(name: str, cluster: RayCluster, labels: dict[str, str]) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": cluster.namespace,
            "labels": {**labels, **cluster.source_labels},
        },
        "spec": {},
    }


def build_head_service(cluster: RayCluster, options: RenderOptions) -> Manifest:
    """The head Service: KubeRay's default (§3.2) or the user's `headService` (§3.3).

    A suspended cluster has no head Pod to carry its cluster-shape annotation (which the
    syncer's RayCluster status reads), so its head Service carries it.
    """
    service = _head_service(cluster, options)
    if cluster.spec.get("suspend") is True:
        shape.annotate(cluster, service)
    return service


def _head_service(cluster: RayCluster, options: RenderOptions) -> Manifest:
    head = cluster.head
    selector = head_selector(cluster)
    ports = cluster.service_ports
    service_type = head.get("serviceType")
    annotations = dict(cluster.spec.get("headServiceAnnotations") or {})
    custom = head.get("headService")
    if custom is None:
        service: Manifest = _service(cluster.head_service_name, cluster, dict(selector))
        if annotations:
            service["metadata"]["annotations"] = annotations
        spec = service["spec"]
        if service_type:
            spec["type"] = service_type
        if service_type in (None, "", "ClusterIP") and not options.head_cluster_ip_service:
            spec["clusterIP"] = "None"
            spec["publishNotReadyAddresses"] = True
        spec["selector"] = selector
        spec["ports"] = [
            {"name": name, "port": port, "appProtocol": "tcp"}
            for name, port in sorted(ports.items())
        ]
        return service
    service = clone(custom)
    service["apiVersion"] = "v1"
    service["kind"] = "Service"
    meta = service.setdefault("metadata", {})
    meta["name"] = cluster.head_service_name
    meta["namespace"] = cluster.namespace
    merged_annotations = {**(meta.get("annotations") or {}), **annotations}
    if merged_annotations:
        meta["annotations"] = merged_annotations
    meta["labels"] = {**(meta.get("labels") or {}), **selector, **cluster.source_labels}
    spec = service.setdefault("spec", {})
    spec["selector"] = selector
    if not spec.get("type") and service_type:
        spec["type"] = service_type
    spec["ports"] = [*(spec.get("ports") or [])] + [
        {"name": name, "port": port, "appProtocol": "tcp"} for name, port in sorted(ports.items())
    ]
    return service


def build_serve_service(cluster: RayCluster) -> Manifest:
    """The serve Service of a RayCluster annotated `ray.io/enable-serve-service: "true"` (§3.4)."""
    labels = {
        naming.RAY_ORIGIN_NAME: cluster.name,
        naming.RAY_ORIGIN_CRD: "RayCluster",
        naming.RAY_SERVE: f"{cluster.name}-serve",
    }
    service = _service(naming.serve_service_name(cluster.name), cluster, labels)
    spec = service["spec"]
    if cluster.head.get("serviceType"):
        spec["type"] = cluster.head["serviceType"]
    spec["selector"] = {naming.RAY_CLUSTER: cluster.name}
    spec["ports"] = [{"name": n, "port": p} for n, p in sorted(cluster.serve_ports.items())]
    return service


def build_headless_service(cluster: RayCluster) -> Manifest:
    """The headless worker Service, present when a group has `numOfHosts > 1` (§3.5)."""
    service = _service(
        naming.headless_service_name(cluster.name),
        cluster,
        {naming.RAY_HEADLESS_SVC: cluster.name},
    )
    service["spec"] = {
        "type": "ClusterIP",
        "clusterIP": "None",
        "publishNotReadyAddresses": True,
        "selector": {naming.RAY_CLUSTER: cluster.name, naming.RAY_NODE_TYPE: "worker"},
    }
    return service


def build_ingress(cluster: RayCluster) -> Manifest:
    """The dashboard Ingress of `headGroupSpec.enableIngress: true` (§3.6)."""
    options = cluster.head.get("ingressOptions") or {}
    annotations = {k: v for k, v in cluster.annotations.items() if k != naming.ANN_INGRESS_CLASS}
    metadata: Manifest = {
        "name": naming.ingress_name(cluster.name),
        "namespace": cluster.namespace,
        "labels": {
            naming.RAY_CLUSTER: cluster.name,
            naming.RAY_IDENTIFIER: naming.identifier(cluster.name, "head"),
            naming.APP_NAME: naming.KUBERAY_APP,
            naming.APP_CREATED_BY: naming.KUBERAY_OPERATOR,
            **cluster.source_labels,
        },
    }
    if annotations:
        metadata["annotations"] = annotations
    rule: Manifest = {}
    if options.get("host"):
        rule["host"] = options["host"]
    rule["http"] = {
        "paths": [
            {
                "path": options.get("path") or "/",
                "pathType": options.get("pathType") or "Prefix",
                "backend": {
                    "service": {
                        "name": cluster.head_service_name,
                        "port": {"number": cluster.service_ports.get("dashboard", 8265)},
                    }
                },
            }
        ]
    }
    spec: Manifest = {}
    ingress_class = cluster.annotations.get(naming.ANN_INGRESS_CLASS)
    if ingress_class:
        spec["ingressClassName"] = ingress_class
    spec["rules"] = [rule]
    if options.get("tls"):
        spec["tls"] = clone(options["tls"])
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": metadata,
        "spec": spec,
    }


def build_job_head_service(plan: RayJobPlan, cluster_service: Manifest) -> Manifest:
    """`<job>-head-svc`: the cluster head Service's spec under a name stable across runs."""
    service: Manifest = clone(cluster_service)
    service["metadata"]["name"] = naming.head_service_name(plan.name)
    service["metadata"]["labels"] = {
        naming.RAY_ORIGIN_NAME: plan.name,
        naming.RAY_ORIGIN_CRD: RAYJOB,
        naming.RAY_NODE_TYPE: "head",
        naming.RAY_IDENTIFIER: naming.identifier(plan.name, "head"),
        **plan.source_labels,
    }
    return service
