"""The RayService model: a checked RayService and the cluster generation git declares now.

The generation is `<svc>-<hash>`, a base-36 hash of `rayClusterConfig` without the fields
KubeRay's own hash ignores (rayservice.md §3.1), parsed as a `RayCluster`. Stateless: it
never knows which generation is active (that is the syncer's, at run time). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from renderer import naming
from renderer.manifest import Manifest, clone
from renderer.model.document import document_namespace
from renderer.model.raycluster import DEFAULT_SERVE_PORT, RayCluster, parse_raycluster
from renderer.options import RenderOptions
from schemas.intent import INCREMENTAL, NEW_CLUSTER, RAYSERVICE

KIND: Final = RAYSERVICE


@dataclass(frozen=True, slots=True)
class RayServicePlan:
    """A checked RayService, with its current generation parsed as a cluster."""

    name: str
    namespace: str
    labels: dict[str, str]
    annotations: dict[str, str]
    spec: Manifest
    strategy: str
    cluster: RayCluster
    hash: str

    @property
    def incremental(self) -> bool:
        """The strategy is `NewClusterWithIncrementalUpgrade`."""
        return self.strategy == INCREMENTAL

    @property
    def source_labels(self) -> dict[str, str]:
        """The project's labels on every object rendered for this RayService."""
        return self.cluster.source_labels

    @property
    def exclude_head(self) -> bool:
        """`excludeHeadPodFromServeSvc: true`: the head never serves traffic."""
        return self.spec.get("excludeHeadPodFromServeSvc") is True

    @property
    def serve_config(self) -> str:
        """`serveConfigV2`, as written (empty when absent)."""
        return str(self.spec.get("serveConfigV2") or "")


def cluster_config_for_hashing(config: Manifest) -> Manifest:
    """`rayClusterConfig` without the fields KubeRay's hash ignores (rayservice.md §3.1).

    Those are `suspend`, the RayCluster-level `upgradeStrategy`, pod `tolerations` and
    `schedulingGates`, and each worker group's `replicas`, `minReplicas`, `maxReplicas` and
    `scaleStrategy.workersToDelete`.
    """
    spec: Manifest = clone(config)
    spec.pop("suspend", None)
    spec.pop("upgradeStrategy", None)
    groups = [spec.get("headGroupSpec") or {}]
    for group in spec.get("workerGroupSpecs") or []:
        for key in ("replicas", "minReplicas", "maxReplicas"):
            group.pop(key, None)
        scale = group.get("scaleStrategy")
        if isinstance(scale, dict):
            scale.pop("workersToDelete", None)
            if not scale:
                del group["scaleStrategy"]
        groups.append(group)
    for group in groups:
        pod_spec = (group.get("template") or {}).get("spec") or {}
        pod_spec.pop("tolerations", None)
        pod_spec.pop("schedulingGates", None)
    return spec


def generation_hash(config: Manifest) -> str:
    """The 5-character base-36 hash that names a cluster generation (DESIGN §2)."""
    return naming.content_hash(cluster_config_for_hashing(config))


def generation_name(service: str, config: Manifest) -> str:
    """`<svc>-<hash>`: at most 53 characters, as KubeRay's `<svc>-<5 random chars>`."""
    return f"{service}-{generation_hash(config)}"


def upgrade_type(spec: Manifest) -> str:
    """The strategy in force; unset means `NewCluster` (`ENABLE_ZERO_DOWNTIME` unset)."""
    strategy = spec.get("upgradeStrategy") or {}
    return str(strategy.get("type") or NEW_CLUSTER)


def route_port(cluster: RayCluster) -> int:
    """The HTTPRoute backend port: the head port named exactly `serve`, else 8000 (§3.7)."""
    return cluster.service_ports.get("serve", DEFAULT_SERVE_PORT)


def parse_rayservice(doc: Manifest, options: RenderOptions) -> RayServicePlan:
    """A checked RayService with its current generation parsed as a cluster."""
    meta = doc["metadata"]
    spec = doc["spec"]
    name = str(meta["name"])
    namespace = document_namespace(doc, options)
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
    config = spec["rayClusterConfig"]
    digest = generation_hash(config)
    cluster = parse_raycluster(
        f"{name}-{digest}",
        namespace,
        config,
        labels={**labels, naming.RAY_ORIGIN_NAME: name, naming.RAY_ORIGIN_CRD: KIND},
        annotations=annotations,
        creator=KIND,
        origin_kind=KIND,
        origin_name=name,
    )
    return RayServicePlan(
        name=name,
        namespace=namespace,
        labels=labels,
        annotations=annotations,
        spec=spec,
        strategy=upgrade_type(spec),
        cluster=cluster,
        hash=digest,
    )
