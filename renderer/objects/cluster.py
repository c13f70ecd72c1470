"""Every object of one Ray cluster, in KubeRay's reconcile order (raycluster.md §0.3).

Used for standalone RayClusters and for the clusters of RayJobs and RayServices; the
per-family builders it calls do the work.
"""

from __future__ import annotations

from renderer.manifest import Manifest
from renderer.model.raycluster import RayCluster
from renderer.objects import autoscaling, network, pki, pods, services, storage
from renderer.options import RenderOptions


def build_cluster(
    cluster: RayCluster, options: RenderOptions, *, job_name: str | None = None
) -> list[Manifest]:
    """Services, Ingress, PVC, NetworkPolicies, PKI, Pods and the autoscaling objects.

    With autoscaling, the worker Pods are templates until `autoscaling.fold_templates`.
    """
    objects: list[Manifest] = []
    if cluster.autoscaling:
        objects.extend(autoscaling.build_rbac(cluster))
    if cluster.head.get("enableIngress") is True:
        objects.append(services.build_ingress(cluster))
    objects.append(services.build_head_service(cluster, options))
    if any(group.num_of_hosts > 1 for group in cluster.workers):
        objects.append(services.build_headless_service(cluster))
    if cluster.wants_serve_service:
        objects.append(services.build_serve_service(cluster))
    objects.extend(storage.build_gcs_pvc(cluster))
    if options.gate("RayClusterNetworkPolicy"):
        objects.extend(network.build_network_policies(cluster, job_name=job_name))
    objects.extend(pki.build_pki(cluster, options))
    objects.extend(pods.build_pods(cluster, options))
    if cluster.autoscaling and not cluster.suspended:
        objects.append(autoscaling.build_configmap(cluster))
    return objects
