"""Problems found in user input, and the one formatter that shows them.

Checkers return `Problem`s (a JSON path inside one document plus a message); the
compiler attaches the document's origin and, when any error remains, raises
`ManifestError`. Nothing here reads files or writes output.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

JsonPath = tuple[str | int, ...]
Severity = Literal["error", "warning"]
# Maps a JSON path inside a document to a 1-based (line, column), nearest known ancestor.
Locator = Callable[[JsonPath], tuple[int, int]]


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with one document, at a JSON path inside it."""

    path: JsonPath
    message: str
    severity: Severity = "error"


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a document came from: its file, its 1-based index, and a way to find lines."""

    file: str
    index: int
    locate: Locator | None = None
    context: str = ""

    def position(self, path: JsonPath) -> tuple[int, int]:
        """Return the 1-based line and column of `path`, or of the document start."""
        if self.locate is None:
            return (1, 1)
        return self.locate(path)


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """A problem tied to the document it was found in."""

    origin: Origin
    problem: Problem

    def format(self) -> str:
        """Render as the compiler-style line plus the context line."""
        line, col = self.origin.position(self.problem.path)
        head = (
            f"{self.origin.file}:{line}:{col}: {self.problem.severity}: "
            f"{format_path(self.problem.path)}: {self.problem.message}"
        )
        where = f"in document {self.origin.index}"
        if self.origin.context:
            where += f" ({self.origin.context})"
        return f"{head}\n  {where}"


class ManifestError(Exception):
    """Raised when the input has at least one error; carries every diagnostic found."""

    def __init__(self, diagnostics: Sequence[Diagnostic]) -> None:
        super().__init__(format_diagnostics(diagnostics))
        self.diagnostics = tuple(diagnostics)


def format_path(path: JsonPath) -> str:
    """Format a JSON path as `$.a.b[0].c` (keys that are not identifiers are bracketed)."""
    parts = ["$"]
    for step in path:
        if isinstance(step, int):
            parts.append(f"[{step}]")
        elif step and all(ch.isalnum() or ch in "_-" for ch in step):
            parts.append(f".{step}")
        else:
            parts.append(f"[{json.dumps(step)}]")
    return "".join(parts)


def show(value: Any, limit: int = 60) -> str:
    """Show a user value in a message: JSON-like, shortened when long."""
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def format_diagnostics(diagnostics: Iterable[Diagnostic]) -> str:
    """Format diagnostics in a stable order: file, document, line, then message."""
    ordered = sorted(
        diagnostics,
        key=lambda d: (
            d.origin.file,
            d.origin.index,
            d.origin.position(d.problem.path),
            d.problem.message,
        ),
    )
    return "\n".join(d.format() for d in ordered)


def summary(diagnostics: Sequence[Diagnostic]) -> str:
    """The closing total, e.g. `3 errors in 2 files; nothing written`."""
    errors = [d for d in diagnostics if d.problem.severity == "error"]
    warnings = [d for d in diagnostics if d.problem.severity == "warning"]
    files = {d.origin.file for d in errors or warnings}
    parts = []
    if errors:
        parts.append(f"{len(errors)} error{'s' if len(errors) != 1 else ''}")
    if warnings:
        parts.append(f"{len(warnings)} warning{'s' if len(warnings) != 1 else ''}")
    text = " and ".join(parts) + f" in {len(files)} file{'s' if len(files) != 1 else ''}"
    if errors:
        text += "; nothing written"
    return text


def has_error(problems: Iterable[Problem]) -> bool:
    """Whether any of `problems` is an error (warnings alone let a document build)."""
    return any(p.severity == "error" for p in problems)
