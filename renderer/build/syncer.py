"""The objects that install `kuberay-syncer` through the same GitOps flow (DESIGN §5).

ServiceAccount, config ConfigMap, least-privilege RBAC per watched namespace (or
cluster-wide for `*`), a Lease role for leader election, the Deployment and its metrics
Service. Pure and deterministic: no clock, environment or cluster.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from renderer import naming

Manifest = dict[str, Any]

# Kept equal to the project version by tests/renderer/test_syncer_manifests.py.
SYNCER_VERSION: Final = "0.1.0"
DEFAULT_IMAGE: Final = f"ghcr.io/kuberay-gitops/kuberay-syncer:{SYNCER_VERSION}"
DEFAULT_NAMESPACE: Final = "kuberay-system"
ALL_NAMESPACES: Final = "*"

NAME: Final = "kuberay-syncer"
CONFIG_MAP: Final = "kuberay-syncer-config"
METRICS_SERVICE: Final = "kuberay-syncer-metrics"
LEADER_ELECTION_ROLE: Final = "kuberay-syncer-leader-election"
CONFIG_DIR: Final = "/etc/kuberay-syncer"
CONFIG_FILE: Final = "config.yaml"
CONFIG_PATH: Final = f"{CONFIG_DIR}/{CONFIG_FILE}"
HEALTH_PORT: Final = 8081
METRICS_PORT: Final = 8080
DEFAULT_LEASE_NAME: Final = "kuberay-syncer"

LABELS: Final = {naming.APP_NAME: NAME, naming.MANAGED_BY: naming.MANAGED_BY_VALUE}
# The pods carry only the selector label: the renderer's managed-by label on them would put
# the syncer's own pods inside its label selector when it watches its own namespace.
_POD_LABELS: Final = {naming.APP_NAME: NAME}

# What the syncer does in a watched namespace (DESIGN §1): verbs sorted, no wildcard.
_NAMESPACED_RULES: Final = (
    ("", "pods", ("delete", "get", "list", "patch", "watch")),
    ("", "configmaps", ("create", "delete", "get", "list", "patch", "update", "watch")),
    # delete: a drained RayService generation is retired (DESIGN §1, last row).
    ("", "services", ("delete", "get", "list", "watch")),
    ("", "persistentvolumeclaims", ("delete", "list")),
    ("", "events", ("create", "patch")),
    ("events.k8s.io", "events", ("create", "patch")),
    # patch: short status annotations on the submitter Job that anchors a RayJob's status.
    ("batch", "jobs", ("delete", "get", "list", "patch", "watch")),
    ("networking.k8s.io", "networkpolicies", ("delete", "list")),
    ("networking.k8s.io", "ingresses", ("delete", "list")),
    ("gateway.networking.k8s.io", "gateways", ("get", "list", "watch")),
    ("gateway.networking.k8s.io", "httproutes", ("get", "list", "patch", "update", "watch")),
)


def _metadata(name: str, namespace: str | None) -> Manifest:
    meta: Manifest = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = dict(LABELS)
    return meta


def _rule(group: str, resource: str, verbs: Sequence[str], names: Sequence[str] = ()) -> Manifest:
    rule: Manifest = {"apiGroups": [group], "resources": [resource], "verbs": list(verbs)}
    if names:
        rule["resourceNames"] = list(names)
    return rule


def _watch_rules(auth_secret: str | None) -> list[Manifest]:
    rules = [_rule(group, resource, verbs) for group, resource, verbs in _NAMESPACED_RULES]
    if auth_secret is not None:
        rules.append(_rule("", "secrets", ("get",), (auth_secret,)))
    return rules


def _subject(namespace: str) -> list[Manifest]:
    return [{"kind": "ServiceAccount", "name": NAME, "namespace": namespace}]


def _role_pair(
    name: str, namespace: str | None, rules: list[Manifest], subject_namespace: str
) -> list[Manifest]:
    """A Role and its RoleBinding, or a ClusterRole and ClusterRoleBinding when no namespace."""
    kind = "Role" if namespace is not None else "ClusterRole"
    role: Manifest = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": _metadata(name, namespace),
        "rules": rules,
    }
    binding: Manifest = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": f"{kind}Binding",
        "metadata": _metadata(name, namespace),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
        "subjects": _subject(subject_namespace),
    }
    return [role, binding]


def _lease_rules(lease_name: str) -> list[Manifest]:
    # `create` cannot be limited by name (the object does not exist yet); get and update can.
    group = "coordination.k8s.io"
    return [
        _rule(group, "leases", ("create",)),
        _rule(group, "leases", ("get", "update"), (lease_name,)),
    ]


def _probe(path: str, period: int, failures: int) -> Manifest:
    return {
        "httpGet": {"path": path, "port": "health"},
        "periodSeconds": period,
        "timeoutSeconds": 2,
        "failureThreshold": failures,
    }


def _field_env(name: str, path: str) -> Manifest:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _deployment(
    namespace: str, image: str, replicas: int, health_port: int, metrics_port: int
) -> Manifest:
    container: Manifest = {
        "name": "syncer",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": ["--config", CONFIG_PATH],
        # The leader identity and the syncer's own namespace (downward API).
        "env": [
            _field_env("POD_NAME", "metadata.name"),
            _field_env("POD_NAMESPACE", "metadata.namespace"),
        ],
        "ports": [
            {"name": "health", "containerPort": health_port, "protocol": "TCP"},
            {"name": "metrics", "containerPort": metrics_port, "protocol": "TCP"},
        ],
        "livenessProbe": _probe("/healthz", 10, 3),
        "readinessProbe": _probe("/readyz", 5, 3),
        "resources": {
            "requests": {"cpu": "50m", "memory": "128Mi"},
            "limits": {"cpu": "1", "memory": "256Mi"},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
        },
        # A directory mount, not subPath: only then does the kubelet update the file in
        # place (by swapping a symlink), which the config watcher picks up.
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    spread = {
        "weight": 100,
        "podAffinityTerm": {
            "labelSelector": {"matchLabels": dict(_POD_LABELS)},
            "topologyKey": "kubernetes.io/hostname",
        },
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(NAME, namespace),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": dict(_POD_LABELS)},
            "template": {
                "metadata": {"labels": dict(_POD_LABELS)},
                "spec": {
                    "serviceAccountName": NAME,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    # Replicas on different nodes, so a node loss leaves a standby leader.
                    "affinity": {
                        "podAntiAffinity": {
                            "preferredDuringSchedulingIgnoredDuringExecution": [spread]
                        }
                    },
                    "containers": [container],
                    "volumes": [
                        {"name": "config", "configMap": {"name": CONFIG_MAP}},
                        {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
                    ],
                },
            },
        },
    }


def _metrics_service(namespace: str, metrics_port: int) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(METRICS_SERVICE, namespace),
        "spec": {
            "selector": dict(_POD_LABELS),
            "ports": [
                {
                    "name": "metrics",
                    "port": metrics_port,
                    "targetPort": "metrics",
                    "protocol": "TCP",
                }
            ],
        },
    }


def _port(settings: Mapping[str, object], key: str, default: int) -> int:
    value = settings.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise ValueError(f"config {key} must be a port from 1 to 65535, got {value!r}")
    return value


def _leader_election(settings: Mapping[str, object], namespace: str) -> tuple[str, str] | None:
    """`(lease namespace, lease name)`, or None when leader election is off."""
    raw = settings.get("leader_election") or {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"config leader_election must be a mapping, got {raw!r}")
    if raw.get("enabled", True) is False:
        return None
    lease_namespace = raw.get("lease_namespace") or namespace
    lease_name = raw.get("lease_name") or DEFAULT_LEASE_NAME
    if not isinstance(lease_namespace, str) or not naming.is_dns1123_label(lease_namespace):
        raise ValueError(f"config leader_election.lease_namespace is invalid: {lease_namespace!r}")
    if not isinstance(lease_name, str) or not naming.is_dns1123_subdomain(lease_name):
        raise ValueError(f"config leader_election.lease_name is invalid: {lease_name!r}")
    return lease_namespace, lease_name


def _check_namespaces(namespace: str, watch: Sequence[str]) -> None:
    if not naming.is_dns1123_label(namespace):
        raise ValueError(f"invalid namespace {namespace!r}")
    if ALL_NAMESPACES in watch and len(watch) > 1:
        raise ValueError(f'"{ALL_NAMESPACES}" (all namespaces) must be the only watched namespace')
    for name in watch:
        if name != ALL_NAMESPACES and not naming.is_dns1123_label(name):
            raise ValueError(f"invalid watched namespace {name!r}")
    if len(set(watch)) != len(watch):
        raise ValueError(f"watched namespaces repeat: {list(watch)}")


def config_text(settings: Mapping[str, object]) -> str:
    """The config file as canonical, indented JSON (JSON is YAML, and needs no emitter here)."""
    return json.dumps(settings, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def build_syncer_manifests(
    *,
    namespace: str,
    image: str,
    watch_namespaces: Sequence[str],
    replicas: int = 2,
    config: Mapping[str, object] | None = None,
) -> list[Manifest]:
    """Every object that runs the syncer in `namespace`, watching `watch_namespaces`.

    `watch_namespaces` empty means the syncer's own namespace; `["*"]` means all of them
    (a ClusterRole then replaces the per-namespace Roles). `config` holds further keys
    of the syncer's config file (e.g. `ttl_mode`, `dashboard_auth_secret`); it is written
    as given, with `namespaces` set from `watch_namespaces`.

    Raises:
        ValueError: a name, replica count or config value is invalid, or `config` names
            other namespaces than `watch_namespaces`.
    """
    watch = list(watch_namespaces) or [namespace]
    _check_namespaces(namespace, watch)
    if not image:
        raise ValueError("the image must not be empty")
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
        raise ValueError(f"replicas must be an integer of at least 0, got {replicas!r}")
    settings: dict[str, object] = dict(config or {})
    given = settings.get("namespaces")
    if given is not None and (not isinstance(given, list | tuple) or list(given) != watch):
        raise ValueError(f"config namespaces {given!r} differ from the watched {watch}")
    settings["namespaces"] = watch
    auth_secret = settings.get("dashboard_auth_secret")
    if auth_secret is not None and (
        not isinstance(auth_secret, str) or not naming.is_dns1123_subdomain(auth_secret)
    ):
        raise ValueError(f"config dashboard_auth_secret is invalid: {auth_secret!r}")
    health_port = _port(settings, "health_port", HEALTH_PORT)
    metrics_port = _port(settings, "metrics_port", METRICS_PORT)
    if health_port == metrics_port:
        raise ValueError(f"config health_port and metrics_port are both {health_port}")

    objects: list[Manifest] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _metadata(NAME, namespace)},
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _metadata(CONFIG_MAP, namespace),
            "data": {CONFIG_FILE: config_text(settings)},
        },
    ]
    if watch == [ALL_NAMESPACES]:
        # Cluster-scoped names must be unique per install: suffix the syncer's namespace.
        objects += _role_pair(f"{NAME}-{namespace}", None, _watch_rules(auth_secret), namespace)
    else:
        for watched in sorted(watch):
            objects += _role_pair(NAME, watched, _watch_rules(auth_secret), namespace)
    lease = _leader_election(settings, namespace)
    if lease is not None:
        lease_namespace, lease_name = lease
        objects += _role_pair(
            LEADER_ELECTION_ROLE, lease_namespace, _lease_rules(lease_name), namespace
        )
    objects.append(_metrics_service(namespace, metrics_port))
    objects.append(_deployment(namespace, image, replicas, health_port, metrics_port))
    return objects
