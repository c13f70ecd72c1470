"""A test kubelet for the real control plane: one Node at 127.0.0.1, driven through the API.

`TestKubelet` registers a Node (Ready, with room for thousands of pods and accelerators),
renews its Lease in `kube-node-lease` and heartbeats its Ready condition. It binds nothing:
the real kube-scheduler binds pods to the node. For every pod bound to it, it starts the
pod's command as a real process when `runner` says so (e.g. the RayJob submitter), marks the
pod Running and Ready, turns a finished process into Succeeded/Failed, and finishes graceful
deletions (kills the process, then deletes with grace period 0), which without a kubelet
would stay Terminating forever. Everything is written with the admin identity.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from tests.processes import LoggedProcess
from tests.realapi.rest import Rest, RestError

Manifest = dict[str, Any]
NODE_IP: Final = "127.0.0.1"
LEASE_RENEW_S: Final = 10.0
_TERMINAL: Final = ("Succeeded", "Failed")
CAPACITY: Final = {
    "cpu": "100k",
    "memory": "1000Ti",
    "ephemeral-storage": "1000Ti",
    "pods": "100000",
    "nvidia.com/gpu": "10k",
    "google.com/tpu": "10k",
    "amd.com/gpu": "10k",
}


def now() -> str:
    """The current UTC time as an RFC 3339 string with seconds."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_now() -> str:
    """The current UTC time as a MicroTime (what Lease renewTime wants)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class PodProcess:
    """A pod's real process in its own session; its output goes to a log file."""

    def __init__(self, argv: list[str], env: Mapping[str, str], log: Path, cwd: Path) -> None:
        self.log_path = log
        self.launched = LoggedProcess.start(log.stem, argv, log_path=log, env=env, cwd=cwd)

    def poll(self) -> int | None:
        """The exit code once it has ended."""
        return self.launched.process.poll()

    def kill(self) -> None:
        """Stop it (SIGTERM, then SIGKILL) and whatever it left in its session."""
        self.launched.stop_session(5.0)


# Decides whether a pod gets a real process: returns (argv, env) or None.
Runner = Callable[[Manifest], tuple[list[str], dict[str, str]] | None]


def container_command(pod: Manifest) -> tuple[list[str], dict[str, str]]:
    """The first container's `command + args` and its env (plain values and common fieldRefs)."""
    container = (pod["spec"].get("containers") or [{}])[0]
    argv = [*(container.get("command") or []), *(container.get("args") or [])]
    fields = {
        "metadata.name": pod["metadata"]["name"],
        "metadata.namespace": pod["metadata"].get("namespace", ""),
        "metadata.uid": pod["metadata"].get("uid", ""),
        "status.podIP": NODE_IP,
        "status.hostIP": NODE_IP,
        "spec.nodeName": pod["spec"].get("nodeName", ""),
    }
    env: dict[str, str] = {}
    for var in container.get("env") or []:
        if "value" in var:
            env[var["name"]] = str(var["value"])
        elif ref := (var.get("valueFrom") or {}).get("fieldRef"):
            env[var["name"]] = str(fields.get(ref.get("fieldPath", ""), ""))
    return argv, env


class TestKubelet:
    """Keeps one Node alive and moves the pods bound to it through their phases."""

    __test__ = False  # not a pytest test class, despite the name

    def __init__(
        self,
        rest: Rest,
        *,
        node: str = "realapi-node",
        log_dir: Path,
        runner: Runner | None = None,
        interval: float = 0.2,
    ) -> None:
        self.rest = rest
        self.node = node
        self.log_dir = log_dir
        self.runner = runner
        self.interval = interval
        self.errors: list[str] = []
        # What it did, one timestamped line per action (read by a stalled test's diagnosis).
        self.journal: list[str] = []
        self._processes: dict[tuple[str, str], PodProcess] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._renewed = 0.0
        self._lock = threading.Lock()

    # -- the node ---------------------------------------------------------------------

    def _node_status(self) -> Manifest:
        stamp = now()
        return {
            "capacity": CAPACITY,
            "allocatable": CAPACITY,
            "addresses": [
                {"type": "InternalIP", "address": NODE_IP},
                {"type": "Hostname", "address": self.node},
            ],
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "test kubelet is posting ready status",
                    "lastHeartbeatTime": stamp,
                    "lastTransitionTime": stamp,
                }
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "v0.0.0-realapi",
                "kubeProxyVersion": "",
                "bootID": "",
                "containerRuntimeVersion": "test://0",
                "kernelVersion": "",
                "machineID": "",
                "osImage": "test",
                "systemUUID": "",
            },
        }

    def register(self) -> None:
        """Create the Node (if missing), make it Ready and create its Lease."""
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.node,
                "labels": {
                    "kubernetes.io/hostname": self.node,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                },
            },
        }
        try:
            self.rest.create(node)
        except RestError as exc:
            if exc.status != 409:
                raise
        self.rest.patch(f"/api/v1/nodes/{self.node}/status", {"status": self._node_status()})
        self._renew()

    def _renew(self) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self.node}"
        spec = {"holderIdentity": self.node, "leaseDurationSeconds": 40, "renewTime": micro_now()}
        try:
            self.rest.patch(path, {"spec": spec})
        except RestError as exc:
            if exc.status != 404:
                raise
            self.rest.create(
                {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self.node, "namespace": "kube-node-lease"},
                    "spec": spec,
                }
            )
        self.rest.patch(f"/api/v1/nodes/{self.node}/status", {"status": self._node_status()})
        self._renewed = time.monotonic()

    # -- pods ---------------------------------------------------------------------------

    def _status_path(self, pod: Manifest) -> str:
        meta = pod["metadata"]
        return f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status"

    def _container_statuses(self, pod: Manifest, state: Manifest, ready: bool) -> list[Manifest]:
        return [
            {
                "name": c["name"],
                "image": c.get("image", ""),
                "imageID": "",
                "containerID": f"test://{pod['metadata']['uid']}/{c['name']}",
                "ready": ready,
                "started": "running" in state,
                "restartCount": 0,
                "state": state,
            }
            for c in pod["spec"].get("containers") or []
        ]

    def _note(self, pod: Manifest, what: str) -> None:
        meta = pod["metadata"]
        line = f"{micro_now()} {meta['namespace']}/{meta['name']} {what}"
        with self._lock:
            self.journal.append(line)

    def journal_of(self, namespace: str) -> list[str]:
        """The journal lines about pods of `namespace`."""
        with self._lock:
            return [line for line in self.journal if f" {namespace}/" in line]

    def _mark_running(self, pod: Manifest) -> Manifest:
        stamp = now()
        conditions = [
            {"type": kind, "status": "True", "lastTransitionTime": stamp}
            for kind in (
                "PodReadyToStartContainers",
                "Initialized",
                "Ready",
                "ContainersReady",
                "PodScheduled",
            )
        ]
        status = {
            "phase": "Running",
            "conditions": conditions,
            "hostIP": NODE_IP,
            "hostIPs": [{"ip": NODE_IP}],
            "podIP": NODE_IP,
            "podIPs": [{"ip": NODE_IP}],
            "startTime": stamp,
            "containerStatuses": self._container_statuses(
                pod, {"running": {"startedAt": stamp}}, True
            ),
        }
        return self.rest.patch(self._status_path(pod), {"status": status})

    def _mark_finished(self, pod: Manifest, code: int) -> None:
        stamp = now()
        status = pod.get("status") or {}
        started = status.get("startTime", stamp)
        conditions = [
            {**c, "status": "False", "reason": "PodCompleted", "lastTransitionTime": stamp}
            if c["type"] in ("Ready", "ContainersReady")
            else c
            for c in status.get("conditions") or []
        ]
        terminated = {
            "terminated": {
                "exitCode": code,
                "reason": "Completed" if code == 0 else "Error",
                "startedAt": started,
                "finishedAt": stamp,
            }
        }
        self.rest.patch(
            self._status_path(pod),
            {
                "status": {
                    "phase": "Succeeded" if code == 0 else "Failed",
                    "conditions": conditions,
                    "containerStatuses": self._container_statuses(pod, terminated, False),
                }
            },
        )

    def _start_process(self, pod: Manifest) -> None:
        if self.runner is None:
            return
        found = self.runner(pod)
        if found is None:
            return
        argv, env = found
        meta = pod["metadata"]
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_dir / f"{meta['namespace']}_{meta['name']}.log"
        with self._lock:
            self._processes[(meta["namespace"], meta["name"])] = PodProcess(
                argv, env, log, self.log_dir
            )

    def log_of(self, namespace: str, name: str) -> str:
        """A pod process's output so far ('' when it had none)."""
        path = self.log_dir / f"{namespace}_{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _advance(self, pod: Manifest) -> None:
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        phase = (pod.get("status") or {}).get("phase", "Pending")
        if meta.get("deletionTimestamp"):
            self._note(pod, "finishing its deletion")
            with self._lock:
                process = self._processes.pop(key, None)
            if process is not None:
                process.kill()
            # The container is gone: finish the graceful deletion (uid: this very pod).
            try:
                self.rest.request(
                    "DELETE",
                    f"/api/v1/namespaces/{key[0]}/pods/{key[1]}",
                    {
                        "apiVersion": "v1",
                        "kind": "DeleteOptions",
                        "gracePeriodSeconds": 0,
                        "preconditions": {"uid": meta["uid"]},
                    },
                )
            except RestError as exc:
                if exc.status not in (404, 409):
                    raise
            return
        if phase in _TERMINAL:
            return
        if phase == "Pending":
            self._start_process(pod)
            answer = self._mark_running(pod)
            self._note(
                pod, f"marked Running rv={(answer.get('metadata') or {}).get('resourceVersion')}"
            )
            return
        with self._lock:
            process = self._processes.get(key)
        code = process.poll() if process is not None else None
        if code is not None:
            with self._lock:
                self._processes.pop(key, None)
            self._mark_finished(pod, code)
            self._note(pod, f"finished exit={code}")

    def step(self) -> None:
        """One pass: the Lease when due, then every pod bound to this node."""
        if time.monotonic() - self._renewed > LEASE_RENEW_S:
            self._renew()
        pods = self.rest.list("v1", "Pod", None, fieldSelector=f"spec.nodeName={self.node}")
        live = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in pods}
        with self._lock:
            gone = [k for k in self._processes if k not in live]
            stale = [self._processes.pop(k) for k in gone]
        for process in stale:
            process.kill()
        for pod in pods:
            try:
                self._advance(pod)
            except RestError as exc:
                if exc.status not in (404, 409):  # deleted or changed meanwhile: next pass
                    self.errors.append(str(exc))

    def start(self) -> TestKubelet:
        """Register the node and run `step` in a thread until `stop`."""
        self.register()

        def run() -> None:
            while not self._stop.is_set():
                try:
                    self.step()
                except (RestError, OSError) as exc:
                    self.errors.append(str(exc))
                self._stop.wait(self.interval)

        self._thread = threading.Thread(target=run, name="test-kubelet", daemon=True)
        self._thread.start()
        return self

    @property
    def alive(self) -> bool:
        """Whether its thread still runs."""
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        """End the thread and every process it started."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self._lock:
            processes = list(self._processes.values())
            self._processes.clear()
        for process in processes:
            process.kill()
