"""`ForwardingKube`: a `Kube` that hands every call to another one, with hooks around them.

The write guard (`leader.GuardedKube`), the benchmark's recording client and the tests'
partitioned client are such wrappers; they override a hook (`_target`, `_before_write`,
`_after_write`) instead of repeating the eight methods of the `Kube` protocol. No I/O of
its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from syncer.kube.client import LIST_PAGE, MERGE_PATCH, Kube, Manifest, Page, Resource, WatchEvent


class ForwardingKube:
    """Forwards every `Kube` call to `inner` (see the module docstring for the hooks)."""

    def __init__(self, inner: Kube) -> None:
        self._inner = inner

    # --- hooks ---------------------------------------------------------------------------

    def _target(self) -> Kube:
        """The client a call goes to (may raise to refuse every call)."""
        return self._inner

    def _before_write(self, verb: str, resource: Resource, name: str) -> None:
        """Called before each create, replace, patch and delete (may raise to refuse it)."""

    def _after_write(self, verb: str, resource: Resource, body: Manifest) -> None:
        """Called after each write that succeeded, with what was sent.

        `body`: the object (create, replace), the merge patch, or {} (a JSON patch, a delete).
        """

    # --- reads -----------------------------------------------------------------------------

    def list(
        self, resource: Resource, namespace: str | None, *, label_selector: str | None = None
    ) -> tuple[list[Manifest], str]:
        """Forward."""
        return self._target().list(resource, namespace, label_selector=label_selector)

    def list_pages(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        limit: int = LIST_PAGE,
    ) -> Iterator[tuple[Page, str]]:
        """Forward, page by page (informers keep one page of full objects at a time)."""
        return self._target().list_pages(
            resource, namespace, label_selector=label_selector, limit=limit
        )

    def watch(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        resource_version: str,
        label_selector: str | None = None,
        timeout_s: int = 300,
    ) -> Iterator[WatchEvent]:
        """Forward."""
        return self._target().watch(
            resource,
            namespace,
            resource_version=resource_version,
            label_selector=label_selector,
            timeout_s=timeout_s,
        )

    def get(self, resource: Resource, namespace: str | None, name: str) -> Manifest | None:
        """Forward."""
        return self._target().get(resource, namespace, name)

    # --- writes ----------------------------------------------------------------------------

    def create(self, resource: Resource, namespace: str | None, body: Manifest) -> Manifest:
        """Forward, between the write hooks."""
        self._before_write("create", resource, body_name(body))
        created = self._target().create(resource, namespace, body)
        self._after_write("create", resource, body)
        return created

    def replace(self, resource: Resource, namespace: str | None, body: Manifest) -> Manifest:
        """Forward, between the write hooks."""
        self._before_write("replace", resource, body_name(body))
        replaced = self._target().replace(resource, namespace, body)
        self._after_write("replace", resource, body)
        return replaced

    def patch(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        content_type: str = MERGE_PATCH,
    ) -> Manifest:
        """Forward, between the write hooks."""
        self._before_write("patch", resource, name)
        patched = self._target().patch(resource, namespace, name, body, content_type=content_type)
        self._after_write("patch", resource, body if isinstance(body, dict) else {})
        return patched

    def delete(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        *,
        resource_version: str | None = None,
        uid: str | None = None,
        propagation: str = "Background",
    ) -> bool:
        """Forward, between the write hooks."""
        self._before_write("delete", resource, name)
        gone = self._target().delete(
            resource,
            namespace,
            name,
            resource_version=resource_version,
            uid=uid,
            propagation=propagation,
        )
        self._after_write("delete", resource, {})
        return gone


def body_name(body: Manifest) -> str:
    """The name in an object's metadata, as text (for messages)."""
    return str((body.get("metadata") or {}).get("name"))
