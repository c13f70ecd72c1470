"""The RayService state machine on a fake clock: an in-memory world runs `decide` pass by pass.

`World` holds what the cluster would: pods and their labels, one `FakeDashboard` per
generation, the HTTPRoute, and the published status record. A pass observes it, decides,
and applies the actions, exactly as `syncer.rayservice.reconciler` does against the API
server. Passes are 2 s apart (KubeRay's requeue). The incremental options are those of
KubeRay's sample `ray-service.incremental-upgrade.yaml`, read in place.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
import yaml

from renderer import naming
from syncer.errors import IntentError
from syncer.rayservice.intent import (
    ANN_ABORT,
    ANN_PAUSED,
    INCREMENTAL,
    NEW_CLUSTER,
    NONE,
    Routing,
    ServiceIntent,
    parse_service_intent,
)
from syncer.rayservice.machine import decide
from syncer.rayservice.observed import Generation, Pod, Route, Serve, serve_from_details
from syncer.rayservice.record import (
    PAUSED,
    READY,
    REASON_ABORTED,
    REASON_DEADLINE,
    REASON_SPEC_CHANGED,
    ROLLBACK,
    SUSPENDED,
    SUSPENDING,
    UPGRADE,
    Condition,
    Record,
)
from syncer.rayservice.routing import route_weights
from syncer.rayservice.state import (
    Action,
    Decision,
    Deploy,
    Event,
    Label,
    Observation,
    Retire,
    SetRoute,
    Settings,
)
from tests.paths import SAMPLES
from tests.syncer.fakedashboard import AppPlan, FakeDashboard, ManualClock
from tests.syncer.harness import render

Manifest = dict[str, Any]
NS = "default"
SAMPLE = SAMPLES / "ray-service.incremental-upgrade.yaml"
SVC = "rayservice-incremental-upgrade"
A = f"{SVC}-x7k2p"
B = f"{SVC}-q4m9t"
C = f"{SVC}-c3c3c"
PASS_S = 2.0


def sample() -> Manifest:
    doc: Manifest = yaml.safe_load(SAMPLE.read_text())
    return doc


def sample_options() -> Manifest:
    options: Manifest = sample()["spec"]["upgradeStrategy"]["clusterUpgradeOptions"]
    return options


def sample_config() -> Manifest:
    config: Manifest = yaml.safe_load(sample()["spec"]["serveConfigV2"])
    return config


def url(generation: str) -> str:
    return f"http://{generation}-head-svc.{NS}.svc.cluster.local:8265"


def intent(generation: str | None, strategy: str = INCREMENTAL, **fields: Any) -> ServiceIntent:
    options = sample_options()
    routing = None
    if strategy == INCREMENTAL:
        routing = Routing(
            gateway=f"{SVC}-gateway",
            route=f"{SVC}-httproute",
            serve_port=8000,
            step=options["stepSizePercent"],
            interval_s=options["intervalSeconds"],
            surge=options["maxSurgePercent"],
        )
    return ServiceIntent(
        namespace=NS,
        name=SVC,
        strategy=strategy,
        generation=generation,
        dashboard_url=url(generation) if generation else "",
        routing=routing,
        **fields,
    )


@dataclass
class LivePod:
    name: str
    node_type: str
    labels: dict[str, str] = field(default_factory=dict)
    ready: bool = True
    version: int = 1


@dataclass
class LiveGeneration:
    name: str
    pods: list[LivePod]
    config: Manifest
    dashboard: FakeDashboard


@dataclass
class World:
    """The cluster as the syncer would see it, with a hand-moved clock."""

    intent: ServiceIntent
    clock: ManualClock = field(default_factory=ManualClock)
    generations: dict[str, LiveGeneration] = field(default_factory=dict)
    rules: list[Manifest] | None = None
    route_version: int = 1
    route_annotations: dict[str, str] = field(default_factory=dict)
    gateway_ready: bool = True
    record: Record | None = None
    events: list[Event] = field(default_factory=list)
    puts: list[tuple[str, int | None]] = field(default_factory=list)
    history: list[tuple[float, int, int, int, int]] = field(default_factory=list)
    settings: Settings = field(default_factory=Settings)
    last: Decision | None = None

    # --- building -------------------------------------------------------------------------

    def add_generation(
        self,
        name: str,
        *,
        workers: int = 1,
        plan: AppPlan | None = None,
        config: Manifest | None = None,
    ) -> LiveGeneration:
        pods = [LivePod(f"{name}-head-abcde", "head")]
        pods += [LivePod(f"{name}-small-group-worker-fghij-{i}", "worker") for i in range(workers)]
        dashboard = FakeDashboard(self.clock, app_plan=plan or AppPlan(deploy_s=5.0))
        gen = LiveGeneration(name, pods, copy.deepcopy(config or sample_config()), dashboard)
        self.generations[name] = gen
        return gen

    def with_route(self, generation: str) -> World:
        self.rules = [
            {
                "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                "backendRefs": [
                    {
                        "name": f"{generation}-serve-svc",
                        "namespace": NS,
                        "port": 8000,
                        "weight": 100,
                    }
                ],
            }
        ]
        return self

    # --- observing and acting --------------------------------------------------------------

    def observe(self) -> Observation:
        generations = {}
        for gen in self.generations.values():
            pods = tuple(
                Pod(p.name, p.node_type, p.ready, False, dict(p.labels), str(p.version))
                for p in gen.pods
            )
            head = next((p for p in gen.pods if p.node_type == "head"), None)
            serve = None
            if head is not None and head.ready:
                if gen.dashboard.available:
                    serve = serve_from_details(gen.dashboard.get_serve_details())
                else:
                    serve = Serve(reachable=False, error="refused")
            generations[gen.name] = Generation(gen.name, pods, gen.config, serve)
        route = None
        if self.rules is not None:
            route = Route(
                str(self.route_version),
                tuple(copy.deepcopy(self.rules)),
                dict(self.route_annotations),
                accepted=True,
            )
        return Observation(
            self.intent, self.record, generations, self.clock(), route, self.gateway_ready
        )

    def apply(self, action: Action) -> None:
        if isinstance(action, Deploy):
            gen = self.generations[action.generation]
            assert action.url == url(action.generation)
            gen.dashboard.put_serve_applications(
                action.config, target_capacity=action.target_capacity
            )
            self.puts.append((action.generation, action.target_capacity))
        elif isinstance(action, Label):
            pod = next(p for g in self.generations.values() for p in g.pods if p.name == action.pod)
            assert str(pod.version) == action.resource_version
            for key, value in action.labels.items():
                if value is None:
                    pod.labels.pop(key, None)
                else:
                    pod.labels[key] = value
            pod.version += 1
        elif isinstance(action, SetRoute):
            assert str(self.route_version) == action.resource_version
            self.rules = [copy.deepcopy(rule) for rule in action.rules]
            self.route_version += 1
        elif isinstance(action, Retire):
            del self.generations[action.generation]
        else:
            self.events.append(action)

    def step(self, *, crash_after: int | None = None) -> Decision:
        """One pass; `crash_after=k` applies only the first k actions and loses the record."""
        observation = self.observe()
        decision = decide(observation, self.settings)
        if observation.generations or observation.intent.generation is not None:
            # Level-triggered: a pass never relies on a watch event (its own writes' echoes
            # are not delivered) to look at a live RayService again.
            assert decision.wake_after is not None, decision
        actions = decision.actions if crash_after is None else decision.actions[:crash_after]
        for action in actions:
            self.apply(action)
        if crash_after is None:
            self.record = decision.record
        self.last = decision
        self.history.append((self.clock(), *self.state()))
        self.clock.advance(PASS_S)
        return decision

    def run(self, until: Callable[[World], bool], *, limit: int = 1000) -> int:
        for count in range(limit):
            if until(self):
                return count
            self.step()
        raise AssertionError(f"not reached in {limit} passes; last record {self.record}")

    # --- reading -------------------------------------------------------------------------

    def weights(self) -> dict[str, int]:
        if self.rules is None:
            return {}
        return route_weights(Route("", tuple(self.rules)), SVC)

    def capacity(self, generation: str) -> int | None:
        """The target_capacity last PUT (what the fake's Serve reports)."""
        return next((tc for g, tc in reversed(self.puts) if g == generation), None)

    def state(self) -> tuple[int, int, int, int]:
        """(weight A, weight B, target_capacity A, target_capacity B), live."""
        weights = self.weights()
        caps = [(self.capacity(g) if g in self.generations else None) or 0 for g in (A, B)]
        return (weights.get(A, 0), weights.get(B, 0), caps[0], caps[1])

    def active_pods(self) -> set[str]:
        return {
            p.name
            for g in self.generations.values()
            for p in g.pods
            if p.labels.get(naming.SERVE_ACTIVE) == "true"
        }

    @property
    def rec(self) -> Record:
        assert self.record is not None
        return self.record

    def condition(self, kind: str) -> Condition | None:
        return self.rec.condition(kind)

    def cond(self, kind: str) -> Condition:
        found = self.rec.condition(kind)
        assert found is not None, (kind, self.rec.conditions)
        return found

    def reasons(self) -> list[str]:
        return [e.reason for e in self.events]


def distinct(states: list[tuple[int, int, int, int]]) -> list[tuple[int, int, int, int]]:
    out: list[tuple[int, int, int, int]] = []
    for state in states:
        if not out or out[-1] != state:
            out.append(state)
    return out


def kuberay_sample_sequence() -> list[tuple[int, int, int, int]]:
    """(wA, wB, TCa, TCb) after each event of rayservice.md §12.2 (step = surge = 10)."""
    seq = [(100, 0, 100, 0), (100, 0, 100, 10)]
    for k in range(1, 11):
        seq.append((100 - 10 * k, 10 * k, 100 - 10 * (k - 1), 10 * k))  # shift k
        seq.append((100 - 10 * k, 10 * k, 100 - 10 * k, 10 * k))  # A scales down
        if k < 10:
            seq.append((100 - 10 * k, 10 * k, 100 - 10 * k, 10 * (k + 1)))  # B scales up
    return seq


def steady_world(config: Manifest | None = None, **intent_fields: Any) -> World:
    """A running with all traffic (first deployment done), B just committed to git."""
    world = World(intent(A, **intent_fields)).with_route(A)
    world.add_generation(A, config=config)
    world.run(lambda w: w.active_pods() == {p.name for p in w.generations[A].pods})
    world.run(lambda w: w.condition(READY) is not None and w.cond(READY).status == "True")
    world.add_generation(B, config=config)
    world.intent = intent(B, **intent_fields)
    world.history = [(world.clock(), *world.state())]
    world.puts = [(A, 100)]
    world.events.clear()
    return world


def upgraded(world: World) -> bool:
    return world.record is not None and world.rec.active.name == B and not world.rec.pending.name


# --- incremental: KubeRay's algorithm on the sample's options ---------------------------------


def test_sample_options_are_read_in_place() -> None:
    assert sample_options() == {
        "gatewayClassName": "istio",
        "stepSizePercent": 10,
        "intervalSeconds": 30,
        "maxSurgePercent": 10,
    }


def test_first_deployment_deploys_at_capacity_100_and_activates_when_running() -> None:
    world = World(intent(A)).with_route(A)
    world.add_generation(A)
    world.step()
    assert world.puts == [(A, 100)]
    assert world.record is not None
    assert world.rec.pending.name == A
    assert world.active_pods() == set()
    assert world.cond(READY).reason == "Initializing"
    world.run(lambda w: bool(w.active_pods()))
    # Not before the apps are RUNNING (AppPlan.deploy_s = 5 s).
    assert world.clock() - 1_800_000_000.0 >= 5.0
    assert world.rec.active == replace(world.rec.active, name=A, target_capacity=100, traffic=100)
    assert not world.rec.pending.name
    assert world.weights() == {A: 100}
    assert world.active_pods() == {p.name for p in world.generations[A].pods}
    pods = world.generations[A].pods
    assert all(p.labels[naming.RAY_SERVE] == "true" for p in pods)
    assert world.rec.endpoints == 2
    assert world.cond(READY).status == "True"
    assert world.cond(UPGRADE).reason == "NoPendingCluster"


def test_incremental_upgrade_takes_kuberays_steps_for_the_sample_options() -> None:
    world = steady_world()
    world.run(upgraded, limit=400)
    assert distinct([h[1:] for h in world.history]) == kuberay_sample_sequence()
    # Shifts: the first once B is RUNNING and 30 s after its backend appeared, then one
    # every intervalSeconds (plus at most one pass).
    shift_times = [
        entry[0] for previous, entry in itertools.pairwise(world.history) if entry[2] != previous[2]
    ]
    start = world.history[0][0]
    assert len(shift_times) == 10
    assert shift_times[0] - start >= 30
    gaps = [b - a for a, b in itertools.pairwise(shift_times)]
    assert all(30 <= gap <= 30 + PASS_S for gap in gaps), gaps
    # One PUT per capacity value: B from 10 to 100 (its first PUT carries the config), A 90 to 0.
    assert [tc for g, tc in world.puts if g == B] == [10 * k for k in range(1, 11)]
    assert [tc for g, tc in world.puts[1:] if g == A] == [100 - 10 * k for k in range(1, 11)]
    # Promotion: B's pods are labelled, A's no longer; the route collapses to B.
    assert world.active_pods() == {p.name for p in world.generations[B].pods}
    assert world.rec.active.target_capacity == 100
    assert world.rec.active.traffic == 100
    world.step()
    assert world.weights() == {B: 100}
    assert world.cond(UPGRADE).reason == "NoPendingCluster"
    assert "UpgradeStarted" in world.reasons()
    assert "UpgradeComplete" in world.reasons()
    assert world.reasons().count("UpdatedHTTPRoute") == 10


def test_old_generation_is_retired_after_the_deletion_delay_never_while_routed() -> None:
    world = steady_world()
    world.run(upgraded, limit=400)
    promoted = world.clock()
    assert A in world.generations
    world.run(lambda w: A not in w.generations, limit=100)
    retired = world.clock() - PASS_S
    assert 60 <= retired - promoted <= 60 + 2 * PASS_S
    assert "DeletedRayCluster" in world.reasons()
    assert world.weights() == {B: 100}


def test_status_carries_kuberays_incremental_fields() -> None:
    world = steady_world()
    world.run(lambda w: w.state() == (70, 30, 80, 30), limit=400)
    world.step()
    assert world.record is not None
    status = world.record.to_status()
    assert status["serviceStatus"] == "Running"
    assert status["activeServiceStatus"]["rayClusterName"] == A
    assert status["activeServiceStatus"]["trafficRoutedPercent"] == 70
    assert status["pendingServiceStatus"]["rayClusterName"] == B
    assert status["pendingServiceStatus"]["trafficRoutedPercent"] == 30
    assert status["pendingServiceStatus"]["targetCapacity"] in (30, 40)
    assert status["pendingServiceStatus"]["lastTrafficMigratedTime"].endswith("Z")
    apps = status["pendingServiceStatus"]["applicationStatuses"]
    assert apps["fruit_app"]["status"] == "RUNNING"
    assert "MangoStand" in apps["fruit_app"]["serveDeploymentStatuses"]
    types = {c["type"]: c for c in status["conditions"]}
    assert types["UpgradeInProgress"]["reason"] == "BothActivePendingClustersExist"
    assert Record.from_json(json.loads(json.dumps(world.record.to_json()))) == world.record


def test_no_shift_while_the_new_generation_is_unhealthy() -> None:
    world = steady_world()
    world.generations[B].dashboard.plan_app(
        "fruit_app", AppPlan(deploy_s=1.0, outcome="DEPLOY_FAILED")
    )
    for _ in range(60):
        world.step()
    assert world.weights() == {A: 100, B: 0}
    # KubeRay's capacity rule still lets B go to one surge step (it takes no traffic).
    assert world.state() == (100, 0, 100, 10)
    assert world.record is not None
    assert world.rec.pending.apps["fruit_app"].status == "DEPLOY_FAILED"


def test_no_capacity_step_until_the_gateway_accepts_the_route() -> None:
    world = steady_world()
    world.gateway_ready = False
    for _ in range(30):
        world.step()
    assert world.state() == (100, 0, 100, 0)
    world.gateway_ready = True
    world.run(upgraded, limit=400)


def test_pause_freezes_traffic_and_capacity_then_resume_continues() -> None:
    world = steady_world()
    world.run(lambda w: w.state() == (80, 20, 80, 30), limit=400)
    world.route_annotations[ANN_PAUSED] = "true"
    frozen = world.state()
    for _ in range(60):  # two minutes, four intervals
        world.step()
    assert world.state() == frozen
    assert world.condition(PAUSED) is not None
    assert world.cond(UPGRADE).status == "True"
    del world.route_annotations[ANN_PAUSED]
    world.run(upgraded, limit=400)
    assert world.condition(PAUSED) is None


def test_pause_from_git_annotation_blocks_the_start() -> None:
    world = steady_world(paused=True)
    for _ in range(40):
        world.step()
    assert world.state()[:3] == (100, 0, 100)
    assert world.weights() == {A: 100, B: 0}


def test_abort_rolls_traffic_back_and_holds_until_removed() -> None:
    world = steady_world()
    world.run(lambda w: w.state() == (70, 30, 80, 30), limit=400)
    world.route_annotations[ANN_ABORT] = "true"
    world.step()
    assert world.cond(ROLLBACK).reason == REASON_ABORTED
    world.run(lambda w: w.state() == (100, 0, 100, 0), limit=200)
    world.step()
    # Held: git still wants B, so it stays at 0% and capacity 0, and nothing moves.
    assert world.condition(ROLLBACK) is None
    assert world.cond(UPGRADE).reason == REASON_ABORTED
    assert world.rec.pending.name == B
    held = world.state()
    for _ in range(30):
        world.step()
    assert world.state() == held == (100, 0, 100, 0)
    assert world.reasons().count("RollbackStarted") == 1
    assert world.reasons().count("RollbackComplete") == 1
    # Traffic only ever went back.
    weights_b = [h[2] for h in world.history if h[0] >= world.history[0][0]]
    after_abort = weights_b[weights_b.index(30) :]
    assert after_abort == sorted(after_abort, reverse=True)
    del world.route_annotations[ANN_ABORT]
    world.run(upgraded, limit=400)


def test_progress_deadline_rolls_back_when_the_new_generation_never_gets_healthy() -> None:
    world = steady_world(progress_deadline_s=120)
    world.generations[B].dashboard.plan_app(
        "fruit_app", AppPlan(deploy_s=1.0, outcome="DEPLOY_FAILED")
    )
    started = world.clock()
    world.run(lambda w: w.record is not None and w.record.failed == B, limit=200)
    assert 120 <= world.clock() - PASS_S - started <= 120 + PASS_S
    world.run(lambda w: w.state() == (100, 0, 100, 0), limit=50)
    world.step()
    assert world.cond(UPGRADE).reason == REASON_DEADLINE
    assert "ProgressDeadlineExceeded" in world.reasons()
    assert max(h[2] for h in world.history) == 0  # B never took traffic
    # A new commit (a third spec) clears the mark and upgrades to it.
    world.add_generation(C)
    world.intent = intent(C, progress_deadline_s=120)
    world.run(lambda w: w.record is not None and w.record.active.name == C, limit=400)
    assert not world.rec.failed


def test_progress_deadline_after_partial_progress_moves_traffic_back() -> None:
    world = steady_world(progress_deadline_s=60)
    world.run(lambda w: w.state() == (70, 30, 80, 30), limit=400)
    world.generations[B].dashboard.available = False  # B's head stops answering
    world.run(lambda w: w.record is not None and w.record.failed == B, limit=100)
    world.run(lambda w: w.weights() == {A: 100, B: 0}, limit=200)
    assert world.capacity(A) == 100


def test_git_revert_rolls_back_like_kubrays_worked_example() -> None:
    world = steady_world()
    world.run(lambda w: w.state() == (80, 20, 80, 30), limit=400)
    world.intent = intent(A)
    world.history.clear()
    world.step()
    # Same pass: B -> 20 and A -> 90 (rayservice.md §12.2, revert at row 8).
    assert world.state()[2:] == (90, 20)
    assert world.cond(ROLLBACK).reason == REASON_SPEC_CHANGED
    world.run(lambda w: w.record is not None and not w.record.pending.name, limit=200)
    assert distinct([h[1:] for h in world.history]) == [
        (80, 20, 90, 20),
        (90, 10, 90, 20),
        (90, 10, 100, 10),
        (100, 0, 100, 10),
        (100, 0, 100, 0),
    ]
    assert world.condition(ROLLBACK) is None
    assert world.cond(UPGRADE).reason == "NoPendingCluster"
    assert world.active_pods() == {p.name for p in world.generations[A].pods}
    world.run(lambda w: B not in w.generations, limit=100)
    assert world.weights() == {A: 100}


def test_third_spec_mid_upgrade_rolls_back_then_upgrades_to_it() -> None:
    world = steady_world()
    world.run(lambda w: w.state() == (80, 20, 80, 30), limit=400)
    world.add_generation(C)
    world.intent = intent(C)
    world.step()
    assert "Goal state changed mid-upgrade" in world.cond(ROLLBACK).message
    world.run(lambda w: w.record is not None and w.record.pending.name == C, limit=200)
    assert world.weights().get(B, 0) == 0
    world.run(lambda w: w.record is not None and w.record.active.name == C, limit=400)
    world.run(lambda w: B not in w.generations and A not in w.generations, limit=100)


def test_route_overwritten_by_someone_else_is_restored() -> None:
    world = steady_world()
    world.run(lambda w: w.state() == (80, 20, 80, 30), limit=400)
    world.with_route(B)  # what `kubectl apply` of the rendered route would write
    world.step()
    assert world.weights() == {A: 80, B: 20}
    assert "RouteOverwritten" in world.reasons()
    world.run(upgraded, limit=400)


def test_rules_and_backends_the_syncer_does_not_own_are_kept() -> None:
    world = steady_world()
    assert world.rules is not None
    world.rules[0]["backendRefs"].append({"name": "canary", "port": 80, "weight": 5})
    world.rules.append(
        {
            "matches": [{"path": {"type": "PathPrefix", "value": "/other"}}],
            "backendRefs": [{"name": "other", "port": 80}],
        }
    )
    world.run(lambda w: w.state() == (90, 10, 90, 10), limit=400)
    assert world.rules[0]["backendRefs"] == [
        {"name": f"{A}-serve-svc", "namespace": NS, "port": 8000, "weight": 90},
        {"name": f"{B}-serve-svc", "namespace": NS, "port": 8000, "weight": 10},
        {"name": "canary", "port": 80, "weight": 5},
    ]
    assert world.rules[1] == {
        "matches": [{"path": {"type": "PathPrefix", "value": "/other"}}],
        "backendRefs": [{"name": "other", "port": 80}],
    }


def small_config() -> Manifest:
    return {"applications": [{"name": "app", "import_path": "m:app", "route_prefix": "/"}]}


def test_a_restart_between_any_two_steps_neither_repeats_nor_skips_one() -> None:
    """At every pass that acts, crash after each prefix of its actions and lose its record.

    The new process sees only live state: the route, labels, Serve and the last record
    that was published. The upgrade must go through the same weights and capacities.
    """
    baseline = steady_world(config=small_config())
    snapshots: list[tuple[int, World, int]] = []
    while not upgraded(baseline):
        snapshot = copy.deepcopy(baseline)
        decision = baseline.step()
        steps = [a for a in decision.actions if not isinstance(a, Event)]
        if steps:
            snapshots.append((len(baseline.history) - 1, snapshot, len(steps)))
        assert len(baseline.history) < 400
    expected = distinct([h[1:] for h in baseline.history])
    crashes = 0
    for index, snapshot, count in snapshots:
        for cut in range(count + 1):  # count + 1: every action done, only the record lost
            world = copy.deepcopy(snapshot)
            world.step(crash_after=cut)
            world.run(upgraded, limit=400)
            crashes += 1
            states = distinct([h[1:] for h in world.history])
            assert states == expected, (index, cut)
            assert world.active_pods() == {p.name for p in world.generations[B].pods}
            # The same PUTs in the same order; one may be sent twice (it is idempotent).
            assert first_occurrences(world.puts) == first_occurrences(baseline.puts)
            assert len(world.puts) - len(baseline.puts) in (0, 1), (index, cut)
    assert crashes == sum(count + 1 for _, _, count in snapshots) > 60


def first_occurrences(puts: list[tuple[str, int | None]]) -> list[tuple[str, int | None]]:
    return [put for i, put in enumerate(puts) if put not in puts[:i]]


# --- NewCluster (blue/green) ---------------------------------------------------------------


def blue_green(**fields: Any) -> World:
    world = World(intent(A, NEW_CLUSTER, **fields))
    world.add_generation(A)
    world.run(lambda w: bool(w.active_pods()))
    world.add_generation(B)
    world.intent = intent(B, NEW_CLUSTER, **fields)
    world.events.clear()
    return world


def test_blue_green_switches_labels_new_first_once_the_new_generation_is_ready() -> None:
    world = blue_green()
    decision = world.step()
    assert world.active_pods() == {p.name for p in world.generations[A].pods}
    assert any(
        isinstance(a, Deploy) and a.generation == B and a.target_capacity is None
        for a in decision.actions
    )
    assert world.cond(UPGRADE).status == "True"
    while True:
        decision = world.step()
        labels = [a for a in decision.actions if isinstance(a, Label)]
        if any(a.labels.get(naming.SERVE_ACTIVE) == "true" for a in labels):
            break
    order = [(a.generation, a.labels.get(naming.SERVE_ACTIVE, "keep")) for a in labels]
    adds = [i for i, (g, v) in enumerate(order) if g == B and v == "true"]
    removes = [i for i, (g, v) in enumerate(order) if g == A and v is None]
    assert adds and removes and max(adds) < min(removes)
    assert world.active_pods() == {p.name for p in world.generations[B].pods}
    assert world.rec.active.name == B
    assert "UpdatedService" in world.reasons()
    world.run(lambda w: A not in w.generations, limit=100)


def test_blue_green_never_switches_to_a_failed_deploy() -> None:
    world = blue_green()
    world.generations[B].dashboard.plan_app(
        "fruit_app", AppPlan(deploy_s=1.0, outcome="DEPLOY_FAILED")
    )
    for _ in range(50):
        world.step()
    assert world.active_pods() == {p.name for p in world.generations[A].pods}
    assert world.rec.pending.apps["fruit_app"].status == "DEPLOY_FAILED"
    assert A in world.generations


def test_blue_green_revert_before_the_switch_retires_the_new_generation() -> None:
    world = blue_green()
    world.step()
    world.intent = intent(A, NEW_CLUSTER)
    world.run(lambda w: B not in w.generations, limit=100)
    assert world.active_pods() == {p.name for p in world.generations[A].pods}


def test_serve_config_change_redeploys_in_place() -> None:
    world = World(intent(A, NEW_CLUSTER))
    world.add_generation(A)
    world.run(lambda w: bool(w.active_pods()))
    world.puts.clear()
    world.generations[A].config["applications"][0]["route_prefix"] = "/fruits"
    world.step()
    assert world.puts == [(A, None)]
    world.step()
    assert world.puts == [(A, None)]


def test_strategy_none_activates_the_current_generation_and_redeploys_in_place() -> None:
    world = World(intent(A, NONE))
    world.add_generation(A)
    world.step()
    assert world.active_pods() == {p.name for p in world.generations[A].pods}
    assert world.rec.endpoints == 0  # ray.io/serve waits for Serve
    world.run(lambda w: w.record is not None and w.record.endpoints == 2)
    world.generations[A].config["applications"][0]["route_prefix"] = "/fruits"
    world.puts.clear()
    world.step()
    assert world.puts == [(A, None)]


def test_suspend_takes_labels_off_and_retires_every_generation() -> None:
    world = World(intent(A, NEW_CLUSTER))
    world.add_generation(A)
    world.run(lambda w: bool(w.active_pods()))
    world.intent = intent(None, NEW_CLUSTER)
    world.step()
    assert world.active_pods() == set()
    assert world.cond(SUSPENDING).status == "True"
    world.run(lambda w: not w.generations, limit=5)
    world.step()
    assert world.cond(SUSPENDED).status == "True"


def test_pods_recreated_without_labels_get_them_back() -> None:
    world = World(intent(A, NEW_CLUSTER))
    world.add_generation(A)
    world.run(lambda w: bool(w.active_pods()))
    head = world.generations[A].pods[0]
    head.labels = {}
    world.step()
    assert head.labels[naming.SERVE_ACTIVE] == "true"
    assert head.labels[naming.RAY_SERVE] == "true"


# --- the intent --------------------------------------------------------------------------------

GREETER = """
apiVersion: ray.io/v1
kind: RayService
metadata:
  name: greeter
  annotations:
    kuberay.io/upgrade-progress-deadline-seconds: "300"
spec:
  rayClusterDeletionDelaySeconds: 5
  upgradeStrategy:
    type: NewClusterWithIncrementalUpgrade
    clusterUpgradeOptions:
      {gatewayClassName: istio, stepSizePercent: 20, intervalSeconds: 10, maxSurgePercent: 20}
  serveConfigV2: |
    applications:
      - name: greeter
        import_path: greeter.app:graph
        route_prefix: /greet
  rayClusterConfig:
    headGroupSpec:
      template:
        spec:
          containers:
          - name: ray-head
            image: rayproject/ray:2.52.0
            ports:
            - {name: dashboard, containerPort: 8265}
            - {name: serve, containerPort: 8000}
"""


def test_parse_service_intent_reads_the_rendered_intent() -> None:
    objects = render(GREETER, "serving")
    cm = next(
        o for o in objects if o["metadata"]["name"] == naming.intent_configmap_name("greeter")
    )
    parsed = parse_service_intent(cm)
    assert parsed.name == "greeter"
    assert parsed.namespace == "serving"
    assert parsed.strategy == INCREMENTAL
    assert parsed.incremental
    assert parsed.generation is not None and parsed.generation.startswith("greeter-")
    assert (
        parsed.dashboard_url
        == f"http://{parsed.generation}-head-svc.serving.svc.cluster.local:8265"
    )
    assert parsed.progress_deadline_s == 300
    assert parsed.deletion_delay_s == 5
    assert parsed.routing == Routing("greeter-gateway", "greeter-httproute", 8000, 20, 10, 20)
    route = next(o for o in objects if o["kind"] == "HTTPRoute")
    weights = route_weights(Route("1", tuple(route["spec"]["rules"])), "greeter")
    assert weights == {parsed.generation: 100}


@pytest.mark.parametrize(
    "data",
    [{}, {"intent.json": "not json"}, {"intent.json": json.dumps({"kind": "RayJob"})}],
)
def test_parse_service_intent_rejects_what_the_renderer_does_not_write(data: Manifest) -> None:
    with pytest.raises(IntentError):
        parse_service_intent({"metadata": {"name": "x"}, "data": data})
