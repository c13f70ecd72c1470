"""The Argo CD config-management plugin: discover, generate with parameters, install objects."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import yaml

from renderer import argocd_cmp, emit
from tests.integrations.tools import VENV_BIN, tool_env
from tests.paths import EXAMPLES, GOLDEN, INVALID
from tests.validation import validate_object


def discover(directory: Path) -> str:
    command = argocd_cmp.plugin_config()["spec"]["discover"]["find"]["command"]
    done = subprocess.run(command, cwd=directory, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def generate(directory: Path, **params: str) -> subprocess.CompletedProcess[str]:
    env = tool_env()
    env.update(
        {
            k if k.isupper() else argocd_cmp.env_name(k.replace("_", "-")): v
            for k, v in params.items()
        }
    )
    env["ARGOCD_APP_NAMESPACE"] = "from-destination"
    return subprocess.run(
        [str(VENV_BIN / "kuberay-argocd-cmp"), "generate"],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def render(directory: Path, *args: str) -> str:
    done = subprocess.run(
        [str(VENV_BIN / "kuberay"), "render", ".", *args],
        cwd=directory,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def test_discover_finds_ray_manifests_only(tmp_path: Path) -> None:
    (tmp_path / "deep" / "er").mkdir(parents=True)
    (tmp_path / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n")
    assert discover(tmp_path) == ""
    shutil.copy(EXAMPLES / "rayjob.yaml", tmp_path / "deep" / "er" / "job.yml")
    assert discover(tmp_path) == "./deep/er/job.yml"


def test_generate_renders_the_source_directory_with_the_parameters(tmp_path: Path) -> None:
    source = yaml.safe_load((EXAMPLES / "raycluster.yaml").read_text())
    del source["metadata"]["namespace"]
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(source))
    plain = generate(tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout == render(tmp_path, "--namespace", "from-destination")
    tuned = generate(
        tmp_path, namespace="team-a", cluster_domain="corp.local", probes_injection="false"
    )
    assert tuned.returncode == 0, tuned.stderr
    expected = render(
        tmp_path, "--namespace", "team-a", "--cluster-domain", "corp.local", "--no-probes-injection"
    )
    assert tuned.stdout == expected
    assert tuned.stdout != plain.stdout


def test_generate_reports_bad_parameters_and_bad_manifests(tmp_path: Path) -> None:
    shutil.copy(EXAMPLES / "raycluster.yaml", tmp_path / "cluster.yaml")
    bad = generate(tmp_path, login_shell="yes")
    assert bad.returncode == 2
    assert "plugin parameter login-shell: expected true or false" in bad.stderr
    shutil.copy(INVALID / "serve-port.yaml", tmp_path / "serve.yaml")
    invalid = generate(tmp_path)
    assert invalid.returncode == 2 and invalid.stdout == ""
    assert "serve.yaml:6:34: error:" in invalid.stderr


def test_generate_passes_the_network_policy_settings(tmp_path: Path) -> None:
    shutil.copy(GOLDEN / "rayservice-network-policy" / "input.yaml", tmp_path / "serve.yaml")
    labels = {"app.kubernetes.io/name": "ray-syncer", "tier": "control"}
    tuned = generate(
        tmp_path,
        feature_gates="RayClusterNetworkPolicy=true",
        syncer_namespace="platform",
        ARGOCD_APP_PARAMETERS=json.dumps([{"name": "syncer-pod-labels", "map": labels}]),
    )
    assert tuned.returncode == 0, tuned.stderr
    expected = render(
        tmp_path,
        *("--namespace", "from-destination", "--feature-gates", "RayClusterNetworkPolicy=true"),
        *("--syncer-namespace", "platform", "--syncer-pod-label", "tier=control"),
        *("--syncer-pod-label", "app.kubernetes.io/name=ray-syncer"),
    )
    assert tuned.stdout == expected
    assert "kubernetes.io/metadata.name: platform" in tuned.stdout
    assert "tier: control" in tuned.stdout


def test_install_prints_the_plugin_configmap_and_the_sidecar_patch() -> None:
    done = subprocess.run(
        [str(VENV_BIN / "kuberay-argocd-cmp"), "install", "--image", "registry.local/k:1"],
        capture_output=True,
        text=True,
        check=True,
    )
    configmap, patch = yaml.safe_load_all(done.stdout)
    assert validate_object(configmap) == []
    assert yaml.safe_load(configmap["data"]["plugin.yaml"]) == argocd_cmp.plugin_config()
    (sidecar,) = patch["spec"]["template"]["spec"]["containers"]
    assert sidecar["image"] == "registry.local/k:1"
    assert sidecar["command"] == ["/var/run/argocd/argocd-cmp-server"]
    mounts = {m["mountPath"] for m in sidecar["volumeMounts"]}
    assert {"/var/run/argocd", "/home/argocd/cmp-server/plugins"} <= mounts
    assert emit.dump_all(argocd_cmp.install_objects("registry.local/k:1")) == done.stdout
    usage = subprocess.run(
        [str(VENV_BIN / "kuberay-argocd-cmp"), "nonsense"], capture_output=True, text=True
    )
    assert usage.returncode == 2 and "usage:" in usage.stderr
