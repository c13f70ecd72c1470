"""List+watch caches of live objects, one thread per resource and namespace.

An informer lists, then watches from the list's resourceVersion; a dropped stream
resumes from the last version seen (bookmarks included), and `410 Gone` means list
again. A watch that ends within `SHORT_WATCH_S` with no event counts as a failure and
backs off, as client-go's reflector treats a "very short watch" (review L5): a server that
closes every watch at once is not hammered. Objects are cut down by a projection before
they are cached, so thousands of pods stay small in memory. Handlers learn about changes
(a MODIFIED event that changes nothing the projection keeps, such as the echo of a write
this process cached already, or an annotation a projection drops, is not one); they must
not block. What is cached, its keys and its indexes, is the `syncer.kube.store` it extends.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable

from syncer.errors import GoneError, SyncerError
from syncer.kube.client import Kube, Resource
from syncer.kube.compact import compact
from syncer.kube.store import CacheKey, Manifest, Store, version_of

Handler = Callable[[str, Manifest], None]  # (event type, object)
Projection = Callable[[Manifest], Manifest]

_LOG = logging.getLogger(__name__)
SHORT_WATCH_S = 1.0
JITTER_FROM_S = 60  # watch timeouts from this long on are spread over [T, 2T)


def keep_all(obj: Manifest) -> Manifest:
    """The identity projection."""
    return obj


class Informer(Store):
    """A store of one resource in one namespace (or all), kept current by list+watch."""

    def __init__(
        self,
        kube: Kube,
        resource: Resource,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        project: Projection = keep_all,
        handlers: Iterable[Handler] = (),
        backoff: Callable[[int], float] | None = None,
        watch_timeout_s: int = 300,
    ) -> None:
        super().__init__(namespace)
        self.resource = resource
        self._kube = kube
        self._selector = label_selector
        self._project_raw: Projection = lambda obj: compact(project(obj))
        self._handlers = list(handlers)
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._thread: threading.Thread | None = None
        self._backoff = backoff or (lambda failures: min(30.0, 0.5 * 2 ** min(failures, 6)))
        self._watch_timeout = watch_timeout_s
        self._random = random.Random().random  # spreads watch renewals, nothing else
        self.resource_version = ""
        self.relists = 0
        self.crashes = 0  # loop iterations that ended in an unexpected exception
        self.short_watches = 0  # watches that ended at once with no event (L5)
        # Monotonic time of the last list, watch event or watch that ended normally.
        self.progress_at = time.monotonic()

    # --- reading ---------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        """Whether the first list has been loaded."""
        return self._synced.is_set()

    def wait_synced(self, timeout: float | None = None) -> bool:
        """Block until the first list has been loaded."""
        return self._synced.wait(timeout)

    def upsert(self, obj: Manifest) -> None:
        """Put an object this process just wrote, unless the cache already has a newer one."""
        projected = self._project(obj)
        if projected is not None:
            self._upsert_projected(projected)

    def add_handler(self, handler: Handler) -> None:
        """Call `handler(event_type, object)` on every change."""
        self._handlers.append(handler)

    def _project(self, obj: Manifest) -> Manifest | None:
        """The cached form of `obj`; None (logged, counted) when the projection fails."""
        try:
            return self._project_raw(obj)
        except Exception:  # noqa: BLE001 - one bad object must not kill the informer (H1)
            self._skipped += 1
            _LOG.exception("projection failed resource=%s; object skipped", self.resource.plural)
            return None

    @property
    def alive(self) -> bool:
        """Whether the loop thread runs (True before `start`: nothing has died)."""
        return self._thread is None or self._thread.is_alive() or self._stop.is_set()

    def stalled(self, now: float | None = None) -> bool:
        """Whether no list or watch made progress for twice the watch timeout (H2).

        2 T + 30 s is longer than the longest jittered watch (under 2 T), which ends in
        progress even when it delivered nothing.
        """
        now = time.monotonic() if now is None else now
        return now - self.progress_at > 2 * self._watch_timeout + 30

    # --- running ---------------------------------------------------------------------------

    def start(self) -> None:
        """Run the list+watch loop in a daemon thread (once; later calls do nothing)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._thread = threading.Thread(
            target=self.run, name=f"informer-{self.resource.plural}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Ask the loop to end (it ends when the current watch returns)."""
        self._stop.set()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the loop thread."""
        if self._thread is not None:
            self._thread.join(timeout)

    def run(self) -> None:
        """List, then watch and resume until stopped."""
        failures = 0
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    self.relist()
                    need_list = False
                started = time.monotonic()
                seen = self._watch_once()
                self.progress_at = time.monotonic()
                if seen or self.progress_at - started >= SHORT_WATCH_S or self._stop.is_set():
                    failures = 0
                    continue
                failures += 1
                self.short_watches += 1
                delay = self._backoff(failures)
                _LOG.warning(
                    "very short watch resource=%s retry_in=%.1fs", self.resource.plural, delay
                )
                self._stop.wait(delay)
            except GoneError:
                _LOG.info("watch expired, listing again resource=%s", self.resource.plural)
                need_list = True
            except SyncerError as exc:
                failures += 1
                delay = self._backoff(failures)
                _LOG.warning(
                    "list/watch failed resource=%s error=%s retry_in=%.1fs",
                    self.resource.plural,
                    exc,
                    delay,
                )
                self._stop.wait(delay)
            except Exception:  # noqa: BLE001 - a bug or odd input: back off, never die (H2)
                failures += 1
                self.crashes += 1
                need_list = True
                delay = self._backoff(failures)
                _LOG.exception(
                    "informer loop failed resource=%s retry_in=%.1fs", self.resource.plural, delay
                )
                self._stop.wait(delay)

    def _fetch(self) -> tuple[dict[CacheKey, Manifest], str]:
        """Every object, projected, and the list's resourceVersion.

        Each page is projected as it arrives, so no more than one page of full objects
        is held.
        """
        fresh: dict[CacheKey, Manifest] = {}
        version = ""
        for page, page_version in self._kube.list_pages(
            self.resource, self.namespace, label_selector=self._selector
        ):
            version = page_version
            page.reverse()
            while page:  # drop each full object once projected
                item = self._project(page.pop())
                if item is not None and (key := self._key_of(item)) is not None:
                    fresh[key] = item
        return fresh, version

    def relist(self) -> None:
        """Replace the cache with a fresh list, telling handlers what changed."""
        fresh, version = self._fetch()
        with self._lock:
            old = self._replace_locked(fresh)
            self.resource_version = version
        self.relists += 1
        self.progress_at = time.monotonic()
        self._synced.set()
        for key, obj in fresh.items():
            before = old.get(key)
            if before is None:
                self._notify("ADDED", obj)
            elif version_of(before) != version_of(obj) and not same_content(before, obj):
                self._notify("MODIFIED", obj)  # changed while the watch was away
        for key, obj in old.items():
            if key not in fresh:
                self._notify("DELETED", obj)

    def _next_watch_timeout(self) -> int:
        """The next watch's timeout: uniform in [T, 2T) for T >= `JITTER_FROM_S`.

        As client-go's reflector does: a dozen informers (and a restarted replica's) do not
        renew their watches together, and each renews every 1.5 T on average, not every T.
        A short T (tests) is used as it is.
        """
        base = self._watch_timeout
        if base < JITTER_FROM_S:
            return base
        return base + int(self._random() * base)

    def _watch_once(self) -> int:
        """One watch until it ends; how many events (bookmarks included) it delivered."""
        seen = 0
        events = self._kube.watch(
            self.resource,
            self.namespace,
            resource_version=self.resource_version,
            label_selector=self._selector,
            timeout_s=self._next_watch_timeout(),
        )
        for event in events:
            seen += 1
            if self._stop.is_set():
                return seen
            version = str((event.object.get("metadata") or {}).get("resourceVersion") or "")
            if event.type == "BOOKMARK":
                self.resource_version = version or self.resource_version
                continue
            self.progress_at = time.monotonic()
            obj = self._project(event.object)
            if obj is None:
                continue
            key = self._key_of(obj)
            if key is None:
                continue
            with self._lock:
                old = self._cache.get(key)
                self._store_locked(key, None if event.type == "DELETED" else obj)
                if version:
                    self.resource_version = version
            if event.type == "MODIFIED" and old is not None and same_content(old, obj):
                continue  # nothing the projection keeps changed (e.g. our own write's echo)
            self._notify(event.type, obj)
        return seen

    def _notify(self, kind: str, obj: Manifest) -> None:
        for handler in self._handlers:
            try:
                handler(kind, obj)
            except Exception:  # noqa: BLE001 - a handler bug must not kill the informer
                _LOG.exception("informer handler failed resource=%s", self.resource.plural)


def same_content(a: Manifest, b: Manifest) -> bool:
    """Whether two (projected) objects differ in nothing but their resourceVersion."""
    if a.keys() != b.keys():
        return False
    for name, value in a.items():
        other = b[name]
        if name == "metadata" and isinstance(value, dict) and isinstance(other, dict):
            if value.keys() != other.keys():
                return False
            if any(v != other[k] for k, v in value.items() if k != "resourceVersion"):
                return False
        elif value != other:
            return False
    return True
