"""Health assessment of kuberay's objects for Argo CD (Lua) and Flux (CEL health checks).

Owns what the GitOps tools need to show a RayJob's or RayService's run-time state, which
the syncer publishes on objects git does not fully declare (DESIGN §1):

- the status ConfigMap `<name>-kuberay-status` (labels `kuberay.io/role: status`,
  `app.kubernetes.io/managed-by: kuberay-syncer`), data keys `jobDeploymentStatus` and
  `jobStatus` (RayJob) or `serviceStatus`, `activeCluster`, `pendingCluster` (RayService);
- the annotations `status.kuberay.io/job-deployment-status` / `job-status` on a RayJob's
  submitter Job, and `status.kuberay.io/service-status` / `active-cluster` /
  `pending-cluster` on a RayService's intent ConfigMap (both are in git, so Argo CD counts
  their health in the Application's);
- the HTTPRoute whose weights the syncer steps during an incremental upgrade.

Argo CD: Lua scripts (package data beside this module) under the `argocd-cm` keys
`resource.customizations.health.<group>_<kind>` (core kinds without group or underscore,
the way Argo CD parses the key). Each script runs with Argo CD's default libraries only
(base, table, a safe `os`; no `string`) and returns `{status=..., message=...}`. A custom
script replaces Argo CD's built-in check for that kind, so the Job and HTTPRoute scripts
give objects kuberay did not make the built-in verdicts.

Flux: `spec.healthChecks` entries for the status ConfigMaps of the rendered RayJobs and
RayServices, and `spec.healthCheckExprs` (CEL, Flux >= 2.5) for `v1` ConfigMaps. A failed
RayJob fails the Kustomization's health check; a running, complete or suspended one is
current (a Kustomization that waited for a long job to end would time out every interval);
a RayJob still starting and a RayService not yet serving are in progress.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Final

from renderer import naming
from renderer.manifest import Manifest

HEALTH_KEY_PREFIX: Final = "resource.customizations.health."
# argocd-cm key suffix (group_kind; a core kind alone) → Lua file beside this module.
ARGOCD_SCRIPTS: Final = {
    "ConfigMap": "configmap.lua",
    "batch_Job": "job.lua",
    "gateway.networking.k8s.io_HTTPRoute": "httproute.lua",
}
ARGOCD_STATUSES: Final = ("Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown")

_HERE: Final = Path(__file__).resolve().parent


def lua_script(name: str) -> str:
    """The text of one of the Lua health scripts shipped with the package."""
    return (_HERE / name).read_text(encoding="utf-8")


def argocd_health_data() -> dict[str, str]:
    """The `argocd-cm` data entries: one health script per kind, keyed as Argo CD reads them."""
    return {HEALTH_KEY_PREFIX + key: lua_script(file) for key, file in ARGOCD_SCRIPTS.items()}


# --- Flux ----------------------------------------------------------------------------------

_IS_STATUS: Final = (
    f'has(metadata.labels) && "{naming.ROLE}" in metadata.labels'
    f' && metadata.labels["{naming.ROLE}"] == "status"'
)
_IS_JOB: Final = (
    f'"{naming.ORIGIN_KIND}" in metadata.labels'
    f' && metadata.labels["{naming.ORIGIN_KIND}"] == "RayJob"'
)
_JDS_IN: Final = "has(data.jobDeploymentStatus) && data.jobDeploymentStatus in "
# RayJob jobDeploymentStatus values a Kustomization need not wait for.
_SETTLED: Final = "['Running', 'Complete', 'Suspended']"
_SERVING: Final = f"!({_IS_JOB}) && has(data.serviceStatus) && data.serviceStatus == 'Running'"

# For `v1` ConfigMaps: only status ConfigMaps (label kuberay.io/role=status) can be other
# than current. Flux evaluates inProgress, failed, current in that order.
FLUX_CONFIGMAP_EXPRS: Final[dict[str, str]] = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "inProgress": (
        f"{_IS_STATUS} && !({_IS_JOB} && {_JDS_IN}['Running', 'Complete', 'Suspended', 'Failed'])"
        f" && !({_SERVING})"
    ),
    "failed": f"{_IS_STATUS} && {_IS_JOB} && {_JDS_IN}['Failed']",
    "current": f"!({_IS_STATUS}) || ({_IS_JOB} && {_JDS_IN}{_SETTLED}) || ({_SERVING})",
}


def _origins(objects: Sequence[Manifest]) -> list[tuple[str, str]]:
    """(namespace, name) of every rendered RayJob and RayService, from their intent ConfigMaps."""
    found = set()
    for obj in objects:
        if obj.get("kind") != "ConfigMap" or obj.get("apiVersion") != "v1":
            continue
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        if labels.get(naming.ROLE) != naming.ROLE_INTENT:
            continue
        if labels.get(naming.ORIGIN_KIND) not in ("RayJob", "RayService"):
            continue
        found.add((str(meta.get("namespace") or ""), str(labels.get(naming.ORIGIN_NAME) or "")))
    return sorted(found)


def flux_health_checks(objects: Sequence[Manifest]) -> list[Manifest]:
    """`spec.healthChecks`: the status ConfigMap of every rendered RayJob and RayService."""
    checks = []
    for namespace, name in _origins(objects):
        check: Manifest = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": naming.status_configmap_name(name),
        }
        if namespace:
            check["namespace"] = namespace
        checks.append(check)
    return checks


def flux_health_check_exprs() -> list[Manifest]:
    """`spec.healthCheckExprs`: how Flux reads a status ConfigMap (CEL, Flux >= 2.5)."""
    return [dict(FLUX_CONFIGMAP_EXPRS)]
