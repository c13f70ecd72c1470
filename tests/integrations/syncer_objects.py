"""Objects the syncer really writes, for the health-script tests (the one file that imports it).

Runs the syncer's own test rigs (tests/syncer: the fake API server, its Job controller and
kubelet simulators, the fake dashboard, a Gateway simulator) and records, as the objects
change, every distinct state of what Argo CD and Flux would read: the status ConfigMap, the
submitter Job, the RayService intent ConfigMap and the HTTPRoute. When the syncer's
packages move, only the imports here change.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from renderer import naming
from syncer.cli import Options, Syncer
from syncer.kube.client import CONFIGMAPS, HTTPROUTES, JOBS, KubeClient
from syncer.raycluster.reconciler import Options as ClusterOptions
from syncer.rayjob import views
from syncer.rayjob.machine import Settings
from syncer.rayservice import record as rs
from tests.fakeapi.controllers import Controllers
from tests.fakeapi.fixtures import KubeApi
from tests.syncer import test_raycluster_reconciler as cluster_loop
from tests.syncer import test_rayjob_reconciler as job_loop
from tests.syncer import test_rayservice_reconciler as serving_loop
from tests.syncer.fakedashboard import FakeDashboard, JobPlan
from tests.syncer.harness import apply, render, wait_until

Manifest = dict[str, Any]


@dataclass
class Seen:
    """Distinct snapshots of live objects, keyed by a short label of their state."""

    states: dict[str, Manifest] = field(default_factory=dict)

    def add(self, label: str, obj: Manifest | None) -> None:
        if obj is not None and label not in self.states:
            self.states[label] = copy.deepcopy(obj)


def _jds(cm: Manifest | None) -> str:
    return str(((cm or {}).get("data") or {}).get("jobDeploymentStatus", "<none>"))


def _ann(obj: Manifest | None) -> str:
    annotations = ((obj or {}).get("metadata") or {}).get("annotations") or {}
    return str(annotations.get("status.kuberay.io/job-deployment-status", "<none>"))


def rendered_submitter() -> Manifest:
    """The submitter Job `kuberay render` makes for RayJob `demo` (K8sJobMode)."""
    objects = render(job_loop.demo_job(mode="K8sJobMode", backoff=0), "ns")
    return next(o for o in objects if o["kind"] == "Job")


def run_rayjob(
    kube_api: KubeApi,
    *,
    mode: str,
    backoff: int,
    outcomes: list[Literal["SUCCEEDED", "FAILED"]],
    submitter_exit: int = 0,
) -> tuple[Seen, Seen]:
    """Run RayJob `demo` to its end; (status ConfigMap states, submitter Job states)."""
    kube_api.fake  # noqa: B018 - the simulators need the fake server
    ns = kube_api.namespace
    kube = KubeClient(kube_api.api_client)
    dashboard = FakeDashboard(time.time, job_plan=JobPlan(pending_s=0.2, running_s=0.4))
    options = Options(
        namespaces=(ns,),
        workers=2,
        poll_interval_s=0.1,
        settings=Settings(submitter_finished_timeout_s=30),
    )
    syncer = Syncer(kube, options, dashboards=lambda url: dashboard)
    controllers = Controllers(kube_api.api_client, namespace=ns)
    objects = render(job_loop.demo_job(mode=mode, backoff=backoff), ns)
    intent = json.loads(
        next(o for o in objects if o["metadata"]["name"] == "demo-kuberay-intent")["data"][
            "intent.json"
        ]
    )
    first = intent["derived"]["submissionId"]
    for attempt, outcome in enumerate(outcomes):
        submission = first if attempt == 0 else f"{first}-{attempt}"
        dashboard.plan_job(submission, JobPlan(pending_s=0.1, running_s=0.4, outcome=outcome))
    statuses, jobs = Seen(), Seen()
    apply(kube, objects, ns)
    jobs.add("created", kube.get(JOBS, ns, "demo"))

    def look() -> str:
        cm = kube.get(CONFIGMAPS, ns, naming.status_configmap_name("demo"))
        job = kube.get(JOBS, ns, "demo")
        statuses.add(_jds(cm), cm)
        jobs.add(_ann(job), job)
        return _jds(cm)

    try:
        controllers.start(interval=0.05)
        syncer.start()
        if mode == "K8sJobMode":
            rig = job_loop.Rig(kube, syncer, dashboard, controllers, ns)
            _submit_like_the_submitter(rig, first, submitter_exit, look)
        final = "Failed" if outcomes[-1] == "FAILED" else "Complete"
        wait_until(lambda: look() == final, what=final, interval=0.02)
        verdict = {"Complete": "Healthy", "Failed": "Degraded"}[final]

        def shown(job: Manifest | None) -> bool:
            # Annotated, or (left alone) its own conditions already give the verdict.
            own = job is not None and views.job_health(job) == verdict
            return _ann(job) == final or (_ann(job) == "<none>" and own)

        wait_until(lambda: shown(kube.get(JOBS, ns, "demo")), what="the Job's final verdict")
        look()
        # The Job as it stays: annotated only when its own conditions would not say `final`.
        final_job = kube.get(JOBS, ns, "demo")
        assert final_job is not None
        jobs.states["final"] = copy.deepcopy(final_job)
    finally:
        syncer.stop()
        controllers.stop()
    return statuses, jobs


def _submit_like_the_submitter(
    rig: job_loop.Rig, submission: str, exit_code: int, look: Callable[[], str]
) -> None:
    """The rendered submitter's part: submit once ungated, end with the Ray job."""
    pod = wait_until(
        lambda: (
            look() is not None
            and next(
                (p for p in rig.submitter_pods() if not (p["spec"].get("schedulingGates") or [])),
                None,
            )
        ),
        what="an ungated submitter pod",
        interval=0.02,
    )
    rig.dashboard.submit_job(submission, "python -c 'print(1)'")
    wait_until(
        lambda: look() is not None and rig.ray_status(submission) in ("SUCCEEDED", "FAILED"),
        what="the Ray job to end",
        interval=0.02,
    )
    rig.controllers.kubelet.set_phase(
        rig.namespace,
        pod["metadata"]["name"],
        "Succeeded" if exit_code == 0 else "Failed",
        exit_code=exit_code,
    )


@dataclass
class ServiceStates:
    """What a RayService's incremental upgrade left on the objects Argo CD and Flux read."""

    statuses: Seen
    intents: Seen
    routes: Seen


def run_rayservice_upgrade(kube_api: KubeApi) -> ServiceStates:
    """Deploy RayService `greeter`, then upgrade it incrementally; record every state."""
    kube_api.fake  # noqa: B018 - the simulators need the fake server
    ns = kube_api.namespace
    kube = serving_loop.RecordingKube(kube_api.api_client)
    controllers = Controllers(kube_api.api_client, namespace=ns)
    gateways = serving_loop.GatewaySim(kube_api)
    rig = serving_loop.Rig(kube_api, kube, controllers, gateways, serving_loop.GitOps(kube, ns))
    states = ServiceStates(Seen(), Seen(), Seen())

    def look() -> rs.Record:
        cm = kube.get(CONFIGMAPS, ns, naming.status_configmap_name("greeter"))
        intent = kube.get(CONFIGMAPS, ns, naming.intent_configmap_name("greeter"))
        route = kube.get(HTTPROUTES, ns, "greeter-httproute")
        data = (cm or {}).get("data") or {}
        states.statuses.add(f"{data.get('serviceStatus')}|{data.get('pendingCluster')}", cm)
        annotations = ((intent or {}).get("metadata") or {}).get("annotations") or {}
        states.intents.add(
            f"{annotations.get('status.kuberay.io/service-status', '<none>')}|"
            f"{annotations.get('status.kuberay.io/pending-cluster', '')}",
            intent,
        )
        refs = [
            f"{ref.get('name')}={ref.get('weight')}"
            for rule in ((route or {}).get("spec") or {}).get("rules") or []
            for ref in rule.get("backendRefs") or []
        ]
        accepted = bool(((route or {}).get("status") or {}).get("parents"))
        states.routes.add(f"{','.join(refs)}|{accepted}", route)
        return rig.record()

    controllers.start(interval=0.05)
    gateways.start()
    try:
        v1 = render(serving_loop.manifest(), ns)
        gen1 = serving_loop.generation_of(v1)
        rig.gitops.sync(v1)
        look()
        rig.start_syncer()
        wait_until(lambda: look().is_true(rs.READY), what="Ready", interval=0.02)
        wait_until(
            lambda: (
                look() is not None
                and (
                    (
                        (kube.get(CONFIGMAPS, ns, naming.intent_configmap_name("greeter")) or {})
                        .get("metadata", {})
                        .get("annotations")
                        or {}
                    ).get("status.kuberay.io/active-cluster")
                    == gen1
                )
            ),
            what="the intent annotated",
            interval=0.02,
        )
        v2 = render(serving_loop.manifest(cpu="2"), ns)
        gen2 = serving_loop.generation_of(v2)
        rig.gitops.sync(v2)
        wait_until(
            lambda: (r := look()).active.name == gen2 and not r.pending.name,
            what="promotion",
            interval=0.02,
        )
        wait_until(lambda: rig.weights() == {gen2: 100} and look(), what="one backend")
        look()
    finally:
        rig.stop_syncer()
        gateways.stop()
        controllers.stop()
    return states


def run_raycluster(kube_api: KubeApi) -> Seen:
    """A plain RayCluster's status ConfigMap: provisioning, ready, a worker lost, head down.

    Recovery is off, so the failed worker stays and the status shows it.
    """
    rig = cluster_loop.make_rig(kube_api, options=ClusterOptions(debounce_s=0.05, recovery=False))
    seen = Seen()
    ns = rig.namespace

    def look(label: str, done: Callable[[Manifest], bool]) -> None:
        def ready() -> bool:
            cm = rig.status_cm()
            if cm is not None and done(cm["data"]):
                seen.add(label, cm)
                return True
            return False

        wait_until(ready, what=label)

    try:
        apply(rig.kube, rig.objects, ns)
        rig.syncer.start()
        # Head and workers created, not running yet: the kubelet has not stepped.
        look("provisioning", lambda d: d.get("provisioned") == "False")
        rig.controllers.start(interval=0.05)
        look("ready", lambda d: d.get("state") == "ready" and d.get("availableWorkers") == "2")
        worker = rig.pods("worker")[0]["metadata"]["name"]
        rig.controllers.kubelet.set_phase(ns, worker, "Failed")
        look("worker-lost", lambda d: d.get("availableWorkers") == "1")
        rig.controllers.stop()
        head = rig.pods("head")[0]["metadata"]["name"]
        rig.controllers.kubelet.set_ready(ns, head, False)
        look("head-not-ready", lambda d: d.get("headPodReady") == "False")
    finally:
        rig.syncer.stop()
        rig.controllers.stop()
    return seen
