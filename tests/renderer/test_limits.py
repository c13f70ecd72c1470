"""Bounded work for absurd input (issue 16): Pods per cluster, objects per run, input size.

Each limit is refused before anything is built, with the field and the flag named; the
exact stderr of each refusal is pinned in tests/invalid/ (pods-*, objects-*, input-*,
alias-bomb). These tests pin the boundaries and the counting.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from renderer import compile as compiler
from renderer import sources, yamltext
from renderer.cli import main
from renderer.errors import ManifestError, Origin
from renderer.options import DEFAULT_MAX_OBJECTS, DEFAULT_MAX_PODS, RenderOptions
from renderer.rules import limits
from renderer.rules.document import Unchecked
from renderer.rules.raycluster import check_raycluster
from tests.paths import GOLDEN, INVALID

OPTIONS = RenderOptions()


def group(**fields: Any) -> dict[str, Any]:
    return {
        "groupName": "g",
        "template": {"spec": {"containers": [{"name": "w", "image": "rayproject/ray:2.52.0"}]}},
        **fields,
    }


def cluster(*groups: dict[str, Any], **spec: Any) -> dict[str, Any]:
    head = {"template": {"spec": {"containers": [{"name": "h", "image": "rayproject/ray:2.52.0"}]}}}
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "c"},
        "spec": {"headGroupSpec": head, "workerGroupSpecs": list(groups), **spec},
    }


def size_problems(doc: dict[str, Any], options: RenderOptions = OPTIONS) -> list[str]:
    return [
        ".".join(map(str, p.path))
        for p in check_raycluster(doc, options)
        if "--max-pods" in p.message
    ]


def test_the_defaults_are_documented_values() -> None:
    assert (DEFAULT_MAX_PODS, DEFAULT_MAX_OBJECTS) == (10_000, 100_000)
    assert sources.DEFAULT_MAX_INPUT_BYTES == 64 * 1024 * 1024


def test_exactly_the_default_is_allowed_and_one_more_is_not() -> None:
    at_limit = cluster(group(replicas=6000), group(groupName="h", replicas=4000))
    assert size_problems(at_limit) == []
    over = cluster(group(replicas=6000), group(groupName="h", replicas=4001))
    assert size_problems(over) == ["spec.workerGroupSpecs.1.replicas"]


def test_the_count_is_kuberays_desired_pods() -> None:
    # replicas clamped to maxReplicas; minReplicas when replicas is unset; numOfHosts
    # multiplies; a suspended group or cluster has none.
    assert limits.group_pods(group(replicas=50, maxReplicas=20, numOfHosts=4)) == (20, 4, 80)
    assert limits.group_pods(group(minReplicas=7)) == (7, 1, 7)
    assert limits.group_pods(group(replicas=9, suspend=True)) == (9, 1, 0)
    assert limits.cluster_pods(cluster(group(replicas=3), group(minReplicas=2))["spec"]) == 5
    assert limits.cluster_pods(cluster(group(replicas=3), suspend=True)["spec"]) == 0
    assert limits.cluster_pods(cluster(group(replicas=3), Unchecked())["spec"]) == 3
    assert size_problems(cluster(group(replicas=10**6), suspend=True)) == []
    assert size_problems(cluster(group(replicas=10**6, suspend=True))) == []


def test_the_problem_sits_at_the_field_that_decides() -> None:
    assert size_problems(cluster(group(minReplicas=10_001))) == [
        "spec.workerGroupSpecs.0.minReplicas"
    ]
    assert size_problems(cluster(group(replicas=2, numOfHosts=10_001))) == [
        "spec.workerGroupSpecs.0.numOfHosts"
    ]
    assert size_problems(cluster(group(replicas=5000, numOfHosts=3))) == [
        "spec.workerGroupSpecs.0.replicas"
    ]


def test_the_flag_moves_the_limit() -> None:
    options = RenderOptions(max_pods=10)
    assert size_problems(cluster(group(replicas=10)), options) == []
    assert size_problems(cluster(group(replicas=11)), options) == [
        "spec.workerGroupSpecs.0.replicas"
    ]
    text = (INVALID / "pods-max-pods-flag.yaml").read_text()
    result = CliRunner().invoke(main, ["render", "-", "--max-pods", "11"], input=text)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.count("kind: Pod\n") == 12  # the head and eleven workers


def test_objects_per_run_are_counted_before_building() -> None:
    documents, problems = sources.read_documents([str(INVALID / "objects-over-limit.yaml")])
    assert problems == []
    # Each cluster: head + 3 workers + at least one more object; 10 in all.
    result = compiler.render(documents, RenderOptions(max_objects=10))
    assert len(result.objects) >= 10  # the estimate is a lower bound
    with pytest.raises(ManifestError) as caught:
        compiler.render(documents, RenderOptions(max_objects=9))
    [diagnostic] = caught.value.diagnostics
    assert diagnostic.origin.index == 2
    assert "at least 10 objects, more than the limit of 9 per run" in diagnostic.problem.message


def test_a_multi_gigabyte_file_is_refused_unread(tmp_path: Path) -> None:
    huge = tmp_path / "huge.yaml"
    with huge.open("wb") as handle:
        handle.truncate(3 * 1024**3)  # sparse: takes no disk space
    documents, problems = sources.read_documents([str(huge)])
    assert documents == []
    [problem] = problems
    assert problem.problem.message.startswith(f"the file has {3 * 1024**3} bytes, more than")
    assert huge.stat().st_size == 3 * 1024**3


def test_stdin_is_read_only_up_to_the_limit() -> None:
    stream = io.StringIO("a: b\n" * 100)
    documents, problems = sources.read_documents(["-"], stream, max_bytes=50)
    assert documents == []
    assert [p.origin.file for p in problems] == ["<stdin>"]
    assert "more than the limit of 50 bytes" in problems[0].problem.message
    assert len(stream.read()) == 500 - 51  # the rest was never read
    documents, problems = sources.read_documents(["-"], io.StringIO("a: b\n"), max_bytes=5)
    assert (len(documents), problems) == (1, [])


def test_an_alias_bomb_and_a_self_reference_are_refused() -> None:
    bomb = (INVALID / "alias-bomb.yaml").read_text()
    documents, problems = sources.parse_text(bomb, "bomb.yaml")
    assert documents == []
    assert "expand this document to more than 1000000 values" in problems[0].problem.message
    documents, problems = sources.parse_text("a: &x [1, *x]\n", "loop.yaml")
    assert documents == []
    assert len(problems) == 1


def test_ordinary_anchors_are_fine() -> None:
    text = "x: &t {a: 1, b: [1, 2]}\ny: *t\nz: [*t, *t]\n---\nplain: 1\n"
    documents, problems = sources.parse_text(text, "ok.yaml")
    assert problems == []
    assert documents[0].data["z"][1] == {"a": 1, "b": [1, 2]}
    assert yamltext.expanded_size(documents[0].data, 10) == 11  # capped at limit + 1
    assert yamltext.expanded_size(documents[0].data, 100) == 22


def test_one_run_reports_every_problem_in_a_fixed_order() -> None:
    args = ["render", str(INVALID / "every-problem.yaml")]
    first = CliRunner().invoke(main, args)
    second = CliRunner().invoke(main, args)
    assert first.exit_code == 2
    assert first.stderr == second.stderr
    assert first.stderr.count("error:") == 8


def test_a_suspended_rayservice_counts_no_pods() -> None:
    documents, _ = sources.read_documents([str(GOLDEN / "rayservice-basic" / "input.yaml")])
    service = documents[0].data
    assert compiler.check_document(service, OPTIONS)[1].estimate() > 1  # type: ignore[union-attr]
    service["spec"]["suspend"] = True
    ready = compiler.check_document(service, OPTIONS)[1]
    assert ready is not None
    assert ready.estimate() == 1


def test_a_bad_name_and_a_bad_group_are_both_reported_with_the_rules() -> None:
    doc = cluster(group(replicas="two"), group(groupName="g2", minReplicas=3, maxReplicas=1))
    doc["metadata"]["name"] = "Bad_Name"
    problems, ready, _ = compiler.check_document(doc, OPTIONS)
    assert ready is None
    paths = [".".join(map(str, p.path)) for p in problems]
    assert "metadata.name" in paths
    assert "spec.workerGroupSpecs.0.replicas" in paths
    assert "spec.workerGroupSpecs.1.minReplicas" in paths


class _Sized:
    def __init__(self, size: int) -> None:
        self.size = size

    def estimate(self) -> int:
        return self.size

    def build(self) -> tuple[list[Any], list[Any]]:
        raise AssertionError("not built by this test")


def test_exactly_the_default_object_count_is_allowed() -> None:
    origin = Origin("f.yaml", 1)
    at_limit = [compiler._Entry(origin, [], _Sized(50_000), True) for _ in range(2)]
    assert compiler._limit_objects(at_limit, OPTIONS)
    assert at_limit[1].problems == []
    over = [
        compiler._Entry(origin, [], _Sized(50_000), True),
        compiler._Entry(origin, [], _Sized(50_001), True),
    ]
    assert not compiler._limit_objects(over, OPTIONS)
    assert "at least 100001 objects" in over[1].problems[0].message
