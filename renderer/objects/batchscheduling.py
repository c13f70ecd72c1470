"""Batch schedulers and Kueue: the PodGroups and pod metadata of KubeRay's scheduler plugins.

Owns what `--batch-scheduler` (KubeRay's operator flag) and Kueue plain-pod groups add to
a rendered cluster (reference batch-schedulers.md §2, §3.2, §5): applied last, after every
other build step, the way KubeRay's `AddMetadataToChildResource` runs after the pod is built.

- volcano: a `scheduling.volcano.sh/v1beta1` PodGroup `ray-<cluster | RayJob>-pg`, and on
  every pod `schedulerName: volcano`, the group-name and task-spec annotations and the
  queue / priority labels copied from the parent;
- yunikorn: no object; `schedulerName`, `applicationId` / `queue` and, with the gang key,
  the task-groups JSON as Go's `json.Marshal` writes it;
- scheduler-plugins: with the gang key a `scheduling.x-k8s.io/v1alpha1` PodGroup `<C>` and
  the pod-group label; `schedulerName` always;
- kai-scheduler: `schedulerName` and the queue label (KAI's podgrouper needs the CR, §2.4),
  and with `kai_podgroups` (beyond KubeRay) a `scheduling.run.ai/v2alpha2` PodGroup;
- Kueue: the queue, group-name and total-count metadata on every pod of the gang.

Resource sums follow apimachinery: per container requests, then limits for the keys with
no request, summed in order with the first operand's Format, printed canonically. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final

from renderer import naming
from renderer.goformat import go_json, go_string
from renderer.manifest import Manifest
from renderer.model.raycluster import RayCluster
from renderer.model.rayjob import K8S_JOB_MODE, SIDECAR_MODE, RayJobPlan
from renderer.model.schedulers import (
    GANG_KEY,
    HEAD_GROUP,
    KAI,
    KAI_API,
    KAI_POD_GROUP_ANNOTATION,
    KAI_QUEUE_LABEL,
    KAI_SUBGROUP_LABEL,
    KUEUE_GROUP_LABEL,
    KUEUE_PRIORITY_LABEL,
    KUEUE_QUEUE_LABEL,
    KUEUE_SERVING,
    KUEUE_TOTAL_COUNT,
    PLUGINS_API,
    PLUGINS_POD_GROUP_LABEL,
    PLUGINS_SCHEDULER_NAME,
    PRIORITY_CLASS_LABEL,
    SCHEDULER_PLUGINS,
    SUBMITTER_GROUP,
    VOLCANO,
    VOLCANO_API,
    VOLCANO_GROUP_ANNOTATION,
    VOLCANO_QUEUE_LABEL,
    VOLCANO_TASK_SPEC_ANNOTATION,
    VOLCANO_TOPOLOGY_MODE_LABEL,
    VOLCANO_TOPOLOGY_TIER_LABEL,
    YUNIKORN,
    YUNIKORN_APP_ID_LABEL,
    YUNIKORN_POD_APP_ID,
    YUNIKORN_POD_QUEUE,
    YUNIKORN_QUEUE_LABEL,
    YUNIKORN_TASK_GROUP_NAME,
    YUNIKORN_TASK_GROUPS,
    kueue_queue,
)
from renderer.options import RenderOptions
from renderer.quantity import format_quantity, parse_quantity, quantity_format

# Go struct field order of the k8s types inside a YuniKorn task group (core/v1, meta/v1).
_FIELD_ORDER: Final = (
    "nodeAffinity",
    "podAffinity",
    "podAntiAffinity",
    "requiredDuringSchedulingIgnoredDuringExecution",
    "preferredDuringSchedulingIgnoredDuringExecution",
    "nodeSelectorTerms",
    "weight",
    "preference",
    "podAffinityTerm",
    "labelSelector",
    "matchLabels",
    "matchExpressions",
    "matchFields",
    "key",
    "operator",
    "value",
    "values",
    "effect",
    "tolerationSeconds",
    "namespaces",
    "topologyKey",
    "namespaceSelector",
    "matchLabelKeys",
    "mismatchLabelKeys",
)
_RANK: Final = {name: i for i, name in enumerate(_FIELD_ORDER)}
# Keys whose values are Go maps (sorted), not structs.
_MAP_FIELDS: Final = frozenset({"matchLabels"})


# --- Go ResourceList arithmetic --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Quantity:
    """A Kubernetes quantity as Go holds it: exact value and the Format it prints with."""

    value: Fraction
    fmt: str

    def __str__(self) -> str:
        return format_quantity(self.value, self.fmt)


Resources = dict[str, Quantity]


def _quantity(raw: object) -> Quantity:
    return Quantity(parse_quantity(raw) or Fraction(0), quantity_format(raw))


def add_resources(total: Resources, more: Mapping[str, Quantity]) -> Resources:
    """`quotav1.Add`: keys of `total` keep their Format; new keys are copied."""
    out = dict(total)
    for key, quantity in more.items():
        held = out.get(key)
        out[key] = quantity if held is None else Quantity(held.value + quantity.value, held.fmt)
    return out


def scale_resources(resources: Mapping[str, Quantity], times: int) -> Resources:
    """`Quantity.Mul` of every entry."""
    return {k: Quantity(q.value * times, q.fmt) for k, q in resources.items()}


def pod_resources(pod_spec: Manifest) -> Resources:
    """KubeRay's `CalculatePodResource`: containers only, requests first, then limits."""
    total: Resources = {}
    for container in pod_spec.get("containers") or []:
        resources = container.get("resources") or {}
        merged = {str(k): _quantity(v) for k, v in (resources.get("requests") or {}).items()}
        for key, raw in (resources.get("limits") or {}).items():
            merged.setdefault(str(key), _quantity(raw))
        total = add_resources(total, merged)
    return total


def resource_list(resources: Mapping[str, Quantity]) -> dict[str, str]:
    """A ResourceList as YAML holds it: canonical quantity strings."""
    return {key: str(q) for key, q in resources.items()}


@dataclass(frozen=True, slots=True)
class GangSize:
    """`minMember` and `minResources` of a cluster (reference §1 and §2.1)."""

    members: int
    resources: Resources


def _raw_replicas(group: Manifest) -> int:
    raw = group.get("replicas")
    return int(raw) if raw is not None else 0


def _min_replicas(group: Manifest) -> int:
    return int(group.get("minReplicas", 0) or 0)


def _hosts(group: Manifest) -> int:
    return int(group.get("numOfHosts", 1) or 1)


def _clamped(group: Manifest) -> int:
    high_raw = group.get("maxReplicas")
    high = int(high_raw) if high_raw is not None else 2147483647
    low = _min_replicas(group)
    return max(low, min(high, _raw_replicas(group)))


def volcano_gang_size(spec: Manifest) -> GangSize:
    """`calculatePodGroupParams`: desired (clamped count, raw-replica resources) or minimum."""
    autoscaling = spec.get("enableInTreeAutoscaling") is True
    members = 1
    total = pod_resources(spec["headGroupSpec"]["template"].get("spec") or {})
    for group in spec.get("workerGroupSpecs") or []:
        if group.get("suspend") is True:
            continue
        count = _min_replicas(group) if autoscaling else _clamped(group)
        members += count * _hosts(group)
        replicas = _min_replicas(group) if autoscaling else _raw_replicas(group)
        per_pod = pod_resources(group["template"].get("spec") or {})
        total = add_resources(total, scale_resources(per_pod, replicas * _hosts(group)))
    return GangSize(members, total)


# --- YuniKorn task groups -------------------------------------------------------------------


def _go_struct(value: Any, key: str = "") -> str:
    """json.Marshal of a k8s struct decoded from YAML: Go field order, maps sorted."""
    if isinstance(value, dict) and key not in _MAP_FIELDS:
        items = sorted(value.items(), key=lambda kv: (_RANK.get(str(kv[0]), 99), str(kv[0])))
        body = ",".join(f"{go_string(str(k))}:{_go_struct(v, str(k))}" for k, v in items)
        return "{" + body + "}"
    if isinstance(value, list):
        return "[" + ",".join(_go_struct(v, key) for v in value) + "]"
    return go_json(value)


def _task_group(name: str, members: int, pod_spec: Manifest) -> str:
    fields = [f'"minResource":{go_json(resource_list(pod_resources(pod_spec)))}']
    if pod_spec.get("nodeSelector"):
        fields.append(f'"nodeSelector":{go_json(pod_spec["nodeSelector"])}')
    if pod_spec.get("affinity"):
        fields.append(f'"affinity":{_go_struct(pod_spec["affinity"])}')
    fields.append(f'"name":{go_string(name)}')
    if pod_spec.get("tolerations"):
        fields.append(f'"tolerations":{_go_struct(pod_spec["tolerations"])}')
    fields.append(f'"minMember":{members}')
    return "{" + ",".join(fields) + "}"


def yunikorn_task_groups(spec: Manifest, submitter_pod_spec: Manifest | None = None) -> str:
    """The task-groups JSON: head, each group at `minReplicas * numOfHosts` (suspended too)."""
    groups = [_task_group(HEAD_GROUP, 1, spec["headGroupSpec"]["template"].get("spec") or {})]
    for group in spec.get("workerGroupSpecs") or []:
        members = _min_replicas(group) * _hosts(group)
        groups.append(
            _task_group(str(group["groupName"]), members, group["template"].get("spec") or {})
        )
    if submitter_pod_spec is not None:
        groups.append(_task_group(SUBMITTER_GROUP, 1, submitter_pod_spec))
    return "[" + ",".join(groups) + "]"


# --- objects and pod metadata ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Parent:
    """The object KubeRay reads a child's scheduling metadata from (RayCluster or RayJob)."""

    name: str
    namespace: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    # The task-groups JSON the parent gives (YuniKorn), when it gangs.
    task_groups: str = ""


def volcano_pod_group_name(owner: str) -> str:
    """`ray-<owner>-pg`: the RayJob's name for a job's pods, else the RayCluster's."""
    return f"ray-{owner}-pg"


def build_volcano_pod_group(
    name: str, namespace: str, parent: Parent, size: GangSize, labels: Mapping[str, str]
) -> Manifest:
    """The Volcano PodGroup, with no ownerReference and no status (reference §5.2)."""
    spec: Manifest = {
        "minMember": size.members,
        "minResources": resource_list(size.resources),
    }
    if VOLCANO_QUEUE_LABEL in parent.labels:
        spec["queue"] = parent.labels[VOLCANO_QUEUE_LABEL]
    if parent.labels.get(PRIORITY_CLASS_LABEL):
        spec["priorityClassName"] = parent.labels[PRIORITY_CLASS_LABEL]
    if VOLCANO_TOPOLOGY_MODE_LABEL in parent.labels:
        topology: Manifest = {"mode": parent.labels[VOLCANO_TOPOLOGY_MODE_LABEL]}
        tier = parent.labels.get(VOLCANO_TOPOLOGY_TIER_LABEL)
        if tier is not None:
            topology["highestTierAllowed"] = int(tier)  # rules.batchscheduler checked it
        spec["networkTopology"] = topology
    metadata: Manifest = {"name": name, "namespace": namespace, "labels": dict(labels)}
    if parent.annotations:
        metadata["annotations"] = dict(parent.annotations)
    return {"apiVersion": VOLCANO_API, "kind": "PodGroup", "metadata": metadata, "spec": spec}


def build_plugins_pod_group(cluster: RayCluster, labels: Mapping[str, str]) -> Manifest:
    """scheduler-plugins' PodGroup `<C>`: desired count + 1 and desired resources."""
    spec = dict(cluster.spec)
    spec.pop("enableInTreeAutoscaling", None)  # KubeRay's TODO: autoscaling is not considered
    size = volcano_gang_size(spec)
    return {
        "apiVersion": PLUGINS_API,
        "kind": "PodGroup",
        "metadata": {"name": cluster.name, "namespace": cluster.namespace, "labels": dict(labels)},
        "spec": {"minMember": size.members, "minResources": resource_list(size.resources)},
    }


def kai_pod_group_name(cluster: str) -> str:
    """`pg-<cluster>`: KAI's podgrouper prefix, without the owner UID rendered pods lack."""
    return f"pg-{cluster}"


def build_kai_pod_group(cluster: RayCluster, labels: Mapping[str, str]) -> Manifest:
    """Beyond KubeRay: the PodGroup KAI's ray grouper would compute from the CR (§2.4).

    `minMember` = 1 + each group's (`minReplicas` if > 0, else `replicas`) x `numOfHosts`,
    with sub-groups `headgroup` and one per worker group. Suspended groups are left out:
    their pods are not rendered, so counting them (as KAI's `suspended` quirk would) could
    never be satisfied.
    """
    sub_groups: list[Manifest] = [{"name": HEAD_GROUP, "minMember": 1}]
    for group in cluster.spec.get("workerGroupSpecs") or []:
        if group.get("suspend") is True:
            continue
        per_replica = _min_replicas(group) or _raw_replicas(group)
        sub_groups.append(
            {"name": str(group["groupName"]), "minMember": per_replica * _hosts(group)}
        )
    spec: Manifest = {
        "minMember": sum(int(g["minMember"]) for g in sub_groups),
        "subGroups": sub_groups,
    }
    if cluster.labels.get(KAI_QUEUE_LABEL):
        spec["queue"] = cluster.labels[KAI_QUEUE_LABEL]
    if cluster.labels.get(PRIORITY_CLASS_LABEL):
        spec["priorityClassName"] = cluster.labels[PRIORITY_CLASS_LABEL]
    return {
        "apiVersion": KAI_API,
        "kind": "PodGroup",
        "metadata": {
            "name": kai_pod_group_name(cluster.name),
            "namespace": cluster.namespace,
            "labels": dict(labels),
        },
        "spec": spec,
    }


def _add_kai_group(cluster: RayCluster, pods: list[tuple[Manifest, str]]) -> None:
    for pod, group in pods:
        meta = pod["metadata"]
        meta.setdefault("annotations", {})[KAI_POD_GROUP_ANNOTATION] = kai_pod_group_name(
            cluster.name
        )
        meta["labels"][KAI_SUBGROUP_LABEL] = group


def add_pod_metadata(
    scheduler: str, parent: Parent, pod: Manifest, group: str, *, volcano_group: str = ""
) -> None:
    """`AddMetadataToChildResource` of one plugin on a Pod or a pod template."""
    meta = pod.setdefault("metadata", {})
    labels = meta.setdefault("labels", {})
    annotations: Manifest = meta.get("annotations") or {}
    spec = pod.setdefault("spec", {})
    if scheduler == VOLCANO:
        for key in (VOLCANO_QUEUE_LABEL, PRIORITY_CLASS_LABEL):
            if parent.labels.get(key):
                labels[key] = parent.labels[key]
        annotations[VOLCANO_GROUP_ANNOTATION] = volcano_group
        annotations[VOLCANO_TASK_SPEC_ANNOTATION] = group
        spec["schedulerName"] = VOLCANO
    elif scheduler == YUNIKORN:
        spec["schedulerName"] = YUNIKORN
        for source, target in (
            (YUNIKORN_APP_ID_LABEL, YUNIKORN_POD_APP_ID),
            (YUNIKORN_QUEUE_LABEL, YUNIKORN_POD_QUEUE),
        ):
            if parent.labels.get(source):
                labels[target] = parent.labels[source]
        if _gangs(parent):
            annotations[YUNIKORN_TASK_GROUPS] = parent.task_groups
            if group:
                annotations[YUNIKORN_TASK_GROUP_NAME] = group
    elif scheduler == SCHEDULER_PLUGINS:
        spec["schedulerName"] = PLUGINS_SCHEDULER_NAME
        if _gangs(parent):
            labels[PLUGINS_POD_GROUP_LABEL] = parent.name
    elif scheduler == KAI:
        spec["schedulerName"] = KAI
        if parent.labels.get(KAI_QUEUE_LABEL):
            labels[KAI_QUEUE_LABEL] = parent.labels[KAI_QUEUE_LABEL]
    if annotations:
        meta["annotations"] = annotations


def _gangs(parent: Parent) -> bool:
    """KubeRay tests the gang key for presence (so `"false"` also enables it)."""
    return GANG_KEY in parent.labels


def ray_pods(objects: Iterable[Manifest]) -> list[tuple[Manifest, str]]:
    """The Ray pods among `objects`, with their task group (`headgroup` or the group name)."""
    out: list[tuple[Manifest, str]] = []
    for obj in objects:
        if obj.get("kind") != "Pod":
            continue
        labels = obj["metadata"].get("labels") or {}
        node_type = labels.get(naming.RAY_NODE_TYPE)
        if node_type == "head":
            out.append((obj, HEAD_GROUP))
        elif node_type == "worker":
            out.append((obj, str(labels.get(naming.RAY_GROUP, ""))))
    return out


def add_kueue_group(
    pods: list[Manifest],
    *,
    queue: str,
    group: str,
    source_labels: Mapping[str, str],
    serving: bool = False,
) -> None:
    """Kueue's plain-pod-group metadata on every pod (or template) of one gang."""
    count = str(len(pods))
    for pod in pods:
        meta = pod.setdefault("metadata", {})
        labels = meta.setdefault("labels", {})
        labels[KUEUE_QUEUE_LABEL] = queue
        labels[KUEUE_GROUP_LABEL] = group
        if source_labels.get(KUEUE_PRIORITY_LABEL):
            labels[KUEUE_PRIORITY_LABEL] = source_labels[KUEUE_PRIORITY_LABEL]
        annotations = meta.setdefault("annotations", {})
        annotations[KUEUE_TOTAL_COUNT] = count
        if serving:
            annotations[KUEUE_SERVING] = "true"


def apply_to_cluster(
    cluster: RayCluster, objects: list[Manifest], options: RenderOptions, *, serving: bool = False
) -> list[Manifest]:
    """A standalone RayCluster or a RayService generation: PodGroup and pod metadata."""
    scheduler = options.batch_scheduler
    pods = ray_pods(objects)
    extra: list[Manifest] = []
    if scheduler and not cluster.suspended:
        parent = Parent(
            cluster.name,
            cluster.namespace,
            cluster.labels,
            cluster.annotations,
            task_groups=_cluster_task_groups(cluster),
        )
        group_name = volcano_pod_group_name(cluster.name)
        if scheduler == VOLCANO:
            size = volcano_gang_size(cluster.spec)
            extra.append(
                build_volcano_pod_group(
                    group_name, cluster.namespace, parent, size, cluster.source_labels
                )
            )
        elif scheduler == SCHEDULER_PLUGINS and _gangs(parent):
            extra.append(build_plugins_pod_group(cluster, cluster.source_labels))
        elif scheduler == KAI and options.kai_podgroups:
            extra.append(build_kai_pod_group(cluster, cluster.source_labels))
            _add_kai_group(cluster, pods)
        for pod, group in pods:
            add_pod_metadata(scheduler, parent, pod, group, volcano_group=group_name)
    queue = kueue_queue(cluster.labels, options)
    if queue and pods:
        add_kueue_group(
            [pod for pod, _ in pods],
            queue=queue,
            group=cluster.name,
            source_labels=cluster.labels,
            serving=serving,
        )
    return extra + objects


def _cluster_task_groups(cluster: RayCluster) -> str:
    given = cluster.annotations.get(YUNIKORN_TASK_GROUPS)
    return str(given) if given else yunikorn_task_groups(cluster.spec)


# KubeRay's default submitter container resources (rayjob.md §3.1): requests win.
_DEFAULT_SUBMITTER_POD: Final = {
    "containers": [
        {
            "resources": {
                "requests": {"cpu": "500m", "memory": "200Mi"},
                "limits": {"cpu": "1", "memory": "1Gi"},
            }
        }
    ]
}


def submitter_pod_spec(plan: RayJobPlan) -> Manifest:
    """`GetSubmitterTemplate(...).Spec` as KubeRay sizes it: the user's template, or the default."""
    template = plan.spec.get("submitterPodTemplate")
    if template is not None:
        return dict(template.get("spec") or {})
    return _DEFAULT_SUBMITTER_POD


def _submitter_template(objects: list[Manifest], plan: RayJobPlan) -> Manifest | None:
    for obj in objects:
        if obj.get("kind") == "Job" and obj["metadata"].get("name") == plan.name:
            template: Manifest = obj["spec"]["template"]
            return template
    return None


def apply_to_job(
    plan: RayJobPlan, cluster: RayCluster | None, objects: list[Manifest], options: RenderOptions
) -> list[Manifest]:
    """A RayJob: the job's PodGroup (Volcano), cluster pod and submitter metadata, Kueue."""
    scheduler = options.batch_scheduler
    pods = ray_pods(objects)
    submitter = _submitter_template(objects, plan)
    extra: list[Manifest] = []
    job_spec = plan.spec.get("rayClusterSpec")
    if scheduler and not plan.suspended:
        given = plan.annotations.get(YUNIKORN_TASK_GROUPS)
        job_groups = ""
        if scheduler == YUNIKORN and GANG_KEY in plan.labels:
            job_groups = (
                str(given)
                if given
                else yunikorn_task_groups(job_spec or {}, submitter_pod_spec(plan))
            )
        job_parent = Parent(
            plan.name, plan.namespace, plan.labels, plan.annotations, task_groups=job_groups
        )
        group_name = volcano_pod_group_name(plan.name)
        if scheduler == VOLCANO and job_spec is not None:
            size = volcano_gang_size(job_spec)
            # The submitter counts in minResources, not in minMember (no startup deadlock).
            submitter_spec = {K8S_JOB_MODE: submitter_pod_spec(plan)}.get(
                plan.mode, _DEFAULT_SUBMITTER_POD if plan.mode == SIDECAR_MODE else None
            )
            if submitter_spec is not None:
                more = pod_resources(submitter_spec)
                size = GangSize(size.members, add_resources(size.resources, more))
            extra.append(
                build_volcano_pod_group(
                    group_name, plan.namespace, job_parent, size, plan.source_labels
                )
            )
        if cluster is not None:
            cluster_groups = ""
            if scheduler == YUNIKORN:
                own = cluster.annotations.get(YUNIKORN_TASK_GROUPS)
                if own:
                    cluster_groups = str(own)
                elif plan.mode == K8S_JOB_MODE and job_groups:
                    cluster_groups = job_groups  # the RayJob gave the CR its JSON
                else:
                    cluster_groups = yunikorn_task_groups(cluster.spec)
            cluster_parent = Parent(
                cluster.name,
                cluster.namespace,
                cluster.labels,
                cluster.annotations,
                task_groups=cluster_groups,
            )
            if scheduler == KAI and options.kai_podgroups:
                # The submitter (SidecarMode: a head container; K8sJobMode is refused) stays out.
                extra.append(build_kai_pod_group(cluster, plan.source_labels))
                _add_kai_group(cluster, pods)
            for pod, group in pods:
                add_pod_metadata(scheduler, cluster_parent, pod, group, volcano_group=group_name)
        if submitter is not None:
            add_pod_metadata(
                scheduler, job_parent, submitter, SUBMITTER_GROUP, volcano_group=group_name
            )
    queue = kueue_queue(plan.labels, options)
    members = [pod for pod, _ in pods] + ([submitter] if submitter is not None else [])
    if queue and pods:
        add_kueue_group(members, queue=queue, group=plan.cluster_name, source_labels=plan.labels)
    return extra + objects
