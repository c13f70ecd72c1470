"""The write budget's two classes (issue 13): statuses first, Events and releases from spare tokens.

`TokenBucket.spare` serves only what `take` leaves over; `GuardedKube` sends an Event now when
a spare token is there and queues it otherwise (`EventBacklog`: bounded, one queue per
namespace sent in turn, oldest first in each, a flood losing only its own Events); a
finished job's pod release that meets no spare token is issued again by a later pass. The
buckets here run on a clock the test moves, so "no spare token" lasts exactly as long as the
test says.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from renderer import naming
from syncer.errors import DeferredWriteError
from syncer.kube.client import CONFIGMAPS, EVENTS, KubeClient, Manifest
from syncer.kube.leader import AlwaysLeader, EventBacklog, GuardedKube
from syncer.kube.ratelimit import TokenBucket
from tests.fakeapi.fixtures import KubeApi
from tests.syncer.harness import apply, render, wait_until
from tests.syncer.test_backoff import Clock
from tests.syncer.test_metric_owners import with_labels
from tests.syncer.test_rayjob_reconciler import demo_job, make_rig, play_submitter


class SharedClock(Clock):
    """`Clock`, safe to read and move from several threads."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.now

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.slept.append(seconds)
            self.now += seconds

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds


def _configmap(name: str) -> Manifest:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {}}


def _event(name: str, namespace: str) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": {"apiVersion": "v1", "kind": "ConfigMap", "name": "x"},
        "reason": name,
        "message": name,
        "type": "Normal",
    }


def _held(result: str) -> float:
    """`kuberay_syncer_events_held_total{result=...}` as /metrics shows it (0: no sample)."""
    lines = with_labels("kuberay_syncer_events_held_total", result=result)
    return float(lines[0].split()[-1]) if lines else 0.0


def test_spare_tokens_are_only_those_no_taker_has_reserved() -> None:
    clock = Clock()
    bucket = TokenBucket(10.0, 2, clock=clock, sleep=clock.sleep)
    assert bucket.spare() and bucket.spare()  # the burst is saved up: spare
    assert not bucket.spare()  # none left, and `spare` never waits or goes into debt
    assert bucket.reserve() == pytest.approx(0.1)  # a taker reserves the next token
    clock.now += 0.1
    assert not bucket.spare()  # the token that came is the taker's
    clock.now += 0.1
    assert bucket.spare()


def test_an_event_without_a_spare_token_waits_behind_the_writes_it_would_delay(
    kube_api: KubeApi,
) -> None:
    clock = SharedClock()
    bucket = TokenBucket(1.0, 1, clock=clock, sleep=clock.sleep)
    guarded = GuardedKube(KubeClient(kube_api.api_client), AlwaysLeader(), bucket=bucket)
    ns = kube_api.namespace
    since = kube_api.fake.audit.mark()
    guarded.create(EVENTS, ns, _event("now", ns))  # the saved-up token is spare: sent at once
    guarded.create(CONFIGMAPS, ns, _configmap("first"))  # waits for its token (clock moves)
    for name in ("a", "b", "c"):
        assert guarded.create(EVENTS, ns, _event(name, ns))["reason"] == name  # queued
    assert guarded.events is not None and len(guarded.events) == 3
    guarded.create(CONFIGMAPS, ns, _configmap("second"))  # not behind the queued Events

    def written() -> list[str]:
        return [str(r.name) for r in kube_api.fake.audit.writes(namespace=ns, since=since)]

    assert written() == ["now", "first", "second"]
    time.sleep(0.3)  # the clock stands still: no token is spare, the Events stay queued
    assert written() == ["now", "first", "second"]
    assert len(guarded.events) == 3

    def sent_all() -> bool:
        clock.advance(1.0)  # one token a second comes spare
        return len(written()) == 6

    wait_until(sent_all, what="the queued Events")
    assert written()[3:] == ["a", "b", "c"]  # oldest first
    assert guarded.writes == 6


def test_a_full_event_queue_drops_new_events_and_counts_them() -> None:
    clock = SharedClock()
    bucket = TokenBucket(1.0, 1, clock=clock, sleep=clock.sleep)
    bucket.take()  # nothing spare
    sent: list[str] = []
    backlog = EventBacklog(lambda ns, e: sent.append(e["reason"]), bucket, limit=2)
    held = {result: _held(result) for result in ("queued", "dropped")}
    for name in ("a", "b", "c", "d"):
        assert backlog.queued("ns", _event(name, "ns"))
    assert (len(backlog), backlog.dropped) == (2, 2)
    assert {r: _held(r) - held[r] for r in held} == {"queued": 2, "dropped": 2}  # /metrics

    def drained() -> bool:
        clock.advance(1.0)
        return len(sent) == 2

    wait_until(drained, what="the two queued Events")
    assert sent == ["a", "b"]


def test_an_event_whose_send_breaks_does_not_stall_the_ones_behind_it() -> None:
    """Events carry text from objects tenants write: one that the client fails on in an
    unexpected way (not a SyncerError) is logged and skipped; the queue keeps draining and
    the next burst still finds a sending thread."""
    clock = SharedClock()
    bucket = TokenBucket(1.0, 1, clock=clock, sleep=clock.sleep)
    bucket.take()  # nothing spare: every Event below is queued
    sent: list[str] = []

    def send(namespace: str | None, event: Manifest) -> None:
        if event["reason"] == "poison":
            raise UnicodeEncodeError("utf-8", "\udcff", 0, 1, "surrogates not allowed")
        sent.append(event["reason"])

    backlog = EventBacklog(send, bucket)
    for name in ("a", "poison", "b"):
        assert backlog.queued("tenant-a", _event(name, "tenant-a"))

    def drained() -> bool:
        clock.advance(1.0)
        return sent == ["a", "b"] and len(backlog) == 0

    wait_until(drained, what="the Events around the broken one")
    bucket.take()
    assert backlog.queued("tenant-b", _event("c", "tenant-b"))

    def later_sent() -> bool:
        clock.advance(1.0)
        return sent[-1] == "c"

    wait_until(later_sent, what="a later Event")


class _Starved:
    """An `EventBacklog` whose bucket has nothing spare until the test moves the clock.

    `sent` lists (namespace, reason) in the order the sending thread sent them.
    """

    def __init__(self, limit: int) -> None:
        self.clock = SharedClock()
        bucket = TokenBucket(1.0, 1, clock=self.clock, sleep=self.clock.sleep)
        bucket.take()  # nothing spare: every Event is queued or dropped
        self.sent: list[tuple[str | None, str]] = []
        self.backlog = EventBacklog(
            lambda ns, e: self.sent.append((ns, e["reason"])), bucket, limit=limit
        )

    def queue(self, namespace: str | None, *names: str) -> None:
        for name in names:
            assert self.backlog.queued(namespace, _event(name, namespace or "default"))

    def drain(self) -> list[tuple[str | None, str]]:
        def drained() -> bool:
            self.clock.advance(1.0)  # one token comes spare
            return len(self.backlog) == 0

        wait_until(drained, what="the queued Events")
        return self.sent


def test_a_flood_that_fills_the_backlog_loses_its_own_newest_events() -> None:
    """A tenant flapping its own objects floods Events (DESIGN §1.1: hostile input is
    contained): once the backlog is full, another namespace's Events still get in, each
    pushing out the flood's newest one, and the flood's own arrivals are dropped."""
    rig = _Starved(limit=5)
    held = {result: _held(result) for result in ("queued", "dropped")}
    rig.queue("flood", "f0", "f1", "f2", "f3", "f4")
    rig.queue("quiet", "q0")  # full: pushes out f4
    rig.queue("flood", "f5")  # the flood holds the most: its own arrival is dropped
    rig.queue("quiet", "q1")  # pushes out f3
    assert (len(rig.backlog), rig.backlog.dropped) == (5, 3)
    assert {r: _held(r) - held[r] for r in held} == {"queued": 7, "dropped": 3}  # /metrics
    sent = rig.drain()
    assert sorted(reason for _, reason in sent) == ["f0", "f1", "f2", "q0", "q1"]


def test_a_namespace_tied_for_the_most_loses_its_own_arrival() -> None:
    rig = _Starved(limit=4)
    rig.queue("a", "a0", "a1")
    rig.queue("b", "b0", "b1")
    rig.queue("b", "b2")  # tied with a: dropped, a keeps its share
    rig.queue("c", "c0")  # fewer than both: pushes out the newest of one of them
    assert (len(rig.backlog), rig.backlog.dropped) == (4, 2)
    reasons = sorted(reason for _, reason in rig.drain())
    assert "b2" not in reasons and "c0" in reasons
    assert reasons in (["a0", "a1", "b0", "c0"], ["a0", "b0", "b1", "c0"])


def test_another_namespace_waits_at_most_one_turn_behind_a_flood() -> None:
    rig = _Starved(limit=100)
    flood = [f"f{i}" for i in range(12)]
    rig.queue("flood", *flood)
    rig.queue("quiet", "q0")
    rig.queue(None, "n0")  # no namespace: a key of its own
    assert rig.drain() == [
        ("flood", "f0"),
        ("quiet", "q0"),
        (None, "n0"),
        *[("flood", name) for name in flood[1:]],
    ]


def test_each_namespace_sends_oldest_first_one_event_per_turn() -> None:
    rig = _Starved(limit=100)
    rig.queue("a", "a0", "a1", "a2")
    rig.queue("b", "b0", "b1")
    assert [reason for _, reason in rig.drain()] == ["a0", "b0", "a1", "b1", "a2"]


def test_a_namespace_with_nothing_queued_leaves_no_entry() -> None:
    rig = _Starved(limit=2)
    rig.queue("a", "a0")
    rig.queue("b", "b0")
    assert rig.backlog.namespaces_waiting == 2
    rig.queue("c", "c0")  # full: pushes out a's only Event, so a is gone
    assert (rig.backlog.namespaces_waiting, rig.backlog.dropped) == (2, 1)
    assert {ns for ns, _ in rig.drain()} == {"b", "c"}
    assert (rig.backlog.namespaces_waiting, len(rig.backlog)) == (0, 0)


def test_a_deferring_view_writes_from_spare_tokens_or_not_at_all(kube_api: KubeApi) -> None:
    clock = SharedClock()
    bucket = TokenBucket(1.0, 1, clock=clock, sleep=clock.sleep)
    guarded = GuardedKube(KubeClient(kube_api.api_client), AlwaysLeader(), bucket=bucket)
    later = guarded.deferring()
    ns = kube_api.namespace
    since = kube_api.fake.audit.mark()
    later.create(CONFIGMAPS, ns, _configmap("spare"))
    with pytest.raises(DeferredWriteError):
        later.create(CONFIGMAPS, ns, _configmap("deferred"))
    assert [r.name for r in kube_api.fake.audit.writes(namespace=ns, since=since)] == ["spare"]


def test_a_finished_job_is_published_first_and_its_pods_released_once_tokens_are_spare(
    kube_api: KubeApi,
) -> None:
    """With every token taken by other writes, the Complete status still goes out; the
    shutdown of the cluster's pods waits, is never lost, and happens once tokens are spare."""
    clock = SharedClock()
    # `take` moves this clock as it waits, so normal writes always go; none is left spare
    # until the test moves the clock itself.
    bucket = TokenBucket(1000.0, 1, clock=clock, sleep=clock.sleep)
    bucket.take()
    guarded = GuardedKube(KubeClient(kube_api.api_client), AlwaysLeader(), bucket=bucket)
    rig = make_rig(kube_api, writer=guarded)
    kube, syncer, controllers = rig.kube, rig.syncer, rig.controllers
    try:
        apply(kube, render(demo_job(mode="K8sJobMode"), rig.namespace), rig.namespace)
        controllers.start(interval=0.05)
        syncer.start()
        play_submitter(rig)
        wait_until(lambda: rig.status().get("jobDeploymentStatus") == "Complete", what="Complete")
        wait_until(lambda: syncer.rayjob.stats["releases_deferred"] >= 2, what="a release retried")
        intent_cm = kube.get(CONFIGMAPS, rig.namespace, naming.intent_configmap_name("demo"))
        assert intent_cm is not None
        head = json.loads(intent_cm["data"]["intent.json"])["derived"]["headPodName"]
        assert naming.SHUTDOWN_REQUESTED not in (rig.pod(head)["metadata"].get("annotations") or {})

        def shut_down() -> bool:
            clock.advance(1.0)  # a thousand tokens a second come spare now
            annotations = rig.pod(head)["metadata"].get("annotations") or {}
            return bool(annotations.get(naming.SHUTDOWN_REQUESTED))

        wait_until(shut_down, what="the head pod's release", timeout=20.0)
        wait_until(
            lambda: guarded.events is not None and len(guarded.events) == 0,
            what="the queued Events sent",
        )
        reasons = {
            e["reason"]
            for e in kube.list(EVENTS, rig.namespace)[0]
            if e["metadata"].get("labels", {}).get(naming.ORIGIN_KIND) == "RayJob"
        }
        assert "Complete" in reasons, reasons
    finally:
        rig.stop()
