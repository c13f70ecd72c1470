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

import os
import sys
from collections.abc import Mapping
from typing import Final

from renderer import emit
from renderer.manifest import Manifest

PLUGIN_NAME: Final = "kuberay"
PLUGIN_VERSION: Final = "v1"
CONFIGMAP: Final = "kuberay-cmp-plugin"
DEFAULT_IMAGE: Final = "ghcr.io/kuberay-gitops/kuberay-syncer:0.1.0"
# Ray manifests anywhere below the source directory: the plugin applies (output non-empty).
DISCOVER: Final = (
    "grep -rlE --include='*.yaml' --include='*.yml' "
    "'^apiVersion:[[:space:]]*[\"'\\'']?ray[.]io/' . | head -n 1"
)
# parameter name → (kuberay render option, kind: "string" or "bool", tooltip)
PARAMETERS: Final = {
    "namespace": ("--namespace", "string", "Namespace for manifests that set none"),
    "cluster-domain": ("--cluster-domain", "string", "Kubernetes cluster domain"),
    "feature-gates": ("--feature-gates", "string", "KubeRay feature gates, Name=true,..."),
    "kubernetes-version": ("--kubernetes-version", "string", "Kubernetes version of the schemas"),
    "init-container-injection": ("--init-container-injection", "bool", "true or false"),
    "probes-injection": ("--probes-injection", "bool", "true or false"),
    "login-shell": ("--login-shell", "bool", "true or false"),
    "head-cluster-ip-service": ("--head-cluster-ip-service", "bool", "true or false"),
    "strict": ("--strict", "bool", "fail on warnings too (true or false)"),
}
_NEGATED: Final = {
    "--init-container-injection": "--no-init-container-injection",
    "--probes-injection": "--no-probes-injection",
    "--login-shell": "--no-login-shell",
    "--head-cluster-ip-service": "--headless-head-service",
}


def env_name(parameter: str) -> str:
    """The environment variable Argo CD sets for a plugin parameter: `PARAM_<NAME>`."""
    return "PARAM_" + "".join(ch if ch.isalnum() else "_" for ch in parameter.upper())


class ParameterError(ValueError):
    """A plugin parameter holds a value `kuberay render` cannot take."""


def render_args(environ: Mapping[str, str]) -> list[str]:
    """`kuberay render` arguments for the plugin's parameters (from Argo CD's environment)."""
    args = ["render", "."]
    namespace = environ.get(env_name("namespace")) or environ.get("ARGOCD_APP_NAMESPACE")
    if namespace:
        args += ["--namespace", namespace]
    for name, (option, kind, _) in PARAMETERS.items():
        value = environ.get(env_name(name), "")
        if name == "namespace" or value == "":
            continue
        if kind == "string":
            args += [option, value]
            continue
        if value.lower() not in ("true", "false"):
            raise ParameterError(f"plugin parameter {name}: expected true or false, got {value!r}")
        if value.lower() == "true":
            args.append(option)
        elif option in _NEGATED:
            args.append(_NEGATED[option])
    return args


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
            "parameters": {
                "static": [
                    {"name": name, "title": option.lstrip("-"), "tooltip": tooltip}
                    for name, (option, _, tooltip) in PARAMETERS.items()
                ]
            },
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
    from renderer import cli  # imported here: `install` needs no renderer

    cli.main(render)
