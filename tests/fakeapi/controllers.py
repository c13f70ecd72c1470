"""Simulators of the Job controller and the kubelet that drive a (fake) API server over REST.

Owns what the fake API server does not do by itself: creating the Pods of batch/v1 Jobs
and keeping Job status, and moving Pods through their phases (Running and Ready once
they have no scheduling gates; Succeeded/Failed when a test or a real process says so).
They talk to the server only through the `kubernetes` client's REST layer and run step by
step (`step()`, `settle()`) or in a background thread (`start()`/`stop()`).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Protocol, Self

from kubernetes.client import ApiClient, ApiException

from tests.fakeapi.rules import (
    CONTROLLER_UID_LABEL,
    JOB_NAME_LABEL,
    LEGACY_CONTROLLER_UID_LABEL,
    LEGACY_JOB_NAME_LABEL,
)

Manifest = dict[str, Any]
Clock = Callable[[], datetime]

POD_IP = "127.0.0.1"
_TERMINAL = ("Succeeded", "Failed")
_LOG = logging.getLogger(__name__)


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _stamp(clock: Clock) -> str:
    return clock().strftime("%Y-%m-%dT%H:%M:%SZ")


def _key(obj: Manifest) -> tuple[str, str]:
    meta = obj["metadata"]
    return meta.get("namespace", ""), meta["name"]


def _condition(
    kind: str, status: bool, stamp: str, reason: str | None = None, message: str | None = None
) -> Manifest:
    condition: Manifest = {
        "type": kind,
        "status": "True" if status else "False",
        "lastProbeTime": None,
        "lastTransitionTime": stamp,
    }
    if reason:
        condition["reason"] = reason
    if message:
        condition["message"] = message
    return condition


def _has_condition(conditions: list[Manifest], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


class Rest:
    """Plain-dict REST calls through a configured `kubernetes.client.ApiClient`."""

    def __init__(self, api_client: ApiClient) -> None:
        self._api = api_client

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Manifest | list[Manifest] | None = None,
        content_type: str = "application/json",
    ) -> Manifest:
        """Send one request; returns the decoded JSON body.

        Raises:
            ApiException: for any non-2xx answer.
        """
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        serialized = self._api.param_serialize(
            method=method,
            resource_path=path,
            query_params=list((query or {}).items()),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self._api.call_api(*serialized)
        data: bytes = response.response.data  # the urllib3 response; RESTResponse.read is untyped
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(http_resp=response, body=data.decode(), data=None)
        decoded: Manifest = json.loads(data) if data else {}
        return decoded

    def list(self, group_version: str, plural: str, namespace: str | None) -> list[Manifest]:
        """List one resource (in a namespace, or in all), items sorted by namespace and name."""
        prefix = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
        path = f"{prefix}/namespaces/{namespace}/{plural}" if namespace else f"{prefix}/{plural}"
        items: list[Manifest] = self.request("GET", path)["items"]
        return sorted(items, key=_key)


class PodProcess(Protocol):
    """A running pod's real process, as started by a `PodHook`."""

    def poll(self) -> int | None:
        """The exit code once the process has ended, else None."""
        ...

    def kill(self) -> None:
        """Stop the process (idempotent)."""
        ...


PodHook = Callable[[Manifest], PodProcess | None]


class _Process:
    def __init__(self, process: subprocess.Popen[bytes], log: IO[bytes]) -> None:
        self._process = process
        self._log = log

    def poll(self) -> int | None:
        code = self._process.poll()
        if code is not None:
            self._log.close()
        return code

    def kill(self) -> None:
        if self._process.poll() is None:
            # The child leads its own session (start_new_session); stop that group only.
            try:
                os.killpg(self._process.pid, signal.SIGTERM)
                self._process.wait(timeout=5)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._process.pid, signal.SIGKILL)
                self._process.wait()
        self._log.close()


class CommandRunner:
    """A `PodHook` that runs a pod's first container `command + args` as a real process.

    The process inherits this process's environment plus the container's `env` (plain
    values and the fieldRefs metadata.name/namespace/uid, status.podIP, spec.nodeName);
    its output goes to `<log_dir>/<namespace>_<name>.log`. A container without a
    command gives no process: the pod stays Running until the test ends it.
    """

    def __init__(
        self, log_dir: Path, *, env: Mapping[str, str] | None = None, cwd: Path | None = None
    ) -> None:
        self.log_dir = log_dir
        self._env = dict(env or {})
        self._cwd = cwd

    def log_path(self, namespace: str, name: str) -> Path:
        """Where a pod's output goes."""
        return self.log_dir / f"{namespace}_{name}.log"

    @staticmethod
    def _field(pod: Manifest, path: str) -> str:
        values = {
            "metadata.name": pod["metadata"]["name"],
            "metadata.namespace": pod["metadata"].get("namespace", ""),
            "metadata.uid": pod["metadata"].get("uid", ""),
            "status.podIP": POD_IP,
            "status.hostIP": POD_IP,
            "spec.nodeName": (pod.get("spec") or {}).get("nodeName", "fake-node"),
        }
        return str(values.get(path, ""))

    def __call__(self, pod: Manifest) -> PodProcess | None:
        """Start the pod's command; None when the container has none."""
        container = ((pod.get("spec") or {}).get("containers") or [{}])[0]
        argv = [*(container.get("command") or []), *(container.get("args") or [])]
        if not argv:
            return None
        env = {**os.environ, **self._env}
        for var in container.get("env") or []:
            if "value" in var:
                env[var["name"]] = str(var["value"])
            elif field_ref := (var.get("valueFrom") or {}).get("fieldRef"):
                env[var["name"]] = self._field(pod, field_ref.get("fieldPath", ""))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        namespace, name = _key(pod)
        log = self.log_path(namespace, name).open("wb")
        process = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=self._cwd,
            start_new_session=True,
        )
        return _Process(process, log)


class JobController:
    """Creates the Pods of batch/v1 Jobs and keeps their status, like kube-controller-manager.

    Pods are named `<job>-<5 chars>` (generateName), carry the job labels and a
    controller ownerReference; status counts active/ready/succeeded/failed pods and sets
    Complete (after SuccessCriteriaMet) or Failed (after FailureTarget, when failures
    exceed `backoffLimit`). Suspended jobs get their active pods deleted.
    """

    def __init__(
        self, api_client: ApiClient, *, namespace: str | None = None, clock: Clock = _utc_now
    ) -> None:
        self._rest = Rest(api_client)
        self._namespace = namespace
        self._clock = clock

    def step(self) -> int:
        """Reconcile every Job once; returns the number of writes made."""
        jobs = self._rest.list("batch/v1", "jobs", self._namespace)
        pods = self._rest.list("v1", "pods", self._namespace)
        owned: dict[str, list[Manifest]] = {}
        for pod in pods:
            for ref in pod["metadata"].get("ownerReferences") or []:
                if ref.get("controller") and ref.get("kind") == "Job":
                    owned.setdefault(ref.get("uid", ""), []).append(pod)
        return sum(self._sync(job, owned.get(job["metadata"]["uid"], [])) for job in jobs)

    def _pod_for(self, job: Manifest) -> Manifest:
        meta = job["metadata"]
        template = copy.deepcopy((job.get("spec") or {}).get("template") or {})
        template_meta = template.get("metadata") or {}
        labels = dict(template_meta.get("labels") or {})
        labels.setdefault(JOB_NAME_LABEL, meta["name"])
        labels.setdefault(LEGACY_JOB_NAME_LABEL, meta["name"])
        labels.setdefault(CONTROLLER_UID_LABEL, meta["uid"])
        labels.setdefault(LEGACY_CONTROLLER_UID_LABEL, meta["uid"])
        pod_meta: Manifest = {
            "generateName": f"{meta['name']}-",
            "namespace": meta["namespace"],
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        }
        if template_meta.get("annotations"):
            pod_meta["annotations"] = dict(template_meta["annotations"])
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": pod_meta,
            "spec": template.get("spec") or {},
        }

    def _delete_pods(self, pods: list[Manifest]) -> int:
        for pod in pods:
            namespace, name = _key(pod)
            try:
                self._rest.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}")
            except ApiException as exc:
                if exc.status != 404:
                    raise
        return len(pods)

    def _sync(self, job: Manifest, pods: list[Manifest]) -> int:
        meta, spec = job["metadata"], job.get("spec") or {}
        status: Manifest = job.get("status") or {}
        if meta.get("deletionTimestamp"):
            return 0
        stamp = _stamp(self._clock)
        conditions: list[Manifest] = copy.deepcopy(status.get("conditions") or [])
        active = [
            p
            for p in pods
            if (p.get("status") or {}).get("phase") not in _TERMINAL
            and not p["metadata"].get("deletionTimestamp")
        ]
        succeeded = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Succeeded")
        failed = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Failed")
        finished = _has_condition(conditions, "Complete") or _has_condition(conditions, "Failed")
        writes = 0
        new_status: Manifest = {
            k: v for k, v in status.items() if k not in ("active", "succeeded", "failed", "ready")
        }
        if finished:
            writes += self._delete_pods(active)
            active = []
        elif spec.get("suspend"):
            writes += self._delete_pods(active)
            active = []
            if not _has_condition(conditions, "Suspended"):
                conditions = [c for c in conditions if c.get("type") != "Suspended"]
                conditions.append(
                    _condition("Suspended", True, stamp, "JobSuspended", "Job suspended")
                )
        elif failed > int(spec.get("backoffLimit", 6)):
            writes += self._delete_pods(active)
            active = []
            message = "Job has reached the specified backoff limit"
            conditions.append(
                _condition("FailureTarget", True, stamp, "BackoffLimitExceeded", message)
            )
            conditions.append(_condition("Failed", True, stamp, "BackoffLimitExceeded", message))
        elif succeeded >= int(spec.get("completions") or 1):
            conditions.append(
                _condition(
                    "SuccessCriteriaMet",
                    True,
                    stamp,
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                )
            )
            conditions.append(
                _condition(
                    "Complete",
                    True,
                    stamp,
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                )
            )
            new_status["completionTime"] = stamp
        else:
            if _has_condition(conditions, "Suspended"):
                conditions = [c for c in conditions if c.get("type") != "Suspended"]
                conditions.append(
                    _condition("Suspended", False, stamp, "JobResumed", "Job resumed")
                )
            new_status.setdefault("startTime", stamp)
            wanted = min(
                int(spec.get("parallelism", 1)), int(spec.get("completions") or 1) - succeeded
            ) - len(active)
            for _ in range(max(wanted, 0)):
                active.append(
                    self._rest.request(
                        "POST",
                        f"/api/v1/namespaces/{meta['namespace']}/pods",
                        body=self._pod_for(job),
                    )
                )
                writes += 1
        for field, count in (("active", len(active)), ("succeeded", succeeded), ("failed", failed)):
            if count:
                new_status[field] = count
        new_status["ready"] = sum(
            1
            for p in active
            if _has_condition((p.get("status") or {}).get("conditions") or [], "Ready")
        )
        new_status["terminating"] = 0
        new_status["uncountedTerminatedPods"] = {}
        if conditions:
            new_status["conditions"] = conditions
        if new_status != status:
            body = {**job, "status": new_status}
            try:
                self._rest.request(
                    "PUT",
                    f"/apis/batch/v1/namespaces/{meta['namespace']}/jobs/{meta['name']}/status",
                    body=body,
                )
                writes += 1
            except ApiException as exc:
                if exc.status not in (404, 409):  # changed or gone meanwhile: next step
                    raise
        return writes


class Kubelet:
    """Moves Pods through their phases like a kubelet on a node at 127.0.0.1.

    A Pending pod without scheduling gates becomes Running and Ready (conditions, podIP
    127.0.0.1, containerStatuses); `hook` (e.g. `CommandRunner`) may start a real process
    for it, whose exit code later makes the pod Succeeded or Failed. A gated pod gets
    `PodScheduled=False/SchedulingGated`. Tests can set any phase with `set_phase`.
    """

    def __init__(
        self,
        api_client: ApiClient,
        *,
        namespace: str | None = None,
        hook: PodHook | None = None,
        clock: Clock = _utc_now,
    ) -> None:
        self._rest = Rest(api_client)
        self._namespace = namespace
        self._hook = hook
        self._clock = clock
        self._processes: dict[tuple[str, str], PodProcess] = {}
        self._lock = threading.Lock()

    def step(self) -> int:
        """Advance every pod once; returns the number of writes made."""
        writes = 0
        pods = self._rest.list("v1", "pods", self._namespace)
        live = {_key(p) for p in pods}
        with self._lock:
            for key in [k for k in self._processes if k not in live]:
                self._processes.pop(key).kill()
        for pod in pods:
            writes += self._advance(pod)
        return writes

    def _advance(self, pod: Manifest) -> int:
        key = _key(pod)
        status = pod.get("status") or {}
        phase = status.get("phase") or "Pending"
        if pod["metadata"].get("deletionTimestamp") or phase in _TERMINAL:
            with self._lock:
                process = self._processes.pop(key, None)
            if process is not None:
                process.kill()
            return 0
        if (pod.get("spec") or {}).get("schedulingGates"):
            conditions = status.get("conditions") or []
            if any(
                c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated"
                for c in conditions
            ):
                return 0
            gated = _condition(
                "PodScheduled",
                False,
                _stamp(self._clock),
                "SchedulingGated",
                "Scheduling is blocked due to non-empty scheduling gates",
            )
            self._write_status(pod, {**status, "conditions": [gated]})
            return 1
        if phase == "Pending":
            if self._hook is not None:
                process = self._hook(pod)
                if process is not None:
                    with self._lock:
                        self._processes[key] = process
            self._write_status(pod, self._running_status(pod, ready=True))
            return 1
        with self._lock:
            process = self._processes.get(key)
        code = process.poll() if process is not None else None
        if code is None:
            return 0
        with self._lock:
            self._processes.pop(key, None)
        self._write_status(pod, self._terminated_status(pod, code, None, None))
        return 1

    def _container_id(self, pod: Manifest, name: str) -> str:
        digest = hashlib.sha256(f"{pod['metadata'].get('uid')}/{name}".encode()).hexdigest()
        return f"containerd://{digest}"

    def _running_status(self, pod: Manifest, *, ready: bool) -> Manifest:
        stamp = _stamp(self._clock)
        status = pod.get("status") or {}
        spec = pod.get("spec") or {}
        containers = []
        for container in spec.get("containers") or []:
            containers.append(
                {
                    "name": container["name"],
                    "image": container.get("image", ""),
                    "imageID": f"{container.get('image', '')}@sha256:{'0' * 64}",
                    "containerID": self._container_id(pod, container["name"]),
                    "ready": ready,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": stamp}},
                    "lastState": {},
                }
            )
        return {
            "phase": "Running",
            "conditions": [
                _condition("PodReadyToStartContainers", True, stamp),
                _condition("Initialized", True, stamp),
                _condition("Ready", ready, stamp, None if ready else "ContainersNotReady"),
                _condition(
                    "ContainersReady", ready, stamp, None if ready else "ContainersNotReady"
                ),
                _condition("PodScheduled", True, stamp),
            ],
            "hostIP": POD_IP,
            "hostIPs": [{"ip": POD_IP}],
            "podIP": POD_IP,
            "podIPs": [{"ip": POD_IP}],
            "startTime": status.get("startTime", stamp),
            "qosClass": status.get("qosClass", "BestEffort"),
            "containerStatuses": containers,
        }

    def _terminated_status(
        self, pod: Manifest, code: int, reason: str | None, message: str | None
    ) -> Manifest:
        stamp = _stamp(self._clock)
        status = self._running_status(pod, ready=False)
        status["phase"] = "Succeeded" if code == 0 else "Failed"
        for condition in status["conditions"]:
            if condition["type"] in ("Ready", "ContainersReady"):
                condition["reason"] = "PodCompleted"
        started = (pod.get("status") or {}).get("startTime", stamp)
        for container in status["containerStatuses"]:
            container["started"] = False
            container["state"] = {
                "terminated": {
                    "exitCode": code,
                    "reason": "Completed" if code == 0 else "Error",
                    "startedAt": started,
                    "finishedAt": stamp,
                    "containerID": container["containerID"],
                }
            }
        if reason:
            status["reason"] = reason
        if message:
            status["message"] = message
        return status

    def _write_status(self, pod: Manifest, status: Manifest) -> None:
        namespace, name = _key(pod)
        old = pod.get("status") or {}
        patch = {**dict.fromkeys((k for k in old if k not in status), None), **status}
        self._rest.request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{name}/status",
            body={"status": patch},
            content_type="application/merge-patch+json",
        )

    def _read(self, namespace: str, name: str) -> Manifest:
        pod: Manifest = self._rest.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        return pod

    def set_phase(
        self,
        namespace: str,
        name: str,
        phase: str,
        *,
        exit_code: int | None = None,
        reason: str | None = None,
        message: str | None = None,
    ) -> None:
        """Set a pod's phase now: Pending, Running (and Ready), Succeeded or Failed.

        Succeeded defaults to exit code 0 and Failed to 1; a running process of the pod
        is stopped first.

        Raises:
            ValueError: an unknown phase.
        """
        pod = self._read(namespace, name)
        with self._lock:
            process = self._processes.pop((namespace, name), None)
        if process is not None:
            process.kill()
        if phase == "Pending":
            status: Manifest = {
                "phase": "Pending",
                "qosClass": (pod.get("status") or {}).get("qosClass", "BestEffort"),
            }
        elif phase == "Running":
            status = self._running_status(pod, ready=True)
        elif phase in _TERMINAL:
            code = exit_code if exit_code is not None else (0 if phase == "Succeeded" else 1)
            status = self._terminated_status(pod, code, reason, message)
            status["phase"] = phase
        else:
            raise ValueError(f"unknown pod phase {phase!r}")
        self._write_status(pod, status)

    def set_ready(self, namespace: str, name: str, ready: bool) -> None:
        """Make a running pod Ready or not Ready (its containers too)."""
        pod = self._read(namespace, name)
        self._write_status(pod, self._running_status(pod, ready=ready))

    def close(self) -> None:
        """Stop every process the hook started."""
        with self._lock:
            processes = list(self._processes.values())
            self._processes.clear()
        for process in processes:
            process.kill()


class Controllers:
    """The Job controller and the kubelet together, stepped by the test or in a thread."""

    def __init__(
        self,
        api_client: ApiClient,
        *,
        namespace: str | None = None,
        hook: PodHook | None = None,
        clock: Clock = _utc_now,
    ) -> None:
        self.jobs = JobController(api_client, namespace=namespace, clock=clock)
        self.kubelet = Kubelet(api_client, namespace=namespace, hook=hook, clock=clock)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._step_lock = threading.Lock()

    def step(self) -> int:
        """One pass of the Job controller, then the kubelet; returns the writes made."""
        with self._step_lock:
            return self.jobs.step() + self.kubelet.step()

    def settle(self, max_steps: int = 20) -> int:
        """Step until a pass makes no writes; returns the number of passes that wrote.

        Raises:
            RuntimeError: still writing after `max_steps` passes.
        """
        for done in range(max_steps):
            if self.step() == 0:
                return done
        raise RuntimeError(f"controllers still writing after {max_steps} steps")

    def start(self, interval: float = 0.05) -> Self:
        """Step in a background thread every `interval` seconds until `stop()`."""
        if self._thread is not None:
            raise RuntimeError("the controllers are already running")
        self._stop.clear()

        def run() -> None:
            while not self._stop.wait(interval):
                try:
                    self.step()
                except Exception:  # noqa: BLE001 -- simulators must outlive injected faults
                    _LOG.debug("controllers step failed; retrying", exc_info=True)

        self._thread = threading.Thread(target=run, name="fake-controllers", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the background thread (if any) and every process the kubelet hook started."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        self.kubelet.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
