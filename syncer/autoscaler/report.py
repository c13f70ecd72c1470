"""What the actuator tells people: Events on the head Pod and the status annotation.

`Reporter.report` records one Event per (cluster, reason, subject) in the cluster's
namespace (quota or admission failures, dead workers, the cap, refused entries).
`status_text` is the state ConfigMap's annotation `status.kuberay.io/autoscaler`:
canonical JSON of per-group counts (desired names, Pods, Ready Pods, max) and a
`WorkersCreated` condition, which `kuberay status` reads.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any, Final

from syncer import status
from syncer.autoscaler import plan
from syncer.autoscaler.spec import ClusterSpec
from syncer.kube import events, meta
from syncer.kube import timestamps as kubetime
from syncer.kube.client import Kube

Manifest = dict[str, Any]
_LOG = logging.getLogger(__name__)

STATUS_ANNOTATION: Final = f"{status.STATUS_ANNOTATION_PREFIX}autoscaler"
CONDITION: Final = "WorkersCreated"
_MEMORY: Final = 10_000


class Reporter:
    """Events, each once per (namespace, cluster, reason, subject) for this process."""

    def __init__(self, kube: Kube, clock: Callable[[], float]) -> None:
        self._kube = kube
        self._clock = clock
        self._lock = threading.Lock()
        self._reported: set[tuple[str, ...]] = set()

    def report(
        self,
        cluster_spec: ClusterSpec,
        head: Manifest | None,
        reason: str,
        subject: str,
        message: str,
        event_type: str = "Normal",
    ) -> None:
        """One Event on the head Pod (none without a head: logged only)."""
        memo = (cluster_spec.namespace, cluster_spec.cluster, reason, subject)
        with self._lock:
            if memo in self._reported:
                return
            if len(self._reported) > _MEMORY:
                self._reported.clear()
            self._reported.add(memo)
        _LOG.info("autoscaler %s cluster=%s %s", reason, cluster_spec.cluster, message)
        if head is None:
            return
        involved: Manifest = {"apiVersion": "v1", "kind": "Pod", "name": meta.name(head)}
        if meta.metadata(head).get("uid"):
            involved["uid"] = meta.metadata(head)["uid"]
        events.record(
            self._kube,
            events.build_event(
                origin_kind=cluster_spec.origin_kind,
                origin_name=cluster_spec.origin_name,
                namespace=cluster_spec.namespace,
                involved=involved,
                event_type=event_type,
                reason=reason,
                message=message,
                now=self._clock(),
            ),
        )


def status_text(decided: plan.Plan, failures: list[str], current: str | None, now: float) -> str:
    """The annotation's new text (equal to `current` when nothing changed)."""
    try:
        before = json.loads(current or "{}")
    except ValueError:
        before = {}
    old = {}
    if isinstance(before, dict) and isinstance(before.get("conditions"), list):
        first = (before["conditions"] or [{}])[0]
        old = first if isinstance(first, dict) else {}
    ok = not failures
    condition = {
        "type": CONDITION,
        "status": "True" if ok else "False",
        "reason": "Created" if ok else "CreateFailed",
        "message": "" if ok else failures[-1][:512],
    }
    same = all(old.get(k) == v for k, v in condition.items())
    condition["lastTransitionTime"] = str(
        (old.get("lastTransitionTime") if same else None) or kubetime.format_time(now)
    )
    record = {
        "groups": {
            group: {"desired": c.desired, "pods": c.pods, "ready": c.ready, "max": c.max}
            for group, c in sorted(decided.counts.items())
        },
        "conditions": [condition],
    }
    return json.dumps(record, sort_keys=True, separators=(",", ":"))
