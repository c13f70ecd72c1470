"""GitOps-tool settings that let the syncer own HTTPRoute `spec.rules` (DESIGN §1).

From rendered objects, builds the Argo CD `Application` and the Flux `Kustomization` that
ignore `/spec/rules` of exactly the HTTPRoutes of incrementally upgraded RayServices. Pure:
objects in, one object out; the CLI prints it (`--gitops-config argocd|flux`).

Both are complete objects that validate against the tools' CRD schemas. The fields that
depend on the user's set-up hold example values containing `REPLACE-ME`: the Application's
name and `spec.source`, the Kustomization's name, `spec.path` and `spec.sourceRef`.

- Argo CD: `spec.ignoreDifferences` entries (group, kind, name, namespace, JSON pointer
  `/spec/rules`) plus the sync option `RespectIgnoreDifferences=true`, without which a sync
  would still write the rendered rules back over the syncer's weights.
- Flux: the Kustomization field `spec.ignore` (kustomize-controller drift ignore rules, a
  list of `{paths, target}`), which leaves the listed JSON pointers out of drift detection
  and correction. Flux still writes the rendered rules when it creates the route; after that
  the syncer's weights stand. (Older Flux releases without `spec.ignore` can instead mark the
  HTTPRoute `kustomize.toolkit.fluxcd.io/ssa: IfNotPresent`, which freezes the whole object
  after creation; this fragment does not do that.)

Health (renderer.health): the Argo CD output adds a patch for `argocd-cm` with the Lua
health scripts for kuberay's ConfigMaps, submitter Jobs and HTTPRoutes; the Flux
Kustomization gets `spec.healthChecks` on the rendered jobs' and services' status
ConfigMaps and the `spec.healthCheckExprs` that read them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from renderer import health, naming
from renderer.manifest import Manifest

GATEWAY_GROUP: Final = "gateway.networking.k8s.io"
RULES_POINTER: Final = "/spec/rules"
RESPECT_IGNORE: Final = "RespectIgnoreDifferences=true"
EXAMPLE: Final = "REPLACE-ME"


def is_syncer_routed(obj: Manifest) -> bool:
    """Whether `obj` is an HTTPRoute whose `spec.rules` the syncer owns after creation.

    The renderer emits HTTPRoutes only for incrementally upgraded RayServices; routes the
    user passed through (not labelled by the renderer) are left to the GitOps tool.
    """
    if obj.get("kind") != "HTTPRoute":
        return False
    if not str(obj.get("apiVersion", "")).startswith(f"{GATEWAY_GROUP}/"):
        return False
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return (
        labels.get(naming.MANAGED_BY) == naming.MANAGED_BY_VALUE
        and labels.get(naming.ORIGIN_KIND) == "RayService"
    )


def _routes(objects: Sequence[Manifest]) -> list[tuple[str, str, str]]:
    """(namespace, name, version) of every syncer-routed HTTPRoute, sorted, without repeats."""
    found = {
        (
            str(obj["metadata"].get("namespace") or ""),
            str(obj["metadata"]["name"]),
            str(obj["apiVersion"]).partition("/")[2],
        )
        for obj in objects
        if is_syncer_routed(obj)
    }
    return sorted(found)


def _destination_namespace(objects: Sequence[Manifest]) -> str | None:
    namespaces = {
        str((obj.get("metadata") or {}).get("namespace"))
        for obj in objects
        if (obj.get("metadata") or {}).get("namespace")
    }
    return namespaces.pop() if len(namespaces) == 1 else None


def argocd_fragment(objects: Sequence[Manifest]) -> Manifest:
    """An Argo CD Application that lets the syncer own the rules of the rendered HTTPRoutes."""
    destination: Manifest = {"server": "https://kubernetes.default.svc"}
    namespace = _destination_namespace(objects)
    if namespace is not None:
        destination["namespace"] = namespace
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": f"{EXAMPLE.lower()}-app", "namespace": "argocd"},
        "spec": {
            "project": "default",
            "source": {
                "repoURL": f"https://git.example.com/{EXAMPLE}.git",
                "path": EXAMPLE,
                "targetRevision": "HEAD",
            },
            "destination": destination,
            "ignoreDifferences": [
                {
                    "group": GATEWAY_GROUP,
                    "kind": "HTTPRoute",
                    "name": name,
                    "namespace": ns,
                    "jsonPointers": [RULES_POINTER],
                }
                for ns, name, _ in _routes(objects)
            ],
            "syncPolicy": {"syncOptions": [RESPECT_IGNORE]},
        },
    }


def argocd_health_config() -> Manifest:
    """The `argocd-cm` entries (as a strategic-merge patch) with kuberay's Lua health scripts."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "argocd-cm",
            "namespace": "argocd",
            "labels": {"app.kubernetes.io/part-of": "argocd"},
        },
        "data": health.argocd_health_data(),
    }


def argocd_objects(objects: Sequence[Manifest]) -> list[Manifest]:
    """What `--gitops-config argocd` prints: the Application, then the argocd-cm patch."""
    return [argocd_fragment(objects), argocd_health_config()]


def flux_fragment(objects: Sequence[Manifest]) -> Manifest:
    """A Flux Kustomization whose `spec.ignore` lets the syncer own the rendered routes' rules."""
    return {
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": {"name": f"{EXAMPLE.lower()}-app", "namespace": "flux-system"},
        "spec": {
            "interval": "10m",
            "path": f"./{EXAMPLE}",
            "prune": True,
            "sourceRef": {"kind": "GitRepository", "name": f"{EXAMPLE.lower()}-repo"},
            "ignore": [
                {
                    "paths": [RULES_POINTER],
                    # Flux matches target names as anchored regular expressions; a RayService
                    # name is a DNS-1035 label, so `<svc>-httproute` has no special characters.
                    "target": {
                        "group": GATEWAY_GROUP,
                        "version": version,
                        "kind": "HTTPRoute",
                        "name": name,
                        "namespace": ns,
                    },
                }
                for ns, name, version in _routes(objects)
            ],
            "healthChecks": health.flux_health_checks(objects),
            "healthCheckExprs": health.flux_health_check_exprs(),
        },
    }
