"""The RayService state machine (reference rayservice.md §4-§10), as a pure function.

`decide(observation, settings)` takes the rendered intent, the last published status, the
live generations (pods, Serve config and facts), the HTTPRoute and the Gateway, and returns
the status to publish and the actions to take. It reads no clock and does no I/O; live
state (serve-active labels, route weights, Serve's target_capacity) outranks the record,
so a restart mid-upgrade neither repeats nor skips a step.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from renderer import naming
from schemas import intent as contract
from syncer.ray.dashboard import ServeDetails
from syncer.rayjob.intent import IntentError
from syncer.kube.timestamps import format_time, parse_time

Manifest = dict[str, Any]

# Differences from KubeRay, by design: generations are content-hashed and found by label;
# an old generation keeps its own Serve config (KubeRay's restart hazard §14.9 cannot
# happen); deletion delays survive restarts; a rollback moves traffic back even when the
# Gateway is not ready or the new generation is unreachable (the §8.7 stall cannot happen);
# and there are pause, abort and progress-deadline controls (`kuberay.io/upgrade-paused`
# in git or on the live HTTPRoute, `kuberay.io/upgrade-abort` on the live HTTPRoute,
# `kuberay.io/upgrade-progress-deadline-seconds` in git).

INCREMENTAL: Final = contract.INCREMENTAL
NEW_CLUSTER: Final = contract.NEW_CLUSTER
NONE: Final = contract.NONE
# Set by a person on the live HTTPRoute (git does not declare them): pause and abort.
ANN_PAUSED: Final = contract.ANN_UPGRADE_PAUSED
ANN_ABORT: Final = "kuberay.io/upgrade-abort"
RUNNING: Final = "RUNNING"
# Condition types and reasons (rayservice.md §10.2), plus the project's own.
READY: Final = "Ready"
UPGRADE: Final = "UpgradeInProgress"
ROLLBACK: Final = "RollbackInProgress"
PAUSED: Final = "UpgradePaused"
SUSPENDING: Final = "Suspending"
SUSPENDED: Final = "Suspended"
REASON_SPEC_CHANGED: Final = "DesiredClusterSpecChanged"
REASON_ABORTED: Final = "UpgradeAborted"
REASON_DEADLINE: Final = "ProgressDeadlineExceeded"
_MESSAGE_LIMIT: Final = 500
# KubeRay's condition texts (rayservice.md §10.2, §11.1).
_READY_TRUE: Final = (
    READY,
    "True",
    "NonZeroServeEndpoints",
    "Number of serve endpoints is greater than 0",
)
_READY_DROPPED: Final = (
    READY,
    "False",
    "ZeroServeEndpoints",
    "Number of serve endpoints dropped to 0",
)
_READY_INITIALIZING: Final = (READY, "False", "Initializing", "RayService is initializing")
_UPGRADE_BOTH: Final = (
    UPGRADE,
    "True",
    "BothActivePendingClustersExist",
    "Both active and pending Ray clusters exist",
)
_UPGRADE_NONE: Final = (
    UPGRADE,
    "False",
    "NoPendingCluster",
    "Active Ray cluster exists and no pending Ray cluster",
)
_UPGRADE_INITIALIZING: Final = (UPGRADE, "False", "Initializing", "RayService is initializing")
_SUSPENDING_READY: Final = (READY, "False", "SuspendInProgress", "RayService is suspending.")
_SUSPENDED_READY: Final = (READY, "False", "SuspendComplete", "RayService is suspended.")
_SUSPENDING: Final = (
    SUSPENDING,
    "True",
    "SuspendInProgress",
    "Waiting for all Kubernetes resources owned by this RayService to be deleted.",
)
_SUSPEND_DONE: Final = (
    SUSPENDING,
    "False",
    "SuspendComplete",
    "All owned resources have been deleted.",
)
_SUSPENDED_TRUE: Final = (
    SUSPENDED,
    "True",
    "SuspendComplete",
    "All owned resources have been deleted.",
)
_SUSPEND_UPGRADE: Final = (UPGRADE, "False", "SuspendInProgress", "No upgrade in progress.")


# --- the intent ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Routing:
    """The HTTPRoute of an incremental upgrade and KubeRay's `clusterUpgradeOptions`."""

    gateway: str
    route: str
    serve_port: int
    step: int
    interval_s: int
    surge: int


@dataclass(frozen=True, slots=True)
class ServiceIntent:
    """A RayService as rendered: what git asks for (see `renderer/build/rayservice.py`)."""

    namespace: str
    name: str
    strategy: str
    generation: str | None
    dashboard_url: str = ""
    exclude_head: bool = False
    paused: bool = False
    progress_deadline_s: int | None = None
    deletion_delay_s: int = contract.DEFAULT_DELETION_DELAY
    routing: Routing | None = None

    @property
    def incremental(self) -> bool:
        """Whether traffic moves by HTTPRoute weights (`NewClusterWithIncrementalUpgrade`)."""
        return self.strategy == INCREMENTAL and self.routing is not None


def parse_service_intent(config_map: Manifest) -> ServiceIntent:
    """Read a RayService intent ConfigMap; raises IntentError when it is malformed."""
    data = (config_map.get("data") or {}).get(naming.INTENT_KEY)
    if not data:
        raise IntentError(f"no {naming.INTENT_KEY} in the intent ConfigMap")
    try:
        intent = json.loads(data)
    except ValueError as exc:
        raise IntentError(f"{naming.INTENT_KEY} is not JSON: {exc}") from exc
    if not isinstance(intent, dict) or intent.get("kind") != contract.RAYSERVICE:
        raise IntentError("not a RayService intent")
    meta = intent.get("metadata") or {}
    spec = intent.get("spec") or {}
    derived = intent.get("derived") or {}
    generation = derived.get("generation") or None
    upgrade = derived.get("upgrade") or {}
    routing_data = upgrade.get("routing")
    routing = None
    if isinstance(routing_data, dict):
        try:
            routing = Routing(
                gateway=str(routing_data["gatewayName"]),
                route=str(routing_data["httpRouteName"]),
                serve_port=int(routing_data.get("servePort") or 8000),
                step=int(routing_data["stepSizePercent"]),
                interval_s=int(routing_data["intervalSeconds"]),
                surge=int(routing_data.get("maxSurgePercent", 100)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise IntentError(f"bad routing in the intent: {exc}") from exc
    deadline = upgrade.get("progressDeadlineSeconds")
    own_meta = config_map.get("metadata") or {}
    return ServiceIntent(
        namespace=str(meta.get("namespace") or own_meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        strategy=str(upgrade.get("type") or NEW_CLUSTER),
        generation=str(generation["name"]) if isinstance(generation, dict) else None,
        dashboard_url=str((generation or {}).get("dashboardURL") or ""),
        exclude_head=spec.get("excludeHeadPodFromServeSvc") is True,
        paused=upgrade.get("paused") is True,
        progress_deadline_s=int(deadline) if deadline else None,
        deletion_delay_s=int(
            upgrade.get("rayClusterDeletionDelaySeconds", contract.DEFAULT_DELETION_DELAY)
        ),
        routing=routing,
    )


# --- what the syncer observed ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Pod:
    """One pod of a generation: readiness and the labels the syncer owns."""

    name: str
    node_type: str = "worker"
    ready: bool = False
    deleting: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)
    resource_version: str = ""

    @property
    def serve_active(self) -> bool:
        """Whether the RayService-level Services select this pod."""
        return self.labels.get(naming.SERVE_ACTIVE) == "true" and not self.deleting


@dataclass(frozen=True, slots=True)
class Deployment:
    """One Serve deployment's status, shown in the status only (never evaluated)."""

    name: str
    status: str
    message: str = ""


@dataclass(frozen=True, slots=True)
class App:
    """One Serve application's status."""

    status: str
    message: str = ""
    deployments: tuple[Deployment, ...] = ()


@dataclass(frozen=True, slots=True)
class Serve:
    """What one generation's dashboard said (`reachable=False`: it did not answer)."""

    reachable: bool
    error: str = ""
    apps: Mapping[str, App] = field(default_factory=dict)
    target_capacity: float | None = None
    proxies_healthy: bool = False


def serve_from_details(details: ServeDetails) -> Serve:
    """The state machine's view of `GET /api/serve/applications/` (an empty name is "default")."""
    apps = {
        (name or "default"): App(
            status=app["status"],
            message=app["message"],
            deployments=tuple(
                Deployment(d["name"], d["status"], d["message"])
                for _, d in sorted(app["deployments"].items())
            ),
        )
        for name, app in details["applications"].items()
    }
    proxies = details["proxies"].values()
    return Serve(
        reachable=True,
        apps=apps,
        target_capacity=details["target_capacity"],
        proxies_healthy=bool(proxies) and all(p["status"] == "HEALTHY" for p in proxies),
    )


@dataclass(frozen=True, slots=True)
class Generation:
    """One live cluster generation `<svc>-<hash>`, found by its labels."""

    name: str
    pods: tuple[Pod, ...] = ()
    config: Manifest | None = None
    serve: Serve | None = None

    @property
    def head(self) -> Pod | None:
        """The head pod, if it exists."""
        return next((p for p in self.pods if p.node_type == "head" and not p.deleting), None)

    @property
    def head_ready(self) -> bool:
        """Whether the head pod is Ready (KubeRay asks nothing of a cluster before that)."""
        head = self.head
        return head is not None and head.ready

    @property
    def reachable(self) -> bool:
        """Whether the dashboard answered in this pass."""
        return self.head_ready and self.serve is not None and self.serve.reachable


@dataclass(frozen=True, slots=True)
class Route:
    """The live HTTPRoute: its rules, annotations and whether the Gateway accepted it."""

    resource_version: str
    rules: tuple[Manifest, ...]
    annotations: Mapping[str, str] = field(default_factory=dict)
    accepted: bool = False


# --- the status record -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Side:
    """`activeServiceStatus` / `pendingServiceStatus`."""

    name: str = ""
    apps: Mapping[str, App] = field(default_factory=dict)
    target_capacity: int | None = None
    traffic: int | None = None
    migrated_at: float | None = None


@dataclass(frozen=True, slots=True)
class Condition:
    """One status condition; `since` is its lastTransitionTime."""

    type: str
    status: str
    reason: str
    message: str
    since: float


@dataclass(frozen=True, slots=True)
class Record:
    """KubeRay's RayService status plus the syncer's bookkeeping (the status ConfigMap)."""

    strategy: str = ""
    active: Side = field(default_factory=Side)
    pending: Side = field(default_factory=Side)
    conditions: tuple[Condition, ...] = ()
    endpoints: int = 0
    updated_at: float | None = None
    deployed: Mapping[str, str] = field(default_factory=dict)
    dashboards: Mapping[str, str] = field(default_factory=dict)
    retire_at: Mapping[str, float] = field(default_factory=dict)
    retired: tuple[str, ...] = ()
    upgrade_started: float | None = None
    unhealthy_since: float | None = None
    failed: str = ""
    error: str = ""

    def condition(self, kind: str) -> Condition | None:
        """The condition of this type, if set."""
        return next((c for c in self.conditions if c.type == kind), None)

    def is_true(self, kind: str) -> bool:
        """Whether the condition of this type is True."""
        found = self.condition(kind)
        return found is not None and found.status == "True"

    def to_status(self) -> Manifest:
        """KubeRay's `RayService.status` field names and forms (rayservice.md §10.1)."""
        incremental = self.strategy == INCREMENTAL
        status: Manifest = {
            "serviceStatus": "Running" if self.is_true(READY) else "",
            "numServeEndpoints": self.endpoints,
            "conditions": [
                {
                    "type": c.type,
                    "status": c.status,
                    "reason": c.reason,
                    "message": c.message,
                    "lastTransitionTime": format_time(c.since),
                }
                for c in self.conditions
            ],
        }
        if self.updated_at is not None:
            status["lastUpdateTime"] = format_time(self.updated_at)
        for key, side in (
            ("activeServiceStatus", self.active),
            ("pendingServiceStatus", self.pending),
        ):
            status[key] = _side_status(side, incremental=incremental)
        return status

    def to_json(self) -> Manifest:
        """Everything, for the status ConfigMap (KubeRay's fields plus bookkeeping)."""
        return {
            "status": self.to_status(),
            "syncer": {
                "strategy": self.strategy,
                "deployed": dict(sorted(self.deployed.items())),
                "dashboards": dict(sorted(self.dashboards.items())),
                "retireAt": dict(sorted(self.retire_at.items())),
                "retired": list(self.retired),
                "upgradeStartTime": self.upgrade_started,
                "unhealthySince": self.unhealthy_since,
                "failedGeneration": self.failed,
                "error": self.error,
                # Exact times: the status' RFC 3339 strings drop fractions.
                "activeMigratedAt": self.active.migrated_at,
                "pendingMigratedAt": self.pending.migrated_at,
                "updatedAt": self.updated_at,
            },
        }

    @classmethod
    def from_json(cls, data: Manifest) -> Record:
        """Read back what `to_json` wrote (tolerant of missing keys)."""
        status = data.get("status") or {}
        own = data.get("syncer") or {}
        conditions = tuple(
            Condition(
                type=str(c.get("type") or ""),
                status=str(c.get("status") or ""),
                reason=str(c.get("reason") or ""),
                message=str(c.get("message") or ""),
                since=parse_time(c.get("lastTransitionTime")) or 0.0,
            )
            for c in status.get("conditions") or []
        )
        return cls(
            strategy=str(own.get("strategy") or ""),
            active=_side_from(status.get("activeServiceStatus") or {}, own.get("activeMigratedAt")),
            pending=_side_from(
                status.get("pendingServiceStatus") or {}, own.get("pendingMigratedAt")
            ),
            conditions=conditions,
            endpoints=int(status.get("numServeEndpoints") or 0),
            updated_at=own.get("updatedAt", parse_time(status.get("lastUpdateTime"))),
            deployed={str(k): str(v) for k, v in (own.get("deployed") or {}).items()},
            dashboards={str(k): str(v) for k, v in (own.get("dashboards") or {}).items()},
            retire_at={str(k): float(v) for k, v in (own.get("retireAt") or {}).items()},
            retired=tuple(str(x) for x in own.get("retired") or ()),
            upgrade_started=own.get("upgradeStartTime"),
            unhealthy_since=own.get("unhealthySince"),
            failed=str(own.get("failedGeneration") or ""),
            error=str(own.get("error") or ""),
        )


def _side_status(side: Side, *, incremental: bool) -> Manifest:
    if not side.name:
        return {}
    out: Manifest = {"rayClusterName": side.name}
    if side.apps:
        out["applicationStatuses"] = {
            name: {
                "status": app.status,
                "message": app.message,
                "serveDeploymentStatuses": {
                    d.name: {"status": d.status, "message": d.message} for d in app.deployments
                },
            }
            for name, app in sorted(side.apps.items())
        }
    if incremental:
        if side.target_capacity is not None:
            out["targetCapacity"] = side.target_capacity
        if side.traffic is not None:
            out["trafficRoutedPercent"] = side.traffic
        if side.migrated_at is not None:
            out["lastTrafficMigratedTime"] = format_time(side.migrated_at)
    return out


def _side_from(data: Manifest, migrated_at: Any) -> Side:
    apps = {
        str(name): App(
            status=str(app.get("status") or ""),
            message=str(app.get("message") or ""),
            deployments=tuple(
                Deployment(str(d), str(v.get("status") or ""), str(v.get("message") or ""))
                for d, v in (app.get("serveDeploymentStatuses") or {}).items()
            ),
        )
        for name, app in (data.get("applicationStatuses") or {}).items()
    }
    capacity = data.get("targetCapacity")
    traffic = data.get("trafficRoutedPercent")
    exact = migrated_at if isinstance(migrated_at, int | float) else None
    return Side(
        name=str(data.get("rayClusterName") or ""),
        apps=apps,
        target_capacity=int(capacity) if capacity is not None else None,
        traffic=int(traffic) if traffic is not None else None,
        migrated_at=exact if exact is not None else parse_time(data.get("lastTrafficMigratedTime")),
    )


# --- the observation and the decision --------------------------------------------------------


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


# --- helpers -----------------------------------------------------------------------------------


def config_digest(config: Manifest) -> str:
    """A short digest of a Serve config (canonical JSON)."""
    return hashlib.sha256(naming.canonical_json(config).encode()).hexdigest()[:16]


def deploy_digest(config: Manifest, target_capacity: int | None) -> str:
    """What the record keeps per generation: `<config digest>/<target_capacity or ->`."""
    tc = "-" if target_capacity is None else str(target_capacity)
    return f"{config_digest(config)}/{tc}"


def dashboard_url(intent: ServiceIntent, known: Mapping[str, str], generation: str) -> str:
    """A generation's dashboard: as recorded while it was current, else derived.

    The intent names only the current generation's URL; an older one has the same domain
    and port (the renderer's `<gen>-head-svc`), so its name is swapped in.
    """
    current = intent.generation
    if generation == current and intent.dashboard_url:
        return intent.dashboard_url
    url = known.get(generation)
    if url:
        return url
    if current and intent.dashboard_url:
        return intent.dashboard_url.replace(current, generation, 1)
    return ""


def serve_service(generation: str) -> str:
    """`<gen>-serve-svc`: the per-generation serve Service (incremental upgrades)."""
    return naming.serve_service_name(generation)


def _backend_pattern(service: str) -> re.Pattern[str]:
    return re.compile(rf"^({re.escape(service)}-[0-9a-z]{{5}})-serve-svc$")


def is_own_backend(ref: Manifest, service: str) -> str | None:
    """The generation a backendRef points at, when it is one of this RayService's."""
    if ref.get("group") not in (None, "") or ref.get("kind") not in (None, "Service"):
        return None
    found = _backend_pattern(service).match(str(ref.get("name") or ""))
    return found.group(1) if found else None


def route_weights(route: Route, service: str) -> dict[str, int]:
    """Weights of this RayService's backends, by generation (the first rule that has them)."""
    for rule in route.rules:
        weights = {}
        for ref in rule.get("backendRefs") or []:
            generation = is_own_backend(ref, service)
            if generation is not None:
                weights[generation] = int(ref.get("weight", 1))
        if weights:
            return weights
    return {}


def build_rules(
    route: Route, service: str, namespace: str, backends: Sequence[tuple[str, int]], port: int
) -> tuple[Manifest, ...]:
    """The route's rules with this RayService's backends replaced by `backends`.

    Rules without such a backend, and the other backends of a rule, are kept as they are.
    Existing backendRefs keep their fields (port, namespace, filters); weights are always
    written out.
    """
    rules: list[Manifest] = []
    for rule in route.rules:
        refs = rule.get("backendRefs") or []
        own = {is_own_backend(ref, service): ref for ref in refs} if refs else {}
        if not any(generation is not None for generation in own):
            rules.append(rule)
            continue
        new_refs: list[Manifest] = []
        for generation, weight in backends:
            base = own.get(generation)
            ref: Manifest = (
                dict(base)
                if base is not None
                else {"name": serve_service(generation), "namespace": namespace, "port": port}
            )
            ref["weight"] = weight
            new_refs.append(ref)
        new_refs.extend(ref for ref in refs if is_own_backend(ref, service) is None)
        rules.append({**rule, "backendRefs": new_refs})
    return tuple(rules)


def _own_refs(rules: Sequence[Manifest], service: str) -> list[list[tuple[str, Any, int]]]:
    return [
        [
            (str(ref.get("name")), ref.get("port"), int(ref.get("weight", 1)))
            for ref in rule.get("backendRefs") or []
            if is_own_backend(ref, service) is not None
        ]
        for rule in rules
    ]


def _apps(serve: Serve | None) -> dict[str, App]:
    if serve is None or not serve.reachable:
        return {}
    return dict(serve.apps)


def _short(text: str) -> str:
    """Cut long texts in the middle: a traceback's last line names the error."""
    if len(text) <= _MESSAGE_LIMIT:
        return text
    head = _MESSAGE_LIMIT // 3
    return f"{text[:head]}…{text[-(_MESSAGE_LIMIT - head - 1) :]}"


def trim_apps(apps: Mapping[str, App]) -> dict[str, App]:
    """Application statuses with messages cut to a size a ConfigMap can hold many of."""
    return {
        name: App(
            app.status,
            _short(app.message),
            tuple(Deployment(d.name, d.status, _short(d.message)) for d in app.deployments),
        )
        for name, app in apps.items()
    }


# --- the pass ----------------------------------------------------------------------------------


class _Pass:
    """One reconcile pass: mutable working state, turned into a `Decision` at the end."""

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

    # --- entry ---------------------------------------------------------------------------

    def run(self) -> Decision:
        intent = self.intent
        current = intent.generation
        if current is not None and intent.dashboard_url:
            self.dashboards[current] = intent.dashboard_url
        if current is not None and self.failed and self.failed != current:
            self.failed = ""  # git moved on: a new attempt may be made later
        active = self._resolve_active()
        if current is None:
            self._suspend()
        elif intent.incremental:
            self._incremental(current, active)
        else:
            self._switching(current, active)
        self._serve_labels()
        self._retire()
        return self._decision()

    # --- who is active ---------------------------------------------------------------------

    def _resolve_active(self) -> str | None:
        labelled = sorted(g.name for g in self.gens.values() if any(p.serve_active for p in g.pods))
        rec = self.rec
        if len(labelled) > 1:
            # A switch adds the label to the new generation before removing it from the old
            # one; seeing both means it was interrupted, so finish it.
            if rec.pending.name in labelled and rec.active.name in labelled:
                return rec.pending.name
            if self.intent.generation in labelled:
                return self.intent.generation
            if rec.active.name in labelled:
                return rec.active.name
            return labelled[0]
        if labelled:
            return labelled[0]
        # Pods re-created by the GitOps tool come back without the label: trust the record.
        if rec.active.name and rec.active.name in self.gens:
            return rec.active.name
        return None

    # --- Serve -----------------------------------------------------------------------------

    def _url(self, name: str) -> str:
        return dashboard_url(self.intent, self.dashboards, name)

    def _digest(self, name: str, config: Manifest) -> str:
        found = self.digests.get(name)
        if found is None:
            found = self.digests[name] = config_digest(config)
        return found

    def _config_stale(self, name: str) -> bool:
        """Whether the generation's Serve config must be (re)deployed before it is trusted."""
        gen = self.gens.get(name)
        if gen is None or gen.config is None:
            return True
        done = self.deployed.get(name, "").partition("/")[0]
        lost = gen.serve is not None and gen.serve.reachable and not gen.serve.apps
        return done != self._digest(name, gen.config) or lost

    def _ready(self, name: str) -> bool:
        """KubeRay's `isReady`: head ready, at least one app, all RUNNING (plus proxies)."""
        gen = self.gens.get(name)
        if gen is None or not gen.reachable or gen.serve is None:
            return False
        apps = gen.serve.apps
        return (
            bool(apps)
            and all(app.status == RUNNING for app in apps.values())
            and gen.serve.proxies_healthy
            and not self._config_stale(name)
        )

    def _capacity(self, name: str, recorded: int | None, default: int) -> int:
        """The target_capacity a generation runs at: what Serve reports, else the record."""
        gen = self.gens.get(name)
        serve = gen.serve if gen is not None else None
        if (
            serve is not None
            and gen is not None
            and gen.reachable
            and serve.apps
            and serve.target_capacity is not None
            and not self._config_stale(name)
        ):
            return round(serve.target_capacity)
        return recorded if recorded is not None else default

    def _deploy(self, name: str, target_capacity: int | None) -> None:
        """PUT the generation's config when it or its target_capacity changed (or was lost)."""
        gen = self.gens.get(name)
        if gen is None or gen.config is None or not gen.reachable:
            return
        tc = "-" if target_capacity is None else str(target_capacity)
        digest = f"{self._digest(name, gen.config)}/{tc}"
        before = self.deployed.get(name, "")
        stale = self._config_stale(name)
        if before == digest and not stale:
            return
        self.deploys.append(Deploy(name, self._url(name), gen.config, target_capacity, digest))
        self.deployed[name] = digest
        if stale:
            self._event("UpdatedServeApplications", f"Updated serve applications to {name}")
        else:
            self._event(
                "UpdatedServeTargetCapacity",
                f"Updated target_capacity of serve applications to {target_capacity} on {name}",
            )

    # --- labels ----------------------------------------------------------------------------

    def _label(self, pod: str, key: str, value: str | None) -> None:
        self.want.setdefault(pod, {})[key] = value

    def _make_active(self, name: str) -> None:
        """The RayService Services select `name`'s pods only (added before removed)."""
        for gen in self.gens.values():
            for pod in gen.pods:
                if gen.name == name:
                    self._label(pod.name, naming.SERVE_ACTIVE, "true")
                elif naming.SERVE_ACTIVE in pod.labels:
                    self._label(pod.name, naming.SERVE_ACTIVE, None)

    def _serve_labels(self) -> None:
        """`ray.io/serve` per KubeRay: the head's follows its proxy; workers once deployed."""
        for name in {self.active.name, self.pending.name} - {""}:
            gen = self.gens.get(name)
            if gen is None or not gen.reachable or gen.serve is None or self._config_stale(name):
                continue
            healthy = gen.serve.proxies_healthy and bool(gen.serve.apps)
            for pod in gen.pods:
                if pod.node_type == "head":
                    value = "true" if healthy and not self.intent.exclude_head else "false"
                    self._label(pod.name, naming.RAY_SERVE, value)
                elif gen.serve.apps:
                    self._label(pod.name, naming.RAY_SERVE, "true")

    def _final_labels(self, pod: Pod) -> dict[str, str]:
        labels = dict(pod.labels)
        for key, value in self.want.get(pod.name, {}).items():
            if value is None:
                labels.pop(key, None)
            else:
                labels[key] = value
        return labels

    def _label_actions(self) -> list[Label]:
        adds: list[Label] = []
        removes: list[Label] = []
        for gen in sorted(self.gens.values(), key=lambda g: g.name):
            for pod in gen.pods:
                changes = {
                    key: value
                    for key, value in sorted(self.want.get(pod.name, {}).items())
                    if pod.labels.get(key) != value
                }
                if not changes or pod.deleting:
                    continue
                action = Label(pod.name, gen.name, changes, pod.resource_version)
                # Traffic first reaches the new pods, then leaves the old ones.
                (removes if changes.get(naming.SERVE_ACTIVE, "") is None else adds).append(action)
        return adds + removes

    # --- NewCluster and None -----------------------------------------------------------------

    def _switching(self, current: str, active: str | None) -> None:
        strategy = self.intent.strategy
        if strategy == NONE:
            # One generation at a time: labels gate traffic (ray.io/serve follows readiness).
            self._deploy(current, None)
            self._make_active(current)
            self.active = Side(current, trim_apps(_apps(self._serve_of(current))))
            self._clear_upgrade()
            self._poll(current)
            return
        if active is not None and active != current and active in self.gens:
            self._upgrade_new_cluster(current, active)
            return
        self._deploy(current, None)
        apps = trim_apps(_apps(self._serve_of(current)))
        if active == current:
            self._make_active(current)  # pods re-created by the GitOps tool get it back
            self.active = Side(current, apps)
            self._clear_upgrade()
            self._poll(current)
            return
        # First deployment: the generation waits as pending until its apps are RUNNING.
        if self._ready(current):
            self._make_active(current)
            self.active = Side(current, apps)
            self._event("UpdatedService", f"The serve Services now select {current}")
            self._clear_upgrade()
        else:
            self.pending = Side(current, apps)
            self.wakes.append(self.settings.poll_s)

    def _upgrade_new_cluster(self, current: str, active: str) -> None:
        """Blue/green (rayservice.md §7): switch once the new generation is ready."""
        self._start_upgrade(current)
        self._deploy(active, None)  # only if its head restarted and lost the apps
        self._deploy(current, None)
        self.paused = self.intent.paused
        ready = self._ready(current)
        self._check_deadline(current, ready)
        active_apps = trim_apps(_apps(self._serve_of(active)))
        apps = trim_apps(_apps(self._serve_of(current)))
        if ready and not self.paused and self.failed != current:
            self._make_active(current)
            self.active = Side(current, apps)
            self._event("UpdatedService", f"The serve Services now select {current} (was {active})")
            self._clear_upgrade()
            return
        self._make_active(active)
        self.active = Side(active, active_apps)
        self.pending = Side(current, apps)
        if self.failed == current:
            self.held = REASON_DEADLINE
        self.wakes.append(self.settings.poll_s)

    def _start_upgrade(self, pending: str) -> None:
        if self.rec.pending.name != pending or self.upgrade_started is None:
            self.upgrade_started = self.now
            self.unhealthy_since = None
            if self.rec.pending.name != pending:
                self._event("UpgradeStarted", f"Upgrading to {pending}")

    def _clear_upgrade(self) -> None:
        self.upgrade_started = None
        self.unhealthy_since = None

    def _check_deadline(self, pending: str, ready: bool) -> None:
        """The progress deadline: roll back when `pending` stays unhealthy for too long."""
        deadline = self.intent.progress_deadline_s
        if ready or self.paused or deadline is None or self.failed == pending:
            self.unhealthy_since = None
            return
        since = self.unhealthy_since if self.unhealthy_since is not None else self.now
        self.unhealthy_since = since
        if self.now - since >= deadline:
            self.failed = pending
            self._event(
                REASON_DEADLINE,
                f"{pending} was not healthy within {deadline}s; rolling back",
                "Warning",
            )
        else:
            self.wakes.append(since + deadline - self.now)

    def _serve_of(self, name: str) -> Serve | None:
        gen = self.gens.get(name)
        return gen.serve if gen is not None else None

    def _poll(self, name: str) -> None:
        ready = self._ready(name)
        self.wakes.append(self.settings.steady_poll_s if ready else self.settings.poll_s)

    # --- NewClusterWithIncrementalUpgrade ---------------------------------------------------

    def _incremental(self, current: str, active: str | None) -> None:
        routing = self.intent.routing
        assert routing is not None  # `incremental` says so
        route = self.obs.route
        live = route_weights(route, self.intent.name) if route is not None else None
        trusted = live is not None and (active is None or active in live)
        if live is not None and not trusted:
            self._event(
                "RouteOverwritten",
                f"{routing.route} lost the backend of the active generation {active}; "
                "restoring the syncer's weights (is /spec/rules ignored by the GitOps tool?)",
                "Warning",
            )
        weights = live if trusted and live is not None else {}
        if active is None:
            self._first_deployment(current, route)
            return
        pending = self._pending_candidate(active, weights)
        if pending is None and current == active:
            self._steady(active, weights, route)
            return
        if pending is None:
            pending = current
        self._upgrade(current, active, pending, weights, route, routing)

    def _first_deployment(self, current: str, route: Route | None) -> None:
        """No active generation yet (rayservice.md §8.2): deploy at capacity 100, then promote."""
        self._deploy(current, 100)
        apps = trim_apps(_apps(self._serve_of(current)))
        if self._ready(current):
            self._make_active(current)
            self.active = Side(current, apps, 100, 100, self.now)
            self._event("UpdatedService", f"{current} is the active generation")
            self._clear_upgrade()
        else:
            self.pending = Side(current, apps, 100)
            self.wakes.append(self.settings.poll_s)
        self._write_route(route, [(current, 100)])

    def _pending_candidate(self, active: str, weights: Mapping[str, int]) -> str | None:
        recorded = self.rec.pending.name
        if recorded == active:
            return None  # a promotion finished but its record was not written
        if recorded and (recorded in self.gens or recorded in weights):
            return recorded
        # No record: a generation that still takes traffic is an upgrade in flight.
        others = sorted((w, g) for g, w in weights.items() if g != active and w > 0)
        return others[-1][1] if others else None

    def _steady(self, active: str, weights: Mapping[str, int], route: Route | None) -> None:
        self._deploy(active, 100)
        self._make_active(active)
        previous = self.rec.active
        moved = previous.name != active or previous.traffic != 100
        self.active = Side(
            active,
            trim_apps(_apps(self._serve_of(active))),
            100,
            100,
            self.now if moved or previous.migrated_at is None else previous.migrated_at,
        )
        self._clear_upgrade()
        self._write_route(route, [(active, 100)])
        self._poll(active)

    def _upgrade(
        self,
        current: str,
        active: str,
        pending: str,
        weights: Mapping[str, int],
        route: Route | None,
        routing: Routing,
    ) -> None:
        """Steps of rayservice.md §8.4-§8.7, in KubeRay's order within one pass."""
        rec = self.rec
        if rec.pending.name != pending:
            self._start_upgrade(pending)
        elif self.upgrade_started is None:
            self.upgrade_started = self.now
        annotations = route.annotations if route is not None else {}
        aborted = annotations.get(ANN_ABORT) == "true"
        self.paused = not aborted and (self.intent.paused or annotations.get(ANN_PAUSED) == "true")
        pending_ready = self._ready(pending)
        if current == pending and not aborted and self.failed != pending:
            self._check_deadline(pending, pending_ready)
        if current == active:
            self.rollback = (
                REASON_SPEC_CHANGED,
                "Goal state reverted to original cluster, rolling back.",
            )
        elif current != pending:
            self.rollback = (
                REASON_SPEC_CHANGED,
                "Goal state changed mid-upgrade, rolling back to original cluster.",
            )
        elif aborted:
            self.rollback = (REASON_ABORTED, f"{ANN_ABORT} is set on the HTTPRoute, rolling back.")
        elif self.failed == pending:
            self.rollback = (
                REASON_DEADLINE,
                f"{pending} did not become healthy within "
                f"{self.intent.progress_deadline_s}s, rolling back.",
            )
        was_rolling_back = rec.is_true(ROLLBACK)
        upgrade = rec.condition(UPGRADE)
        was_held = (
            rec.pending.name == pending
            and upgrade is not None
            and upgrade.reason in (REASON_ABORTED, REASON_DEADLINE)
        )
        if self.rollback is not None and not was_rolling_back and not was_held:
            self._event("RollbackStarted", self.rollback[1], "Warning")

        same_pending = rec.pending.name == pending
        tca = self._capacity(active, rec.active.target_capacity, 100)
        tcp = self._capacity(pending, rec.pending.target_capacity if same_pending else None, 0)
        tra = weights.get(active, 100 if not weights else 0)
        if not weights and rec.active.name == active and rec.active.traffic is not None:
            tra = rec.active.traffic  # the route was overwritten: what the syncer last wrote
        trp = weights.get(pending, 0) if weights else 100 - tra
        lta = rec.active.migrated_at if rec.active.traffic == tra else self.now
        ltp = rec.pending.migrated_at if same_pending and rec.pending.traffic == trp else self.now
        gate = not self.settings.require_gateway or (
            self.obs.gateway_ready and route is not None and route.accepted
        )
        active_gen = self.gens.get(active)
        pending_gen = self.gens.get(pending)
        active_up = active_gen is not None and active_gen.reachable
        pending_up = pending_gen is not None and pending_gen.reachable
        surge, step, interval = routing.surge, routing.step, routing.interval_s
        wa, wp = tra, trp
        if self.paused:
            pass
        elif self.rollback is not None:
            # §8.4 rollback direction: the pending shrinks first, then the active grows.
            if tca == tra:
                if tca + tcp > 100:
                    # An unreachable pending cannot be asked, but it serves nothing either.
                    tcp = max(0, tcp - surge) if pending_up else 0
                if tca + tcp <= 100 and active_up:
                    tca = min(100, tca + surge)
            if wa != tca and (lta is None or self.now - lta >= interval):
                wa = min(100, wa + step, tca)
                wp = 100 - wa
        else:
            done = tca == 0 and tcp == 100
            if gate and not done and tcp == trp:
                if tca + tcp <= 100:
                    if pending_up:
                        tcp = min(100, tcp + surge)
                elif active_up:
                    tca = max(0, tca - surge)
            due = ltp is None or self.now - ltp >= interval
            if wp != tcp and due and pending_ready and gate:
                wp = min(100, wp + step, tcp)
                wa = 100 - wp
        if wa != tra:
            lta = self.now
        if wp != trp:
            ltp = self.now
        if (wa, wp) != (tra, trp):
            self._event("UpdatedHTTPRoute", f"Traffic {active}={wa}% {pending}={wp}%")
        # Serve: pending first, then active (KubeRay's order); one PUT each at most.
        self._deploy(pending, tcp)
        self._deploy(active, tca)
        pending_apps = trim_apps(_apps(self._serve_of(pending)))
        active_apps = trim_apps(_apps(self._serve_of(active)))
        if self.rollback is None and not self.paused and tca == 0 and wp == 100:
            # §8.6 promotion: the new generation takes the RayService-level head Service.
            self._make_active(pending)
            self.active = Side(pending, pending_apps, tcp, wp, ltp)
            self._event("UpgradeComplete", f"{pending} is the active generation (was {active})")
            self._clear_upgrade()
            self._write_route(route, [(pending, 100)])
            return
        self._make_active(active)
        self.active = Side(active, active_apps, tca, wa, lta)
        self.pending = Side(pending, pending_apps, tcp, wp, ltp)
        settled = tca == 100 and wa == 100 and ((tcp == 0 and wp == 0) or not pending_up)
        if self.rollback is not None and settled:
            if current == pending:
                # Aborted or past its deadline: git still wants it, so it is held at 0%.
                self.held = self.rollback[0]
                self.rollback = None
                if was_rolling_back:
                    self._event("RollbackComplete", f"{pending} is held at 0% ({self.held})")
            else:
                self._event("RollbackComplete", f"{active} serves all traffic again")
                self.pending = Side()
                self.rollback = None
                self._clear_upgrade()
                self._write_route(route, [(active, 100)])
                self.wakes.append(0.0)  # a third spec starts its upgrade on the next pass
                return
        self._write_route(route, [(active, wa), (pending, wp)])
        self.wakes.append(self.settings.steady_poll_s if self.held else self.settings.poll_s)
        if not self.paused and (wa, wp) == (tra, trp):
            reference = lta if self.rollback is not None else ltp
            if reference is not None:
                self.wakes.append(max(0.0, reference + interval - self.now))

    def _write_route(self, route: Route | None, backends: Sequence[tuple[str, int]]) -> None:
        routing = self.intent.routing
        if route is None or routing is None:
            return
        rules = build_rules(
            route, self.intent.name, self.intent.namespace, backends, routing.serve_port
        )
        if _own_refs(rules, self.intent.name) == _own_refs(route.rules, self.intent.name):
            return
        self.route_action = SetRoute(rules, route.resource_version, dict(backends))

    # --- suspend and retirement -------------------------------------------------------------

    def _suspend(self) -> None:
        """`spec.suspend`: nothing is served; every generation goes (rayservice.md §11.1)."""
        for gen in self.gens.values():
            for pod in gen.pods:
                if naming.SERVE_ACTIVE in pod.labels:
                    self._label(pod.name, naming.SERVE_ACTIVE, None)
        self.suspend_left = len(self.gens)
        self._clear_upgrade()

    def _retire(self) -> None:
        """Delete old generations once they take no traffic, after the deletion delay."""
        keep = {self.intent.generation, self.active.name, self.pending.name} - {None, ""}
        route = self.obs.route
        routed = set(route_weights(route, self.intent.name)) if route is not None else set()
        delay = 0 if self.intent.generation is None else self.intent.deletion_delay_s
        for name in sorted(self.gens):
            gen = self.gens[name]
            if name in keep:
                self.retire_at.pop(name, None)
                self.retired.discard(name)
                continue
            if name in self.retired:
                continue
            if any(p.serve_active for p in gen.pods) or name in routed:
                self.wakes.append(self.settings.poll_s)
                continue  # it may still take traffic: labels and route go first
            at = self.retire_at.setdefault(name, self.now + delay)
            if self.now >= at:
                self.retires.append(Retire(name))
                self.retired.add(name)
                self.retire_at.pop(name, None)
                self._event("DeletedRayCluster", f"Deleted the old generation {name}")
            else:
                self.wakes.append(at - self.now)
        live = set(self.gens)
        self.retire_at = {k: v for k, v in self.retire_at.items() if k in live}
        self.retired &= live
        for book in (self.deployed, self.dashboards):
            for name in [k for k in book if k not in live and k not in keep]:
                del book[name]

    # --- status ------------------------------------------------------------------------------

    def _event(self, reason: str, message: str, kind: str = "Normal") -> None:
        self.events.append(Event(reason, message, kind))

    def _endpoints(self) -> int:
        """Ready pods the serve Service(s) select (KubeRay counts their EndpointSlices)."""
        count = 0
        # Incremental: `<active>-serve-svc` and `<pending>-serve-svc`, once one is active.
        serving = {self.active.name, self.pending.name} - {""} if self.active.name else set()
        for gen in self.gens.values():
            for pod in gen.pods:
                labels = self._final_labels(pod)
                if not pod.ready or pod.deleting or labels.get(naming.RAY_SERVE) != "true":
                    continue
                if self.intent.exclude_head and pod.node_type == "head":
                    continue
                if self.intent.incremental:
                    selected = gen.name in serving
                else:
                    selected = labels.get(naming.SERVE_ACTIVE) == "true"
                count += selected
        return count

    def _conditions(self, endpoints: int) -> tuple[Condition, ...]:
        """Conditions per rayservice.md §10.2 (and §11.1 for suspend), plus the project's."""
        wanted: list[tuple[str, str, str, str]] = []
        if self.intent.generation is None:
            if self.suspend_left:
                wanted += [_SUSPENDING_READY, _SUSPENDING, _SUSPEND_UPGRADE]
            else:
                wanted += [_SUSPENDED_READY, _SUSPEND_DONE, _SUSPENDED_TRUE, _SUSPEND_UPGRADE]
            return self._merge_conditions(wanted)
        if endpoints > 0:
            wanted.append(_READY_TRUE)
        elif self.rec.is_true(READY):
            wanted.append(_READY_DROPPED)
        else:
            wanted.append(_READY_INITIALIZING)
        if self.held:
            hint = (
                f"remove {ANN_ABORT} from the HTTPRoute to resume"
                if self.held == REASON_ABORTED
                else "change the spec to try again"
            )
            message = f"the upgrade to {self.pending.name} is held at 0% ({self.held}); {hint}"
            wanted.append((UPGRADE, "False", self.held, message))
        elif self.active.name and self.pending.name:
            wanted.append(_UPGRADE_BOTH)
        elif self.active.name:
            wanted.append(_UPGRADE_NONE)
        else:
            wanted.append(_UPGRADE_INITIALIZING)
        if self.rollback is not None:
            wanted.append((ROLLBACK, "True", *self.rollback))
        if self.paused and self.pending.name:
            message = f"{ANN_PAUSED} is set: traffic and target_capacity stay where they are"
            wanted.append((PAUSED, "True", "PausedByAnnotation", message))
        return self._merge_conditions(wanted)

    def _merge_conditions(self, wanted: list[tuple[str, str, str, str]]) -> tuple[Condition, ...]:
        out = []
        for kind, status, reason, message in wanted:
            old = self.rec.condition(kind)
            since = old.since if old is not None and old.status == status else self.now
            out.append(Condition(kind, status, reason, message, since))
        return tuple(out)

    def _decision(self) -> Decision:
        endpoints = self._endpoints()
        record = Record(
            strategy=self.intent.strategy,
            active=self.active,
            pending=self.pending,
            conditions=self._conditions(endpoints),
            endpoints=endpoints,
            updated_at=self.rec.updated_at,
            deployed=dict(sorted(self.deployed.items())),
            dashboards=dict(sorted(self.dashboards.items())),
            retire_at=dict(sorted(self.retire_at.items())),
            retired=tuple(sorted(self.retired)),
            upgrade_started=self.upgrade_started,
            unhealthy_since=self.unhealthy_since,
            failed=self.failed,
            error="",  # the reconciler records a failed action
        )
        if self.obs.record is None or record != self.obs.record:
            record = dataclasses.replace(record, updated_at=self.now)
        actions: list[Action] = [*self.deploys]
        if self.route_action is not None:
            actions.append(self.route_action)
        actions.extend(self._label_actions())
        actions.extend(self.retires)
        actions.extend(self.events)
        if not self.wakes and (self.gens or self.intent.generation is not None):
            # Level-triggered: a switch or a label change also asks for the next look, since
            # the echo of the syncer's own write is not an event it is woken by.
            self.wakes.append(self.settings.poll_s if actions else self.settings.steady_poll_s)
        wake = min(self.wakes) if self.wakes else None
        return Decision(record, tuple(actions), wake)


def decide(observation: Observation, settings: Settings | None = None) -> Decision:
    """One pass of the RayService state machine: observation in, status and actions out."""
    return _Pass(observation, settings or Settings()).run()
