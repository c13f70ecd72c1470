"""The daemon's own dashboard clients under attack (issue 8: H4, C2, M3, M4).

The `Syncer` runs on the fake API server with its real HTTP clients (`syncer.dashboards`)
against `tests.syncer.rayhttp.RayHttp` on 127.0.0.1. The test plays cluster DNS only:
every head Service name resolves to 127.0.0.1, and the port dialled is whatever the live
head Service says (the tests set it to the server's port; the intents still say 8265).
Each test asserts what must not happen (a token sent to another namespace's head, a
Secret read outside a cluster's namespace, a storm of Secret reads or of requests to a
dead head, a reply read past the cap) and that ordinary jobs beside the attack complete.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from renderer import naming
from syncer import dashboards
from syncer.cli import Options, Syncer
from syncer.errors import ConflictError, NotLeaderError, TransientError
from syncer.install import build_syncer_manifests
from syncer.kube.client import CONFIGMAPS, SECRETS, SERVICES, KubeClient
from syncer.ray.dashboard import DashboardError, HttpDashboard
from syncer.rayjob.machine import Settings
from tests.fakeapi.controllers import Controllers
from tests.fakeapi.fixtures import KubeApi
from tests.syncer.daemon import Daemon
from tests.syncer.fakedashboard import FakeDashboard, JobPlan
from tests.syncer.harness import apply, render, wait_until
from tests.syncer.rayhttp import RayHttp

Manifest = dict[str, Any]
_LOG = logging.getLogger(__name__)  # the counts, for the report (-o log_cli=true)

JOB = """
apiVersion: ray.io/v1
kind: RayJob
metadata:
  name: {name}
spec:
  entrypoint: python -c "print(1)"
  submissionMode: HTTPMode
  rayClusterSpec:
    rayVersion: "2.52.0"
{auth}    headGroupSpec:
      template:
        spec:
          containers:
          - name: ray-head
            image: rayproject/ray:2.52.0
    workerGroupSpecs:
    - groupName: small
      replicas: 1
      template:
        spec:
          containers:
          - name: ray-worker
            image: rayproject/ray:2.52.0
"""
OWN_AUTH = "    authOptions:\n      mode: token\n      secretName: own-token\n"


@dataclass
class World:
    kube: KubeClient
    kube_api: KubeApi
    a: str
    b: str
    ray: RayHttp
    controllers: Controllers
    syncers: list[Syncer]

    def syncer(self, is_leader: Callable[[], bool] = lambda: True, **dashboard: Any) -> Syncer:
        """The daemon's parts with its own HTTP clients; the test plays DNS only."""
        settings = dashboards.Settings(
            timeout_s=1.0,
            auth_secret="ray-token",
            resolve=lambda host: "127.0.0.1",
            **dashboard,
        )
        options = Options(
            namespaces=(self.a, self.b),
            workers=4,
            poll_interval_s=0.2,
            settings=Settings(submitter_finished_timeout_s=30),
            dashboard=settings,
        )
        syncer = Syncer(self.kube, options, is_leader=is_leader)
        self.syncers.append(syncer)
        return syncer

    def job(self, name: str, namespace: str, auth: str = "") -> None:
        """Apply a rendered HTTPMode RayJob; its live head Service points at the server."""
        objects = render(JOB.format(name=name, auth=auth), namespace)
        apply(self.kube, objects, namespace)
        for obj in objects:
            if obj["kind"] == "Service" and obj["metadata"]["name"].endswith("-head-svc"):
                live = self.kube.get(SERVICES, namespace, obj["metadata"]["name"])
                assert live is not None
                for port in live["spec"]["ports"]:
                    if port["name"] == "dashboard":
                        port["port"] = self.ray.port
                self.kube.replace(SERVICES, namespace, live)

    def secret(self, namespace: str, name: str, token: str) -> None:
        """Create or replace a token Secret."""
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "data": {"auth_token": base64.b64encode(token.encode()).decode()},
        }
        try:
            self.kube.create(SECRETS, namespace, body)
        except ConflictError:  # exists: patch it (no GET, so the audit counts only the syncer's)
            self.kube.patch(SECRETS, namespace, name, {"data": body["data"]})

    def status(self, namespace: str, name: str) -> Manifest:
        """The published RayJob status ({} before the first)."""
        cm = self.kube.get(CONFIGMAPS, namespace, naming.status_configmap_name(name))
        if cm is None:
            return {}
        status: Manifest = json.loads(cm["data"]["status.json"])["status"]
        return status

    def complete(self, namespace: str, name: str, timeout: float = 40.0) -> Manifest:
        """Wait for the job's Complete status."""
        status: Manifest = wait_until(
            lambda: (
                self.status(namespace, name)
                if self.status(namespace, name).get("jobDeploymentStatus") == "Complete"
                else None
            ),
            timeout=timeout,
            what=f"{namespace}/{name} to complete",
        )
        return status

    def secret_reads(self, since: int) -> list[tuple[str, str]]:
        """(namespace, name) of every Secret GET the syncer made since the audit mark."""
        records = self.kube_api.fake.audit.records(verb="get", resource="secrets", since=since)
        return [(str(r.namespace), str(r.name)) for r in records]


@pytest.fixture
def world(kube_api: KubeApi) -> Iterator[World]:
    kube_api.fake  # noqa: B018 - the simulators need the fake server
    a, b = kube_api.namespace, f"{kube_api.namespace}-b"
    kube_api.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=b)))
    ray = RayHttp(FakeDashboard(time.time, job_plan=JobPlan(pending_s=0.2, running_s=0.3)))
    ray.start()
    controllers = Controllers(kube_api.api_client)  # every namespace
    world = World(KubeClient(kube_api.api_client), kube_api, a, b, ray, controllers, [])
    yield world
    for syncer in world.syncers:
        syncer.stop()
    controllers.stop()
    ray.close()


def test_a_namespaces_token_goes_only_to_that_namespaces_heads(world: World) -> None:
    a, b, ray = world.a, world.b, world.ray
    world.secret(a, "ray-token", "token-a")
    world.secret(b, "ray-token", "token-b")
    world.secret(a, "own-token", "token-own")  # authOptions.secretName of one cluster in A
    ray.tokens.update({a: "token-a", b: "token-b"})
    world.job("plain", a)
    world.job("owned", a, auth=OWN_AUTH)
    world.job("plain", b)
    owned_head = next(
        s["metadata"]["name"]
        for s in world.kube.list(SERVICES, a)[0]
        if s["metadata"]["labels"].get(naming.ORIGIN_NAME) == "owned"
        and s["metadata"]["name"].endswith("-head-svc")
        and s["metadata"]["labels"].get(naming.RAY_CLUSTER)
    )
    ray.tokens[owned_head] = "token-own"
    since = world.kube_api.fake.audit.mark()
    world.controllers.start(interval=0.05)
    world.syncer().start()
    for namespace, name in ((a, "plain"), (a, "owned"), (b, "plain")):
        assert world.complete(namespace, name)["jobStatus"] == "SUCCEEDED"
    to_a = [s for s in ray.requests(a) if s.service != owned_head]
    to_owned = ray.requests(a, owned_head)
    to_b = ray.requests(b)
    assert to_a and to_owned and to_b
    # Each head got its own namespace's (or its cluster's own) token, and never another's.
    assert {s.auth for s in to_a} == {"Bearer token-a"}
    assert {s.auth for s in to_owned} == {"Bearer token-own"}
    assert {s.auth for s in to_b} == {"Bearer token-b"}
    assert not [s for s in ray.requests() if s.status == 401]
    # The Secrets read: each in its cluster's namespace, once each (cached); none elsewhere.
    reads = world.secret_reads(since)
    assert sorted(set(reads)) == sorted({(a, "ray-token"), (a, "own-token"), (b, "ray-token")})
    assert len(reads) == 3
    # The rendered RBAC grants exactly the configured name's reads, in the watched
    # namespaces; the per-cluster name is the one an operator grants (README).
    granted = _granted_secret_reads(a, b, "ray-token")
    assert granted == {(a, "ray-token"), (b, "ray-token")}
    assert set(reads) - granted == {(a, "own-token")}
    _LOG.info(
        f"requests: {len(to_a)} to A's head, {len(to_owned)} to the own-token head, "
        f"{len(to_b)} to B's head; Secret reads {len(reads)}"
    )


def _granted_secret_reads(a: str, b: str, secret: str) -> set[tuple[str, str]]:
    """(namespace, name) of the Secrets `kuberay syncer-manifests` lets the syncer get."""
    objects = build_syncer_manifests(
        namespace="kuberay-system",
        image="syncer:test",
        watch_namespaces=[a, b],
        config={"dashboard_auth_secret": secret},
    )
    granted = set()
    for role in (o for o in objects if o["kind"] == "Role"):
        for rule in role["rules"]:
            if "secrets" in rule["resources"]:
                assert rule["verbs"] == ["get"]
                names = rule.get("resourceNames") or []
                assert names, "secrets by name only"
                granted |= {(role["metadata"]["namespace"], name) for name in names}
    return granted


def test_a_401_rereads_the_secret_once_not_per_request(world: World) -> None:
    a, ray = world.a, world.ray
    world.secret(a, "ray-token", "stale")
    ray.tokens[a] = "fresh"
    for name in ("one", "two", "three"):
        world.job(name, a)
    since = world.kube_api.fake.audit.mark()
    world.controllers.start(interval=0.05)
    world.syncer(reread_s=5.0).start()
    wait_until(
        lambda: len([s for s in ray.requests(a) if s.status == 401]) >= 30,
        timeout=30,
        what="30 unauthorized requests",
    )
    unauthorized = len([s for s in ray.requests(a) if s.status == 401])
    reads = len(world.secret_reads(since))
    # One Secret for the namespace, re-read at most once in 5 s whatever the 401s.
    assert reads * 5 <= unauthorized
    assert {s.auth for s in ray.requests(a)} == {"Bearer stale"}
    world.secret(a, "ray-token", "fresh")  # rotation: picked up by the next 401's re-read
    for name in ("one", "two", "three"):
        assert world.complete(a, name)["jobStatus"] == "SUCCEEDED"
    total = len(world.secret_reads(since))
    _LOG.info(
        "401 replies %s, Secret reads then %s, after the rotation %s", unauthorized, reads, total
    )


def test_hostile_heads_cost_bounded_requests_and_bytes_beside_an_ordinary_job(
    world: World,
) -> None:
    a, b, ray = world.a, world.b, world.ray
    ray.trickle_s = 0.05
    ray.huge_bytes = 512 * 1024 * 1024
    for name in ("slow", "big", "dead"):
        world.job(name, b)
    heads = {
        s["metadata"]["labels"][naming.ORIGIN_NAME]: s["metadata"]["name"]
        for s in world.kube.list(SERVICES, b)[0]
        if s["metadata"]["name"].endswith("-head-svc")
        and s["metadata"]["labels"].get(naming.RAY_CLUSTER)
    }
    ray.mode.update({heads["slow"]: "trickle", heads["big"]: "huge", heads["dead"]: "down"})
    world.job("plain", a)
    world.controllers.start(interval=0.05)
    syncer = world.syncer(max_reply_bytes=1024 * 1024, breaker_base_s=1.0, breaker_max_s=4.0)
    syncer.start()
    began = time.monotonic()
    assert world.complete(a, "plain")["jobStatus"] == "SUCCEEDED"
    time.sleep(max(0.0, 8.0 - (time.monotonic() - began)))  # let the breakers cycle
    elapsed = time.monotonic() - began
    counts = {name: len(ray.requests(b, head)) for name, head in heads.items()}
    # Threshold 5, then one probe per backoff of 1, 2, 4, 4 s: a handful, not 5 a second.
    for name, count in counts.items():
        assert 0 < count <= 5 + int(elapsed), (name, count)
    # The big head pushed at most the cap plus socket buffers per request, never 512 MiB.
    assert ray.written.get(heads["big"], 0) <= counts["big"] * 16 * 1024 * 1024
    # The slow head's trickle was cut at each request's 1 s deadline (400 bytes = 20 s).
    assert ray.written.get(heads["slow"], 0) <= counts["slow"] * 40
    for name in ("slow", "big", "dead"):
        assert world.status(b, name).get("jobDeploymentStatus") != "Complete"
    assert syncer.healthy()
    _LOG.info(
        f"over {elapsed:.1f}s: requests {counts}; bytes pushed "
        f"big={ray.written.get(heads['big'], 0)} slow={ray.written.get(heads['slow'], 0)}"
    )


def test_no_dashboard_mutation_goes_out_without_a_fresh_lease(world: World) -> None:
    ray = world.ray
    client = HttpDashboard(
        f"http://head-svc.{world.a}.svc.cluster.local:{ray.port}",
        timeout=1.0,
        resolve=lambda host: "127.0.0.1",
        fence=lambda: False,
    )
    assert client.list_jobs() == []  # reads pass
    with pytest.raises(NotLeaderError):
        client.submit_job("x", "true")
    with pytest.raises(NotLeaderError):
        client.stop_job("x")
    with pytest.raises(NotLeaderError):
        client.put_serve_applications({"applications": []})
    assert [s.method for s in ray.requests()] == ["GET"]


class LosingLease(FakeDashboard):
    """A head whose first job list coincides with the syncer losing its lease mid-pass."""

    def __init__(self) -> None:
        super().__init__(time.time, job_plan=JobPlan(pending_s=0.2, running_s=0.3))
        self.fresh = True
        self.lost_in_a_pass = 0

    def list_jobs(self) -> list[Any]:
        jobs = super().list_jobs()
        if self.lost_in_a_pass == 0:
            self.fresh = False  # after the pass's own leader check, before its Submit
            self.lost_in_a_pass = 1
        return jobs


def test_a_lease_lost_mid_pass_sends_no_submission(world: World) -> None:
    a, ray = world.a, world.ray
    head = LosingLease()
    ray.dashboard = head
    world.job("plain", a)
    world.controllers.start(interval=0.05)
    syncer = world.syncer(is_leader=lambda: head.fresh)
    syncer.start()
    wait_until(lambda: syncer.engine.stats["not_leader"] >= 1, what="a pass refused mid-way")
    time.sleep(1.0)  # passes keep being refused while the lease is not fresh
    assert [s.method for s in ray.requests()] == ["GET"]  # the list; no POST went out
    assert head.calls["submit_job"] == 0
    head.fresh = True  # the lease is back: the next pass submits once and completes
    syncer.engine.enqueue_all()
    assert world.complete(a, "plain")["jobStatus"] == "SUCCEEDED"
    assert head.calls["submit_job"] == 1


def test_the_port_dialled_is_the_live_services_and_nothing_else(world: World) -> None:
    a, ray = world.a, world.ray
    world.job("plain", a)
    since = world.kube_api.fake.audit.mark()
    syncer = world.syncer()
    assert syncer.start_informers(30)
    factory = syncer.http
    assert factory is not None
    # One Services cache: the dashboard clients and the RayCluster status read the same one,
    # which lists and watches each namespace once, and holds only Ray clusters' Services:
    # the RayJob's own head Service (`plain-head-svc`, no `ray.io/cluster`) is not cached.
    assert syncer.raycluster.services is syncer.services
    assert world.kube.get(SERVICES, a, "plain-head-svc") is not None
    assert syncer.services.get(a, "plain-head-svc") is None
    for verb in ("list", "watch"):
        for namespace in (a, world.b):
            records = world.kube_api.fake.audit.records(
                verb=verb, resource="services", namespace=namespace, since=since
            )
            assert len(records) == 1, (verb, namespace, records)
    (head,) = [
        s["metadata"]["name"]
        for s in world.kube.list(SERVICES, a)[0]
        if s["metadata"]["name"].endswith("-head-svc")
        and s["metadata"]["labels"].get(naming.RAY_CLUSTER)
    ]
    assert [s["metadata"]["name"] for s in syncer.services.items()] == [head]
    url = f"http://{head}.{a}.svc.cluster.local:8265"  # what the intent says
    assert factory.live_port(a, head) == ray.port
    assert factory(url).list_jobs() == []
    assert [s.host for s in ray.requests()] == [f"{head}.{a}.svc.cluster.local:{ray.port}"]
    # A URL of any other form is refused before anything is dialled.
    for bad in (
        "",
        f"http://{head}.{a}.svc.evil.example:8265",
        f"http://{head}.{a}.svc.cluster.local:8265/proxy",
        "http://169.254.169.254:80",
        f"http://unknown-svc.{a}.svc.cluster.local:8265",
    ):
        with pytest.raises((DashboardError, TransientError)):
            factory(bad).list_jobs()
    assert len(ray.requests()) == 1


def test_a_head_service_without_its_dashboard_port_is_not_dialled_on_another(
    world: World,
) -> None:
    # The Services cache keeps every named port (the RayCluster status reads them all): a
    # tenant who renames the `dashboard` port and points `client` at a server of its own
    # still gets nothing dialled, and the RayJob's own head Service (not cached) changes
    # nothing either.
    a, ray = world.a, world.ray
    world.job("plain", a)
    syncer = world.syncer()
    assert syncer.start_informers(30)
    factory = syncer.http
    assert factory is not None
    (head,) = [s["metadata"]["name"] for s in syncer.services.items()]
    live = world.kube.get(SERVICES, a, head)
    assert live is not None
    for port in live["spec"]["ports"]:
        if port["name"] == "dashboard":
            port["name"] = "dash"
        elif port["name"] == "client":
            port["port"] = ray.port
    world.kube.replace(SERVICES, a, live)
    wait_until(
        lambda: all(
            p.get("name") != "dashboard"
            for p in (syncer.services.get(a, head) or {}).get("spec", {}).get("ports", [])
        ),
        what="the edited head Service cached",
    )
    with pytest.raises(TransientError, match="no 'dashboard' port"):
        factory.live_port(a, head)
    with pytest.raises(TransientError):
        factory(f"http://{head}.{a}.svc.cluster.local:8265").list_jobs()
    assert ray.requests() == []
    assert syncer.healthy()


def test_the_daemon_with_an_auth_secret_starts_and_reads_it_only_where_clusters_are(
    kube_api: KubeApi, world: World, tmp_path: Path
) -> None:
    # The crash-loop of H4: the old daemon read the Secret in its own namespace at start-up,
    # which the rendered Roles do not grant, and exited. Now nothing is read at start-up.
    own = f"{world.a}-sys"
    kube_api.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=own)))
    world.secret(world.a, "ray-token", "token-a")
    config = tmp_path / "syncer.yaml"
    config.write_text(
        f"namespaces: [{world.a}]\ndashboard_auth_secret: ray-token\ndashboard_timeout_s: 1\n"
        "poll_interval_s: 0.2\nhealth_port: 0\nmetrics_port: 0\nbind_address: 127.0.0.1\n"
    )
    since = kube_api.fake.audit.mark()
    daemon = Daemon.start(
        identity="syncer-auth",
        kubeconfig=kube_api.kubeconfig,
        config=config,
        namespace=own,
        dashboard_url=None,  # the daemon's own HTTP clients
        workdir=tmp_path,
    )
    try:
        daemon.wait_ready()
        world.job("plain", world.a)
        world.controllers.start(interval=0.05)

        def reads() -> list[tuple[str, str]]:
            records = kube_api.fake.audit.records(verb="get", resource="secrets", since=since)
            return [
                (str(r.namespace), str(r.name))
                for r in records
                if r.user_agent == daemon.user_agent
            ]

        # No cluster DNS here: its dial fails, but the token was read for it first.
        wait_until(reads, timeout=30, what="the daemon to read the cluster's Secret")
        time.sleep(1.0)
        assert daemon.alive()
        assert set(reads()) == {(world.a, "ray-token")}
    finally:
        daemon.terminate()
