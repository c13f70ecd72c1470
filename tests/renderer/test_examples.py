"""examples/ is rendered into examples/rendered/ (checked in) and must stay current."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from renderer.cli import main
from tests.paths import EXAMPLES, REPO


def test_examples_cover_each_kind() -> None:
    names = {p.name for p in EXAMPLES.glob("*.yaml")}
    assert {"raycluster.yaml", "rayjob.yaml", "rayservice.yaml"} <= names


def test_rendered_examples_are_current(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    result = CliRunner().invoke(
        main,
        [
            "render",
            *sorted(f"examples/{p.name}" for p in EXAMPLES.glob("*.yaml")),
            "--output-dir",
            "examples/rendered",
            "--diff",
        ],
    )
    assert result.exit_code == 0, (
        "examples/rendered/ is stale; run `./run render` and commit the result\n" + result.stdout
    )
