"""Run the real syncer daemon (`syncer.cli.serve`) in a subprocess, for fault tests.

`python -m tests.syncer.daemon [--config F] [--kubeconfig F] [--namespace NS] [--identity ID]
[--no-leader-elect]` runs `serve(...)` as `kuberay-syncer` would, with one change: there is
no cluster DNS, so its dashboard factory sends every intent's dashboard URL to
`$KUBERAY_TEST_DASHBOARD_URL` (the test's Ray head), and each job submission is appended as
a JSON line to `$KUBERAY_TEST_SUBMISSIONS`. `Daemon` starts that process in its own session,
waits for its `started` log line and stops it by PID only: SIGTERM (graceful: the daemon
releases its Lease) or SIGKILL (a crash). Two more signals break the daemon from inside,
for the liveness tests: SIGUSR1 makes the ConfigMap informer's thread end at its next watch
(a dead thread), SIGUSR2 stalls the lease loop (held, no longer renewed).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from syncer.cli import serve
from syncer.errors import SyncerError
from syncer.kube.informer import Informer
from syncer.kube.leader import LeaderElector
from syncer.ray.dashboard import HttpDashboard
from syncer.ray.types import Dashboard
from tests.processes import LoggedProcess, ProcessExitedError, syncer_health_url, wait_syncer_ready

Manifest = dict[str, Any]
DASHBOARD_ENV: Final = "KUBERAY_TEST_DASHBOARD_URL"
SUBMISSIONS_ENV: Final = "KUBERAY_TEST_SUBMISSIONS"
REPO: Final = Path(__file__).resolve().parents[2]
_STOP_TIMEOUT_S: Final = 30.0


class RecordingDashboard(HttpDashboard):
    """`HttpDashboard` that appends every `submit_job` call and its outcome to a file."""

    _lock = threading.Lock()

    def __init__(self, base_url: str, *, timeout: float, record: Path | None) -> None:
        super().__init__(base_url, timeout=timeout)
        self._record = record

    def _write(self, entry: Manifest) -> None:
        if self._record is None:
            return
        line = json.dumps({"pid": os.getpid(), "time": time.time(), **entry})
        with self._lock, self._record.open("a") as out:
            out.write(line + "\n")

    def submit_job(
        self,
        submission_id: str,
        entrypoint: str,
        *,
        runtime_env: Manifest | None = None,
        metadata: Mapping[str, str] | None = None,
        entrypoint_num_cpus: float | None = None,
        entrypoint_num_gpus: float | None = None,
        entrypoint_memory: int | None = None,
        entrypoint_resources: Mapping[str, float] | None = None,
    ) -> bool:
        """Submit, then record `created` (True: this call made the job) or the error."""
        try:
            created = super().submit_job(
                submission_id,
                entrypoint,
                runtime_env=runtime_env,
                metadata=metadata,
                entrypoint_num_cpus=entrypoint_num_cpus,
                entrypoint_num_gpus=entrypoint_num_gpus,
                entrypoint_memory=entrypoint_memory,
                entrypoint_resources=entrypoint_resources,
            )
        except SyncerError as exc:
            self._write({"submission_id": submission_id, "created": None, "error": str(exc)})
            raise
        self._write({"submission_id": submission_id, "created": created})
        return created


def dashboard_factory(environ: Mapping[str, str]) -> Callable[[str], Dashboard] | None:
    """Every URL to the Ray head named in the environment (None: the daemon's own factory)."""
    url = environ.get(DASHBOARD_ENV)
    if not url:
        return None
    record = Path(environ[SUBMISSIONS_ENV]) if environ.get(SUBMISSIONS_ENV) else None
    shared = RecordingDashboard(url, timeout=10.0, record=record)

    def make(intent_url: str) -> Dashboard:
        return shared

    return make


def _kill_an_informer(signum: int, frame: object) -> None:
    """SIGUSR1: the ConfigMap informers' threads end (not an Exception) at their next watch."""

    def gone() -> int:
        raise SystemExit("informer thread ended by the test (SIGUSR1)")

    gc.unfreeze()  # the engine froze its start-up objects, which get_objects() then skips
    for obj in gc.get_objects():
        if isinstance(obj, Informer) and obj.resource.plural == "configmaps":
            obj._watch_once = gone  # type: ignore[method-assign]  # a test's sabotage


def _stall_the_lease(signum: int, frame: object) -> None:
    """SIGUSR2: the lease loop blocks in its next renewal, holding the lease unrenewed."""
    blocked = threading.Event()
    gc.unfreeze()  # as above
    for obj in gc.get_objects():
        if isinstance(obj, LeaderElector):
            obj.try_acquire_or_renew = lambda: blocked.wait() and False  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> None:
    """Parse `kuberay-syncer`'s options and run the daemon until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(prog="python -m tests.syncer.daemon")
    parser.add_argument("--config", default=None)
    parser.add_argument("--kubeconfig", default=None)
    parser.add_argument("--namespace", default=None)
    parser.add_argument("--identity", default=None)
    parser.add_argument("--no-leader-elect", action="store_true")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGUSR1, _kill_an_informer)
    signal.signal(signal.SIGUSR2, _stall_the_lease)
    serve(
        args.config,
        args.kubeconfig,
        args.namespace,
        args.identity,
        args.no_leader_elect,
        dashboards=dashboard_factory(os.environ),
    )


@dataclass
class Daemon:
    """One daemon subprocess, owned by the test that started it."""

    identity: str
    launched: LoggedProcess
    submissions_path: Path

    @property
    def user_agent(self) -> str:
        """The User-Agent of its API requests (what the fake server's audit log shows)."""
        return f"kuberay-syncer/{self.identity}"

    @classmethod
    def start(
        cls,
        *,
        identity: str,
        kubeconfig: Path,
        config: Path,
        namespace: str,
        dashboard_url: str | None,
        workdir: Path,
    ) -> Daemon:
        """Start `python -m tests.syncer.daemon` in its own session; logs go to `workdir`.

        `dashboard_url` None keeps the daemon's own HTTP dashboard factory.
        """
        submissions = workdir / f"{identity}.submissions.jsonl"
        env = {**os.environ, SUBMISSIONS_ENV: str(submissions)}
        env.pop(DASHBOARD_ENV, None)
        if dashboard_url is not None:
            env[DASHBOARD_ENV] = dashboard_url
        command = [
            sys.executable,
            "-m",
            "tests.syncer.daemon",
            "--config",
            str(config),
            "--kubeconfig",
            str(kubeconfig),
            "--namespace",
            namespace,
            "--identity",
            identity,
        ]
        launched = LoggedProcess.start(
            f"daemon {identity}", command, log_path=workdir / f"{identity}.log", env=env, cwd=REPO
        )
        return cls(identity, launched, submissions)

    @property
    def pid(self) -> int:
        """The daemon's PID."""
        return self.launched.pid

    def alive(self) -> bool:
        """Whether the process is still running."""
        return self.launched.alive()

    def log(self) -> list[Manifest]:
        """The JSON log records written so far (other lines are skipped)."""
        return self.launched.records()

    def log_text(self) -> str:
        """The raw output, for failure messages."""
        return self.launched.log_text()

    def wait_started(self, timeout: float = 60.0) -> Manifest:
        """Wait for the `started ...` log record; raises if the process ends first."""
        found: list[Manifest] = []

        def started() -> bool:
            found.extend(r for r in self.log() if str(r.get("message", "")).startswith("started "))
            return bool(found)

        try:
            if self.launched.wait(started, timeout=timeout, interval=0.05):
                return found[0]
        except ProcessExitedError as exc:
            raise AssertionError(str(exc)) from None
        raise AssertionError(f"daemon {self.identity} did not start:\n{self.log_text()}")

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait until `/readyz` answers 200 (every informer has listed once)."""
        try:
            wait_syncer_ready(self.launched, timeout=timeout)
        except (ProcessExitedError, TimeoutError) as exc:
            raise AssertionError(str(exc)) from None

    def health_url(self, timeout: float = 60.0) -> str:
        """`http://127.0.0.1:<health port>`, from the `started` log record."""
        try:
            return syncer_health_url(self.launched, timeout=timeout)
        except (ProcessExitedError, TimeoutError) as exc:
            raise AssertionError(str(exc)) from None

    def signal(self, signum: int) -> None:
        """Send `signum` to the daemon, by PID."""
        self.launched.signal(signum)

    def submissions(self) -> list[Manifest]:
        """The `submit_job` calls this daemon made, in order."""
        if not self.submissions_path.exists():
            return []
        return [json.loads(line) for line in self.submissions_path.read_text().splitlines()]

    def terminate(self, timeout: float = _STOP_TIMEOUT_S) -> int:
        """SIGTERM by PID (a graceful stop) and wait; returns the exit code."""
        if self.alive():
            self.signal(signal.SIGTERM)
        return self.launched.process.wait(timeout=timeout)

    def kill(self) -> int:
        """SIGKILL by PID (a crash) and wait; returns the exit code."""
        if self.alive():
            self.signal(signal.SIGKILL)
        return self.launched.process.wait(timeout=_STOP_TIMEOUT_S)

    def stop(self) -> None:
        """Clean-up: SIGTERM, then SIGKILL if it does not end in 10 s."""
        self.launched.stop(10.0)


if __name__ == "__main__":
    main()
