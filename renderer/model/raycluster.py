"""The RayCluster model: a frozen view of a checked cluster spec, what the builders read.

`parse_raycluster` takes a spec that passed the schema (standalone, or embedded in a
RayJob or RayService), applies the CRD defaults KubeRay relies on, and derives the facts
every builder shares (head Service name, FQDN, head port, the head's port set). Pod
templates stay plain dicts (`Manifest`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from renderer import naming
from renderer.manifest import Manifest
from renderer.options import RenderOptions

MAX_INT32: Final = 2147483647
DEFAULT_HEAD_PORT: Final = "6379"
DEFAULT_DASHBOARD_PORT: Final = 8265
DEFAULT_SERVE_PORT: Final = 8000
# KubeRay's head port set when the Ray container declares none (raycluster.md §3.1).
_DEFAULT_PORTS: Final = {
    "client": 10001,
    "gcs-server": 6379,
    "dashboard": DEFAULT_DASHBOARD_PORT,
    "metrics": 8080,
    "serve": DEFAULT_SERVE_PORT,
}

EMPTY: Final[Mapping[str, str]] = MappingProxyType({})


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
    def service_ports(self) -> dict[str, int]:
        """KubeRay's port set from the head template's Ray container (§3.1), name → port."""
        container = self.head["template"]["spec"]["containers"][0]
        declared = container.get("ports") or []
        ports: dict[str, int] = {}
        if not declared:
            ports.update(_DEFAULT_PORTS)
        for port in declared:
            number = int(port["containerPort"])
            ports[str(port.get("name") or f"{number}-port")] = number
        ports.setdefault("metrics", 8080)
        return ports

    @property
    def serve_ports(self) -> dict[str, int]:
        """The entries of the port set named `serve` or `serve-*`."""
        return {
            name: port
            for name, port in self.service_ports.items()
            if name == "serve" or name.startswith("serve-")
        }

    @property
    def wants_serve_service(self) -> bool:
        """The annotation `ray.io/enable-serve-service: "true"` asks for a serve Service."""
        return self.annotations.get(naming.ANN_ENABLE_SERVE_SERVICE) == "true"

    @property
    def suspended(self) -> bool:
        """`spec.suspend: true`."""
        return self.spec.get("suspend") is True

    @property
    def autoscaling(self) -> bool:
        """`enableInTreeAutoscaling: true`: Ray's autoscaler sizes the worker groups."""
        return self.spec.get("enableInTreeAutoscaling") is True

    @property
    def autoscaler_version(self) -> str | None:
        """`autoscalerOptions.version` (`v2`; `v1` is refused), or None when unset."""
        version = (self.spec.get("autoscalerOptions") or {}).get("version")
        return str(version) if version is not None else None

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
        num_of_hosts=_hosts(group.get("numOfHosts")),
        suspended=group.get("suspend") is True,
    )


def _hosts(value: object) -> int:
    """`numOfHosts` with the CRD default 1 when absent; 0 is kept (KubeRay: replicas x 0 Pods)."""
    if not isinstance(value, int) or isinstance(value, bool):
        return 1
    return max(value, 0)


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
