"""examples/gitops/: a repository a team can copy. It must be current and every part valid.

Current: its render.sh, run in a copy, rewrites nothing (as examples/rendered is checked).
Valid: every directory with a kustomization.yaml builds with the real kustomize, and every
object built, and every other manifest (the app of apps, the plugin Application), validates
(kubernetes-validate for core kinds, the shared CRD JSON Schemas for Argo CD and Flux).
"""

from __future__ import annotations

import filecmp
import shutil
import subprocess
from pathlib import Path

import yaml

from renderer import health
from tests.integrations.tools import build, tool_env
from tests.paths import EXAMPLES
from tests.validation import validate_object

GITOPS = EXAMPLES / "gitops"


def files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_render_sh_leaves_the_committed_example_unchanged(tmp_path: Path) -> None:
    copy = tmp_path / "gitops"
    shutil.copytree(GITOPS, copy)
    done = subprocess.run(
        ["sh", "render.sh"], cwd=copy, env=tool_env(), capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    before, after = files(GITOPS), files(copy)
    changed = sorted(n for n in set(before) | set(after) if before.get(n) != after.get(n))
    assert not changed, f"examples/gitops is stale; run its render.sh: {changed}"
    assert not filecmp.dircmp(GITOPS, copy).diff_files


def kustomization_dirs() -> list[Path]:
    return sorted(p.parent for p in GITOPS.rglob("kustomization.yaml"))


def test_every_kustomization_builds_and_every_object_is_valid() -> None:
    dirs = kustomization_dirs()
    names = {str(d.relative_to(GITOPS)) for d in dirs}
    assert {"namespaces", "syncer", "rendered/team-a", "rendered/team-b", "flux"} <= names
    assert {"argocd/apps", "argocd/install"} <= names
    kinds: set[str] = set()
    for directory in dirs:
        built = build(directory)
        assert built.returncode == 0, f"{directory}: {built.stderr}"
        for obj in yaml.safe_load_all(built.stdout):
            kinds.add(f"{obj['apiVersion']}/{obj['kind']}")
            assert validate_object(obj) == [], (directory, obj["kind"], obj["metadata"]["name"])
    assert {
        "v1/Namespace",
        "v1/Pod",
        "batch/v1/Job",
        "gateway.networking.k8s.io/v1/HTTPRoute",
        "apps/v1/Deployment",
        "argoproj.io/v1alpha1/Application",
        "kustomize.toolkit.fluxcd.io/v1/Kustomization",
    } <= kinds


def test_manifests_outside_kustomizations_are_valid() -> None:
    for path in (
        GITOPS / "argocd" / "app-of-apps.yaml",
        *(GITOPS / "argocd" / "apps-cmp").glob("*"),
    ):
        for obj in yaml.safe_load_all(path.read_text()):
            assert validate_object(obj) == [], path


def test_argocd_install_adds_the_health_scripts_and_the_plugin_sidecar() -> None:
    built = build(GITOPS / "argocd" / "install")
    assert built.returncode == 0, built.stderr
    objects = {o["metadata"]["name"]: o for o in yaml.safe_load_all(built.stdout)}
    assert objects["argocd-cm"]["data"] == health.argocd_health_data()
    containers = objects["argocd-repo-server"]["spec"]["template"]["spec"]["containers"]
    assert sorted(c["name"] for c in containers) == ["argocd-repo-server", "kuberay"]
    volumes = {
        v["name"] for v in objects["argocd-repo-server"]["spec"]["template"]["spec"]["volumes"]
    }
    assert {"var-files", "plugins", "kuberay-cmp-plugin", "kuberay-cmp-tmp"} <= volumes
    assert "plugin.yaml" in objects["kuberay-cmp-plugin"]["data"]


def test_the_flux_and_argocd_objects_cover_each_team() -> None:
    flux = yaml.safe_load((GITOPS / "flux" / "team-b.yaml").read_text())
    assert flux["spec"]["path"] == "./rendered/team-b"
    assert flux["spec"]["ignore"][0]["target"]["name"] == "text-classifier-httproute"
    assert flux["spec"]["healthChecks"][0]["name"] == "text-classifier-kuberay-status"
    team_a = yaml.safe_load((GITOPS / "flux" / "team-a.yaml").read_text())
    assert {c["name"] for c in team_a["spec"]["healthChecks"]} == {"word-count-kuberay-status"}
    app = yaml.safe_load((GITOPS / "argocd" / "apps" / "team-b.yaml").read_text())
    assert app["spec"]["source"]["path"] == "rendered/team-b"
    assert app["spec"]["ignoreDifferences"][0]["jsonPointers"] == ["/spec/rules"]
    assert "REPLACE-ME" not in (GITOPS / "flux" / "team-a.yaml").read_text()
