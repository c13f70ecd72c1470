"""The RayCluster pipeline: KubeRay's rules, the cluster model, every object of the cluster.

`check -> parse -> check_model -> build`, run by `kinds.pipeline.run`. Pure.
"""

from __future__ import annotations

from renderer.errors import Problem
from renderer.kinds.pipeline import Built, Kind
from renderer.manifest import Manifest
from renderer.model.document import document_namespace
from renderer.model.raycluster import RayCluster, parse_raycluster
from renderer.objects import cluster as cluster_objects
from renderer.options import RenderOptions
from renderer.rules import batchscheduler as batch_rules
from renderer.rules import raycluster as rules


def check(doc: Manifest, options: RenderOptions) -> list[Problem]:
    """KubeRay's RayCluster rules on the document."""
    return rules.check_raycluster(doc, options)


def parse(doc: Manifest, options: RenderOptions) -> RayCluster:
    """The cluster model of a schema-valid RayCluster."""
    meta = doc["metadata"]
    return parse_raycluster(
        meta["name"],
        document_namespace(doc, options),
        doc["spec"],
        labels=meta.get("labels"),
        annotations=meta.get("annotations"),
    )


def check_model(cluster: RayCluster, options: RenderOptions) -> list[Problem]:
    """Problems KubeRay finds only while reconciling the cluster."""
    return (
        rules.check_parsed_cluster(cluster)
        + batch_rules.check_parent(cluster.labels, options)
        + batch_rules.check_kueue(cluster.labels, options, cluster.spec)
    )


def build(cluster: RayCluster, options: RenderOptions) -> Built:
    """Services, Ingress, PVC, NetworkPolicies, PKI and Pods."""
    objects = cluster_objects.build_cluster(cluster, options)
    return [], cluster_objects.schedule(cluster, objects, options)


def count_pods(cluster: RayCluster) -> int:
    """The head and the worker Pods; none while suspended."""
    return 0 if cluster.suspended else 1 + sum(group.pod_count for group in cluster.workers)


KIND: Kind[RayCluster] = Kind(
    check, parse, check_model, build, count_pods, parse_despite_errors=True
)
