"""The cluster-shape contract: what the renderer tells the syncer about each Ray cluster.

KubeRay computes a RayCluster's status from its spec and its Pods; the syncer has the Pods
but no spec (it never reads git). So the renderer writes, on every head Pod it renders
(plain RayClusters, RayJob clusters, RayService generations), the annotation
`ANN_CLUSTER_SHAPE` holding canonical JSON of `ClusterShape`: the worker groups' counts
and the desired resources KubeRay sums from the templates (raycluster.md §7.1). The
annotation is not part of the head Pod's template hash, so scaling a group changes it in
place. A suspended RayCluster renders no Pod, so its head Service carries the annotation.
It also names the Redis cleanup anchor (raycluster.md §4.5). Depends on nothing but
`typing`; a change an older syncer would misread bumps `SHAPE_VERSION`.
"""

from __future__ import annotations

from typing import Final, TypedDict

SHAPE_VERSION: Final = 1
ANN_CLUSTER_SHAPE: Final = "kuberay.io/cluster-shape"
MAX_SHAPE_BYTES: Final = 16 * 1024  # a larger annotation is refused by the syncer

# The Redis GCS FT cleanup anchor: a ConfigMap `<cluster>-redis-cleanup` in git that holds
# KubeRay's finalizer; its key `JOB_KEY` holds the cleanup Job the syncer creates once the
# GitOps tool prunes the anchor (raycluster.md §4.5).
ROLE_REDIS_CLEANUP: Final = "redis-cleanup"
REDIS_CLEANUP_FINALIZER: Final = "ray.io/gcs-ft-redis-cleanup-finalizer"
ANN_DELETION_TIMEOUT: Final = "ray.io/gcs-ft-deletion-timeout"
DEFAULT_DELETION_TIMEOUT_S: Final = 300
JOB_KEY: Final = "job.json"


class GroupShape(TypedDict):
    """One worker group as KubeRay's status reads it (`replicas` None: unset)."""

    name: str
    replicas: int | None
    minReplicas: int
    maxReplicas: int
    numOfHosts: int
    suspend: bool


class DesiredResources(TypedDict):
    """`desiredCPU`, `desiredMemory`, `desiredGPU`, `desiredTPU` as Kubernetes quantities."""

    cpu: str
    memory: str
    gpu: str
    tpu: str


class ClusterShape(TypedDict):
    """The annotation's payload (`suspend` None: unset in the spec)."""

    version: int
    cluster: str
    suspend: bool | None
    groups: list[GroupShape]
    desired: DesiredResources
