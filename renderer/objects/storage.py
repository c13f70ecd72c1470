"""The RocksDB GCS volume claim (`gcsFaultToleranceOptions.backend: rocksdb`, §4.3)."""

from __future__ import annotations

from renderer import naming
from renderer.manifest import Manifest, clone
from renderer.model.raycluster import RayCluster


def build_gcs_pvc(cluster: RayCluster) -> list[Manifest]:
    """The operator-managed PVC `<C>-gcs-pvc`, unless the user brings `storage.claimName`."""
    options = cluster.spec.get("gcsFaultToleranceOptions")
    if options is None or cluster.ft_backend != "rocksdb":
        return []
    storage = options.get("storage") or {}
    if storage.get("claimName"):
        return []
    spec: Manifest = {"accessModes": clone(storage.get("accessModes") or ["ReadWriteOnce"])}
    if storage.get("storageClassName"):
        spec["storageClassName"] = storage["storageClassName"]
    spec["resources"] = {"requests": {"storage": storage.get("size") or "1Gi"}}
    metadata: Manifest = {
        "name": naming.gcs_pvc_name(cluster.name),
        "namespace": cluster.namespace,
        "labels": {naming.RAY_CLUSTER: cluster.name, **cluster.source_labels},
    }
    if storage.get("deletionPolicy") == "Retain":
        # No ownerReference in KubeRay; for GitOps, keep the claim when the cluster leaves git.
        metadata["annotations"] = dict(naming.PRUNE_PROTECTION)
    return [
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": metadata, "spec": spec}
    ]
