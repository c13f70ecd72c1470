"""GitHub Actions workflow commands for problems: `::error file=F,line=L,col=C::message`.

`kuberay render|validate --format github` prints diagnostics this way, so a workflow run
shows them as annotations on the lines of the pull request. Values are escaped the way
the runner reads them (`%`, CR, LF in messages; also `:` and `,` in properties).
"""

from __future__ import annotations

from collections.abc import Iterable

from renderer.errors import Diagnostic, format_path


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def command(
    level: str, message: str, *, file: str | None = None, line: int = 0, col: int = 0
) -> str:
    """One workflow command line, e.g. `::error file=a.yaml,line=3,col=5::bad`."""
    props = []
    if file is not None:
        props.append(f"file={_property(file)}")
        if line:
            props.append(f"line={line}")
        if col:
            props.append(f"col={col}")
    head = f"::{level} {','.join(props)}" if props else f"::{level}"
    return f"{head}::{_data(message)}"


def format_diagnostics(diagnostics: Iterable[Diagnostic]) -> str:
    """Every diagnostic as one `::error` / `::warning` line, in file and line order."""
    lines = []
    ordered = sorted(
        diagnostics,
        key=lambda d: (d.origin.file, d.origin.position(d.problem.path), d.problem.message),
    )
    for diagnostic in ordered:
        line, col = diagnostic.origin.position(diagnostic.problem.path)
        message = f"{format_path(diagnostic.problem.path)}: {diagnostic.problem.message}"
        if diagnostic.origin.context:
            message += f" (in {diagnostic.origin.context})"
        lines.append(
            command(
                diagnostic.problem.severity,
                message,
                file=diagnostic.origin.file,
                line=line,
                col=col,
            )
        )
    return "\n".join(lines)
