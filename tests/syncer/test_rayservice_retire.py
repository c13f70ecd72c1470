"""Retiring a RayService generation deletes what the renderer marked, never a retained claim.

Security review H3: prune protection also marks claims rendered from `deletionPolicy:
Retain`, so it cannot double as "delete with the generation". The renderer's
`kuberay.io/retire-with` marker and `retires_with` are checked here together, on objects
`kuberay render` really produces.
"""

from __future__ import annotations

from renderer import naming
from renderer.options import RenderOptions
from syncer.rayservice.actions import RETIRED_RESOURCES, retires_with
from tests.paths import GOLDEN
from tests.syncer.harness import render

RETIRED_KINDS = {resource.kind for resource in RETIRED_RESOURCES}


def _generation_objects() -> tuple[str, list[dict[str, object]]]:
    text = (GOLDEN / "rayservice-gcs-retain" / "input.yaml").read_text()
    options = RenderOptions(namespace="ml").with_gates(GCSFaultToleranceEmbeddedStorage=True)
    objects = render(text, "ml", options)
    generation = next(
        o["metadata"]["labels"][naming.RAY_CLUSTER]
        for o in objects
        if o["kind"] == "Pod" and naming.RAY_CLUSTER in (o["metadata"].get("labels") or {})
    )
    mine = [
        o
        for o in objects
        if (o["metadata"].get("labels") or {}).get(naming.RAY_CLUSTER) == generation
        and o["kind"] in RETIRED_KINDS
    ]
    return generation, mine


def test_every_generation_object_retires_with_it_except_the_retained_claim() -> None:
    generation, objects = _generation_objects()
    kinds = {str(o["kind"]) for o in objects}
    assert {"Pod", "Service", "ConfigMap", "PersistentVolumeClaim"} <= kinds
    for obj in objects:
        expected = obj["kind"] != "PersistentVolumeClaim"
        assert retires_with(obj, generation) is expected, obj["metadata"]
        assert retires_with(obj, f"{generation}x") is False  # another generation's retirement


def _obj(kind: str, annotations: dict[str, str]) -> dict[str, object]:
    return {"kind": kind, "metadata": {"name": "x", "annotations": annotations}}


def test_objects_rendered_before_the_marker_retire_by_their_protection_but_claims_never() -> None:
    protected = dict(naming.PRUNE_PROTECTION)
    assert retires_with(_obj("Pod", protected), "g") is True
    assert retires_with(_obj("Service", protected), "g") is True
    assert retires_with(_obj("PersistentVolumeClaim", protected), "g") is False
    assert retires_with(_obj("Pod", {}), "g") is False  # pruned by the GitOps tool instead
    marked = {**protected, naming.RETIRE_WITH: "g"}
    assert retires_with(_obj("PersistentVolumeClaim", marked), "g") is True
    assert retires_with(_obj("Pod", {naming.RETIRE_WITH: "other"}), "g") is False
