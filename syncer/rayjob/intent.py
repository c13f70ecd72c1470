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
from syncer import trust
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
    if isinstance(value, bool) or not isinstance(value, (int, float, str, type(None))):
        return 0.0
    try:
        number = float(value or 0)
    except (TypeError, ValueError, OverflowError):
        return 0.0
    return number if 0.0 <= number <= trust.MAX_INT else 0.0


def _resources(text: Any) -> dict[str, float] | None:
    if not text:
        return None
    try:
        decoded = json.loads(str(text))
    except (ValueError, RecursionError):
        return None
    if not isinstance(decoded, dict):
        return None
    return {str(k): _float(v) for k, v in decoded.items()}


def _optional_str(value: Any, path: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise IntentError(f"{path} in the intent is not a string")
    return value


def _optional_int(value: Any, path: str) -> int | None:
    return None if value is None else trust.integer(value, path)


def _rule(value: Any) -> DeletionRule:
    rule = trust.obj(value, "spec.deletionStrategy.deletionRules[]")
    condition = trust.obj(rule.get("condition"), "deletionRules[].condition")
    return DeletionRule(
        policy=str(rule.get("policy")),
        job_status=_optional_str(condition.get("jobStatus"), "condition.jobStatus"),
        deployment_status=_optional_str(
            condition.get("jobDeploymentStatus"), "condition.jobDeploymentStatus"
        ),
        ttl_s=trust.integer(condition.get("ttlSeconds"), "condition.ttlSeconds"),
    )


def parse_job_intent(config_map: Manifest, *, cluster_domain: str = "cluster.local") -> JobIntent:
    """Read a RayJob intent ConfigMap; raises IntentError for every shape it cannot act on.

    Namespace and name come from the ConfigMap (`syncer.trust`), never from the payload;
    the dashboard URL is rebuilt from the head Service name in that namespace.
    """
    try:
        return _parse(config_map, cluster_domain)
    except IntentError:
        raise
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as exc:
        raise IntentError(f"malformed RayJob intent: {type(exc).__name__}: {exc}") from exc


def _parse(config_map: Manifest, cluster_domain: str) -> JobIntent:
    namespace, name, intent = trust.load_payload(config_map, "RayJob")
    meta = trust.obj(intent.get("metadata"), "metadata")
    spec = trust.obj(intent.get("spec"), "spec")
    derived = trust.obj(intent.get("derived"), "derived")
    strategy = trust.obj(spec.get("deletionStrategy"), "spec.deletionStrategy")
    rules = None
    raw_rules = strategy.get("deletionRules")
    if raw_rules:
        if not isinstance(raw_rules, list):
            raise IntentError("spec.deletionStrategy.deletionRules is not a list")
        rules = tuple(_rule(rule) for rule in raw_rules)
    live_annotations = (config_map.get("metadata") or {}).get("annotations") or {}
    if not isinstance(live_annotations, dict):
        live_annotations = {}
    submission_id = _optional_str(
        derived.get("submissionId") or spec.get("jobId"), "derived.submissionId"
    )
    if submission_id is None and derived.get("submissionMode") == "InteractiveMode":
        submission_id = _optional_str(live_annotations.get(JOB_ID_ANNOTATION), "job-id")
    run_id = "/".join(
        str(x)
        for x in (derived.get("clusterName"), derived.get("submissionId"), spec.get("suspend"))
    )
    cluster_name = _optional_str(derived.get("clusterName"), "derived.clusterName") or ""
    head_service = _optional_str(
        derived.get("headServiceName"), "derived.headServiceName"
    ) or naming.head_service_name(cluster_name)
    dashboard_url = (
        trust.dashboard_url(namespace, head_service, derived.get("dashboardURL"), cluster_domain)
        if cluster_name
        else ""
    )
    workers = derived.get("workerPodNames") or ()
    if not isinstance(workers, (list, tuple)) or not all(isinstance(w, str) for w in workers):
        raise IntentError("derived.workerPodNames is not a list of names")
    runtime_env = derived.get("runtimeEnv")
    if runtime_env is not None and not isinstance(runtime_env, dict):
        raise IntentError("derived.runtimeEnv is not an object")
    labels = trust.obj(meta.get("labels"), "metadata.labels")
    return JobIntent(
        namespace=namespace,
        name=name,
        mode=str(derived.get("submissionMode") or "K8sJobMode"),
        cluster_name=cluster_name,
        cluster_rendered=bool(derived.get("clusterRendered")),
        uses_selector=bool(spec.get("clusterSelector")),
        submission_id=submission_id,
        dashboard_url=dashboard_url,
        submitter_job=_optional_str(derived.get("submitterJobName"), "derived.submitterJobName"),
        submitter_container=_optional_str(
            derived.get("submitterContainerName"), "derived.submitterContainerName"
        ),
        head_pod=_optional_str(derived.get("headPodName"), "derived.headPodName"),
        worker_pods=tuple(workers),
        entrypoint=str(spec.get("entrypoint") or ""),
        runtime_env=runtime_env,
        metadata={
            str(k): str(v) for k, v in trust.obj(spec.get("metadata"), "spec.metadata").items()
        },
        entrypoint_num_cpus=_float(spec.get("entrypointNumCpus")),
        entrypoint_num_gpus=_float(spec.get("entrypointNumGpus")),
        entrypoint_resources=_resources(spec.get("entrypointResources")),
        backoff_limit=trust.integer(spec.get("backoffLimit"), "spec.backoffLimit"),
        active_deadline_s=_optional_int(
            spec.get("activeDeadlineSeconds"), "spec.activeDeadlineSeconds"
        ),
        pre_running_deadline_s=_optional_int(
            spec.get("preRunningDeadlineSeconds"), "spec.preRunningDeadlineSeconds"
        ),
        suspend=spec.get("suspend") is True,
        shutdown_after_finish=spec.get("shutdownAfterJobFinishes") is True,
        ttl_after_finished_s=trust.integer(
            spec.get("ttlSecondsAfterFinished"), "spec.ttlSecondsAfterFinished"
        ),
        deletion_rules=rules,
        legacy_on_success=_optional_str(
            trust.obj(strategy.get("onSuccess"), "onSuccess").get("policy"), "onSuccess.policy"
        ),
        legacy_on_failure=_optional_str(
            trust.obj(strategy.get("onFailure"), "onFailure").get("policy"), "onFailure.policy"
        ),
        run_id=run_id,
        labels={str(k): str(v) for k, v in labels.items()},
    )
