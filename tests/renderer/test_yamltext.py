"""Embedded YAML strings are read once, as KubeRay's sigs.k8s.io/yaml (go-yaml v2) reads them.

`runtimeEnvYAML` used to be checked with ruamel (YAML 1.2) and decoded with PyYAML (1.1);
both now use `yamltext`. On valid input (a mapping both libraries read) the verdict of the
check and the decoded value are those of before.
"""

from __future__ import annotations

import io
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from renderer import yamltext
from renderer.goformat import go_json
from renderer.kinds import pipeline
from renderer.kinds import rayservice as service_kind
from renderer.options import RenderOptions
from tests.paths import GOLDEN


def _ruamel(text: str) -> Any:
    loader = YAML(typ="safe", pure=True)
    loader.allow_duplicate_keys = True
    return loader.load(io.StringIO(text))


# NEL and the Unicode line separators are left out: PyYAML's dumper writes them as breaks.
_CHARS = st.characters(
    codec="utf-8", exclude_categories=["Cs", "Cc"], exclude_characters="\x85\u2028\u2029"
)
keys = st.text(_CHARS, max_size=8)
leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53), 2**53),
    st.text(_CHARS, max_size=12),
    st.floats(allow_nan=False, allow_infinity=False),
)
values = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(keys, values, max_size=4))
def test_a_mapping_written_as_yaml_reads_back_the_same_as_before(data: dict[str, Any]) -> None:
    text = yaml.safe_dump(data, allow_unicode=True)
    loaded = yamltext.load(text)
    assert isinstance(loaded, dict)
    assert isinstance(_ruamel(text), dict)  # the old check accepted it as well
    assert go_json(loaded) == go_json(data)  # and the old decoder (this loader) read it back


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("flag: yes\nn: 0x10\nr: 1.0\n", {"flag": True, "n": 16, "r": 1.0}),
        ("a: 1\na: 2\n", {"a": 2}),  # go-yaml v2's non-strict decoder: the last one wins
        # Known gap, unchanged by the move: go-yaml v2 reads `1e3` as a float, PyYAML's
        # YAML 1.1 float needs a dot, so this stays a string (as it did before).
        ("x: 1e3\n", {"x": "1e3"}),
        ("when: 2001-12-14t21:59:43.10-05:00\nday: 2024-01-01\n", None),
        ("pip:\n  - requests\nenv_vars: {A: b}\n", {"pip": ["requests"], "env_vars": {"A": "b"}}),
    ],
)
def test_yaml_1_1_scalars_duplicate_keys_and_timestamps(text: str, value: Any) -> None:
    loaded = yamltext.load(text)
    if value is None:  # timestamps stay the text the user wrote
        assert loaded == {"when": "2001-12-14t21:59:43.10-05:00", "day": "2024-01-01"}
    else:
        assert loaded == value


def test_the_golden_runtime_envs_decode_as_before() -> None:
    texts = []
    for path in sorted(GOLDEN.glob("rayjob-*/input.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and (doc.get("spec") or {}).get("runtimeEnvYAML"):
                texts.append(doc["spec"]["runtimeEnvYAML"])
    assert texts
    for text in texts:
        assert yamltext.load(text) == _ruamel(text)


def test_errors_give_a_reason_and_a_line() -> None:
    with pytest.raises(yamltext.YAMLError) as caught:
        yamltext.load("a: [1\nb: 2")
    assert yamltext.reason(caught.value) == "expected ',' or ']', but got ':'"
    assert yamltext.line(caught.value) == 2
    assert yamltext.reason(yaml.YAMLError("plain\nsecond")) == "plain"
    assert yamltext.line(yaml.YAMLError("plain")) is None


def test_serve_config_json_keeps_timestamps_as_written() -> None:
    path = GOLDEN / "rayservice-basic" / "input.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["spec"]["serveConfigV2"] = "applications:\n- name: a\n  at: 2001-12-14 21:59:43.10 -5\n"
    problems, objects = pipeline.run(service_kind.KIND, doc, RenderOptions())
    assert [p for p in problems if p.severity == "error"] == []
    config = next(o for o in objects if o["metadata"]["name"].endswith("-serve-config"))
    assert config["data"]["serveConfigV2.json"] == (
        '{"applications":[{"at":"2001-12-14 21:59:43.10 -5","name":"a"}]}'
    )


def test_an_alias_bomb_inside_a_string_is_refused_and_anchors_are_fine() -> None:
    levels = ['a: &a ["x","x","x","x","x","x","x","x","x","x"]']
    levels += [
        f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10) + "]"
        for i in range(6)
    ]
    with pytest.raises(yamltext.AliasBombError, match="more than 1000000 values"):
        yamltext.load("\n".join(levels))
    assert yamltext.load("a: &x {b: 1}\nc: *x\n") == {"a": {"b": 1}, "c": {"b": 1}}
