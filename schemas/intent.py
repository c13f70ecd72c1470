"""The intent ConfigMap contract between the renderer (writer) and the syncer (reader).

The renderer writes one ConfigMap `<name>-kuberay-intent` per RayJob and RayService (label
`kuberay.io/role: intent`) whose key `intent.json` holds canonical JSON (sorted keys, no
whitespace) of `RayJobIntent` or `RayServiceIntent` below; the syncer never reads git, only
this. Both sides import this module and nothing of each other: it depends on nothing but
`typing`. A change of shape that an older syncer would misread bumps `INTENT_VERSION`.
"""

from __future__ import annotations

from typing import Any, Final, Literal, TypedDict

INTENT_VERSION: Final = 1
INTENT_KEY: Final = "intent.json"
ROLE_INTENT: Final = "intent"

RAYJOB: Final = "RayJob"
RAYSERVICE: Final = "RayService"

# --- RayService upgrade strategies and the project's own controls --------------------------

NEW_CLUSTER: Final = "NewCluster"
INCREMENTAL: Final = "NewClusterWithIncrementalUpgrade"
NONE: Final = "None"
UPGRADE_TYPES: Final = (INCREMENTAL, NEW_CLUSTER, NONE)
DEFAULT_DELETION_DELAY: Final = 60  # rayClusterDeletionDelaySeconds (rayservice.md §2.1)
# Not KubeRay fields: annotations on the RayService that the renderer copies into the intent.
ANN_UPGRADE_PAUSED: Final = "kuberay.io/upgrade-paused"
ANN_PROGRESS_DEADLINE: Final = "kuberay.io/upgrade-progress-deadline-seconds"

# The per-generation Serve config ConfigMap `<gen>-serve-config` (label `kuberay.io/role`).
ROLE_SERVE_CONFIG: Final = "serve-config"
SERVE_CONFIG_KEY: Final = "serveConfigV2"  # verbatim, as written in git
SERVE_CONFIG_JSON_KEY: Final = "serveConfigV2.json"  # canonical JSON of the parsed YAML


class IntentMetadata(TypedDict):
    """The origin object's identity as rendered (the syncer trusts the ConfigMap's own)."""

    name: str
    namespace: str
    labels: dict[str, str]
    annotations: dict[str, str]


class RayJobDerived(TypedDict):
    """What the renderer derived for a RayJob (names, mode, runtime env)."""

    submissionMode: str  # spec.submissionMode, CRD default K8sJobMode
    clusterName: str  # `<job>-<h>`, or clusterSelector["ray.io/cluster"]
    clusterRendered: bool  # false with clusterSelector or spec.suspend
    submissionId: str | None  # spec.jobId, else `<job>-<h'>`; None in InteractiveMode
    headServiceName: str
    jobHeadServiceName: str | None  # `<job>-head-svc`, None unless rendered
    dashboardURL: str  # `http://<head svc>.<ns>.svc.<domain>:<port>`
    submitterJobName: str | None  # K8sJobMode only
    submitterContainerName: str | None  # SidecarMode only
    headPodName: str | None
    workerPodNames: list[str]  # all groups, in render order
    runtimeEnv: dict[str, Any] | None  # runtimeEnvYAML decoded as KubeRay does


class RayJobIntent(TypedDict):
    """`intent.json` of a RayJob."""

    version: int
    kind: Literal["RayJob"]
    metadata: IntentMetadata
    spec: dict[str, Any]  # the RayJob spec as written in git, without rayClusterSpec
    derived: RayJobDerived


class Routing(TypedDict):
    """Gateway API objects and KubeRay's step options of an incremental upgrade."""

    gatewayName: str
    httpRouteName: str
    currentGeneration: str
    servePort: int
    stepSizePercent: int
    intervalSeconds: int
    maxSurgePercent: int


class Upgrade(TypedDict):
    """How the syncer moves traffic between generations."""

    type: str  # one of UPGRADE_TYPES
    paused: bool  # ANN_UPGRADE_PAUSED
    progressDeadlineSeconds: int | None  # ANN_PROGRESS_DEADLINE
    rayClusterDeletionDelaySeconds: int
    routing: Routing | None  # None unless incremental


class Generation(TypedDict):
    """The cluster generation `<svc>-<hash of rayClusterConfig>` git declares now."""

    name: str
    hash: str
    headServiceName: str
    dashboardURL: str
    serveConfigMapName: str
    serveServiceName: str | None  # per-generation Service, incremental only
    servePort: int
    headPodName: str | None
    workerPodNames: list[str]
    pruneProtected: bool


class RayServiceDerived(TypedDict):
    """What the renderer derived for a RayService."""

    generation: Generation | None  # None when spec.suspend is true
    headServiceName: str
    serveServiceName: str | None  # None with incremental upgrades (clients use the Gateway)
    upgrade: Upgrade


class RayServiceIntent(TypedDict):
    """`intent.json` of a RayService."""

    version: int
    kind: Literal["RayService"]
    metadata: IntentMetadata
    spec: dict[str, Any]  # the RayService spec as written in git, without rayClusterConfig
    derived: RayServiceDerived
