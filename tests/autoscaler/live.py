"""Real Ray processes for the autoscaling end-to-end test: the head, workers, sidecar, driver.

Every node is on 127.0.0.1 and every listener on loopback: the head runs with
`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`, and each worker through `raynode.py`, which lets
a worker node start with that switch (facts: ../shared/reference/ray-test-head.md).
- `LocalHead`: the head Pod's Ray container, `ray start --head --block` with 0 CPUs,
  `--no-monitor`, autoscaler v2 and the head Pod's name as RAY_CLOUD_INSTANCE_ID; no
  dashboard (the test reads the GCS itself), which saves about ten processes.
- `RayWorkers`: a fake-kubelet hook. Each dynamic worker Pod becomes a local
  `ray start --address=<gcs> --block` with RAY_CLOUD_INSTANCE_ID=<pod> and
  RAY_NODE_TYPE_NAME=<group>, its `--num-cpus` read from the Pod's own command, on ports
  of its own; a deleted Pod's node gets SIGTERM (the kubelet's kill). A start that Ray
  itself abandons ("timed out during startup", a 30 s limit a loaded machine can miss) is
  started again in the same Pod, and counted.
- `Sidecar`: the head Pod's `autoscaler` container: the rendered `wrapper.py`, run from a
  directory holding the rendered ConfigMap's keys (the volume), with the provider
  pointed at the fake API server; it runs Ray's unmodified `ray.autoscaler.v2.monitor`.
- `Driver`: one Ray driver for the module, taking orders on stdin (`driver.py`).
- `RayView`: what Ray itself says, read from the GCS: nodes and the autoscaler's status.
Every process leads its own session and is stopped by its PID (never `ray stop`).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from renderer import naming
from tests.e2e.rayhead import free_ports, session_pids

Manifest = dict[str, Any]
HERE = Path(__file__).resolve().parent
LOOPBACK = "127.0.0.1"
STARTED = "Ray runtime started."  # `ray start` has seen its node registered with the GCS
GAVE_UP = "timed out during startup"  # `ray start` gave up on its own node
START_ATTEMPTS = 3
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0
_BIN = Path(sys.executable).parent


def ray_env(**extra: str) -> dict[str, str]:
    """This environment without RAY_*, plus the loopback-only settings and `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(
        {
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
            "PATH": f"{_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra)
    return env


def stop_session(process: subprocess.Popen[Any], timeout: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM the session leader, then SIGKILL whatever is left in its session."""
    sid = process.pid
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=timeout)
    kill_session(sid)


def kill_session(sid: int) -> None:
    """SIGKILL every live process of session `sid` (each by its PID)."""
    for pid in session_pids(sid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _popen(command: list[str], env: dict[str, str], log: Path, **kw: Any) -> subprocess.Popen[Any]:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        return subprocess.Popen(
            command,
            stdin=kw.pop("stdin", subprocess.DEVNULL),
            stdout=kw.pop("stdout", out),
            stderr=out,
            env=env,
            start_new_session=True,
            **kw,
        )


def _tail(path: Path, lines: int = 40) -> str:
    if not path.exists():
        return f"(no {path.name})"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


class RayStart:
    """One `ray start ... --block` in its own session, started again if Ray gives up on it."""

    def __init__(self, command: list[str], env: dict[str, str], log: Path) -> None:
        self.command = command
        self.env = env
        self.log = log
        self.attempts = 0
        self.launched = 0.0  # monotonic time of the first launch
        self.start_s: float | None = None  # first launch to STARTED (Ray's own start time)
        self._offset = 0  # where the current attempt's output begins in the log
        self._lock = threading.Lock()  # the kubelet's thread and the test both poll
        self.process: subprocess.Popen[Any] = self._launch()

    def _launch(self) -> subprocess.Popen[Any]:
        self.attempts += 1
        self._offset = self.log.stat().st_size if self.log.exists() else 0
        if not self.launched:
            self.launched = time.monotonic()
        return _popen(self.command, self.env, self.log)

    def _output(self) -> str:
        if not self.log.exists():
            return ""
        with self.log.open("rb") as log:
            log.seek(self._offset)
            return log.read().decode(errors="replace")

    def poll(self) -> int | None:
        """None while running (or started again); the exit code once it stopped for good."""
        with self._lock:
            return self._poll()

    def _poll(self) -> int | None:
        if self.start_s is None:
            output = self._output()
            if STARTED in output:
                self.start_s = round(time.monotonic() - self.launched, 2)
            elif GAVE_UP in output and self.attempts < START_ATTEMPTS:
                stop_session(self.process)
                self.process = self._launch()
                return None
        return self.process.poll()

    def started_in(self) -> float:
        """Ray's own start time of the node (s), 0 while it is not up."""
        self.poll()
        return self.start_s or 0.0

    def wait_started(self, timeout: float = START_TIMEOUT_S) -> float:
        """Block until the node is up; its start time (s). Raises RuntimeError if it is not."""
        deadline = time.monotonic() + timeout
        while self.start_s is None:
            if self.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"`ray start` did not start; {self.log}:\n{_tail(self.log)}")
            time.sleep(0.1)
        return self.start_s

    def kill(self) -> None:
        """SIGTERM, then SIGKILL what is left (the kubelet stopping the container)."""
        stop_session(self.process)

    def crash(self) -> None:
        """SIGKILL every process of the node at once (a container killed for memory)."""
        kill_session(self.process.pid)


def node_ports() -> list[str]:
    """Flags that give one node listeners of its own on 127.0.0.1 (besides the GCS port)."""
    agent, agent_grpc, runtime_env, metrics, node_manager, object_manager = free_ports(6)
    return [
        f"--node-manager-port={node_manager}",
        f"--object-manager-port={object_manager}",
        f"--dashboard-agent-listen-port={agent}",
        f"--dashboard-agent-grpc-port={agent_grpc}",
        f"--runtime-env-agent-port={runtime_env}",
        f"--metrics-export-port={metrics}",
        # 0/0: each worker process binds a port the kernel picks, so the nodes sharing
        # 127.0.0.1 never hand out the same one (the default range is per node).
        "--min-worker-port=0",
        "--max-worker-port=0",
        "--include-log-monitor=false",
    ]


class LocalHead:
    """The head Pod's Ray container on 127.0.0.1: 0 CPUs, no monitor, autoscaler v2."""

    def __init__(self, instance_id: str, log_dir: Path) -> None:
        self.instance_id = instance_id
        self.log_dir = log_dir
        # AF_UNIX paths under the session dir must stay short: not under pytest's tmp.
        self.temp_dir = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
        (gcs, client, dashboard_metrics, autoscaler_metrics) = free_ports(4)
        self.gcs_address = f"{LOOPBACK}:{gcs}"
        command = [
            str(_BIN / "ray"),
            "start",
            "--head",
            "--block",
            f"--node-ip-address={LOOPBACK}",
            f"--port={gcs}",
            f"--ray-client-server-port={client}",
            *node_ports(),
            "--num-cpus=0",
            "--object-store-memory=100000000",
            "--include-dashboard=false",
            "--no-monitor",
            "--disable-usage-stats",
            f"--temp-dir={self.temp_dir}",
        ]
        env = ray_env(
            RAY_enable_autoscaler_v2="1",
            RAY_CLOUD_INSTANCE_ID=instance_id,
            RAY_NODE_TYPE_NAME="headgroup",
            DASHBOARD_METRIC_PORT=str(dashboard_metrics),
            AUTOSCALER_METRIC_PORT=str(autoscaler_metrics),
            # A dead worker's node is marked dead within about 5 s (default about 15 s);
            # the 10 s timeout per check stays, so a busy node is not declared dead.
            RAY_health_check_period_ms="1000",
        )
        self.node = RayStart(command, env, log_dir / "head.log")

    @property
    def logs(self) -> Path:
        """The head's session log directory (monitor.log is written there)."""
        return self.temp_dir / "session_latest" / "logs"

    def stop(self) -> None:
        """Stop the head by PID and remove its temp dir."""
        self.node.kill()
        with contextlib.suppress(OSError):
            for path in self.logs.glob("*"):
                if path.name.startswith(("gcs_server", "raylet", "monitor")) and path.is_file():
                    (self.log_dir / f"head-{path.name}").write_bytes(path.read_bytes())
        shutil.rmtree(self.temp_dir, ignore_errors=True)


class RayWorkers:
    """A `Kubelet` hook: dynamic worker Pods run as Ray worker nodes; other Pods get none."""

    def __init__(self, gcs_address: str, log_dir: Path) -> None:
        self.gcs_address = gcs_address
        self.log_dir = log_dir
        self.nodes: dict[str, RayStart] = {}  # by Pod name, in creation order
        self._lock = threading.Lock()

    @staticmethod
    def num_cpus(pod: Manifest) -> str:
        """`--num-cpus` of the Pod's own `ray start` command (rendered from rayStartParams)."""
        container = pod["spec"]["containers"][0]
        text = " ".join([*container.get("command", []), *container.get("args", [])])
        match = re.search(r"--num-cpus[= ](\S+)", text)
        return match.group(1) if match else "1"

    def __call__(self, pod: Manifest) -> RayStart | None:
        labels = pod["metadata"].get("labels") or {}
        if labels.get(naming.MANAGED_BY) != "kuberay-syncer":
            return None  # the head runs as the test's LocalHead
        name = pod["metadata"]["name"]
        command = [
            sys.executable,
            str(HERE / "raynode.py"),
            "start",
            f"--address={self.gcs_address}",
            "--block",
            f"--node-ip-address={LOOPBACK}",
            f"--num-cpus={self.num_cpus(pod)}",
            "--object-store-memory=80000000",
            *node_ports(),
        ]
        env = ray_env(RAY_CLOUD_INSTANCE_ID=name, RAY_NODE_TYPE_NAME=labels[naming.RAY_GROUP])
        node = RayStart(command, env, self.log_dir / f"{name}.log")
        with self._lock:
            self.nodes[name] = node
        return node

    def node(self, name: str) -> RayStart:
        """The Ray node of Pod `name`."""
        with self._lock:
            return self.nodes[name]

    def restarts(self) -> int:
        """How many worker starts Ray abandoned and the kubelet started again."""
        with self._lock:
            return sum(node.attempts - 1 for node in self.nodes.values())

    def stop(self) -> None:
        """Stop every worker node still running (test teardown)."""
        with self._lock:
            nodes = list(self.nodes.values())
        for node in nodes:
            node.kill()


class Sidecar:
    """The `autoscaler` container: the rendered wrapper, which runs Ray's v2 monitor."""

    def __init__(
        self, configmap: Manifest, directory: Path, gcs_address: str, api_url: str, log: Path
    ) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        for key, value in configmap["data"].items():  # what the ConfigMap volume holds
            (directory / key).write_text(value)
        self.log = log
        (metrics_port,) = free_ports(1)
        self.command = [
            sys.executable,
            str(directory / "wrapper.py"),
            f"--gcs-address={gcs_address}",
            f"--monitor-ip={LOOPBACK}",
            f"--autoscaling-config={directory / 'autoscaling.yaml'}",
            "--backoff-seconds=1",
        ]
        self.env = ray_env(
            AUTOSCALER_UPDATE_INTERVAL_S="1",
            AUTOSCALER_METRIC_PORT=str(metrics_port),
            KUBERAY_GITOPS_API_URL=api_url,
        )
        self.process: subprocess.Popen[Any] | None = None

    def start(self) -> None:
        """Start the container's process."""
        self.process = _popen(self.command, self.env, self.log)

    def starts(self) -> int:
        """How many monitors the wrapper has started."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return text.count("starting Ray's autoscaler (start ")

    def monitor_pid(self) -> int | None:
        """PID of the running `ray.autoscaler.v2.monitor` (the wrapper's child)."""
        if self.process is None:
            return None
        for pid in session_pids(self.process.pid):
            with contextlib.suppress(OSError):
                if b"ray.autoscaler.v2.monitor" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return pid
        return None

    def kill_monitor(self) -> int:
        """SIGKILL the running monitor (the wrapper starts another); its PID."""
        pid = self.monitor_pid()
        if pid is None:
            raise RuntimeError(f"no monitor runs:\n{_tail(self.log)}")
        os.kill(pid, signal.SIGKILL)
        return pid

    def stop(self) -> None:
        """Stop the wrapper and its monitor by PID."""
        if self.process is not None:
            stop_session(self.process)
            self.process = None

    def log_tail(self, lines: int = 40) -> str:
        """The end of the wrapper's output, for failure messages."""
        return _tail(self.log, lines)


class Driver:
    """`driver.py`, a Ray driver on the head, answering one JSON order at a time."""

    def __init__(self, gcs_address: str, log: Path) -> None:
        self.log = log
        self.process = _popen(
            [sys.executable, str(HERE / "driver.py")],
            ray_env(RAY_ADDRESS=gcs_address),
            log,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self._replies: queue.Queue[Manifest] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        stdout: IO[bytes] | None = self.process.stdout
        assert stdout is not None
        for line in stdout:
            with contextlib.suppress(ValueError):
                self._replies.put(json.loads(line))
        self._replies.put({"error": f"the driver exited; {self.log}:\n{_tail(self.log)}"})

    def send(self, **order: Any) -> None:
        """Send one order; `reply` waits for its answer."""
        stdin = self.process.stdin
        assert stdin is not None
        stdin.write(json.dumps(order).encode() + b"\n")
        stdin.flush()

    def reply(self, timeout: float) -> Any:
        """The answer to the last order sent. Raises AssertionError on an error or timeout."""
        try:
            answer = self._replies.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no answer from the driver within {timeout} s") from None
        if "error" in answer:
            raise AssertionError(f"the driver failed: {answer['error']}")
        return answer["ok"]

    def stop(self) -> None:
        """Close its stdin and stop it by PID."""
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        stop_session(self.process)
        self._reader.join(timeout=STOP_TIMEOUT_S)
        if self.process.stdout is not None:
            self.process.stdout.close()


@dataclass(frozen=True)
class RayNode:
    """One node as the GCS knows it."""

    instance_id: str
    group: str
    alive: bool
    head: bool


class RayView:
    """Ray's own view, from the GCS: its nodes and the autoscaler's published status."""

    def __init__(self, gcs_address: str) -> None:
        from ray._raylet import GcsClient  # type: ignore[attr-defined]  # compiled

        self.gcs_address = gcs_address
        self._client = GcsClient(address=gcs_address)

    def nodes(self) -> list[RayNode]:
        """Every node the GCS has seen, alive or dead."""
        infos = self._client.get_all_node_info(timeout=10)
        return [
            RayNode(str(i.instance_id), str(i.node_type_name), i.state == 0, bool(i.is_head_node))
            for i in infos.values()
        ]

    def alive_workers(self) -> set[str]:
        """RAY_CLOUD_INSTANCE_ID (the Pod name) of every alive worker node."""
        return {n.instance_id for n in self.nodes() if n.alive and not n.head}

    def demand_cpus(self) -> dict[str, float]:
        """CPUs of the demand the autoscaler last reported: pending tasks and constraint."""
        from ray.autoscaler.v2.sdk import get_cluster_status

        demands = get_cluster_status(self.gcs_address).resource_demands

        def cpus(items: list[Any]) -> float:
            return float(
                sum(b.bundle.get("CPU", 0.0) * b.count for d in items for b in d.bundles_by_count)
            )

        return {
            "tasks": cpus(demands.ray_task_actor_demand),
            "constraint": cpus(demands.cluster_constraint_demand),
        }
