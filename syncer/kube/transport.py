"""HTTP to the API server: keep-alive `http.client` connections, or a urllib3 pool.

`KubeClient` sends every request through a `Transport`. In a Pod it is `Connections`, a
small pool of standard-library connections to the one API server the service account
names (plain HTTP for a loopback test server, else TLS verified against the cluster CA),
so the daemon imports neither the `kubernetes` package nor urllib3 (~4 MB of a 150 MB
budget). Out of cluster the kubeconfig's `kubernetes` ApiClient brings its own urllib3
pool (exec plugins, client certificates, proxies), wrapped as `Urllib3Transport`.

Both answer with a `Response` and fail with `TransportError` (no answer, or the stream
broke), which the client turns into a `TransientError`.
"""

from __future__ import annotations

import http.client
import select
import ssl
import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Final, Protocol
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import urllib3

STREAM_CHUNK: Final = 65536


class TransportError(Exception):
    """The request got no answer, or its answer broke off."""


class Response(Protocol):
    """An answer: status and headers at once, the body read whole or in chunks."""

    status: int

    def header(self, name: str) -> str | None:
        """One header's value (None when absent)."""
        ...

    def read(self) -> bytes:
        """The whole body; the connection goes back to its pool."""
        ...

    def chunks(self) -> Iterator[bytes]:
        """The body as it arrives (a watch stream); TransportError when it breaks off."""
        ...

    def release(self) -> None:
        """Give the connection back (or drop it, if the body was not read to its end)."""
        ...


class Transport(Protocol):
    """Sends one request to the API server."""

    def request(
        self,
        method: str,
        target: str,
        body: bytes | None,
        headers: Mapping[str, str],
        *,
        connect_s: float,
        read_s: float,
    ) -> Response:
        """`target`: path and query. TransportError when no answer came."""
        ...

    def close(self) -> None:
        """Drop every idle connection."""
        ...


# --- standard library ----------------------------------------------------------------------


class _Answer:
    """An `http.client` response; its connection returns to the pool once read to its end."""

    def __init__(
        self, pool: Connections, conn: http.client.HTTPConnection, raw: http.client.HTTPResponse
    ) -> None:
        self._pool = pool
        self._conn: http.client.HTTPConnection | None = conn
        self._raw = raw
        self.status = raw.status

    def header(self, name: str) -> str | None:
        return self._raw.getheader(name)

    def read(self) -> bytes:
        try:
            data = self._raw.read()
        except (OSError, http.client.HTTPException) as exc:
            self._drop()
            raise TransportError(str(exc) or type(exc).__name__) from exc
        self.release()
        return data

    def chunks(self) -> Iterator[bytes]:
        try:
            while True:
                chunk = self._raw.read1(STREAM_CHUNK)
                if not chunk:
                    return
                yield chunk
        except (OSError, http.client.HTTPException) as exc:
            self._drop()
            raise TransportError(str(exc) or type(exc).__name__) from exc

    def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._raw.isclosed() and not self._raw.will_close:
            self._pool.give_back(conn)
        else:  # a body left unread (a watch cut short) or a server that closes: not reusable
            self._raw.close()
            conn.close()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        self._raw.close()
        if conn is not None:
            conn.close()


def _dropped(conn: http.client.HTTPConnection) -> bool:
    """Whether an idle connection was closed by the server (readable means EOF or junk)."""
    sock = conn.sock
    if sock is None:
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


class Connections:
    """Keep-alive connections to one API server, at most `maxsize` of them idle."""

    def __init__(self, base_url: str, *, ca_file: str | None = None, maxsize: int = 32) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{base_url!r}: expected http(s)://host[:port]")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._context: ssl.SSLContext | None = None
        if self._https:
            # The cluster CA when there is one (a Pod), else the system's; names checked.
            self._context = ssl.create_default_context(cafile=ca_file or None)
        self._maxsize = maxsize
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self.opened = 0  # connections made (a reused one is not counted again)

    def _connection(self, connect_s: float) -> http.client.HTTPConnection:
        with self._lock:
            while self._idle:
                conn = self._idle.pop()
                if not _dropped(conn):
                    return conn
                conn.close()
            self.opened += 1
        if self._context is not None:
            return http.client.HTTPSConnection(
                self._host, self._port, timeout=connect_s, context=self._context
            )
        return http.client.HTTPConnection(self._host, self._port, timeout=connect_s)

    def give_back(self, conn: http.client.HTTPConnection) -> None:
        """Keep a connection whose answer was read to its end."""
        with self._lock:
            if len(self._idle) < self._maxsize:
                self._idle.append(conn)
                return
        conn.close()

    def request(
        self,
        method: str,
        target: str,
        body: bytes | None,
        headers: Mapping[str, str],
        *,
        connect_s: float,
        read_s: float,
    ) -> Response:
        """Send on an idle connection (a new one if none is left); TransportError if no answer."""
        conn = self._connection(connect_s)
        try:
            if conn.sock is None:
                conn.connect()  # within connect_s
            assert conn.sock is not None
            conn.sock.settimeout(read_s)
            conn.request(method, target, body=body, headers=dict(headers))
            raw = conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise TransportError(str(exc) or type(exc).__name__) from exc
        return _Answer(self, conn, raw)

    def close(self) -> None:
        """Drop every idle connection."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


# --- urllib3 (the kubeconfig's ApiClient) ---------------------------------------------------


class _Urllib3Answer:
    def __init__(self, raw: urllib3.BaseHTTPResponse, errors: tuple[type[Exception], ...]) -> None:
        self._raw = raw
        self._errors = errors  # what urllib3 raises, as its transport found them
        self.status = raw.status

    def header(self, name: str) -> str | None:
        value = self._raw.headers.get(name)
        return None if value is None else str(value)

    def read(self) -> bytes:
        try:
            data = self._raw.read()
        except self._errors as exc:
            raise TransportError(str(exc)) from exc
        finally:
            self._raw.release_conn()
        return data

    def chunks(self) -> Iterator[bytes]:
        try:
            yield from self._raw.stream(STREAM_CHUNK, decode_content=True)
        except self._errors as exc:
            raise TransportError(str(exc)) from exc

    def release(self) -> None:
        self._raw.release_conn()


class Urllib3Transport:
    """A urllib3 pool (the `kubernetes` ApiClient's) to the API server at `base_url`."""

    def __init__(self, pool: urllib3.PoolManager, base_url: str, *, maxsize: int = 32) -> None:
        import urllib3  # here, not at the top: a Pod's daemon never makes one

        self._urllib3 = urllib3
        self._errors: tuple[type[Exception], ...] = (OSError, urllib3.exceptions.HTTPError)
        self._pool = pool
        self._base = base_url.rstrip("/")
        # Pools are made on first use from these settings, so this takes effect for all.
        pool_kw = pool.connection_pool_kw
        pool_kw["maxsize"] = max(int(pool_kw.get("maxsize") or 1), maxsize)

    def request(
        self,
        method: str,
        target: str,
        body: bytes | None,
        headers: Mapping[str, str],
        *,
        connect_s: float,
        read_s: float,
    ) -> Response:
        """Send through the pool, with no retries of its own; TransportError if no answer."""
        urllib3 = self._urllib3
        try:
            raw = self._pool.request(
                method,
                self._base + target,
                body=body,
                headers=dict(headers),
                preload_content=False,
                timeout=urllib3.Timeout(connect=connect_s, read=read_s),
                retries=False,
            )
        except urllib3.exceptions.HTTPError as exc:
            raise TransportError(str(exc)) from exc
        return _Urllib3Answer(raw, self._errors)

    def close(self) -> None:
        """Drop the pool's connections."""
        self._pool.clear()
