"""The dashboards of every watched cluster behind one request budget.

`DashboardPool` makes one client per URL (kept while it is used, so URLs of finished runs
and forged intents do not pile up: review M6), counts requests by call, and shares one
`list_jobs` answer per cluster among the jobs that run there for a short while. Every
reconciler calls its dashboards through the pool, so the budget holds for all of them, in
every 1-s window (`RateLimiter`).
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from typing import Any, Final

from syncer.errors import SyncerError
from syncer.ray.types import Dashboard, RayFacts

_PRUNE_EVERY: Final = 1024  # dashboard answers stored between sweeps of stale ones
BUDGET_BURST_S: Final = 0.05  # the dashboard budget's token bucket holds this many seconds
# The share of every 1-s window that polls (passes no event asked for) leave to the passes
# events ask for: ten thousand running jobs' polls can fill the budget, and a burst of ended
# jobs would then wait behind them for every grant.
POLL_RESERVE: Final = 0.1
# The window the log checks is this much longer than 1 s: a request leaves a moment after
# its grant (the thread is scheduled again), and that moment must not push a window over.
WINDOW_MARGIN_S: Final = 0.02
CLIENT_IDLE_S: Final = 900.0  # a client unused this long is dropped (made again on use)
# What an answer keeps of each Ray job: what a pass reads (the state machine: status,
# message, times; the rest for logs and tests). Not the entrypoint, runtime_env, metadata
# or driver details, which may be kilobytes a job, held for every cluster asked recently.
JOB_FACTS: Final = (
    "submission_id",
    "job_id",
    "status",
    "message",
    "error_type",
    "start_time",
    "end_time",
    "driver_exit_code",
)
MAX_CLIENTS: Final = 50_000  # and never more than this many (least recently used go first)


class RateLimiter:
    """At most `rate` acquisitions in any 1-s window, paced by a token bucket.

    The bucket (bursts of `burst_s` seconds' worth) spaces requests evenly; a log of the
    last `rate` grant times makes the budget hold in every sliding 1-s window, which a
    bucket alone does not (its burst comes on top of a second's refill, and a thread that
    wakes late from its reservation lands in the next window).
    """

    def __init__(
        self,
        rate: float,
        clock: Callable[[], float] = time.monotonic,
        *,
        burst_s: float = 1.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._rate = max(rate, 0.001)
        self._clock = clock
        self._sleep = sleep
        self._capacity = max(1.0, self._rate * burst_s)
        self._tokens = self._capacity
        self._stamp = clock()
        self._window = max(1, math.floor(self._rate))  # grants allowed per 1-s window
        self._window_s = (1.0 if self._rate >= 1 else 1.0 / self._rate) + WINDOW_MARGIN_S
        self._grants: deque[float] = deque(maxlen=self._window)
        self._lock = threading.Lock()

    def try_acquire(self, *, keep: int = 0) -> bool:
        """Take a token only if one is there now; never waits.

        False when the budget is spoken for, by requests granted or waiting for their turn.
        With `keep`, also when granting would leave fewer than `keep` grants of the current
        1-s window, or no whole token of the bucket (when it holds two), to `acquire`.
        """
        with self._lock:
            now = self._clock()
            tokens = min(self._capacity, self._tokens + (now - self._stamp) * self._rate)
            grants = self._grants
            limit = max(1, self._window - max(keep, 0))
            window_full = len(grants) >= limit and now - grants[-limit] < self._window_s
            spare = 1.0 if keep > 0 and self._capacity >= 2.0 else 0.0
            if tokens < 1.0 + spare or window_full:
                return False
            self._tokens, self._stamp = tokens - 1.0, now
            grants.append(now)
            return True

    def acquire(self) -> float:
        """Take one token, sleeping until there is one; returns the time waited."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self._capacity, self._tokens + (now - self._stamp) * self._rate)
            self._stamp = now
            self._tokens -= 1
            wait = -self._tokens / self._rate if self._tokens < 0 else 0.0
        if wait > 0:
            self._sleep(wait)
        waited = wait
        while True:
            with self._lock:
                now = self._clock()
                grants = self._grants
                if len(grants) < self._window or now - grants[0] >= self._window_s - 1e-9:
                    grants.append(now)
                    return waited
                extra = max(grants[0] + self._window_s - now, 1e-6)
            self._sleep(extra)
            waited += extra


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
        # Clients by URL, least recently used first, with when each was last used.
        self._dashboards: OrderedDict[str, tuple[float, Dashboard]] = OrderedDict()
        self._gets = 0
        self._facts: dict[str, tuple[float, RayFacts]] = {}
        # A small burst, so that no second sees more than about the budget.
        self._limiter = RateLimiter(budget_rps, clock, burst_s=BUDGET_BURST_S)
        self._poll_keep = math.floor(budget_rps * POLL_RESERVE)
        self._max_age = max_age_s
        self.max_age_s = max_age_s
        self._clock = clock
        self._lock = threading.Lock()
        self._stores = 0
        self.requests: Counter[str] = Counter()
        self.deferred = 0  # polls that found no token free and were put off

    def get(self, url: str) -> Dashboard:
        """The dashboard client for a URL (made on first use, dropped when long unused)."""
        now = self._clock()
        with self._lock:
            entry = self._dashboards.pop(url, None)
            dashboard = entry[1] if entry is not None else self._factory(url)
            self._dashboards[url] = (now, dashboard)  # now the most recently used
            self._gets += 1
            if self._gets >= _PRUNE_EVERY or len(self._dashboards) > MAX_CLIENTS:
                self._gets = 0
                self._prune_clients_locked(now)
            return dashboard

    def _prune_clients_locked(self, now: float) -> None:
        clients = self._dashboards
        while clients:
            url, (used, _) = next(iter(clients.items()))
            if len(clients) <= MAX_CLIENTS and now - used < CLIENT_IDLE_S:
                return
            del clients[url]

    def clients(self) -> int:
        """How many dashboard clients are kept."""
        with self._lock:
            return len(self._dashboards)

    def call(self, name: str, url: str, fn: Callable[[Dashboard], Any]) -> Any:
        """Make one budgeted request."""
        self._limiter.acquire()
        return self._call(name, url, fn)

    def _call(self, name: str, url: str, fn: Callable[[Dashboard], Any]) -> Any:
        with self._lock:
            self.requests[name] += 1
        return fn(self.get(url))

    def now(self) -> float:
        """The pool's clock (what `facts(since=...)` compares with)."""
        return self._clock()

    def facts(self, url: str, *, fresh: bool = False, since: float | None = None) -> RayFacts:
        """The cluster's job list (shared between the jobs of one cluster).

        A cached answer is reused only while younger than `max_age_s` and, with `since`,
        only if it was asked for at or after that moment (so a watch event is never
        answered with what the dashboard said before it).
        """
        facts = self._look(url, fresh=fresh, since=since, poll=False)
        assert facts is not None  # only a poll is put off
        return facts

    def poll_facts(self, url: str, *, since: float | None = None) -> RayFacts | None:
        """`facts` for a look no event asked for, which yields to those that did.

        None, and no request, when the budget has no token free right now (a burst of
        ended jobs is waiting for it).
        """
        return self._look(url, fresh=False, since=since, poll=True)

    def _look(self, url: str, *, fresh: bool, since: float | None, poll: bool) -> RayFacts | None:
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
        if poll and not self._limiter.try_acquire(keep=self._poll_keep):
            with self._lock:
                self.deferred += 1
            return None
        asked = self._clock()
        try:
            if poll:
                jobs = self._call("list_jobs", url, lambda d: d.list_jobs())
            else:
                jobs = self.call("list_jobs", url, lambda d: d.list_jobs())
            facts = RayFacts(
                reachable=True,
                jobs={
                    str(j.get("submission_id")): {k: j[k] for k in JOB_FACTS if k in j}
                    for j in jobs
                    if j.get("submission_id")
                },
            )
        except SyncerError as exc:
            facts = RayFacts(reachable=False, error=str(exc))
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
