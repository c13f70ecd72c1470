"""The RayJob reconciler: one pass per RayJob key, run by `syncer.engine.Engine`.

A pass reads the intent and the last published record, observes the cached pods and
submitter Job (and, only when work is in flight, the cluster's dashboard through the
shared pool), calls the pure `machine.decide`, carries out its actions
(`syncer.rayjob.actions`), publishes `<job>-kuberay-status` and writes KubeRay's RayJob
metrics. Polls of running jobs are spread so they use at most `POLL_SHARE` of the
dashboard budget.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from renderer import naming
from syncer import metrics, status
from syncer.engine import Engine, Key
from syncer.errors import DeferredWriteError, IntentError
from syncer.kube import meta
from syncer.kube.cache import Cache
from syncer.kube.client import JOBS, Manifest
from syncer.ray.pool import DashboardPool
from syncer.rayjob import actions, machine, views
from syncer.rayjob.intent import JobIntent, parse_job_intent

_LOG = logging.getLogger(__name__)

KIND: Final = "RayJob"
# Polls of running jobs use at most this share of the dashboard budget; the rest is kept
# for passes that watch events trigger (a submitter that ended), so those never wait for
# a poll backlog to drain.
POLL_SHARE: Final = 0.5
# A finished job's pods whose release found no spare write token: released again after
# 1 s, then 2, 4... up to 30 s while the write budget stays taken.
RELEASE_RETRY_S: Final = 1.0
RELEASE_RETRY_MAX_S: Final = 30.0
# Ray's end is usually seen a moment before the submitter Job's (the kubelet's pod update
# starts the pass, the Job controller's mark comes milliseconds later), and a RayJob with
# a submitter ends only with it (KubeRay). A pass that would publish only Ray's end word
# (Running, jobStatus SUCCEEDED) holds that write for up to SUBMITTER_HOLD_MAX_S, looking
# again every SUBMITTER_HOLD_S: the Job's event then publishes the end in one write, not
# two. KubeRay itself polls every 3 s, so nothing shows later than under it.
SUBMITTER_HOLD_S: Final = 0.5
SUBMITTER_HOLD_MAX_S: Final = 2.0
_RAY_WORDS: Final = ("job_status", "message", "ray_start_time", "ray_end_time")
_SELECTS: Final = "selects"  # intents by the (namespace, cluster) a selector job runs on


@dataclass(frozen=True, slots=True)
class Options:
    """What the RayJob reconciler needs from the syncer config (swapped whole on reload)."""

    poll_interval_s: float = 3.0
    dashboard_budget_rps: float = 200.0
    ttl_mode: str = "stop"
    cluster_domain: str = "cluster.local"
    settings: machine.Settings = field(default_factory=machine.Settings)


class PollDeferred(Exception):  # noqa: N818 - not an error: a look put off
    """A poll found the dashboard budget spoken for; the pass is put off by an interval."""


def _intent_selects(cm: Manifest) -> Iterable[Hashable]:
    # An indexer runs on the informer's thread: it must never raise (H1).
    try:
        intent = parse_job_intent(cm)
    except Exception:  # noqa: BLE001 - a bad object is skipped, the thread lives
        return []
    return [(intent.namespace, intent.cluster_name)] if intent.uses_selector else []


class RayJobReconciler:
    """Reconciles RayJobs: the submitter Job cache, the pod indexes, the pass, the metrics."""

    kind: Final = KIND

    def __init__(
        self, engine: Engine, pool: DashboardPool, pods: Cache, options: Options | None = None
    ) -> None:
        self.engine = engine
        self.options = options or Options()
        self.dashboards = pool
        self.pods = pods
        self.jobs = Cache.watching(
            engine.kube,
            JOBS,
            engine.options.namespaces,
            label_selector=engine.options.label_selector,
            project=views.cached_job,
        )
        self.jobs.add_handler(engine.route_owned)
        self.actions = actions.Actions(
            engine.kube, pool, pods, self.jobs, engine.clock, is_leader=lambda: engine.is_leader()
        )
        self.stats = self.actions.stats
        self.states: dict[Key, str] = {}
        self.transitions: Counter[tuple[str, str]] = Counter()
        # How many `states` are Running (kept as they change: the poll spread needs it on
        # every pass, and counting 10,000 states each time would cost more than the pass).
        self._running = 0
        self._deferrals = _Deferrals()
        self._holds = _Holds()
        self._lock = threading.Lock()
        self._jitter = random.Random()
        pods.add_index("cluster", views.cluster_of)
        pods.add_index("jobname", views.job_of)
        for cache in (pods, self.jobs):
            cache.add_handler(self._on_cluster_object)
        engine.intents.add_index(_SELECTS, _intent_selects)

    def caches(self) -> Sequence[Cache]:
        """The pod cache (shared) and the submitter Job cache."""
        return [self.pods, self.jobs]

    def reconfigure(self, options: Options) -> None:
        """Swap in new options (one reference: safe from the config watcher's thread)."""
        self.options = options

    def _on_cluster_object(self, event: str, obj: Manifest) -> None:
        """A Ray cluster's pod changed: queue the RayJobs that select that cluster."""
        cluster = meta.label(obj, naming.RAY_CLUSTER)
        if not cluster:
            return
        namespace, batch = meta.namespace(obj), event != "ADDED"
        for cm in self.engine.intents.by_index(_SELECTS, (namespace, cluster)):
            self.engine.enqueue(KIND, namespace, meta.label(cm, naming.ORIGIN_NAME), batch=batch)

    # --- one RayJob ------------------------------------------------------------------------

    def observe(
        self,
        intent: JobIntent,
        record: machine.Record | None,
        *,
        since: float | None = None,
        poll: bool = False,
    ) -> machine.Observation:
        """Collect the state machine's inputs from the caches (and the dashboard if needed).

        `since` (the dashboard pool's clock, normally the job's last watch event): a cached
        dashboard answer asked for before it is not used, so what the event signals (a
        submitter that ended) is matched with what Ray said after it. `poll`: a pass its
        timer started; `PollDeferred` when the dashboard budget had no token free for it.
        """
        ns = intent.namespace
        sidecar = intent.submitter_container if intent.mode == "SidecarMode" else None
        pods = tuple(
            views.pod_view(p, sidecar=sidecar)
            for p in self.pods.by_index("cluster", (ns, intent.cluster_name))
        )
        submitter = None
        if intent.submitter_job:
            job = self.jobs.get(ns, intent.submitter_job)
            job_pods = [
                p
                for p in self.pods.by_index("jobname", (ns, intent.submitter_job))
                if views.owner_job(p) == intent.submitter_job
            ]
            submitter = views.submitter_view(job, job_pods)
        now = self.engine.clock()
        observation = machine.Observation(intent, record, pods, submitter, None, now)
        ready = machine.cluster_counts(observation)[0]
        if machine.needs_dashboard(intent, record, ready) and intent.dashboard_url:
            url = intent.dashboard_url
            facts = (
                self.dashboards.poll_facts(url, since=since)
                if poll
                else self.dashboards.facts(url, since=since)
            )
            if facts is None:
                raise PollDeferred(intent.name)
            observation = machine.Observation(intent, record, pods, submitter, facts, now)
        return observation

    def reconcile(self, key: Key) -> float | None:
        """One pass for one RayJob; returns when to look again (None: on events only)."""
        _, ns, name = key
        self.stats["passes"] += 1
        intent_cm = self.engine.intents.get(ns, naming.intent_configmap_name(name))
        if intent_cm is None:
            self._forget(key)
            return None
        try:
            intent = parse_job_intent(intent_cm, cluster_domain=self.options.cluster_domain)
        except IntentError as exc:
            self.engine.reject_intent(KIND, intent_cm, exc)
            return None
        status_cm = self.engine.statuses.get(ns, naming.status_configmap_name(name))
        if status_cm is not None:
            why = status.distrust(
                status_cm,
                origin_kind=KIND,
                origin_name=name,
                owner_uids=self.actions.anchor_uids(intent, intent_cm),
                ledger=self.engine.ledger,
            )
            if why is not None:
                raise status.untrusted(ns, name, why)
        record = status.read_record(status_cm, machine.Record.from_json)
        # A poll (its timer came due, no event) yields the dashboard budget to passes that
        # events started: in a burst of ending jobs each of those needs a fresh answer, and
        # a poll that would wait for a token is put off by a poll interval instead.
        poll = self.engine.queue.timed(key)
        settings = self.settings()
        try:
            observation = self.observe(intent, record, since=self.engine.event_time(key), poll=poll)
        except PollDeferred:
            self.stats["polls_deferred"] += 1
            return settings.poll_interval_s
        decision = machine.decide(observation, settings)
        held = self._holds.hold(key, record, decision, observation.now)
        if held is not None:
            return held
        ttl_mode = self.options.ttl_mode
        # Ray and gate steps first: one that fails leaves the status as it was, and the pass
        # is repeated (each is idempotent). Releasing pods only once the status that records
        # it is published (and owned by an object that outlives them): a pass that fails to
        # publish must not have torn the cluster down under a record that says it still runs.
        # A release that fails after the publish is issued again by the next pass. Events
        # last, so that a repeated pass does not record them twice.
        late = (machine.Shutdown, machine.DeleteSubmitter, machine.Event)
        for action in decision.actions:
            if not isinstance(action, late):
                self.actions.apply(intent, action, ttl_mode=ttl_mode)
        doomed = self.actions.doomed(intent, decision.actions, ttl_mode=ttl_mode)
        anchor = self.actions.anchor(intent, intent_cm=intent_cm, doomed=doomed)
        if record is None or decision.record != record or not _owned_by(status_cm, anchor):
            self._publish(intent, status_cm, decision.record, anchor)
        deferred = False
        for action in decision.actions:
            if isinstance(action, machine.Shutdown | machine.DeleteSubmitter):
                try:
                    self.actions.apply(intent, action, ttl_mode=ttl_mode)
                except DeferredWriteError:  # statuses of other jobs go first; back in a moment
                    deferred = True
                    self.stats["releases_deferred"] += 1
        event = _one_event([a for a in decision.actions if isinstance(a, machine.Event)])
        if event is not None:
            self.actions.apply(intent, event, ttl_mode=ttl_mode, intent_cm=intent_cm)
        self._track(key, intent_cm, record, decision.record, observation.now)
        later = _next_look(decision, settings.poll_interval_s)
        retry = self._deferrals.retry(key, deferred)
        if retry is not None:
            later = retry if later is None else min(later, retry)
        return later

    # --- polling under the dashboard budget ------------------------------------------------

    def poll_interval(self) -> float:
        """Seconds between dashboard polls of one running job.

        The configured interval, or longer when that many jobs polled so often would
        spend more than `POLL_SHARE` of the dashboard budget.
        """
        options = self.options
        with self._lock:
            running, seen = self._running, len(self.states)
        # Jobs not looked at yet (just after a start) may be running too; counting them
        # keeps the first passes from polling at full rate while the count builds up.
        running += max(0, len(self.engine.intents) - seen)
        spread = running / max(options.dashboard_budget_rps * POLL_SHARE, 0.001)
        return max(options.poll_interval_s, spread)

    def settings(self) -> machine.Settings:
        """The state machine's timers for one pass, polling at `poll_interval()`.

        Only the poll changes: deadlines, TTLs and the submitter timeout keep their own
        wake-ups. When the budget stretches the interval, each pass draws it within
        ±20 %, so jobs that started together do not stay in step and poll in bursts.
        """
        options = self.options
        interval = self.poll_interval()
        if interval > options.poll_interval_s:
            interval *= self._jitter.uniform(0.8, 1.2)
        settings = options.settings
        if settings.poll_interval_s != interval:
            settings = dataclasses.replace(settings, poll_interval_s=interval)
        return settings

    # --- publishing ------------------------------------------------------------------------

    def _publish(
        self,
        intent: JobIntent,
        current: Manifest | None,
        record: machine.Record,
        anchor: status.Owner | None,
    ) -> None:
        status.publish(
            self.engine.kube,
            self.engine.statuses,
            origin_kind=KIND,
            origin_name=intent.name,
            namespace=intent.namespace,
            record=record.to_json(),
            fields={
                "jobDeploymentStatus": record.job_deployment_status,
                "jobStatus": record.job_status,
            },
            owner=anchor if anchor is not None and anchor.uid else None,
            current=current,
            ledger=self.engine.ledger,
        )
        self.stats["status_writes"] += 1
        self.actions.annotate_anchor(intent, anchor, record.to_status())

    # --- states and metrics ----------------------------------------------------------------

    def _set_state_locked(self, key: Key, state: str | None) -> None:
        """Set (None: drop) one key's state, keeping the Running count."""
        old = self.states.pop(key, None) if state is None else self.states.get(key)
        if state is None:
            self._deferrals.forget(key)
            self._holds.forget(key)
        else:
            self.states[key] = state
        self._running += (state == machine.RUNNING) - (old == machine.RUNNING)

    def _track(
        self,
        key: Key,
        intent_cm: Manifest,
        before: machine.Record | None,
        after: machine.Record,
        now: float,
    ) -> None:
        """States, transitions and KubeRay's RayJob metrics."""
        _, ns, name = key
        old = before.job_deployment_status if before is not None else ""
        new = after.job_deployment_status
        with self._lock:
            self._set_state_locked(key, new)
            if old != new:
                self.transitions[(old, new)] += 1
        uid = str(meta.metadata(intent_cm).get("uid") or "")
        metrics.JOB_STATES.set(ns, name, uid, new or "New")
        if old == new:
            return
        metrics.TRANSITIONS.labels(ns, KIND, old or "New", new).inc()
        started = before.start_time if before is not None else None
        if started is not None and old not in machine.FINISHED and new in _ENDS_A_RUN:
            # KubeRay observes it when a pass moves the job to Complete, Failed or Retrying.
            seconds = max(0.0, now - started)
            metrics.JOB_EXECUTION_DURATION.labels(
                name=name,
                namespace=ns,
                uid=uid,
                job_deployment_status=new,
                retry_count=str(after.failed),
            ).set(seconds)
            metrics.JOB_EXECUTION_SECONDS.labels(namespace=ns, job_deployment_status=new).observe(
                seconds
            )

    def _forget(self, key: Key) -> None:
        _, ns, name = key
        with self._lock:
            self._set_state_locked(key, None)
        self.engine.forget(key)
        metrics.JOB_STATES.remove(ns, name)
        metrics.JOB_EXECUTION_DURATION.remove_matching(namespace=ns, name=name)

    def snapshot(self) -> tuple[dict[Key, str], dict[tuple[str, str], int]]:
        """Copies of the tracked states and transition counts."""
        with self._lock:
            return dict(self.states), dict(self.transitions)


_ENDS_A_RUN: Final = machine.FINISHED | {machine.RETRYING}


def _owned_by(status_cm: Manifest | None, anchor: status.Owner | None) -> bool:
    """Whether the status map's one owner is `anchor` (True when there is nothing to move)."""
    if status_cm is None or anchor is None or not anchor.uid:
        return True
    owners = meta.metadata(status_cm).get("ownerReferences") or []
    return [str(o.get("uid") or "") for o in owners if isinstance(o, dict)] == [anchor.uid]


def _one_event(pass_events: Sequence[machine.Event]) -> machine.Event | None:
    """The Events of one pass as one: a job that completes and releases its cluster is one.

    KubeRay records one Event there, and it is one write rather than two. The first
    reason names it (the status the pass published comes first); the messages are
    joined; it is a Warning if any of them is.
    """
    if len(pass_events) <= 1:
        return pass_events[0] if pass_events else None
    warning = any(e.type == "Warning" for e in pass_events)
    return machine.Event(
        "Warning" if warning else "Normal",
        pass_events[0].reason,
        "; ".join(e.message for e in pass_events),
    )


def _next_look(decision: machine.Decision, poll_s: float) -> float | None:
    wake = decision.wake_after
    if wake is None and decision.record.job_deployment_status == machine.RUNNING:
        wake = poll_s  # a running job is always polled
    return None if wake is None else max(wake, 0.0)


class _Deferrals:
    """Per key, how many passes in a row found no spare write token to release its pods."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._times: dict[Key, int] = {}

    def forget(self, key: Key) -> None:
        with self._lock:
            self._times.pop(key, None)

    def retry(self, key: Key, deferred: bool) -> float | None:
        """When to release again pods whose release waited for spare write tokens.

        1 s after the first time, doubling for each pass that met no spare token, up to
        30 s: a burst of thousands of ending jobs must not turn into thousands of passes a
        second while the statuses of others still take every token. None: nothing waits.
        """
        with self._lock:
            if not deferred:
                self._times.pop(key, None)
                return None
            times = self._times[key] = self._times.get(key, 0) + 1
        return min(RELEASE_RETRY_S * 2.0 ** (times - 1), RELEASE_RETRY_MAX_S)


class _Holds:
    """Per key, since when a status that says only that Ray ended has been held."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: dict[Key, float] = {}

    def forget(self, key: Key) -> None:
        with self._lock:
            self._since.pop(key, None)

    def hold(
        self, key: Key, before: machine.Record | None, decision: machine.Decision, now: float
    ) -> float | None:
        """Seconds until the pass looks again instead of publishing; None: publish now.

        Held: a record that changes, of a running job, only Ray's words to a terminal
        status (the submitter not finished), with nothing else to do, for at most
        SUBMITTER_HOLD_MAX_S from the first pass that held it.
        """
        after = decision.record
        waits = (
            before is not None
            and not decision.actions
            and before.job_deployment_status == after.job_deployment_status == machine.RUNNING
            and after.job_status in machine.TERMINAL_RAY
            and before.job_status != after.job_status
            and dataclasses.replace(after, **{f: getattr(before, f) for f in _RAY_WORDS}) == before
        )
        with self._lock:
            if not waits:
                self._since.pop(key, None)
                return None
            first = self._since.setdefault(key, now)
            if now - first >= SUBMITTER_HOLD_MAX_S:
                del self._since[key]
                return None
        return SUBMITTER_HOLD_S
