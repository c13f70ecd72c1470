"""The limits the layout keeps (issue 7): rooms that fit on a screen, no build-output names.

Import layers are import-linter's contracts (pyproject.toml); this checks what they cannot.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.paths import REPO

PACKAGES = ("renderer", "syncer", "schemas")
MAX_CLASS_LINES = 300
MAX_FUNCTION_LINES = 120
# Folder names tools treat as generated output (GitHub's Python .gitignore, black, pytest).
OUTPUT_NAMES = {"build", "dist", "out", "target", "generated"}


def _modules() -> list[Path]:
    return sorted(path for top in PACKAGES for path in (REPO / top).rglob("*.py"))


def _sizes(path: Path) -> list[tuple[str, str, int]]:
    """(kind, qualified name, lines) of every class and function in `path`."""
    found: list[tuple[str, str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                kind = "class" if isinstance(child, ast.ClassDef) else "function"
                name = f"{prefix}{child.name}"
                assert child.end_lineno is not None
                found.append((kind, name, child.end_lineno - child.lineno + 1))
                visit(child, f"{name}.")

    visit(ast.parse(path.read_text(encoding="utf-8")), "")
    return found


def test_the_packages_have_modules() -> None:
    assert len(_modules()) > 50  # the walk finds the tree (a wrong root would pass vacuously)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_class_or_function_is_longer_than_a_screen_or_two(path: Path) -> None:
    limits = {"class": MAX_CLASS_LINES, "function": MAX_FUNCTION_LINES}
    too_long = [(k, n, lines) for k, n, lines in _sizes(path) if lines > limits[k]]
    assert too_long == []


def test_no_folder_inside_the_packages_is_named_like_build_output() -> None:
    folders = {p for top in PACKAGES for p in (REPO / top).rglob("*") if p.is_dir()}
    named = sorted(str(p.relative_to(REPO)) for p in folders if p.name in OUTPUT_NAMES)
    assert named == []


def test_the_syncer_is_split_into_sub_packages() -> None:
    subs = sorted(p.parent.name for p in (REPO / "syncer").glob("*/__init__.py"))
    assert len(subs) >= 3, subs
    assert {"kube", "ray", "rayjob", "rayservice"} <= set(subs)
