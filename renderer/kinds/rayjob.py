"""The RayJob pipeline: its cluster, submitter, job head Service and intent (rayjob.md §2-§3).

`check -> parse -> check_model -> build`, run by `kinds.pipeline.run`. The cluster's Pods
run `ray start` under the shutdown wrapper (`objects.wrapper`); the submitter is a Job
(K8sJobMode) or a head-Pod container (SidecarMode); the intent tells the syncer the rest.
Pure: no clock, environment or I/O.
"""

from __future__ import annotations

from typing import Final

from renderer import naming
from renderer.errors import Problem, has_error
from renderer.kinds.pipeline import Built, Kind
from renderer.manifest import Manifest, clone
from renderer.model.raycluster import DEFAULT_DASHBOARD_PORT, RayCluster
from renderer.model.rayjob import (
    K8S_JOB_MODE,
    SIDECAR_MODE,
    RayJobPlan,
    RenderedCluster,
    job_cluster,
    parse_rayjob,
)
from renderer.model.schedulers import wants_scheduling
from renderer.objects import autoscaling, intent, services, submitter, wrapper
from renderer.objects import cluster as cluster_objects
from renderer.options import RenderOptions
from renderer.rules import batchscheduler as batch_rules
from renderer.rules import raycluster as cluster_rules
from renderer.rules import rayjob as rules

ANN_DISABLE_HEAD_RESTART: Final = "ray.io/disable-provisioned-head-restart"


def check(doc: Manifest, options: RenderOptions) -> list[Problem]:
    """KubeRay's RayJob rules on the document (and the RayCluster rules on its cluster)."""
    return rules.check_rayjob(doc, options)


def parse(doc: Manifest, options: RenderOptions) -> RayJobPlan:
    """The RayJob model: the job with its derived cluster and submission names."""
    return parse_rayjob(doc, options)


def check_model(plan: RayJobPlan, options: RenderOptions) -> list[Problem]:
    """The renderer's refusals for the job, then KubeRay's reconcile-time cluster checks."""
    problems = rules.check_plan(plan, options) + batch_rules.check_rayjob(plan, options)
    if has_error(problems) or not plan.renders_cluster:
        return problems
    return problems + cluster_rules.check_parsed_cluster(
        job_cluster(plan, plan.spec["rayClusterSpec"])
    )


def _cluster(plan: RayJobPlan, options: RenderOptions) -> RayCluster:
    """The job's cluster as built: podinfo volume, wrapper, and in SidecarMode the submitter."""
    cluster_spec: Manifest = clone(plan.spec["rayClusterSpec"])
    wrapper.add_podinfo(cluster_spec)
    annotations = dict(plan.annotations)
    if plan.mode == SIDECAR_MODE:  # the submitter joins the head Pod (§3.3)
        head_pod = cluster_spec["headGroupSpec"]["template"]["spec"]
        head_pod["containers"].append(submitter.build_sidecar_submitter(plan, options))
        head_pod["restartPolicy"] = "Never"
        annotations[ANN_DISABLE_HEAD_RESTART] = "true"
    return job_cluster(
        plan, cluster_spec, start_wrapper=wrapper.wrap_ray_start, annotations=annotations
    )


def _dashboard_port(service: Manifest) -> int | None:
    for port in service["spec"].get("ports") or []:
        if port.get("name") == "dashboard":
            return int(port["port"])
    return None


def _pod_names(objects: list[Manifest], node_type: str) -> list[str]:
    return [
        str(o["metadata"]["name"])
        for o in objects
        if o["kind"] == "Pod"
        and o["metadata"]["labels"].get(naming.RAY_NODE_TYPE) == node_type
        and not autoscaling.is_template(o)  # the syncer names autoscaled workers
    ]


def _build_cluster(
    plan: RayJobPlan, options: RenderOptions
) -> tuple[list[Problem], RenderedCluster | None]:
    """The job's cluster, its wrapper warnings and the RayJob head Service."""
    cluster = _cluster(plan, options)
    built = cluster_objects.build_cluster(cluster, options, job_name=plan.name)
    head_service = cluster.head_service_name
    service = next(
        o for o in built if o["kind"] == "Service" and o["metadata"]["name"] == head_service
    )
    port = _dashboard_port(service)
    problems = rules.check_dashboard_port(port)
    if port is None:
        return problems, None
    problems.extend(rules.check_wrapped(plan.spec["rayClusterSpec"], built))
    job_head_service: str | None = naming.head_service_name(plan.name)
    if job_head_service == head_service:  # a custom head Service name took it already
        job_head_service = None
    else:
        built.append(services.build_job_head_service(plan, service))
    heads = _pod_names(built, "head")
    rendered = RenderedCluster(
        objects=built,
        head_service=head_service,
        dashboard_port=port,
        job_head_service=job_head_service,
        head_pod=heads[0] if heads else None,
        worker_pods=_pod_names(built, "worker"),
    )
    return problems, rendered


def build(plan: RayJobPlan, options: RenderOptions) -> Built:
    """The cluster (unless selected or suspended), the submitter Job and the intent."""
    problems: list[Problem] = []
    rendered: RenderedCluster | None = None
    if plan.renders_cluster:
        problems, rendered = _build_cluster(plan, options)
        if rendered is None:
            return problems, []
    objects = list(rendered.objects) if rendered else []
    head_service = (
        rendered.head_service if rendered else naming.head_service_name(plan.cluster_name)
    )
    port = rendered.dashboard_port if rendered else DEFAULT_DASHBOARD_PORT
    dashboard_url = f"{head_service}.{plan.namespace}.svc.{options.cluster_domain}:{port}"
    submitter_job = plan.mode == K8S_JOB_MODE and not plan.suspended
    if submitter_job:
        objects.append(submitter.build_submitter_job(plan, options, dashboard_url=dashboard_url))
    if wants_scheduling(plan.labels, options):  # that module loads only then (start-up)
        from renderer.objects import batchscheduling

        job_cluster_model = _cluster(plan, options) if rendered else None
        objects = batchscheduling.apply_to_job(plan, job_cluster_model, objects, options)
    derived = intent.rayjob_derived(
        plan,
        rendered,
        head_service=head_service,
        dashboard_url=dashboard_url,
        submitter_job=submitter_job,
        submitter_container=submitter.SUBMITTER_CONTAINER,
    )
    objects.append(intent.build_rayjob_intent(plan, derived))
    return problems, objects


def count_pods(plan: RayJobPlan) -> int:
    """The Pods of the job's own cluster (none with clusterSelector or suspend)."""
    if not plan.renders_cluster:
        return 0
    cluster = job_cluster(plan, plan.spec["rayClusterSpec"])
    return 0 if cluster.suspended else 1 + sum(group.pod_count for group in cluster.workers)


KIND: Kind[RayJobPlan] = Kind(check, parse, check_model, build, count_pods)
