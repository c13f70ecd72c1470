"""The RayService reconciler: runs `machine.decide` for one RayService key of the engine.

Caches serve-config ConfigMaps, HTTPRoutes and Gateways beside the engine's caches (and
indexes the shared pod cache by RayService), asks each generation's dashboard through the
shared pool, carries out the decision (`syncer.rayservice.actions`), publishes
`<svc>-kuberay-status` and writes KubeRay's RayService metrics. Writes no field git
declares but HTTPRoute `spec.rules`; deletes only prune-protected objects of generations
git dropped (DESIGN §1).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Sequence
from typing import Final

from renderer import naming
from schemas import intent as contract
from syncer import metrics, status
from syncer.engine import Engine, Key
from syncer.errors import ConflictError, IntentError, NotLeaderError, SyncerError, TransientError
from syncer.kube import meta
from syncer.kube.cache import Cache
from syncer.kube.client import CONFIGMAPS, HTTPROUTES, Manifest
from syncer.ray.pool import DashboardPool
from syncer.rayservice import actions, machine, views
from syncer.rayservice.intent import ServiceIntent, parse_service_intent
from syncer.rayservice.observed import Generation, Pod, Route, Serve, serve_from_details
from syncer.rayservice.record import READY, UPGRADE, Record, phase
from syncer.rayservice.routing import route_weights
from syncer.rayservice.state import (
    Action,
    Deploy,
    Event,
    Label,
    Observation,
    Retire,
    SetRoute,
    Settings,
    dashboard_url,
)

_LOG = logging.getLogger(__name__)

KIND: Final = views.KIND
ANN_SERVICE_STATUS: Final = f"{status.STATUS_ANNOTATION_PREFIX}service-status"
ANN_ACTIVE: Final = f"{status.STATUS_ANNOTATION_PREFIX}active-cluster"
ANN_PENDING: Final = f"{status.STATUS_ANNOTATION_PREFIX}pending-cluster"
ANN_TRAFFIC: Final = f"{status.STATUS_ANNOTATION_PREFIX}traffic"
_PERMANENT_RETRY_S: Final = 30.0
_FAILURE_REASONS: Final[dict[type, str]] = {
    Deploy: "FailedToUpdateServeApplications",
    SetRoute: "FailedToUpdateHTTPRoute",
    Label: "FailedToUpdateServeLabel",
    Retire: "FailedToDeleteRayCluster",
}


class RayServiceReconciler:
    """Reconciles RayServices: their caches, the pass, the status, the metrics.

    Built by the caller with the engine, the shared dashboard pool and the shared pod cache,
    then registered with `engine.register`.
    """

    kind: Final = KIND

    def __init__(
        self,
        engine: Engine,
        pool: DashboardPool,
        pods: Cache,
        settings: Settings | None = None,
        *,
        cluster_domain: str = "cluster.local",
    ) -> None:
        self.engine = engine
        self.cluster_domain = cluster_domain
        self.kube = engine.kube
        self.settings = settings or Settings()
        self.dashboards = pool
        self.pods = pods
        self.states: dict[Key, str] = {}
        self._lock = threading.Lock()
        selector, namespaces = engine.options.label_selector, engine.options.namespaces
        self.configs = Cache.watching(
            self.kube,
            CONFIGMAPS,
            namespaces,
            label_selector=f"{selector},{naming.ROLE}={contract.ROLE_SERVE_CONFIG}",
        )
        self.configs.add_index(views.BY_SERVICE, views.service_of)
        own = f"{selector},{naming.ORIGIN_KIND}={KIND}"
        self.routes = Cache.watching(self.kube, HTTPROUTES, namespaces, label_selector=own)
        self.gateways = Cache.watching(self.kube, actions.GATEWAYS, namespaces, label_selector=own)
        for cache in (self.configs, self.routes, self.gateways):
            cache.add_handler(self._on_change)
        pods.add_index(views.BY_SERVICE, views.service_of)
        # Intents by the RayService their labels claim (a second claimant is refused).
        engine.intents.add_index(views.BY_SERVICE, views.service_of)
        self.actions = actions.Actions(
            self.kube,
            pool,
            pods,
            self.configs,
            self.routes,
            is_leader=lambda: engine.is_leader(),
        )
        self.stats = self.actions.stats

    def caches(self) -> Sequence[Cache]:
        """The pod cache (shared) and the serve-config, HTTPRoute and Gateway caches."""
        return [self.pods, self.configs, self.routes, self.gateways]

    def _on_change(self, event: str, obj: Manifest) -> None:
        key = views.service_key(obj)
        if key is not None:
            self.engine.enqueue(KIND, *key)

    # --- one RayService ----------------------------------------------------------------------

    def reconcile(self, key: Key) -> float | None:
        """One pass for one RayService; returns when to look again (None: on events only)."""
        _, ns, name = key
        intent_cm = self.engine.intents.get(ns, naming.intent_configmap_name(name))
        if intent_cm is None:
            self._forget(key)
            return None
        try:
            intent = parse_service_intent(intent_cm, cluster_domain=self.cluster_domain)
        except IntentError as exc:
            self.engine.reject_intent(KIND, intent_cm, exc)
            return None
        self._refuse_claimants(intent_cm)
        status_cm = self.engine.statuses.get(ns, naming.status_configmap_name(name))
        if status_cm is not None:
            why = status.distrust(
                status_cm,
                origin_kind=KIND,
                origin_name=name,
                owner_uids=[str(meta.metadata(intent_cm).get("uid") or "")],
                ledger=self.engine.ledger,
            )
            if why is not None:
                raise status.untrusted(ns, name, why)
        record = status.read_record(status_cm, Record.from_json)
        decision = machine.decide(self.observe(intent, record), self.settings)
        # Publish before acting: a pass whose status cannot be written (a conflict, a
        # squatted name) changes nothing else (C1's demo E acted, then failed to publish).
        published = record
        if record is None or decision.record != record:
            status_cm = self._publish(intent, intent_cm, status_cm, decision.record)
            published = decision.record
        try:
            for action in decision.actions:
                if _destructive(action):
                    self._confirm_intent(intent_cm)
                self._apply(intent, intent_cm, action)
        except (ConflictError, NotLeaderError):
            raise
        except SyncerError as exc:
            return self._failed(intent, intent_cm, status_cm, published, action, exc)
        self._annotate(intent, intent_cm, decision.record)
        self._track(key, intent_cm, decision.record)
        return decision.wake_after

    def _refuse_claimants(self, intent_cm: Manifest) -> None:
        """Refuse (one Event each) every other ConfigMap labelled for this RayService.

        Only `<svc>-kuberay-intent` speaks for it; a second claimant is never parsed.
        """
        ns, cm_name = meta.namespace(intent_cm), meta.name(intent_cm)
        origin = meta.label(intent_cm, naming.ORIGIN_NAME)
        for other in self.engine.intents.by_index(views.BY_SERVICE, (ns, origin)):
            if meta.name(other) != cm_name:
                error = IntentError(
                    f"a second intent for RayService {origin}: only {cm_name} speaks for it"
                )
                self.engine.reject_intent(KIND, other, error)

    def _confirm_intent(self, intent_cm: Manifest) -> None:
        """Right before a destructive step: the pass's intent is still the current one.

        The live `<svc>-kuberay-intent` must be the very version the pass decided on
        (else ConflictError: the next pass decides again).
        """
        ns, cm_name = meta.namespace(intent_cm), meta.name(intent_cm)
        live = self.kube.get(CONFIGMAPS, ns, cm_name)
        mine, theirs = meta.metadata(intent_cm), meta.metadata(live or {})
        if live is None or any(mine.get(k) != theirs.get(k) for k in ("uid", "resourceVersion")):
            raise ConflictError(f"intent {ns}/{cm_name} changed since this pass read it")

    def observe(self, intent: ServiceIntent, record: Record | None) -> Observation:
        """Collect the state machine's inputs from the caches and the dashboards."""
        ns, name = intent.namespace, intent.name
        pods: dict[str, list[Pod]] = {}
        for pod in self.pods.by_index(views.BY_SERVICE, (ns, name)):
            generation = meta.label(pod, naming.RAY_CLUSTER)
            if generation:
                pods.setdefault(generation, []).append(views.pod_view(pod))
        configs = {
            meta.label(cm, naming.RAY_CLUSTER): views.serve_config(cm)
            for cm in self.configs.by_index(views.BY_SERVICE, (ns, name))
            if meta.label(cm, naming.RAY_CLUSTER)
        }
        route = gateway = None
        if intent.routing is not None:
            live_route = self.routes.get(ns, intent.routing.route)
            route = (
                None if live_route is None else views.route_view(live_route, intent.routing.gateway)
            )
            gateway = self.gateways.get(ns, intent.routing.gateway)
        asked = _involved(intent, record, pods, route)
        known = record.dashboards if record is not None else {}
        generations = {}
        for generation in sorted(set(pods) | set(configs)):
            views_ = tuple(sorted(pods.get(generation, ()), key=lambda p: p.name))
            head_ready = any(p.node_type == "head" and p.ready and not p.deleting for p in views_)
            serve = None
            if head_ready and generation in asked:
                serve = self._serve_facts(dashboard_url(intent, known, generation))
            generations[generation] = Generation(generation, views_, configs.get(generation), serve)
        return Observation(
            intent, record, generations, self.engine.clock(), route, views.gateway_ready(gateway)
        )

    def _serve_facts(self, url: str) -> Serve:
        try:
            details = self.dashboards.call(
                "get_serve_details", url, lambda d: d.get_serve_details()
            )
        except SyncerError as exc:
            return Serve(reachable=False, error=str(exc))
        return serve_from_details(details)

    # --- actions and failures ----------------------------------------------------------------

    def _apply(self, intent: ServiceIntent, intent_cm: Manifest, action: Action) -> None:
        if isinstance(action, Event):
            self.actions.emit(intent, intent_cm, action, now=self.engine.clock())
        else:
            self.actions.apply(intent, action)

    def _failed(
        self,
        intent: ServiceIntent,
        intent_cm: Manifest,
        status_cm: Manifest | None,
        record: Record | None,
        action: Action,
        exc: SyncerError,
    ) -> float:
        """An action failed: keep the last record (the next pass recomputes), note the error."""
        reason = _FAILURE_REASONS.get(type(action), "FailedToReconcile")
        message = f"{reason}: {exc}"[:1000]
        _LOG.warning("rayservice action failed name=%s error=%s", intent.name, message)
        base = record or Record(strategy=intent.strategy)
        if base.error != message:
            failed = dataclasses.replace(base, error=message, updated_at=self.engine.clock())
            self._publish(intent, intent_cm, status_cm, failed)
            event = Event(reason, str(exc), "Warning")
            self.actions.emit(intent, intent_cm, event, now=self.engine.clock())
        self.stats["action_failures"] += 1
        return self.settings.poll_s if isinstance(exc, TransientError) else _PERMANENT_RETRY_S

    # --- publishing ------------------------------------------------------------------------

    def _publish(
        self,
        intent: ServiceIntent,
        intent_cm: Manifest,
        current: Manifest | None,
        record: Record,
    ) -> Manifest:
        uid = str(meta.metadata(intent_cm).get("uid") or "")
        written = status.publish(
            self.kube,
            self.engine.statuses,
            origin_kind=KIND,
            origin_name=intent.name,
            namespace=intent.namespace,
            record=record.to_json(),
            fields={
                "serviceStatus": "Running" if record.is_true(READY) else "",
                "activeCluster": record.active.name,
                "pendingCluster": record.pending.name,
            },
            owner=status.Owner("v1", "ConfigMap", meta.name(intent_cm), uid) if uid else None,
            current=current,
            ledger=self.engine.ledger,
        )
        self.stats["status_writes"] += 1
        return written

    def _annotate(self, intent: ServiceIntent, intent_cm: Manifest, record: Record) -> None:
        """Status annotations on the intent ConfigMap (git does not declare them)."""
        wanted = {
            ANN_SERVICE_STATUS: "Running" if record.is_true(READY) else "",
            ANN_ACTIVE: record.active.name,
            ANN_PENDING: record.pending.name,
        }
        if intent.incremental:
            sides = [s for s in (record.active, record.pending) if s.name and s.traffic is not None]
            wanted[ANN_TRAFFIC] = ",".join(f"{s.name}={s.traffic}" for s in sides)
        status.annotate(self.kube, self.engine.intents, CONFIGMAPS, intent_cm, wanted, guarded=True)

    # --- states and metrics ----------------------------------------------------------------

    def _track(self, key: Key, intent_cm: Manifest, record: Record) -> None:
        """States, transitions and KubeRay's RayService metrics."""
        _, ns, name = key
        uid = str(meta.metadata(intent_cm).get("uid") or "")
        now = phase(record)
        with self._lock:
            before = self.states.get(key, "")
            self.states[key] = now
        if before != now:
            metrics.TRANSITIONS.labels(ns, KIND, before, now).inc()
        ready = "true" if record.is_true(READY) else "false"
        upgrading = "true" if record.is_true(UPGRADE) else "false"
        metrics.SERVICE_INFO.labels(name=name, namespace=ns, uid=uid).set(1)
        metrics.SERVICE_CONDITION_READY.set_state(
            "condition", ready, name=name, namespace=ns, uid=uid
        )
        metrics.SERVICE_CONDITION_UPGRADE.set_state(
            "condition", upgrading, name=name, namespace=ns, uid=uid
        )
        metrics.SERVICE_TARGET_CAPACITY.remove_matching(namespace=ns, name=name)
        metrics.SERVICE_TRAFFIC_PERCENT.remove_matching(namespace=ns, name=name)
        for side in (record.active, record.pending):
            if side.name and side.target_capacity is not None:
                metrics.SERVICE_TARGET_CAPACITY.labels(ns, name, side.name).set(
                    side.target_capacity
                )
            if side.name and side.traffic is not None:
                metrics.SERVICE_TRAFFIC_PERCENT.labels(ns, name, side.name).set(side.traffic)

    def _forget(self, key: Key) -> None:
        _, ns, name = key
        with self._lock:
            self.states.pop(key, None)
        self.engine.forget(key)
        for family in (
            metrics.SERVICE_INFO,
            metrics.SERVICE_CONDITION_READY,
            metrics.SERVICE_CONDITION_UPGRADE,
            metrics.SERVICE_TARGET_CAPACITY,
            metrics.SERVICE_TRAFFIC_PERCENT,
        ):
            family.remove_matching(namespace=ns, name=name)

    def snapshot(self) -> dict[Key, str]:
        """A copy of every tracked RayService's phase."""
        with self._lock:
            return dict(self.states)


def _destructive(action: Action) -> bool:
    """Whether `action` takes something away: a generation retired, a serving label removed."""
    if isinstance(action, Retire):
        return True
    return isinstance(action, Label) and any(v is None for v in action.labels.values())


def _involved(
    intent: ServiceIntent,
    record: Record | None,
    pods: dict[str, list[Pod]],
    route: Route | None,
) -> set[str]:
    """Generations worth a dashboard call: current, active, pending, or taking traffic."""
    names = {intent.generation or ""}
    if record is not None:
        names |= {record.active.name, record.pending.name}
    names |= {g for g, views_ in pods.items() if any(p.serve_active for p in views_)}
    if route is not None:
        names |= set(route_weights(route, intent.name))
    return names - {""}
