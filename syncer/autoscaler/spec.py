"""The rendered `<cluster>-autoscaling` ConfigMap as the actuator trusts it (DESIGN §1.1). Pure.

The ConfigMap speaks for one Ray cluster in its own namespace only: its name must be
`<ray.io/cluster label>-autoscaling`, it must carry the renderer's labels and
`kuberay.io/role: autoscaling`, and nothing in its payload names a namespace or an address
(a template's `metadata.namespace`, when present, must be the ConfigMap's). Keys read:
`groups.json` (`{"<group>": {"min", "max", "replicas"}}`) and `workers.json`
(`{"<group>": <worker Pod template>}`). Every other shape is an `IntentError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from renderer import naming
from syncer import status, trust
from syncer.errors import IntentError

Manifest = dict[str, Any]

ROLE_AUTOSCALING: Final = "autoscaling"
ROLE_STATE: Final = "autoscaler-state"
GROUPS_KEY: Final = "groups.json"
WORKERS_KEY: Final = "workers.json"
CACHED_KEYS: Final = (GROUPS_KEY, WORKERS_KEY)
# The most workers one group may ask for. KubeRay has no limit; a desired set above this
# would not fit a ConfigMap (1 MiB) and is refused as not what the renderer writes.
MAX_GROUP_WORKERS: Final = 2000
MAX_PAYLOAD_BYTES: Final = 512 * 1024


def spec_configmap_name(cluster: str) -> str:
    """`<cluster>-autoscaling`: the rendered ConfigMap."""
    return f"{cluster}-autoscaling"


def state_configmap_name(cluster: str) -> str:
    """`<cluster>-autoscaler-state`: the desired set (not in git; the actuator creates it)."""
    return f"{cluster}-autoscaler-state"


@dataclass(frozen=True, slots=True)
class Group:
    """One autoscaled worker group: its bounds and its Pod template (no name, no index)."""

    name: str
    min: int
    max: int
    replicas: int
    template: Manifest

    @property
    def seed(self) -> int:
        """How many workers the desired set starts with: max(replicas, min), within max."""
        return min(max(self.replicas, self.min), self.max)


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """What the ConfigMap says about one cluster, checked."""

    namespace: str
    cluster: str
    origin_kind: str
    origin_name: str
    groups: dict[str, Group]


def cluster_of(cm: Manifest) -> str:
    """The `ray.io/cluster` label ("" when absent)."""
    labels = (cm.get("metadata") or {}).get("labels") or {}
    value = labels.get(naming.RAY_CLUSTER) if isinstance(labels, dict) else None
    return value if isinstance(value, str) else ""


def _count(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise IntentError(f"{path} is not an integer: {value!r}")
    if not 0 <= value <= MAX_GROUP_WORKERS:
        raise IntentError(f"{path} is {value}, not in 0..{MAX_GROUP_WORKERS}")
    return value


def _json(data: Manifest, key: str) -> Manifest:
    return trust.json_object(data, key, "the autoscaling", MAX_PAYLOAD_BYTES)


def _template(value: Any, group: str, namespace: str, cluster: str) -> Manifest:
    path = f"{WORKERS_KEY}: $.{group}"
    if not isinstance(value, dict):
        raise IntentError(f"{path} is not a Pod template")
    meta = value.get("metadata")
    spec = value.get("spec")
    if not isinstance(meta, dict) or not isinstance(spec, dict):
        raise IntentError(f"{path} has no metadata or spec")
    if not isinstance(spec.get("containers"), list) or not spec["containers"]:
        raise IntentError(f"{path}.spec.containers is empty")
    if meta.get("namespace") not in (None, namespace):
        raise IntentError(
            f"{path}.metadata.namespace is {meta.get('namespace')!r}, "
            f"but the ConfigMap is in {namespace!r}"
        )
    labels = meta.get("labels")
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise IntentError(f"{path}.metadata.labels is not a map of strings")
    for key, expected in (
        (naming.RAY_CLUSTER, cluster),
        (naming.RAY_GROUP, group),
        (naming.RAY_NODE_TYPE, "worker"),
    ):
        if labels.get(key) != expected:
            raise IntentError(
                f"{path}.metadata.labels[{key!r}] is {labels.get(key)!r}, expected {expected!r}"
            )
    annotations = meta.get("annotations")
    if annotations is not None and not (
        isinstance(annotations, dict) and all(isinstance(v, str) for v in annotations.values())
    ):
        raise IntentError(f"{path}.metadata.annotations is not a map of strings")
    return value


def parse(cm: Manifest) -> ClusterSpec:
    """The cluster spec of a rendered autoscaling ConfigMap; IntentError when not trusted."""
    meta = cm.get("metadata")
    if not isinstance(meta, dict):
        raise IntentError("the autoscaling ConfigMap has no metadata")
    namespace, name = meta.get("namespace"), meta.get("name")
    if not isinstance(namespace, str) or not namespace or not isinstance(name, str):
        raise IntentError("the autoscaling ConfigMap has no namespace or name")
    labels = meta.get("labels")
    labels = labels if isinstance(labels, dict) else {}
    cluster = cluster_of(cm)
    if not naming.is_dns1123_label(cluster):
        raise IntentError(f"label {naming.RAY_CLUSTER} is {cluster!r}, not a cluster name")
    if name != spec_configmap_name(cluster):
        raise IntentError(
            f"ConfigMap {name!r} is not {spec_configmap_name(cluster)!r}, "
            f"the autoscaling ConfigMap of cluster {cluster!r}"
        )
    for key, expected in (
        (naming.MANAGED_BY, naming.MANAGED_BY_VALUE),
        (naming.ROLE, ROLE_AUTOSCALING),
    ):
        if labels.get(key) != expected:
            raise IntentError(f"label {key} is {labels.get(key)!r}, expected {expected!r}")
    origin_kind = labels.get(naming.ORIGIN_KIND)
    origin_name = labels.get(naming.ORIGIN_NAME)
    if not isinstance(origin_kind, str) or not isinstance(origin_name, str) or not origin_name:
        raise IntentError(f"labels {naming.ORIGIN_KIND} and {naming.ORIGIN_NAME} are required")
    data = cm.get("data")
    if not isinstance(data, dict):
        raise IntentError("the autoscaling ConfigMap has no data")
    if status.OVERSIZED_KEY in data:
        raise IntentError(f"the autoscaling ConfigMap holds {data[status.OVERSIZED_KEY]} bytes")
    bounds, templates = _json(data, GROUPS_KEY), _json(data, WORKERS_KEY)
    groups: dict[str, Group] = {}
    for group, value in sorted(bounds.items()):
        path = f"{GROUPS_KEY}: $.{group}"
        if not naming.is_dns1123_label(group):
            raise IntentError(f"{path}: group name {group!r} is not a DNS label")
        if not isinstance(value, dict):
            raise IntentError(f"{path} is not an object")
        low, high = _count(value.get("min"), f"{path}.min"), _count(value.get("max"), f"{path}.max")
        replicas = _count(value.get("replicas", low), f"{path}.replicas")
        if low > high:
            raise IntentError(f"{path}: min {low} is above max {high}")
        template = _template(templates.get(group), group, namespace, cluster)
        groups[group] = Group(group, low, high, replicas, template)
    extra = sorted(set(templates) - set(groups))
    if extra:
        raise IntentError(f"{WORKERS_KEY} has groups without bounds: {', '.join(extra)}")
    return ClusterSpec(namespace, cluster, origin_kind, origin_name, groups)
