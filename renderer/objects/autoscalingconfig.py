"""Ray's autoscaling config, derived from a cluster spec as Ray's KubeRay integration does.

A port of `_derive_autoscaling_config_from_ray_cr` (Ray 2.60,
`python/ray/autoscaler/_private/kuberay/autoscaling_config.py`; reference autoscaling.md
§1.3): node types, Ray resources, min/max workers, idle timeout, upscaling speed and node
labels, read from the spec the way the API server stores it (CRD defaults applied). Only
the `provider` block differs: Ray's own `external` plug-in with the project's provider
(§5.2). Where Ray would raise (and the autoscaler crash-loop), `derive` returns a problem
instead. The parity test holds this port to Ray's own function. Pure.
"""

from __future__ import annotations

import decimal
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from renderer.errors import JsonPath, Problem
from renderer.manifest import Manifest

HEAD_GROUP: Final = "headgroup"
PROVIDER_MODULE: Final = "kuberay_gitops_autoscaler.PodProvider"
_MAX_INT32: Final = 2147483647
_TOPOLOGY_LABEL: Final = "cloud.google.com/gke-tpu-topology"
_ACCELERATOR_LABEL: Final = "cloud.google.com/gke-tpu-accelerator"
# ray/autoscaler/_private/kuberay/utils.py and ray/_private/accelerators/tpu.py.
_TPU_GENERATIONS: Final = {
    "tpu-v4-podslice": "v4",
    "tpu-v5-lite-device": "v5litepod",
    "tpu-v5-lite-podslice": "v5litepod",
    "tpu-v5p-slice": "v5p",
    "tpu-v6e-slice": "v6e",
    "tpu7x": "v7x",
}
_SINGLE_CORE_TPUS: Final = ("v5litepod", "v6e")
_EXPONENTS: Final = {
    "n": -3,
    "u": -2,
    "m": -1,
    "K": 1,
    "k": 1,
    "M": 2,
    "G": 3,
    "T": 4,
    "P": 5,
    "E": 6,
}
# Fields Ray requires for compatibility with cluster-launcher configs; they carry nothing.
_LEGACY_FIELDS: Final[Mapping[str, Any]] = {
    "file_mounts": {},
    "cluster_synced_files": [],
    "file_mounts_sync_continuously": False,
    "initialization_commands": [],
    "setup_commands": [],
    "head_setup_commands": [],
    "worker_setup_commands": [],
    "head_start_ray_commands": [],
    "worker_start_ray_commands": [],
    "auth": {},
}


class _UnreadableError(Exception):
    """Ray would raise here: a value its autoscaler cannot read."""

    def __init__(self, path: JsonPath, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message


def state_configmap_name(cluster: str) -> str:
    """`<cluster>-autoscaler-state`: the desired-set ConfigMap (not in git, §5.3)."""
    return f"{cluster}-autoscaler-state"


def provider_config(cluster: str, namespace: str) -> Manifest:
    """The `provider` block: Ray's `external` type with the project's PodProvider."""
    return {
        "type": "external",
        "module": PROVIDER_MODULE,
        "namespace": namespace,
        "cluster": cluster,
        "state_configmap": state_configmap_name(cluster),
        "disable_node_updaters": True,
        "disable_launch_config_check": True,
        "foreground_node_launch": True,
        "worker_liveness_check": False,
    }


def parse_quantity(value: object) -> decimal.Decimal:
    """Ray's `parse_quantity` (a copy of the Kubernetes Python client's), on Decimals."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"invalid quantity {value!r}")
    if isinstance(value, int | float):
        return decimal.Decimal(value)
    number, suffix = value, ""
    if len(value) >= 2 and value[-1] == "i":
        if value[-2] in _EXPONENTS:
            number, suffix = value[:-2], value[-2:]
    elif len(value) >= 1 and value[-1] in _EXPONENTS:
        number, suffix = value[:-1], value[-1:]
    try:
        parsed = decimal.Decimal(number)
    except decimal.InvalidOperation:
        raise ValueError(f"invalid number format: {number}") from None
    if not suffix:
        return parsed
    base = 1024 if suffix.endswith("i") else 1000
    if suffix == "ki":
        raise ValueError(f"{value} has unknown suffix")
    return parsed * (base ** decimal.Decimal(_EXPONENTS[suffix[0]]))


def round_up(value: object) -> int:
    """Ray's `_round_up_k8s_quantity`: the quantity rounded away from zero, as an int."""
    try:
        return int(parse_quantity(value).to_integral_value(rounding=decimal.ROUND_UP))
    except (ValueError, OverflowError, decimal.InvalidOperation) as exc:
        raise ValueError(str(exc) or f"invalid quantity {value!r}") from None


@dataclass(slots=True)
class _Group:
    """One group as Ray reads it: the spec with the CRD defaults, and where it sits."""

    spec: Manifest
    at: JsonPath
    name: str
    head: bool
    resources: Manifest = field(init=False)
    params: Manifest = field(init=False)
    k8s: Manifest = field(init=False)

    def __post_init__(self) -> None:
        self.resources = _mapping(self.spec.get("resources"))
        self.params = _mapping(self.spec.get("rayStartParams"))
        containers = (self.spec.get("template") or {}).get("spec", {}).get("containers") or [{}]
        self.k8s = _mapping(containers[0].get("resources"))

    def quantity(self, path: JsonPath, value: object) -> int:
        try:
            return round_up(value)
        except ValueError as exc:
            raise _UnreadableError((*self.at, *path), f"{self._reader()}: {exc}") from None

    def integer(self, key: str) -> int:
        try:
            return int(self.params[key])
        except (TypeError, ValueError):
            raise _UnreadableError(
                (*self.at, "rayStartParams", key),
                f"{self._reader()}: rayStartParams {key} {json.dumps(self.params[key])} is not "
                "an integer (Ray reads it with int())",
            ) from None

    def _reader(self) -> str:
        return f"Ray's autoscaler cannot read the resources of group {self.name}"

    def limits(self) -> Manifest:
        return _mapping(self.k8s.get("limits"))

    def requests(self) -> Manifest:
        return _mapping(self.k8s.get("requests"))

    def container_at(self, kind: str, key: str) -> JsonPath:
        return ("template", "spec", "containers", 0, "resources", kind, key)


def _mapping(value: object) -> Manifest:
    return value if isinstance(value, dict) else {}


def _num_cpus(group: _Group) -> int:
    if "CPU" in group.resources:
        return group.quantity(("resources", "CPU"), group.resources["CPU"])
    if "num-cpus" in group.params:
        return group.integer("num-cpus")
    for kind, source in (("limits", group.limits()), ("requests", group.requests())):
        if "cpu" in source:
            return group.quantity(group.container_at(kind, "cpu"), source["cpu"])
    raise _UnreadableError(
        (*group.at, "template", "spec", "containers", 0),
        f"Ray's autoscaler cannot detect the CPUs of group {group.name}: set the num-cpus "
        "rayStartParam or a CPU limit or request on the Ray container",
    )


def _memory(group: _Group) -> int | None:
    if "memory" in group.resources:
        return group.quantity(("resources", "memory"), group.resources["memory"])
    if "memory" in group.params:
        return group.integer("memory")
    for kind, source in (("limits", group.limits()), ("requests", group.requests())):
        if "memory" in source:
            return group.quantity(group.container_at(kind, "memory"), source["memory"])
    return None


def _num_gpus(group: _Group) -> int | None:
    if "GPU" in group.resources:
        return group.quantity(("resources", "GPU"), group.resources["GPU"])
    if "num-gpus" in group.params:
        return group.integer("num-gpus")
    for kind, source in (("limits", group.limits()), ("requests", group.requests())):
        for key, value in source.items():
            if str(key).endswith("gpu"):
                count = group.quantity(group.container_at(kind, key), value)
                if count > 0:
                    return count  # Ray takes the first GPU-like key with a positive count
    return None


def _custom_resources(group: _Group) -> dict[str, int]:
    if group.resources:
        standard = {"CPU", "GPU", "TPU", "memory"}
        return {
            str(key): group.quantity(("resources", key), value)
            for key, value in group.resources.items()
            if key not in standard
        }
    if "resources" not in group.params:
        return {}
    text = group.params["resources"]
    try:
        # Ray drops the outer quotes and every backslash, then reads JSON of int values.
        decoded = json.loads(str(text)[1:-1].replace("\\", ""))
        if not isinstance(decoded, dict) or not all(isinstance(v, int) for v in decoded.values()):
            raise ValueError
    except ValueError:
        raise _UnreadableError(
            (*group.at, "rayStartParams", "resources"),
            f"Ray's autoscaler cannot read the resources rayStartParam of group {group.name}: "
            'expected a quoted JSON object of integers, e.g. \'"{\\"Custom1\\": 1}"\'',
        ) from None
    return {str(key): value for key, value in decoded.items()}


def _num_tpus(group: _Group, custom: Mapping[str, int]) -> int | None:
    if "TPU" in group.resources:
        return group.quantity(("resources", "TPU"), group.resources["TPU"])
    if "TPU" in custom:
        return custom["TPU"]
    for kind, source in (("limits", group.limits()), ("requests", group.requests())):
        value = source.get("google.com/tpu")
        if value is not None:
            count = group.quantity(group.container_at(kind, "google.com/tpu"), value)
            if count > 0:
                return count
    return None


def _tpu_head_resource(group: _Group) -> str | None:
    """`TPU-<type>-head`, from the GKE TPU node selectors (Ray's `tpu_node_selectors_to_type`)."""
    selector = _mapping((group.spec.get("template") or {}).get("spec", {}).get("nodeSelector"))
    if _TOPOLOGY_LABEL not in selector or _ACCELERATOR_LABEL not in selector:
        return None
    topology, accelerator = selector[_TOPOLOGY_LABEL], selector[_ACCELERATOR_LABEL]
    if not topology or not accelerator:
        return None
    generation = _TPU_GENERATIONS.get(str(accelerator))
    if generation is None:
        return None
    at = (*group.at, "template", "spec", "nodeSelector", _TOPOLOGY_LABEL)
    chips = 1
    try:
        for dim in str(topology).strip().lower().split("x"):
            chips *= int(dim)
    except ValueError:
        raise _UnreadableError(
            at, f"Ray's autoscaler cannot read the TPU topology {json.dumps(topology)}"
        ) from None
    cores = 1 if generation.startswith(_SINGLE_CORE_TPUS) else 2
    return f"TPU-{generation}-{chips * cores}-head"


def _ray_resources(group: _Group) -> dict[str, int]:
    resources: dict[str, int] = {"CPU": _num_cpus(group)}
    gpus = _num_gpus(group)
    custom = _custom_resources(group)
    tpus = _num_tpus(group, custom)
    memory = _memory(group)
    if gpus is not None:
        resources["GPU"] = gpus
    if tpus is not None:
        if "TPU" not in custom:
            resources["TPU"] = tpus
        head = _tpu_head_resource(group)
        if head is not None:
            resources[head] = 1
    if memory is not None:
        resources["memory"] = memory
    resources.update(custom)
    return resources


def _node_type(group: _Group) -> Manifest:
    if group.head:
        low = high = 0
    else:
        hosts = group.spec.get("numOfHosts", 1)
        low = group.spec.get("minReplicas", 0) * hosts
        high = group.spec.get("maxReplicas", _MAX_INT32) * hosts
    labels = group.spec.get("labels")
    node_type: Manifest = {
        "min_workers": low,
        "max_workers": high,
        "node_config": {},
        "resources": _ray_resources(group),
        "labels": dict(labels) if isinstance(labels, dict) else {},
    }
    if group.spec.get("idleTimeoutSeconds") is not None:
        node_type["idle_timeout_s"] = float(group.spec["idleTimeoutSeconds"])
    if not group.head:
        # The CRD defaults `priority` to 0, so Ray sees it on every worker group.
        node_type["priority"] = int(group.spec.get("priority", 0))
    return node_type


def _upscaling_speed(mode: object) -> int:
    """`Conservative` rate-limits to 1; Default, Aggressive and unset mean 1000."""
    return 1 if mode == "Conservative" else 1000


def derive(
    cluster: str, namespace: str, spec: Manifest, at: JsonPath
) -> tuple[Manifest | None, list[Problem]]:
    """The autoscaling config of a cluster spec, or the problems Ray's derivation would hit.

    `at` is the path of the cluster spec in its document, for the problems.
    """
    groups = [_Group(spec["headGroupSpec"], (*at, "headGroupSpec"), HEAD_GROUP, head=True)]
    for index, worker in enumerate(spec.get("workerGroupSpecs") or []):
        groups.append(
            _Group(worker, (*at, "workerGroupSpecs", index), str(worker["groupName"]), head=False)
        )
    types: dict[str, Manifest] = {}
    problems: list[Problem] = []
    for group in groups:
        try:
            types[group.name] = _node_type(group)
        except _UnreadableError as exc:
            problems.append(Problem(exc.path, exc.message))
    if problems:
        return None, problems
    options = _mapping(spec.get("autoscalerOptions"))
    idle = options.get("idleTimeoutSeconds")
    config: Manifest = {
        "provider": provider_config(cluster, namespace),
        "cluster_name": cluster,
        "head_node_type": HEAD_GROUP,
        "available_node_types": types,
        "max_workers": sum(t["max_workers"] for t in types.values()),
        "idle_timeout_minutes": idle / 60.0 if idle is not None else 1.0,
        "upscaling_speed": _upscaling_speed(options.get("upscalingMode")),
        **{key: json.loads(json.dumps(value)) for key, value in _LEGACY_FIELDS.items()},
    }
    return config, []


def json_text(value: object) -> str:
    """Deterministic, reviewable JSON: sorted keys, 2-space indent, UTF-8, one final newline.

    Used for every data key of the autoscaling ConfigMap (`autoscaling.yaml` too: JSON is
    YAML), so that a change in git shows as a readable diff.
    """
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def config_text(config: Manifest) -> str:
    """`autoscaling.yaml`: the config as JSON text (which every YAML reader reads)."""
    return json_text(config)


def groups_json(spec: Manifest) -> str:
    """`groups.json`: `{group: {min, max, replicas}}` with the CRD defaults."""
    groups: dict[str, dict[str, int]] = {}
    for worker in spec.get("workerGroupSpecs") or []:
        low = int(worker.get("minReplicas", 0) or 0)
        high = worker.get("maxReplicas")
        groups[str(worker["groupName"])] = {
            "min": low,
            "max": int(high) if high is not None else _MAX_INT32,
            "replicas": int(worker.get("replicas", 0) or 0),
        }
    return json_text(groups)
