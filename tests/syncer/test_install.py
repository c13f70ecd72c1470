"""The objects that install kuberay-syncer (`syncer.install`), and `kuberay syncer-manifests`."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from renderer import emit, output
from renderer.cli import main
from syncer import install as build
from syncer.config import Config, parse_config
from tests.paths import REPO
from tests.validation import validate_object

Manifest = dict[str, Any]
LABELS = {
    "app.kubernetes.io/name": "kuberay-syncer",
    "app.kubernetes.io/managed-by": "kuberay-render",
}
WATCH_RULES = {
    ("", "pods"): ["create", "delete", "get", "list", "patch", "watch"],
    ("", "configmaps"): ["create", "delete", "get", "list", "patch", "watch"],
    ("", "services"): ["delete", "list", "watch"],
    ("", "persistentvolumeclaims"): ["delete", "list"],
    ("", "events"): ["create"],
    ("batch", "jobs"): ["create", "delete", "get", "list", "patch", "watch"],
    ("networking.k8s.io", "networkpolicies"): ["delete", "list"],
    ("networking.k8s.io", "ingresses"): ["delete", "list"],
    ("gateway.networking.k8s.io", "gateways"): ["list", "watch"],
    ("gateway.networking.k8s.io", "httproutes"): ["list", "patch", "watch"],
}


def manifests(**kwargs: Any) -> list[Manifest]:
    args: dict[str, Any] = {
        "namespace": "kuberay-system",
        "image": build.DEFAULT_IMAGE,
        "watch_namespaces": [],
    }
    return build.build_syncer_manifests(**(args | kwargs))


def find(objects: list[Manifest], kind: str, name: str, namespace: str | None = None) -> Manifest:
    matches = [
        o
        for o in objects
        if o["kind"] == kind
        and o["metadata"]["name"] == name
        and o["metadata"].get("namespace") == namespace
    ]
    assert len(matches) == 1, (kind, name, namespace)
    return matches[0]


def grants(role: Manifest) -> dict[tuple[str, str], list[str]]:
    """(group, resource) -> verbs, for rules without resourceNames."""
    result: dict[tuple[str, str], list[str]] = {}
    for rule in role["rules"]:
        if "resourceNames" in rule:
            continue
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                assert (group, resource) not in result, "one rule per resource"
                result[(group, resource)] = rule["verbs"]
    return result


def keys(objects: list[Manifest]) -> list[tuple[str, str | None, str]]:
    return [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects]


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"watch_namespaces": ["ml", "data"], "config": {"dashboard_auth_secret": "ray-token"}},
        {"watch_namespaces": ["*"], "replicas": 1, "config": {"ttl_mode": "delete"}},
    ],
    ids=["default", "two-namespaces", "all-namespaces"],
)
def test_every_object_validates_strictly_and_is_labelled(kwargs: dict[str, Any]) -> None:
    objects = manifests(**kwargs)
    for obj in objects:
        assert validate_object(obj) == [], obj["kind"]
        assert obj["metadata"]["labels"] == LABELS, obj["kind"]


def test_default_install_watches_its_own_namespace() -> None:
    objects = manifests()
    assert keys(objects) == [
        ("ServiceAccount", "kuberay-system", "kuberay-syncer"),
        ("ConfigMap", "kuberay-system", "kuberay-syncer-config"),
        ("Role", "kuberay-system", "kuberay-syncer"),
        ("RoleBinding", "kuberay-system", "kuberay-syncer"),
        ("Role", "kuberay-system", "kuberay-syncer-leader-election"),
        ("RoleBinding", "kuberay-system", "kuberay-syncer-leader-election"),
        ("Service", "kuberay-system", "kuberay-syncer-metrics"),
        ("Deployment", "kuberay-system", "kuberay-syncer"),
        ("PodDisruptionBudget", "kuberay-system", "kuberay-syncer"),
    ]
    role = find(objects, "Role", "kuberay-syncer", "kuberay-system")
    assert grants(role) == WATCH_RULES
    assert not any("resourceNames" in rule for rule in role["rules"])


def test_rbac_grants_exactly_the_listed_verbs_and_never_a_wildcard() -> None:
    objects = manifests(watch_namespaces=["ml"], config={"dashboard_auth_secret": "ray-token"})
    for obj in objects:
        for rule in obj.get("rules", []):
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in rule.get(field, []), (obj["metadata"]["name"], rule)
    role = find(objects, "Role", "kuberay-syncer", "ml")
    assert grants(role) == WATCH_RULES
    # pods/status is deliberately absent: the syncer never writes a Pod's status.
    assert ("", "pods/status") not in grants(role)
    secrets = [r for r in role["rules"] if r["resources"] == ["secrets"]]
    assert secrets == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "verbs": ["get"],
            "resourceNames": ["ray-token"],
        }
    ]
    lease = find(objects, "Role", "kuberay-syncer-leader-election", "kuberay-system")
    assert lease["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "update"],
            "resourceNames": ["kuberay-syncer"],
        },
    ]


def test_two_watched_namespaces_give_two_roles_and_bindings_to_the_one_account() -> None:
    objects = manifests(watch_namespaces=["ml", "data"])
    roles = [
        o for o in objects if o["kind"] == "Role" and o["metadata"]["name"] == "kuberay-syncer"
    ]
    bindings = [
        o
        for o in objects
        if o["kind"] == "RoleBinding" and o["metadata"]["name"] == "kuberay-syncer"
    ]
    assert [r["metadata"]["namespace"] for r in roles] == ["data", "ml"]
    assert [b["metadata"]["namespace"] for b in bindings] == ["data", "ml"]
    for binding in bindings:
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "kuberay-syncer",
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "kuberay-syncer", "namespace": "kuberay-system"}
        ]
    # The Lease role lives in the syncer's own namespace, which it does not watch here.
    assert find(objects, "Role", "kuberay-syncer-leader-election", "kuberay-system")
    assert not any(
        o["kind"] == "Role"
        and o["metadata"]["name"] == "kuberay-syncer"
        and o["metadata"]["namespace"] == "kuberay-system"
        for o in objects
    )


def test_all_namespaces_use_one_cluster_role() -> None:
    objects = manifests(watch_namespaces=["*"])
    role = find(objects, "ClusterRole", "kuberay-syncer-kuberay-system")
    assert grants(role) == WATCH_RULES
    binding = find(objects, "ClusterRoleBinding", "kuberay-syncer-kuberay-system")
    assert binding["roleRef"]["kind"] == "ClusterRole"
    assert not [
        o for o in objects if o["kind"] == "Role" and o["metadata"]["name"] == "kuberay-syncer"
    ]


def test_leader_election_settings_move_or_remove_the_lease_role() -> None:
    moved = manifests(config={"leader_election": {"lease_namespace": "infra", "lease_name": "l"}})
    lease = find(moved, "Role", "kuberay-syncer-leader-election", "infra")
    assert lease["rules"][1]["resourceNames"] == ["l"]
    off = manifests(config={"leader_election": {"enabled": False}})
    assert not [o for o in off if o["metadata"]["name"] == "kuberay-syncer-leader-election"]


def test_deployment_runs_the_syncer_safely_with_its_config_mounted() -> None:
    objects = manifests(replicas=3, image="registry.example/syncer:dev")
    deployment = find(objects, "Deployment", "kuberay-syncer", "kuberay-system")
    spec = deployment["spec"]
    assert spec["replicas"] == 3
    pod = spec["template"]["spec"]
    assert spec["selector"]["matchLabels"] == spec["template"]["metadata"]["labels"]
    # The pods stay outside the syncer's own label selector.
    assert "app.kubernetes.io/managed-by" not in spec["template"]["metadata"]["labels"]
    assert pod["serviceAccountName"] == "kuberay-syncer"
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert "priorityClassName" not in pod
    [container] = pod["containers"]
    assert container["image"] == "registry.example/syncer:dev"
    assert container["args"] == ["--config", "/etc/kuberay-syncer/config.yaml"]
    assert container["env"] == [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    ]
    assert [(p["name"], p["containerPort"]) for p in container["ports"]] == [
        ("health", 8081),
        ("metrics", 8080),
    ]
    assert container["startupProbe"] == {
        "httpGet": {"path": "/healthz", "port": "health"},
        "periodSeconds": 2,
        "timeoutSeconds": 2,
        "failureThreshold": 60,
    }
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert container["resources"] == {
        "requests": {"cpu": "50m", "memory": "128Mi"},
        "limits": {"cpu": "1", "memory": "256Mi"},
    }
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
    }
    # A directory mount (no subPath), so ConfigMap updates reach the running pod.
    mount = container["volumeMounts"][0]
    assert mount == {"name": "config", "mountPath": "/etc/kuberay-syncer", "readOnly": True}
    assert pod["volumes"][0] == {"name": "config", "configMap": {"name": "kuberay-syncer-config"}}
    service = find(objects, "Service", "kuberay-syncer-metrics", "kuberay-system")
    assert service["spec"]["selector"] == spec["selector"]["matchLabels"]
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}
    ]


def test_the_config_map_holds_a_config_the_syncer_accepts() -> None:
    objects = manifests(
        watch_namespaces=["ml", "data"],
        config={"ttl_mode": "delete", "dashboard_auth_secret": "ray-token", "metrics_port": 9090},
    )
    text = find(objects, "ConfigMap", "kuberay-syncer-config", "kuberay-system")["data"][
        "config.yaml"
    ]
    config, diagnostics = parse_config(text, "config.yaml")
    assert diagnostics == []
    assert config == Config(
        namespaces=("ml", "data"),
        ttl_mode="delete",
        dashboard_auth_secret="ray-token",
        metrics_port=9090,
    )
    deployment = find(objects, "Deployment", "kuberay-syncer", "kuberay-system")
    ports = deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert ports[1] == {"name": "metrics", "containerPort": 9090, "protocol": "TCP"}


def test_output_is_deterministic() -> None:
    first = emit.dump_all(manifests(watch_namespaces=["b", "a"], config={"ttl_mode": "stop"}))
    second = emit.dump_all(manifests(watch_namespaces=["b", "a"], config={"ttl_mode": "stop"}))
    assert first == second


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"namespace": "Bad"}, "invalid namespace"),
        ({"watch_namespaces": ["ok", "Not_OK"]}, "invalid watched namespace"),
        ({"watch_namespaces": ["*", "ml"]}, "must be the only"),
        ({"watch_namespaces": ["ml", "ml"]}, "repeat"),
        ({"image": ""}, "image"),
        ({"replicas": -1}, "replicas"),
        ({"config": {"namespaces": ["other"]}}, "differ from the watched"),
        (
            {"config": {"dashboard_auth_secret": "Bad Name"}},
            r"\$\.dashboard_auth_secret: expected a Secret",
        ),
        (
            {"config": {"health_port": 8080}},
            r"metrics_port: expected a port other than health_port \(8080\)",
        ),
        ({"config": {"metrics_port": "x"}}, r"\$\.metrics_port: expected an integer"),
        ({"config": {"metrics_port": 0}}, "metrics_port must be a port from 1 to 65535"),
        ({"config": {"poll_interval_s": -1}}, r"\$\.poll_interval_s"),
        ({"config": {"no_such_key": 1}}, "no_such_key"),
        ({"config": {"leader_election": "yes"}}, r"\$\.leader_election: expected a mapping"),
        (
            {"config": {"leader_election": {"lease_name": "Bad"}}},
            r"lease_name: expected a Kubernetes",
        ),
        (
            {"config": {"leader_election": {"lease_namespace": "Bad"}}},
            r"lease_namespace: expected a",
        ),
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        manifests(**kwargs)


def test_the_default_image_tracks_the_project_version() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["version"] == build.SYNCER_VERSION
    assert f"ghcr.io/kuberay-gitops/kuberay-syncer:{project['version']}" == build.DEFAULT_IMAGE


def test_the_dockerfile_runs_the_packaged_entry_point_as_a_numeric_user() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    dockerfile = (REPO / "Dockerfile").read_text(encoding="utf-8").splitlines()
    assert 'ENTRYPOINT ["kuberay-syncer"]' in dockerfile
    assert "kuberay-syncer" in project["scripts"]
    users = [line.split()[1] for line in dockerfile if line.startswith("USER ")]
    assert users and all(part.isdigit() and part != "0" for part in users[-1].split(":"))
    assert all("[test]" not in line for line in dockerfile)
    assert [line for line in dockerfile if line.startswith("FROM ")][-1] == "FROM python:3.11-slim"


# --- the CLI ------------------------------------------------------------------------------


def run(*args: str) -> Result:
    return CliRunner().invoke(main, ["syncer-manifests", *args])


def test_cli_prints_the_manifests_with_defaults() -> None:
    result = run()
    assert result.exit_code == 0, result.stderr
    assert result.stdout == emit.dump_all(manifests(config={"ttl_mode": "stop"}))
    documents = list(yaml.safe_load_all(result.stdout))
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == build.DEFAULT_IMAGE


def test_cli_options_reach_the_objects() -> None:
    result = run(
        "-n", "ops", "--image", "img:1", "--watch-namespace", "ml", "--watch-namespace", "data",
        "--replicas", "1", "--ttl-mode", "delete", "--dashboard-auth-secret", "tok",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    documents = list(yaml.safe_load_all(result.stdout))
    roles = [d["metadata"]["namespace"] for d in documents if d["kind"] == "Role"]
    assert roles == ["data", "ml", "ops"]
    config_map = next(d for d in documents if d["kind"] == "ConfigMap")
    settings = json.loads(config_map["data"]["config.yaml"])
    assert settings == {
        "namespaces": ["ml", "data"],
        "ttl_mode": "delete",
        "dashboard_auth_secret": "tok",
    }
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    assert deployment["metadata"]["namespace"] == "ops"
    assert deployment["spec"]["replicas"] == 1


def test_cli_refuses_bad_input_with_exit_code_2() -> None:
    result = run("--watch-namespace", "Bad_NS")
    assert result.exit_code == 2
    assert result.stderr == "error: invalid watched namespace 'Bad_NS'\n"
    assert run("--ttl-mode", "nuke").exit_code == 2


def test_cli_writes_an_output_directory_it_owns(tmp_path: Path) -> None:
    directory = tmp_path / "syncer"
    directory.mkdir()  # an existing empty directory is fine
    assert run("-o", str(directory)).exit_code == 0
    files = output.plan_directory(manifests())
    assert sorted(p.name for p in directory.iterdir()) == sorted(files)
    assert (directory / "deployment_kuberay-system_kuberay-syncer.yaml").read_text() == files[
        "deployment_kuberay-system_kuberay-syncer.yaml"
    ]
    # A second run with one namespace more rewrites only what changed, and nothing else.
    result = run(
        "-o", str(directory), "--watch-namespace", "kuberay-system", "--watch-namespace", "ml"
    )
    assert result.exit_code == 0, result.stderr
    assert (directory / "role_ml_kuberay-syncer.yaml").exists()
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    refused = run("-o", str(foreign))
    assert refused.exit_code == 2
    assert "refusing to write into it" in refused.stderr
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]
