"""`kuberay status`: the syncer's published status, read from the cluster and shown as tables.

RayJobs and RayServices share one table; Ray clusters get a second one shaped like
`kubectl get raycluster` (desired and available workers, CPUs, GPUs, memory, status, age;
the age is the status ConfigMap's, i.e. since the syncer first saw the head Pod).

Registered into the `kuberay` command through the `kuberay.commands` entry point, so the
renderer package never imports the Kubernetes client.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import click

from renderer import emit, naming
from syncer.autoscaler import report
from syncer.autoscaler.spec import ROLE_STATE
from syncer.errors import SyncerError
from syncer.kube.client import CONFIGMAPS, KubeClient
from syncer.status import STATUS_KEY, STATUS_SELECTOR, SYNCER_MANAGER

Manifest = dict[str, Any]
ROLE_STATUS = "status"
_SELECTOR = STATUS_SELECTOR  # only the syncer's own maps (M1)
_JOB_COLUMNS = (
    "NAMESPACE",
    "NAME",
    "KIND",
    "DEPLOYMENT",
    "JOB STATUS",
    "ATTEMPT",
    "START",
    "END",
    "REASON",
)


_CLUSTER_COLUMNS = (
    "NAMESPACE",
    "NAME",
    "DESIRED WORKERS",
    "AVAILABLE WORKERS",
    "CPUS",
    "MEMORY",
    "GPUS",
    "STATUS",
    "AGE",
)
CLUSTER_KIND = "RayCluster"


def age(created: Any, now: float) -> str:
    """A short age as kubectl prints one (`45s`, `12m`, `3h`, `2d`); `<unknown>` if none."""
    if not isinstance(created, str):
        return "<unknown>"
    try:
        then = datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return "<unknown>"
    seconds = max(0, int(now - then))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def cluster_row(cm: Manifest, now: float) -> tuple[str, ...]:
    """One row of the cluster table, from a RayCluster status ConfigMap."""
    meta = cm.get("metadata") or {}
    labels = meta.get("labels") or {}
    status = status_document(cm).get("status") or {}
    return (
        str(meta.get("namespace", "")),
        str(labels.get(naming.ORIGIN_NAME, meta.get("name", ""))),
        str(status.get("desiredWorkerReplicas", 0)),
        str(status.get("availableWorkerReplicas", 0)),
        str(status.get("desiredCPU", "0")),
        str(status.get("desiredMemory", "0")),
        str(status.get("desiredGPU", "0")),
        str(status.get("state", "")),
        age(meta.get("creationTimestamp"), now),
    )


def tables(items: Sequence[Manifest], now: float) -> str:
    """The job/service table and the cluster table, each only when it has rows."""
    kinds = [
        ((cm.get("metadata") or {}).get("labels") or {}).get(naming.ORIGIN_KIND) for cm in items
    ]
    others = sorted(row(cm) for cm, kind in zip(items, kinds, strict=True) if kind != CLUSTER_KIND)
    clusters = sorted(
        cluster_row(cm, now) for cm, kind in zip(items, kinds, strict=True) if kind == CLUSTER_KIND
    )
    parts = []
    if others or not clusters:
        parts.append(table(others))
    if clusters:
        parts.append(table(clusters, _CLUSTER_COLUMNS))
    return "\n".join(parts)


def status_document(cm: Manifest) -> Manifest:
    """The decoded `status.json` of a status ConfigMap (empty when unreadable)."""
    try:
        decoded = json.loads((cm.get("data") or {}).get(STATUS_KEY) or "{}")
    except ValueError:
        return {}
    return decoded if isinstance(decoded, dict) else {}


def row(cm: Manifest) -> tuple[str, ...]:
    """One table row for a status ConfigMap."""
    meta = cm.get("metadata") or {}
    labels = meta.get("labels") or {}
    document = status_document(cm)
    status = document.get("status") or {}
    own = document.get("syncer") or {}
    kind = str(labels.get(naming.ORIGIN_KIND, "?"))
    if kind == "RayService":
        # The serving generation and, during an upgrade, the one traffic is moving to.
        deployment = str(status.get("serviceStatus") or "NotReady")
        active = (status.get("activeServiceStatus") or {}).get("rayClusterName") or ""
        pending = (status.get("pendingServiceStatus") or {}).get("rayClusterName") or ""
        job = f"{active} -> {pending}" if pending else str(active)
    else:
        deployment = str(status.get("jobDeploymentStatus", ""))
        job = str(status.get("jobStatus", ""))
    return (
        str(meta.get("namespace", "")),
        str(labels.get(naming.ORIGIN_NAME, meta.get("name", ""))),
        kind,
        deployment or "-",
        job or "-",
        str(own.get("attempt", "")) if kind == "RayJob" else "",
        str(status.get("startTime", "")),
        str(status.get("endTime", "")),
        str(status.get("reason", "")),
    )


_AUTOSCALER_COLUMNS = (
    "NAMESPACE",
    "CLUSTER",
    "GROUP",
    "DESIRED",
    "PODS",
    "READY",
    "MAX",
    "WORKERS CREATED",
)


def autoscaler_rows(cm: Manifest) -> list[tuple[str, ...]]:
    """Desired and running workers per group, from one autoscaler state ConfigMap."""
    meta = cm.get("metadata") or {}
    text = (meta.get("annotations") or {}).get(report.STATUS_ANNOTATION)
    try:
        record = json.loads(text or "{}")
    except ValueError:
        record = {}
    if not isinstance(record, dict):
        return []
    condition = (record.get("conditions") or [{}])[0]
    created = str(condition.get("status", "")) if isinstance(condition, dict) else ""
    if created == "False":
        created = f"False ({condition.get('reason', '')})"
    cluster = str((meta.get("labels") or {}).get(naming.RAY_CLUSTER, ""))
    groups = record.get("groups")
    if not isinstance(groups, dict):
        return []
    return [
        (
            str(meta.get("namespace", "")),
            cluster,
            str(group),
            *(str(counts.get(k, "")) for k in ("desired", "pods", "ready", "max")),
            created or "-",
        )
        for group, counts in sorted(groups.items())
        if isinstance(counts, dict)
    ]


def table(rows: Sequence[tuple[str, ...]], header: tuple[str, ...] = _JOB_COLUMNS) -> str:
    """Rows as an aligned plain-text table."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [header, *rows]
    ]
    return "\n".join(lines) + "\n"


@click.command("status")
@click.argument("target", required=False)
@click.option("-n", "--namespace", default=None, help="Only this namespace.")
@click.option("-A", "--all-namespaces", is_flag=True, help="Every namespace.")
@click.option(
    "--kubeconfig",
    default=None,
    help="A kubeconfig file (default: in-cluster, then ~/.kube/config).",
)
def status(
    target: str | None, namespace: str | None, all_namespaces: bool, kubeconfig: str | None
) -> None:
    """Show what the syncer published: `kuberay status [NAMESPACE/NAME]`."""
    try:
        kube = KubeClient.from_environment(kubeconfig)
    except Exception as exc:  # noqa: BLE001 - any config failure is a usage problem here
        click.echo(f"error: cannot load Kubernetes credentials: {exc}", err=True)
        sys.exit(2)
    try:
        if target:
            ns, _, name = target.rpartition("/")
            cm = kube.get(
                CONFIGMAPS, ns or namespace or "default", naming.status_configmap_name(name)
            )
            if cm is None:
                click.echo(
                    f"error: no status published for {target} (is the syncer running?)", err=True
                )
                sys.exit(1)
            sys.stdout.write(emit.dump(status_document(cm)))
            return
        scope = None if all_namespaces else (namespace or "default")
        items, _ = kube.list(CONFIGMAPS, scope, label_selector=_SELECTOR)
        states, _ = kube.list(
            CONFIGMAPS,
            scope,
            label_selector=f"{naming.MANAGED_BY}={SYNCER_MANAGER},{naming.ROLE}={ROLE_STATE}",
        )
    except SyncerError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    sys.stdout.write(tables(items, time.time()))
    scaled = sorted(r for cm in states for r in autoscaler_rows(cm))
    if scaled:
        sys.stdout.write("\n" + table(scaled, _AUTOSCALER_COLUMNS))


def collectable(cm: Manifest) -> str | None:
    """Why the object behind a status ConfigMap may now leave git, or None.

    Only a map with the syncer's label and the status name of the origin it labels (M1).
    """
    labels = (cm.get("metadata") or {}).get("labels") or {}
    origin = str(labels.get(naming.ORIGIN_NAME) or "")
    if labels.get(naming.MANAGED_BY) != SYNCER_MANAGER or (cm.get("metadata") or {}).get(
        "name"
    ) != naming.status_configmap_name(origin):
        return None
    document = status_document(cm)
    status = document.get("status") or {}
    own = document.get("syncer") or {}
    if labels.get(naming.ORIGIN_KIND) == "RayJob":
        state = status.get("jobDeploymentStatus")
        if state in ("Complete", "Failed"):
            cleaned = ", ".join(own.get("cleanup") or []) or "no cleanup policy"
            return f"{state.lower()} at {status.get('endTime', '?')} ({cleaned})"
    return None


@click.command("gc")
@click.option("-n", "--namespace", default=None, help="Only this namespace.")
@click.option("-A", "--all-namespaces", is_flag=True, help="Every namespace.")
@click.option(
    "--kubeconfig",
    default=None,
    help="A kubeconfig file (default: in-cluster, then ~/.kube/config).",
)
def gc(namespace: str | None, all_namespaces: bool, kubeconfig: str | None) -> None:
    """List what git may now drop: RayJobs that have finished (their pods are released)."""
    try:
        kube = KubeClient.from_environment(kubeconfig)
        scope = None if all_namespaces else (namespace or "default")
        items, _ = kube.list(CONFIGMAPS, scope, label_selector=_SELECTOR)
    except SyncerError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    rows = []
    for cm in items:
        reason = collectable(cm)
        if reason is not None:
            meta = cm.get("metadata") or {}
            labels = meta.get("labels") or {}
            rows.append(
                (
                    str(meta.get("namespace", "")),
                    str(labels.get(naming.ORIGIN_KIND)),
                    str(labels.get(naming.ORIGIN_NAME)),
                    reason,
                )
            )
    sys.stdout.write(table(sorted(rows), ("NAMESPACE", "KIND", "NAME", "WHY")))
