"""What git asked for a RayService, read from its intent ConfigMap (pure).

The renderer writes the intent (`schemas.intent` is the shared contract); this module
turns it into a frozen `ServiceIntent`, or raises `IntentError`. The strategy names and
the two annotations a person may set on the live HTTPRoute (pause, abort) live here too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from renderer import naming
from schemas import intent as contract
from syncer import trust
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
    cluster_domain: str = "cluster.local"

    @property
    def incremental(self) -> bool:
        """Whether traffic moves by HTTPRoute weights (`NewClusterWithIncrementalUpgrade`)."""
        return self.strategy == INCREMENTAL and self.routing is not None


def parse_service_intent(
    config_map: Manifest, *, cluster_domain: str = "cluster.local"
) -> ServiceIntent:
    """Read a RayService intent ConfigMap; raises IntentError for every shape it cannot act on.

    Namespace and name come from the ConfigMap (`syncer.trust`), never from the payload;
    the dashboard URL is rebuilt from the generation's head Service name in that namespace.
    """
    try:
        return _parse(config_map, cluster_domain)
    except IntentError:
        raise
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as exc:
        raise IntentError(f"malformed RayService intent: {type(exc).__name__}: {exc}") from exc


def _parse(config_map: Manifest, cluster_domain: str) -> ServiceIntent:
    namespace, name, intent = trust.load_payload(config_map, contract.RAYSERVICE)
    spec = trust.obj(intent.get("spec"), "spec")
    derived = trust.obj(intent.get("derived"), "derived")
    generation = derived.get("generation") or None
    if generation is not None and not isinstance(generation, dict):
        raise IntentError("derived.generation in the intent is not an object")
    upgrade = trust.obj(derived.get("upgrade"), "derived.upgrade")
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
    generation_name = None
    url = ""
    if isinstance(generation, dict):
        generation_name = str(generation["name"])
        head = generation.get("headServiceName") or naming.head_service_name(generation_name)
        url = trust.dashboard_url(
            namespace, str(head), generation.get("dashboardURL"), cluster_domain
        )
    return ServiceIntent(
        namespace=namespace,
        name=name,
        strategy=str(upgrade.get("type") or NEW_CLUSTER),
        generation=generation_name,
        dashboard_url=url,
        exclude_head=spec.get("excludeHeadPodFromServeSvc") is True,
        paused=upgrade.get("paused") is True,
        progress_deadline_s=trust.integer(deadline, "progressDeadlineSeconds") or None,
        deletion_delay_s=trust.integer(
            upgrade.get("rayClusterDeletionDelaySeconds"),
            "rayClusterDeletionDelaySeconds",
            contract.DEFAULT_DELETION_DELAY,
        ),
        routing=routing,
        cluster_domain=cluster_domain,
    )
