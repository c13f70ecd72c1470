"""The actuator killed with SIGKILL in the middle of a pass, and a second daemon taking over.

The real daemon (`tests.syncer.daemon`) runs against the fake API server with every Pod
create slowed to 0.5 s, so a pass that creates four workers is still running when the
first daemon dies; the second one (after the Lease expires) must finish the set with no
duplicate, no second state map and distinct replica indexes: creation is by exact name,
and a 409 means the Pod is already there.
"""

from __future__ import annotations

from pathlib import Path

from renderer import naming
from syncer.kube.client import KubeClient
from tests.autoscaler import rig
from tests.fakeapi.fixtures import KubeApi
from tests.syncer.daemon import Daemon
from tests.syncer.harness import wait_until
from tests.syncer.test_faults import write_config


def test_a_daemon_killed_mid_pass_leaves_a_set_the_next_one_completes(
    kube_api: KubeApi, tmp_path: Path
) -> None:
    server, ns = kube_api.fake, kube_api.namespace
    kube = KubeClient(kube_api.api_client, user_agent="test")
    rig.apply_cluster(kube, ns, bounds={"min": 0, "max": 5, "replicas": 4})
    config = write_config(tmp_path / "syncer.yaml", ns)
    slow = server.faults.add_latency(0.5, verb="create", resource="pods")

    def daemon(identity: str) -> Daemon:
        return Daemon.start(
            identity=identity,
            kubeconfig=kube_api.kubeconfig,
            config=config,
            namespace=ns,
            dashboard_url=None,
            workdir=tmp_path,
        )

    first = daemon("syncer-a")
    second: Daemon | None = None
    try:
        wait_until(lambda: len(rig.dynamic_pods(kube, ns)) >= 1, timeout=60, what="a worker")
        assert first.kill() == -9
        made = len(rig.dynamic_pods(kube, ns))
        assert made < 4, "the pass ended before the kill: nothing tested"
        server.faults.remove(slow)
        second = daemon("syncer-b")
        wait_until(lambda: len(rig.dynamic_pods(kube, ns)) == 4, timeout=60, what="4 workers")
    finally:
        first.stop()
        if second is not None:
            second.stop()
    desired = rig.state_data(kube, ns)
    workers = rig.dynamic_pods(kube, ns)
    assert {p["metadata"]["name"] for p in workers} == set(desired)
    indexes = {p["metadata"]["labels"][naming.RAY_REPLICA_INDEX] for p in workers}
    assert indexes == {"0", "1", "2", "3"}
    state_creates = [
        r
        for r in server.audit.records(verb="create", resource="configmaps")
        if r.code == 201 and r.name == f"{rig.CLUSTER}-autoscaler-state"
    ]
    assert len(state_creates) == 1
    creates = [r for r in server.audit.records(verb="create", resource="pods") if r.code == 201]
    # The head (by the test) and each worker exactly once.
    assert len(creates) == 1 + 4
