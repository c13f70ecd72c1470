"""Autoscaling end to end: a real Ray head, Ray's own v2 monitor, the provider, the syncer.

One loopback Ray head (0 CPUs, autoscaler v2, `--no-monitor`) stands for the rendered head
Pod, whose fake-API twin carries the same instance id; Ray's `ray.autoscaler.v2.monitor`
runs with the project's provider against the fake API server; the syncer's actuator makes
the worker Pods; the fake kubelet turns each into a Ray worker node. One flow, so the head
starts once: min at start, scale-up from task demand, request_resources and the max cap,
idle scale-down to min, and a monitor restart that adopts the existing Pods. Timings are
shown in the terminal summary, not asserted. Each worker costs a raylet, so the group stays
at 1..2 workers, and the test runs only with KUBERAY_E2E_AUTOSCALING=1.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from renderer.assets.autoscaler import kuberay_gitops_autoscaler as provider_module
from syncer.cli import Options, Syncer
from syncer.kube.client import CONFIGMAPS, PODS, KubeClient
from tests.autoscaler import live, rig
from tests.e2e import fixtures as e2e_fixtures
from tests.e2e.rayhead import RayHead, RayHeadError
from tests.fakeapi.controllers import Controllers
from tests.fakeapi.fixtures import KubeApi
from tests.syncer.fakedashboard import FakeDashboard
from tests.syncer.harness import wait_until

# Opt-in: a head, the monitor and up to two worker raylets cost about 1.5 GB and minutes of
# CPU; on a loaded 2-core machine a raylet can miss Ray's fixed 30 s registration window.
OPT_IN = "KUBERAY_E2E_AUTOSCALING"
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get(OPT_IN) != "1", reason=f"set {OPT_IN}=1 to run"),
]
Manifest = dict[str, Any]
IDLE_S = 5
WAIT_S = 300.0

RAY_CLUSTER = {
    "apiVersion": "ray.io/v1",
    "kind": "RayCluster",
    "metadata": {"name": rig.CLUSTER},
    "spec": {
        "enableInTreeAutoscaling": True,
        "autoscalerOptions": {"idleTimeoutSeconds": IDLE_S},
        "headGroupSpec": {
            "rayStartParams": {"num-cpus": "0"},
            "template": {"spec": {"containers": [{"name": "ray-head", "image": "ray"}]}},
        },
        "workerGroupSpecs": [
            {
                "groupName": rig.GROUP,
                "replicas": 1,
                "minReplicas": 1,
                "maxReplicas": 2,
                "rayStartParams": {"num-cpus": "1"},
                "template": {"spec": {"containers": [{"name": "ray-worker", "image": "ray"}]}},
            }
        ],
    },
}

TWO_TASKS = """
import time, ray
ray.init()
@ray.remote(num_cpus=1)
def hold():
    time.sleep(4)
    return 1
print(sum(ray.get([hold.remote(), hold.remote()])))
"""
REQUEST = """
import ray
from ray.autoscaler.sdk import request_resources
ray.init()
request_resources(num_cpus={cpus})
"""


@dataclass
class Live:
    kube: KubeClient
    namespace: str
    head: RayHead
    monitor: live.Monitor
    workers: live.RayWorkers
    scripts: Path
    timings: dict[str, float]

    def pods(self) -> list[str]:
        pods = rig.dynamic_pods(self.kube, self.namespace)
        return [p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")]

    def desired(self) -> set[str]:
        return set(rig.state_data(self.kube, self.namespace))

    def ray_workers(self) -> int:
        try:
            return live.alive_workers(self.head.dashboard_url)
        except OSError:  # the dashboard is busy or restarting: ask again
            return -1

    def run(self, name: str, source: str) -> str:
        script = self.scripts / f"{name}.py"
        script.write_text(source)
        live.submit_job(self.head.dashboard_url, name, script)
        return name

    def wait(self, predicate: Any, what: str) -> Any:
        try:
            return wait_until(predicate, timeout=WAIT_S, interval=0.2, what=what)
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}\npods {self.pods()}\n{self.monitor.log_tail()}\n"
                f"--- head\n{self.head.log_tail()}"
            ) from None


@pytest.fixture
def cluster(
    kube_api: KubeApi,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> Iterator[Live]:
    server, ns = kube_api.fake, kube_api.namespace
    kube = KubeClient(kube_api.api_client)
    head_pod, worker = rig.rendered(ns)
    head = RayHead(
        num_cpus=0,
        extra_args=["--no-monitor", f"--node-ip-address={live.NODE_IP}"],
        extra_env={
            "RAY_enable_autoscaler_v2": "1",
            "RAY_CLOUD_INSTANCE_ID": head_pod["metadata"]["name"],
            "RAY_NODE_TYPE_NAME": "headgroup",
        },
    )
    try:
        head.start()
    except RayHeadError as exc:
        pytest.fail(f"could not start the Ray head: {exc}", pytrace=False)
    gcs = head.gcs_address.replace("127.0.0.1", live.NODE_IP)
    workers = live.RayWorkers(gcs, tmp_path / "workers")
    controllers = Controllers(kube_api.api_client, namespace=ns, hook=workers)
    kube.create(PODS, ns, head_pod)
    template = rig.worker_template(worker)
    template["spec"]["containers"][0]["command"] = ["ray-worker-by-the-test-kubelet"]
    cm = rig.autoscaling_configmap(ns, template, bounds={"min": 1, "max": 2, "replicas": 1})
    config = live.autoscaling_config(RAY_CLUSTER, ns)
    cm["data"]["autoscaling.yaml"] = yaml.safe_dump(config, sort_keys=True)
    config_path = tmp_path / "autoscaling.yaml"
    config_path.write_text(cm["data"]["autoscaling.yaml"])
    monkeypatch.setenv(provider_module.API_URL_ENV, server.url)
    syncer = Syncer(
        kube,
        Options(namespaces=(ns,), workers=2, poll_interval_s=0.2),
        dashboards=lambda url: FakeDashboard(time.time),
    )
    monitor = live.Monitor(gcs, config_path, server.url, tmp_path / "monitor")
    controllers.start(interval=0.1)
    assert syncer.start()
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    state = Live(kube, ns, head, monitor, workers, scripts, {})
    try:
        kube.create(CONFIGMAPS, ns, cm)
        yield state
    finally:
        monitor.stop()
        syncer.stop()
        controllers.stop()
        workers.stop()
        if head.temp_dir is not None:  # keep the GCS and raylet logs for a failure's reader
            logs = head.temp_dir / "session_latest" / "logs"
            for path in logs.glob("*"):
                if path.name.startswith(("gcs_server", "raylet", "monitor")) and path.is_file():
                    shutil.copy(path, tmp_path / f"head-{path.name}")
        head.stop()
        kube.close()
        # Shown in the terminal summary with the Ray head timings (tests/e2e/fixtures.py).
        request.config.stash[e2e_fixtures._TIMINGS].append(
            f"autoscaling e2e timings (s): {json.dumps(state.timings, sort_keys=True)}"
        )


def test_ray_decides_the_syncer_creates_and_deletes(cluster: Live) -> None:
    c, timings = cluster, cluster.timings
    # Min at start: the seed worker exists before the autoscaler runs, and joins Ray.
    began = time.monotonic()
    c.monitor.start()
    c.wait(lambda: len(c.pods()) == 1, "the minReplicas worker Pod")
    c.wait(lambda: c.ray_workers() == 1, "the minReplicas worker in Ray")
    timings["min_worker_ready"] = round(time.monotonic() - began, 2)
    seed = set(c.pods())

    # Scale-up from task demand: two 1-CPU tasks on a 0-CPU head and one 1-CPU worker.
    demand = time.monotonic()
    job = c.run("two-tasks", TWO_TASKS)
    c.wait(lambda: len(c.pods()) == 2, "a second worker Pod")
    timings["demand_to_pod"] = round(time.monotonic() - demand, 2)
    c.wait(lambda: c.ray_workers() == 2, "the second worker in Ray")
    timings["demand_to_ray_worker"] = round(time.monotonic() - demand, 2)
    c.wait(lambda: live.job_status(c.head.dashboard_url, job) == "SUCCEEDED", "the job")
    timings["demand_to_job_done"] = round(time.monotonic() - demand, 2)

    # request_resources above max: the group holds at maxReplicas (2).
    c.run("request-3", REQUEST.format(cpus=3))
    c.wait(lambda: live.job_status(c.head.dashboard_url, "request-3") == "SUCCEEDED", "req")
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:
        assert len(c.pods()) <= 2 and len(c.desired()) <= 2
        time.sleep(0.5)

    # Idle: once the request is lifted, the extra worker goes after idleTimeoutSeconds.
    c.run("request-0", REQUEST.format(cpus=0))
    c.wait(lambda: live.job_status(c.head.dashboard_url, "request-0") == "SUCCEEDED", "clear")
    idle = time.monotonic()
    c.wait(lambda: len(c.pods()) == 1, "scale-down to minReplicas")
    timings["idle_to_pod_deleted"] = round(time.monotonic() - idle, 2)
    c.wait(lambda: c.ray_workers() == 1, "one Ray worker left")
    kept = set(c.pods())
    assert len(c.desired()) == 1

    # A restarted autoscaler adopts the Pods it finds: no new names, no duplicates.
    c.monitor.stop()
    restart = time.monotonic()
    c.monitor.start()
    time.sleep(10)
    assert set(c.pods()) == kept == c.desired()
    assert c.ray_workers() == 1
    timings["restart_observed_s"] = round(time.monotonic() - restart, 2)
    timings["seed_kept"] = float(len(seed & kept))
