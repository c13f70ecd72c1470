"""The status ConfigMap `<name>-kuberay-status`: where each reconciler publishes what it saw.

One record per RayJob or RayService: canonical JSON under `status.json` plus a few flat
keys for `kubectl`, labelled with the origin and owned by the object that anchors it. This
module reads the record back (`read_record`), decides whether a cached map is the syncer's
own (`distrust`: labels, owner, and the `Ledger` of what this process wrote), writes the map
(`publish`: create, or a merge patch guarded by resourceVersion; a name held by a foreign
map is a `SquattedError`, never overwritten) and mirrors a few status words as annotations
on the anchor (`annotate`, a merge patch that names the object's uid). It also holds the
projections of the ConfigMaps the engine caches. The record's shape is each kind's own.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Final, TypeVar

from renderer import naming
from syncer.codebook import Codebook
from syncer.errors import ConflictError, SquattedError, SyncerError
from syncer.kube import meta
from syncer.kube.cache import Cache
from syncer.kube.client import CONFIGMAPS, Kube, Manifest, Resource

STATUS_KEY: Final = "status.json"
ROLE_STATUS: Final = "status"
SYNCER_MANAGER: Final = "kuberay-syncer"
STATUS_ANNOTATION_PREFIX: Final = "status.kuberay.io/"
# What the status cache selects: a bare squatter is not cached as a record (its name is
# found taken when the status is created, M1).
STATUS_SELECTOR: Final = f"{naming.MANAGED_BY}={SYNCER_MANAGER},{naming.ROLE}={ROLE_STATUS}"
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
_STATUS_META: Final = (
    "name",
    "namespace",
    "resourceVersion",
    "labels",
    "ownerReferences",
    "deletionTimestamp",
)


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
    # (bytes: a record `slim_status` packed, when a cached map is projected again)
    if not isinstance(data, dict) or not all(isinstance(v, str | bytes) for v in data.values()):
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


# The data keys of a status map that are read from the cache: the record, and the one word
# the RayCluster reconciler's healing reads of a RayJob's. The other words (KubeRay's
# fields for `kubectl get -o` and health checks) are written each time, never read back.
_STATUS_DATA: Final = (STATUS_KEY, "jobDeploymentStatus", OVERSIZED_KEY)


_PACK_OVER: Final = 256  # cached records longer than this are kept packed

# Packed records (`syncer.codebook`): the fragments every RayJob and RayCluster record
# repeats, longer ones first.
_RECORDS: Final = Codebook(
    (
        b'","message":"All Ray Pods are ready for the first time","reason":'
        b'"AllPodRunningAndReadyFirstTime","status":"True","type":"RayClusterProvisioned"}',
        b'","message":"","reason":"RayClusterSuspending","status":"False",'
        b'"type":"RayClusterSuspending"}',
        b'","message":"","reason":"RayClusterSuspended","status":"False","type":"RayClusterSuspended"}',
        b'","message":"","reason":"HeadPodRunningAndReady","status":"True","type":"HeadPodReady"}',
        b'","rayClusterStatus":{"availableWorkerReplicas":0,"desiredWorkerReplicas":0,'
        b'"readyWorkerReplicas":0,"state":"',
        b'","message":"Job is currently running.","rayClusterName":"',
        b',"endTime":null,"rayEndTime":null,"rayStartTime":',
        b'"state":"ready","stateTransitionTimes":{"ready":"',
        b',"checkFailureStart":null,"cleanup":[',
        b',"stopPending":null,"ungated":true}}',
        b'"failed":0,"jobDeploymentStatus":"',
        b'{"status":{"conditions":[',
        b'.svc.cluster.local:8265"',
        b'{"lastTransitionTime":"',
        b'"dashboardURL":"http://',
        b'"jobDeploymentStatus":"',
        b'"rayJobInfo":{"startTime":"',
        b'},"syncer":{"attempt":',
        b'"lastUpdateTime":"',
        b'"head":{"podIP":"',
        b'"dashboardURL":"',
        b'"desiredMemory":"',
        b'"desiredGPU":"0"',
        b'"desiredTPU":"0"',
        b'"desiredCPU":"',
        b'","jobStatus":"',
        b'","podName":"',
        b'","message":"',
        b'","startTime":',
        b'","jobId":"',
        b"-head-svc.",
    )
)

# Packed intents: the keys every rendered intent repeats (canonical JSON: sorted keys).
_INTENTS: Final = Codebook(
    (
        b'","submissionMode":"K8sJobMode","submitterContainerName":null,"submitterJobName":"',
        b'","workerPodNames":[]},"kind":"RayJob","metadata":{"annotations":{},"labels":{},',
        b',"shutdownAfterJobFinishes":true,"submissionMode":"K8sJobMode",',
        b'","clusterRendered":true,"dashboardURL":"http://',
        b'.svc.cluster.local:8265","headPodName":"',
        b'","runtimeEnv":null,"submissionId":"',
        b'"ttlSecondsAfterFinished":',
        b'{"derived":{"clusterName":"',
        b'","jobHeadServiceName":"',
        b'","headServiceName":"',
        b'"},"spec":{"entrypoint":"',
        b'"metadata":{"annotations":{',
        b'"kind":"RayCluster"',
        b'"kind":"RayService"',
        b'"submissionMode":"',
        b'},"version":1}',
        b'"namespace":"',
        b"-head-svc",
        b'"labels":{',
        b'"name":"',
        b'"spec":{',
        b':{"',
        b'":"',
        b'","',
        b'":{',
        b'},"',
        b'":[',
        b'":true',
        b'":false',
        b'":null',
        b'":0',
    )
)


def _packed(book: Codebook, value: object) -> object:
    """`value` packed by `book` when it is text longer than `_PACK_OVER`, else as it is."""
    return book.pack(value) if isinstance(value, str) and len(value) > _PACK_OVER else value


def slim_intent(cm: Manifest) -> Manifest:
    """An intent ConfigMap as cached: `slim_configmap`, with a long `intent.json` packed.

    ~7 MB less at ten thousand jobs; a pass unpacks it in microseconds (`cached_text`).
    """
    slim = slim_configmap(cm)
    if naming.INTENT_KEY in slim["data"]:
        text = slim["data"][naming.INTENT_KEY]
        slim["data"] = {**slim["data"], naming.INTENT_KEY: _packed(_INTENTS, text)}
    return slim


def cached_text(value: object) -> object:
    """A cached intent ConfigMap's data value as text: a packed one unpacked (else as is).

    UnicodeDecodeError (a ValueError) for bytes that no packing made.
    """
    return _INTENTS.unpack(value) if isinstance(value, bytes) else value


def slim_status(cm: Manifest) -> Manifest:
    """A status ConfigMap as cached: labels, owner, record and resourceVersion (no uid).

    The syncer writes the whole map each time and reads back only those.
    """
    slim = slim_configmap(cm, keep=_STATUS_META)
    data = slim["data"]
    slim["data"] = {k: data[k] for k in _STATUS_DATA if k in data}
    if STATUS_KEY in slim["data"]:
        # Packed: about a third of the bytes of a RayCluster's record and half of a RayJob's,
        # ~10 MB at ten thousand jobs, for microseconds when a pass reads it (`read_record`).
        slim["data"][STATUS_KEY] = _packed(_RECORDS, slim["data"][STATUS_KEY])
    owners = slim["metadata"].get("ownerReferences")
    if owners is not None:
        # Only what `distrust` compares: the owners' uids.
        slim["metadata"]["ownerReferences"] = [
            {"uid": str(o.get("uid") or "")} for o in owners if isinstance(o, dict)
        ]
    return slim


def status_labels(origin_kind: str, origin_name: str) -> dict[str, str]:
    """The labels of the syncer's status ConfigMap for one origin."""
    return {
        naming.MANAGED_BY: SYNCER_MANAGER,
        naming.ORIGIN_KIND: origin_kind,
        naming.ORIGIN_NAME: origin_name,
        naming.ROLE: ROLE_STATUS,
    }


class Ledger:
    """The resourceVersion of each status ConfigMap as this process last wrote it.

    A cached map whose version differs was written by someone else since (review M1):
    its record is not trusted. Cleared when this replica gains the lease (the other
    replica wrote meanwhile); an entry is dropped when a write's outcome is unknown.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._versions: dict[tuple[str, str], str] = {}

    def wrote(self, cm: Manifest) -> None:
        """Remember the version of a map this process just wrote."""
        version = str(meta.metadata(cm).get("resourceVersion") or "")
        with self._lock:
            self._versions[(meta.namespace(cm), meta.name(cm))] = version

    def drop(self, namespace: str, name: str) -> None:
        """Forget one map (its last write may or may not have landed)."""
        with self._lock:
            self._versions.pop((namespace, name), None)

    def clear(self) -> None:
        """Forget every map."""
        with self._lock:
            self._versions.clear()

    def foreign(self, cm: Manifest) -> bool:
        """Whether `cm` changed since this process last wrote it (False if it never did)."""
        with self._lock:
            mine = self._versions.get((meta.namespace(cm), meta.name(cm)))
        return mine is not None and mine != str(meta.metadata(cm).get("resourceVersion") or "")

    def __len__(self) -> int:
        with self._lock:
            return len(self._versions)


def untrusted(namespace: str, origin_name: str, why: str) -> SquattedError:
    """The error for a key whose cached status map is not the syncer's (see `distrust`)."""
    return SquattedError(
        f"the status ConfigMap {namespace}/{naming.status_configmap_name(origin_name)} is "
        f"not trusted: {why}; no step is taken until it is removed"
    )


def distrust(
    cm: Manifest,
    *,
    origin_kind: str,
    origin_name: str,
    owner_uids: Collection[str] = (),
    ledger: Ledger | None = None,
) -> str | None:
    """Why a status ConfigMap is not the syncer's own record (None: it is).

    Checks the labels the syncer writes (managed-by, origin kind and name, role), that its
    owners include one of `owner_uids` (the anchor objects that exist now; not checked when
    none does), and that nobody wrote it since this process did (`ledger`). Labels and
    owners can be copied by anyone who may create ConfigMaps there; the admission policy
    of issue 8 is what closes that. A distrusted record drives no step of the syncer.
    """
    labels = meta.metadata(cm).get("labels") or {}
    for key, value in status_labels(origin_kind, origin_name).items():
        if labels.get(key) != value:
            return f"label {key} is {labels.get(key)!r}, not {value!r}"
    owners = [str(o.get("uid") or "") for o in meta.metadata(cm).get("ownerReferences") or []]
    known = {uid for uid in owner_uids if uid}
    if known and owners and not known & set(owners):
        return "it is owned by none of the objects that anchor the status"
    if ledger is not None and ledger.foreign(cm):
        return "it was changed by another writer since the syncer wrote it"
    return None


def read_record(status_cm: Manifest | None, from_json: Callable[[Manifest], R]) -> R | None:
    """The record a status ConfigMap holds (None when absent or unreadable: start over)."""
    if status_cm is None:
        return None
    text = (status_cm.get("data") or {}).get(STATUS_KEY)
    if not text:
        return None
    try:
        if isinstance(text, bytes):  # as `slim_status` caches it
            text = _RECORDS.unpack(text)
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
    ledger: Ledger | None = None,
) -> Manifest:
    """Create the status ConfigMap, or merge-patch it guarded by `current`'s resourceVersion.

    A patch (not a PUT) keeps labels and annotations others added. When the create finds
    the name taken: a map that is the syncer's own is cached (ConflictError: the next pass
    patches it); any other is a `SquattedError`, and nothing is written to it.
    """
    name = naming.status_configmap_name(origin_name)
    metadata: Manifest = {"labels": status_labels(origin_kind, origin_name)}
    if owner is not None:
        metadata["ownerReferences"] = [owner.reference()]
    data = {STATUS_KEY: json.dumps(record, sort_keys=True, separators=(",", ":")), **fields}
    try:
        if current is None:
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": namespace, **metadata},
                "data": data,
            }
            written = _create(kube, statuses, body, origin_kind, origin_name)
        else:
            metadata["resourceVersion"] = meta.metadata(current).get("resourceVersion")
            written = kube.patch(CONFIGMAPS, namespace, name, {"metadata": metadata, "data": data})
    except SyncerError as exc:
        if ledger is not None and exc.status is None:
            ledger.drop(namespace, name)  # no answer: the write may have landed
        raise
    if ledger is not None:
        ledger.wrote(written)
    statuses.upsert(written)
    return written


def _create(kube: Kube, statuses: Cache, body: Manifest, kind: str, origin: str) -> Manifest:
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    try:
        return kube.create(CONFIGMAPS, namespace, body)
    except ConflictError:
        existing = kube.get(CONFIGMAPS, namespace, name)
        if existing is None:
            raise  # gone again: the next pass creates it
        why = distrust(existing, origin_kind=kind, origin_name=origin)
        if why is not None:
            raise SquattedError(
                f"the status ConfigMap {namespace}/{name} exists and is not the syncer's: "
                f"{why}; not overwritten"
            ) from None
        statuses.upsert(existing)  # the syncer's own, not yet in the cache
        raise


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
    not write them again) or `obj` is not the renderer's. The merge patch names the cached
    uid, which the server refuses to change (422): an object deleted and re-created under
    the name since is not written (review M4). `guarded` adds the resourceVersion. A
    refused patch waits for the next pass.
    """
    if obj is None or not meta.is_rendered(obj):
        return
    metadata = meta.metadata(obj)
    have = metadata.get("annotations") or {}
    if all(have.get(k, "") == v for k, v in wanted.items()):
        return
    uid = str(metadata.get("uid") or "")
    if not uid:
        return  # no identity to guard the write with
    body: Manifest = {"uid": uid, "annotations": dict(wanted)}
    if guarded:
        body["resourceVersion"] = str(metadata.get("resourceVersion") or "")
    try:
        patched = kube.patch(resource, meta.namespace(obj), meta.name(obj), {"metadata": body})
    except SyncerError as exc:
        if isinstance(exc, ConflictError) or exc.status == 422:
            return  # changed or re-created: the next pass sees the new version
        raise
    cache.upsert(patched)
