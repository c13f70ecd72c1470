"""Fault injection and the request audit log of the fake API server.

Owns the rules tests set to make requests fail or slow down (matched by verb, resource,
namespace and name pattern), the switches for dropping watches, compacting history and
API outages (delegated to the server through `FaultBackend`), and the audit records of
every request. Thread-safe; it must not know about HTTP or storage details.
"""

from __future__ import annotations

import fnmatch
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
OUTAGE_MODES = ("refused", "unavailable")


@dataclass(frozen=True, slots=True)
class RequestInfo:
    """What a resource request is about, in the terms of the Kubernetes audit log."""

    verb: str
    resource: str
    subresource: str | None
    group: str
    namespace: str | None
    name: str | None


def resource_matches(pattern: str | None, info: RequestInfo) -> bool:
    """Match `pods`, `pods/status`, `jobs.batch`, `leases.coordination.k8s.io` or `*`.

    A pattern without a subresource matches the resource and all its subresources.
    """
    if pattern is None or pattern == "*":
        return True
    base, _, sub = pattern.partition("/")
    plural, _, group = base.partition(".")
    if plural not in ("*", info.resource):
        return False
    if group and group != info.group:
        return False
    return not sub or sub == info.subresource


@dataclass(slots=True)
class _Matcher:
    verb: str | None
    resource: str | None
    namespace: str | None
    name: str | None

    def matches(self, info: RequestInfo) -> bool:
        if self.verb is not None and self.verb != info.verb:
            return False
        if not resource_matches(self.resource, info):
            return False
        if self.namespace is not None and self.namespace != info.namespace:
            return False
        return self.name is None or fnmatch.fnmatchcase(info.name or "", self.name)


@dataclass(slots=True)
class FaultRule:
    """Fail matching requests with `status`; `remaining` None means until removed."""

    status: int
    match: _Matcher
    remaining: int | None
    retry_after: int | None
    message: str | None
    hits: int = 0


@dataclass(slots=True)
class LatencyRule:
    """Delay matching requests by `seconds`; `remaining` None means until removed."""

    seconds: float
    match: _Matcher
    remaining: int | None
    hits: int = 0


class FaultBackend(Protocol):
    """The server-side actions that faults trigger."""

    def drop_watches(self, *, abrupt: bool) -> int:
        """Close all open watch streams; returns how many were open."""
        ...

    def compact(self) -> int:
        """Forget the watch history; returns the compacted resourceVersion."""
        ...

    def start_outage(self, mode: str, seconds: float | None) -> None:
        """Make the whole API unavailable."""
        ...

    def end_outage(self) -> None:
        """Make the API available again."""
        ...


class Faults:
    """The fault-injection handle tests hold (`server.faults`)."""

    def __init__(self, backend: FaultBackend) -> None:
        self._backend = backend
        self._lock = threading.Lock()
        self._failures: list[FaultRule] = []
        self._latencies: list[LatencyRule] = []

    def fail(
        self,
        status: int = 500,
        *,
        verb: str | None = None,
        resource: str | None = None,
        namespace: str | None = None,
        name: str | None = None,
        times: int | None = 1,
        retry_after: int | None = None,
        message: str | None = None,
    ) -> FaultRule:
        """Fail the next `times` matching requests (None: every one until removed).

        Args:
            status: the HTTP code answered, with a matching `Status` (500, 503, 429, 409...).
            verb: get, list, watch, create, update, patch, delete or deletecollection.
            resource: `pods`, `pods/status`, `jobs.batch`, ... (None: any).
            namespace: only requests in this namespace.
            name: an fnmatch pattern for the object name.
            times: how many requests fail.
            retry_after: seconds sent in `Retry-After` (and `details.retryAfterSeconds`).
            message: the Status message.

        Raises:
            ValueError: an unknown verb.
        """
        if verb is not None and verb not in VERBS:
            raise ValueError(f"unknown verb {verb!r}; expected one of {VERBS}")
        rule = FaultRule(
            status, _Matcher(verb, resource, namespace, name), times, retry_after, message
        )
        with self._lock:
            self._failures.append(rule)
        return rule

    def add_latency(
        self,
        seconds: float,
        *,
        verb: str | None = None,
        resource: str | None = None,
        namespace: str | None = None,
        name: str | None = None,
        times: int | None = None,
    ) -> LatencyRule:
        """Delay matching requests by `seconds` before they are handled."""
        rule = LatencyRule(seconds, _Matcher(verb, resource, namespace, name), times)
        with self._lock:
            self._latencies.append(rule)
        return rule

    def remove(self, rule: FaultRule | LatencyRule) -> None:
        """Remove one rule (no error if it is already used up)."""
        with self._lock:
            if isinstance(rule, FaultRule) and rule in self._failures:
                self._failures.remove(rule)
            elif isinstance(rule, LatencyRule) and rule in self._latencies:
                self._latencies.remove(rule)

    def take(self, info: RequestInfo) -> tuple[FaultRule | None, float]:
        """Consume the first matching failure rule and sum the matching latencies."""
        with self._lock:
            delay = 0.0
            for latency in list(self._latencies):
                if latency.match.matches(info):
                    delay += latency.seconds
                    latency.hits += 1
                    if latency.remaining is not None:
                        latency.remaining -= 1
                        if latency.remaining <= 0:
                            self._latencies.remove(latency)
            for rule in self._failures:
                if rule.match.matches(info):
                    rule.hits += 1
                    if rule.remaining is not None:
                        rule.remaining -= 1
                        if rule.remaining <= 0:
                            self._failures.remove(rule)
                    return rule, delay
            return None, delay

    @property
    def pending(self) -> list[FaultRule]:
        """The failure rules still armed."""
        with self._lock:
            return list(self._failures)

    def drop_watches(self, *, abrupt: bool = False) -> int:
        """Close every open watch stream: cleanly (as on a server timeout) or abruptly."""
        return self._backend.drop_watches(abrupt=abrupt)

    def compact(self) -> int:
        """Compact the watch history: resuming from any earlier resourceVersion gets 410."""
        return self._backend.compact()

    def start_outage(self, mode: str = "refused", seconds: float | None = None) -> None:
        """Make the API unavailable until `end_outage` (or for `seconds`).

        Args:
            mode: "refused" closes the listening socket and all connections (connection
                refused); "unavailable" answers every request with 503.
            seconds: end the outage by itself after this long.

        Raises:
            ValueError: an unknown mode.
        """
        if mode not in OUTAGE_MODES:
            raise ValueError(f"unknown outage mode {mode!r}; expected one of {OUTAGE_MODES}")
        self._backend.start_outage(mode, seconds)

    def end_outage(self) -> None:
        """End an outage (no error if there is none)."""
        self._backend.end_outage()

    @contextmanager
    def outage(self, mode: str = "refused") -> Iterator[None]:
        """An API outage for the duration of a `with` block."""
        self.start_outage(mode)
        try:
            yield
        finally:
            self.end_outage()

    def clear_rules(self) -> None:
        """Remove all failure and latency rules."""
        with self._lock:
            self._failures.clear()
            self._latencies.clear()

    def clear(self) -> None:
        """Remove all rules and end any outage."""
        self.clear_rules()
        self._backend.end_outage()


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One handled API request."""

    seq: int
    verb: str
    resource: str
    subresource: str | None
    group: str
    namespace: str | None
    name: str | None
    path: str
    query: str
    field_manager: str | None
    content_type: str | None
    user_agent: str | None
    code: int

    @property
    def is_write(self) -> bool:
        """Whether the request was a write (create, update, patch, delete, deletecollection)."""
        return self.verb in WRITE_VERBS


class Audit:
    """The audit log of resource requests (`server.audit`); discovery is not recorded."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[AuditRecord] = []
        self._seq = 0

    def record(
        self,
        info: RequestInfo,
        *,
        path: str,
        query: str,
        field_manager: str | None,
        content_type: str | None,
        user_agent: str | None,
        code: int,
    ) -> None:
        """Append one record."""
        with self._lock:
            self._seq += 1
            self._records.append(
                AuditRecord(
                    self._seq,
                    info.verb,
                    info.resource,
                    info.subresource,
                    info.group,
                    info.namespace,
                    info.name,
                    path,
                    query,
                    field_manager,
                    content_type,
                    user_agent,
                    code,
                )
            )

    def records(
        self,
        *,
        verb: str | None = None,
        resource: str | None = None,
        namespace: str | None = None,
        name: str | None = None,
        since: int = 0,
    ) -> list[AuditRecord]:
        """The records matching all given filters (resource as in `Faults.fail`)."""
        matcher = _Matcher(verb, resource, namespace, name)
        with self._lock:
            return [
                r
                for r in self._records
                if r.seq > since
                and matcher.matches(
                    RequestInfo(r.verb, r.resource, r.subresource, r.group, r.namespace, r.name)
                )
            ]

    def writes(
        self,
        *,
        resource: str | None = None,
        namespace: str | None = None,
        name: str | None = None,
        since: int = 0,
    ) -> list[AuditRecord]:
        """The write requests matching the filters."""
        return [
            r
            for r in self.records(resource=resource, namespace=namespace, name=name, since=since)
            if r.is_write
        ]

    def mark(self) -> int:
        """The current sequence number, to pass as `since=` later."""
        with self._lock:
            return self._seq

    def clear(self) -> None:
        """Forget all records."""
        with self._lock:
            self._records.clear()
