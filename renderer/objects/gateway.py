"""Gateway API objects of an incrementally upgraded RayService (rayservice.md §3.6-§3.7).

Builds the Gateway `<svc>-gateway` and the HTTPRoute `<svc>-httproute` the way KubeRay
does, plus the project's source labels. The route's rules are only the initial ones: after
creation the syncer owns `spec.rules` (DESIGN §1). Pure: names in, dicts out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from renderer.manifest import Manifest

API_VERSION: Final = "gateway.networking.k8s.io/v1"
GROUP: Final = "gateway.networking.k8s.io"
# KubeRay's only listener (rayservice.md §3.6): no hostname, TLS or allowedRoutes.
LISTENER: Final = {"name": "http", "protocol": "HTTP", "port": 80}


@dataclass(frozen=True, slots=True)
class Backend:
    """One weighted backend of the route: a serve Service of one cluster generation."""

    service: str
    port: int
    weight: int


def gateway_name(service: str) -> str:
    """`<svc>-gateway`, KubeRay's Gateway name."""
    return f"{service}-gateway"


def httproute_name(service: str) -> str:
    """`<svc>-httproute`, KubeRay's HTTPRoute name."""
    return f"{service}-httproute"


def _metadata(name: str, namespace: str, labels: Mapping[str, str]) -> Manifest:
    return {"name": name, "namespace": namespace, "labels": dict(labels)}


def build_gateway(
    service: str, namespace: str, gateway_class: str, labels: Mapping[str, str]
) -> Manifest:
    """The Gateway of RayService `service`: one HTTP listener on port 80."""
    return {
        "apiVersion": API_VERSION,
        "kind": "Gateway",
        "metadata": _metadata(gateway_name(service), namespace, labels),
        "spec": {"gatewayClassName": gateway_class, "listeners": [dict(LISTENER)]},
    }


def build_httproute(
    service: str, namespace: str, backends: Sequence[Backend], labels: Mapping[str, str]
) -> Manifest:
    """The HTTPRoute of RayService `service`: one `PathPrefix /` rule over `backends`.

    Weights are always written out, so the initial split is explicit (KubeRay also
    writes them; the API server's default weight of 1 never applies).
    """
    refs = [
        {"name": b.service, "namespace": namespace, "port": b.port, "weight": b.weight}
        for b in backends
    ]
    return {
        "apiVersion": API_VERSION,
        "kind": "HTTPRoute",
        "metadata": _metadata(httproute_name(service), namespace, labels),
        "spec": {
            "parentRefs": [{"name": gateway_name(service), "namespace": namespace}],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                    "backendRefs": refs,
                }
            ],
        },
    }
