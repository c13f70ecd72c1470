"""`kuberay-argocd-cmp`: the renderer as an Argo CD config-management plugin (sidecar CMP).

With it a repository holds only RayCluster / RayJob / RayService manifests and Argo CD
renders them on every sync. Subcommands:

- `install` prints what the Argo CD installation needs: the ConfigMap `kuberay-cmp-plugin`
  holding `plugin.yaml` (a `ConfigManagementPlugin`: `discover` finds ray.io manifests,
  `generate` runs `kuberay-argocd-cmp generate`, and the render options are announced as
  static parameters), and a strategic-merge patch for the `argocd-repo-server` Deployment
  that adds the sidecar running Argo CD's `argocd-cmp-server` in the kuberay image
  (`plugin-configmap` and `repo-server-patch` print one of the two).
- `generate` is what the plugin runs in the Application's source directory: it turns the
  parameters Argo CD passes as `PARAM_<NAME>` environment variables into `kuberay render .`
  options (the namespace defaults to the Application's destination, `ARGOCD_APP_NAMESPACE`)
  and prints the rendered YAML stream; problems go to stderr with exit status 2.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from renderer import emit
from renderer.manifest import Manifest
from renderer.settings import SETTINGS, Setting

PLUGIN_NAME: Final = "kuberay"
PLUGIN_VERSION: Final = "v1"
CONFIGMAP: Final = "kuberay-cmp-plugin"
DEFAULT_IMAGE: Final = "ghcr.io/kuberay-gitops/kuberay-syncer:0.1.0"
# Ray manifests anywhere below the source directory: the plugin applies (output non-empty).
DISCOVER: Final = (
    "grep -rlE --include='*.yaml' --include='*.yml' "
    "'^apiVersion:[[:space:]]*[\"'\\'']?ray[.]io/' . | head -n 1"
)
# The tooltip of each plugin parameter, by click parameter name (renderer.settings).
TOOLTIPS: Final = MappingProxyType(
    {
        "namespace": "Namespace for manifests that set none (default: the destination's)",
        "cluster_domain": "Kubernetes cluster domain (default cluster.local)",
        "feature_gates": "KubeRay feature gates, Name=true,...",
        "kubernetes_version": "Kubernetes version of the schemas (default 1.33)",
        "init_container_injection": "true or false (default true)",
        "probes_injection": "true or false (default true)",
        "login_shell": "true or false (default false)",
        "head_cluster_ip_service": "true or false (default false: a headless head Service)",
        "max_pods": "refuse a cluster with more worker Pods (default 10000)",
        "max_objects": "refuse a render of more objects (default 100000)",
        "max_input_bytes": "refuse a larger manifest file (default 67108864)",
        "batch_scheduler": "volcano, yunikorn, scheduler-plugins or kai-scheduler",
        "enable_batch_scheduler": "true: the deprecated spelling of batch-scheduler volcano",
        "kai_podgroups": "true: a KAI PodGroup per cluster (needs batch-scheduler kai-scheduler)",
        "kueue_queue": "Kueue LocalQueue for each cluster's pods as one plain-pod group",
        "syncer_namespace": "the syncer's namespace, admitted by DenyAll network policies "
        "(default kuberay-system; empty: no such rule)",
        "syncer_pod_labels": "the syncer's pod labels for that rule "
        "(default app.kubernetes.io/name: kuberay-syncer)",
        "strict": "fail on warnings too (true or false)",
    }
)
# `kuberay render` options that are no plugin parameter, and why (a test holds every other
# option of the CLI to a parameter).
NOT_PARAMETERS: Final = MappingProxyType(
    {
        "output_dir": "Argo CD applies the stream generate prints",
        "check": "Argo CD compares the stream with the cluster itself",
        "diff": "Argo CD compares the stream with the cluster itself",
        "allow_empty": "an empty render would let an auto-pruning Application delete its "
        "objects: generate fails instead",
        "gitops_config": "it prints tool settings, not the objects to apply",
        "output_format": "Argo CD shows stderr as written; GitHub annotations mean nothing there",
    }
)
PARAMETERS: Final = MappingProxyType(
    {s.argocd: s for s in SETTINGS if s.param not in NOT_PARAMETERS}
)


def env_name(parameter: str) -> str:
    """The environment variable Argo CD sets for a plugin parameter: `PARAM_<NAME>`."""
    return "PARAM_" + "".join(ch if ch.isalnum() else "_" for ch in parameter.upper())


class ParameterError(ValueError):
    """A plugin parameter holds a value `kuberay render` cannot take."""


def _collection(name: str, environ: Mapping[str, str]) -> list[str] | None:
    """A map or array parameter's KEY=VALUE items, from Argo CD's `ARGOCD_APP_PARAMETERS`.

    Only that JSON keeps a map's keys as written (`PARAM_<NAME>_<KEY>` folds the dots and
    slashes of a label key into underscores). None when the parameter is not set.
    """
    text = environ.get("ARGOCD_APP_PARAMETERS")
    if not text:
        return None
    try:
        given = json.loads(text)
    except ValueError as exc:
        raise ParameterError(f"ARGOCD_APP_PARAMETERS is not JSON: {exc}") from None
    for entry in given if isinstance(given, list) else []:
        if not isinstance(entry, dict) or entry.get("name") != name:
            continue
        if isinstance(entry.get("map"), dict):
            return [f"{k}={v}" for k, v in entry["map"].items()]
        if isinstance(entry.get("array"), list):
            return [str(item) for item in entry["array"]]
        if isinstance(entry.get("string"), str):
            return [i.strip() for i in entry["string"].split(",") if i.strip()]
    return None


def _args(name: str, setting: Setting, environ: Mapping[str, str]) -> list[str]:
    """The `kuberay render` arguments of one parameter (none when it is not set)."""
    if setting.kind == "labels":
        items = _collection(name, environ) or []
        return [arg for item in items for arg in (setting.flag, item)]
    if env_name(name) not in environ:
        return []
    value = environ[env_name(name)]
    if setting.kind == "text":
        return [setting.flag, value]
    if value == "":
        return []
    if setting.kind in ("string", "count"):
        return [setting.flag, value]
    if value.lower() not in ("true", "false"):
        raise ParameterError(f"plugin parameter {name}: expected true or false, got {value!r}")
    if value.lower() == "true":
        return [setting.flag]
    return [setting.off] if setting.off else []


def render_args(environ: Mapping[str, str]) -> list[str]:
    """`kuberay render` arguments for the plugin's parameters (from Argo CD's environment)."""
    args = ["render", "."]
    namespace = environ.get(env_name("namespace")) or environ.get("ARGOCD_APP_NAMESPACE")
    if namespace:
        args += ["--namespace", namespace]
    for name, setting in PARAMETERS.items():
        if name != "namespace":
            args += _args(name, setting, environ)
    return args


def _announcement(name: str, setting: Setting) -> Manifest:
    announced: Manifest = {
        "name": name,
        "title": setting.flag.lstrip("-"),
        "tooltip": TOOLTIPS[setting.param],
    }
    if setting.kind == "labels":
        announced["collectionType"] = "map"
    return announced


def plugin_config() -> Manifest:
    """The `ConfigManagementPlugin` (plugin.yaml) the sidecar's argocd-cmp-server reads."""
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "ConfigManagementPlugin",
        "metadata": {"name": PLUGIN_NAME},
        "spec": {
            "version": PLUGIN_VERSION,
            "discover": {"find": {"command": ["sh", "-c", DISCOVER]}},
            "generate": {"command": ["kuberay-argocd-cmp", "generate"]},
            "parameters": {"static": [_announcement(name, s) for name, s in PARAMETERS.items()]},
        },
    }


def install_objects(image: str = DEFAULT_IMAGE, namespace: str = "argocd") -> list[Manifest]:
    """The plugin ConfigMap and the `argocd-repo-server` patch that adds the sidecar."""
    configmap: Manifest = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CONFIGMAP, "namespace": namespace},
        "data": {"plugin.yaml": emit.dump(plugin_config())},
    }
    sidecar: Manifest = {
        "name": PLUGIN_NAME,
        "image": image,
        "command": ["/var/run/argocd/argocd-cmp-server"],
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 999,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "var-files", "mountPath": "/var/run/argocd"},
            {"name": "plugins", "mountPath": "/home/argocd/cmp-server/plugins"},
            {
                "name": CONFIGMAP,
                "mountPath": "/home/argocd/cmp-server/config/plugin.yaml",
                "subPath": "plugin.yaml",
            },
            {"name": "kuberay-cmp-tmp", "mountPath": "/tmp"},
        ],
    }
    patch: Manifest = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "argocd-repo-server", "namespace": namespace},
        "spec": {
            "template": {
                "spec": {
                    "containers": [sidecar],
                    "volumes": [
                        {"name": CONFIGMAP, "configMap": {"name": CONFIGMAP}},
                        {"name": "kuberay-cmp-tmp", "emptyDir": {}},
                    ],
                }
            }
        },
    }
    return [configmap, patch]


_USAGE: Final = """usage: kuberay-argocd-cmp generate
       kuberay-argocd-cmp install|plugin-configmap|repo-server-patch [--image I] [--namespace NS]
  generate           render the current directory for Argo CD (run by the plugin; PARAM_*)
  install            print the plugin ConfigMap and the argocd-repo-server sidecar patch
  plugin-configmap   print the plugin ConfigMap only
  repo-server-patch  print the argocd-repo-server sidecar patch only
"""


def _install(argv: list[str], only: str = "") -> int:
    options = {"--image": DEFAULT_IMAGE, "--namespace": "argocd"}
    rest = list(argv)
    while rest:
        flag = rest.pop(0)
        if flag not in options or not rest:
            sys.stderr.write(_USAGE)
            return 2
        options[flag] = rest.pop(0)
    objects = install_objects(options["--image"], options["--namespace"])
    sys.stdout.write(
        emit.dump_all(objects[:1] if only == "configmap" else objects[1:] if only else objects)
    )
    return 0


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `kuberay-argocd-cmp` console script."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["install"]:
        sys.exit(_install(args[1:]))
    if args[:1] in (["plugin-configmap"], ["repo-server-patch"]):
        sys.exit(_install(args[1:], "configmap" if args[0] == "plugin-configmap" else "patch"))
    if args != ["generate"]:
        sys.stderr.write(_USAGE)
        sys.exit(2)
    try:
        render = render_args(os.environ)
    except ParameterError as exc:
        sys.stderr.write(f"kuberay-argocd-cmp: {exc}\n")
        sys.exit(2)
    from renderer import launch  # imported here: `install` needs no renderer

    launch.main(render)
