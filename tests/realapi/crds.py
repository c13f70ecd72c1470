"""CustomResourceDefinitions for the kinds the renderer emits beyond core Kubernetes.

`../shared/upstream/` has no CRD YAML for the Gateway API or cert-manager, only the
datreeio JSON Schemas made from those CRDs' `openAPIV3Schema` (read in place). `crd_for`
turns one back into a CRD: the catalogue adds `additionalProperties: false` next to
`properties` (a CRD structural schema forbids both at once; the real server prunes or,
with `fieldValidation=Strict`, refuses unknown fields instead), and its `x-kubernetes-*`
extensions, CEL `x-kubernetes-validations` rules included, are kept as they are. The
monitoring.coreos.com kinds are built the same way. KubeRay's own CRDs are real YAML.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tests.paths import CRD_SCHEMAS

Manifest = dict[str, Any]


@dataclass(frozen=True)
class Kind:
    """One kind to define: the schema file, names and scope."""

    file: str
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool = True


_GATEWAY, _CERTS, _MONITORING = (
    "gateway.networking.k8s.io",
    "cert-manager.io",
    "monitoring.coreos.com",
)
KINDS = (
    Kind(f"{_GATEWAY}/gateway_v1.json", _GATEWAY, "v1", "Gateway", "gateways"),
    Kind(f"{_GATEWAY}/httproute_v1.json", _GATEWAY, "v1", "HTTPRoute", "httproutes"),
    Kind(
        f"{_GATEWAY}/gatewayclass_v1.json",
        _GATEWAY,
        "v1",
        "GatewayClass",
        "gatewayclasses",
        namespaced=False,
    ),
    Kind(f"{_CERTS}/certificate_v1.json", _CERTS, "v1", "Certificate", "certificates"),
    Kind(f"{_CERTS}/issuer_v1.json", _CERTS, "v1", "Issuer", "issuers"),
    Kind(
        f"{_MONITORING}/servicemonitor_v1.json",
        _MONITORING,
        "v1",
        "ServiceMonitor",
        "servicemonitors",
    ),
    Kind(f"{_MONITORING}/podmonitor_v1.json", _MONITORING, "v1", "PodMonitor", "podmonitors"),
)


def structural(schema: Any) -> Any:
    """The schema without `additionalProperties: false` (structural schemas refuse it)."""
    if isinstance(schema, list):
        return [structural(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "additionalProperties" and value is False:
            continue
        out[key] = structural(value)
    return out


def crd_for(kind: Kind) -> Manifest:
    """A v1 CustomResourceDefinition for `kind` from its JSON Schema."""
    schema = structural(json.loads((CRD_SCHEMAS / kind.file).read_text()))
    # The root's metadata may only be `type: object` in a CRD.
    properties = schema.get("properties") or {}
    if "metadata" in properties:
        properties["metadata"] = {"type": "object"}
    # A *.k8s.io group needs an API-review annotation (the Gateway API CRDs carry theirs).
    annotations = {}
    if kind.group.endswith(".k8s.io"):
        annotations["api-approved.kubernetes.io"] = (
            "https://github.com/kubernetes-sigs/gateway-api/pull/2466"
        )
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{kind.plural}.{kind.group}", "annotations": annotations},
        "spec": {
            "group": kind.group,
            "names": {
                "kind": kind.kind,
                "listKind": f"{kind.kind}List",
                "plural": kind.plural,
                "singular": kind.kind.lower(),
            },
            "scope": "Namespaced" if kind.namespaced else "Cluster",
            "versions": [
                {
                    "name": kind.version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}} if "status" in properties else {},
                }
            ],
        },
    }


def all_crds() -> list[Manifest]:
    """Every CRD the rendered objects need."""
    return [crd_for(kind) for kind in KINDS]
