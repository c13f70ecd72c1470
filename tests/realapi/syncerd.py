"""The `kuberay-syncer` daemon as a subprocess, pointed at the test's Ray head.

`python -m tests.realapi.syncerd --dashboard-url URL [kuberay-syncer options]` runs the
daemon's own entry (`syncer.cli.serve`, what `kuberay-syncer` runs) with one change: there
is no cluster DNS, so every intent's dashboard URL goes to `URL`. `SyncerProcess` starts it
in its own session, waits for its health endpoint and stops it by PID. Only the CLI entry
and the dashboard client are imported, so the syncer's internal layout may change freely.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

REPO: Final = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> None:
    """Run the daemon with every dashboard URL sent to `--dashboard-url`."""
    from syncer.cli import serve
    from syncer.ray.dashboard import HttpDashboard

    parser = argparse.ArgumentParser(prog="python -m tests.realapi.syncerd")
    parser.add_argument("--dashboard-url", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--identity", required=True)
    args = parser.parse_args(argv)
    shared = HttpDashboard(args.dashboard_url, timeout=10.0)
    serve(
        args.config,
        args.kubeconfig,
        args.namespace,
        args.identity,
        False,
        dashboards=lambda url: shared,
    )


@dataclass
class SyncerProcess:
    """One daemon subprocess, owned by the test that started it."""

    process: subprocess.Popen[bytes]
    log_path: Path

    @classmethod
    def start(
        cls,
        *,
        config: dict[str, Any],
        kubeconfig: Path,
        namespace: str,
        dashboard_url: str,
        workdir: Path,
    ) -> SyncerProcess:
        """Write `config` (loopback, free ports) and start the daemon."""
        workdir.mkdir(parents=True, exist_ok=True)
        config_path = workdir / "syncer-config.yaml"
        own = {**config, "bind_address": "127.0.0.1", "health_port": 0, "metrics_port": 0}
        config_path.write_text(json.dumps(own))
        log_path = workdir / "syncer.log"
        command = [
            sys.executable,
            "-m",
            "tests.realapi.syncerd",
            "--dashboard-url",
            dashboard_url,
            "--config",
            str(config_path),
            "--kubeconfig",
            str(kubeconfig),
            "--namespace",
            namespace,
            "--identity",
            "realapi-syncer",
        ]
        env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=REPO,
                start_new_session=True,
            )
        return cls(process, log_path)

    def alive(self) -> bool:
        """Whether the process still runs."""
        return self.process.poll() is None

    def log_text(self) -> str:
        """Everything it wrote."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def records(self) -> list[dict[str, Any]]:
        """Its JSON log records."""
        found = []
        for line in self.log_text().splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict):
                    found.append(record)
        return found

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Wait for the `started` record, then for `/readyz` to answer 200."""
        deadline = time.monotonic() + timeout
        port = None
        while port is None:
            for record in self.records():
                found = re.search(r"health_port=(\d+)", str(record.get("message", "")))
                if found:
                    port = int(found.group(1))
            if not self.alive() or time.monotonic() > deadline:
                raise AssertionError(f"the syncer did not start:\n{self.log_text()[-4000:]}")
            time.sleep(0.1)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        while True:
            with (
                contextlib.suppress(OSError),
                opener.open(f"http://127.0.0.1:{port}/readyz", timeout=2) as reply,
            ):
                if reply.status == 200:
                    return
            if not self.alive() or time.monotonic() > deadline:
                raise AssertionError(f"the syncer is not ready:\n{self.log_text()[-4000:]}")
            time.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM by PID, SIGKILL if it does not end in 15 s."""
        if not self.alive():
            return
        os.kill(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=15)


if __name__ == "__main__":
    main()
