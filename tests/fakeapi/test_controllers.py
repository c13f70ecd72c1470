"""The Job controller and kubelet simulators, driven against the fake API server over REST."""

import re
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from tests.fakeapi.controllers import CommandRunner, Controllers, Rest
from tests.fakeapi.fixtures import KubeApi

pytestmark = pytest.mark.timeout(30)

GATE = "kuberay.io/cluster-ready"
Manifest = dict[str, Any]


def _job(
    name: str,
    *,
    command: list[str] | None = None,
    env: list[client.V1EnvVar] | None = None,
    backoff_limit: int | None = None,
    parallelism: int | None = None,
    completions: int | None = None,
    suspend: bool | None = None,
    gates: list[str] | None = None,
) -> client.V1Job:
    container = client.V1Container(name="main", image="python:3.11", command=command, env=env)
    return client.V1Job(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1JobSpec(
            backoff_limit=backoff_limit,
            parallelism=parallelism,
            completions=completions,
            suspend=suspend,
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels={"app": name}),
                spec=client.V1PodSpec(
                    restart_policy="Never",
                    containers=[container],
                    scheduling_gates=[client.V1PodSchedulingGate(name=g) for g in gates or []]
                    or None,
                ),
            ),
        ),
    )


def _pods(kube_api: KubeApi) -> list[Manifest]:
    return Rest(kube_api.api_client).list("v1", "pods", kube_api.namespace)


def _phase(pod: Manifest) -> str:
    return str(pod["status"]["phase"])


def _name(pod: Manifest) -> str:
    return str(pod["metadata"]["name"])


def _conditions(job) -> dict[str, str]:
    return {c.type: c.status for c in job.status.conditions or []}


def _eventually(
    check: Callable[[], bool], step: Callable[[], object], timeout: float = 15.0
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        step()
        if check():
            return
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)


def test_job_controller_creates_a_labelled_owned_pod(kube_api, fake_controllers):
    ns = kube_api.namespace
    job = kube_api.batch.create_namespaced_job(ns, _job("train"))
    assert fake_controllers.jobs.step() == 2  # the pod and the job status
    [pod] = _pods(kube_api)
    assert re.fullmatch(r"train-[bcdfghjklmnpqrstvwxz2456789]{5}", _name(pod))
    uid = job.metadata.uid
    assert pod["metadata"]["labels"] == {
        "app": "train",
        "batch.kubernetes.io/job-name": "train",
        "job-name": "train",
        "batch.kubernetes.io/controller-uid": uid,
        "controller-uid": uid,
    }
    [owner] = pod["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "Job",
        "train",
        uid,
        True,
    )
    status = kube_api.batch.read_namespaced_job("train", ns).status
    assert status.active == 1
    assert status.start_time is not None
    assert fake_controllers.jobs.step() == 0


def test_kubelet_runs_pods_and_the_job_completes(kube_api, fake_controllers):
    ns = kube_api.namespace
    kube_api.batch.create_namespaced_job(ns, _job("done"))
    fake_controllers.settle()
    [pod] = _pods(kube_api)
    assert _phase(pod) == "Running"
    assert pod["status"]["podIP"] == "127.0.0.1"
    assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"] == "True"
    assert "running" in pod["status"]["containerStatuses"][0]["state"]
    assert kube_api.batch.read_namespaced_job("done", ns).status.ready == 1
    fake_controllers.kubelet.set_phase(ns, _name(pod), "Succeeded")
    fake_controllers.settle()
    job = kube_api.batch.read_namespaced_job("done", ns)
    assert _conditions(job) == {"SuccessCriteriaMet": "True", "Complete": "True"}
    assert job.status.succeeded == 1
    assert not job.status.active
    assert job.status.completion_time is not None
    [finished] = _pods(kube_api)
    assert finished["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0


def test_backoff_limit_fails_the_job(kube_api, fake_controllers):
    ns = kube_api.namespace
    kube_api.batch.create_namespaced_job(ns, _job("flaky", backoff_limit=1))
    fake_controllers.settle()
    fake_controllers.kubelet.set_phase(ns, _name(_pods(kube_api)[0]), "Failed", exit_code=2)
    fake_controllers.settle()
    pods = _pods(kube_api)
    assert sorted(_phase(p) for p in pods) == ["Failed", "Running"]
    running = next(p for p in pods if _phase(p) == "Running")
    fake_controllers.kubelet.set_phase(ns, _name(running), "Failed")
    fake_controllers.settle()
    job = kube_api.batch.read_namespaced_job("flaky", ns)
    assert _conditions(job) == {"FailureTarget": "True", "Failed": "True"}
    assert job.status.failed == 2
    assert (
        next(c for c in job.status.conditions if c.type == "Failed").reason
        == "BackoffLimitExceeded"
    )
    assert len(_pods(kube_api)) == 2


def test_gated_pod_waits_until_its_gate_is_removed(kube_api, fake_controllers):
    ns = kube_api.namespace
    kube_api.batch.create_namespaced_job(ns, _job("gated", gates=[GATE]))
    fake_controllers.settle()
    [pod] = _pods(kube_api)
    assert _phase(pod) == "Pending"
    [scheduled] = pod["status"]["conditions"]
    assert (scheduled["type"], scheduled["status"], scheduled["reason"]) == (
        "PodScheduled",
        "False",
        "SchedulingGated",
    )
    kube_api.core.patch_namespaced_pod(
        _name(pod), ns, {"spec": {"schedulingGates": [{"name": GATE, "$patch": "delete"}]}}
    )
    fake_controllers.settle()
    assert _phase(_pods(kube_api)[0]) == "Running"


def test_suspended_job_creates_no_pods_until_resumed(kube_api, fake_controllers):
    ns = kube_api.namespace
    kube_api.batch.create_namespaced_job(ns, _job("later", suspend=True))
    fake_controllers.settle()
    assert _pods(kube_api) == []
    assert _conditions(kube_api.batch.read_namespaced_job("later", ns)) == {"Suspended": "True"}
    kube_api.batch.patch_namespaced_job("later", ns, {"spec": {"suspend": False}})
    fake_controllers.settle()
    assert len(_pods(kube_api)) == 1
    assert _conditions(kube_api.batch.read_namespaced_job("later", ns)) == {"Suspended": "False"}


def test_parallelism_and_completions(kube_api, fake_controllers):
    ns = kube_api.namespace
    kube_api.batch.create_namespaced_job(ns, _job("par", parallelism=2, completions=3))
    fake_controllers.settle()
    first = _pods(kube_api)
    assert len(first) == 2
    for pod in first:
        fake_controllers.kubelet.set_phase(ns, _name(pod), "Succeeded")
    fake_controllers.settle()
    remaining = [p for p in _pods(kube_api) if _phase(p) == "Running"]
    assert len(remaining) == 1
    fake_controllers.kubelet.set_phase(ns, _name(remaining[0]), "Succeeded")
    fake_controllers.settle()
    job = kube_api.batch.read_namespaced_job("par", ns)
    assert job.status.succeeded == 3
    assert _conditions(job)["Complete"] == "True"


def test_deleting_a_job_in_background_deletes_its_pods(kube_api, fake_controllers):
    ns = kube_api.namespace
    kube_api.batch.create_namespaced_job(ns, _job("gone"))
    fake_controllers.settle()
    assert len(_pods(kube_api)) == 1
    kube_api.batch.delete_namespaced_job("gone", ns, propagation_policy="Background")
    assert _pods(kube_api) == []
    assert fake_controllers.settle() == 0


def test_hook_runs_the_pod_command_for_real(kube_api, tmp_path):
    kube_api.fake  # noqa: B018 -- skips on a real cluster
    ns = kube_api.namespace
    runner = CommandRunner(tmp_path / "logs")
    env = [
        client.V1EnvVar(name="GREETING", value="hello"),
        client.V1EnvVar(
            name="POD_NAME",
            value_from=client.V1EnvVarSource(
                field_ref=client.V1ObjectFieldSelector(field_path="metadata.name")
            ),
        ),
    ]
    script = "import os; print(os.environ['GREETING'], os.environ['POD_NAME'])"
    kube_api.batch.create_namespaced_job(
        ns, _job("ok", command=[sys.executable, "-c", script], env=env)
    )
    kube_api.batch.create_namespaced_job(
        ns, _job("bad", command=[sys.executable, "-c", "raise SystemExit(3)"], backoff_limit=0)
    )
    with Controllers(kube_api.api_client, namespace=ns, hook=runner) as controllers:

        def finished() -> bool:
            jobs = kube_api.batch.list_namespaced_job(ns).items
            return all(_conditions(j).keys() & {"Complete", "Failed"} for j in jobs)

        _eventually(finished, controllers.step)
    jobs = {j.metadata.name: _conditions(j) for j in kube_api.batch.list_namespaced_job(ns).items}
    assert jobs["ok"]["Complete"] == "True"
    assert jobs["bad"]["Failed"] == "True"
    pods = {p["metadata"]["labels"]["job-name"]: p for p in _pods(kube_api)}
    assert pods["bad"]["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
    ok_name = _name(pods["ok"])
    assert runner.log_path(ns, ok_name).read_text() == f"hello {ok_name}\n"


def test_controllers_run_in_a_background_thread(kube_api, fake_controllers):
    ns = kube_api.namespace
    fake_controllers.start(interval=0.02)
    kube_api.batch.create_namespaced_job(ns, _job("bg"))

    def running() -> bool:
        return [_phase(p) for p in _pods(kube_api)] == ["Running"]

    _eventually(running, lambda: None)
    fake_controllers.stop()
    assert kube_api.batch.read_namespaced_job("bg", ns).status.active == 1


def test_background_controllers_survive_api_errors(kube_api, fake_controllers):
    server = kube_api.fake
    ns = kube_api.namespace
    rule = server.faults.fail(503, verb="list", resource="jobs.batch", times=3)
    fake_controllers.start(interval=0.02)
    _eventually(lambda: rule.remaining == 0, lambda: None)
    kube_api.batch.create_namespaced_job(ns, _job("after-errors"))
    _eventually(lambda: len(_pods(kube_api)) == 1, lambda: None)
