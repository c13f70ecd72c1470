"""What the RayService reconciler saw of the live world, as frozen values (pure).

Each generation's pods (readiness, the labels the syncer owns), its Serve config and what
its dashboard said (`Serve`, from `GET /api/serve/applications/`), and the live HTTPRoute.
The reconciler's views build them from cached objects; the state machine only reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from renderer import naming
from syncer.ray.types import ServeDetails

Manifest = dict[str, Any]

RUNNING: Final = "RUNNING"
_MESSAGE_LIMIT: Final = 500


@dataclass(frozen=True, slots=True)
class Pod:
    """One pod of a generation: readiness and the labels the syncer owns."""

    name: str
    node_type: str = "worker"
    ready: bool = False
    deleting: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)
    resource_version: str = ""

    @property
    def serve_active(self) -> bool:
        """Whether the RayService-level Services select this pod."""
        return self.labels.get(naming.SERVE_ACTIVE) == "true" and not self.deleting


@dataclass(frozen=True, slots=True)
class Deployment:
    """One Serve deployment's status, shown in the status only (never evaluated)."""

    name: str
    status: str
    message: str = ""


@dataclass(frozen=True, slots=True)
class App:
    """One Serve application's status."""

    status: str
    message: str = ""
    deployments: tuple[Deployment, ...] = ()


@dataclass(frozen=True, slots=True)
class Serve:
    """What one generation's dashboard said (`reachable=False`: it did not answer)."""

    reachable: bool
    error: str = ""
    apps: Mapping[str, App] = field(default_factory=dict)
    target_capacity: float | None = None
    proxies_healthy: bool = False


def serve_from_details(details: ServeDetails) -> Serve:
    """The state machine's view of `GET /api/serve/applications/` (an empty name is "default")."""
    apps = {
        (name or "default"): App(
            status=app["status"],
            message=app["message"],
            deployments=tuple(
                Deployment(d["name"], d["status"], d["message"])
                for _, d in sorted(app["deployments"].items())
            ),
        )
        for name, app in details["applications"].items()
    }
    proxies = details["proxies"].values()
    return Serve(
        reachable=True,
        apps=apps,
        target_capacity=details["target_capacity"],
        proxies_healthy=bool(proxies) and all(p["status"] == "HEALTHY" for p in proxies),
    )


@dataclass(frozen=True, slots=True)
class Generation:
    """One live cluster generation `<svc>-<hash>`, found by its labels."""

    name: str
    pods: tuple[Pod, ...] = ()
    config: Manifest | None = None
    serve: Serve | None = None

    @property
    def head(self) -> Pod | None:
        """The head pod, if it exists."""
        return next((p for p in self.pods if p.node_type == "head" and not p.deleting), None)

    @property
    def head_ready(self) -> bool:
        """Whether the head pod is Ready (KubeRay asks nothing of a cluster before that)."""
        head = self.head
        return head is not None and head.ready

    @property
    def reachable(self) -> bool:
        """Whether the dashboard answered in this pass."""
        return self.head_ready and self.serve is not None and self.serve.reachable


@dataclass(frozen=True, slots=True)
class Route:
    """The live HTTPRoute: its rules, annotations and whether the Gateway accepted it."""

    resource_version: str
    rules: tuple[Manifest, ...]
    annotations: Mapping[str, str] = field(default_factory=dict)
    accepted: bool = False


def apps_of(serve: Serve | None) -> dict[str, App]:
    """The applications a reachable dashboard reported ({} otherwise)."""
    if serve is None or not serve.reachable:
        return {}
    return dict(serve.apps)


def _short(text: str) -> str:
    """Cut long texts in the middle: a traceback's last line names the error."""
    if len(text) <= _MESSAGE_LIMIT:
        return text
    head = _MESSAGE_LIMIT // 3
    return f"{text[:head]}…{text[-(_MESSAGE_LIMIT - head - 1) :]}"


def trim_apps(apps: Mapping[str, App]) -> dict[str, App]:
    """Application statuses with messages cut to a size a ConfigMap can hold many of."""
    return {
        name: App(
            app.status,
            _short(app.message),
            tuple(Deployment(d.name, d.status, _short(d.message)) for d in app.deployments),
        )
        for name, app in apps.items()
    }
