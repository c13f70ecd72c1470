"""The Services of a RayService that outlive a generation, and the per-generation serve Service.

`<svc>-head-svc` and the serve Service (strategies `NewCluster` / `None`) select the pods
the syncer marks `kuberay.io/serve-active: "true"`, a label git never declares; with
incremental upgrades `<gen>-serve-svc` selects exactly one generation (rayservice.md §3.4-§3.5).
Pure `build_*` functions.
"""

from __future__ import annotations

from renderer import naming
from renderer.errors import Problem
from renderer.manifest import Manifest, clone
from renderer.model.raycluster import RayCluster
from renderer.model.rayservice import KIND, RayServicePlan
from renderer.objects import services
from renderer.options import RenderOptions


def _active_selector(service: RayServicePlan) -> dict[str, str]:
    """Pods of this RayService in the generation the syncer marked active."""
    return {
        naming.ORIGIN_KIND: KIND,
        naming.ORIGIN_NAME: service.name,
        naming.SERVE_ACTIVE: "true",
    }


def _serve_selector(service: RayServicePlan, base: dict[str, str]) -> dict[str, str]:
    selector = {**base, naming.RAY_SERVE: "true"}
    if service.exclude_head:
        # Static guarantee for excludeHeadPodFromServeSvc: the head never matches.
        selector[naming.RAY_NODE_TYPE] = "worker"
    return selector


def _serve_port_list(cluster: RayCluster) -> list[Manifest]:
    return [{"name": n, "port": p} for n, p in sorted(cluster.serve_ports.items())]


def build_head_service(service: RayServicePlan, options: RenderOptions) -> Manifest:
    """`<svc>-head-svc`: the generation's head Service, relabelled, selecting the active head."""
    head = services.build_head_service(service.cluster, options)
    head["metadata"] = {
        "name": naming.head_service_name(service.name),
        "namespace": service.namespace,
        "labels": {
            naming.RAY_ORIGIN_NAME: service.name,
            naming.RAY_ORIGIN_CRD: KIND,
            naming.RAY_NODE_TYPE: "head",
            naming.RAY_IDENTIFIER: naming.identifier(service.name, "head"),
            **service.source_labels,
        },
    }
    head["spec"]["selector"] = {**_active_selector(service), naming.RAY_NODE_TYPE: "head"}
    return head


def _serve_service_ports(service: RayServicePlan) -> tuple[list[Problem], list[Manifest]]:
    """KubeRay's serve ports, merged with a custom `serveService`'s (rayservice.md §3.4)."""
    auto = _serve_port_list(service.cluster)
    custom = service.spec.get("serveService")
    if custom is None:
        return [], auto
    user_ports = (custom.get("spec") or {}).get("ports") or []
    if not auto:
        return [], clone(user_ports)
    by_name = {p.get("name"): p for p in user_ports if p.get("name")}
    problems = [
        Problem(
            ("spec", "serveService", "spec", "ports", index),
            f"port {port.get('name') or port.get('port')!s} is dropped (as in KubeRay): only the "
            f"head container's serve ports are exposed ({', '.join(p['name'] for p in auto)}); "
            "give this port one of those names",
            "warning",
        )
        for index, port in enumerate(user_ports)
        if port.get("name") not in {p["name"] for p in auto}
    ]
    return problems, [clone(by_name[p["name"]]) if p["name"] in by_name else p for p in auto]


def build_serve_service(service: RayServicePlan) -> tuple[list[Problem], Manifest]:
    """The RayService serve Service (strategies NewCluster and None), selecting the active pods."""
    custom = clone(service.spec.get("serveService") or {})
    custom_meta = custom.get("metadata") or {}
    problems, ports = _serve_service_ports(service)
    metadata: Manifest = {
        "name": custom_meta.get("name") or naming.serve_service_name(service.name),
        "namespace": service.namespace,
        "labels": {
            **(custom_meta.get("labels") or {}),
            naming.RAY_ORIGIN_NAME: service.name,
            naming.RAY_ORIGIN_CRD: KIND,
            naming.RAY_SERVE: f"{service.name}-serve",
            **service.source_labels,
        },
    }
    if custom_meta.get("annotations"):
        metadata["annotations"] = custom_meta["annotations"]
    spec: Manifest = custom.get("spec") or {}
    service_type = spec.get("type") or service.cluster.head.get("serviceType")
    if service_type:
        spec["type"] = service_type
    spec["selector"] = _serve_selector(service, _active_selector(service))
    spec["ports"] = ports
    return problems, {"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": spec}


def build_generation_serve_service(service: RayServicePlan) -> Manifest:
    """`<gen>-serve-svc` of an incremental upgrade: selects exactly that generation (§3.5)."""
    cluster = service.cluster
    spec: Manifest = {}
    if cluster.head.get("serviceType"):
        spec["type"] = cluster.head["serviceType"]
    spec["selector"] = _serve_selector(service, {naming.RAY_CLUSTER: cluster.name})
    spec["ports"] = _serve_port_list(cluster)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": naming.serve_service_name(cluster.name),
            "namespace": service.namespace,
            "labels": {
                naming.RAY_ORIGIN_NAME: cluster.name,
                naming.RAY_ORIGIN_CRD: KIND,
                naming.RAY_SERVE: f"{cluster.name}-serve",
                **service.source_labels,
            },
        },
        "spec": spec,
    }


def mark_generation(obj: Manifest, generation: str, *, protect: bool) -> None:
    """Label an object with its generation and, if asked, protect it from pruning.

    A protected object also gets `kuberay.io/retire-with: <generation>`, which lets the
    syncer delete it when it retires the generation, except an object that was protected
    already: a claim rendered from `deletionPolicy: Retain`, which outlives its cluster.
    """
    meta = obj["metadata"]
    meta["labels"] = {naming.RAY_CLUSTER: generation, **(meta.get("labels") or {})}
    if not protect:
        return
    annotations = meta.get("annotations") or {}
    retained = all(annotations.get(k) == v for k, v in naming.PRUNE_PROTECTION.items())
    meta["annotations"] = {**annotations, **naming.PRUNE_PROTECTION}
    if not retained:
        meta["annotations"][naming.RETIRE_WITH] = generation
