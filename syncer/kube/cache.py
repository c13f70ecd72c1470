"""One resource across the watched namespaces: an informer per namespace, read as one cache.

The syncer watches one namespace, a list of them, or all (`None`); every lookup picks the
informers whose namespace can hold the answer. `get` returns None when nothing is cached,
`upsert` and `forget` keep the cache current after the syncer's own writes (whose echoes
the informers then drop). Like client-go's multi-namespace cache; no I/O of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence

from syncer.kube import meta
from syncer.kube.client import Kube, Manifest, Resource
from syncer.kube.informer import Handler, Informer, Projection, keep_all


class Cache:
    """The informers of one resource, one per watched namespace."""

    def __init__(self, resource: Resource, informers: Sequence[Informer]) -> None:
        self.resource = resource
        self.informers = list(informers)

    @classmethod
    def watching(
        cls,
        kube: Kube,
        resource: Resource,
        namespaces: Iterable[str | None],
        *,
        label_selector: str | None = None,
        project: Projection = keep_all,
    ) -> Cache:
        """A cache fed by one informer per namespace (None: all namespaces)."""
        informers = [
            Informer(kube, resource, namespace, label_selector=label_selector, project=project)
            for namespace in namespaces
        ]
        return cls(resource, informers)

    # --- set-up (before `start`) -------------------------------------------------------------

    def add_index(self, name: str, values: Callable[[Manifest], Iterable[Hashable]]) -> None:
        """Index every informer's objects by `values` (tuples start with the namespace)."""
        for informer in self.informers:
            informer.add_index(name, values)

    def add_handler(self, handler: Handler) -> None:
        """Call `handler(event, object)` on every change in any namespace."""
        for informer in self.informers:
            informer.add_handler(handler)

    # --- reading -------------------------------------------------------------------------------

    def _holding(self, namespace: str | None) -> Iterable[Informer]:
        return (i for i in self.informers if i.namespace in (None, namespace))

    def get(self, namespace: str, name: str) -> Manifest | None:
        """The cached object, or None."""
        for informer in self._holding(namespace):
            found = informer.get(namespace, name)
            if found is not None:
                return found
        return None

    def by_index(self, index: str, value: Hashable) -> list[Manifest]:
        """Objects whose index `index` holds `value` (a tuple whose first item is a namespace)."""
        namespace = value[0] if isinstance(value, tuple) else None
        found: list[Manifest] = []
        for informer in self._holding(namespace):
            found.extend(informer.by_index(index, value))
        return found

    def items(self) -> list[Manifest]:
        """A snapshot of every cached object."""
        return [obj for informer in self.informers for obj in informer.items()]

    def __len__(self) -> int:
        return sum(len(informer) for informer in self.informers)

    @property
    def synced(self) -> bool:
        """Whether every informer has loaded its first list."""
        return all(informer.synced for informer in self.informers)

    # --- the syncer's own writes -------------------------------------------------------------

    def upsert(self, obj: Manifest) -> None:
        """Cache what a write returned (the informer of its namespace; none: dropped)."""
        informer = next(iter(self._holding(meta.namespace(obj))), None)
        if informer is not None:
            informer.upsert(obj)

    def forget(self, namespace: str, name: str) -> None:
        """Drop an object the syncer deleted."""
        informer = next(iter(self._holding(namespace)), None)
        if informer is not None:
            informer.forget(namespace, name)
