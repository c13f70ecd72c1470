"""Autoscaling end to end: a real Ray head, Ray's own v2 monitor, the provider, the syncer.

`kuberay render` renders the RayCluster; the fake API server holds what git would; the
head Pod's Ray container runs on 127.0.0.1 under the head Pod's name, its `autoscaler`
container (the rendered wrapper, Ray's unmodified `ray.autoscaler.v2.monitor`, the
rendered provider and config) beside it; the syncer's actuator creates and deletes the
worker Pods; the test kubelet runs each as a Ray worker node on 127.0.0.1
(tests/autoscaler/livecluster.py). One cluster for the module (a head costs seconds), so
the scenarios run in order, each from the steady state of one worker (minReplicas):
min at start, task demand up and idle down, request_resources with the maxReplicas cap
and an autoscaler restart that adopts the Pods, a STRICT_SPREAD placement group, and a
crashed worker replaced. Every check reads a real outcome: Pod names in the API server,
the desired set, the provider's requests, Ray's node list, where Ray ran the tasks.
Timings go to the terminal summary (`bench/autoscaling.py` is the benchmark); none is
asserted.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator

import pytest

from renderer import naming
from tests.autoscaler.livecluster import LiveCluster, live_cluster
from tests.e2e import fixtures as e2e_fixtures

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
IDLE_S = 3
CLUSTER_YAML = f"""
apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: demo
spec:
  rayVersion: "2.60.0"
  enableInTreeAutoscaling: true
  autoscalerOptions:
    idleTimeoutSeconds: {IDLE_S}
  headGroupSpec:
    rayStartParams:
      num-cpus: "0"
    template:
      spec:
        containers:
        - name: ray-head
          image: rayproject/ray:2.60.0
  workerGroupSpecs:
  - groupName: small
    replicas: 1
    minReplicas: 1
    maxReplicas: 2
    rayStartParams:
      num-cpus: "1"
    template:
      spec:
        containers:
        - name: ray-worker
          image: rayproject/ray:2.60.0
"""
LOOPS = 5  # autoscaler loops (1 s each) watched before "it created nothing" is asserted


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[LiveCluster]:
    began = time.monotonic()
    live: LiveCluster | None = None
    try:
        with live_cluster(tmp_path_factory.mktemp("autoscaling"), CLUSTER_YAML) as live:
            yield live
    finally:
        if live is not None:
            live.timings["module_wall_s"] = round(time.monotonic() - began, 1)
            pytestconfig.stash[e2e_fixtures._TIMINGS].append(
                f"autoscaling e2e timings (s): {json.dumps(live.timings, sort_keys=True)}"
            )


def _since(began: float) -> float:
    return round(time.monotonic() - began, 2)


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def test_min_replicas_at_start_and_the_autoscaler_adopts_the_seed(cluster: LiveCluster) -> None:
    (seed,) = cluster.settle(1, "the minReplicas worker in Pods, state and Ray")
    pod = cluster.pod(seed)
    assert pod is not None
    assert pod["metadata"]["labels"][naming.RAY_GROUP] == "small"
    owners = pod["metadata"]["ownerReferences"]
    assert [(o["kind"], o["name"]) for o in owners] == [("Pod", cluster.head.instance_id)]
    # `ray start` prints its line a moment after the GCS lists the node.
    node = cluster.workers.node(seed)
    cluster.timings["seed_ray_start_s"] = cluster.wait(node.started_in, "the seed's start line")
    # The monitor runs and looks at the seed without adding or removing a name.
    cluster.wait(lambda: cluster.provider_calls("get", 0) >= LOOPS, f"{LOOPS} autoscaler loops")
    assert cluster.provider_calls("patch", 0) == 0
    assert cluster.settle(1) == {seed}


def test_task_demand_scales_up_and_the_idle_worker_is_deleted(cluster: LiveCluster) -> None:
    (first,) = cluster.settle(1)
    hold = cluster.hold()
    demand = time.monotonic()
    cluster.driver.send(op="tasks", count=2, hold=str(hold))  # 2 CPUs at once, 1 worker
    (second,) = cluster.wait(lambda: cluster.pods() - {first}, "a second worker Pod")
    cluster.timings["demand_to_pod_s"] = _since(demand)
    cluster.wait(lambda: second in cluster.ray_workers(), "the second worker in Ray")
    cluster.timings["demand_to_ready_s"] = _since(demand)
    cluster.timings["demand_load"] = _load()
    cluster.wait(lambda: cluster.running(hold) == 2, "both tasks running")
    cluster.release(hold)
    ran_on = cluster.driver.reply(timeout=60)
    assert sorted(ran_on) == sorted({first, second})
    node = cluster.workers.node(second)
    cluster.timings["new_worker_ray_start_s"] = cluster.wait(node.started_in, "its start line")

    idle = time.monotonic()
    cluster.wait(lambda: len(cluster.pods()) == 1, "scale-down to minReplicas")
    cluster.timings["idle_to_deleted_s"] = _since(idle)
    cluster.timings["idle_load"] = _load()
    (kept,) = cluster.settle(1)
    assert kept in (first, second)
    gone = ({first, second} - {kept}).pop()
    assert cluster.pod(gone) is None
    assert gone not in cluster.ray_workers()


def test_demand_above_max_replicas_holds_at_max(cluster: LiveCluster) -> None:
    (first,) = cluster.settle(1)
    hold = cluster.hold()
    cluster.driver.send(op="tasks", count=3, hold=str(hold))  # 3 CPUs, maxReplicas 2
    held = cluster.settle(2, "maxReplicas workers")
    cluster.wait(lambda: cluster.running(hold) == 2, "two tasks running")
    # Ray keeps reporting the third task's CPU, and loop after loop asks for no Pod.
    mark = cluster.mark()
    cluster.wait(lambda: cluster.ray.demand_cpus()["tasks"] >= 1, "Ray reporting the demand")
    cluster.wait(lambda: cluster.provider_calls("get", mark) >= LOOPS, f"{LOOPS} more loops")
    assert cluster.provider_calls("patch", mark) == 0
    assert cluster.pods() == cluster.desired() == cluster.ray_workers() == held
    assert cluster.running(hold) == 2
    cluster.release(hold)
    ran_on = cluster.driver.reply(timeout=60)
    assert len(ran_on) == 3 and set(ran_on) == held
    assert first in held
    cluster.settle(1, "scale-down to minReplicas")


def test_request_resources_scales_up_and_a_restarted_autoscaler_adopts_the_pods(
    cluster: LiveCluster,
) -> None:
    (first,) = cluster.settle(1)
    requested = time.monotonic()
    assert cluster.ask(op="request", cpus=2) == 2
    held = cluster.settle(2, "two workers for request_resources(num_cpus=2)")
    cluster.timings["request_to_ready_s"] = _since(requested)
    assert first in held
    cluster.wait(lambda: cluster.ray.demand_cpus()["constraint"] == 2, "Ray reporting it")

    # Kill the monitor: the wrapper starts another, which adopts both Pods as they are.
    starts = cluster.sidecar.starts()
    killed = cluster.sidecar.kill_monitor()
    restarted, mark = time.monotonic(), cluster.mark()
    cluster.wait(
        lambda: (
            cluster.sidecar.starts() > starts
            and cluster.sidecar.monitor_pid() not in (None, killed)
        ),
        "the wrapper starting a new monitor",
    )
    cluster.wait(lambda: cluster.provider_calls("get", mark) >= LOOPS, f"{LOOPS} new loops")
    cluster.timings["restart_to_loops_s"] = _since(restarted)
    assert cluster.provider_calls("patch", mark) == 0
    assert cluster.pods() == cluster.desired() == cluster.ray_workers() == held
    assert set(cluster.workers.nodes) >= held and len(cluster.pods()) == 2

    lifted = time.monotonic()
    assert cluster.ask(op="request", cpus=0) == 0
    (kept,) = cluster.settle(1, "scale-down to minReplicas once the request is lifted")
    cluster.timings["request_lifted_to_deleted_s"] = _since(lifted)
    assert kept in held


def test_a_strict_spread_placement_group_gets_a_worker_per_bundle(cluster: LiveCluster) -> None:
    (first,) = cluster.settle(1)
    ran_on = cluster.ask(op="spread", bundles=2)
    assert len(set(ran_on)) == 2 and first in ran_on
    assert set(ran_on) <= set(cluster.workers.nodes)  # each bundle on a Pod the syncer made
    (kept,) = cluster.settle(1, "scale-down once the placement group is removed")
    assert kept in ran_on


def test_a_crashed_worker_is_replaced_by_a_new_pod(cluster: LiveCluster) -> None:
    (crashed,) = cluster.settle(1)
    cluster.workers.node(crashed).crash()
    began = time.monotonic()
    cluster.wait(lambda: crashed not in cluster.pods(), "the crashed Pod deleted")
    assert crashed not in cluster.desired()
    cluster.wait(lambda: crashed not in cluster.ray_workers(), "Ray marking the node dead")
    ran_on = cluster.ask(op="tasks", count=1)
    (replacement,) = cluster.settle(1, "a replacement worker")
    cluster.timings["crash_to_replacement_ready_s"] = _since(began)
    assert ran_on == [replacement] and replacement != crashed
