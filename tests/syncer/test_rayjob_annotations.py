"""When the syncer writes the `status.kuberay.io/*` annotations on a RayJob's submitter Job.

The status ConfigMap is the record; the annotations are for Argo CD's health of the Job
(renderer/health/job.lua), which is in git. The syncer writes them only once the Job's own
conditions would give another verdict than the RayJob's state, then keeps them exact. On
the fake API server, with a rendered Job and the syncer's own cache projection.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from syncer import status
from syncer.kube.cache import Cache
from syncer.kube.client import JOBS, PODS, KubeClient, Manifest
from syncer.ray.pool import DashboardPool
from syncer.rayjob import actions, views
from syncer.rayjob.intent import JobIntent, parse_job_intent
from tests.fakeapi.fixtures import KubeApi
from tests.syncer.fakedashboard import FakeDashboard
from tests.syncer.harness import apply, render
from tests.syncer.test_rayjob_reconciler import demo_job

ANN = f"{status.STATUS_ANNOTATION_PREFIX}job-deployment-status"


@dataclass
class Anchor:
    kube: KubeClient
    jobs: Cache
    hands: actions.Actions
    intent: JobIntent
    owner: status.Owner
    namespace: str
    api: KubeApi

    def live(self) -> Manifest:
        job = self.kube.get(JOBS, self.namespace, "demo")
        assert job is not None
        return job

    def publish(self, deployment: str, job_status: str = "") -> None:
        """What the reconciler does after publishing a record with these words."""
        words = {"jobDeploymentStatus": deployment, "jobStatus": job_status}
        self.hands.annotate_anchor(self.intent, self.owner, words)

    def set_conditions(self, *types: str) -> None:
        """The Job controller's conditions on the submitter Job, seen by the cache."""
        conditions = [{"type": t, "status": "True", "reason": "Test"} for t in types]
        self.api.batch.patch_namespaced_job_status(
            "demo", self.namespace, {"status": {"conditions": conditions}}
        )
        self.jobs.upsert(self.live())


@pytest.fixture
def anchor(kube_api: KubeApi) -> Anchor:
    kube = KubeClient(kube_api.api_client)
    ns = kube_api.namespace
    objects = render(demo_job(mode="K8sJobMode"), ns)
    created = apply(kube, objects, ns)
    intent_cm = next(o for o in created if o["metadata"]["name"] == "demo-kuberay-intent")
    jobs = Cache.watching(kube, JOBS, (ns,), project=views.cached_job)
    pods = Cache.watching(kube, PODS, (ns,), project=views.cached_pod)
    pods.add_index("jobname", views.job_of)  # as the RayJob reconciler adds it
    job = next(o for o in created if o["kind"] == "Job")
    jobs.upsert(job)
    pool = DashboardPool(lambda url: FakeDashboard(lambda: 0.0), budget_rps=10)
    hands = actions.Actions(kube, pool, pods, jobs, clock=lambda: 0.0)
    owner = status.Owner("batch/v1", "Job", "demo", str(job["metadata"]["uid"]))
    return Anchor(kube, jobs, hands, parse_job_intent(intent_cm), owner, ns, kube_api)


def _annotations(job: Manifest) -> dict[str, str]:
    found = job["metadata"].get("annotations") or {}
    return {k: v for k, v in found.items() if k.startswith(status.STATUS_ANNOTATION_PREFIX)}


def test_a_job_that_runs_and_completes_leaves_its_job_unwritten(anchor: Anchor) -> None:
    version = anchor.live()["metadata"]["resourceVersion"]
    anchor.publish("Initializing")
    anchor.publish("Running", "RUNNING")  # the Job is active: Progressing either way
    assert anchor.live()["metadata"]["resourceVersion"] == version
    anchor.set_conditions("SuccessCriteriaMet", "Complete")
    version = anchor.live()["metadata"]["resourceVersion"]
    anchor.publish("Complete", "SUCCEEDED")  # the Job is Complete: Healthy either way
    assert anchor.live()["metadata"]["resourceVersion"] == version
    assert _annotations(anchor.live()) == {}


def test_a_job_complete_before_its_submitter_job_is_annotated(anchor: Anchor) -> None:
    # Ray said SUCCEEDED while the submitter still follows the logs: the Job alone would
    # stay Progressing until it exits, so the annotation says Complete now.
    anchor.publish("Complete", "SUCCEEDED")
    assert _annotations(anchor.live())[ANN] == "Complete"


def test_a_job_complete_whose_submitter_pod_succeeded_waits_for_the_job_controller(
    anchor: Anchor,
) -> None:
    # The pod's end (its watch event) usually starts the pass that publishes Complete,
    # a moment before the Job controller marks the Job: Healthy by itself then.
    job = anchor.live()
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "demo-x1",
            "labels": {"job-name": "demo", "batch.kubernetes.io/job-name": "demo"},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "demo",
                    "uid": job["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {"containers": [{"name": "ray-job-submitter", "image": "x"}]},
    }
    anchor.kube.create(PODS, anchor.namespace, pod)
    anchor.api.core.patch_namespaced_pod_status(
        "demo-x1", anchor.namespace, {"status": {"phase": "Succeeded"}}
    )
    live = anchor.kube.get(PODS, anchor.namespace, "demo-x1")
    assert live is not None
    anchor.hands.pods.upsert(live)
    # Ray's SUCCEEDED seen before the Job controller marked the Job: the RayJob waits for
    # it (Running), Progressing as the Job is now; then Complete, Healthy as it is next.
    anchor.publish("Running", "SUCCEEDED")
    assert _annotations(anchor.live()) == {}
    anchor.publish("Complete", "SUCCEEDED")
    assert _annotations(anchor.live()) == {}
    anchor.publish("Failed", "FAILED")  # a pod that succeeded says nothing of a failure
    assert _annotations(anchor.live())[ANN] == "Failed"


def test_a_job_complete_whose_submitter_met_its_success_criteria_is_left_unwritten(
    anchor: Anchor,
) -> None:
    # Kubernetes 1.31+: SuccessCriteriaMet first, Complete once the pod has terminated;
    # the syncer publishes Complete on the first, and the Job is Healthy a moment later.
    anchor.set_conditions("SuccessCriteriaMet")
    version = anchor.live()["metadata"]["resourceVersion"]
    anchor.publish("Running", "SUCCEEDED")
    anchor.publish("Complete", "SUCCEEDED")
    assert anchor.live()["metadata"]["resourceVersion"] == version
    anchor.publish("Failed", "FAILED")  # success criteria say nothing of a Ray failure
    assert _annotations(anchor.live())[ANN] == "Failed"


def test_a_failure_under_a_job_that_succeeded_is_annotated(anchor: Anchor) -> None:
    anchor.set_conditions("Complete")
    anchor.publish("Failed", "FAILED")
    assert _annotations(anchor.live()) == {
        ANN: "Failed",
        f"{status.STATUS_ANNOTATION_PREFIX}job-status": "FAILED",
    }


def test_a_retry_after_its_job_failed_is_annotated_and_then_kept_exact(anchor: Anchor) -> None:
    anchor.set_conditions("Failed")
    anchor.publish("Failed", "FAILED")  # Degraded either way: nothing written
    assert _annotations(anchor.live()) == {}
    anchor.publish("Retrying", "FAILED")  # the Job alone says Degraded
    assert _annotations(anchor.live())[ANN] == "Retrying"
    # Once there, they follow every state, even one the Job's verdict would give.
    anchor.publish("Running", "RUNNING")
    assert _annotations(anchor.live())[ANN] == "Running"
    anchor.publish("Failed", "FAILED")
    assert _annotations(anchor.live())[ANN] == "Failed"
