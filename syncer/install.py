"""`kuberay syncer-manifests`: the objects that install `kuberay-syncer` through GitOps (DESIGN §5).

ServiceAccount, config ConfigMap, least-privilege RBAC per watched namespace (or
cluster-wide for `*`), a Lease role for leader election, the Deployment and its metrics
Service. The config the ConfigMap holds is checked by the syncer's own parser
(`syncer.config`), so the install never ships a config the daemon would refuse.
`build_syncer_manifests` is pure and deterministic (no clock, environment or cluster);
the click command joins `kuberay` through the `kuberay.commands` entry point.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import click

from renderer import emit, naming, outdir, output
from renderer.errors import format_path
from syncer.config import Config, parse_config

Manifest = dict[str, Any]

# Kept equal to the project version by tests/syncer/test_install.py.
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
    # patch: short status annotations on the submitter Job that anchors a RayJob's status;
    # create: KubeRay's Redis cleanup Job, once a Redis-FT cluster's anchor is pruned.
    ("batch", "jobs", ("create", "delete", "get", "list", "patch", "watch")),
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


def _checked_config(settings: Mapping[str, object]) -> Config:
    """The settings as the syncer will read them (ValueError: the first problem found)."""
    config, diagnostics = parse_config(config_text(settings), "config")
    if config is None:
        problem = diagnostics[0].problem
        raise ValueError(f"config {format_path(problem.path)}: {problem.message}")
    for key, port in (("health_port", config.health_port), ("metrics_port", config.metrics_port)):
        if port == 0:  # the syncer's "off"; a Deployment's container port cannot be 0
            raise ValueError(f"config {key} must be a port from 1 to 65535 in the Deployment")
    return config


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
    checked = _checked_config(settings)
    auth_secret = checked.dashboard_auth_secret
    health_port, metrics_port = checked.health_port, checked.metrics_port

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
    if checked.leader_election.enabled:
        election = checked.leader_election
        objects += _role_pair(
            LEADER_ELECTION_ROLE,
            checked.lease_namespace(namespace),
            _lease_rules(election.lease_name),
            namespace,
        )
    objects.append(_metrics_service(namespace, metrics_port))
    objects.append(_deployment(namespace, image, replicas, health_port, metrics_port))
    return objects


# --- `kuberay syncer-manifests` -------------------------------------------------------------

_EXIT_INVALID: Final = 2
_EXIT_INTERNAL: Final = 3


def _print_or_write(objects: list[Manifest], output_dir: str | None) -> int:
    if output_dir is None:
        sys.stdout.write(emit.dump_all(objects))
        return 0
    directory = Path(output_dir)
    try:
        existing = outdir.owned_files(directory, "kuberay")
    except outdir.ForeignDirectoryError as exc:
        click.echo(f"error: {exc}", err=True)
        return _EXIT_INVALID
    outdir.write_directory(directory, output.plan_directory(objects), existing)
    return 0


@click.command("syncer-manifests")
@click.option(
    "--namespace",
    "-n",
    default=DEFAULT_NAMESPACE,
    show_default=True,
    help="Namespace the syncer runs in (its Deployment, ConfigMap and Lease).",
)
@click.option("--image", default=DEFAULT_IMAGE, show_default=True, help="Image.")
@click.option(
    "--watch-namespace",
    "watch_namespaces",
    multiple=True,
    help="A namespace whose Ray objects the syncer manages (repeatable; default: its own "
    "namespace; '*' for all, with a ClusterRole).",
)
@click.option("--replicas", type=click.IntRange(min=0), default=2, show_default=True)
@click.option(
    "--ttl-mode",
    type=click.Choice(["stop", "delete"]),
    default="stop",
    show_default=True,
    help="After a RayJob's TTL: stop the Ray pods (GitOps-safe) or delete them.",
)
@click.option(
    "--dashboard-auth-secret",
    default=None,
    help="Secret (key auth_token) the Ray dashboards want; the syncer may read only it.",
)
@click.option(
    "-o",
    "--output-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Write one file per object, with a kustomization.yaml, into DIR.",
)
def syncer_manifests(
    namespace: str,
    image: str,
    watch_namespaces: tuple[str, ...],
    replicas: int,
    ttl_mode: str,
    dashboard_auth_secret: str | None,
    output_dir: str | None,
) -> None:
    """Print the objects that install kuberay-syncer: RBAC, config, Deployment, Service."""
    config: dict[str, object] = {"ttl_mode": ttl_mode}
    if dashboard_auth_secret:
        config["dashboard_auth_secret"] = dashboard_auth_secret
    try:
        objects = build_syncer_manifests(
            namespace=namespace,
            image=image,
            watch_namespaces=list(watch_namespaces),
            replicas=replicas,
            config=config,
        )
        code = _print_or_write(objects, output_dir)
    except ValueError as exc:
        click.echo(f"error: {exc}", err=True)
        code = _EXIT_INVALID
    except Exception:  # noqa: BLE001 - exit code 3 and a traceback, as every kuberay command
        traceback.print_exc()
        click.echo("internal error: please report this with the input that caused it", err=True)
        code = _EXIT_INTERNAL
    if code:
        sys.exit(code)
