"""A loopback fake Kubernetes API server (aiohttp) that speaks the real REST protocol.

Owns HTTP: routing of `/api` and `/apis` paths to verbs, discovery, watch streams,
fault injection and outages, the `/_fake/...` admin endpoints, and running the server
in a background thread (`FakeApiServer`) or as `python -m tests.fakeapi.server --port 0`.
Objects, verbs and validation live in `store`; it listens on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import signal
import socket
import sys
import threading
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self, TypeVar

from aiohttp import web
from aiohttp.client_exceptions import ClientConnectionResetError

from tests.fakeapi import kinds
from tests.fakeapi.errors import ApiError, bad_request, conflict, not_found, status_object
from tests.fakeapi.faults import OUTAGE_MODES, Audit, FaultRule, Faults, RequestInfo
from tests.fakeapi.kinds import Kind, find_kind, kind_for_resource, unknown_top_level_fields
from tests.fakeapi.selectors import parse_field_selector, parse_label_selector
from tests.fakeapi.store import DeleteOptions, Store, Watcher, WatchEvent, parse_patch_body

Manifest = dict[str, Any]
T = TypeVar("T")

LOOPBACK = "127.0.0.1"
# The bearer token of the kubeconfig it writes; `tokens` adds more.
TOKEN = "fake-token"
_LOG = logging.getLogger(__name__)
_TRUE = ("1", "true", "True")


class _WatchStream:
    """The queue between the store (any thread) and one watch response (the loop)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.queue: asyncio.Queue[WatchEvent | None] = asyncio.Queue()
        self.abrupt = False

    def deliver(self, event: WatchEvent | None) -> None:
        with contextlib.suppress(RuntimeError):  # a closed loop: the server is gone
            self._loop.call_soon_threadsafe(self.queue.put_nowait, event)

    def close(self, *, abrupt: bool) -> None:
        self.abrupt = abrupt
        self.deliver(None)


@dataclass(frozen=True, slots=True)
class _Route:
    kind: Kind
    namespace: str | None
    name: str | None
    subresource: str | None
    verb: str


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=json.dumps(body).encode(),
        status=status,
        headers={"Content-Type": "application/json", **(headers or {})},
    )


def _error_response(error: ApiError) -> web.Response:
    return _json(error.status(), error.code, error.headers)


def _fault_error(rule: FaultRule, info: RequestInfo) -> ApiError:
    name = info.name or ""
    if rule.status == 409:
        error = conflict(info.resource, name, info.group)
    elif rule.status == 404:
        error = not_found(info.resource, name, info.group)
    else:
        default_messages = {
            429: "Too many requests, please try again later.",
            500: "Internal error occurred: injected fault",
            503: "the server is currently unable to handle the request",
            504: "the server was unable to return a response in the time allotted",
        }
        error = ApiError(
            rule.status,
            rule.message or default_messages.get(rule.status, f"injected fault {rule.status}"),
        )
    if rule.message:
        error.message = rule.message
    if rule.retry_after is not None:
        error.headers["Retry-After"] = str(rule.retry_after)
        error.details = {**(error.details or {}), "retryAfterSeconds": rule.retry_after}
    return error


def _int_param(query: Any, key: str) -> int | None:
    value = query.get(key)
    if value in (None, ""):
        return None
    try:
        return int(value)
    except ValueError:
        raise bad_request(f"invalid {key} {value!r}: not an integer") from None


class FakeApiServer:
    """The fake API server, its store, fault injection and audit log.

    Args:
        port: the TCP port on 127.0.0.1 (0: an ephemeral port).
        history_size: watch events kept per kind for resumption.
        bookmark_interval: seconds between BOOKMARK events on watches that allow them.
        watch_timeout: the longest a watch stays open without `timeoutSeconds`.
        seed: seeds generated names, UIDs and cluster IPs.
        version: the `gitVersion` reported by `/version`.
        tokens: the bearer tokens it authenticates besides `TOKEN` (its kubeconfig's);
            another token gets `401 Unauthorized`, as a real server answers a token it
            does not know. None (a server made ad hoc, e.g. for a client that reads an
            in-cluster token file): every token is accepted. A request without a token is
            served either way (there is no authorization).
    """

    def __init__(
        self,
        *,
        port: int = 0,
        history_size: int = 1000,
        bookmark_interval: float = 1.0,
        watch_timeout: float = 1800.0,
        seed: int = 0,
        version: str = "v1.31.0",
        tokens: Iterable[str] | None = None,
    ) -> None:
        self.tokens = None if tokens is None else {TOKEN, *tokens}
        self.store = Store(history_size=history_size, seed=seed)
        self.audit = Audit()
        self.faults = Faults(self)
        self.bookmark_interval = bookmark_interval
        self.watch_timeout = watch_timeout
        self._version = version
        self._requested_port = port
        self._port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._site: web.SockSite | None = None
        self._streams: set[_WatchStream] = set()
        self._outage: str | None = None
        self._outage_timer: asyncio.TimerHandle | None = None

    # ----------------------------------------------------------------- lifecycle

    @property
    def port(self) -> int:
        """The bound TCP port (after start)."""
        return self._port

    @property
    def url(self) -> str:
        """The base URL, `http://127.0.0.1:<port>`."""
        return f"http://{LOOPBACK}:{self._port}"

    def _bind(self) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((LOOPBACK, self._port or self._requested_port))
        sock.listen(128)
        sock.setblocking(False)
        self._port = sock.getsockname()[1]
        return sock

    async def astart(self) -> None:
        """Start serving on the running event loop."""
        self._loop = asyncio.get_running_loop()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(
            app,
            handle_signals=False,
            access_log=None,
            handler_cancellation=True,
            shutdown_timeout=2.0,
        )
        await self._runner.setup()
        self._site = web.SockSite(self._runner, self._bind())
        await self._site.start()

    async def astop(self) -> None:
        """Stop serving: end watches, close connections and the listening socket."""
        if self._outage_timer is not None:
            self._outage_timer.cancel()
            self._outage_timer = None
        self._outage = None
        for stream in list(self._streams):
            stream.close(abrupt=False)
        for watcher in self.store.watchers():
            self.store.unwatch(watcher)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self._site = None

    def start(self) -> Self:
        """Run the server in a background thread with its own event loop; returns self.

        Raises:
            RuntimeError: the server is already running or failed to start.
        """
        if self._thread is not None:
            raise RuntimeError("the fake API server is already running")
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.astart())
            except BaseException as exc:  # noqa: BLE001 -- reported to the starting thread
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                pending = asyncio.all_tasks(loop)
                for task in pending:
                    task.cancel()
                if pending:
                    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self._thread = threading.Thread(target=run, name="fake-kube-apiserver", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            self._thread = None
            raise RuntimeError("the fake API server failed to start") from failure[0]
        return self

    def stop(self) -> None:
        """Stop the background server and join its thread (idempotent)."""
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        asyncio.run_coroutine_threadsafe(self.astop(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _on_loop(self, make: Callable[[], Awaitable[T]]) -> T:
        loop = self._loop
        if loop is None:
            raise RuntimeError("the fake API server is not running")
        if self._thread is not None and threading.current_thread() is self._thread:
            raise RuntimeError("call the async variant from the server's own loop")

        async def call() -> T:
            return await make()

        return asyncio.run_coroutine_threadsafe(call(), loop).result(timeout=30)

    # ----------------------------------------------------------------- fault backend

    def drop_watches(self, *, abrupt: bool) -> int:
        """Close every open watch stream; returns how many there were."""
        streams = list(self._streams)
        for stream in streams:
            stream.close(abrupt=abrupt)
        return len(streams)

    def compact(self) -> int:
        """Forget the watch history; returns the compacted resourceVersion."""
        return self.store.compact()

    def start_outage(self, mode: str, seconds: float | None) -> None:
        """Begin an API outage (see `Faults.start_outage`)."""
        self._on_loop(lambda: self._astart_outage(mode, seconds))

    def end_outage(self) -> None:
        """End an API outage (idempotent)."""
        if self._loop is None or self._thread is None:
            return
        self._on_loop(self._aend_outage)

    async def _astart_outage(
        self, mode: str, seconds: float | None, keep: web.RequestHandler | None = None
    ) -> None:
        if mode not in OUTAGE_MODES:
            raise ValueError(f"unknown outage mode {mode!r}")
        if self._outage is not None:
            await self._aend_outage()
        self._outage = mode
        self.drop_watches(abrupt=mode == "refused")
        if mode == "refused" and self._site is not None and self._runner is not None:
            await self._site.stop()
            self._site = None
            server = self._runner.server
            for connection in server.connections if server is not None else []:
                if connection is not keep:
                    connection.force_close()
        if seconds is not None:
            loop = asyncio.get_running_loop()
            self._outage_timer = loop.call_later(
                seconds, lambda: loop.create_task(self._aend_outage()) and None
            )

    async def _aend_outage(self) -> None:
        if self._outage_timer is not None:
            self._outage_timer.cancel()
            self._outage_timer = None
        if self._outage == "refused" and self._runner is not None and self._site is None:
            self._site = web.SockSite(self._runner, self._bind())
            await self._site.start()
        self._outage = None

    # ----------------------------------------------------------------- direct access

    @property
    def resource_version(self) -> int:
        """The current global resourceVersion."""
        return self.store.resource_version

    def get_object(self, resource: str, namespace: str | None, name: str) -> Manifest | None:
        """A copy of one stored object (resource as `pods`, `jobs.batch`), or None."""
        return self.store.find(kind_for_resource(resource), namespace, name)

    def list_objects(self, resource: str, namespace: str | None = None) -> list[Manifest]:
        """Copies of the stored objects of a resource, sorted by namespace and name."""
        return self.store.objects(kind_for_resource(resource), namespace)

    def put_object(self, obj: Manifest) -> Manifest:
        """Create or replace an object directly (no defaults or validation; watchers see it)."""
        return self.store.put(obj)

    def delete_object(self, resource: str, namespace: str | None, name: str) -> bool:
        """Remove an object at once, ignoring finalizers; False when it did not exist."""
        return self.store.remove(kind_for_resource(resource), namespace, name)

    def kubeconfig(self, *, namespace: str = "default") -> Manifest:
        """A kubeconfig document pointing at this server (with its token, `TOKEN`)."""
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": TOKEN}}],
            "contexts": [
                {
                    "name": "fake",
                    "context": {"cluster": "fake", "user": "fake", "namespace": namespace},
                }
            ],
            "current-context": "fake",
        }

    def write_kubeconfig(self, path: Path, *, namespace: str = "default") -> Path:
        """Write `kubeconfig()` to a file (JSON, which is valid YAML); returns the path."""
        path.write_text(
            json.dumps(self.kubeconfig(namespace=namespace), indent=2) + "\n", encoding="utf-8"
        )
        return path

    # ----------------------------------------------------------------- HTTP

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        try:
            if request.path.startswith("/_fake/"):
                return await self._admin(request)
            self._authenticate(request)
            if self._outage is not None:
                return _error_response(
                    ApiError(503, "the fake API server is in a simulated outage")
                )
            discovery = self._discovery(request)
            if discovery is not None:
                return discovery
            return await self._resource_request(request)
        except ApiError as exc:
            return _error_response(exc)
        except (asyncio.CancelledError, ConnectionError):
            raise
        except Exception as exc:  # noqa: BLE001 -- a bug in the fake must answer 500, not hang
            _LOG.exception("fake API server error: method=%s path=%s", request.method, request.path)
            return _error_response(ApiError(500, f"fake API server error: {exc!r}"))

    def _authenticate(self, request: web.Request) -> None:
        """A bearer token it does not know is `401 Unauthorized` (before anything else)."""
        header = request.headers.get("Authorization", "")
        if self.tokens is None or not header:
            return
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or token.strip() not in self.tokens:
            raise ApiError(401, "Unauthorized")

    def _discovery(self, request: web.Request) -> web.StreamResponse | None:
        path = request.path.rstrip("/") or "/"
        if path in ("/healthz", "/readyz", "/livez"):
            return web.Response(text="ok", content_type="text/plain")
        if path == "/version":
            major, minor = self._version.lstrip("v").split(".")[:2]
            return _json(
                {
                    "major": major,
                    "minor": minor,
                    "gitVersion": self._version,
                    "gitCommit": "fake",
                    "gitTreeState": "clean",
                    "buildDate": "2024-01-01T00:00:00Z",
                    "goVersion": "go1.22",
                    "compiler": "gc",
                    "platform": "linux/amd64",
                }
            )
        if path == "/api":
            return _json(kinds.api_versions(f"{LOOPBACK}:{self._port}"))
        if path == "/apis":
            return _json(kinds.api_group_list())
        parts = path.strip("/").split("/")
        body: Manifest | None = None
        if parts[0] == "api" and len(parts) == 2:
            body = kinds.resource_list("", parts[1])
        elif parts[0] == "apis" and len(parts) == 2:
            body = kinds.api_group(parts[1])
        elif parts[0] == "apis" and len(parts) == 3:
            body = kinds.resource_list(parts[1], parts[2])
        elif parts[0] not in ("api", "apis"):
            raise ApiError(404, "the server could not find the requested resource")
        else:
            return None
        if body is None:
            raise ApiError(404, "the server could not find the requested resource")
        return _json(body)

    def _route(self, request: web.Request) -> _Route:
        parts = [p for p in request.path.split("/") if p]
        if parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        else:
            group, version, rest = parts[1], parts[2], parts[3:]
        missing = ApiError(404, "the server could not find the requested resource")
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            candidate = find_kind(group, version, rest[2])
            if candidate is not None and candidate.namespaced:
                namespace, rest = rest[1], rest[2:]
        kind = find_kind(group, version, rest[0])
        if kind is None or len(rest) > 3:
            raise missing
        name = rest[1] if len(rest) > 1 else None
        subresource = rest[2] if len(rest) > 2 else None
        binding = subresource == "binding" and kind.plural == "pods" and not kind.group
        status = subresource == "status" and kind.status_subresource
        if subresource is not None and not binding and not status:
            raise missing
        if kind.namespaced and namespace is None and name is not None:
            raise missing
        method = request.method
        if method == "GET":
            if name is not None:
                verb = "get"
            else:
                verb = "watch" if request.query.get("watch") in _TRUE else "list"
        elif method == "POST" and (name is None or binding):
            verb = "create"
        elif method == "PUT" and name is not None:
            verb = "update"
        elif method == "PATCH" and name is not None:
            verb = "patch"
        elif method == "DELETE":
            verb = "delete" if name is not None else "deletecollection"
        else:
            raise ApiError(
                405, f"the server does not allow this method on the requested resource ({method})"
            )
        if binding and verb != "create":
            raise ApiError(405, "the server does not allow this method on the requested resource")
        if subresource and not binding and verb not in ("get", "update", "patch"):
            raise ApiError(405, "the server does not allow this method on the requested resource")
        return _Route(kind, namespace, name, subresource, verb)

    async def _resource_request(self, request: web.Request) -> web.StreamResponse:
        route = self._route(request)
        name = route.name
        if route.verb == "create":
            # Like the audit log's objectRef, a create is about the name in its body.
            with contextlib.suppress(ApiError, AttributeError):
                meta = (await self._body(request) or {}).get("metadata") or {}
                name = meta.get("name") or meta.get("generateName")
        info = RequestInfo(
            route.verb,
            route.kind.plural,
            route.subresource,
            route.kind.group,
            route.namespace,
            name,
        )
        manager = request.query.get("fieldManager") or None
        rule, delay = self.faults.take(info)
        if delay:
            await asyncio.sleep(delay)

        def audit(code: int) -> None:
            self.audit.record(
                info,
                path=request.path,
                query=request.query_string,
                field_manager=manager,
                content_type=request.headers.get("Content-Type"),
                user_agent=request.headers.get("User-Agent"),
                code=code,
            )

        if rule is not None:
            error = _fault_error(rule, info)
            audit(error.code)
            return _error_response(error)
        if route.verb == "watch":
            return await self._watch(request, route, audit)
        try:
            response = await self._dispatch(request, route)
        except ApiError as exc:
            audit(exc.code)
            raise
        audit(response.status)
        return response

    @staticmethod
    def _manager(request: web.Request) -> str:
        manager = request.query.get("fieldManager")
        if manager:
            if len(manager) > 128:
                raise bad_request("fieldManager: Too long: may not be longer than 128")
            return manager
        # The real server names an unnamed manager after the user agent's product token.
        agent = request.headers.get("User-Agent", "unknown")
        return agent.split("/", 1)[0] or "unknown"

    @staticmethod
    async def _body(request: web.Request) -> Any:
        raw = await request.read()
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise bad_request("the body of the request does not decode as JSON") from None

    async def _dispatch(self, request: web.Request, route: _Route) -> web.Response:
        query = request.query
        kind, namespace, name = route.kind, route.namespace, route.name
        dry_run = query.get("dryRun") == "All"
        if route.verb == "get":
            return _json(self.store.get(kind, namespace, name or ""))
        if route.verb == "list":
            return _json(
                self.store.api_list(
                    kind,
                    namespace,
                    labels=parse_label_selector(query.get("labelSelector")),
                    fields=parse_field_selector(query.get("fieldSelector"), kind),
                    limit=_int_param(query, "limit"),
                    continue_token=query.get("continue") or None,
                    resource_version=query.get("resourceVersion") or None,
                    resource_version_match=query.get("resourceVersionMatch") or None,
                )
            )
        if route.verb == "create" and route.subresource == "binding":
            binding = await self._body(request)
            self.store.bind(namespace, name or "", binding, dry_run=dry_run)
            return _json(status_object(201, "", ""), 201)
        if route.verb in ("create", "update"):
            self._check_fields(kind, await self._body(request), query.get("fieldValidation"))
        if route.verb == "create":
            created = self.store.create(
                kind,
                namespace,
                await self._body(request),
                field_manager=self._manager(request),
                dry_run=dry_run,
            )
            return _json(created, 201)
        if route.verb == "update":
            return _json(
                self.store.update(
                    kind,
                    namespace,
                    name or "",
                    await self._body(request),
                    subresource=route.subresource,
                    field_manager=self._manager(request),
                    dry_run=dry_run,
                )
            )
        if route.verb == "patch":
            patch_type = request.headers.get("Content-Type", "").split(";")[0].strip()
            body = parse_patch_body(await request.read(), patch_type)
            manager = request.query.get("fieldManager") or None
            if patch_type != "application/apply-patch+yaml":
                manager = self._manager(request)
            elif route.subresource is None and isinstance(body, dict):
                self._check_applied_fields(kind, namespace, name or "", body)
            patched, was_created = self.store.patch(
                kind,
                namespace,
                name or "",
                patch_type,
                body,
                subresource=route.subresource,
                field_manager=manager,
                force=query.get("force") in _TRUE,
                dry_run=dry_run,
            )
            return _json(patched, 201 if was_created else 200)
        options = self._delete_options(query, await self._body(request))
        if route.verb == "deletecollection":
            return _json(
                self.store.delete_collection(
                    kind,
                    namespace,
                    labels=parse_label_selector(query.get("labelSelector")),
                    fields=parse_field_selector(query.get("fieldSelector"), kind),
                    options=options,
                )
            )
        state, gone = self.store.delete(kind, namespace, name or "", options)
        if gone and not kind.returns_deleted_object:
            details: Manifest = {"name": name, "kind": kind.plural, "uid": state["metadata"]["uid"]}
            if kind.group:
                details["group"] = kind.group
            return _json(status_object(200, "", "", details))
        return _json(state)

    @staticmethod
    def _check_fields(kind: Kind, body: Any, validation: str | None) -> None:
        """`fieldValidation=Strict`: a top-level field the kind does not declare is a 400."""
        if validation != "Strict" or not isinstance(body, dict):
            return
        unknown = unknown_top_level_fields(kind, body)
        if unknown:
            fields = ", ".join(f'unknown field "{f}"' for f in unknown)
            raise bad_request(
                f'{kind.kind} in version "{kind.version}" cannot be handled as a '
                f"{kind.kind}: strict decoding error: {fields}"
            )

    @staticmethod
    def _check_applied_fields(kind: Kind, namespace: str | None, name: str, body: Manifest) -> None:
        """Server-side apply builds a typed object first: an undeclared field is a 500,
        whatever `fieldValidation` says (as the real server answers)."""
        unknown = unknown_top_level_fields(kind, body)
        if unknown:
            where = f"{namespace}/{name}" if namespace else name
            raise ApiError(
                500,
                f"failed to create typed patch object ({where}; {kind.api_version}, "
                f"Kind={kind.kind}): .{unknown[0]}: field not declared in schema",
                reason="",  # the real Status of this error has none
            )

    @staticmethod
    def _delete_options(query: Any, body: Any) -> DeleteOptions:
        body = body if isinstance(body, dict) else {}
        preconditions = body.get("preconditions") or {}
        orphan = body.get("orphanDependents")
        if query.get("orphanDependents") is not None:
            orphan = query.get("orphanDependents") in _TRUE
        dry_run = body.get("dryRun") or query.get("dryRun")
        grace = body.get("gracePeriodSeconds")
        if query.get("gracePeriodSeconds") is not None:
            grace = _int_param(query, "gracePeriodSeconds")
        return DeleteOptions(
            grace_period_seconds=None if grace is None else int(grace),
            propagation_policy=query.get("propagationPolicy") or body.get("propagationPolicy"),
            orphan_dependents=orphan,
            precondition_uid=preconditions.get("uid"),
            precondition_resource_version=preconditions.get("resourceVersion"),
            dry_run=dry_run == "All" or dry_run == ["All"],
        )

    async def _watch(
        self, request: web.Request, route: _Route, audit: Callable[[int], None]
    ) -> web.StreamResponse:
        query = request.query
        labels = parse_label_selector(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector"), route.kind)
        timeout = _int_param(query, "timeoutSeconds")
        bookmarks = query.get("allowWatchBookmarks") in _TRUE
        loop = asyncio.get_running_loop()
        stream = _WatchStream(loop)
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        watcher: Watcher | None = None
        try:
            first, watcher = self.store.watch(
                route.kind,
                route.namespace,
                labels=labels,
                fields=fields,
                resource_version=query.get("resourceVersion") or None,
                send_initial_events=query.get("sendInitialEvents") in _TRUE,
                deliver=stream.deliver,
            )
        except ApiError as exc:
            if exc.code != 410:
                audit(exc.code)
                raise
            # A too-old resourceVersion is an ERROR event in a 200 stream, as the watch cache does.
            first = [WatchEvent(0, "ERROR", exc.status())]
        audit(200)
        self._streams.add(stream)
        try:
            await response.prepare(request)
            for event in first:
                await self._send(response, event)
            if watcher is None:
                await response.write_eof()
                return response
            deadline = loop.time() + (timeout if timeout is not None else self.watch_timeout)
            next_bookmark = loop.time() + self.bookmark_interval
            while True:
                now = loop.time()
                if now >= deadline:
                    break
                wait = deadline - now
                if bookmarks:
                    wait = min(wait, max(next_bookmark - now, 0.0))
                try:
                    item = await asyncio.wait_for(stream.queue.get(), timeout=wait)
                except TimeoutError:
                    if bookmarks and loop.time() >= next_bookmark:
                        self.store.request_bookmark(watcher)
                        next_bookmark = loop.time() + self.bookmark_interval
                    continue
                if item is None:
                    break
                if item.type == "BOOKMARK" and not bookmarks:
                    continue
                await self._send(response, item)
            if stream.abrupt:
                request.protocol.force_close()
                return response
            await response.write_eof()
            return response
        except ClientConnectionResetError:
            return response  # the client went away mid-stream, as watch clients do
        finally:
            self._streams.discard(stream)
            if watcher is not None:
                self.store.unwatch(watcher)

    @staticmethod
    async def _send(response: web.StreamResponse, event: WatchEvent) -> None:
        line = json.dumps({"type": event.type, "object": event.obj}) + "\n"
        await response.write(line.encode())

    # ----------------------------------------------------------------- admin

    async def _admin(self, request: web.Request) -> web.StreamResponse:
        action = request.path.removeprefix("/_fake/").strip("/")
        method = request.method
        raw = await self._body(request) if method in ("POST", "PUT") else None
        body: Manifest = raw if isinstance(raw, dict) else {}
        if action == "faults" and method == "POST":
            self.faults.fail(
                int(body.get("status", 500)),
                verb=body.get("verb"),
                resource=body.get("resource"),
                namespace=body.get("namespace"),
                name=body.get("name"),
                times=body.get("times", 1),
                retry_after=body.get("retryAfter"),
                message=body.get("message"),
            )
            return _json({"ok": True})
        if action == "faults" and method == "DELETE":
            self.faults.clear_rules()
            return _json({"ok": True})
        if action == "latency" and method == "POST":
            self.faults.add_latency(
                float(body.get("seconds", 0)),
                verb=body.get("verb"),
                resource=body.get("resource"),
                namespace=body.get("namespace"),
                name=body.get("name"),
                times=body.get("times"),
            )
            return _json({"ok": True})
        if action == "drop-watches" and method == "POST":
            return _json({"dropped": self.drop_watches(abrupt=bool(body.get("abrupt")))})
        if action == "compact" and method == "POST":
            return _json({"resourceVersion": str(self.compact())})
        if action == "outage" and method == "POST":
            mode = str(body.get("mode", "unavailable"))
            seconds = body.get("seconds")
            if mode == "refused" and seconds is None:
                raise bad_request("a refused outage started over HTTP needs 'seconds'")
            await self._astart_outage(
                mode, None if seconds is None else float(seconds), keep=request.protocol
            )
            return _json({"ok": True}, headers={"Connection": "close"})
        if action == "outage" and method == "DELETE":
            await self._aend_outage()
            return _json({"ok": True})
        if action == "audit" and method == "GET":
            records = self.audit.records(
                verb=request.query.get("verb"),
                resource=request.query.get("resource"),
                namespace=request.query.get("namespace"),
                name=request.query.get("name"),
            )
            return _json(
                {
                    "records": [
                        {
                            "seq": r.seq,
                            "verb": r.verb,
                            "resource": r.resource,
                            "subresource": r.subresource,
                            "group": r.group,
                            "namespace": r.namespace,
                            "name": r.name,
                            "path": r.path,
                            "query": r.query,
                            "fieldManager": r.field_manager,
                            "code": r.code,
                        }
                        for r in records
                    ]
                }
            )
        if action == "audit" and method == "DELETE":
            self.audit.clear()
            return _json({"ok": True})
        raise ApiError(404, f"unknown admin endpoint {method} /_fake/{action}")


async def _serve(server: FakeApiServer) -> None:
    await server.astart()
    sys.stdout.write(server.url + "\n")
    sys.stdout.flush()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.astop()


def main(argv: list[str] | None = None) -> int:
    """Run the fake API server in the foreground until SIGINT or SIGTERM."""
    parser = argparse.ArgumentParser(
        prog="python -m tests.fakeapi.server", description="a loopback fake Kubernetes API server"
    )
    parser.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0: ephemeral)")
    parser.add_argument("--history-size", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    server = FakeApiServer(port=args.port, history_size=args.history_size, seed=args.seed)
    asyncio.run(_serve(server))
    return 0


if __name__ == "__main__":
    sys.exit(main())
