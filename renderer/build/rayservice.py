"""A RayService as plain objects: one cluster generation, its Services, Serve config and intent.

Owns the RayService half of DESIGN §2-§3: the generation name `<svc>-<hash>`, the Services
that the syncer switches by pod label, the Gateway/HTTPRoute of incremental upgrades, and the
intent ConfigMap the syncer reads. Stateless: it renders the current generation only and
never decides which generation is active (that is the syncer's, at run time).

Objects (reference rayservice.md §3; `<gen>` is `<svc>-<hash of rayClusterConfig>`):

- the generation: every object of the cluster `<gen>` (Pods, `<gen>-head-svc`, ...), the
  ConfigMap `<gen>-serve-config` with `serveConfigV2` (keys `serveConfigV2`, verbatim, and
  `serveConfigV2.json`, canonical JSON of the parsed YAML), and with
  `NewClusterWithIncrementalUpgrade` the per-generation Service `<gen>-serve-svc`. Each carries
  the label `ray.io/cluster: <gen>` and, unless the strategy is `None`, the prune protection
  annotations, so the commit that drops a generation leaves it running until the syncer
  retires it. Under `None` a changed cluster config replaces the generation (GitOps prunes
  the old one): KubeRay would instead ignore the change.
- `<svc>-head-svc` and (strategies `NewCluster` / `None`) the serve Service `<svc>-serve-svc`
  or `serveService.metadata.name`: their selectors match the label `kuberay.io/serve-active:
  "true"`, which the syncer sets on the pods of the active generation and git never declares.
- `NewClusterWithIncrementalUpgrade`: Gateway `<svc>-gateway`, HTTPRoute `<svc>-httproute`
  whose initial rule sends weight 100 to `<gen>-serve-svc` (the syncer owns `spec.rules` after
  creation; see `renderer.gitops`).
- the intent ConfigMap `<svc>-kuberay-intent` (label `kuberay.io/role: intent`), key
  `intent.json`: canonical JSON (sorted keys, no whitespace) of this shape::

    {
      "version": 1,
      "kind": "RayService",
      "metadata": {"name": str, "namespace": str, "labels": {..}, "annotations": {..}},
      "spec": {<the RayService spec as written in git, without rayClusterConfig>},
      "derived": {
        "generation": null (spec.suspend is true) | {
          "name": "<gen>", "hash": "<hash>",
          "headServiceName": "<gen>-head-svc",
          "dashboardURL": "http://<gen>-head-svc.<ns>.svc.<domain>:<dashboard port>",
          "serveConfigMapName": "<gen>-serve-config",
          "serveServiceName": "<gen>-serve-svc" | null (not incremental),
          "servePort": int (head container port named exactly "serve", else 8000),
          "headPodName": str | null, "workerPodNames": [str, ...],
          "pruneProtected": bool
        },
        "headServiceName": "<svc>-head-svc",
        "serveServiceName": str | null (incremental: clients use the Gateway),
        "upgrade": {
          "type": "NewCluster" | "NewClusterWithIncrementalUpgrade" | "None",
          "paused": bool,                         # annotation kuberay.io/upgrade-paused
          "progressDeadlineSeconds": int | null,  # kuberay.io/upgrade-progress-deadline-seconds
          "rayClusterDeletionDelaySeconds": int,  # KubeRay's default 60
          "routing": null (not incremental) | {
            "gatewayName": "<svc>-gateway", "httpRouteName": "<svc>-httproute",
            "currentGeneration": "<gen>", "servePort": int,
            "stepSizePercent": int, "intervalSeconds": int, "maxSurgePercent": int
          }
        }
      }
    }

  The label `kuberay.io/serve-active: "true"` means "this generation is the active one" in
  every strategy: `<svc>-head-svc` selects it even with incremental upgrades.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

import yaml

from renderer import naming
from renderer.build import cluster as cluster_build
from renderer.build import gateway, services
from renderer.build.pods import DEFAULT_SERVE_PORT, clone
from renderer.errors import JsonPath, Problem
from renderer.model import RayCluster, document_namespace, parse_raycluster
from renderer.options import RenderOptions
from renderer.rules.raycluster import KUBERAY_MANAGER
from renderer.rules.rayservice import check_rayservice
from schemas.intent import (
    ANN_PROGRESS_DEADLINE,
    ANN_UPGRADE_PAUSED,
    DEFAULT_DELETION_DELAY,
    INCREMENTAL,
    INTENT_VERSION,
    NEW_CLUSTER,
    NONE,
    RAYSERVICE,
    ROLE_SERVE_CONFIG,
    SERVE_CONFIG_JSON_KEY,
    SERVE_CONFIG_KEY,
)

Manifest = dict[str, Any]

KIND: Final = RAYSERVICE

_CONFIG: Final[JsonPath] = ("spec", "rayClusterConfig")
_HEAD_PORTS: Final[JsonPath] = (
    *_CONFIG,
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


@dataclass(frozen=True, slots=True)
class _Service:
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
        return self.strategy == INCREMENTAL

    @property
    def source_labels(self) -> dict[str, str]:
        return self.cluster.source_labels

    @property
    def exclude_head(self) -> bool:
        return self.spec.get("excludeHeadPodFromServeSvc") is True

    @property
    def serve_config(self) -> str:
        return str(self.spec.get("serveConfigV2") or "")


# --- names and the generation hash ---------------------------------------------------------


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


def serve_config_name(generation: str) -> str:
    """`<gen>-serve-config`: the ConfigMap with one generation's `serveConfigV2`."""
    return f"{generation}-serve-config"


def upgrade_type(spec: Manifest) -> str:
    """The strategy in force; unset means `NewCluster` (`ENABLE_ZERO_DOWNTIME` unset)."""
    strategy = spec.get("upgradeStrategy") or {}
    return str(strategy.get("type") or NEW_CLUSTER)


def route_port(cluster: RayCluster) -> int:
    """The HTTPRoute backend port: the head port named exactly `serve`, else 8000 (§3.7)."""
    return services.service_ports(cluster).get("serve", DEFAULT_SERVE_PORT)


# --- checks KubeRay only makes while reconciling --------------------------------------------


def _check_serve_config(service: _Service) -> list[Problem]:
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
        parsed = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        return [Problem(at, f"serveConfigV2 is not valid YAML{where}: {_yaml_problem(exc)}")]
    if not isinstance(parsed, dict):
        return [Problem(at, f"serveConfigV2 must be a YAML mapping, got {type(parsed).__name__}")]
    return []


def _yaml_problem(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None)
    return str(problem) if problem else str(exc).splitlines()[0]


def _check_ports(service: _Service) -> list[Problem]:
    problems: list[Problem] = []
    cluster = service.cluster
    custom = service.spec.get("serveService")
    if not services.serve_ports(cluster):
        if service.incremental or custom is None:
            problems.append(Problem(_HEAD_PORTS, _SERVE_PORT_MESSAGE))
        elif not (custom.get("spec") or {}).get("ports"):
            problems.append(
                Problem(
                    ("spec", "serveService"),
                    f"{_SERVE_PORT_MESSAGE}, or ports to serveService.spec",
                )
            )
    if "dashboard" not in services.service_ports(cluster):
        problems.append(
            Problem(
                _HEAD_PORTS,
                "the head container declares no port named 'dashboard': the Serve applications "
                'could never be deployed (KubeRay: "dashboard port is not found"); add it',
            )
        )
    return problems


def _check_incremental(service: _Service) -> list[Problem]:
    problems: list[Problem] = []
    if services.wants_serve_service(service.cluster):
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


def _check_service(service: _Service) -> list[Problem]:
    problems = cluster_build.check_cluster(service.cluster)
    problems.extend(_check_serve_config(service))
    problems.extend(_check_ports(service))
    if service.incremental:
        problems.extend(_check_incremental(service))
    problems.extend(_check_annotations(service.annotations))
    return problems


# --- the objects -----------------------------------------------------------------------------


def _parse(doc: Manifest, options: RenderOptions) -> _Service:
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
    return _Service(
        name=name,
        namespace=namespace,
        labels=labels,
        annotations=annotations,
        spec=spec,
        strategy=upgrade_type(spec),
        cluster=cluster,
        hash=digest,
    )


def _active_selector(service: _Service) -> dict[str, str]:
    """Pods of this RayService in the generation the syncer marked active."""
    return {
        naming.ORIGIN_KIND: KIND,
        naming.ORIGIN_NAME: service.name,
        naming.SERVE_ACTIVE: "true",
    }


def _serve_selector(service: _Service, base: dict[str, str]) -> dict[str, str]:
    selector = {**base, naming.RAY_SERVE: "true"}
    if service.exclude_head:
        # Static guarantee for excludeHeadPodFromServeSvc: the head never matches.
        selector[naming.RAY_NODE_TYPE] = "worker"
    return selector


def _serve_port_list(cluster: RayCluster) -> list[Manifest]:
    return [{"name": n, "port": p} for n, p in sorted(services.serve_ports(cluster).items())]


def _build_head_service(service: _Service, options: RenderOptions) -> Manifest:
    """`<svc>-head-svc`: the generation's head Service, relabelled, selecting the active head."""
    head = services.build_head_service(service.cluster, options)
    head["metadata"] = {
        "name": naming.head_service_name(service.name),
        "namespace": service.namespace,
        "labels": {
            naming.RAY_ORIGIN_NAME: service.name,
            naming.RAY_ORIGIN_CRD: KIND,
            naming.RAY_NODE_TYPE: "head",
            naming.RAY_IDENTIFIER: naming.identifier(service.name, "head"),
            **service.source_labels,
        },
    }
    head["spec"]["selector"] = {**_active_selector(service), naming.RAY_NODE_TYPE: "head"}
    return head


def _serve_service_ports(service: _Service) -> tuple[list[Problem], list[Manifest]]:
    """KubeRay's serve ports, merged with a custom `serveService`'s (rayservice.md §3.4)."""
    auto = _serve_port_list(service.cluster)
    custom = service.spec.get("serveService")
    if custom is None:
        return [], auto
    user_ports = (custom.get("spec") or {}).get("ports") or []
    if not auto:
        return [], clone(user_ports)
    by_name = {p.get("name"): p for p in user_ports if p.get("name")}
    problems = [
        Problem(
            ("spec", "serveService", "spec", "ports", index),
            f"port {port.get('name') or port.get('port')!s} is dropped (as in KubeRay): only the "
            f"head container's serve ports are exposed ({', '.join(p['name'] for p in auto)}); "
            "give this port one of those names",
            "warning",
        )
        for index, port in enumerate(user_ports)
        if port.get("name") not in {p["name"] for p in auto}
    ]
    return problems, [clone(by_name[p["name"]]) if p["name"] in by_name else p for p in auto]


def _build_serve_service(service: _Service) -> tuple[list[Problem], Manifest]:
    """The RayService serve Service (strategies NewCluster and None), selecting the active pods."""
    custom = clone(service.spec.get("serveService") or {})
    custom_meta = custom.get("metadata") or {}
    problems, ports = _serve_service_ports(service)
    metadata: Manifest = {
        "name": custom_meta.get("name") or naming.serve_service_name(service.name),
        "namespace": service.namespace,
        "labels": {
            **(custom_meta.get("labels") or {}),
            naming.RAY_ORIGIN_NAME: service.name,
            naming.RAY_ORIGIN_CRD: KIND,
            naming.RAY_SERVE: f"{service.name}-serve",
            **service.source_labels,
        },
    }
    if custom_meta.get("annotations"):
        metadata["annotations"] = custom_meta["annotations"]
    spec: Manifest = custom.get("spec") or {}
    service_type = spec.get("type") or service.cluster.head.get("serviceType")
    if service_type:
        spec["type"] = service_type
    spec["selector"] = _serve_selector(service, _active_selector(service))
    spec["ports"] = ports
    return problems, {"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": spec}


def _build_generation_serve_service(service: _Service) -> Manifest:
    """`<gen>-serve-svc` of an incremental upgrade: selects exactly that generation (§3.5)."""
    cluster = service.cluster
    spec: Manifest = {}
    if cluster.head.get("serviceType"):
        spec["type"] = cluster.head["serviceType"]
    spec["selector"] = _serve_selector(service, {naming.RAY_CLUSTER: cluster.name})
    spec["ports"] = _serve_port_list(cluster)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": naming.serve_service_name(cluster.name),
            "namespace": service.namespace,
            "labels": {
                naming.RAY_ORIGIN_NAME: cluster.name,
                naming.RAY_ORIGIN_CRD: KIND,
                naming.RAY_SERVE: f"{cluster.name}-serve",
                **service.source_labels,
            },
        },
        "spec": spec,
    }


def _build_serve_config(service: _Service) -> Manifest:
    """`<gen>-serve-config`: `serveConfigV2` verbatim and as canonical JSON."""
    text = service.serve_config
    parsed = yaml.safe_load(text) if text.strip() else {}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": serve_config_name(service.cluster.name),
            "namespace": service.namespace,
            "labels": {naming.ROLE: ROLE_SERVE_CONFIG, **service.source_labels},
        },
        "data": {
            SERVE_CONFIG_KEY: text,
            # default=str: YAML values JSON lacks (timestamps, ...) are sent as strings.
            SERVE_CONFIG_JSON_KEY: _canonical_json(parsed),
        },
    }


def _canonical_json(value: Any) -> str:
    """`naming.canonical_json`, except that YAML values JSON lacks (timestamps) become strings."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _mark_generation(obj: Manifest, generation: str, *, protect: bool) -> None:
    """Label an object with its generation and, if asked, protect it from pruning."""
    meta = obj["metadata"]
    meta["labels"] = {naming.RAY_CLUSTER: generation, **(meta.get("labels") or {})}
    if protect:
        meta["annotations"] = {**(meta.get("annotations") or {}), **naming.PRUNE_PROTECTION}


def _upgrade_intent(service: _Service) -> Manifest:
    delay = service.spec.get("rayClusterDeletionDelaySeconds")
    deadline = service.annotations.get(ANN_PROGRESS_DEADLINE)
    routing: Manifest | None = None
    if service.incremental:
        options = service.spec["upgradeStrategy"]["clusterUpgradeOptions"]
        routing = {
            "gatewayName": gateway.gateway_name(service.name),
            "httpRouteName": gateway.httproute_name(service.name),
            "currentGeneration": service.cluster.name,
            "servePort": route_port(service.cluster),
            "stepSizePercent": options["stepSizePercent"],
            "intervalSeconds": options["intervalSeconds"],
            "maxSurgePercent": options.get("maxSurgePercent", 100),
        }
    return {
        "type": service.strategy,
        "paused": service.annotations.get(ANN_UPGRADE_PAUSED) == "true",
        "progressDeadlineSeconds": int(deadline) if deadline is not None else None,
        "rayClusterDeletionDelaySeconds": DEFAULT_DELETION_DELAY if delay is None else delay,
        "routing": routing,
    }


def _generation_intent(
    service: _Service, options: RenderOptions, objects: list[Manifest]
) -> Manifest:
    cluster = service.cluster
    pods = [o for o in objects if o["kind"] == "Pod"]
    head = [p["metadata"]["name"] for p in pods if _node_type(p) == "head"]
    dashboard = services.service_ports(cluster)["dashboard"]
    return {
        "name": cluster.name,
        "hash": service.hash,
        "headServiceName": cluster.head_service_name,
        "dashboardURL": f"http://{cluster.fqdn(options)}:{dashboard}",
        "serveConfigMapName": serve_config_name(cluster.name),
        "serveServiceName": (
            naming.serve_service_name(cluster.name) if service.incremental else None
        ),
        "servePort": route_port(cluster),
        "headPodName": head[0] if head else None,
        "workerPodNames": [p["metadata"]["name"] for p in pods if _node_type(p) == "worker"],
        "pruneProtected": service.strategy != NONE,
    }


def _node_type(pod: Manifest) -> str:
    return str(pod["metadata"]["labels"].get(naming.RAY_NODE_TYPE, ""))


def _build_intent(
    service: _Service,
    options: RenderOptions,
    generation_objects: list[Manifest] | None,
    serve_service: str | None,
) -> Manifest:
    """The intent ConfigMap: what git asks of this RayService, for the syncer (module doc)."""
    metadata: Manifest = {"name": service.name, "namespace": service.namespace}
    metadata["labels"] = service.labels
    metadata["annotations"] = service.annotations
    generation = (
        None
        if generation_objects is None
        else _generation_intent(service, options, generation_objects)
    )
    intent: Manifest = {
        "version": INTENT_VERSION,
        "kind": KIND,
        "metadata": metadata,
        "spec": {k: v for k, v in service.spec.items() if k != "rayClusterConfig"},
        "derived": {
            "generation": generation,
            "headServiceName": naming.head_service_name(service.name),
            "serveServiceName": serve_service,
            "upgrade": _upgrade_intent(service),
        },
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": naming.intent_configmap_name(service.name),
            "namespace": service.namespace,
            "labels": {naming.ROLE: naming.ROLE_INTENT, **service.source_labels},
        },
        "data": {naming.INTENT_KEY: naming.canonical_json(intent)},
    }


def _build(service: _Service, options: RenderOptions) -> tuple[list[Problem], list[Manifest]]:
    problems: list[Problem] = []
    objects: list[Manifest] = []
    serve_name: str | None = None
    if not service.incremental:
        problems, serve = _build_serve_service(service)
        serve_name = serve["metadata"]["name"]
        objects.append(serve)
    if service.spec.get("suspend") is True:
        # KubeRay deletes everything it owns; only the intent stays, for the syncer.
        return problems, [_build_intent(service, options, None, serve_name)]
    generation = cluster_build.build_cluster(service.cluster, options)
    generation.append(_build_serve_config(service))
    if service.incremental:
        generation.append(_build_generation_serve_service(service))
    for obj in generation:
        _mark_generation(obj, service.cluster.name, protect=service.strategy != NONE)
    objects.extend(generation)
    objects.append(_build_head_service(service, options))
    if service.incremental:
        labels = service.source_labels
        options_in = service.spec["upgradeStrategy"]["clusterUpgradeOptions"]
        objects.append(
            gateway.build_gateway(
                service.name, service.namespace, str(options_in["gatewayClassName"]), labels
            )
        )
        backend = gateway.Backend(
            naming.serve_service_name(service.cluster.name), route_port(service.cluster), 100
        )
        objects.append(gateway.build_httproute(service.name, service.namespace, [backend], labels))
    objects.append(_build_intent(service, options, generation, serve_name))
    return problems, objects


def build_rayservice(doc: Manifest, options: RenderOptions) -> tuple[list[Problem], list[Manifest]]:
    """Check a RayService and build its objects; nothing is built when a problem is an error."""
    problems = check_rayservice(doc, options)
    if doc["spec"].get("managedBy") not in (None, KUBERAY_MANAGER):
        return problems, []  # KubeRay skips it; check_rayservice said so
    if _has_error(problems):
        return problems, []
    service = _parse(doc, options)
    problems.extend(_check_service(service))
    if _has_error(problems):
        return problems, []
    more, objects = _build(service, options)
    return problems + more, objects


def _has_error(problems: list[Problem]) -> bool:
    return any(p.severity == "error" for p in problems)
