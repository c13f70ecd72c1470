"""Start and stop one loopback-only Ray head for end-to-end tests.

`RayHead.start()` runs `ray start --head --block` in its own process session, on free
127.0.0.1 ports for every listener, and waits until `ray start` reports the runtime started
and the dashboard answers (on a loaded machine `ray start` can still give up after the
dashboard is up: its raylet has 30 s to register, so a head that fails so is started
again, up to START_ATTEMPTS times). `stop()` ends
that session by PID (SIGTERM to `ray start`, then SIGKILL to whatever is left in the
session). It never calls `ray stop`, which kills every Ray process on the machine.
Facts and traps: ../shared/reference/ray-test-head.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tests.processes import LoggedProcess, ProcessExitedError
from tests.processes import free_ports as free_ports  # where tests/autoscaler finds it
from tests.processes import session_pids as session_pids

START_TIMEOUT_S = 90.0
START_ATTEMPTS = 3
# What `ray start --block` prints once its node is registered with the GCS; before it, the
# dashboard may already answer while `ray start` is still able to time out and tear down.
_STARTED = "Ray runtime started."
# What it prints when it gives up (it may take a while to exit after that).
_GAVE_UP = "timed out during startup"
STOP_TIMEOUT_S = 20.0
# Ports that `ray start` takes as flags; two more are taken through the environment.
_PORT_FLAGS = (
    "--port",
    "--dashboard-port",
    "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port",
    "--runtime-env-agent-port",
    "--metrics-export-port",
    "--ray-client-server-port",
)
_PORT_ENV = ("DASHBOARD_METRIC_PORT", "AUTOSCALER_METRIC_PORT")


class RayHeadError(RuntimeError):
    """The Ray head could not be started; the message carries the tail of its log."""


class _ExitedEarlyError(RayHeadError):
    """`ray start` exited before its head was up (worth another attempt)."""


@dataclass
class RayHead:
    """One Ray head on 127.0.0.1, owned by this process."""

    num_cpus: int = 2
    object_store_bytes: int = 200_000_000
    job_start_timeout_s: int = 30
    extra_env: dict[str, str] = field(default_factory=dict)
    extra_args: list[str] = field(default_factory=list)  # more `ray start` flags
    dashboard_url: str = ""
    gcs_address: str = ""
    serve_port: int = 0
    temp_dir: Path | None = None
    log_path: Path | None = None
    startup_s: float = 0.0
    attempts: int = 0
    _process: LoggedProcess | None = None

    @property
    def pid(self) -> int:
        """PID of the `ray start --block` process, which leads its own session."""
        if self._process is None:
            raise RayHeadError("the Ray head is not running")
        return self._process.pid

    def start(self) -> None:
        """Start the head and wait until it runs and `GET /api/version` answers.

        A `ray start` that exits before it is up (its node timed out during startup) is
        tried again on fresh ports, up to START_ATTEMPTS times in all.

        Raises:
            RayHeadError: `ray` is missing, every attempt exited, or the head was not up
                within START_TIMEOUT_S; the head is stopped before raising.
        """
        began = time.monotonic()
        for attempt in range(1, START_ATTEMPTS + 1):
            self.attempts = attempt
            try:
                self._start_once()
            except _ExitedEarlyError:
                if attempt == START_ATTEMPTS:
                    raise
                continue
            self.startup_s = time.monotonic() - began
            return

    def _start_once(self) -> None:
        bin_dir = Path(sys.executable).parent
        ray = bin_dir / "ray"
        if not ray.exists():
            raise RayHeadError(f"{ray} not found: install 'ray[default,serve]' into the venv")
        # AF_UNIX socket paths under the session dir must stay below 108 bytes.
        self.temp_dir = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
        self.log_path = self.temp_dir / "ray-start.log"
        ports = free_ports(len(_PORT_FLAGS) + len(_PORT_ENV) + 1)
        flag_ports = dict(zip(_PORT_FLAGS, ports, strict=False))
        env_ports = dict(zip(_PORT_ENV, ports[len(_PORT_FLAGS) :], strict=False))
        self.serve_port = ports[-1]
        self.gcs_address = f"127.0.0.1:{flag_ports['--port']}"
        self.dashboard_url = f"http://127.0.0.1:{flag_ports['--dashboard-port']}"
        command = [
            str(ray),
            "start",
            "--head",
            "--block",
            "--node-ip-address=127.0.0.1",
            "--dashboard-host=127.0.0.1",
            *(f"{flag}={port}" for flag, port in flag_ports.items()),
            f"--num-cpus={self.num_cpus}",
            f"--object-store-memory={self.object_store_bytes}",
            "--include-dashboard=true",
            "--disable-usage-stats",
            f"--temp-dir={self.temp_dir}",
            *self.extra_args,
        ]
        env = {key: value for key, value in os.environ.items() if not key.startswith("RAY_")}
        env.update({key: str(port) for key, port in env_ports.items()})
        env.update(
            {
                # Keeps 127.0.0.1 as the node IP, so every listener stays on loopback.
                "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
                "RAY_USAGE_STATS_ENABLED": "0",
                # Without it, SIGTERM drains for 30 s while Serve actors exist.
                "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
                # A job PENDING on resources ignores stop until this timeout.
                "RAY_JOB_START_TIMEOUT_SECONDS": str(self.job_start_timeout_s),
                # `python` in an entrypoint resolves through this PATH.
                "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(self.extra_env)
        began = time.monotonic()
        self._process = LoggedProcess.start(
            "ray start", command, log_path=self.log_path, env=env, cwd=self.temp_dir
        )
        try:
            self._wait_until_answering(began + START_TIMEOUT_S)
        except RayHeadError:
            self.stop()
            raise

    def _wait_until_answering(self, deadline: float) -> None:
        process = self._process
        assert process is not None
        url = f"{self.dashboard_url}/api/version"
        # Loopback only: environment proxies must not see these requests.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

        def up() -> bool:
            if _GAVE_UP in self.log_tail():
                raise ProcessExitedError(process.name, process.process.poll() or 0, "")
            with (
                contextlib.suppress(OSError, ValueError),
                opener.open(url, timeout=2) as reply,
            ):
                return "ray_version" in json.loads(reply.read()) and self._runtime_started()
            return False

        try:
            if process.wait(up, timeout=max(deadline - time.monotonic(), 0), interval=0.2):
                return
        except ProcessExitedError as exc:
            raise _ExitedEarlyError(
                f"`ray start` exited (code {exc.code}) before the head was up "
                f"(attempt {self.attempts} of {START_ATTEMPTS}); "
                f"log {self.log_path}:\n{self.log_tail()}"
            ) from None
        raise RayHeadError(
            f"the Ray dashboard at {self.dashboard_url} did not answer within "
            f"{START_TIMEOUT_S:.0f} s; log {self.log_path}:\n{self.log_tail()}"
        )

    @property
    def alive(self) -> bool:
        """Whether `ray start --block` still runs (it exits when its head goes down)."""
        return self._process is not None and self._process.alive()

    def _runtime_started(self) -> bool:
        """Whether `ray start` has reported its node registered (its startup message)."""
        if self.log_path is None or not self.log_path.exists():
            return False
        return _STARTED in self.log_path.read_text(errors="replace")

    def log_tail(self, lines: int = 40) -> str:
        """Return the last lines of the `ray start` output."""
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> list[int]:
        """Stop the head by PID and remove its temp dir.

        Returns:
            The PIDs that were still alive after `ray start` exited and had to be killed.
        """
        process = self._process
        if process is None:
            return []
        leftovers = process.stop_session(STOP_TIMEOUT_S)
        self._process = None
        if self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
        return leftovers
