"""What the RayCluster reconciler reports besides its status: Events, KubeRay's metrics.

`Reporter.announce` records one Event per state or condition change on the head Pod
(after the status is published, so a failed write repeats none); `observe` keeps
`kuberay_cluster_info` and `kuberay_cluster_condition_provisioned`; `provisioned` sets
`kuberay_cluster_provisioned_duration_seconds` once, at the published transition, from the
cluster's creation (its earliest pod's creationTimestamp) as KubeRay does; `refuse`
reports a cluster it will not publish, once per head Pod version.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable
from typing import Final

from renderer import naming
from syncer import metrics
from syncer.kube import events, meta
from syncer.kube.client import Kube, Manifest
from syncer.kube.timestamps import parse_time
from syncer.raycluster import record as cluster_record
from syncer.raycluster import status as cluster_status

_LOG = logging.getLogger(__name__)
KIND: Final = "RayCluster"
_REFUSED_MEMORY: Final = 10_000
Key = tuple[str, str, str]


class Reporter:
    """Events and metrics of the clusters one reconciler tracks."""

    def __init__(
        self, kube: Kube, *, clock: Callable[[], float], monotonic: Callable[[], float]
    ) -> None:
        self.kube = kube
        self.clock = clock
        self.monotonic = monotonic
        self._lock = threading.Lock()
        self._refused: set[Hashable] = set()

    def event(self, key: Key, head: Manifest, kind: str, reason: str, message: str) -> None:
        """One Event about the cluster, on its head Pod."""
        _, ns, cluster = key
        kind_of = str(head.get("kind") or "Pod")  # the head Pod, or the Service without one
        involved: Manifest = {"apiVersion": "v1", "kind": kind_of, "name": meta.name(head)}
        if meta.metadata(head).get("uid"):
            involved["uid"] = meta.metadata(head)["uid"]
        events.record(
            self.kube,
            events.build_event(
                origin_kind=KIND,
                origin_name=cluster,
                namespace=ns,
                involved=involved,
                event_type=kind,
                reason=reason,
                message=message,
                now=self.clock(),
            ),
        )

    def announce(
        self,
        key: Key,
        head: Manifest,
        before: cluster_status.ClusterStatus | None,
        after: cluster_status.ClusterStatus,
    ) -> None:
        """One Event per state or condition transition (after the status is published).

        A condition that first appears False says that something has not happened (not
        suspended, the head not ready yet): no Event, unless it is a failure. A new ready
        cluster gets three (its state, HeadPodReady, RayClusterProvisioned), not five.
        """
        old_state = before.state if before is not None else ""
        if after.state != old_state:
            metrics.TRANSITIONS.labels(key[1], KIND, old_state or "New", after.state).inc()
            self.event(
                key,
                head,
                "Normal",
                "StateChanged",
                f"state {old_state or '(none)'} -> {after.state}",
            )
        for condition in after.conditions:
            old = before.condition(condition.type) if before is not None else None
            if old is not None and old.status == condition.status:
                continue
            bad = (
                condition.type == cluster_status.REPLICA_FAILURE and condition.status == "True"
            ) or (
                condition.type == cluster_status.HEAD_POD_READY
                and condition.status == "False"
                and old is not None
            )
            if old is None and condition.status != "True" and not bad:
                continue  # first seen False (not suspended, not ready yet): nothing happened
            detail = f": {condition.reason}" if condition.reason else ""
            self.event(
                key,
                head,
                "Warning" if bad else "Normal",
                condition.type,
                f"{condition.type} is {condition.status}{detail}",
            )
        if before is not None:
            for condition in before.conditions:
                if after.condition(condition.type) is None:
                    self.event(key, head, "Normal", condition.type, f"{condition.type} cleared")

    def observe(self, key: Key, head: Manifest, uid: str, new: cluster_record.Record) -> None:
        """KubeRay's cluster metrics: info and the provisioned condition.

        `uid` is the cluster's identity: its head Service's, which outlives a head Pod as a
        RayCluster's uid does (the head Pod's while there is no Service).
        """
        _, ns, cluster = key
        provisioned = cluster_record.condition_status(new.status, cluster_status.PROVISIONED)
        owner = meta.label(head, naming.ORIGIN_KIND) or KIND
        with self._lock:
            old = metrics.CLUSTER_STATES.get(ns, cluster)
            if old is not None and old[0] != uid:
                # Another cluster under the name: the old one's duration goes with it.
                metrics.CLUSTER_PROVISIONED_DURATION.remove_matching(namespace=ns, name=cluster)
            metrics.CLUSTER_STATES.set(ns, cluster, uid, owner, provisioned)

    @staticmethod
    def provisioned(
        key: Key,
        uid: str,
        before: cluster_status.ClusterStatus | None,
        after: cluster_status.ClusterStatus,
        created: float | None,
    ) -> None:
        """Set `kuberay_cluster_provisioned_duration_seconds` at the Provisioned transition.

        Once, when a published pass turns `RayClusterProvisioned` True: its transition time
        minus the cluster's creation (the earliest creationTimestamp of its pods), as
        KubeRay measures from its RayCluster's.

        Not set again for a cluster already provisioned when this process first saw it
        (KubeRay's operator also observes it only at the transition).
        """
        _, ns, cluster = key
        was = cluster_record.condition_status(before, cluster_status.PROVISIONED) if before else ""
        now = after.condition(cluster_status.PROVISIONED)
        if was == "True" or now is None or now.status != "True" or created is None:
            return
        at = parse_time(now.last_transition_time)
        if at is None:
            return
        metrics.CLUSTER_PROVISIONED_DURATION.labels(name=cluster, namespace=ns, uid=uid).set(
            max(0.0, at - created)
        )

    @staticmethod
    def drop_series(ns: str, cluster: str) -> None:
        """Remove the cluster's metric series."""
        metrics.CLUSTER_STATES.remove(ns, cluster)
        metrics.CLUSTER_PROVISIONED_DURATION.remove_matching(namespace=ns, name=cluster)

    def refuse(self, head: Manifest, reason: str, message: str) -> None:
        """Report a cluster the syncer will not publish, once per head Pod version."""
        version = (
            meta.namespace(head),
            meta.name(head),
            meta.metadata(head).get("resourceVersion"),
            reason,
        )
        with self._lock:
            if version in self._refused:
                return
            if len(self._refused) > _REFUSED_MEMORY:
                self._refused.clear()
            self._refused.add(version)
        _LOG.error(
            "cluster refused pod=%s/%s reason=%s %s", version[0], version[1], reason, message
        )
        metrics.RECONCILE_ERRORS.labels(KIND, "refused").inc()
        cluster = meta.label(head, naming.RAY_CLUSTER)
        self.event((KIND, meta.namespace(head), cluster), head, "Warning", reason, message)

    def forget(self, key: Key) -> None:
        """Drop a cluster's series and what is remembered of it."""
        _, ns, cluster = key
        with self._lock:
            if metrics.CLUSTER_STATES.get(ns, cluster) is not None:
                self.drop_series(ns, cluster)
