"""Each tests/invalid/<case>.yaml fails with exactly the stderr in <case>.txt and exit code 2.

A case may have a `<case>.args` file with extra `kuberay render` arguments (shell words).
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from renderer.cli import main
from tests.paths import INVALID, REPO

CASES = sorted(INVALID.glob("*.yaml"))


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_invalid_input_is_reported_exactly(
    case: Path, update_golden: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    args_file = case.with_suffix(".args")
    extra = shlex.split(args_file.read_text()) if args_file.exists() else []
    result = CliRunner().invoke(main, ["render", str(case.relative_to(REPO)), *extra])
    assert result.exit_code == 2, result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    expected_file = case.with_suffix(".txt")
    if update_golden:
        expected_file.write_text(result.stderr, encoding="utf-8", newline="\n")
    assert result.stderr == expected_file.read_text(encoding="utf-8")
