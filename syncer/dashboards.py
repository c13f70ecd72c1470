"""The dashboard clients the daemon dials: derived address, live port, per-namespace token (§1.1).

`DashboardFactory(url)` makes the `HttpDashboard` for a URL the syncer derived itself
(`syncer.trust.dashboard_url`: `http://<head svc>.<ns>.svc.<domain>:<port>`); any other
form is a `DashboardError` and nothing is dialled. Each request then dials:

- the URL's host (cluster DNS), on the `dashboard` port of the live head Service
  `<head svc>` in `<ns>` as the Services cache holds it (review C2): a Service not cached,
  or without a `dashboard` port, is a `TransientError` and nothing is dialled;
- with the token of that namespace only (review H4): key `auth_token` of the Secret the
  cluster's head Pod takes `RAY_AUTH_TOKEN` from (the renderer writes it from
  `authOptions.secretName`), else of the configured `dashboard_auth_secret`, read in `<ns>`
  (never in the syncer's own namespace), cached per (namespace, Secret) in a bounded LRU for
  `token_ttl_s`, and re-read after a 401 at most once per `reread_s` per Secret;
- through the URL's circuit breaker (`syncer.ray.breaker`), and, for a POST, PUT or DELETE,
  only while the leader lease is fresh, checked right before the request goes out (M4).
"""

from __future__ import annotations

import base64
import binascii
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from renderer import naming
from syncer.errors import NotFoundError, SyncerError, TransientError
from syncer.kube import meta
from syncer.kube.cache import Cache
from syncer.kube.client import SECRETS, Kube, Manifest
from syncer.ray.breaker import Breakers
from syncer.ray.dashboard import MAX_REPLY_BYTES, DashboardError, HttpDashboard, parse_url

_LOG = logging.getLogger(__name__)

TOKEN_KEY: Final = "auth_token"  # the key KubeRay's pods read the token from
TOKEN_ENV: Final = "RAY_AUTH_TOKEN"
DASHBOARD_PORT_NAME: Final = "dashboard"
HEADS_INDEX: Final = "dashboard-heads"  # head pods by (namespace, cluster)
# Keys the projections below add: not Kubernetes fields (the caches hold projections).
AUTH_SECRET_FIELD: Final = "rayAuthSecret"
_MAX_TOKEN_BYTES: Final = 4096


@dataclass(frozen=True, slots=True)
class Settings:
    """What the dashboard clients take from the config (and one test hook)."""

    timeout_s: float = 2.0
    auth_secret: str | None = None  # the configured Secret name, read in each namespace
    cluster_domain: str = "cluster.local"
    max_reply_bytes: int = MAX_REPLY_BYTES
    token_ttl_s: float = 300.0
    reread_s: float = 5.0
    tokens_kept: int = 1024
    breaker_threshold: int = 5
    breaker_base_s: float = 1.0
    breaker_max_s: float = 30.0
    # Host name -> address to connect to; tests play cluster DNS with it. None: as is.
    resolve: Callable[[str], str] | None = None


# --- what the caches keep ---------------------------------------------------------------------


def auth_secret_of(pod: Manifest) -> str:
    """The Secret a head Pod's containers take `RAY_AUTH_TOKEN` from ("" if none)."""
    spec = pod.get("spec") if isinstance(pod, dict) else None
    containers = spec.get("containers") if isinstance(spec, dict) else None
    for container in containers if isinstance(containers, list) else []:
        env = container.get("env") if isinstance(container, dict) else None
        for var in env if isinstance(env, list) else []:
            if not isinstance(var, dict) or var.get("name") != TOKEN_ENV:
                continue
            ref = (var.get("valueFrom") or {}).get("secretKeyRef") or {}
            if isinstance(ref, dict) and ref.get("key") == TOKEN_KEY and ref.get("name"):
                return str(ref["name"])
    return ""


def keeping_auth_secret(project: Callable[[Manifest], Manifest]) -> Callable[[Manifest], Manifest]:
    """`project`, keeping of a head Pod the name of its token Secret (`spec.rayAuthSecret`)."""

    def projected(pod: Manifest) -> Manifest:
        out = project(pod)
        if meta.label(pod, naming.RAY_NODE_TYPE) == "head":
            secret = auth_secret_of(pod)
            if secret:
                out = {**out, "spec": {**(out.get("spec") or {}), AUTH_SECRET_FIELD: secret}}
        return out

    return projected


def heads(pod: Manifest) -> Iterable[Hashable]:
    """Index values of a head Pod: its (namespace, cluster)."""
    cluster = meta.label(pod, naming.RAY_CLUSTER)
    if meta.label(pod, naming.RAY_NODE_TYPE) != "head" or not cluster:
        return []
    return [(meta.namespace(pod), cluster)]


# --- tokens -----------------------------------------------------------------------------------


class NamespaceTokens:
    """Ray tokens by (namespace, Secret name): read on first use, cached, re-read on a 401."""

    def __init__(
        self,
        kube: Kube,
        *,
        ttl_s: float,
        reread_s: float,
        limit: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kube = kube
        self._ttl = ttl_s
        self._reread = reread_s
        self._limit = max(1, limit)
        self._clock = clock
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[str, str], tuple[float, str | None]] = OrderedDict()
        self.reads = 0  # Secret GETs made (tests, metrics)

    def get(self, namespace: str, secret: str) -> str | None:
        """The token of `namespace/secret`, read when not cached or older than the TTL."""
        key = (namespace, secret)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None and self._clock() - cached[0] < self._ttl:
                self._cache.move_to_end(key)
                return cached[1]
        return self._read(key)

    def refresh(self, namespace: str, secret: str, rejected: str | None) -> str | None:
        """After a 401 to `rejected`: read again, unless read within `reread_s` (then cached)."""
        key = (namespace, secret)
        with self._lock:
            cached = self._cache.get(key)
            recent = cached is not None and self._clock() - cached[0] < self._reread
            if recent and cached is not None:
                return cached[1]
            if cached is not None:
                # Stamp first: the other workers' 401s in the same moment use this read.
                self._cache[key] = (self._clock(), cached[1])
        return self._read(key)

    def _read(self, key: tuple[str, str]) -> str | None:
        namespace, secret = key
        with self._lock:
            self.reads += 1
        try:
            obj = self._kube.get(SECRETS, namespace, secret)
        except NotFoundError:
            obj = None
        except SyncerError as exc:  # 403 (no RBAC for that name), API errors
            _LOG.warning("dashboard auth Secret unreadable secret=%s/%s error=%s", *key, exc)
            obj = None
        token = _token_of(obj, namespace, secret)
        with self._lock:
            self._cache[key] = (self._clock(), token)
            self._cache.move_to_end(key)
            while len(self._cache) > self._limit:
                self._cache.popitem(last=False)
        return token


def _token_of(secret: Manifest | None, namespace: str, name: str) -> str | None:
    if secret is None:
        _LOG.warning("dashboard auth Secret missing secret=%s/%s", namespace, name)
        return None
    data = secret.get("data")
    raw = data.get(TOKEN_KEY) if isinstance(data, dict) else None
    if not isinstance(raw, str) or not raw or len(raw) > 2 * _MAX_TOKEN_BYTES:
        _LOG.warning(
            "dashboard auth Secret has no usable %s secret=%s/%s", TOKEN_KEY, namespace, name
        )
        return None
    try:
        token = base64.b64decode(raw, validate=True).decode().strip()
    except (binascii.Error, UnicodeDecodeError):
        _LOG.warning(
            "dashboard auth Secret %s is not base64 text secret=%s/%s", TOKEN_KEY, namespace, name
        )
        return None
    return token or None


@dataclass(frozen=True, slots=True)
class _ClusterToken:
    """`TokenSource` of one head Service: its namespace's Secret, per request."""

    tokens: NamespaceTokens
    namespace: str
    secret: Callable[[], str | None]

    def token(self) -> str | None:
        name = self.secret()
        return self.tokens.get(self.namespace, name) if name else None

    def refresh(self, rejected: str | None) -> str | None:
        name = self.secret()
        return self.tokens.refresh(self.namespace, name, rejected) if name else None


# --- the factory --------------------------------------------------------------------------------


class DashboardFactory:
    """`url -> HttpDashboard` for the dashboard pool (see the module docstring)."""

    def __init__(
        self,
        kube: Kube,
        services: Cache,
        pods: Cache,
        settings: Settings,
        *,
        fence: Callable[[], bool] = lambda: True,
    ) -> None:
        self.settings = settings
        self._services = services
        self._pods = pods
        self._fence = fence
        self.tokens = NamespaceTokens(
            kube,
            ttl_s=settings.token_ttl_s,
            reread_s=settings.reread_s,
            limit=settings.tokens_kept,
        )
        self.breakers = Breakers(
            threshold=settings.breaker_threshold,
            base_s=settings.breaker_base_s,
            max_s=settings.breaker_max_s,
        )

    def head_service(self, url: str) -> tuple[str, str]:
        """(namespace, head Service) of a derived URL; DashboardError for any other form."""
        host, _, path = parse_url(url)
        suffix = f".svc.{self.settings.cluster_domain}"
        service, _, rest = host.partition(".")
        namespace, _, tail = rest.partition(".")
        if (
            path
            or f".{tail}" != suffix
            or not naming.is_dns1123_label(service)
            or not naming.is_dns1123_label(namespace)
        ):
            raise DashboardError(f"not a head Service address the syncer derives: {url!r}")
        return namespace, service

    def __call__(self, url: str) -> HttpDashboard:
        """The client of one derived dashboard URL."""
        namespace, service = self.head_service(url)
        settings = self.settings
        return HttpDashboard(
            url,
            timeout=settings.timeout_s,
            auth=_ClusterToken(self.tokens, namespace, lambda: self.secret_for(namespace, service)),
            max_reply_bytes=settings.max_reply_bytes,
            breaker=self.breakers.get(url),
            port=lambda: self.live_port(namespace, service),
            resolve=settings.resolve,
            fence=self._fence,
        )

    def _service(self, namespace: str, service: str) -> Manifest:
        obj = self._services.get(namespace, service)
        if obj is None:
            raise TransientError(f"head Service {namespace}/{service} is not cached: not dialled")
        return obj

    def live_port(self, namespace: str, service: str) -> int:
        """The `dashboard` port of the live head Service (TransientError: none, not dialled)."""
        spec: Any = self._service(namespace, service).get("spec") or {}
        for port in spec.get("ports") or []:
            if port.get("name") != DASHBOARD_PORT_NAME:
                continue
            value = port.get("port")
            if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536:
                return value
        raise TransientError(
            f"head Service {namespace}/{service} has no {DASHBOARD_PORT_NAME!r} port: not dialled"
        )

    def secret_for(self, namespace: str, service: str) -> str | None:
        """The token Secret of a head Service's cluster: its head Pod's, else the configured."""
        obj = self._services.get(namespace, service)
        cluster = meta.label(obj, naming.RAY_CLUSTER) if obj is not None else ""
        if cluster:
            for pod in self._pods.by_index(HEADS_INDEX, (namespace, cluster)):
                secret = (pod.get("spec") or {}).get(AUTH_SECRET_FIELD)
                if secret:
                    return str(secret)
        return self.settings.auth_secret
