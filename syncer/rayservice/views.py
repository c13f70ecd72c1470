"""Views of live objects for the RayService machine: pods, Serve configs, route, Gateway. Pure.

Turns cached objects into `observed` values and holds the index the reconciler keeps on
its caches (objects by the RayService that made them).
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterable
from typing import Any, Final

from renderer import naming
from schemas import intent as contract
from syncer.kube import meta
from syncer.rayservice.observed import Pod, Route

Manifest = dict[str, Any]

KIND: Final = contract.RAYSERVICE
BY_SERVICE: Final = "rayservice"  # the index name


def service_key(obj: Manifest) -> tuple[str, str] | None:
    """(namespace, RayService name) of an object the renderer made for a RayService."""
    if meta.label(obj, naming.ORIGIN_KIND) != KIND or not meta.label(obj, naming.ORIGIN_NAME):
        return None
    return (meta.namespace(obj), meta.label(obj, naming.ORIGIN_NAME))


def service_of(obj: Manifest) -> Iterable[Hashable]:
    """The index of RayService objects: `service_key`, when there is one."""
    key = service_key(obj)
    return [] if key is None else [key]


def _true(conditions: Any, *kinds: str) -> bool:
    """Whether every condition type in `kinds` is status True."""
    found = {str(c.get("type")): c.get("status") for c in conditions or [] if isinstance(c, dict)}
    return all(found.get(kind) == "True" for kind in kinds)


def pod_view(pod: Manifest) -> Pod:
    """The state machine's view of one generation pod."""
    metadata = meta.metadata(pod)
    status = pod.get("status") or {}
    return Pod(
        name=meta.name(pod),
        node_type=meta.label(pod, naming.RAY_NODE_TYPE) or "worker",
        ready=bool(status.get("ready")) and status.get("phase") == "Running",
        deleting=bool(metadata.get("deletionTimestamp")),
        labels={str(k): str(v) for k, v in (metadata.get("labels") or {}).items()},
        resource_version=str(metadata.get("resourceVersion") or ""),
    )


def serve_config(cm: Manifest) -> Manifest | None:
    """The Serve config a generation's serve-config ConfigMap holds (None: none or unreadable)."""
    text = (cm.get("data") or {}).get(contract.SERVE_CONFIG_JSON_KEY)
    if not text:
        return None
    try:
        config = json.loads(text)
    except ValueError:
        return None
    return config if isinstance(config, dict) else None


def route_view(route: Manifest, gateway: str) -> Route:
    """The state machine's view of a live HTTPRoute (accepted: by the parent `gateway`)."""
    metadata = meta.metadata(route)
    namespace = meta.namespace(route)
    accepted = False
    for parent in (route.get("status") or {}).get("parents") or []:
        ref = parent.get("parentRef") or {}
        if ref.get("name") != gateway or ref.get("namespace") not in (None, namespace):
            continue
        accepted = _true(parent.get("conditions"), "Accepted", "ResolvedRefs")
    return Route(
        resource_version=str(metadata.get("resourceVersion") or ""),
        rules=tuple((route.get("spec") or {}).get("rules") or ()),
        annotations={str(k): str(v) for k, v in (metadata.get("annotations") or {}).items()},
        accepted=accepted,
    )


def gateway_ready(gateway: Manifest | None) -> bool:
    """KubeRay's Gateway gate: conditions Accepted and Programmed are True (§8.4)."""
    if gateway is None:
        return False
    return _true((gateway.get("status") or {}).get("conditions"), "Accepted", "Programmed")
