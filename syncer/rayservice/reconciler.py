"""The RayService reconciler: runs `syncer.rayservice.decide` inside the `syncer.loop` engine.

Caches serve-config ConfigMaps, HTTPRoutes and Gateways beside the engine's caches, asks
each generation's dashboard, carries out the decision and publishes `<svc>-kuberay-status`.
Writes no field git declares but HTTPRoute `spec.rules`; deletes only prune-protected
objects of generations git dropped (DESIGN §1).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from typing import Any, Final

from renderer import naming
from schemas import intent as contract
from syncer import metrics
from syncer.kube import events
from syncer.rayjob import views
from syncer.rayservice import machine as rayservice
from syncer.errors import (
    ConflictError,
    NotLeaderError,
    SyncerError,
    TransientError,
)
from syncer.kube.informer import Informer
from syncer.rayjob.intent import IntentError
from syncer.kube.client import CONFIGMAPS, HTTPROUTES, PODS, SERVICES, Resource
from syncer.engine import ROLE_STATUS, STATUS_ANNOTATION_PREFIX, STATUS_KEY, SYNCER_MANAGER, Syncer

Manifest = dict[str, Any]
Key = tuple[str, str, str]  # ("RayService", namespace, name)
_LOG = logging.getLogger(__name__)

KIND: Final = contract.RAYSERVICE
GATEWAYS: Final = Resource("gateway.networking.k8s.io", "v1", "gateways", "Gateway")
PVCS: Final = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim")
NETWORK_POLICIES: Final = Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy")
INGRESSES: Final = Resource("networking.k8s.io", "v1", "ingresses", "Ingress")
# What a generation is made of, deleted in this order: pods and the serve config go last,
# so a retirement cut short still shows the generation and is finished on the next pass.
RETIRED_RESOURCES: Final = (INGRESSES, NETWORK_POLICIES, SERVICES, PVCS, CONFIGMAPS, PODS)
# Kinds a generation may lack, or that the syncer's Role may not cover.
_OPTIONAL: Final = frozenset({INGRESSES, NETWORK_POLICIES, PVCS})
_INDEX: Final = "rayservice"
ANN_SERVICE_STATUS: Final = f"{STATUS_ANNOTATION_PREFIX}service-status"
ANN_ACTIVE: Final = f"{STATUS_ANNOTATION_PREFIX}active-cluster"
ANN_PENDING: Final = f"{STATUS_ANNOTATION_PREFIX}pending-cluster"
ANN_TRAFFIC: Final = f"{STATUS_ANNOTATION_PREFIX}traffic"
_PERMANENT_RETRY_S: Final = 30.0


def _meta(obj: Manifest) -> Manifest:
    meta: Manifest = obj.get("metadata") or {}
    return meta


def _label(obj: Manifest, key: str) -> str:
    return str((_meta(obj).get("labels") or {}).get(key) or "")


def _service_key(obj: Manifest) -> tuple[str, str] | None:
    """(namespace, RayService name) of an object the renderer made for a RayService."""
    if _label(obj, naming.ORIGIN_KIND) != KIND or not _label(obj, naming.ORIGIN_NAME):
        return None
    return (str(_meta(obj).get("namespace") or ""), _label(obj, naming.ORIGIN_NAME))


def _service_of(obj: Manifest) -> Iterable[Hashable]:
    """The index of RayService objects: `_service_key`, when there is one."""
    key = _service_key(obj)
    return [] if key is None else [key]


def _lookup(informers: Sequence[Informer], namespace: str, name: str) -> Manifest | None:
    for informer in informers:
        if informer.namespace in (None, namespace):
            found = informer.get(namespace, name)
            if found is not None:
                return found
    return None


def _indexed(informers: Sequence[Informer], namespace: str, name: str) -> list[Manifest]:
    found: list[Manifest] = []
    for informer in informers:
        if informer.namespace in (None, namespace):
            found.extend(informer.by_index(_INDEX, (namespace, name)))
    return found


def _informer_for(informers: Sequence[Informer], namespace: str) -> Informer | None:
    return next((i for i in informers if i.namespace in (None, namespace)), None)


def _true(conditions: Any, *kinds: str) -> bool:
    """Whether every condition type in `kinds` is status True."""
    found = {str(c.get("type")): c.get("status") for c in conditions or [] if isinstance(c, dict)}
    return all(found.get(kind) == "True" for kind in kinds)


def _pod_view(pod: Manifest) -> rayservice.Pod:
    meta = _meta(pod)
    status = pod.get("status") or {}
    return rayservice.Pod(
        name=str(meta.get("name") or ""),
        node_type=_label(pod, naming.RAY_NODE_TYPE) or "worker",
        ready=bool(status.get("ready")) and status.get("phase") == "Running",
        deleting=bool(meta.get("deletionTimestamp")),
        labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
        resource_version=str(meta.get("resourceVersion") or ""),
    )


def _serve_config(cm: Manifest) -> Manifest | None:
    text = (cm.get("data") or {}).get(contract.SERVE_CONFIG_JSON_KEY)
    if not text:
        return None
    try:
        config = json.loads(text)
    except ValueError:
        return None
    return config if isinstance(config, dict) else None


def route_view(route: Manifest, gateway: str) -> rayservice.Route:
    """The state machine's view of a live HTTPRoute (accepted: by the parent `gateway`)."""
    meta = _meta(route)
    namespace = str(meta.get("namespace") or "")
    accepted = False
    for parent in (route.get("status") or {}).get("parents") or []:
        ref = parent.get("parentRef") or {}
        if ref.get("name") != gateway or ref.get("namespace") not in (None, namespace):
            continue
        accepted = _true(parent.get("conditions"), "Accepted", "ResolvedRefs")
    return rayservice.Route(
        resource_version=str(meta.get("resourceVersion") or ""),
        rules=tuple((route.get("spec") or {}).get("rules") or ()),
        annotations={str(k): str(v) for k, v in (meta.get("annotations") or {}).items()},
        accepted=accepted,
    )


def gateway_ready(gateway: Manifest | None) -> bool:
    """KubeRay's Gateway gate: conditions Accepted and Programmed are True (§8.4)."""
    if gateway is None:
        return False
    return _true((gateway.get("status") or {}).get("conditions"), "Accepted", "Programmed")


def read_record(status_cm: Manifest | None) -> rayservice.Record | None:
    """The record a status ConfigMap holds (None when absent or unreadable)."""
    if status_cm is None:
        return None
    text = (status_cm.get("data") or {}).get(STATUS_KEY)
    if not text:
        return None
    try:
        return rayservice.Record.from_json(json.loads(text))
    except (ValueError, TypeError, AttributeError):
        _LOG.error("unreadable status ConfigMap %s; starting over", _meta(status_cm).get("name"))
        return None


def phase(record: rayservice.Record) -> str:
    """One word for where a RayService is (metrics, `kuberay status`)."""
    if record.is_true(rayservice.SUSPENDED) or record.is_true(rayservice.SUSPENDING):
        return "Suspended"
    if record.is_true(rayservice.ROLLBACK):
        return "RollingBack"
    upgrade = record.condition(rayservice.UPGRADE)
    if upgrade is not None and upgrade.reason in (
        rayservice.REASON_ABORTED,
        rayservice.REASON_DEADLINE,
    ):
        return "Held"
    if record.active.name and record.pending.name:
        return "Upgrading"
    if record.is_true(rayservice.READY):
        return "Running"
    return "Initializing"


def status_rows(configmap: Manifest) -> list[dict[str, str]]:
    """Rows for `kuberay status`: one per generation (active, pending) of a RayService.

    Keys: namespace, name, kind, phase, role, cluster, serviceStatus, endpoints,
    applications (`app=STATUS,...`), targetCapacity, trafficRoutedPercent,
    lastTrafficMigratedTime, conditions (`Type=Status,...`), lastUpdateTime, error.
    """
    meta = _meta(configmap)
    record = read_record(configmap) or rayservice.Record()
    status = record.to_status()
    base = {
        "namespace": str(meta.get("namespace") or ""),
        "name": _label(configmap, naming.ORIGIN_NAME) or str(meta.get("name") or ""),
        "kind": KIND,
        "phase": phase(record),
        "serviceStatus": str(status.get("serviceStatus") or ""),
        "endpoints": str(record.endpoints),
        "conditions": ",".join(f"{c.type}={c.status}" for c in record.conditions),
        "lastUpdateTime": str(status.get("lastUpdateTime") or ""),
        "error": record.error,
    }
    rows = []
    for role, key in (("active", "activeServiceStatus"), ("pending", "pendingServiceStatus")):
        side: Manifest = status.get(key) or {}
        if not side:
            continue
        apps = side.get("applicationStatuses") or {}
        rows.append(
            {
                **base,
                "role": role,
                "cluster": str(side.get("rayClusterName") or ""),
                "applications": ",".join(f"{n}={a['status']}" for n, a in sorted(apps.items())),
                "targetCapacity": str(side.get("targetCapacity", "")),
                "trafficRoutedPercent": str(side.get("trafficRoutedPercent", "")),
                "lastTrafficMigratedTime": str(side.get("lastTrafficMigratedTime") or ""),
            }
        )
    if not rows:
        rows.append(
            {
                **base,
                "role": "-",
                "cluster": "",
                "applications": "",
                "targetCapacity": "",
                "trafficRoutedPercent": "",
                "lastTrafficMigratedTime": "",
            }
        )
    return rows


class ServingController:
    """Reconciles RayServices for a `Syncer`: its informers, its dashboards, its queue.

    Usage: `ServingController(syncer)`: the constructor hands its caches to the engine
    (started and stopped with it) and registers `reconcile` for the origin kind RayService.
    `start_informers()` starts them early (tests that drive passes by hand).
    """

    def __init__(self, syncer: Syncer, settings: rayservice.Settings | None = None) -> None:
        self.syncer = syncer
        self.kube = syncer.kube
        self.settings = settings or rayservice.Settings(
            poll_s=min(2.0, syncer.options.poll_interval_s)
        )
        self.stats: Counter[str] = Counter()
        self.states: dict[Key, str] = {}
        self._lock = threading.Lock()
        selector = syncer.options.label_selector
        self.configs: list[Informer] = []
        self.routes: list[Informer] = []
        self.gateways: list[Informer] = []
        for namespace in syncer.options.namespaces:
            configs = Informer(
                self.kube,
                CONFIGMAPS,
                namespace,
                label_selector=f"{selector},{naming.ROLE}={contract.ROLE_SERVE_CONFIG}",
            )
            configs.add_index(_INDEX, _service_of)
            routes = Informer(
                self.kube,
                HTTPROUTES,
                namespace,
                label_selector=f"{selector},{naming.ORIGIN_KIND}={KIND}",
            )
            gateways = Informer(
                self.kube,
                GATEWAYS,
                namespace,
                label_selector=f"{selector},{naming.ORIGIN_KIND}={KIND}",
            )
            for informer in (configs, routes, gateways):
                informer.add_handler(self._on_change)
            self.configs.append(configs)
            self.routes.append(routes)
            self.gateways.append(gateways)
        for pods in syncer.pods:
            pods.add_index(_INDEX, _service_of)
        syncer.add_informers(self.informers())
        syncer.register(KIND, self.reconcile)

    # --- running ---------------------------------------------------------------------------

    def informers(self) -> list[Informer]:
        """The caches this controller adds to the engine's."""
        return [*self.configs, *self.routes, *self.gateways]

    def start_informers(self, timeout: float = 60.0) -> bool:
        """Start the caches and wait for their first lists."""
        for informer in self.informers():
            informer.start()
        return all(informer.wait_synced(timeout) for informer in self.informers())

    def stop(self) -> None:
        """Stop the caches."""
        for informer in self.informers():
            informer.stop()

    def _on_change(self, event: str, obj: Manifest) -> None:
        key = _service_key(obj)
        if key is not None:
            self.syncer.queue.add((KIND, *key))

    # --- one RayService ----------------------------------------------------------------------

    def reconcile(self, key: Key) -> float | None:
        """One pass for one RayService; returns when to look again (None: on events only)."""
        _, ns, name = key
        intent_cm = _lookup(self.syncer.intents, ns, naming.intent_configmap_name(name))
        if intent_cm is None:
            self._forget(key)
            return None
        try:
            intent = rayservice.parse_service_intent(intent_cm)
        except IntentError as exc:
            _LOG.error("unreadable intent namespace=%s name=%s error=%s", ns, name, exc)
            return None
        status_cm = _lookup(self.syncer.statuses, ns, naming.status_configmap_name(name))
        record = read_record(status_cm)
        observation = self.observe(intent, record)
        decision = rayservice.decide(observation, self.settings)
        try:
            for action in decision.actions:
                self._act(intent, intent_cm, action)
        except (ConflictError, NotLeaderError):
            raise
        except SyncerError as exc:
            return self._failed(intent, intent_cm, status_cm, record, action, exc)
        if record is None or decision.record != record:
            self._publish(intent, intent_cm, status_cm, decision.record)
        self._annotate(intent, intent_cm, decision.record)
        self._track(key, intent_cm, decision.record)
        return decision.wake_after

    def observe(
        self, intent: rayservice.ServiceIntent, record: rayservice.Record | None
    ) -> rayservice.Observation:
        """Collect the state machine's inputs from the caches and the dashboards."""
        ns, name = intent.namespace, intent.name
        pods: dict[str, list[rayservice.Pod]] = {}
        for pod in _indexed(self.syncer.pods, ns, name):
            generation = _label(pod, naming.RAY_CLUSTER)
            if generation:
                pods.setdefault(generation, []).append(_pod_view(pod))
        configs = {
            _label(cm, naming.RAY_CLUSTER): _serve_config(cm)
            for cm in _indexed(self.configs, ns, name)
            if _label(cm, naming.RAY_CLUSTER)
        }
        route = gateway = None
        if intent.routing is not None:
            live_route = _lookup(self.routes, ns, intent.routing.route)
            route = None if live_route is None else route_view(live_route, intent.routing.gateway)
            gateway = _lookup(self.gateways, ns, intent.routing.gateway)
        asked = self._involved(intent, record, pods, route)
        known = record.dashboards if record is not None else {}
        generations = {}
        for generation in sorted(set(pods) | set(configs)):
            views_ = tuple(sorted(pods.get(generation, ()), key=lambda p: p.name))
            head_ready = any(p.node_type == "head" and p.ready and not p.deleting for p in views_)
            serve = None
            if head_ready and generation in asked:
                url = rayservice.dashboard_url(intent, known, generation)
                serve = self._serve_facts(url)
            generations[generation] = rayservice.Generation(
                generation, views_, configs.get(generation), serve
            )
        return rayservice.Observation(
            intent,
            record,
            generations,
            self.syncer.clock(),
            route,
            gateway_ready(gateway),
        )

    @staticmethod
    def _involved(
        intent: rayservice.ServiceIntent,
        record: rayservice.Record | None,
        pods: dict[str, list[rayservice.Pod]],
        route: rayservice.Route | None,
    ) -> set[str]:
        """Generations worth a dashboard call: current, active, pending, or taking traffic."""
        names = {intent.generation or ""}
        if record is not None:
            names |= {record.active.name, record.pending.name}
        names |= {g for g, views_ in pods.items() if any(p.serve_active for p in views_)}
        if route is not None:
            names |= set(rayservice.route_weights(route, intent.name))
        return names - {""}

    def _serve_facts(self, url: str) -> rayservice.Serve:
        try:
            details = self.syncer.dashboards.call(
                "get_serve_details", url, lambda d: d.get_serve_details()
            )
        except SyncerError as exc:
            return rayservice.Serve(reachable=False, error=str(exc))
        return rayservice.serve_from_details(details)

    # --- actions -----------------------------------------------------------------------------

    def _act(
        self, intent: rayservice.ServiceIntent, intent_cm: Manifest, action: rayservice.Action
    ) -> None:
        if isinstance(action, rayservice.Deploy):
            self.syncer.dashboards.call(
                "put_serve_applications",
                action.url,
                lambda d: d.put_serve_applications(
                    action.config, target_capacity=action.target_capacity
                ),
            )
            self.stats["serve_deploys"] += 1
        elif isinstance(action, rayservice.Label):
            self._label_pod(intent, action)
        elif isinstance(action, rayservice.SetRoute):
            self._set_route(intent, action)
        elif isinstance(action, rayservice.Retire):
            self._retire(intent, action.generation)
        else:
            self._emit(intent, intent_cm, action)

    def _label_pod(self, intent: rayservice.ServiceIntent, action: rayservice.Label) -> None:
        ns = intent.namespace
        pod = _lookup(self.syncer.pods, ns, action.pod)
        if pod is None or not self._owned(pod, intent):
            return
        version = action.resource_version or str(_meta(pod).get("resourceVersion") or "")
        body: Manifest = {"metadata": {"resourceVersion": version, "labels": dict(action.labels)}}
        try:
            updated = self.kube.patch(PODS, ns, action.pod, body)
        except ConflictError:
            # The kubelet writes pod status all the time; the labels are the syncer's own.
            fresh = self.kube.get(PODS, ns, action.pod)
            if fresh is None or not self._owned(fresh, intent):
                return
            body["metadata"]["resourceVersion"] = _meta(fresh).get("resourceVersion")
            updated = self.kube.patch(PODS, ns, action.pod, body)
        informer = _informer_for(self.syncer.pods, ns)
        if informer is not None:
            informer.upsert(updated)
        self.stats["labelled_pods"] += 1

    @staticmethod
    def _owned(obj: Manifest, intent: rayservice.ServiceIntent) -> bool:
        """Whether the renderer made `obj` for this RayService (the only objects written)."""
        return (
            views.is_rendered(obj)
            and _label(obj, naming.ORIGIN_KIND) == KIND
            and _label(obj, naming.ORIGIN_NAME) == intent.name
        )

    def _set_route(self, intent: rayservice.ServiceIntent, action: rayservice.SetRoute) -> None:
        routing = intent.routing
        if routing is None:
            return
        ns = intent.namespace
        route = _lookup(self.routes, ns, routing.route)
        if route is None or not self._owned(route, intent):
            return
        body = {
            "metadata": {"resourceVersion": action.resource_version},
            "spec": {"rules": list(action.rules)},
        }
        updated = self.kube.patch(HTTPROUTES, ns, routing.route, body)
        informer = _informer_for(self.routes, ns)
        if informer is not None:
            informer.upsert(updated)
        self.stats["route_writes"] += 1

    def _retire(self, intent: rayservice.ServiceIntent, generation: str) -> None:
        """Delete what is left of a generation: prune-protected objects only."""
        if generation == intent.generation:
            return  # never an object git still declares
        ns = intent.namespace
        for pod in _indexed(self.syncer.pods, ns, intent.name):
            if _label(pod, naming.RAY_CLUSTER) == generation and _label(pod, naming.SERVE_ACTIVE):
                return  # it still takes traffic; the next pass removes the label first
        selector = ",".join(
            (
                f"{naming.MANAGED_BY}={naming.MANAGED_BY_VALUE}",
                f"{naming.ORIGIN_KIND}={KIND}",
                f"{naming.ORIGIN_NAME}={intent.name}",
                f"{naming.RAY_CLUSTER}={generation}",
            )
        )
        for resource in RETIRED_RESOURCES:
            try:
                items, _ = self.kube.list(resource, ns, label_selector=selector)
            except SyncerError as exc:
                if resource in _OPTIONAL and exc.status in (403, 404):
                    continue
                raise
            for obj in items:
                annotations = _meta(obj).get("annotations") or {}
                if not any(annotations.get(k) == v for k, v in naming.PRUNE_PROTECTION.items()):
                    continue  # not protected: the GitOps tool prunes it
                name = str(_meta(obj).get("name"))
                version = str(_meta(obj).get("resourceVersion") or "") or None
                self.kube.delete(resource, ns, name, resource_version=version)
                for informers in (self.syncer.pods, self.configs):
                    informer = _informer_for(informers, ns)
                    if informer is not None and informer.resource == resource:
                        informer.forget(ns, name)
                self.stats["retired_objects"] += 1
        _LOG.info(
            "retired generation namespace=%s rayservice=%s generation=%s",
            ns,
            intent.name,
            generation,
        )

    def _emit(
        self, intent: rayservice.ServiceIntent, intent_cm: Manifest, event: rayservice.Event
    ) -> None:
        """Record a Kubernetes Event on the intent ConfigMap (best effort)."""
        meta = _meta(intent_cm)
        involved: Manifest = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": str(meta.get("name") or ""),
            **({"uid": meta["uid"]} if meta.get("uid") else {}),
        }
        events.record(
            self.kube,
            events.build_event(
                origin_kind=KIND,
                origin_name=intent.name,
                namespace=intent.namespace,
                involved=involved,
                event_type=event.type,
                reason=event.reason,
                message=event.message,
                now=self.syncer.clock(),
            ),
        )

    def _failed(
        self,
        intent: rayservice.ServiceIntent,
        intent_cm: Manifest,
        status_cm: Manifest | None,
        record: rayservice.Record | None,
        action: rayservice.Action,
        exc: SyncerError,
    ) -> float:
        """An action failed: keep the last record (the next pass recomputes), note the error."""
        reason = {
            rayservice.Deploy: "FailedToUpdateServeApplications",
            rayservice.SetRoute: "FailedToUpdateHTTPRoute",
            rayservice.Label: "FailedToUpdateServeLabel",
            rayservice.Retire: "FailedToDeleteRayCluster",
        }.get(type(action), "FailedToReconcile")
        message = f"{reason}: {exc}"[:1000]
        _LOG.warning("rayservice action failed name=%s error=%s", intent.name, message)
        base = record or rayservice.Record(strategy=intent.strategy)
        if base.error != message:
            failed = dataclasses.replace(base, error=message, updated_at=self.syncer.clock())
            self._publish(intent, intent_cm, status_cm, failed)
            self._emit(intent, intent_cm, rayservice.Event(reason, str(exc), "Warning"))
        self.stats["action_failures"] += 1
        return self.settings.poll_s if isinstance(exc, TransientError) else _PERMANENT_RETRY_S

    # --- publishing ------------------------------------------------------------------------

    def _publish(
        self,
        intent: rayservice.ServiceIntent,
        intent_cm: Manifest,
        current: Manifest | None,
        record: rayservice.Record,
    ) -> None:
        ns, name = intent.namespace, naming.status_configmap_name(intent.name)
        data = {
            STATUS_KEY: json.dumps(record.to_json(), sort_keys=True, separators=(",", ":")),
            "serviceStatus": "Running" if record.is_true(rayservice.READY) else "",
            "activeCluster": record.active.name,
            "pendingCluster": record.pending.name,
        }
        meta: Manifest = {
            "name": name,
            "namespace": ns,
            "labels": {
                naming.MANAGED_BY: SYNCER_MANAGER,
                naming.ORIGIN_KIND: KIND,
                naming.ORIGIN_NAME: intent.name,
                naming.ROLE: ROLE_STATUS,
            },
        }
        anchor = _meta(intent_cm)
        if anchor.get("uid"):
            meta["ownerReferences"] = [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": str(anchor.get("name")),
                    "uid": str(anchor["uid"]),
                }
            ]
        if current is None:
            body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}
            written = self.kube.create(CONFIGMAPS, ns, body)
        else:
            meta["resourceVersion"] = _meta(current).get("resourceVersion")
            body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}
            written = self.kube.replace(CONFIGMAPS, ns, body)
        informer = _informer_for(self.syncer.statuses, ns)
        if informer is not None:
            informer.upsert(written)
        self.stats["status_writes"] += 1

    def _annotate(
        self, intent: rayservice.ServiceIntent, intent_cm: Manifest, record: rayservice.Record
    ) -> None:
        """Status annotations on the intent ConfigMap (git does not declare them)."""
        wanted = {
            ANN_SERVICE_STATUS: "Running" if record.is_true(rayservice.READY) else "",
            ANN_ACTIVE: record.active.name,
            ANN_PENDING: record.pending.name,
        }
        if intent.incremental:
            sides = [s for s in (record.active, record.pending) if s.name and s.traffic is not None]
            wanted[ANN_TRAFFIC] = ",".join(f"{s.name}={s.traffic}" for s in sides)
        have = _meta(intent_cm).get("annotations") or {}
        if all(have.get(k, "") == v for k, v in wanted.items()):
            return
        version = str(_meta(intent_cm).get("resourceVersion") or "")
        body = {"metadata": {"resourceVersion": version, "annotations": wanted}}
        try:
            updated = self.kube.patch(
                CONFIGMAPS, intent.namespace, str(_meta(intent_cm)["name"]), body
            )
        except ConflictError:
            return  # the next pass sees the new version
        informer = _informer_for(self.syncer.intents, intent.namespace)
        if informer is not None:
            informer.upsert(updated)

    def _track(self, key: Key, intent_cm: Manifest, record: rayservice.Record) -> None:
        """States, transitions and KubeRay's RayService metrics."""
        _, ns, name = key
        uid = str(_meta(intent_cm).get("uid") or "")
        now = phase(record)
        with self._lock:
            before = self.states.get(key, "")
            self.states[key] = now
        if before != now:
            metrics.TRANSITIONS.labels(ns, KIND, before, now).inc()
        ready = "true" if record.is_true(rayservice.READY) else "false"
        upgrading = "true" if record.is_true(rayservice.UPGRADE) else "false"
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
