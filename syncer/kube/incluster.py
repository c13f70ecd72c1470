"""The in-cluster service account: API address, CA file and a token that is re-read.

A Pod's service account is three things the kubelet provides: the API server's address in
`KUBERNETES_SERVICE_HOST`/`KUBERNETES_SERVICE_PORT`, the cluster CA in `ca.crt`, and a
projected token in `token` that the kubelet rotates (bound tokens live an hour by default).
`ServiceAccount` reads them without the `kubernetes` package (whose import is ~50 MB of a
daemon that needs none of it in a Pod) and re-reads the token once it is a minute old, as
client-go does; `syncer.kube.client` turns it into a connection pool.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from syncer.errors import PermanentError

SERVICE_ACCOUNT_DIR: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REFRESH_S: Final = 60.0  # client-go re-reads the projected token this often


class NotInClusterError(PermanentError):
    """No service account here (not a Pod, or the token is not mounted)."""


def _host_url(host: str, port: str) -> str:
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 address
    return f"https://{host}:{port}"


@dataclass
class ServiceAccount:
    """The API server URL, the CA file, and the token (re-read every `refresh_s`)."""

    host: str
    ca_file: str
    token_file: str
    namespace: str = ""
    refresh_s: float = TOKEN_REFRESH_S
    clock: Callable[[], float] = time.monotonic
    _token: str = field(default="", repr=False)
    _read_at: float | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def load(
        cls,
        environ: Mapping[str, str] | None = None,
        directory: Path = SERVICE_ACCOUNT_DIR,
    ) -> ServiceAccount:
        """The Pod's service account; NotInClusterError when this is not a Pod with one."""
        env = os.environ if environ is None else environ
        host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "")
        if not host or not port:
            raise NotInClusterError("KUBERNETES_SERVICE_HOST/PORT are not set: not in a Pod")
        token, ca = directory / "token", directory / "ca.crt"
        for path in (token, ca):
            if not path.is_file():
                raise NotInClusterError(f"{path}: no such file (no service account mounted)")
        namespace_file = directory / "namespace"
        namespace = namespace_file.read_text().strip() if namespace_file.is_file() else ""
        account = cls(_host_url(host, port), str(ca), str(token), namespace)
        account.token()  # an unreadable or empty token fails now, not on the first request
        return account

    def token(self) -> str:
        """The bearer token, re-read from its file once it is `refresh_s` old.

        A failed re-read keeps the token read before (the kubelet writes the file
        atomically; a passing error must not log the daemon out).
        """
        now = self.clock()
        with self._lock:
            if self._read_at is not None and now - self._read_at < self.refresh_s:
                return self._token
            try:
                text = Path(self.token_file).read_text(encoding="utf-8").strip()
            except OSError as exc:
                if not self._token:
                    raise NotInClusterError(f"{self.token_file}: {exc}") from exc
                text = ""
            if text:
                self._token = text
            elif not self._token:
                raise NotInClusterError(f"{self.token_file}: the token is empty")
            self._read_at = now
            return self._token

    def headers(self) -> dict[str, str]:
        """The Authorization header for the next request."""
        return {"Authorization": f"Bearer {self.token()}"}
