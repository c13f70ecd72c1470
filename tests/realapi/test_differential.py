"""The same requests to the project's fake API server and to the real kube-apiserver.

Each test sends identical requests (tests.realapi.rest, byte for byte) to both servers and
compares what matters: status codes, Status reasons, and the resulting object fields. Where
the fake is known to differ (its README lists the simplifications), the test still asserts
equality and is a strict xfail naming the difference: fixing the fake turns it into an
XPASS, which fails, so the marker goes with the fix.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.realapi.conftest import Real
from tests.realapi.rest import Manifest, Rest, RestError

Outcome = tuple[int, str]


class FakeDiffersError(AssertionError):
    """The fake answered differently from the real server (what the strict xfails expect).

    Only this exception satisfies their `raises=`: a failed assertion about the real
    server is an ordinary AssertionError and fails the test.
    """


def same(fake: object, real: object, what: str) -> None:
    """Raise `FakeDiffersError` unless the fake's answer equals the real one."""
    if fake != real:
        raise FakeDiffersError(f"{what}: fake {fake!r} != real {real!r}")


def known_difference(reason: str) -> pytest.MarkDecorator:
    """A strict xfail for a documented difference of the fake, raised only by `same`."""
    return pytest.mark.xfail(strict=True, raises=FakeDiffersError, reason=reason)


@dataclass
class Pair:
    """One namespace on each server, same name, admin-like identities."""

    fake: Rest
    real: Rest
    namespace: str
    real_ca: Path

    def both(self, send: Callable[[Rest], Any]) -> tuple[Any, Any]:
        """Run `send` against the fake, then the real server."""
        return send(self.fake), send(self.real)

    def outcomes(self, send: Callable[[Rest], Any]) -> tuple[Outcome, Outcome]:
        """(code, reason) of `send` on each server; 200/'' when it succeeded."""

        def one(rest: Rest) -> Outcome:
            try:
                send(rest)
            except RestError as exc:
                return exc.status, exc.reason
            return 200, ""

        return one(self.fake), one(self.real)


@pytest.fixture
def pair(request: pytest.FixtureRequest, real: Real, tmp_path: Path) -> Pair:
    server = request.getfixturevalue("fake_api_server")
    fake = Rest.from_kubeconfig(server.write_kubeconfig(tmp_path / "fake.kubeconfig"))
    namespace = real.namespace
    fake.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    # The fake has no ServiceAccount controller; give it the `default` account the real one made.
    fake.create(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
        namespace,
    )
    return Pair(fake, real.rest, namespace, real.plane.ca)


def configmap(name: str, data: dict[str, str]) -> Manifest:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def pod(name: str, **spec: Any) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox:1"}], **spec},
    }


def job(name: str, **spec: Any) -> Manifest:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox:1"}],
                }
            },
            **spec,
        },
    }


# ---- where both servers agree (a regression in the fake shows here) --------------------


def test_create_then_get_a_configmap_agrees(pair: Pair) -> None:
    body = configmap("same", {"k": "v"})
    fake, real = pair.both(lambda r: r.create(body, pair.namespace))
    assert fake["data"] == real["data"] == {"k": "v"}
    fake_again, real_again = pair.outcomes(lambda r: r.create(body, pair.namespace))
    assert fake_again == real_again == (409, "AlreadyExists")


def test_get_a_missing_object_is_404_not_found(pair: Pair) -> None:
    fake, real = pair.outcomes(lambda r: r.get("v1", "ConfigMap", pair.namespace, "absent"))
    assert fake == real == (404, "NotFound")


def test_pod_spec_change_is_refused_as_invalid(pair: Pair) -> None:
    pair.both(lambda r: r.create(pod("p", nodeName="ghost-node"), pair.namespace))
    change = {"spec": {"restartPolicy": "Never"}}
    fake, real = pair.outcomes(
        lambda r: r.patch(f"/api/v1/namespaces/{pair.namespace}/pods/p", change, kind="strategic")
    )
    assert fake == real == (422, "Invalid")


def test_removing_a_scheduling_gate_is_allowed(pair: Pair) -> None:
    gated = pod("g", schedulingGates=[{"name": "kuberay.io/cluster-ready"}])
    pair.both(lambda r: r.create(gated, pair.namespace))
    ungate = [{"op": "remove", "path": "/spec/schedulingGates"}]
    fake, real = pair.both(
        lambda r: r.patch(f"/api/v1/namespaces/{pair.namespace}/pods/g", ungate, kind="json")
    )
    assert fake["spec"].get("schedulingGates") is None
    assert real["spec"].get("schedulingGates") is None


def test_adding_a_scheduling_gate_to_an_existing_pod_is_refused(pair: Pair) -> None:
    pair.both(lambda r: r.create(pod("a"), pair.namespace))
    gate = {"spec": {"schedulingGates": [{"name": "late"}]}}
    fake, real = pair.outcomes(
        lambda r: r.patch(f"/api/v1/namespaces/{pair.namespace}/pods/a", gate, kind="strategic")
    )
    assert real == (422, "Invalid")
    assert fake == real


def test_job_template_of_a_running_job_is_immutable(pair: Pair) -> None:
    pair.both(lambda r: r.create(job("j"), pair.namespace))
    change = {"spec": {"template": {"metadata": {"labels": {"x": "y"}}}}}
    fake, real = pair.outcomes(
        lambda r: r.patch(f"/apis/batch/v1/namespaces/{pair.namespace}/jobs/j", change)
    )
    assert fake == real == (422, "Invalid")


def test_job_defaults_agree(pair: Pair) -> None:
    fake, real = pair.both(lambda r: r.create(job("d"), pair.namespace))
    for key in ("backoffLimit", "completions", "parallelism", "completionMode", "suspend"):
        assert fake["spec"].get(key) == real["spec"].get(key), key
    assert (
        fake["spec"]["template"]["metadata"]["labels"]["job-name"]
        == real["spec"]["template"]["metadata"]["labels"]["job-name"]
        == "d"
    )


def test_server_side_apply_by_two_managers_of_disjoint_fields_merges(pair: Pair) -> None:
    first = configmap("ssa", {"a": "1"})
    second = configmap("ssa", {"b": "2"})
    pair.both(lambda r: r.apply(first, manager="gitops", namespace=pair.namespace))
    fake, real = pair.both(lambda r: r.apply(second, manager="syncer", namespace=pair.namespace))
    assert fake["data"] == real["data"] == {"a": "1", "b": "2"}
    managers = {m["manager"] for m in real["metadata"]["managedFields"]}
    assert managers == {m["manager"] for m in fake["metadata"]["managedFields"]}


def test_apply_that_drops_a_field_removes_it(pair: Pair) -> None:
    pair.both(
        lambda r: r.apply(
            configmap("drop", {"a": "1", "b": "2"}), manager="gitops", namespace=pair.namespace
        )
    )
    fake, real = pair.both(
        lambda r: r.apply(configmap("drop", {"a": "1"}), manager="gitops", namespace=pair.namespace)
    )
    assert fake["data"] == real["data"] == {"a": "1"}


# ---- documented differences of the fake (strict xfails) ----------------------------------


def test_apply_of_a_field_another_manager_owns_conflicts(pair: Pair) -> None:
    pair.both(
        lambda r: r.apply(
            configmap("own", {"k": "git"}), manager="gitops", namespace=pair.namespace
        )
    )
    fake, real = pair.outcomes(
        lambda r: r.apply(
            configmap("own", {"k": "syncer"}), manager="syncer", namespace=pair.namespace
        )
    )
    assert real == (409, "Conflict")
    same(fake, real, "second manager's apply")
    # The same value is shared ownership, not a conflict.
    fake, real = pair.outcomes(
        lambda r: r.apply(configmap("own", {"k": "git"}), manager="other", namespace=pair.namespace)
    )
    assert real == (200, "")
    same(fake, real, "a third manager applying the same value")
    # Forced, the syncer takes the field: git's next apply of its old value conflicts now.
    fake, real = pair.both(
        lambda r: r.apply(
            configmap("own", {"k": "syncer"}),
            manager="syncer",
            namespace=pair.namespace,
            force=True,
        )["data"]
    )
    assert real == {"k": "syncer"}
    same(fake, real, "data after the forced apply")

    def owners(rest: Rest) -> list[str]:
        live = rest.get("v1", "ConfigMap", pair.namespace, "own")
        return sorted(
            m["manager"]
            for m in live["metadata"]["managedFields"]
            if "f:k" in (m.get("fieldsV1") or {}).get("f:data", {})
        )

    fake, real = pair.both(owners)
    assert real == ["syncer"]
    same(fake, real, "owners of data.k after the forced apply")


def test_strict_create_refuses_an_unknown_field(pair: Pair) -> None:
    body = {**configmap("unknown", {"k": "v"}), "spec": {"surprise": True}}
    fake, real = pair.outcomes(lambda r: r.create(body, pair.namespace, fieldValidation="Strict"))
    assert real == (400, "BadRequest")
    same(fake, real, "create with an unknown field")


def test_apply_refuses_an_unknown_field_whatever_the_field_validation(pair: Pair) -> None:
    body = {**configmap("unknown", {"k": "v"}), "spec": {"surprise": True}}
    for strict in (True, False):
        with pytest.raises(RestError, match="field not declared in schema") as refused:
            pair.real.apply(body, manager="gitops", namespace=pair.namespace, strict=strict)
        assert refused.value.status == 500
    fake, real = pair.outcomes(
        lambda r: r.apply(body, manager="gitops", namespace=pair.namespace, strict=False)
    )
    same(fake, real, "apply with an unknown field")


def test_deleting_a_bound_pod_is_graceful(pair: Pair) -> None:
    # Bound to a node no kubelet serves, so nothing finishes the deletion on the real side.
    pair.both(lambda r: r.create(pod("bound", nodeName="ghost-node"), pair.namespace))
    path = f"/api/v1/namespaces/{pair.namespace}/pods/bound"
    pair.both(lambda r: r.delete(path))
    fake, real = pair.both(lambda r: r.get_or_none("v1", "Pod", pair.namespace, "bound"))
    assert real is not None
    assert real["metadata"]["deletionTimestamp"]
    assert real["metadata"]["deletionGracePeriodSeconds"] == 30
    same(fake is not None, True, "the pod still exists after DELETE")
    same(fake["metadata"]["deletionGracePeriodSeconds"], 30, "its grace period")
    # The kubelet's DELETE with grace period 0 ends it on both.
    pair.both(lambda r: r.request("DELETE", path, {"gracePeriodSeconds": 0}))
    fake, real = pair.both(lambda r: r.get_or_none("v1", "Pod", pair.namespace, "bound"))
    assert real is None
    same(fake, real, "the pod after the grace-0 DELETE")


def test_an_unknown_token_is_unauthorized(pair: Pair) -> None:
    stranger_fake = Rest(pair.fake.server, "not-a-token")
    stranger_real = Rest(pair.real.server, "not-a-token", ca=pair.real_ca)
    strangers = Pair(stranger_fake, stranger_real, pair.namespace, pair.real_ca)
    fake, real = strangers.outcomes(lambda r: r.list("v1", "ConfigMap", pair.namespace))
    assert real == (401, "Unauthorized")
    same(fake, real, "a list with an unknown token")


def test_binding_subresource_binds_a_pod(pair: Pair) -> None:
    pair.both(lambda r: r.create(pod("tobind", schedulerName="nobody"), pair.namespace))
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "tobind"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "ghost-node"},
    }
    path = f"/api/v1/namespaces/{pair.namespace}/pods/tobind/binding"
    fake, real = pair.outcomes(lambda r: r.request("POST", path, binding))
    assert real == (200, "")
    bound = pair.real.get("v1", "Pod", pair.namespace, "tobind")
    assert bound["spec"]["nodeName"] == "ghost-node"
    same(fake, real, "POST pods/binding")
    fake_pod = pair.fake.get("v1", "Pod", pair.namespace, "tobind")
    same(fake_pod["spec"]["nodeName"], "ghost-node", "spec.nodeName after the binding")
    scheduled = {c["type"]: c["status"] for c in bound["status"]["conditions"]}
    fake_scheduled = {c["type"]: c["status"] for c in fake_pod["status"]["conditions"]}
    same(fake_scheduled.get("PodScheduled"), scheduled.get("PodScheduled"), "PodScheduled")
    # A second binding of a bound pod is refused on both.
    fake, real = pair.outcomes(lambda r: r.request("POST", path, binding))
    assert real == (409, "Conflict")
    same(fake, real, "binding a bound pod")


def test_list_at_an_older_exact_resource_version(pair: Pair) -> None:
    def run(rest: Rest) -> int:
        rest.create(configmap("v1", {"k": "1"}), pair.namespace)
        listing = rest.request("GET", f"/api/v1/namespaces/{pair.namespace}/configmaps")
        old = listing["metadata"]["resourceVersion"]
        rest.create(configmap("v2", {"k": "2"}), pair.namespace)
        try:
            snapshot = rest.request(
                "GET",
                f"/api/v1/namespaces/{pair.namespace}/configmaps",
                query={"resourceVersion": old, "resourceVersionMatch": "Exact"},
            )
        except RestError as exc:
            return -exc.status
        return len([i for i in snapshot["items"] if i["metadata"]["name"].startswith("v")])

    fake, real = pair.both(run)
    assert real == 1
    same(fake, real, "items at the older resourceVersion (negative: error code)")


def test_a_deleted_namespace_stays_terminating_while_an_object_is_held(pair: Pair) -> None:
    # Both agree when a finalizer holds an object (the fake's README says its namespace
    # deletion is synchronous; that holds only for namespaces nothing holds).
    name = f"gone-{uuid.uuid4().hex[:8]}"
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    pair.both(lambda r: r.create(body))
    # A finalizer holds the ConfigMap, so the real namespace cannot finish before we look.
    held = configmap("held", {"k": "v"})
    held["metadata"]["finalizers"] = ["test.kuberay.io/hold"]
    pair.both(lambda r: r.create(held, name))
    pair.both(lambda r: r.delete(f"/api/v1/namespaces/{name}"))

    def phase(rest: Rest) -> str | None:
        found = rest.get_or_none("v1", "Namespace", None, name)
        return None if found is None else str(found["status"]["phase"])

    try:
        fake, real = pair.both(phase)
        assert real == "Terminating"
        assert fake == real
    finally:
        release = [{"op": "remove", "path": "/metadata/finalizers"}]
        for rest in (pair.fake, pair.real):
            try:
                rest.patch(f"/api/v1/namespaces/{name}/configmaps/held", release, kind="json")
            except RestError as exc:
                if exc.status not in (404, 422):
                    raise


# ---- found by running tests/fakeapi/test_server.py with KUBECONFIG at the real server ---


def test_strategic_merge_order_of_new_keyed_list_items(pair: Pair) -> None:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "svc"},
        "spec": {"selector": {"app": "x"}, "ports": [{"name": "http", "port": 80}]},
    }
    pair.both(lambda r: r.create(service, pair.namespace))
    patch = {"spec": {"ports": [{"name": "metrics", "port": 8080}]}}
    fake, real = pair.both(
        lambda r: [
            p["name"]
            for p in r.patch(
                f"/api/v1/namespaces/{pair.namespace}/services/svc", patch, kind="strategic"
            )["spec"]["ports"]
        ]
    )
    assert real == ["metrics", "http"]
    same(fake, real, "port order after the strategic merge")


def test_every_namespace_gets_the_kube_root_ca_configmap(pair: Pair, real: Real) -> None:
    def names(rest: Rest) -> list[str]:
        return sorted(c["metadata"]["name"] for c in rest.list("v1", "ConfigMap", pair.namespace))

    deadline = time.monotonic() + 30
    while "kube-root-ca.crt" not in names(pair.real) and time.monotonic() < deadline:
        time.sleep(0.2)
    fake, real_names = pair.both(names)
    assert real_names == ["kube-root-ca.crt"]
    same(fake, real_names, "ConfigMaps of a new namespace")


def test_network_policy_policy_types_default(pair: Pair) -> None:
    policy = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "np"},
        "spec": {"podSelector": {}},
    }
    fake, real = pair.both(lambda r: r.create(policy, pair.namespace)["spec"].get("policyTypes"))
    assert real == ["Ingress"]
    same(fake, real, "defaulted policyTypes")


def test_pod_status_patch_applies_labels(pair: Pair) -> None:
    pair.both(lambda r: r.create(pod("st", nodeName="ghost-node"), pair.namespace))
    body = {"metadata": {"labels": {"x": "z"}}, "status": {"phase": "Running"}}
    fake, real = pair.both(
        lambda r: r.patch(f"/api/v1/namespaces/{pair.namespace}/pods/st/status", body)[
            "metadata"
        ].get("labels")
    )
    assert real == {"x": "z"}
    same(fake, real, "labels after a pods/status patch")
