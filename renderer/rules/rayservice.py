"""KubeRay's semantic rules for a RayService, plus the renderer's own refusals.

Mirrors `ValidateRayServiceMetadata`, `ValidateRayServiceSpec` and `ValidateClusterUpgradeOptions`
(reference rayservice.md §2.3) in KubeRay's order and hands `rayClusterConfig` to the RayCluster
rules, but reports every problem at the offending field. One deliberate difference (DESIGN
§3): an incremental upgrade does not require `enableInTreeAutoscaling`. `check_plan` holds
the checks KubeRay makes only while reconciling (serve config, ports, upgrade annotations).
Pure: `Problem`s out.
"""

from __future__ import annotations

import re
from typing import Final

from renderer import naming, yamltext
from renderer.errors import JsonPath, Problem
from renderer.manifest import Manifest
from renderer.model.rayservice import RayServicePlan
from renderer.options import RenderOptions
from renderer.rules import document, raycluster
from renderer.rules.document import as_dict, as_text
from schemas.intent import ANN_PROGRESS_DEADLINE, ANN_UPGRADE_PAUSED, INCREMENTAL, UPGRADE_TYPES

MAX_RAYSERVICE_NAME: Final = raycluster.MAX_RAYCLUSTER_NAME - 6  # room for `-xxxxx`
_ANN_INITIALIZING_TIMEOUT: Final = "ray.io/initializing-timeout"
_CLUSTER: Final[JsonPath] = ("spec", "rayClusterConfig")
_STRATEGY: Final[JsonPath] = ("spec", "upgradeStrategy")

# Go's time.ParseDuration grammar: a sign, then one or more <decimal><unit>, or a bare "0".
_DURATION: Final = re.compile(r"[-+]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:ns|us|µs|μs|ms|s|m|h))+")
_DURATION_PART: Final = re.compile(r"([0-9]*\.?[0-9]*)(ns|us|µs|μs|ms|s|m|h)")
_INTEGER: Final = re.compile(r"[-+]?[0-9]+")


def _duration_is_positive(text: str) -> bool | None:
    """Parse a Go duration; None when it does not parse, else whether it is > 0."""
    if text in ("0", "+0", "-0"):
        return False
    if _DURATION.fullmatch(text) is None:
        return None
    total = sum(float(number) for number, _ in _DURATION_PART.findall(text))
    return total > 0 and not text.startswith("-")


def _initializing_timeout_error(value: str) -> str | None:
    """`ray.io/initializing-timeout`: a positive Go duration or a positive integer of seconds."""
    key = _ANN_INITIALIZING_TIMEOUT
    positive = _duration_is_positive(value)
    if positive is not None:
        return None if positive else f"annotation {key} must be a positive duration, got: {value}"
    if _INTEGER.fullmatch(value) is not None:
        if int(value) > 0:
            return None
        return f"annotation {key} must be a positive integer (seconds), got: {value}"
    return (
        f"annotation {key} has invalid format: {value}. Expected Go duration format "
        "(e.g., '5m', '1h') or positive integer seconds"
    )


def check_rayservice(doc: Manifest, options: RenderOptions) -> list[Problem]:
    """Check a RayService that already passed the JSON Schema (CRD defaults not applied)."""
    spec = as_dict(doc.get("spec"))
    managed = document.check_managed_by(spec, ("spec", "managedBy"), "RayService")
    if managed is not None:
        return [managed]
    problems = document.check_object_name(doc, "RayService", MAX_RAYSERVICE_NAME)
    annotations = as_dict(as_dict(doc.get("metadata")).get("annotations"))
    timeout = as_text(annotations.get(_ANN_INITIALIZING_TIMEOUT))
    error = _initializing_timeout_error(timeout) if timeout else None
    if error is not None:
        problems.append(Problem(("metadata", "annotations", _ANN_INITIALIZING_TIMEOUT), error))

    if spec.get("rayClusterConfig") is not None:
        cluster = as_dict(spec["rayClusterConfig"])
        if as_dict(cluster.get("authOptions")).get("enableK8sTokenAuth") is True:
            problems.append(
                Problem(
                    (*_CLUSTER, "authOptions", "enableK8sTokenAuth"),
                    "K8s token auth mode is currently not supported for RayService; remove "
                    "enableK8sTokenAuth",
                )
            )
        problems.extend(
            raycluster.check_raycluster(
                {"metadata": doc.get("metadata"), "spec": cluster},
                options,
                creator="RayService",
                base=_CLUSTER,
            )
        )
        head_service = as_dict(as_dict(cluster.get("headGroupSpec")).get("headService"))
        if as_text(as_dict(head_service.get("metadata")).get("name")):
            problems.append(
                Problem(
                    (*_CLUSTER, "headGroupSpec", "headService", "metadata", "name"),
                    "spec.rayClusterConfig.headGroupSpec.headService.metadata.name should not be "
                    "set; remove it (the head Service is named after the RayService)",
                )
            )

    strategy = as_dict(spec.get("upgradeStrategy"))
    kind = strategy.get("type")
    if kind is not None and kind not in UPGRADE_TYPES:
        problems.append(
            Problem(
                (*_STRATEGY, "type"),
                f"Spec.UpgradeStrategy.Type value {kind} is invalid, valid options are "
                f"{INCREMENTAL}, NewCluster, or None",
            )
        )
    delay = spec.get("rayClusterDeletionDelaySeconds")
    if delay is not None and delay < 0:
        problems.append(
            Problem(
                ("spec", "rayClusterDeletionDelaySeconds"),
                "Spec.RayClusterDeletionDelaySeconds should be a non-negative integer, "
                f"got {delay}",
            )
        )
    if kind == INCREMENTAL:
        problems.extend(_check_incremental(strategy, options))
    return problems


def _check_incremental(strategy: Manifest, options: RenderOptions) -> list[Problem]:
    """`ValidateClusterUpgradeOptions`, without its autoscaler requirement (DESIGN §3)."""
    problems: list[Problem] = []
    gate = "RayServiceIncrementalUpgrade"
    if not options.gate(gate):
        # KubeRay silently treats the type as None when the gate is off; we refuse instead.
        problems.append(
            Problem(
                (*_STRATEGY, "type"),
                f"{INCREMENTAL} requires the {gate} feature gate (KubeRay would silently treat "
                f"the strategy as None); {document.gate_hint(gate)}",
            )
        )
    if strategy.get("clusterUpgradeOptions") is None:
        problems.append(
            Problem(
                _STRATEGY,
                f"ClusterUpgradeOptions are required for {INCREMENTAL}; set "
                "upgradeStrategy.clusterUpgradeOptions",
            )
        )
        return problems
    upgrade = as_dict(strategy["clusterUpgradeOptions"])
    at = (*_STRATEGY, "clusterUpgradeOptions")
    surge = upgrade.get("maxSurgePercent", 100)
    step = upgrade.get("stepSizePercent")
    interval = upgrade.get("intervalSeconds")
    surge_ok = 0 <= surge <= 100
    if not surge_ok:
        problems.append(
            Problem((*at, "maxSurgePercent"), "maxSurgePercent must be between 0 and 100")
        )
    if step is None or not 0 <= step <= 100:
        problems.append(
            Problem(
                (*at, "stepSizePercent") if step is not None else at,
                "stepSizePercent must be between 0 and 100",
            )
        )
    elif surge_ok and step > surge:
        problems.append(
            Problem(
                (*at, "stepSizePercent"),
                "stepSizePercent must be less than or equal to maxSurgePercent",
            )
        )
    if interval is None or interval <= 0:
        problems.append(
            Problem(
                (*at, "intervalSeconds") if interval is not None else at,
                "intervalSeconds must be greater than 0",
            )
        )
    if not as_text(upgrade.get("gatewayClassName")):
        problems.append(
            Problem(
                (*at, "gatewayClassName") if "gatewayClassName" in upgrade else at,
                f"gatewayClassName is required for {INCREMENTAL}",
            )
        )
    return problems


# --- checks of the parsed service (KubeRay makes them while reconciling) ----------------

_HEAD_PORTS: Final[JsonPath] = (
    *_CLUSTER,
    "headGroupSpec",
    "template",
    "spec",
    "containers",
    0,
    "ports",
)
_SERVE_PORT_MESSAGE: Final = (
    "the head container declares no port named 'serve' (or with the prefix 'serve-', e.g. "
    "'serve-grpc'); KubeRay would never create the Kubernetes Service for Ray Serve: add such "
    "a port"
)


def _check_serve_config(service: RayServicePlan) -> list[Problem]:
    at: JsonPath = ("spec", "serveConfigV2")
    text = service.serve_config
    if not text.strip():
        return [
            Problem(
                at,
                "serveConfigV2 is empty: no Serve application is deployed and the RayService "
                "never becomes ready; set serveConfigV2",
                "warning",
            )
        ]
    try:
        parsed = yamltext.load(text)
    except yamltext.YAMLError as exc:
        line = yamltext.line(exc)
        where = f" at line {line}" if line is not None else ""
        return [Problem(at, f"serveConfigV2 is not valid YAML{where}: {yamltext.reason(exc)}")]
    if not isinstance(parsed, dict):
        return [Problem(at, f"serveConfigV2 must be a YAML mapping, got {type(parsed).__name__}")]
    return []


def _check_ports(service: RayServicePlan) -> list[Problem]:
    problems: list[Problem] = []
    cluster = service.cluster
    custom = service.spec.get("serveService")
    if not cluster.serve_ports:
        if service.incremental or custom is None:
            problems.append(Problem(_HEAD_PORTS, _SERVE_PORT_MESSAGE))
        elif not (custom.get("spec") or {}).get("ports"):
            problems.append(
                Problem(
                    ("spec", "serveService"),
                    f"{_SERVE_PORT_MESSAGE}, or ports to serveService.spec",
                )
            )
    if "dashboard" not in cluster.service_ports:
        problems.append(
            Problem(
                _HEAD_PORTS,
                "the head container declares no port named 'dashboard': the Serve applications "
                'could never be deployed (KubeRay: "dashboard port is not found"); add it',
            )
        )
    return problems


def _check_incremental_plan(service: RayServicePlan) -> list[Problem]:
    problems: list[Problem] = []
    if service.cluster.wants_serve_service:
        problems.append(
            Problem(
                ("metadata", "annotations", naming.ANN_ENABLE_SERVE_SERVICE),
                f"with {INCREMENTAL} the cluster's own serve Service would have the name of the "
                "per-generation serve Service; remove the annotation",
            )
        )
    if service.spec.get("serveService") is not None:
        problems.append(
            Problem(
                ("spec", "serveService"),
                f"serveService is ignored with {INCREMENTAL} (as in KubeRay): clients reach the "
                "Serve applications through the Gateway",
                "warning",
            )
        )
    return problems


def _check_annotations(annotations: dict[str, str]) -> list[Problem]:
    problems: list[Problem] = []
    paused = annotations.get(ANN_UPGRADE_PAUSED)
    if paused is not None and paused not in ("true", "false"):
        problems.append(
            Problem(
                ("metadata", "annotations", ANN_UPGRADE_PAUSED),
                f'expected "true" or "false", got {paused!r}',
            )
        )
    deadline = annotations.get(ANN_PROGRESS_DEADLINE)
    if deadline is not None and not (deadline.isdigit() and int(deadline) > 0):
        problems.append(
            Problem(
                ("metadata", "annotations", ANN_PROGRESS_DEADLINE),
                f"expected a positive integer of seconds, got {deadline!r}",
            )
        )
    return problems


def check_plan(service: RayServicePlan) -> list[Problem]:
    """Checks KubeRay only makes while reconciling: serve config, ports, upgrade, annotations."""
    problems = raycluster.check_parsed_cluster(service.cluster)
    problems.extend(_check_serve_config(service))
    problems.extend(_check_ports(service))
    if service.incremental:
        problems.extend(_check_incremental_plan(service))
    problems.extend(_check_annotations(service.annotations))
    return problems
