"""Frozen views of checked manifests: what the builders read.

`parse_*` functions take a document that passed schema and semantic checks, apply
the CRD defaults KubeRay relies on, and derive the names every builder shares
(head Service, FQDN, head port). Pod templates stay plain dicts (`Manifest`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from renderer import naming
from renderer.errors import Origin
from renderer.options import RenderOptions

Manifest = dict[str, Any]

MAX_INT32: Final = 2147483647
DEFAULT_HEAD_PORT: Final = "6379"

EMPTY: Final[Mapping[str, str]] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class ObjectKey:
    """Identity of an output object: two objects with the same key are an error."""

    api_version: str
    kind: str
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class WorkerGroup:
    """One entry of `workerGroupSpecs`, with CRD defaults applied."""

    index: int
    name: str
    spec: Manifest
    replicas: int
    num_of_hosts: int
    suspended: bool

    @property
    def pod_count(self) -> int:
        """KubeRay's desired pod count (raycluster.md §1.6)."""
        return 0 if self.suspended else self.replicas * self.num_of_hosts


@dataclass(frozen=True, slots=True)
class RayCluster:
    """A RayCluster to build, standalone or embedded in a RayJob or RayService."""

    name: str
    namespace: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    spec: Manifest
    workers: tuple[WorkerGroup, ...]
    creator: str = "RayCluster"
    origin_kind: str = "RayCluster"
    origin_name: str = ""
    # Wraps the bare `ray start` command, e.g. RayJob's shutdown-aware wrapper (DESIGN §3).
    start_wrapper: Callable[[str], str] | None = None
    extra_pod_labels: Mapping[str, str] = field(default_factory=lambda: EMPTY)
    restart_policy: str | None = None

    @property
    def head(self) -> Manifest:
        """`spec.headGroupSpec`."""
        head: Manifest = self.spec["headGroupSpec"]
        return head

    @property
    def head_service_name(self) -> str:
        """`<HS>`: the custom head Service name, else `<C>-head-svc`."""
        custom = self.head.get("headService") or {}
        name = (custom.get("metadata") or {}).get("name")
        return str(name) if name else naming.head_service_name(self.name)

    def fqdn(self, options: RenderOptions) -> str:
        """`<HS>.<NS>.svc.<DOMAIN>`."""
        return f"{self.head_service_name}.{self.namespace}.svc.{options.cluster_domain}"

    @property
    def head_port(self) -> str:
        """`<HP>`: head rayStartParams `port`, verbatim, else 6379."""
        params = self.head.get("rayStartParams") or {}
        return str(params["port"]) if "port" in params else DEFAULT_HEAD_PORT

    @property
    def suspended(self) -> bool:
        """`spec.suspend: true`."""
        return self.spec.get("suspend") is True

    @property
    def ft_enabled(self) -> bool:
        """GCS fault tolerance is on (options, or the legacy annotation)."""
        if self.spec.get("gcsFaultToleranceOptions") is not None:
            return True
        return str(self.annotations.get(naming.ANN_FT_ENABLED, "")).lower() == "true"

    @property
    def ft_backend(self) -> str:
        """`redis` or `rocksdb` (the legacy annotation always means Redis)."""
        ft = self.spec.get("gcsFaultToleranceOptions") or {}
        return str(ft.get("backend") or "redis")

    @property
    def overwrite_command(self) -> bool:
        """The RayCluster annotation `ray.io/overwrite-container-cmd` is `true`."""
        return str(self.annotations.get(naming.ANN_OVERWRITE_CMD, "")).lower() == "true"

    @property
    def source_labels(self) -> dict[str, str]:
        """The project's labels on every object rendered for this cluster (DESIGN §1)."""
        return {
            naming.MANAGED_BY: naming.MANAGED_BY_VALUE,
            naming.ORIGIN_KIND: self.origin_kind,
            naming.ORIGIN_NAME: self.origin_name or self.name,
        }


def _clamp(replicas: int, low: int, high: int) -> int:
    return max(low, min(high, replicas))


def parse_worker_group(index: int, group: Manifest) -> WorkerGroup:
    """Apply the CRD defaults of one worker group (replicas 0, min 0, max int32, hosts 1)."""
    low = int(group.get("minReplicas", 0) or 0)
    high = int(
        group.get("maxReplicas", MAX_INT32) if group.get("maxReplicas") is not None else MAX_INT32
    )
    raw = group.get("replicas")
    replicas = _clamp(int(raw) if raw is not None else low, low, high)
    return WorkerGroup(
        index=index,
        name=str(group["groupName"]),
        spec=group,
        replicas=replicas,
        num_of_hosts=int(group.get("numOfHosts", 1) or 1),
        suspended=group.get("suspend") is True,
    )


def parse_raycluster(
    name: str,
    namespace: str,
    spec: Manifest,
    *,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    creator: str = "RayCluster",
    origin_kind: str = "RayCluster",
    origin_name: str = "",
    start_wrapper: Callable[[str], str] | None = None,
    extra_pod_labels: Mapping[str, str] | None = None,
    restart_policy: str | None = None,
) -> RayCluster:
    """Build the frozen view of a cluster spec (standalone or embedded)."""
    workers = tuple(
        parse_worker_group(i, group) for i, group in enumerate(spec.get("workerGroupSpecs") or [])
    )
    return RayCluster(
        name=name,
        namespace=namespace,
        labels=MappingProxyType(dict(labels or {})),
        annotations=MappingProxyType(dict(annotations or {})),
        spec=spec,
        workers=workers,
        creator=creator,
        origin_kind=origin_kind,
        origin_name=origin_name or name,
        start_wrapper=start_wrapper,
        extra_pod_labels=MappingProxyType(dict(extra_pod_labels or {})),
        restart_policy=restart_policy,
    )


def document_namespace(doc: Manifest, options: RenderOptions) -> str:
    """The namespace a document renders into: its own, else the render option."""
    meta = doc.get("metadata") or {}
    return str(meta.get("namespace") or options.namespace)


@dataclass(frozen=True, slots=True)
class Document:
    """One parsed YAML document and where it came from."""

    data: Any
    origin: Origin
