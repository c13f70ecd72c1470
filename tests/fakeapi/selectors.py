"""Label and field selectors of list and watch requests, parsed and matched like the real server.

Owns the selector grammar (`=`, `==`, `!=`, `in`, `notin`, `key`, `!key`) and the set of
field labels each kind supports; an unsupported field label is a `400 BadRequest`.
It must not know about storage or HTTP.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tests.fakeapi.errors import ApiError, bad_request
from tests.fakeapi.kinds import Kind

Manifest = dict[str, Any]

# Field labels the real server accepts per resource (metadata.name and metadata.namespace
# are accepted for every resource); see `GetAttrs`/`AddFieldLabelConversionFunc` in
# kubernetes/pkg/apis/*/v1/conversion.go.
_FIELD_LABELS: dict[str, tuple[str, ...]] = {
    "pods": (
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ),
    "events": (
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ),
    "secrets": ("type",),
    "namespaces": ("status.phase",),
    "jobs.batch": ("status.successful",),
}

_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_./]*[A-Za-z0-9])?"
_SET_RE = re.compile(rf"^\s*({_NAME})\s+(in|notin)\s+\(([^)]*)\)\s*$")
_OP_RE = re.compile(rf"^\s*({_NAME})\s*(==|!=|=)\s*([-A-Za-z0-9_.]*)\s*$")
_EXISTS_RE = re.compile(rf"^\s*(!?)\s*({_NAME})\s*$")


@dataclass(frozen=True, slots=True)
class Requirement:
    """One selector term: `key op values`."""

    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!exists"
    values: tuple[str, ...] = ()

    def matches(self, value: str | None) -> bool:
        """Whether a label or field value satisfies this term (None: the key is absent)."""
        if self.op == "exists":
            return value is not None
        if self.op == "!exists":
            return value is None
        if self.op in ("=", "in"):
            return value is not None and value in self.values
        # "!=" and "notin" match objects without the key, as the real server does.
        return value is None or value not in self.values


def _split_terms(text: str) -> list[str]:
    terms: list[str] = []
    depth = 0
    current = ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    terms.append(current)
    return [t for t in terms if t.strip()]


def parse_label_selector(text: str | None) -> list[Requirement]:
    """Parse a `labelSelector` query value.

    Raises:
        ApiError: 400 when the selector does not parse.
    """
    if not text:
        return []
    requirements: list[Requirement] = []
    for term in _split_terms(text):
        if match := _SET_RE.match(term):
            values = tuple(v.strip() for v in match.group(3).split(",") if v.strip())
            requirements.append(Requirement(match.group(1), match.group(2), values))
        elif match := _OP_RE.match(term):
            op = "=" if match.group(2) == "==" else match.group(2)
            requirements.append(Requirement(match.group(1), op, (match.group(3),)))
        elif match := _EXISTS_RE.match(term):
            op = "!exists" if match.group(1) else "exists"
            requirements.append(Requirement(match.group(2), op))
        else:
            raise bad_request(f"unable to parse requirement: {term.strip()!r}")
    return requirements


def parse_field_selector(text: str | None, kind: Kind) -> list[Requirement]:
    """Parse a `fieldSelector` query value and check its field labels for this kind.

    Raises:
        ApiError: 400 for bad syntax or a field label the kind does not support.
    """
    if not text:
        return []
    allowed = {"metadata.name", "metadata.namespace", *_FIELD_LABELS.get(kind.resource, ())}
    requirements: list[Requirement] = []
    for term in _split_terms(text):
        match = re.match(r"^\s*([A-Za-z0-9_.]+)\s*(==|!=|=)\s*(.*?)\s*$", term)
        if not match:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{term}'")
        field, op, value = match.groups()
        if field not in allowed:
            raise ApiError(
                400,
                f'Unable to find "{kind.api_version}, Resource={kind.plural}" that match '
                f'label selector "", field selector "{text}": field label not supported: '
                f"{field}",
            )
        requirements.append(Requirement(field, "=" if op == "==" else op, (value,)))
    return requirements


def _field_value(obj: Manifest, path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if path == "source" and isinstance(value, dict):
        value = value.get("component")
    if path == "status.successful":
        value = (obj.get("status") or {}).get("succeeded", 0)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def matches(obj: Manifest, labels: list[Requirement], fields: list[Requirement]) -> bool:
    """Whether an object satisfies all label and field requirements."""
    object_labels = (obj.get("metadata") or {}).get("labels") or {}
    for req in labels:
        if not req.matches(object_labels.get(req.key)):
            return False
    return all(req.matches(_field_value(obj, req.key)) for req in fields)
