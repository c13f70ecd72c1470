"""RayService reconciling end to end on the fake API server, with simulated dashboards.

The renderer's output is applied the way a GitOps tool does (`GitOps`, honouring the
emitted Argo CD ignore configuration), the kubelet simulator runs the pods, `GatewaySim`
accepts Gateways and HTTPRoutes the way a Gateway controller would, and one
`FakeDashboard` per generation plays Serve. The syncer runs with its worker threads.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from renderer import gitops, naming
from syncer import status
from syncer.cli import Options, Syncer
from syncer.errors import ConflictError, PermanentError
from syncer.kube.client import (
    CONFIGMAPS,
    EVENTS,
    HTTPROUTES,
    MERGE_PATCH,
    PODS,
    SERVICES,
    KubeClient,
    Resource,
)
from syncer.rayservice import reconciler as service_reconciler
from syncer.rayservice import record as service_record
from syncer.rayservice import views as service_views
from syncer.rayservice.actions import GATEWAYS
from syncer.rayservice.intent import INCREMENTAL as INCREMENTAL_UPGRADE
from syncer.rayservice.intent import parse_service_intent
from syncer.rayservice.observed import App, Route
from syncer.rayservice.reconciler import RayServiceReconciler
from syncer.rayservice.record import (
    READY,
    REASON_ABORTED,
    ROLLBACK,
    SUSPENDING,
    UPGRADE,
    Condition,
    Record,
    Side,
)
from syncer.rayservice.routing import route_weights
from syncer.rayservice.state import Settings
from tests.fakeapi.controllers import Controllers, Rest
from tests.fakeapi.fixtures import KubeApi
from tests.syncer.fakedashboard import AppPlan, FakeDashboard
from tests.syncer.harness import render, wait_until

Manifest = dict[str, Any]
RESOURCES: dict[str, Resource] = {
    r.kind: r for r in (CONFIGMAPS, PODS, SERVICES, HTTPROUTES, GATEWAYS)
}
PRUNE_OFF = "Prune=false"

SERVICE = """
apiVersion: ray.io/v1
kind: RayService
metadata:
  name: greeter
spec:
  rayClusterDeletionDelaySeconds: 1
  upgradeStrategy:
{strategy}
  serveConfigV2: |
    applications:
      - name: greeter
        import_path: greeter.app:graph
        route_prefix: {prefix}
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
INCREMENTAL = """    type: NewClusterWithIncrementalUpgrade
    clusterUpgradeOptions:
      gatewayClassName: istio
      stepSizePercent: 50
      intervalSeconds: 1
      maxSurgePercent: 50"""
NEW_CLUSTER = "    type: NewCluster"
NONE = "    type: None"


def manifest(strategy: str = INCREMENTAL, *, cpu: str = "1", prefix: str = "/greet") -> str:
    return SERVICE.format(strategy=strategy, cpu=cpu, prefix=prefix)


# --- a GitOps tool, a Gateway controller, and a recording client ----------------------------


def _pointer_get(obj: Manifest, pointer: str) -> Any:
    node: Any = obj
    for part in pointer.strip("/").split("/"):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _pointer_set(obj: Manifest, pointer: str, value: Any) -> None:
    parts = pointer.strip("/").split("/")
    node = obj
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = copy.deepcopy(value)


def _contains(live: Any, declared: Any) -> bool:
    """Whether `live` already has every declared value (fields the server defaulted aside)."""
    if isinstance(declared, dict):
        return isinstance(live, dict) and all(
            _contains(live.get(k), v) for k, v in declared.items()
        )
    if isinstance(declared, list):
        return (
            isinstance(live, list)
            and len(live) == len(declared)
            and all(_contains(a, b) for a, b in zip(live, declared, strict=True))
        )
    return bool(live == declared)


def _merge(live: Any, declared: Any) -> Any:
    """What applying `declared` over `live` leaves: maps merge, lists and scalars replace."""
    if isinstance(live, dict) and isinstance(declared, dict):
        merged = dict(live)
        for key, value in declared.items():
            merged[key] = _merge(live.get(key), value)
        return merged
    return copy.deepcopy(declared)


@dataclass
class GitOps:
    """Applies rendered objects like Argo CD with automated sync and self-heal.

    Missing objects are created whole; existing ones get the declared fields (fields git
    does not declare, like the syncer's labels, stay), except the JSON pointers that the
    Argo CD `ignoreDifferences` of `renderer.gitops` lists (`RespectIgnoreDifferences`).
    Objects that left git are pruned unless they carry `Prune=false`.
    """

    kube: KubeClient
    namespace: str
    honour_ignores: bool = True
    applied: dict[tuple[str, str], Manifest] = field(default_factory=dict)
    updated: list[tuple[str, str]] = field(default_factory=list)

    def ignored(self, objects: list[Manifest]) -> dict[tuple[str, str], list[str]]:
        if not self.honour_ignores:
            return {}
        app = gitops.argocd_fragment(objects)
        assert gitops.RESPECT_IGNORE in app["spec"]["syncPolicy"]["syncOptions"]
        return {
            (entry["kind"], entry["name"]): list(entry["jsonPointers"])
            for entry in app["spec"]["ignoreDifferences"]
        }

    def _sync_one(
        self,
        resource: Resource,
        key: tuple[str, str],
        obj: Manifest,
        ignored: dict[tuple[str, str], list[str]],
    ) -> None:
        live = self.kube.get(resource, self.namespace, key[1])
        if live is None:
            self.kube.create(resource, self.namespace, obj)
            return
        declared = copy.deepcopy(obj)
        for pointer in ignored.get(key, []):
            _pointer_set(declared, pointer, _pointer_get(live, pointer))
        parts = [p for p in ("metadata", "spec", "data") if p in declared]
        if all(_contains(live.get(p), declared[p]) for p in parts):
            return  # in sync (Argo CD's diff ignores what the server defaulted)
        merged = copy.deepcopy(live)
        for part in parts:
            merged[part] = _merge(live.get(part), declared[part])
        if merged != live:
            self.kube.replace(resource, self.namespace, merged)
            self.updated.append(key)

    def sync(self, objects: list[Manifest]) -> None:
        ignored = self.ignored(objects)
        wanted = {}
        for obj in objects:
            resource = RESOURCES.get(str(obj["kind"]))
            if resource is None:
                continue
            key = (str(obj["kind"]), str(obj["metadata"]["name"]))
            wanted[key] = obj
            for _attempt in range(5):
                try:
                    self._sync_one(resource, key, obj, ignored)
                    break
                except ConflictError:
                    continue  # the syncer wrote its annotations meanwhile: read again, as Argo CD
        for key, obj in self.applied.items():
            if key in wanted:
                continue
            annotations = obj["metadata"].get("annotations") or {}
            if PRUNE_OFF in str(annotations.get("argocd.argoproj.io/sync-options", "")):
                continue
            self.kube.delete(RESOURCES[key[0]], self.namespace, key[1])
        self.applied = wanted


class GatewaySim:
    """Accepts every Gateway and HTTPRoute of a namespace, as a Gateway controller would."""

    def __init__(self, kube_api: KubeApi) -> None:
        self._rest = Rest(kube_api.api_client)
        self._ns = kube_api.namespace
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def step(self) -> int:
        writes = 0
        base = f"/apis/gateway.networking.k8s.io/v1/namespaces/{self._ns}"
        for gw in self._rest.list("gateway.networking.k8s.io/v1", "gateways", self._ns):
            conditions = (gw.get("status") or {}).get("conditions") or []
            if not rs_true(conditions, "Accepted", "Programmed"):
                status = {"conditions": [_cond("Accepted"), _cond("Programmed")]}
                self._rest.request(
                    "PATCH",
                    f"{base}/gateways/{gw['metadata']['name']}/status",
                    body={"status": status},
                    content_type=MERGE_PATCH,
                )
                writes += 1
        for route in self._rest.list("gateway.networking.k8s.io/v1", "httproutes", self._ns):
            parents = (route.get("status") or {}).get("parents") or []
            if not parents:
                refs = route["spec"].get("parentRefs") or []
                status = {
                    "parents": [
                        {
                            "parentRef": ref,
                            "controllerName": "istio.io/gateway-controller",
                            "conditions": [_cond("Accepted"), _cond("ResolvedRefs")],
                        }
                        for ref in refs
                    ]
                }
                self._rest.request(
                    "PATCH",
                    f"{base}/httproutes/{route['metadata']['name']}/status",
                    body={"status": status},
                    content_type=MERGE_PATCH,
                )
                writes += 1
        return writes

    def start(self, interval: float = 0.05) -> None:
        def run() -> None:
            while not self._stop.wait(interval):
                try:
                    self.step()
                except Exception:  # noqa: BLE001 - a simulator must outlive a racing delete
                    continue

        self._thread = threading.Thread(target=run, name="gateway-sim", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)


def _cond(kind: str) -> Manifest:
    return {
        "type": kind,
        "status": "True",
        "reason": kind,
        "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }


def rs_true(conditions: list[Manifest], *kinds: str) -> bool:
    found = {c.get("type"): c.get("status") for c in conditions}
    return all(found.get(k) == "True" for k in kinds)


class RecordingKube(KubeClient):
    """A `KubeClient` that remembers the HTTPRoute rules the syncer wrote."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.route_writes: list[dict[str, int]] = []

    def patch(
        self, resource: Resource, namespace: str | None, name: str, body: Any, **kw: Any
    ) -> Manifest:
        updated = super().patch(resource, namespace, name, body, **kw)
        if resource == HTTPROUTES and isinstance(body, dict) and "spec" in body:
            route = Route("", tuple(body["spec"]["rules"]))
            self.route_writes.append(route_weights(route, "greeter"))
        return updated


# --- the rig ----------------------------------------------------------------------------------


@dataclass
class Rig:
    kube_api: KubeApi
    kube: RecordingKube
    controllers: Controllers
    gateways: GatewaySim
    gitops: GitOps
    dashboards: dict[str, FakeDashboard] = field(default_factory=dict)
    plan: AppPlan = field(default_factory=lambda: AppPlan(deploy_s=0.3, scale_s=0.1))
    syncer: Syncer | None = None
    serving: RayServiceReconciler | None = None

    @property
    def namespace(self) -> str:
        return self.kube_api.namespace

    def dashboard(self, url: str) -> FakeDashboard:
        return self.dashboards.setdefault(url, FakeDashboard(time.time, app_plan=self.plan))

    def for_generation(self, generation: str) -> FakeDashboard:
        return self.dashboard(
            f"http://{generation}-head-svc.{self.namespace}.svc.cluster.local:8265"
        )

    def start_syncer(self) -> None:
        options = Options(namespaces=(self.namespace,), workers=2, poll_interval_s=0.2)
        self.syncer = Syncer(
            self.kube,
            options,
            dashboards=self.dashboard,
            service_settings=Settings(poll_s=0.1, steady_poll_s=0.5),
        )
        self.serving = self.syncer.rayservice
        assert self.syncer.start_informers(10)
        self.syncer.start()

    def stop_syncer(self) -> None:
        if self.syncer is not None:
            self.syncer.stop()
        self.syncer = self.serving = None

    def status(self) -> Manifest:
        cm = self.kube.get(CONFIGMAPS, self.namespace, naming.status_configmap_name("greeter"))
        if cm is None:
            return {}
        decoded: Manifest = json.loads(cm["data"]["status.json"])
        return decoded

    def record(self) -> Record:
        return Record.from_json(self.status()) if self.status() else Record()

    def pods(self, generation: str) -> list[Manifest]:
        items, _ = self.kube.list(
            PODS, self.namespace, label_selector=f"{naming.RAY_CLUSTER}={generation}"
        )
        return items

    def route(self) -> Manifest:
        route = self.kube.get(HTTPROUTES, self.namespace, "greeter-httproute")
        assert route is not None
        return route

    def weights(self) -> dict[str, int]:
        return route_weights(Route("", tuple(self.route()["spec"]["rules"])), "greeter")

    def intent_annotations(self) -> dict[str, str]:
        cm = self.kube.get(CONFIGMAPS, self.namespace, naming.intent_configmap_name("greeter"))
        assert cm is not None
        annotations: dict[str, str] = cm["metadata"].get("annotations") or {}
        return annotations

    def events(self) -> list[Manifest]:
        items, _ = self.kube.list(
            EVENTS, self.namespace, label_selector=f"{naming.ORIGIN_NAME}=greeter"
        )
        return items


@pytest.fixture
def rig(kube_api: KubeApi) -> Iterator[Rig]:
    kube_api.fake  # noqa: B018 - the simulators need the fake server
    kube = RecordingKube(kube_api.api_client)
    controllers = Controllers(kube_api.api_client, namespace=kube_api.namespace)
    gateways = GatewaySim(kube_api)
    rig = Rig(kube_api, kube, controllers, gateways, GitOps(kube, kube_api.namespace))
    controllers.start(interval=0.05)
    gateways.start()
    yield rig
    rig.stop_syncer()
    gateways.stop()
    controllers.stop()


def generation_of(objects: list[Manifest]) -> str:
    cm = next(
        o for o in objects if o["metadata"]["name"] == naming.intent_configmap_name("greeter")
    )
    parsed = parse_service_intent(cm)
    assert parsed.generation is not None
    return parsed.generation


def labelled_active(rig: Rig, generation: str) -> bool:
    pods = rig.pods(generation)
    return bool(pods) and all(
        p["metadata"]["labels"].get(naming.SERVE_ACTIVE) == "true" for p in pods
    )


def wait(predicate: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
    return wait_until(predicate, timeout=timeout, interval=0.05, what=what)


# --- tests -----------------------------------------------------------------------------------


def test_incremental_upgrade_moves_weights_promotes_and_retires(rig: Rig) -> None:
    v1 = render(manifest(), rig.namespace)
    gen1 = generation_of(v1)
    rig.gitops.sync(v1)
    rig.start_syncer()
    wait(lambda: labelled_active(rig, gen1), "the first generation active")
    wait(lambda: rig.record().is_true(READY), "Ready")
    assert rig.for_generation(gen1).put_bodies[-1]["target_capacity"] == 100
    v2 = render(manifest(cpu="2"), rig.namespace)
    gen2 = generation_of(v2)
    assert gen2 != gen1
    rig.gitops.sync(v2)
    wait(lambda: rig.record().active.name == gen2 and not rig.record().pending.name, "promotion")
    wait(lambda: rig.weights() == {gen2: 100}, "the route collapsed to the new generation")
    wait(lambda: not rig.pods(gen1), "the old generation's pods deleted")
    # The syncer's route writes, in order: KubeRay's steps for step = surge = 50.
    assert rig.kube.route_writes == [
        {gen1: 100, gen2: 0},
        {gen1: 50, gen2: 50},
        {gen1: 0, gen2: 100},
        {gen2: 100},
    ]
    assert [b["target_capacity"] for b in rig.for_generation(gen2).put_bodies] == [50, 100]
    assert [b["target_capacity"] for b in rig.for_generation(gen1).put_bodies] == [100, 50, 0]
    assert labelled_active(rig, gen2)
    # Everything of the old generation went, nothing of the new one.
    leftovers = [
        r.kind
        for r in (CONFIGMAPS, SERVICES)
        for item in rig.kube.list(r, rig.namespace, label_selector=f"{naming.RAY_CLUSTER}={gen1}")[
            0
        ]
    ]
    assert leftovers == []
    assert rig.pods(gen2)
    status = rig.status()["status"]
    assert status["activeServiceStatus"]["rayClusterName"] == gen2
    assert status["activeServiceStatus"]["trafficRoutedPercent"] == 100
    assert status["activeServiceStatus"]["applicationStatuses"]["greeter"]["status"] == "RUNNING"
    assert status["pendingServiceStatus"] == {}
    reasons = {e["reason"] for e in rig.events()}
    assert {"UpgradeStarted", "UpdatedHTTPRoute", "UpgradeComplete", "DeletedRayCluster"} <= reasons


def test_status_configmap_is_owned_by_the_intent_and_annotates_it(rig: Rig) -> None:
    objects = render(manifest(), rig.namespace)
    gen = generation_of(objects)
    rig.gitops.sync(objects)
    rig.start_syncer()
    wait(lambda: rig.record().is_true(READY), "Ready")
    intent = rig.kube.get(CONFIGMAPS, rig.namespace, naming.intent_configmap_name("greeter"))
    assert intent is not None
    cm = rig.kube.get(CONFIGMAPS, rig.namespace, naming.status_configmap_name("greeter"))
    assert cm is not None
    assert cm["metadata"]["ownerReferences"][0]["uid"] == intent["metadata"]["uid"]
    assert cm["data"]["activeCluster"] == gen
    wait(
        lambda: rig.intent_annotations().get(service_reconciler.ANN_TRAFFIC) == f"{gen}=100",
        "status annotations on the intent",
    )
    assert rig.intent_annotations()[service_reconciler.ANN_ACTIVE] == gen
    assert rig.intent_annotations()[service_reconciler.ANN_SERVICE_STATUS] == "Running"
    rows = service_record.status_rows(cm)
    assert rows[0]["role"] == "active"
    assert rows[0]["cluster"] == gen
    assert rows[0]["phase"] == "Running"
    assert rows[0]["applications"] == "greeter=RUNNING"
    assert rows[0]["trafficRoutedPercent"] == "100"
    assert rows[0]["name"] == "greeter"
    assert rig.serving is not None
    assert rig.serving.snapshot() == {("RayService", rig.namespace, "greeter"): "Running"}
    # Steady state: passes keep coming (steady_poll_s = 0.5) but write nothing.
    writes = rig.serving.stats["status_writes"]
    deploys = len(rig.for_generation(gen).put_bodies)
    polls = rig.for_generation(gen).calls["get_serve_details"]
    wait(
        lambda: rig.for_generation(gen).calls["get_serve_details"] >= polls + 3,
        "three more steady passes",
    )
    assert rig.serving.stats["status_writes"] == writes
    assert len(rig.for_generation(gen).put_bodies) == deploys


def test_a_new_generation_that_fails_to_deploy_gets_no_traffic(rig: Rig) -> None:
    v1 = render(manifest(), rig.namespace)
    gen1 = generation_of(v1)
    rig.gitops.sync(v1)
    rig.start_syncer()
    wait(lambda: rig.record().is_true(READY), "Ready")
    v2 = render(manifest(cpu="2"), rig.namespace)
    gen2 = generation_of(v2)
    rig.for_generation(gen2).plan_app("greeter", AppPlan(deploy_s=0.1, outcome="DEPLOY_FAILED"))
    rig.gitops.sync(v2)
    wait(
        lambda: rig.record().pending.apps.get("greeter", App("")).status == "DEPLOY_FAILED",
        "DEPLOY_FAILED in the status",
    )
    # More than one intervalSeconds *and* three passes that looked at the new generation: a
    # healthy one would have moved by then (a bare sleep would pass on a starved syncer too).
    polls, since = rig.for_generation(gen2).calls["get_serve_details"], time.monotonic()
    wait(
        lambda: (
            rig.for_generation(gen2).calls["get_serve_details"] >= polls + 3
            and time.monotonic() - since > 1.5
        ),
        "three passes over more than one interval",
    )
    assert rig.weights() == {gen1: 100, gen2: 0}
    assert labelled_active(rig, gen1)


def test_blue_green_switches_once_ready_and_retires_the_old_generation(rig: Rig) -> None:
    v1 = render(manifest(NEW_CLUSTER), rig.namespace)
    gen1 = generation_of(v1)
    rig.gitops.sync(v1)
    rig.start_syncer()
    wait(lambda: labelled_active(rig, gen1), "the first generation active")
    v2 = render(manifest(NEW_CLUSTER, cpu="2"), rig.namespace)
    gen2 = generation_of(v2)
    rig.gitops.sync(v2)
    wait(lambda: labelled_active(rig, gen2), "the switch")
    wait(lambda: not rig.pods(gen1), "the old generation retired")
    serve_svc = rig.kube.get(SERVICES, rig.namespace, "greeter-serve-svc")
    assert serve_svc is not None
    assert serve_svc["spec"]["selector"][naming.SERVE_ACTIVE] == "true"  # git's, untouched
    assert rig.record().active.name == gen2
    assert rig.for_generation(gen2).put_bodies[0].get("target_capacity") is None


def test_strategy_none_redeploys_a_changed_serve_config_in_place(rig: Rig) -> None:
    v1 = render(manifest(NONE), rig.namespace)
    gen = generation_of(v1)
    rig.gitops.sync(v1)
    rig.start_syncer()
    wait(lambda: rig.record().is_true(READY), "Ready")
    dashboard = rig.for_generation(gen)
    assert len(dashboard.put_bodies) == 1
    v2 = render(manifest(NONE, prefix="/hello"), rig.namespace)
    assert generation_of(v2) == gen
    rig.gitops.sync(v2)
    wait(lambda: len(dashboard.put_bodies) == 2, "a second PUT")
    assert dashboard.put_bodies[-1]["applications"][0]["route_prefix"] == "/hello"


def test_a_new_syncer_resumes_an_upgrade_mid_way(rig: Rig) -> None:
    v1 = render(manifest(), rig.namespace)
    gen1 = generation_of(v1)
    rig.gitops.sync(v1)
    rig.start_syncer()
    wait(lambda: rig.record().is_true(READY), "Ready")
    v2 = render(manifest(cpu="2"), rig.namespace)
    gen2 = generation_of(v2)
    rig.gitops.sync(v2)
    wait(lambda: rig.weights() == {gen1: 50, gen2: 50}, "half the traffic moved")
    rig.stop_syncer()
    rig.start_syncer()  # a new process: empty caches, a new dashboard pool
    wait(lambda: rig.record().active.name == gen2 and not rig.record().pending.name, "promotion")
    wait(lambda: rig.weights() == {gen2: 100}, "the route collapsed")
    assert rig.kube.route_writes == [
        {gen1: 100, gen2: 0},
        {gen1: 50, gen2: 50},
        {gen1: 0, gen2: 100},
        {gen2: 100},
    ]
    assert [b["target_capacity"] for b in rig.for_generation(gen1).put_bodies] in (
        [100, 50, 0],
        [100, 50, 50, 0],  # the new process may PUT the current value once more
    )


def test_a_failed_serve_deploy_is_reported_and_retried(rig: Rig) -> None:
    objects = render(manifest(NEW_CLUSTER), rig.namespace)
    gen = generation_of(objects)
    # Every deploy fails until the test says otherwise: any event starts a pass that tries
    # again at once, and one that succeeded would clear the error before it is looked at.
    dashboard = rig.for_generation(gen)
    dashboard.fail_next(
        "put_serve_applications", PermanentError("1 validation error (fake)", status=400), 1000
    )
    rig.gitops.sync(objects)
    rig.start_syncer()
    wait(lambda: "FailedToUpdateServeApplications" in rig.record().error, "the error in the status")
    wait(
        lambda: any(e["reason"] == "FailedToUpdateServeApplications" for e in rig.events()),
        "the Event",  # recorded after the status, in the same pass
    )
    rows = service_record.status_rows(status_cm(rig))
    assert "1 validation error" in rows[0]["error"]
    dashboard.stop_failing("put_serve_applications")
    # Permanent errors are retried after 30 s; a new pass (any event) tries again at once.
    rig.kube.patch(
        CONFIGMAPS, rig.namespace, f"{gen}-serve-config", {"metadata": {"labels": {"x": "1"}}}
    )
    wait(lambda: labelled_active(rig, gen), "deployed and active after the retry")
    wait(lambda: not rig.record().error, "the error cleared")


def test_pod_label_conflicts_are_retried_with_a_fresh_version(rig: Rig) -> None:
    server = rig.kube_api.fake
    server.faults.fail(409, verb="patch", resource="pods", times=3)
    objects = render(manifest(NEW_CLUSTER), rig.namespace)
    gen = generation_of(objects)
    rig.gitops.sync(objects)
    rig.start_syncer()
    wait(lambda: labelled_active(rig, gen), "labels despite conflicts")


def test_a_rayservice_that_leaves_git_is_forgotten(rig: Rig) -> None:
    objects = render(manifest(NEW_CLUSTER), rig.namespace)
    rig.gitops.sync(objects)
    rig.start_syncer()
    wait(lambda: rig.record().is_true(READY), "Ready")
    assert rig.serving is not None
    key = ("RayService", rig.namespace, "greeter")
    # The pass tracks its phase after it has published (and annotated): wait for it.
    serving = rig.serving
    wait(lambda: serving.snapshot() == {key: "Running"}, "tracked as Running")
    rig.kube.delete(CONFIGMAPS, rig.namespace, naming.intent_configmap_name("greeter"))
    wait(lambda: rig.serving is not None and rig.serving.snapshot() == {}, "forgotten")
    wait(lambda: not rig.status(), "the status ConfigMap garbage-collected with its owner")


def status_cm(rig: Rig) -> Manifest:
    cm = rig.kube.get(CONFIGMAPS, rig.namespace, naming.status_configmap_name("greeter"))
    assert cm is not None
    return cm


def record_cm(record: Record) -> Manifest:
    return {
        "metadata": {
            "name": "greeter-kuberay-status",
            "namespace": "ns",
            "labels": {naming.ORIGIN_NAME: "greeter", naming.ORIGIN_KIND: "RayService"},
        },
        "data": {"status.json": json.dumps(record.to_json())},
    }


def cond(kind: str, status: str = "True", reason: str = "R") -> Condition:
    return Condition(kind, status, reason, "", 0.0)


@pytest.mark.parametrize(
    ("record", "phase"),
    [
        (Record(), "Initializing"),
        (Record(active=Side("a"), conditions=(cond(READY),)), "Running"),
        (Record(active=Side("a"), pending=Side("b")), "Upgrading"),
        (Record(conditions=(cond(ROLLBACK),)), "RollingBack"),
        (Record(conditions=(cond(UPGRADE, "False", REASON_ABORTED),)), "Held"),
        (Record(conditions=(cond(SUSPENDING),)), "Suspended"),
    ],
)
def test_phase_names_where_a_rayservice_is(record: Record, phase: str) -> None:
    assert service_record.phase(record) == phase
    assert service_record.status_rows(record_cm(record))[0]["phase"] == phase


def test_status_rows_show_both_generations_of_an_upgrade() -> None:
    record = Record(
        strategy=INCREMENTAL_UPGRADE,
        active=Side("greeter-aaaaa", {"app": App("RUNNING")}, 80, 70, 1_800_000_000.0),
        pending=Side("greeter-bbbbb", {"app": App("DEPLOYING")}, 30, 30, 1_800_000_000.0),
        conditions=(cond(READY), cond(UPGRADE)),
        endpoints=3,
    )
    rows = service_record.status_rows(record_cm(record))
    assert [(r["role"], r["cluster"], r["applications"]) for r in rows] == [
        ("active", "greeter-aaaaa", "app=RUNNING"),
        ("pending", "greeter-bbbbb", "app=DEPLOYING"),
    ]
    assert rows[0]["trafficRoutedPercent"] == "70"
    assert rows[1]["targetCapacity"] == "30"
    assert rows[0]["lastTrafficMigratedTime"] == "2027-01-15T08:00:00Z"
    assert rows[0]["conditions"] == "Ready=True,UpgradeInProgress=True"
    assert rows[0]["endpoints"] == "3"
    assert (
        service_record.status_rows({"metadata": {"name": "x"}, "data": {"status.json": "{"}})[0][
            "role"
        ]
        == "-"
    )


def test_views_of_routes_and_gateways() -> None:
    route = {
        "metadata": {
            "name": "r",
            "namespace": "ns",
            "resourceVersion": "7",
            "annotations": {"a": "b"},
        },
        "spec": {"rules": [{"backendRefs": []}]},
        "status": {
            "parents": [
                {"parentRef": {"name": "other"}, "conditions": []},
                {
                    "parentRef": {"name": "gw", "namespace": "ns"},
                    "conditions": [
                        {"type": "Accepted", "status": "True"},
                        {"type": "ResolvedRefs", "status": "True"},
                    ],
                },
            ]
        },
    }
    view = service_views.route_view(route, "gw")
    assert view.accepted
    assert view.resource_version == "7"
    assert view.annotations == {"a": "b"}
    assert not service_views.route_view(route, "missing").accepted
    assert not service_views.gateway_ready(None)
    assert not service_views.gateway_ready(
        {"status": {"conditions": [{"type": "Accepted", "status": "True"}]}}
    )
    assert (
        status.read_record(
            {"metadata": {"name": "x"}, "data": {"status.json": "[1]"}}, Record.from_json
        )
        is None
    )


# --- the trust boundary: one intent per RayService, publish before acting (issue 8) -------


def test_a_second_intent_for_a_rayservice_is_refused_and_never_acted_on(rig: Rig) -> None:
    v1 = render(manifest(NEW_CLUSTER), rig.namespace)
    gen1 = generation_of(v1)
    rig.gitops.sync(v1)
    rig.start_syncer()
    wait(lambda: labelled_active(rig, gen1), "the first generation active")
    # A second ConfigMap labelled for greeter, whose payload would retire every generation.
    real = next(o for o in v1 if o["metadata"]["name"] == naming.intent_configmap_name("greeter"))
    payload = json.loads(real["data"][naming.INTENT_KEY])
    payload["derived"]["generation"] = None
    impostor = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "impostor-kuberay-intent", "labels": real["metadata"]["labels"]},
        "data": {naming.INTENT_KEY: json.dumps(payload)},
    }
    since = rig.kube_api.fake.audit.mark()
    rig.kube.create(CONFIGMAPS, rig.namespace, impostor)
    wait(
        lambda: any(
            e["reason"] == "IntentRefused"
            and e["involvedObject"]["name"] == "impostor-kuberay-intent"
            for e in rig.events()
        ),
        "the impostor refused",
    )
    # A real upgrade beside it: only git's intent acts (gen2 switched in, gen1 retired).
    v2 = render(manifest(NEW_CLUSTER, cpu="2"), rig.namespace)
    gen2 = generation_of(v2)
    rig.gitops.sync(v2)
    wait(lambda: labelled_active(rig, gen2), "the switch")
    wait(lambda: not rig.pods(gen1), "the old generation retired")
    deleted = {r.name for r in rig.kube_api.fake.audit.writes(since=since) if r.verb == "delete"}
    assert not [name for name in deleted if name and gen2 in name]  # git's generation stays
    refused = [e for e in rig.events() if e["reason"] == "IntentRefused"]
    assert {e["involvedObject"]["name"] for e in refused} == {"impostor-kuberay-intent"}


def test_no_pod_is_relabelled_or_deleted_while_the_status_cannot_be_written(rig: Rig) -> None:
    v1 = render(manifest(NEW_CLUSTER), rig.namespace)
    gen1 = generation_of(v1)
    rig.gitops.sync(v1)
    rig.start_syncer()
    wait(lambda: labelled_active(rig, gen1), "the first generation active")
    faults = rig.kube_api.fake.faults
    rule = faults.fail(
        503,
        verb="patch",
        resource="configmaps",
        name=naming.status_configmap_name("greeter"),
        times=None,
    )
    since = rig.kube_api.fake.audit.mark()
    v2 = render(manifest(NEW_CLUSTER, cpu="2"), rig.namespace)
    gen2 = generation_of(v2)
    rig.gitops.sync(v2)
    wait(lambda: len(rig.pods(gen2)) >= 2, "the new generation's pods")
    time.sleep(3.0)  # passes that would deploy, switch and retire, were the status written
    writes = rig.kube_api.fake.audit.writes(resource="pods", since=since)
    # (GitOps creates the pods, the kubelet writes pods/status: neither is the syncer. The
    # RayCluster reconciler may mirror a generation's state in its head Pod's
    # `status.kuberay.io/cluster-*` annotations: no relabel, so the labels are checked.)
    assert [r for r in writes if r.verb == "delete"] == []
    assert labelled_active(rig, gen1)
    assert all(naming.SERVE_ACTIVE not in p["metadata"]["labels"] for p in rig.pods(gen2))
    assert rig.for_generation(gen2).put_bodies == []  # nor a Serve deploy (publish first)
    faults.remove(rule)
    wait(lambda: labelled_active(rig, gen2), "the switch once the status is written")
