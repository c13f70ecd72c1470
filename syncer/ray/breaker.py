"""Circuit breakers for the dashboards: a dead or failing head costs a few requests, not a storm.

`CircuitBreaker` is client-side per URL: after `threshold` consecutive failures it opens
for a backoff (doubling on every failed probe, up to `max_s`), refuses every request while
open with a `CircuitOpenError` (a `TransientError` carrying the seconds left as
`retry_after`), then lets exactly one probe through (half-open): a success closes it, a
failure opens it again for twice as long. `Breakers` keeps one per URL in a bounded LRU,
so a client rebuilt for the same URL finds the breaker's state again, and URLs that come
and go (a new RayJob cluster per run) never grow it without bound. No I/O.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

from syncer.errors import TransientError

DEFAULT_THRESHOLD: Final = 5  # consecutive failures that open the circuit
DEFAULT_BASE_S: Final = 1.0  # first open period
DEFAULT_MAX_S: Final = 30.0  # longest open period
DEFAULT_URLS: Final = 4096  # breakers kept (least recently used dropped first)


class CircuitOpenError(TransientError):
    """The circuit of a dashboard is open: no request was sent."""


class CircuitBreaker:
    """Closed, open for a backoff, then half-open for one probe (see the module docstring)."""

    def __init__(
        self,
        name: str,
        *,
        threshold: int = DEFAULT_THRESHOLD,
        base_s: float = DEFAULT_BASE_S,
        max_s: float = DEFAULT_MAX_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self._threshold = max(1, threshold)
        self._base = max(0.0, base_s)
        self._max = max(self._base, max_s)
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0
        self._backoff = self._base
        self._open_until: float | None = None
        self._probing = False
        self.opened = 0  # times the circuit opened (metrics, tests)
        self.refused = 0  # requests refused while open or during a probe

    @property
    def state(self) -> str:
        """`closed`, `open` or `half-open`."""
        with self._lock:
            if self._open_until is None:
                return "closed"
            return "half-open" if self._clock() >= self._open_until else "open"

    def before(self) -> None:
        """Allow one request now, or raise CircuitOpenError (nothing is sent then)."""
        with self._lock:
            if self._open_until is None:
                return
            left = self._open_until - self._clock()
            if left <= 0 and not self._probing:
                self._probing = True  # this caller is the half-open probe
                return
            self.refused += 1
            wait = left if left > 0 else self._base  # a probe is in flight
        raise CircuitOpenError(
            f"{self.name}: circuit open after {self._failures} consecutive failures; "
            f"next try in {wait:.1f}s",
            retry_after=wait,
        )

    def success(self) -> None:
        """The request got an answer: close the circuit."""
        with self._lock:
            self._failures = 0
            self._backoff = self._base
            self._open_until = None
            self._probing = False

    def failure(self) -> None:
        """The request failed (no answer, or an answer that says the head is down)."""
        with self._lock:
            self._failures += 1
            if self._probing:
                self._probing = False
                self._backoff = min(self._max, max(self._backoff * 2, self._base))
                self._open_until = self._clock() + self._backoff
                self.opened += 1
            elif self._open_until is None and self._failures >= self._threshold:
                self._open_until = self._clock() + self._backoff
                self.opened += 1


class Breakers:
    """One `CircuitBreaker` per URL, the `limit` most recently used kept."""

    def __init__(
        self,
        *,
        limit: int = DEFAULT_URLS,
        threshold: int = DEFAULT_THRESHOLD,
        base_s: float = DEFAULT_BASE_S,
        max_s: float = DEFAULT_MAX_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._limit = max(1, limit)
        self._settings = (threshold, base_s, max_s)
        self._clock = clock
        self._lock = threading.Lock()
        self._breakers: OrderedDict[str, CircuitBreaker] = OrderedDict()

    def get(self, url: str) -> CircuitBreaker:
        """The breaker of `url` (made on first use)."""
        with self._lock:
            breaker = self._breakers.get(url)
            if breaker is None:
                threshold, base_s, max_s = self._settings
                breaker = CircuitBreaker(
                    url, threshold=threshold, base_s=base_s, max_s=max_s, clock=self._clock
                )
                self._breakers[url] = breaker
                while len(self._breakers) > self._limit:
                    self._breakers.popitem(last=False)
            else:
                self._breakers.move_to_end(url)
            return breaker

    def __len__(self) -> int:
        with self._lock:
            return len(self._breakers)
