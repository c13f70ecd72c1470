"""Reading user input: files, directories and stdin, split into located documents.

Loading uses libyaml through PyYAML (a C parser: rendering thousands of manifests
must cost about what loading them costs). Semantics are YAML 1.1, the way kubectl
and Argo CD read manifests, except that timestamps stay strings. Line and column
numbers are found only when a problem needs them, by composing the file again.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final, TextIO

import yaml

from renderer import yamltext
from renderer.errors import Diagnostic, JsonPath, Origin, Problem
from renderer.model.document import Document

STDIN: Final = "-"
STDIN_NAME: Final = "<stdin>"
SUFFIXES: Final = (".yaml", ".yml")
# A directory holding this file is an output of `kuberay render --output-dir`: never input.
OUTPUT_MARKER: Final = ".kuberay-render"
# Bounds on input (issue 16): a file larger than this is refused before it is read, and a
# document whose YAML aliases expand it beyond yamltext.yamltext.MAX_EXPANDED_VALUES (an alias bomb)
# after loading, which costs time and memory in proportion to the text, not to the expansion.
DEFAULT_MAX_INPUT_BYTES: Final = 64 * 1024 * 1024
_MAX_VALUES: Final = yamltext.MAX_EXPANDED_VALUES


class _DuplicateKeyError(yaml.MarkedYAMLError):
    pass


class _Loader(yaml.CSafeLoader):
    """libyaml's safe loader that rejects duplicate keys and keeps timestamps as strings."""

    yaml_implicit_resolvers = {  # noqa: RUF012 - PyYAML reads this class attribute
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.CSafeLoader.yaml_implicit_resolvers.items()
    }

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: let the base class report it
                break
            if duplicate:
                raise _DuplicateKeyError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found duplicate key {key!r} (first at line {seen[key].start_mark.line + 1})",
                    key_node.start_mark,
                )
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


def _position(node: yaml.Node, path: JsonPath) -> tuple[int, int]:
    """The 1-based line and column of `path` below `node` (or of its nearest ancestor)."""
    best = node.start_mark
    for step in path:
        found: yaml.Node | None = None
        if isinstance(node, yaml.MappingNode) and isinstance(step, str):
            for key_node, value_node in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.value == step:
                    scalar = isinstance(value_node, yaml.ScalarNode)
                    best = value_node.start_mark if scalar else key_node.start_mark
                    found = value_node
                    break
        elif (
            isinstance(node, yaml.SequenceNode)
            and isinstance(step, int)
            and 0 <= step < len(node.value)
        ):
            found = node.value[step]
            best = found.start_mark
        if found is None:
            break
        node = found
    return (best.line + 1, best.column + 1)


class _Locator:
    """Finds positions in one document of a file, composing the file only once, on demand."""

    def __init__(self, text: str, index: int) -> None:
        self._text = text
        self._index = index

    @functools.cached_property
    def _root(self) -> yaml.Node:
        # The text loaded without error, so it composes into one node per document.
        node: yaml.Node = list(yaml.compose_all(self._text, Loader=yaml.CSafeLoader))[self._index]
        return node

    def __call__(self, path: JsonPath) -> tuple[int, int]:
        return _position(self._root, path)


def parse_text(text: str, name: str) -> tuple[list[Document], list[Diagnostic]]:
    """Split one file's text into documents; a YAML error is one diagnostic for the file."""
    try:
        datas = list(yaml.load_all(text, Loader=_Loader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        message = f"invalid YAML: {exc.problem or exc.context}"
        origin = Origin(name, 1, lambda _path: (line, col))
        return [], [Diagnostic(origin, Problem((), message))]
    except yaml.reader.ReaderError as exc:
        # A character YAML forbids: no mark, only a byte offset into the UTF-8 text.
        before = text.encode("utf-8", "surrogatepass")[: exc.position].decode("utf-8", "ignore")
        line, col = before.count("\n") + 1, len(before) - before.rfind("\n")
        message = f"invalid YAML: {str(exc).splitlines()[0]}"
        origin = Origin(name, 1, lambda _path: (line, col))
        return [], [Diagnostic(origin, Problem((), message))]
    documents = [
        Document(data, Origin(name, index + 1, _Locator(text, index)))
        for index, data in enumerate(datas)
    ]
    if "&" not in text:  # no anchor, no alias: nothing can expand
        return documents, []
    bombs = [
        Diagnostic(
            doc.origin,
            Problem(
                (),
                f"YAML aliases expand this document to more than {_MAX_VALUES} values "
                "(an alias bomb, or an alias inside its own anchor); write the repeated parts "
                "out or use fewer aliases",
            ),
        )
        for doc in documents
        if yamltext.expanded_size(doc.data, yamltext.MAX_EXPANDED_VALUES)
        > yamltext.MAX_EXPANDED_VALUES
    ]
    return ([], bombs) if bombs else (documents, [])


def _expand(path: Path) -> Iterator[Path]:
    if not path.is_dir():
        yield path
        return
    if (path / OUTPUT_MARKER).exists():
        return
    for child in sorted(path.iterdir()):
        if child.name.startswith("."):
            continue
        if child.is_dir():
            yield from _expand(child)
        elif child.suffix in SUFFIXES:
            yield child


def _too_large(what: str, max_bytes: int) -> Problem:
    return Problem(
        (),
        f"{what}, more than the limit of {max_bytes} bytes per input; split it, or raise the "
        "limit with --max-input-bytes N",
    )


def read_documents(
    paths: Sequence[str],
    stdin: TextIO | None = None,
    *,
    max_bytes: int = DEFAULT_MAX_INPUT_BYTES,
) -> tuple[list[Document], list[Diagnostic]]:
    """Read every input path (file, directory, or `-`); return documents and read problems.

    A file over `max_bytes` is refused unread; stdin is read up to `max_bytes` + 1.
    """
    documents: list[Document] = []
    diagnostics: list[Diagnostic] = []
    for raw in paths:
        if raw == STDIN:
            text = stdin.read(max_bytes + 1) if stdin is not None else ""
            if len(text.encode("utf-8", "surrogatepass")) > max_bytes:
                problem = _too_large("the input holds more bytes", max_bytes)
                diagnostics.append(Diagnostic(Origin(STDIN_NAME, 1), problem))
                continue
            docs, problems = parse_text(text, STDIN_NAME)
            documents.extend(docs)
            diagnostics.extend(problems)
            continue
        root = Path(raw)
        if not root.exists():
            diagnostics.append(Diagnostic(Origin(raw, 1), Problem((), "no such file or directory")))
            continue
        for file in _expand(root):
            try:
                size = file.stat().st_size
                if size > max_bytes:
                    problem = _too_large(f"the file has {size} bytes", max_bytes)
                    diagnostics.append(Diagnostic(Origin(str(file), 1), problem))
                    continue
                text = file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                diagnostics.append(
                    Diagnostic(Origin(str(file), 1), Problem((), f"cannot read the file: {exc}"))
                )
                continue
            docs, problems = parse_text(text, str(file))
            documents.extend(docs)
            diagnostics.extend(problems)
    return documents, diagnostics
