"""KubeRay's Redis GCS FT cleanup, run when the GitOps tool prunes a cluster's anchor.

The renderer puts KubeRay's finalizer `ray.io/gcs-ft-redis-cleanup-finalizer` on the
ConfigMap `<cluster>-redis-cleanup` (raycluster.md §4.5). Once it has a deletionTimestamp,
`RedisCleanup.step` does what KubeRay does on deletion: wait (10 s looks) until no head Pod
of the cluster remains; create the cleanup Job the anchor holds if none exists (owned by the
anchor, so it goes with it); remove the finalizer once that Job is Complete, Failed or
FailureTarget (a failure is reported with a Warning Event, as KubeRay logs it), or when
`ray.io/gcs-ft-deletion-timeout` seconds (default 300) have passed since the deletion
(Warning `ForceDeletedStuckCluster`). The Job is checked before it is created: KubeRay's
name, labels, command, restart policy, limits, backoff and deadline exactly, in the anchor's
namespace only (`checked_job`), and everything else equal to what the renderer derives from
the cluster's head Pod (`verify.mismatch`). The anchor is a ConfigMap, which whoever may
write ConfigMaps there can forge or edit; the head Pod is what the GitOps tool created from
git. So while a head Pod lives, `verify` reads it (one GET per anchor version once vouched;
per head Pod version while not) and vouches for the anchor's Job if it is that head's; at
cleanup time only a vouched Job is created (else Warning `RedisCleanupUnverified`, and the
timeout releases the anchor, as after a failed cleanup). Nor does a cleanup start while the
cluster's rendered head Service is still there: an anchor deleted by hand, with the cluster
still in git, must not wipe the GCS state at its next head replacement. Writes: one Job
create, one guarded finalizer patch, Events. The vouches are in memory: a syncer that
restarts after the last head is gone does not run that cleanup (it says so).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import deque
from collections.abc import Callable
from typing import Any, Final

from renderer import naming
from schemas import cluster as contract
from syncer.errors import ConflictError
from syncer.kube import events, meta
from syncer.kube.cache import Cache
from syncer.kube.client import CONFIGMAPS, JOBS, PODS, Kube, Manifest
from syncer.kube.timestamps import parse_time
from syncer.raycluster import verify

_LOG = logging.getLogger(__name__)
KIND: Final = "RayCluster"
NODE_TYPE: Final = "redis-cleanup"
WAIT_S: Final = 10.0  # KubeRay's requeue while head Pods remain
POLL_S: Final = 2.0
_COMMAND: Final = ["/bin/bash", "-c", "--"]
_LIMITS: Final = {"cpu": "200m", "memory": "256Mi"}
_DONE: Final = ("Complete", "Failed", "FailureTarget")
_MEMORY: Final = 10_000  # (anchor, head) pairs checked, clusters vouched for
_VOUCHES: Final = 4  # Job versions remembered per cluster (template changes)


class CleanupRefusedError(ValueError):
    """The anchor's Job is not KubeRay's cleanup Job for that cluster."""


def anchor_name(cluster: str) -> str:
    """`<cluster>-redis-cleanup`."""
    return f"{cluster}-redis-cleanup"


def anchor_of(cm: Manifest) -> list[tuple[str, str]]:
    """The (namespace, cluster) of an anchor ConfigMap (index values and event routing)."""
    cluster = meta.label(cm, naming.RAY_CLUSTER)
    if not cluster or meta.label(cm, naming.ROLE) != contract.ROLE_REDIS_CLEANUP:
        return []
    return [(meta.namespace(cm), cluster)]


def _is_script(text: Any) -> bool:
    if not isinstance(text, str):
        return False
    start = 'echo "To get more information about manually deleting the storage namespace'
    call = "cleanup_redis_storage(host=parsed.hostname, port=parsed.port, "
    tail = "storage_namespace=os.getenv('RAY_external_storage_namespace')) else None\""
    return text.startswith(start) and call in text and text.endswith(tail) and "`" not in text


def checked_job(anchor: Manifest, cluster: str) -> Manifest:
    """The anchor's Job, checked against KubeRay's cleanup Job; CleanupRefusedError otherwise."""
    text = (anchor.get("data") or {}).get(contract.JOB_KEY)
    if not isinstance(text, str):
        raise CleanupRefusedError(f"no {contract.JOB_KEY} in the anchor")
    try:
        job = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise CleanupRefusedError(f"{contract.JOB_KEY} is not JSON: {exc}") from exc
    if not isinstance(job, dict) or job.get("kind") != "Job" or job.get("apiVersion") != "batch/v1":
        raise CleanupRefusedError("not a batch/v1 Job")
    name = naming.check_label(f"{cluster}-redis-cleanup")
    if meta.name(job) != name:
        raise CleanupRefusedError(f"the Job is not named {name!r}")
    for obj in (job, (job.get("spec") or {}).get("template") or {}):
        if meta.label(obj, naming.RAY_CLUSTER) != cluster:
            raise CleanupRefusedError(f"the Job is not labelled {naming.RAY_CLUSTER}={cluster}")
        if meta.label(obj, naming.RAY_NODE_TYPE) != NODE_TYPE:
            raise CleanupRefusedError(f"the Job is not labelled {naming.RAY_NODE_TYPE}={NODE_TYPE}")
    spec = job.get("spec") or {}
    if spec.get("backoffLimit") != 0 or spec.get("activeDeadlineSeconds") != 300:
        raise CleanupRefusedError("backoffLimit must be 0 and activeDeadlineSeconds 300")
    pod = (spec.get("template") or {}).get("spec") or {}
    containers = pod.get("containers") or []
    if pod.get("restartPolicy") != "Never" or len(containers) != 1:
        raise CleanupRefusedError("the pod must have one container and restartPolicy Never")
    ray = containers[0]
    args = ray.get("args") or []
    if ray.get("command") != _COMMAND or len(args) != 1 or not _is_script(args[0]):
        raise CleanupRefusedError("the container does not run KubeRay's cleanup command")
    if (ray.get("resources") or {}) != {"limits": _LIMITS, "requests": _LIMITS}:
        raise CleanupRefusedError("the container's resources are not 200m / 256Mi")
    if pod.get("hostNetwork") or pod.get("hostPID") or pod.get("hostIPC"):
        raise CleanupRefusedError("the pod asks for host namespaces")
    metadata = {
        k: v for k, v in meta.metadata(job).items() if k in ("name", "labels", "annotations")
    }
    metadata["namespace"] = meta.namespace(anchor)
    metadata["ownerReferences"] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": meta.name(anchor),
            "uid": meta.metadata(anchor).get("uid"),
        }
    ]
    return {**job, "metadata": metadata}


def timeout_s(anchor: Manifest) -> float:
    """`ray.io/gcs-ft-deletion-timeout` (a positive integer), else 300."""
    raw = (meta.metadata(anchor).get("annotations") or {}).get(contract.ANN_DELETION_TIMEOUT)
    try:
        value = int(str(raw))
    except ValueError:
        return float(contract.DEFAULT_DELETION_TIMEOUT_S)
    return float(value) if value > 0 else float(contract.DEFAULT_DELETION_TIMEOUT_S)


class RedisCleanup:
    """Runs the cleanup of pruned Redis-FT clusters and releases their anchors."""

    def __init__(self, kube: Kube, anchors: Cache, clock: Callable[[], float]) -> None:
        self.kube = kube
        self.anchors = anchors
        self.clock = clock
        self.created = 0
        self.released = 0
        self.lookups = 0  # head Pods read to verify an anchor
        self._checked: set[tuple[str, str]] = set()  # (anchor digest, head uid/version)
        self._vouched: dict[tuple[str, str], deque[str]] = {}
        self._doubts: dict[tuple[str, str], str] = {}

    def verify(self, namespace: str, cluster: str, head: Manifest) -> None:
        """Vouch for the cluster's anchor Job if it is the live head Pod's (once per pair)."""
        anchor = self.anchors.get(namespace, anchor_name(cluster))
        if anchor is None or not meta.is_rendered(anchor):
            return
        if meta.label(anchor, naming.RAY_CLUSTER) != cluster:
            return
        key = (namespace, cluster)
        digest, uid = _digest(anchor), str(meta.metadata(head).get("uid") or "")
        if not uid or digest in self._vouched.get(key, ()):
            return
        # A doubted Job is looked at again when the head Pod changes (a gate removed).
        seen = (digest, f"{uid}/{meta.metadata(head).get('resourceVersion')}")
        if seen in self._checked:
            return
        live = self.kube.get(PODS, namespace, meta.name(head))
        self.lookups += 1
        if live is None or meta.metadata(live).get("uid") != uid:
            return  # gone or re-created: its successor is checked when seen
        if len(self._checked) > _MEMORY:
            self._checked.clear()
        self._checked.add(seen)
        try:
            why = verify.mismatch(checked_job(anchor, cluster), live)
        except CleanupRefusedError as exc:
            why = str(exc)
        if why is not None:
            self._doubts[key] = f"its Job is not head Pod {meta.name(live)}'s at {why}"
            _LOG.info("redis cleanup anchor %s/%s not vouched: %s", namespace, cluster, why)
            return
        if len(self._vouched) > _MEMORY:
            self._vouched.clear()
        vouched = self._vouched.setdefault(key, deque(maxlen=_VOUCHES))
        if digest not in vouched:
            vouched.append(digest)
        self._doubts.pop(key, None)

    def vouched(self, anchor: Manifest, cluster: str) -> str | None:
        """Why the anchor's Job may not run (None: a live head Pod vouched for it)."""
        key = (meta.namespace(anchor), cluster)
        if _digest(anchor) in self._vouched.get(key, ()):
            return None
        return self._doubts.get(key) or (
            "this syncer never saw a head Pod of the cluster with this Job"
        )

    def pending(self, namespace: str, cluster: str) -> Manifest | None:
        """The cluster's anchor when it is being deleted and still holds the finalizer."""
        anchor = self.anchors.get(namespace, anchor_name(cluster))
        if anchor is None or not meta.is_rendered(anchor) or not anchor_of(anchor):
            return None
        if meta.label(anchor, naming.RAY_CLUSTER) != cluster:
            return None
        holds = contract.REDIS_CLEANUP_FINALIZER in (meta.metadata(anchor).get("finalizers") or [])
        return anchor if holds and meta.metadata(anchor).get("deletionTimestamp") else None

    def step(
        self, anchor: Manifest, cluster: str, heads: int, *, in_git: bool = False
    ) -> float | None:
        """One look at a pending anchor; seconds until the next (None: released).

        `in_git`: the cluster's rendered head Service is there and not being deleted.
        """
        ns = meta.namespace(anchor)
        deleted = parse_time(meta.metadata(anchor).get("deletionTimestamp")) or self.clock()
        if self.clock() - deleted >= timeout_s(anchor):
            self._event(
                anchor,
                cluster,
                "Warning",
                "ForceDeletedStuckCluster",
                "the Redis cleanup did not finish in time; finalizer removed",
            )
            return self._release(anchor)
        if heads or in_git:
            return WAIT_S
        name = naming.check_label(f"{cluster}-redis-cleanup")
        job = self.kube.get(JOBS, ns, name)
        if job is None:
            try:
                body = checked_job(anchor, cluster)
            except CleanupRefusedError as exc:
                self._event(anchor, cluster, "Warning", "RedisCleanupRefused", str(exc))
                return WAIT_S
            doubt = self.vouched(anchor, cluster)
            if doubt is not None:
                self._event(
                    anchor,
                    cluster,
                    "Warning",
                    "RedisCleanupUnverified",
                    f"the cleanup Job is not created: {doubt}; delete the storage namespace "
                    "from Redis by hand if it must go",
                )
                return WAIT_S
            try:
                self.kube.create(JOBS, ns, body)
            except ConflictError:
                return POLL_S
            self.created += 1
            self._event(anchor, cluster, "Normal", "RedisCleanupStarted", f"created Job {name}")
            return POLL_S
        conditions = (job.get("status") or {}).get("conditions") or []
        done = [c for c in conditions if c.get("type") in _DONE and c.get("status") == "True"]
        if not done:
            return POLL_S
        if done[0].get("type") != "Complete":
            self._event(
                anchor,
                cluster,
                "Warning",
                "RedisCleanupFailed",
                f"Job {name} failed; the storage namespace may remain in Redis",
            )
        return self._release(anchor)

    def _release(self, anchor: Manifest) -> float | None:
        finalizers = meta.metadata(anchor).get("finalizers") or []
        kept = [f for f in finalizers if f != contract.REDIS_CLEANUP_FINALIZER]
        patch = {
            "metadata": {
                "resourceVersion": str(meta.metadata(anchor).get("resourceVersion") or ""),
                "finalizers": kept,
            }
        }
        try:
            self.kube.patch(CONFIGMAPS, meta.namespace(anchor), meta.name(anchor), patch)
        except ConflictError:
            return POLL_S
        self.released += 1
        return None

    def _event(self, anchor: Manifest, cluster: str, kind: str, reason: str, message: str) -> None:
        involved: Manifest = {"apiVersion": "v1", "kind": "ConfigMap", "name": meta.name(anchor)}
        if meta.metadata(anchor).get("uid"):
            involved["uid"] = meta.metadata(anchor)["uid"]
        _LOG.info("redis cleanup cluster=%s reason=%s %s", cluster, reason, message)
        events.record(
            self.kube,
            events.build_event(
                origin_kind=KIND,
                origin_name=cluster,
                namespace=meta.namespace(anchor),
                involved=involved,
                event_type=kind,
                reason=reason,
                message=message,
                now=self.clock(),
            ),
        )


def _digest(anchor: Manifest) -> str:
    """The anchor's identity and Job, as one value (a changed Job needs a new vouch)."""
    text = str((anchor.get("data") or {}).get(contract.JOB_KEY) or "")
    uid = str(meta.metadata(anchor).get("uid") or "")
    return hashlib.sha256(f"{uid}\n{text}".encode()).hexdigest()
