"""The emitter's rarer forms: special floats, text a literal block cannot hold, bare values.

Each output is read back by PyYAML (YAML 1.1, as kubectl-era tools) and ruamel (YAML 1.2)
and must give the same data: the emitter's documented contract.
"""

from __future__ import annotations

import io
import math
from typing import Any

import pytest
import yaml
from ruamel.yaml import YAML

from renderer import emit


def read_both(text: str) -> tuple[Any, Any]:
    return yaml.safe_load(text), YAML(typ="safe", pure=True).load(io.StringIO(text))


def test_special_floats_use_yaml_spellings() -> None:
    text = emit.dump({"a": math.nan, "b": math.inf, "c": -math.inf, "d": 1e20})
    assert text == "a: .nan\nb: .inf\nc: -.inf\nd: 1.0e+20\n"
    for data in read_both(text):
        assert math.isnan(data["a"])
        assert data["b"] == math.inf and data["c"] == -math.inf
        assert data["d"] == 1e20


@pytest.mark.parametrize("text", ["x\n\n", "\n", "a\n\n\nb\n\n"])
def test_text_ending_in_blank_lines_is_double_quoted(text: str) -> None:
    # A `|` block keeps one final newline and `|-` none; more needs `|+`, which the
    # emitter avoids: such text is written double-quoted.
    out = emit.dump({"k": text})
    assert out.startswith('k: "')
    assert read_both(out) == ({"k": text}, {"k": text})


@pytest.mark.parametrize(
    ("text", "block"),
    [("line1\nline2\n", "|\n  line1\n  line2\n"), ("a\n\nb", "|-\n  a\n\n  b\n")],
)
def test_clean_multi_line_text_uses_a_literal_block(text: str, block: str) -> None:
    out = emit.dump({"k": text})
    assert out == "k: " + block
    assert read_both(out) == ({"k": text}, {"k": text})


def test_a_top_level_sequence_and_nested_sequences() -> None:
    value = [1, [2, 3], [], {}, {"k": "v"}]
    out = emit.dump(value)
    assert out == "- 1\n-\n  - 2\n  - 3\n- []\n- {}\n- k: v\n"
    assert read_both(out) == (value, value)


@pytest.mark.parametrize(("value", "text"), [("text", "text\n"), ({}, "{}\n"), (None, "null\n")])
def test_a_bare_value_is_one_line(value: object, text: str) -> None:
    assert emit.dump(value) == text


def test_a_multi_line_key_is_double_quoted() -> None:
    out = emit.dump({"multi\nline": 1})
    assert out == '"multi\\nline": 1\n'
    assert read_both(out) == ({"multi\nline": 1}, {"multi\nline": 1})
