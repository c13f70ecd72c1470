"""The RayService's status record: what the syncer publishes and reads back after a restart.

`Record` holds KubeRay's status fields (active and pending `Side`, conditions, endpoints)
and the syncer's own bookkeeping (deployed digests, dashboards, deletion times, the upgrade
clock). `to_status`/`to_json`/`from_json` are its forms; `phase` and `status_rows` are what
metrics and `kuberay status` show. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from renderer import naming
from schemas import intent as contract
from syncer import status
from syncer.kube import meta
from syncer.kube.timestamps import format_time, parse_time
from syncer.rayservice.intent import INCREMENTAL
from syncer.rayservice.observed import App, Deployment

Manifest = dict[str, Any]

# Condition types and reasons (rayservice.md §10.2), plus the project's own.
READY: Final = "Ready"
UPGRADE: Final = "UpgradeInProgress"
ROLLBACK: Final = "RollbackInProgress"
PAUSED: Final = "UpgradePaused"
SUSPENDING: Final = "Suspending"
SUSPENDED: Final = "Suspended"
REASON_SPEC_CHANGED: Final = "DesiredClusterSpecChanged"
REASON_ABORTED: Final = "UpgradeAborted"
REASON_DEADLINE: Final = "ProgressDeadlineExceeded"


@dataclass(frozen=True, slots=True)
class Side:
    """`activeServiceStatus` / `pendingServiceStatus`."""

    name: str = ""
    apps: Mapping[str, App] = field(default_factory=dict)
    target_capacity: int | None = None
    traffic: int | None = None
    migrated_at: float | None = None


@dataclass(frozen=True, slots=True)
class Condition:
    """One status condition; `since` is its lastTransitionTime."""

    type: str
    status: str
    reason: str
    message: str
    since: float


@dataclass(frozen=True, slots=True)
class Record:
    """KubeRay's RayService status plus the syncer's bookkeeping (the status ConfigMap)."""

    strategy: str = ""
    active: Side = field(default_factory=Side)
    pending: Side = field(default_factory=Side)
    conditions: tuple[Condition, ...] = ()
    endpoints: int = 0
    updated_at: float | None = None
    deployed: Mapping[str, str] = field(default_factory=dict)
    dashboards: Mapping[str, str] = field(default_factory=dict)
    retire_at: Mapping[str, float] = field(default_factory=dict)
    retired: tuple[str, ...] = ()
    upgrade_started: float | None = None
    unhealthy_since: float | None = None
    failed: str = ""
    error: str = ""

    def condition(self, kind: str) -> Condition | None:
        """The condition of this type, if set."""
        return next((c for c in self.conditions if c.type == kind), None)

    def is_true(self, kind: str) -> bool:
        """Whether the condition of this type is True."""
        found = self.condition(kind)
        return found is not None and found.status == "True"

    def to_status(self) -> Manifest:
        """KubeRay's `RayService.status` field names and forms (rayservice.md §10.1)."""
        incremental = self.strategy == INCREMENTAL
        status: Manifest = {
            "serviceStatus": "Running" if self.is_true(READY) else "",
            "numServeEndpoints": self.endpoints,
            "conditions": [
                {
                    "type": c.type,
                    "status": c.status,
                    "reason": c.reason,
                    "message": c.message,
                    "lastTransitionTime": format_time(c.since),
                }
                for c in self.conditions
            ],
        }
        if self.updated_at is not None:
            status["lastUpdateTime"] = format_time(self.updated_at)
        for key, side in (
            ("activeServiceStatus", self.active),
            ("pendingServiceStatus", self.pending),
        ):
            status[key] = _side_status(side, incremental=incremental)
        return status

    def to_json(self) -> Manifest:
        """Everything, for the status ConfigMap (KubeRay's fields plus bookkeeping)."""
        return {
            "status": self.to_status(),
            "syncer": {
                "strategy": self.strategy,
                "deployed": dict(sorted(self.deployed.items())),
                "dashboards": dict(sorted(self.dashboards.items())),
                "retireAt": dict(sorted(self.retire_at.items())),
                "retired": list(self.retired),
                "upgradeStartTime": self.upgrade_started,
                "unhealthySince": self.unhealthy_since,
                "failedGeneration": self.failed,
                "error": self.error,
                # Exact times: the status' RFC 3339 strings drop fractions.
                "activeMigratedAt": self.active.migrated_at,
                "pendingMigratedAt": self.pending.migrated_at,
                "updatedAt": self.updated_at,
            },
        }

    @classmethod
    def from_json(cls, data: Manifest) -> Record:
        """Read back what `to_json` wrote (tolerant of missing keys)."""
        status = data.get("status") or {}
        own = data.get("syncer") or {}
        conditions = tuple(
            Condition(
                type=str(c.get("type") or ""),
                status=str(c.get("status") or ""),
                reason=str(c.get("reason") or ""),
                message=str(c.get("message") or ""),
                since=parse_time(c.get("lastTransitionTime")) or 0.0,
            )
            for c in status.get("conditions") or []
        )
        return cls(
            strategy=str(own.get("strategy") or ""),
            active=_side_from(status.get("activeServiceStatus") or {}, own.get("activeMigratedAt")),
            pending=_side_from(
                status.get("pendingServiceStatus") or {}, own.get("pendingMigratedAt")
            ),
            conditions=conditions,
            endpoints=int(status.get("numServeEndpoints") or 0),
            updated_at=own.get("updatedAt", parse_time(status.get("lastUpdateTime"))),
            deployed={str(k): str(v) for k, v in (own.get("deployed") or {}).items()},
            dashboards={str(k): str(v) for k, v in (own.get("dashboards") or {}).items()},
            retire_at={str(k): float(v) for k, v in (own.get("retireAt") or {}).items()},
            retired=tuple(str(x) for x in own.get("retired") or ()),
            upgrade_started=own.get("upgradeStartTime"),
            unhealthy_since=own.get("unhealthySince"),
            failed=str(own.get("failedGeneration") or ""),
            error=str(own.get("error") or ""),
        )


def _side_status(side: Side, *, incremental: bool) -> Manifest:
    if not side.name:
        return {}
    out: Manifest = {"rayClusterName": side.name}
    if side.apps:
        out["applicationStatuses"] = {
            name: {
                "status": app.status,
                "message": app.message,
                "serveDeploymentStatuses": {
                    d.name: {"status": d.status, "message": d.message} for d in app.deployments
                },
            }
            for name, app in sorted(side.apps.items())
        }
    if incremental:
        if side.target_capacity is not None:
            out["targetCapacity"] = side.target_capacity
        if side.traffic is not None:
            out["trafficRoutedPercent"] = side.traffic
        if side.migrated_at is not None:
            out["lastTrafficMigratedTime"] = format_time(side.migrated_at)
    return out


def _side_from(data: Manifest, migrated_at: Any) -> Side:
    apps = {
        str(name): App(
            status=str(app.get("status") or ""),
            message=str(app.get("message") or ""),
            deployments=tuple(
                Deployment(str(d), str(v.get("status") or ""), str(v.get("message") or ""))
                for d, v in (app.get("serveDeploymentStatuses") or {}).items()
            ),
        )
        for name, app in (data.get("applicationStatuses") or {}).items()
    }
    capacity = data.get("targetCapacity")
    traffic = data.get("trafficRoutedPercent")
    exact = migrated_at if isinstance(migrated_at, int | float) else None
    return Side(
        name=str(data.get("rayClusterName") or ""),
        apps=apps,
        target_capacity=int(capacity) if capacity is not None else None,
        traffic=int(traffic) if traffic is not None else None,
        migrated_at=exact if exact is not None else parse_time(data.get("lastTrafficMigratedTime")),
    )


# --- what people see -------------------------------------------------------------------------


def phase(record: Record) -> str:
    """One word for where a RayService is (metrics, `kuberay status`)."""
    if record.is_true(SUSPENDED) or record.is_true(SUSPENDING):
        return "Suspended"
    if record.is_true(ROLLBACK):
        return "RollingBack"
    upgrade = record.condition(UPGRADE)
    if upgrade is not None and upgrade.reason in (
        REASON_ABORTED,
        REASON_DEADLINE,
    ):
        return "Held"
    if record.active.name and record.pending.name:
        return "Upgrading"
    if record.is_true(READY):
        return "Running"
    return "Initializing"


def status_rows(configmap: Manifest) -> list[dict[str, str]]:
    """Rows for `kuberay status`: one per generation (active, pending) of a RayService.

    Keys: namespace, name, kind, phase, role, cluster, serviceStatus, endpoints,
    applications (`app=STATUS,...`), targetCapacity, trafficRoutedPercent,
    lastTrafficMigratedTime, conditions (`Type=Status,...`), lastUpdateTime, error.
    """
    record = status.read_record(configmap, Record.from_json) or Record()
    published = record.to_status()
    base = {
        "namespace": meta.namespace(configmap),
        "name": meta.label(configmap, naming.ORIGIN_NAME) or meta.name(configmap),
        "kind": contract.RAYSERVICE,
        "phase": phase(record),
        "serviceStatus": str(published.get("serviceStatus") or ""),
        "endpoints": str(record.endpoints),
        "conditions": ",".join(f"{c.type}={c.status}" for c in record.conditions),
        "lastUpdateTime": str(published.get("lastUpdateTime") or ""),
        "error": record.error,
    }
    rows = []
    for role, key in (("active", "activeServiceStatus"), ("pending", "pendingServiceStatus")):
        side: Manifest = published.get(key) or {}
        if not side:
            continue
        apps = side.get("applicationStatuses") or {}
        rows.append(
            {
                **base,
                "role": role,
                "cluster": str(side.get("rayClusterName") or ""),
                "applications": ",".join(f"{n}={a['status']}" for n, a in sorted(apps.items())),
                "targetCapacity": str(side.get("targetCapacity", "")),
                "trafficRoutedPercent": str(side.get("trafficRoutedPercent", "")),
                "lastTrafficMigratedTime": str(side.get("lastTrafficMigratedTime") or ""),
            }
        )
    if not rows:
        rows.append(
            {
                **base,
                "role": "-",
                "cluster": "",
                "applications": "",
                "targetCapacity": "",
                "trafficRoutedPercent": "",
                "lastTrafficMigratedTime": "",
            }
        )
    return rows
