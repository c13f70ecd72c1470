"""The keyed, indexed object store behind an informer: what a list or watch left cached.

Owns the dict of cached objects, its lock and its secondary indexes, keyed by name in a
namespaced store and by (namespace, name) in one of every namespace. It does no I/O: the
informer (`syncer.kube.informer`) lists and watches and writes what it learns here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable, Iterable
from typing import Any

Manifest = dict[str, Any]
Key = tuple[str, str]  # (namespace, name)
# What the cache is keyed by: a store of one namespace keys its objects by name alone (the
# interned string the object holds already), one of every namespace by `Key`. A (namespace,
# name) tuple per object costs 56 bytes: ~3.3 MB at ten thousand jobs.
CacheKey = str | Key
Indexer = Callable[[Manifest], Iterable[Hashable]]
# An index maps a value to the one key that has it (most values: a job's cluster has one
# head Pod, a Job one submitter pod) or to a set of keys: a one-key set costs 216 bytes,
# five of them per job at ten thousand jobs ~10 MB.
Bucket = CacheKey | set[CacheKey]

_LOG = logging.getLogger(__name__)


def key_of(obj: Manifest) -> Key:
    """The (namespace, name) of an object."""
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


class Store:
    """Cached objects of one namespace (or all), with named indexes, safe across threads."""

    def __init__(self, namespace: str | None) -> None:
        self.namespace = namespace
        self._cache: dict[CacheKey, Manifest] = {}
        self._lock = threading.Lock()
        self._indexers: dict[str, Indexer] = {}
        self._indices: dict[str, dict[Hashable, Bucket]] = {}
        self._skipped = 0  # see `skipped`

    def get(self, namespace: str, name: str) -> Manifest | None:
        """The cached object, or None."""
        key = self._key(namespace, name)
        if key is None:
            return None
        with self._lock:
            return self._cache.get(key)

    def items(self) -> list[Manifest]:
        """A snapshot of every cached object."""
        with self._lock:
            return list(self._cache.values())

    def _key(self, namespace: str, name: str) -> CacheKey | None:
        """The cache key of `namespace`/`name`; None for a namespace this one does not watch."""
        if self.namespace is None:
            return (namespace, name)
        return name if namespace == self.namespace else None

    def _key_of(self, obj: Manifest) -> CacheKey | None:
        """The cache key of a listed or watched object; None (counted) for a foreign one."""
        key = self._key(*key_of(obj))
        if key is None:
            self._skipped += 1  # a server that answers with another namespace's objects
        return key

    @property
    def skipped(self) -> int:
        """Objects skipped: foreign ones, and those an indexer or a projection failed on."""
        return self._skipped

    def __len__(self) -> int:
        with self._lock:
            return len(self._cache)

    def add_index(self, name: str, values: Indexer) -> None:
        """Keep an index `name`: value → keys of the objects `values(obj)` names."""
        with self._lock:
            self._indexers[name] = values
            self._indices[name] = {}
            for key, obj in self._cache.items():
                for value in values(obj):
                    _bucket_add(self._indices[name], value, key)

    def by_index(self, name: str, value: Hashable) -> list[Manifest]:
        """The cached objects whose index `name` holds `value`."""
        with self._lock:
            bucket = self._indices[name].get(value)
            keys = () if bucket is None else bucket if isinstance(bucket, set) else (bucket,)
            return [self._cache[k] for k in keys if k in self._cache]

    def _index_remove_locked(self, key: CacheKey, obj: Manifest) -> None:
        for name, values in self._indexers.items():
            index = self._indices[name]
            for value in values(obj):
                bucket = index.get(value)
                if bucket == key:
                    del index[value]
                elif isinstance(bucket, set):
                    bucket.discard(key)
                    if len(bucket) == 1:
                        index[value] = next(iter(bucket))

    def _index_add_locked(self, key: CacheKey, obj: Manifest) -> None:
        for name, values in self._indexers.items():
            try:
                found = list(values(obj))
            except Exception:  # noqa: BLE001 - a bad object is skipped in this index (H1)
                self._skipped += 1
                _LOG.exception("indexer failed index=%s object=%s/%s", name, *key_of(obj))
                continue
            for value in found:
                _bucket_add(self._indices[name], value, key)

    def _store_locked(self, key: CacheKey, obj: Manifest | None) -> None:
        old = self._cache.get(key)
        if old is not None:
            self._index_remove_locked(key, old)
        if obj is None:
            self._cache.pop(key, None)
        else:
            self._cache[key] = obj
            self._index_add_locked(key, obj)

    def forget(self, namespace: str, name: str) -> None:
        """Drop an object this process just deleted."""
        key = self._key(namespace, name)
        if key is None:
            return
        with self._lock:
            self._store_locked(key, None)

    def _replace_locked(self, fresh: dict[CacheKey, Manifest]) -> dict[CacheKey, Manifest]:
        """Cache exactly `fresh` (a new list); the objects cached before."""
        old = self._cache
        self._cache = {}
        for index in self._indices.values():
            index.clear()
        for key, obj in fresh.items():
            self._store_locked(key, obj)
        return old

    def _upsert_projected(self, obj: Manifest) -> None:
        """Cache `obj` unless the store already has a newer version of it."""
        key = self._key_of(obj)
        if key is None:
            return
        with self._lock:
            current = self._cache.get(key)
            if current is None or _newer(obj, current):
                self._store_locked(key, obj)


def _bucket_add(index: dict[Hashable, Bucket], value: Hashable, key: CacheKey) -> None:
    bucket = index.get(value)
    if bucket is None:
        index[value] = key
    elif isinstance(bucket, set):
        bucket.add(key)
    elif bucket != key:
        index[value] = {bucket, key}


def version_of(obj: Manifest) -> str:
    """The resourceVersion of an object ("" when it has none)."""
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _newer(a: Manifest, b: Manifest) -> bool:
    """Whether `a` is a later version than `b`.

    resourceVersions compare as integers when they are; Kubernetes calls them opaque, but
    etcd's are, and the fake server's too.
    """
    va, vb = version_of(a), version_of(b)
    if va.isdigit() and vb.isdigit():
        return int(va) > int(vb)
    return va != vb
