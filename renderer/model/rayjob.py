"""The RayJob model: a checked RayJob with the names KubeRay would draw at random, made stable.

The cluster `<job>-<h>` and the submission ID `<job>-<h'>` are base-36 hashes of the job
spec (CRD defaults applied) and of the `kuberay.io/run` annotation (DESIGN §2);
`job_cluster` is the RayCluster KubeRay would create for the job (rayjob.md §2.2). Pure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from renderer import naming, yamltext
from renderer.errors import JsonPath
from renderer.goformat import go_json
from renderer.manifest import Manifest
from renderer.model.document import document_namespace
from renderer.model.raycluster import RayCluster, parse_raycluster
from renderer.options import RenderOptions
from schemas.intent import RAYJOB

K8S_JOB_MODE: Final = "K8sJobMode"
HTTP_MODE: Final = "HTTPMode"
INTERACTIVE_MODE: Final = "InteractiveMode"
SIDECAR_MODE: Final = "SidecarMode"
MODES: Final = (K8S_JOB_MODE, HTTP_MODE, INTERACTIVE_MODE, SIDECAR_MODE)
CLUSTER_SELECTOR_KEY: Final = naming.RAY_CLUSTER
# CRD defaults of the top-level fields, applied before hashing so that writing a default
# out does not start a new run.
_SPEC_DEFAULTS: Final = {
    "submissionMode": K8S_JOB_MODE,
    "backoffLimit": 0,
    "ttlSecondsAfterFinished": 0,
}


@dataclass(frozen=True, slots=True)
class RayJobPlan:
    """A checked RayJob with its derived names (DESIGN §2)."""

    name: str
    namespace: str
    labels: dict[str, str]
    annotations: dict[str, str]
    spec: Manifest
    mode: str
    cluster_name: str
    submission_id: str | None
    selector_cluster: str | None

    @property
    def source_labels(self) -> dict[str, str]:
        """The project's labels on every object rendered for this RayJob (DESIGN §1)."""
        return {
            naming.MANAGED_BY: naming.MANAGED_BY_VALUE,
            naming.ORIGIN_KIND: RAYJOB,
            naming.ORIGIN_NAME: self.name,
        }

    @property
    def kuberay_labels(self) -> dict[str, str]:
        """KubeRay's labels on the submitter Job and its Pod template (rayjob.md §2.2)."""
        return {
            naming.RAY_ORIGIN_NAME: self.name,
            naming.RAY_ORIGIN_CRD: RAYJOB,
            naming.APP_CREATED_BY: naming.KUBERAY_OPERATOR,
        }

    @property
    def suspended(self) -> bool:
        """`spec.suspend: true`: KubeRay creates neither cluster nor submitter."""
        return self.spec.get("suspend") is True

    @property
    def renders_cluster(self) -> bool:
        """Whether the job's own cluster is rendered (not with clusterSelector or suspend)."""
        return self.selector_cluster is None and not self.suspended


def run_key(spec: Manifest, annotations: dict[str, str]) -> Manifest:
    """What a run is made of: the spec (CRD defaults applied) and the `kuberay.io/run` value."""
    return {"spec": {**_SPEC_DEFAULTS, **spec}, "run": annotations.get(naming.RUN_ANNOTATION)}


def cluster_name(job: str, spec: Manifest, annotations: dict[str, str]) -> str:
    """`<job>-<h>`: at most 47 + 6 = 53 characters, KubeRay's RayCluster name limit."""
    return f"{job}-{naming.content_hash({'object': 'cluster', **run_key(spec, annotations)})}"


def submission_id(job: str, spec: Manifest, annotations: dict[str, str]) -> str:
    """`<job>-<h'>`, a hash independent of the cluster's."""
    key = {"object": "submission", **run_key(spec, annotations)}
    return f"{job}-{naming.content_hash(key)}"


def parse_rayjob(doc: Manifest, options: RenderOptions) -> RayJobPlan:
    """Derive the names of a checked RayJob."""
    meta = doc["metadata"]
    spec: Manifest = doc["spec"]
    name = str(meta["name"])
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
    mode = str(spec.get("submissionMode") or K8S_JOB_MODE)
    selector = spec.get("clusterSelector") or {}
    selected = str(selector[CLUSTER_SELECTOR_KEY]) if selector.get(CLUSTER_SELECTOR_KEY) else None
    job_id = spec.get("jobId")
    if job_id:
        submission: str | None = str(job_id)
    elif mode == INTERACTIVE_MODE:
        submission = None
    else:
        submission = submission_id(name, spec, annotations)
    return RayJobPlan(
        name=name,
        namespace=document_namespace(doc, options),
        labels=labels,
        annotations=annotations,
        spec=spec,
        mode=mode,
        cluster_name=selected or cluster_name(name, spec, annotations),
        submission_id=submission,
        selector_cluster=selected,
    )


def job_cluster(
    plan: RayJobPlan,
    cluster_spec: Manifest,
    *,
    start_wrapper: Callable[[str], str] | None = None,
    annotations: dict[str, str] | None = None,
) -> RayCluster:
    """The RayCluster KubeRay would create for the job (§2.2), from `cluster_spec`."""
    labels = {
        **plan.labels,
        naming.RAY_ORIGIN_NAME: plan.name,
        naming.RAY_ORIGIN_CRD: RAYJOB,
        naming.RAY_JOB_SUBMISSION_MODE: plan.mode,
    }
    return parse_raycluster(
        plan.cluster_name,
        plan.namespace,
        cluster_spec,
        labels=labels,
        annotations=dict(plan.annotations) if annotations is None else annotations,
        creator=RAYJOB,
        origin_kind=RAYJOB,
        origin_name=plan.name,
        start_wrapper=start_wrapper,
        restart_policy="Never",
    )


@dataclass(frozen=True, slots=True)
class RenderedCluster:
    """What the submitter and the intent need to know about the job's rendered cluster."""

    objects: list[Manifest]
    head_service: str
    dashboard_port: int
    job_head_service: str | None
    head_pod: str | None
    worker_pods: list[str]


def group_templates(cluster_spec: Manifest) -> list[tuple[JsonPath, Manifest]]:
    """The head group and every worker group of `rayClusterSpec`, with their paths."""
    base: JsonPath = ("spec", "rayClusterSpec")
    groups = [((*base, "headGroupSpec"), cluster_spec["headGroupSpec"])]
    groups.extend(
        ((*base, "workerGroupSpecs", i), group)
        for i, group in enumerate(cluster_spec.get("workerGroupSpecs") or [])
    )
    return groups


def runtime_env_json(spec: Manifest) -> str | None:
    """`runtimeEnvYAML` as KubeRay's YAMLToJSON gives it; None when the field is empty.

    Raises:
        GoJsonError: when it holds a number Go cannot encode.
        yamltext.YAMLError: when it is not YAML.
    """
    text = str(spec.get("runtimeEnvYAML") or "")
    return go_json(yamltext.load(text)) if text else None
