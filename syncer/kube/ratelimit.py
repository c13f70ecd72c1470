"""Retry and write budgets: a token bucket and per-key exponential backoff (review M2).

Modelled on client-go's workqueue rate limiters: `ItemBackoff` is
`ItemExponentialFailureRateLimiter` (the delay doubles with each failure of a key, is
capped, and is forgotten when the key succeeds) with jitter added, and `TokenBucket` is
`BucketRateLimiter` / the rest client's QPS limiter (`qps` tokens a second, at most `burst`
saved up). The engine combines both for failed passes (the larger delay wins), and
`leader.GuardedKube` takes one bucket token per API write. Pure apart from the clock and
`sleep` it is given; thread-safe.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Hashable
from typing import Final

# client-go's DefaultControllerRateLimiter starts at 5 ms; its 1000 s cap is long for a
# syncer whose every key is a running job: five minutes is the longest a key waits.
BASE_DELAY_S: Final = 0.005
MAX_DELAY_S: Final = 300.0
JITTER: Final = 0.2  # each delay is stretched by up to this fraction, so keys do not march


class TokenBucket:
    """`qps` tokens a second, at most `burst` saved up; `reserve` hands out future tokens."""

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"a token bucket needs qps > 0 and burst >= 1, got {qps}, {burst}")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens = float(burst)
        self._at = clock()
        self.waited_s = 0.0  # total time callers of `take` were made to wait

    def reserve(self) -> float:
        """Take the next token, returning how long to wait before using it (0: now)."""
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.qps)
            self._at = now
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def spare(self) -> bool:
        """Take a token only if one is saved up now, without waiting; False: none taken.

        The low class of a two-class budget: `reserve` and `take` hand out future tokens,
        which leaves none saved up while any of their callers waits, so a caller of
        `spare` is served only from what they leave over and never delays them.
        """
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.qps)
            self._at = now
            if self._tokens < 1.0:
                return False
            self._tokens -= 1.0
            return True

    def take(self) -> float:
        """Take a token, sleeping until it is due; returns the seconds slept."""
        delay = self.reserve()
        if delay > 0:
            with self._lock:
                self.waited_s += delay
            self._sleep(delay)
        return delay


class ItemBackoff:
    """Per-key exponential backoff with jitter; `forget` a key when it succeeds."""

    def __init__(
        self,
        base_s: float = BASE_DELAY_S,
        max_s: float = MAX_DELAY_S,
        *,
        jitter: float = JITTER,
        rng: random.Random | None = None,
    ) -> None:
        self.base_s = base_s
        self.max_s = max_s
        self._jitter = jitter
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._failures: dict[Hashable, int] = {}

    def when(self, key: Hashable, *, floor_s: float = 0.0) -> float:
        """Count one more failure of `key`; the delay before its retry.

        `base * 2**(failures-1)`, or `floor_s * 2**(failures-1)` when that is larger (a
        kind of failure that no quick retry fixes), stretched by the jitter, then capped.
        """
        with self._lock:
            failures = self._failures.get(key, 0) + 1
            self._failures[key] = failures
            stretch = 1.0 + self._jitter * self._rng.random()
        exponent = min(failures - 1, 62)
        delay = max(self.base_s, floor_s) * 2.0**exponent * stretch
        return min(self.max_s, delay)

    def failures(self, key: Hashable) -> int:
        """How many times `key` failed since it last succeeded."""
        with self._lock:
            return self._failures.get(key, 0)

    def forget(self, key: Hashable) -> None:
        """`key` succeeded: its next failure starts from the base delay again."""
        with self._lock:
            self._failures.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._failures)


# A pass that failed for a reason no quick retry fixes (403, a squatted name, a crash)
# backs off from this, doubling: 5, 10, 20, 40 s... (a conflict or a 5xx starts at 5 ms).
PERMANENT_FLOOR_S: Final = 5.0


class RetryPolicy:
    """When a key whose pass failed runs again: client-go's controller rate limiter.

    The larger of the key's exponential backoff (from `base_s` for a transient error,
    from `PERMANENT_FLOOR_S` for any other), the overall retry bucket's next token, and
    the server's `Retry-After`. A `Retry-After` or a non-transient failure also *holds*
    the key: no pass before then, whatever watch events arrive (`held_for`).
    """

    def __init__(
        self,
        *,
        base_s: float,
        max_s: float,
        qps: float,
        burst: int,
        clock: Callable[[], float],
        rng: random.Random | None = None,
    ) -> None:
        self.backoff = ItemBackoff(base_s, max_s, rng=rng)
        self.bucket = TokenBucket(qps, burst, clock=clock)
        self.max_s = max_s
        self._clock = clock
        self._lock = threading.Lock()
        self._hold: dict[Hashable, float] = {}

    def failed(self, key: Hashable, error: Exception, *, transient: bool) -> float:
        """Count a failure of `key`; the seconds until its retry (held when it must wait)."""
        delay = self.backoff.when(key, floor_s=0.0 if transient else PERMANENT_FLOOR_S)
        delay = max(delay, self.bucket.reserve())
        retry_after = getattr(error, "retry_after", None)
        if isinstance(retry_after, int | float) and retry_after > 0:
            delay = max(delay, min(float(retry_after), self.max_s))
        if not transient or retry_after:
            with self._lock:
                self._hold[key] = self._clock() + delay
        return delay

    def held_for(self, key: Hashable) -> float:
        """Seconds `key` is still held (0: a pass may run)."""
        with self._lock:
            until = self._hold.get(key)
            if until is None:
                return 0.0
            left = until - self._clock()
            if left <= 0:
                del self._hold[key]
            return left

    def succeeded(self, key: Hashable) -> None:
        """`key` succeeded (or is gone): forget its failures and any hold."""
        self.backoff.forget(key)
        with self._lock:
            self._hold.pop(key, None)
