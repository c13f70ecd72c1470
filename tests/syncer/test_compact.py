"""What the informer caches: `compact`'s interned, key-sharing, shared copies of objects.

A cached object must read back exactly as it was given, whatever keys a tenant wrote (a
ConfigMap's data keys may be `__class__` or `__dict__`), while the table of dict shapes
stays bounded; on CPython the compacted dicts are smaller than plain ones (the point).
Equal pod specs, Ready conditions, head Service specs (else their ports) and the ends of
jobs in the same second are one copy, and the table of them stays bounded. A status
record is cached packed with a codebook, and reads back exactly, or not at all when the
bytes are garbled.
"""

from __future__ import annotations

import copy
import json
import sys
import tracemalloc
import zlib
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from syncer import status
from syncer.kube import compact as compacting
from syncer.kube.compact import compact
from syncer.raycluster import views as raycluster_views
from syncer.rayjob import views


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "resourceVersion": "17",
            "uid": f"uid-{name}",
            "labels": {"ray.io/cluster": name, "ray.io/node-type": "head"},
        },
        "status": {"phase": "Running", "ready": True, "ends": {}},
    }


def test_a_compacted_object_reads_back_as_it_was_given() -> None:
    pod = _pod("a")
    kept = compact(copy.deepcopy(pod))
    assert kept == pod
    assert json.dumps(kept, sort_keys=False) == json.dumps(pod, sort_keys=False)  # key order
    assert type(kept) is dict and type(kept["metadata"]["labels"]) is dict


@pytest.mark.parametrize(
    "keys",
    [
        ["__class__", "__dict__", "x"],  # valid ConfigMap data keys: never attributes
        ["__slots__", "__weakref__", "__init__"],
        ["a.b/c", "-", "1"],
        [f"k{i}" for i in range(40)],  # more keys than a shape holds
    ],
)
def test_any_keys_a_tenant_writes_are_kept_as_keys(keys: list[str]) -> None:
    data = {key: f"value-{i}" for i, key in enumerate(keys)}
    first, second = compact(dict(data)), compact(dict(data))
    assert first == data and second == data
    assert list(first) == keys
    assert type(first) is dict


def test_the_shapes_stay_bounded_when_every_object_has_its_own_keys() -> None:
    kept = [
        compact({f"label-{i}": "v", "common": str(i)}) for i in range(compacting._SHAPES_MAX + 500)
    ]
    assert len(compacting._shapes) <= compacting._SHAPES_MAX
    assert all(obj == {f"label-{i}": "v", "common": str(i)} for i, obj in enumerate(kept))


def test_changing_one_compacted_dict_leaves_its_siblings_alone() -> None:
    # (Cached objects are read-only; this is about two dicts of one key-sharing class, not
    # a shared subtree such as this pod's status, which is one object for both.)
    a, b = compact(_pod("a")), compact(_pod("b"))
    a["metadata"]["labels"]["extra"] = "1"
    del a["metadata"]["uid"]
    assert b == _pod("b")
    assert compact(_pod("c")) == _pod("c")


def _traced_bytes(make: Callable[[], object], copies: int = 500) -> int:
    """What `copies` results of `make` hold, as tracemalloc counts it (not sys.getsizeof:
    a key-sharing dict's size there includes a share of its class's keys)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [make() for _ in range(copies)]
        held = tracemalloc.get_traced_memory()[0] - before
        del kept
        return held
    finally:
        tracemalloc.stop()


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="CPython's key-sharing dicts")
def test_compacted_objects_hold_less_memory_than_plain_ones() -> None:
    pod = _pod("a")
    compact(copy.deepcopy(pod))  # each shape's first dict lays down its shared keys
    plain = _traced_bytes(lambda: copy.deepcopy(pod))
    compacted = _traced_bytes(lambda: compact(copy.deepcopy(pod)))
    assert compacted < 0.8 * plain, (compacted, plain)


def _status_map(record: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "a-kuberay-status", "namespace": "ns", "resourceVersion": "3"},
        "data": {status.STATUS_KEY: json.dumps(record, sort_keys=True, separators=(",", ":"))},
    }


def _json_children(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(children, max_size=4) | st.dictionaries(
        st.text(max_size=8), children, max_size=4
    )


_FINISHED = {
    "status": {
        "jobDeploymentStatus": "Complete",
        "jobStatus": "SUCCEEDED",
        "jobId": "sweep-0042-x7k2p",
        "message": "Job finished successfully.",
        "rayClusterName": "sweep-0042-raycluster",
        "startTime": "2026-12-02T19:00:00Z",
        "endTime": "2026-12-02T19:10:11Z",
        "succeeded": 1,
        "failed": 0,
    },
    "syncer": {"runId": "r1", "attempt": 0, "cleanup": ["sweep-0042-raycluster"], "ungated": True},
}


def test_a_cached_status_record_is_packed_small_and_reads_back_exactly() -> None:
    cached = status.slim_status(_status_map(_FINISHED))
    packed = cached["data"][status.STATUS_KEY]
    assert isinstance(packed, bytes)
    text = _status_map(_FINISHED)["data"][status.STATUS_KEY]
    assert len(packed) < 0.75 * len(text)
    assert status.read_record(cached, lambda record: record) == _FINISHED
    again = status.slim_status(cached)  # a cached map projected again stays packed, readable
    assert status.read_record(again, lambda record: record) == _FINISHED


@pytest.mark.parametrize(
    "blob", [b"", b"\x00garbage", zlib.compress(b"{not json"), b"x" * 300, b"\x01\x02\xff"]
)
def test_an_unreadable_packed_record_starts_over_instead_of_failing(blob: bytes) -> None:
    cached = status.slim_status(_status_map(_FINISHED))
    cached["data"][status.STATUS_KEY] = blob
    assert status.read_record(cached, lambda record: record) is None


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(), _json_children))
@settings(max_examples=200, deadline=None)
def test_any_record_reads_back_exactly_from_the_cache(inner: Any) -> None:
    record = {"status": {"message": inner, "padding": "p" * 300}, "syncer": {"runId": "r"}}
    cached = status.slim_status(_status_map(record))
    assert status.read_record(cached, lambda got: got) == record


def test_a_record_written_with_control_characters_is_cached_as_it_is() -> None:
    cm = _status_map(_FINISHED)
    text = cm["data"][status.STATUS_KEY].replace("{", "{\x01", 1)  # not JSON a syncer wrote
    cm["data"][status.STATUS_KEY] = text
    assert status.slim_status(cm)["data"][status.STATUS_KEY] == text


def _job(*conditions: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "sub", "namespace": "ns", "resourceVersion": "9", "uid": "u"},
        "status": {
            "conditions": [
                {"type": kind, "status": "True", "lastTransitionTime": f"2026-12-02T19:0{i}:00Z"}
                for i, kind in enumerate(conditions)
            ]
        },
    }


@pytest.mark.parametrize(
    ("conditions", "kept"),
    [
        (("SuccessCriteriaMet",), ["SuccessCriteriaMet"]),
        (("SuccessCriteriaMet", "Complete"), ["Complete"]),
        (("FailureTarget",), ["FailureTarget"]),
        (("FailureTarget", "Failed"), ["Failed"]),
    ],
)
def test_a_jobs_forerunner_condition_is_not_cached_once_its_final_one_is_there(
    conditions: tuple[str, ...], kept: list[str]
) -> None:
    job = _job(*conditions)
    cached = views.cached_job(copy.deepcopy(job))
    assert [c["type"] for c in cached["status"]["conditions"]] == kept
    everything = {**views.cached_job(copy.deepcopy(job))}
    everything["status"] = {"conditions": job["status"]["conditions"]}  # nothing dropped
    assert views.submitter_view(cached, []) == views.submitter_view(everything, [])
    assert views.job_health(cached) == views.job_health(everything)


def _pod_of(name: str, labels: dict[str, str], container: str, status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "resourceVersion": "5",
            "uid": f"uid-{name}",
            "labels": labels,
        },
        "spec": {"restartPolicy": "Never", "containers": [{"name": container}]},
        "status": status,
    }


def _worker_pod(cluster: str, *, message: str = "") -> dict[str, Any]:
    """A Ray cluster's worker pod, Running and Ready (the RayCluster status reads its IP,
    Ready condition and stopped containers)."""
    ready = {"type": "Ready", "status": "True", "reason": "", "message": message}
    return _pod_of(
        f"{cluster}-small-worker-x1",
        {"ray.io/cluster": cluster, "ray.io/node-type": "worker"},
        "ray-worker",
        {"phase": "Running", "podIP": f"10.0.0.{len(cluster)}", "conditions": [ready]},
    )


def _ended_submitter_pod(job: str, finished_at: str) -> dict[str, Any]:
    """A RayJob's submitter pod whose container ended (as the kubelet reports it)."""
    terminated = {"exitCode": 0, "reason": "Completed", "finishedAt": finished_at}
    return _pod_of(
        f"{job}-x1",
        {"batch.kubernetes.io/job-name": job, "kuberay.io/origin-kind": "RayJob"},
        "ray-job-submitter",
        {
            "phase": "Succeeded",
            "podIP": "10.0.0.9",
            "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted"}],
            "containerStatuses": [
                {"name": "ray-job-submitter", "state": {"terminated": terminated}}
            ],
        },
    )


def _complete_job(job: str, finished_at: str) -> dict[str, Any]:
    """A RayJob's submitter Job that completed at `finished_at`."""
    condition = {"type": "Complete", "status": "True", "lastTransitionTime": finished_at}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job, "namespace": "ns", "resourceVersion": "7", "uid": f"u-{job}"},
        "status": {"conditions": [condition], "completionTime": finished_at, "succeeded": 1},
    }


def _cached(pod: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = compact(views.cached_pod(copy.deepcopy(pod)))
    return result


def test_pods_with_equal_specs_and_ready_conditions_share_one_copy_of_each() -> None:
    a, b = _cached(_worker_pod("a")), _cached(_worker_pod("b"))
    assert a["spec"] is b["spec"]
    assert a["status"]["readyCondition"] is b["status"]["readyCondition"]
    assert a["status"] is not b["status"]  # their own IPs
    assert a == views.cached_pod(_worker_pod("a"))  # reads back as projected
    other = _cached(_worker_pod("c", message="probe failed"))
    assert other["status"]["readyCondition"] is not a["status"]["readyCondition"]
    assert other["status"]["readyCondition"]["message"] == "probe failed"


def test_a_submitter_pod_keeps_its_end_and_not_what_only_a_ray_clusters_pods_need() -> None:
    pod = _ended_submitter_pod("a", "2026-12-07T10:00:00Z")
    kept = _cached(pod)
    assert kept["status"] == {
        "phase": "Succeeded",
        "ready": False,
        "ends": {
            "ray-job-submitter": {
                "exitCode": 0,
                "reason": "Completed",
                "finishedAt": "2026-12-07T10:00:00Z",
            }
        },
    }
    assert views.pod_view(kept, sidecar="ray-job-submitter").sidecar_reason == "Completed"
    # The same pod in a Ray cluster keeps its IP, Ready condition and stopped containers.
    pod["metadata"]["labels"]["ray.io/cluster"] = "c"
    in_cluster = _cached(pod)["status"]
    assert in_cluster["podIP"] == "10.0.0.9"
    assert in_cluster["readyCondition"]["reason"] == "PodCompleted"
    assert in_cluster["containerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"


def test_jobs_and_pods_ending_in_the_same_second_share_their_ends() -> None:
    second = "2026-12-07T10:00:00Z"
    jobs = [compact(views.cached_job(_complete_job(n, second))) for n in ("a", "b")]
    assert jobs[0]["status"] is jobs[1]["status"]
    assert jobs[0]["status"] == {
        "conditions": [
            {
                "type": "Complete",
                "status": "True",
                "reason": None,
                "message": None,
                "lastTransitionTime": second,
            }
        ],
        "completionTime": second,
    }
    later = compact(views.cached_job(_complete_job("c", "2026-12-07T10:00:01Z")))
    assert later["status"] is not jobs[0]["status"]
    assert views.submitter_view(later, []).complete
    pods = [_cached(_ended_submitter_pod(n, second)) for n in ("a", "b")]
    assert pods[0]["status"] is pods[1]["status"]
    other = _cached(_ended_submitter_pod("c", "2026-12-07T10:00:01Z"))
    assert other["status"] is not pods[0]["status"]
    assert other["status"]["ends"]["ray-job-submitter"]["finishedAt"] == "2026-12-07T10:00:01Z"
    # Running submitter pods (no end yet, no IP kept) share one status too.
    running = []
    for name in ("d", "e"):
        pod = _ended_submitter_pod(name, second)
        pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        running.append(_cached(pod))
    assert running[0]["status"] is running[1]["status"] == {"phase": "Running", "ready": True}


def test_values_that_compare_equal_across_types_are_not_shared() -> None:
    compacting.share_shape("test-flag")
    kept = [compact({"test-flag": value}) for value in (True, 1, 1.0, "1", None, False, 0)]
    assert [type(k["test-flag"]) for k in kept] == [bool, int, float, str, type(None), bool, int]
    assert compact({"test-flag": True}) is kept[0]


def test_a_tenant_writing_a_new_message_on_every_pod_keeps_the_table_bounded() -> None:
    pods = [_cached(_worker_pod("a", message=f"m{i}")) for i in range(compacting._SHARED_MAX + 50)]
    assert len(compacting._shared) <= compacting._SHARED_MAX
    assert [p["status"]["readyCondition"]["message"] for p in pods] == [
        f"m{i}" for i in range(compacting._SHARED_MAX + 50)
    ]
    # what is shared again after the table started over is equal to what it was
    assert _cached(_worker_pod("z"))["spec"] == _worker_pod("z")["spec"]


def test_a_subtree_too_big_to_share_is_kept_whole_and_unshared() -> None:
    long = "x" * (compacting._SHARED_TEXT_MAX + 1)
    first, second = (_cached(_worker_pod(job, message=long)) for job in ("a", "b"))
    assert first["status"]["readyCondition"] is not second["status"]["readyCondition"]
    assert first["status"]["readyCondition"]["message"] == long
    many = {
        "restartPolicy": "Never",
        "containers": [{"name": f"c{i}"} for i in range(compacting._SHARED_LEAVES_MAX)],
    }
    one, two = compact(copy.deepcopy(many)), compact(copy.deepcopy(many))
    assert one == many and one is not two


def _head_service(cluster: str, *, cluster_ip: str = "None") -> dict[str, Any]:
    """A rendered head Service as the API server returns it (targetPort defaulted)."""
    ports = [("client", 10001), ("dashboard", 8265), ("gcs-server", 6379), ("metrics", 8080)]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": f"{cluster}-head-svc",
            "namespace": "ns",
            "resourceVersion": "9",
            "uid": f"uid-{cluster}",
            "labels": {"ray.io/cluster": cluster, "ray.io/node-type": "head"},
        },
        "spec": {
            "clusterIP": cluster_ip,
            "ports": [{"name": n, "port": p, "protocol": "TCP", "targetPort": p} for n, p in ports],
        },
    }


def _cached_service(svc: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = compact(raycluster_views.cached_service(copy.deepcopy(svc)))
    return result


def test_head_services_share_their_spec_or_else_their_ports() -> None:
    a, b = _cached_service(_head_service("a")), _cached_service(_head_service("b"))
    assert a["spec"] is b["spec"]  # headless: one spec for every head Service
    assert a == raycluster_views.cached_service(_head_service("a"))  # reads back as projected
    assert a["spec"]["ports"][1] == {"name": "dashboard", "port": 8265, "targetPort": 8265}
    # A ClusterIP Service has its own address, and still shares each port.
    c = _cached_service(_head_service("c", cluster_ip="10.96.0.7"))
    d = _cached_service(_head_service("d", cluster_ip="10.96.0.8"))
    assert c["spec"] is not d["spec"]
    assert all(p is q for p, q in zip(c["spec"]["ports"], d["spec"]["ports"], strict=True))
    assert c["spec"]["clusterIP"] == "10.96.0.7" and d["spec"]["clusterIP"] == "10.96.0.8"


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="CPython's key-sharing dicts")
@pytest.mark.parametrize(
    ("cached", "make", "bound"),
    [(_cached, _worker_pod, 0.8), (_cached_service, _head_service, 0.6)],
    ids=["worker-pods", "head-services"],
)
def test_shared_subtrees_make_a_thousand_cached_objects_smaller(
    cached: Callable[[dict[str, Any]], object],
    make: Callable[[str], dict[str, Any]],
    bound: float,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    objects = iter(make(f"o-{i:05d}") for i in range(2000))
    shared = _traced_bytes(lambda: cached(next(objects)), copies=1000)
    monkeypatch.setattr(compacting, "_shared_shapes", set())
    unshared = _traced_bytes(lambda: cached(next(objects)), copies=1000)
    assert shared < bound * unshared, (shared, unshared)


def test_a_running_jobs_empty_status_is_not_cached_and_reads_the_same() -> None:
    running = {"metadata": {"name": "sub", "namespace": "ns", "uid": "u"}, "status": {"active": 1}}
    cached = views.cached_job(copy.deepcopy(running))
    assert "status" not in cached
    assert views.job_health(cached) == views.job_health(running)
    assert views.submitter_view(cached, []) == views.submitter_view(running, [])
