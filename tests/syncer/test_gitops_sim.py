"""A GitOps tool and the syncer side by side during an incremental upgrade.

Every tick the GitOps tool re-applies the rendered manifests (Argo CD automated sync with
self-heal: `GitOps` in test_rayservice_reconciler.py), the kubelet and Gateway simulators step, and
the syncer makes one pass; after each actor the declared fields of every live object are
recorded. Honouring the emitted ignore configuration (`renderer.gitops`), the upgrade
completes and no field ever returns to a value it had left. Without it, the route's rules
flip between git's and the syncer's every tick: the negative control that shows the check
can fail. The clock is manual; informer caches are awaited, never slept on.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from renderer import naming
from syncer import status
from syncer.cli import Options, Syncer
from syncer.errors import ConflictError
from syncer.kube.client import CONFIGMAPS, EVENTS, HTTPROUTES, PODS, SERVICES, KubeClient, Resource
from syncer.kube.informer import Informer
from syncer.rayservice.actions import GATEWAYS
from syncer.rayservice.observed import Route
from syncer.rayservice.reconciler import RayServiceReconciler
from syncer.rayservice.record import READY, Record
from syncer.rayservice.routing import route_weights
from syncer.rayservice.state import Settings
from syncer.status import STATUS_ANNOTATION_PREFIX
from tests.fakeapi.controllers import Controllers
from tests.fakeapi.fixtures import KubeApi
from tests.syncer.fakedashboard import AppPlan, FakeDashboard, ManualClock
from tests.syncer.harness import render
from tests.syncer.test_rayservice_reconciler import GatewaySim, GitOps, generation_of, manifest

Manifest = dict[str, Any]
RENDERED = f"{naming.MANAGED_BY}={naming.MANAGED_BY_VALUE}"
WATCHED = (CONFIGMAPS, SERVICES, PODS, HTTPROUTES, GATEWAYS)
TICK_S = 1.0
STRATEGY = """    type: NewClusterWithIncrementalUpgrade
    clusterUpgradeOptions:
      gatewayClassName: istio
      stepSizePercent: 20
      intervalSeconds: 5
      maxSurgePercent: 20"""
ABSENT = "<absent>"


def declared_view(obj: Manifest) -> Manifest:
    """What a GitOps diff looks at: labels, annotations, spec and data (not status).

    The syncer's status annotations are left out (status, like the status ConfigMap), and
    an HTTPRoute's backends are keyed by name so weights are compared per backend.
    """
    meta = obj.get("metadata") or {}
    annotations = {
        k: v
        for k, v in (meta.get("annotations") or {}).items()
        if not k.startswith(STATUS_ANNOTATION_PREFIX)
    }
    spec = dict(obj.get("spec") or {})
    if obj.get("kind") == "HTTPRoute":
        spec["rules"] = [
            {
                "matches": rule.get("matches"),
                "backends": {
                    ref["name"]: ref.get("weight") for ref in rule.get("backendRefs") or []
                },
            }
            for rule in spec.get("rules") or []
        ]
    return {
        "labels": meta.get("labels") or {},
        "annotations": annotations,
        "spec": spec,
        "data": obj.get("data") or {},
    }


def flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from flatten(item, f"{prefix}/{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from flatten(item, f"{prefix}/{index}")
    else:
        yield prefix, json.dumps(value)


@dataclass
class FieldHistory:
    """Every declared field's successive values; a flip is a value coming back."""

    values: dict[str, list[str]] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)

    def record(self, fields: dict[str, str]) -> None:
        """Add one observation; a field is tracked from the first time it is seen."""
        for path in self.seen | set(fields):
            value = fields.get(path, ABSENT)
            history = self.values.setdefault(path, [])
            if not history or history[-1] != value:
                history.append(value)
        self.seen |= set(fields)

    def flips(self) -> dict[str, list[str]]:
        return {path: h for path, h in self.values.items() if len(h) != len(set(h))}


@dataclass
class Sim:
    kube_api: KubeApi
    kube: KubeClient
    clock: ManualClock
    gitops: GitOps
    controllers: Controllers
    gateways: GatewaySim
    syncer: Syncer
    serving: RayServiceReconciler
    dashboards: dict[str, FakeDashboard]
    history: FieldHistory = field(default_factory=FieldHistory)
    route_snapshots: list[dict[str, int]] = field(default_factory=list)

    @property
    def namespace(self) -> str:
        return self.kube_api.namespace

    def dashboard(self, url: str) -> FakeDashboard:
        return self.dashboards.setdefault(
            url, FakeDashboard(self.clock, app_plan=AppPlan(deploy_s=3.0, scale_s=1.0))
        )

    def observe(self) -> None:
        fields: dict[str, str] = {}
        for resource in WATCHED:
            for obj in self.kube.list(resource, self.namespace, label_selector=RENDERED)[0]:
                where = f"{resource.kind}/{obj['metadata']['name']}"
                fields.update((where + path, v) for path, v in flatten(declared_view(obj)))
        self.history.record(fields)
        route = self.kube.get(HTTPROUTES, self.namespace, "greeter-httproute")
        if route is not None:
            weights = route_weights(Route("", tuple(route["spec"]["rules"])), "greeter")
            self.route_snapshots.append(weights)

    def settle(self, timeout: float = 10.0) -> None:
        """Wait until every cache holds what the API server holds."""
        pairs: list[tuple[Informer, Resource, str]] = []
        pairs += [
            (i, CONFIGMAPS, f"{RENDERED},{naming.ROLE}={naming.ROLE_INTENT}")
            for i in self.syncer.engine.intents.informers
        ]
        pairs += [
            (i, CONFIGMAPS, f"{naming.ROLE}=status") for i in self.syncer.engine.statuses.informers
        ]
        pairs += [(i, PODS, RENDERED) for i in self.syncer.pods.informers]
        pairs += [
            (i, CONFIGMAPS, f"{RENDERED},{naming.ROLE}=serve-config")
            for i in self.serving.configs.informers
        ]
        selector = f"{RENDERED},{naming.ORIGIN_KIND}=RayService"
        pairs += [(i, HTTPROUTES, selector) for i in self.serving.routes.informers]
        pairs += [(i, GATEWAYS, selector) for i in self.serving.gateways.informers]
        deadline = time.monotonic() + timeout
        for informer, resource, labels in pairs:
            while True:
                live, _ = self.kube.list(resource, self.namespace, label_selector=labels)
                want = {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in live}
                have = {
                    o["metadata"]["name"]: o["metadata"]["resourceVersion"]
                    for o in informer.items()
                }
                if want == have:
                    break
                assert time.monotonic() < deadline, f"{resource.plural} cache never caught up"
                time.sleep(0.01)

    def reconcile(self) -> None:
        for _ in range(5):
            self.settle()
            try:
                self.serving.reconcile(("RayService", self.namespace, "greeter"))
            except ConflictError:
                continue  # the cache was a step behind; look again
            self.settle()
            return
        raise AssertionError("the syncer kept conflicting")

    def tick(self, objects: list[Manifest]) -> None:
        self.gitops.sync(objects)
        self.observe()
        self.controllers.step()
        self.gateways.step()
        self.observe()
        self.reconcile()
        self.observe()
        self.clock.advance(TICK_S)

    def record(self) -> Record:
        cm = self.kube.get(CONFIGMAPS, self.namespace, naming.status_configmap_name("greeter"))
        return status.read_record(cm, Record.from_json) or Record()


@pytest.fixture
def sim(kube_api: KubeApi) -> Iterator[Sim]:
    kube_api.fake  # noqa: B018 - the simulators need the fake server
    kube = KubeClient(kube_api.api_client)
    clock = ManualClock()
    dashboards: dict[str, FakeDashboard] = {}
    options = Options(namespaces=(kube_api.namespace,), workers=1, poll_interval_s=1.0)

    def factory(url: str) -> FakeDashboard:
        return dashboards.setdefault(
            url, FakeDashboard(clock, app_plan=AppPlan(deploy_s=3.0, scale_s=1.0))
        )

    syncer = Syncer(
        kube,
        options,
        dashboards=factory,
        clock=clock,
        service_settings=Settings(poll_s=1.0, steady_poll_s=5.0),
    )
    controller = syncer.rayservice
    # Caches only: the test makes each pass itself, so no worker threads run.
    assert syncer.start_informers(10)
    controllers = Controllers(kube_api.api_client, namespace=kube_api.namespace)
    sim = Sim(
        kube_api,
        kube,
        clock,
        GitOps(kube, kube_api.namespace),
        controllers,
        GatewaySim(kube_api),
        syncer,
        controller,
        dashboards,
    )
    yield sim
    for informer in syncer.engine.informers():
        informer.stop()
    controllers.stop()


def run_upgrade(sim: Sim, *, max_ticks: int = 80) -> tuple[str, str, int]:
    """Deploy v1, wait until it serves, commit v2, tick until promoted and v1 retired."""
    v1 = render(manifest(STRATEGY), sim.namespace)
    gen1 = generation_of(v1)
    for _ in range(20):
        sim.tick(v1)
        if sim.record().is_true(READY):
            break
    assert sim.record().active.name == gen1
    v2 = render(manifest(STRATEGY, cpu="2"), sim.namespace)
    gen2 = generation_of(v2)
    for ticks in range(1, max_ticks + 1):
        sim.tick(v2)
        record = sim.record()
        old_pods = sim.kube.list(
            PODS, sim.namespace, label_selector=f"{naming.RAY_CLUSTER}={gen1}"
        )[0]
        if record.active.name == gen2 and not record.pending.name and not old_pods:
            for _ in range(3):  # and it stays put
                sim.tick(v2)
            return gen1, gen2, ticks
    return gen1, gen2, -1


def test_upgrade_completes_under_self_heal_that_honours_the_ignore_config(sim: Sim) -> None:
    _, gen2, ticks = run_upgrade(sim)
    assert ticks > 0, f"not promoted; last record {sim.record()}"
    assert sim.history.flips() == {}
    # Traffic only ever moved forward, in the configured steps.
    weights = [w.get(gen2, 0) for w in sim.route_snapshots]
    steps = sorted(set(weights))
    assert weights == sorted(weights)
    assert steps == [0, 20, 40, 60, 80, 100]
    assert sim.route_snapshots[-1] == {gen2: 100}
    # The GitOps tool created the route and never wrote it again; it did update the
    # intent (the commit) and nothing else.
    assert set(sim.gitops.updated) == {("ConfigMap", naming.intent_configmap_name("greeter"))}
    assert sim.record().active.traffic == 100


def test_without_the_ignore_config_the_gitops_tool_and_the_syncer_fight(sim: Sim) -> None:
    sim.gitops.honour_ignores = False
    _, gen2, _ = run_upgrade(sim, max_ticks=25)
    flips = sim.history.flips()
    rule_flips = {path: h for path, h in flips.items() if path.startswith("HTTPRoute/")}
    assert rule_flips, "expected the route's rules to flip between git and the syncer"
    # Every tick: git's rules (all traffic to the new generation at once), then the syncer's.
    to_new = [w.get(gen2, 0) for w in sim.route_snapshots]
    reversals = sum(
        1 for a, b, c in zip(to_new, to_new[1:], to_new[2:], strict=False) if a > b < c or a < b > c
    )
    assert reversals >= 10
    # The syncer noticed and said so.
    events, _ = sim.kube.list(EVENTS, sim.namespace, label_selector=f"{naming.ORIGIN_NAME}=greeter")
    assert any(e["reason"] == "RouteOverwritten" for e in events)
