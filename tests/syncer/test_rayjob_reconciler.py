"""The RayJob lifecycle end to end on the fake API server, with a simulated dashboard.

The Job controller and kubelet simulators create and run the pods; the "submitter"
is played by the test (it submits to the fake dashboard once its pod is ungated), so
these tests pin the syncer's decisions. tests/e2e runs the real submitter against Ray.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from renderer import naming
from syncer.cli import Options, Syncer
from syncer.kube.client import CONFIGMAPS, PODS, Kube, KubeClient, Resource
from syncer.kube.forwarding import ForwardingKube
from syncer.rayjob.machine import Settings
from syncer.rayjob.reconciler import SUBMITTER_HOLD_MAX_S
from tests.fakeapi.controllers import Controllers
from tests.fakeapi.fixtures import KubeApi
from tests.manifests import rayjob
from tests.syncer.fakedashboard import FakeDashboard, JobPlan
from tests.syncer.harness import apply, render, wait_until

Manifest = dict[str, Any]


def demo_job(*, mode: str, backoff: int = 0) -> str:
    """RayJob `demo`: one worker, its cluster shut down (TTL 0) when the job ends."""
    return rayjob(
        "demo",
        mode=mode,
        shutdownAfterJobFinishes=True,
        ttlSecondsAfterFinished=0,
        backoffLimit=backoff,
    )


@dataclass
class Rig:
    kube: KubeClient
    syncer: Syncer
    dashboard: FakeDashboard
    controllers: Controllers
    namespace: str

    def status(self) -> Manifest:
        cm = self.kube.get(CONFIGMAPS, self.namespace, naming.status_configmap_name("demo"))
        if cm is None:
            return {}
        status: Manifest = json.loads(cm["data"]["status.json"])["status"]
        return status

    def pod(self, name: str) -> Manifest:
        pod = self.kube.get(PODS, self.namespace, name)
        assert pod is not None
        return pod

    def ray_status(self, submission: str) -> str:
        info = self.dashboard.get_job(submission)
        assert info is not None
        return str(info["status"])

    def submitter_pods(self) -> list[Manifest]:
        items, _ = self.kube.list(PODS, self.namespace, label_selector="job-name=demo")
        return items

    def stop(self) -> None:
        self.syncer.stop()
        self.controllers.stop()


def make_rig(kube_api: KubeApi, *, ttl_mode: str = "stop", writer: Kube | None = None) -> Rig:
    """The syncer (2 workers, 0.2-s polls) with a quick `FakeDashboard` and the simulators,
    not started; `writer`: the client the syncer writes through (default: `rig.kube`)."""
    kube_api.fake  # noqa: B018 - the simulators need the fake server
    kube = KubeClient(kube_api.api_client)
    dashboard = FakeDashboard(time.time, job_plan=JobPlan(pending_s=0.2, running_s=0.3))
    options = Options(
        namespaces=(kube_api.namespace,),
        workers=2,
        poll_interval_s=0.2,
        ttl_mode=ttl_mode,
        settings=Settings(submitter_finished_timeout_s=30),
    )
    syncer = Syncer(writer or kube, options, dashboards=lambda url: dashboard)
    controllers = Controllers(kube_api.api_client, namespace=kube_api.namespace)
    return Rig(kube, syncer, dashboard, controllers, kube_api.namespace)


@pytest.fixture
def rig(kube_api: KubeApi, request: pytest.FixtureRequest) -> Iterator[Rig]:
    made = make_rig(kube_api, ttl_mode=getattr(request, "param", "stop"))
    yield made
    made.stop()


def play_submitter(rig: Rig, *, exit_code: int = 0, linger_s: float = 0.0) -> str:
    """Wait for the ungated submitter pod, submit like it would, finish it with the job."""
    pod = wait_until(
        lambda: next(
            (p for p in rig.submitter_pods() if not (p["spec"].get("schedulingGates") or [])),
            None,
        ),
        what="an ungated submitter pod",
    )
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    submission = str(env["RAY_JOB_SUBMISSION_ID"])
    rig.dashboard.submit_job(submission, "python -c 'print(1)'")
    wait_until(
        lambda: rig.ray_status(submission) in ("SUCCEEDED", "FAILED"),
        what="the Ray job to end",
    )
    time.sleep(linger_s)  # the submitter still follows the logs after Ray's end
    rig.controllers.kubelet.set_phase(
        rig.namespace,
        pod["metadata"]["name"],
        "Succeeded" if exit_code == 0 else "Failed",
        exit_code=exit_code,
    )
    return submission


class StatusWrites(ForwardingKube):
    """Forwards to a client; notes the words of each RayJob status map write, in order."""

    def __init__(self, inner: Kube) -> None:
        super().__init__(inner)
        self.words: list[tuple[str, str, float]] = []

    def _after_write(self, verb: str, resource: Resource, body: Manifest) -> None:
        labels = (body.get("metadata") or {}).get("labels") or {}
        ours = (labels.get(naming.ROLE), labels.get(naming.ORIGIN_KIND)) == ("status", "RayJob")
        if resource.plural == "configmaps" and ours:
            data = body.get("data") or {}
            deployment, ray = data.get("jobDeploymentStatus"), data.get("jobStatus")
            self.words.append((str(deployment), str(ray), time.time()))


@pytest.mark.parametrize(("linger_s", "held"), [(0.6, True), (4.0, False)])
def test_rays_end_waits_briefly_for_the_submitter_so_the_end_is_one_write(
    kube_api: KubeApi, linger_s: float, held: bool
) -> None:
    writes = StatusWrites(KubeClient(kube_api.api_client))
    rig = make_rig(kube_api, writer=writes)
    try:
        apply(rig.kube, render(demo_job(mode="K8sJobMode"), rig.namespace), rig.namespace)
        rig.controllers.start(interval=0.05)
        rig.syncer.start()
        submission = play_submitter(rig, linger_s=linger_s)  # polls (0.2 s) see Ray's end
        wait_until(lambda: rig.status().get("jobDeploymentStatus") == "Complete", what="Complete")
    finally:
        rig.stop()
    ended = [(d, r) for d, r, _ in writes.words if r == "SUCCEEDED"]
    if held:  # the Job finished within the hold: Ray's end and the job's in one write
        assert ended == [("Complete", "SUCCEEDED")], writes.words
    else:  # a submitter that lingers longer: Ray's end is published, as KubeRay shows it
        assert ended == [("Running", "SUCCEEDED"), ("Complete", "SUCCEEDED")], writes.words
        info = rig.dashboard.get_job(submission)
        assert info is not None and info["end_time"] is not None
        first_end = next(t for _, r, t in writes.words if r == "SUCCEEDED")
        assert first_end - info["end_time"] / 1000 >= SUBMITTER_HOLD_MAX_S  # held that long


def test_k8s_job_mode_gates_tracks_completes_and_shuts_down(rig: Rig) -> None:
    objects = render(demo_job(mode="K8sJobMode"), rig.namespace)
    apply(rig.kube, objects, rig.namespace)
    rig.controllers.start(interval=0.05)
    rig.syncer.start()
    # Before the cluster is ready nothing is ungated; the kubelet makes pods ready quickly,
    # so just check the gate was there at creation and is gone once the syncer acted.
    submission = play_submitter(rig)
    status = wait_until(
        lambda: rig.status() if rig.status().get("jobDeploymentStatus") == "Complete" else None,
        what="Complete",
    )
    assert status["jobStatus"] == "SUCCEEDED"
    assert status["jobId"] == submission
    assert status["succeeded"] == 1
    assert status["failed"] == 0
    assert status["rayClusterName"].startswith("demo-")
    assert status["dashboardURL"].startswith("demo-")  # KubeRay's form: no scheme
    assert status["dashboardURL"].endswith(f".{rig.namespace}.svc.cluster.local:8265")
    assert status["startTime"] <= status["endTime"]
    # shutdownAfterJobFinishes with TTL 0: every cluster pod is asked to shut down.
    intent_cm = rig.kube.get(CONFIGMAPS, rig.namespace, naming.intent_configmap_name("demo"))
    assert intent_cm is not None
    intent = json.loads(intent_cm["data"]["intent.json"])
    names = [intent["derived"]["headPodName"], *intent["derived"]["workerPodNames"]]
    for name in names:

        def shut_down(name: str = name) -> bool:
            annotations = rig.pod(name)["metadata"].get("annotations", {})
            return bool(annotations.get(naming.SHUTDOWN_REQUESTED))

        wait_until(shut_down, what=f"shutdown of {name}")
    # Only the submission the submitter made: the syncer never submitted in K8sJobMode.
    assert rig.dashboard.calls["submit_job"] == 1


@pytest.mark.parametrize("rig", ["delete"], indirect=True)
def test_delete_mode_keeps_the_status_of_the_job_whose_head_it_deletes(rig: Rig) -> None:
    # HTTPMode has no submitter Job: the head Pod owns the status until the TTL deletes it.
    # The status must outlive it (the garbage collector would take it with the head, and
    # the syncer would then start the finished job over on a cluster that is gone).
    objects = render(demo_job(mode="HTTPMode"), rig.namespace)
    apply(rig.kube, objects, rig.namespace)
    intent_cm = next(o for o in objects if o["metadata"]["name"] == "demo-kuberay-intent")
    derived = json.loads(intent_cm["data"]["intent.json"])["derived"]
    cluster = [derived["headPodName"], *derived["workerPodNames"]]
    rig.controllers.start(interval=0.05)
    rig.syncer.start()
    wait_until(
        lambda: all(rig.kube.get(PODS, rig.namespace, name) is None for name in cluster),
        what="the cluster pods deleted",
    )
    live_intent = rig.kube.get(CONFIGMAPS, rig.namespace, "demo-kuberay-intent")
    assert live_intent is not None
    status_cm = rig.kube.get(CONFIGMAPS, rig.namespace, naming.status_configmap_name("demo"))
    assert status_cm is not None, "the status went with the head Pod"
    owners = [(o["kind"], o["name"], o["uid"]) for o in status_cm["metadata"]["ownerReferences"]]
    assert owners == [("ConfigMap", "demo-kuberay-intent", live_intent["metadata"]["uid"])]
    # Another pass (an intent annotation wakes it) finds the job finished, not a new run.
    passes = rig.syncer.rayjob.stats["passes"]
    patch = {"metadata": {"annotations": {"example.org/touched": "1"}}}
    rig.kube.patch(CONFIGMAPS, rig.namespace, "demo-kuberay-intent", patch)
    wait_until(lambda: rig.syncer.rayjob.stats["passes"] > passes, what="another pass")
    status = rig.status()
    assert (status["jobDeploymentStatus"], status["jobStatus"]) == ("Complete", "SUCCEEDED")
    assert (status["succeeded"], status["failed"]) == (1, 0)
    assert rig.dashboard.calls["submit_job"] == 1


def test_http_mode_submits_once_and_retries_with_a_new_submission_id(rig: Rig) -> None:
    objects = render(demo_job(mode="HTTPMode", backoff=1), rig.namespace)
    apply(rig.kube, objects, rig.namespace)
    intent = json.loads(
        next(o for o in objects if o["metadata"]["name"] == "demo-kuberay-intent")["data"][
            "intent.json"
        ]
    )
    first = intent["derived"]["submissionId"]
    rig.dashboard.plan_job(first, JobPlan(pending_s=0.1, running_s=0.2, outcome="FAILED"))
    rig.controllers.start(interval=0.05)
    rig.syncer.start()
    status = wait_until(
        lambda: rig.status() if rig.status().get("jobDeploymentStatus") == "Complete" else None,
        what="Complete after one retry",
    )
    assert status["jobId"] == f"{first}-1"
    assert status["failed"] == 1
    assert status["succeeded"] == 1
    assert rig.ray_status(first) == "FAILED"
    assert rig.ray_status(f"{first}-1") == "SUCCEEDED"
