"""A rendered RayJob run end to end: the fake API server, the syncer and a real Ray head.

Each test renders a RayJob, applies the objects to the fake API server as a GitOps tool
would, and plays kubelet with the fake controllers. The cluster pods (head, worker) are
only marked Running and Ready: their `ray start` is not run, because the session's Ray
head on 127.0.0.1 is the cluster. When the syncer ungates the submitter pod, its rendered
command (bash, `python`, the `ray` CLI of the venv) runs for real against that head.

There is no cluster DNS here, so the tests play DNS: the kubelet hook rewrites the head
Service's address (`<head svc>.<ns>.svc.cluster.local:8265`) in the submitter's command
and env to the Ray head's dashboard address before running it, and the syncer gets a
dashboard factory that maps every dashboard URL of an intent to
`HttpDashboard(ray_head.dashboard_url)` (the URLs it asked for are recorded and checked).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from renderer import naming
from syncer.cli import Options, Syncer
from syncer.kube.client import CONFIGMAPS, PODS, KubeClient
from syncer.ray.dashboard import HttpDashboard
from syncer.ray.types import JobInfo
from syncer.rayjob.machine import Settings
from tests.e2e.rayhead import RayHead
from tests.fakeapi.controllers import CommandRunner, Controllers, PodProcess
from tests.fakeapi.fixtures import KubeApi
from tests.fakeapi.server import FakeApiServer
from tests.manifests import rayjob
from tests.paths import SHARED
from tests.syncer.harness import apply, render, wait_until

Manifest = dict[str, Any]
pytestmark = pytest.mark.e2e

# `<svc>.<namespace>.svc.cluster.local:<port>`: what cluster DNS would resolve.
_SERVICE_ADDRESS = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\.[a-z0-9-]+\.svc\.cluster\.local:\d+")
# Generous: the `ray` CLI pays 1-3 s of start-up per call (5-7 s on a loaded 2-core
# machine), and `ray job logs --follow` ends 3-6 s after the job (ray-apis.md §2.8).
_JOB_TIMEOUT_S = 120.0
_CRD = SHARED / "upstream" / "kuberay-v1.7" / "crds" / "ray.io_rayjobs.yaml"


def job_manifest(
    name: str, entrypoint: str, *, mode: str = "K8sJobMode", backoff: int = 0, **spec: object
) -> str:
    """A RayJob with one worker; `spec` adds top-level spec fields (JSON-encoded values)."""
    return rayjob(name, entrypoint=entrypoint, mode=mode, spec={"backoffLimit": backoff, **spec})


def _is_submitter(pod: Manifest) -> bool:
    return any(ref.get("kind") == "Job" for ref in pod["metadata"].get("ownerReferences") or [])


class DnsPlayingRunner:
    """Kubelet hook: run submitter pods for real, with head Service addresses resolved.

    Cluster pods get no process (the session's Ray head stands in for them).
    """

    def __init__(self, runner: CommandRunner, head_address: str) -> None:
        self._runner = runner
        self._head_address = head_address
        self.started: list[str] = []

    def __call__(self, pod: Manifest) -> PodProcess | None:
        if not _is_submitter(pod):
            return None
        resolved = json.loads(_SERVICE_ADDRESS.sub(self._head_address, json.dumps(pod)))
        self.started.append(pod["metadata"]["name"])
        return self._runner(resolved)


@dataclass
class RenderedJob:
    """One applied RayJob: its rendered objects and what the intent derived."""

    name: str
    objects: list[Manifest]
    derived: Manifest

    @property
    def submission_id(self) -> str:
        return str(self.derived["submissionId"])

    @property
    def head_pod(self) -> str:
        return str(self.derived["headPodName"])

    @property
    def worker_pods(self) -> list[str]:
        return list(self.derived["workerPodNames"])


@dataclass
class Rig:
    kube: KubeClient
    server: FakeApiServer
    namespace: str
    syncer: Syncer
    controllers: Controllers
    runner: CommandRunner
    hook: DnsPlayingRunner
    ray: HttpDashboard
    asked: list[str] = field(default_factory=list)

    def render(self, manifest: str) -> RenderedJob:
        objects = render(manifest, self.namespace)
        intent = next(o for o in objects if o["metadata"]["name"].endswith("-kuberay-intent"))
        data = json.loads(intent["data"][naming.INTENT_KEY])
        return RenderedJob(data["metadata"]["name"], objects, data["derived"])

    def apply(self, job: RenderedJob) -> None:
        apply(self.kube, job.objects, self.namespace)

    def status_cm(self, job: RenderedJob) -> Manifest | None:
        return self.kube.get(CONFIGMAPS, self.namespace, naming.status_configmap_name(job.name))

    def status(self, job: RenderedJob) -> Manifest:
        cm = self.status_cm(job)
        if cm is None:
            return {}
        status: Manifest = json.loads(cm["data"]["status.json"])["status"]
        return status

    def bookkeeping(self, job: RenderedJob) -> Manifest:
        cm = self.status_cm(job)
        assert cm is not None
        own: Manifest = json.loads(cm["data"]["status.json"])["syncer"]
        return own

    def wait_status(
        self, job: RenderedJob, deployment_status: str, *, timeout: float = _JOB_TIMEOUT_S
    ) -> Manifest:
        def probe() -> Manifest | None:
            status = self.status(job)
            return status if status.get("jobDeploymentStatus") == deployment_status else None

        found: Manifest = wait_until(
            probe, timeout=timeout, interval=0.1, what=f"{job.name} {deployment_status}"
        )
        return found

    def pod(self, name: str) -> Manifest:
        pod = self.kube.get(PODS, self.namespace, name)
        assert pod is not None, name
        return pod

    def submitter_pods(self, job: RenderedJob) -> list[Manifest]:
        items, _ = self.kube.list(PODS, self.namespace, label_selector=f"job-name={job.name}")
        return items

    def ray_job(self, submission_id: str, statuses: set[str]) -> JobInfo:
        def probe() -> JobInfo | None:
            info = self.ray.get_job(submission_id)
            return info if info is not None and info["status"] in statuses else None

        found: JobInfo = wait_until(
            probe, timeout=_JOB_TIMEOUT_S, interval=0.1, what=f"{submission_id} {statuses}"
        )
        return found

    def submitter_log(self, job: RenderedJob) -> str:
        pods = self.submitter_pods(job)
        return "\n".join(
            self.runner.log_path(self.namespace, p["metadata"]["name"]).read_text(errors="replace")
            for p in pods
            if self.runner.log_path(self.namespace, p["metadata"]["name"]).exists()
        )


@pytest.fixture
def rig(kube_api: KubeApi, ray_head: RayHead, tmp_path: Path) -> Iterator[Rig]:
    server = kube_api.fake  # the kubelet is simulated: a real cluster would run the images
    namespace = kube_api.namespace
    kube = KubeClient(kube_api.api_client, user_agent="kuberay-syncer/e2e")
    ray = HttpDashboard(ray_head.dashboard_url, timeout=10)
    asked: list[str] = []

    def dashboards(url: str) -> HttpDashboard:
        asked.append(url)  # the intent's in-cluster URL; DNS is played by the test
        return ray

    options = Options(
        namespaces=(namespace,),
        workers=2,
        poll_interval_s=0.2,
        settings=Settings(poll_interval_s=0.2),
    )
    syncer = Syncer(kube, options, dashboards=dashboards)
    bin_dir = str(Path(sys.executable).parent)
    runner = CommandRunner(
        tmp_path / "pods",
        # The submitter finds `python` and `ray` of the venv, and talks to 127.0.0.1 directly.
        env={
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        },
        cwd=tmp_path,
    )
    head_address = ray_head.dashboard_url.removeprefix("http://")
    hook = DnsPlayingRunner(runner, head_address)
    controllers = Controllers(kube_api.api_client, namespace=namespace, hook=hook)
    rig = Rig(kube, server, namespace, syncer, controllers, runner, hook, ray, asked)
    controllers.start(interval=0.05)
    syncer.start()
    try:
        yield rig
    finally:
        syncer.stop()
        controllers.stop()


def _status_schema() -> Manifest:
    """The v1 RayJob CRD's `status` schema, read in place from the shared upstream copy."""
    crd = YAML(typ="safe").load(_CRD.read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    schema: Manifest = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    return schema


def assert_kuberay_status_fields(status: Manifest) -> None:
    """Every field the syncer publishes exists, with that name, in KubeRay's RayJob status."""
    schema = _status_schema()["properties"]
    assert set(status) <= set(schema), set(status) - set(schema)
    for nested in ("rayJobInfo", "rayClusterStatus"):
        if nested in status:
            known = set(schema[nested]["properties"])
            assert set(status[nested]) <= known, (nested, set(status[nested]) - known)


def hold_for(seconds: float, check: Callable[[], None]) -> None:
    """Run `check` repeatedly for `seconds`: a state that must *persist* (a negative wait)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        check()
        time.sleep(0.05)
    check()


def _gates(pod: Manifest) -> list[str]:
    return [g["name"] for g in pod["spec"].get("schedulingGates") or []]


def _shutdown_requested(pod: Manifest) -> bool:
    annotations = pod["metadata"].get("annotations") or {}
    return annotations.get(naming.SHUTDOWN_REQUESTED) == "true"


def _running_ready(pod: Manifest) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or []
    )


def test_submitter_waits_for_ready_cluster_then_job_succeeds_and_cluster_shuts_down(
    rig: Rig,
) -> None:
    job = rig.render(
        job_manifest(
            "e2e-ok",
            "python -c \"print('hello from e2e')\"",
            shutdownAfterJobFinishes=True,
            ttlSecondsAfterFinished=1,
        )
    )
    (worker,) = job.worker_pods
    # A slow kubelet for the worker: its status writes fail until the rule goes.
    slow = rig.server.faults.fail(
        503, verb="patch", resource="pods/status", namespace=rig.namespace, name=worker, times=None
    )
    rig.apply(job)
    submitter = wait_until(
        lambda: next(iter(rig.submitter_pods(job)), None), what="the submitter pod"
    )
    submitter_name = submitter["metadata"]["name"]
    wait_until(lambda: _running_ready(rig.pod(job.head_pod)), what="a Ready head pod")
    initializing = rig.wait_status(job, "Initializing")
    assert initializing["rayClusterStatus"]["desiredWorkerReplicas"] == 1
    assert initializing["rayClusterStatus"]["readyWorkerReplicas"] == 0

    def still_gated() -> None:
        assert _gates(rig.pod(submitter_name)) == [naming.CLUSTER_READY_GATE]
        assert rig.pod(worker)["status"].get("phase", "Pending") == "Pending"
        assert rig.status(job)["jobDeploymentStatus"] == "Initializing"

    # Head Ready, worker not: the syncer keeps the gate on, pass after pass.
    hold_for(1.0, still_gated)
    assert rig.hook.started == []
    assert rig.syncer.rayjob.stats["ungated"] == 0

    rig.server.faults.remove(slow)
    complete = rig.wait_status(job, "Complete")
    end_seen = time.time()
    assert rig.hook.started == [submitter_name]
    assert _gates(rig.pod(submitter_name)) == []
    info = rig.ray_job(job.submission_id, {"SUCCEEDED"})
    # The `ray` CLI re-quotes the words it got; the command is the same.
    assert shlex.split(info["entrypoint"]) == ["python", "-c", "print('hello from e2e')"]
    log = rig.submitter_log(job)
    assert f"Job '{job.submission_id}' submitted successfully" in log
    assert "hello from e2e" in log

    # The status ConfigMap: KubeRay's RayJob status, field names and values.
    assert_kuberay_status_fields(complete)
    assert complete["jobStatus"] == "SUCCEEDED"
    assert complete["jobId"] == job.submission_id
    assert complete["rayClusterName"] == job.derived["clusterName"]
    # KubeRay's form: the head Service's in-cluster address, without a scheme.
    service = job.derived["headServiceName"]
    assert complete["dashboardURL"] == f"{service}.{rig.namespace}.svc.cluster.local:8265"
    assert complete["succeeded"] == 1
    assert complete["failed"] == 0
    assert "reason" not in complete
    assert complete["message"] == info["message"] == "Job finished successfully."
    assert complete["rayClusterStatus"]["state"] == "ready"
    assert complete["rayClusterStatus"]["readyWorkerReplicas"] == 1
    assert complete["startTime"] <= complete["endTime"]
    assert set(complete["rayJobInfo"]) == {"startTime", "endTime"}
    for key in ("startTime", "endTime"):
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", complete[key]), complete[key]
    cm = rig.status_cm(job)
    assert cm is not None
    assert cm["data"]["jobDeploymentStatus"] == "Complete"
    assert cm["data"]["jobStatus"] == "SUCCEEDED"
    assert cm["metadata"]["labels"][naming.ORIGIN_NAME] == job.name
    (owner,) = cm["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("Job", job.name)
    assert set(rig.asked) == {job.derived["dashboardURL"]}

    # shutdownAfterJobFinishes with ttlSecondsAfterFinished 1: every cluster pod is asked
    # to shut down, one second after the end, and nothing is deleted.
    end_time = float(rig.bookkeeping(job)["endTime"])
    cluster = [job.head_pod, *job.worker_pods]
    wait_until(lambda: all(_shutdown_requested(rig.pod(n)) for n in cluster), what="shutdown")
    annotated_seen = time.time()
    assert annotated_seen >= end_time + 1.0
    if end_seen < end_time + 0.9:
        # We saw Complete before the TTL passed, so the annotation came after it.
        assert annotated_seen - end_seen > 0.1
    assert not _shutdown_requested(rig.pod(submitter_name))


def test_failing_entrypoint_fails_the_rayjob_with_rays_message(rig: Rig) -> None:
    job = rig.render(
        job_manifest("e2e-fail", "python -c \"import sys; print('about to fail'); sys.exit(1)\"")
    )
    rig.apply(job)
    failed = rig.wait_status(job, "Failed")
    info = rig.ray_job(job.submission_id, {"FAILED"})
    assert_kuberay_status_fields(failed)
    assert failed["jobStatus"] == "FAILED"
    assert failed["reason"] == "AppFailed"
    assert failed["message"] == info["message"]
    assert "Job entrypoint command failed with exit code 1" in failed["message"]
    assert "about to fail" in failed["message"]
    assert (failed["failed"], failed["succeeded"]) == (1, 0)
    # The submitter tailed the logs of the failed job and exited 0, as KubeRay's does.
    (pod,) = rig.submitter_pods(job)
    wait_until(lambda: rig.pod(pod["metadata"]["name"])["status"]["phase"] == "Succeeded")
    # No shutdown was asked for.
    assert not any(_shutdown_requested(rig.pod(n)) for n in [job.head_pod, *job.worker_pods])


def test_active_deadline_stops_the_ray_job(rig: Rig) -> None:
    job = rig.render(
        job_manifest(
            "e2e-deadline",
            'python -c "import time; time.sleep(300)"',
            mode="HTTPMode",
            activeDeadlineSeconds=6,
        )
    )
    rig.apply(job)
    # The syncer submits over HTTP as soon as the cluster is ready; the job runs.
    rig.ray_job(job.submission_id, {"RUNNING"})
    failed = rig.wait_status(job, "Failed", timeout=30)
    assert failed["reason"] == "DeadlineExceeded"
    assert failed["message"].startswith(
        "The RayJob has passed the activeDeadlineSeconds. StartTime: "
    )
    assert failed["message"].endswith("ActiveDeadlineSeconds: 6")
    assert failed["failed"] == 1
    # Unlike KubeRay, the syncer also stops the Ray job.
    info = rig.ray_job(job.submission_id, {"STOPPED", "FAILED", "SUCCEEDED"})
    assert info["status"] == "STOPPED"
    own = rig.bookkeeping(job)
    assert own["endTime"] - own["startTime"] >= 6


def test_backoff_limit_retries_over_http_with_a_new_submission_id(rig: Rig, tmp_path: Path) -> None:
    marker = tmp_path / "first-attempt-done"
    # Fails the first time (and leaves the marker), succeeds afterwards.
    entrypoint = (
        f"python -c \"import os, sys; p = '{marker}'; first = not os.path.exists(p); "
        "open(p, 'a').close(); print('first' if first else 'again'); sys.exit(int(first))\""
    )
    job = rig.render(job_manifest("e2e-retry", entrypoint, backoff=1))
    rig.apply(job)
    complete = rig.wait_status(job, "Complete")
    retry_id = f"{job.submission_id}-1"
    assert complete["jobId"] == retry_id
    assert complete["jobStatus"] == "SUCCEEDED"
    assert (complete["failed"], complete["succeeded"]) == (1, 1)
    assert rig.bookkeeping(job)["attempt"] == 1
    assert rig.ray_job(job.submission_id, {"FAILED"})["message"]
    retried = rig.ray_job(retry_id, {"SUCCEEDED"})
    assert retried["entrypoint"] == entrypoint
    # The retry went over HTTP: the rendered submitter ran once, for the first attempt.
    assert len(rig.submitter_pods(job)) == 1
    assert rig.syncer.rayjob.stats["submissions"] == 1
    log = rig.submitter_log(job)
    assert f"Job '{job.submission_id}' submitted successfully" in log
    assert retry_id not in log
