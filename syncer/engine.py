"""The reconcile loop: watch events and timers in, one pass per RayJob out.

Informers keep small caches of the live objects (intent and status ConfigMaps, Pods,
Jobs); their events put job keys on a de-duplicating work queue; worker threads take
keys, observe, call the pure state machine (`rayjob.decide`), carry out its actions
and publish the status ConfigMap. All state lives in the cluster, so a new process
(or a new leader) resumes from the status ConfigMaps. Dashboards are asked only for
clusters with work in flight, with one list call per cluster, under a request budget.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from renderer import naming
from syncer.kube import events
from syncer.rayjob import machine as rayjob
from syncer.rayjob import views
from syncer.ray.dashboard import Dashboard
from syncer.errors import ConflictError, NotFoundError, NotLeaderError, SyncerError
from syncer.kube.informer import Informer
from syncer.rayjob.intent import IntentError, JobIntent, parse_job_intent
from syncer.kube.client import CONFIGMAPS, JOBS, JSON_PATCH, PODS, Kube
from syncer.kube.workqueue import WorkQueue

Manifest = dict[str, Any]
JobKey = tuple[str, str, str]  # (origin kind, namespace, name)
_LOG = logging.getLogger(__name__)

STATUS_KEY: Final = "status.json"
ROLE_STATUS: Final = "status"
SYNCER_MANAGER: Final = "kuberay-syncer"
STATUS_ANNOTATION_PREFIX: Final = "status.kuberay.io/"
_PRUNE_EVERY: Final = 1024  # dashboard answers stored between sweeps of stale ones
# Polls of running jobs use at most this share of the dashboard budget; the rest is kept
# for passes that watch events trigger (a submitter that ended), so those never wait for
# a poll backlog to drain.
POLL_SHARE: Final = 0.5
BUDGET_BURST_S: Final = 0.05  # the dashboard budget's token bucket holds this many seconds
# A pod or Job event waits this long before its pass, so the events of one change (the
# submitter pod ends, then its Job completes) make one pass, one status write and one
# dashboard request rather than two of each.
EVENT_BATCH_S: Final = 0.05


@dataclass(slots=True)
class Options:
    """What the loop needs from the syncer config (see `syncer.config.Config`)."""

    namespaces: Sequence[str | None] = (None,)
    label_selector: str = f"{naming.MANAGED_BY}={naming.MANAGED_BY_VALUE}"
    poll_interval_s: float = 3.0
    idle_resync_s: float = 300.0
    dashboard_budget_rps: float = 200.0
    workers: int = 8
    ttl_mode: str = "stop"
    work_queue_limit: int = 100_000
    settings: rayjob.Settings = field(default_factory=rayjob.Settings)


class RateLimiter:
    """A token bucket: `rate` acquisitions a second, bursts of `burst_s` seconds' worth."""

    def __init__(
        self, rate: float, clock: Callable[[], float] = time.monotonic, *, burst_s: float = 1.0
    ) -> None:
        self._rate = max(rate, 0.001)
        self._clock = clock
        self._capacity = max(1.0, self._rate * burst_s)
        self._tokens = self._capacity
        self._stamp = clock()
        self._lock = threading.Lock()

    def acquire(self) -> float:
        """Take one token, sleeping until there is one; returns the time waited."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self._capacity, self._tokens + (now - self._stamp) * self._rate)
            self._stamp = now
            self._tokens -= 1
            wait = -self._tokens / self._rate if self._tokens < 0 else 0.0
        if wait > 0:
            time.sleep(wait)
        return wait


class DashboardPool:
    """Dashboards by URL; one `list_jobs` answer per cluster is shared for `max_age_s`."""

    def __init__(
        self,
        factory: Callable[[str], Dashboard],
        *,
        budget_rps: float,
        max_age_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._factory = factory
        self._dashboards: dict[str, Dashboard] = {}
        self._facts: dict[str, tuple[float, rayjob.RayFacts]] = {}
        # A small burst, so that no second sees more than about the budget.
        self._limiter = RateLimiter(budget_rps, clock, burst_s=BUDGET_BURST_S)
        self._max_age = max_age_s
        self.max_age_s = max_age_s
        self._clock = clock
        self._lock = threading.Lock()
        self._stores = 0
        self.requests: Counter[str] = Counter()

    def get(self, url: str) -> Dashboard:
        """The dashboard client for a URL (made once)."""
        with self._lock:
            dashboard = self._dashboards.get(url)
            if dashboard is None:
                dashboard = self._dashboards[url] = self._factory(url)
            return dashboard

    def call(self, name: str, url: str, fn: Callable[[Dashboard], Any]) -> Any:
        """Make one budgeted request."""
        self._limiter.acquire()
        with self._lock:
            self.requests[name] += 1
        return fn(self.get(url))

    def now(self) -> float:
        """The pool's clock (what `facts(since=...)` compares with)."""
        return self._clock()

    def facts(
        self, url: str, *, fresh: bool = False, since: float | None = None
    ) -> rayjob.RayFacts:
        """The cluster's job list (shared between the jobs of one cluster).

        A cached answer is reused only while younger than `max_age_s` and, with `since`,
        only if it was asked for at or after that moment (so a watch event is never
        answered with what the dashboard said before it).
        """
        now = self._clock()
        with self._lock:
            cached = self._facts.get(url)
        if (
            cached is not None
            and not fresh
            and now - cached[0] < self._max_age
            and (since is None or cached[0] >= since)
        ):
            return cached[1]
        asked = self._clock()
        try:
            jobs = self.call("list_jobs", url, lambda d: d.list_jobs())
            facts = rayjob.RayFacts(
                reachable=True,
                jobs={str(j.get("submission_id")): dict(j) for j in jobs if j.get("submission_id")},
            )
        except SyncerError as exc:
            facts = rayjob.RayFacts(reachable=False, error=str(exc))
        with self._lock:
            current = self._facts.get(url)
            if current is None or current[0] <= asked:
                self._facts[url] = (asked, facts)
            self._stores += 1
            if self._stores >= _PRUNE_EVERY:
                # Answers older than max_age are never served: drop them so the cache holds
                # only clusters asked recently, not every cluster ever seen.
                self._stores = 0
                horizon = self._clock() - self._max_age
                for key in [k for k, (stamp, _) in self._facts.items() if stamp < horizon]:
                    del self._facts[key]
        return facts

    def forget(self, url: str) -> None:
        """Drop the cached answer of one cluster (after submitting or stopping there)."""
        with self._lock:
            self._facts.pop(url, None)


def slim_configmap(cm: Manifest, *, keep: Iterable[str] | None = None) -> Manifest:
    """An intent or status ConfigMap as cached: identity, labels, annotations and data.

    Drops `managedFields` and other server bookkeeping, which would double what ten
    thousand jobs' maps cost in memory. `keep`: the metadata fields kept.
    """
    meta = cm.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {k: meta[k] for k in (keep or _CONFIGMAP_META) if k in meta},
        "data": cm.get("data") or {},
    }


def slim_status(cm: Manifest) -> Manifest:
    """A status ConfigMap as cached: labels, data and resourceVersion (no uid, no owner).

    The syncer writes the whole map each time and reads back only those.
    """
    return slim_configmap(cm, keep=_STATUS_META)


_CONFIGMAP_META: Final = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "labels",
    "annotations",
    "ownerReferences",
    "deletionTimestamp",
)
_STATUS_META: Final = ("name", "namespace", "resourceVersion", "labels", "deletionTimestamp")
# The labels the syncer reads of a RayJob's submitter Job and its pods: they route events,
# find a Job's pods and mark what the renderer made. The Job controller's and KubeRay's
# labels (two of them UIDs) are not kept; Ray cluster pods keep all theirs.
_SUBMITTER_LABELS: Final = frozenset(
    {naming.MANAGED_BY, naming.ORIGIN_KIND, naming.ORIGIN_NAME, *views.JOB_NAME_LABELS}
)


def _submitter_labels_only(
    project: Callable[[Manifest], Manifest],
) -> Callable[[Manifest], Manifest]:
    """`project`, keeping of a RayJob's submitter objects only the labels the syncer reads."""

    def projected(obj: Manifest) -> Manifest:
        out = project(obj)
        meta = out["metadata"]
        labels = meta.get("labels") or {}
        if labels.get(naming.ORIGIN_KIND) == "RayJob" and naming.RAY_CLUSTER not in labels:
            meta["labels"] = {k: v for k, v in labels.items() if k in _SUBMITTER_LABELS}
        return out

    return projected


project_pod: Final = _submitter_labels_only(views.project_pod)
project_job: Final = _submitter_labels_only(views.project_job)


def _keeping_status(project: Callable[[Manifest], Manifest]) -> Callable[[Manifest], Manifest]:
    """`project`, keeping the syncer's own status annotations (`status.kuberay.io/...`)."""

    def projected(obj: Manifest) -> Manifest:
        kept = {
            key: value
            for key, value in ((obj.get("metadata") or {}).get("annotations") or {}).items()
            if key.startswith(STATUS_ANNOTATION_PREFIX)
        }
        out = project(obj)
        if kept:
            out["metadata"] = {**out["metadata"]}
            out["metadata"]["annotations"] = {**(out["metadata"].get("annotations") or {}), **kept}
        return out

    return projected


def _cluster_of(pod: Manifest) -> list[tuple[str, str]]:
    """The pod's (namespace, Ray cluster), if it has one (index values)."""
    cluster = _label(pod, naming.RAY_CLUSTER)
    return [(_ns(pod), cluster)] if cluster else []


def _job_of(pod: Manifest) -> list[tuple[str, str]]:
    """The pod's (namespace, batch Job name), if it has one (index values)."""
    job = _label(pod, views.JOB_NAME_LABELS[0]) or _label(pod, views.JOB_NAME_LABELS[1])
    return [(_ns(pod), job)] if job else []


def _label(obj: Manifest, key: str) -> str:
    return str(((obj.get("metadata") or {}).get("labels") or {}).get(key) or "")


def _ns(obj: Manifest) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "")


def _name(obj: Manifest) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


class Syncer:
    """The daemon's engine: informers, a work queue, workers, and the RayJob reconciler."""

    def __init__(
        self,
        kube: Kube,
        options: Options,
        *,
        dashboards: Callable[[str], Dashboard],
        is_leader: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kube = kube
        self.options = options
        self.clock = clock
        self.is_leader = is_leader
        self.queue: WorkQueue[JobKey] = WorkQueue(limit=options.work_queue_limit)
        self.dashboards = DashboardPool(dashboards, budget_rps=options.dashboard_budget_rps)
        self.stats: Counter[str] = Counter()
        self.transitions: Counter[tuple[str, str]] = Counter()
        self.states: dict[JobKey, str] = {}
        self.reconcile_seconds: list[float] = []
        self._lock = threading.Lock()
        # How many `states` are Running (kept as they change: the poll spread needs it on
        # every pass, and counting 10,000 states each time would cost more than the pass).
        self._running = 0
        # When each key last had a watch event, on the dashboard pool's clock.
        self._event_at: dict[JobKey, float] = {}
        self._events = 0
        self._jitter = random.Random()
        self._reconcilers: dict[str, Callable[[JobKey], float | None]] = {"RayJob": self.reconcile}
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self.intents: list[Informer] = []
        self.statuses: list[Informer] = []
        self.pods: list[Informer] = []
        self.jobs: list[Informer] = []
        # Caches other reconcilers add (RayService: serve configs, routes, gateways).
        self.extra: list[Informer] = []
        selector = options.label_selector
        for namespace in options.namespaces:
            intents = Informer(
                kube,
                CONFIGMAPS,
                namespace,
                label_selector=f"{selector},{naming.ROLE}={naming.ROLE_INTENT}",
                project=slim_configmap,
            )
            intents.add_index("selects", self._intent_selects)
            intents.add_handler(self._on_intent)
            statuses = Informer(
                kube,
                CONFIGMAPS,
                namespace,
                label_selector=f"{naming.ROLE}={ROLE_STATUS}",
                project=slim_status,
            )
            statuses.add_handler(self._on_status)
            pods = Informer(
                kube,
                PODS,
                namespace,
                label_selector=selector,
                project=_keeping_status(project_pod),
            )
            pods.add_index("cluster", _cluster_of)
            pods.add_index("jobname", _job_of)
            pods.add_handler(self._on_owned)
            jobs = Informer(
                kube,
                JOBS,
                namespace,
                label_selector=selector,
                project=_keeping_status(project_job),
            )
            jobs.add_handler(self._on_owned)
            self.intents.append(intents)
            self.statuses.append(statuses)
            self.pods.append(pods)
            self.jobs.append(jobs)

    # --- event routing ---------------------------------------------------------------------

    @staticmethod
    def _intent_selects(cm: Manifest) -> Iterable[Hashable]:
        try:
            intent = parse_job_intent(cm)
        except IntentError:
            return []
        return [(intent.namespace, intent.cluster_name)] if intent.uses_selector else []

    def register(self, kind: str, reconcile: Callable[[JobKey], float | None]) -> None:
        """Hand keys of another origin kind (e.g. RayService) to `reconcile`."""
        self._reconcilers[kind] = reconcile

    def _enqueue(self, kind: str, namespace: str, name: str, *, batch: bool = False) -> None:
        if name and kind in self._reconcilers:
            key: JobKey = (kind, namespace, name)
            stamp = self.dashboards.now()
            with self._lock:
                self._event_at[key] = stamp
                self._events += 1
                if self._events % _PRUNE_EVERY == 0:
                    # Older than any dashboard answer still reused: no longer needed.
                    horizon = stamp - 2 * self.dashboards.max_age_s
                    for old in [k for k, t in self._event_at.items() if t < horizon]:
                        del self._event_at[old]
            if batch:
                self.queue.add_after(key, EVENT_BATCH_S, urgent=True)
            else:
                self.queue.add(key)

    def event_time(self, key: JobKey) -> float | None:
        """When `key` last had a watch event (the dashboard pool's clock), if ever."""
        with self._lock:
            return self._event_at.get(key)

    def _on_intent(self, event: str, cm: Manifest) -> None:
        self._enqueue(_label(cm, naming.ORIGIN_KIND), _ns(cm), _label(cm, naming.ORIGIN_NAME))

    def _on_status(self, event: str, cm: Manifest) -> None:
        if event == "DELETED":
            self._enqueue(_label(cm, naming.ORIGIN_KIND), _ns(cm), _label(cm, naming.ORIGIN_NAME))

    def _on_owned(self, event: str, obj: Manifest) -> None:
        namespace = _ns(obj)
        origin = _label(obj, naming.ORIGIN_KIND)
        batch = event != "ADDED"  # changes are batched; a new object (or a list) is not
        self._enqueue(origin, namespace, _label(obj, naming.ORIGIN_NAME), batch=batch)
        cluster = _label(obj, naming.RAY_CLUSTER)
        if cluster:
            for informer in self.intents:
                for cm in informer.by_index("selects", (namespace, cluster)):
                    self._enqueue("RayJob", namespace, _label(cm, naming.ORIGIN_NAME), batch=batch)

    # --- lookups ---------------------------------------------------------------------------

    @staticmethod
    def _find(informers: Sequence[Informer], namespace: str, name: str) -> Manifest | None:
        for informer in informers:
            if informer.namespace in (None, namespace):
                found = informer.get(namespace, name)
                if found is not None:
                    return found
        return None

    def _by_index(
        self, informers: Sequence[Informer], index: str, value: Hashable
    ) -> list[Manifest]:
        namespace = value[0] if isinstance(value, tuple) else None
        found: list[Manifest] = []
        for informer in informers:
            if informer.namespace in (None, namespace):
                found.extend(informer.by_index(index, value))
        return found

    def _informer_for(self, informers: Sequence[Informer], namespace: str) -> Informer:
        for informer in informers:
            if informer.namespace in (None, namespace):
                return informer
        raise KeyError(namespace)

    # --- one RayJob ------------------------------------------------------------------------

    def observe(
        self, intent: JobIntent, record: rayjob.Record | None, *, since: float | None = None
    ) -> rayjob.Observation:
        """Collect the state machine's inputs from the caches (and the dashboard if needed).

        `since` (the dashboard pool's clock, normally the job's last watch event): a cached
        dashboard answer asked for before it is not used, so what the event signals (a
        submitter that ended) is matched with what Ray said after it.
        """
        ns = intent.namespace
        sidecar = intent.submitter_container if intent.mode == "SidecarMode" else None
        pods = [
            views.pod_view(p, sidecar=sidecar)
            for p in self._by_index(self.pods, "cluster", (ns, intent.cluster_name))
        ]
        submitter = None
        if intent.submitter_job:
            job = self._find(self.jobs, ns, intent.submitter_job)
            job_pods = [
                p
                for p in self._by_index(self.pods, "jobname", (ns, intent.submitter_job))
                if views.owner_job(p) == intent.submitter_job
            ]
            submitter = views.submitter_view(job, job_pods)
        observation = rayjob.Observation(intent, record, tuple(pods), submitter, None, self.clock())
        ready = rayjob.cluster_counts(observation)[0]
        if rayjob.needs_dashboard(intent, record, ready) and intent.dashboard_url:
            facts = self.dashboards.facts(intent.dashboard_url, since=since)
            observation = rayjob.Observation(
                intent, record, tuple(pods), submitter, facts, observation.now
            )
        return observation

    def reconcile(self, key: JobKey) -> float | None:
        """One pass for one RayJob; returns when to look again (None: on events only)."""
        _, ns, name = key
        intent_cm = self._find(self.intents, ns, naming.intent_configmap_name(name))
        if intent_cm is None:
            with self._lock:
                self._set_state_locked(key, None)
                self._event_at.pop(key, None)
            return None
        try:
            intent = parse_job_intent(intent_cm)
        except IntentError as exc:
            _LOG.error("unreadable intent namespace=%s name=%s error=%s", ns, name, exc)
            return None
        status_cm = self._find(self.statuses, ns, naming.status_configmap_name(name))
        record = self._read_record(status_cm)
        observation = self.observe(intent, record, since=self.event_time(key))
        settings = self.settings()
        decision = rayjob.decide(observation, settings)
        # Events only once the status they announce is published: a pass that fails to publish
        # (a conflict) is repeated, and must not record its Events twice.
        for action in decision.actions:
            if not isinstance(action, rayjob.Event):
                self._act(intent, action)
        if record is None or decision.record != record:
            self._publish(intent, status_cm, decision.record)
        for action in decision.actions:
            if isinstance(action, rayjob.Event):
                self._act(intent, action)
        before = record.job_deployment_status if record is not None else ""
        after = decision.record.job_deployment_status
        with self._lock:
            self._set_state_locked(key, after)
            if before != after:
                self.transitions[(before, after)] += 1
        return self._next_look(decision, settings.poll_interval_s)

    def _set_state_locked(self, key: JobKey, state: str | None) -> None:
        """Set (None: drop) one key's state, keeping the Running count."""
        old = self.states.pop(key, None) if state is None else self.states.get(key)
        if state is not None:
            self.states[key] = state
        self._running += (state == rayjob.RUNNING) - (old == rayjob.RUNNING)

    def poll_interval(self) -> float:
        """Seconds between dashboard polls of one running job.

        The configured interval, or longer when that many jobs polled so often would
        spend more than `POLL_SHARE` of the dashboard budget.
        """
        with self._lock:
            running, seen = self._running, len(self.states)
        # Jobs not looked at yet (just after a start) may be running too; counting them
        # keeps the first passes from polling at full rate while the count builds up.
        running += max(0, sum(len(informer) for informer in self.intents) - seen)
        spread = running / max(self.options.dashboard_budget_rps * POLL_SHARE, 0.001)
        return max(self.options.poll_interval_s, spread)

    def settings(self) -> rayjob.Settings:
        """The state machine's timers for one pass, polling at `poll_interval()`.

        Only the poll changes: deadlines, TTLs and the submitter timeout keep their own
        wake-ups. When the budget stretches the interval, each pass draws it within
        ±20 %, so jobs that started together do not stay in step and poll in bursts.
        """
        interval = self.poll_interval()
        if interval > self.options.poll_interval_s:
            interval *= self._jitter.uniform(0.8, 1.2)
        settings = self.options.settings
        if settings.poll_interval_s != interval:
            settings = dataclasses.replace(settings, poll_interval_s=interval)
        return settings

    @staticmethod
    def _next_look(decision: rayjob.Decision, poll_s: float) -> float | None:
        wake = decision.wake_after
        if wake is None and decision.record.job_deployment_status == rayjob.RUNNING:
            wake = poll_s  # a running job is always polled
        return None if wake is None else max(wake, 0.0)

    @staticmethod
    def _read_record(status_cm: Manifest | None) -> rayjob.Record | None:
        if status_cm is None:
            return None
        text = (status_cm.get("data") or {}).get(STATUS_KEY)
        if not text:
            return None
        try:
            return rayjob.Record.from_json(json.loads(text))
        except (ValueError, TypeError, AttributeError):
            _LOG.error("unreadable status ConfigMap %s; starting over", _name(status_cm))
            return None

    # --- actions ---------------------------------------------------------------------------

    def _act(self, intent: JobIntent, action: rayjob.Action) -> None:
        ns = intent.namespace
        if isinstance(action, rayjob.Ungate):
            for pod_name in action.pods:
                self._ungate(intent, pod_name)
        elif isinstance(action, rayjob.Submit):
            self.dashboards.call(
                "submit_job",
                intent.dashboard_url,
                lambda d: d.submit_job(
                    action.submission_id,
                    intent.entrypoint,
                    runtime_env=intent.runtime_env,
                    metadata=intent.metadata or None,
                    entrypoint_num_cpus=intent.entrypoint_num_cpus or None,
                    entrypoint_num_gpus=intent.entrypoint_num_gpus or None,
                    entrypoint_resources=intent.entrypoint_resources,
                ),
            )
            self.dashboards.forget(intent.dashboard_url)
            self.stats["submissions"] += 1
        elif isinstance(action, rayjob.StopJob):
            url = action.dashboard_url or intent.dashboard_url
            try:
                self.dashboards.call("stop_job", url, lambda d: d.stop_job(action.submission_id))
            except NotFoundError:
                pass
            except SyncerError as exc:
                _LOG.warning("stopping a Ray job failed job=%s error=%s", action.submission_id, exc)
            self.dashboards.forget(url)
        elif isinstance(action, rayjob.Shutdown):
            for pod_name in action.pods:
                self._release_pod(ns, pod_name)
        elif isinstance(action, rayjob.DeleteSubmitter):
            if self.options.ttl_mode == "delete" and intent.submitter_job:
                job = self._find(self.jobs, ns, intent.submitter_job)
                if job is not None and views.is_rendered(job):
                    self.kube.delete(JOBS, ns, intent.submitter_job)
        elif isinstance(action, rayjob.Event):
            self._event(intent, action)

    def _ungate(self, intent: JobIntent, pod_name: str) -> None:
        ns = intent.namespace
        pod = self._find(self.pods, ns, pod_name)
        if pod is None or views.owner_job(pod) != intent.submitter_job:
            return
        gates = (pod.get("spec") or {}).get("schedulingGates") or []
        index = next(
            (i for i, g in enumerate(gates) if g.get("name") == naming.CLUSTER_READY_GATE), None
        )
        if index is None:
            return
        patch = [
            {
                "op": "test",
                "path": "/metadata/resourceVersion",
                "value": pod["metadata"]["resourceVersion"],
            },
            {
                "op": "test",
                "path": f"/spec/schedulingGates/{index}/name",
                "value": naming.CLUSTER_READY_GATE,
            },
            {"op": "remove", "path": f"/spec/schedulingGates/{index}"},
        ]
        try:
            updated = self.kube.patch(PODS, ns, pod_name, patch, content_type=JSON_PATCH)
        except SyncerError as exc:
            if exc.status == 422:  # a failed `test`: the pod changed since it was cached
                raise ConflictError(f"pod {pod_name} changed; ungating again") from exc
            raise
        self._informer_for(self.pods, ns).upsert(updated)
        self.stats["ungated"] += 1

    def _release_pod(self, ns: str, pod_name: str) -> None:
        pod = self._find(self.pods, ns, pod_name)
        if pod is None or not views.is_rendered(pod):
            return  # never touch an object without the renderer's label
        version = str(pod["metadata"].get("resourceVersion") or "")
        if self.options.ttl_mode == "delete":
            self.kube.delete(PODS, ns, pod_name, resource_version=version or None)
            self._informer_for(self.pods, ns).forget(ns, pod_name)
        else:
            body = {
                "metadata": {
                    "resourceVersion": version,
                    "annotations": {naming.SHUTDOWN_REQUESTED: "true"},
                }
            }
            updated = self.kube.patch(PODS, ns, pod_name, body)
            self._informer_for(self.pods, ns).upsert(updated)
        self.stats["released_pods"] += 1

    def _anchor(self, intent: JobIntent) -> tuple[str, str, str] | None:
        """(kind, name, uid) of the object that owns the job's status: submitter Job or head Pod."""
        ns = intent.namespace
        if intent.submitter_job:
            job = self._find(self.jobs, ns, intent.submitter_job)
            if job is not None:
                return ("Job", intent.submitter_job, str(job["metadata"].get("uid") or ""))
        if intent.head_pod:
            pod = self._find(self.pods, ns, intent.head_pod)
            if pod is not None:
                return ("Pod", intent.head_pod, str(pod["metadata"].get("uid") or ""))
        return None

    def _event(self, intent: JobIntent, event: rayjob.Event) -> None:
        anchor = self._anchor(intent)
        kind, name = (
            (anchor[0], anchor[1])
            if anchor
            else ("ConfigMap", naming.intent_configmap_name(intent.name))
        )
        involved: Manifest = {
            "apiVersion": "batch/v1" if kind == "Job" else "v1",
            "kind": kind,
            "name": name,
            **({"uid": anchor[2]} if anchor and anchor[2] else {}),
        }
        events.record(
            self.kube,
            events.build_event(
                origin_kind="RayJob",
                origin_name=intent.name,
                namespace=intent.namespace,
                involved=involved,
                event_type=event.type,
                reason=event.reason,
                message=event.message,
                now=self.clock(),
            ),
        )

    # --- publishing ------------------------------------------------------------------------

    def _publish(self, intent: JobIntent, current: Manifest | None, record: rayjob.Record) -> None:
        ns, name = intent.namespace, naming.status_configmap_name(intent.name)
        status = record.to_status()
        data = {
            STATUS_KEY: json.dumps(record.to_json(), sort_keys=True, separators=(",", ":")),
            "jobDeploymentStatus": record.job_deployment_status,
            "jobStatus": record.job_status,
        }
        anchor = self._anchor(intent)
        meta: Manifest = {
            "name": name,
            "namespace": ns,
            "labels": {
                naming.MANAGED_BY: SYNCER_MANAGER,
                naming.ORIGIN_KIND: "RayJob",
                naming.ORIGIN_NAME: intent.name,
                naming.ROLE: ROLE_STATUS,
            },
        }
        if anchor is not None and anchor[2]:
            meta["ownerReferences"] = [
                {
                    "apiVersion": "batch/v1" if anchor[0] == "Job" else "v1",
                    "kind": anchor[0],
                    "name": anchor[1],
                    "uid": anchor[2],
                }
            ]
        informer = self._informer_for(self.statuses, ns)
        if current is None:
            body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}
            written = self.kube.create(CONFIGMAPS, ns, body)
        else:
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {**meta, "resourceVersion": current["metadata"]["resourceVersion"]},
                "data": data,
            }
            written = self.kube.replace(CONFIGMAPS, ns, body)
        informer.upsert(written)
        self.stats["status_writes"] += 1
        self._annotate_anchor(intent, anchor, status)

    def _annotate_anchor(
        self, intent: JobIntent, anchor: tuple[str, str, str] | None, status: Manifest
    ) -> None:
        if anchor is None:
            return
        wanted = {
            f"{STATUS_ANNOTATION_PREFIX}job-deployment-status": str(
                status.get("jobDeploymentStatus", "")
            ),
            f"{STATUS_ANNOTATION_PREFIX}job-status": str(status.get("jobStatus", "")),
        }
        resource = JOBS if anchor[0] == "Job" else PODS
        informers = self.jobs if anchor[0] == "Job" else self.pods
        obj = self._find(informers, intent.namespace, anchor[1])
        if obj is None or not views.is_rendered(obj):
            return
        # The projections keep these annotations, so a restarted syncer does not write
        # them again to every Job.
        have = (obj.get("metadata") or {}).get("annotations") or {}
        if all(have.get(k) == v for k, v in wanted.items()):
            return
        body = {"metadata": {"annotations": wanted}}
        try:
            patched = self.kube.patch(resource, intent.namespace, anchor[1], body)
        except ConflictError:
            return
        self._informer_for(informers, intent.namespace).upsert(patched)

    # --- running ---------------------------------------------------------------------------

    def snapshot(self) -> tuple[dict[JobKey, str], dict[tuple[str, str], int]]:
        """Copies of the tracked states and transition counts (for metrics)."""
        with self._lock:
            return dict(self.states), dict(self.transitions)

    def informers(self) -> list[Informer]:
        """Every informer, intents last (their events find the other caches filled)."""
        return [*self.statuses, *self.pods, *self.jobs, *self.extra, *self.intents]

    def add_informers(self, informers: Iterable[Informer]) -> None:
        """Caches of another reconciler, started and stopped with the engine's."""
        self.extra.extend(informers)

    def start_informers(self, timeout: float = 60.0) -> bool:
        """Start every informer and wait for the first lists."""
        for informer in self.informers():
            informer.start()
        return all(informer.wait_synced(timeout) for informer in self.informers())

    def enqueue_all(self) -> None:
        """Queue every known RayJob now (start, leadership gained; see `resync`)."""
        for informer in self.intents:
            for cm in informer.items():
                self._on_intent("RESYNC", cm)

    def process_one(self, timeout: float | None = 0.0) -> bool:
        """Take one key and reconcile it; False when there was none."""
        key = self.queue.get(timeout)
        if key is None:
            return False
        started = time.perf_counter()
        try:
            if not self.is_leader():
                return True  # the new leader will look at it
            wake = self._reconcilers[key[0]](key)
            if wake is not None:
                self.queue.add_after(key, wake)
        except NotLeaderError:
            self.stats["not_leader"] += 1
        except ConflictError:
            self.stats["conflicts"] += 1
            self.queue.add_after(key, 0.2)
        except SyncerError as exc:
            self.stats["errors"] += 1
            _LOG.warning("reconcile failed key=%s error=%s", key, exc)
            self.queue.add_after(key, min(30.0, self.options.poll_interval_s))
        except Exception:  # noqa: BLE001 - one bad job must not stop the others
            self.stats["crashes"] += 1
            _LOG.exception("reconcile crashed key=%s", key)
            self.queue.add_after(key, 30.0)
        finally:
            self.queue.done(key)
            elapsed = time.perf_counter() - started
            with self._lock:
                self.reconcile_seconds.append(elapsed)
                if len(self.reconcile_seconds) > 10_000:
                    del self.reconcile_seconds[:5_000]
        return True

    def drain(self, limit: int = 10_000) -> int:
        """Process queued keys until none is due now (tests); returns how many."""
        count = 0
        while count < limit and self.process_one(0.0):
            count += 1
        return count

    def _worker(self) -> None:
        while not self._stop.is_set():
            self.process_one(0.5)

    def resync(self) -> int:
        """The periodic look at every known job, for what a watch could have missed.

        Jobs whose own timer looks at them within a period are skipped; the others are
        spread over a tenth of the period (30 s at most) and queued behind watch events,
        so ten thousand jobs do not ask their dashboards in one burst and hold up every
        event behind them. Returns how many were queued.
        """
        period = self.options.idle_resync_s
        spread = min(period / 10, 30.0)
        queued = 0
        for informer in self.intents:
            for cm in informer.items():
                kind, name = _label(cm, naming.ORIGIN_KIND), _label(cm, naming.ORIGIN_NAME)
                if not name or kind not in self._reconcilers:
                    continue
                key: JobKey = (kind, _ns(cm), name)
                pending = self.queue.pending_timer(key)
                if pending is not None and pending <= period:
                    continue
                self.queue.add_after(key, self._jitter.uniform(0.001, max(spread, 0.001)))
                queued += 1
        return queued

    def _resync(self) -> None:
        while not self._stop.wait(self.options.idle_resync_s):
            self.resync()

    def start(self, stop: threading.Event | None = None) -> bool:
        """Start informers, then (once every cache has its first list) workers and the resync.

        Waits for the caches, in short slices so that `stop` ends the wait at once; returns
        False, with no worker started, when `stop` was set first. Workers never reconcile
        from caches that have not been filled.
        """
        for informer in self.informers():
            informer.start()
        while not all(informer.wait_synced(0.2) for informer in self.informers()):
            if (stop is not None and stop.is_set()) or self._stop.is_set():
                return False
        self.enqueue_all()
        for index in range(self.options.workers):
            thread = threading.Thread(target=self._worker, name=f"worker-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)
        resync = threading.Thread(target=self._resync, name="resync", daemon=True)
        resync.start()
        self._threads.append(resync)
        return True

    def stop(self, timeout: float = 5.0) -> None:
        """Stop workers and informers."""
        self._stop.set()
        self.queue.close()
        for informer in self.informers():
            informer.stop()
        for thread in self._threads:
            thread.join(timeout)

    def run(self, stop: threading.Event) -> None:
        """Run until `stop` is set."""
        if self.start(stop):
            stop.wait()
        self.stop()
