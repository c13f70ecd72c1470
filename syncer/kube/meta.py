"""Reading an object's metadata (name, namespace, labels) and the ownership check. Pure.

`is_rendered` is the project's ownership contract in one place: the syncer writes only
to objects that carry the renderer's `managed-by` label (DESIGN §1), and to the dynamic
worker Pods it made itself (`is_syncer_made`).
"""

from __future__ import annotations

from typing import Any, Final

from renderer import naming

Manifest = dict[str, Any]


def metadata(obj: Manifest) -> Manifest:
    """The object's metadata ({} when it has none)."""
    meta: Manifest = obj.get("metadata") or {}
    return meta


def name(obj: Manifest) -> str:
    """`metadata.name` ("" when absent)."""
    return str(metadata(obj).get("name") or "")


def namespace(obj: Manifest) -> str:
    """`metadata.namespace` ("" when absent)."""
    return str(metadata(obj).get("namespace") or "")


def label(obj: Manifest, key: str) -> str:
    """One label's value ("" when absent)."""
    return str((metadata(obj).get("labels") or {}).get(key) or "")


SYNCER_MADE: Final = "kuberay-syncer"  # managed-by of the autoscaling actuator's worker Pods


def is_syncer_made(obj: Manifest) -> bool:
    """Whether the autoscaling actuator made `obj` (a dynamic worker Pod: not in git)."""
    return label(obj, naming.MANAGED_BY) == SYNCER_MADE


def is_rendered(obj: Manifest) -> bool:
    """Whether the renderer made `obj` (the only objects the syncer writes to)."""
    return label(obj, naming.MANAGED_BY) == naming.MANAGED_BY_VALUE
