"""A bounded, de-duplicating work queue with delayed adds, shared by the worker threads.

A key is handed to one worker at a time; a key added again while it is being worked on
is processed once more afterwards. Delayed adds (timers for polls, deadlines, TTLs)
keep only the earliest time per key. Keys added now (watch events) are handed out before
keys whose timer came due: with thousands of jobs polled as fast as a budget allows,
due polls are always waiting, and an event must not queue behind all of them.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    """Two FIFOs of distinct keys (added now, then timers due) plus a timer heap.

    `limit` bounds the number of queued keys.
    """

    def __init__(self, limit: int = 100_000, clock: Callable[[], float] = time.monotonic) -> None:
        self._limit = limit
        self._clock = clock
        self._cond = threading.Condition()
        # Keys added now, then keys whose timer came due; a key moved from the second to
        # the first leaves a stale entry behind, skipped when reached.
        self._now: deque[K] = deque()
        self._due_keys: deque[K] = deque()
        self._queued: dict[K, bool] = {}  # queued key -> in the first FIFO
        self._active: set[K] = set()
        self._timed: set[K] = set()  # active keys handed out because their timer came due
        self._again: dict[K, bool] = {}  # added while active -> by `add` (not a timer)
        self._timers: list[tuple[float, int, K]] = []
        self._due: dict[K, float] = {}
        self._urgent_timers: set[K] = set()
        self._counter = 0
        self._closed = False
        self.dropped = 0

    def __len__(self) -> int:
        with self._cond:
            return len(self._queued) + len(self._due)

    def add(self, key: K) -> bool:
        """Queue `key` now; False when the queue is full (the key is dropped)."""
        with self._cond:
            return self._add_locked(key, urgent=True)

    def _add_locked(self, key: K, *, urgent: bool) -> bool:
        if key in self._active:
            self._again[key] = self._again.get(key, False) or urgent
            return True
        queued = self._queued.get(key)
        if queued is not None:
            if urgent and not queued:
                self._queued[key] = True
                self._now.append(key)
            return True
        if len(self._queued) >= self._limit:
            self.dropped += 1
            return False
        self._queued[key] = urgent
        (self._now if urgent else self._due_keys).append(key)
        self._cond.notify()
        return True

    def _pop_locked(self) -> K | None:
        for lane, urgent in ((self._now, True), (self._due_keys, False)):
            while lane:
                key = lane.popleft()
                if self._queued.get(key) is urgent:
                    del self._queued[key]
                    if not urgent:
                        self._timed.add(key)
                    return key
        return None

    def add_after(self, key: K, delay: float, *, urgent: bool = False) -> None:
        """Queue `key` after `delay` seconds (an earlier pending time wins).

        `urgent`: when due, the key goes with the keys added now (a batched watch event),
        not behind other due timers. A delay of zero or less is `add`.
        """
        if delay <= 0:
            self.add(key)
            return
        when = self._clock() + delay
        with self._cond:
            if urgent:
                self._urgent_timers.add(key)
            current = self._due.get(key)
            if current is not None and current <= when:
                return
            self._due[key] = when
            self._counter += 1
            heapq.heappush(self._timers, (when, self._counter, key))
            self._cond.notify()

    def _promote_locked(self) -> float | None:
        now = self._clock()
        while self._timers:
            when, _, key = self._timers[0]
            if self._due.get(key) != when:
                heapq.heappop(self._timers)  # superseded by an earlier time
                continue
            if when > now:
                return when - now
            heapq.heappop(self._timers)
            del self._due[key]
            urgent = key in self._urgent_timers
            self._urgent_timers.discard(key)
            self._add_locked(key, urgent=urgent)
        return None

    def get(self, timeout: float | None = None) -> K | None:
        """The next key, waiting up to `timeout`; None on timeout or when closed."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while True:
                if self._closed:
                    return None
                wait = self._promote_locked()
                key = self._pop_locked()
                if key is not None:
                    self._active.add(key)
                    return key
                if deadline is not None:
                    remaining = deadline - self._clock()
                    if remaining <= 0:
                        return None
                    wait = remaining if wait is None else min(wait, remaining)
                self._cond.wait(wait)

    def done(self, key: K) -> None:
        """Mark `key` processed; re-queue it if it was added meanwhile."""
        with self._cond:
            self._active.discard(key)
            self._timed.discard(key)
            urgent = self._again.pop(key, None)
            if urgent is not None:
                self._add_locked(key, urgent=urgent)

    def close(self) -> None:
        """Wake every waiting worker; `get` returns None from now on."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def timed(self, key: K) -> bool:
        """Whether the active `key` was handed out for its timer (a poll), not an event."""
        with self._cond:
            return key in self._timed

    def ready(self) -> int:
        """How many keys are queued to be handed out now (not counting timers)."""
        with self._cond:
            return len(self._queued)

    def pending_timer(self, key: K) -> float | None:
        """Seconds until `key`'s timer, if one is set."""
        with self._cond:
            when = self._due.get(key)
            return None if when is None else max(0.0, when - self._clock())
