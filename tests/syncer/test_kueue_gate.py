"""Kueue's admission gate is not the syncer's: it is kept, and readiness waits for it.

A RayJob rendered with a Kueue queue runs on the fake API server with Kueue's webhook
played by the test (every pod, the submitter's template included, gets the gate
`kueue.x-k8s.io/admission`) and Kueue's admission played by removing that gate. While the
cluster pods are gated they never run, so the syncer has no ready cluster and leaves the
submitter alone; once the cluster is admitted the syncer removes only its own
`kuberay.io/cluster-ready` gate and the submitter keeps Kueue's until Kueue admits it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from renderer import naming
from renderer.model.schedulers import KUEUE_GATE, KUEUE_GROUP_LABEL
from renderer.options import RenderOptions
from syncer.cli import Syncer
from syncer.kube.client import CONFIGMAPS, JSON_PATCH, PODS, KubeClient
from tests.fakeapi.controllers import Controllers
from tests.fakeapi.fixtures import KubeApi
from tests.manifests import rayjob
from tests.syncer.harness import apply, render, wait_until
from tests.syncer.test_rayjob_reconciler import make_rig

Manifest = dict[str, Any]

JOB = rayjob("queued", shutdownAfterJobFinishes=True)


def _kueue_webhook(obj: Manifest) -> None:
    """Kueue's pod webhook: its gate in front of the pod's own (on pods and Job templates)."""
    pod = obj["spec"]["template"] if obj["kind"] == "Job" else obj
    meta = pod.get("metadata") or {}
    if KUEUE_GROUP_LABEL not in (meta.get("labels") or {}):
        return
    spec = pod["spec"]
    spec["schedulingGates"] = [{"name": KUEUE_GATE}, *(spec.get("schedulingGates") or [])]


def _gates(pod: Manifest) -> list[str]:
    return [g["name"] for g in (pod["spec"].get("schedulingGates") or [])]


@pytest.fixture
def parts(kube_api: KubeApi) -> Iterator[tuple[KubeClient, Syncer, Controllers, str]]:
    rig = make_rig(kube_api)
    yield rig.kube, rig.syncer, rig.controllers, rig.namespace
    rig.stop()


def test_the_syncer_keeps_kueues_gate_and_waits_for_admission(
    parts: tuple[KubeClient, Syncer, Controllers, str],
) -> None:
    kube, syncer, controllers, ns = parts
    objects = render(JOB, ns, RenderOptions(namespace=ns, kueue_queue="team-queue"))
    for obj in objects:
        if obj["kind"] in ("Pod", "Job"):
            _kueue_webhook(obj)
    apply(kube, objects, ns)
    controllers.start(interval=0.05)
    syncer.start()

    def submitter() -> Manifest | None:
        items, _ = kube.list(PODS, ns, label_selector="job-name=queued")
        return items[0] if items else None

    pod = wait_until(submitter, what="the submitter pod")
    assert _gates(pod) == [KUEUE_GATE, naming.CLUSTER_READY_GATE]
    # Not admitted: the cluster pods stay gated and never run, so the syncer (which
    # has seen the job: its status ConfigMap exists) leaves the submitter's gates alone.
    wait_until(
        lambda: kube.get(CONFIGMAPS, ns, naming.status_configmap_name("queued")),
        what="the syncer's first status",
    )
    cluster = [
        p
        for p in kube.list(PODS, ns)[0]
        if (p["metadata"].get("labels") or {}).get("ray.io/node-type")
    ]
    assert cluster and all(p.get("status", {}).get("phase") != "Running" for p in cluster)
    assert syncer.rayjob.stats["ungated"] == 0
    still = submitter()
    assert still is not None and _gates(still) == [KUEUE_GATE, naming.CLUSTER_READY_GATE]
    # Kueue admits the cluster pods (removes only its gate, as Kueue does).
    for p in cluster:
        name = p["metadata"]["name"]
        patch = [{"op": "remove", "path": "/spec/schedulingGates/0"}]
        kube.patch(PODS, ns, name, patch, content_type=JSON_PATCH)
    ungated = wait_until(
        lambda: (s := submitter()) is not None and naming.CLUSTER_READY_GATE not in _gates(s) and s,
        what="the syncer removing its own gate",
    )
    assert _gates(ungated) == [KUEUE_GATE]
    # The counter moves after the patch's reply, so the pod can be seen ungated first.
    wait_until(lambda: syncer.rayjob.stats["ungated"] >= 1, what="the ungate counted")
    assert syncer.rayjob.stats["ungated"] == 1
