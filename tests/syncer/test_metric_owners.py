"""Every registered metric family is written by its owner: each changes when its event happens.

The families live in one process-wide registry (the one `/metrics` serves). Each is paired
with the event that must write it and the part that owns it; a family registered without
an event fails `test_every_registered_family_has_an_owner_and_an_event`. Each test clears
its families first (other tests in this process write them too), makes the event happen on
real parts (the fake API server, its controllers, `FakeDashboard`s, the assembled
`cli.Syncer`), and reads the families back from the registry's text exposition.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Final

import pytest

from renderer import naming
from syncer import metrics
from syncer.cli import VERSION, Options, Syncer, _MetricsPublisher
from syncer.config import Config
from syncer.engine import Engine, Key
from syncer.engine import Options as EngineOptions
from syncer.errors import PermanentError, TransientError
from syncer.kube.cache import Cache
from syncer.kube.client import CONFIGMAPS, SERVICES, KubeClient
from syncer.raycluster.reconciler import Options as ClusterOptions
from syncer.rayservice.record import READY
from syncer.rayservice.state import Settings as ServiceSettings
from syncer.reload import ConfigWatcher
from tests.fakeapi.controllers import Controllers
from tests.fakeapi.fixtures import KubeApi
from tests.syncer import test_raycluster_reconciler as cluster_parts
from tests.syncer import test_rayjob_reconciler as rayjob_rig_parts
from tests.syncer import test_rayservice_reconciler as service_rig_parts
from tests.syncer.fakedashboard import FakeDashboard
from tests.syncer.harness import apply, render, wait_until

OWNERS: Final = {
    # The RayJob reconciler, on every pass that moves a job, and when a run ends.
    "kuberay_job_info": "rayjob",
    "kuberay_job_deployment_status": "rayjob",
    "kuberay_syncer_job_state": "rayjob",
    "kuberay_job_execution_duration_seconds": "rayjob",
    "kuberay_syncer_job_execution_seconds": "rayjob",
    # Both reconcilers: a move between states.
    "kuberay_syncer_transitions_total": "rayjob",
    # The RayService reconciler, on every pass.
    "kuberay_service_info": "rayservice",
    "kuberay_service_condition_ready": "rayservice",
    "kuberay_service_condition_upgrade_in_progress": "rayservice",
    "kuberay_syncer_service_target_capacity": "rayservice",
    "kuberay_syncer_service_traffic_routed_percent": "rayservice",
    # The RayCluster reconciler: every pass that changes a cluster, every recovery, write.
    "kuberay_cluster_info": "raycluster",
    "kuberay_cluster_condition_provisioned": "raycluster",
    "kuberay_cluster_provisioned_duration_seconds": "raycluster",
    "kuberay_syncer_pod_recoveries_total": "raycluster",
    "kuberay_syncer_cluster_status_writes_total": "raycluster",
    # The write budget (leader.GuardedKube): an Event queued for a spare token, or dropped.
    "kuberay_syncer_events_held_total": "writes",
    # The engine: every pass, and every pass that fails.
    "kuberay_syncer_reconcile_seconds": "engine",
    "kuberay_syncer_reconcile_errors_total": "engine",
    # The daemon shell: start, the metrics publisher's samples, config reloads.
    "kuberay_syncer_build_info": "shell",
    "kuberay_syncer_leader": "shell",
    "kuberay_syncer_queue_depth": "shell",
    "kuberay_syncer_tracked_objects": "shell",
    "kuberay_syncer_api_requests_total": "shell",
    "kuberay_syncer_config_reloads_total": "shell",
}


def registered() -> set[str]:
    text = metrics.REGISTRY.render()
    return {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}


def samples(family: str) -> list[str]:
    """The family's sample lines as `/metrics` shows them (histograms: bucket, sum, count)."""
    lines = metrics.REGISTRY.render().splitlines()
    names = (family, f"{family}_bucket", f"{family}_sum", f"{family}_count")
    return [
        line
        for line in lines
        if not line.startswith("#") and line.split("{")[0].split(" ")[0] in names
    ]


def clear(families: Sequence[str]) -> None:
    for family in families:
        metrics.REGISTRY.get(family).clear()


def with_labels(family: str, **labels: str) -> list[str]:
    """Sample lines that carry every `key="value"` of `labels`."""
    wanted = [f'{key}="{value}"' for key, value in labels.items()]
    return [line for line in samples(family) if all(w in line for w in wanted)]


def at_full(family: str, labels: dict[str, str], cluster: str) -> bool:
    """Whether the family reads 100 for that generation of the RayService."""
    return any(line.endswith(" 100") for line in with_labels(family, **labels, cluster=cluster))


def test_every_registered_family_has_an_owner_and_an_event() -> None:
    assert registered() == set(OWNERS)


# --- the RayJob reconciler (and the engine's pass timing, and the daemon's start) ----------


@pytest.fixture
def rayjob_rig(kube_api: KubeApi) -> Iterator[rayjob_rig_parts.Rig]:
    rig = rayjob_rig_parts.make_rig(kube_api)
    yield rig
    rig.stop()


def test_a_rayjob_run_writes_the_job_families_and_the_pass_timing(
    rayjob_rig: rayjob_rig_parts.Rig,
) -> None:
    rig, ns = rayjob_rig, rayjob_rig.namespace
    families = [name for name, owner in OWNERS.items() if owner == "rayjob"]
    families += ["kuberay_syncer_reconcile_seconds", "kuberay_syncer_build_info"]
    clear(families)
    assert all(samples(family) == [] for family in families)
    apply(rig.kube, render(rayjob_rig_parts.demo_job(mode="HTTPMode"), ns), ns)
    rig.controllers.start(interval=0.05)
    rig.syncer.start()
    wait_until(lambda: rig.status().get("jobDeploymentStatus") == "Complete", what="Complete")
    wait_until(
        lambda: with_labels("kuberay_syncer_job_state", namespace=ns, name="demo"),
        what="the job's state gauge",
    )
    intent_cm = rig.kube.get(CONFIGMAPS, ns, naming.intent_configmap_name("demo"))
    assert intent_cm is not None
    uid = str(intent_cm["metadata"]["uid"])
    assert with_labels("kuberay_job_info", namespace=ns, name="demo", uid=uid)
    wait_until(
        lambda: with_labels(
            "kuberay_job_deployment_status", namespace=ns, name="demo", deployment_status="Complete"
        ),
        what="deployment status Complete",
    )
    # One series per job: the earlier states were removed as the job moved on.
    assert len(with_labels("kuberay_job_deployment_status", namespace=ns, name="demo")) == 1
    assert with_labels("kuberay_syncer_job_state", job_deployment_status="Complete", name="demo")
    moves = with_labels("kuberay_syncer_transitions_total", namespace=ns, kind="RayJob")
    assert any('to="Complete"' in line for line in moves)
    assert with_labels(
        "kuberay_job_execution_duration_seconds",
        namespace=ns,
        name="demo",
        job_deployment_status="Complete",
        retry_count="0",
    )
    count = with_labels("kuberay_syncer_job_execution_seconds", namespace=ns)
    assert any(line.startswith("kuberay_syncer_job_execution_seconds_count") for line in count)
    assert any(line.endswith(" 1") for line in count if "_count" in line)
    assert with_labels("kuberay_syncer_reconcile_seconds", kind="RayJob")
    assert with_labels("kuberay_syncer_build_info", version=VERSION)


# --- the RayService reconciler ---------------------------------------------------------------


@pytest.fixture
def service_rig(kube_api: KubeApi) -> Iterator[service_rig_parts.Rig]:
    kube_api.fake  # noqa: B018 - the simulators need the fake server
    kube = service_rig_parts.RecordingKube(kube_api.api_client)
    controllers = Controllers(kube_api.api_client, namespace=kube_api.namespace)
    gateways = service_rig_parts.GatewaySim(kube_api)
    rig = service_rig_parts.Rig(
        kube_api, kube, controllers, gateways, service_rig_parts.GitOps(kube, kube_api.namespace)
    )
    controllers.start(interval=0.05)
    gateways.start()
    yield rig
    rig.stop_syncer()
    gateways.stop()
    controllers.stop()


def test_a_rayservice_pass_writes_the_service_families(service_rig: service_rig_parts.Rig) -> None:
    rig, ns = service_rig, service_rig.namespace
    families = [name for name, owner in OWNERS.items() if owner == "rayservice"]
    clear([*families, "kuberay_syncer_transitions_total"])
    objects = render(service_rig_parts.manifest(), ns)
    generation = service_rig_parts.generation_of(objects)
    rig.gitops.sync(objects)
    rig.start_syncer()
    wait_until(lambda: rig.record().is_true(READY), what="Ready", timeout=20)
    labels = {"namespace": ns, "name": "greeter"}
    wait_until(
        lambda: with_labels("kuberay_service_condition_ready", **labels, condition="true"),
        what="the ready condition gauge",
    )
    assert with_labels("kuberay_service_info", **labels)
    assert with_labels("kuberay_service_condition_upgrade_in_progress", **labels)
    for family in (
        "kuberay_syncer_service_target_capacity",
        "kuberay_syncer_service_traffic_routed_percent",
    ):
        wait_until(
            partial(at_full, family, labels, generation), what=f"{family} of {generation} at 100"
        )
    moves = with_labels("kuberay_syncer_transitions_total", namespace=ns, kind="RayService")
    assert any('to="Running"' in line for line in moves)


# --- the engine: a pass that fails -------------------------------------------------------


class _Failing:
    """A reconciler whose passes fail: transiently for one key, permanently for another."""

    kind: Final = "Probe"

    def caches(self) -> Sequence[Cache]:
        return []

    def reconcile(self, key: Key) -> float | None:
        if key[2] == "permanent":
            raise PermanentError("forbidden", status=403)
        raise TransientError("unavailable", status=503)


def test_a_failed_pass_counts_an_error_by_kind_and_class() -> None:
    clear(["kuberay_syncer_reconcile_errors_total"])
    engine = Engine(None, EngineOptions(namespaces=("ns",)))  # type: ignore[arg-type]  # no cache is started
    engine.register(_Failing())
    for name in ("transient", "permanent", "transient"):
        engine.queue.add(("Probe", "ns", name))
        assert engine.process_one(0.0)
    family = "kuberay_syncer_reconcile_errors_total"
    assert with_labels(family, kind="Probe", error="transient") == [
        'kuberay_syncer_reconcile_errors_total{error="transient",kind="Probe"} 2'
    ]
    assert with_labels(family, kind="Probe", error="permanent") == [
        'kuberay_syncer_reconcile_errors_total{error="permanent",kind="Probe"} 1'
    ]
    assert engine.stats["errors"] == 3


# --- the daemon shell: the publisher's samples and config reloads ----------------------------


class _Leadership:
    def __init__(self) -> None:
        self.is_leader = False

    def is_fresh(self) -> bool:
        return self.is_leader


def test_the_publisher_samples_leadership_queue_tracked_objects_and_api_calls(
    kube_api: KubeApi,
) -> None:
    families = ["kuberay_syncer_leader", "kuberay_syncer_queue_depth"]
    families += ["kuberay_syncer_tracked_objects", "kuberay_syncer_api_requests_total"]
    clear(families)
    syncer = Syncer(
        None,  # type: ignore[arg-type]  # no cache is started; the intent is put in by hand
        Options(namespaces=("ns",)),
        dashboards=lambda url: FakeDashboard(),
        service_settings=ServiceSettings(),
    )
    leadership = _Leadership()
    kube = KubeClient(kube_api.api_client)
    publisher = _MetricsPublisher(syncer, leadership, kube)  # type: ignore[arg-type]  # duck-typed
    publisher.publish()
    assert samples("kuberay_syncer_leader") == ["kuberay_syncer_leader 0"]
    assert samples("kuberay_syncer_queue_depth") == ["kuberay_syncer_queue_depth 0"]
    assert with_labels("kuberay_syncer_tracked_objects", kind="RayJob") == [
        'kuberay_syncer_tracked_objects{kind="RayJob"} 0'
    ]
    assert samples("kuberay_syncer_api_requests_total") == []

    leadership.is_leader = True
    syncer.engine.queue.add(("RayJob", "ns", "a"))
    intent = {
        "metadata": {
            "name": naming.intent_configmap_name("a"),
            "namespace": "ns",
            "resourceVersion": "1",
            "labels": {naming.ORIGIN_KIND: "RayJob", naming.ORIGIN_NAME: "a"},
        },
        "data": {},
    }
    syncer.engine.intents.upsert(intent)
    syncer.dashboards.call("list_jobs", "http://a:8265", lambda d: d.list_jobs())
    assert kube.get(CONFIGMAPS, kube_api.namespace, "absent") is None
    kube.list(CONFIGMAPS, kube_api.namespace)
    publisher.publish()
    assert samples("kuberay_syncer_leader") == ["kuberay_syncer_leader 1"]
    assert samples("kuberay_syncer_queue_depth") == ["kuberay_syncer_queue_depth 1"]
    assert with_labels("kuberay_syncer_tracked_objects", kind="RayJob") == [
        'kuberay_syncer_tracked_objects{kind="RayJob"} 1'
    ]
    assert samples("kuberay_syncer_api_requests_total") == [
        'kuberay_syncer_api_requests_total{code="any",target="dashboard",verb="list_jobs"} 1',
        'kuberay_syncer_api_requests_total{code="200",target="kube",verb="GET"} 1',
        'kuberay_syncer_api_requests_total{code="404",target="kube",verb="GET"} 1',
    ]
    publisher.publish()  # a second sample adds only what is new
    assert len(with_labels("kuberay_syncer_api_requests_total", code="200")) == 1
    assert with_labels("kuberay_syncer_api_requests_total", code="200")[0].endswith(" 1")


def test_a_config_reload_counts_applied_and_rejected(tmp_path: Path) -> None:
    clear(["kuberay_syncer_config_reloads_total"])
    path = tmp_path / "config.yaml"
    path.write_text("poll_interval_s: 3\n", encoding="utf-8")
    applied: list[Config] = []
    watcher = ConfigWatcher(path, Config(), applied.append)
    path.write_text("poll_interval_s: 5\n", encoding="utf-8")
    assert watcher.check()
    path.write_text("ttl_mode: nuke\n", encoding="utf-8")
    watcher.check()
    results = Counter(
        line.split('result="')[1].split('"')[0]
        for line in samples("kuberay_syncer_config_reloads_total")
        if line.endswith(" 1")
    )
    assert results == {"applied": 1, "rejected": 1}
    assert [c.poll_interval_s for c in applied] == [5.0]


# --- the RayCluster reconciler ----------------------------------------------------------------


def test_a_cluster_that_loses_a_worker_writes_the_cluster_families(kube_api: KubeApi) -> None:
    families = [name for name, owner in OWNERS.items() if owner == "raycluster"]
    clear([*families, "kuberay_syncer_transitions_total"])
    assert all(samples(family) == [] for family in families)
    rig = cluster_parts.make_rig(kube_api, options=ClusterOptions(debounce_s=0.1))
    ns, name = rig.namespace, cluster_parts.NAME
    try:
        apply(rig.kube, rig.objects, ns)
        rig.controllers.start(interval=0.05)
        rig.syncer.start()
        wait_until(lambda: cluster_parts.ready(rig), what="the cluster ready")
        # The cluster's identity is its head Service's uid (it outlives a head Pod).
        svc = rig.kube.get(SERVICES, ns, f"{name}-head-svc")
        assert svc is not None
        uid = svc["metadata"]["uid"]
        # The status the test saw is written before the pass sets its metrics: wait for them.
        wait_until(
            lambda: all(
                [
                    with_labels("kuberay_cluster_info", namespace=ns, name=name, uid=uid),
                    with_labels(
                        "kuberay_cluster_condition_provisioned",
                        namespace=ns,
                        name=name,
                        condition="True",
                    ),
                    with_labels(
                        "kuberay_cluster_provisioned_duration_seconds", namespace=ns, name=name
                    ),
                    with_labels(
                        "kuberay_syncer_transitions_total", namespace=ns, kind="RayCluster"
                    ),
                    with_labels("kuberay_syncer_cluster_status_writes_total", result="written"),
                ]
            ),
            what="the cluster families written",
        )
        worker = rig.pods("worker")[0]["metadata"]["name"]
        rig.controllers.kubelet.set_phase(ns, worker, "Failed", reason="Evicted")
        wait_until(
            lambda: with_labels(
                "kuberay_syncer_pod_recoveries_total",
                namespace=ns,
                node_type="worker",
                result="deleted",
            ),
            what="the recovery counted",
        )
    finally:
        rig.syncer.stop()
        rig.controllers.stop()
