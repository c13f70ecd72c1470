"""Small ray.io/v1 manifests that the syncer, e2e and realapi tests render.

Owns the one RayJob shape those tests share (a head and one worker group `small`, Ray
2.52.0), so that a change to it is made once. `rayjob` returns YAML text for `kuberay
render`; extra top-level `spec` fields are JSON-encoded (JSON is YAML).
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
