"""Render options: every input besides the manifests that changes the output.

These mirror the KubeRay v1.7 operator's feature gates and process options
(reference raycluster.md §0.1-§0.2), whose defaults are KubeRay's, plus the renderer's
own bounds on the work of one run (`max_pods`, `max_objects`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

KUBERAY_VERSION: Final = "v1.7.0"
# Bounds on the work of one render (issue 16): the Pods of one cluster (worker replicas *
# numOfHosts, summed over its groups) and the objects of one run, checked before building.
DEFAULT_MAX_PODS: Final = 10_000
DEFAULT_MAX_OBJECTS: Final = 100_000

# KubeRay v1.7 feature gates and their defaults (ray-operator/pkg/features/features.go).
DEFAULT_FEATURE_GATES: Final = MappingProxyType(
    {
        "RayClusterStatusConditions": True,
        "RayJobDeletionPolicy": True,
        "RayMultiHostIndexing": True,
        "RayServiceIncrementalUpgrade": True,
        "RayClusterNetworkPolicy": False,
        "GCSFaultToleranceEmbeddedStorage": False,
        "RayClusterMTLS": False,
        "RayClusterHistoryServer": False,
        "KubernetesWAS": False,
        "RayCronJob": False,
        "SidecarSubmitterRestart": False,
    }
)


# Where `kuberay syncer-manifests` puts the syncer by default, and its pods' selector label:
# a DenyAll/DenyAllIngress networkPolicy of a RayJob or RayService cluster admits these pods
# on the dashboard port (beyond KubeRay, which adds no operator rule; security review L6).
DEFAULT_SYNCER_NAMESPACE: Final = "kuberay-system"
DEFAULT_SYNCER_POD_LABELS: Final = MappingProxyType({"app.kubernetes.io/name": "kuberay-syncer"})


# KubeRay v1.7's --batch-scheduler values (bs/schedulermanager.go).
BATCH_SCHEDULERS: Final = ("volcano", "yunikorn", "scheduler-plugins", "kai-scheduler")


def _default_gates() -> MappingProxyType[str, bool]:
    return DEFAULT_FEATURE_GATES


@dataclass(frozen=True, slots=True)
class RenderOptions:
    """Everything besides the manifests that changes rendered output."""

    feature_gates: MappingProxyType[str, bool] = field(default_factory=_default_gates)
    cluster_domain: str = "cluster.local"
    namespace: str = "default"
    init_container_injection: bool = True
    probes_injection: bool = True
    login_shell: bool = False
    head_cluster_ip_service: bool = False
    kuberay_version: str = KUBERAY_VERSION
    kubernetes_version: str = "1.33"
    max_pods: int = DEFAULT_MAX_PODS
    max_objects: int = DEFAULT_MAX_OBJECTS
    # KubeRay's --batch-scheduler: "" (none), or one of BATCH_SCHEDULERS (objects/batchscheduling).
    batch_scheduler: str = ""
    # Kueue LocalQueue for plain-pod groups (the manifest's kueue.x-k8s.io/queue-name wins).
    kueue_queue: str = ""
    # Beyond KubeRay: a scheduling.run.ai/v2alpha2 PodGroup under kai-scheduler (owner-less
    # pods get no gang from KAI's podgrouper, batch-schedulers.md §2.4).
    kai_podgroups: bool = False
    # The syncer's namespace ("" renders no allowance for it) and its pods' labels.
    syncer_namespace: str = DEFAULT_SYNCER_NAMESPACE
    syncer_pod_labels: Mapping[str, str] = field(default_factory=lambda: DEFAULT_SYNCER_POD_LABELS)
    # The first head container image of each RayCluster in the same run, by (namespace, name):
    # set by `compile.render`, read where KubeRay reads a clusterSelector's live cluster.
    input_head_images: Mapping[tuple[str, str], str] = field(
        default_factory=lambda: MappingProxyType({})
    )

    def gate(self, name: str) -> bool:
        """Whether feature gate `name` is on."""
        return bool(self.feature_gates.get(name, False))

    def with_gates(self, **changes: bool) -> RenderOptions:
        """Return a copy with some feature gates changed."""
        unknown = sorted(set(changes) - set(DEFAULT_FEATURE_GATES))
        if unknown:
            raise ValueError(f"unknown feature gate(s): {', '.join(unknown)}")
        merged = dict(self.feature_gates) | changes
        return dataclasses.replace(self, feature_gates=MappingProxyType(merged))
