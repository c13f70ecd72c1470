"""What every kind's rules share: tolerant readers, the name and `managedBy` rules, gate hints.

`check_object_name` and `check_managed_by` are KubeRay's metadata rules common to RayCluster,
RayJob and RayService; `as_dict`/`as_list`/`as_text` read optional fields of a document that
passed the schema. Imported by the per-kind rule modules; pure.
"""

from __future__ import annotations

from typing import Any, Final

from renderer import goformat, k8snames, naming
from renderer.errors import JsonPath, Problem, show
from renderer.manifest import Manifest

MULTIKUEUE_MANAGER: Final = "kueue.x-k8s.io/multikueue"


class Unchecked(dict[str, Any]):
    """A part of a document that failed its schema: the rules skip it, its name stays visible.

    The compiler puts these in place of worker groups with schema errors, so that the rules
    still check every other group of the document in the same run (issue 16).
    """


def gate_hint(gate: str) -> str:
    """The how-to-fix clause for a feature gate that is off."""
    return f"enable it with --feature-gates {gate}=true"


def as_dict(value: object) -> Manifest:
    """`value` if it is a mapping, else an empty one (absent optional objects)."""
    return value if isinstance(value, dict) else {}


def as_list(value: object) -> list[object]:
    """`value` if it is a list, else an empty one (absent optional lists)."""
    return value if isinstance(value, list) else []


def as_text(value: object) -> str:
    """A scalar as KubeRay's Go string field sees it; absent is empty."""
    return "" if value is None else str(value)


def check_object_name(doc: Manifest, kind: str, max_length: int) -> list[Problem]:
    """The name rules shared by the three kinds: fixed name, length and DNS-1035 label.

    `generateName` is the renderer's own refusal: GitOps needs the name in git.
    """
    metadata = as_dict(doc.get("metadata"))
    problems = []
    if "generateName" in metadata:
        problems.append(
            Problem(
                ("metadata", "generateName"),
                "generateName is not supported: kuberay render needs fixed names for GitOps; "
                "set metadata.name instead",
            )
        )
    if "name" not in metadata:
        return problems
    name = as_text(metadata.get("name"))
    if k8snames.byte_size(name) > max_length:
        problems.append(
            Problem(
                ("metadata", "name"),
                f"{kind} name should be no more than {max_length} characters, "
                f"got {k8snames.byte_size(name)}; shorten the name",
            )
        )
    errors = k8snames.dns1035_label_errors(name)
    if errors:
        problems.append(
            Problem(
                ("metadata", "name"),
                f"{kind} name should be a valid DNS1035 label: {goformat.go_list(errors)}",
            )
        )
    return problems


def check_managed_by(spec: Manifest, path: JsonPath, kind: str) -> Problem | None:
    """`spec.managedBy`: the CRD's allowed values, and a warning that nothing is rendered.

    KubeRay skips an object managed by another controller entirely (no objects, no
    validation); the renderer does the same, so callers stop checking after a warning.
    """
    if "managedBy" not in spec:
        return None
    value = spec.get("managedBy")
    if value == naming.KUBERAY_MANAGER:
        return None
    if value != MULTIKUEUE_MANAGER:
        return Problem(
            path,
            f"the managedBy field value must be either '{naming.KUBERAY_MANAGER}' or "
            f"'{MULTIKUEUE_MANAGER}', got {show(value)}",
        )
    return Problem(
        path,
        f"managedBy is {show(value)}: KubeRay ignores a {kind} that is not managed by "
        f"{show(naming.KUBERAY_MANAGER)}, and so does kuberay render: nothing is rendered for it",
        "warning",
    )


def is_managed_by_kuberay(spec: Manifest) -> bool:
    """Whether KubeRay (and so kuberay render) handles the object: `managedBy` unset or KubeRay."""
    return spec.get("managedBy") in (None, naming.KUBERAY_MANAGER)
