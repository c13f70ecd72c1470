"""Every RayCluster sample of KubeRay v1.7 renders (or is refused with one clear line), and
every rendered object is valid Kubernetes (kubernetes-validate, strict) or valid against the
Gateway API / cert-manager JSON Schemas. Samples are read in place from ../shared."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

import pytest

from renderer import compile as compiler
from renderer import sources
from renderer.errors import ManifestError
from renderer.options import DEFAULT_FEATURE_GATES, RenderOptions
from tests.paths import SAMPLES
from tests.validation import validate_object

# The alpha gates the samples exercise are on, so each sample shows what it can render.
OPTIONS = RenderOptions(
    feature_gates=MappingProxyType(
        dict(DEFAULT_FEATURE_GATES)
        | {
            "RayClusterNetworkPolicy": True,
            "RayClusterMTLS": True,
            "GCSFaultToleranceEmbeddedStorage": True,
            "RayClusterHistoryServer": True,
        }
    )
)

# Samples the renderer refuses, and the one line that says why. A change here shows in review.
REFUSED = {
    "ray-cluster.auth.yaml": "cannot live in git",
}


def _has_raycluster(path: Path) -> bool:
    documents, problems = sources.read_documents([str(path)])
    return not problems and any(
        isinstance(d.data, dict) and d.data.get("kind") == "RayCluster" for d in documents
    )


CLUSTER_SAMPLES = sorted(p for p in SAMPLES.rglob("*.yaml") if _has_raycluster(p))


def test_the_sample_corpus_is_there() -> None:
    assert len(CLUSTER_SAMPLES) >= 30, f"expected the KubeRay samples under {SAMPLES}"


@pytest.mark.parametrize("sample", CLUSTER_SAMPLES, ids=[p.name for p in CLUSTER_SAMPLES])
def test_raycluster_sample_renders_valid_objects(sample: Path) -> None:
    documents, problems = sources.read_documents([str(sample)])
    assert not problems
    refusal = REFUSED.get(sample.name)
    if refusal is not None:
        with pytest.raises(ManifestError) as caught:
            compiler.render(documents, OPTIONS)
        errors = [d for d in caught.value.diagnostics if d.problem.severity == "error"]
        messages = [d.problem.message for d in errors]
        assert any(refusal in m for m in messages), messages
        return
    result = compiler.render(documents, OPTIONS)
    assert result.objects
    failures = {}
    for obj in result.objects:
        found = validate_object(obj)
        if found:
            failures[f"{obj['kind']}/{obj['metadata']['name']}"] = found
    assert not failures
