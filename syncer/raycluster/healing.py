"""Failure recovery carried out: delete a dead rendered Pod so that GitOps self-heal re-creates it.

`Healer.heal` applies `recovery.should_delete` to one cluster's cached Pods and deletes
those it names, one attempt per Pod per backoff step (10 s, doubling, at most 5 min, keyed
by the Pod's name, which the re-created Pod keeps): an Event on the Pod each time and a
count in `kuberay_syncer_pod_recoveries_total`. The delete is guarded by the cached
resourceVersion (a Pod that changed meanwhile is looked at again). A Pod whose RayJob has
finished is never deleted: the RayJob's status ConfigMap says so. A failed delete is
returned as KubeRay's reconcile error (`FailedDeleteHeadPod`/`FailedDeleteWorkerPod`),
which sets the cluster's `ReplicaFailure` condition; it is returned again by each pass
while that pod's backoff runs (KubeRay retries at once, so its error stands until a delete
succeeds), and no longer once a delete succeeds or the pod is gone or no longer dead.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from renderer import naming
from syncer import metrics
from syncer.errors import ConflictError, NotFoundError, NotLeaderError, SyncerError
from syncer.kube import events, meta
from syncer.kube.cache import Cache
from syncer.kube.client import PODS, Kube, Manifest
from syncer.raycluster import recovery
from syncer.raycluster.status import ReconcileError

_LOG = logging.getLogger(__name__)
KIND: Final = "RayCluster"
_FINISHED_JOB: Final = frozenset({"Complete", "Failed"})
_MEMORY: Final = 10_000  # pods whose backoff is remembered


@dataclass(frozen=True, slots=True)
class Backoff:
    """Per-pod delays between deletions: `first_s`, doubling, capped at `max_s`."""

    first_s: float = 10.0
    max_s: float = 300.0

    def delay(self, attempts: int) -> float:
        """The wait after the `attempts`-th deletion (1-based)."""
        return float(min(self.max_s, self.first_s * 2.0 ** max(0, attempts - 1)))


class Healer:
    """Deletes dead rendered Pods of a cluster, with per-pod backoff."""

    def __init__(
        self,
        kube: Kube,
        pods: Cache,
        statuses: Cache,
        *,
        clock: Callable[[], float],
        monotonic: Callable[[], float],
        backoff: Backoff | None = None,
    ) -> None:
        self.kube = kube
        self.pods = pods
        self.statuses = statuses
        self.clock = clock
        self.monotonic = monotonic
        self.backoff = backoff or Backoff()
        self.stats: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._attempts: dict[tuple[str, str], tuple[int, float]] = {}  # -> (count, not before)
        # The last failed delete of a pod, reported again while its backoff runs (KubeRay
        # retries at once, so its error stands until a delete succeeds).
        self._failures: dict[tuple[str, str], ReconcileError] = {}

    def job_finished(self, pod: Manifest) -> bool:
        """Whether the pod belongs to a RayJob whose published status is Complete or Failed."""
        if meta.label(pod, naming.ORIGIN_KIND) != "RayJob":
            return False
        job = meta.label(pod, naming.ORIGIN_NAME)
        cm = self.statuses.get(meta.namespace(pod), naming.status_configmap_name(job))
        if cm is None or meta.label(cm, naming.ORIGIN_KIND) != "RayJob":
            return False
        if meta.label(cm, naming.ORIGIN_NAME) != job:
            return False
        return (cm.get("data") or {}).get("jobDeploymentStatus") in _FINISHED_JOB

    def heal(
        self, namespace: str, cluster: str, pods: Sequence[Manifest]
    ) -> tuple[ReconcileError | None, float | None]:
        """Delete what should go; (the error for the status, seconds until a backoff ends)."""
        error: ReconcileError | None = None
        wake: float | None = None
        for pod in pods:
            if meta.metadata(pod).get("deletionTimestamp") or not meta.is_rendered(pod):
                continue
            verdict = recovery.should_delete(pod, job_finished=self.job_finished(pod))
            if not verdict.delete:
                continue
            name, node = meta.name(pod), meta.label(pod, naming.RAY_NODE_TYPE) or "worker"
            with self._lock:
                count, not_before = self._attempts.get((namespace, name), (0, 0.0))
                standing = self._failures.get((namespace, name))
            left = not_before - self.monotonic()
            if left > 0:
                metrics.POD_RECOVERIES.labels(namespace, node, "backoff").inc()
                wake = left if wake is None else min(wake, left)
                error = standing or error
                continue
            failed = self._delete(namespace, cluster, pod, node, verdict.reason)
            if failed is not None:
                error = failed
            with self._lock:
                if len(self._attempts) > _MEMORY:
                    self._attempts.clear()
                    self._failures.clear()
                if failed is None:
                    self._failures.pop((namespace, name), None)
                else:
                    self._failures[(namespace, name)] = failed
                delay = self.backoff.delay(count + 1)
                self._attempts[(namespace, name)] = (count + 1, self.monotonic() + delay)
            if failed is not None:  # retried when the backoff ends, events or not
                wake = delay if wake is None else min(wake, delay)
        return error, wake

    def _delete(
        self, namespace: str, cluster: str, pod: Manifest, node: str, reason: str
    ) -> ReconcileError | None:
        name = meta.name(pod)
        version = meta.metadata(pod).get("resourceVersion")
        try:
            self.kube.delete(
                PODS,
                namespace,
                name,
                resource_version=str(version) if version else None,
                uid=meta.metadata(pod).get("uid") or None,
            )
        except ConflictError:
            return None  # it changed: the next pass judges the new version
        except NotFoundError:
            self.pods.forget(namespace, name)
            return None  # gone already: nothing failed
        except NotLeaderError:
            raise
        except SyncerError as exc:
            metrics.POD_RECOVERIES.labels(namespace, node, "failed").inc()
            marker = "FailedDeleteHeadPod" if node == "head" else "FailedDeleteWorkerPod"
            _LOG.warning("pod recovery failed pod=%s/%s error=%s", namespace, name, exc)
            return ReconcileError(f"failed to delete pod {name}: {exc}", marker)
        self.pods.forget(namespace, name)
        self.stats["deleted"] += 1
        metrics.POD_RECOVERIES.labels(namespace, node, "deleted").inc()
        _LOG.info("pod recovery pod=%s/%s reason=%s", namespace, name, reason)
        involved: Manifest = {"apiVersion": "v1", "kind": "Pod", "name": name}
        uid = meta.metadata(pod).get("uid")
        if uid:
            involved["uid"] = uid
        events.record(
            self.kube,
            events.build_event(
                origin_kind=KIND,
                origin_name=cluster,
                namespace=namespace,
                involved=involved,
                event_type="Normal",
                reason="DeletedHeadPod" if node == "head" else "DeletedWorkerPod",
                message=f"deleted {reason}; GitOps self-heal re-creates it",
                now=self.clock(),
            ),
        )
        return None
