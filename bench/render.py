"""Render 1,000 RayClusters (1 head + 2 worker groups each) and compare with libyaml's floor.

The floor is what any renderer must at least spend: loading the same input text and
dumping the same output objects with PyYAML's C loader and dumper. The figure printed
is render time / floor time (target: at most 1.5).
"""

from __future__ import annotations

import gc
import time

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


def main(repeat: int = 3) -> float:
    """Run the benchmark and print the ratio; returns it."""
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
    return ratio
