"""What git asked for a RayService, read from its intent ConfigMap (pure).

The renderer writes the intent (`schemas.intent` is the shared contract); this module
turns it into a frozen `ServiceIntent`, or raises `IntentError`. The strategy names and
the two annotations a person may set on the live HTTPRoute (pause, abort) live here too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from renderer import naming
from schemas import intent as contract
from syncer.errors import IntentError

Manifest = dict[str, Any]

INCREMENTAL: Final = contract.INCREMENTAL
NEW_CLUSTER: Final = contract.NEW_CLUSTER
NONE: Final = contract.NONE
# Set by a person on the live HTTPRoute (git does not declare them): pause and abort.
ANN_PAUSED: Final = contract.ANN_UPGRADE_PAUSED
ANN_ABORT: Final = "kuberay.io/upgrade-abort"


@dataclass(frozen=True, slots=True)
class Routing:
    """The HTTPRoute of an incremental upgrade and KubeRay's `clusterUpgradeOptions`."""

    gateway: str
    route: str
    serve_port: int
    step: int
    interval_s: int
    surge: int


@dataclass(frozen=True, slots=True)
class ServiceIntent:
    """A RayService as rendered: what git asks for (the shape is `schemas.intent`)."""

    namespace: str
    name: str
    strategy: str
    generation: str | None
    dashboard_url: str = ""
    exclude_head: bool = False
    paused: bool = False
    progress_deadline_s: int | None = None
    deletion_delay_s: int = contract.DEFAULT_DELETION_DELAY
    routing: Routing | None = None

    @property
    def incremental(self) -> bool:
        """Whether traffic moves by HTTPRoute weights (`NewClusterWithIncrementalUpgrade`)."""
        return self.strategy == INCREMENTAL and self.routing is not None


def parse_service_intent(config_map: Manifest) -> ServiceIntent:
    """Read a RayService intent ConfigMap; raises IntentError when it is malformed."""
    data = (config_map.get("data") or {}).get(naming.INTENT_KEY)
    if not data:
        raise IntentError(f"no {naming.INTENT_KEY} in the intent ConfigMap")
    try:
        intent = json.loads(data)
    except ValueError as exc:
        raise IntentError(f"{naming.INTENT_KEY} is not JSON: {exc}") from exc
    if not isinstance(intent, dict) or intent.get("kind") != contract.RAYSERVICE:
        raise IntentError("not a RayService intent")
    meta = intent.get("metadata") or {}
    spec = intent.get("spec") or {}
    derived = intent.get("derived") or {}
    generation = derived.get("generation") or None
    upgrade = derived.get("upgrade") or {}
    routing_data = upgrade.get("routing")
    routing = None
    if isinstance(routing_data, dict):
        try:
            routing = Routing(
                gateway=str(routing_data["gatewayName"]),
                route=str(routing_data["httpRouteName"]),
                serve_port=int(routing_data.get("servePort") or 8000),
                step=int(routing_data["stepSizePercent"]),
                interval_s=int(routing_data["intervalSeconds"]),
                surge=int(routing_data.get("maxSurgePercent", 100)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise IntentError(f"bad routing in the intent: {exc}") from exc
    deadline = upgrade.get("progressDeadlineSeconds")
    own_meta = config_map.get("metadata") or {}
    return ServiceIntent(
        namespace=str(meta.get("namespace") or own_meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        strategy=str(upgrade.get("type") or NEW_CLUSTER),
        generation=str(generation["name"]) if isinstance(generation, dict) else None,
        dashboard_url=str((generation or {}).get("dashboardURL") or ""),
        exclude_head=spec.get("excludeHeadPodFromServeSvc") is True,
        paused=upgrade.get("paused") is True,
        progress_deadline_s=int(deadline) if deadline else None,
        deletion_delay_s=int(
            upgrade.get("rayClusterDeletionDelaySeconds", contract.DEFAULT_DELETION_DELAY)
        ),
        routing=routing,
    )
