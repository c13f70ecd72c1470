"""What git asked for, read from the renderer's intent ConfigMaps (pure).

The renderer writes `<name>-kuberay-intent` with canonical JSON under `intent.json`
(its shape is `schemas.intent.RayJobIntent`). The syncer never reads git; this is its only
source of the RayJob spec.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Final

from renderer import naming
from syncer.errors import IntentError

Manifest = dict[str, Any]

# A user (not git) may set this annotation on the intent ConfigMap to hand an
# InteractiveMode job its submission ID without a commit.
JOB_ID_ANNOTATION: Final = "kuberay.io/job-id"


@dataclass(frozen=True, slots=True)
class DeletionRule:
    """One `deletionStrategy.deletionRules` entry."""

    policy: str
    job_status: str | None
    deployment_status: str | None
    ttl_s: int


@dataclass(frozen=True, slots=True)
class JobIntent:
    """A RayJob as rendered: its spec fields the syncer acts on, and the derived names."""

    namespace: str
    name: str
    mode: str
    cluster_name: str
    cluster_rendered: bool
    uses_selector: bool
    submission_id: str | None
    dashboard_url: str
    submitter_job: str | None
    submitter_container: str | None
    head_pod: str | None
    worker_pods: tuple[str, ...]
    entrypoint: str
    runtime_env: Manifest | None
    metadata: dict[str, str]
    entrypoint_num_cpus: float
    entrypoint_num_gpus: float
    entrypoint_resources: dict[str, float] | None
    backoff_limit: int
    active_deadline_s: int | None
    pre_running_deadline_s: int | None
    suspend: bool
    shutdown_after_finish: bool
    ttl_after_finished_s: int
    deletion_rules: tuple[DeletionRule, ...] | None
    legacy_on_success: str | None
    legacy_on_failure: str | None
    run_id: str
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        """(namespace, name)."""
        return (self.namespace, self.name)

    @property
    def cluster_pods(self) -> tuple[str, ...]:
        """The rendered pod names of the job's own cluster."""
        head = (self.head_pod,) if self.head_pod else ()
        return head + self.worker_pods


def _float(value: Any) -> float:
    try:
        return float(value or 0)
    except (TypeError, ValueError):
        return 0.0


def _resources(text: Any) -> dict[str, float] | None:
    if not text:
        return None
    try:
        decoded = json.loads(str(text))
    except ValueError:
        return None
    if not isinstance(decoded, dict):
        return None
    return {str(k): _float(v) for k, v in decoded.items()}


def parse_job_intent(config_map: Manifest) -> JobIntent:
    """Read a RayJob intent ConfigMap; raises IntentError when it is malformed."""
    data = (config_map.get("data") or {}).get(naming.INTENT_KEY)
    if not data:
        raise IntentError(f"no {naming.INTENT_KEY} in the intent ConfigMap")
    try:
        intent = json.loads(data)
    except ValueError as exc:
        raise IntentError(f"{naming.INTENT_KEY} is not JSON: {exc}") from exc
    if intent.get("kind") != "RayJob":
        raise IntentError(f"not a RayJob intent (kind {intent.get('kind')!r})")
    meta = intent.get("metadata") or {}
    spec = intent.get("spec") or {}
    derived = intent.get("derived") or {}
    strategy = spec.get("deletionStrategy") or {}
    rules = None
    if strategy.get("deletionRules"):
        rules = tuple(
            DeletionRule(
                policy=str(rule.get("policy")),
                job_status=(rule.get("condition") or {}).get("jobStatus"),
                deployment_status=(rule.get("condition") or {}).get("jobDeploymentStatus"),
                ttl_s=int((rule.get("condition") or {}).get("ttlSeconds") or 0),
            )
            for rule in strategy["deletionRules"]
        )
    live_annotations = (config_map.get("metadata") or {}).get("annotations") or {}
    submission_id = derived.get("submissionId") or spec.get("jobId") or None
    if submission_id is None and derived.get("submissionMode") == "InteractiveMode":
        submission_id = live_annotations.get(JOB_ID_ANNOTATION) or None
    run_id = "/".join(
        str(x)
        for x in (derived.get("clusterName"), derived.get("submissionId"), spec.get("suspend"))
    )
    return JobIntent(
        namespace=str(meta.get("namespace") or (config_map.get("metadata") or {}).get("namespace")),
        name=str(meta.get("name")),
        mode=str(derived.get("submissionMode") or "K8sJobMode"),
        cluster_name=str(derived.get("clusterName") or ""),
        cluster_rendered=bool(derived.get("clusterRendered")),
        uses_selector=bool(spec.get("clusterSelector")),
        submission_id=submission_id,
        dashboard_url=str(derived.get("dashboardURL") or ""),
        submitter_job=derived.get("submitterJobName"),
        submitter_container=derived.get("submitterContainerName"),
        head_pod=derived.get("headPodName"),
        worker_pods=tuple(derived.get("workerPodNames") or ()),
        entrypoint=str(spec.get("entrypoint") or ""),
        runtime_env=derived.get("runtimeEnv"),
        metadata={str(k): str(v) for k, v in (spec.get("metadata") or {}).items()},
        entrypoint_num_cpus=_float(spec.get("entrypointNumCpus")),
        entrypoint_num_gpus=_float(spec.get("entrypointNumGpus")),
        entrypoint_resources=_resources(spec.get("entrypointResources")),
        backoff_limit=int(spec.get("backoffLimit") or 0),
        active_deadline_s=spec.get("activeDeadlineSeconds"),
        pre_running_deadline_s=spec.get("preRunningDeadlineSeconds"),
        suspend=spec.get("suspend") is True,
        shutdown_after_finish=spec.get("shutdownAfterJobFinishes") is True,
        ttl_after_finished_s=int(spec.get("ttlSecondsAfterFinished") or 0),
        deletion_rules=rules,
        legacy_on_success=(strategy.get("onSuccess") or {}).get("policy"),
        legacy_on_failure=(strategy.get("onFailure") or {}).get("policy"),
        run_id=run_id,
        labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
    )
