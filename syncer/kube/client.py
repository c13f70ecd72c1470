"""The syncer's only door to the Kubernetes API: plain dicts in and out.

In a Pod it reads the service account itself (`syncer.kube.incluster`) and never imports
the `kubernetes` package (~50 MB); out of cluster it uses that package for configuration
only (kubeconfig files, exec credential plugins: host, TLS, credentials). Either way it
speaks REST through `syncer.kube.transport` (standard-library connections in a Pod, the
ApiClient's urllib3 pool out of cluster), so objects stay JSON dicts (the generated model
classes cost memory and time at thousands of objects). Every failure leaves as
`TransientError` / `PermanentError` (or their subclasses). A 429 or 5xx
that carries `Retry-After` is retried after that long, a few times, as client-go's rest
client does; past that the error carries the hint (`retry_after`) for the engine's backoff.
"""

from __future__ import annotations

import email.utils
import json
import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol
from urllib.parse import quote, urlencode

from syncer.errors import PermanentError, SyncerError, TransientError, error_for_status
from syncer.kube.incluster import NotInClusterError, ServiceAccount
from syncer.kube.transport import Connections, Response, Transport, TransportError, Urllib3Transport

if TYPE_CHECKING:
    from kubernetes import client

Manifest = dict[str, Any]
Page = list[Manifest]  # one page of a list
_LOG = logging.getLogger(__name__)

FIELD_MANAGER: Final = "kuberay-syncer"
LIST_PAGE: Final = 100  # objects per list request (bigger pages fragment memory)
# Connections kept per API server: every informer holds one for its watch, and each
# worker needs one; a smaller pool opens and drops a connection (and a TLS handshake)
# per request once they are all busy.
MIN_POOL_SIZE: Final = 32
MERGE_PATCH: Final = "application/merge-patch+json"
JSON_PATCH: Final = "application/json-patch+json"
# Retry-After: how many times one request is repeated (client-go: 10), and the longest
# single wait; a longer hint is not waited for here but handed to the engine's backoff.
RETRY_AFTER_ATTEMPTS: Final = 3
RETRY_AFTER_MAX_WAIT_S: Final = 5.0


def parse_retry_after(value: object, *, now: float | None = None) -> float | None:
    """`Retry-After` in seconds: delta-seconds or an HTTP date (None when absent or bad)."""
    if value is None:
        return None
    text = str(value).strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), 3600.0)


@dataclass(frozen=True, slots=True)
class Resource:
    """One REST resource: where it lives and what it is called."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        """`v1` or `<group>/<version>`."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None, name: str | None = None, sub: str | None = None) -> str:
        """The REST path of the collection, an object, or an object's subresource."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name, safe='')}"
        if sub is not None:
            base += f"/{sub}"
        return base


PODS: Final = Resource("", "v1", "pods", "Pod")
CONFIGMAPS: Final = Resource("", "v1", "configmaps", "ConfigMap")
SERVICES: Final = Resource("", "v1", "services", "Service")
SECRETS: Final = Resource("", "v1", "secrets", "Secret")
EVENTS: Final = Resource("", "v1", "events", "Event")
JOBS: Final = Resource("batch", "v1", "jobs", "Job")
LEASES: Final = Resource("coordination.k8s.io", "v1", "leases", "Lease")
HTTPROUTES: Final = Resource("gateway.networking.k8s.io", "v1", "httproutes", "HTTPRoute")
RESOURCES_BY_KIND: Final = {
    r.kind: r for r in (PODS, CONFIGMAPS, SERVICES, SECRETS, JOBS, HTTPROUTES)
}


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One event of a watch stream: ADDED, MODIFIED, DELETED or BOOKMARK."""

    type: str
    object: Manifest


class Kube(Protocol):
    """What the syncer needs from a Kubernetes API server."""

    def list(
        self, resource: Resource, namespace: str | None, *, label_selector: str | None = None
    ) -> tuple[list[Manifest], str]:
        """All objects (following `continue`), and the list's resourceVersion."""
        ...

    def list_pages(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        limit: int = LIST_PAGE,
    ) -> Iterator[tuple[Page, str]]:
        """The objects one page at a time, each page with the list's resourceVersion."""
        ...

    def watch(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        resource_version: str,
        label_selector: str | None = None,
        timeout_s: int = 300,
    ) -> Iterator[WatchEvent]:
        """Events after `resource_version`; raises GoneError when it is too old."""
        ...

    def get(self, resource: Resource, namespace: str | None, name: str) -> Manifest | None:
        """One object, or None when it does not exist."""
        ...

    def create(self, resource: Resource, namespace: str | None, body: Manifest) -> Manifest:
        """Create an object (ConflictError when it exists)."""
        ...

    def replace(self, resource: Resource, namespace: str | None, body: Manifest) -> Manifest:
        """PUT an object; its metadata.resourceVersion guards the write."""
        ...

    def patch(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        content_type: str = MERGE_PATCH,
    ) -> Manifest:
        """Patch an object (a merge patch with metadata.resourceVersion is guarded)."""
        ...

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
        """Delete an object; False when it was already gone.

        `resource_version` and `uid` are preconditions: the server refuses (409) to delete
        an object that changed, or was re-created under the same name, since it was read.
        """
        ...


class _ApiClientAuth:
    """Host, pool and credentials of a `kubernetes` ApiClient (kubeconfig, exec plugins)."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self._api = api_client
        self._config = api_client.configuration
        self.transport: Transport = Urllib3Transport(
            api_client.rest_client.pool_manager, str(self._config.host), maxsize=MIN_POOL_SIZE
        )

    def headers(self) -> dict[str, str]:
        hook = getattr(self._config, "refresh_api_key_hook", None)
        if hook is not None:
            hook(self._config)
        headers: dict[str, str] = {}
        for setting in self._config.auth_settings().values():
            if setting.get("in") == "header" and setting.get("value"):
                headers[str(setting["key"])] = str(setting["value"])
        return headers

    def close(self) -> None:
        self._api.close()  # type: ignore[no-untyped-call]  # untyped library


class _ServiceAccountAuth:
    """Host, connections and bearer token of the Pod's service account (standard library)."""

    def __init__(self, account: ServiceAccount) -> None:
        self._account = account
        self.transport: Transport = Connections(
            account.host, ca_file=account.ca_file or None, maxsize=MIN_POOL_SIZE
        )

    def headers(self) -> dict[str, str]:
        return self._account.headers()

    def close(self) -> None:
        self.transport.close()


def _auth_for(
    api_client: client.ApiClient | ServiceAccount,
) -> _ApiClientAuth | _ServiceAccountAuth:
    if isinstance(api_client, ServiceAccount):
        return _ServiceAccountAuth(api_client)
    return _ApiClientAuth(api_client)


class _Http:
    """The HTTP side of `KubeClient`: requests, Retry-After, errors, request counts."""

    def __init__(
        self,
        api_client: client.ApiClient | ServiceAccount,
        *,
        timeout_s: float = 10.0,
        user_agent: str = "kuberay-syncer",
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._user_agent = user_agent
        self._sleep = sleep
        self._source = api_client
        self._auth = auth = _auth_for(api_client)
        self._transport = auth.transport
        self._timeout = timeout_s
        self._lock = threading.Lock()
        self.requests = 0
        self.retried_after = 0  # requests repeated after the server's Retry-After
        # Requests by (HTTP method, status code or "error"): what the metrics publisher shows.
        self.calls: Counter[tuple[str, str]] = Counter()

    def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": self._user_agent}
        if content_type is not None:
            headers["Content-Type"] = content_type
        headers.update(self._auth.headers())
        return headers

    def _request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, str] | None = None,
        body: Any = None,
        content_type: str | None = None,
        stream: bool = False,
        timeout_s: float | None = None,
    ) -> Response:
        url = path
        if query:
            url += "?" + urlencode(query)
        data = None if body is None else json.dumps(body).encode()
        if data is not None and content_type is None:
            content_type = "application/json"
        read = timeout_s if timeout_s is not None else self._timeout
        attempt = 1
        while True:
            try:
                return self._send(method, url, path, data, content_type, read)
            except TransientError as exc:
                wait = exc.retry_after
                if (
                    stream
                    or wait is None
                    or wait > RETRY_AFTER_MAX_WAIT_S
                    or attempt >= RETRY_AFTER_ATTEMPTS
                ):
                    raise
            attempt += 1
            with self._lock:
                self.retried_after += 1
            self._sleep(wait)

    def _send(
        self,
        method: str,
        url: str,
        path: str,
        data: bytes | None,
        content_type: str | None,
        read: float,
    ) -> Response:
        with self._lock:
            self.requests += 1
        try:
            response = self._transport.request(
                method,
                url,
                data,
                self._headers(content_type),
                connect_s=self._timeout,
                read_s=read,
            )
            if response.status >= 400:
                text = response.read().decode("utf-8", "replace")
        except TransportError as exc:
            self._count(method, "error")
            raise TransientError(f"{method} {path}: {exc}") from exc
        self._count(method, str(response.status))
        if response.status >= 400:
            raise self._error(method, path, response.status, text, response.header("Retry-After"))
        return response

    def _count(self, method: str, code: str) -> None:
        with self._lock:
            self.calls[(method, code)] += 1

    @staticmethod
    def _error(
        method: str, path: str, status: int, text: str, retry_after_header: str | None
    ) -> SyncerError:
        message = text
        try:
            decoded = json.loads(text)
            if isinstance(decoded, dict) and decoded.get("message"):
                message = str(decoded["message"])
        except ValueError:
            pass
        retry_after = None
        if status == 429 or status >= 500:
            retry_after = parse_retry_after(retry_after_header)
        return error_for_status(
            status, f"{method} {path}: {status} {message}", retry_after=retry_after
        )

    def _json(self, method: str, path: str, **kwargs: Any) -> Manifest:
        response = self._request(method, path, **kwargs)
        try:
            body = response.read()
        except TransportError as exc:
            raise TransientError(f"{method} {path}: {exc}") from exc
        try:
            decoded = json.loads(body or b"{}")
        except ValueError as exc:
            raise TransientError(f"{method} {path}: the answer is not JSON") from exc
        if not isinstance(decoded, dict):
            raise PermanentError(f"{method} {path}: expected a JSON object")
        return decoded


class KubeClient(_Http):
    """`Kube` over HTTP, configured from the in-cluster service account or a kubeconfig file.

    Takes a `kubernetes` ApiClient (kubeconfig, tests) or a `ServiceAccount`.
    """

    @classmethod
    def from_environment(
        cls, kubeconfig: str | None = None, *, user_agent: str = "kuberay-syncer"
    ) -> KubeClient:
        """The Pod's service account in a Pod (unless a kubeconfig is named), else a kubeconfig.

        The `kubernetes` package (~50 MB) is imported only for a kubeconfig file.
        """
        if kubeconfig is None:
            try:
                return cls(ServiceAccount.load(), user_agent=user_agent)
            except NotInClusterError:
                pass
        from kubernetes import config

        api_client = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]  # untyped library
        return cls(api_client, user_agent=user_agent)

    def with_timeout(self, timeout_s: float) -> KubeClient:
        """A client on the same connections and counters whose requests time out sooner.

        The lease renewal's: its two requests must end within the renew deadline.
        """
        other = KubeClient(
            self._source, timeout_s=timeout_s, user_agent=self._user_agent, sleep=self._sleep
        )
        other._auth, other._transport = self._auth, self._transport
        other._lock, other.calls = self._lock, self.calls
        return other

    def close(self) -> None:
        """Release pooled connections."""
        self._auth.close()

    # --- verbs -----------------------------------------------------------------------------

    def list(
        self, resource: Resource, namespace: str | None, *, label_selector: str | None = None
    ) -> tuple[list[Manifest], str]:
        """All objects (following `continue`), and the list's resourceVersion."""
        items: list[Manifest] = []
        version = ""
        for page, page_version in self.list_pages(
            resource, namespace, label_selector=label_selector
        ):
            items.extend(page)
            version = page_version
        return items, version

    def list_pages(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        limit: int = LIST_PAGE,
    ) -> Iterator[tuple[Page, str]]:
        """The objects one page at a time, each with the list's resourceVersion.

        A caller that keeps only a projection of each object holds one page of full
        objects at a time rather than all of them (20,000 pods are hundreds of MB).
        """
        query: dict[str, str] = {"limit": str(limit)}
        if label_selector:
            query["labelSelector"] = label_selector
        while True:
            answer = self._json("GET", resource.path(namespace), query=query)
            items = answer.get("items") or []
            for item in items:
                item.setdefault("apiVersion", resource.api_version)
                item.setdefault("kind", resource.kind)
            meta = answer.get("metadata") or {}
            del answer
            yield items, str(meta.get("resourceVersion") or "")
            token = meta.get("continue")
            if not token:
                return
            query = {**query, "continue": str(token)}

    def watch(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        resource_version: str,
        label_selector: str | None = None,
        timeout_s: int = 300,
    ) -> Iterator[WatchEvent]:
        """Events after `resource_version`; raises GoneError when it is too old."""
        query = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_s),
        }
        if label_selector:
            query["labelSelector"] = label_selector
        response = self._request(
            "GET", resource.path(namespace), query=query, stream=True, timeout_s=timeout_s + 30
        )
        buffer = b""
        try:
            for chunk in response.chunks():
                # Split each chunk once (not once per line, which copies the rest each time).
                lines = (buffer + chunk).split(b"\n") if buffer else chunk.split(b"\n")
                buffer = lines.pop()
                for line in lines:
                    if line.strip():
                        yield self._event(line, resource)
        except TransportError as exc:
            raise TransientError(f"watch {resource.plural}: {exc}") from exc
        finally:
            response.release()
        if buffer.strip():
            yield self._event(buffer, resource)

    @staticmethod
    def _event(line: bytes, resource: Resource) -> WatchEvent:
        try:
            decoded = json.loads(line)
        except ValueError as exc:
            raise TransientError(f"watch {resource.plural}: a line is not JSON") from exc
        kind = str(decoded.get("type", ""))
        obj = decoded.get("object") or {}
        if kind == "ERROR":
            code = int(obj.get("code") or 500)
            raise error_for_status(code, f"watch {resource.plural}: {obj.get('message', '')}")
        obj.setdefault("apiVersion", resource.api_version)
        obj.setdefault("kind", resource.kind)
        return WatchEvent(kind, obj)

    def get(self, resource: Resource, namespace: str | None, name: str) -> Manifest | None:
        """One object, or None when it does not exist."""
        try:
            return self._json("GET", resource.path(namespace, name))
        except SyncerError as exc:
            if exc.status == 404:
                return None
            raise

    def create(self, resource: Resource, namespace: str | None, body: Manifest) -> Manifest:
        """Create an object (ConflictError when it exists)."""
        return self._json(
            "POST",
            resource.path(namespace),
            query={"fieldManager": FIELD_MANAGER},
            body=body,
        )

    def replace(self, resource: Resource, namespace: str | None, body: Manifest) -> Manifest:
        """PUT an object; its metadata.resourceVersion guards the write."""
        name = str(body["metadata"]["name"])
        return self._json(
            "PUT",
            resource.path(namespace, name),
            query={"fieldManager": FIELD_MANAGER},
            body=body,
        )

    def patch(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        content_type: str = MERGE_PATCH,
    ) -> Manifest:
        """Patch an object (a merge patch with metadata.resourceVersion is guarded)."""
        return self._json(
            "PATCH",
            resource.path(namespace, name),
            query={"fieldManager": FIELD_MANAGER},
            body=body,
            content_type=content_type,
        )

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
        """Delete an object; False when it was already gone."""
        body: Manifest = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "propagationPolicy": propagation,
        }
        preconditions = {"resourceVersion": resource_version, "uid": uid}
        if any(preconditions.values()):
            body["preconditions"] = {k: v for k, v in preconditions.items() if v}
        try:
            self._json("DELETE", resource.path(namespace, name), body=body)
        except SyncerError as exc:
            if exc.status == 404:
                return False
            raise
        return True


def now() -> float:
    """Wall-clock seconds; the only clock kube-facing code reads."""
    return time.time()
