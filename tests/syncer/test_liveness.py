"""`/healthz` of a running `kuberay-syncer` process, through its real HTTP endpoint (review H2, M7).

The daemon (`tests.syncer.daemon`, the real `serve`) runs against the fake API server; the
test breaks it from inside by signal (a dead informer thread, a lease loop that stops
renewing a held lease) and reads the probe over loopback HTTP, as the kubelet would.
"""

from __future__ import annotations

import signal
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from syncer.kube.client import LEASES, KubeClient
from tests.fakeapi.fixtures import KubeApi
from tests.syncer.daemon import Daemon
from tests.syncer.harness import wait_until
from tests.syncer.test_faults import write_config


def probe(url: str) -> tuple[int, str]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read().decode()


@pytest.fixture
def daemon(kube_api: KubeApi, tmp_path: Path) -> Iterator[Daemon]:
    kube_api.fake  # noqa: B018 - the signals' effects need the fake server's faults
    started = Daemon.start(
        identity="syncer-live",
        kubeconfig=kube_api.kubeconfig,
        config=write_config(tmp_path / "syncer.yaml", kube_api.namespace),
        namespace=kube_api.namespace,
        dashboard_url=None,
        workdir=tmp_path,
    )
    try:
        started.wait_ready()
        yield started
    finally:
        started.stop()


def test_a_dead_informer_thread_fails_healthz_with_500(daemon: Daemon, kube_api: KubeApi) -> None:
    healthz = f"{daemon.health_url()}/healthz"
    assert probe(healthz) == (200, "ok\n")
    daemon.signal(signal.SIGUSR1)  # the ConfigMap informers end at their next watch ...
    wait_until(lambda: kube_api.fake.faults.drop_watches() >= 0 and probe(healthz)[0] == 500)
    assert probe(healthz) == (500, "not healthy\n")
    assert daemon.alive()  # the process lives on: only the probe tells


def test_a_held_lease_that_is_no_longer_renewed_fails_healthz_with_500(
    daemon: Daemon, kube_api: KubeApi
) -> None:
    kube = KubeClient(kube_api.api_client, user_agent="test")

    def holder() -> str:
        lease = kube.get(LEASES, kube_api.namespace, "kuberay-syncer")
        return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")

    wait_until(lambda: holder() == daemon.identity, what="the daemon to hold the lease")
    healthz = f"{daemon.health_url()}/healthz"
    assert probe(healthz) == (200, "ok\n")
    daemon.signal(signal.SIGUSR2)  # the lease loop blocks: held, not renewed
    wait_until(lambda: probe(healthz)[0] == 500, what="healthz to fail (lease duration 2 s)")
    assert probe(healthz) == (500, "not healthy\n")
    assert holder() == daemon.identity  # nobody released it: still held, just stale
