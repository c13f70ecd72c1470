"""The in-cluster service account read without the `kubernetes` package."""

from __future__ import annotations

from pathlib import Path

import pytest

from syncer.kube.client import KubeClient
from syncer.kube.incluster import NotInClusterError, ServiceAccount
from tests.fakeapi.server import FakeApiServer
from tests.syncer.fakedashboard import ManualClock

REPO = Path(__file__).resolve().parents[2]


def _mount(tmp_path: Path, token: str = "first-token") -> Path:
    (tmp_path / "token").write_text(token + "\n")
    (tmp_path / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    (tmp_path / "namespace").write_text("kuberay-system\n")
    return tmp_path


def test_the_service_account_is_read_from_the_pod_environment(tmp_path: Path) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    account = ServiceAccount.load(env, _mount(tmp_path))
    assert account.host == "https://10.96.0.1:443"
    assert account.ca_file == str(tmp_path / "ca.crt")
    assert account.namespace == "kuberay-system"
    assert account.headers() == {"Authorization": "Bearer first-token"}
    ipv6 = ServiceAccount.load({**env, "KUBERNETES_SERVICE_HOST": "fd00::1"}, tmp_path)
    assert ipv6.host == "https://[fd00::1]:443"


def test_the_token_is_read_again_once_a_minute_old(tmp_path: Path) -> None:
    clock = ManualClock(0.0)
    _mount(tmp_path)
    account = ServiceAccount("https://h:443", "", str(tmp_path / "token"), clock=clock)
    assert account.token() == "first-token"
    (tmp_path / "token").write_text("rotated-token\n")  # the kubelet rotates it
    clock.advance(30.0)
    assert account.token() == "first-token"
    clock.advance(31.0)
    assert account.token() == "rotated-token"
    (tmp_path / "token").unlink()  # a failed re-read keeps the last good token
    clock.advance(61.0)
    assert account.token() == "rotated-token"


@pytest.mark.parametrize(
    ("env", "files", "message"),
    [
        ({}, True, "KUBERNETES_SERVICE_HOST/PORT are not set"),
        ({"KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": "443"}, False, "no such file"),
    ],
)
def test_outside_a_pod_it_says_why(
    tmp_path: Path, env: dict[str, str], files: bool, message: str
) -> None:
    if files:
        _mount(tmp_path)
    with pytest.raises(NotInClusterError, match=message):
        ServiceAccount.load(env, tmp_path)


def test_an_empty_token_is_refused_at_load(tmp_path: Path) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(NotInClusterError, match="empty"):
        ServiceAccount.load(env, _mount(tmp_path, token=""))


def test_the_client_sends_the_bearer_token_and_reads_objects(tmp_path: Path) -> None:
    from syncer.kube.client import CONFIGMAPS

    _mount(tmp_path)
    with FakeApiServer() as server:
        server.put_object(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "cm", "namespace": "default"},
                "data": {"a": "1"},
            }
        )
        kube = KubeClient(ServiceAccount(server.url, "", str(tmp_path / "token")))
        try:
            cm = kube.get(CONFIGMAPS, "default", "cm")
            assert cm is not None and cm["data"] == {"a": "1"}
            assert kube._headers(None)["Authorization"] == "Bearer first-token"
        finally:
            kube.close()


# The daemon path's imports (neither kubernetes nor urllib3): tests/syncer/test_transport.py.
