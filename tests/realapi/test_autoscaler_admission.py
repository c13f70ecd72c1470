"""The worker-Pod admission policy, enforced by a real kube-apiserver (issue 14).

`kuberay syncer-manifests --worker-pod-policy` is applied as rendered. The syncer's own
ServiceAccount token then creates (as dry runs, which admission sees like writes) the Pod
the autoscaling actuator builds from the rendered template, owned by a real head Pod:
admitted. The same Pod with a host network, a hostPath volume, a privileged container, a
name git could declare or no owner is refused with the policy's message; the admin, whom
the policy does not bind, may still create such a Pod. The CEL checks one by one are in
tests/autoscaler/test_admission_pods.py.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator

import pytest

from syncer.autoscaler import pods
from syncer.autoscaler.spec import Group
from tests.autoscaler import rig
from tests.realapi.conftest import Real
from tests.realapi.gitops import apply_all, syncer_manifests
from tests.realapi.rest import Manifest, Rest, RestError
from tests.realapi.rig import token_for

DRY = {"dryRun": "All"}


def _refused(call: Callable[[], object]) -> str:
    with pytest.raises(RestError) as refused:
        call()
    assert refused.value.status == 403, refused.value.body
    message = str(refused.value.body.get("message", ""))
    assert "ValidatingAdmissionPolicy" in message, message
    return message


@pytest.fixture
def syncer(real: Real) -> Iterator[Rest]:
    """The syncer's ServiceAccount, with the policy installed and in force."""
    ns = real.namespace
    system = f"{ns}-sys"
    real.namespace_object(system)
    objects = syncer_manifests(system, ns, "--replicas", "0", "--worker-pod-policy")
    policies = [o for o in objects if o["apiVersion"].startswith("admissionregistration.")]
    assert [o["kind"] for o in policies] == [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    try:
        assert not apply_all(real.rest, objects, namespace=system)
        real.wait_default_service_account(ns)
        yield Rest(
            real.plane.server, token_for(real.rest, system, "kuberay-syncer"), ca=real.plane.ca
        )
    finally:
        for obj in reversed(policies):
            real.rest.delete(real.rest.path_of(obj))
        real.rest.delete(f"/api/v1/namespaces/{system}")


def _worker(real: Real) -> Manifest:
    head, worker = rig.rendered(real.namespace)
    live = real.rest.create(head, real.namespace)
    group = Group(rig.GROUP, 0, 3, 1, rig.worker_template(worker))
    meta = live["metadata"]
    return pods.build(
        group, "demo-small-worker-b2c4d", 0, real.namespace, meta["name"], meta["uid"]
    )


def test_the_syncer_creates_only_worker_shaped_pods(real: Real, syncer: Rest) -> None:
    ns = real.namespace
    good = _worker(real)
    escape = copy.deepcopy(good)
    escape["spec"]["hostNetwork"] = True
    deadline = time.monotonic() + 60
    while True:  # policies reach the admission plugin through an informer
        try:
            syncer.create(escape, ns, **DRY)
        except RestError as exc:
            if exc.status == 403:
                break
            raise
        assert time.monotonic() < deadline, "the worker-Pod policy never took effect"
        time.sleep(0.5)

    assert syncer.create(good, ns, **DRY)["metadata"]["name"] == good["metadata"]["name"]
    assert "no host network" in _refused(lambda: syncer.create(escape, ns, **DRY))
    host_path = copy.deepcopy(good)
    host_path["spec"].setdefault("volumes", []).append({"name": "h", "hostPath": {"path": "/"}})
    assert "no hostPath" in _refused(lambda: syncer.create(host_path, ns, **DRY))
    privileged = copy.deepcopy(good)
    privileged["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    assert "no privileged" in _refused(lambda: syncer.create(privileged, ns, **DRY))
    declared = copy.deepcopy(good)
    declared["metadata"]["name"] = "demo-small-worker-5f6d7-0"
    assert "is named" in _refused(lambda: syncer.create(declared, ns, **DRY))
    orphan = copy.deepcopy(good)
    del orphan["metadata"]["ownerReferences"]
    assert "exactly one owner" in _refused(lambda: syncer.create(orphan, ns, **DRY))
    # The policy binds only the syncer: the admin's request is not its business.
    assert real.rest.create(escape, ns, **DRY)["spec"]["hostNetwork"] is True
