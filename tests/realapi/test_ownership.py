"""The ownership contract's one exception, HTTPRoute `spec.rules`, under real server-side apply.

DESIGN §1: the syncer owns a rendered HTTPRoute's `spec.rules` after creation (traffic
weights), and the renderer emits the Argo CD `ignoreDifferences` + `RespectIgnoreDifferences`
settings that make this legal. Against the real field-manager bookkeeping: a GitOps apply
that carries git's rules after the syncer changed them is a 409 Conflict (the fake never
reports one), while the apply Argo CD makes under those settings (the live rules in place of
git's) is accepted, keeps the syncer's weights and changes nothing when repeated.
"""

from __future__ import annotations

import copy

import pytest

from tests.paths import GOLDEN
from tests.realapi.conftest import Real
from tests.realapi.gitops import GITOPS_MANAGER, apply_all, render
from tests.realapi.rest import Manifest, RestError

INCREMENTAL = GOLDEN / "rayservice-incremental" / "input.yaml"


def _route(objects: list[Manifest]) -> Manifest:
    return next(o for o in objects if o["kind"] == "HTTPRoute")


def _syncer_sets_weight(real: Real, route: Manifest, weight: int) -> Manifest:
    """What the syncer does: a resourceVersion-guarded merge patch of spec.rules."""
    path = real.rest.path_of(route, real.namespace)
    live = real.rest.request("GET", path)
    rules = copy.deepcopy(live["spec"]["rules"])
    rules[0]["backendRefs"][0]["weight"] = weight
    body = {
        "metadata": {"resourceVersion": live["metadata"]["resourceVersion"]},
        "spec": {"rules": rules},
    }
    return real.rest.patch(path, body, fieldManager="kuberay-syncer")


def test_syncer_owned_route_rules_conflict_with_a_naive_gitops_apply(
    real: Real, crds: list[str]
) -> None:
    objects = render(INCREMENTAL, real.namespace)
    assert not apply_all(real.rest, objects, namespace=real.namespace)
    route = _route(objects)
    _syncer_sets_weight(real, route, 90)
    with pytest.raises(RestError) as refused:
        real.rest.apply(route, manager=GITOPS_MANAGER, namespace=real.namespace)
    assert (refused.value.status, refused.value.reason) == (409, "Conflict")
    assert "kuberay-syncer" in str(refused.value.body)
    assert ".spec.rules" in str(refused.value.body)


def test_argocd_respecting_ignored_route_rules_keeps_the_syncers_weights(
    real: Real, crds: list[str]
) -> None:
    objects = render(INCREMENTAL, real.namespace)
    assert not apply_all(real.rest, objects, namespace=real.namespace)
    route = _route(objects)
    patched = _syncer_sets_weight(real, route, 90)
    # RespectIgnoreDifferences=true: Argo CD applies the live value of an ignored path.
    desired = copy.deepcopy(route)
    desired["spec"]["rules"] = patched["spec"]["rules"]
    first = real.rest.apply(desired, manager=GITOPS_MANAGER, namespace=real.namespace)
    assert first["spec"]["rules"][0]["backendRefs"][0]["weight"] == 90
    again = real.rest.apply(desired, manager=GITOPS_MANAGER, namespace=real.namespace)
    assert again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    # The syncer can keep moving traffic: its update is not an apply, so it never conflicts.
    moved = _syncer_sets_weight(real, route, 80)
    assert moved["spec"]["rules"][0]["backendRefs"][0]["weight"] == 80
