"""The processes tests start: launched in a session of their own, watched, stopped by PID.

`LoggedProcess.start` runs a command in its own session with stdin closed and stdout and
stderr in one log file; `wait` polls a readiness probe while the process lives; `stop`
ends it by PID (SIGTERM, then SIGKILL), and `stop_session` also kills whatever it left in
its session (Ray's children). `free_ports`, `session_pids`, `json_records` and `http_ok`
(a loopback request that no proxy sees) are the small pieces every launcher needs. No test
process is ever found or stopped by name.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Record = dict[str, Any]


class ProcessExitedError(RuntimeError):
    """The process ended while a test waited for it to be ready."""

    def __init__(self, name: str, code: int, tail: str) -> None:
        super().__init__(f"{name} exited with {code}:\n{tail}")
        self.code = code


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports that were free on 127.0.0.1 a moment ago."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def session_pids(sid: int) -> list[int]:
    """PIDs of the live processes whose session id is `sid` (Linux /proc)."""
    pids: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # the process ended while we looked
            continue
        # Field 2 (comm) may hold spaces and parentheses; the fields after its last ")"
        # are: state ppid pgrp session ...
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(entry.name))
    return pids


def json_records(text: str) -> list[Record]:
    """The JSON object lines of a log (other lines, e.g. tracebacks, are skipped)."""
    found: list[Record] = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict):
                found.append(record)
    return found


def http_ok(
    url: str,
    *,
    context: ssl.SSLContext | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = 2.0,
) -> tuple[bool, str]:
    """GET `url` bypassing every proxy: (whether it answered 200, what it answered)."""
    handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    request = urllib.request.Request(url, headers=dict(headers or {}))
    try:
        with urllib.request.build_opener(*handlers).open(request, timeout=timeout) as reply:
            return reply.status == 200, f"HTTP {reply.status}"
    except urllib.error.HTTPError as exc:
        with exc:
            return False, f"HTTP {exc.code}: {exc.read()[:500]!r}"
    except OSError as exc:
        return False, str(exc)


@dataclass
class LoggedProcess:
    """One process a test started, in its own session, with its output in `log_path`."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @classmethod
    def start(
        cls,
        name: str,
        argv: Sequence[str],
        *,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> LoggedProcess:
        """Start `argv` in a new session; stdout and stderr go to `log_path`."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                start_new_session=True,
            )
        return cls(name, process, log_path)

    @property
    def pid(self) -> int:
        """Its PID, which is also its session id."""
        return self.process.pid

    def alive(self) -> bool:
        """Whether it still runs."""
        return self.process.poll() is None

    def log_text(self) -> str:
        """Everything it wrote so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def tail(self, lines: int = 30) -> str:
        """The last lines of its log, for error messages."""
        return "\n".join(self.log_text().splitlines()[-lines:])

    def records(self) -> list[Record]:
        """Its JSON log records."""
        return json_records(self.log_text())

    def wait(self, probe: Callable[[], bool], *, timeout: float, interval: float = 0.1) -> bool:
        """Poll `probe` until it is true (True) or `timeout` passes (False).

        Raises:
            ProcessExitedError: the process ended first.
        """
        deadline = time.monotonic() + timeout
        while True:
            if probe():
                return True
            code = self.process.poll()
            if code is not None:
                raise ProcessExitedError(self.name, code, self.tail(60))
            if time.monotonic() > deadline:
                return False
            time.sleep(interval)

    def signal(self, signum: int) -> None:
        """Send `signum` to it, by PID."""
        os.kill(self.pid, signum)

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM by PID, SIGKILL if it does not end within `timeout`; its exit code."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
                self.process.wait(timeout=timeout)
        return self.process.returncode

    def stop_session(self, timeout: float = 20.0) -> list[int]:
        """`stop`, then SIGKILL whatever is left in its session; returns those PIDs."""
        self.stop(timeout)
        leftovers = session_pids(self.pid)
        for pid in leftovers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + timeout
        while session_pids(self.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        return leftovers


def syncer_health_url(process: LoggedProcess, *, timeout: float) -> str:
    """A `kuberay-syncer` daemon's health address, from its `started ... health_port=N` record.

    Raises:
        ProcessExitedError: the daemon ended first.
        TimeoutError: no such record within `timeout`.
    """
    found: list[str] = []

    def started() -> bool:
        for record in process.records():
            message = str(record.get("message", ""))
            if message.startswith("started ") and "health_port=" in message:
                port = message.split("health_port=", 1)[1].split()[0]
                found.append(f"http://127.0.0.1:{port}")
                return True
        return False

    if not process.wait(started, timeout=timeout, interval=0.05):
        raise TimeoutError(f"{process.name} did not log its start:\n{process.tail(60)}")
    return found[0]


def wait_syncer_ready(process: LoggedProcess, *, timeout: float) -> str:
    """Wait until a `kuberay-syncer` daemon's `/readyz` answers 200; its health address.

    Raises:
        ProcessExitedError: the daemon ended first.
        TimeoutError: it was not ready within `timeout`.
    """
    deadline = time.monotonic() + timeout
    url = syncer_health_url(process, timeout=timeout)
    ready = process.wait(
        lambda: http_ok(f"{url}/readyz")[0],
        timeout=max(deadline - time.monotonic(), 0.0),
        interval=0.05,
    )
    if not ready:
        raise TimeoutError(f"{process.name} is not ready:\n{process.tail(60)}")
    return url
