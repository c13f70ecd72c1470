"""The intent ConfigMap `<name>-kuberay-intent`: the only place the renderer writes the contract.

For a RayJob or RayService, the ConfigMap (label `kuberay.io/role: intent`) holds under the
key `intent.json` canonical JSON (sorted keys, no whitespace) of what git asked for and
what the renderer derived from it; the syncer reads it instead of git. The shapes, the
version and the key are `schemas.intent`'s (`RayJobIntent`, `RayServiceIntent`). Pure.
"""

from __future__ import annotations

import json

from renderer import naming
from renderer.manifest import Manifest
from renderer.model.rayjob import (
    HTTP_MODE,
    K8S_JOB_MODE,
    SIDECAR_MODE,
    RayJobPlan,
    RenderedCluster,
    runtime_env_json,
)
from renderer.model.rayservice import RayServicePlan, route_port
from renderer.objects import autoscaling, gateway
from renderer.options import RenderOptions
from schemas.intent import (
    ANN_PROGRESS_DEADLINE,
    ANN_UPGRADE_PAUSED,
    DEFAULT_DELETION_DELAY,
    INTENT_VERSION,
    NONE,
    RAYJOB,
    RAYSERVICE,
    Generation,
    IntentMetadata,
    RayJobDerived,
    RayJobIntent,
    RayServiceDerived,
    RayServiceIntent,
    Routing,
    Upgrade,
)


def _configmap(
    name: str, namespace: str, labels: dict[str, str], intent: RayJobIntent | RayServiceIntent
) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": naming.intent_configmap_name(name),
            "namespace": namespace,
            "labels": labels,
        },
        "data": {naming.INTENT_KEY: naming.canonical_json(intent)},
    }


# --- RayJob ---------------------------------------------------------------------------------


def rayjob_derived(
    plan: RayJobPlan,
    cluster: RenderedCluster | None,
    *,
    head_service: str,
    dashboard_url: str,
    submitter_job: bool,
    submitter_container: str,
) -> RayJobDerived:
    """What the renderer derived for a RayJob: names, mode, runtime env.

    The runtime env (whose `env_vars` may hold credentials, and which anyone who may read
    ConfigMaps can read here) only when the syncer submits over HTTP: HTTPMode, or the
    retries of a K8sJobMode/SidecarMode job with a `backoffLimit` (security review L7).
    """
    runtime_env = runtime_env_json(plan.spec) if syncer_submits(plan) else None
    return {
        "submissionMode": plan.mode,
        "clusterName": plan.cluster_name,
        "clusterRendered": cluster is not None,
        "submissionId": plan.submission_id,
        "headServiceName": head_service,
        "jobHeadServiceName": cluster.job_head_service if cluster else None,
        "dashboardURL": f"http://{dashboard_url}",
        "submitterJobName": plan.name if submitter_job else None,
        "submitterContainerName": (
            submitter_container if plan.mode == SIDECAR_MODE and cluster else None
        ),
        "headPodName": cluster.head_pod if cluster else None,
        "workerPodNames": cluster.worker_pods if cluster else [],
        "runtimeEnv": None if runtime_env is None else json.loads(runtime_env),
    }


def syncer_submits(plan: RayJobPlan) -> bool:
    """Whether the syncer may submit this job itself (and so needs its runtime env)."""
    if plan.mode == HTTP_MODE:
        return True
    retries = plan.spec.get("backoffLimit")
    has_retries = isinstance(retries, int) and not isinstance(retries, bool) and retries > 0
    return plan.mode in (K8S_JOB_MODE, SIDECAR_MODE) and has_retries


# Not copied into the intent: the cluster has its own objects, and the runtime env is
# `derived.runtimeEnv` (decoded, and only when the syncer needs it).
_NOT_IN_INTENT = frozenset({"rayClusterSpec", "runtimeEnvYAML"})


def build_rayjob_intent(plan: RayJobPlan, derived: RayJobDerived) -> Manifest:
    """The intent ConfigMap of a RayJob: its spec (less `_NOT_IN_INTENT`), and `derived`."""
    metadata: IntentMetadata = {
        "name": plan.name,
        "namespace": plan.namespace,
        "labels": plan.labels,
        "annotations": plan.annotations,
    }
    intent: RayJobIntent = {
        "version": INTENT_VERSION,
        "kind": RAYJOB,
        "metadata": metadata,
        "spec": {k: v for k, v in plan.spec.items() if k not in _NOT_IN_INTENT},
        "derived": derived,
    }
    labels = {**plan.source_labels, naming.ROLE: naming.ROLE_INTENT}
    return _configmap(plan.name, plan.namespace, labels, intent)


# --- RayService -----------------------------------------------------------------------------


def _upgrade(service: RayServicePlan) -> Upgrade:
    delay = service.spec.get("rayClusterDeletionDelaySeconds")
    deadline = service.annotations.get(ANN_PROGRESS_DEADLINE)
    routing: Routing | None = None
    if service.incremental:
        options = service.spec["upgradeStrategy"]["clusterUpgradeOptions"]
        routing = {
            "gatewayName": gateway.gateway_name(service.name),
            "httpRouteName": gateway.httproute_name(service.name),
            "currentGeneration": service.cluster.name,
            "servePort": route_port(service.cluster),
            "stepSizePercent": options["stepSizePercent"],
            "intervalSeconds": options["intervalSeconds"],
            "maxSurgePercent": options.get("maxSurgePercent", 100),
        }
    return {
        "type": service.strategy,
        "paused": service.annotations.get(ANN_UPGRADE_PAUSED) == "true",
        "progressDeadlineSeconds": int(deadline) if deadline is not None else None,
        "rayClusterDeletionDelaySeconds": DEFAULT_DELETION_DELAY if delay is None else delay,
        "routing": routing,
    }


def _node_type(pod: Manifest) -> str:
    return str(pod["metadata"]["labels"].get(naming.RAY_NODE_TYPE, ""))


def _generation(
    service: RayServicePlan, options: RenderOptions, objects: list[Manifest]
) -> Generation:
    cluster = service.cluster
    # Autoscaled worker templates have no name yet: the syncer names those Pods.
    pods = [o for o in objects if o["kind"] == "Pod" and not autoscaling.is_template(o)]
    head = [p["metadata"]["name"] for p in pods if _node_type(p) == "head"]
    dashboard = cluster.service_ports["dashboard"]
    return {
        "name": cluster.name,
        "hash": service.hash,
        "headServiceName": cluster.head_service_name,
        "dashboardURL": f"http://{cluster.fqdn(options)}:{dashboard}",
        "serveConfigMapName": naming.serve_config_name(cluster.name),
        "serveServiceName": (
            naming.serve_service_name(cluster.name) if service.incremental else None
        ),
        "servePort": route_port(cluster),
        "headPodName": head[0] if head else None,
        "workerPodNames": [p["metadata"]["name"] for p in pods if _node_type(p) == "worker"],
        "pruneProtected": service.strategy != NONE,
    }


def build_rayservice_intent(
    service: RayServicePlan,
    options: RenderOptions,
    generation_objects: list[Manifest] | None,
    serve_service: str | None,
) -> Manifest:
    """The intent ConfigMap of a RayService; no generation when it is suspended."""
    metadata: IntentMetadata = {
        "name": service.name,
        "namespace": service.namespace,
        "labels": service.labels,
        "annotations": service.annotations,
    }
    derived: RayServiceDerived = {
        "generation": (
            None
            if generation_objects is None
            else _generation(service, options, generation_objects)
        ),
        "headServiceName": naming.head_service_name(service.name),
        "serveServiceName": serve_service,
        "upgrade": _upgrade(service),
    }
    intent: RayServiceIntent = {
        "version": INTENT_VERSION,
        "kind": RAYSERVICE,
        "metadata": metadata,
        "spec": {k: v for k, v in service.spec.items() if k != "rayClusterConfig"},
        "derived": derived,
    }
    labels = {naming.ROLE: naming.ROLE_INTENT, **service.source_labels}
    return _configmap(service.name, service.namespace, labels, intent)
