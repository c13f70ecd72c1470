"""Problem formatting (STYLE §3): values, paths, diagnostics and the summary line."""

from __future__ import annotations

from renderer.errors import Diagnostic, Origin, Problem, format_path, show, summary


def test_show_is_json_like_and_shortened() -> None:
    assert show("two") == '"two"'
    assert show({"b": 1, "a": [True, None]}) == '{"a": [true, null], "b": 1}'
    assert show("x" * 100) == '"' + "x" * 56 + "..."


def test_show_falls_back_to_repr_for_what_json_cannot_write() -> None:
    # YAML allows mappings whose keys do not sort together (1 and "b"), and recursive
    # data through anchors; a message must still show them.
    assert show({1: "a", "b": 2}) == "{1: 'a', 'b': 2}"
    loop: list[object] = []
    loop.append(loop)
    assert show(loop) == "[[...]]"


def test_paths_bracket_keys_that_are_not_identifiers() -> None:
    # STYLE §3: locations are JSON paths of the form `$.a.b[0].c`.
    assert format_path(("spec", "workerGroupSpecs", 0, "replicas")) == (
        "$.spec.workerGroupSpecs[0].replicas"
    )
    assert format_path(("metadata", "labels", "ray.io/cluster")) == (
        '$.metadata.labels["ray.io/cluster"]'
    )
    assert format_path(("a", "")) == '$.a[""]'


def test_a_diagnostic_is_one_line_plus_its_context() -> None:
    origin = Origin("f.yaml", 2, lambda _path: (14, 11), context="RayCluster ml/train")
    problem = Problem(("spec", "replicas"), 'expected an integer, got "two"')
    assert Diagnostic(origin, problem).format() == (
        'f.yaml:14:11: error: $.spec.replicas: expected an integer, got "two"\n'
        "  in document 2 (RayCluster ml/train)"
    )


def test_summary_counts_errors_warnings_and_files() -> None:
    a, b = Origin("a.yaml", 1), Origin("b.yaml", 1)
    error, warning = Problem((), "e"), Problem((), "w", "warning")
    assert summary([Diagnostic(a, error), Diagnostic(b, error)]) == (
        "2 errors in 2 files; nothing written"
    )
    assert summary([Diagnostic(a, error), Diagnostic(a, warning)]) == (
        "1 error and 1 warning in 1 file; nothing written"
    )
    assert summary([Diagnostic(a, warning), Diagnostic(b, warning)]) == "2 warnings in 2 files"
