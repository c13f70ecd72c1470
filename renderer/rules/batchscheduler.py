"""The batch-scheduler and Kueue refusals: combinations KubeRay v1.7 fails or cannot render.

KubeRay leaves a RayJob in `Initializing`, erroring every 3 s, for RayJob + scheduler-plugins,
RayJob K8sJobMode + KAI and RayJob `clusterSelector` + Volcano; YuniKorn's gang mode would
dereference the selected job's missing cluster spec (reference batch-schedulers.md §0.4,
§5.2). The renderer refuses each with one line that names the combination. Also: Volcano's
network-topology tier must be an integer, KAI without a queue label stays pending (a
warning), and a Kueue queue must be able to name a LocalQueue. Pure: `Problem`s out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from renderer import k8snames
from renderer.errors import JsonPath, Problem
from renderer.manifest import Manifest
from renderer.model import schedulers as bs
from renderer.options import RenderOptions

if TYPE_CHECKING:  # a type only: a RayCluster render does not load the RayJob model
    from renderer.model.rayjob import RayJobPlan


def _labels_path(key: str) -> tuple[str, ...]:
    return ("metadata", "labels", key)


def check_parent(labels: Mapping[str, str], options: RenderOptions) -> list[Problem]:
    """Rules on the labels KubeRay's plugins read from a RayCluster or RayJob."""
    problems: list[Problem] = []
    scheduler = options.batch_scheduler
    if scheduler == bs.VOLCANO and bs.VOLCANO_TOPOLOGY_MODE_LABEL in labels:
        tier = labels.get(bs.VOLCANO_TOPOLOGY_TIER_LABEL)
        if tier is not None:
            try:
                int(str(tier), 10)
            except ValueError:
                problems.append(
                    Problem(
                        _labels_path(bs.VOLCANO_TOPOLOGY_TIER_LABEL),
                        f"{bs.VOLCANO_TOPOLOGY_TIER_LABEL} must be an integer under "
                        f"--batch-scheduler volcano, got {tier!r} (KubeRay does not create "
                        "the PodGroup)",
                    )
                )
    if scheduler == bs.KAI and not labels.get(bs.KAI_QUEUE_LABEL):
        problems.append(
            Problem(
                ("metadata", "labels"),
                f"--batch-scheduler kai-scheduler: no {bs.KAI_QUEUE_LABEL} label, so the pods "
                "stay pending (KubeRay: Queue label missing from parent)",
                "warning",
            )
        )
    return problems


def check_kueue(
    labels: Mapping[str, str],
    options: RenderOptions,
    cluster_spec: Manifest | None = None,
    *,
    submitter: bool = False,
    spec_path: JsonPath = ("spec",),
) -> list[Problem]:
    """Kueue's plain-pod-group names: the queue must be able to name a LocalQueue.

    The group name (the cluster's, which becomes the Workload's) needs no check of its own:
    KubeRay's name rule already requires a DNS-1035 label, which is a DNS-1123 subdomain.
    """
    queue = bs.kueue_queue(labels, options)
    if not queue:
        return []
    problems: list[Problem] = []
    errors = k8snames.dns1123_subdomain_errors(queue)
    if errors:
        from_label = bool(labels.get(bs.KUEUE_QUEUE_LABEL))
        problems.append(
            Problem(
                _labels_path(bs.KUEUE_QUEUE_LABEL) if from_label else ("metadata",),
                f"Kueue queue {queue!r} cannot name a LocalQueue: {errors[0]}",
            )
        )
    if (cluster_spec or {}).get("enableInTreeAutoscaling") is True:
        # A plain-pod group has a fixed total count; the syncer's dynamic workers have none.
        problems.append(
            Problem(
                (*spec_path, "enableInTreeAutoscaling"),
                "Kueue's plain-pod groups need a fixed pod count, which an autoscaled cluster "
                "does not have; remove the Kueue queue or set enableInTreeAutoscaling to false",
            )
        )
    groups = len((cluster_spec or {}).get("workerGroupSpecs") or [])
    roles = 1 + groups + (1 if submitter else 0)
    if roles > bs.KUEUE_MAX_POD_SETS:
        problems.append(
            Problem(
                (*spec_path, "workerGroupSpecs"),
                f"Kueue admits at most {bs.KUEUE_MAX_POD_SETS} pod shapes per group; this "
                f"cluster may have {roles} (head, {groups} worker groups"
                f"{', submitter' if submitter else ''}) unless some groups share a pod shape",
                "warning",
            )
        )
    return problems


def check_rayjob(plan: RayJobPlan, options: RenderOptions) -> list[Problem]:
    """The RayJob combinations KubeRay v1.7 fails, refused with the scheduler named."""
    from renderer.model.rayjob import K8S_JOB_MODE  # loaded with the RayJob kind anyway

    problems = check_parent(plan.labels, options)
    problems.extend(
        check_kueue(
            plan.labels,
            options,
            plan.spec.get("rayClusterSpec"),
            submitter=plan.mode == K8S_JOB_MODE,
            spec_path=("spec", "rayClusterSpec"),
        )
    )
    if (
        bs.kueue_queue(plan.labels, options)
        and plan.renders_cluster
        and plan.spec.get("shutdownAfterJobFinishes") is not True
    ):
        problems.append(
            Problem(
                ("spec",),
                "Kueue: without shutdownAfterJobFinishes the cluster pods keep running after "
                "the job ends, so the group never finishes and holds its quota",
                "warning",
            )
        )
    scheduler = options.batch_scheduler
    if not scheduler or plan.suspended:
        return problems
    selector = plan.spec.get("rayClusterSpec") is None
    if scheduler == bs.SCHEDULER_PLUGINS:
        problems.append(
            Problem(
                ("kind",),
                "--batch-scheduler scheduler-plugins does not support RayJob: KubeRay v1.7 "
                'fails it with "currently only RayCluster is supported, got *v1.RayJob"; '
                "render the cluster as a RayCluster, or use volcano or yunikorn",
            )
        )
    elif scheduler == bs.KAI and plan.mode == K8S_JOB_MODE:
        problems.append(
            Problem(
                ("spec", "submissionMode"),
                "--batch-scheduler kai-scheduler does not support RayJob with K8sJobMode: the "
                "submitter pod is created after RayCluster is ready, preventing proper gang "
                "scheduling; use SidecarMode or HTTPMode",
            )
        )
    elif scheduler == bs.VOLCANO and selector:
        problems.append(
            Problem(
                ("spec", "clusterSelector"),
                f"--batch-scheduler volcano: gang scheduling does not support RayJob "
                f"{plan.namespace}/{plan.name} referencing an existing RayCluster "
                "(clusterSelector)",
            )
        )
    elif (
        scheduler == bs.YUNIKORN
        and selector
        and bs.GANG_KEY in plan.labels
        and not plan.annotations.get(bs.YUNIKORN_TASK_GROUPS)
    ):
        problems.append(
            Problem(
                ("spec", "clusterSelector"),
                f"--batch-scheduler yunikorn with {bs.GANG_KEY}: a RayJob with clusterSelector "
                f"has no cluster spec to build task groups from (KubeRay would crash); set "
                f"{bs.YUNIKORN_TASK_GROUPS} on the RayJob or drop the gang label",
            )
        )
    return problems
