"""The RayCluster reconciler: KubeRay's RayCluster status and failure recovery, per cluster.

Keys are `("RayCluster", namespace, cluster)` and come from Pods, not intents: every
rendered head Pod (a plain RayCluster's, a RayJob's cluster, a RayService generation)
names one (`ray.io/cluster`). A pass reads that cluster's cached Pods (one index lookup,
never a list call), only those in the key's namespace that carry the cluster's label and
the renderer's managed-by; deletes dead ones (`healing`); computes KubeRay's status
(`status.compute`, the shape from the head Pod's annotation, the head Service from its
cache); and publishes `<cluster>-kuberay-status`, owned by the head Service (`anchor`:
it lives as long as the cluster is in git, so a replaced or recovered head keeps the
history), only when the part KubeRay compares changed and at most once per `debounce_s`
per cluster, so a flapping Pod costs passes, not writes. Each write mirrors the state as
`status.kuberay.io/*` annotations on the head Pod, records an Event per transition and
sets KubeRay's cluster metrics. A status ConfigMap of that name that another kind owns is
left alone (reported once); one that fails the shared trust checks (`anchor.trusted`)
drives nothing and is reported by the engine.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from renderer import naming
from schemas import cluster as contract
from syncer import metrics, status
from syncer.engine import Engine, Key
from syncer.kube import meta
from syncer.kube.cache import Cache
from syncer.kube.client import CONFIGMAPS, PODS, Kube, Manifest
from syncer.kube.timestamps import format_time
from syncer.raycluster import anchor, cleanup, views
from syncer.raycluster import record as cluster_record
from syncer.raycluster import status as cluster_status
from syncer.raycluster.cleanup import RedisCleanup
from syncer.raycluster.healing import Backoff, Healer
from syncer.raycluster.report import Reporter

_LOG = logging.getLogger(__name__)

KIND: Final = "RayCluster"
_PODS_INDEX: Final = "raycluster-pods"
_SERVICES_INDEX: Final = "raycluster-head-services"
_ANN_STATE: Final = f"{status.STATUS_ANNOTATION_PREFIX}cluster-state"
_ANN_WORKERS: Final = f"{status.STATUS_ANNOTATION_PREFIX}cluster-workers"


@dataclass(frozen=True, slots=True)
class Options:
    """The reconciler's timers (KubeRay requeues 2 s after a write, resyncs every 300 s)."""

    debounce_s: float = 2.0
    resync_s: float = 300.0
    recovery: bool = True
    backoff: Backoff = field(default_factory=Backoff)


def cluster_of(obj: Manifest) -> list[tuple[str, str]]:
    """The (namespace, Ray cluster) of a pod (index values)."""
    cluster = meta.label(obj, naming.RAY_CLUSTER)
    return [(meta.namespace(obj), cluster)] if cluster else []


def _member(pod: Manifest, namespace: str, cluster: str) -> bool:
    return (
        meta.label(pod, naming.RAY_NODE_TYPE) in ("head", "worker")
        and meta.namespace(pod) == namespace
        and meta.label(pod, naming.RAY_CLUSTER) == cluster
        and meta.is_rendered(pod)
    )


class RayClusterReconciler:
    """Reconciles Ray clusters: status ConfigMap, annotations, Events, metrics, recovery."""

    kind: Final = KIND

    def __init__(
        self, engine: Engine, pods: Cache, services: Cache, options: Options | None = None
    ) -> None:
        """`pods` and `services` are the daemon's shared caches (`views.cached_service`)."""
        self.engine = engine
        self.pods = pods
        self.options = options or Options()
        self.services = services
        self.services.add_index(_SERVICES_INDEX, views.head_service_of)
        self.anchors = Cache.watching(
            engine.kube,
            CONFIGMAPS,
            engine.options.namespaces,
            label_selector=f"{engine.options.label_selector},"
            f"{naming.ROLE}={contract.ROLE_REDIS_CLEANUP}",
            project=_slim_anchor,
        )
        self.anchors.add_handler(self._on_anchor)
        self.cleanup = RedisCleanup(engine.kube, self.anchors, engine.clock)
        pods.add_index(_PODS_INDEX, cluster_of)
        pods.add_handler(self._on_change)
        self.services.add_handler(self._on_change)
        engine.key_sources.append((KIND, self.keys))
        self.healer = Healer(
            engine.kube,
            pods,
            engine.statuses,
            clock=engine.clock,
            monotonic=engine.monotonic,
            backoff=self.options.backoff,
        )
        self.stats: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._written: dict[Key, float] = {}  # last status write, on engine.monotonic
        self.report = Reporter(engine.kube, clock=engine.clock, monotonic=engine.monotonic)

    def caches(self) -> Sequence[Cache]:
        """The pod and Service caches (shared) and the Redis cleanup anchor cache."""
        return [self.pods, self.services, self.anchors]

    def reconfigure(self, options: Options) -> None:
        """Swap in new options."""
        self.options = options

    def _on_change(self, event: str, obj: Manifest) -> None:
        for namespace, cluster in cluster_of(obj):
            self.engine.enqueue(KIND, namespace, cluster, batch=True)

    def _on_anchor(self, event: str, obj: Manifest) -> None:
        for namespace, cluster in cleanup.anchor_of(obj):
            self.engine.enqueue(KIND, namespace, cluster)

    def keys(self) -> Iterable[tuple[str, str]]:
        """Every cluster with a head Pod, an anchor or a shape on its head Service (cached).

        Queued on start, on leadership and on resync.
        """
        return _cluster_keys(self.pods, self.services, self.anchors)

    # --- one cluster ---------------------------------------------------------------------

    def reconcile(self, key: Key) -> float | None:
        """One pass for one cluster; seconds until the next look (None: on events only)."""
        _, ns, cluster = key
        members = [
            p for p in self.pods.by_index(_PODS_INDEX, (ns, cluster)) if _member(p, ns, cluster)
        ]
        heads = [p for p in members if meta.label(p, naming.RAY_NODE_TYPE) == "head"]
        for head in heads:  # vouch for the anchor's Job while a head Pod lives
            self.cleanup.verify(ns, cluster, head)
        pruned = self.cleanup.pending(ns, cluster)
        cleaning = None
        if pruned is not None:
            in_git = anchor.owner(_head_service(self.services, ns, cluster), None) is not None
            cleaning = self.cleanup.step(pruned, cluster, len(heads), in_git=in_git)
        if not heads:
            if pruned is None:
                return self._headless(key, members)
            return cleaning
        if len(heads) > 1:
            # KubeRay writes nothing then; a template change prunes the old head soon.
            _LOG.info(
                "cluster %s/%s has %d head pods; status not computed", ns, cluster, len(heads)
            )
            return self.options.resync_s
        head = heads[0]
        try:
            shape = views.shape(head, cluster)
        except views.ShapeError as exc:
            self.report.refuse(head, "ClusterShapeRefused", str(exc))
            return None
        service = _head_service(self.services, ns, cluster)
        current = self.engine.statuses.get(ns, naming.status_configmap_name(cluster))
        why = self._distrust(current, cluster, service, head)
        if why is None and current is not None:
            # Owned by the head Service before this pass may delete the head (goal: the
            # status lives as long as the cluster, as KubeRay's on the RayCluster).
            current = anchor.move(
                self.engine.kube,
                self.engine.statuses,
                self.engine.ledger,
                current,
                anchor.owner(service, head),
            )
        error, wake = (None, None)
        if self.options.recovery:
            error, wake = self.healer.heal(ns, cluster, members)
            members = [
                p for p in self.pods.by_index(_PODS_INDEX, (ns, cluster)) if _member(p, ns, cluster)
            ]
            if all(meta.name(p) != meta.name(head) for p in members) and (
                anchor.owner(service, None) is None
            ):
                return wake  # the head owned the status and was deleted: the new head's comes
        if why is not None:
            if current is not None and meta.label(current, naming.ORIGIN_KIND) != KIND:
                self.report.refuse(
                    head,
                    "StatusConfigMapTaken",
                    f"ConfigMap {meta.name(current)} belongs to "
                    f"{meta.label(current, naming.ORIGIN_KIND) or 'another object'}; "
                    "no status written",
                )
                return None
            raise status.untrusted(ns, cluster, why)
        held = self._pass(key, head, service, shape, members, current, error)
        return min(t for t in (wake, held, cleaning, self.options.resync_s) if t is not None)

    def _headless(self, key: Key, members: Sequence[Manifest]) -> float | None:
        """A cluster still in git (its head Service) whose head Pod is gone: publish that.

        The status map outlives the head now, so it must not keep saying the head is ready
        (a `--ttl-mode delete` of a RayJob's cluster, `suspend: true` in git, a head
        between its deletion and its re-creation). The spec comes from the record (its
        desired, min and max workers and resources: `views.shape_of_record`), since the
        shape was on the head; the pass is KubeRay's without a head Pod: HeadPodNotFound,
        no head name. Events go on the head Service.
        """
        _, ns, cluster = key
        service = _head_service(self.services, ns, cluster)
        current = self.engine.statuses.get(ns, naming.status_configmap_name(cluster))
        if service is not None and views.has_shape(service):
            return self._suspended(key, service, members, current)
        stored = status.read_record(current, _document)
        if (
            service is None
            or anchor.owner(service, None) is None
            or current is None
            or not stored
            or self._distrust(current, cluster, service, None) is not None
        ):
            self._forget(key)
            return None
        shape = views.shape_of_record(stored)
        return self._pass(key, service, service, shape, members, current, None)

    def _suspended(
        self,
        key: Key,
        service: Manifest,
        members: Sequence[Manifest],
        current: Manifest | None,
    ) -> float | None:
        """A cluster suspended in git (its head Service has the shape): KubeRay's state."""
        _, ns, cluster = key
        try:
            shape = views.shape(service, cluster)
        except views.ShapeError as exc:
            self.report.refuse(service, "ClusterShapeRefused", str(exc))
            return None
        if anchor.owner(service, None) is None:
            return None  # the Service is going: nothing outlives it to own a status
        why = self._distrust(current, cluster, service, None)
        if why is not None:
            raise status.untrusted(ns, cluster, why)
        return self._pass(key, service, service, shape, members, current, None)

    def _distrust(
        self,
        current: Manifest | None,
        cluster: str,
        service: Manifest | None,
        head: Manifest | None,
    ) -> str | None:
        if current is None:
            return None
        return anchor.trusted(current, cluster, service, head, self.engine.ledger)

    def _pass(
        self,
        key: Key,
        head: Manifest,
        service: Manifest | None,
        shape: views.Shape,
        members: Sequence[Manifest],
        current: Manifest | None,
        error: cluster_status.ReconcileError | None,
    ) -> float | None:
        """Compute and (debounced) publish; seconds until a held-back write is due."""
        _, ns, cluster = key
        stored = status.read_record(current, _document)
        try:
            previous = (
                cluster_record.from_json(stored)
                if stored
                else cluster_record.Record(cluster_status.ClusterStatus())
            )
        except ValueError:
            previous, stored = cluster_record.Record(cluster_status.ClusterStatus()), None
        now = format_time(self.engine.clock()) or ""
        try:
            computed = cluster_status.compute(
                previous.status, shape.spec, [views.pod_view(p) for p in members], now, error
            )
            if shape.spec.suspend is True and not members:
                # KubeRay's next reconcile (its requeue): Suspending with no pod left is
                # Suspended; no event would bring that pass here.
                computed = cluster_status.compute(computed, shape.spec, [], now, error)
        except cluster_status.StatusError as exc:
            _LOG.info("cluster %s/%s status not computed: %s", ns, cluster, exc)
            return None
        service_ip = str(((service or {}).get("spec") or {}).get("clusterIP") or "")
        if service_ip == "None":
            service_ip = computed.head_pod_ip
        new = cluster_record.Record(
            status=computed,
            desired={"cpu": shape.cpu, "memory": shape.memory, "gpu": shape.gpu, "tpu": shape.tpu},
            head_service_name=meta.name(service) if service else "",
            head_service_ip=service_ip,
            endpoints={**previous.endpoints, **views.endpoints(service)},
            last_update_time=now,
        )
        document = cluster_record.to_json(new)
        identity = anchor.owner(service, head)
        uid = identity.uid if identity is not None else ""
        self.report.observe(key, head, uid, new)
        if stored is not None and cluster_record.meaningful(document) == cluster_record.meaningful(
            stored
        ):
            return None
        since = self.engine.monotonic() - self._written.get(key, float("-inf"))
        if since < self.options.debounce_s:
            metrics.CLUSTER_STATUS_WRITES.labels("held").inc()
            self.stats["held"] += 1
            return self.options.debounce_s - since
        self._publish(key, head, identity, current, new, document)
        self.report.announce(key, head, previous.status if stored else None, computed)
        self.report.provisioned(
            key, uid, previous.status if stored else None, computed, views.created_at(members)
        )
        return None

    def _publish(
        self,
        key: Key,
        head: Manifest,
        owner: status.Owner | None,
        current: Manifest | None,
        new: cluster_record.Record,
        document: Manifest,
    ) -> None:
        _, ns, cluster = key
        status.publish(
            self.engine.kube,
            self.engine.statuses,
            origin_kind=KIND,
            origin_name=cluster,
            namespace=ns,
            record=document,
            fields=cluster_record.flat_fields(new),
            owner=owner,
            current=current,
            ledger=self.engine.ledger,
        )
        with self._lock:
            self._written[key] = self.engine.monotonic()
        self.stats["status_writes"] += 1
        metrics.CLUSTER_STATUS_WRITES.labels("written").inc()
        _annotate_head(self.engine.kube, self.pods, ns, head, new.status)

    def _forget(self, key: Key) -> None:
        with self._lock:
            self._written.pop(key, None)
        self.report.forget(key)
        self.engine.forget(key)


def _head_service(services: Cache, ns: str, cluster: str) -> Manifest | None:
    found = [
        s
        for s in services.by_index(_SERVICES_INDEX, (ns, cluster))
        if meta.namespace(s) == ns and meta.is_rendered(s)
    ]
    return views.head_service(found, cluster)


def _cluster_keys(pods: Cache, services: Cache, anchors: Cache) -> list[tuple[str, str]]:
    """(namespace, cluster) of each cached head Pod, Redis anchor and shaped head Service."""
    found = {
        (meta.namespace(p), meta.label(p, naming.RAY_CLUSTER))
        for p in pods.items()
        if meta.label(p, naming.RAY_NODE_TYPE) == "head" and meta.label(p, naming.RAY_CLUSTER)
    }
    found.update(
        key
        for svc in services.items()
        if meta.is_rendered(svc) and views.has_shape(svc)
        for key in views.head_service_of(svc)
    )
    found.update(key for cm in anchors.items() for key in cleanup.anchor_of(cm))
    return sorted(found)


def _annotate_head(
    kube: Kube, pods: Cache, ns: str, head: Manifest, s: cluster_status.ClusterStatus
) -> None:
    """Mirror the state and worker counts on the live head Pod (not one this pass deleted)."""
    live = pods.get(ns, meta.name(head))
    if live is None or meta.metadata(live).get("uid") != meta.metadata(head).get("uid"):
        return
    status.annotate(
        kube,
        pods,
        PODS,
        live,
        {
            _ANN_STATE: s.state or "provisioning",
            _ANN_WORKERS: f"{s.available_worker_replicas}/{s.desired_worker_replicas}",
        },
        guarded=True,
    )


_ANCHOR_META: Final = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "labels",
    "annotations",
    "finalizers",
    "deletionTimestamp",
)


def _slim_anchor(cm: Manifest) -> Manifest:
    return status.slim_configmap(
        cm,
        keep=_ANCHOR_META,
    )


def _document(value: Manifest) -> Manifest:
    if not isinstance(value, dict):
        raise TypeError("not an object")
    return value
