"""`--format github` annotations, and the composite action.yml run the way the runner runs it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml
from click.testing import CliRunner

from renderer import ghformat
from renderer.cli import main
from tests.integrations.tools import tool_env
from tests.paths import EXAMPLES, INVALID, REPO

ANNOTATION = re.compile(r"^::(error|warning) file=([^,]+),line=(\d+),col=(\d+)::(.+)$")


def test_invalid_manifests_become_error_annotations() -> None:
    result = CliRunner().invoke(
        main, ["validate", "--format", "github", str(INVALID / "many-problems.yaml")]
    )
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.startswith("::")]
    assert lines
    for line in lines:
        match = ANNOTATION.match(line)
        assert match, line
        assert match.group(2) == str(INVALID / "many-problems.yaml")
        assert match.group(5).startswith("$")
    # The text format reports the same problems at the same places.
    text = CliRunner().invoke(main, ["validate", str(INVALID / "many-problems.yaml")])
    places = sorted(re.findall(r"^\S+?:(\d+):(\d+): error", text.stderr, re.MULTILINE))
    assert places == sorted((m[3], m[4]) for m in map(ANNOTATION.match, lines) if m)


def test_messages_and_properties_are_escaped() -> None:
    line = ghformat.command("error", "50% of\nit", file="a,b:c.yaml", line=3, col=1)
    assert line == "::error file=a%2Cb%3Ac.yaml,line=3,col=1::50%25 of%0Ait"
    assert ghformat.command("warning", "x") == "::warning::x"


def action_steps() -> list[dict[str, object]]:
    action = yaml.safe_load((REPO / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    return list(action["runs"]["steps"])


def run_check_step(workspace: Path, inputs: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The action's check step, as the runner would run it: bash, with its env expressions."""
    (step,) = [s for s in action_steps() if s.get("name") == "kuberay render --check"]
    env = tool_env()
    for key, expression in dict(step["env"]).items():  # type: ignore[call-overload]
        name = re.fullmatch(r"\$\{\{ inputs\.([a-z-]+) \}\}", str(expression))
        assert name, expression
        env[key] = inputs.get(name.group(1), "")
    return subprocess.run(
        ["bash", "-e", "-c", str(step["run"])],
        cwd=workspace,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_action_passes_on_current_output_and_annotates_stale_files(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLES, tmp_path / "examples", ignore=shutil.ignore_patterns("gitops"))
    inputs = {"paths": "examples/*.yaml", "output-dir": "examples/rendered"}
    ok = run_check_step(tmp_path, inputs)
    assert ok.returncode == 0, ok.stderr
    stale = tmp_path / "examples" / "rendered" / "kustomization.yaml"
    stale.write_text(stale.read_text() + "# edited by hand\n")
    failed = run_check_step(tmp_path, inputs)
    assert failed.returncode == 1
    assert (
        "::error file=examples/rendered/kustomization.yaml::differs from a fresh render"
        in failed.stderr
    )
    (tmp_path / "examples" / "broken.yaml").write_text((INVALID / "serve-port.yaml").read_text())
    invalid = run_check_step(tmp_path, inputs)
    assert invalid.returncode == 2
    assert "::error file=examples/broken.yaml,line=" in invalid.stderr


def test_the_project_workflow_uses_the_action() -> None:
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "ci.yml").read_text())
    steps = [s for job in workflow["jobs"].values() for s in job["steps"]]
    uses = [s for s in steps if s.get("uses") == "./"]
    assert uses and uses[0]["with"]["output-dir"] == "examples/rendered"
    install = [s for s in action_steps() if s.get("name") == "install kuberay-gitops"]
    assert install and "pip install" in str(install[0]["run"])
