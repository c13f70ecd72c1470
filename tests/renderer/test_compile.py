"""The compiler's dispatch: kinds it refuses, and objects KubeRay would not create."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from renderer import compile as compiler
from renderer.errors import ManifestError, Origin
from renderer.model.document import Document
from renderer.options import RenderOptions
from tests.paths import GOLDEN, SAMPLES
from tests.validation import validate_object

OPTIONS = RenderOptions()
Manifest = dict[str, Any]


def sample_cluster() -> Manifest:
    data: Manifest = yaml.safe_load((GOLDEN / "raycluster-sample" / "input.yaml").read_text())
    return data


def test_a_cluster_managed_by_multikueue_renders_nothing_with_a_warning() -> None:
    # raycluster.md §0.3 step 1: "If spec.managedBy is set and is not
    # ray.io/kuberay-operator: do nothing at all (no objects, no status)".
    doc = sample_cluster()
    doc["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    result = compiler.render([Document(doc, Origin("c.yaml", 1))], OPTIONS)
    assert result.objects == ()
    (warning,) = result.warnings
    assert warning.problem.severity == "warning"
    assert warning.problem.path == ("spec", "managedBy")


def test_a_cluster_managed_by_kuberay_renders() -> None:
    doc = sample_cluster()
    doc["spec"]["managedBy"] = "ray.io/kuberay-operator"
    result = compiler.render([Document(doc, Origin("c.yaml", 1))], OPTIONS)
    assert [o["kind"] for o in result.objects] == ["Service", "Pod", "Pod"]
    assert result.warnings == ()


def test_raycronjob_is_refused_with_what_to_do_instead() -> None:
    cron = next(
        d
        for d in yaml.safe_load_all((SAMPLES / "ray-cronjob.sample.yaml").read_text())
        if d["kind"] == "RayCronJob"
    )
    problems, objects = compiler.compile_document(cron, OPTIONS)
    assert objects == []
    assert [(p.path, p.message) for p in problems] == [
        (
            ("kind",),
            "RayCronJob is not supported yet by kuberay render "
            "(render a RayJob and schedule it yourself)",
        )
    ]


def test_an_unknown_ray_io_kind_is_one_error() -> None:
    doc = {"apiVersion": "ray.io/v1", "kind": "RayThing", "metadata": {"name": "x"}}
    problems, objects = compiler.compile_document(doc, OPTIONS)
    assert objects == []
    assert [(p.path, p.severity) for p in problems] == [(("kind",), "error")]
    assert "RayThing" in problems[0].message


def test_refused_documents_make_render_raise_with_every_problem() -> None:
    docs = [
        Document(
            {"apiVersion": "ray.io/v1", "kind": "RayThing", "metadata": {"name": "x"}},
            Origin("a.yaml", 1),
        ),
        Document(["not", "an", "object"], Origin("a.yaml", 2)),
        Document(None, Origin("a.yaml", 3)),  # an empty document is skipped
    ]
    with pytest.raises(ManifestError) as caught:
        compiler.render(docs, OPTIONS)
    assert [d.origin.index for d in caught.value.diagnostics] == [1, 2]


@pytest.mark.parametrize(
    "case",
    [
        "raycluster-k8s-token-auth",
        "raycluster-history-server",
        "raycluster-gcs-rocksdb-retain",
        "raycluster-gcs-rocksdb-claim",
        "rayjob-network-policy",
    ],
)
def test_golden_outputs_are_valid_kubernetes_objects(case: str) -> None:
    # DESIGN §6: rendered output is validated against the Kubernetes OpenAPI schemas and the
    # CRD JSON Schemas. Here: the golden cases for K8s token auth, the history-server
    # collector, RocksDB with Retain or a claimName, and a RayJob's NetworkPolicies.
    for obj in yaml.safe_load_all((GOLDEN / case / "expected.yaml").read_text()):
        assert validate_object(obj) == [], (obj["kind"], obj["metadata"]["name"])
