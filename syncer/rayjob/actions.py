"""Carrying out the RayJob machine's actions: Kubernetes writes and dashboard calls.

`Actions.apply` ungates submitter pods, submits and stops Ray jobs (through the shared
dashboard pool), releases or deletes pods, deletes the submitter Job in `delete` mode and
records Events on the job's anchor (its submitter Job, else its head Pod). Every write is
to an object the renderer made (`meta.is_rendered`), and pod writes test its
resourceVersion. The pure decisions are `syncer.rayjob.machine`'s.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Collection
from typing import Final

from renderer import naming
from syncer import status
from syncer.errors import ConflictError, NotFoundError, NotLeaderError, SyncerError
from syncer.kube import events, meta
from syncer.kube.cache import Cache
from syncer.kube.client import JOBS, JSON_PATCH, PODS, Kube, Manifest, Resource
from syncer.kube.leader import deferring
from syncer.ray.dashboard import require_lease
from syncer.ray.pool import DashboardPool
from syncer.ray.types import Dashboard
from syncer.rayjob import machine, views
from syncer.rayjob.intent import JobIntent

_LOG = logging.getLogger(__name__)
_ANN_DEPLOYMENT: Final = f"{status.STATUS_ANNOTATION_PREFIX}job-deployment-status"
_ANN_JOB: Final = f"{status.STATUS_ANNOTATION_PREFIX}job-status"


def _same_namespace_url(recorded: str, derived: str) -> str:
    """A recorded URL (a replaced run's cluster) if it has the derived one's form, else "".

    Only another head Service in the derived URL's namespace, domain and port (C2).
    """
    if not recorded or recorded == derived:
        return derived
    head, _, rest = recorded.removeprefix("http://").partition(".")
    _, _, derived_rest = derived.removeprefix("http://").partition(".")
    if recorded.startswith("http://") and naming.is_dns1123_label(head) and rest == derived_rest:
        return recorded
    return ""


def _delete(kube: Kube, resource: Resource, obj: Manifest) -> None:
    """Delete `obj` with the cached uid and resourceVersion as preconditions (M4)."""
    metadata = meta.metadata(obj)
    kube.delete(
        resource,
        meta.namespace(obj),
        meta.name(obj),
        uid=str(metadata.get("uid") or "") or None,
        resource_version=str(metadata.get("resourceVersion") or "") or None,
    )


class Actions:
    """The RayJob reconciler's hands: one method per kind of action."""

    def __init__(
        self,
        kube: Kube,
        pool: DashboardPool,
        pods: Cache,
        jobs: Cache,
        clock: Callable[[], float],
        *,
        is_leader: Callable[[], bool] = lambda: True,
    ) -> None:
        self.kube = kube
        # Releasing a finished job's pods can wait for spare write tokens: the next pass
        # releases what is still live (machine `_release_again`).
        self.later = deferring(kube)
        self.is_leader = is_leader
        self.dashboards = pool
        self.pods = pods
        self.jobs = jobs
        self.clock = clock
        self.stats: Counter[str] = Counter()

    def apply(
        self,
        intent: JobIntent,
        action: machine.Action,
        *,
        ttl_mode: str,
        intent_cm: Manifest | None = None,
    ) -> None:
        """Carry out one action (`ttl_mode`: `stop` annotates pods, `delete` deletes them)."""
        ns = intent.namespace
        if isinstance(action, machine.Ungate):
            for pod_name in action.pods:
                self._ungate(intent, pod_name)
        elif isinstance(action, machine.Submit):
            self._submit(intent, action)
        elif isinstance(action, machine.StopJob):
            self._stop(intent, action)
        elif isinstance(action, machine.Shutdown):
            for pod_name in action.pods:
                self._release_pod(ns, pod_name, ttl_mode=ttl_mode)
        elif isinstance(action, machine.DeleteSubmitter):
            if ttl_mode == "delete" and intent.submitter_job:
                job = self.jobs.get(ns, intent.submitter_job)
                if job is not None and meta.is_rendered(job):
                    # Only the Job this pass looked at: not one GitOps re-created since (M4).
                    _delete(self.kube, JOBS, job)
        elif isinstance(action, machine.Event):
            self._event(intent, action, intent_cm)

    # --- the dashboard -----------------------------------------------------------------------

    def _submit(self, intent: JobIntent, action: machine.Submit) -> None:
        def submit(d: Dashboard) -> bool:
            # Right before the request goes out, after the pool's budget wait (M4).
            require_lease(self.is_leader, f"submit_job {action.submission_id}")
            return d.submit_job(
                action.submission_id,
                intent.entrypoint,
                runtime_env=intent.runtime_env,
                metadata=intent.metadata or None,
                entrypoint_num_cpus=intent.entrypoint_num_cpus or None,
                entrypoint_num_gpus=intent.entrypoint_num_gpus or None,
                entrypoint_resources=intent.entrypoint_resources,
            )

        self.dashboards.call("submit_job", intent.dashboard_url, submit)
        self.dashboards.forget(intent.dashboard_url)
        self.stats["submissions"] += 1

    def _stop(self, intent: JobIntent, action: machine.StopJob) -> None:
        url = _same_namespace_url(action.dashboard_url, intent.dashboard_url)
        if not url:
            _LOG.warning("recorded dashboard URL refused job=%s", action.submission_id)
            return

        def stop(d: Dashboard) -> bool:
            require_lease(self.is_leader, f"stop_job {action.submission_id}")
            return d.stop_job(action.submission_id)

        try:
            self.dashboards.call("stop_job", url, stop)
        except NotLeaderError:
            raise  # the new leader stops it
        except NotFoundError:
            pass
        except SyncerError as exc:
            _LOG.warning("stopping a Ray job failed job=%s error=%s", action.submission_id, exc)
        self.dashboards.forget(url)

    # --- pods ----------------------------------------------------------------------------------

    def _ungate(self, intent: JobIntent, pod_name: str) -> None:
        ns = intent.namespace
        pod = self.pods.get(ns, pod_name)
        if pod is None or views.owner_job(pod) != intent.submitter_job:
            return
        gates = (pod.get("spec") or {}).get("schedulingGates") or []
        index = next(
            (i for i, g in enumerate(gates) if g.get("name") == naming.CLUSTER_READY_GATE), None
        )
        if index is None:
            return
        patch = [
            {
                "op": "test",
                "path": "/metadata/resourceVersion",
                "value": pod["metadata"]["resourceVersion"],
            },
            {
                "op": "test",
                "path": f"/spec/schedulingGates/{index}/name",
                "value": naming.CLUSTER_READY_GATE,
            },
            {"op": "remove", "path": f"/spec/schedulingGates/{index}"},
        ]
        try:
            updated = self.kube.patch(PODS, ns, pod_name, patch, content_type=JSON_PATCH)
        except SyncerError as exc:
            if exc.status == 422:  # a failed `test`: the pod changed since it was cached
                raise ConflictError(f"pod {pod_name} changed; ungating again") from exc
            raise
        self.pods.upsert(updated)
        self.stats["ungated"] += 1

    def _release_pod(self, ns: str, pod_name: str, *, ttl_mode: str) -> None:
        pod = self.pods.get(ns, pod_name)
        if pod is None or not (meta.is_rendered(pod) or meta.is_syncer_made(pod)):
            return  # never touch an object neither the renderer nor the actuator made
        version = str(pod["metadata"].get("resourceVersion") or "")
        try:
            if ttl_mode == "delete":
                _delete(self.later, PODS, pod)
                self.pods.forget(ns, pod_name)
            else:
                body = {
                    "metadata": {
                        "resourceVersion": version,
                        "annotations": {naming.SHUTDOWN_REQUESTED: "true"},
                    }
                }
                self.pods.upsert(self.later.patch(PODS, ns, pod_name, body))
        except NotFoundError:
            self.pods.forget(ns, pod_name)  # gone already: nothing left to release
            return
        self.stats["released_pods"] += 1

    # --- the anchor: Events, ownership, status annotations ----------------------------------

    def anchor(
        self,
        intent: JobIntent,
        *,
        intent_cm: Manifest | None = None,
        doomed: Collection[tuple[str, str]] = (),
    ) -> status.Owner | None:
        """The object that owns the job's status: its submitter Job, else its head Pod.

        Skipped: an object being deleted, or `doomed` (kind, name) pairs, those this pass is
        about to delete (`delete` mode). Then the job's intent ConfigMap (`intent_cm`) owns
        it: it lives as long as the RayJob is in git, as a RayJob's status lives on its
        object in KubeRay. Without that, the garbage collector would take the status with
        the head Pod, and the syncer would start the finished job over.
        """
        ns = intent.namespace
        for api_version, kind, cache, name in (
            ("batch/v1", "Job", self.jobs, intent.submitter_job),
            ("v1", "Pod", self.pods, intent.head_pod),
        ):
            obj = cache.get(ns, name) if name else None
            if obj is None or name is None or (kind, name) in doomed:
                continue
            metadata = meta.metadata(obj)
            if metadata.get("deletionTimestamp"):
                continue
            return status.Owner(api_version, kind, name, str(metadata.get("uid") or ""))
        if intent_cm is not None and meta.metadata(intent_cm).get("uid"):
            uid = str(meta.metadata(intent_cm)["uid"])
            return status.Owner("v1", "ConfigMap", meta.name(intent_cm), uid)
        return None

    def doomed(
        self, intent: JobIntent, actions: Collection[machine.Action], *, ttl_mode: str
    ) -> set[tuple[str, str]]:
        """The (kind, name) of the objects these actions delete (none in `stop` mode)."""
        if ttl_mode != "delete":
            return set()
        found: set[tuple[str, str]] = set()
        for action in actions:
            if isinstance(action, machine.Shutdown):
                found.update(("Pod", name) for name in action.pods)
            elif isinstance(action, machine.DeleteSubmitter) and intent.submitter_job:
                found.add(("Job", intent.submitter_job))
        return found

    def anchor_uids(self, intent: JobIntent, intent_cm: Manifest | None = None) -> set[str]:
        """The uids of the objects that may own the job's status (Job, head Pod, intent)."""
        ns, uids = intent.namespace, set()
        for cache, name in ((self.jobs, intent.submitter_job), (self.pods, intent.head_pod)):
            obj = cache.get(ns, name) if name else None
            if obj is not None and meta.metadata(obj).get("uid"):
                uids.add(str(meta.metadata(obj)["uid"]))
        if intent_cm is not None and meta.metadata(intent_cm).get("uid"):
            uids.add(str(meta.metadata(intent_cm)["uid"]))
        return uids

    def _event(
        self, intent: JobIntent, event: machine.Event, intent_cm: Manifest | None = None
    ) -> None:
        anchor = self.anchor(intent, intent_cm=intent_cm)
        if anchor is None:
            involved: Manifest = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "name": naming.intent_configmap_name(intent.name),
            }
        else:
            involved = {"apiVersion": anchor.api_version, "kind": anchor.kind, "name": anchor.name}
            if anchor.uid:
                involved["uid"] = anchor.uid
        events.record(
            self.kube,
            events.build_event(
                origin_kind="RayJob",
                origin_name=intent.name,
                namespace=intent.namespace,
                involved=involved,
                event_type=event.type,
                reason=event.reason,
                message=event.message,
                now=self.clock(),
            ),
        )

    def annotate_anchor(
        self, intent: JobIntent, anchor: status.Owner | None, job_status: Manifest
    ) -> None:
        """Mirror the job's two status words on its anchor (skipped when they are there).

        Not on the intent ConfigMap: its status map beside it says the same. On a submitter
        Job that carries none of them yet, only once they would change its health verdict
        (`renderer/health/job.lua`): while the Job's own conditions say what the RayJob's
        state says (running: Progressing; Complete with the Job complete, or with its
        success criteria met or its pod succeeded, which the Job controller turns into
        Complete next: Healthy; Failed
        with the Job failed: Degraded) the status ConfigMap is the record and the Job is
        not written, which saves one write per job. Once written, they are kept exact.
        """
        if anchor is None or anchor.kind not in ("Job", "Pod"):
            return
        cache = self.jobs if anchor.kind == "Job" else self.pods
        deployment = str(job_status.get("jobDeploymentStatus", ""))
        wanted = {_ANN_DEPLOYMENT: deployment, _ANN_JOB: str(job_status.get("jobStatus", ""))}
        obj = cache.get(intent.namespace, anchor.name)
        if anchor.kind == "Job" and obj is not None:
            own = views.job_health(obj)
            if _verdict_unchanged(obj, deployment, own):
                return
            # The Job controller marks it Complete next (it has met its success criteria
            # and adds Complete once its pods are gone, or its one pod succeeded): Healthy
            # in a moment, which a Complete job's verdict is too. Its verdict now still
            # fits a job that waits for it (Running).
            if (
                own == "Progressing"
                and _verdict_unchanged(obj, deployment, "Healthy")
                and (
                    views.success_criteria_met(obj)
                    or self._submitter_succeeded(intent.namespace, anchor.name)
                )
            ):
                return
        status.annotate(self.kube, cache, JOBS if anchor.kind == "Job" else PODS, obj, wanted)

    def _submitter_succeeded(self, ns: str, job_name: str) -> bool:
        """Whether a pod of the submitter Job has succeeded (the Job not marked yet)."""
        return any(
            views.owner_job(p) == job_name and (p.get("status") or {}).get("phase") == "Succeeded"
            for p in self.pods.by_index("jobname", (ns, job_name))
        )


# Argo CD's verdict of a rendered submitter Job by the state its annotation names
# (`renderer/health/job.lua`); no annotation, "" and Initializing leave the Job's own.
_VERDICTS: Final = {
    machine.COMPLETE: "Healthy",
    machine.FAILED: "Degraded",
    machine.SUSPENDED: "Suspended",
    machine.RUNNING: "Progressing",
    machine.RETRYING: "Progressing",
    machine.WAITING: "Progressing",
}


def _verdict_unchanged(job: Manifest, deployment: str, own: str) -> bool:
    """Whether annotating a Job with `deployment` would leave its health (`own`) as it is.

    Only for a Job without the status annotations: its own conditions give its verdict.
    """
    have = meta.metadata(job).get("annotations") or {}
    if _ANN_DEPLOYMENT in have or _ANN_JOB in have:
        return False  # mirrored once: kept exact
    if deployment in (machine.NEW, machine.INITIALIZING):
        return True
    return _VERDICTS.get(deployment, "Unknown") == own
