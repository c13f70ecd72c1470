"""Autoscaling: demand to a Ready worker and idle to deletion, beside Ray's own figures.

`python -m bench autoscaling [--cycles N] [--idle-seconds S]` runs the e2e rig of
tests/autoscaler (a rendered RayCluster with `minReplicas: 0`: a real Ray head on
127.0.0.1, the rendered wrapper with Ray's v2 monitor and the provider, the syncer's
actuator, Ray worker nodes started by the test kubelet; see tests/autoscaler/livecluster.py)
and repeats one cycle: one task of 1 CPU on the 0-CPU head (the demand), held until its
worker has joined, then released (the worker is idle from then on). Per cycle it prints:
- demand -> Pod (Ray's decision, the provider's patch, the syncer's create),
  demand -> Ready (the worker's Ray node ALIVE in the GCS), and the baseline measured in
  the same cycle, that worker's own `ray start` time; the share of our path is
  demand -> Ready minus `ray start`;
- idle -> Ray node dead (Ray's idle timeout and drain) and idle -> Pod deleted (plus the
  provider's patch and the syncer's delete), beside `idleTimeoutSeconds`;
- the 1-minute load average. A benchmark, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from tests.autoscaler.livecluster import LiveCluster, live_cluster

CLUSTER = """
apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: bench
spec:
  rayVersion: "2.60.0"
  enableInTreeAutoscaling: true
  autoscalerOptions:
    idleTimeoutSeconds: {idle}
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
    replicas: 0
    minReplicas: 0
    maxReplicas: 1
    rayStartParams:
      num-cpus: "1"
    template:
      spec:
        containers:
        - name: ray-worker
          image: rayproject/ray:2.60.0
"""
COLUMNS = (
    "demand->pod",
    "demand->ready",
    "ray_start",
    "our_share",
    "idle->ray_dead",
    "idle->pod_gone",
    "load",
)


def _cycle(cluster: LiveCluster) -> dict[str, float]:
    """One demand / idle cycle from zero workers; its figures in seconds."""
    cluster.settle(0, "no worker before the cycle")
    hold = cluster.hold()
    demand = time.monotonic()
    cluster.driver.send(op="tasks", count=1, hold=str(hold))
    (pod,) = cluster.wait(cluster.pods, "the worker Pod")
    to_pod = time.monotonic() - demand
    cluster.wait(lambda: pod in cluster.ray_workers(), "the worker in Ray")
    to_ready = time.monotonic() - demand
    load = os.getloadavg()[0]
    cluster.wait(lambda: cluster.running(hold) == 1, "the task running")
    cluster.release(hold)
    cluster.driver.reply(timeout=60)
    idle = time.monotonic()
    to_dead, to_gone = 0.0, 0.0
    while not (to_dead and to_gone):
        if not to_dead and pod not in cluster.ray_workers():
            to_dead = time.monotonic() - idle
        if not to_gone and cluster.pod(pod) is None:
            to_gone = time.monotonic() - idle
        if time.monotonic() - idle > 150:
            raise RuntimeError(f"the idle worker {pod} was not deleted within 150 s\n{cluster}")
        time.sleep(0.05)
    ray_start: float = cluster.wait(cluster.workers.node(pod).started_in, "its start line")
    return dict(
        zip(
            COLUMNS,
            (to_pod, to_ready, ray_start, to_ready - ray_start, to_dead, to_gone, load),
            strict=True,
        )
    )


def measure(cycles: int, idle_seconds: int) -> list[dict[str, float]]:
    """Run the rig and `cycles` cycles; the figures of each."""
    with (
        tempfile.TemporaryDirectory(prefix="bench-autoscaling-") as tmp,
        live_cluster(Path(tmp), CLUSTER.format(idle=idle_seconds)) as cluster,
    ):
        return [_cycle(cluster) for _ in range(cycles)]


def main(argv: Sequence[str] = ()) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench autoscaling")
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--idle-seconds", type=int, default=3)
    args = parser.parse_args(list(argv))
    began = time.monotonic()
    rows = measure(args.cycles, args.idle_seconds)
    print(f"autoscaling: {args.cycles} cycles, idleTimeoutSeconds {args.idle_seconds}")
    print("  cycle " + " ".join(f"{c:>14}" for c in COLUMNS))
    for index, row in enumerate(rows, 1):
        print(f"  {index:>5} " + " ".join(f"{row[c]:>14.2f}" for c in COLUMNS))
    med = {c: statistics.median(r[c] for r in rows) for c in COLUMNS}
    print("  median " + " ".join(f"{med[c]:>13.2f}" for c in COLUMNS))
    print(
        f"autoscaling: demand -> Ready {med['demand->ready']:.2f} s median, of which the "
        f"worker's own `ray start` {med['ray_start']:.2f} s (ratio "
        f"{med['demand->ready'] / med['ray_start']:.2f}); idle -> Pod deleted "
        f"{med['idle->pod_gone']:.2f} s vs idleTimeoutSeconds {args.idle_seconds} (ratio "
        f"{med['idle->pod_gone'] / args.idle_seconds:.2f}), Ray's node dead after "
        f"{med['idle->ray_dead']:.2f} s; load {med['load']:.2f}; wall "
        f"{time.monotonic() - began:.0f} s"
    )


if __name__ == "__main__":
    main()
