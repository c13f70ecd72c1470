"""The pre-commit hooks (.pre-commit-hooks.yaml), run by the real pre-commit in a temp repo.

The hooks repository is a git snapshot of this checkout's package files (what `pre-commit
try-repo` would clone, uncommitted changes included), with fixed commit dates so that an
unchanged tree gives the same revision and pre-commit reuses the hook environment it
built (kept in a cache outside the clone). Building it installs the project from PyPI.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integrations.tools import VENV_BIN, tool_env
from tests.paths import EXAMPLES, INVALID, REPO

SNAPSHOT = (
    "pyproject.toml",
    "README.md",
    ".pre-commit-hooks.yaml",
    "renderer",
    "schemas",
    "syncer",
)
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kuberay-gitops"

# The README's "Use it with pre-commit" snippet (rev and repo filled in by the test).
CONFIG = """\
repos:
  - repo: {repo}
    rev: {rev}
    hooks:
      - id: kuberay-validate
        args: [apps/]
      - id: kuberay-render-check
        args: [apps/, --output-dir, rendered/]
"""


def git(cwd: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "kuberay tests",
        "GIT_AUTHOR_EMAIL": "tests@example.invalid",
        "GIT_COMMITTER_NAME": "kuberay tests",
        "GIT_COMMITTER_EMAIL": "tests@example.invalid",
        "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
        "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
    }
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def snapshot() -> tuple[Path, str]:
    # A fixed path: pre-commit keys its environments by repository and revision.
    source = CACHE / "pre-commit-hooks-repo"
    shutil.rmtree(source, ignore_errors=True)
    source.mkdir(parents=True)
    for name in SNAPSHOT:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, source / name)
    git(source, "init", "-q", "-b", "main")
    git(source, "add", "-A")
    git(source, "commit", "-q", "-m", "snapshot")
    return source, git(source, "rev-parse", "HEAD")


def pre_commit(work: Path) -> subprocess.CompletedProcess[str]:
    env = tool_env()
    env["PRE_COMMIT_HOME"] = str(CACHE / "pre-commit")
    return subprocess.run(
        [str(VENV_BIN / "pre-commit"), "run", "--all-files"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )


@pytest.mark.slow
def test_hooks_pass_on_a_current_repo_and_fail_on_stale_or_invalid_files(tmp_path: Path) -> None:
    assert shutil.which("git"), "git is needed by pre-commit"
    source, rev = snapshot()
    work = tmp_path / "work"
    (work / "apps").mkdir(parents=True)
    shutil.copy(EXAMPLES / "rayjob.yaml", work / "apps" / "rayjob.yaml")
    subprocess.run(
        [str(VENV_BIN / "kuberay"), "render", "apps/", "-o", "rendered/"], cwd=work, check=True
    )
    (work / ".pre-commit-config.yaml").write_text(CONFIG.format(repo=source, rev=rev))
    git(work, "init", "-q")
    git(work, "add", "-A")
    ok = pre_commit(work)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "kuberay validate" in ok.stdout and "Passed" in ok.stdout
    # A hand edit of the rendered output: the render check fails and names the file.
    kustomization = work / "rendered" / "kustomization.yaml"
    kustomization.write_text(kustomization.read_text() + "# edited\n")
    stale = pre_commit(work)
    assert stale.returncode == 1
    assert "rendered/kustomization.yaml: differs" in stale.stdout
    # An invalid manifest: validate fails with file:line:col.
    (work / "apps" / "serve.yaml").write_text((INVALID / "serve-port.yaml").read_text())
    invalid = pre_commit(work)
    assert invalid.returncode == 1
    assert "apps/serve.yaml:6:34: error:" in invalid.stdout
