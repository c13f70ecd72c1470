"""Every object of one Ray cluster, in KubeRay's reconcile order (raycluster.md §0.3).

Used for standalone RayClusters and for the clusters of RayJobs and RayServices.
"""

from __future__ import annotations

from typing import Any

from renderer.build import network, pki, pods, services, storage
from renderer.errors import Problem
from renderer.model import RayCluster
from renderer.options import RenderOptions

Manifest = dict[str, Any]

SERVE_PORT_MESSAGE = (
    'the annotation ray.io/enable-serve-service is "true" but the head container declares no port '
    "named 'serve' (or with the prefix 'serve-', e.g. 'serve-grpc'); KubeRay would create neither "
    "the serve Service nor any Pod: add such a port to the head container"
)


def check_cluster(cluster: RayCluster, base: tuple[str | int, ...] = ()) -> list[Problem]:
    """Problems KubeRay only finds while reconciling (they block every Pod)."""
    problems: list[Problem] = []
    if services.wants_serve_service(cluster) and not services.serve_ports(cluster):
        problems.append(
            Problem(("metadata", "annotations", "ray.io/enable-serve-service"), SERVE_PORT_MESSAGE)
        )
    return problems


def build_cluster(
    cluster: RayCluster, options: RenderOptions, *, job_name: str | None = None
) -> list[Manifest]:
    """Services, Ingress, PVC, NetworkPolicies, PKI and Pods of one cluster."""
    objects: list[Manifest] = []
    if cluster.head.get("enableIngress") is True:
        objects.append(services.build_ingress(cluster))
    objects.append(services.build_head_service(cluster, options))
    if any(group.num_of_hosts > 1 for group in cluster.workers):
        objects.append(services.build_headless_service(cluster))
    if services.wants_serve_service(cluster):
        objects.append(services.build_serve_service(cluster))
    objects.extend(storage.build_gcs_pvc(cluster))
    if options.gate("RayClusterNetworkPolicy"):
        objects.extend(network.build_network_policies(cluster, job_name=job_name))
    objects.extend(pki.build_pki(cluster, options))
    objects.extend(pods.build_pods(cluster, options))
    return objects
