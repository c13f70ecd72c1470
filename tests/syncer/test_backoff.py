"""Retry budgets and write guards in isolation (issue 8, review M2, M4, M5, L3, L4, L5).

The token bucket and the per-key backoff on a hand-driven clock; the engine's retry policy
with a reconciler that fails on demand; `Retry-After` through the real `KubeClient`
against the fake API server; the lease's freshness timed from the start of a renewal;
short watches; hostile times; the config fields a reload applies.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from renderer import naming
from syncer import config as config_module
from syncer import engine as engine_module
from syncer.cli import Options, reloaded_options
from syncer.config import APPLIED_FIELDS, RESTART_FIELDS, UNUSED_FIELDS, Config, parse_config
from syncer.errors import (
    ConflictError,
    IntentError,
    NotLeaderError,
    PermanentError,
    SquattedError,
    TransientError,
)
from syncer.kube.cache import Cache
from syncer.kube.client import CONFIGMAPS, EVENTS, KubeClient, Manifest, WatchEvent
from syncer.kube.forwarding import ForwardingKube
from syncer.kube.informer import Informer
from syncer.kube.leader import GuardedKube, LeaderElector
from syncer.kube.ratelimit import ItemBackoff, TokenBucket
from syncer.kube.timestamps import format_time
from syncer.kube.workqueue import WorkQueue
from syncer.rayjob import machine
from syncer.rayjob.intent import parse_job_intent
from tests.fakeapi.fixtures import KubeApi
from tests.syncer.harness import render
from tests.syncer.test_rayjob_reconciler import demo_job


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


# --- the token bucket and the per-key backoff ---------------------------------------------


def test_a_bucket_gives_its_burst_at_once_then_one_token_per_interval() -> None:
    clock = Clock()
    bucket = TokenBucket(10.0, 3, clock=clock, sleep=clock.sleep)
    assert [bucket.take() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take() == pytest.approx(0.1)
    assert bucket.take() == pytest.approx(0.1)
    clock.now += 10.0  # idle: refills up to the burst, no further
    assert [bucket.reserve() for _ in range(4)] == [0.0, 0.0, 0.0, pytest.approx(0.1)]


def test_a_bucket_refuses_a_rate_of_zero() -> None:
    with pytest.raises(ValueError, match="qps > 0"):
        TokenBucket(0.0, 1)


def test_per_key_backoff_doubles_with_jitter_is_capped_and_forgotten_on_success() -> None:
    backoff = ItemBackoff(0.005, 1.0, jitter=0.2)
    delays = [backoff.when("a") for _ in range(12)]
    for index, delay in enumerate(delays[:8]):
        assert 0.005 * 2**index <= delay <= 0.005 * 2**index * 1.2
    assert delays[-1] == 1.0  # capped
    assert backoff.when("b") <= 0.006  # another key starts from the base
    backoff.forget("a")
    assert backoff.when("a") <= 0.006
    assert backoff.when("c", floor_s=5.0) >= 1.0  # a floor above the cap: the cap


# --- the engine's retry policy --------------------------------------------------------------


class Failing:
    """A reconciler whose passes raise the queued errors, then succeed."""

    kind = "RayJob"

    def __init__(self) -> None:
        self.errors: list[Exception] = []
        self.passes = 0

    def caches(self) -> Sequence[Cache]:
        return []

    def reconcile(self, key: engine_module.Key) -> float | None:
        self.passes += 1
        if self.errors:
            raise self.errors.pop(0)
        return None


class Recording(ForwardingKube):
    """Records the bodies of writes; reads go nowhere (the engine's caches are not started)."""

    def __init__(self) -> None:
        super().__init__(None)  # type: ignore[arg-type]  # no call is forwarded
        self.created: list[Manifest] = []

    def create(self, resource: Any, namespace: str | None, body: Manifest) -> Manifest:
        self.created.append(body)
        return body


@pytest.fixture
def failing() -> tuple[engine_module.Engine, Failing, Recording, Clock]:
    clock = Clock()
    kube = Recording()
    engine = engine_module.Engine(kube, engine_module.Options(), monotonic=clock)
    engine.queue = WorkQueue(clock=clock)
    reconciler = Failing()
    engine.register(reconciler)
    return engine, reconciler, kube, clock


KEY: engine_module.Key = ("RayJob", "ns", "job")


def _delay(engine: engine_module.Engine) -> float:
    pending = engine.queue.pending_timer(KEY)
    assert pending is not None
    return pending


def test_failed_passes_back_off_exponentially_and_success_forgets(
    failing: tuple[engine_module.Engine, Failing, Recording, Clock],
) -> None:
    engine, reconciler, _, clock = failing
    reconciler.errors = [TransientError("503") for _ in range(6)]
    engine.enqueue(*KEY)
    delays = []
    for _ in range(6):
        assert engine.process_one(0.0)
        delays.append(_delay(engine))
        clock.now += delays[-1]
    assert all(b > a for a, b in itertools.pairwise(delays))
    assert delays[0] < 0.01 and delays[-1] > 0.1
    assert engine.process_one(0.0)  # the seventh pass succeeds
    assert engine.retry.backoff.failures(KEY) == 0


def test_a_retry_after_holds_the_key_against_watch_events(
    failing: tuple[engine_module.Engine, Failing, Recording, Clock],
) -> None:
    engine, reconciler, _, clock = failing
    reconciler.errors = [TransientError("429", status=429, retry_after=7.0)]
    engine.enqueue(*KEY)
    engine.process_one(0.0)
    assert _delay(engine) >= 7.0
    engine.enqueue(*KEY)  # a watch event: does not cut the hold short
    engine.process_one(0.0)
    assert reconciler.passes == 1
    clock.now += 7.5
    engine.drain()
    assert reconciler.passes == 2


def test_a_conflict_is_retried_soon_and_events_may_retry_it_sooner(
    failing: tuple[engine_module.Engine, Failing, Recording, Clock],
) -> None:
    engine, reconciler, _, _ = failing
    reconciler.errors = [ConflictError("409")]
    engine.enqueue(*KEY)
    engine.process_one(0.0)
    assert _delay(engine) < 0.01
    engine.enqueue(*KEY)
    engine.process_one(0.0)
    assert reconciler.passes == 2


def test_a_squatted_status_is_reported_once_and_held_for_seconds(
    failing: tuple[engine_module.Engine, Failing, Recording, Clock],
) -> None:
    engine, reconciler, kube, clock = failing
    reconciler.errors = [SquattedError("taken by a stranger") for _ in range(3)]
    engine.enqueue(*KEY)
    engine.process_one(0.0)
    delays = []
    for passes in (1, 2, 3):
        assert reconciler.passes == passes
        delays.append(_delay(engine))
        engine.enqueue(*KEY)  # events meanwhile run no pass
        engine.process_one(0.0)
        assert reconciler.passes == passes
        clock.now += delays[-1] + 0.01
        engine.drain()
    assert reconciler.passes == 4  # the fourth pass found the name free
    assert delays[0] >= 5.0 and delays[1] >= 10.0 and delays[2] >= 20.0
    reasons = [e["reason"] for e in kube.created]
    assert reasons == ["StatusSquatted"]  # once, not once per pass
    assert kube.created[0]["involvedObject"]["name"] == naming.intent_configmap_name("job")


def test_a_permanent_error_backs_off_from_seconds(
    failing: tuple[engine_module.Engine, Failing, Recording, Clock],
) -> None:
    engine, reconciler, _, _ = failing
    reconciler.errors = [PermanentError("403")]
    engine.enqueue(*KEY)
    engine.process_one(0.0)
    assert _delay(engine) >= 5.0


# --- Retry-After through the real client ---------------------------------------------------


def _configmap(name: str) -> Manifest:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {}}


def test_the_client_waits_out_a_short_retry_after_and_repeats_the_request(
    kube_api: KubeApi,
) -> None:
    clock = Clock()
    kube = KubeClient(kube_api.api_client, sleep=clock.sleep)
    kube_api.fake.faults.fail(429, verb="create", resource="configmaps", times=2, retry_after=1)
    kube.create(CONFIGMAPS, kube_api.namespace, _configmap("a"))
    assert clock.slept == [1.0, 1.0]
    assert kube.calls[("POST", "429")] == 2 and kube.calls[("POST", "201")] == 1


def test_a_long_retry_after_is_not_slept_here_but_handed_to_the_backoff(
    kube_api: KubeApi,
) -> None:
    clock = Clock()
    kube = KubeClient(kube_api.api_client, sleep=clock.sleep)
    kube_api.fake.faults.fail(503, verb="create", resource="configmaps", times=5, retry_after=30)
    with pytest.raises(TransientError) as caught:
        kube.create(CONFIGMAPS, kube_api.namespace, _configmap("b"))
    assert caught.value.retry_after == 30.0
    assert clock.slept == []
    assert kube.calls[("POST", "503")] == 1


def test_retry_after_is_tried_a_bounded_number_of_times(kube_api: KubeApi) -> None:
    clock = Clock()
    kube = KubeClient(kube_api.api_client, sleep=clock.sleep)
    kube_api.fake.faults.fail(429, verb="create", resource="configmaps", times=None, retry_after=1)
    with pytest.raises(TransientError):
        kube.create(CONFIGMAPS, kube_api.namespace, _configmap("c"))
    assert kube.calls[("POST", "429")] == 3


# --- the lease -----------------------------------------------------------------------------


class SlowLeases(ForwardingKube):
    """Advances `clock` by `seconds` during every lease request (a slow API server)."""

    def __init__(self, inner: Any, clock: Clock, seconds: float) -> None:
        super().__init__(inner)
        self.clock = clock
        self.seconds = seconds

    def get(self, resource: Any, namespace: str | None, name: str) -> Manifest | None:
        self.clock.now += self.seconds
        return super().get(resource, namespace, name)

    def _before_write(self, verb: str, resource: Any, name: str) -> None:
        self.clock.now += self.seconds


def test_freshness_counts_from_the_start_of_the_renewal(kube_api: KubeApi) -> None:
    clock = Clock()
    kube = SlowLeases(KubeClient(kube_api.api_client), clock, 3.0)
    elector = LeaderElector(kube, kube_api.namespace, "lease", "me", clock=clock)
    assert elector.try_acquire_or_renew()
    # 6 s went by in the two requests: 4 s of the 10 s deadline are left, not 10.
    assert elector.fresh(3.9) and not elector.fresh(4.1)
    clock.now += 4.1
    assert not elector.is_fresh()


def test_a_renewal_that_outlasts_the_deadline_does_not_count(kube_api: KubeApi) -> None:
    clock = Clock()
    kube = SlowLeases(KubeClient(kube_api.api_client), clock, 6.0)
    elector = LeaderElector(kube, kube_api.namespace, "lease", "me", clock=clock)
    assert not elector.try_acquire_or_renew()
    assert not elector.is_fresh()


class Lease:
    def __init__(self) -> None:
        self.valid = True

    def is_fresh(self) -> bool:
        return self.valid

    def fresh(self, margin_s: float = 0.0) -> bool:
        return self.valid


def test_a_lease_lost_while_waiting_for_a_write_token_writes_nothing(kube_api: KubeApi) -> None:
    lease = Lease()
    clock = Clock()

    def sleep(seconds: float) -> None:
        lease.valid = False  # the lease expires during the wait for the bucket
        clock.sleep(seconds)

    bucket = TokenBucket(1.0, 1, clock=clock, sleep=sleep)
    guarded = GuardedKube(KubeClient(kube_api.api_client), lease, bucket=bucket)  # type: ignore[arg-type]
    guarded.create(CONFIGMAPS, kube_api.namespace, _configmap("first"))
    since = kube_api.fake.audit.mark()
    with pytest.raises(NotLeaderError):
        guarded.create(CONFIGMAPS, kube_api.namespace, _configmap("second"))
    assert kube_api.fake.audit.writes(since=since) == []


# --- short watches (L5) --------------------------------------------------------------------


class ShortWatches(ForwardingKube):
    """Lists nothing; every watch ends at once without an event."""

    def __init__(self, stop_after: int, stop: threading.Event) -> None:
        super().__init__(None)  # type: ignore[arg-type]
        self.watches = 0
        self.stop_after = stop_after
        self.stop = stop

    def list_pages(self, *args: Any, **kwargs: Any) -> Iterator[tuple[list[Manifest], str]]:
        yield [], "1"

    def watch(self, *args: Any, **kwargs: Any) -> Iterator[WatchEvent]:
        self.watches += 1
        if self.watches >= self.stop_after:
            self.stop.set()
        return iter(())


def test_a_watch_that_ends_at_once_without_events_backs_off() -> None:
    stopped = threading.Event()
    kube = ShortWatches(4, stopped)
    asked: list[int] = []

    def backoff(failures: int) -> float:
        asked.append(failures)
        return 0.0

    informer = Informer(kube, EVENTS, "ns", backoff=backoff)
    informer._stop = stopped
    informer.run()
    assert informer.short_watches == 3  # the 4th ended the loop
    assert asked == [1, 2, 3]  # counted as failures, growing, as client-go does


# --- hostile values (L3) -------------------------------------------------------------------


@pytest.mark.parametrize("value", [10**30, -5, float("nan"), float("inf"), "17", True])
def test_ray_times_that_are_not_epoch_milliseconds_are_ignored(value: object) -> None:
    assert machine._epoch_ms(value) is None


def test_a_time_no_datetime_holds_formats_as_absent() -> None:
    assert format_time(1e30) is None
    assert format_time(0.0) == "1970-01-01T00:00:00Z"


# --- config reload (L4) --------------------------------------------------------------------


def test_every_config_field_is_applied_on_reload_or_named_as_needing_a_restart() -> None:
    names = {f.name for f in dataclasses.fields(Config)}
    groups = [set(RESTART_FIELDS), set(APPLIED_FIELDS), set(UNUSED_FIELDS)]
    assert set().union(*groups) == names
    assert sum(len(g) for g in groups) == len(names)  # no field in two groups


CHANGED: dict[str, Any] = {
    "poll_interval_s": 9.0,
    "idle_resync_s": 99.0,
    "ttl_mode": "delete",
    "submitter_finished_timeout_s": 7.0,
    "transition_grace_period_s": 8.0,
    "status_check_timeout_s": 9.0,
}


@pytest.mark.parametrize("field", sorted(CHANGED))
def test_a_reload_applies_each_applied_field(field: str) -> None:
    started = Options()
    new = dataclasses.replace(Config(), **{field: CHANGED[field]})
    assert reloaded_options(started, new, "ns") != started


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("namespaces", ("a", "b")),
        ("dashboard_concurrency", 3),
        ("work_queue_limit", 5),
        ("cluster_domain", "example.org"),
        ("dashboard_budget_rps", 5.0),
    ],
)
def test_a_reload_keeps_restart_fields_as_started(field: str, value: Any) -> None:
    started = Options()
    new = dataclasses.replace(Config(), **{field: value})
    assert reloaded_options(started, new, "ns") == started
    assert field in config_module.restart_required(Config(), new)


def test_the_write_bucket_is_configured_and_checked() -> None:
    config, problems = parse_config("api_write_qps: 25\napi_write_burst: 50\n", "c.yaml")
    assert problems == [] and config is not None
    assert (config.api_write_qps, config.api_write_burst) == (25.0, 50)
    config, problems = parse_config("api_write_qps: 0\n", "c.yaml")
    assert config is None and "api_write_qps" in str(problems[0].problem)


@pytest.mark.parametrize(
    "claim",
    [
        {"namespace": "kube-system"},  # a namespace the syncer does not watch
        {"namespace": "ml", "name": "someone-else"},
    ],
)
def test_an_intent_naming_another_place_is_a_clean_intent_error(claim: Manifest) -> None:
    objects = render(_job_text(), "ml")
    cm = next(o for o in objects if o["metadata"]["name"] == "demo-kuberay-intent")
    payload = json.loads(cm["data"][naming.INTENT_KEY])
    payload["metadata"] = {**payload.get("metadata", {}), **claim}
    cm = {**cm, "data": {naming.INTENT_KEY: json.dumps(payload)}}
    cm["metadata"] = {**cm["metadata"], "namespace": "ml", "uid": "u"}
    with pytest.raises(IntentError, match="metadata"):
        parse_job_intent(cm)


def _job_text() -> str:
    return demo_job(mode="HTTPMode")
