"""The object store of the fake API server: resourceVersions, verbs, watch history and GC.

Owns every object, the single global resourceVersion counter, the bounded per-kind
event history that watches resume from, finalizers, ownerReference garbage collection
and namespace termination. It is thread-safe (one re-entrant lock) and synchronous, so
tests may read and write it directly; it must not know about HTTP or asyncio.

Stored objects are never mutated after they are stored (every write stores a new dict),
so events and list items may share them without copying.
"""

from __future__ import annotations

import base64
import bisect
import json
import random
import threading
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import yaml

from tests.fakeapi import patching, rules
from tests.fakeapi.errors import (
    ApiError,
    already_exists,
    bad_request,
    cause,
    conflict,
    expired,
    invalid,
    not_found,
)
from tests.fakeapi.jsontree import clone
from tests.fakeapi.kinds import KINDS, Kind, kind_for_type
from tests.fakeapi.selectors import Requirement, matches

Manifest = dict[str, Any]
Clock = Callable[[], datetime]

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
PATCH_TYPES = (MERGE_PATCH, JSON_PATCH, STRATEGIC_MERGE_PATCH, APPLY_PATCH)

FOREGROUND_FINALIZER = "foregroundDeletion"
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # the real apiserver's generateName alphabet
_MAX_GENERATED_BASE = 58
_SERVER_FIELDS = (
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "generation",
    "managedFields",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
)
_KIND_ORDER = {kind: i for i, kind in enumerate(KINDS)}
_BOOT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
# What kube-controller-manager's root-ca-cert-publisher puts in every namespace (the fake
# has no CA, so the bundle is a placeholder).
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
_ROOT_CA_DATA = {"ca.crt": "-----BEGIN CERTIFICATE-----\nfake\n-----END CERTIFICATE-----\n"}


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One change of one object: `type` is ADDED, MODIFIED, DELETED, BOOKMARK or ERROR."""

    rv: int
    type: str
    obj: Manifest
    old: Manifest | None = None


@dataclass(frozen=True, slots=True)
class DeleteOptions:
    """The parts of `DeleteOptions` the fake server honours."""

    propagation_policy: str | None = None
    orphan_dependents: bool | None = None
    precondition_uid: str | None = None
    precondition_resource_version: str | None = None
    dry_run: bool = False
    grace_period_seconds: int | None = None


@dataclass(slots=True)
class Watcher:
    """A registered watch: its filter and the thread-safe callback events go to."""

    kind: Kind
    namespace: str | None
    labels: list[Requirement]
    fields: list[Requirement]
    deliver: Callable[[WatchEvent | None], None]
    closed: bool = field(default=False)

    def _matches(self, obj: Manifest | None) -> bool:
        if obj is None:
            return False
        if self.namespace is not None and obj["metadata"].get("namespace") != self.namespace:
            return False
        return matches(obj, self.labels, self.fields)

    def translate(self, event: WatchEvent) -> WatchEvent | None:
        """The event this watcher sees, as the real watch cache filters it.

        A MODIFIED event that makes an object match the selector is seen as ADDED, and
        one that makes it stop matching is seen as DELETED.
        """
        if event.type in ("BOOKMARK", "ERROR"):
            return event
        now, before = self._matches(event.obj), self._matches(event.old)
        if event.type == "MODIFIED":
            if now and before:
                return event
            if now:
                return WatchEvent(event.rv, "ADDED", event.obj, event.old)
            if before:
                return WatchEvent(event.rv, "DELETED", event.obj, event.old)
            return None
        return event if now else None


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _due(meta: Manifest) -> bool:
    """Whether an object being deleted goes now: no finalizers, no grace period pending."""
    pending = meta.get("deletionGracePeriodSeconds") or 0
    return bool(meta.get("deletionTimestamp")) and not meta.get("finalizers") and not pending


def _strip_type(obj: Manifest) -> Manifest:
    return {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}


def _encode_continue(rv: int, key: tuple[str, str]) -> str:
    raw = json.dumps({"v": "fake/v1", "rv": rv, "start": list(key)}).encode()
    return base64.urlsafe_b64encode(raw).decode()


def _decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        return int(data["rv"]), (str(data["start"][0]), str(data["start"][1]))
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise bad_request(f"continue key is not valid: {exc}") from exc


def _content(obj: Manifest) -> Manifest:
    """The parts of an object that define its generation: all but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def _comparable(obj: Manifest) -> Manifest:
    meta = {
        k: v for k, v in obj["metadata"].items() if k not in ("resourceVersion", "managedFields")
    }
    return {**obj, "metadata": meta}


def _ownership(obj: Manifest) -> list[Manifest]:
    entries = obj["metadata"].get("managedFields") or []
    return [{k: v for k, v in entry.items() if k != "time"} for entry in entries]


def parse_patch_body(raw: bytes, patch_type: str) -> Any:
    """Decode a patch body: JSON, or YAML for server-side apply.

    Raises:
        ApiError: 400 when the body does not decode.
    """
    try:
        return json.loads(raw)
    except ValueError:
        if patch_type != APPLY_PATCH:
            raise bad_request("the body of the request does not decode as JSON") from None
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise bad_request(f"error decoding YAML: {exc}") from exc


class Store:
    """All objects of the fake cluster, behind one lock.

    Args:
        history_size: events kept per kind for watch resumption; a watch from an older
            resourceVersion gets `410 Expired`.
        seed: seeds generated names, UIDs and cluster IPs, so runs are repeatable.
        clock: the source of timestamps (creation, deletion, managedFields).
    """

    def __init__(self, *, history_size: int = 1000, seed: int = 0, clock: Clock = _utc_now) -> None:
        self.lock = threading.RLock()
        self.history_size = history_size
        self._clock = clock
        self._rng = random.Random(seed)
        self._rv = 0
        self._compacted = 0
        self._ips = 0
        self._objects: dict[Kind, dict[tuple[str, str], Manifest]] = {k: {} for k in KINDS}
        # Each kind's keys in order, made again after a create or delete (a list walks
        # them from its continue key instead of sorting every object for every page).
        self._sorted: dict[Kind, list[tuple[str, str]] | None] = dict.fromkeys(KINDS)
        self._history: dict[Kind, deque[WatchEvent]] = {k: deque() for k in KINDS}
        self._floor: dict[Kind, int] = dict.fromkeys(KINDS, 0)
        self._watchers: list[Watcher] = []
        self._uids: dict[str, tuple[Kind, tuple[str, str]]] = {}
        self._owned: dict[str, set[tuple[Kind, tuple[str, str]]]] = {}
        namespaces = kind_for_type("v1", "Namespace")
        for name in _BOOT_NAMESPACES:
            self.create(
                namespaces, None, {"metadata": {"name": name}}, field_manager="kube-apiserver"
            )

    # ----------------------------------------------------------------- helpers

    @property
    def resource_version(self) -> int:
        """The current global resourceVersion (the last write's)."""
        with self.lock:
            return self._rv

    def _now(self) -> str:
        return self._clock().strftime("%Y-%m-%dT%H:%M:%SZ")

    def _uid(self) -> str:
        return str(uuid.UUID(int=self._rng.getrandbits(128), version=4))

    def _allocate_ip(self) -> str:
        self._ips += 1
        return f"10.96.{self._ips // 250}.{self._ips % 250 + 1}"

    def _generated_name(self, base: str) -> str:
        suffix = "".join(self._rng.choice(_NAME_ALPHABET) for _ in range(5))
        return base[:_MAX_GENERATED_BASE] + suffix

    def _record(self, kind: Kind, event: WatchEvent) -> None:
        history = self._history[kind]
        history.append(event)
        while len(history) > self.history_size:
            self._floor[kind] = history.popleft().rv
        for watcher in list(self._watchers):
            if watcher.kind is kind and not watcher.closed:
                seen = watcher.translate(event)
                if seen is not None:
                    watcher.deliver(seen)

    def _key(self, obj: Manifest) -> tuple[str, str]:
        meta = obj["metadata"]
        return meta.get("namespace", ""), meta["name"]

    def _stored(self, kind: Kind, namespace: str | None, name: str) -> Manifest | None:
        return self._objects[kind].get((namespace or "", name))

    def _require(self, kind: Kind, namespace: str | None, name: str) -> Manifest:
        obj = self._stored(kind, namespace, name)
        if obj is None:
            raise not_found(kind.plural, name, kind.group)
        return obj

    def _index(self, kind: Kind, obj: Manifest) -> None:
        key = self._key(obj)
        self._uids[obj["metadata"]["uid"]] = (kind, key)
        for ref in obj["metadata"].get("ownerReferences") or []:
            self._owned.setdefault(ref.get("uid", ""), set()).add((kind, key))

    def _unindex(self, kind: Kind, obj: Manifest) -> None:
        key = self._key(obj)
        if self._uids.get(obj["metadata"]["uid"]) == (kind, key):
            del self._uids[obj["metadata"]["uid"]]
        for ref in obj["metadata"].get("ownerReferences") or []:
            self._owned.get(ref.get("uid", ""), set()).discard((kind, key))

    def _commit(self, kind: Kind, obj: Manifest, old: Manifest | None) -> Manifest:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        if old is not None:
            self._unindex(kind, old)
        self._index(kind, obj)
        key = self._key(obj)
        objects = self._objects[kind]
        if key not in objects:
            self._sorted[kind] = None
        objects[key] = obj
        self._record(kind, WatchEvent(self._rv, "MODIFIED" if old else "ADDED", obj, old))
        return obj

    def _set_manager(
        self,
        obj: Manifest,
        manager: str,
        operation: str,
        fields: Manifest,
        subresource: str | None,
        *,
        replace: bool = False,
    ) -> None:
        if not fields and operation != "Apply":
            return
        meta = obj["metadata"]
        entries: list[Manifest] = clone(meta.get("managedFields") or [])
        for entry in entries:
            if (entry.get("manager"), entry.get("operation"), entry.get("subresource")) == (
                manager,
                operation,
                subresource,
            ):
                entry["fieldsV1"] = (
                    fields
                    if replace
                    else patching.merge_field_sets(entry.get("fieldsV1") or {}, fields)
                )
                entry["time"] = self._now()
                break
        else:
            entry = {
                "manager": manager,
                "operation": operation,
                "apiVersion": obj.get("apiVersion", ""),
                "time": self._now(),
                "fieldsType": "FieldsV1",
                "fieldsV1": fields,
            }
            if subresource:
                entry["subresource"] = subresource
            entries.append(entry)
        meta["managedFields"] = entries

    @staticmethod
    def _tracked_fields(obj: Manifest) -> Manifest:
        meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in _SERVER_FIELDS}
        meta.pop("name", None)
        meta.pop("namespace", None)
        tracked = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
        if meta:
            tracked["metadata"] = meta
        return tracked

    def _check_namespace(self, kind: Kind, namespace: str | None) -> None:
        if not kind.namespaced:
            return
        ns = self._objects[kind_for_type("v1", "Namespace")].get(("", namespace or ""))
        if ns is None:
            raise not_found("namespaces", namespace or "")
        if ns["metadata"].get("deletionTimestamp"):
            raise ApiError(
                403,
                f'{kind.plural} "" is forbidden: unable to create new content in namespace '
                f"{namespace} because it is being terminated",
                reason="Forbidden",
            )

    # ----------------------------------------------------------------- reads

    def get(self, kind: Kind, namespace: str | None, name: str) -> Manifest:
        """Return a copy of one object.

        Raises:
            ApiError: 404 NotFound.
        """
        with self.lock:
            return clone(self._require(kind, namespace, name))

    def find(self, kind: Kind, namespace: str | None, name: str) -> Manifest | None:
        """Return a copy of one object, or None."""
        with self.lock:
            obj = self._stored(kind, namespace, name)
            return clone(obj) if obj is not None else None

    def objects(self, kind: Kind, namespace: str | None = None) -> list[Manifest]:
        """Copies of all objects of a kind (in one namespace, or all), sorted by key."""
        with self.lock:
            return [
                clone(obj)
                for key, obj in sorted(self._objects[kind].items())
                if namespace is None or key[0] == namespace
            ]

    def api_list(
        self,
        kind: Kind,
        namespace: str | None,
        *,
        labels: list[Requirement] | None = None,
        fields: list[Requirement] | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
    ) -> Manifest:
        """List objects like the real server: selectors, pagination, list resourceVersion.

        Continue tokens read the current state after the last returned key rather than a
        snapshot; a token older than the last compaction gets `410 Expired`.

        Raises:
            ApiError: 400 for bad parameters, 410 for an expired token or resourceVersion.
        """
        with self.lock:
            list_rv = self._rv
            if resource_version_match == "Exact":
                if not resource_version or not resource_version.isdigit():
                    raise bad_request("resourceVersionMatch=Exact needs a resourceVersion")
                if int(resource_version) != self._rv:
                    return self._list_at(kind, namespace, int(resource_version), labels, fields)
            elif resource_version_match not in (None, "", "NotOlderThan"):
                raise bad_request(f"unsupported resourceVersionMatch {resource_version_match!r}")
            start: tuple[str, str] | None = None
            if continue_token:
                token_rv, start = _decode_continue(continue_token)
                if token_rv < self._compacted:
                    raise expired(
                        "The provided continue parameter is too old to display a consistent "
                        "list result. You can start a new list without the continue parameter."
                    )
                list_rv = token_rv
            items, more, remaining = self._select(kind, namespace, start, labels, fields, limit)
            meta: Manifest = {"resourceVersion": str(list_rv)}
            if more:
                meta["continue"] = _encode_continue(list_rv, items[-1][0])
                if not labels and not fields:
                    meta["remainingItemCount"] = remaining
            # Built-in list items come without apiVersion/kind on the wire; custom ones keep them.
            return {
                "kind": kind.list_kind,
                "apiVersion": kind.api_version,
                "metadata": meta,
                "items": [obj if kind.custom else _strip_type(obj) for _, obj in items],
            }

    def _list_at(
        self,
        kind: Kind,
        namespace: str | None,
        rv: int,
        labels: list[Requirement] | None,
        fields: list[Requirement] | None,
    ) -> Manifest:
        """A list as it was at resourceVersion `rv` (`resourceVersionMatch=Exact`).

        Made from the current objects by undoing the kind's watch history after `rv`, as
        etcd serves an old revision; a revision older than that history (or the last
        compaction) is `410 Expired`, and one from the future is a 504, like the real
        server's "Too large resource version". Not paginated.
        """
        if rv > self._rv:
            raise ApiError(
                504,
                f"Too large resource version: {rv}, current: {self._rv}",
                reason="Timeout",
            )
        oldest = max(self._floor[kind], self._compacted)
        if rv < oldest:
            raise expired(f"The resourceVersion for the provided list is too old: {rv}")
        state = dict(self._objects[kind])
        for event in reversed(self._history[kind]):
            if event.rv <= rv:
                break
            key = self._key(event.obj)
            if event.type == "ADDED" or event.old is None:
                state.pop(key, None)
            else:
                state[key] = event.old
        items = [
            state[key]
            for key in sorted(state)
            if (namespace is None or key[0] == namespace)
            and matches(state[key], labels or [], fields or [])
        ]
        return {
            "kind": kind.list_kind,
            "apiVersion": kind.api_version,
            "metadata": {"resourceVersion": str(rv)},
            "items": [clone(obj) if kind.custom else _strip_type(obj) for obj in items],
        }

    def _keys(self, kind: Kind) -> list[tuple[str, str]]:
        keys = self._sorted[kind]
        if keys is None:
            keys = self._sorted[kind] = sorted(self._objects[kind])
        return keys

    def _select(
        self,
        kind: Kind,
        namespace: str | None,
        start: tuple[str, str] | None,
        labels: list[Requirement] | None,
        fields: list[Requirement] | None,
        limit: int | None,
    ) -> tuple[list[tuple[tuple[str, str], Manifest]], bool, int]:
        """One page in key order after `start`: (items, whether more match, how many keys
        of the namespace follow the page: `remainingItemCount` without selectors)."""
        keys, objects = self._keys(kind), self._objects[kind]
        first = (namespace, "") if namespace is not None else ("", "")
        index = bisect.bisect_right(keys, start) if start is not None and start > first else 0
        if namespace is not None:
            index = max(index, bisect.bisect_left(keys, first))
        end = len(keys) if namespace is None else bisect.bisect_left(keys, (namespace + "\0", ""))
        page = limit if limit and limit > 0 else None
        items: list[tuple[tuple[str, str], Manifest]] = []
        more = False
        for position in range(index, end):
            key = keys[position]
            obj = objects[key]
            if matches(obj, labels or [], fields or []):
                if page is not None and len(items) == page:
                    more = True
                    return items, more, end - position
                items.append((key, obj))
        return items, more, 0

    # ----------------------------------------------------------------- writes

    def create(
        self,
        kind: Kind,
        namespace: str | None,
        body: Any,
        *,
        field_manager: str,
        operation: str = "Update",
        dry_run: bool = False,
    ) -> Manifest:
        """Create an object (uid, creationTimestamp, generation, defaults, validation).

        Raises:
            ApiError: 400 bad body, 404 missing namespace, 409 AlreadyExists, 422 Invalid.
        """
        if not isinstance(body, dict):
            raise bad_request("the body of the request must be an object")
        self._check_type(kind, body)
        rules.check_types(kind, body)
        fields = patching.field_set(self._tracked_fields(body))
        with self.lock:
            obj = clone(body)
            obj["apiVersion"], obj["kind"] = kind.api_version, kind.kind
            meta = obj.setdefault("metadata", {})
            if kind.namespaced:
                if meta.get("namespace") not in (None, "", namespace):
                    raise bad_request(
                        "the namespace of the provided object does not match the namespace "
                        "sent on the request"
                    )
                meta["namespace"] = namespace
            else:
                meta.pop("namespace", None)
            if meta.get("resourceVersion"):
                raise ApiError(500, "resourceVersion should not be set on objects to be created")
            rules.check_types(kind, obj)
            self._check_namespace(kind, namespace)
            if not meta.get("name"):
                if not meta.get("generateName"):
                    raise invalid(
                        kind.kind,
                        "",
                        [
                            cause(
                                "metadata.name",
                                "Required value: name or generateName is required",
                                "FieldValueRequired",
                            )
                        ],
                        kind.group,
                    )
                for _ in range(8):
                    meta["name"] = self._generated_name(meta["generateName"])
                    if self._stored(kind, namespace, meta["name"]) is None:
                        break
            if self._stored(kind, namespace, meta["name"]) is not None:
                raise already_exists(kind.plural, meta["name"], kind.group)
            for server_field in _SERVER_FIELDS:
                meta.pop(server_field, None)
            meta["uid"] = self._uid()
            meta["creationTimestamp"] = self._now()
            if kind.has_generation:
                meta["generation"] = 1
            rules.default_object(kind, obj, allocate_cluster_ip=self._allocate_ip)
            rules.reset_status(kind, obj)
            rules.check_object(kind, obj)
            self._set_manager(obj, field_manager, operation, fields, None, replace=True)
            if dry_run:
                return obj
            created = clone(self._commit(kind, obj, None))
            self._collect_orphan(kind, obj)
            if kind.kind == "Namespace" and not kind.group:
                self._publish_root_ca(meta["name"])
            return created

    def _publish_root_ca(self, namespace: str) -> None:
        """The `kube-root-ca.crt` ConfigMap every real namespace gets from its controller."""
        body = {"metadata": {"name": ROOT_CA_CONFIGMAP}, "data": dict(_ROOT_CA_DATA)}
        self.create(
            kind_for_type("v1", "ConfigMap"),
            namespace,
            body,
            field_manager="kube-controller-manager",
        )

    def _collect_orphan(self, kind: Kind, obj: Manifest) -> None:
        """Like the real garbage collector (later, there): an object all of whose owners are
        gone (by uid) is deleted. It happens when a writer's cache still held the owner."""
        refs = obj["metadata"].get("ownerReferences") or []
        if refs and not any(self._by_uid(ref.get("uid", "")) for ref in refs):
            self._delete(kind, obj, "Background")

    def _check_type(self, kind: Kind, body: Manifest) -> None:
        api_version, body_kind = body.get("apiVersion"), body.get("kind")
        if api_version not in (None, "", kind.api_version) or body_kind not in (
            None,
            "",
            kind.kind,
        ):
            raise bad_request(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({kind.api_version}) or the kind ({body_kind}) is not {kind.kind}"
            )

    def update(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        subresource: str | None = None,
        field_manager: str,
        dry_run: bool = False,
    ) -> Manifest:
        """Replace an object (PUT), with the resourceVersion precondition when given.

        Raises:
            ApiError: 400 bad body, 404 NotFound, 409 Conflict, 422 Invalid.
        """
        if not isinstance(body, dict):
            raise bad_request("the body of the request must be an object")
        self._check_type(kind, body)
        meta = body.get("metadata") or {}
        if meta.get("name") not in (None, name):
            raise bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the URL "
                f"({name})"
            )
        if kind.namespaced and meta.get("namespace") not in (None, "", namespace):
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent on the "
                "request"
            )
        with self.lock:
            old = self._require(kind, namespace, name)
            rules.check_types(kind, body)
            expected = meta.get("resourceVersion")
            if expected and expected != old["metadata"]["resourceVersion"]:
                raise conflict(kind.plural, name, kind.group)
            return self._finish_update(
                kind,
                old,
                clone(body),
                subresource=subresource,
                manager=field_manager,
                operation="Update",
                dry_run=dry_run,
            )

    def patch(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        patch_type: str,
        body: Any,
        *,
        subresource: str | None = None,
        field_manager: str | None,
        force: bool = False,
        dry_run: bool = False,
    ) -> tuple[Manifest, bool]:
        """Patch an object; returns it and whether it was created (apply only).

        A `metadata.resourceVersion` in the patched result that differs from the stored
        one is a precondition failure (409), as in real Kubernetes. Server-side apply is
        simplified: the applied object is merged in (strategic merge for built-in kinds,
        merge patch for custom ones), fields this manager applied before and no longer
        applies are removed unless another manager owns them. Applying a field another
        manager owns, with another value, is a 409 Conflict naming both, unless `force`
        takes the field from them (`patching.apply_conflicts`, coarse field sets).

        Raises:
            ApiError: 400, 404, 409, 415 (strategic merge on a custom kind), 422.
        """
        if patch_type not in PATCH_TYPES:
            raise ApiError(
                415,
                f"the body of the request was in an unknown format - accepted "
                f"media types include: {', '.join(PATCH_TYPES)}",
            )
        if patch_type == STRATEGIC_MERGE_PATCH and kind.custom:
            raise ApiError(
                415,
                "the body of the request was in an unknown format - accepted "
                f"media types include: {JSON_PATCH}, {MERGE_PATCH}, {APPLY_PATCH}",
            )
        if patch_type == APPLY_PATCH:
            return self._apply(
                kind,
                namespace,
                name,
                body,
                subresource=subresource,
                manager=field_manager,
                force=force,
                dry_run=dry_run,
            )
        with self.lock:
            old = self._require(kind, namespace, name)
            if patch_type == JSON_PATCH:
                if not isinstance(body, list):
                    raise bad_request("a JSON patch must be a list of operations")
                try:
                    patched = patching.json_patch(old, body)
                except patching.PatchError as exc:
                    raise ApiError(422, str(exc)) from exc
            elif not isinstance(body, dict):
                raise bad_request("a merge patch must be an object")
            elif patch_type == MERGE_PATCH:
                patched = patching.merge_patch(old, body)
            else:
                patched = patching.strategic_merge_patch(old, body)
            if not isinstance(patched, dict) or not isinstance(patched.get("metadata"), dict):
                raise ApiError(422, "the patch removed the object's metadata")
            self._check_patched_identity(kind, old, patched)
            manager = field_manager or "unknown"
            fields = patching.changed_fields(
                self._tracked_fields(old), self._tracked_fields(patched)
            )
            return self._finish_update(
                kind,
                old,
                patched,
                subresource=subresource,
                manager=manager,
                operation="Update",
                dry_run=dry_run,
                fields=fields,
            ), False

    def _check_patched_identity(self, kind: Kind, old: Manifest, patched: Manifest) -> None:
        rules.check_types(kind, patched)
        name = old["metadata"]["name"]
        expected = patched["metadata"].get("resourceVersion")
        if expected and expected != old["metadata"]["resourceVersion"]:
            raise conflict(kind.plural, name, kind.group)
        if patched["metadata"].get("name") not in (None, name):
            raise bad_request("the patch may not change the object's name")

    def _apply(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        subresource: str | None,
        manager: str | None,
        force: bool,
        dry_run: bool,
    ) -> tuple[Manifest, bool]:
        if not manager:
            raise bad_request("PATCH requests with apply patches require a fieldManager")
        if not isinstance(body, dict):
            raise bad_request("an apply patch must be an object")
        if body.get("apiVersion") != kind.api_version or body.get("kind") != kind.kind:
            raise bad_request(
                f"apply patches must set apiVersion {kind.api_version!r} and kind {kind.kind!r}"
            )
        meta = body.get("metadata") or {}
        if meta.get("name") != name:
            raise bad_request(
                f"the name of the object ({meta.get('name')}) does not match the "
                f"name on the URL ({name})"
            )
        with self.lock:
            old = self._stored(kind, namespace, name)
            if old is None:
                if subresource:
                    raise not_found(kind.plural, name, kind.group)
                created = self.create(
                    kind, namespace, body, field_manager=manager, operation="Apply", dry_run=dry_run
                )
                return created, True
            applied = self._tracked_fields(body)
            if subresource == "status":
                applied = {"status": applied["status"]} if "status" in applied else {}
            new_fields = patching.field_set(applied)
            old = self._take_ownership(kind, old, body, new_fields, manager, subresource, force)
            merge = patching.merge_patch if kind.custom else patching.strategic_merge_patch
            merged = merge(old, body)
            previous: Manifest = {}
            others: list[tuple[str, ...]] = []
            for entry in old["metadata"].get("managedFields") or []:
                paths = patching.leaf_paths(entry.get("fieldsV1") or {})
                if (entry.get("manager"), entry.get("operation"), entry.get("subresource")) == (
                    manager,
                    "Apply",
                    subresource,
                ):
                    previous = entry.get("fieldsV1") or {}
                else:
                    others.extend(paths)
            still_applied = set(patching.leaf_paths(new_fields))
            for path in patching.leaf_paths(previous):
                owned_elsewhere = any(o[: len(path)] == path or path[: len(o)] == o for o in others)
                if path not in still_applied and not owned_elsewhere:
                    patching.remove_path(merged, path)
            self._check_patched_identity(kind, old, merged)
            return self._finish_update(
                kind,
                old,
                merged,
                subresource=subresource,
                manager=manager,
                operation="Apply",
                dry_run=dry_run,
                fields=new_fields,
                replace_fields=True,
            ), False

    @staticmethod
    def _take_ownership(
        kind: Kind,
        old: Manifest,
        body: Manifest,
        fields: Manifest,
        manager: str,
        subresource: str | None,
        force: bool,
    ) -> Manifest:
        """Refuse an apply that conflicts (409), or, forced, take the fields from their
        owners; returns `old` with the managedFields the apply starts from."""
        entries = old["metadata"].get("managedFields") or []
        conflicts = patching.apply_conflicts(
            old, body, patching.leaf_paths(fields), entries, manager, subresource
        )
        if not conflicts:
            return old
        if force:
            taken = clone(old)
            taken["metadata"]["managedFields"] = patching.release_fields(entries, conflicts)
            return taken
        causes = [
            {
                "reason": "FieldManagerConflict",
                "message": f'conflict with "{owner}"',
                "field": "." + ".".join(path),
            }
            for owner, path in conflicts
        ]
        count = len(causes)
        listed = "\n".join(f"- {c['message']}: {c['field']}" for c in causes)
        raise ApiError(
            409,
            f"Apply failed with {count} conflict{'s' if count > 1 else ''}: "
            + (f"{causes[0]['message']}: {causes[0]['field']}" if count == 1 else listed),
            reason="Conflict",
            details={"name": old["metadata"]["name"], "kind": kind.plural, "causes": causes},
        )

    def _finish_update(
        self,
        kind: Kind,
        old: Manifest,
        new: Manifest,
        *,
        subresource: str | None,
        manager: str,
        operation: str,
        dry_run: bool,
        fields: Manifest | None = None,
        replace_fields: bool = False,
    ) -> Manifest:
        new["apiVersion"], new["kind"] = kind.api_version, kind.kind
        old_meta = old["metadata"]
        if subresource == "status":
            # The old object but its status, which the write replaces (not copied first:
            # a pod's status is much of what a status write would otherwise copy).
            merged = {k: clone(v) for k, v in old.items() if k != "status"}
            if "status" in new:
                merged["status"] = new["status"]
            if kind.plural == "pods" and not kind.group:
                # The real pod status strategy resets the spec only: the labels and
                # annotations of a pods/status write stand (tests/realapi/test_differential).
                for field in ("labels", "annotations"):
                    if field in new.get("metadata", {}):
                        merged["metadata"][field] = new["metadata"][field]
                    else:
                        merged["metadata"].pop(field, None)
            new = merged
        elif subresource:
            raise not_found(f"{kind.plural}/{subresource}", old_meta["name"], kind.group)
        elif kind.status_subresource:
            if "status" in old:
                new["status"] = clone(old["status"])
            else:
                new.pop("status", None)
        meta = new.setdefault("metadata", {})
        if meta.get("uid") and meta["uid"] != old_meta.get("uid"):
            # As the real server's ObjectMeta validation: a write naming another uid (the
            # object was deleted and re-created since the writer read it) is refused.
            message = f'Invalid value: "{meta["uid"]}": field is immutable'
            raise invalid(kind.kind, old_meta["name"], [cause("metadata.uid", message)], kind.group)
        for kept in (
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "managedFields",
        ):
            if kept in old_meta:
                meta[kept] = clone(old_meta[kept])
            else:
                meta.pop(kept, None)
        rules.carry_allocated(kind, old, new)
        rules.default_object(kind, new, allocate_cluster_ip=self._allocate_ip)
        rules.check_update(kind, old, new)
        if fields is None:
            fields = patching.changed_fields(self._tracked_fields(old), self._tracked_fields(new))
        self._set_manager(new, manager, operation, fields, subresource, replace=replace_fields)
        if _comparable(new) == _comparable(old) and _ownership(new) == _ownership(old):
            # A no-op write stores nothing and keeps the resourceVersion, like the real server.
            return clone(old)
        if kind.has_generation and _content(new) != _content(old):
            meta["generation"] = int(old_meta.get("generation", 1)) + 1
        if dry_run:
            return new
        if _due(meta):
            return clone(self._remove(kind, new, old))
        return clone(self._commit(kind, new, old))

    def bind(
        self, namespace: str | None, name: str, binding: Any, *, dry_run: bool = False
    ) -> Manifest:
        """`POST pods/<name>/binding`: set `spec.nodeName` (and PodScheduled), as a scheduler.

        Raises:
            ApiError: 404 for a missing pod, 400 for a binding without a target, 409 when
                the pod is bound already.
        """
        pods = kind_for_type("v1", "Pod")
        target = (binding.get("target") or {}) if isinstance(binding, dict) else {}
        node = target.get("name")
        if not node:
            raise bad_request("a Binding needs target.name")
        with self.lock:
            pod = self._require(pods, namespace, name)
            bound = pod["spec"].get("nodeName")
            if bound:
                raise conflict(
                    "pods/binding", name, why=f'pod {name} is already assigned to node "{bound}"'
                )
            if dry_run:
                return clone(pod)

            def assign(new: Manifest) -> None:
                new["spec"]["nodeName"] = node
                status = new.setdefault("status", {})
                conditions = [
                    c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"
                ]
                scheduled = {"type": "PodScheduled", "status": "True"}
                status["conditions"] = [
                    *conditions,
                    {**scheduled, "lastProbeTime": None, "lastTransitionTime": self._now()},
                ]

            return clone(self._rewrite(pods, pod, assign))

    # ----------------------------------------------------------------- deletion

    def delete(
        self, kind: Kind, namespace: str | None, name: str, options: DeleteOptions | None = None
    ) -> tuple[Manifest, bool]:
        """Delete an object; returns its last state and whether it is gone already.

        Objects with finalizers get a `deletionTimestamp` and stay until the finalizers are
        removed. Dependents (by ownerReference uid) are deleted with policy Background (the
        default, except batch/v1 Jobs which orphan by default), deleted first with
        Foreground, or released with Orphan.

        Raises:
            ApiError: 404 NotFound, 409 Conflict when a precondition fails.
        """
        options = options or DeleteOptions()
        with self.lock:
            obj = self._require(kind, namespace, name)
            meta = obj["metadata"]
            if options.precondition_uid and options.precondition_uid != meta["uid"]:
                raise conflict(
                    kind.plural,
                    name,
                    kind.group,
                    "Precondition failed: UID in "
                    f"precondition: {options.precondition_uid}, UID in object meta: "
                    f"{meta['uid']}",
                )
            wanted_rv = options.precondition_resource_version
            if wanted_rv and wanted_rv != meta["resourceVersion"]:
                raise conflict(
                    kind.plural,
                    name,
                    kind.group,
                    "Precondition failed: "
                    f"ResourceVersion in precondition: {wanted_rv}, ResourceVersion in "
                    f"object meta: {meta['resourceVersion']}",
                )
            policy = options.propagation_policy
            if policy is None and options.orphan_dependents is not None:
                policy = "Orphan" if options.orphan_dependents else "Background"
            if policy is None:
                policy = "Orphan" if kind.orphan_by_default else "Background"
            if policy not in ("Orphan", "Background", "Foreground"):
                raise invalid(
                    "DeleteOptions",
                    "",
                    [
                        cause(
                            "propagationPolicy",
                            f'Unsupported value: "{policy}"',
                            "FieldValueNotSupported",
                        )
                    ],
                )
            if options.dry_run:
                return clone(obj), False
            grace = self._grace_period(kind, obj, options)
            if grace:
                return clone(self._delete_gracefully(kind, obj, grace)), False
            if kind.plural == "namespaces" and not kind.group:
                state, gone = self._delete_namespace(kind, obj)
            else:
                state, gone = self._delete(kind, obj, policy)
            return clone(state), gone

    @staticmethod
    def _grace_period(kind: Kind, obj: Manifest, options: DeleteOptions) -> int:
        """The seconds a pod's deletion waits for its kubelet (0: delete now).

        Only a pod bound to a node and not finished waits: the request's
        `gracePeriodSeconds`, else the pod's `terminationGracePeriodSeconds` (default 30).
        """
        if kind.plural != "pods" or kind.group:
            return 0
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
            return 0
        grace = options.grace_period_seconds
        if grace is None:
            grace = spec.get("terminationGracePeriodSeconds", 30)
        return max(int(grace), 0)

    def _delete_gracefully(self, kind: Kind, obj: Manifest, grace: int) -> Manifest:
        """Mark a pod Terminating; a DELETE with grace period 0 (its kubelet's) ends it."""
        meta = obj["metadata"]
        pending = meta.get("deletionGracePeriodSeconds")
        if meta.get("deletionTimestamp") and pending is not None and int(pending) <= grace:
            return obj  # already Terminating, at least as soon

        def mark(new: Manifest) -> None:
            when = self._clock() + timedelta(seconds=grace)
            new["metadata"]["deletionTimestamp"] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
            new["metadata"]["deletionGracePeriodSeconds"] = grace
            if not meta.get("deletionTimestamp"):
                new["metadata"]["generation"] = int(meta.get("generation", 1)) + 1

        return self._commit(kind, self._marked(obj, mark), obj)

    @staticmethod
    def _marked(obj: Manifest, change: Callable[[Manifest], None]) -> Manifest:
        new = clone(obj)
        change(new)
        return new

    def delete_collection(
        self,
        kind: Kind,
        namespace: str | None,
        *,
        labels: list[Requirement] | None = None,
        fields: list[Requirement] | None = None,
        options: DeleteOptions | None = None,
    ) -> Manifest:
        """Delete every matching object; returns the list of their last states."""
        with self.lock:
            listed = self.api_list(kind, namespace, labels=labels, fields=fields)
            deleted = []
            for item in listed["items"]:
                meta = item["metadata"]
                state, _ = self.delete(kind, meta.get("namespace"), meta["name"], options)
                deleted.append(state if kind.custom else _strip_type(state))
            listed["items"] = deleted
            listed["metadata"] = {"resourceVersion": str(self._rv)}
            return listed

    def _dependents(self, uid: str) -> list[tuple[Kind, Manifest]]:
        keys = sorted(self._owned.get(uid, ()), key=lambda item: (_KIND_ORDER[item[0]], item[1]))
        found = []
        for kind, key in keys:
            obj = self._objects[kind].get(key)
            if obj is not None:
                found.append((kind, obj))
        return found

    def _by_uid(self, uid: str) -> tuple[Kind, Manifest] | None:
        located = self._uids.get(uid)
        if located is None:
            return None
        obj = self._objects[located[0]].get(located[1])
        return (located[0], obj) if obj is not None else None

    def _rewrite(self, kind: Kind, obj: Manifest, change: Callable[[Manifest], None]) -> Manifest:
        new = clone(obj)
        change(new)
        if _due(new["metadata"]):
            return self._remove(kind, new, obj)
        return self._commit(kind, new, obj)

    def _drop_owner(self, kind: Kind, obj: Manifest, uid: str) -> Manifest:
        def change(new: Manifest) -> None:
            refs = [r for r in new["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
            if refs:
                new["metadata"]["ownerReferences"] = refs
            else:
                new["metadata"].pop("ownerReferences", None)

        return self._rewrite(kind, obj, change)

    def _delete(self, kind: Kind, obj: Manifest, policy: str) -> tuple[Manifest, bool]:
        meta = obj["metadata"]
        if meta.get("deletionTimestamp"):
            if not meta.get("deletionGracePeriodSeconds"):
                return obj, False

            def now(new: Manifest) -> None:  # the kubelet's grace-0 DELETE of a Terminating pod
                new["metadata"]["deletionGracePeriodSeconds"] = 0

            state = self._rewrite(kind, obj, now)
            return state, self._stored(kind, meta.get("namespace"), meta["name"]) is None
        uid = meta["uid"]
        if policy == "Orphan":
            for dep_kind, dep in self._dependents(uid):
                self._drop_owner(dep_kind, dep, uid)
        finalizers = list(meta.get("finalizers") or [])
        dependents = self._dependents(uid)
        if policy == "Foreground" and dependents and FOREGROUND_FINALIZER not in finalizers:
            finalizers.append(FOREGROUND_FINALIZER)
        if finalizers:

            def mark(new: Manifest) -> None:
                new["metadata"]["deletionTimestamp"] = self._now()
                new["metadata"]["deletionGracePeriodSeconds"] = 0
                new["metadata"]["finalizers"] = finalizers
                if kind.has_generation:
                    new["metadata"]["generation"] = int(meta.get("generation", 1)) + 1

            state = self._rewrite(kind, obj, mark)
            if policy == "Foreground":
                for dep_kind, dep in dependents:
                    current = self._stored(
                        dep_kind, dep["metadata"].get("namespace"), dep["metadata"]["name"]
                    )
                    if current is not None:
                        self._delete(dep_kind, current, "Foreground")
                self._finish_foreground(uid)
                current = self._stored(kind, meta.get("namespace"), meta["name"])
                state = current if current is not None else state
            gone = self._stored(kind, meta.get("namespace"), meta["name"]) is None
            return state, gone
        final = self._remove(kind, obj, obj)
        return final, True

    def _remove(self, kind: Kind, final: Manifest, old: Manifest) -> Manifest:
        """Delete for real: DELETED event, then garbage collection of dependents."""
        final = clone(final)
        self._rv += 1
        final["metadata"]["resourceVersion"] = str(self._rv)
        stored = self._objects[kind].pop(self._key(final), None)
        if stored is not None:
            self._sorted[kind] = None
            self._unindex(kind, stored)
        self._record(kind, WatchEvent(self._rv, "DELETED", final, old))
        uid = final["metadata"]["uid"]
        for dep_kind, stale in self._dependents(uid):
            dep = self._stored(
                dep_kind, stale["metadata"].get("namespace"), stale["metadata"]["name"]
            )
            if dep is None:
                continue
            refs = dep["metadata"].get("ownerReferences") or []
            live_owners = [
                r for r in refs if r.get("uid") != uid and self._by_uid(r.get("uid", ""))
            ]
            if live_owners:
                self._drop_owner(dep_kind, dep, uid)
            else:
                self._delete(dep_kind, dep, "Background")
        for ref in final["metadata"].get("ownerReferences") or []:
            self._finish_foreground(ref.get("uid", ""))
        namespace = final["metadata"].get("namespace")
        if kind.namespaced and namespace:
            self._finish_namespace(namespace)
        return final

    def _finish_foreground(self, owner_uid: str) -> None:
        found = self._by_uid(owner_uid)
        if found is None:
            return
        kind, owner = found
        meta = owner["metadata"]
        if (
            not meta.get("deletionTimestamp")
            or FOREGROUND_FINALIZER not in (meta.get("finalizers") or [])
            or self._dependents(owner_uid)
        ):
            return

        def release(new: Manifest) -> None:
            rest = [f for f in new["metadata"]["finalizers"] if f != FOREGROUND_FINALIZER]
            new["metadata"]["finalizers"] = rest
            if not rest:
                del new["metadata"]["finalizers"]

        self._rewrite(kind, owner, release)

    def _delete_namespace(self, kind: Kind, obj: Manifest) -> tuple[Manifest, bool]:
        name = obj["metadata"]["name"]
        if not obj["metadata"].get("deletionTimestamp"):

            def terminate(new: Manifest) -> None:
                new["metadata"]["deletionTimestamp"] = self._now()
                new["metadata"]["deletionGracePeriodSeconds"] = 0
                new.setdefault("status", {})["phase"] = "Terminating"

            new = clone(obj)
            terminate(new)
            self._commit(kind, new, obj)
            for other in KINDS:
                if other.namespaced:
                    for key in sorted(self._objects[other]):
                        current = self._objects[other].get(key)
                        if key[0] == name and current is not None:
                            self._delete(other, current, "Background")
            final = self._finish_namespace(name)
            if final is not None:
                return final, True
        state = self._stored(kind, None, name)
        return (state, False) if state is not None else (obj, True)

    def _finish_namespace(self, namespace: str) -> Manifest | None:
        kind = kind_for_type("v1", "Namespace")
        ns = self._objects[kind].get(("", namespace))
        if (
            ns is None
            or not ns["metadata"].get("deletionTimestamp")
            or ns["metadata"].get("finalizers")
        ):
            return None
        for other in KINDS:
            if other.namespaced and any(key[0] == namespace for key in self._objects[other]):
                return None
        return self._remove(kind, ns, ns)

    # ----------------------------------------------------------------- watch

    def watch(
        self,
        kind: Kind,
        namespace: str | None,
        *,
        labels: list[Requirement],
        fields: list[Requirement],
        resource_version: str | None,
        send_initial_events: bool,
        deliver: Callable[[WatchEvent | None], None],
    ) -> tuple[list[WatchEvent], Watcher]:
        """Register a watch; returns the events to send first and the registered watcher.

        Without a resourceVersion (or "0") the first events are synthetic ADDED events
        for the current objects; with one, the missed events after it are replayed from
        the history, and a resourceVersion older than the history raises `410 Expired`.

        Raises:
            ApiError: 400 for a malformed resourceVersion, 410 when it is too old.
        """
        with self.lock:
            watcher = Watcher(kind, namespace, labels, fields, deliver)
            first: list[WatchEvent] = []
            if not resource_version or resource_version == "0" or send_initial_events:
                for key, obj in sorted(self._objects[kind].items()):
                    if namespace is None or key[0] == namespace:
                        event = watcher.translate(WatchEvent(self._rv, "ADDED", obj))
                        if event is not None:
                            first.append(event)
                if send_initial_events:
                    first.append(self._bookmark(kind, initial_events_end=True))
            else:
                if not resource_version.isdigit():
                    raise bad_request(f"invalid resource version {resource_version!r}")
                since = int(resource_version)
                if since < self._floor[kind]:
                    raise expired(f"too old resource version: {since} ({self._floor[kind] + 1})")
                for event in self._history[kind]:
                    if event.rv > since:
                        seen = watcher.translate(event)
                        if seen is not None:
                            first.append(seen)
            self._watchers.append(watcher)
            return first, watcher

    def _bookmark(self, kind: Kind, *, initial_events_end: bool = False) -> WatchEvent:
        meta: Manifest = {"resourceVersion": str(self._rv)}
        if initial_events_end:
            meta["annotations"] = {INITIAL_EVENTS_END: "true"}
        return WatchEvent(
            self._rv,
            "BOOKMARK",
            {"kind": kind.kind, "apiVersion": kind.api_version, "metadata": meta},
        )

    def request_bookmark(self, watcher: Watcher) -> None:
        """Deliver a BOOKMARK at the current resourceVersion, ordered after pending events."""
        with self.lock:
            if not watcher.closed:
                watcher.deliver(self._bookmark(watcher.kind))

    def unwatch(self, watcher: Watcher) -> None:
        """Unregister a watcher (idempotent)."""
        with self.lock:
            watcher.closed = True
            if watcher in self._watchers:
                self._watchers.remove(watcher)

    def watchers(self) -> list[Watcher]:
        """The currently registered watchers."""
        with self.lock:
            return list(self._watchers)

    def compact(self) -> int:
        """Forget all watch history, as an etcd compaction does; returns the compacted RV.

        Afterwards a watch resuming from any earlier resourceVersion, and a list continued
        with an earlier token, get `410 Expired`.
        """
        with self.lock:
            self._compacted = self._rv
            for kind in KINDS:
                self._history[kind].clear()
                self._floor[kind] = self._rv
            return self._rv

    # ----------------------------------------------------------------- direct access

    def put(self, obj: Manifest) -> Manifest:
        """Create or replace an object directly, skipping defaults and validation.

        Server-managed metadata (uid, creationTimestamp, resourceVersion) is still kept
        consistent and watchers see the change.
        """
        kind = kind_for_type(obj["apiVersion"], obj["kind"])
        with self.lock:
            new = clone(obj)
            meta = new["metadata"]
            old = self._stored(kind, meta.get("namespace"), meta["name"])
            if old is not None:
                meta["uid"] = old["metadata"]["uid"]
                meta["creationTimestamp"] = old["metadata"]["creationTimestamp"]
            else:
                meta.setdefault("uid", self._uid())
                meta.setdefault("creationTimestamp", self._now())
            return clone(self._commit(kind, new, old))

    def remove(self, kind: Kind, namespace: str | None, name: str) -> bool:
        """Delete an object at once, ignoring finalizers; False when it did not exist."""
        with self.lock:
            obj = self._stored(kind, namespace, name)
            if obj is None:
                return False
            self._remove(kind, obj, obj)
            return True
