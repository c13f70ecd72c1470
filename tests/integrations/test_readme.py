"""The README's "Use it with …" snippets are the ones the integration tests run."""

from __future__ import annotations

import yaml

from tests.integrations import test_krm, test_precommit
from tests.paths import EXAMPLES, REPO

README = (REPO / "README.md").read_text()


def test_the_kustomize_transformer_snippet_is_the_tested_one() -> None:
    assert test_krm.TRANSFORMER in README


def test_the_pre_commit_snippet_is_the_tested_one() -> None:
    snippet = test_precommit.CONFIG.format(
        repo="https://github.com/kuberay-gitops/kuberay-gitops", rev="v0.1.0"
    )
    assert snippet in README


def test_the_argocd_plugin_snippet_is_the_example_application() -> None:
    start = README.index("    plugin:\n      name: kuberay-v1")
    snippet = README[start : README.index("```", start)]
    plugin_app = (EXAMPLES / "gitops" / "argocd" / "apps-cmp" / "team-b-plugin.yaml").read_text()
    assert snippet in plugin_app


def test_the_action_snippet_is_the_project_workflow_step() -> None:
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "ci.yml").read_text())
    (step,) = [
        s for job in workflow["jobs"].values() for s in job["steps"] if s.get("uses") == "./"
    ]
    for key in ("paths", "output-dir"):
        assert f"          {key}: {step['with'][key]}\n" in README


def test_the_gitops_commands_are_the_ones_render_sh_runs() -> None:
    render_sh = (EXAMPLES / "gitops" / "render.sh").read_text()
    for option in ("argocd-application", "argocd-cm", "flux"):
        assert f"--gitops-config {option}" in render_sh
        assert f"--gitops-config {option} >" in README
