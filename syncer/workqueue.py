"""A bounded, de-duplicating work queue with delayed adds, shared by the worker threads.

A key is handed to one worker at a time; a key added again while it is being worked on
is processed once more afterwards. Delayed adds (timers for polls, deadlines, TTLs)
keep only the earliest time per key.
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
    """FIFO of distinct keys plus a timer heap; `limit` bounds the number of queued keys."""

    def __init__(self, limit: int = 100_000, clock: Callable[[], float] = time.monotonic) -> None:
        self._limit = limit
        self._clock = clock
        self._cond = threading.Condition()
        self._queue: deque[K] = deque()
        self._queued: set[K] = set()
        self._active: set[K] = set()
        self._again: set[K] = set()
        self._timers: list[tuple[float, int, K]] = []
        self._due: dict[K, float] = {}
        self._counter = 0
        self._closed = False
        self.dropped = 0

    def __len__(self) -> int:
        with self._cond:
            return len(self._queued) + len(self._due)

    def add(self, key: K) -> bool:
        """Queue `key` now; False when the queue is full (the key is dropped)."""
        with self._cond:
            return self._add_locked(key)

    def _add_locked(self, key: K) -> bool:
        if key in self._active:
            self._again.add(key)
            return True
        if key in self._queued:
            return True
        if len(self._queued) >= self._limit:
            self.dropped += 1
            return False
        self._queued.add(key)
        self._queue.append(key)
        self._cond.notify()
        return True

    def add_after(self, key: K, delay: float) -> None:
        """Queue `key` after `delay` seconds (an earlier pending time wins)."""
        if delay <= 0:
            self.add(key)
            return
        when = self._clock() + delay
        with self._cond:
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
            self._add_locked(key)
        return None

    def get(self, timeout: float | None = None) -> K | None:
        """The next key, waiting up to `timeout`; None on timeout or when closed."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while True:
                if self._closed:
                    return None
                wait = self._promote_locked()
                if self._queue:
                    key = self._queue.popleft()
                    self._queued.discard(key)
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
            if key in self._again:
                self._again.discard(key)
                self._add_locked(key)

    def close(self) -> None:
        """Wake every waiting worker; `get` returns None from now on."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def pending_timer(self, key: K) -> float | None:
        """Seconds until `key`'s timer, if one is set."""
        with self._cond:
            when = self._due.get(key)
            return None if when is None else max(0.0, when - self._clock())
