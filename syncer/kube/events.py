"""Kubernetes Events the syncer records on the objects that anchor a RayJob or RayService."""

from __future__ import annotations

import itertools
import logging
from typing import Any, Final

from renderer import naming
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


def record(kube: Kube, event: Manifest) -> None:
    """Create an Event, best effort: failures are logged, except losing the leader lease."""
    try:
        kube.create(EVENTS, str(event["metadata"]["namespace"]), event)
    except NotLeaderError:
        raise
    except SyncerError as exc:
        _LOG.info("event not recorded reason=%s error=%s", event.get("reason"), exc)
