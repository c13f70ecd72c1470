"""The syncer daemon against the real control plane, under the RBAC it ships with.

Each test installs what `kuberay syncer-manifests` renders (ServiceAccount, Roles,
RoleBindings, config) in a namespace of its own, mints the ServiceAccount's token through
the TokenRequest API and runs the `kuberay-syncer` daemon as a subprocess with only that
token: a 403 anywhere is a bug in the rendered Role or in the code. RayJobs rendered by
`kuberay render` are applied by a GitOps-like field manager; the real Job controller makes
the submitter pod, the real scheduler leaves it alone while the syncer's gate is on and
binds it afterwards, and the test kubelet runs its command for real against the session's
Ray head (no cluster DNS: the head Service address is rewritten to the head's address).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from renderer.naming import RUN_ANNOTATION
from tests.e2e.rayhead import RayHead
from tests.manifests import rayjob
from tests.realapi.conftest import Real, SubmitterRunner
from tests.realapi.gitops import GITOPS_MANAGER, apply_all
from tests.realapi.rest import RestError
from tests.realapi.rig import Rig, condition, gates, intent_of, running_syncer, wait_until

GATE = "kuberay.io/cluster-ready"
SHUTDOWN = "kuberay.io/shutdown-requested"


def job_manifest(
    name: str, entrypoint: str, *, run: str, mode: str = "K8sJobMode", **spec: object
) -> str:
    """The shared test RayJob, in a run of its own (`kuberay.io/run`: the test's namespace).

    Every test session shares one Ray head, and a RayJob's submission ID depends only on
    its name, spec and run: without a run of its own, a second test (or a repeated one)
    with the same name and spec would meet the first one's finished Ray job.
    """
    return rayjob(
        name, entrypoint=entrypoint, mode=mode, annotations={RUN_ANNOTATION: run}, spec=spec
    )


def test_syncer_ungates_the_submitter_the_real_scheduler_binds_it_and_the_job_succeeds(
    rig: Rig,
) -> None:
    objects = rig.render(
        job_manifest(
            "rj-ok",
            "python -c \"print('hello from the real API')\"",
            run=rig.namespace,
            shutdownAfterJobFinishes=True,
            ttlSecondsAfterFinished=1,
        )
    )
    derived = intent_of(objects)["derived"]
    cluster_pods = [derived["headPodName"], *derived["workerPodNames"]]
    # Wave 1: everything but the cluster pods, so the cluster cannot be ready yet.
    rig.apply([o for o in objects if o["kind"] != "Pod"])
    submitter = wait_until(lambda: next(iter(rig.job_pods("rj-ok")), None), "the submitter pod")
    name = submitter["metadata"]["name"]
    assert gates(submitter) == [GATE]
    # The real scheduler sees the gate and reports it; it binds nothing.
    gated = wait_until(
        lambda: condition(rig.pod(name), "PodScheduled"), "PodScheduled from the scheduler", 60
    )
    assert (gated["status"], gated["reason"]) == ("False", "SchedulingGated")
    assert not rig.pod(name)["spec"].get("nodeName")
    assert rig.status("rj-ok").get("jobDeploymentStatus") in (None, "Initializing")

    # Wave 2: the cluster pods. The kubelet makes them Ready, the syncer lifts the gate.
    rig.apply([o for o in objects if o["kind"] == "Pod"])
    complete = rig.wait_status("rj-ok", "Complete")
    pod = rig.pod(name)
    assert gates(pod) == []
    assert pod["spec"]["nodeName"] == rig.real.kubelet.node  # bound by kube-scheduler
    assert complete["jobStatus"] == "SUCCEEDED"
    assert complete["jobId"] == derived["submissionId"]
    log = rig.real.kubelet.log_of(rig.namespace, name)
    assert "hello from the real API" in log, log
    # The real Job controller counts the submitter pod's success.
    job = rig.rest.get("batch/v1", "Job", rig.namespace, "rj-ok")
    wait_until(
        lambda: rig.rest.get("batch/v1", "Job", rig.namespace, "rj-ok")["status"].get("succeeded"),
        "Job succeeded=1",
        timeout=60,
    )
    assert job["spec"]["template"]["spec"]["schedulingGates"] == [{"name": GATE}]
    # shutdownAfterJobFinishes + TTL 1 (ttl_mode stop): every cluster pod is asked to stop.
    wait_until(
        lambda: all(
            (rig.pod(p)["metadata"].get("annotations") or {}).get(SHUTDOWN) == "true"
            for p in cluster_pods
        ),
        "the shutdown annotations",
        timeout=60,
    )
    # The status ConfigMap belongs to its anchor, the Job (DESIGN: owned by the anchor).
    status_cm = rig.rest.get("v1", "ConfigMap", rig.namespace, "rj-ok-kuberay-status")
    (owner,) = status_cm["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Job", "rj-ok", job["metadata"]["uid"])
    # Deleting the Job: the real garbage collector removes its pod (after the Job
    # controller drops its tracking finalizer), and the syncer moves the status record to
    # the next anchor, the head pod, so the collector does not take it too.
    rig.rest.delete(
        f"/apis/batch/v1/namespaces/{rig.namespace}/jobs/rj-ok", propagationPolicy="Background"
    )
    wait_until(lambda: not rig.job_pods("rj-ok"), "garbage collection of the pod", timeout=90)
    head = rig.pod(derived["headPodName"])

    def owned_by_head() -> bool:
        found = rig.rest.get_or_none("v1", "ConfigMap", rig.namespace, "rj-ok-kuberay-status")
        refs = (found or {}).get("metadata", {}).get("ownerReferences") or []
        return [(r["kind"], r["uid"]) for r in refs] == [("Pod", head["metadata"]["uid"])]

    wait_until(owned_by_head, "the status ConfigMap owned by the head pod", timeout=60)
    assert rig.forbidden() == []


def test_httpmode_job_is_submitted_by_the_syncer_itself(rig: Rig) -> None:
    objects = rig.render(
        job_manifest(
            "rj-http", "python -c \"print('over http')\"", run=rig.namespace, mode="HTTPMode"
        )
    )
    assert not [o for o in objects if o["kind"] == "Job"]
    rig.apply(objects)
    complete = rig.wait_status("rj-http", "Complete")
    assert complete["jobStatus"] == "SUCCEEDED"
    assert rig.forbidden() == []


def test_gitops_reapply_after_the_syncer_wrote_does_not_conflict_or_flap(rig: Rig) -> None:
    objects = rig.render(
        job_manifest(
            "rj-own",
            "python -c \"print('ownership')\"",
            run=rig.namespace,
            shutdownAfterJobFinishes=True,
            ttlSecondsAfterFinished=0,
        )
    )
    derived = intent_of(objects)["derived"]
    head = derived["headPodName"]
    rig.apply(objects)
    rig.wait_status("rj-own", "Complete")
    wait_until(
        lambda: (rig.pod(head)["metadata"].get("annotations") or {}).get(SHUTDOWN) == "true",
        "the syncer's shutdown annotation",
        timeout=60,
    )
    # The GitOps tool syncs again (no force): no field-manager conflict on any object.
    before = {
        o["metadata"]["name"]: rig.rest.get(
            o["apiVersion"], o["kind"], rig.namespace, o["metadata"]["name"]
        )["metadata"]["resourceVersion"]
        for o in objects
    }
    for _ in range(2):
        failures = apply_all(rig.rest, objects, namespace=rig.namespace)
        assert not failures, failures
    pod = rig.pod(head)
    # The syncer's annotation survives git's apply: git never owned it.
    assert pod["metadata"]["annotations"][SHUTDOWN] == "true"
    managers = {m["manager"]: m for m in pod["metadata"]["managedFields"]}
    assert GITOPS_MANAGER in managers
    assert "kuberay-syncer" in managers, sorted(managers)
    # No flapping: re-applying the same git makes no write, and the syncer makes none in
    # answer (a live object's resourceVersion changes on every write).
    time.sleep(3)
    after = {
        o["metadata"]["name"]: rig.rest.get(
            o["apiVersion"], o["kind"], rig.namespace, o["metadata"]["name"]
        )["metadata"]["resourceVersion"]
        for o in objects
    }
    changed = {k for k in before if before[k] != after[k]}
    assert changed == set(), changed
    assert rig.forbidden() == []


def test_the_rendered_role_grants_the_syncer_no_more_than_it_needs(rig: Rig) -> None:
    user = f"system:serviceaccount:{rig.system_namespace}:kuberay-syncer"

    def allowed(verb: str, resource: str, namespace: str, group: str = "", sub: str = "") -> bool:
        review = rig.rest.request(
            "POST",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": user,
                    "groups": ["system:serviceaccounts", "system:authenticated"],
                    "resourceAttributes": {
                        "verb": verb,
                        "resource": resource,
                        "subresource": sub,
                        "group": group,
                        "namespace": namespace,
                    },
                },
            },
        )
        return bool(review["status"].get("allowed"))

    ns = rig.namespace
    # What it needs in the watched namespace.
    assert allowed("patch", "pods", ns)
    assert allowed("watch", "jobs", ns, "batch")
    assert allowed("create", "configmaps", ns)
    assert allowed("create", "pods", ns)  # the autoscaling actuator's dynamic workers
    # What it must not do: read secrets (no auth Secret set), exec into pods, anything in a
    # namespace it does not watch, or cluster-wide.
    assert not allowed("get", "secrets", ns)
    assert not allowed("patch", "pods", "kube-system")
    assert not allowed("list", "pods", "")
    assert not allowed("create", "pods", ns, sub="exec")
    # And the real server enforces it with the syncer's own token.
    with pytest.raises(RestError, match="403"):
        rig.sa_rest.list("v1", "Secret", ns)


def test_active_deadline_fails_the_job_and_stops_it_on_ray(rig: Rig) -> None:
    objects = rig.render(
        job_manifest(
            "rj-late",
            'python -c "import time; time.sleep(300)"',
            run=rig.namespace,
            mode="HTTPMode",
            activeDeadlineSeconds=6,
        )
    )
    rig.apply(objects)
    failed = rig.wait_status("rj-late", "Failed")
    assert failed["reason"] == "DeadlineExceeded"
    assert rig.forbidden() == []


def test_ttl_delete_mode_deletes_the_cluster_pods_and_the_kubelet_finishes_it(
    real: Real, ray_head: RayHead, submitters: SubmitterRunner, crds: list[str], tmp_path: Path
) -> None:
    # ttl_mode delete: the rendered config and Role of `--ttl-mode delete`.
    with running_syncer(real, ray_head, tmp_path, "--ttl-mode", "delete") as rig:
        assert rig.config["ttl_mode"] == "delete"
        objects = rig.render(
            job_manifest(
                "rj-ttl",
                "python -c \"print('ttl')\"",
                run=real.namespace,
                mode="HTTPMode",
                shutdownAfterJobFinishes=True,
                ttlSecondsAfterFinished=0,
            )
        )
        derived = intent_of(objects)["derived"]
        cluster_pods = [derived["headPodName"], *derived["workerPodNames"]]
        rig.apply(objects)
        rig.wait_status("rj-ttl", "Complete")
        # Graceful deletion on the real server: the pods go only when the kubelet confirms.
        wait_until(
            lambda: all(
                real.rest.get_or_none("v1", "Pod", real.namespace, p) is None for p in cluster_pods
            ),
            "the cluster pods deleted",
            timeout=90,
        )
        assert rig.forbidden() == []
