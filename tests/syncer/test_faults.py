"""Fault tests of the RayJob syncer: API outages, status-write conflicts, failed patches, a
dashboard that is down, dropped and compacted watches, a stale leader, a daemon killed
mid-job, a leader change, and a stop during an outage.

The in-process tests run the engine (`Syncer`, with `LeaderElector` + `GuardedKube` pairs
for the stale leader) on the fake API server with the Job controller and kubelet
simulators and a `FakeDashboard` on the wall clock. The daemon tests run the real entry
point (`syncer.cli.serve`) as subprocesses (`tests.syncer.daemon`); those that run jobs
talk to a real Ray head and are marked e2e. Every process is stopped by its PID.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from renderer import naming
from syncer.cli import Options, Syncer
from syncer.errors import TransientError
from syncer.kube.client import (
    CONFIGMAPS,
    EVENTS,
    LEASES,
    PODS,
    Kube,
    KubeClient,
)
from syncer.kube.forwarding import ForwardingKube
from syncer.kube.leader import GuardedKube, LeaderElector
from syncer.ray.dashboard import HttpDashboard
from syncer.rayjob.machine import Settings
from tests.e2e.rayhead import RayHead
from tests.fakeapi.controllers import Controllers
from tests.fakeapi.faults import AuditRecord
from tests.fakeapi.fixtures import KubeApi
from tests.fakeapi.server import FakeApiServer
from tests.manifests import rayjob
from tests.syncer.daemon import Daemon
from tests.syncer.fakedashboard import FakeDashboard, JobPlan
from tests.syncer.harness import apply, render, wait_until

Manifest = dict[str, Any]

# The order a RayJob's deployment status moves through on its way to an end.
_ORDER = ("Initializing", "Running", "Complete", "Failed")


def job_manifest(
    name: str,
    *,
    mode: str,
    entrypoint: str = 'python -c "print(1)"',
    spec: dict[str, object] | None = None,
) -> str:
    """A RayJob with one worker; `spec` adds top-level spec fields (JSON-encoded values)."""
    return rayjob(name, entrypoint=entrypoint, mode=mode, spec=spec)


def status_of(kube: KubeClient, namespace: str, name: str) -> Manifest:
    cm = kube.get(CONFIGMAPS, namespace, naming.status_configmap_name(name))
    if cm is None:
        return {}
    status: Manifest = json.loads(cm["data"]["status.json"])["status"]
    return status


def wait_status(
    kube: KubeClient, namespace: str, name: str, deployment_status: str, *, timeout: float = 30
) -> Manifest:
    def probe() -> Manifest | None:
        status = status_of(kube, namespace, name)
        return status if status.get("jobDeploymentStatus") == deployment_status else None

    found: Manifest = wait_until(
        probe, timeout=timeout, interval=0.05, what=f"{name} {deployment_status}"
    )
    return found


def status_history(kube: KubeClient, namespace: str, name: str, since: int) -> list[Manifest]:
    """Every version of the job's status ConfigMap written after resourceVersion `since`,
    up to the current one, replayed from the fake API server's watch history."""
    wanted = naming.status_configmap_name(name)
    current = kube.get(CONFIGMAPS, namespace, wanted)
    assert current is not None, wanted
    versions: list[Manifest] = []
    for event in kube.watch(
        CONFIGMAPS,
        namespace,
        resource_version=str(since),
        label_selector=f"{naming.ROLE}=status",
        timeout_s=5,
    ):
        meta = event.object["metadata"]
        if event.type in ("ADDED", "MODIFIED") and meta["name"] == wanted:
            versions.append(json.loads(event.object["data"]["status.json"])["status"])
            if meta["resourceVersion"] == current["metadata"]["resourceVersion"]:
                break
    return versions


def assert_clean_history(history: list[Manifest], final: str) -> None:
    """Each deployment status appears in one unbroken run, in order: no transition twice."""
    states = [s["jobDeploymentStatus"] for s in history]
    runs = [s for i, s in enumerate(states) if i == 0 or states[i - 1] != s]
    assert runs == sorted(set(runs), key=_ORDER.index), states
    assert runs[-1] == final, states
    assert runs[0] == "Initializing", states


def hold_for(seconds: float, check: Callable[[], None]) -> None:
    """Run `check` repeatedly for `seconds`: a state that must persist."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        check()
        time.sleep(0.05)
    check()


# --- in-process: the engine on the fake API server with a FakeDashboard ------------------------


@dataclass
class Rig:
    kube: KubeClient
    server: FakeApiServer
    namespace: str
    dashboard: FakeDashboard
    controllers: Controllers
    syncers: list[Syncer] = field(default_factory=list)

    def deploy(self, name: str, mode: str, **spec: object) -> Manifest:
        """Render and apply a RayJob; returns its intent's derived names."""
        objects = render(job_manifest(name, mode=mode, spec=spec), self.namespace)
        apply(self.kube, objects, self.namespace)
        intent = next(o for o in objects if o["metadata"]["name"].endswith("-kuberay-intent"))
        derived: Manifest = json.loads(intent["data"][naming.INTENT_KEY])["derived"]
        self.controllers.start(interval=0.05)
        return derived

    def start_syncer(self, settings: Settings | None = None) -> Syncer:
        options = Options(
            namespaces=(self.namespace,),
            workers=2,
            poll_interval_s=0.2,
            settings=settings or Settings(poll_interval_s=0.2),
        )
        syncer = Syncer(self.kube, options, dashboards=lambda url: self.dashboard)
        self.syncers.append(syncer)
        syncer.start()
        return syncer

    def status(self, name: str) -> Manifest:
        return status_of(self.kube, self.namespace, name)

    def wait_status(self, name: str, deployment_status: str, *, timeout: float = 30) -> Manifest:
        return wait_status(self.kube, self.namespace, name, deployment_status, timeout=timeout)

    def play_submitter(self, job_name: str, submission_id: str) -> str:
        """Wait for the ungated submitter pod and submit as it would; returns the pod name."""

        def ungated() -> str | None:
            items, _ = self.kube.list(PODS, self.namespace, label_selector=f"job-name={job_name}")
            for pod in items:
                if not pod["spec"].get("schedulingGates"):
                    return str(pod["metadata"]["name"])
            return None

        pod: str = wait_until(ungated, what="an ungated submitter pod")
        self.dashboard.submit_job(submission_id, 'python -c "print(1)"')
        return pod


@pytest.fixture
def rig(kube_api: KubeApi) -> Iterator[Rig]:
    server = kube_api.fake
    kube = KubeClient(kube_api.api_client)
    dashboard = FakeDashboard(time.time, job_plan=JobPlan(pending_s=0.1, running_s=0.3))
    controllers = Controllers(kube_api.api_client, namespace=kube_api.namespace)
    rig = Rig(kube, server, kube_api.namespace, dashboard, controllers)
    try:
        yield rig
    finally:
        server.faults.clear()
        for syncer in rig.syncers:
            syncer.stop()
        controllers.stop()


@pytest.mark.parametrize("outage", ["refused", "unavailable"])
def test_api_outage_mid_job_syncer_keeps_running_and_publishes_the_end(
    rig: Rig, outage: str
) -> None:
    derived = rig.deploy("outage", "HTTPMode")
    submission = derived["submissionId"]
    rig.dashboard.plan_job(submission, JobPlan(pending_s=0.1, running_s=1.0))
    syncer = rig.start_syncer()
    rig.wait_status("outage", "Running")
    errors = syncer.engine.stats["errors"]
    rig.server.faults.start_outage(outage)
    try:
        # The Ray job ends while the API is away; the syncer sees it and cannot publish.
        wait_until(lambda: _ray_status(rig.dashboard, submission) == "SUCCEEDED")
        wait_until(lambda: syncer.engine.stats["errors"] > errors + 2, what="failed passes")
        assert all(thread.is_alive() for thread in syncer.engine._threads)
    finally:
        rig.server.faults.end_outage()
    status = rig.wait_status("outage", "Complete")
    assert (status["jobStatus"], status["succeeded"], status["failed"]) == ("SUCCEEDED", 1, 0)
    assert rig.dashboard.calls["submit_job"] == 1
    assert syncer.engine.stats["crashes"] == 0
    # The informers are back on their watches: a new change still arrives.
    pods = syncer.pods.informers[0]
    head = derived["headPodName"]
    rig.kube.patch(PODS, rig.namespace, head, {"metadata": {"labels": {"after-outage": "yes"}}})
    wait_until(
        lambda: (pods.get(rig.namespace, head) or {})["metadata"]["labels"].get("after-outage")
    )


def test_dashboard_down_publishes_the_failure_start_then_fails_after_the_timeout(rig: Rig) -> None:
    derived = rig.deploy("dashdown", "HTTPMode")
    submission = derived["submissionId"]
    rig.dashboard.plan_job(submission, JobPlan(pending_s=0.1, running_s=None))
    rig.start_syncer(Settings(poll_interval_s=0.2, status_check_timeout_s=2))
    wait_until(lambda: rig.status("dashdown").get("jobStatus") == "RUNNING")
    rig.dashboard.available = False
    down = wait_until(
        lambda: (s := rig.status("dashdown")).get("jobStatusCheckFailureStartTime") and s,
        what="jobStatusCheckFailureStartTime",
    )
    assert down["jobDeploymentStatus"] == "Running"
    failed = rig.wait_status("dashdown", "Failed")
    assert failed["reason"] == "JobStatusCheckTimeoutExceeded"
    assert re.fullmatch(
        r"Job status checks have been failing since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d; "
        r"exceeded timeout of 2s",
        failed["message"],
    ), failed["message"]
    assert failed["failed"] == 1
    assert failed["endTime"] >= down["jobStatusCheckFailureStartTime"]


def test_dashboard_back_before_the_timeout_clears_the_failure_timer(rig: Rig) -> None:
    derived = rig.deploy("dashback", "HTTPMode")
    submission = derived["submissionId"]
    rig.dashboard.plan_job(submission, JobPlan(pending_s=0.1, running_s=None))
    rig.start_syncer(Settings(poll_interval_s=0.2, status_check_timeout_s=60))
    wait_until(lambda: rig.status("dashback").get("jobStatus") == "RUNNING")
    rig.dashboard.available = False
    wait_until(
        lambda: rig.status("dashback").get("jobStatusCheckFailureStartTime"),
        what="jobStatusCheckFailureStartTime",
    )
    rig.dashboard.available = True
    cleared = wait_until(
        lambda: (s := rig.status("dashback")) and "jobStatusCheckFailureStartTime" not in s and s,
        what="the failure timer cleared",
    )
    assert (cleared["jobDeploymentStatus"], cleared["jobStatus"]) == ("Running", "RUNNING")
    rig.dashboard.stop_job(submission)
    complete = rig.wait_status("dashback", "Complete")
    assert complete["jobStatus"] == "STOPPED"
    assert "reason" not in complete
    assert "jobStatusCheckFailureStartTime" not in complete


def _finish_k8s_job_during(rig: Rig, name: str, fault: Callable[[], Callable[[], None]]) -> Syncer:
    """K8sJobMode: Ray ends the job, then `fault()` runs, then the submitter pod ends; the
    callable `fault` returns is called after that (to heal). Returns the syncer."""
    derived = rig.deploy(name, "K8sJobMode")
    submission = derived["submissionId"]
    syncer = rig.start_syncer()
    pod = rig.play_submitter(name, submission)
    # Ray is done but the submitter is not: the job waits in Running for the submitter.
    wait_until(lambda: rig.status(name).get("jobStatus") == "SUCCEEDED", what="Ray's end")
    assert rig.status(name)["jobDeploymentStatus"] == "Running"
    heal = fault()
    rig.controllers.kubelet.set_phase(rig.namespace, pod, "Succeeded")
    heal()
    return syncer


def test_watch_dropped_mid_job_resumes_and_sees_the_submitter_end(rig: Rig) -> None:
    def drop() -> Callable[[], None]:
        assert rig.server.faults.drop_watches(abrupt=True) > 0
        return lambda: None

    syncer = _finish_k8s_job_during(rig, "dropped", drop)
    complete = rig.wait_status("dropped", "Complete")
    assert (complete["succeeded"], complete["failed"]) == (1, 0)
    # Resumed from the last resourceVersion seen: no relist was needed.
    assert syncer.pods.informers[0].relists == 1
    assert syncer.rayjob.jobs.informers[0].relists == 1


def test_compaction_while_watches_are_down_relists_and_sees_the_submitter_end(rig: Rig) -> None:
    blocked: list[Any] = []

    def block() -> Callable[[], None]:
        blocked.append(rig.server.faults.fail(503, verb="watch", times=None))
        assert rig.server.faults.drop_watches(abrupt=True) > 0

        def heal() -> None:
            rig.server.faults.compact()
            # Without its watches the syncer cannot learn that the submitter ended.
            hold_for(0.5, lambda: _assert_still_running(rig, "compacted"))
            rig.server.faults.remove(blocked[0])

        return heal

    syncer = _finish_k8s_job_during(rig, "compacted", block)
    complete = rig.wait_status("compacted", "Complete")
    assert (complete["succeeded"], complete["failed"]) == (1, 0)
    # Resuming from before the compaction got 410 Gone: the caches were listed again.
    assert syncer.pods.informers[0].relists >= 2
    assert syncer.rayjob.jobs.informers[0].relists >= 2


def _ray_status(dashboard: FakeDashboard, submission_id: str) -> str | None:
    info = dashboard.get_job(submission_id)
    return None if info is None else info["status"]


def _assert_still_running(rig: Rig, name: str) -> None:
    assert rig.status(name)["jobDeploymentStatus"] == "Running"


def _end_under_status_conflicts(rig: Rig, name: str) -> tuple[Syncer, int]:
    """An HTTPMode job whose end is published only at the third try (two 409s first).
    Returns the syncer and the resourceVersion from before the end."""
    derived = rig.deploy(name, "HTTPMode")
    submission = derived["submissionId"]
    rig.dashboard.plan_job(submission, JobPlan(pending_s=0.1, running_s=None))
    syncer = rig.start_syncer()
    wait_until(lambda: rig.status(name).get("jobStatus") == "RUNNING")
    since = rig.server.resource_version
    rig.server.faults.fail(
        409,
        verb="patch",  # the status is a guarded merge patch (M4), not a PUT
        resource="configmaps",
        namespace=rig.namespace,
        name=naming.status_configmap_name(name),
        times=2,
    )
    rig.dashboard.stop_job(submission)
    return syncer, since


def test_status_write_conflicts_are_retried_and_the_end_is_written_once(rig: Rig) -> None:
    syncer, since = _end_under_status_conflicts(rig, "conflict")
    complete = rig.wait_status("conflict", "Complete")
    assert (complete["jobStatus"], complete["succeeded"], complete["failed"]) == ("STOPPED", 0, 0)
    assert syncer.engine.stats["conflicts"] >= 2
    history = status_history(rig.kube, rig.namespace, "conflict", since)
    assert [s["jobDeploymentStatus"] for s in history] == ["Complete"]


def test_status_write_conflicts_do_not_repeat_the_end_event(rig: Rig) -> None:
    _end_under_status_conflicts(rig, "conflict")
    rig.wait_status("conflict", "Complete")

    def reasons() -> list[str]:
        events, _ = rig.kube.list(
            EVENTS, rig.namespace, label_selector=f"{naming.ORIGIN_NAME}=conflict"
        )
        return [e["reason"] for e in events]

    # The pass records its Events after the status write that announces them returned.
    wait_until(lambda: "Complete" in reasons(), what="the Complete event")
    assert reasons().count("Complete") == 1, reasons()


def test_failed_ungate_patches_are_retried(rig: Rig) -> None:
    derived = rig.deploy("ungate", "K8sJobMode")

    def gated_submitter() -> str | None:
        items, _ = rig.kube.list(PODS, rig.namespace, label_selector="job-name=ungate")
        for pod in items:
            conditions = (pod.get("status") or {}).get("conditions") or []
            if any(c.get("reason") == "SchedulingGated" for c in conditions):
                return str(pod["metadata"]["name"])
        return None

    # Cluster running and the submitter's gated status written: from now on the only
    # patches of that pod are the syncer's, until it is ungated.
    submitter: str = wait_until(gated_submitter, what="a gated submitter pod")
    cluster = [derived["headPodName"], *derived["workerPodNames"]]
    wait_until(lambda: all(_phase(rig, n) == "Running" for n in cluster), what="cluster running")
    rule = rig.server.faults.fail(
        503, verb="patch", resource="pods", namespace=rig.namespace, name=submitter, times=3
    )
    syncer = rig.start_syncer()
    assert rig.play_submitter("ungate", derived["submissionId"]) == submitter
    assert rule.hits == 3
    assert syncer.engine.stats["errors"] >= 3
    # The counter moves after the patch's reply, so the pod can be seen ungated first.
    wait_until(lambda: syncer.rayjob.stats["ungated"] >= 1, what="the ungate counted")
    assert syncer.rayjob.stats["ungated"] == 1
    running = rig.wait_status("ungate", "Running")
    assert running["jobId"] == derived["submissionId"]


def _phase(rig: Rig, name: str) -> str:
    pod = rig.kube.get(PODS, rig.namespace, name) or {}
    return str((pod.get("status") or {}).get("phase") or "")


def test_deadline_before_a_slow_submitter_submits_still_stops_the_late_ray_job(rig: Rig) -> None:
    derived = rig.deploy("late", "K8sJobMode", activeDeadlineSeconds=1)
    submission = derived["submissionId"]
    rig.dashboard.plan_job(submission, JobPlan(pending_s=0.1, running_s=None))
    rig.start_syncer()
    # The submitter pod is ungated and slow: the deadline passes before it submits.
    failed = rig.wait_status("late", "Failed")
    assert failed["reason"] == "DeadlineExceeded"
    rig.dashboard.submit_job(submission, "python -c 'import time; time.sleep(600)'")
    wait_until(
        lambda: _ray_status(rig.dashboard, submission) == "STOPPED",
        timeout=3,  # polls every 0.2 s; the fake stops a job 1.2 s after the request
        what="the late Ray job stopped",
    )


class Partition(ForwardingKube):
    """A `Kube` whose calls fail while `cut` is set: a replica whose lease renewals do not
    get through (a long pause, a partition), while its engine can still reach the API."""

    def __init__(self, kube: Kube) -> None:
        super().__init__(kube)
        self.cut = False

    def _target(self) -> Kube:
        if self.cut:
            raise TransientError("connection refused (test partition)")
        return self._inner


@dataclass
class Replica:
    """One in-process syncer replica: engine, elector and the thread that renews."""

    identity: str
    syncer: Syncer
    elector: LeaderElector
    lease_path: Partition
    stop: threading.Event
    thread: threading.Thread

    @property
    def user_agent(self) -> str:
        return f"kuberay-syncer/{self.identity}"

    def shutdown(self) -> None:
        self.stop.set()
        self.syncer.stop()
        self.thread.join(10)


def start_replica(kube_api: KubeApi, rig: Rig, identity: str) -> Replica:
    kube = KubeClient(kube_api.api_client, user_agent=f"kuberay-syncer/{identity}")
    lease_path = Partition(kube)
    engines: list[Syncer] = []
    elector = LeaderElector(
        lease_path,
        rig.namespace,
        "kuberay-syncer",
        identity,
        lease_duration_s=2.0,
        renew_deadline_s=1.5,
        retry_period_s=0.25,
        on_change=lambda leading: engines[0].engine.enqueue_all() if leading and engines else None,
    )
    options = Options(
        namespaces=(rig.namespace,),
        workers=2,
        poll_interval_s=0.2,
        settings=Settings(poll_interval_s=0.2),
    )
    syncer = Syncer(
        GuardedKube(kube, elector),
        options,
        dashboards=lambda url: rig.dashboard,
        is_leader=elector.is_fresh,
    )
    engines.append(syncer)
    stop = threading.Event()
    thread = threading.Thread(target=elector.run, args=(stop,), name=f"leader-{identity}")
    thread.start()
    syncer.start()
    return Replica(identity, syncer, elector, lease_path, stop, thread)


def test_stale_leader_stops_writing_before_the_other_replica_takes_over(
    kube_api: KubeApi, rig: Rig
) -> None:
    derived = rig.deploy("stale", "HTTPMode")
    submission = derived["submissionId"]
    rig.dashboard.plan_job(submission, JobPlan(pending_s=0.1, running_s=None))
    since = rig.server.resource_version
    replicas: list[Replica] = []
    try:
        a = start_replica(kube_api, rig, "replica-a")
        replicas.append(a)
        wait_until(lambda: _holder(rig) == "replica-a", what="replica-a leading")
        b = start_replica(kube_api, rig, "replica-b")
        replicas.append(b)
        wait_until(lambda: rig.status("stale").get("jobStatus") == "RUNNING")
        # A's renewals stop getting through; its engine still reaches the API.
        a.lease_path.cut = True
        wait_until(lambda: _holder(rig) == "replica-b", timeout=10, what="replica-b leading")
        assert not a.elector.is_fresh()
        rig.dashboard.stop_job(submission)
        complete = rig.wait_status("stale", "Complete")
        a.lease_path.cut = False
        hold_for(0.5, lambda: _assert_holder(rig, "replica-b"))
    finally:
        for replica in replicas:
            replica.shutdown()
    assert complete["jobStatus"] == "STOPPED"
    assert rig.dashboard.calls["submit_job"] == 1
    assert_clean_history(status_history(rig.kube, rig.namespace, "stale", since), "Complete")
    records = rig.server.audit.records(namespace=rig.namespace)
    a_writes = [r for r in records if r.is_write and r.user_agent == a.user_agent]
    b_writes = [r for r in records if r.is_write and r.user_agent == b.user_agent]
    took = next(r for r in b_writes if r.resource == "leases" and r.code < 300)
    assert a_writes
    assert all(r.seq < took.seq for r in a_writes)
    status_cm = naming.status_configmap_name("stale")
    assert any(r.name == status_cm and r.seq > took.seq for r in b_writes)


def _holder(rig: Rig) -> str:
    lease = rig.kube.get(LEASES, rig.namespace, "kuberay-syncer")
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


def _assert_holder(rig: Rig, identity: str) -> None:
    assert _holder(rig) == identity


# --- the daemon as a process, against a real Ray head ------------------------------------------


@dataclass
class DaemonRig:
    kube_api: KubeApi
    server: FakeApiServer
    kube: KubeClient
    head: RayHead
    workdir: Path
    config: Path
    daemons: list[Daemon] = field(default_factory=list)

    @property
    def namespace(self) -> str:
        return self.kube_api.namespace

    def start(self, identity: str) -> Daemon:
        daemon = Daemon.start(
            identity=identity,
            kubeconfig=self.kube_api.kubeconfig,
            config=self.config,
            namespace=self.namespace,
            dashboard_url=self.head.dashboard_url,
            workdir=self.workdir,
        )
        self.daemons.append(daemon)
        return daemon

    def lease_holder(self) -> str:
        lease = self.kube.get(LEASES, self.namespace, "kuberay-syncer")
        return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")

    def ray_jobs(self, submission_id: str) -> list[Manifest]:
        ray = HttpDashboard(self.head.dashboard_url, timeout=10)
        return [dict(j) for j in ray.list_jobs() if j["submission_id"] == submission_id]


def write_config(path: Path, namespace: str) -> Path:
    """A syncer config for one namespace: fast polls, short Lease timings, loopback ports."""
    path.write_text(
        "\n".join(
            [
                f"namespaces: [{namespace}]",
                "poll_interval_s: 0.2",
                "dashboard_timeout_s: 10",
                "health_port: 0",
                "metrics_port: 0",
                "bind_address: 127.0.0.1",
                "leader_election:",
                "  lease_duration_s: 2",
                "  renew_deadline_s: 1.5",
                "  retry_period_s: 0.25",
                "",
            ]
        )
    )
    return path


@pytest.fixture
def daemon_rig(
    kube_api: KubeApi, fake_controllers: Controllers, ray_head: RayHead, tmp_path: Path
) -> Iterator[DaemonRig]:
    config = write_config(tmp_path / "syncer.yaml", kube_api.namespace)
    kube = KubeClient(kube_api.api_client, user_agent="test")
    fake_controllers.start(interval=0.05)
    rig = DaemonRig(kube_api, kube_api.fake, kube, ray_head, tmp_path / "daemons", config)
    try:
        yield rig
    finally:
        for daemon in rig.daemons:
            daemon.stop()


def _lone_daemon(kube_api: KubeApi, tmp_path: Path) -> Daemon:
    return Daemon.start(
        identity="syncer-x",
        kubeconfig=kube_api.kubeconfig,
        config=write_config(tmp_path / "syncer.yaml", kube_api.namespace),
        namespace=kube_api.namespace,
        dashboard_url=None,
        workdir=tmp_path,
    )


def test_daemon_stops_promptly_on_sigterm_during_an_api_outage(
    kube_api: KubeApi, tmp_path: Path
) -> None:
    server = kube_api.fake
    kube = KubeClient(kube_api.api_client, user_agent="test")
    daemon = _lone_daemon(kube_api, tmp_path)
    try:
        daemon.wait_ready()
        wait_until(
            lambda: (
                (lease := kube.get(LEASES, kube_api.namespace, "kuberay-syncer"))
                and lease["spec"].get("holderIdentity") == "syncer-x"
            ),
            what="syncer-x leading",
        )
        server.faults.start_outage("refused")
        began = time.monotonic()
        code = daemon.terminate(timeout=30)
        stopped_in = time.monotonic() - began
    finally:
        daemon.kill()
        server.faults.end_outage()
    assert code == 0, daemon.log_text()[-3000:]
    assert stopped_in < 10, stopped_in
    messages = [str(r.get("message")) for r in daemon.log()]
    assert any(m.startswith("lease release failed") for m in messages), messages
    assert messages[-1] == "stopped"


def test_daemon_stops_promptly_on_sigterm_before_its_caches_sync(
    kube_api: KubeApi, tmp_path: Path
) -> None:
    kube_api.fake.faults.start_outage("refused")  # the API is down from the start
    daemon = _lone_daemon(kube_api, tmp_path)
    try:
        daemon.wait_started()
        assert daemon.terminate(timeout=4) == 0
    finally:
        daemon.kill()
    assert [str(r.get("message")) for r in daemon.log()][-1] == "stopped"


def _deploy_http_job(rig: DaemonRig, name: str, seconds: float) -> str:
    """Apply an HTTPMode RayJob (the syncer submits it) that runs for `seconds`."""
    entrypoint = f"python -c \"import time; time.sleep({seconds}); print('done')\""
    objects = render(job_manifest(name, mode="HTTPMode", entrypoint=entrypoint), rig.namespace)
    apply(rig.kube, objects, rig.namespace)
    intent = next(o for o in objects if o["metadata"]["name"].endswith("-kuberay-intent"))
    return str(json.loads(intent["data"][naming.INTENT_KEY])["derived"]["submissionId"])


def _writes(records: list[AuditRecord], daemon: Daemon) -> list[AuditRecord]:
    return [r for r in records if r.is_write and r.user_agent == daemon.user_agent]


@pytest.mark.e2e
def test_daemon_killed_mid_job_resumes_without_a_second_submission(daemon_rig: DaemonRig) -> None:
    rig = daemon_rig
    name = f"killed-{uuid.uuid4().hex[:5]}"
    since = rig.server.resource_version
    submission = _deploy_http_job(rig, name, seconds=4)
    first = rig.start("syncer-a")
    wait_until(
        lambda: any(s["created"] for s in first.submissions()),
        timeout=60,
        what=f"the submission by the first daemon\n{first.log_text()[-3000:]}",
    )
    # A crash right after the POST: the status may still say Initializing.
    assert first.kill() == -9
    assert rig.ray_jobs(submission)[0]["status"] in ("PENDING", "RUNNING")
    second = rig.start("syncer-b")
    status = wait_status(rig.kube, rig.namespace, name, "Complete", timeout=60)
    assert second.alive()

    assert (status["jobStatus"], status["jobId"]) == ("SUCCEEDED", submission)
    assert (status["succeeded"], status["failed"]) == (1, 0)
    # One Ray job with that submission ID, submitted once, by the first daemon only.
    (job,) = rig.ray_jobs(submission)
    assert job["status"] == "SUCCEEDED"
    assert [s["created"] for s in first.submissions()] == [True]
    assert second.submissions() == []
    # The status went Initializing → Running → Complete, each transition written once.
    assert_clean_history(status_history(rig.kube, rig.namespace, name, since), "Complete")
    records = rig.server.audit.records(namespace=rig.namespace)
    status_cm = naming.status_configmap_name(name)
    creates = [r for r in records if r.verb == "create" and r.name == status_cm]
    assert [r.user_agent for r in creates] == [first.user_agent]
    assert any(r.name == status_cm for r in _writes(records, second))


@pytest.mark.e2e
def test_leader_change_hands_the_job_over_without_duplicate_writes(daemon_rig: DaemonRig) -> None:
    rig = daemon_rig
    name = f"handover-{uuid.uuid4().hex[:5]}"
    since = rig.server.resource_version
    submission = _deploy_http_job(rig, name, seconds=5)
    leader = rig.start("syncer-a")
    wait_until(lambda: rig.lease_holder() == "syncer-a", timeout=60, what="syncer-a leading")
    standby = rig.start("syncer-b")
    standby.wait_started()
    wait_until(
        lambda: status_of(rig.kube, rig.namespace, name).get("jobStatus") == "RUNNING",
        timeout=60,
        what="the job running under syncer-a",
    )
    assert rig.lease_holder() == "syncer-a"
    stopping = time.monotonic()
    assert leader.terminate() == 0  # SIGTERM: graceful, releases the Lease
    wait_until(lambda: rig.lease_holder() == "syncer-b", timeout=10, what="syncer-b leading")
    takeover_s = time.monotonic() - stopping
    status = wait_status(rig.kube, rig.namespace, name, "Complete", timeout=60)

    assert takeover_s < 5, takeover_s
    assert (status["jobStatus"], status["succeeded"], status["failed"]) == ("SUCCEEDED", 1, 0)
    (job,) = rig.ray_jobs(submission)
    assert job["status"] == "SUCCEEDED"
    assert [s["created"] for s in leader.submissions()] == [True]
    assert standby.submissions() == []
    assert_clean_history(status_history(rig.kube, rig.namespace, name, since), "Complete")
    # The audit log, by user agent: A wrote only before it released the Lease; B only
    # after it took the Lease; and each wrote the job's status.
    records = rig.server.audit.records(namespace=rig.namespace)
    a_writes, b_writes = _writes(records, leader), _writes(records, standby)
    a_lease = [r for r in a_writes if r.resource == "leases"]
    released = a_lease[-1]
    assert released.verb == "update"
    assert all(r.seq < released.seq for r in a_writes if r.resource != "leases")
    b_lease = [r for r in b_writes if r.resource == "leases" and r.code < 300]
    took = b_lease[0]
    assert took.seq > released.seq
    b_other = [r for r in b_writes if r.resource != "leases"]
    assert b_other
    assert all(r.seq > took.seq for r in b_other)
    status_cm = naming.status_configmap_name(name)
    assert any(r.name == status_cm for r in a_writes)
    assert any(r.name == status_cm for r in b_writes)
    # A stopped cleanly and said so.
    messages = [str(r.get("message")) for r in leader.log()]
    assert "stopped" in messages
    assert any(m.startswith("lease released") for m in messages)
