"""The Kubernetes OpenAPI definitions one at a time, through an index cached outside the clone.

A render checks a few embedded types (a Pod template, a Service): parsing the whole 1.4 MB
`_definitions.json` of kubernetes-validate for them was the largest part of a small
render's start-up (issue 11). `definitions(path)` is a mapping from definition name to its
schema that parses only the definitions asked for. Where each one lies in the file comes
from an index built once per file (one full parse) and kept in the user's cache directory
(`$KUBERAY_CACHE`, else `$XDG_CACHE_HOME/kuberay-gitops`, else `~/.cache/kuberay-gitops`),
named by the file's directory, size and modification time. The index holds only offsets
(no Kubernetes text); each lookup checks that the name stands at the recorded offset, and
a stale or unreadable index is rebuilt. Without a writable cache the index lives in memory.
The definitions are the file's, byte for byte parsed by `json` as before.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

# Bump when the index's form changes (old files are then ignored).
INDEX_FORMAT: Final = 1
_SPACE: Final = re.compile(r"[ \t\n\r]*")
_DECODER: Final = json.JSONDecoder()


class DefinitionsError(ValueError):
    """The file is not a JSON object with a `$defs` object (never for kubernetes-validate's)."""


def _members(text: str, pos: int) -> Iterator[tuple[str, int, int, int]]:
    """(key, key offset, value start, value end) of the object whose `{` is at `pos`."""
    if text[pos : pos + 1] != "{":
        raise DefinitionsError(f"expected an object at offset {pos}")
    pos = _SPACE.match(text, pos + 1).end()  # type: ignore[union-attr]  # matches always
    if text[pos : pos + 1] == "}":
        return
    while True:
        key_at = pos
        key, pos = _DECODER.raw_decode(text, pos)
        pos = _SPACE.match(text, pos).end()  # type: ignore[union-attr]
        if text[pos : pos + 1] != ":" or not isinstance(key, str):
            raise DefinitionsError(f"expected a key and ':' at offset {key_at}")
        start = _SPACE.match(text, pos + 1).end()  # type: ignore[union-attr]
        _, end = _DECODER.raw_decode(text, start)
        yield key, key_at, start, end
        pos = _SPACE.match(text, end).end()  # type: ignore[union-attr]
        if text[pos : pos + 1] == "}":
            return
        if text[pos : pos + 1] != ",":
            raise DefinitionsError(f"expected ',' or '}}' at offset {pos}")
        pos = _SPACE.match(text, pos + 1).end()  # type: ignore[union-attr]


def build_index(text: str) -> dict[str, list[int]]:
    """Definition name -> [key offset, value start, value end] in `text` (one full parse)."""
    start = _SPACE.match(text, 0).end()  # type: ignore[union-attr]
    for key, _, value_start, _ in _members(text, start):
        if key == "$defs":
            return {name: [at, s, e] for name, at, s, e in _members(text, value_start)}
    raise DefinitionsError("no $defs object")


def _cache_file(path: Path, size: int, mtime_ns: int) -> Path:
    given = os.environ.get("KUBERAY_CACHE")
    xdg = os.environ.get("XDG_CACHE_HOME")
    root = (
        Path(given) if given else (Path(xdg) if xdg else Path.home() / ".cache") / "kuberay-gitops"
    )
    name = f"{path.parent.name}-{path.stem}-{size}-{mtime_ns}-v{INDEX_FORMAT}.json"
    return root / "k8s-definitions" / name


def _valid(index: Any, text: str) -> bool:
    """The index's form (each entry is checked again when it is used)."""
    return isinstance(index, dict) and len(index) > 0


def _spot(index: Mapping[str, Any], name: str, size: int) -> tuple[int, int, int] | None:
    spot = index.get(name)
    if not (isinstance(spot, list) and len(spot) == 3 and all(type(n) is int for n in spot)):
        return None
    at, start, end = spot
    return (at, start, end) if 0 <= at < start < end <= size else None


def _store(file: Path, index: dict[str, list[int]]) -> None:
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        partial = file.with_name(f"{file.name}.{os.getpid()}.partial")
        partial.write_text(json.dumps(index, separators=(",", ":")), encoding="utf-8")
        partial.replace(file)
    except OSError:
        pass  # no writable cache: the index is used from memory this time


class Definitions(Mapping[str, Any]):
    """Name -> definition of one `_definitions.json`, each parsed when first asked for."""

    def __init__(self, path: Path) -> None:
        info = path.stat()
        # Bytes decoded as they are: no newline translation, so offsets are the file's.
        self._text = path.read_bytes().decode("utf-8")
        self._file = _cache_file(path, info.st_size, info.st_mtime_ns)
        self._fresh = False  # True once this process built the index itself
        self._index = self._load_index()
        self._parsed: dict[str, Any] = {}

    def _load_index(self) -> dict[str, Any]:
        try:
            index = json.loads(self._file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            index = None
        if _valid(index, self._text):
            return index  # type: ignore[no-any-return]  # a dict: checked by _valid
        return self._rebuild()

    def _rebuild(self) -> dict[str, list[int]]:
        self._fresh = True
        index = build_index(self._text)
        _store(self._file, index)
        return index

    def __getitem__(self, name: str) -> Any:
        if name in self._parsed:
            return self._parsed[name]
        if name not in self._index:
            raise KeyError(name)
        spot = _spot(self._index, name, len(self._text))
        if spot is None or not self._text.startswith(json.dumps(name), spot[0]):
            if self._fresh:  # pragma: no cover - build_index's own offsets
                raise DefinitionsError(f"the index does not locate {name!r}")
            self._index = self._rebuild()  # a stale index (the file changed in place)
            return self[name]
        value = json.loads(self._text[spot[1] : spot[2]])
        self._parsed[name] = value
        return value

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)
