"""Fixtures of the realapi tests: one real control plane and test kubelet per test session.

Every test under tests/realapi is marked `realapi` (`./run test -m realapi` runs just these).
`control_plane` starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler
once per session (binaries from tools/k8s/build) and fails, never skips, when it cannot;
`test_kubelet` registers a Node and runs the Python kubelet; `real` gives each test a fresh
namespace with the default ServiceAccount already created by the real controller; `rig`
runs the rendered syncer daemon for that namespace (tests/realapi/rig.py).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.realapi.controlplane import ControlPlane, ControlPlaneError, binaries
from tests.realapi.crds import all_crds
from tests.realapi.gitops import apply_all
from tests.realapi.kubelet import TestKubelet, container_command
from tests.realapi.rest import Manifest, Rest, RestError

if TYPE_CHECKING:
    from tests.e2e.rayhead import RayHead
    from tests.realapi.rig import Rig

_HERE = Path(__file__).resolve().parent
_TIMINGS = pytest.StashKey[list[str]]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test in this directory `realapi`."""
    for item in items:
        if _HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.realapi)


class SubmitterRunner:
    """Decides which pods get a real process: only those `wanted` returns a rewrite for.

    Tests register a rewrite per namespace: a function from the pod to (argv, env) or None.
    """

    def __init__(self) -> None:
        self.rewrites: dict[str, object] = {}

    def __call__(self, pod: Manifest) -> tuple[list[str], dict[str, str]] | None:
        rewrite = self.rewrites.get(pod["metadata"].get("namespace", ""))
        if rewrite is None or not callable(rewrite):
            return None
        found: tuple[list[str], dict[str, str]] | None = rewrite(pod, container_command(pod))
        return found


@pytest.fixture(scope="session")
def control_plane(
    pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControlPlane]:
    """etcd, kube-apiserver, kube-controller-manager, kube-scheduler on 127.0.0.1."""
    try:
        plane = ControlPlane(binaries(), workdir=tmp_path_factory.mktemp("control-plane"))
        plane.start()
    except ControlPlaneError as exc:
        pytest.fail(f"could not start the real control plane: {exc}", pytrace=False)
    pytestconfig.stash.setdefault(_TIMINGS, []).append(
        f"real control plane {plane.server}: started in {plane.startup_s:.1f} s"
    )
    try:
        yield plane
    finally:
        began = time.monotonic()
        plane.stop()
        pytestconfig.stash[_TIMINGS].append(
            f"real control plane stopped in {time.monotonic() - began:.1f} s"
        )


@pytest.fixture(scope="session")
def crds(control_plane: ControlPlane) -> list[str]:
    """The Gateway API, cert-manager and monitoring CRDs, installed and Established."""
    rest = Rest(control_plane.server, control_plane.admin_token, ca=control_plane.ca)
    definitions = all_crds()
    failures = apply_all(rest, definitions, namespace="default", manager="realapi-setup")
    assert not failures, failures
    names = [d["metadata"]["name"] for d in definitions]
    deadline = time.monotonic() + 60
    for name in names:
        while True:
            crd = rest.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, name)
            conditions = (crd.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                break
            assert time.monotonic() < deadline, f"CRD {name} not Established: {conditions}"
            time.sleep(0.2)
    return names


@pytest.fixture(scope="session")
def submitters() -> SubmitterRunner:
    """Per-namespace rules for which bound pods the kubelet runs for real."""
    return SubmitterRunner()


@pytest.fixture(scope="session")
def test_kubelet(
    control_plane: ControlPlane,
    submitters: SubmitterRunner,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[TestKubelet]:
    """The Python kubelet of node `realapi-node` (admin identity)."""
    rest = Rest(
        control_plane.server,
        control_plane.admin_token,
        ca=control_plane.ca,
        user_agent="realapi-kubelet",
    )
    kubelet = TestKubelet(rest, log_dir=tmp_path_factory.mktemp("pods"), runner=submitters)
    kubelet.start()
    try:
        yield kubelet
    finally:
        kubelet.stop()


@dataclass
class Real:
    """A test's view of the real cluster: admin REST client and a fresh namespace."""

    plane: ControlPlane
    rest: Rest
    namespace: str
    kubelet: TestKubelet

    def wait_default_service_account(self, namespace: str, timeout: float = 60.0) -> None:
        """Wait until the ServiceAccount controller has created `default` in `namespace`."""
        deadline = time.monotonic() + timeout
        while self.rest.get_or_none("v1", "ServiceAccount", namespace, "default") is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"no default ServiceAccount in {namespace}")
            time.sleep(0.1)

    def namespace_object(self, name: str, labels: dict[str, str] | None = None) -> Manifest:
        """Create a namespace (it is deleted when the test ends if it was made here)."""
        body: Manifest = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        if labels:
            body["metadata"]["labels"] = labels
        try:
            created = self.rest.create(body)
        except RestError as exc:
            if exc.status != 409:
                raise
            created = self.rest.get("v1", "Namespace", None, name)
        self.wait_default_service_account(name)
        return created


@pytest.fixture
def real(control_plane: ControlPlane, test_kubelet: TestKubelet) -> Iterator[Real]:
    """Admin access to the real cluster in a fresh namespace, deleted after the test."""
    rest = Rest(control_plane.server, control_plane.admin_token, ca=control_plane.ca)
    namespace = f"r-{uuid.uuid4().hex[:10]}"
    view = Real(control_plane, rest, namespace, test_kubelet)
    view.namespace_object(namespace)
    try:
        yield view
    finally:
        rest.delete(f"/api/v1/namespaces/{namespace}")


@pytest.fixture
def rig(
    real: Real,
    ray_head: RayHead,
    submitters: SubmitterRunner,
    crds: list[str],
    tmp_path: Path,
) -> Iterator[Rig]:
    """The rendered syncer running for `real`'s namespace; Job-owned pods run for real
    against the session's Ray head (tests/realapi/rig.py)."""
    from tests.realapi.rig import running_syncer, submitter_rewrite  # imports this module

    # `crds`: the syncer watches Gateways and HTTPRoutes, so their kinds must be served.
    submitters.rewrites[real.namespace] = submitter_rewrite(
        ray_head.dashboard_url.removeprefix("http://")
    )
    try:
        with running_syncer(real, ray_head, tmp_path) as found:
            yield found
    finally:
        submitters.rewrites.pop(real.namespace, None)


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    for line in config.stash.get(_TIMINGS, []):
        terminalreporter.write_line(line)
