"""An output directory on disk: what the renderer owns there, and writing a planned set of files.

The I/O half of `renderer.output` (which plans file names and contents, purely). Used by
`kuberay render -o DIR` and by `kuberay syncer-manifests -o DIR`: both own only the files
their marker lists, replace each changed file whole, and remove the files they no longer plan.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from renderer import output


class ForeignDirectoryError(Exception):
    """A non-empty output directory that holds no marker: someone else's files."""


def owned_files(directory: Path, writer: str) -> dict[str, str]:
    """The files of `directory` that `writer` may replace or remove (none if it is new).

    Raises:
        ForeignDirectoryError: `directory` is not empty and has no marker.
    """
    existing = read_existing(directory) if directory.exists() else {}
    if existing is not None:
        return existing
    if any(directory.iterdir()):
        raise ForeignDirectoryError(
            f"{directory} is not empty and was not written by {writer} "
            f"(no {output.MARKER} file); refusing to write into it"
        )
    return {}


def read_existing(directory: Path) -> dict[str, str] | None:
    """The renderer-owned files of `directory` (None when it is not ours)."""
    marker = directory / output.MARKER
    if not marker.exists():
        return None
    owned: dict[str, str] = {output.MARKER: marker.read_text(encoding="utf-8")}
    for name in output.read_marker(owned[output.MARKER]):
        path = directory / name
        if path.is_file() and path.parent == directory:
            owned[name] = path.read_text(encoding="utf-8")
    return owned


def write_directory(directory: Path, files: dict[str, str], existing: dict[str, str]) -> None:
    """Write what changed (each file replaced whole), and remove files no longer planned."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        if existing.get(name) == content:
            continue
        fd, temp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(content)
        Path(temp).replace(directory / name)
    for name in existing:
        if name not in files:
            (directory / name).unlink(missing_ok=True)
