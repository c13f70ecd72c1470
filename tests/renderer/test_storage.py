"""The RocksDB GCS volume claim (raycluster.md §4.3, §1.4)."""

from __future__ import annotations

from typing import Any

from renderer import naming
from renderer.model.raycluster import RayCluster, parse_raycluster
from renderer.objects import storage

Manifest = dict[str, Any]


def spec(**fields: Any) -> Manifest:
    head: Manifest = {
        "rayStartParams": fields.pop("headParams", {}),
        "template": {"spec": {"containers": [{"name": "ray", "image": "rayproject/ray:2.52.0"}]}},
        **fields.pop("head", {}),
    }
    return {
        "rayVersion": "2.52.0",
        "headGroupSpec": head,
        "workerGroupSpecs": [
            {
                "groupName": "g",
                "replicas": 1,
                "template": {"spec": {"containers": [{"name": "w", "image": "x"}]}},
            }
        ],
        **fields,
    }


def cluster(labels: dict[str, str] | None = None, **fields: Any) -> RayCluster:
    return parse_raycluster("c", "ns", spec(**fields), labels=labels)


# --- RocksDB PVC (§4.3) --------------------------------------------------------------------------


def rocks(**storage_fields: Any) -> RayCluster:
    return cluster(gcsFaultToleranceOptions={"backend": "rocksdb", "storage": storage_fields})


def test_retained_claim_is_protected_from_pruning() -> None:
    # §1.4: "a PVC with deletionPolicy: Retain (no ownerReference)" survives the cluster;
    # GitOps keeps it through prune protection.
    (pvc,) = storage.build_gcs_pvc(rocks(deletionPolicy="Retain"))
    assert pvc["metadata"]["annotations"] == dict(naming.PRUNE_PROTECTION)
    (deleted,) = storage.build_gcs_pvc(rocks(deletionPolicy="DeleteWithCluster"))
    assert "annotations" not in deleted["metadata"]


def test_bring_your_own_claim_renders_no_pvc() -> None:
    # §4.3: with storage.claimName "the operator ... never creates, updates, owns or deletes it".
    assert storage.build_gcs_pvc(rocks(claimName="mine")) == []


def test_pvc_defaults() -> None:
    # §4.3: accessModes default [ReadWriteOnce], size 1Gi, storageClassName omitted when unset.
    (pvc,) = storage.build_gcs_pvc(rocks())
    assert pvc["metadata"]["name"] == "c-gcs-pvc"
    assert pvc["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}},
    }


def test_redis_backend_has_no_pvc() -> None:
    assert storage.build_gcs_pvc(cluster(gcsFaultToleranceOptions={"redisAddress": "r"})) == []
    assert storage.build_gcs_pvc(cluster()) == []
