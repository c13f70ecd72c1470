"""Leader election with a coordination.k8s.io Lease, and a write guard that needs it.

Follows client-go's rules: a lease is free when its holder is empty or its record has
not changed for `leaseDurationSeconds` as observed locally (no clock comparison across
machines); the holder renews every `retry_period`; leadership counts as fresh only
while the last successful renewal is younger than `renew_deadline`, timed from the
*start* of that renewal's requests (the other replica's lease-duration clock may start as
soon as the server committed it), and a renewal that takes longer than the deadline does
not count (review M5). `GuardedKube` refuses every write unless leadership is fresh, so a
paused or partitioned replica cannot write after another one took over, and spends one
token of the shared write bucket per write (review M2), checking the lease again after
any wait for it.

The bucket serves two classes (issue 13). Status and other writes a user waits on take
tokens in turn (`TokenBucket.take`). Events and the releases of a finished job's pods,
which can come later without anyone waiting on them, use only spare tokens
(`TokenBucket.spare`): when many jobs end at once, their statuses go out first. An Event
that finds no spare token joins `EventBacklog`: at most 10,000 wait, kept as JSON, in one
queue per namespace, and its own thread sends them one namespace at a time in turn,
oldest first within each. When it is full, the namespace holding the most loses its
newest Event, so a tenant that floods Events loses only its own (client-go's event
broadcaster also drops what its queue of 1,000 cannot hold). A release that finds no
spare token raises `DeferredWriteError`, and its pass runs again soon.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Final

from syncer import metrics
from syncer.codebook import Codebook
from syncer.errors import ConflictError, DeferredWriteError, NotLeaderError, SyncerError
from syncer.kube.client import EVENTS, LEASES, Kube, Resource
from syncer.kube.forwarding import ForwardingKube, body_name
from syncer.kube.ratelimit import TokenBucket
from syncer.kube.timestamps import micro_time

Manifest = dict[str, Any]
_LOG = logging.getLogger(__name__)


class LeaderElector:
    """Acquire and renew one Lease; `is_fresh()` tells whether writes are allowed now."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_duration_s: float = 15.0,
        renew_deadline_s: float = 10.0,
        retry_period_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self._kube = kube
        self._duration = lease_duration_s
        self._deadline = renew_deadline_s
        self._period = retry_period_s
        self._clock = clock
        self._wall = wall
        self._on_change = on_change
        self._renewed_at: float | None = None
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0
        self._leader = False
        self._lock = threading.Lock()
        self.transitions = 0

    def is_fresh(self) -> bool:
        """Whether this replica holds the lease and renewed it within the renew deadline."""
        return self.fresh(0.0)

    def fresh(self, margin_s: float = 0.0) -> bool:
        """Whether the lease stays fresh for `margin_s` more seconds.

        Checked before a dashboard mutation, which no resourceVersion guards: it must land
        while this replica leads.
        """
        with self._lock:
            return (
                self._leader
                and self._renewed_at is not None
                and self._clock() - self._renewed_at < self._deadline - margin_s
            )

    def healthy(self) -> bool:
        """Liveness of the lease loop: False when held but not renewed for a lease duration.

        As controller-runtime's leader-election health check.
        """
        with self._lock:
            if not self._leader:
                return True
            return self._renewed_at is not None and (
                self._clock() - self._renewed_at < self._duration
            )

    @property
    def is_leader(self) -> bool:
        """Whether this replica believes it holds the lease (fresh or not)."""
        return self._leader

    def _set_leader(self, value: bool) -> None:
        if value != self._leader:
            self._leader = value
            self.transitions += 1
            _LOG.info("leadership changed leader=%s identity=%s", value, self.identity)
            if self._on_change is not None:
                self._on_change(value)

    def try_acquire_or_renew(self) -> bool:
        """One attempt; True when this replica holds a freshly renewed lease.

        Freshness counts from before the first request; an attempt that outlasts the renew
        deadline is not a renewal (the lease may have changed hands meanwhile).
        """
        started = self._clock()
        now_wall = self._wall()
        lease = self._kube.get(LEASES, self.namespace, self.name)
        spec: Manifest = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self._duration),
            "renewTime": micro_time(now_wall),
        }
        try:
            if lease is None:
                spec["acquireTime"] = micro_time(now_wall)
                spec["leaseTransitions"] = 0
                body = {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": spec,
                }
                self._kube.create(LEASES, self.namespace, body)
            else:
                current = lease.get("spec") or {}
                holder = str(current.get("holderIdentity") or "")
                record = (holder, str(current.get("renewTime") or ""))
                if record != self._observed:
                    self._observed = record
                    self._observed_at = self._clock()
                duration = float(current.get("leaseDurationSeconds") or self._duration)
                expired = self._clock() - self._observed_at >= duration
                if holder and holder != self.identity and not expired:
                    self._lost()
                    return False
                transitions = int(current.get("leaseTransitions") or 0)
                if holder == self.identity:
                    spec["acquireTime"] = current.get("acquireTime") or micro_time(now_wall)
                    spec["leaseTransitions"] = transitions
                else:
                    spec["acquireTime"] = micro_time(now_wall)
                    spec["leaseTransitions"] = transitions + 1
                lease["spec"] = spec
                self._kube.replace(LEASES, self.namespace, lease)
        except ConflictError:
            self._lost()
            return False
        if self._clock() - started >= self._deadline:
            _LOG.warning("lease renewal outlasted the renew deadline; not counted")
            if not self.is_fresh():
                self._set_leader(False)
            return False
        with self._lock:
            self._renewed_at = started
            self._observed = (self.identity, spec["renewTime"])
            self._observed_at = started
        self._set_leader(True)
        return True

    def _lost(self) -> None:
        with self._lock:
            self._renewed_at = None
        self._set_leader(False)

    def run(self, stop: threading.Event) -> None:
        """Acquire and renew until `stop` is set, then release the lease if held."""
        while not stop.is_set():
            try:
                self.try_acquire_or_renew()
            except SyncerError as exc:
                _LOG.warning("lease renewal failed error=%s", exc)
                if not self.is_fresh():
                    self._set_leader(False)
            except Exception:  # noqa: BLE001 - never die silently (H2): log, step down, retry
                _LOG.exception("lease loop failed")
                if not self.is_fresh():
                    self._set_leader(False)
            stop.wait(self._period)
        self.release()

    def release(self) -> None:
        """Give the lease up (holder cleared), so another replica takes over at once."""
        if not self._leader:
            return
        try:
            lease = self._kube.get(LEASES, self.namespace, self.name)
            if (
                lease is not None
                and (lease.get("spec") or {}).get("holderIdentity") == self.identity
            ):
                lease["spec"]["holderIdentity"] = ""
                lease["spec"]["leaseDurationSeconds"] = 1
                lease["spec"]["renewTime"] = micro_time(self._wall())
                self._kube.replace(LEASES, self.namespace, lease)
                _LOG.info("lease released identity=%s", self.identity)
        except SyncerError as exc:
            _LOG.warning("lease release failed error=%s", exc)
        finally:
            self._lost()


class AlwaysLeader:
    """Leadership for a single replica run without election (e.g. `--no-leader-elect`)."""

    is_leader = True

    def is_fresh(self) -> bool:
        """Always fresh."""
        return True

    def fresh(self, margin_s: float = 0.0) -> bool:
        """Always fresh."""
        return True


class GuardedKube(ForwardingKube):
    """A `Kube` whose writes happen only under fresh leadership; reads pass through.

    `writes`: the one token bucket every API write of the engine takes from (None: none).
    Events take spare tokens only, waiting in `events` when there are none; the view
    `deferring()` does the same for the writes made through it, raising `DeferredWriteError`.
    """

    def __init__(
        self,
        kube: Kube,
        leadership: LeaderElector | AlwaysLeader,
        *,
        bucket: TokenBucket | None = None,
    ) -> None:
        super().__init__(kube)
        self._leadership = leadership
        self.bucket = bucket
        self.writes = 0
        self._deferring = False
        self.events = EventBacklog(self._send_queued, bucket) if bucket is not None else None

    def deferring(self) -> GuardedKube:
        """This client, for writes a later pass repeats: each spends a spare token or none."""
        view = GuardedKube(self._inner, self._leadership)
        view.bucket, view.events, view._deferring = self.bucket, self.events, True
        return view

    def fresh(self, margin_s: float = 0.0) -> bool:
        """Whether the lease stays fresh for `margin_s` more seconds (`LeaderElector.fresh`)."""
        return self._leadership.fresh(margin_s)

    def create(self, resource: Resource, namespace: str | None, body: Manifest) -> Manifest:
        """Create; an Event with no spare token now is queued (returned as sent)."""
        if resource != EVENTS or self.events is None:
            return super().create(resource, namespace, body)
        self._check("create", resource, body_name(body))
        if self.events.queued(namespace, body):
            return body
        self.writes += 1  # `queued` took its token
        return self._inner.create(resource, namespace, body)

    def _send_queued(self, namespace: str | None, body: Manifest) -> None:
        self._check("create", EVENTS, body_name(body))
        self.writes += 1
        self._inner.create(EVENTS, namespace, body)

    def _before_write(self, verb: str, resource: Resource, name: str) -> None:
        self._check(verb, resource, name)
        if self.bucket is not None:
            if self._deferring:
                if not self.bucket.spare():
                    raise DeferredWriteError(f"{verb} {resource.kind}/{name}: no spare write token")
            elif self.bucket.take() > 0:
                self._check(verb, resource, name)  # the lease may have gone while waiting
        self.writes += 1

    def _check(self, verb: str, resource: Resource, name: str) -> None:
        if not self._leadership.is_fresh():
            raise NotLeaderError(
                f"not writing ({verb} {resource.kind}/{name}): no fresh leader lease"
            )


def deferring(kube: Kube) -> Kube:
    """`kube` for writes a later pass repeats (`GuardedKube.deferring`; others: itself)."""
    return kube.deferring() if isinstance(kube, GuardedKube) else kube


# Events waiting at most: a burst of 10,000 jobs ending together keeps every Complete Event
# (each waits as ~600 bytes of JSON). client-go's broadcaster holds 1,000.
EVENT_BACKLOG: Final = 10_000
_IDLE_EXIT_S: Final = 5.0  # the sending thread ends after this long with nothing queued


class _Fifos:
    """Queued Events as JSON, one FIFO per namespace; the caller holds the lock.

    The dict's order is the turn order: a namespace goes to the back after each turn and
    leaves the dict when its FIFO empties, so only namespaces with Events waiting have
    an entry. `_by_size` maps a FIFO length to the namespaces holding that many, so the
    namespace holding the most is known without a scan of every namespace.
    """

    def __init__(self) -> None:
        self.total = 0
        self.fifos: dict[str | None, deque[bytes | str]] = {}
        self._by_size: dict[int, dict[str | None, None]] = {}  # dicts as ordered sets
        self._most = 0

    def size(self, namespace: str | None) -> int:
        """How many Events `namespace` has queued."""
        fifo = self.fifos.get(namespace)
        return len(fifo) if fifo is not None else 0

    def largest(self) -> tuple[str | None, int]:
        """The namespace holding the most (the first to get there on a tie), and how many."""
        if not self._most:
            return None, 0  # nothing queued (a limit of 0): every arrival is dropped
        return next(iter(self._by_size[self._most])), self._most

    def push(self, namespace: str | None, text: bytes | str) -> None:
        """Queue `text` as the newest Event of `namespace`."""
        fifo = self.fifos.setdefault(namespace, deque())
        fifo.append(text)
        self._resized(namespace, len(fifo) - 1, len(fifo))

    def pop_next(self) -> tuple[str | None, bytes | str]:
        """The oldest Event of the namespace whose turn it is; it goes to the back."""
        namespace = next(iter(self.fifos))
        fifo = self.fifos.pop(namespace)
        text = fifo.popleft()
        if fifo:
            self.fifos[namespace] = fifo
        self._resized(namespace, len(fifo) + 1, len(fifo))
        return namespace, text

    def drop_newest(self, namespace: str | None) -> None:
        """Forget the newest Event of `namespace`."""
        fifo = self.fifos[namespace]
        fifo.pop()
        if not fifo:
            del self.fifos[namespace]
        self._resized(namespace, len(fifo) + 1, len(fifo))

    def _resized(self, namespace: str | None, old: int, new: int) -> None:
        self.total += new - old
        if old:
            holders = self._by_size[old]
            del holders[namespace]
            if not holders:
                del self._by_size[old]
                if old == self._most:
                    # Sizes move by one: `new` is held now (by `namespace`), or nothing is.
                    self._most = new
        if new:
            self._by_size.setdefault(new, {})[namespace] = None
            self._most = max(self._most, new)


# Queued Events are kept packed (`syncer.codebook`): the words `syncer.kube.events` writes
# in each, about half of an Event's bytes, ~3 MB when ten thousand wait.
_EVENTS: Final = Codebook(
    (
        b'","type":"Normal","source":{"component":"kuberay-syncer"},'
        b'"reportingComponent":"kuberay-syncer","firstTimestamp":"',
        b'","type":"Warning","source":{"component":"kuberay-syncer"},'
        b'"reportingComponent":"kuberay-syncer","firstTimestamp":"',
        b'{"apiVersion":"v1","kind":"Event","metadata":{"name":"',
        b'","labels":{"kuberay.io/origin-kind":"',
        b'","kuberay.io/origin-name":"',
        b'"}},"involvedObject":{"apiVersion":"',
        b'","lastTimestamp":"',
        b'","count":1}',
        b'","namespace":"',
        b'","reason":"',
        b'","message":"',
        b'","kind":"',
        b'","name":"',
        b'","uid":"',
        b"ray.io/v1",
        b"RayCluster",
        b"RayService",
        b"RayJob",
    )
)


class EventBacklog:
    """Events waiting for a spare write token, a fair share per namespace; one thread sends.

    `queued` is the entry: False when the Event may go out now (a spare token was taken
    and nothing waits), else it joins its namespace's queue (True). The thread serves the
    namespaces in turn, one Event each, oldest first within a namespace, so a flood does
    not hold up another namespace's Events by more than one turn. When `limit` Events
    wait, an Event from a namespace with fewer than the most pushes out the newest Event
    of the one holding the most; an Event from that namespace (or one tied with it) is
    dropped. Either way one Event is dropped and counted. The thread starts when an Event
    is queued and ends when nothing has waited for a while, so an idle syncer keeps no
    thread for it.
    """

    def __init__(
        self,
        send: Callable[[str | None, Manifest], None],
        bucket: TokenBucket,
        *,
        limit: int = EVENT_BACKLOG,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._send = send
        self._bucket = bucket
        self._limit = limit
        self._sleep = sleep
        self._lock = threading.Condition()
        self._queue = _Fifos()
        self._thread: threading.Thread | None = None
        self.dropped = 0

    def queued(self, namespace: str | None, event: Manifest) -> bool:
        """Whether `event` was queued or dropped (True) rather than cleared to go now."""
        with self._lock:
            if not self._queue.total and self._bucket.spare():
                return False
            if self._queue.total >= self._limit:
                largest, most = self._queue.largest()
                self.dropped += 1
                metrics.EVENTS_HELD.labels("dropped").inc()
                if self._queue.size(namespace) >= most:
                    return True  # it holds the most already: its own Event is the one dropped
                self._queue.drop_newest(largest)
            self._queue.push(namespace, _EVENTS.pack(json.dumps(event, separators=(",", ":"))))
            metrics.EVENTS_HELD.labels("queued").inc()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="events", daemon=True)
                self._thread.start()
            self._lock.notify()
            return True

    def __len__(self) -> int:
        with self._lock:
            return self._queue.total

    @property
    def namespaces_waiting(self) -> int:
        """How many namespaces have Events queued."""
        with self._lock:
            return len(self._queue.fifos)

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._queue.total:
                    self._lock.wait(_IDLE_EXIT_S)
                if not self._queue.total:
                    self._thread = None
                    return
            while not self._bucket.spare():
                self._sleep(min(0.05, 1.0 / self._bucket.qps))
            with self._lock:
                # Only this thread takes Events out (a full queue swaps one for another),
                # so the queue it saw non-empty still is.
                namespace, text = self._queue.pop_next()
            event = json.loads(_EVENTS.unpack(text))
            try:
                self._send(namespace, event)
            except NotLeaderError:
                pass  # the new leader reports what it sees
            except SyncerError as exc:
                _LOG.info("event not recorded reason=%s error=%s", event.get("reason"), exc)
            except Exception:  # noqa: BLE001 - one bad Event must not stop the ones behind it
                _LOG.exception("event not recorded reason=%s", event.get("reason"))
