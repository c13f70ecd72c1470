"""Malformed input never produces a traceback: only ManifestError with located problems."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from renderer import compile as compiler
from renderer import emit, sources
from renderer.errors import ManifestError
from renderer.options import RenderOptions
from tests.paths import GOLDEN

SAMPLE = (GOLDEN / "raycluster-sample" / "input.yaml").read_text()
JOB = (GOLDEN / "rayjob-k8sjobmode" / "input.yaml").read_text()
SERVICE = (GOLDEN / "rayservice-basic" / "input.yaml").read_text()
OPTIONS = RenderOptions()

garbage = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=True),
        st.text(max_size=30),
    ),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=12,
)


def _render_text(text: str) -> None:
    documents, problems = sources.parse_text(text, "fuzz.yaml")
    for diagnostic in problems:
        assert diagnostic.format()  # formats without raising
    try:
        compiler.render(documents, OPTIONS)
    except ManifestError as exc:
        failure: ManifestError | None = exc
    else:
        failure = None
    if failure is not None:
        assert failure.diagnostics
        for diagnostic in failure.diagnostics:
            assert diagnostic.format().count("\n") == 1


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            found.extend(_paths(child, (*prefix, key)))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found.extend(_paths(child, (*prefix, index)))
    return found


def _mutate(doc: Any, path: tuple[Any, ...], replacement: Any, delete: bool) -> Any:
    doc = copy.deepcopy(doc)
    if not path:
        return replacement
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = replacement
    return doc


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_damaged_manifests_are_reported_not_raised(data: st.DataObject) -> None:
    text = data.draw(st.sampled_from([SAMPLE, JOB, SERVICE]))
    documents, _ = sources.parse_text(text, "seed.yaml")
    doc = documents[0].data
    path = data.draw(st.sampled_from(_paths(doc)))
    delete = bool(path) and data.draw(st.booleans())
    damaged = _mutate(doc, path, data.draw(garbage), delete)
    _render_text(emit.dump(damaged))


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from(list(":-[]{}'\"#&*!|>%@`,? \n\tab1")), max_size=80))
def test_arbitrary_text_is_reported_not_raised(text: str) -> None:
    _render_text(text)


def test_huge_values_are_reported() -> None:
    damaged = SAMPLE.replace("replicas: 1\n", f"replicas: {10**30}\n", 1)
    _render_text(damaged)
    deep = "a:\n" + "".join("  " * i + "- \n" for i in range(1, 200))
    _render_text(deep)
    _render_text("x: " + "y" * 1_000_000)
