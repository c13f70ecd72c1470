"""Every object of one Ray cluster, in KubeRay's reconcile order (raycluster.md §0.3).

Used for standalone RayClusters and for the clusters of RayJobs and RayServices; the
per-family builders it calls do the work.
"""

from __future__ import annotations

from renderer.manifest import Manifest
from renderer.model.raycluster import RayCluster
from renderer.model.schedulers import wants_scheduling
from renderer.objects import autoscaling, network, pki, pods, redis_cleanup, services, storage
from renderer.options import RenderOptions


def build_cluster(
    cluster: RayCluster, options: RenderOptions, *, job_name: str | None = None
) -> list[Manifest]:
    """Services, Ingress, PVC, NetworkPolicies, PKI, Pods, autoscaling, Redis cleanup anchor.

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
        objects.extend(network.build_network_policies(cluster, options, job_name=job_name))
    objects.extend(pki.build_pki(cluster, options))
    objects.extend(pods.build_pods(cluster, options))
    if cluster.ft_enabled and cluster.ft_backend == "redis":
        objects.extend(redis_cleanup.build_anchor(cluster, pods.build_head_pod(cluster, options)))
    if cluster.autoscaling and not cluster.suspended:
        objects.append(autoscaling.build_configmap(cluster))
    return objects


def schedule(
    cluster: RayCluster, objects: list[Manifest], options: RenderOptions, *, serving: bool = False
) -> list[Manifest]:
    """`objects` with the batch scheduler's or Kueue's additions (`objects.batchscheduling`).

    That module loads only when a scheduler or a queue is in play (start-up, issue 11).
    """
    if not wants_scheduling(cluster.labels, options):
        return objects
    from renderer.objects import batchscheduling

    return batchscheduling.apply_to_cluster(cluster, objects, options, serving=serving)
