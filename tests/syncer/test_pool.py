"""The dashboard pool: the budget holds in every 1-s window, and unused clients are dropped."""

from __future__ import annotations

import itertools
from bisect import bisect_left

import pytest

from syncer.ray import pool as pool_module
from syncer.ray.pool import DashboardPool, RateLimiter
from tests.syncer.fakedashboard import FakeDashboard, ManualClock


def _max_in_window(stamps: list[float], window: float = 1.0) -> int:
    """The most stamps in any half-open window [t, t + window) (sliding, not bucketed)."""
    stamps = sorted(stamps)
    return max(
        (bisect_left(stamps, start + window - 1e-9) - i for i, start in enumerate(stamps)),
        default=0,
    )


def _limiter(rate: float, clock: ManualClock, burst_s: float) -> RateLimiter:
    return RateLimiter(rate, clock, burst_s=burst_s, sleep=clock.advance)


def test_the_budget_holds_in_every_one_second_window_even_with_a_burst() -> None:
    clock = ManualClock(0.0)
    limiter = _limiter(200.0, clock, burst_s=1.0)  # a bucket alone would allow 400 in 1 s
    stamps = []
    for _ in range(2_000):
        limiter.acquire()
        stamps.append(clock())
    assert _max_in_window(stamps) == 200
    assert 9.0 <= stamps[-1] <= 10.5  # and it still grants the full rate


def test_late_wakers_do_not_push_a_window_over_the_budget() -> None:
    clock = ManualClock(0.0)

    def late_sleep(seconds: float) -> None:
        clock.advance(seconds + 0.004)  # every sleep overshoots (a busy machine)

    limiter = RateLimiter(100.0, clock, burst_s=0.05, sleep=late_sleep)
    stamps = []
    for index in range(1_000):
        if index % 50 == 0:
            clock.advance(0.3)  # idle gaps refill the bucket
        limiter.acquire()
        stamps.append(clock())
    assert _max_in_window(stamps) <= 100


def test_a_budget_below_one_a_second_spaces_requests() -> None:
    clock = ManualClock(0.0)
    limiter = _limiter(0.5, clock, burst_s=0.05)
    stamps = []
    for _ in range(5):
        limiter.acquire()
        stamps.append(clock())
    assert all(b - a >= 2.0 - 1e-9 for a, b in itertools.pairwise(stamps))


def test_clients_unused_for_long_are_dropped_and_made_again_on_use() -> None:
    clock = ManualClock(0.0)
    made: list[str] = []

    def factory(url: str) -> FakeDashboard:
        made.append(url)
        return FakeDashboard(clock)

    pool = DashboardPool(factory, budget_rps=1e6, clock=clock)
    first = pool.get("http://old-head:8265")
    assert pool.get("http://old-head:8265") is first
    clock.advance(pool_module.CLIENT_IDLE_S + 1)
    for index in range(pool_module._PRUNE_EVERY):
        pool.get(f"http://head-{index % 3}:8265")  # a sweep runs every _PRUNE_EVERY gets
    assert pool.clients() == 3  # the old run's client is gone
    assert pool.get("http://old-head:8265") is not first
    assert made.count("http://old-head:8265") == 2


def test_the_pool_never_keeps_more_clients_than_its_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool_module, "MAX_CLIENTS", 10)
    clock = ManualClock(0.0)
    pool = DashboardPool(lambda url: FakeDashboard(clock), budget_rps=1e6, clock=clock)
    for index in range(25):
        pool.get(f"http://forged-{index}:8265")
    assert pool.clients() == 10
    recent = pool.get("http://forged-24:8265")
    assert pool.get("http://forged-24:8265") is recent


def test_a_poll_takes_a_token_only_when_one_is_free_now() -> None:
    clock = ManualClock(0.0)
    limiter = _limiter(10.0, clock, burst_s=0.5)  # five tokens saved up
    assert [limiter.try_acquire() for _ in range(6)] == [True] * 5 + [False]
    assert clock() == 0.0  # it never waited
    limiter.acquire()  # a request an event started reserves the next token and waits
    assert not limiter.try_acquire()
    clock.advance(0.1)  # refilled one token
    assert limiter.try_acquire()
    # And polls count in the 1-s window: at most the rate in any second.
    granted = 0
    for _ in range(100):
        clock.advance(0.01)
        granted += limiter.try_acquire()
    assert granted <= 10


@pytest.mark.parametrize("keep", [0, 10])
def test_polls_leave_a_share_of_every_second_to_the_passes_events_ask_for(keep: int) -> None:
    clock = ManualClock(0.0)
    limiter = _limiter(100.0, clock, burst_s=0.05)
    polls = []
    for _ in range(10_000):  # polls as fast as they are let through, for 10 s
        clock.advance(0.001)
        if limiter.try_acquire(keep=keep):
            polls.append(clock())
    assert 100 - keep - 2 <= _max_in_window(polls) <= 100 - keep
    waited = limiter.acquire()  # then an ended job's pass asks
    if keep:
        assert waited == 0.0  # its grant was there at once
    else:
        assert waited > 0.0  # the polls had taken every token: it waits behind them


def test_a_deferred_poll_makes_no_request_and_an_event_pass_still_does() -> None:
    clock = ManualClock(0.0)
    dashboard = FakeDashboard(clock)
    pool = DashboardPool(lambda url: dashboard, budget_rps=2.0, max_age_s=0.0, clock=clock)
    pool._limiter = _limiter(2.0, clock, burst_s=pool_module.BUDGET_BURST_S)
    assert pool.poll_facts("http://a") is not None  # the one token there
    assert pool.poll_facts("http://b") is None
    assert (pool.requests["list_jobs"], pool.deferred) == (1, 1)
    assert pool.facts("http://b") is not None  # an event's pass waits for its token
    assert pool.requests["list_jobs"] == 2


def test_an_answer_keeps_what_a_pass_reads_not_each_job_s_entrypoint_and_env() -> None:
    clock = ManualClock(100.0)
    dashboard = FakeDashboard(clock)
    dashboard.submit_job(
        "job-1",
        "python train.py " + "--flag " * 500,  # kilobytes a job, kept for every cluster
        runtime_env={"pip": ["torch"] * 100},
        metadata={"team": "x" * 1000},
    )
    pool = DashboardPool(lambda url: dashboard, budget_rps=100.0, clock=clock)
    facts = pool.facts("http://head:8265")
    full: dict[str, object] = dict(dashboard.list_jobs()[0])
    kept = facts.jobs["job-1"]
    assert set(kept) == set(pool_module.JOB_FACTS) & set(full)
    assert {"status", "start_time", "message"} <= set(kept)
    assert all(kept[k] == full[k] for k in kept)
    assert "entrypoint" not in kept and "runtime_env" not in kept and "metadata" not in kept
