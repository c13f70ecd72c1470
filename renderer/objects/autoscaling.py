"""The git-declared half of autoscaling: the autoscaling ConfigMap and the head's RBAC.

For `enableInTreeAutoscaling: true` (reference autoscaling.md §5.2) git holds, besides
KubeRay's head Pod with its `autoscaler` sidecar (`pods`), the ConfigMap
`<cluster>-autoscaling` (Ray's autoscaling config, each group's worker Pod template and
the sizes the syncer seeds, the provider and the sidecar's wrapper) and the head's
ServiceAccount, Role and RoleBinding, with less than KubeRay's role: the provider reads
pods and edits one state ConfigMap; it never creates Pods. Worker templates are built as
marked Pods so that every later step (batch-scheduler metadata) reaches them, then
`fold_templates` moves them into the ConfigMap. Pure, except reading the packaged sources.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from renderer import naming
from renderer.manifest import Manifest
from renderer.model.raycluster import RayCluster
from renderer.objects import autoscalingconfig

CONFIG_DIR: Final = "/etc/kuberay-gitops"
CONFIG_VOLUME: Final = "kuberay-autoscaling"
ROLE_AUTOSCALING: Final = "autoscaling"
CONFIG_KEY: Final = "autoscaling.yaml"
WORKERS_KEY: Final = "workers.json"
GROUPS_KEY: Final = "groups.json"
PROVIDER_KEY: Final = "kuberay_gitops_autoscaler.py"
WRAPPER_KEY: Final = "wrapper.py"
_ASSET_DIR: Final = Path(__file__).resolve().parent.parent / "assets" / "autoscaler"
# A worker template's mark until `fold_templates` moves it into its ConfigMap: not a
# Kubernetes field, so a template that escaped the fold could never be applied.
_TEMPLATE_MARK: Final = "x-kuberay-autoscaling-configmap"


def configmap_name(cluster: str) -> str:
    """`<cluster>-autoscaling`: the ConfigMap the sidecar mounts."""
    return f"{cluster}-autoscaling"


def wrapper_command(cluster: RayCluster) -> str:
    """The sidecar's command: the wrapper, with the head's GCS port and the rendered config."""
    return (
        f"python {CONFIG_DIR}/{WRAPPER_KEY} --gcs-port {cluster.head_port} "
        f"--autoscaling-config {CONFIG_DIR}/{CONFIG_KEY}"
    )


def read_asset(name: str) -> str:
    """A source shipped in `renderer/assets/autoscaler/`, as text (byte for byte UTF-8)."""
    # Read beside the package, not through importlib.resources (which loads zipfile,
    # tempfile and shutil on every start: issue 11's start-up budget).
    return (_ASSET_DIR / name).read_bytes().decode("utf-8")


def _rbac_labels(cluster: RayCluster) -> dict[str, str]:
    return {
        naming.RAY_CLUSTER: cluster.name,
        naming.APP_NAME: naming.KUBERAY_APP,
        naming.APP_CREATED_BY: naming.KUBERAY_OPERATOR,
        **cluster.source_labels,
    }


def service_account_name(cluster: RayCluster) -> str:
    """KubeRay's `CheckName(<head template serviceAccountName or cluster>)`."""
    pod = cluster.head["template"].get("spec") or {}
    return naming.check_name(str(pod.get("serviceAccountName") or cluster.name))


def build_rbac(cluster: RayCluster) -> list[Manifest]:
    """ServiceAccount (unless the template names one), Role and RoleBinding of the head.

    KubeRay's Role lets the autoscaler patch pods and the RayCluster; here the provider
    only lists pods and patches its own state ConfigMap (by name).
    """
    name = naming.check_name(cluster.name)
    meta = {"name": name, "namespace": cluster.namespace, "labels": _rbac_labels(cluster)}
    objects: list[Manifest] = []
    pod = cluster.head["template"].get("spec") or {}
    if not pod.get("serviceAccountName"):
        objects.append({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": dict(meta)})
    state = autoscalingconfig.state_configmap_name(cluster.name)
    objects.append(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": dict(meta),
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
                {
                    "apiGroups": [""],
                    "resources": ["configmaps"],
                    "resourceNames": [state],
                    "verbs": ["get", "patch"],
                },
            ],
        }
    )
    objects.append(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": dict(meta),
            "subjects": [
                {
                    "kind": "ServiceAccount",
                    "name": service_account_name(cluster),
                    "namespace": cluster.namespace,
                }
            ],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        }
    )
    return objects


def build_configmap(cluster: RayCluster) -> Manifest:
    """`<cluster>-autoscaling` without its worker templates (`fold_templates` adds them)."""
    config, problems = autoscalingconfig.derive(cluster.name, cluster.namespace, cluster.spec, ())
    assert config is not None, problems  # the rules refused such a spec before building
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": configmap_name(cluster.name),
            "namespace": cluster.namespace,
            "labels": {
                **cluster.source_labels,
                naming.RAY_CLUSTER: cluster.name,
                naming.ROLE: ROLE_AUTOSCALING,
            },
        },
        "data": {
            CONFIG_KEY: autoscalingconfig.config_text(config),
            GROUPS_KEY: autoscalingconfig.groups_json(cluster.spec),
            WORKERS_KEY: autoscalingconfig.json_text({}),
            PROVIDER_KEY: read_asset(PROVIDER_KEY),
            WRAPPER_KEY: read_asset(WRAPPER_KEY),
        },
    }


def mark_template(pod: Manifest, cluster: RayCluster) -> Manifest:
    """Mark a worker Pod template as belonging in the cluster's autoscaling ConfigMap."""
    pod["metadata"].pop("name", None)
    pod[_TEMPLATE_MARK] = configmap_name(cluster.name)
    return pod


def is_template(obj: Manifest) -> bool:
    """A worker template not folded yet (it is no object of the output)."""
    return _TEMPLATE_MARK in obj


def fold_templates(objects: list[Manifest]) -> list[Manifest]:
    """Move each marked worker template into `workers.json` of its ConfigMap."""
    if not any(_TEMPLATE_MARK in obj for obj in objects):
        return objects
    templates: dict[tuple[str, str], dict[str, Manifest]] = {}
    kept: list[Manifest] = []
    for obj in objects:
        if _TEMPLATE_MARK not in obj:
            kept.append(obj)
            continue
        target = (str(obj["metadata"]["namespace"]), str(obj.pop(_TEMPLATE_MARK)))
        group = str(obj["metadata"]["labels"][naming.RAY_GROUP])
        templates.setdefault(target, {})[group] = obj
    for obj in kept:
        meta = obj["metadata"]
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        if obj["kind"] == "ConfigMap" and key in templates:
            obj["data"][WORKERS_KEY] = autoscalingconfig.json_text(templates.pop(key))
    assert not templates, f"worker templates without their ConfigMap: {sorted(templates)}"
    return kept
