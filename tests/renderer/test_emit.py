"""The emitter writes canonical YAML that every reader reads back as the same data."""

from __future__ import annotations

import io
import math
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from renderer import emit

_RUAMEL = YAML(typ="safe", pure=True)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
    st.sampled_from(
        [
            "yes",
            "No",
            "on",
            "OFF",
            "~",
            "null",
            "1e3",
            "0x1f",
            "0o17",
            "1:20",
            "2024-01-01",
            "5Gi",
            "500m",
            "-",
            "- a",
            "a: b",
            "#x",
            "x #y",
            "'q'",
            '"d"',
            "@a",
            "`b",
            "|",
            ">",
            "*a",
            "&a",
            "!t",
            "%p",
            "{a}",
            "[b]",
            "a,b",
            "\t",
            " lead",
            "trail ",
            "a\nb",
            "a\nb\n",
            "\na",
            "a\n\n",
            "\x85",
            "\u2028",
            "\ufeff",
            ".inf",
            "-.5",
            "+1",
            "=",
            "<<",
            "ray start  --x ",
            "$VAR",
        ]
    ),
)
keys = st.one_of(st.text(max_size=20), st.sampled_from(["yes", "n", "1", "a b", "apiVersion"]))
values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=4),
    max_leaves=25,
)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(keys, values, max_size=6))
def test_dump_round_trips_through_pyyaml_and_ruamel(document: dict[str, Any]) -> None:
    text = emit.dump(document)
    assert yaml.safe_load(text) == document
    assert _RUAMEL.load(text) == document


def test_keys_come_well_known_first_then_sorted() -> None:
    text = emit.dump(
        {
            "spec": {"b": 1, "a": 2},
            "zeta": 1,
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": {"namespace": "ns", "labels": {}, "name": "x"},
        }
    )
    assert text.splitlines() == [
        "apiVersion: v1",
        "kind: Pod",
        "metadata:",
        "  name: x",
        "  namespace: ns",
        "  labels: {}",
        "spec:",
        "  a: 2",
        "  b: 1",
        "zeta: 1",
    ]


def test_strings_that_other_readers_would_retype_are_quoted() -> None:
    text = emit.dump({"a": "yes", "b": "8080", "c": "5Gi", "d": "true"})
    assert text == 'a: "yes"\nb: "8080"\nc: 5Gi\nd: "true"\n'


def test_multi_line_strings_use_literal_blocks_when_clean() -> None:
    assert emit.dump({"s": "a\nb\n"}) == "s: |\n  a\n  b\n"
    assert emit.dump({"s": "a\nb"}) == "s: |-\n  a\n  b\n"
    assert emit.dump({"s": "a \nb"}) == 's: "a \\nb"\n'


def test_documents_are_separated_and_end_with_one_newline() -> None:
    assert emit.dump_all([{"a": 1}, {"b": [1, {"c": 2}]}]) == "a: 1\n---\nb:\n- 1\n- c: 2\n"


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


def test_a_line_with_a_control_character_is_not_a_literal_block() -> None:
    text = emit.dump({"k": "line one\nbell \x07 here\n"})
    assert "|" not in text
    assert yaml.safe_load(text) == {"k": "line one\nbell \x07 here\n"}
