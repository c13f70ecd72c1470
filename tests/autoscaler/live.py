"""Real Ray parts for the autoscaling end-to-end test: worker processes, the monitor, the config.

- The head and the workers use node IP 127.0.0.2 (`NODE_IP`): still loopback, but Ray
  only keeps 127.0.0.1 with `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`, which refuses worker
  nodes; the dashboard stays on 127.0.0.1.
- `RayWorkers` is a fake-kubelet hook: each dynamic worker Pod becomes a local
  `ray start --address=<gcs> --block` with `RAY_CLOUD_INSTANCE_ID=<pod>` and
  `RAY_NODE_TYPE_NAME=<group>` on its own loopback ports (as Ray's fake multi-node
  provider does); a deleted Pod gets SIGTERM (the kubelet's kill), then its session is swept.
- `Monitor` runs Ray's own `python -m ray.autoscaler.v2.monitor` with the provider file on
  `PYTHONPATH` and the API URL override pointing at the fake API server.
- `autoscaling_config` is Ray's own `_derive_autoscaling_config_from_ray_cr` with the
  contract's provider block: the renderer's port of it (the as-render half of issue 14)
  is not on this branch, so the test uses the oracle itself.
Every process leads its own session and is stopped by its PID (never `ray stop`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from renderer import naming
from tests.e2e.rayhead import free_ports, session_pids

Manifest = dict[str, Any]
ASSETS = Path(__file__).resolve().parents[2] / "renderer" / "assets" / "autoscaler"
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
# The node IP of the head and the workers: loopback, but not a name Ray rewrites (it turns
# 127.0.0.1 into the machine's routable address whenever multi-node is enabled).
NODE_IP = "127.0.0.2"


def _ray_env(**extra: str) -> dict[str, str]:
    bin_dir = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(
        {
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra)
    return env


def stop_session(process: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
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
    for pid in session_pids(sid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


class _Worker:
    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process

    def poll(self) -> int | None:
        return self.process.poll()

    def kill(self) -> None:
        stop_session(self.process)


class RayWorkers:
    """A `Kubelet` hook: dynamic worker Pods run as Ray worker nodes; other Pods get none."""

    def __init__(self, gcs_address: str, log_dir: Path, num_cpus: int = 1) -> None:
        self.gcs_address = gcs_address
        self.log_dir = log_dir
        self.num_cpus = num_cpus
        self.started: dict[str, float] = {}
        self.workers: list[_Worker] = []

    def __call__(self, pod: Manifest) -> _Worker | None:
        labels = pod["metadata"].get("labels") or {}
        if labels.get(naming.MANAGED_BY) != "kuberay-syncer":
            return None  # the head runs in the test's own Ray head process
        name = pod["metadata"]["name"]
        agent, agent_grpc, runtime_env, metrics = free_ports(4)
        command = [
            str(Path(sys.executable).parent / "ray"),
            "start",
            f"--address={self.gcs_address}",
            "--block",
            f"--node-ip-address={NODE_IP}",
            f"--num-cpus={self.num_cpus}",
            "--object-store-memory=80000000",
            f"--dashboard-agent-listen-port={agent}",
            f"--dashboard-agent-grpc-port={agent_grpc}",
            f"--runtime-env-agent-port={runtime_env}",
            f"--metrics-export-port={metrics}",
        ]
        env = _ray_env(
            # A worker node refuses to start with the switch at 0, and with it at 1 Ray turns
            # "127.0.0.1" into the routable address: the cluster lives on 127.0.0.2 instead.
            RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="1",
            RAY_CLOUD_INSTANCE_ID=name,
            RAY_NODE_TYPE_NAME=labels.get(naming.RAY_GROUP, ""),
        )
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with (self.log_dir / f"{name}.log").open("wb") as log:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        self.started[name] = time.monotonic()
        worker = _Worker(process)
        self.workers.append(worker)
        return worker

    def stop(self) -> None:
        """Stop every worker still running (test teardown)."""
        for worker in self.workers:
            worker.kill()


class Monitor:
    """Ray's v2 autoscaler monitor with the project's provider, as the head sidecar runs it."""

    def __init__(self, gcs_address: str, config: Path, api_url: str, log_dir: Path) -> None:
        self.gcs_address = gcs_address
        self.config = config
        self.api_url = api_url
        self.log_dir = log_dir
        self.process: subprocess.Popen[bytes] | None = None
        self.runs = 0

    def start(self) -> None:
        """Start (or start again) the monitor process."""
        self.runs += 1
        self.log_dir.mkdir(parents=True, exist_ok=True)
        (metrics_port,) = free_ports(1)
        env = _ray_env(
            AUTOSCALER_UPDATE_INTERVAL_S="1",
            AUTOSCALER_METRIC_PORT=str(metrics_port),
            KUBERAY_GITOPS_API_URL=self.api_url,
            PYTHONPATH=str(ASSETS),
        )
        command = [
            sys.executable,
            "-m",
            "ray.autoscaler.v2.monitor",
            f"--gcs-address={self.gcs_address}",
            f"--autoscaling-config={self.config}",
            f"--logs-dir={self.log_dir}",
            f"--monitor-ip={NODE_IP}",
        ]
        with (self.log_dir / f"monitor-{self.runs}.out").open("wb") as log:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )

    def stop(self) -> None:
        """Stop the monitor by its PID."""
        if self.process is not None:
            stop_session(self.process)
            self.process = None

    def log_tail(self, lines: int = 60) -> str:
        """The end of the monitor's logs, for failure messages."""
        texts = []
        for path in sorted(self.log_dir.glob("monitor*")):
            texts.append(f"--- {path.name}")
            texts.extend(path.read_text(errors="replace").splitlines()[-lines:])
        return "\n".join(texts)


def autoscaling_config(ray_cluster: Manifest, namespace: str) -> Manifest:
    """Ray's own derivation of the config from the RayCluster, with the contract's provider."""
    from ray.autoscaler._private.kuberay.autoscaling_config import (
        _derive_autoscaling_config_from_ray_cr,
    )

    cluster = ray_cluster["metadata"]["name"]
    cr = {**ray_cluster, "metadata": {**ray_cluster["metadata"], "namespace": namespace}}
    config: Manifest = _derive_autoscaling_config_from_ray_cr(cr)
    config["provider"] = {
        "type": "external",
        "module": "kuberay_gitops_autoscaler.PodProvider",
        "namespace": namespace,
        "cluster": cluster,
        "state_configmap": f"{cluster}-autoscaler-state",
        "disable_node_updaters": True,
        "disable_launch_config_check": True,
        "foreground_node_launch": True,
        "worker_liveness_check": False,
    }
    return config


def submit_job(dashboard_url: str, submission_id: str, script: Path) -> None:
    """POST a job whose entrypoint runs `script` with the head's Python."""
    body = json.dumps({"entrypoint": f"python {script}", "submission_id": submission_id}).encode()
    request = urllib.request.Request(
        f"{dashboard_url}/api/jobs/",
        data=body,
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with _OPENER.open(request, timeout=30) as reply:
        reply.read()


def job_status(dashboard_url: str, submission_id: str) -> str:
    """The job's status (PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED)."""
    with _OPENER.open(f"{dashboard_url}/api/jobs/{submission_id}", timeout=30) as reply:
        return str(json.loads(reply.read())["status"])


def alive_workers(dashboard_url: str) -> int:
    """How many non-head Ray nodes are alive, from the state API."""
    url = f"{dashboard_url}/api/v0/nodes?limit=100"
    with _OPENER.open(url, timeout=30) as reply:
        payload = json.loads(reply.read())
    nodes = payload.get("data", {}).get("result", {}).get("result", [])
    return sum(1 for n in nodes if n.get("state") == "ALIVE" and not n.get("is_head_node"))
