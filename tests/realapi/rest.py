"""A small JSON REST client for the realapi tests: the same requests to any API server.

`Rest` speaks plain HTTP(S) with a bearer token (stdlib `urllib`, no proxies), so the
differential tests can send byte-identical requests to the fake API server and to the real
kube-apiserver. It maps `apiVersion`/`kind` to a resource path through the server's own
discovery documents and offers server-side apply (`apply`) with dry-run, force and field
validation. Failures raise `RestError` carrying the status code and the server's Status.
"""

from __future__ import annotations

import base64
import json
import ssl
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

Manifest = dict[str, Any]


class RestError(Exception):
    """A non-2xx answer: `status` is the HTTP code, `body` the decoded Status (or text)."""

    def __init__(self, method: str, path: str, status: int, body: Any) -> None:
        self.method = method
        self.path = path
        self.status = status
        self.body = body
        message = body.get("message", "") if isinstance(body, dict) else str(body)
        super().__init__(f"{method} {path}: {status} {message}")

    @property
    def reason(self) -> str:
        """The Status `reason` (e.g. `Conflict`, `Invalid`, `Forbidden`)."""
        return str(self.body.get("reason", "")) if isinstance(self.body, dict) else ""


@dataclass(frozen=True)
class Resource:
    """Where a kind lives: its group-version path prefix, plural name and scope."""

    prefix: str
    plural: str
    namespaced: bool

    def path(self, namespace: str | None, name: str | None = None) -> str:
        """The collection path (all namespaces when `namespace` is None), or an object's."""
        base = self.prefix
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base


class Rest:
    """JSON requests to one API server as one identity."""

    def __init__(
        self, server: str, token: str, *, ca: Path | None = None, user_agent: str = "realapi-tests"
    ) -> None:
        self.server = server.rstrip("/")
        self.token = token
        self.user_agent = user_agent
        handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
        if server.startswith("https"):
            context = ssl.create_default_context(cafile=str(ca) if ca else None)
            handlers.append(urllib.request.HTTPSHandler(context=context))
        self._opener = urllib.request.build_opener(*handlers)
        self._resources: dict[tuple[str, str], Resource] = {}

    @classmethod
    def from_kubeconfig(cls, path: Path) -> Rest:
        """The server, CA and token of a kubeconfig's current context (token users only)."""
        document = yaml.safe_load(path.read_text())
        context = next(
            c["context"] for c in document["contexts"] if c["name"] == document["current-context"]
        )
        cluster = next(
            c["cluster"] for c in document["clusters"] if c["name"] == context["cluster"]
        )
        user = next(u["user"] for u in document["users"] if u["name"] == context["user"])
        ca = None
        if "certificate-authority-data" in cluster:
            with tempfile.NamedTemporaryFile("wb", suffix=".crt", delete=False) as out:
                out.write(base64.b64decode(cluster["certificate-authority-data"]))
            ca = Path(out.name)
        return cls(cluster["server"], str(user.get("token", "")), ca=ca)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        """One request; returns the decoded JSON answer."""
        url = self.server + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = None
        if body is not None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Accept", "application/json")
        request.add_header("User-Agent", self.user_agent)
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            request.add_header("Content-Type", content_type)
        try:
            with self._opener.open(request, timeout=30) as reply:
                raw = reply.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                decoded: Any = json.loads(raw)
            except ValueError:
                decoded = raw.decode(errors="replace")
            raise RestError(method, path, exc.code, decoded) from None
        return json.loads(raw) if raw else None

    def resource(self, api_version: str, kind: str) -> Resource:
        """The resource of a kind, from the server's discovery (cached)."""
        key = (api_version, kind)
        if key not in self._resources:
            prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            listing = self.request("GET", prefix)
            for entry in listing.get("resources", []):
                if "/" not in entry["name"]:
                    self._resources[(api_version, entry["kind"])] = Resource(
                        prefix, entry["name"], bool(entry["namespaced"])
                    )
            if key not in self._resources:
                raise KeyError(f"{kind} is not served under {api_version}")
        return self._resources[key]

    def path_of(self, obj: Manifest, namespace: str | None = None) -> str:
        """The object path of a manifest (namespace: the manifest's, else `namespace`)."""
        resource = self.resource(obj["apiVersion"], obj["kind"])
        metadata = obj["metadata"]
        return resource.path(metadata.get("namespace") or namespace, metadata["name"])

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Manifest:
        """GET one object."""
        found: Manifest = self.request(
            "GET", self.resource(api_version, kind).path(namespace, name)
        )
        return found

    def get_or_none(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> Manifest | None:
        """GET one object, None on 404."""
        try:
            return self.get(api_version, kind, namespace, name)
        except RestError as exc:
            if exc.status == 404:
                return None
            raise

    def list(
        self, api_version: str, kind: str, namespace: str | None, **query: str
    ) -> list[Manifest]:
        """The items of a list."""
        path = self.resource(api_version, kind).path(namespace)
        items: list[Manifest] = self.request("GET", path, query=query or None)["items"]
        return items

    def create(self, obj: Manifest, namespace: str | None = None, **query: str) -> Manifest:
        """POST a manifest into its collection."""
        resource = self.resource(obj["apiVersion"], obj["kind"])
        path = resource.path(obj["metadata"].get("namespace") or namespace)
        created: Manifest = self.request("POST", path, obj, query=query or None)
        return created

    def patch(self, path: str, body: Any, *, kind: str = "merge", **query: str) -> Manifest:
        """PATCH: `kind` merge, strategic or json."""
        types = {
            "merge": "application/merge-patch+json",
            "strategic": "application/strategic-merge-patch+json",
            "json": "application/json-patch+json",
        }
        patched: Manifest = self.request(
            "PATCH", path, body, query=query or None, content_type=types[kind]
        )
        return patched

    def apply(
        self,
        obj: Manifest,
        *,
        manager: str,
        namespace: str | None = None,
        force: bool = False,
        dry_run: bool = False,
        strict: bool = True,
    ) -> Manifest:
        """Server-side apply of a manifest as field manager `manager`."""
        query = {"fieldManager": manager}
        if force:
            query["force"] = "true"
        if dry_run:
            query["dryRun"] = "All"
        if strict:
            query["fieldValidation"] = "Strict"
        applied: Manifest = self.request(
            "PATCH",
            self.path_of(obj, namespace),
            obj,
            query=query,
            content_type="application/apply-patch+yaml",
        )
        return applied

    def delete(self, path: str, **query: str) -> Any:
        """DELETE an object path; 404 is fine."""
        try:
            return self.request("DELETE", path, query=query or None)
        except RestError as exc:
            if exc.status != 404:
                raise
            return None
