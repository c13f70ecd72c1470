"""The install's ValidatingAdmissionPolicy, enforced by a real kube-apiserver (DESIGN §1.1).

`kuberay syncer-manifests --admission-policy --gitops-identity ...` is applied as it is
rendered; then, in the watched namespace, a tenant with the built-in `edit` role tries what
the security review's forged-intent attacks need (create a labelled intent, label its own
ConfigMap, change, unlabel or delete a labelled one) and is refused, while the GitOps
identity, the syncer's ServiceAccount and the cluster's own controllers (the Job controller
creating a rendered submitter's pod) go on as before.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.paths import GOLDEN
from tests.realapi.conftest import Real
from tests.realapi.gitops import apply_all, is_rendered, render, syncer_manifests
from tests.realapi.rest import Manifest, Rest, RestError
from tests.realapi.rig import token_for
from tests.realapi.test_apply_rendered import in_namespace

MANAGED = {"app.kubernetes.io/managed-by": "kuberay-render"}


@dataclass
class Actors:
    """REST clients of the three identities in play, and the watched namespace."""

    namespace: str
    gitops: Rest
    tenant: Rest
    syncer: Rest


def _account(real: Real, name: str) -> Rest:
    """A ServiceAccount in the test namespace with the built-in `edit` role there."""
    ns = real.namespace
    real.rest.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}, ns)
    real.rest.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": f"{name}-edit"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "edit",
            },
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}],
        },
        ns,
    )
    return Rest(real.plane.server, token_for(real.rest, ns, name), ca=real.plane.ca)


def _configmap(name: str, labels: dict[str, str] | None = None) -> Manifest:
    meta: Manifest = {"name": name}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}


def _refused(call: Callable[[], Any]) -> str:
    """The API server's message for a request the policy denies (fails if it was accepted)."""
    with pytest.raises(RestError) as refused:
        call()
    assert refused.value.status == 403, refused.value.body
    message = str(refused.value.body.get("message", ""))
    assert "ValidatingAdmissionPolicy" in message, message
    return message


def _wait_enforced(real: Real, tenant: Rest) -> None:
    """Policies reach the admission plugin through an informer: wait until this one acts."""
    deadline = time.monotonic() + 60
    while True:
        try:
            tenant.create(_configmap("probe", MANAGED), real.namespace)
        except RestError as exc:
            if exc.status == 403:
                return
            raise
        real.rest.delete(f"/api/v1/namespaces/{real.namespace}/configmaps/probe")
        assert time.monotonic() < deadline, "the admission policy never took effect"
        time.sleep(0.5)


@pytest.fixture
def actors(real: Real) -> Iterator[Actors]:
    ns = real.namespace
    system = f"{ns}-sys"
    real.namespace_object(system)
    gitops_user = f"system:serviceaccount:{ns}:gitops"
    objects = syncer_manifests(
        system, ns, "--replicas", "0", "--admission-policy", "--gitops-identity", gitops_user
    )
    policies = [o for o in objects if o["apiVersion"].startswith("admissionregistration.")]
    assert [o["kind"] for o in policies] == [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    try:
        # The admin (system:masters) installs it, as a cluster bootstrap would.
        assert not apply_all(real.rest, objects, namespace=system)
        tenant = _account(real, "tenant")
        view = Actors(
            ns,
            _account(real, "gitops"),
            tenant,
            Rest(
                real.plane.server, token_for(real.rest, system, "kuberay-syncer"), ca=real.plane.ca
            ),
        )
        _wait_enforced(real, tenant)
        yield view
    finally:
        for obj in reversed(policies):
            real.rest.delete(real.rest.path_of(obj))
        real.rest.delete(f"/api/v1/namespaces/{system}")


def test_a_tenant_cannot_create_change_label_unlabel_or_delete_kuberay_objects(
    real: Real, actors: Actors
) -> None:
    ns, tenant, gitops = actors.namespace, actors.tenant, actors.gitops
    path = f"/api/v1/namespaces/{ns}/configmaps"
    intent = {**MANAGED, "kuberay.io/role": "intent", "kuberay.io/origin-kind": "RayJob"}
    message = _refused(lambda: tenant.create(_configmap("job-kuberay-intent", intent), ns))
    assert f"system:serviceaccount:{ns}:tenant may not create configmaps" in message
    # A forged status record (the syncer's labels) is refused the same way.
    forged = {"app.kubernetes.io/managed-by": "kuberay-syncer", "kuberay.io/role": "status"}
    _refused(lambda: tenant.create(_configmap("job-kuberay-status", forged), ns))
    _refused(lambda: tenant.create(_configmap("role-only", {"kuberay.io/role": "x"}), ns))

    # Its own ConfigMaps stay its own, but cannot be given kuberay labels.
    tenant.create(_configmap("mine", {"team": "a"}), ns)
    add = {"metadata": {"labels": MANAGED}}
    assert "add kuberay labels to" in _refused(lambda: tenant.patch(f"{path}/mine", add))
    tenant.patch(f"{path}/mine", {"data": {"k": "w"}})

    # What the GitOps identity applied, the tenant can neither change, unlabel nor delete.
    gitops.create(_configmap("job-kuberay-intent", intent), ns)
    target = f"{path}/job-kuberay-intent"
    assert "may not change" in _refused(lambda: tenant.patch(target, {"data": {"k": "evil"}}))
    unlabel = {"metadata": {"labels": {"app.kubernetes.io/managed-by": None}}}
    # (kuberay.io/role alone still marks it: both labels must go for "remove".)
    _refused(lambda: tenant.patch(target, unlabel))
    strip = {
        "metadata": {"labels": {"app.kubernetes.io/managed-by": None, "kuberay.io/role": None}}
    }
    assert "remove kuberay labels from" in _refused(lambda: tenant.patch(target, strip))
    assert "may not delete" in _refused(lambda: tenant.request("DELETE", target))
    assert real.rest.get("v1", "ConfigMap", ns, "job-kuberay-intent")["data"] == {"k": "v"}

    # The GitOps identity changes and prunes it; the syncer writes its status records.
    gitops.patch(target, {"data": {"k": "v2"}})
    actors.syncer.create(_configmap("job-kuberay-status", forged), ns)
    actors.syncer.patch(f"{path}/job-kuberay-status", {"data": {"k": "v2"}})
    gitops.request("DELETE", target)
    assert real.rest.get_or_none("v1", "ConfigMap", ns, "job-kuberay-intent") is None


def test_the_gitops_identity_applies_a_rendered_rayjob_and_the_job_controller_runs_it(
    real: Real, actors: Actors
) -> None:
    ns = actors.namespace
    objects = render(
        in_namespace((GOLDEN / "rayjob-k8sjobmode" / "input.yaml").read_text(), ns), ns
    )
    # A dry run is admitted like a write: every labelled object is refused to the tenant.
    refused = apply_all(actors.tenant, objects, namespace=ns, dry_run=True)
    labelled = [o for o in objects if is_rendered(o)]
    assert len(refused) == len(labelled) > 5, refused
    assert all(
        r.startswith("403 ") and "ValidatingAdmissionPolicy" in r for r in refused.values()
    ), refused
    assert apply_all(actors.gitops, objects, namespace=ns) == {}
    job = next(o for o in objects if o["kind"] == "Job")
    # kube-controller-manager (a system identity) creates the submitter pod from the
    # labelled template; the policy must not stand in its way.
    deadline = time.monotonic() + 60
    selector = f"job-name={job['metadata']['name']}"
    while not real.rest.list("v1", "Pod", ns, labelSelector=selector):
        assert time.monotonic() < deadline, "the Job controller created no submitter pod"
        time.sleep(0.5)
