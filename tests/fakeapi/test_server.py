"""The fake API server against the official `kubernetes` client (or a real cluster via KUBECONFIG).

Tests that need fault injection, compaction or direct object access use `kube_api.fake`,
which skips them on a real cluster.
"""

import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest
import urllib3
from kubernetes import client
from kubernetes.client import ApiException
from kubernetes.informer import SharedInformer

from tests.fakeapi.fixtures import KubeApi, WatchStream, close_api_client, new_api_client
from tests.fakeapi.server import FakeApiServer
from tests.fakeapi.store import ROOT_CA_CONFIGMAP as ROOT_CA

pytestmark = pytest.mark.timeout(30)

Manifest = dict[str, Any]
ROOT = Path(__file__).resolve().parents[2]


def _meta(name: str, **fields: Any) -> client.V1ObjectMeta:
    return client.V1ObjectMeta(name=name, **fields)


# Every namespace holds the root CA ConfigMap (real and fake): tests list their own objects.
OWN = f"metadata.name!={ROOT_CA}"


def _cm(name: str, data: dict[str, str] | None = None, **meta: Any) -> client.V1ConfigMap:
    return client.V1ConfigMap(metadata=_meta(name, **meta), data=data or {"k": "v"})


def _pod(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    gates: list[str] | None = None,
    owners: list[client.V1OwnerReference] | None = None,
) -> client.V1Pod:
    return client.V1Pod(
        metadata=_meta(name, labels=labels, owner_references=owners),
        spec=client.V1PodSpec(
            restart_policy="Never",
            containers=[
                client.V1Container(name="main", image="busybox:1.36", command=["sleep", "3600"])
            ],
            scheduling_gates=[client.V1PodSchedulingGate(name=g) for g in gates or []] or None,
        ),
    )


def _status(exc: ApiException) -> Manifest:
    return cast(Manifest, json.loads(exc.body or "{}"))


def _error(call: Callable[[], object]) -> ApiException:
    with pytest.raises(ApiException) as caught:
        call()
    return caught.value


def _eventually(check: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll `check` (a real cluster's controllers act asynchronously; the fake acts at once)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.05)


def _gone(read: Callable[[], object]) -> bool:
    try:
        read()
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def _served(kube_api: KubeApi, group_version: str, plural: str) -> bool:
    try:
        group, version = group_version.split("/")
        resources = client.CustomObjectsApi(kube_api.api_client).get_api_resources(group, version)
    except ApiException:
        return False
    return any(r.name == plural for r in resources.resources)


# ----------------------------------------------------------------- discovery and CRUD


def test_discovery_and_version_work_with_the_client(kube_api):
    version = client.VersionApi(kube_api.api_client).get_code()
    assert version.git_version.startswith("v1.")
    assert "v1" in client.CoreApi(kube_api.api_client).get_api_versions().versions
    groups = {g.name for g in client.ApisApi(kube_api.api_client).get_api_versions().groups}
    assert {
        "batch",
        "coordination.k8s.io",
        "networking.k8s.io",
        "rbac.authorization.k8s.io",
    } <= groups
    resources = client.BatchV1Api(kube_api.api_client).get_api_resources().resources
    assert {"jobs", "jobs/status"} <= {r.name for r in resources}


def test_health_endpoints(kube_api):
    server = kube_api.fake
    for path in ("/healthz", "/readyz"):
        with urllib.request.urlopen(server.url + path) as response:
            assert response.read() == b"ok"


def test_configmap_crud(kube_api):
    core, ns = kube_api.core, kube_api.namespace
    created = core.create_namespaced_config_map(ns, _cm("one", {"a": "1"}))
    assert created.metadata.uid
    assert created.metadata.creation_timestamp is not None
    assert int(created.metadata.resource_version) > 0
    assert core.read_namespaced_config_map("one", ns).data == {"a": "1"}
    created.data = {"a": "2"}
    replaced = core.replace_namespaced_config_map("one", ns, created)
    assert replaced.data == {"a": "2"}
    assert int(replaced.metadata.resource_version) > int(created.metadata.resource_version)
    assert [
        c.metadata.name for c in core.list_namespaced_config_map(ns, field_selector=OWN).items
    ] == ["one"]
    core.delete_namespaced_config_map("one", ns)
    assert _error(lambda: core.read_namespaced_config_map("one", ns)).status == 404


def test_create_existing_is_already_exists(kube_api):
    core, ns = kube_api.core, kube_api.namespace
    core.create_namespaced_config_map(ns, _cm("dup"))
    exc = _error(lambda: core.create_namespaced_config_map(ns, _cm("dup")))
    assert exc.status == 409
    assert _status(exc)["reason"] == "AlreadyExists"
    assert _status(exc)["kind"] == "Status"


def test_generate_name_appends_five_characters(kube_api):
    created = kube_api.core.create_namespaced_config_map(
        kube_api.namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(generate_name="gen-"))
    )
    assert created.metadata.name.startswith("gen-")
    assert len(created.metadata.name) == len("gen-") + 5


def test_create_in_missing_namespace_is_not_found(kube_api):
    exc = _error(lambda: kube_api.core.create_namespaced_config_map("no-such-ns-x1", _cm("a")))
    assert exc.status == 404


def test_invalid_names_and_labels_are_rejected(kube_api):
    core, ns = kube_api.core, kube_api.namespace
    exc = _error(lambda: core.create_namespaced_config_map(ns, _cm("Bad_Name")))
    assert exc.status == 422
    assert _status(exc)["reason"] == "Invalid"
    exc = _error(lambda: core.create_namespaced_config_map(ns, _cm("a", labels={"k": "not ok!"})))
    assert exc.status == 422
    exc = _error(
        lambda: core.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=_meta("")))
    )
    assert exc.status == 422


def test_non_string_label_value_is_bad_request(kube_api):
    rest = kube_api.api_client
    body = {"metadata": {"name": "x", "labels": {"n": 1}}}
    serialized = rest.param_serialize(
        method="POST",
        resource_path=f"/api/v1/namespaces/{kube_api.namespace}/configmaps",
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        body=body,
        auth_settings=["BearerToken"],
    )
    assert rest.call_api(*serialized).status == 400


def test_list_items_of_builtin_kinds_have_no_type_fields(kube_api):
    kube_api.core.create_namespaced_config_map(kube_api.namespace, _cm("a"))
    raw = kube_api.core.list_namespaced_config_map(kube_api.namespace, _preload_content=False)
    listed = json.loads(raw.data)
    assert listed["kind"] == "ConfigMapList"
    assert "kind" not in listed["items"][0]
    assert listed["metadata"]["resourceVersion"]


# ----------------------------------------------------------------- optimistic concurrency


def test_update_with_stale_resource_version_conflicts(kube_api):
    core, ns = kube_api.core, kube_api.namespace
    first = core.create_namespaced_config_map(ns, _cm("cc"))
    first.data = {"k": "first"}
    core.replace_namespaced_config_map("cc", ns, first)
    first.data = {"k": "second"}
    exc = _error(lambda: core.replace_namespaced_config_map("cc", ns, first))
    assert exc.status == 409
    assert _status(exc)["reason"] == "Conflict"
    assert core.read_namespaced_config_map("cc", ns).data == {"k": "first"}


def test_patch_carrying_resource_version_is_a_precondition(kube_api):
    core, ns = kube_api.core, kube_api.namespace
    created = core.create_namespaced_config_map(ns, _cm("pp"))
    stale = created.metadata.resource_version
    core.patch_namespaced_config_map("pp", ns, {"data": {"k": "1"}})
    stale_patch = {"metadata": {"resourceVersion": stale}, "data": {"k": "2"}}
    for content_type in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
        with pytest.raises(ApiException) as caught:
            core.patch_namespaced_config_map("pp", ns, stale_patch, _content_type=content_type)
        assert caught.value.status == 409
    current = core.read_namespaced_config_map("pp", ns).metadata.resource_version
    patched = core.patch_namespaced_config_map(
        "pp", ns, {"metadata": {"resourceVersion": current}, "data": {"k": "3"}}
    )
    assert patched.data == {"k": "3"}


def test_no_op_update_keeps_resource_version(kube_api):
    core, ns = kube_api.core, kube_api.namespace
    created = core.create_namespaced_config_map(ns, _cm("noop", {"a": "1"}))
    patched = core.patch_namespaced_config_map("noop", ns, {"data": {"a": "1"}})
    assert patched.metadata.resource_version == created.metadata.resource_version


def test_two_lease_contenders_one_wins(kube_api):
    ns = kube_api.namespace
    second_client = new_api_client(kube_api.kubeconfig)
    try:
        apis = [kube_api.coordination, client.CoordinationV1Api(second_client)]
        outcomes = []
        for i, api in enumerate(apis):
            lease = client.V1Lease(
                metadata=_meta("leader"),
                spec=client.V1LeaseSpec(
                    holder_identity=f"candidate-{i}", lease_duration_seconds=15
                ),
            )
            try:
                api.create_namespaced_lease(ns, lease)
                outcomes.append("created")
            except ApiException as exc:
                outcomes.append(str(exc.status))
        assert outcomes == ["created", "409"]
        seen = [api.read_namespaced_lease("leader", ns) for api in apis]
        results = []
        for i, (api, lease) in enumerate(zip(apis, seen, strict=True)):
            lease.spec.holder_identity = f"taker-{i}"
            try:
                api.replace_namespaced_lease("leader", ns, lease)
                results.append("ok")
            except ApiException as exc:
                results.append(str(exc.status))
        assert results == ["ok", "409"]
        assert (
            kube_api.coordination.read_namespaced_lease("leader", ns).spec.holder_identity
            == "taker-0"
        )
    finally:
        close_api_client(second_client)


# ----------------------------------------------------------------- patch types


def test_merge_patch_deletes_keys_with_null(kube_api):
    core, ns = kube_api.core, kube_api.namespace
    core.create_namespaced_config_map(ns, _cm("mp", {"a": "1", "b": "2"}, labels={"x": "1"}))
    patched = core.patch_namespaced_config_map(
        "mp",
        ns,
        {"data": {"a": None, "c": "3"}, "metadata": {"labels": {"y": "2"}}},
        _content_type="application/merge-patch+json",
    )
    assert patched.data == {"b": "2", "c": "3"}
    assert patched.metadata.labels == {"x": "1", "y": "2"}


def test_json_patch_and_failed_test_operation(kube_api):
    core, ns = kube_api.core, kube_api.namespace
    core.create_namespaced_config_map(ns, _cm("jp", {"a": "1"}))
    patched = core.patch_namespaced_config_map(
        "jp",
        ns,
        [
            {"op": "test", "path": "/data/a", "value": "1"},
            {"op": "replace", "path": "/data/a", "value": "2"},
            {"op": "add", "path": "/data/b", "value": "3"},
            {"op": "add", "path": "/metadata/labels", "value": {"l": "v"}},
        ],
    )
    assert patched.data == {"a": "2", "b": "3"}
    assert patched.metadata.labels == {"l": "v"}
    exc = _error(
        lambda: core.patch_namespaced_config_map(
            "jp",
            ns,
            [{"op": "test", "path": "/data/a", "value": "1"}, {"op": "remove", "path": "/data/a"}],
        )
    )
    assert exc.status == 422
    assert core.read_namespaced_config_map("jp", ns).data == {"a": "2", "b": "3"}


def test_strategic_merge_patch_merges_keyed_lists(kube_api):
    core, ns = kube_api.core, kube_api.namespace
    service = client.V1Service(
        metadata=_meta("svc"),
        spec=client.V1ServiceSpec(
            selector={"app": "x"}, ports=[client.V1ServicePort(name="http", port=80)]
        ),
    )
    created = core.create_namespaced_service(ns, service)
    assert created.spec.cluster_ip
    patched = core.patch_namespaced_service(
        "svc", ns, {"spec": {"ports": [{"name": "metrics", "port": 8080}]}}
    )
    # A new keyed item goes first, as on the real server.
    assert [(p.name, p.port) for p in patched.spec.ports] == [("metrics", 8080), ("http", 80)]
    assert patched.spec.cluster_ip == created.spec.cluster_ip
    merge = core.patch_namespaced_service(
        "svc",
        ns,
        {"spec": {"ports": [{"name": "only", "port": 9000}]}},
        _content_type="application/merge-patch+json",
    )
    assert [p.name for p in merge.spec.ports] == ["only"]


def test_strategic_merge_patch_on_pod_conditions_merges_by_type(kube_api):
    core, ns = kube_api.core, kube_api.namespace
    core.create_namespaced_pod(ns, _pod("cond"))
    core.patch_namespaced_pod_status(
        "cond", ns, {"status": {"conditions": [{"type": "example.com/A", "status": "True"}]}}
    )
    patched = core.patch_namespaced_pod_status(
        "cond", ns, {"status": {"conditions": [{"type": "example.com/B", "status": "False"}]}}
    )
    # (On a real cluster the scheduler adds its own PodScheduled condition too.)
    ours = {c.type: c.status for c in patched.status.conditions if c.type.startswith("example")}
    assert ours == {"example.com/A": "True", "example.com/B": "False"}


def test_server_side_apply_creates_updates_and_records_managers(kube_api):
    core, ns = kube_api.core, kube_api.namespace
    apply = "application/apply-patch+yaml"
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "ssa"},
        "data": {"a": "1", "b": "2"},
    }
    created = core.patch_namespaced_config_map(
        "ssa", ns, body, field_manager="gitops", _content_type=apply
    )
    assert created.data == {"a": "1", "b": "2"}
    core.patch_namespaced_config_map("ssa", ns, {"data": {"c": "3"}}, field_manager="other")
    body["data"] = {"a": "1"}
    reapplied = core.patch_namespaced_config_map(
        "ssa", ns, body, field_manager="gitops", _content_type=apply
    )
    assert reapplied.data == {"a": "1", "c": "3"}  # b was only applied by gitops, so it goes
    managers = {(m.manager, m.operation) for m in reapplied.metadata.managed_fields}
    assert {("gitops", "Apply"), ("other", "Update")} <= managers
    again = core.patch_namespaced_config_map(
        "ssa", ns, body, field_manager="gitops", _content_type=apply
    )
    assert again.metadata.resource_version == reapplied.metadata.resource_version
    exc = _error(lambda: core.patch_namespaced_config_map("ssa", ns, body, _content_type=apply))
    assert exc.status in (400, 422)


def test_server_side_apply_of_another_managers_field_conflicts_unless_forced(kube_api):
    core, ns = kube_api.core, kube_api.namespace
    apply = "application/apply-patch+yaml"

    def body(value: str) -> Manifest:
        meta = {"name": "own"}
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": value}}

    core.patch_namespaced_config_map(
        "own", ns, body("git"), field_manager="gitops", _content_type=apply
    )
    exc = _error(
        lambda: core.patch_namespaced_config_map(
            "own", ns, body("mine"), field_manager="syncer", _content_type=apply
        )
    )
    refused = json.loads(exc.body or "{}")
    assert (exc.status, refused["reason"]) == (409, "Conflict")
    assert refused["details"]["causes"][0]["field"] == ".data.k"
    forced = core.patch_namespaced_config_map(
        "own", ns, body("mine"), field_manager="syncer", force=True, _content_type=apply
    )
    assert forced.data == {"k": "mine"}
    owners = [
        m.manager
        for m in forced.metadata.managed_fields
        if "f:k" in (m.fields_v1 or {}).get("f:data", {})
    ]
    assert owners == ["syncer"]


def test_deleting_a_bound_pod_waits_for_its_kubelet(kube_api):
    core, ns = kube_api.core, kube_api.namespace
    pod = _pod("bound")
    assert pod.spec is not None
    pod.spec.node_name = "ghost-node"  # no kubelet serves it, so nothing ends the deletion
    core.create_namespaced_pod(ns, pod)
    core.delete_namespaced_pod("bound", ns)
    terminating = core.read_namespaced_pod("bound", ns)
    assert terminating.metadata.deletion_timestamp is not None
    assert terminating.metadata.deletion_grace_period_seconds == 30
    core.patch_namespaced_pod_status("bound", ns, {"status": {"phase": "Running"}})
    assert core.read_namespaced_pod("bound", ns).metadata.deletion_timestamp is not None
    core.delete_namespaced_pod("bound", ns, grace_period_seconds=0)  # what a kubelet sends
    _eventually(lambda: not core.list_namespaced_pod(ns).items)
    core.create_namespaced_pod(ns, _pod("unbound"))
    core.delete_namespaced_pod("unbound", ns)  # never scheduled: gone at once
    assert _error(lambda: core.read_namespaced_pod("unbound", ns)).status == 404


def test_the_binding_subresource_assigns_a_pod_once(kube_api):
    core, ns = kube_api.core, kube_api.namespace
    pod = _pod("tobind")
    assert pod.spec is not None
    pod.spec.scheduler_name = "nobody"  # a real scheduler must not bind it first
    core.create_namespaced_pod(ns, pod)
    binding = client.V1Binding(
        metadata=_meta("tobind"), target=client.V1ObjectReference(kind="Node", name="ghost-node")
    )
    core.create_namespaced_pod_binding("tobind", ns, binding, _preload_content=False)
    bound = core.read_namespaced_pod("tobind", ns)
    assert bound.spec.node_name == "ghost-node"
    assert {c.type: c.status for c in bound.status.conditions}["PodScheduled"] == "True"
    exc = _error(
        lambda: core.create_namespaced_pod_binding("tobind", ns, binding, _preload_content=False)
    )
    assert exc.status == 409


def test_an_unknown_bearer_token_is_unauthorized(kube_api):
    server = kube_api.fake
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(f"{server.url}/api/v1/namespaces/{kube_api.namespace}/pods")
    request.add_header("Authorization", "Bearer not-a-token")
    with pytest.raises(urllib.error.HTTPError) as caught:
        opener.open(request, timeout=10)
    assert caught.value.code == 401
    caught.value.close()
    token = server.kubeconfig()["users"][0]["user"]["token"]
    request.add_header("Authorization", f"Bearer {token}")
    with opener.open(request, timeout=10) as reply:
        assert reply.status == 200


def test_custom_resources_take_merge_patch_but_not_strategic_merge(kube_api):
    if not _served(kube_api, "gateway.networking.k8s.io/v1", "httproutes"):
        pytest.skip("the Gateway API CRDs are not installed")
    custom, ns = kube_api.custom, kube_api.namespace
    route = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": "route"},
        "spec": {"rules": [{"backendRefs": [{"name": "a", "port": 8000, "weight": 100}]}]},
    }
    created = cast(
        Manifest,
        custom.create_namespaced_custom_object(
            "gateway.networking.k8s.io", "v1", ns, "httproutes", route
        ),
    )
    assert created["metadata"]["generation"] == 1
    rules = [
        {
            "backendRefs": [
                {"name": "a", "port": 8000, "weight": 50},
                {"name": "b", "port": 8000, "weight": 50},
            ]
        }
    ]
    patched = cast(
        Manifest,
        custom.patch_namespaced_custom_object(
            "gateway.networking.k8s.io", "v1", ns, "httproutes", "route", {"spec": {"rules": rules}}
        ),
    )
    # The fields sent (a real server adds the CRD schema's defaults: group, kind, matches).
    sent = [
        {
            "backendRefs": [
                {k: ref[k] for k in ("name", "port", "weight")} for ref in rule["backendRefs"]
            ]
        }
        for rule in patched["spec"]["rules"]
    ]
    assert sent == rules
    assert patched["metadata"]["generation"] == 2
    exc = _error(
        lambda: custom.patch_namespaced_custom_object(
            "gateway.networking.k8s.io",
            "v1",
            ns,
            "httproutes",
            "route",
            {"metadata": {"labels": {"a": "b"}}},
            _content_type="application/strategic-merge-patch+json",
        )
    )
    assert exc.status == 415
    status = cast(
        Manifest,
        custom.patch_namespaced_custom_object_status(
            "gateway.networking.k8s.io",
            "v1",
            ns,
            "httproutes",
            "route",
            {"status": {"parents": []}},
        ),
    )
    assert status["metadata"]["generation"] == 2


# ----------------------------------------------------------------- selectors and pagination


def test_label_selectors(kube_api):
    core, ns = kube_api.core, kube_api.namespace
    for name, labels in [
        ("a", {"app": "ray", "tier": "head"}),
        ("b", {"app": "ray", "tier": "worker"}),
        ("c", {}),
    ]:
        core.create_namespaced_config_map(ns, _cm(name, labels=labels))

    def names(selector: str) -> list[str]:
        return [
            c.metadata.name
            for c in core.list_namespaced_config_map(
                ns, label_selector=selector, field_selector=OWN
            ).items
        ]

    assert names("app=ray") == ["a", "b"]
    assert names("app==ray,tier!=head") == ["b"]
    assert names("tier!=head") == ["b", "c"]
    assert names("tier in (head,worker)") == ["a", "b"]
    assert names("tier notin (worker)") == ["a", "c"]
    assert names("tier") == ["a", "b"]
    assert names("!tier") == ["c"]


def test_field_selectors_and_unsupported_field(kube_api):
    core, ns = kube_api.core, kube_api.namespace
    for name in ("p1", "p2"):
        core.create_namespaced_pod(ns, _pod(name))
    by_name = core.list_namespaced_pod(ns, field_selector="metadata.name=p2").items
    assert [p.metadata.name for p in by_name] == ["p2"]
    none_running = core.list_namespaced_pod(ns, field_selector="status.phase=Running").items
    assert [p.metadata.name for p in none_running] == []
    assert (
        _error(lambda: core.list_namespaced_pod(ns, field_selector="spec.containers=x")).status
        == 400
    )


def test_list_pagination_with_limit_and_continue(kube_api):
    core, ns = kube_api.core, kube_api.namespace
    for i in range(5):
        core.create_namespaced_config_map(ns, _cm(f"page-{i}"))
    seen: list[str] = []
    token = None
    pages = 0
    while True:
        page = core.list_namespaced_config_map(ns, limit=2, _continue=token, field_selector=OWN)
        seen += [c.metadata.name for c in page.items]
        pages += 1
        token = page.metadata.var_continue
        if not token:
            break
    assert seen == [f"page-{i}" for i in range(5)]
    assert pages == 3


def test_deletecollection_with_label_selector(kube_api):
    core, ns = kube_api.core, kube_api.namespace
    for name, tier in [("a", "x"), ("b", "x"), ("c", "y")]:
        core.create_namespaced_config_map(ns, _cm(name, labels={"tier": tier}))
    core.delete_collection_namespaced_config_map(ns, label_selector="tier=x")
    _eventually(
        lambda: (
            [c.metadata.name for c in core.list_namespaced_config_map(ns, field_selector=OWN).items]
            == ["c"]
        )
    )


# ----------------------------------------------------------------- watch


def _events(kube_api: KubeApi, count: int, **kwargs: Any) -> list[tuple[str, str]]:
    stream = WatchStream()
    got: list[tuple[str, str]] = []
    kwargs.setdefault("field_selector", OWN)
    for event in stream.stream(
        kube_api.core.list_namespaced_config_map, kube_api.namespace, **kwargs
    ):
        got.append((event["type"], event["raw_object"]["metadata"].get("name", "")))
        if len(got) == count:
            stream.stop()
    return got


def test_watch_from_resource_version_replays_missed_events(kube_api):
    core, ns = kube_api.core, kube_api.namespace
    start = core.list_namespaced_config_map(ns).metadata.resource_version
    core.create_namespaced_config_map(ns, _cm("w1"))
    core.patch_namespaced_config_map("w1", ns, {"data": {"k": "2"}})
    core.create_namespaced_config_map(ns, _cm("w2"))
    core.delete_namespaced_config_map("w1", ns)
    events = _events(kube_api, 4, resource_version=start, timeout_seconds=10)
    assert events == [("ADDED", "w1"), ("MODIFIED", "w1"), ("ADDED", "w2"), ("DELETED", "w1")]


def test_watch_without_resource_version_starts_with_current_objects(kube_api):
    kube_api.core.create_namespaced_config_map(kube_api.namespace, _cm("existing"))
    assert _events(kube_api, 1, timeout_seconds=10) == [("ADDED", "existing")]


def test_watch_sees_label_selector_transitions(kube_api):
    core, ns = kube_api.core, kube_api.namespace
    start = core.list_namespaced_config_map(ns).metadata.resource_version
    core.create_namespaced_config_map(ns, _cm("sel"))
    core.patch_namespaced_config_map("sel", ns, {"metadata": {"labels": {"watched": "yes"}}})
    core.patch_namespaced_config_map("sel", ns, {"metadata": {"labels": {"watched": "no"}}})
    events = _events(
        kube_api, 2, resource_version=start, label_selector="watched=yes", timeout_seconds=10
    )
    assert events == [("ADDED", "sel"), ("DELETED", "sel")]


def test_watch_live_events_arrive_while_streaming(kube_api):
    core, ns = kube_api.core, kube_api.namespace
    start = core.list_namespaced_config_map(ns).metadata.resource_version
    got: list[tuple[str, str]] = []

    def consume() -> None:
        got.extend(_events(kube_api, 2, resource_version=start, timeout_seconds=10))

    reader = threading.Thread(target=consume)
    reader.start()
    core.create_namespaced_config_map(ns, _cm("live"))
    core.delete_namespaced_config_map("live", ns)
    reader.join(timeout=15)
    assert got == [("ADDED", "live"), ("DELETED", "live")]


def test_watch_timeout_closes_the_stream(kube_api):
    started = time.monotonic()
    events = list(
        WatchStream().stream(
            kube_api.core.list_namespaced_config_map,
            kube_api.namespace,
            resource_version=kube_api.core.list_namespaced_config_map(
                kube_api.namespace
            ).metadata.resource_version,
            timeout_seconds=1,
        )
    )
    assert events == []
    assert time.monotonic() - started < 10


def test_watch_bookmarks_carry_the_current_resource_version(kube_api):
    server = kube_api.fake
    server.bookmark_interval = 0.05
    core, ns = kube_api.core, kube_api.namespace
    core.create_namespaced_config_map(ns, _cm("bm"))
    current = str(server.resource_version)
    stream = WatchStream()
    for event in stream.stream(
        core.list_namespaced_config_map,
        ns,
        resource_version=current,
        allow_watch_bookmarks=True,
        timeout_seconds=10,
    ):
        assert event["type"] == "BOOKMARK"
        assert event["raw_object"]["metadata"]["resourceVersion"] == current
        stream.stop()


def test_watch_after_compaction_is_gone_and_relist_recovers(kube_api):
    server = kube_api.fake
    core, ns = kube_api.core, kube_api.namespace
    old = core.list_namespaced_config_map(ns).metadata.resource_version
    core.create_namespaced_config_map(ns, _cm("before"))
    server.faults.compact()
    exc = _error(lambda: _events(kube_api, 1, resource_version=old, timeout_seconds=5))
    assert exc.status == 410
    listed = core.list_namespaced_config_map(ns, field_selector=OWN)
    assert [c.metadata.name for c in listed.items] == ["before"]
    core.create_namespaced_config_map(ns, _cm("after"))
    assert _events(
        kube_api, 1, resource_version=listed.metadata.resource_version, timeout_seconds=5
    ) == [("ADDED", "after")]


def test_watch_older_than_history_window_is_gone():
    with FakeApiServer(history_size=3) as server:
        api = client.ApiClient(client.Configuration(host=server.url))
        try:
            core = client.CoreV1Api(api)
            start = str(server.resource_version)
            for i in range(5):
                core.create_namespaced_config_map("default", _cm(f"h{i}"))
            stream = WatchStream().stream(
                core.list_namespaced_config_map,
                "default",
                resource_version=start,
                timeout_seconds=5,
            )
            with pytest.raises(ApiException) as caught:
                next(stream)
            assert caught.value.status == 410
            assert "Expired" in str(caught.value.reason)
        finally:
            close_api_client(api)


def test_exact_list_of_an_old_resource_version_is_served_until_compaction(kube_api):
    core, ns = kube_api.core, kube_api.namespace
    core.create_namespaced_config_map(ns, _cm("older"))
    old = core.list_namespaced_config_map(ns).metadata.resource_version
    core.create_namespaced_config_map(ns, _cm("newer"))
    core.patch_namespaced_config_map("older", ns, {"data": {"k": "changed"}})
    then = core.list_namespaced_config_map(
        ns, resource_version=old, resource_version_match="Exact", field_selector=OWN
    )
    assert then.metadata.resource_version == old
    assert [(c.metadata.name, c.data) for c in then.items] == [("older", {"k": "v"})]
    current = core.list_namespaced_config_map(ns).metadata.resource_version
    exact = core.list_namespaced_config_map(
        ns, resource_version=current, resource_version_match="Exact", field_selector=OWN
    )
    assert [c.metadata.name for c in exact.items] == ["newer", "older"]
    kube_api.fake.compact()  # a real cluster serves old snapshots until etcd compacts
    exc = _error(
        lambda: core.list_namespaced_config_map(
            ns, resource_version=old, resource_version_match="Exact"
        )
    )
    assert exc.status == 410


def test_dry_run_create_stores_nothing(kube_api):
    core, ns = kube_api.core, kube_api.namespace
    created = core.create_namespaced_config_map(ns, _cm("dry"), dry_run="All")
    assert created.metadata.name == "dry"
    assert _error(lambda: core.read_namespaced_config_map("dry", ns)).status == 404


def test_list_continue_token_expires_after_compaction(kube_api):
    server = kube_api.fake
    core, ns = kube_api.core, kube_api.namespace
    for i in range(3):
        core.create_namespaced_config_map(ns, _cm(f"c{i}"))
    token = core.list_namespaced_config_map(ns, limit=1).metadata.var_continue
    core.create_namespaced_config_map(ns, _cm("c3"))
    server.faults.compact()
    assert (
        _error(lambda: core.list_namespaced_config_map(ns, limit=1, _continue=token)).status == 410
    )


# ----------------------------------------------------------------- deletion and garbage collection


def test_finalizers_keep_the_object_until_removed(kube_api):
    core, ns = kube_api.core, kube_api.namespace
    core.create_namespaced_config_map(ns, _cm("fin", finalizers=["example.com/hold"]))
    core.delete_namespaced_config_map("fin", ns)
    held = core.read_namespaced_config_map("fin", ns)
    assert held.metadata.deletion_timestamp is not None
    exc = _error(
        lambda: core.patch_namespaced_config_map(
            "fin", ns, {"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}}
        )
    )
    assert exc.status == 422
    core.patch_namespaced_config_map("fin", ns, {"metadata": {"finalizers": None}})
    _eventually(lambda: _gone(lambda: core.read_namespaced_config_map("fin", ns)))


def _owned(name: str, owner: client.V1ConfigMap) -> client.V1ConfigMap:
    assert owner.metadata is not None
    assert owner.metadata.name is not None
    assert owner.metadata.uid is not None
    ref = client.V1OwnerReference(
        api_version="v1", kind="ConfigMap", name=owner.metadata.name, uid=owner.metadata.uid
    )
    return _cm(name, owner_references=[ref])


def test_deleting_an_owner_deletes_its_dependents(kube_api):
    core, ns = kube_api.core, kube_api.namespace
    owner = core.create_namespaced_config_map(ns, _cm("owner"))
    child = core.create_namespaced_config_map(ns, _owned("child", owner))
    core.create_namespaced_config_map(ns, _owned("grandchild", child))
    core.delete_namespaced_config_map("owner", ns)
    _eventually(lambda: not core.list_namespaced_config_map(ns, field_selector=OWN).items)


def test_orphan_propagation_keeps_dependents(kube_api):
    core, ns = kube_api.core, kube_api.namespace
    owner = core.create_namespaced_config_map(ns, _cm("owner"))
    core.create_namespaced_config_map(ns, _owned("child", owner))
    core.delete_namespaced_config_map("owner", ns, propagation_policy="Orphan")
    _eventually(lambda: not core.read_namespaced_config_map("child", ns).metadata.owner_references)


def test_foreground_deletion_removes_dependents_first(kube_api):
    server = kube_api.fake
    core, ns = kube_api.core, kube_api.namespace
    owner = core.create_namespaced_config_map(ns, _cm("owner"))
    core.create_namespaced_config_map(ns, _owned("child", owner))
    start = core.list_namespaced_config_map(ns).metadata.resource_version
    core.delete_namespaced_config_map("owner", ns, propagation_policy="Foreground")
    events = _events(kube_api, 3, resource_version=start, timeout_seconds=5)
    assert events == [("MODIFIED", "owner"), ("DELETED", "child"), ("DELETED", "owner")]
    assert [o["metadata"]["name"] for o in server.list_objects("configmaps", ns)] == [ROOT_CA]


def test_jobs_orphan_pods_without_a_propagation_policy(kube_api):
    server = kube_api.fake
    ns = kube_api.namespace
    job = kube_api.batch.create_namespaced_job(ns, _job("orphaner"))
    owner = client.V1OwnerReference(
        api_version="batch/v1", kind="Job", name="orphaner", uid=job.metadata.uid
    )
    kube_api.core.create_namespaced_pod(ns, _pod("orphan-pod", owners=[owner]))
    kube_api.batch.delete_namespaced_job("orphaner", ns)
    left = server.get_object("pods", ns, "orphan-pod")
    assert left is not None
    assert "ownerReferences" not in left["metadata"]


def test_delete_precondition_on_uid(kube_api):
    core, ns = kube_api.core, kube_api.namespace
    core.create_namespaced_config_map(ns, _cm("pre"))
    options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="not-the-uid"))
    exc = _error(lambda: core.delete_namespaced_config_map("pre", ns, body=options))
    assert exc.status == 409


@pytest.mark.timeout(120)  # a real namespace controller sweeps every resource type first
def test_deleting_a_namespace_deletes_its_contents(kube_api):
    core = kube_api.core
    core.create_namespace(client.V1Namespace(metadata=_meta(f"{kube_api.namespace}-x")))
    core.create_namespaced_config_map(f"{kube_api.namespace}-x", _cm("inside"))
    core.delete_namespace(f"{kube_api.namespace}-x")
    _eventually(lambda: _gone(lambda: core.read_namespace(f"{kube_api.namespace}-x")), timeout=60)


# ----------------------------------------------------------------- generation and status


def _job(name: str) -> client.V1Job:
    return client.V1Job(
        metadata=_meta(name),
        spec=client.V1JobSpec(
            suspend=True,
            template=client.V1PodTemplateSpec(
                spec=client.V1PodSpec(
                    restart_policy="Never",
                    containers=[
                        client.V1Container(name="main", image="busybox:1.36", command=["true"])
                    ],
                )
            ),
        ),
    )


def test_job_defaults_selector_and_template_labels(kube_api):
    job = kube_api.batch.create_namespaced_job(kube_api.namespace, _job("defaults"))
    uid = job.metadata.uid
    assert job.spec.selector.match_labels == {"batch.kubernetes.io/controller-uid": uid}
    labels = job.spec.template.metadata.labels
    assert labels["batch.kubernetes.io/job-name"] == "defaults"
    assert labels["controller-uid"] == uid
    assert job.spec.backoff_limit == 6
    assert job.metadata.generation == 1


def test_generation_bumps_on_spec_changes_only(kube_api):
    networking, ns = kube_api.networking, kube_api.namespace
    policy = client.V1NetworkPolicy(
        metadata=_meta("np"), spec=client.V1NetworkPolicySpec(pod_selector=client.V1LabelSelector())
    )
    created = networking.create_namespaced_network_policy(ns, policy)
    assert created.metadata.generation == 1
    labelled = networking.patch_namespaced_network_policy(
        "np", ns, {"metadata": {"labels": {"a": "b"}}}
    )
    assert labelled.metadata.generation == 1
    assert created.spec.policy_types == ["Ingress"]  # defaulted, as the real server does
    same = networking.patch_namespaced_network_policy(
        "np", ns, {"spec": {"policyTypes": ["Ingress"]}}
    )
    assert same.metadata.generation == 1  # the default written back: no spec change
    changed = networking.patch_namespaced_network_policy(
        "np", ns, {"spec": {"policyTypes": ["Ingress", "Egress"]}}
    )
    assert changed.metadata.generation == 2


def test_status_subresource_is_separate_from_the_main_resource(kube_api):
    core, ns = kube_api.core, kube_api.namespace
    core.create_namespaced_pod(ns, _pod("st"))
    main = core.patch_namespaced_pod(
        "st", ns, {"metadata": {"labels": {"x": "y"}}, "status": {"phase": "Running"}}
    )
    assert main.status.phase == "Pending"
    assert main.metadata.labels == {"x": "y"}
    status = core.patch_namespaced_pod_status(
        "st", ns, {"metadata": {"labels": {"x": "z"}}, "status": {"phase": "Running"}}
    )
    assert status.status.phase == "Running"
    assert status.metadata.labels == {"x": "z"}  # pods/status keeps only the spec (real server)


def test_scheduling_gates_can_be_removed_but_not_added(kube_api):
    core, ns = kube_api.core, kube_api.namespace
    core.create_namespaced_pod(ns, _pod("gated", gates=["example.com/a", "example.com/b"]))
    patched = core.patch_namespaced_pod(
        "gated", ns, {"spec": {"schedulingGates": [{"name": "example.com/a", "$patch": "delete"}]}}
    )
    assert [g.name for g in patched.spec.scheduling_gates] == ["example.com/b"]
    exc = _error(
        lambda: core.patch_namespaced_pod(
            "gated", ns, {"spec": {"schedulingGates": [{"name": "example.com/new"}]}}
        )
    )
    assert exc.status == 422
    ungated = core.patch_namespaced_pod(
        "gated", ns, [{"op": "remove", "path": "/spec/schedulingGates"}]
    )
    assert not ungated.spec.scheduling_gates


def test_pod_spec_is_immutable_except_images(kube_api):
    core, ns = kube_api.core, kube_api.namespace
    core.create_namespaced_pod(ns, _pod("imm"))
    image = core.patch_namespaced_pod(
        "imm", ns, {"spec": {"containers": [{"name": "main", "image": "busybox:1.37"}]}}
    )
    assert image.spec.containers[0].image == "busybox:1.37"
    exc = _error(
        lambda: core.patch_namespaced_pod("imm", ns, {"spec": {"restartPolicy": "Always"}})
    )
    assert exc.status == 422
    assert _status(exc)["reason"] == "Invalid"


# ----------------------------------------------------------------- fault injection


def test_injected_failures_hit_the_next_matching_requests(kube_api):
    server = kube_api.fake
    core, ns = kube_api.core, kube_api.namespace
    server.faults.fail(500, verb="create", resource="configmaps", times=2)
    assert _error(lambda: core.create_namespaced_config_map(ns, _cm("f"))).status == 500
    assert _error(lambda: core.create_namespaced_config_map(ns, _cm("f"))).status == 500
    core.create_namespaced_config_map(ns, _cm("f"))
    assert server.faults.pending == []


def test_injected_failures_match_name_patterns(kube_api):
    server = kube_api.fake
    core, ns = kube_api.core, kube_api.namespace
    server.faults.fail(503, verb="create", name="bad-*", times=None)
    core.create_namespaced_config_map(ns, _cm("good-1"))
    assert _error(lambda: core.create_namespaced_config_map(ns, _cm("bad-1"))).status == 503
    assert _error(lambda: core.create_namespaced_config_map(ns, _cm("bad-2"))).status == 503


def test_injected_429_carries_retry_after(kube_api):
    server = kube_api.fake
    server.faults.fail(429, verb="list", resource="configmaps", retry_after=3)
    # urllib3 (under the client) would sleep Retry-After and retry by itself; see the raw answer.
    no_retries = client.ApiClient(client.Configuration(host=server.url, retries=False))
    try:
        api = client.CoreV1Api(no_retries)
        exc = _error(lambda: api.list_namespaced_config_map(kube_api.namespace))
    finally:
        close_api_client(no_retries)
    assert exc.status == 429
    assert exc.headers is not None
    assert exc.headers["Retry-After"] == "3"
    assert _status(exc)["details"]["retryAfterSeconds"] == 3


def test_client_retries_a_429_with_retry_after_by_itself(kube_api):
    server = kube_api.fake
    server.faults.fail(429, verb="get", resource="namespaces", retry_after=0)
    assert kube_api.core.read_namespace(kube_api.namespace).metadata.name == kube_api.namespace
    gets = server.audit.records(verb="get", resource="namespaces", name=kube_api.namespace)
    assert [r.code for r in gets] == [429, 200]


def test_injected_conflict_on_patch(kube_api):
    server = kube_api.fake
    core, ns = kube_api.core, kube_api.namespace
    core.create_namespaced_config_map(ns, _cm("c"))
    server.faults.fail(409, verb="patch", resource="configmaps", name="c")
    exc = _error(lambda: core.patch_namespaced_config_map("c", ns, {"data": {"k": "x"}}))
    assert exc.status == 409
    assert _status(exc)["reason"] == "Conflict"
    assert core.patch_namespaced_config_map("c", ns, {"data": {"k": "x"}}).data == {"k": "x"}


def test_injected_latency_delays_matching_requests(kube_api):
    server = kube_api.fake
    server.faults.add_latency(0.3, verb="get", times=1)
    kube_api.core.create_namespaced_config_map(kube_api.namespace, _cm("slow"))
    started = time.monotonic()
    kube_api.core.read_namespaced_config_map("slow", kube_api.namespace)
    assert time.monotonic() - started >= 0.3


@pytest.mark.parametrize("abrupt", [False, True])
def test_dropping_watches_ends_open_streams(kube_api, abrupt):
    server = kube_api.fake
    core, ns = kube_api.core, kube_api.namespace
    core.create_namespaced_config_map(ns, _cm("seen"))
    stream = WatchStream()
    events = stream.stream(
        core.list_namespaced_config_map, ns, timeout_seconds=20, field_selector=OWN
    )
    assert next(events)["type"] == "ADDED"
    assert server.faults.drop_watches(abrupt=abrupt) == 1
    started = time.monotonic()
    if abrupt:
        with pytest.raises(urllib3.exceptions.ProtocolError):
            next(events)
    else:
        assert list(events) == []
    assert time.monotonic() - started < 5


def test_refused_outage_and_recovery(kube_api):
    server = kube_api.fake
    core = kube_api.core
    with server.faults.outage("refused"), pytest.raises(urllib3.exceptions.MaxRetryError):
        core.list_namespace()
    assert core.read_namespace(kube_api.namespace).metadata.name == kube_api.namespace


def test_unavailable_outage_answers_503_and_ends_by_itself(kube_api):
    server = kube_api.fake
    core = kube_api.core
    server.faults.start_outage("unavailable", seconds=0.2)
    assert _error(lambda: core.list_namespace()).status == 503

    def answers() -> bool:
        try:
            return bool(core.list_namespace().items)
        except ApiException as exc:
            if exc.status != 503:
                raise
            return False

    _eventually(answers, timeout=5)


def test_admin_endpoint_injects_faults_over_http(kube_api):
    server = kube_api.fake
    request = urllib.request.Request(
        server.url + "/_fake/faults",
        data=json.dumps({"status": 500, "verb": "get", "resource": "namespaces"}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request) as response:
        assert json.loads(response.read()) == {"ok": True}
    assert _error(lambda: kube_api.core.read_namespace(kube_api.namespace)).status == 500
    assert kube_api.core.read_namespace(kube_api.namespace).metadata.name == kube_api.namespace


def test_audit_log_shows_writes_and_field_managers(kube_api):
    server = kube_api.fake
    core, ns = kube_api.core, kube_api.namespace
    mark = server.audit.mark()
    core.create_namespaced_config_map(ns, _cm("audited"), field_manager="kuberay-syncer")
    core.patch_namespaced_config_map(
        "audited", ns, {"data": {"k": "2"}}, field_manager="kuberay-syncer"
    )
    core.read_namespaced_config_map("audited", ns)
    writes = server.audit.writes(resource="configmaps", namespace=ns, since=mark)
    assert [(w.verb, w.name, w.field_manager, w.code) for w in writes] == [
        ("create", "audited", "kuberay-syncer", 201),
        ("patch", "audited", "kuberay-syncer", 200),
    ]
    assert len(server.audit.records(verb="get", name="audited", since=mark)) == 1


def test_direct_object_access_is_seen_by_clients(kube_api):
    server = kube_api.fake
    ns = kube_api.namespace
    server.put_object(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "direct", "namespace": ns}}
    )
    assert kube_api.core.read_namespaced_config_map("direct", ns).metadata.uid
    assert server.delete_object("configmaps", ns, "direct")
    assert server.get_object("configmaps", ns, "direct") is None


def test_runs_as_a_module_and_prints_its_url(tmp_path):
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.fakeapi.server", "--port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(url + "/version") as response:
            assert json.loads(response.read())["gitVersion"].startswith("v1.")
    finally:
        process.terminate()
        assert process.wait(timeout=10) == 0
        if process.stdout is not None:
            process.stdout.close()


def test_shared_informer_resumes_after_dropped_watches_and_relists_after_compaction(kube_api):
    server = kube_api.fake
    core, ns = kube_api.core, kube_api.namespace
    informer = SharedInformer(core.list_namespaced_config_map, namespace=ns)  # type: ignore[no-untyped-call]  # untyped

    def cached() -> set[str]:
        keys: list[str] = informer.cache.list_keys()
        return {key.split("/")[-1] for key in keys} - {ROOT_CA}

    informer.start()  # type: ignore[no-untyped-call]  # kubernetes.informer is untyped
    try:
        core.create_namespaced_config_map(ns, _cm("i1"))
        _eventually(lambda: cached() == {"i1"})
        lists = len(server.audit.records(verb="list", resource="configmaps", namespace=ns))
        server.faults.drop_watches(abrupt=True)
        core.create_namespaced_config_map(ns, _cm("i2"))
        _eventually(lambda: cached() == {"i1", "i2"})
        # (Whether the upstream informer resumes or relists after an abrupt drop is its own
        # choice and varies with timing; the fake's resume is tested with a plain watch above.)
        core.delete_namespaced_config_map("i1", ns)
        _eventually(lambda: cached() == {"i2"})
        # Hold the reconnecting watch until history it needs has been compacted away.
        server.faults.add_latency(0.5, verb="watch", resource="configmaps", times=1)
        server.faults.drop_watches()
        core.create_namespaced_config_map(ns, _cm("i3"))
        server.faults.compact()
        _eventually(lambda: cached() == {"i2", "i3"})
        assert len(server.audit.records(verb="list", resource="configmaps", namespace=ns)) > lists
    finally:
        _stop_upstream_informer(informer, server)


def _stop_upstream_informer(informer: SharedInformer, server: FakeApiServer) -> None:
    """Stop the client's informer, which blocks in a watch read until its stream ends.

    Its `stop()` only sets a flag the loop checks between events, then joins; with no event
    coming (a loaded machine makes that likely) the join waits forever. Closing the streams
    until the join returns ends the read.
    """
    stopping = threading.Thread(target=informer.stop, daemon=True)
    stopping.start()
    deadline = time.monotonic() + 20
    while stopping.is_alive() and time.monotonic() < deadline:
        server.faults.drop_watches()
        stopping.join(0.2)
    assert not stopping.is_alive(), "the upstream informer did not stop"
