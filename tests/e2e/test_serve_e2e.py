"""A rendered RayService upgraded by the syncer, with the new generation on a real Ray head.

The fake API server holds the rendered objects (applied like a GitOps tool that honours
the ignore configuration), the kubelet and Gateway simulators make pods Ready and routes
Accepted, and the syncer runs with its workers. The old generation's Serve is a
`FakeDashboard`; the new generation's dashboard is the session's real Ray head, so its
Serve PUTs, application states, `target_capacity` and replica counts are Ray's own.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from renderer import naming
from syncer import status
from syncer.cli import Options, Syncer
from syncer.kube.client import CONFIGMAPS, HTTPROUTES, MERGE_PATCH
from syncer.ray.dashboard import HttpDashboard
from syncer.ray.types import Dashboard, ServeDetails, replica_state_counts
from syncer.rayservice.intent import ANN_PAUSED
from syncer.rayservice.observed import Route
from syncer.rayservice.record import PAUSED, ROLLBACK, Record
from syncer.rayservice.routing import route_weights
from syncer.rayservice.state import Settings
from tests.e2e.rayhead import RayHead
from tests.fakeapi.controllers import Controllers
from tests.fakeapi.fixtures import KubeApi
from tests.syncer.fakedashboard import AppPlan, FakeDashboard
from tests.syncer.harness import render, wait_until
from tests.syncer.test_rayservice_reconciler import GatewaySim, GitOps, RecordingKube, generation_of

Manifest = dict[str, Any]
pytestmark = pytest.mark.e2e

SERVICE = """
apiVersion: ray.io/v1
kind: RayService
metadata:
  name: greeter
spec:
  rayClusterDeletionDelaySeconds: 1
  upgradeStrategy:
    type: NewClusterWithIncrementalUpgrade
    clusterUpgradeOptions:
      gatewayClassName: istio
      stepSizePercent: 50
      intervalSeconds: 1
      maxSurgePercent: 50
  serveConfigV2: '{config}'
  rayClusterConfig:
    headGroupSpec:
      rayStartParams:
        num-cpus: "0"
      template:
        spec:
          containers:
          - name: ray-head
            image: rayproject/ray:2.52.0
            ports:
            - {{name: dashboard, containerPort: 8265}}
            - {{name: serve, containerPort: 8000}}
    workerGroupSpecs:
    - groupName: small
      replicas: 1
      template:
        spec:
          containers:
          - name: ray-worker
            image: rayproject/ray:2.52.0
            resources:
              requests: {{cpu: "{cpu}"}}
"""

GREET = """
from ray import serve


@serve.deployment(ray_actor_options={"num_cpus": 0})
class Greeter:
    def __call__(self, request):
        return {"app": "greet"}


app = Greeter.bind()
"""

ECHO = """
from ray import serve


@serve.deployment(ray_actor_options={"num_cpus": 0})
class Echo:
    def __init__(self, word):
        self.word = word

    def __call__(self, request):
        return {"app": "echo", "word": self.word}


def build(args):
    return Echo.bind(args["word"])
"""


@dataclass
class Stack:
    """The fake cluster, the syncer, and the dashboards by generation."""

    kube_api: KubeApi
    kube: RecordingKube
    head: RayHead
    apps: Path
    gitops: GitOps
    real: HttpDashboard
    fakes: dict[str, FakeDashboard] = field(default_factory=dict)
    real_generation: str = ""
    asked: list[str] = field(default_factory=list)

    @property
    def namespace(self) -> str:
        return self.kube_api.namespace

    def dashboard(self, url: str) -> Dashboard:
        """The real head for the new generation, a fake for any other."""
        self.asked.append(url)
        if self.real_generation and f"//{self.real_generation}-head-svc." in url:
            return self.real
        return self.fakes.setdefault(url, FakeDashboard(time.time, app_plan=AppPlan(deploy_s=0.2)))

    def config(self, *, broken: bool = False) -> str:
        env = {"env_vars": {"PYTHONPATH": str(self.apps)}}
        apps: list[Manifest] = [
            {
                "name": "greet",
                "route_prefix": "/greet",
                "import_path": "greet_app:app",
                "runtime_env": env,
                "deployments": [{"name": "Greeter", "num_replicas": 4}],
            },
            {
                "name": "echo",
                "route_prefix": "/echo",
                "import_path": "echo_app:build",
                "args": {"word": "from-git"},
                "runtime_env": env,
            },
        ]
        if broken:
            apps[1] = {
                "name": "broken",
                "route_prefix": "/broken",
                "import_path": "no_such_module_e2e:app",
            }
        config = {
            "proxy_location": "HeadOnly",
            "http_options": {"host": "127.0.0.1", "port": self.head.serve_port},
            "applications": apps,
        }
        return json.dumps(config)

    def render(self, *, cpu: str, broken: bool = False) -> list[Manifest]:
        text = SERVICE.format(config=self.config(broken=broken), cpu=cpu)
        return render(text, self.namespace)

    def record(self) -> Record:
        cm = self.kube.get(CONFIGMAPS, self.namespace, naming.status_configmap_name("greeter"))
        return status.read_record(cm, Record.from_json) or Record()

    def weights(self) -> dict[str, int]:
        route = self.kube.get(HTTPROUTES, self.namespace, "greeter-httproute")
        assert route is not None
        return route_weights(Route("", tuple(route["spec"]["rules"])), "greeter")

    def annotate_route(self, key: str, value: str | None) -> None:
        body = {"metadata": {"annotations": {key: value}}}
        self.kube.patch(
            HTTPROUTES, self.namespace, "greeter-httproute", body, content_type=MERGE_PATCH
        )

    def serve(self) -> ServeDetails:
        return self.real.get_serve_details()


@pytest.fixture(scope="module")
def real_dashboard(ray_head: RayHead) -> Iterator[HttpDashboard]:
    dashboard = HttpDashboard(ray_head.dashboard_url, timeout=10)
    yield dashboard
    # Leave the shared head as the other modules expect, with a client of its own: the
    # syncer's may have its circuit open after a slow test.
    HttpDashboard(ray_head.dashboard_url, timeout=30).delete_serve_applications()


@pytest.fixture
def stack(
    kube_api: KubeApi, ray_head: RayHead, real_dashboard: HttpDashboard, tmp_path: Path
) -> Iterator[Stack]:
    kube_api.fake  # noqa: B018 - the simulators need the fake server
    (tmp_path / "greet_app.py").write_text(GREET)
    (tmp_path / "echo_app.py").write_text(ECHO)
    kube = RecordingKube(kube_api.api_client)
    stack = Stack(
        kube_api, kube, ray_head, tmp_path, GitOps(kube, kube_api.namespace), real_dashboard
    )
    controllers = Controllers(kube_api.api_client, namespace=kube_api.namespace).start()
    gateways = GatewaySim(kube_api)
    gateways.start()
    options = Options(namespaces=(kube_api.namespace,), workers=2, poll_interval_s=0.3)
    syncer = Syncer(
        kube,
        options,
        dashboards=stack.dashboard,
        service_settings=Settings(poll_s=0.3, steady_poll_s=2.0),
    )
    assert syncer.start_informers(10)
    syncer.start()
    yield stack
    syncer.stop()
    gateways.stop()
    controllers.stop()


def wait(predicate: Any, what: str, timeout: float = 60.0) -> Any:
    return wait_until(predicate, timeout=timeout, interval=0.2, what=what)


def get_json(url: str) -> object:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=10) as reply:
        return json.loads(reply.read())


def start_upgrade(stack: Stack, *, broken: bool = False) -> tuple[str, str]:
    v1 = stack.render(cpu="1")
    gen1 = generation_of(v1)
    stack.gitops.sync(v1)
    wait(lambda: stack.record().active.name == gen1, "the first (fake) generation active")
    v2 = stack.render(cpu="2", broken=broken)
    stack.real_generation = gen2 = generation_of(v2)
    return gen1, gen2


def greeter_replicas(details: ServeDetails) -> tuple[int | None, dict[str, int]]:
    greeter = details["applications"]["greet"]["deployments"]["Greeter"]
    return greeter["target_num_replicas"], replica_state_counts(greeter)


@pytest.mark.timeout(180)
def test_upgrade_onto_ray_serve_follows_target_capacity_to_running(stack: Stack) -> None:
    gen1, gen2 = start_upgrade(stack)
    # Paused from the start: the new generation is deployed at target_capacity 0.
    stack.annotate_route(ANN_PAUSED, "true")
    stack.gitops.sync(stack.render(cpu="2"))

    def paused_and_running() -> bool:
        apps = stack.serve()["applications"]
        return bool(apps) and all(a["status"] == "RUNNING" for a in apps.values())

    wait(paused_and_running, "both applications RUNNING on Ray at capacity 0", timeout=90)
    details = stack.serve()
    assert details["target_capacity"] == 0.0
    assert greeter_replicas(details)[0] == 0
    assert stack.weights() == {gen1: 100, gen2: 0}
    record = wait(
        lambda: (
            stack.record()
            if {a.status for a in stack.record().pending.apps.values()} == {"RUNNING"}
            else None
        ),
        "the status to show both applications RUNNING",
    )
    assert set(record.pending.apps) == {"greet", "echo"}
    assert record.is_true(PAUSED)
    assert record.pending.target_capacity == 0
    assert stack.weights() == {gen1: 100, gen2: 0}
    # Resume: capacity and traffic move to the new generation, which is promoted.
    stack.annotate_route(ANN_PAUSED, None)
    wait(
        lambda: stack.record().active.name == gen2 and not stack.record().pending.name, "promotion"
    )
    wait(lambda: stack.weights() == {gen2: 100}, "the route collapsed to the new generation")
    assert stack.kube.route_writes[:3] == [
        {gen1: 100, gen2: 0},
        {gen1: 50, gen2: 50},
        {gen1: 0, gen2: 100},
    ]
    wait(
        lambda: greeter_replicas(stack.serve()) == (4, {"RUNNING": 4}),
        "4 Greeter replicas",
        timeout=60,
    )
    assert stack.serve()["target_capacity"] == 100.0
    # The proxies answer, with each application behind its route.
    proxy = f"http://127.0.0.1:{stack.head.serve_port}"
    assert get_json(f"{proxy}/greet") == {"app": "greet"}
    assert get_json(f"{proxy}/echo") == {"app": "echo", "word": "from-git"}
    status = stack.record().to_status()
    assert status["activeServiceStatus"]["applicationStatuses"]["greet"]["status"] == "RUNNING"
    assert status["activeServiceStatus"]["targetCapacity"] == 100


@pytest.mark.timeout(120)
def test_a_broken_import_path_is_deploy_failed_and_takes_no_traffic(stack: Stack) -> None:
    gen1, gen2 = start_upgrade(stack, broken=True)
    stack.gitops.sync(stack.render(cpu="2", broken=True))

    def failed() -> bool:
        app = stack.record().pending.apps.get("broken")
        return app is not None and app.status == "DEPLOY_FAILED"

    wait(failed, "DEPLOY_FAILED in the status", timeout=90)
    assert "no_such_module_e2e" in stack.record().pending.apps["broken"].message
    assert stack.serve()["applications"]["broken"]["status"] == "DEPLOY_FAILED"
    time.sleep(2.0)  # two intervalSeconds: a healthy generation would have taken traffic
    assert stack.weights() == {gen1: 100, gen2: 0}
    assert stack.record().active.name == gen1
    assert not stack.record().is_true(ROLLBACK)
