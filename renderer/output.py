"""The `--output-dir` layout: one file per object, a kustomization, and an ownership marker.

Pure planning lives here (`plan_directory`: objects → file contents); the CLI does the
writing. The marker file lists every file the renderer wrote, so stale files can be
removed without ever touching a file it did not write.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from renderer import emit
from renderer.manifest import Manifest

MARKER: Final = ".kuberay-render"
KUSTOMIZATION: Final = "kustomization.yaml"
MARKER_HEADER: Final = (
    "# Written by `kuberay render --output-dir`. It lists the files the renderer owns here;\n"
    "# they are rewritten or removed on the next render. Do not edit them by hand.\n"
)
_UNSAFE: Final = re.compile(r"[^a-z0-9.-]+")


def file_name(obj: Manifest) -> str:
    """`<kind>_<namespace>_<name>.yaml`, lower-case and safe on every file system.

    A cluster-scoped object has an empty namespace part: `<kind>__<name>.yaml`.
    """
    meta = obj.get("metadata") or {}
    kind, name = str(obj.get("kind", "object")), str(meta.get("name"))
    namespace = _UNSAFE.sub("-", str(meta.get("namespace") or "").lower())
    return f"{_UNSAFE.sub('-', kind.lower())}_{namespace}_{_UNSAFE.sub('-', name.lower())}.yaml"


def plan_directory(objects: Sequence[Manifest]) -> dict[str, str]:
    """Every file of the output directory, name → content (the marker included)."""
    files: dict[str, str] = {}
    for obj in objects:
        name = file_name(obj)
        if name in files:  # distinct objects that fold to one name (case, punctuation)
            stem, number = name[: -len(".yaml")], 2
            while f"{stem}-{number}.yaml" in files:
                number += 1
            name = f"{stem}-{number}.yaml"
        files[name] = emit.dump(obj)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": list(files),
    }
    files[KUSTOMIZATION] = emit.dump(kustomization)
    files[MARKER] = MARKER_HEADER + "".join(f"{name}\n" for name in sorted(files))
    return files


def read_marker(text: str) -> list[str]:
    """The file names a marker lists."""
    return [line for line in text.splitlines() if line and not line.startswith("#")]
