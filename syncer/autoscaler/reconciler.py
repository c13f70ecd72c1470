"""The autoscaling actuator: one pass per autoscaled Ray cluster, run by `syncer.engine.Engine`.

Keys are `("Autoscaler", namespace, cluster)`, queued by its own caches: the rendered
`<cluster>-autoscaling` ConfigMaps, the `<cluster>-autoscaler-state` ConfigMaps and the
shared pod cache (rendered heads, dynamic workers). A pass:
1. checks the spec (`spec.parse`; refused: one Event, nothing done);
2. finds the live head Pod (none: nothing to do, the workers go with their head by GC);
3. creates the state ConfigMap, owned by the head and seeded, when there is none (a state
   map owned by a head that is no longer alive is deleted first: a new head, a new set);
4. carries out `plan.decide`: creates desired workers by exact name (409: already there),
   deletes the dynamic workers no longer desired, reports dead ones, holds `max`;
5. publishes per-group counts and a `WorkersCreated` condition as an annotation on the
   state map, and Events on the head Pod for failures (quota, admission), dead workers,
   the cap and refused entries.
It never writes a git-declared object: its writes are Pods and the state ConfigMap it made,
and Events. Everything is decided from the cluster, so a restart or a new leader resumes.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Hashable, Iterable, Iterator, Sequence
from typing import Final

from renderer import naming
from syncer import status
from syncer.autoscaler import plan, pods, report, spec
from syncer.engine import Engine, Key
from syncer.errors import (
    ConflictError,
    IntentError,
    NotLeaderError,
    PermanentError,
    SyncerError,
)
from syncer.kube import meta
from syncer.kube.cache import Cache
from syncer.kube.client import CONFIGMAPS, PODS, Manifest

_LOG = logging.getLogger(__name__)

KIND: Final = "Autoscaler"
_CLUSTER_INDEX: Final = "autoscaler.cluster"
CREATES_PER_PASS: Final = 100
LOOK_AGAIN_S: Final = 60.0  # a quiet cluster is looked at this often (what a watch missed)
RETRY_S: Final = 2.0  # after a transient failure or a pass cut short by the per-pass limit


def _cluster_index(obj: Manifest) -> list[Hashable]:
    cluster = meta.label(obj, naming.RAY_CLUSTER)
    return [(meta.namespace(obj), cluster)] if cluster else []


def _slim_spec(cm: Manifest) -> Manifest:
    """An autoscaling ConfigMap as cached: the two keys the actuator reads (no sources)."""
    data = cm.get("data")
    kept = {k: data[k] for k in spec.CACHED_KEYS if isinstance(data, dict) and k in data}
    return status.slim_configmap({**cm, "data": kept})


def _owner_uid(cm: Manifest) -> str:
    refs = meta.metadata(cm).get("ownerReferences") or []
    heads = [r for r in refs if isinstance(r, dict) and r.get("kind") == "Pod"]
    return str(heads[0].get("uid") or "") if heads else ""


def _misnamed(cm: Manifest, expected: str) -> str:
    return (
        f"ConfigMap {meta.name(cm)!r} is not {expected!r}, the autoscaling ConfigMap "
        f"of cluster {meta.label(cm, naming.RAY_CLUSTER)!r}: ignored"
    )


class AutoscalerReconciler:
    """Creates and deletes dynamic worker Pods to match each cluster's desired set."""

    kind: Final = KIND

    def __init__(self, engine: Engine, pod_cache: Cache, *, seed: int | None = None) -> None:
        self.engine = engine
        self.pods = pod_cache
        options = engine.options
        self.specs = Cache.watching(
            engine.kube,
            CONFIGMAPS,
            options.namespaces,
            label_selector=f"{options.label_selector},{naming.ROLE}={spec.ROLE_AUTOSCALING}",
            project=_slim_spec,
        )
        self.states = Cache.watching(
            engine.kube,
            CONFIGMAPS,
            options.namespaces,
            label_selector=(
                f"{naming.ROLE}={spec.ROLE_STATE},{naming.MANAGED_BY}={pods.MANAGED_BY_SYNCER}"
            ),
            project=status.slim_configmap,
        )
        self.pods.add_index(_CLUSTER_INDEX, _cluster_index)
        self.specs.add_index(_CLUSTER_INDEX, _cluster_index)
        self.specs.add_handler(self._on_object)
        self.states.add_handler(self._on_object)
        self.pods.add_handler(self._on_pod)
        engine.key_sources.append((KIND, self.keys))
        self._rng = random.Random() if seed is None else random.Random(seed)
        self._lock = threading.Lock()
        self.reporter = report.Reporter(engine.kube, engine.clock)
        self.stats: dict[str, int] = {}

    def caches(self) -> Sequence[Cache]:
        """The spec and state ConfigMap caches and the (shared) pod cache."""
        return [self.pods, self.states, self.specs]

    def _on_object(self, event: str, obj: Manifest) -> None:
        cluster = meta.label(obj, naming.RAY_CLUSTER)
        if cluster:
            self.engine.enqueue(KIND, meta.namespace(obj), cluster, batch=event != "ADDED")

    def _on_pod(self, event: str, obj: Manifest) -> None:
        cluster, namespace = meta.label(obj, naming.RAY_CLUSTER), meta.namespace(obj)
        if cluster and self.specs.get(namespace, spec.spec_configmap_name(cluster)) is not None:
            self.engine.enqueue(KIND, namespace, cluster, batch=event != "ADDED")

    def keys(self) -> Iterator[tuple[str, str]]:
        """(namespace, cluster) of every autoscaled cluster (`Engine.key_sources`).

        The engine queues them on start, on leadership and on resync, as it does intents'.
        """
        for cm in self.specs.items():
            cluster = meta.label(cm, naming.RAY_CLUSTER)
            if cluster:
                yield meta.namespace(cm), cluster

    def _count(self, stat: str, n: int = 1) -> None:
        with self._lock:
            self.stats[stat] = self.stats.get(stat, 0) + n

    # --- one cluster --------------------------------------------------------------------------

    def reconcile(self, key: Key) -> float | None:
        """One pass for one cluster; seconds until the next look."""
        _, ns, cluster = key
        expected = spec.spec_configmap_name(cluster)
        for other in self.specs.by_index(_CLUSTER_INDEX, (ns, cluster)):
            if meta.name(other) != expected:  # names another cluster's map: refused, once
                self.engine.reject_intent(KIND, other, IntentError(_misnamed(other, expected)))
        cm = self.specs.get(ns, expected)
        if cm is None:
            self.engine.forget(key)
            return None
        try:
            cluster_spec = spec.parse(cm)
        except IntentError as exc:
            self.engine.reject_intent(KIND, cm, exc)
            return None
        found = self.pods.by_index(_CLUSTER_INDEX, (ns, cluster))
        state = self.states.get(ns, spec.state_configmap_name(cluster))
        if state is not None and meta.label(state, naming.RAY_CLUSTER) != cluster:
            state = None  # not this cluster's: never read, never replaced (name is taken)
            self.reporter.report(cluster_spec, None, "StateRefused", "state", "label mismatch")
            return LOOK_AGAIN_S
        head = self._head(found, state)
        if head is None:
            return None  # the head's own events bring the next pass
        if state is not None and _owner_uid(state) != meta.metadata(head).get("uid"):
            self._delete_stale_state(ns, state)
            return RETRY_S
        if state is None:
            state = self._create_state(cluster_spec, head)
            if state is None:
                return RETRY_S
        workers = [
            pods.worker(p)
            for p in found
            if pods.is_dynamic(p) and str(meta.metadata(head)["uid"]) in pods.owner_uids(p)
        ]
        desired, refused = plan.desired_set(state.get("data") or {}, cluster_spec)
        released = any(pods.is_released(p) for p in found)
        decided = plan.decide(
            cluster_spec,
            desired,
            workers,
            head_alive=not released,
            limit=CREATES_PER_PASS,
            refused=refused,
        )
        failures, transient = self._act(cluster_spec, head, decided)
        self._publish(cluster_spec, state, decided, failures)
        return RETRY_S if transient or decided.more else LOOK_AGAIN_S

    @staticmethod
    def _head(found: Iterable[Manifest], state: Manifest | None) -> Manifest | None:
        """The live rendered head: the one owning the state map, else the first by name."""
        heads = sorted(
            (
                p
                for p in found
                if meta.label(p, naming.RAY_NODE_TYPE) == "head"
                and meta.is_rendered(p)
                and pods.is_alive(p)
                and meta.metadata(p).get("uid")
            ),
            key=meta.name,
        )
        owner = _owner_uid(state) if state is not None else ""
        return next((h for h in heads if meta.metadata(h)["uid"] == owner), None) or next(
            iter(heads), None
        )

    def _create_state(self, cluster_spec: spec.ClusterSpec, head: Manifest) -> Manifest | None:
        ns, cluster = cluster_spec.namespace, cluster_spec.cluster
        body: Manifest = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": spec.state_configmap_name(cluster),
                "namespace": ns,
                "labels": {
                    naming.RAY_CLUSTER: cluster,
                    naming.ROLE: spec.ROLE_STATE,
                    naming.MANAGED_BY: pods.MANAGED_BY_SYNCER,
                },
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": meta.name(head),
                        "uid": meta.metadata(head)["uid"],
                    }
                ],
            },
            "data": plan.seed(cluster_spec, self._rng),
        }
        try:
            created = self.engine.kube.create(CONFIGMAPS, ns, body)
        except ConflictError:
            return None  # made by an earlier pass or leader: its watch event comes
        self.states.upsert(created)
        self._count("state_created")
        _LOG.info("autoscaler state created namespace=%s cluster=%s", ns, cluster)
        return status.slim_configmap(created)

    def _delete_stale_state(self, ns: str, state: Manifest) -> None:
        version = str(meta.metadata(state).get("resourceVersion") or "") or None
        try:
            self.engine.kube.delete(CONFIGMAPS, ns, meta.name(state), resource_version=version)
        except ConflictError:
            return
        self.states.forget(ns, meta.name(state))
        self._count("state_replaced")

    # --- acting ------------------------------------------------------------------------------

    def _act(
        self, cluster_spec: spec.ClusterSpec, head: Manifest, decided: plan.Plan
    ) -> tuple[list[str], bool]:
        """Carry out the plan: (permanent failure messages, whether a transient one happened)."""
        ns = cluster_spec.namespace
        head_name, head_uid = meta.name(head), str(meta.metadata(head)["uid"])
        failures: list[str] = []
        transient = False
        for item in decided.create:
            group = cluster_spec.groups[item.group]
            body = pods.build(group, item.name, item.index, ns, head_name, head_uid)
            try:
                self.pods.upsert(self.engine.kube.create(PODS, ns, body))
                self._count("created")
            except ConflictError:
                self._count("create_conflicts")  # already there: create by name is idempotent
            except NotLeaderError:
                raise
            except PermanentError as exc:
                message = f"creating worker {item.name} failed: {exc}"
                failures.append(message)
                self.reporter.report(
                    cluster_spec, head, "FailedCreate", item.name, message, "Warning"
                )
            except SyncerError as exc:
                transient = True
                _LOG.warning("creating worker failed pod=%s error=%s", item.name, exc)
        for name in decided.delete:
            try:
                self.engine.kube.delete(PODS, ns, name)
                self.pods.forget(ns, name)
                self._count("deleted")
            except NotLeaderError:
                raise
            except SyncerError as exc:
                transient = True
                _LOG.warning("deleting worker failed pod=%s error=%s", name, exc)
        for name in decided.dead:
            self.reporter.report(cluster_spec, head, "WorkerDied", name, f"worker {name} has ended")
        for name in decided.capped:
            self.reporter.report(
                cluster_spec,
                head,
                "MaxReplicas",
                name,
                f"worker {name} not created: its group is at maxReplicas",
                "Warning",
            )
        for name in decided.ignored:
            self.reporter.report(
                cluster_spec,
                head,
                "DesiredRefused",
                name,
                f"desired entry {name!r} refused: not a worker name of a known group",
                "Warning",
            )
        return failures, transient

    # --- status ------------------------------------------------------------------------------

    def _publish(
        self,
        cluster_spec: spec.ClusterSpec,
        state: Manifest,
        decided: plan.Plan,
        failures: list[str],
    ) -> None:
        """Counts and the condition as an annotation of the state map, when they changed."""
        annotations = meta.metadata(state).get("annotations") or {}
        current = annotations.get(report.STATUS_ANNOTATION)
        text = report.status_text(decided, failures, current, self.engine.clock())
        if text == current:
            return
        body = {"metadata": {"annotations": {report.STATUS_ANNOTATION: text}}}
        ns, name = cluster_spec.namespace, meta.name(state)
        try:
            self.states.upsert(self.engine.kube.patch(CONFIGMAPS, ns, name, body))
        except NotLeaderError:
            raise
        except SyncerError as exc:
            _LOG.info("autoscaler status not written cluster=%s error=%s", name, exc)
