"""The `autoscaler` sidecar of an autoscaled head Pod: Ray's own v2 monitor, kept running.

Shipped in the `<cluster>-autoscaling` ConfigMap and run as
`python /etc/kuberay-gitops/wrapper.py --gcs-port <port> --autoscaling-config <file>` by the
Ray image's Python (>= 3.9; the standard library and Ray only). It does what Ray's
`run_kuberay_autoscaler` does before its monitor starts (wait for the head with
`ray health-check`, find the head's log directory through the GCS), then runs
`python -m ray.autoscaler.v2.monitor` with the rendered config and the project's node
provider on PYTHONPATH, and restarts it when it exits: under autoscaler v2 the head Pod
has `restartPolicy: Never`, so the kubelet would not (reference autoscaling.md §5.1).
Against a head on 127.0.0.1 (tests) pass `--gcs-address`/`--monitor-ip` and set
`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`, or Ray swaps the loopback address for the node's IP.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

BACKOFF_S = 5.0
MONITOR_MODULE = "ray.autoscaler.v2.monitor"
# Not resolved: a ConfigMap volume links each key through a directory that an update
# replaces, so only the mount path stays valid for the monitors started later.
HERE = str(Path(__file__).absolute().parent)
DEFAULT_LOG_DIR = "/tmp/ray/session_latest/logs"

Run = Callable[[list[str]], int]


def log(message: str) -> None:
    """One line on stdout, which `kubectl logs -c autoscaler` shows."""
    sys.stdout.write(f"kuberay-gitops autoscaler: {message}\n")
    sys.stdout.flush()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The wrapper's flags; the renderer passes the first two."""
    parser = argparse.ArgumentParser(description="Run Ray's autoscaler v2 for this head.")
    parser.add_argument("--gcs-port", default="6379", help="the head's GCS port")
    parser.add_argument(
        "--autoscaling-config",
        default=str(Path(HERE) / "autoscaling.yaml"),
        help="Ray's autoscaling config (re-read by the monitor on every loop)",
    )
    parser.add_argument("--gcs-address", help="ip:port of the GCS (default: this pod's IP)")
    parser.add_argument("--monitor-ip", help="this node's IP (default: Ray's guess)")
    parser.add_argument("--logs-dir", help="the monitor's log directory (default: from the GCS)")
    parser.add_argument("--backoff-seconds", type=float, default=BACKOFF_S)
    parser.add_argument("--monitor-module", default=MONITOR_MODULE, help=argparse.SUPPRESS)
    parser.add_argument("--max-starts", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--skip-v2-check", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def join_address(host: str, port: str) -> str:
    """`host:port`, with brackets around an IPv6 host (Ray's `build_address`)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def node_ip() -> str:  # pragma: no cover - run in a child process against a real head (tests)
    """This pod's IP, the way Ray's own entry point finds it."""
    from ray._private.services import get_node_ip_address

    return str(get_node_ip_address())  # type: ignore[no-untyped-call]  # Ray's, untyped


def wait_for_head(
    address: str, *, backoff: float, run: Run = subprocess.call, sleep: Callable[[float], None]
) -> None:
    """Loop on `ray health-check` until the head's GCS answers (Ray's entry point does)."""
    while True:
        # The autoscaler's Ray may differ from the head's by a patch: skip the version check.
        if run(["ray", "health-check", "--address", address, "--skip-version-check"]) == 0:
            log(f"the Ray head at {address} is ready")
            return
        log(f"the Ray head at {address} is not ready; checking again in {backoff:g} s")
        sleep(backoff)


def head_log_dir(address: str) -> str:  # pragma: no cover - in a child process (tests)
    """The head's session log directory, read from the GCS (where `monitor.log` belongs)."""
    from ray._raylet import GcsClient  # type: ignore[attr-defined]  # a compiled module

    try:
        from ray.autoscaler._private.kuberay.run_autoscaler import _get_log_dir
    except ImportError:  # a Ray without the GCS lookup: the head's default temp dir
        return DEFAULT_LOG_DIR
    return str(_get_log_dir(GcsClient(address)))


def uses_autoscaler_v2(address: str) -> bool:  # pragma: no cover - in a child process
    """Whether the head runs autoscaler v2 (what the rendered config and provider need)."""
    from ray._raylet import GcsClient  # type: ignore[attr-defined]  # a compiled module
    from ray.autoscaler.v2.utils import is_autoscaler_v2

    return bool(is_autoscaler_v2(fetch_from_server=True, gcs_client=GcsClient(address)))


def monitor_command(
    module: str, *, address: str, config: str, logs_dir: str, monitor_ip: str
) -> list[str]:
    """The monitor's command line, as `ray start` builds it for its own monitor."""
    return [
        sys.executable,
        "-m",
        module,
        f"--gcs-address={address}",
        f"--autoscaling-config={config}",
        f"--logs-dir={logs_dir}",
        f"--monitor-ip={monitor_ip}",
    ]


def monitor_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment with this directory first on PYTHONPATH, for the provider module."""
    env = dict(os.environ if environ is None else environ)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if HERE not in paths:
        paths.insert(0, HERE)
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


class _Monitor:
    """The running monitor process, and whether the pod asked the wrapper to stop."""

    def __init__(self) -> None:
        self.child: subprocess.Popen[bytes] | None = None
        self.stopping = False

    def stopped(self) -> bool:
        return self.stopping

    def forward(self, signum: int, _frame: object) -> None:
        self.stopping = True
        child = self.child
        if child is not None and child.poll() is None:
            child.send_signal(signum)


def keep_running(
    command: list[str],
    env: Mapping[str, str],
    *,
    backoff: float,
    max_starts: int = 0,
    before_restart: Callable[[], None] = lambda: None,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Start the monitor, and start it again whenever it exits (`max_starts` 0: forever).

    SIGTERM and SIGINT go to the running monitor; the wrapper then exits with its code.
    """
    monitor = _Monitor()
    previous = {sig: signal.signal(sig, monitor.forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    starts, code = 0, 0
    try:
        while not monitor.stopped() and (max_starts == 0 or starts < max_starts):
            if starts:
                before_restart()
            starts += 1
            log(f"starting Ray's autoscaler (start {starts}): {' '.join(command)}")
            monitor.child = subprocess.Popen(command, env=dict(env))
            code = monitor.child.wait()
            monitor.child = None
            if monitor.stopped():  # a signal came while the monitor ran
                break
            log(f"Ray's autoscaler exited with code {code}; restarting in {backoff:g} s")
            sleep(backoff)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return code


def main(argv: list[str] | None = None) -> int:
    """Wait for the head, then run Ray's v2 monitor for as long as the pod lives."""
    args = parse_args(argv)
    monitor_ip = args.monitor_ip or node_ip()
    address = args.gcs_address or join_address(monitor_ip, args.gcs_port)

    def head_ready() -> None:
        wait_for_head(address, backoff=args.backoff_seconds, sleep=time.sleep)

    head_ready()
    if not args.skip_v2_check and not uses_autoscaler_v2(address):
        log(
            "the Ray head runs autoscaler v1, but kuberay-gitops runs Ray's autoscaler v2: set "
            "autoscalerOptions.version: v2 (Ray >= 2.47 defaults to v2 on Kubernetes)"
        )
        return 2
    logs_dir = args.logs_dir or head_log_dir(address)
    command = monitor_command(
        args.monitor_module,
        address=address,
        config=args.autoscaling_config,
        logs_dir=logs_dir,
        monitor_ip=monitor_ip,
    )
    return keep_running(
        command,
        monitor_env(),
        backoff=args.backoff_seconds,
        max_starts=args.max_starts,
        before_restart=head_ready,
    )


def exit_status(code: int) -> int:
    """A monitor killed by signal N (code -N) exits the wrapper as a shell would: 128 + N."""
    return 128 - code if code < 0 else code


if __name__ == "__main__":  # pragma: no cover - the script path, run by the subprocess test
    sys.exit(exit_status(main()))
