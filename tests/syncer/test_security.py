"""Adversarial tests of the syncer's trust boundary (issue 8, review ids C1, C2, H1).

A tenant who can create ConfigMaps in one watched namespace writes forged intents; the
fake API server's audit log counts what the syncer then writes in each namespace, and a
loopback HTTP server counts what it dials. The ordinary job beside the forgeries must still
complete: refusing the forgery may not stop the syncer.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from renderer import naming
from syncer.cli import Options, Syncer
from syncer.errors import SyncerError
from syncer.kube.client import CONFIGMAPS, KubeClient
from syncer.ray.dashboard import DashboardError, HttpDashboard
from syncer.ray.types import Dashboard
from syncer.rayjob.machine import Settings
from tests.fakeapi.controllers import Controllers
from tests.fakeapi.fixtures import KubeApi
from tests.syncer.fakedashboard import FakeDashboard, JobPlan
from tests.syncer.harness import apply, render, wait_until
from tests.syncer.test_rayjob_reconciler import Rig, demo_job, play_submitter

Manifest = dict[str, Any]


class Counting(http.server.BaseHTTPRequestHandler):
    """Counts every request; answers 302 to `location` when set, else 200 `{}`."""

    hits: list[tuple[str, str, str | None]]
    location: str | None

    def _any(self) -> None:
        self.hits.append((self.command, self.path, self.headers.get("X-Ray-Authorization")))
        if self.location:
            self.send_response(302)
            self.send_header("Location", self.location + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = b"{}"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._any()

    def do_POST(self) -> None:
        self._any()

    def do_PUT(self) -> None:
        self._any()

    def log_message(self, format: str, *args: Any) -> None:
        return


def serve(location: str | None = None) -> tuple[http.server.HTTPServer, list[Any]]:
    """A loopback HTTP server on 127.0.0.1 that counts requests."""
    hits: list[Any] = []
    handler = type("H", (Counting,), {"hits": hits, "location": location})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, hits


@pytest.fixture
def servers() -> Iterator[list[http.server.HTTPServer]]:
    started: list[http.server.HTTPServer] = []
    yield started
    for server in started:
        server.shutdown()
        server.server_close()


@pytest.fixture
def two(kube_api: KubeApi) -> Iterator[tuple[Rig, str, list[str]]]:
    """A syncer watching the test namespace A and a second namespace B."""
    kube_api.fake  # noqa: B018 - the simulators need the fake server
    other = f"{kube_api.namespace}-b"
    kube_api.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=other)))
    kube = KubeClient(kube_api.api_client)
    dashboard = FakeDashboard(time.time, job_plan=JobPlan(pending_s=0.2, running_s=0.3))
    asked: list[str] = []

    def factory(url: str) -> Dashboard:
        # Loopback URLs get the real HTTP client: dialling one would reach the test's server.
        asked.append(url)
        if "127.0.0.1" in url or "localhost" in url:
            return HttpDashboard(url, timeout=2.0, auth_token="s3cr3t")
        return dashboard

    options = Options(
        namespaces=(kube_api.namespace, other),
        workers=2,
        poll_interval_s=0.2,
        settings=Settings(submitter_finished_timeout_s=30),
    )
    syncer = Syncer(kube, options, dashboards=factory)
    controllers = Controllers(kube_api.api_client, namespace=kube_api.namespace)
    rig = Rig(kube, syncer, dashboard, controllers, kube_api.namespace)
    yield rig, other, asked
    syncer.stop()
    controllers.stop()


def _intent(objects: list[Manifest]) -> tuple[Manifest, Manifest]:
    cm = next(o for o in objects if o["metadata"]["name"] == "demo-kuberay-intent")
    return cm, json.loads(cm["data"][naming.INTENT_KEY])


def _forged(name: str, payload: Any, template: Manifest) -> Manifest:
    labels = {**template["metadata"]["labels"], naming.ORIGIN_NAME: name}
    text = payload if isinstance(payload, str) else naming.canonical_json(payload)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": naming.intent_configmap_name(name), "labels": labels},
        "data": {naming.INTENT_KEY: text},
    }


def _complete(rig: Rig) -> Manifest:
    play_submitter(rig)
    status: Manifest = wait_until(
        lambda: rig.status() if rig.status().get("jobDeploymentStatus") == "Complete" else None,
        what="the ordinary job to complete",
    )
    return status


def test_forged_intents_write_nothing_elsewhere_and_dial_nothing(
    two: tuple[Rig, str, list[str]], kube_api: KubeApi, servers: list[Any]
) -> None:
    rig, other, asked = two
    audit = kube_api.fake.audit
    server, hits = serve()
    servers.append(server)
    loopback = f"http://127.0.0.1:{server.server_address[1]}"
    # The victim: a cluster in namespace B (its pods, no intent of its own in B).
    victim = render(demo_job(mode="HTTPMode"), other)
    apply(rig.kube, [o for o in victim if o["kind"] == "Pod"], other)
    _, victim_intent = _intent(victim)
    # The ordinary job in A.
    ordinary = render(demo_job(mode="K8sJobMode"), rig.namespace)
    apply(rig.kube, ordinary, rig.namespace)
    template, _ = _intent(ordinary)
    # C1: B's payload, claiming namespace B, stop at once; also under a mismatched CM name.
    claim_b = {
        **victim_intent,
        "metadata": {**victim_intent["metadata"], "namespace": other, "name": "evil"},
        "spec": {**victim_intent["spec"], "activeDeadlineSeconds": 0},
    }
    # C1: no metadata at all, B's pod names in the derived block (they do not exist in A).
    no_meta = {k: v for k, v in claim_b.items() if k != "metadata"}
    # C2: a payload URL that points at the loopback server.
    derived = {**victim_intent["derived"], "dashboardURL": loopback}
    url = {**no_meta, "derived": derived, "spec": victim_intent["spec"]}
    # H1: a payload that is not an object, and one over the cache cap.
    forged = [
        _forged("evil", claim_b, template),
        _forged("nometa", no_meta, template),
        _forged("url", url, template),
        _forged("list", "[]", template),
        _forged("big", {"kind": "RayJob", "pad": "x" * 300_000}, template),
    ]
    misnamed = _forged("evil2", claim_b, template)
    misnamed["metadata"]["name"] = "innocent-kuberay-intent"
    for cm in [*forged, misnamed]:
        rig.kube.create(CONFIGMAPS, rig.namespace, cm)
    since = audit.mark()
    rig.controllers.start(interval=0.05)
    rig.syncer.start()
    status = _complete(rig)
    assert status["jobStatus"] == "SUCCEEDED"
    # Give the forged keys passes of their own after the ordinary job finished.
    rig.syncer.engine.enqueue_all()
    time.sleep(1.0)
    # B's own cluster gets its RayCluster status (its pods are the renderer's, in B); the
    # forgeries in A make nothing else happen there.
    victim_cluster = str(victim_intent["derived"]["clusterName"])
    writes_b = [
        r
        for r in audit.writes(namespace=other, since=since)
        if not (r.name or "").startswith(victim_cluster)
    ]
    assert writes_b == []
    assert hits == []
    assert not [u for u in asked if "127.0.0.1" in u]
    # Each refused intent got one Event in A (the namespace of its ConfigMap).
    events = [r for r in audit.writes(resource="events", since=since) if r.namespace != other]
    refused = {r.name.split(".")[0] for r in events if r.name}
    assert {"evil", "nometa", "url", "list", "big"} <= refused
    # The informers are all alive: the `[]` intent killed none of them.
    informers = rig.syncer.engine.informers()
    assert all(i.alive and i.crashes == 0 for i in informers)


def test_a_redirect_from_a_dashboard_is_not_followed(servers: list[Any]) -> None:
    target, stolen = serve()
    servers.append(target)
    redirecting, hits = serve(location=f"http://127.0.0.1:{target.server_address[1]}/steal")
    servers.append(redirecting)
    client = HttpDashboard(
        f"http://127.0.0.1:{redirecting.server_address[1]}", timeout=2.0, auth_token="s3cr3t"
    )
    with pytest.raises(SyncerError):
        client.list_jobs()
    assert len(hits) == 1
    assert stolen == []


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/#",
        "http://user@head:8265",
        "http://head:8265?q=1",
    ],
)
def test_a_dashboard_url_with_user_query_or_fragment_is_refused(url: str) -> None:
    with pytest.raises(DashboardError, match="must have no"):
        HttpDashboard(url, timeout=1.0)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_dead_informer_thread_fails_liveness(two: tuple[Rig, str, list[str]]) -> None:
    rig = two[0]
    rig.syncer.start()
    assert rig.syncer.healthy()
    informer = rig.syncer.engine.informers()[0]
    calls = {"n": 0}

    def broken() -> int:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("a bug in a watch")  # caught: the loop backs off and lives
        raise SystemExit("the thread is gone")  # not an Exception: the thread ends

    informer._watch_once = broken  # type: ignore[method-assign]
    informer.stop()  # end the current watch soon; restart the loop on the patched method
    informer.join(30)
    informer._stop.clear()
    informer.start()
    wait_until(lambda: calls["n"] >= 2, what="the broken watch to run twice")
    informer.join(5)
    assert informer.crashes == 1
    assert not informer.alive
    assert not rig.syncer.healthy()
