"""The `kuberay-syncer` daemon as a subprocess, pointed at the test's Ray head.

`python -m tests.realapi.syncerd --dashboard-url URL [kuberay-syncer options]` runs the
daemon's own entry (`syncer.cli.serve`, what `kuberay-syncer` runs) with one change: there
is no cluster DNS, so every intent's dashboard URL goes to `URL`. `SyncerProcess` starts it
in its own session, waits for its health endpoint and stops it by PID. Only the CLI entry
and the dashboard client are imported, so the syncer's internal layout may change freely;
the one exception is the opt-in trace (`REALAPI_SYNCER_TRACE=1`: every watch event,
relist and RayJob pass's pod view in the log), which wraps three internals by name. SIGUSR1
logs every thread's stack (`SyncerProcess.thread_dump`, which a stalled test calls).
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tests.processes import LoggedProcess, ProcessExitedError, wait_syncer_ready

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
    # SIGUSR1 logs every thread's stack (`SyncerProcess.thread_dump`, for a stalled test).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    if os.environ.get("REALAPI_SYNCER_TRACE"):
        _trace()
    shared = HttpDashboard(args.dashboard_url, timeout=10.0)
    serve(
        args.config,
        args.kubeconfig,
        args.namespace,
        args.identity,
        False,
        dashboards=lambda url: shared,
    )


def _trace() -> None:
    """Log every watch event, relist and RayJob pass's pod view (REALAPI_SYNCER_TRACE=1)."""
    import logging

    from syncer.kube.client import KubeClient
    from syncer.kube.informer import Informer
    from syncer.rayjob.reconciler import RayJobReconciler

    log = logging.getLogger("realapi.trace")
    watch, relist, observe = KubeClient.watch, Informer.relist, RayJobReconciler.observe

    def traced_watch(self: Any, resource: Any, namespace: Any, **kw: Any) -> Any:
        log.warning(
            "trace watch-open %s ns=%s rv=%s",
            resource.plural,
            namespace,
            kw.get("resource_version"),
        )
        count = 0
        try:
            for event in watch(self, resource, namespace, **kw):
                count += 1
                meta = event.object.get("metadata") or {}
                status = event.object.get("status") or {}
                ready = [
                    c.get("status")
                    for c in status.get("conditions") or []
                    if c.get("type") == "Ready"
                ]
                log.warning(
                    "trace event %s %s %s/%s rv=%s phase=%s ready=%s",
                    resource.plural,
                    event.type,
                    meta.get("namespace"),
                    meta.get("name"),
                    meta.get("resourceVersion"),
                    status.get("phase"),
                    ready,
                )
                yield event
        finally:
            log.warning("trace watch-end %s ns=%s events=%d", resource.plural, namespace, count)

    def traced_relist(self: Any) -> None:
        relist(self)
        log.warning(
            "trace relist %s ns=%s rv=%s n=%d",
            self.resource.plural,
            self.namespace,
            self.resource_version,
            len(self._cache),
        )

    def traced_observe(self: Any, intent: Any, record: Any, **kw: Any) -> Any:
        found = observe(self, intent, record, **kw)
        log.warning(
            "trace observe %s/%s pods=%s",
            intent.namespace,
            intent.cluster_name,
            [(p.name, p.phase, p.ready) for p in found.pods],
        )
        return found

    KubeClient.watch = traced_watch  # type: ignore[method-assign]
    Informer.relist = traced_relist  # type: ignore[method-assign]
    RayJobReconciler.observe = traced_observe  # type: ignore[method-assign]


@dataclass
class SyncerProcess:
    """One daemon subprocess, owned by the test that started it."""

    launched: LoggedProcess

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
        return cls(
            LoggedProcess.start(
                "kuberay-syncer", command, log_path=workdir / "syncer.log", env=env, cwd=REPO
            )
        )

    @property
    def log_path(self) -> Path:
        """Where its output goes."""
        return self.launched.log_path

    def alive(self) -> bool:
        """Whether the process still runs."""
        return self.launched.alive()

    def log_text(self) -> str:
        """Everything it wrote."""
        return self.launched.log_text()

    def records(self) -> list[dict[str, Any]]:
        """Its JSON log records."""
        return self.launched.records()

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Wait for the `started` record, then for `/readyz` to answer 200."""
        try:
            wait_syncer_ready(self.launched, timeout=timeout)
        except (ProcessExitedError, TimeoutError) as exc:
            raise AssertionError(f"the syncer did not start: {exc}") from None

    def thread_dump(self, settle_s: float = 1.0) -> str:
        """Every thread's stack (its SIGUSR1 handler), apart from the JSON log records.

        Only what the daemon wrote after the signal and is not a JSON record: the dump
        faulthandler writes, not the records the daemon logged meanwhile.
        """
        if not self.alive():
            return "(the syncer has exited)"
        before = self.log_path.stat().st_size if self.log_path.exists() else 0
        self.launched.signal(signal.SIGUSR1)
        time.sleep(settle_s)
        with self.log_path.open("rb") as log:
            log.seek(before)
            written = log.read().decode(errors="replace")
        return "\n".join(line for line in written.splitlines() if not _is_record(line))

    def stop(self) -> None:
        """SIGTERM by PID, SIGKILL if it does not end in 15 s."""
        self.launched.stop(15.0)


def _is_record(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


if __name__ == "__main__":
    main()
