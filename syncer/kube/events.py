"""Kubernetes Events the syncer records on the objects that anchor a RayJob or RayService.

`Reporter` reports what the syncer refuses (an intent, a squatted status name) once per
version: an Event in the object's own namespace, a log line and a count.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
from collections.abc import Callable, Hashable
from typing import Any, Final

from renderer import naming
from syncer import metrics
from syncer.errors import NotLeaderError, SyncerError
from syncer.kube import timestamps as kubetime
from syncer.kube.client import EVENTS, Kube

Manifest = dict[str, Any]
COMPONENT: Final = "kuberay-syncer"
_LOG = logging.getLogger(__name__)
_SEQUENCE = itertools.count()


def build_event(
    *,
    origin_kind: str,
    origin_name: str,
    namespace: str,
    involved: Manifest,
    event_type: str,
    reason: str,
    message: str,
    now: float,
) -> Manifest:
    """A core/v1 Event about `involved` (apiVersion, kind, name and uid when known)."""
    stamp = kubetime.format_time(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{origin_name}.{int(now * 1e6):x}{next(_SEQUENCE):x}",
            "namespace": namespace,
            "labels": {naming.ORIGIN_KIND: origin_kind, naming.ORIGIN_NAME: origin_name},
        },
        "involvedObject": {**involved, "namespace": namespace},
        "reason": reason,
        "message": f"{origin_kind} {origin_name}: {message}"[:1024],
        "type": event_type,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


class Once:
    """Remembers what was reported, so each thing is reported once (bounded memory)."""

    def __init__(self, limit: int = 10_000) -> None:
        self._limit = limit
        self._lock = threading.Lock()
        self._seen: set[Hashable] = set()

    def first(self, token: Hashable) -> bool:
        """True the first time `token` is seen (after `limit` tokens, memory starts over)."""
        with self._lock:
            if token in self._seen:
                return False
            if len(self._seen) >= self._limit:
                self._seen.clear()
            self._seen.add(token)
            return True


def on_configmap(name: str, uid: object) -> Manifest:
    """The `involvedObject` for a ConfigMap of the event's namespace."""
    involved: Manifest = {"apiVersion": "v1", "kind": "ConfigMap", "name": name}
    if uid:
        involved["uid"] = str(uid)
    return involved


def record(kube: Kube, event: Manifest) -> None:
    """Create an Event, best effort: failures are logged, except losing the leader lease."""
    try:
        kube.create(EVENTS, str(event["metadata"]["namespace"]), event)
    except NotLeaderError:
        raise
    except SyncerError as exc:
        _LOG.info("event not recorded reason=%s error=%s", event.get("reason"), exc)


class Reporter:
    """Warnings about what the syncer refuses, once each (only while this replica leads)."""

    def __init__(
        self, kube: Kube, *, clock: Callable[[], float], is_leader: Callable[[], bool]
    ) -> None:
        self._kube = kube
        self._clock = clock
        self._is_leader = is_leader
        self._once = Once()

    def intent_refused(self, kind: str, cm: Manifest, error: Exception) -> None:
        """An intent ConfigMap the syncer will not act on (once per ConfigMap version)."""
        meta = cm.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        if not self._once.first((namespace, name, meta.get("resourceVersion"))):
            return
        _LOG.error("intent refused namespace=%s configmap=%s error=%s", namespace, name, error)
        metrics.RECONCILE_ERRORS.labels(kind, "intent").inc()
        origin = str((meta.get("labels") or {}).get(naming.ORIGIN_NAME) or name)
        involved = on_configmap(name, meta.get("uid"))
        self._warn(kind, origin, namespace, involved, "IntentRefused", str(error))

    def status_squatted(
        self, kind: str, namespace: str, name: str, intent: Manifest | None, error: Exception
    ) -> None:
        """A status name held by a map that is not the syncer's (once per key and reason)."""
        if not self._once.first((kind, namespace, name, str(error))):
            return
        _LOG.error(
            "status ConfigMap squatted namespace=%s name=%s error=%s", namespace, name, error
        )
        intent_name = naming.intent_configmap_name(name)
        uid = (intent.get("metadata") or {}).get("uid") if intent is not None else None
        involved = on_configmap(intent_name, uid)
        self._warn(kind, name, namespace, involved, "StatusSquatted", str(error))

    def _warn(
        self, kind: str, origin: str, namespace: str, involved: Manifest, reason: str, text: str
    ) -> None:
        if not self._is_leader():
            return
        event = build_event(
            origin_kind=kind,
            origin_name=origin,
            namespace=namespace,
            involved=involved,
            event_type="Warning",
            reason=reason,
            message=text,
            now=self._clock(),
        )
        with contextlib.suppress(NotLeaderError):  # the new leader reports it
            record(self._kube, event)
