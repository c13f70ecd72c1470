"""The RayService machine's vocabulary and the working state of one pass (pure).

`Observation` and `Settings` go in; the actions (`Deploy`, `Label`, `SetRoute`,
`Retire`, `Event`) and the `Decision` come out. `Pass` is the mutable state one call of
`machine.decide` works on, with the helpers its pieces share. No clock, no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from renderer import naming
from syncer.rayservice.intent import ServiceIntent
from syncer.rayservice.observed import RUNNING, App, Generation, Route, Serve, apps_of, trim_apps
from syncer.rayservice.record import REASON_DEADLINE, Record, Side
from syncer.rayservice.routing import build_rules, own_refs

Manifest = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Observation:
    """Everything `decide` looks at."""

    intent: ServiceIntent
    record: Record | None
    generations: Mapping[str, Generation]
    now: float
    route: Route | None = None
    gateway_ready: bool = False


@dataclass(frozen=True, slots=True)
class Settings:
    """Timers and switches from the syncer config."""

    poll_s: float = 2.0  # KubeRay requeues a RayService every 2 s
    steady_poll_s: float = 30.0
    require_gateway: bool = True  # KubeRay's Gateway/HTTPRoute readiness gate (§8.4)


@dataclass(frozen=True, slots=True)
class Deploy:
    """PUT a generation's Serve config (with `target_capacity`, when not None)."""

    generation: str
    url: str
    config: Manifest
    target_capacity: int | None
    digest: str


@dataclass(frozen=True, slots=True)
class Label:
    """Set (value) or remove (None) syncer-owned labels of one pod, guarded by its version."""

    pod: str
    generation: str
    labels: Mapping[str, str | None]
    resource_version: str


@dataclass(frozen=True, slots=True)
class SetRoute:
    """Replace the HTTPRoute's `spec.rules` (guarded by its resourceVersion)."""

    rules: tuple[Manifest, ...]
    resource_version: str
    weights: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class Retire:
    """Delete a generation that no longer takes traffic and that git no longer declares."""

    generation: str


@dataclass(frozen=True, slots=True)
class Event:
    """A Kubernetes Event about the RayService."""

    reason: str
    message: str
    type: str = "Normal"


Action = Deploy | Label | SetRoute | Retire | Event


@dataclass(frozen=True, slots=True)
class Decision:
    """The status to publish, the actions to take (in order), and when to look again."""

    record: Record
    actions: tuple[Action, ...]
    wake_after: float | None


def config_digest(config: Manifest) -> str:
    """A short digest of a Serve config (canonical JSON)."""
    return hashlib.sha256(naming.canonical_json(config).encode()).hexdigest()[:16]


def deploy_digest(config: Manifest, target_capacity: int | None) -> str:
    """What the record keeps per generation: `<config digest>/<target_capacity or ->`."""
    tc = "-" if target_capacity is None else str(target_capacity)
    return f"{config_digest(config)}/{tc}"


def dashboard_url(intent: ServiceIntent, known: Mapping[str, str], generation: str) -> str:
    """A generation's dashboard, always derived here (C2): never a URL read from a record.

    The current generation's comes from the checked intent; an older one is
    `<gen>-head-svc` (the renderer's name) in the intent's namespace on the same port.
    `known` (URLs recorded in the status ConfigMap) is not dialled.
    """
    del known  # recorded URLs are state someone else can write: not an address source
    current = intent.generation
    if generation == current and intent.dashboard_url:
        return intent.dashboard_url
    if not intent.dashboard_url or not naming.is_dns1123_label(generation):
        return ""
    port = intent.dashboard_url.rsplit(":", 1)[-1]
    host = f"{naming.head_service_name(generation)}.{intent.namespace}.svc"
    return f"http://{host}.{intent.cluster_domain}:{port}"


# --- the working state of one pass -------------------------------------------------------


class Pass:
    """One reconcile pass: mutable working state, turned into a `Decision` at the end.

    The pieces of the machine (`switching`, `upgrade`, `machine`) each read and set it;
    the helpers here are what more than one of them needs: Serve readiness and deploys,
    pod labels, the upgrade clock and its progress deadline, Events, the route write.
    """

    def __init__(self, obs: Observation, settings: Settings) -> None:
        self.obs = obs
        self.settings = settings
        self.intent = obs.intent
        self.rec = obs.record or Record()
        self.now = obs.now
        self.gens = obs.generations
        self.deploys: list[Deploy] = []
        self.route_action: SetRoute | None = None
        self.retires: list[Retire] = []
        self.events: list[Event] = []
        self.wakes: list[float] = []
        self.want: dict[str, dict[str, str | None]] = {}
        self.digests: dict[str, str] = {}
        self.deployed = dict(self.rec.deployed)
        self.dashboards = dict(self.rec.dashboards)
        self.retire_at = dict(self.rec.retire_at)
        self.retired = set(self.rec.retired)
        self.upgrade_started = self.rec.upgrade_started
        self.unhealthy_since = self.rec.unhealthy_since
        self.failed = self.rec.failed
        self.active = Side()
        self.pending = Side()
        self.rollback: tuple[str, str] | None = None
        self.held = ""
        self.paused = False
        self.suspend_left = 0

    # --- Serve -----------------------------------------------------------------------------

    def url(self, name: str) -> str:
        """The generation's dashboard URL."""
        return dashboard_url(self.intent, self.dashboards, name)

    def _digest(self, name: str, config: Manifest) -> str:
        found = self.digests.get(name)
        if found is None:
            found = self.digests[name] = config_digest(config)
        return found

    def config_stale(self, name: str) -> bool:
        """Whether the generation's Serve config must be (re)deployed before it is trusted."""
        gen = self.gens.get(name)
        if gen is None or gen.config is None:
            return True
        done = self.deployed.get(name, "").partition("/")[0]
        lost = gen.serve is not None and gen.serve.reachable and not gen.serve.apps
        return done != self._digest(name, gen.config) or lost

    def ready(self, name: str) -> bool:
        """KubeRay's `isReady`: head ready, at least one app, all RUNNING (plus proxies)."""
        gen = self.gens.get(name)
        if gen is None or not gen.reachable or gen.serve is None:
            return False
        apps = gen.serve.apps
        return (
            bool(apps)
            and all(app.status == RUNNING for app in apps.values())
            and gen.serve.proxies_healthy
            and not self.config_stale(name)
        )

    def capacity(self, name: str, recorded: int | None, default: int) -> int:
        """The target_capacity a generation runs at: what Serve reports, else the record."""
        gen = self.gens.get(name)
        serve = gen.serve if gen is not None else None
        if (
            serve is not None
            and gen is not None
            and gen.reachable
            and serve.apps
            and serve.target_capacity is not None
            and not self.config_stale(name)
        ):
            return round(serve.target_capacity)
        return recorded if recorded is not None else default

    def deploy(self, name: str, target_capacity: int | None) -> None:
        """PUT the generation's config when it or its target_capacity changed (or was lost)."""
        gen = self.gens.get(name)
        if gen is None or gen.config is None or not gen.reachable:
            return
        tc = "-" if target_capacity is None else str(target_capacity)
        digest = f"{self._digest(name, gen.config)}/{tc}"
        before = self.deployed.get(name, "")
        stale = self.config_stale(name)
        if before == digest and not stale:
            return
        self.deploys.append(Deploy(name, self.url(name), gen.config, target_capacity, digest))
        self.deployed[name] = digest
        if stale:
            self.event("UpdatedServeApplications", f"Updated serve applications to {name}")
        else:
            self.event(
                "UpdatedServeTargetCapacity",
                f"Updated target_capacity of serve applications to {target_capacity} on {name}",
            )

    def serve_of(self, name: str) -> Serve | None:
        """What the generation's dashboard said in this pass, if it was asked."""
        gen = self.gens.get(name)
        return gen.serve if gen is not None else None

    def apps(self, name: str) -> dict[str, App]:
        """The generation's application statuses, trimmed for the record."""
        return trim_apps(apps_of(self.serve_of(name)))

    def poll(self, name: str) -> None:
        """Look again soon while the generation is not ready, else at the steady pace."""
        ready = self.ready(name)
        self.wakes.append(self.settings.steady_poll_s if ready else self.settings.poll_s)

    # --- labels ----------------------------------------------------------------------------

    def label(self, pod: str, key: str, value: str | None) -> None:
        """Want a label set (None: removed) on a pod by the end of the pass."""
        self.want.setdefault(pod, {})[key] = value

    def make_active(self, name: str) -> None:
        """The RayService Services select `name`'s pods only (added before removed)."""
        for gen in self.gens.values():
            for pod in gen.pods:
                if gen.name == name:
                    self.label(pod.name, naming.SERVE_ACTIVE, "true")
                elif naming.SERVE_ACTIVE in pod.labels:
                    self.label(pod.name, naming.SERVE_ACTIVE, None)

    # --- the upgrade clock -------------------------------------------------------------------

    def start_upgrade(self, pending: str) -> None:
        """An upgrade to `pending` starts (or goes on): its clock and its Event."""
        if self.rec.pending.name != pending or self.upgrade_started is None:
            self.upgrade_started = self.now
            self.unhealthy_since = None
            if self.rec.pending.name != pending:
                self.event("UpgradeStarted", f"Upgrading to {pending}")

    def clear_upgrade(self) -> None:
        """No upgrade in flight."""
        self.upgrade_started = None
        self.unhealthy_since = None

    def check_deadline(self, pending: str, ready: bool) -> None:
        """The progress deadline: roll back when `pending` stays unhealthy for too long."""
        deadline = self.intent.progress_deadline_s
        if ready or self.paused or deadline is None or self.failed == pending:
            self.unhealthy_since = None
            return
        since = self.unhealthy_since if self.unhealthy_since is not None else self.now
        self.unhealthy_since = since
        if self.now - since >= deadline:
            self.failed = pending
            self.event(
                REASON_DEADLINE,
                f"{pending} was not healthy within {deadline}s; rolling back",
                "Warning",
            )
        else:
            self.wakes.append(since + deadline - self.now)

    # --- Events and the route ------------------------------------------------------------------

    def event(self, reason: str, message: str, kind: str = "Normal") -> None:
        """Record an Event (emitted once the status is published)."""
        self.events.append(Event(reason, message, kind))

    def write_route(self, route: Route | None, backends: Sequence[tuple[str, int]]) -> None:
        """Want the route's own backends to be `backends` (no write when they are)."""
        routing = self.intent.routing
        if route is None or routing is None:
            return
        rules = build_rules(
            route, self.intent.name, self.intent.namespace, backends, routing.serve_port
        )
        if own_refs(rules, self.intent.name) == own_refs(route.rules, self.intent.name):
            return
        self.route_action = SetRoute(rules, route.resource_version, dict(backends))
