"""The status ConfigMap `<name>-kuberay-status`: where each reconciler publishes what it saw.

One record per RayJob or RayService: canonical JSON under `status.json` plus a few flat
keys for `kubectl`, labelled with the origin and owned by the object that anchors it. This
module reads the record back (`read_record`), writes the map (`publish`) and mirrors a few
status words as annotations on the anchor (`annotate`). It also holds the projections of
the ConfigMaps the engine caches. The record's shape is each kind's own (`to_json`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final, TypeVar

from renderer import naming
from syncer.errors import ConflictError
from syncer.kube import meta
from syncer.kube.cache import Cache
from syncer.kube.client import CONFIGMAPS, Kube, Manifest, Resource

STATUS_KEY: Final = "status.json"
ROLE_STATUS: Final = "status"
SYNCER_MANAGER: Final = "kuberay-syncer"
STATUS_ANNOTATION_PREFIX: Final = "status.kuberay.io/"
_LOG = logging.getLogger(__name__)

R = TypeVar("R")

_CONFIGMAP_META: Final = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "labels",
    "annotations",
    "ownerReferences",
    "deletionTimestamp",
)
_STATUS_META: Final = ("name", "namespace", "resourceVersion", "labels", "deletionTimestamp")


@dataclass(frozen=True, slots=True)
class Owner:
    """The object a status ConfigMap is owned by (garbage-collected with it)."""

    api_version: str
    kind: str
    name: str
    uid: str

    def reference(self) -> Manifest:
        """The `ownerReferences` entry."""
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
        }


# The most ConfigMap `data` the caches keep per intent or status map; a bigger map is
# cached as `{OVERSIZED_KEY: "<bytes>"}` (no renderer output comes near it).
MAX_CACHED_DATA: Final = 256 * 1024
OVERSIZED_KEY: Final = "kuberay.io/oversized-bytes"


def slim_configmap(cm: Manifest, *, keep: Iterable[str] | None = None) -> Manifest:
    """An intent or status ConfigMap as cached: identity, labels, annotations and data.

    Drops `managedFields` and other server bookkeeping, which would double what ten
    thousand jobs' maps cost in memory. `keep`: the metadata fields kept.
    """
    kept = meta.metadata(cm)
    data = cm.get("data")
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        data = {}
    size = sum(len(v) for v in data.values())
    if size > MAX_CACHED_DATA:
        # Not cached: the reader sees the marker and reports it (H1: memory stays bounded).
        data = {OVERSIZED_KEY: str(size)}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {k: kept[k] for k in (keep or _CONFIGMAP_META) if k in kept},
        "data": data,
    }


def slim_status(cm: Manifest) -> Manifest:
    """A status ConfigMap as cached: labels, data and resourceVersion (no uid, no owner).

    The syncer writes the whole map each time and reads back only those.
    """
    return slim_configmap(cm, keep=_STATUS_META)


def read_record(status_cm: Manifest | None, from_json: Callable[[Manifest], R]) -> R | None:
    """The record a status ConfigMap holds (None when absent or unreadable: start over)."""
    if status_cm is None:
        return None
    text = (status_cm.get("data") or {}).get(STATUS_KEY)
    if not text:
        return None
    try:
        return from_json(json.loads(text))
    except (ValueError, TypeError, AttributeError):
        _LOG.error("unreadable status ConfigMap %s; starting over", meta.name(status_cm))
        return None


def publish(
    kube: Kube,
    statuses: Cache,
    *,
    origin_kind: str,
    origin_name: str,
    namespace: str,
    record: Manifest,
    fields: Mapping[str, str],
    owner: Owner | None,
    current: Manifest | None,
) -> Manifest:
    """Create or replace the status ConfigMap (guarded by `current`'s resourceVersion)."""
    metadata: Manifest = {
        "name": naming.status_configmap_name(origin_name),
        "namespace": namespace,
        "labels": {
            naming.MANAGED_BY: SYNCER_MANAGER,
            naming.ORIGIN_KIND: origin_kind,
            naming.ORIGIN_NAME: origin_name,
            naming.ROLE: ROLE_STATUS,
        },
    }
    if owner is not None:
        metadata["ownerReferences"] = [owner.reference()]
    data = {STATUS_KEY: json.dumps(record, sort_keys=True, separators=(",", ":")), **fields}
    if current is None:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}
        written = kube.create(CONFIGMAPS, namespace, body)
    else:
        metadata["resourceVersion"] = meta.metadata(current).get("resourceVersion")
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}
        written = kube.replace(CONFIGMAPS, namespace, body)
    statuses.upsert(written)
    return written


def annotate(
    kube: Kube,
    cache: Cache,
    resource: Resource,
    obj: Manifest | None,
    wanted: Mapping[str, str],
    *,
    guarded: bool = False,
) -> None:
    """Mirror status words as annotations on a rendered object (best effort).

    Skipped when they are there already (the caches keep them, so a restarted syncer does
    not write them again) or `obj` is not the renderer's. `guarded`: the patch tests the
    cached resourceVersion (a conflict waits for the next pass).
    """
    if obj is None or not meta.is_rendered(obj):
        return
    have = meta.metadata(obj).get("annotations") or {}
    if all(have.get(k, "") == v for k, v in wanted.items()):
        return
    metadata: Manifest = {"annotations": dict(wanted)}
    if guarded:
        metadata = {
            "resourceVersion": str(meta.metadata(obj).get("resourceVersion") or ""),
            **metadata,
        }
    try:
        patched = kube.patch(resource, meta.namespace(obj), meta.name(obj), {"metadata": metadata})
    except ConflictError:
        return  # the next pass sees the new version
    cache.upsert(patched)
