"""Reading input: every failure is one compiler-style diagnostic (STYLE §3), never a crash."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from renderer import sources
from renderer.errors import Diagnostic


def messages(diagnostics: list[Diagnostic]) -> list[str]:
    return [d.format() for d in diagnostics]


def test_stdin_is_named_stdin() -> None:
    # STYLE §3: "stdin is shown as `<stdin>`".
    documents, problems = sources.read_documents(["-"], io.StringIO("a: [1\n"))
    assert documents == []
    (line,) = messages(problems)
    assert line.startswith("<stdin>:2:1: error: $: invalid YAML: ")


def test_stdin_documents_carry_their_index() -> None:
    documents, problems = sources.read_documents(["-"], io.StringIO("a: 1\n---\nb: 2\n"))
    assert problems == []
    assert [(d.origin.file, d.origin.index, d.data) for d in documents] == [
        ("<stdin>", 1, {"a": 1}),
        ("<stdin>", 2, {"b": 2}),
    ]


def test_no_stdin_stream_reads_as_empty() -> None:
    assert sources.read_documents(["-"], None) == ([], [])


def test_a_forbidden_character_is_one_line_with_its_position() -> None:
    # A reader error has no mark, only a byte offset; the message stays on one line (the
    # context line is the formatter's) and the column counts characters, not bytes.
    documents, problems = sources.parse_text("name: ok\nnote: é\x07\n", "f.yaml")
    assert documents == []
    assert messages(problems) == [
        "f.yaml:2:8: error: $: invalid YAML: unacceptable character #x0007: "
        "control characters are not allowed\n  in document 1"
    ]


def test_duplicate_keys_are_an_error_with_both_lines() -> None:
    _, problems = sources.parse_text("a: 1\nb: 2\na: 3\n", "f.yaml")
    assert messages(problems) == [
        "f.yaml:3:1: error: $: invalid YAML: found duplicate key 'a' (first at line 1)"
        "\n  in document 1"
    ]


def test_an_unhashable_key_is_reported_by_the_yaml_loader() -> None:
    # A sequence used as a key cannot be compared for duplicates; PyYAML's own check says so.
    _, problems = sources.parse_text("? [a]\n: 1\n? [a]\n: 2\n", "f.yaml")
    assert messages(problems) == [
        "f.yaml:1:3: error: $: invalid YAML: found unhashable key\n  in document 1"
    ]


def test_timestamps_stay_strings() -> None:
    (document,), _ = sources.parse_text("when: 2024-01-01\n", "f.yaml")
    assert document.data == {"when": "2024-01-01"}


def test_positions_point_at_values_keys_and_list_items() -> None:
    text = "spec:\n  items:\n  - x\n  - {a: 1}\n  name: n\n"
    (document,), _ = sources.parse_text(text, "f.yaml")
    origin = document.origin
    assert origin.position(("spec", "name")) == (5, 9)  # a scalar: its value
    assert origin.position(("spec", "items")) == (2, 3)  # a collection: its key
    assert origin.position(("spec", "items", 1, "a")) == (4, 9)
    # A path that goes further than the document stops at the nearest ancestor.
    assert origin.position(("spec", "items", 9)) == (2, 3)
    assert origin.position(("spec", "missing", "deeper")) == (1, 1)


def test_a_file_that_is_not_utf8_is_reported_and_the_others_still_read(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_bytes(b"name: \xff\xfe\n")
    (tmp_path / "b.yaml").write_text("name: fine\n")
    documents, problems = sources.read_documents([str(tmp_path)])
    assert [d.data for d in documents] == [{"name": "fine"}]
    (line,) = messages(problems)
    assert line.startswith(f"{tmp_path / 'a.yaml'}:1:1: error: $: cannot read the file: ")
    assert "'utf-8' codec can't decode byte 0xff" in line


def test_an_unreadable_file_in_a_directory_is_reported(tmp_path: Path) -> None:
    dangling = tmp_path / "gone.yaml"
    try:
        dangling.symlink_to(tmp_path / "nowhere.yaml")
    except OSError:  # Windows without the symlink privilege
        pytest.skip("symlinks are not available")
    _, problems = sources.read_documents([str(tmp_path)])
    (line,) = messages(problems)
    assert line.startswith(f"{dangling}:1:1: error: $: cannot read the file: ")


def test_hidden_entries_and_output_directories_are_not_input(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "x.yaml").write_text("hidden: 1\n")
    (tmp_path / ".hidden.yaml").write_text("hidden: 2\n")
    rendered = tmp_path / "rendered"
    rendered.mkdir()
    (rendered / sources.OUTPUT_MARKER).write_text("")
    (rendered / "pod.yaml").write_text("rendered: 3\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "in.yml").write_text("seen: 4\n")
    documents, problems = sources.read_documents([str(tmp_path)])
    assert problems == []
    assert [d.data for d in documents] == [{"seen": 4}]


def test_an_output_directory_named_directly_is_not_read_either(tmp_path: Path) -> None:
    (tmp_path / sources.OUTPUT_MARKER).write_text("")
    (tmp_path / "pod.yaml").write_text("rendered: 1\n")
    assert sources.read_documents([str(tmp_path)]) == ([], [])


def test_a_named_file_is_read_whatever_its_suffix(tmp_path: Path) -> None:
    path = tmp_path / "manifest.txt"
    path.write_text("a: 1\n")
    documents, _ = sources.read_documents([os.fspath(path)])
    assert [d.data for d in documents] == [{"a": 1}]
