"""Carrying out the RayService machine's actions: Serve deploys, pod labels, route, retirement.

Serve configs go to a generation's dashboard through the shared pool; pod labels and the
HTTPRoute's `spec.rules` are patched, guarded by resourceVersion, on objects the renderer
made for this RayService only; a retired generation loses its prune-protected objects (the
GitOps tool prunes the rest). Events are recorded on the intent ConfigMap.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from typing import Final

from renderer import naming
from syncer.errors import ConflictError, SyncerError
from syncer.kube import events, meta
from syncer.kube.cache import Cache
from syncer.kube.client import CONFIGMAPS, HTTPROUTES, PODS, SERVICES, Kube, Manifest, Resource
from syncer.ray.dashboard import require_lease
from syncer.ray.pool import DashboardPool
from syncer.ray.types import Dashboard
from syncer.rayservice.intent import ServiceIntent
from syncer.rayservice.state import Action, Deploy, Event, Label, Retire, SetRoute
from syncer.rayservice.views import BY_SERVICE, KIND

_LOG = logging.getLogger(__name__)

GATEWAYS: Final = Resource("gateway.networking.k8s.io", "v1", "gateways", "Gateway")
PVCS: Final = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim")
NETWORK_POLICIES: Final = Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy")
INGRESSES: Final = Resource("networking.k8s.io", "v1", "ingresses", "Ingress")
# What a generation is made of, deleted in this order: pods and the serve config go last,
# so a retirement cut short still shows the generation and is finished on the next pass.
RETIRED_RESOURCES: Final = (INGRESSES, NETWORK_POLICIES, SERVICES, PVCS, CONFIGMAPS, PODS)
# Kinds a generation may lack, or that the syncer's Role may not cover.
_OPTIONAL: Final = frozenset({INGRESSES, NETWORK_POLICIES, PVCS})


def owned(obj: Manifest, intent: ServiceIntent) -> bool:
    """Whether the renderer (or the autoscaling actuator, for a worker Pod) made `obj` for us.

    Those are the only objects a RayService pass writes (serve labels, retirement).
    """
    return (
        (meta.is_rendered(obj) or (obj.get("kind") == "Pod" and meta.is_syncer_made(obj)))
        and meta.label(obj, naming.ORIGIN_KIND) == KIND
        and meta.label(obj, naming.ORIGIN_NAME) == intent.name
    )


class Actions:
    """The RayService reconciler's hands: one method per kind of action."""

    def __init__(
        self,
        kube: Kube,
        pool: DashboardPool,
        pods: Cache,
        configs: Cache,
        routes: Cache,
        *,
        is_leader: Callable[[], bool] = lambda: True,
    ) -> None:
        self.kube = kube
        self.is_leader = is_leader
        self.dashboards = pool
        self.pods = pods
        self.configs = configs
        self.routes = routes
        self.stats: Counter[str] = Counter()

    def apply(self, intent: ServiceIntent, action: Action) -> None:
        """Carry out one action other than an Event (see `emit`)."""
        if isinstance(action, Deploy):
            self.dashboards.call(
                "put_serve_applications", action.url, lambda d: self._put(d, action)
            )
            self.stats["serve_deploys"] += 1
        elif isinstance(action, Label):
            self._label_pod(intent, action)
        elif isinstance(action, SetRoute):
            self._set_route(intent, action)
        elif isinstance(action, Retire):
            self._retire(intent, action.generation)

    def _put(self, dashboard: Dashboard, action: Deploy) -> None:
        # Right before the request goes out, after the pool's budget wait (M4): a replica
        # that lost the lease must not PUT an old target_capacity.
        require_lease(self.is_leader, f"PUT serve applications to {action.url}")
        dashboard.put_serve_applications(action.config, target_capacity=action.target_capacity)

    def _label_pod(self, intent: ServiceIntent, action: Label) -> None:
        ns = intent.namespace
        pod = self.pods.get(ns, action.pod)
        if pod is None or not owned(pod, intent):
            return
        version = action.resource_version or str(meta.metadata(pod).get("resourceVersion") or "")
        body: Manifest = {"metadata": {"resourceVersion": version, "labels": dict(action.labels)}}
        try:
            updated = self.kube.patch(PODS, ns, action.pod, body)
        except ConflictError:
            # The kubelet writes pod status all the time; the labels are the syncer's own.
            fresh = self.kube.get(PODS, ns, action.pod)
            if fresh is None or not owned(fresh, intent):
                return
            body["metadata"]["resourceVersion"] = meta.metadata(fresh).get("resourceVersion")
            updated = self.kube.patch(PODS, ns, action.pod, body)
        self.pods.upsert(updated)
        self.stats["labelled_pods"] += 1

    def _set_route(self, intent: ServiceIntent, action: SetRoute) -> None:
        routing = intent.routing
        if routing is None:
            return
        ns = intent.namespace
        route = self.routes.get(ns, routing.route)
        if route is None or not owned(route, intent):
            return
        body = {
            "metadata": {"resourceVersion": action.resource_version},
            "spec": {"rules": list(action.rules)},
        }
        self.routes.upsert(self.kube.patch(HTTPROUTES, ns, routing.route, body))
        self.stats["route_writes"] += 1

    def _retire(self, intent: ServiceIntent, generation: str) -> None:
        """Delete what is left of a generation: the objects marked to retire with it."""
        if generation == intent.generation:
            return  # never an object git still declares
        ns = intent.namespace
        for pod in self.pods.by_index(BY_SERVICE, (ns, intent.name)):
            if meta.label(pod, naming.RAY_CLUSTER) == generation and meta.label(
                pod, naming.SERVE_ACTIVE
            ):
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
                self._delete_retiring(resource, ns, obj, generation)
        _LOG.info(
            "retired generation namespace=%s rayservice=%s generation=%s",
            ns,
            intent.name,
            generation,
        )

    def _delete_retiring(self, resource: Resource, ns: str, obj: Manifest, generation: str) -> None:
        if not retires_with(obj, generation):
            return  # pruned by the GitOps tool, or retained by the user
        name = meta.name(obj)
        version = str(meta.metadata(obj).get("resourceVersion") or "") or None
        uid = str(meta.metadata(obj).get("uid") or "") or None
        self.kube.delete(resource, ns, name, resource_version=version, uid=uid)
        for cache in (self.pods, self.configs):
            if cache.resource == resource:
                cache.forget(ns, name)
        self.stats["retired_objects"] += 1

    def emit(self, intent: ServiceIntent, intent_cm: Manifest, event: Event, *, now: float) -> None:
        """Record a Kubernetes Event on the intent ConfigMap (best effort)."""
        metadata = meta.metadata(intent_cm)
        involved: Manifest = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": meta.name(intent_cm),
            **({"uid": metadata["uid"]} if metadata.get("uid") else {}),
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
                now=now,
            ),
        )


def retires_with(obj: Manifest, generation: str) -> bool:
    """Whether retiring `generation` deletes `obj` (a listed object of that generation).

    Only objects the renderer marked `kuberay.io/retire-with: <generation>`. Objects rendered
    before that marker existed carry the prune protection alone: those are deleted too,
    except claims, which may hold a `deletionPolicy: Retain` volume and are left alone.
    """
    annotations = meta.metadata(obj).get("annotations") or {}
    marked = annotations.get(naming.RETIRE_WITH)
    if marked is not None:
        return bool(marked == generation)
    protected = any(annotations.get(k) == v for k, v in naming.PRUNE_PROTECTION.items())
    return protected and obj.get("kind") != "PersistentVolumeClaim"
