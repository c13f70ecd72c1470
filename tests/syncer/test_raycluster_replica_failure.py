"""`ReplicaFailure` end to end: a failed worker whose delete the API server refuses.

On the fake API server with fault injection: a worker of a ready cluster is evicted; the
syncer's delete of it is refused (an admission webhook's 403) for as long as the test
keeps the fault; the status ConfigMap then carries KubeRay's `ReplicaFailure` condition
(`status: True`, reason `FailedDeleteWorkerPod`, message the marker, a newline and the
error), across the retries of its backoff, with a Warning Event; once the fault is
removed the next delete succeeds, the condition is removed (KubeRay removes it after a
reconcile without error), and the GitOps tool's self-heal restores the worker.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from syncer.kube.client import EVENTS, PODS
from syncer.raycluster import reconciler as raycluster
from syncer.raycluster.healing import Backoff
from tests.fakeapi.fixtures import KubeApi
from tests.syncer.harness import apply, wait_until
from tests.syncer.test_raycluster_reconciler import NAME, Manifest, Rig, make_rig, ready

DENIED = 'admission webhook "protect.example" denied the request: pod deletes are frozen'


@pytest.fixture
def rig(kube_api: KubeApi) -> Iterator[Rig]:
    rig = make_rig(kube_api, options=raycluster.Options(debounce_s=0.1, backoff=Backoff(0.5, 0.5)))
    yield rig
    rig.syncer.stop()
    rig.controllers.stop()


def condition(rig: Rig, kind: str) -> Manifest | None:
    found = {c["type"]: c for c in rig.status().get("conditions", [])}
    return found.get(kind)


def replica_events(rig: Rig) -> list[Manifest]:
    events = [e for e in rig.kube.list(EVENTS, rig.namespace)[0] if e["reason"] == "ReplicaFailure"]
    return sorted(events, key=lambda e: str(e.get("eventTime") or e.get("firstTimestamp")))


def test_a_refused_delete_sets_replica_failure_until_a_delete_succeeds(
    rig: Rig, kube_api: KubeApi
) -> None:
    apply(rig.kube, rig.objects, rig.namespace)
    rig.controllers.start(interval=0.05)
    rig.syncer.start()
    wait_until(lambda: ready(rig), what="state ready")
    assert condition(rig, "ReplicaFailure") is None
    worker = rig.pods("worker")[0]["metadata"]["name"]
    faults, audit = kube_api.fake.faults, kube_api.fake.audit
    rule = faults.fail(403, verb="delete", resource="pods", name=worker, times=None, message=DENIED)
    since = audit.mark()
    rig.controllers.kubelet.set_phase(rig.namespace, worker, "Failed", reason="Evicted")

    failure = wait_until(lambda: condition(rig, "ReplicaFailure"), what="ReplicaFailure set")
    assert failure["status"] == "True"
    assert failure["reason"] == "FailedDeleteWorkerPod"
    marker, _, detail = failure["message"].partition("\n")
    assert marker == "FailedDeleteWorkerPod"
    assert worker in detail and DENIED in detail
    cm = rig.status_cm()
    assert cm is not None and cm["data"]["replicaFailure"] == "True"
    warning = wait_until(lambda: rig.events("ReplicaFailure"), what="the ReplicaFailure Event")
    assert warning[0]["type"] == "Warning"
    # It stands across the backoff's passes and the retried deletes, as KubeRay's does
    # (every reconcile retries and fails again): passes while the pod waits out its
    # backoff (made by pod events: an unrelated label) do not remove it.
    for i in range(8):
        rig.kube.patch(PODS, rig.namespace, worker, {"metadata": {"labels": {"poke": str(i)}}})
        time.sleep(0.1)
    wait_until(lambda: rule.hits >= 3, what="two more refused deletes")
    again = condition(rig, "ReplicaFailure")
    assert again is not None and again["status"] == "True"
    assert again["lastTransitionTime"] == failure["lastTransitionTime"]
    assert rig.kube.get(PODS, rig.namespace, worker) is not None
    assert rig.status()["state"] == "ready"  # KubeRay never moves ready back
    # Never removed in between: one Warning, no "cleared" while the fault stands.
    assert [e["message"] for e in replica_events(rig)] == [
        f"RayCluster {NAME}: ReplicaFailure is True: FailedDeleteWorkerPod"
    ]

    faults.remove(rule)
    wait_until(lambda: rig.kube.get(PODS, rig.namespace, worker) is None, what="the delete")
    wait_until(lambda: condition(rig, "ReplicaFailure") is None, what="ReplicaFailure removed")
    assert rig.status_cm()["data"]["replicaFailure"] == ""  # type: ignore[index]
    cleared = wait_until(
        lambda: [
            e
            for e in rig.kube.list(EVENTS, rig.namespace)[0]
            if e.get("reason") == "ReplicaFailure" and "cleared" in e.get("message", "")
        ],
        what="the cleared Event",
    )
    assert cleared
    assert rig.self_heal() == 1
    wait_until(lambda: rig.status().get("availableWorkerReplicas") == 2, what="2 available again")
    deletes = [r for r in audit.writes(resource="pods", since=since) if r.verb == "delete"]
    refused = rule.hits
    print(f"refused_deletes={refused} deletes={len(deletes)}")  # noqa: T201 - the measured numbers
    assert {r.name for r in deletes} == {worker}  # nothing else was deleted
    assert rig.status()["state"] == "ready"
