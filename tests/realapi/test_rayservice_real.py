"""RayService blue/green on the real control plane, with Serve on the session's Ray head.

A rendered RayService (`upgradeStrategy: NewCluster`, a RocksDB GCS claim kept under
`deletionPolicy: Retain`) is synced by a GitOps-like applier that prunes what left git
unless it is prune-protected. The syncer daemon runs under its rendered Role and sends
every generation's Serve config to the one real Ray head (there is no cluster DNS and one
head; each generation's config is the same, so both "heads" serve the same apps). A
`rayClusterConfig` change makes a second generation: the test checks what the real server
did: which pods carry the serve label and so what git's Service selectors pick, the status
ConfigMap, the syncer's deletion of the old generation (graceful,
finished by the test kubelet) and the old claim still there.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from renderer.naming import RAY_CLUSTER, RETIRE_WITH, SERVE_ACTIVE
from syncer.ray.dashboard import HttpDashboard
from tests.e2e.rayhead import RayHead
from tests.e2e.test_serve_e2e import GREET
from tests.manifests import rayservice
from tests.realapi.conftest import Real
from tests.realapi.gitops import Applier, name_of, render
from tests.realapi.rest import Manifest
from tests.realapi.rig import Rig, intent_of, running_syncer, wait_until

APP_NAME = "realapi-greet"
GATES = ("--feature-gates", "GCSFaultToleranceEmbeddedStorage=true")
SPEC = {"upgradeStrategy": {"type": "NewCluster"}, "rayClusterDeletionDelaySeconds": 1}
RETAINED_GCS = {
    "gcsFaultToleranceOptions": {"backend": "rocksdb", "storage": {"deletionPolicy": "Retain"}}
}


class BlueGreen:
    """The rig, the applier, and the rendered generations of one RayService."""

    def __init__(self, rig: Rig, head: RayHead, apps: Path) -> None:
        self.rig = rig
        self.head = head
        self.apps = apps
        self.gitops = Applier(rig.rest, rig.namespace)

    def render(self, cpu: str) -> tuple[str, list[Manifest]]:
        """The rendered objects of the RayService whose worker requests `cpu`."""
        config = {
            "proxy_location": "HeadOnly",
            "http_options": {"host": "127.0.0.1", "port": self.head.serve_port},
            "applications": [
                {
                    "name": APP_NAME,
                    "route_prefix": f"/{APP_NAME}",
                    "import_path": "greet_app:app",
                    "runtime_env": {"env_vars": {"PYTHONPATH": str(self.apps)}},
                }
            ],
        }
        text = rayservice(
            "greeter", serve_config=config, worker_cpu=cpu, spec=SPEC, cluster=RETAINED_GCS
        )
        objects = render(text, self.rig.namespace, *GATES)
        generation = intent_of(objects)["derived"]["generation"]["name"]
        return str(generation), objects

    def of(self, kind: str, generation: str) -> list[Manifest]:
        """The live objects of `kind` labelled with `generation`."""
        return self.rig.rest.list(
            "v1", kind, self.rig.namespace, labelSelector=f"{RAY_CLUSTER}={generation}"
        )

    def active(self, generation: str) -> bool:
        """Whether every pod of `generation` carries the syncer's serve label."""
        pods = self.of("Pod", generation)
        return bool(pods) and all(
            (p["metadata"].get("labels") or {}).get(SERVE_ACTIVE) == "true" for p in pods
        )

    def status(self) -> Manifest:
        """The RayService status from the syncer's status ConfigMap ({} before it exists)."""
        return self.rig.status("greeter")

    def selected(self, service: str) -> set[str]:
        """The pods the live Service's selector picks, as the real server evaluates it.

        (Not its EndpointSlices: the test kubelet gives pods 127.0.0.1, which endpoints
        may not hold.)
        """
        live = self.rig.rest.get("v1", "Service", self.rig.namespace, service)
        selector = ",".join(f"{k}={v}" for k, v in sorted(live["spec"]["selector"].items()))
        pods = self.rig.rest.list("v1", "Pod", self.rig.namespace, labelSelector=selector)
        return {p["metadata"]["name"] for p in pods if "deletionTimestamp" not in p["metadata"]}

    def wait(self, probe: Any, what: str, timeout: float = 180) -> Any:
        try:
            return wait_until(probe, what, timeout)
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}; status now {self.status()}\n{self.rig.diagnosis()}"
            ) from None


def claim_volume(claim: Manifest, namespace: str) -> Manifest:
    """A PersistentVolume bound in advance to a rendered claim (no provisioner runs here)."""
    name = claim["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"{namespace}-{name}"},
        "spec": {
            "capacity": {"storage": claim["spec"]["resources"]["requests"]["storage"]},
            "accessModes": claim["spec"]["accessModes"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "hostPath": {"path": f"/tmp/realapi-pv/{namespace}/{name}"},
            "claimRef": {"namespace": namespace, "name": name},
        },
    }


@pytest.fixture
def blue_green(
    real: Real, ray_head: RayHead, crds: list[str], tmp_path: Path
) -> Iterator[BlueGreen]:
    (tmp_path / "greet_app.py").write_text(GREET)
    volumes: list[str] = []
    with running_syncer(real, ray_head, tmp_path) as rig:
        stack = BlueGreen(rig, ray_head, tmp_path)
        for cpu in ("1", "2"):  # the claims of both generations get a volume to bind
            for claim in (o for o in stack.render(cpu)[1] if o["kind"] == "PersistentVolumeClaim"):
                created = real.rest.create(claim_volume(claim, real.namespace))
                volumes.append(created["metadata"]["name"])
        try:
            yield stack
        finally:
            for volume in volumes:
                real.rest.delete(f"/api/v1/persistentvolumes/{volume}")
            # Leave the shared head without this test's Serve application.
            HttpDashboard(ray_head.dashboard_url, timeout=30).delete_serve_applications()


def proxy_answer(head: RayHead) -> object:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://127.0.0.1:{head.serve_port}/{APP_NAME}", timeout=10) as reply:
        return json.loads(reply.read())


def serving(stack: BlueGreen, generation: str) -> Manifest | None:
    status = stack.status().get("activeServiceStatus") or {}
    apps = status.get("applicationStatuses") or {}
    running = (apps.get(APP_NAME) or {}).get("status") == "RUNNING"
    return status if status.get("rayClusterName") == generation and running else None


@pytest.mark.timeout(600)
def test_blue_green_moves_traffic_and_the_syncer_retires_the_old_generation_but_its_claim(
    blue_green: BlueGreen,
) -> None:
    stack, rest, ns = blue_green, blue_green.rig.rest, blue_green.rig.namespace
    gen1, v1 = stack.render("1")
    head1 = intent_of(v1)["derived"]["generation"]["headPodName"]
    stack.gitops.sync(v1)
    stack.wait(lambda: serving(stack, gen1), "the first generation's Serve app RUNNING")
    stack.wait(lambda: stack.active(gen1), "the first generation's pods labelled serve-active")
    # Real Serve on the real head, behind the proxy the config asked for.
    assert proxy_answer(stack.head) == {"app": "greet"}
    # The RayService's head Service (git's selector) picks the head the syncer labelled.
    assert stack.selected("greeter-head-svc") == {head1}

    # A rayClusterConfig change: a new generation; the old one leaves git but is protected.
    gen2, v2 = stack.render("2")
    assert gen2 != gen1
    head2 = intent_of(v2)["derived"]["generation"]["headPodName"]
    stack.gitops.sync(v2)
    assert stack.gitops.pruned == []
    old = {name_of(o) for o in v1 if name_of(o) not in {name_of(n) for n in v2}}
    assert stack.gitops.kept == old
    assert {o["kind"] for o in v1 if name_of(o) in old} == {
        "Pod",
        "Service",
        "ConfigMap",
        "PersistentVolumeClaim",
    }
    stack.wait(lambda: serving(stack, gen2), "the second generation active and RUNNING")
    stack.wait(lambda: stack.active(gen2), "the second generation's pods labelled serve-active")
    stack.wait(lambda: not stack.of("Pod", gen1), "the old generation's pods deleted")
    assert stack.selected("greeter-head-svc") == {head2}
    # What the syncer deleted: everything the renderer marked retire-with the generation.
    retired = {name_of(o) for o in v1 if (o["metadata"].get("annotations") or {}).get(RETIRE_WITH)}
    assert retired == old - {n for n in old if n.startswith("PersistentVolumeClaim")}
    stack.wait(
        lambda: not stack.of("Service", gen1) and not stack.of("ConfigMap", gen1),
        "the old generation's Services and ConfigMaps deleted",
        60,
    )
    # The claim kept under deletionPolicy Retain is still there and bound, and so is the new one.
    (claim,) = stack.of("PersistentVolumeClaim", gen1)
    assert "deletionTimestamp" not in claim["metadata"]
    assert claim["status"]["phase"] == "Bound"
    assert [c["status"]["phase"] for c in stack.of("PersistentVolumeClaim", gen2)] == ["Bound"]
    # The old pods went through graceful deletion, finished by the kubelet.
    journal = stack.rig.real.kubelet.journal_of(ns)
    assert any(f"{ns}/{head1} finishing its deletion" in line for line in journal), journal
    # The status ConfigMap: the new generation active with its app, nothing pending.
    status = stack.status()
    assert status["activeServiceStatus"]["rayClusterName"] == gen2
    assert status["pendingServiceStatus"] == {}
    assert status["serviceStatus"] == "Running"
    reasons = {e.get("reason") for e in rest.list("v1", "Event", ns)}
    assert "DeletedRayCluster" in reasons, reasons
    retirements = [
        r
        for r in stack.rig.syncer.records()
        if "retired generation" in str(r.get("message")) and gen1 in str(r.get("message"))
    ]
    assert retirements, "no 'retired generation' record in the syncer's log"
    # The next sync of git recreates nothing of the old generation and prunes nothing.
    stack.gitops.sync(v2)
    assert stack.gitops.pruned == []
    assert not stack.of("Pod", gen1)
    assert proxy_answer(stack.head) == {"app": "greet"}
    assert stack.rig.forbidden() == []
