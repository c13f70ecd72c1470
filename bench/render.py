"""Render 1,000 RayClusters (1 head + 2 worker groups each) and compare with libyaml's floor.

The floor is what any renderer must at least spend: loading the same input text and
dumping the same output objects with PyYAML's C loader and dumper. The figure printed
is render time / floor time (target: at most 1.5).

Then the bounds of issue 16: how long refusing a YAML alias bomb and a very large file
takes, and the peak RSS of rendering 10,000 Pods in one cluster and 1,000 clusters (each
measured in a fresh process, since peak RSS only grows).
"""

from __future__ import annotations

import gc
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from renderer import compile as compiler
from renderer import emit, sources
from renderer.options import RenderOptions

CLUSTERS = 1000


def make_input(count: int = CLUSTERS) -> str:
    """`count` realistic RayClusters that differ in names, images and sizes."""
    docs = []
    for i in range(count):
        version = ["2.46.0", "2.52.0", "2.53.0"][i % 3]
        docs.append(
            f"""apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: cluster-{i}
  namespace: team-{i % 7}
  labels:
    team: team-{i % 7}
spec:
  rayVersion: "{version}"
  headGroupSpec:
    rayStartParams:
      num-cpus: "0"
    template:
      spec:
        containers:
        - name: ray-head
          image: rayproject/ray:{version}
          resources:
            limits: {{cpu: "{1 + i % 4}", memory: {4 + i % 8}Gi}}
            requests: {{cpu: "{1 + i % 4}", memory: {4 + i % 8}Gi}}
          ports:
          - {{containerPort: 6379, name: gcs-server}}
          - {{containerPort: 8265, name: dashboard}}
          - {{containerPort: 10001, name: client}}
  workerGroupSpecs:
  - groupName: cpu
    replicas: {1 + i % 3}
    minReplicas: 1
    maxReplicas: 10
    template:
      spec:
        containers:
        - name: ray-worker
          image: rayproject/ray:{version}
          resources:
            limits: {{cpu: "{2 + i % 6}", memory: {8 + i % 8}Gi}}
            requests: {{cpu: "{2 + i % 6}", memory: {8 + i % 8}Gi}}
  - groupName: gpu
    replicas: 1
    template:
      spec:
        tolerations:
        - {{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}}
        containers:
        - name: ray-worker
          image: rayproject/ray:{version}-gpu
          resources:
            limits: {{cpu: "8", memory: 32Gi, nvidia.com/gpu: {1 + i % 2}}}
            requests: {{cpu: "8", memory: 32Gi, nvidia.com/gpu: {1 + i % 2}}}
"""
        )
    return "---\n".join(docs)


def _render(text: str, options: RenderOptions) -> str:
    documents, problems = sources.parse_text(text, "bench.yaml")
    assert not problems
    result = compiler.render(documents, options)
    return emit.dump_all(result.objects)


def _floor(text: str, objects: list[object]) -> str:
    list(yaml.load_all(text, Loader=yaml.CSafeLoader))
    return yaml.dump_all(objects, Dumper=yaml.CSafeDumper, sort_keys=False)


def _best(func: object, *args: object, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        func(*args)  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return min(times)


def _one_cluster(workers: int) -> str:
    """One RayCluster with `workers` worker Pods."""
    return f"""apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: wide
spec:
  headGroupSpec:
    template:
      spec:
        containers:
        - name: ray-head
          image: rayproject/ray:2.52.0
  workerGroupSpecs:
  - groupName: cpu
    replicas: {workers}
    template:
      spec:
        containers:
        - name: ray-worker
          image: rayproject/ray:2.52.0
          resources:
            limits: {{cpu: "4", memory: 16Gi}}
"""


def _alias_bomb(levels: int = 9) -> str:
    lines = ["apiVersion: v1", "kind: ConfigMap", "metadata: {name: laughs}", "data:"]
    lines.append('  l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]')
    for level in range(1, levels):
        refs = ", ".join([f"*l{level - 1}"] * 10)
        lines.append(f"  l{level}: &l{level} [{refs}]")
    return "\n".join(lines) + "\n"


def measure_rss(scenario: str) -> None:
    """Render one scenario in this process and print its peak RSS (run in a fresh process)."""
    text = _one_cluster(10_000) if scenario == "pods" else make_input(CLUSTERS)
    start = time.perf_counter()
    output = _render(text, RenderOptions())
    elapsed = time.perf_counter() - start
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(f"{scenario} {elapsed:.2f} {peak_mib:.0f} {len(output) / 2**20:.1f}")


def _rss(scenario: str) -> tuple[float, float, float]:
    code = f"from bench import render; render.measure_rss({scenario!r})"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    _, elapsed, peak, size = out.stdout.split()
    return float(elapsed), float(peak), float(size)


def limits() -> None:
    """Print the refusal times of an alias bomb and a large file, and peak RSS of big renders."""
    bomb = _alias_bomb()
    start = time.perf_counter()
    documents, problems = sources.parse_text(bomb, "bomb.yaml")
    bomb_time = time.perf_counter() - start
    assert not documents
    assert problems
    with tempfile.TemporaryDirectory() as tmp:
        huge = Path(tmp) / "huge.yaml"
        with huge.open("wb") as handle:
            handle.truncate(4 * 1024**3)  # 4 GiB, sparse
        start = time.perf_counter()
        documents, problems = sources.read_documents([str(huge)])
        file_time = time.perf_counter() - start
        assert not documents
        assert problems
    print(f"limits: alias bomb (10**9 values written out) refused in {bomb_time * 1000:.1f} ms")
    print(f"limits: a 4 GiB file refused unread in {file_time * 1000:.2f} ms")
    for scenario, label in (("pods", "10,000 Pods in one cluster"), ("clusters", "1,000 clusters")):
        elapsed, peak, size = _rss(scenario)
        print(
            f"limits: {label}: peak RSS {peak:.0f} MiB for {size:.1f} MiB of YAML, "
            f"{elapsed:.2f} s (fresh process)"
        )


def main(repeat: int = 3) -> float:
    """Run the benchmark and print the ratio (then the bounds of issue 16); returns the ratio."""
    options = RenderOptions()
    text = make_input()
    # Warm caches (schemas, validators) once, as a long CI job would.
    documents, _ = sources.parse_text(make_input(3), "warm.yaml")
    compiler.render(documents, options)
    output = _render(text, options)
    objects = list(yaml.load_all(output, Loader=yaml.CSafeLoader))
    ours = _best(_render, text, options, repeat=repeat)
    floor = _best(_floor, text, objects, repeat=repeat)
    ratio = ours / floor
    lines = output.count("\n")
    print(f"render: {CLUSTERS} RayClusters -> {len(objects)} objects, {lines} lines of YAML")
    print(f"render: kuberay render {ours:.3f} s; libyaml load+dump floor {floor:.3f} s")
    print(f"render: ratio {ratio:.2f}x (target <= 1.5x), best of {repeat} runs each")
    limits()
    return ratio
