"""A worker of a running RayJob is evicted and recovered, end to end on the fake API server.

The kubelet simulator runs the rendered pods and evicts one worker while the Ray job runs
(the fake dashboard's clock holds it RUNNING); the syncer's RayCluster reconciler deletes
that pod; the test plays the GitOps tool's self-heal (re-create the rendered Pod that is
absent); the kubelet runs it again; then the job is let finish. At each step the
cluster's `<cluster>-kuberay-status` and `kuberay status` are read, and the fake's audit
log shows the syncer deleted exactly one pod, the evicted one, once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from renderer import naming
from syncer.cli import Options, Syncer
from syncer.kube.client import CONFIGMAPS, EVENTS, PODS, KubeClient
from syncer.raycluster import reconciler as raycluster
from syncer.raycluster.healing import Backoff
from syncer.rayjob.machine import Settings
from tests.fakeapi.controllers import Controllers
from tests.fakeapi.fixtures import KubeApi
from tests.manifests import rayjob
from tests.syncer.fakedashboard import FakeDashboard, JobPlan, ManualClock
from tests.syncer.harness import apply, cluster_row, render, self_heal, wait_until

Manifest = dict[str, Any]
JOB = "demo"
RUN_S = 60.0  # the Ray job runs this long on the dashboard's manual clock


@dataclass
class Rig:
    kube: KubeClient
    syncer: Syncer
    dashboard: FakeDashboard
    controllers: Controllers
    api: KubeApi
    objects: list[Manifest]

    @property
    def namespace(self) -> str:
        return self.api.namespace

    def document(self, name: str) -> Manifest:
        cm = self.kube.get(CONFIGMAPS, self.namespace, naming.status_configmap_name(name))
        if cm is None:
            return {}
        status: Manifest = json.loads(cm["data"]["status.json"])["status"]
        return status

    def pod(self, name: str) -> Manifest | None:
        return self.kube.get(PODS, self.namespace, name)

    def phase(self, name: str) -> str | None:
        pod = self.pod(name)
        return None if pod is None else (pod.get("status") or {}).get("phase")

    def self_heal(self) -> list[str]:
        """The GitOps tool's self-heal: re-apply every rendered Pod that is absent."""
        return self_heal(self.kube, self.objects, self.namespace)

    def cluster_table(self, cluster: str) -> list[str]:
        """`kuberay status -n <ns>`: the cluster table's row for `cluster`, split."""
        return cluster_row(self.namespace, str(self.api.kubeconfig), cluster)


@pytest.fixture
def rig(kube_api: KubeApi) -> Iterator[Rig]:
    kube_api.fake  # noqa: B018 - the simulators need the fake server
    kube = KubeClient(kube_api.api_client)
    dashboard = FakeDashboard(ManualClock(), job_plan=JobPlan(pending_s=0.0, running_s=RUN_S))
    options = Options(
        namespaces=(kube_api.namespace,),
        workers=2,
        poll_interval_s=0.2,
        settings=Settings(submitter_finished_timeout_s=30),
        raycluster=raycluster.Options(debounce_s=0.2, backoff=Backoff(0.5, 2.0)),
    )
    syncer = Syncer(kube, options, dashboards=lambda url: dashboard)
    controllers = Controllers(kube_api.api_client, namespace=kube_api.namespace)
    objects = render(rayjob(JOB, mode="HTTPMode", workers=2), kube_api.namespace)
    rig = Rig(kube, syncer, dashboard, controllers, kube_api, objects)
    yield rig
    syncer.stop()
    controllers.stop()


def cluster_step(rig: Rig, cluster: str, available: int) -> Manifest:
    """Wait until the cluster's status shows `available` workers; return that status."""
    return wait_until(  # type: ignore[no-any-return]
        lambda: (
            status
            if (status := rig.document(cluster)).get("availableWorkerReplicas") == available
            else None
        ),
        what=f"{available} available workers of {cluster}",
    )


def conditions(status: Manifest) -> dict[str, str]:
    return {c["type"]: c["status"] for c in status.get("conditions", [])}


def test_an_evicted_worker_of_a_running_job_is_deleted_once_and_self_heal_restores_it(
    rig: Rig,
) -> None:
    intent = json.loads(
        next(o for o in rig.objects if o["metadata"]["name"] == f"{JOB}-kuberay-intent")["data"][
            "intent.json"
        ]
    )
    head = intent["derived"]["headPodName"]
    workers = list(intent["derived"]["workerPodNames"])
    assert len(workers) == 2
    apply(rig.kube, rig.objects, rig.namespace)
    rig.controllers.start(interval=0.05)
    rig.syncer.start()
    job = wait_until(
        lambda: s if (s := rig.document(JOB)).get("jobStatus") == "RUNNING" else None,
        what="the Ray job RUNNING",
    )
    cluster = str(job["rayClusterName"])
    before = cluster_step(rig, cluster, 2)
    assert before["state"] == "ready"
    assert "ReplicaFailure" not in conditions(before)
    assert rig.cluster_table(cluster)[1:4] == [cluster, "2", "2"]

    audit = rig.api.fake.audit
    since = audit.mark()
    victim = workers[0]
    rig.controllers.kubelet.set_phase(
        rig.namespace, victim, "Failed", reason="Evicted", message="low on memory"
    )
    wait_until(lambda: rig.pod(victim) is None, what="the evicted pod deleted")

    def deletion_events() -> list[Manifest] | None:
        # The Event is recorded after the delete's reply: the pod can be seen gone first.
        events, _ = rig.kube.list(EVENTS, rig.namespace)
        found = [e for e in events if e.get("reason") == "DeletedWorkerPod"]
        return found or None

    deleted = wait_until(deletion_events, what="the DeletedWorkerPod Event")
    assert [e["involvedObject"]["name"] for e in deleted] == [victim]
    assert "Evicted" in deleted[0]["message"]
    during = cluster_step(rig, cluster, 1)
    assert during["state"] == "ready"  # KubeRay never moves ready back
    assert during["desiredWorkerReplicas"] == 2
    assert "ReplicaFailure" not in conditions(during)  # the delete succeeded
    assert rig.cluster_table(cluster)[1:4] == [cluster, "2", "1"]
    assert rig.document(JOB)["jobStatus"] == "RUNNING"  # the job runs on meanwhile

    assert rig.self_heal() == [victim]
    wait_until(lambda: rig.phase(victim) == "Running", what="the re-created pod running")
    after = cluster_step(rig, cluster, 2)
    assert after["readyWorkerReplicas"] == 2
    assert after["state"] == "ready"
    assert "ReplicaFailure" not in conditions(after)
    assert rig.cluster_table(cluster)[1:4] == [cluster, "2", "2"]

    rig.dashboard.advance(RUN_S + 1)
    done = wait_until(
        lambda: s if (s := rig.document(JOB)).get("jobDeploymentStatus") == "Complete" else None,
        what="the job Complete",
    )
    assert done["jobStatus"] == "SUCCEEDED"
    assert done["failed"] == 0
    # What must not happen: any other delete, of the head or the other worker, or a second.
    deletes = [r for r in audit.writes(resource="pods", since=since) if r.verb == "delete"]
    print(f"pod_deletes={[(r.name, r.user_agent) for r in deletes]}")  # noqa: T201 - the measured numbers
    status_writes = audit.writes(
        resource="configmaps", name=naming.status_configmap_name(cluster), since=since
    )
    print(f"cluster_status_writes={len(status_writes)}")  # noqa: T201 - the measured numbers
    assert [r.name for r in deletes] == [victim]
    assert len(status_writes) >= 2  # at least 2 -> 1 and 1 -> 2 available workers
    assert rig.syncer.raycluster.healer.stats["deleted"] == 1
    assert rig.pod(head) is not None and rig.phase(head) == "Running"
    assert rig.phase(workers[1]) == "Running"
    assert rig.dashboard.calls["submit_job"] == 1  # the eviction did not cost a resubmission
