"""`kuberay syncer-manifests`: the objects that install `kuberay-syncer` through GitOps (DESIGN §5).

ServiceAccount, config ConfigMap, least-privilege RBAC per watched namespace (or
cluster-wide for `*`), a Lease role for leader election, the Deployment and its metrics
Service. The config the ConfigMap holds is checked by the syncer's own parser
(`syncer.config`), so the install never ships a config the daemon would refuse.
`build_syncer_manifests` is pure and deterministic (no clock, environment or cluster);
the click command joins `kuberay` through the `kuberay.commands` entry point.
"""

from __future__ import annotations

import ipaddress
import json
import sys
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import click

from renderer import emit, naming, outdir, output
from renderer.errors import format_path
from renderer.options import DEFAULT_SYNCER_NAMESPACE, DEFAULT_SYNCER_POD_LABELS
from syncer import admission
from syncer.config import Config, parse_config

Manifest = dict[str, Any]

# Kept equal to the project version by tests/syncer/test_install.py.
SYNCER_VERSION: Final = "0.1.0"
DEFAULT_IMAGE: Final = f"ghcr.io/kuberay-gitops/kuberay-syncer:{SYNCER_VERSION}"
# The renderer's networkPolicy allowance for the syncer assumes these two (renderer.options).
DEFAULT_NAMESPACE: Final = DEFAULT_SYNCER_NAMESPACE
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
# The image's numeric USER (Dockerfile), stated in the pod too so no image can run it as another.
RUN_AS: Final = 65532
DASHBOARD_PORT: Final = 8265
# Where API servers listen: 443 (the kubernetes Service, managed clusters) and 6443 (the
# endpoint most self-managed clusters DNAT to; NetworkPolicies see the endpoint's port).
API_SERVER_PORTS: Final = (443, 6443)

LABELS: Final = {naming.APP_NAME: NAME, naming.MANAGED_BY: naming.MANAGED_BY_VALUE}
# The pods carry only the selector label: the renderer's managed-by label on them would put
# the syncer's own pods inside its label selector when it watches its own namespace.
_POD_LABELS: Final = dict(DEFAULT_SYNCER_POD_LABELS)

# What the syncer does in a watched namespace (DESIGN §1): verbs sorted, no wildcard. Each
# verb is one the daemon sends (tests/syncer/test_rbac_used.py finds every call in syncer/).
_NAMESPACED_RULES: Final = (
    # get: a serve-label patch re-reads the pod on conflict; delete: ttl_mode delete, retirement;
    # create, delete: the autoscaling actuator's dynamic worker Pods (reference/autoscaling.md).
    ("", "pods", ("create", "delete", "get", "list", "patch", "watch")),
    # create, patch (guarded): status ConfigMaps, autoscaler state; get: a squat check, the
    # RayService intent re-read right before a destructive step.
    ("", "configmaps", ("create", "delete", "get", "list", "patch", "watch")),
    # delete: a drained RayService generation is retired (DESIGN §1, last row).
    # list/watch: the head Services, for the live dashboard port (C2).
    ("", "services", ("delete", "list", "watch")),
    ("", "persistentvolumeclaims", ("delete", "list")),
    ("", "events", ("create",)),
    # patch: short status annotations on the submitter Job that anchors a RayJob's status;
    # create, get: KubeRay's Redis cleanup Job, once a Redis-FT cluster's anchor is pruned.
    ("batch", "jobs", ("create", "delete", "get", "list", "patch", "watch")),
    ("networking.k8s.io", "networkpolicies", ("delete", "list")),
    ("networking.k8s.io", "ingresses", ("delete", "list")),
    ("gateway.networking.k8s.io", "gateways", ("list", "watch")),
    ("gateway.networking.k8s.io", "httproutes", ("list", "patch", "watch")),
)


@dataclass(frozen=True, slots=True)
class Hardening:
    """The opt-in parts of an install (README "Security model").

    `admission_identities` non-empty adds the ValidatingAdmissionPolicy that reserves the
    renderer's and syncer's labels to those GitOps identities and the syncer;
    `worker_pod_policy` adds the ValidatingAdmissionPolicy that bounds the Pods the syncer
    creates (autoscaling workers: their labels, name shape and owner; no host namespaces,
    hostPath or privileged containers); `network_policy` adds the syncer's ingress/egress
    NetworkPolicy, which lets it reach the API server on `api_server_ports` (in
    `api_server_cidrs`, or anywhere when empty), DNS, and the Ray head pods of the watched
    namespaces on `dashboard_ports`.
    """

    admission_identities: tuple[str, ...] = ()
    worker_pod_policy: bool = False
    priority_class: str | None = None
    network_policy: bool = False
    api_server_ports: tuple[int, ...] = API_SERVER_PORTS
    api_server_cidrs: tuple[str, ...] = ()
    dashboard_ports: tuple[int, ...] = (DASHBOARD_PORT,)


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
    namespace: str,
    image: str,
    replicas: int,
    ports: tuple[int, int],
    priority_class: str | None,
) -> Manifest:
    health_port, metrics_port = ports
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
        # Up to 2 minutes to list every cache before liveness counts (10,000 jobs take ~20 s).
        "startupProbe": _probe("/healthz", 2, 60),
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
            "runAsUser": RUN_AS,
            "runAsGroup": RUN_AS,
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
    pod: Manifest = {
        "serviceAccountName": NAME,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS,
            "runAsGroup": RUN_AS,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    if priority_class:
        pod["priorityClassName"] = priority_class
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
                    **pod,
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


def _disruption_budget(namespace: str) -> Manifest:
    """One replica stays through voluntary disruptions (drains), so a standby takes the lease."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(NAME, namespace),
        "spec": {"minAvailable": 1, "selector": {"matchLabels": dict(_POD_LABELS)}},
    }


def _tcp_ports(ports: Sequence[int | str]) -> list[Manifest]:
    return [{"port": port, "protocol": "TCP"} for port in ports]


def _network_policy(namespace: str, watch: Sequence[str], hardening: Hardening) -> Manifest:
    """Ingress to the health and metrics ports only; egress to the API server, DNS, dashboards."""
    api: Manifest = {"ports": _tcp_ports(hardening.api_server_ports)}
    if hardening.api_server_cidrs:
        api["to"] = [{"ipBlock": {"cidr": cidr}} for cidr in hardening.api_server_cidrs]
    heads: Manifest = {"podSelector": {"matchLabels": {naming.RAY_NODE_TYPE: "head"}}}
    if list(watch) == [ALL_NAMESPACES]:
        heads["namespaceSelector"] = {}
    else:
        heads["namespaceSelector"] = {
            "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": sorted(watch)}
            ]
        }
    dns = [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(NAME, namespace),
        "spec": {
            "podSelector": {"matchLabels": dict(_POD_LABELS)},
            "policyTypes": ["Ingress", "Egress"],
            # Probes and Prometheus: the named container ports, from anywhere.
            "ingress": [{"ports": _tcp_ports(["health", "metrics"])}],
            "egress": [
                api,
                {"ports": dns},
                {"to": [heads], "ports": _tcp_ports(hardening.dashboard_ports)},
            ],
        },
    }


def _check_hardening(hardening: Hardening) -> None:
    for port in (*hardening.api_server_ports, *hardening.dashboard_ports):
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise ValueError(f"invalid port {port!r}: a port is from 1 to 65535")
    if hardening.priority_class is not None and not naming.is_dns1123_subdomain(
        hardening.priority_class
    ):
        raise ValueError(f"invalid priority class name {hardening.priority_class!r}")
    for cidr in hardening.api_server_cidrs:
        try:
            ipaddress.ip_network(cidr)
        except ValueError as exc:
            raise ValueError(f"invalid API server CIDR {cidr!r}: {exc}") from None


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
    hardening: Hardening | None = None,
) -> list[Manifest]:
    """Every object that runs the syncer in `namespace`, watching `watch_namespaces`.

    `watch_namespaces` empty means the syncer's own namespace; `["*"]` means all of them
    (a ClusterRole then replaces the per-namespace Roles). `config` holds further keys
    of the syncer's config file (e.g. `ttl_mode`, `dashboard_auth_secret`); it is written
    as given, with `namespaces` set from `watch_namespaces`. `hardening`: the opt-in parts
    (admission policy, NetworkPolicy, priority class); a PodDisruptionBudget comes with two
    replicas or more.

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
    hardening = hardening or Hardening()
    _check_hardening(hardening)
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
    ports = (health_port, metrics_port)
    objects.append(_deployment(namespace, image, replicas, ports, hardening.priority_class))
    if replicas >= 2:  # with one replica, minAvailable 1 would block every node drain
        objects.append(_disruption_budget(namespace))
    if hardening.network_policy:
        objects.append(_network_policy(namespace, watch, hardening))
    if hardening.admission_identities:
        objects += admission.policy_objects(
            namespace=namespace,
            service_account=NAME,
            identities=hardening.admission_identities,
            watch_namespaces=watch,
            labels=LABELS,
        )
    if hardening.worker_pod_policy:
        objects += admission.worker_pod_policy_objects(
            namespace=namespace, service_account=NAME, watch_namespaces=watch, labels=LABELS
        )
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
    "--admission-policy",
    is_flag=True,
    help="Add a ValidatingAdmissionPolicy that lets only the --gitops-identity users, the "
    "syncer and the cluster's own components write objects carrying kuberay labels.",
)
@click.option(
    "--gitops-identity",
    "gitops_identities",
    multiple=True,
    metavar="USER|group:GROUP",
    help="Who applies the rendered manifests, e.g. "
    "system:serviceaccount:argocd:argocd-application-controller (repeatable; with "
    "--admission-policy).",
)
@click.option(
    "--worker-pod-policy",
    is_flag=True,
    help="Add a ValidatingAdmissionPolicy that lets the syncer create only autoscaling "
    "worker Pods (labels, name, one head-Pod owner; no host namespaces, hostPath or "
    "privileged containers).",
)
@click.option("--priority-class", default=None, help="priorityClassName of the syncer's pods.")
@click.option(
    "--network-policy",
    is_flag=True,
    help="Add a NetworkPolicy: ingress to the health/metrics ports; egress to the API "
    "server, DNS and the watched namespaces' Ray head pods.",
)
@click.option(
    "--api-server-port",
    "api_server_ports",
    type=click.IntRange(1, 65535),
    multiple=True,
    help="API server port the NetworkPolicy allows (repeatable; default: 443 and 6443).",
)
@click.option(
    "--api-server-cidr",
    "api_server_cidrs",
    multiple=True,
    help="API server addresses the NetworkPolicy allows (repeatable; default: any).",
)
@click.option(
    "--dashboard-port",
    "dashboard_ports",
    type=click.IntRange(1, 65535),
    multiple=True,
    help="Ray dashboard port the NetworkPolicy allows (repeatable; default: 8265).",
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
    admission_policy: bool,
    gitops_identities: tuple[str, ...],
    worker_pod_policy: bool,
    priority_class: str | None,
    network_policy: bool,
    api_server_ports: tuple[int, ...],
    api_server_cidrs: tuple[str, ...],
    dashboard_ports: tuple[int, ...],
    output_dir: str | None,
) -> None:
    """Print the objects that install kuberay-syncer: RBAC, config, Deployment, Service."""
    config: dict[str, object] = {"ttl_mode": ttl_mode}
    if dashboard_auth_secret:
        config["dashboard_auth_secret"] = dashboard_auth_secret
    try:
        if admission_policy != bool(gitops_identities):
            raise ValueError(
                "--admission-policy needs at least one --gitops-identity"
                if admission_policy
                else "--gitops-identity is used only with --admission-policy"
            )
        hardening = Hardening(
            admission_identities=gitops_identities,
            worker_pod_policy=worker_pod_policy,
            priority_class=priority_class,
            network_policy=network_policy,
            api_server_ports=api_server_ports or API_SERVER_PORTS,
            api_server_cidrs=api_server_cidrs,
            dashboard_ports=dashboard_ports or (DASHBOARD_PORT,),
        )
        objects = build_syncer_manifests(
            namespace=namespace,
            image=image,
            watch_namespaces=list(watch_namespaces),
            replicas=replicas,
            config=config,
            hardening=hardening,
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
