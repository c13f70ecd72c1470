"""The names KubeRay's batch-scheduler plugins and Kueue read and write (batch-schedulers.md).

Constants only (plus the one lookup of a manifest's Kueue queue), shared by
`objects.batchscheduling` (what renders) and `rules.batchscheduler` (what is refused).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from renderer.options import RenderOptions

VOLCANO: Final = "volcano"
YUNIKORN: Final = "yunikorn"
SCHEDULER_PLUGINS: Final = "scheduler-plugins"
KAI: Final = "kai-scheduler"

HEAD_GROUP: Final = "headgroup"
SUBMITTER_GROUP: Final = "submittergroup"
GANG_KEY: Final = "ray.io/gang-scheduling-enabled"
PRIORITY_CLASS_LABEL: Final = "ray.io/priority-class-name"

VOLCANO_API: Final = "scheduling.volcano.sh/v1beta1"
VOLCANO_QUEUE_LABEL: Final = "volcano.sh/queue-name"
VOLCANO_TOPOLOGY_MODE_LABEL: Final = "volcano.sh/network-topology-mode"
VOLCANO_TOPOLOGY_TIER_LABEL: Final = "volcano.sh/network-topology-highest-tier-allowed"
VOLCANO_GROUP_ANNOTATION: Final = "scheduling.k8s.io/group-name"
VOLCANO_TASK_SPEC_ANNOTATION: Final = "volcano.sh/task-spec"

YUNIKORN_APP_ID_LABEL: Final = "yunikorn.apache.org/app-id"
YUNIKORN_QUEUE_LABEL: Final = "yunikorn.apache.org/queue"
YUNIKORN_POD_APP_ID: Final = "applicationId"
YUNIKORN_POD_QUEUE: Final = "queue"
YUNIKORN_TASK_GROUPS: Final = "yunikorn.apache.org/task-groups"
YUNIKORN_TASK_GROUP_NAME: Final = "yunikorn.apache.org/task-group-name"

PLUGINS_API: Final = "scheduling.x-k8s.io/v1alpha1"
PLUGINS_SCHEDULER_NAME: Final = "scheduler-plugins-scheduler"
PLUGINS_POD_GROUP_LABEL: Final = "scheduling.x-k8s.io/pod-group"

KAI_QUEUE_LABEL: Final = "kai.scheduler/queue"
KAI_API: Final = "scheduling.run.ai/v2alpha2"
KAI_POD_GROUP_ANNOTATION: Final = "pod-group-name"
KAI_SUBGROUP_LABEL: Final = "kai.scheduler/subgroup-name"

KUEUE_QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
KUEUE_GROUP_LABEL: Final = "kueue.x-k8s.io/pod-group-name"
KUEUE_TOTAL_COUNT: Final = "kueue.x-k8s.io/pod-group-total-count"
KUEUE_PRIORITY_LABEL: Final = "kueue.x-k8s.io/priority-class"
KUEUE_SERVING: Final = "kueue.x-k8s.io/pod-group-serving"
KUEUE_GATE: Final = "kueue.x-k8s.io/admission"
# Kueue's MaxPodSets: at most this many pod shapes (roles) in one Workload.
KUEUE_MAX_POD_SETS: Final = 18


def wants_scheduling(labels: Mapping[str, str], options: RenderOptions) -> bool:
    """Whether a cluster gets scheduler objects or pod metadata: a scheduler or a Kueue queue."""
    return bool(options.batch_scheduler or kueue_queue(labels, options))


def kueue_queue(labels: Mapping[str, str], options: RenderOptions) -> str:
    """The LocalQueue of a manifest: its `kueue.x-k8s.io/queue-name` label, else the option."""
    return str(labels.get(KUEUE_QUEUE_LABEL) or options.kueue_queue)
