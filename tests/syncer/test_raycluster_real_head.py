"""A RayJob's cluster through KubeRay's status steps, with its job on a real Ray head.

Provisioned, then ready, then a worker fails, then `ReplicaFailure`, then recovered: the
fake API server holds the rendered objects, its kubelet plays the pods (their `ray start`
is not run: the session's loopback Ray head is the cluster), and the syncer submits the
HTTPMode job to that real head's dashboard. The job waits for a file, so it runs through
every step. The worker's eviction meets a refused delete (the fake's fault injection, an
admission webhook's 403): the cluster's status carries `ReplicaFailure` until the fault is
lifted, the delete goes through and the GitOps tool's self-heal (played by the test)
brings the worker back. `kuberay status` shows each step; the real job then succeeds,
submitted once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from renderer import naming
from syncer.cli import Options, Syncer
from syncer.kube.client import CONFIGMAPS, PODS, KubeClient
from syncer.ray.dashboard import HttpDashboard
from syncer.raycluster import reconciler as raycluster
from syncer.raycluster.healing import Backoff
from syncer.rayjob.machine import Settings
from tests.e2e.rayhead import RayHead
from tests.fakeapi.controllers import Controllers
from tests.fakeapi.fixtures import KubeApi
from tests.manifests import rayjob
from tests.syncer.harness import apply, cluster_row, render, self_heal, wait_until

Manifest = dict[str, Any]
pytestmark = pytest.mark.e2e
JOB = "lifecycle"
DENIED = 'admission webhook "freeze.example" denied the request: deletes are frozen'
_TIMEOUT_S = 120.0  # the `ray` job driver's start-up on a loaded 2-core machine


@dataclass
class Rig:
    kube: KubeClient
    syncer: Syncer
    controllers: Controllers
    api: KubeApi
    ray: HttpDashboard
    objects: list[Manifest]
    go: Path

    @property
    def namespace(self) -> str:
        return self.api.namespace

    def document(self, name: str) -> Manifest:
        cm = self.kube.get(CONFIGMAPS, self.namespace, naming.status_configmap_name(name))
        if cm is None:
            return {}
        status: Manifest = json.loads(cm["data"]["status.json"])["status"]
        return status

    def conditions(self, cluster: str) -> dict[str, Manifest]:
        return {c["type"]: c for c in self.document(cluster).get("conditions", [])}

    def self_heal(self) -> list[str]:
        return self_heal(self.kube, self.objects, self.namespace)

    def row(self, cluster: str) -> list[str]:
        """`kuberay status`'s cluster row: namespace, name, desired, available, ..., status."""
        return cluster_row(self.namespace, str(self.api.kubeconfig), cluster)


@pytest.fixture
def rig(kube_api: KubeApi, ray_head: RayHead, tmp_path: Path) -> Iterator[Rig]:
    kube_api.fake  # noqa: B018 - the simulators need the fake server
    kube = KubeClient(kube_api.api_client)
    ray = HttpDashboard(ray_head.dashboard_url, timeout=10)
    options = Options(
        namespaces=(kube_api.namespace,),
        workers=2,
        poll_interval_s=0.2,
        settings=Settings(poll_interval_s=0.2),
        raycluster=raycluster.Options(debounce_s=0.2, backoff=Backoff(0.5, 1.0)),
    )
    syncer = Syncer(kube, options, dashboards=lambda url: ray)
    controllers = Controllers(kube_api.api_client, namespace=kube_api.namespace)
    go = tmp_path / "go"
    # The driver waits for the test's go-ahead (iter(f, True) calls f until it is True).
    entrypoint = (
        'python -c "import os, time; [time.sleep(0.2) for _ in '
        f"iter(lambda: os.path.exists('{go}'), True)]; print('done')\""
    )
    objects = render(
        rayjob(JOB, mode="HTTPMode", workers=2, entrypoint=entrypoint), kube_api.namespace
    )
    rig = Rig(kube, syncer, controllers, kube_api, ray, objects, go)
    yield rig
    go.touch()  # let a driver still waiting end
    syncer.stop()
    controllers.stop()


def test_provisioned_ready_replica_failure_recovered_with_the_job_on_a_real_head(rig: Rig) -> None:
    intent = next(o for o in rig.objects if o["metadata"]["name"] == f"{JOB}-kuberay-intent")
    derived = json.loads(intent["data"]["intent.json"])["derived"]
    cluster = str(derived["clusterName"])
    workers = list(derived["workerPodNames"])
    ns = rig.namespace
    apply(rig.kube, rig.objects, ns)
    rig.syncer.start()
    # 1. Provisioning: the pods exist, none runs yet (no kubelet).
    provisioning = wait_until(
        lambda: rig.conditions(cluster).get("RayClusterProvisioned"), what="provisioning"
    )
    assert provisioning["status"] == "False"
    assert provisioning["reason"] == "RayClusterPodsProvisioning"
    assert "state" not in rig.document(cluster)
    assert rig.row(cluster)[1:4] == [cluster, "2", "0"]
    # 2. Ready: the kubelet runs the pods; the syncer submits the job to the real head.
    rig.controllers.start(interval=0.05)
    ready = wait_until(
        lambda: s if (s := rig.document(cluster)).get("state") == "ready" else None,
        what="ready",
    )
    assert ready["availableWorkerReplicas"] == 2
    assert rig.conditions(cluster)["RayClusterProvisioned"]["status"] == "True"
    job = wait_until(
        lambda: s if (s := rig.document(JOB)).get("jobStatus") == "RUNNING" else None,
        timeout=_TIMEOUT_S,
        what="the Ray job RUNNING on the real head",
    )
    submission = str(job["jobId"])
    info = rig.ray.get_job(submission)
    assert info is not None and info["status"] == "RUNNING"
    assert rig.row(cluster)[1:4] == [cluster, "2", "2"] and rig.row(cluster)[-2] == "ready"
    # 3. A worker fails, and its delete is refused: ReplicaFailure.
    faults = rig.api.fake.faults
    rule = faults.fail(
        403, verb="delete", resource="pods", name=workers[0], times=None, message=DENIED
    )
    rig.controllers.kubelet.set_phase(ns, workers[0], "Failed", reason="Evicted")
    failure = wait_until(
        lambda: rig.conditions(cluster).get("ReplicaFailure"), what="ReplicaFailure"
    )
    assert (failure["status"], failure["reason"]) == ("True", "FailedDeleteWorkerPod")
    assert DENIED in failure["message"]
    assert rig.document(cluster)["availableWorkerReplicas"] == 1
    assert rig.row(cluster)[1:4] == [cluster, "2", "1"]
    assert rig.ray.get_job(submission)["status"] == "RUNNING"  # type: ignore[index]
    # 4. Recovered: the delete goes through, self-heal re-creates the worker.
    faults.remove(rule)
    wait_until(lambda: rig.kube.get(PODS, ns, workers[0]) is None, what="the delete")
    wait_until(
        lambda: "ReplicaFailure" not in rig.conditions(cluster), what="ReplicaFailure removed"
    )
    assert rig.self_heal() == [workers[0]]
    recovered = wait_until(
        lambda: s if (s := rig.document(cluster)).get("availableWorkerReplicas") == 2 else None,
        what="2 available again",
    )
    assert recovered["state"] == "ready"
    assert rig.row(cluster)[1:4] == [cluster, "2", "2"]
    # 5. The real job ends, submitted once.
    rig.go.touch()
    done = wait_until(
        lambda: s if (s := rig.document(JOB)).get("jobDeploymentStatus") == "Complete" else None,
        timeout=_TIMEOUT_S,
        what="the job Complete",
    )
    assert done["jobStatus"] == "SUCCEEDED" and done["jobId"] == submission
    print(  # noqa: T201 - the measured numbers
        f"refused_deletes={rule.hits} "
        f"status_writes={rig.syncer.raycluster.stats['status_writes']} "
        f"deleted={rig.syncer.raycluster.healer.stats['deleted']}"
    )
    assert rig.syncer.raycluster.healer.stats["deleted"] == 1
