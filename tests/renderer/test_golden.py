"""Golden tests: each tests/golden/<case>/input.yaml renders byte-exact to expected.yaml.

A case may hold an `args` file with extra `kuberay render` arguments (one per line).
`pytest --update-golden` rewrites the expected files; their diff is what reviewers read.
"""

from __future__ import annotations

import difflib
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from renderer.cli import main
from renderer.objects import autoscaling
from tests.paths import GOLDEN

CASES = sorted(p.parent for p in GOLDEN.glob("*/input.yaml"))
# The autoscaling ConfigMap copies two source files byte for byte; golden files show a
# stand-in, so they change with the renderer, not with the provider or the wrapper
# (test_autoscaling.py checks the real copies).
ASSET_STAND_INS = {
    autoscaling.PROVIDER_KEY: "# the provider source, copied byte for byte\n",
    autoscaling.WRAPPER_KEY: "# the wrapper source, copied byte for byte\n",
}


def render_case(case: Path) -> tuple[int, str, str]:
    args_file = case / "args"
    extra = shlex.split(args_file.read_text()) if args_file.exists() else []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(autoscaling, "read_asset", ASSET_STAND_INS.__getitem__)
        result = CliRunner().invoke(main, ["render", str(case / "input.yaml"), *extra])
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_golden_case_renders_byte_exact(case: Path, update_golden: bool) -> None:
    code, out, err = render_case(case)
    assert code == 0, err
    expected_file = case / "expected.yaml"
    if update_golden:
        expected_file.write_text(out, encoding="utf-8", newline="\n")
    expected = expected_file.read_text(encoding="utf-8")
    if out != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                out.splitlines(keepends=True),
                fromfile=str(expected_file),
                tofile="rendered",
            )
        )
        pytest.fail(f"rendered output differs from {expected_file}:\n{diff}")


def test_there_are_golden_cases() -> None:
    assert len(CASES) >= 10
