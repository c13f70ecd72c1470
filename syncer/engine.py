"""The engine: caches, a work queue, workers and resync, driving the registered reconcilers.

It knows no kind. Every key is `(origin kind, namespace, name)` and comes from an intent
ConfigMap, so the engine owns the intent and status caches; a reconciler adds the caches
of what it reads (`Reconciler.caches`) and turns one key into one pass (`reconcile`).
Watch events queue keys (batched a moment when they change a live object); workers take
one key at a time, only while this replica leads; a failed pass is retried after a per-key
exponential backoff with jitter, bounded overall by a retry bucket (client-go's controller
rate limiter, `syncer.kube.ratelimit`), and a server's `Retry-After` or a squatted status
name holds the key off until then; a periodic resync looks at every key a timer does not
cover. All state lives in the
cluster, so a new process (or a new leader) resumes from the status ConfigMaps.
"""

from __future__ import annotations

import gc
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from renderer import naming
from syncer import metrics, status
from syncer.errors import (
    ConflictError,
    NotLeaderError,
    PermanentError,
    SquattedError,
    SyncerError,
    TransientError,
)
from syncer.kube import events, meta
from syncer.kube.cache import Cache
from syncer.kube.client import CONFIGMAPS, Kube, Manifest
from syncer.kube.informer import Informer
from syncer.kube.ratelimit import BASE_DELAY_S, MAX_DELAY_S, RetryPolicy
from syncer.kube.workqueue import WorkQueue

Key = tuple[str, str, str]  # (origin kind, namespace, name)
# A reconciler whose keys come from no intent (the RayCluster's, from head Pods) appends
# (kind, keys) to `Engine.key_sources`; `keys()` gives (namespace, name) pairs, queued with
# the intents' on start and leadership, and by the resync.
KeySource = tuple[str, Callable[[], Iterable[tuple[str, str]]]]
_LOG = logging.getLogger(__name__)
_NOT_LEADER_RETRY_S: Final = 3.0  # a pass refused by a stale lease looks again after this

# A pod or Job event waits this long before its pass, so the events of one change (the
# submitter pod ends, then its Job completes) make one pass, one status write and one
# dashboard request rather than two of each.
EVENT_BATCH_S: Final = 0.05
_PRUNE_EVERY: Final = 1024  # events between sweeps of stale event times


@dataclass(frozen=True, slots=True)
class Options:
    """What the engine needs from the syncer config (see `syncer.config.Config`)."""

    namespaces: Sequence[str | None] = (None,)
    label_selector: str = f"{naming.MANAGED_BY}={naming.MANAGED_BY_VALUE}"
    idle_resync_s: float = 300.0
    workers: int = 8
    work_queue_limit: int = 100_000
    # Failed passes: per-key backoff from `retry_base_s` doubling up to `retry_max_s`, and
    # at most `retry_qps` retries a second overall (`retry_burst` at once), as client-go's
    # DefaultControllerRateLimiter (5 ms..1000 s, 10 qps / 100): scaled up for thousands
    # of keys, so a storm that failed every key does not take 1,000 s to retry them all.
    retry_base_s: float = BASE_DELAY_S
    retry_max_s: float = MAX_DELAY_S
    retry_qps: float = 50.0
    retry_burst: int = 500


def _retry_policy(options: Options, clock: Callable[[], float], rng: random.Random) -> RetryPolicy:
    return RetryPolicy(
        base_s=options.retry_base_s,
        max_s=options.retry_max_s,
        qps=options.retry_qps,
        burst=options.retry_burst,
        clock=clock,
        rng=rng,
    )


class Reconciler(Protocol):
    """One kind's reconciler, as the engine drives it."""

    @property
    def kind(self) -> str:
        """The origin kind of the keys it takes (`kuberay.io/origin-kind`)."""
        ...

    def caches(self) -> Sequence[Cache]:
        """The caches it reads besides the engine's (started and stopped with them)."""
        ...

    def reconcile(self, key: Key) -> float | None:
        """One pass for one key; seconds until the next look (None: on events only)."""
        ...


class Engine:
    """Caches, work queue, workers and resync for the reconcilers registered with it."""

    def __init__(
        self,
        kube: Kube,
        options: Options,
        *,
        is_leader: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        event_memory_s: float = 1.0,
    ) -> None:
        self.kube = kube
        self.options = options
        self.clock = clock
        self.monotonic = monotonic
        self.is_leader = is_leader
        self.queue: WorkQueue[Key] = WorkQueue(limit=options.work_queue_limit)
        self.stats: Counter[str] = Counter()
        self._event_memory_s = event_memory_s
        self._lock = threading.Lock()
        self._event_at: dict[Key, float] = {}  # last watch event per key, on `monotonic`
        self._events = 0
        self._jitter = random.Random()
        self._reconcilers: dict[str, Reconciler] = {}
        self.key_sources: list[KeySource] = []  # keys from no intent (see `KeySource`)
        self._caches: list[Cache] = []
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self.reports = events.Reporter(kube, clock=clock, is_leader=is_leader)
        self.retry = _retry_policy(options, monotonic, self._jitter)
        self._starting = False  # the first lists queue nothing: `start` queues every key
        selector = options.label_selector
        self.intents = Cache.watching(
            kube,
            CONFIGMAPS,
            options.namespaces,
            label_selector=f"{selector},{naming.ROLE}={naming.ROLE_INTENT}",
            project=status.slim_intent,
        )
        self.intents.add_handler(self._on_intent)
        self.statuses = Cache.watching(
            kube,
            CONFIGMAPS,
            options.namespaces,
            label_selector=status.STATUS_SELECTOR,  # the syncer's own maps only (M1)
            project=status.slim_status,
        )
        self.statuses.add_handler(self._on_status)
        self.ledger = status.Ledger()  # what this process wrote to each status map (M1)

    def healthy(self) -> bool:
        """Whether every informer loop and worker thread lives and no watch has stalled."""
        if self._stop.is_set():
            return True
        threads_ok = all(t.is_alive() for t in self._threads)
        return threads_ok and all(i.alive and not i.stalled() for i in self.informers())

    # --- refused intents -----------------------------------------------------------------

    def reject_intent(self, kind: str, cm: Manifest, error: Exception) -> None:
        """Report an intent the syncer will not act on, once per ConfigMap version.

        One Event on that ConfigMap, in its own namespace, and one count; nothing else
        until the ConfigMap changes.
        """
        self.reports.intent_refused(kind, cm, error)

    # --- set-up ------------------------------------------------------------------------------

    def register(self, reconciler: Reconciler) -> None:
        """Hand the keys of `reconciler.kind` to it, and run its caches with the engine's."""
        self._reconcilers[reconciler.kind] = reconciler
        for cache in reconciler.caches():
            if all(cache is not known for known in self._caches):
                self._caches.append(cache)

    def kinds(self) -> list[str]:
        """The registered origin kinds."""
        return sorted(self._reconcilers)

    def tracked(self) -> Counter[str]:
        """How many intents of each registered kind are cached (the objects tracked)."""
        kinds = (meta.label(cm, naming.ORIGIN_KIND) for cm in self.intents.items())
        return Counter(kind for kind in kinds if kind in self._reconcilers)

    def reconfigure(self, options: Options) -> None:
        """Swap in new options (one reference, read once per use: safe from another thread).

        Only the resync period takes effect; namespaces, selector,
        workers and the queue limit need a restart (`syncer.config.restart_required`).
        """
        self.options = options

    def caches(self) -> list[Cache]:
        """Every cache, intents last (their events find the other caches filled)."""
        return [self.statuses, *self._caches, self.intents]

    def informers(self) -> list[Informer]:
        """Every informer of every cache."""
        return [informer for cache in self.caches() for informer in cache.informers]

    # --- event routing -----------------------------------------------------------------------

    def enqueue(
        self, kind: str, namespace: str, name: str, *, batch: bool = False, force: bool = False
    ) -> None:
        """Queue a key after a watch event (`batch`: a moment later, ahead of timers)."""
        if not name or kind not in self._reconcilers or (self._starting and not force):
            return
        key: Key = (kind, namespace, name)
        stamp = self.monotonic()
        with self._lock:
            self._event_at[key] = stamp
            self._events += 1
            if self._events % _PRUNE_EVERY == 0:
                # Older than any dashboard answer still reused: no longer needed.
                horizon = stamp - self._event_memory_s
                for old in [k for k, t in self._event_at.items() if t < horizon]:
                    del self._event_at[old]
        if batch:
            self.queue.add_after(key, EVENT_BATCH_S, urgent=True)
        else:
            self.queue.add(key)

    def event_time(self, key: Key) -> float | None:
        """When `key` last had a watch event (on `monotonic`), if ever."""
        with self._lock:
            return self._event_at.get(key)

    def forget(self, key: Key) -> None:
        """Drop what the engine remembers of a key whose intent is gone."""
        with self._lock:
            self._event_at.pop(key, None)
        self.retry.succeeded(key)
        self.ledger.drop(key[1], naming.status_configmap_name(key[2]))

    def route_owned(self, event: str, obj: Manifest) -> None:
        """A handler for live objects the renderer made: queue their origin's key.

        A change is batched; a new object (or a list) is not.
        """
        origin = meta.label(obj, naming.ORIGIN_KIND)
        name = meta.label(obj, naming.ORIGIN_NAME)
        self.enqueue(origin, meta.namespace(obj), name, batch=event != "ADDED")

    def _on_intent(self, event: str, cm: Manifest) -> None:
        origin, name = meta.label(cm, naming.ORIGIN_KIND), meta.label(cm, naming.ORIGIN_NAME)
        self.enqueue(origin, meta.namespace(cm), name)

    def _on_status(self, event: str, cm: Manifest) -> None:
        if event == "DELETED":  # a distrusted map removed: no need to wait out its backoff
            kind, name = meta.label(cm, naming.ORIGIN_KIND), meta.label(cm, naming.ORIGIN_NAME)
            self.retry.succeeded((kind, meta.namespace(cm), name))
            self._on_intent(event, cm)

    # --- one key -------------------------------------------------------------------------------

    def process_one(self, timeout: float | None = 0.0) -> bool:
        """Take one key and reconcile it; False when there was none."""
        key = self.queue.get(timeout)
        if key is None:
            return False
        kind = key[0]
        started = time.perf_counter()
        try:
            if not self.is_leader():
                return True  # the new leader will look at it
            held = self.retry.held_for(key)
            if held > 0:
                self.queue.add_after(key, held)
                return True
            wake = self._reconcilers[kind].reconcile(key)
            self.retry.succeeded(key)
            if wake is not None:
                self.queue.add_after(key, wake)
        except NotLeaderError:  # a lease gone stale mid-pass: a leader again looks soon
            self.stats["not_leader"] += 1
            self.queue.add_after(key, _NOT_LEADER_RETRY_S)
        except ConflictError as exc:
            self._failed(kind, "conflicts", "conflict")
            self._retry(key, exc)
        except SquattedError as exc:
            self._failed(kind, "squatted", "squatted")
            intent = self.intents.get(key[1], naming.intent_configmap_name(key[2]))
            self.reports.status_squatted(*key, intent, exc)
            self._retry(key, exc)
        except SyncerError as exc:
            self._failed(
                kind, "errors", "permanent" if isinstance(exc, PermanentError) else "transient"
            )
            _LOG.warning("reconcile failed key=%s error=%s", key, exc)
            self._retry(key, exc)
        except Exception as exc:  # noqa: BLE001 - one bad key must not stop the others
            self._failed(kind, "crashes", "crash")
            _LOG.exception("reconcile crashed key=%s", key)
            self._retry(key, exc)
        finally:
            self.queue.done(key)
            metrics.RECONCILE_SECONDS.labels(kind=kind).observe(time.perf_counter() - started)
        return True

    def _retry(self, key: Key, error: Exception) -> None:
        transient = isinstance(error, TransientError)
        self.queue.add_after(key, self.retry.failed(key, error, transient=transient))

    def _failed(self, kind: str, stat: str, error: str) -> None:
        self.stats[stat] += 1
        metrics.RECONCILE_ERRORS.labels(kind=kind, error=error).inc()

    def drain(self, limit: int = 10_000) -> int:
        """Process queued keys until none is due now (tests); returns how many."""
        count = 0
        while count < limit and self.process_one(0.0):
            count += 1
        return count

    # --- running -------------------------------------------------------------------------------

    def enqueue_all(self) -> None:
        """Queue every known key now (start, leadership gained; see `resync`).

        Forgets what this process wrote (another replica may have written since); the oldest
        in flight first: ten thousand jobs wait for the dashboard budget after a restart.
        """
        self.ledger.clear()
        for kind, namespace, name in known_keys(self, oldest_first=True):
            self.enqueue(kind, namespace, name, force=True)

    def resync(self) -> int:
        """The periodic look at every known key (see `resync_keys`); how many were queued."""
        return resync_keys(self, self.options.idle_resync_s, self._jitter)

    def _resync(self) -> None:
        while not self._stop.wait(self.options.idle_resync_s):
            self.resync()

    def _worker(self) -> None:
        while not self._stop.is_set():
            self.process_one(0.5)

    def start_informers(self, timeout: float = 60.0) -> bool:
        """Start every informer and wait for the first lists (tests that drive passes)."""
        for informer in self.informers():
            informer.start()
        return all(informer.wait_synced(timeout) for informer in self.informers())

    def start(self, stop: threading.Event | None = None) -> bool:
        """Start informers, then (once every cache has its first list) workers and the resync.

        Waits for the caches, in short slices so that `stop` ends the wait at once; returns
        False, with no worker started, when `stop` was set first. Workers never reconcile
        from caches that have not been filled.
        """
        self._starting = True
        try:
            for informer in self.informers():
                informer.start()
            while not all(informer.wait_synced(0.2) for informer in self.informers()):
                if (stop is not None and stop.is_set()) or self._stop.is_set():
                    return False
            self.enqueue_all()  # before the handlers hear of the listed objects (list order)
        finally:
            self._starting = False
        self.enqueue_all()  # an intent that arrived during the first: queued keys stay put
        gc.freeze()  # cached JSON has no cycles: full collections need not walk it
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


def _status_version(statuses: Cache, intent: Manifest) -> int:
    """The resourceVersion of an intent's status ConfigMap (0: none yet)."""
    name = meta.label(intent, naming.ORIGIN_NAME)
    found = statuses.get(meta.namespace(intent), naming.status_configmap_name(name))
    version = str(meta.metadata(found).get("resourceVersion") or "") if found else ""
    return int(version) if version.isdigit() else 0


def known_keys(engine: Engine, *, oldest_first: bool = False) -> Iterator[Key]:
    """Every key the engine knows: one per intent, then those of `engine.key_sources`.

    `oldest_first`: intents by their status ConfigMap's resourceVersion (none yet: first).
    """
    intents = engine.intents.items()
    if oldest_first:
        intents = sorted(intents, key=lambda cm: _status_version(engine.statuses, cm))
    for cm in intents:
        kind, name = meta.label(cm, naming.ORIGIN_KIND), meta.label(cm, naming.ORIGIN_NAME)
        yield (kind, meta.namespace(cm), name)
    for kind, keys in engine.key_sources:
        for namespace, name in keys():
            yield (kind, namespace, name)


def resync_keys(engine: Engine, period: float, jitter: random.Random) -> int:
    """Queue every known key a watch could have missed; returns how many were queued.

    Keys whose own timer looks at them within a period are skipped; the others are
    spread over a tenth of the period (30 s at most) and queued behind watch events,
    so ten thousand jobs do not ask their dashboards in one burst and hold up every
    event behind them.
    """
    spread = min(period / 10, 30.0)
    queued = 0
    kinds = set(engine.kinds())
    for key in known_keys(engine):
        kind, _, name = key
        if not name or kind not in kinds:
            continue
        pending = engine.queue.pending_timer(key)
        if pending is not None and pending <= period:
            continue
        engine.queue.add_after(key, jitter.uniform(0.001, max(spread, 0.001)))
        queued += 1
    return queued
