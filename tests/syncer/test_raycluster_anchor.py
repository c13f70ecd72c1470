"""A cluster's status outlives its head Pod, and its provisioning time counts from creation.

On the fake API server, whose garbage collector deletes a dependent in the same request
as its last owner: the status ConfigMap `<cluster>-kuberay-status` is owned by the head
Service, so replacing the head (a template change gives it a new name) or the syncer's
own recovery of a dead head keeps the map, its uid and its history; a map an older
syncer left owned by the head Pod is moved to the Service before the head is deleted; a
map owned by anything else is not the syncer's and drives nothing.
`kuberay_cluster_provisioned_duration_seconds` counts from the pods' creation, not from
when the syncer first saw them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace

import pytest

from renderer import compile as compiler
from renderer import naming, sources
from renderer.errors import ManifestError
from renderer.options import RenderOptions
from syncer import metrics
from syncer.kube import meta
from syncer.kube.client import CONFIGMAPS, EVENTS, PODS, SERVICES
from syncer.raycluster import reconciler as raycluster
from syncer.raycluster import status as cluster_status
from syncer.raycluster import views
from syncer.raycluster.healing import Backoff
from syncer.raycluster.report import Reporter
from tests.fakeapi.fixtures import KubeApi
from tests.paths import SAMPLES
from tests.syncer.harness import apply, render, wait_until
from tests.syncer.test_raycluster_reconciler import CLUSTER, NAME, Manifest, Rig, make_rig, ready

STATUS = naming.status_configmap_name(NAME)


@pytest.fixture
def rig(kube_api: KubeApi) -> Iterator[Rig]:
    rig = make_rig(kube_api, options=raycluster.Options(debounce_s=0.1, backoff=Backoff(0.5, 2.0)))
    yield rig
    rig.syncer.stop()
    rig.controllers.stop()


def head_of(objects: list[Manifest]) -> Manifest:
    return next(o for o in objects if o["kind"] == "Pod" and "-head-" in o["metadata"]["name"])


def owners(rig: Rig) -> list[tuple[str, str]]:
    cm = rig.status_cm()
    assert cm is not None
    return [(r["kind"], r["uid"]) for r in cm["metadata"].get("ownerReferences") or []]


def service_uid(rig: Rig) -> str:
    service = rig.kube.get(SERVICES, rig.namespace, f"{NAME}-head-svc")
    assert service is not None
    return str(service["metadata"]["uid"])


def test_a_template_change_replaces_the_head_and_keeps_the_status_history(rig: Rig) -> None:
    apply(rig.kube, rig.objects, rig.namespace)
    rig.controllers.start(interval=0.05)
    rig.syncer.start()
    first = wait_until(lambda: ready(rig), what="state ready")
    cm = rig.status_cm()
    assert cm is not None
    assert owners(rig) == [("Service", service_uid(rig))]
    old_head = head_of(rig.objects)["metadata"]["name"]
    provisioned = {c["type"]: c for c in first["conditions"]}["RayClusterProvisioned"]
    time.sleep(1.1)  # a map made again would carry later (whole-second) times
    # A new head template (an env var): a new head Pod name, as KubeRay's hash gives.
    changed = CLUSTER.replace(
        "          image: rayproject/ray:2.52.0\n          resources:\n"
        '            requests: {cpu: "1", memory: 2Gi}',
        "          image: rayproject/ray:2.52.0\n          env: [{name: X, value: '1'}]\n"
        '          resources:\n            requests: {cpu: "1", memory: 2Gi}',
        1,
    )
    objects = render(changed, rig.namespace)
    new_head = head_of(objects)["metadata"]["name"]
    assert new_head != old_head
    # The GitOps sync: prune the old head Pod (the fake collects its dependents at once),
    # create the new one.
    rig.kube.delete(PODS, rig.namespace, old_head)
    apply(rig.kube, [head_of(objects)], rig.namespace)
    after = wait_until(
        lambda: (
            rig.status()
            if rig.status().get("head", {}).get("podName") == new_head
            and rig.status().get("conditions")
            and {c["type"]: c for c in rig.status()["conditions"]}["HeadPodReady"]["status"]
            == "True"
            else None
        ),
        what="the status of the new head",
    )
    kept = rig.status_cm()
    assert kept is not None
    assert kept["metadata"]["uid"] == cm["metadata"]["uid"]  # never deleted
    assert after["stateTransitionTimes"] == first["stateTransitionTimes"]
    again = {c["type"]: c for c in after["conditions"]}["RayClusterProvisioned"]
    assert again["lastTransitionTime"] == provisioned["lastTransitionTime"]
    assert after["state"] == "ready"


def test_an_older_map_owned_by_the_head_moves_to_the_service_before_recovery_deletes_it(
    kube_api: KubeApi,
) -> None:
    options = raycluster.Options(debounce_s=0.1, backoff=Backoff(0.5, 2.0))
    rig = make_rig(kube_api, options=options)
    apply(rig.kube, rig.objects, rig.namespace)
    rig.controllers.start(interval=0.05)
    try:
        rig.syncer.start()
        wait_until(lambda: ready(rig), what="state ready")
        rig.syncer.stop()
        # What the previous syncer version left: the map owned by the head Pod.
        head = rig.pods("head")[0]
        ref = {"apiVersion": "v1", "kind": "Pod", "name": head["metadata"]["name"]}
        ref["uid"] = head["metadata"]["uid"]
        rig.kube.patch(CONFIGMAPS, rig.namespace, STATUS, {"metadata": {"ownerReferences": [ref]}})
        uid = rig.status_cm()["metadata"]["uid"]  # type: ignore[index]
        # The head dies while no syncer runs; a new one starts.
        rig.controllers.kubelet.set_phase(
            rig.namespace, head["metadata"]["name"], "Failed", reason="Evicted"
        )
        audit = kube_api.fake.audit
        since = audit.mark()
        rig = make_rig(kube_api, options=options)
        rig.syncer.start()
        wait_until(
            lambda: rig.kube.get(PODS, rig.namespace, head["metadata"]["name"]) is None,
            what="the dead head deleted",
        )
        # The counter moves after the delete's reply: the pod can be seen gone first.
        wait_until(
            lambda: rig.syncer.raycluster.healer.stats["deleted"] >= 1, what="the delete counted"
        )
        assert rig.syncer.raycluster.healer.stats["deleted"] == 1
        status = wait_until(
            lambda: (
                rig.status()
                if {c["type"]: c for c in rig.status().get("conditions", [])}.get(
                    "HeadPodReady", {}
                ).get("reason")
                == "HeadPodNotFound"
                else None
            ),
            what="the status without a head",
        )
        assert status["state"] == "ready"  # KubeRay never moves ready back
        cm = rig.status_cm()
        assert cm is not None and cm["metadata"]["uid"] == uid
        assert owners(rig) == [("Service", service_uid(rig))]
        # The move was written before the delete (so the collector had nothing to take).
        writes = [
            (r.verb, r.resource, r.name)
            for r in audit.writes(since=since)
            if (r.resource, r.name) in (("configmaps", STATUS), ("pods", head["metadata"]["name"]))
        ]
        assert writes.index(("patch", "configmaps", STATUS)) < writes.index(
            ("delete", "pods", head["metadata"]["name"])
        )
        assert rig.self_heal() == 1
        wait_until(
            lambda: (
                {c["type"]: c for c in rig.status().get("conditions", [])}.get(
                    "HeadPodReady", {}
                ).get("status")
                == "True"
            ),
            what="the re-created head ready",
        )
        assert rig.status_cm()["metadata"]["uid"] == uid  # type: ignore[index]
    finally:
        rig.syncer.stop()
        rig.controllers.stop()


def test_a_map_owned_by_another_object_drives_nothing(rig: Rig, kube_api: KubeApi) -> None:
    apply(rig.kube, rig.objects, rig.namespace)
    decoy = rig.kube.create(
        CONFIGMAPS, rig.namespace, {"metadata": {"name": "decoy"}, "data": {"a": "b"}}
    )
    forged = {
        "metadata": {
            "name": STATUS,
            "labels": {
                naming.MANAGED_BY: "kuberay-syncer",
                naming.ORIGIN_KIND: "RayCluster",
                naming.ORIGIN_NAME: NAME,
                naming.ROLE: "status",
            },
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": "decoy",
                    "uid": decoy["metadata"]["uid"],
                }
            ],
        },
        "data": {"status.json": '{"status": {"state": "ready"}}', "state": "ready"},
    }
    rig.kube.create(CONFIGMAPS, rig.namespace, forged)
    since = kube_api.fake.audit.mark()
    rig.controllers.start(interval=0.05)
    rig.syncer.start()
    wait_until(
        lambda: [
            e
            for e in rig.kube.list(EVENTS, rig.namespace)[0]
            if e.get("reason") == "StatusSquatted" and NAME in e.get("message", "")
        ],
        what="the forged map reported",
    )
    wait_until(lambda: all(p["status"].get("phase") == "Running" for p in rig.pods("worker")))
    time.sleep(0.5)
    assert kube_api.fake.audit.writes(resource="configmaps", name=STATUS, since=since) == []
    assert rig.status_cm()["data"]["state"] == "ready"  # type: ignore[index]


# --- kuberay_cluster_provisioned_duration_seconds ---------------------------------------------


def duration(name: str, namespace: str) -> float | None:
    """The gauge's value for one cluster as `/metrics` shows it (None: no series)."""
    for line in metrics.REGISTRY.render().splitlines():
        if (
            line.startswith("kuberay_cluster_provisioned_duration_seconds{")
            and f'name="{name}"' in line
            and f'namespace="{namespace}"' in line
        ):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_the_provisioned_duration_counts_from_the_pods_creation(rig: Rig) -> None:
    apply(rig.kube, rig.objects, rig.namespace)
    pending_s = 3.0
    time.sleep(pending_s)  # the pods exist, unscheduled, before the syncer sees them
    rig.syncer.start()
    rig.controllers.start(interval=0.05)
    wait_until(lambda: ready(rig), what="state ready")
    uid = service_uid(rig)
    value = wait_until(lambda: duration(NAME, rig.namespace), what="the duration series")
    # Whole-second stamps: at least the pending time less one second of rounding.
    assert value >= pending_s - 1
    # The cluster's identity is its head Service's uid (it outlives a head Pod).
    info = [
        line
        for line in metrics.REGISTRY.render().splitlines()
        if line.startswith("kuberay_cluster_info{") and f'namespace="{rig.namespace}"' in line
    ]
    assert len(info) == 1
    assert f'uid="{uid}"' in info[0]


def test_the_duration_is_set_at_the_transition_only() -> None:
    reporter = Reporter(None, clock=time.time, monotonic=time.monotonic)  # type: ignore[arg-type]
    key = ("RayCluster", "ns-duration", "c1")
    provisioning = cluster_status.Condition(
        cluster_status.PROVISIONED, "False", "RayClusterPodsProvisioning", "", "x"
    )
    done = cluster_status.Condition(
        cluster_status.PROVISIONED, "True", "AllPodRunningAndReadyFirstTime", "", ""
    )
    before = cluster_status.ClusterStatus(conditions=(provisioning,))
    at = "2026-12-02T04:00:42Z"
    after = cluster_status.ClusterStatus(conditions=(replace(done, last_transition_time=at),))
    created = 1796184000.0  # 2026-12-02T04:00:00Z
    reporter.provisioned(key, "u1", after, after, created)  # already True: nothing
    assert duration("c1", "ns-duration") is None
    reporter.provisioned(key, "u1", before, after, created)
    assert duration("c1", "ns-duration") == 42.0
    reporter.drop_series("ns-duration", "c1")


# --- every cluster kind renders the Service that owns its status ------------------------------


def test_every_rendered_head_pod_of_every_sample_has_the_head_service_that_anchors_it() -> None:
    """KubeRay's samples, all kinds: each rendered head Pod's cluster has one rendered head
    Service the reconciler picks (labels it indexes, managed-by), stable across a template
    change (its name does not carry the pod hash)."""
    clusters = 0
    kinds: set[str] = set()
    for path in sorted(SAMPLES.rglob("*.yaml")):
        documents, problems = sources.read_documents([str(path)])
        if problems:
            continue
        try:
            rendered = compiler.render(documents, RenderOptions(namespace="ns"))
        except ManifestError:
            continue  # one of the samples that stay refused (README)
        objects = list(rendered.objects)
        services = [o for o in objects if o["kind"] == "Service" and views.head_service_of(o)]
        for pod in objects:
            if pod["kind"] != "Pod" or meta.label(pod, naming.RAY_NODE_TYPE) != "head":
                continue
            cluster = meta.label(pod, naming.RAY_CLUSTER)
            own = [s for s in services if views.head_service_of(s) == [("ns", cluster)]]
            chosen = views.head_service(own, cluster)
            assert chosen is not None, f"{path.name}: no head Service for {cluster}"
            assert meta.is_rendered(chosen), f"{path.name}: {meta.name(chosen)} not rendered"
            assert not meta.name(chosen).startswith(meta.name(pod)), path.name
            clusters += 1
            kinds.add(meta.label(pod, naming.ORIGIN_KIND))
    print(f"clusters={clusters} kinds={sorted(kinds)}")  # noqa: T201 - the measured numbers
    assert {"RayCluster", "RayJob", "RayService"} <= kinds


def test_without_a_head_pod_the_status_says_so_and_keeps_the_spec(rig: Rig) -> None:
    """A map that outlives the head must not go on saying it is ready (a RayJob's
    `--ttl-mode delete`, `suspend: true` in git, a head between deletion and re-creation)."""
    apply(rig.kube, rig.objects, rig.namespace)
    rig.controllers.start(interval=0.05)
    rig.syncer.start()
    wait_until(lambda: ready(rig), what="state ready")
    for pod in rig.pods("head") + rig.pods("worker"):
        rig.kube.delete(PODS, rig.namespace, pod["metadata"]["name"])

    def headless() -> Manifest | None:
        status = rig.status()
        found = {c["type"]: c for c in status.get("conditions", [])}.get("HeadPodReady", {})
        gone = found.get("reason") == "HeadPodNotFound" and "availableWorkerReplicas" not in status
        return status if gone else None

    status = wait_until(headless, what="the status without pods")
    assert "podName" not in status["head"] and "podIP" not in status["head"]
    assert status["head"]["serviceName"] == f"{NAME}-head-svc"
    assert status["state"] == "ready"  # KubeRay never moves ready back
    # The spec as recorded: desired, min and max workers and resources.
    assert (status["desiredWorkerReplicas"], status["minWorkerReplicas"]) == (2, 1)
    assert status["maxWorkerReplicas"] == 5
    assert (status["desiredCPU"], status["desiredMemory"], status["desiredGPU"]) == (
        "2",
        "4Gi",
        "2",
    )
    events = wait_until(
        lambda: [
            e
            for e in rig.events("HeadPodReady")
            if e["involvedObject"]["kind"] == "Service" and "False" in e["message"]
        ],
        what="the Event on the head Service",
    )
    assert events[0]["involvedObject"]["name"] == f"{NAME}-head-svc"
