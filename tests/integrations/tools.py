"""The external tools the integration tests run for real: kustomize, pre-commit, git.

A missing tool fails the test that needs it (never a skip): `./run test` builds kustomize
with the go command into a cache outside the clone (`KUBERAY_KUSTOMIZE` names it), and the
test extra installs pre-commit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

VENV_BIN = Path(sys.executable).parent
DEFAULT_KUSTOMIZE = Path.home() / ".cache" / "kuberay-gitops" / "bin" / "kustomize"


def kustomize() -> str:
    """A kustomize that runs exec KRM functions (`kubectl kustomize` silently skips them)."""
    for candidate in (os.environ.get("KUBERAY_KUSTOMIZE"), str(DEFAULT_KUSTOMIZE)):
        if candidate and Path(candidate).is_file():
            return candidate
    found = shutil.which("kustomize")
    if found is None:
        pytest.fail("kustomize is missing: `./run test` builds it (needs the go command)")
    return found


def krmcheck() -> str:
    """The kpt SDK's ResourceList parser as a command (tools/krmcheck), built by `./run test`."""
    candidate = os.environ.get("KUBERAY_KRMCHECK")
    if not candidate or not Path(candidate).is_file():
        built = subprocess.run(
            [str(Path(__file__).parents[2] / "tools" / "krmcheck" / "build")],
            capture_output=True,
            text=True,
            check=False,
        )
        if built.returncode != 0:
            pytest.fail(f"tools/krmcheck/build failed (needs the go command):\n{built.stderr}")
        candidate = built.stdout.strip()
    return candidate


def tool_env() -> dict[str, str]:
    """The environment with this virtualenv's scripts (kuberay, kuberay-krm) first on PATH."""
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def build(directory: Path, *, exec_functions: bool = False) -> subprocess.CompletedProcess[str]:
    """`kustomize build` of one directory, with exec functions enabled when asked."""
    flags = ["--enable-alpha-plugins", "--enable-exec"] if exec_functions else []
    return subprocess.run(
        [kustomize(), "build", *flags, str(directory)],
        capture_output=True,
        text=True,
        env=tool_env(),
        check=False,
        timeout=120,
    )
