"""Everything the renderer produces is accepted by a real kube-apiserver.

For `examples/` (through the `kuberay render` CLI) and every KubeRay v1.7 sample the
renderer does not refuse (read in place from ../shared), each object is server-side applied
as a GitOps tool would: first with `dryRun=All`, then for real, always with
`fieldValidation=Strict`, so OpenAPI validation, unknown fields, defaulting, admission
(ServiceAccount, PodSecurity, LimitRanger, ...) and, for Gateway API / cert-manager kinds,
the CRD schemas with their CEL rules all apply. The namespace and the ServiceAccounts pods
name are created first (a dry run persists nothing). Zero rejections of rendered objects.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import MappingProxyType

import pytest
import yaml

from renderer import compile as compiler
from renderer import sources
from renderer.errors import ManifestError
from renderer.options import DEFAULT_FEATURE_GATES, RenderOptions
from tests.paths import EXAMPLES, SAMPLES
from tests.realapi.conftest import Real
from tests.realapi.gitops import (
    apply_all,
    is_rendered,
    name_of,
    referenced_service_accounts,
    render,
)
from tests.realapi.rest import Manifest

_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# Samples whose rendered objects the real server rejects, and a phrase of every rejection.
# The renderer passes the sample's placeholder through; KubeRay's pods would fail the same.
REJECTED = {
    "ray-service.vllm-tpu-v6e-singlehost.yaml": '"$KSA_NAME"',
}
_RAY_KIND = re.compile(r"^kind:\s*Ray(Cluster|Job|Service)\s*$", re.MULTILINE)
SAMPLE_FILES = sorted(p for p in SAMPLES.rglob("*.yaml") if _RAY_KIND.search(p.read_text()))
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.yaml"))
# The alpha gates the samples exercise are on, as in tests/renderer/test_samples.py.
GATES = MappingProxyType(
    dict(DEFAULT_FEATURE_GATES)
    | {
        "RayClusterNetworkPolicy": True,
        "RayClusterMTLS": True,
        "GCSFaultToleranceEmbeddedStorage": True,
        "RayClusterHistoryServer": True,
    }
)


def prepare(real: Real, objects: list[Manifest]) -> None:
    """Create what a dry run needs to exist: namespaces and the ServiceAccounts pods name.

    A ServiceAccount that is itself among the objects is created too: a dry run persists
    nothing, so the pods' admission would not find it otherwise.
    """
    for namespace in {
        str(o["metadata"]["namespace"]) for o in objects if "namespace" in o["metadata"]
    }:
        real.namespace_object(namespace)
    for namespace, name in referenced_service_accounts(objects):
        if not _DNS_SUBDOMAIN.fullmatch(name):
            continue  # a placeholder left in a sample: the pods' rejection is the finding
        if real.rest.get_or_none("v1", "ServiceAccount", namespace or real.namespace, name):
            continue
        real.rest.create(
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
            namespace or real.namespace,
        )


def check_accepted(real: Real, objects: list[Manifest], expected: str | None = None) -> None:
    """Dry run, then apply for real: every rendered object accepted both times.

    `expected`: a phrase every rejection must contain (a known problem of the input), and
    there must be at least one.
    """
    assert objects
    prepare(real, objects)
    rendered = {name_of(o) for o in objects if is_rendered(o)}
    for dry_run in (True, False):
        failures = apply_all(real.rest, objects, namespace=real.namespace, dry_run=dry_run)
        ours = {k: v for k, v in failures.items() if k in rendered}
        if expected is not None:
            assert ours
            assert all(expected in v for v in ours.values()), ours
            continue
        assert not ours, (
            f"{'dry run' if dry_run else 'apply'}: {len(ours)} rendered objects rejected "
            f"(pass-through rejections, not asserted: {failures.keys() - ours.keys()})\n"
            + "\n".join(f"  {k}: {v}" for k, v in sorted(ours.items()))
        )


def in_namespace(text: str, namespace: str) -> str:
    """Sample text with every namespaced document moved into `namespace`."""
    documents = [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
    for document in documents:
        meta = document.setdefault("metadata", {})
        if document.get("kind") not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
            meta["namespace"] = namespace
    return yaml.safe_dump_all(documents, sort_keys=False)


@pytest.mark.parametrize("example", EXAMPLE_FILES, ids=[p.name for p in EXAMPLE_FILES])
def test_rendered_example_is_accepted_by_the_real_api(
    real: Real, crds: list[str], example: Path
) -> None:
    objects = render(example, real.namespace)
    check_accepted(real, objects)


@pytest.mark.parametrize("sample", SAMPLE_FILES, ids=[p.name for p in SAMPLE_FILES])
def test_rendered_sample_is_accepted_by_the_real_api(
    real: Real, crds: list[str], sample: Path
) -> None:
    documents, problems = sources.parse_text(
        in_namespace(sample.read_text(), real.namespace), sample.name
    )
    assert not problems
    options = RenderOptions(namespace=real.namespace, feature_gates=GATES)
    try:
        result = compiler.render(documents, options)
    except ManifestError as exc:
        errors = [d.problem.message for d in exc.diagnostics if d.problem.severity == "error"]
        pytest.skip(f"the renderer refuses this sample (tests/renderer pins why): {errors[0]}")
    check_accepted(real, list(result.objects), REJECTED.get(sample.name))


def test_the_sample_corpus_is_there() -> None:
    assert len(SAMPLE_FILES) >= 40, SAMPLES
    assert len(EXAMPLE_FILES) >= 3, EXAMPLES
