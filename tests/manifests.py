"""Small ray.io/v1 manifests that the syncer, e2e and realapi tests render.

Owns the one RayJob shape those tests share (a head and one worker group `small`, Ray
2.52.0), so that a change to it is made once. `rayjob` returns YAML text for `kuberay
render`; extra top-level `spec` fields are JSON-encoded (JSON is YAML). `rayservice` is the
same cluster serving a Serve config, as JSON text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Final

RAY_VERSION: Final = "2.52.0"
RAY_IMAGE: Final = f"rayproject/ray:{RAY_VERSION}"

_CLUSTER: Final = f"""  rayClusterSpec:
    rayVersion: "{RAY_VERSION}"
    headGroupSpec:
      template:
        spec:
          containers:
          - name: ray-head
            image: {RAY_IMAGE}
    workerGroupSpecs:
    - groupName: small
      replicas: {{workers}}
      template:
        spec:
          containers:
          - name: ray-worker
            image: {RAY_IMAGE}
"""


def rayjob(
    name: str,
    *,
    entrypoint: str = 'python -c "print(1)"',
    mode: str | None = None,
    workers: int = 1,
    annotations: Mapping[str, str] | None = None,
    spec: Mapping[str, object] | None = None,
    **fields: object,
) -> str:
    """A RayJob `name` with `workers` workers; `mode` sets `submissionMode` (else the default).

    `spec` and `fields` add top-level spec fields. `annotations` go on the RayJob (e.g.
    `kuberay.io/run`, which makes the cluster and submission names of a run unique).
    """
    lines = ["apiVersion: ray.io/v1", "kind: RayJob", "metadata:", f"  name: {name}"]
    if annotations:
        lines.append("  annotations:")
        lines += [f"    {json.dumps(k)}: {json.dumps(v)}" for k, v in annotations.items()]
    lines += ["spec:", f"  entrypoint: {json.dumps(entrypoint)}"]
    if mode is not None:
        lines.append(f"  submissionMode: {mode}")
    extra = {**(spec or {}), **fields}
    lines += [f"  {key}: {json.dumps(value)}" for key, value in extra.items()]
    return "\n".join(lines) + "\n" + _CLUSTER.format(workers=workers)


def rayservice(
    name: str,
    *,
    serve_config: Mapping[str, object],
    worker_cpu: str = "1",
    spec: Mapping[str, object] | None = None,
    cluster: Mapping[str, object] | None = None,
) -> str:
    """A RayService `name` serving `serve_config`: a head with no CPUs for Ray and one
    worker requesting `worker_cpu` (a change of it is a new cluster generation).

    `spec` adds top-level spec fields (`upgradeStrategy`, ...), `cluster` fields of
    `rayClusterConfig` (`gcsFaultToleranceOptions`, ...).
    """
    ports = [{"name": "dashboard", "containerPort": 8265}, {"name": "serve", "containerPort": 8000}]
    head = {"name": "ray-head", "image": RAY_IMAGE, "ports": ports}
    worker = {
        "name": "ray-worker",
        "image": RAY_IMAGE,
        "resources": {"requests": {"cpu": worker_cpu}},
    }
    document = {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": name},
        "spec": {
            **(spec or {}),
            "serveConfigV2": json.dumps(serve_config),
            "rayClusterConfig": {
                **(cluster or {}),
                "headGroupSpec": {
                    "rayStartParams": {"num-cpus": "0"},
                    "template": {"spec": {"containers": [head]}},
                },
                "workerGroupSpecs": [
                    {
                        "groupName": "small",
                        "replicas": 1,
                        "template": {"spec": {"containers": [worker]}},
                    }
                ],
            },
        },
    }
    return json.dumps(document, indent=2)
