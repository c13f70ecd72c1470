"""Tests for renderer.gitops: the Argo CD and Flux settings that let the syncer own route rules."""

from __future__ import annotations

import copy
from typing import Any

from renderer import compile as compiler
from renderer import gitops, naming
from renderer.options import RenderOptions
from tests.renderer.test_rayservice import incremental_strategy, rayservice_doc
from tests.validation import validate_object

Manifest = dict[str, Any]


def rendered(*docs: Manifest) -> list[Manifest]:
    objects: list[Manifest] = []
    for doc in docs:
        problems, built = compiler.compile_document(copy.deepcopy(doc), RenderOptions())
        assert not [p for p in problems if p.severity == "error"], problems
        objects.extend(built)
    return objects


def service(name: str, namespace: str, *, incremental: bool) -> Manifest:
    doc = (
        rayservice_doc(upgradeStrategy=incremental_strategy()) if incremental else rayservice_doc()
    )
    doc["metadata"] = {"name": name, "namespace": namespace}
    return doc


def user_route(name: str, namespace: str) -> Manifest:
    """An HTTPRoute the user passes through: the GitOps tool keeps owning all of it."""
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"rules": [{"backendRefs": [{"name": "web", "port": 80}]}]},
    }


def mixed_objects() -> list[Manifest]:
    return rendered(
        service("fruit", "serving", incremental=True),
        service("veg", "serving", incremental=False),
        service("nuts", "batch", incremental=True),
        user_route("mine", "serving"),
    )


def test_argocd_fragment_ignores_rules_of_exactly_the_incremental_routes():
    fragment = gitops.argocd_fragment(mixed_objects())
    assert fragment["spec"]["ignoreDifferences"] == [
        {
            "group": "gateway.networking.k8s.io",
            "kind": "HTTPRoute",
            "name": "nuts-httproute",
            "namespace": "batch",
            "jsonPointers": ["/spec/rules"],
        },
        {
            "group": "gateway.networking.k8s.io",
            "kind": "HTTPRoute",
            "name": "fruit-httproute",
            "namespace": "serving",
            "jsonPointers": ["/spec/rules"],
        },
    ]
    assert fragment["spec"]["syncPolicy"]["syncOptions"] == ["RespectIgnoreDifferences=true"]


def test_flux_fragment_ignores_rules_of_exactly_the_incremental_routes():
    fragment = gitops.flux_fragment(mixed_objects())
    assert fragment["spec"]["ignore"] == [
        {
            "paths": ["/spec/rules"],
            "target": {
                "group": "gateway.networking.k8s.io",
                "version": "v1",
                "kind": "HTTPRoute",
                "name": "nuts-httproute",
                "namespace": "batch",
            },
        },
        {
            "paths": ["/spec/rules"],
            "target": {
                "group": "gateway.networking.k8s.io",
                "version": "v1",
                "kind": "HTTPRoute",
                "name": "fruit-httproute",
                "namespace": "serving",
            },
        },
    ]


def test_fragments_validate_against_the_tools_schemas():
    for objects in (mixed_objects(), []):
        for fragment in (gitops.argocd_fragment(objects), gitops.flux_fragment(objects)):
            assert validate_object(fragment) == []


def test_fragments_mark_the_set_up_specific_fields_as_examples():
    argocd = gitops.argocd_fragment([])
    flux = gitops.flux_fragment([])
    assert gitops.EXAMPLE in argocd["spec"]["source"]["repoURL"]
    assert gitops.EXAMPLE.lower() in argocd["metadata"]["name"]
    assert gitops.EXAMPLE in flux["spec"]["path"]
    assert gitops.EXAMPLE.lower() in flux["spec"]["sourceRef"]["name"]
    assert gitops.EXAMPLE.lower() in flux["metadata"]["name"]


def test_fragments_without_incremental_services_ignore_nothing():
    objects = rendered(service("veg", "serving", incremental=False), user_route("mine", "serving"))
    assert gitops.argocd_fragment(objects)["spec"]["ignoreDifferences"] == []
    assert gitops.flux_fragment(objects)["spec"]["ignore"] == []


def test_argocd_destination_namespace_is_set_only_for_a_single_namespace():
    single = rendered(service("fruit", "serving", incremental=True))
    assert gitops.argocd_fragment(single)["spec"]["destination"] == {
        "server": "https://kubernetes.default.svc",
        "namespace": "serving",
    }
    assert "namespace" not in gitops.argocd_fragment(mixed_objects())["spec"]["destination"]


def test_route_of_another_kind_of_origin_is_not_syncer_routed():
    route = next(o for o in mixed_objects() if o["kind"] == "HTTPRoute")
    assert gitops.is_syncer_routed(route)
    other = copy.deepcopy(route)
    other["metadata"]["labels"][naming.ORIGIN_KIND] = "RayCluster"
    assert not gitops.is_syncer_routed(other)
    other = copy.deepcopy(route)
    other["apiVersion"] = "example.com/v1"
    assert not gitops.is_syncer_routed(other)


def test_a_route_given_twice_is_listed_once():
    objects = rendered(service("fruit", "serving", incremental=True))
    assert len(gitops.flux_fragment(objects + objects)["spec"]["ignore"]) == 1
