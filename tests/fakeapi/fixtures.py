"""pytest fixtures for tests that talk to a Kubernetes API: the fake server, or a real cluster.

`kube_api` gives each test a fresh namespace, a kubeconfig file and a configured
`kubernetes.client.ApiClient`. When `KUBECONFIG` is set it uses that cluster instead of
starting the fake API server, and `kube_api.fake` (fault injection, direct object access)
skips the test. Load as a plugin: `pytest_plugins = ["tests.fakeapi.fixtures"]`.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config, watch

from tests.fakeapi.controllers import Controllers
from tests.fakeapi.server import FakeApiServer

Manifest = dict[str, Any]

KUBECONFIG_ENV = "KUBECONFIG"
TEST_NAMESPACE_LABEL = "kuberay-gitops.test/namespace"


@dataclass(slots=True)
class KubeApi:
    """A test's API access: client, kubeconfig, namespace and (fake only) the server."""

    api_client: client.ApiClient
    kubeconfig: Path
    namespace: str
    server: FakeApiServer | None

    @property
    def is_fake(self) -> bool:
        """Whether this is the fake API server rather than a real cluster."""
        return self.server is not None

    @property
    def fake(self) -> FakeApiServer:
        """The fake API server; skips the test when running against a real cluster."""
        if self.server is None:
            pytest.skip("needs the fake API server (fault injection or direct access)")
        return self.server

    @property
    def core(self) -> client.CoreV1Api:
        """`CoreV1Api` on this client."""
        return client.CoreV1Api(self.api_client)

    @property
    def batch(self) -> client.BatchV1Api:
        """`BatchV1Api` on this client."""
        return client.BatchV1Api(self.api_client)

    @property
    def coordination(self) -> client.CoordinationV1Api:
        """`CoordinationV1Api` on this client."""
        return client.CoordinationV1Api(self.api_client)

    @property
    def networking(self) -> client.NetworkingV1Api:
        """`NetworkingV1Api` on this client."""
        return client.NetworkingV1Api(self.api_client)

    @property
    def custom(self) -> client.CustomObjectsApi:
        """`CustomObjectsApi` on this client (Gateway API, cert-manager)."""
        return client.CustomObjectsApi(self.api_client)


def new_api_client(kubeconfig: str | Path) -> client.ApiClient:
    """A `kubernetes` ApiClient for a kubeconfig file, without touching global config."""
    api_client: client.ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]  # the kubernetes config loader is untyped
        config_file=str(kubeconfig)
    )
    return api_client


def close_api_client(api_client: client.ApiClient) -> None:
    """Close an ApiClient (its connection pool), a typed wrapper for `ApiClient.close`."""
    api_client.close()  # type: ignore[no-untyped-call]  # ApiClient.close is untyped


class WatchStream:
    """A typed wrapper of `kubernetes.watch.Watch`: events are dicts (`type`, `object`, ...)."""

    def __init__(self) -> None:
        self._watch = watch.Watch()  # type: ignore[no-untyped-call]  # kubernetes.watch is untyped

    def stream(
        self, func: Callable[..., object], *args: object, **kwargs: object
    ) -> Iterator[Manifest]:
        """`Watch.stream(func, *args, **kwargs)`."""
        events: Iterator[Manifest] = self._watch.stream(func, *args, **kwargs)  # type: ignore[no-untyped-call]  # untyped
        return events

    def stop(self) -> None:
        """`Watch.stop()`: end the stream after the current event."""
        self._watch.stop()  # type: ignore[no-untyped-call]  # kubernetes.watch is untyped


@pytest.fixture
def fake_api_server() -> Iterator[FakeApiServer]:
    """A started fake API server on 127.0.0.1, stopped after the test."""
    with FakeApiServer(tokens=()) as server:  # only its kubeconfig's token: 401 otherwise
        yield server


@pytest.fixture
def kube_api(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KubeApi]:
    """API access in a fresh namespace: the fake server, or the `KUBECONFIG` cluster."""
    namespace = f"t-{uuid.uuid4().hex[:12]}"
    real = os.environ.get(KUBECONFIG_ENV)
    server: FakeApiServer | None = None
    if real:
        kubeconfig = Path(real.split(os.pathsep)[0])
        api_client = new_api_client(real)
    else:
        server = request.getfixturevalue("fake_api_server")
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig", namespace=namespace)
        api_client = new_api_client(kubeconfig)
    core = client.CoreV1Api(api_client)
    core.create_namespace(
        client.V1Namespace(
            metadata=client.V1ObjectMeta(name=namespace, labels={TEST_NAMESPACE_LABEL: "true"})
        )
    )
    if real:
        # The controller-manager publishes kube-root-ca.crt a moment after the namespace
        # exists; a test that watches ConfigMaps must not see it arrive mid-test.
        _wait_for_root_ca(core, namespace)
    try:
        yield KubeApi(api_client, kubeconfig, namespace, server)
    finally:
        try:
            if server is not None:
                server.faults.clear()
            core.delete_namespace(namespace, propagation_policy="Background")
        except client.ApiException as exc:
            if exc.status != 404:
                raise
        finally:
            close_api_client(api_client)


@pytest.fixture
def fake_controllers(kube_api: KubeApi) -> Iterator[Controllers]:
    """Job controller and kubelet simulators for the test namespace (fake server only)."""
    kube_api.fake  # noqa: B018 -- skips the test on a real cluster, which has its own
    controllers = Controllers(kube_api.api_client, namespace=kube_api.namespace)
    try:
        yield controllers
    finally:
        controllers.stop()


def _wait_for_root_ca(core: client.CoreV1Api, namespace: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        items = core.list_namespaced_config_map(namespace).items
        names = [cm.metadata.name for cm in items if cm.metadata is not None]
        if "kube-root-ca.crt" in names:
            return
        time.sleep(0.1)
