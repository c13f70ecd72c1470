"""An autoscaled Ray cluster assembled from real parts, for the e2e test and the benchmark.

`live_cluster(directory, manifest)` renders the RayCluster with `kuberay render`, applies
what git would hold to the fake API server (the head Pod, `<cluster>-autoscaling`, RBAC,
Services), starts the head Pod's Ray container on 127.0.0.1 under the head Pod's name,
the fake kubelet with the `RayWorkers` hook, the syncer (its actuator creates and deletes
the worker Pods), the head Pod's `autoscaler` container (the rendered wrapper and Ray's
v2 monitor with the rendered provider and config) and one Ray driver. `LiveCluster` reads
the outcome from three sides: the API server (Pods, the desired set, the provider's
requests in the audit log), the kubelet hook (each node's own `ray start` time) and Ray
(the GCS's node list). Everything listens on 127.0.0.1 and is stopped by PID.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client

from renderer import naming
from renderer.assets.autoscaler import kuberay_gitops_autoscaler as provider_module
from syncer.cli import Options, Syncer
from syncer.kube.client import CONFIGMAPS, PODS, KubeClient
from tests.autoscaler import live
from tests.fakeapi.controllers import Controllers
from tests.fakeapi.fixtures import close_api_client, new_api_client
from tests.fakeapi.server import FakeApiServer
from tests.syncer.fakedashboard import FakeDashboard
from tests.syncer.harness import apply, render

Manifest = dict[str, Any]
NAMESPACE = "autoscaling-e2e"
WAIT_S = 150.0


@dataclass
class LiveCluster:
    """The running parts and what the test reads from them."""

    name: str
    namespace: str
    directory: Path
    server: FakeApiServer
    kube: KubeClient
    head: live.LocalHead
    workers: live.RayWorkers
    sidecar: live.Sidecar
    driver: live.Driver
    ray: live.RayView
    timings: dict[str, float] = field(default_factory=dict)

    def pods(self) -> set[str]:
        """The dynamic worker Pods in the API server (deleting ones left out)."""
        items, _ = self.kube.list(
            PODS, self.namespace, label_selector=f"{naming.MANAGED_BY}=kuberay-syncer"
        )
        return {p["metadata"]["name"] for p in items if not p["metadata"].get("deletionTimestamp")}

    def pod(self, name: str) -> Manifest | None:
        """One Pod, or None."""
        return self.kube.get(PODS, self.namespace, name)

    def desired(self) -> set[str]:
        """The names in the desired set (`<cluster>-autoscaler-state`)."""
        cm = self.kube.get(CONFIGMAPS, self.namespace, f"{self.name}-autoscaler-state")
        return set((cm or {}).get("data") or {})

    def ray_workers(self) -> set[str]:
        """The Pod names of the alive Ray worker nodes (RAY_CLOUD_INSTANCE_ID)."""
        return self.ray.alive_workers()

    def mark(self) -> int:
        """A point in the API server's audit log."""
        return self.server.audit.mark()

    def provider_calls(self, verb: str, since: int) -> int:
        """The provider's requests on the desired set since `since` (get: one per loop)."""
        records = self.server.audit.records(
            verb=verb, resource="configmaps", name=f"{self.name}-autoscaler-state", since=since
        )
        agent = provider_module.USER_AGENT
        return sum(1 for r in records if (r.user_agent or "").startswith(agent))

    def wait(self, predicate: Callable[[], Any], what: str, timeout: float = WAIT_S) -> Any:
        """Poll until `predicate()` is truthy; fail with what every part shows."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError, RuntimeError):
                value = predicate()
                if value:
                    return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{self}")
            time.sleep(0.1)

    def settle(self, count: int, what: str = "") -> set[str]:
        """Wait until Pods, desired set and alive Ray workers are one set of `count` names."""

        def agreed() -> list[set[str]]:
            pods = self.pods()
            same = len(pods) == count and pods == self.desired() == self.ray_workers()
            return [pods] if same else []  # truthy even for no workers

        what = what or f"{count} workers in Pods, state and Ray"
        settled: set[str] = self.wait(agreed, what)[0]
        return settled

    def hold(self) -> Path:
        """A fresh directory for the driver's held tasks (see `driver.py`)."""
        holds = self.directory / "holds"
        holds.mkdir(exist_ok=True)
        path = holds / str(len(list(holds.iterdir())))
        path.mkdir()
        return path

    @staticmethod
    def running(hold: Path) -> int:
        """How many held tasks have started (each holds a CPU until released)."""
        return len(list(hold.glob("started-*")))

    @staticmethod
    def release(hold: Path) -> None:
        """Let the held tasks finish."""
        (hold / "release").touch()

    def ask(self, timeout: float = WAIT_S, **order: Any) -> Any:
        """Send the driver an order and wait for its answer."""
        self.driver.send(**order)
        return self.driver.reply(timeout)

    def __str__(self) -> str:
        def safe(read: Callable[[], object]) -> object:
            try:
                return read()
            except Exception as exc:  # noqa: BLE001 - a diagnostic, whatever failed
                return f"({exc!r})"

        nodes = safe(lambda: sorted((n.instance_id, n.alive) for n in self.ray.nodes()))
        return (
            f"pods {safe(self.pods)}\ndesired {safe(self.desired)}\nray nodes {nodes}\n"
            f"--- sidecar\n{self.sidecar.log_tail()}\n"
            f"--- monitor.log\n{_tail(self.head.logs / 'monitor.log')}"
        )


def _tail(path: Path, lines: int = 40) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return f"(no {path})"


def _create_namespace(api_client: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(api_client)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))


def meta_label(obj: Manifest, key: str) -> str:
    """A label of `obj` ("" when absent)."""
    return str((obj["metadata"].get("labels") or {}).get(key, ""))


def _only(objects: list[Manifest], kind: str, test: Callable[[Manifest], bool]) -> Manifest:
    found = [o for o in objects if o["kind"] == kind and test(o)]
    assert len(found) == 1, f"expected one {kind}, rendered {len(found)}"
    return found[0]


@contextlib.contextmanager
def live_cluster(directory: Path, manifest: str) -> Iterator[LiveCluster]:
    """Render `manifest` (one autoscaled RayCluster) and run it; see the module docstring."""
    objects = render(manifest, NAMESPACE)
    head_pod = _only(
        objects, "Pod", lambda o: o["metadata"]["labels"][naming.RAY_NODE_TYPE] == "head"
    )
    name = head_pod["metadata"]["labels"][naming.RAY_CLUSTER]
    configmap = _only(
        objects, "ConfigMap", lambda o: o["metadata"]["name"] == f"{name}-autoscaling"
    )
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(FakeApiServer())
        api_client = new_api_client(server.write_kubeconfig(directory / "kubeconfig"))
        stack.callback(close_api_client, api_client)
        _create_namespace(api_client, NAMESPACE)
        kube = KubeClient(api_client)
        stack.callback(kube.close)
        head = live.LocalHead(head_pod["metadata"]["name"], directory)
        stack.callback(head.stop)
        head.node.wait_started()
        workers = live.RayWorkers(head.gcs_address, directory / "workers")
        stack.callback(workers.stop)
        controllers = Controllers(api_client, namespace=NAMESPACE, hook=workers)
        stack.callback(controllers.stop)
        apply(kube, objects, NAMESPACE)
        controllers.start(interval=0.1)
        syncer = Syncer(
            kube,
            Options(namespaces=(NAMESPACE,), workers=2, poll_interval_s=0.5),
            dashboards=lambda url: FakeDashboard(time.time),
        )
        stack.callback(syncer.stop)
        assert syncer.start(), "the syncer did not start"
        sidecar = live.Sidecar(
            configmap, directory / "etc-kuberay-gitops", head.gcs_address, server.url,
            directory / "sidecar.log",
        )  # fmt: skip
        stack.callback(sidecar.stop)
        sidecar.start()
        driver = live.Driver(head.gcs_address, directory / "driver.log")
        stack.callback(driver.stop)
        driver.reply(live.START_TIMEOUT_S)  # "ready": connected to the cluster
        cluster = LiveCluster(
            name, NAMESPACE, directory, server, kube, head, workers, sidecar, driver,
            live.RayView(head.gcs_address),
        )  # fmt: skip
        cluster.timings["head_ray_start_s"] = head.node.start_s or 0.0
        yield cluster
        cluster.timings["worker_start_retries"] = float(workers.restarts())
        (directory / "timings.json").write_text(json.dumps(cluster.timings, sort_keys=True))
