"""Validate rendered objects: core kinds with kubernetes-validate (strict), the rest with the
JSON Schemas in ../shared/upstream/crd-json-schemas/ (read in place)."""

from __future__ import annotations

import functools
import json
from typing import Any

import jsonschema
import kubernetes_validate

from tests.paths import CRD_SCHEMAS

KUBERNETES_VERSION = "1.33"
# apiVersion group → folder of crd-json-schemas.
_CRD_GROUPS = {
    "gateway.networking.k8s.io",
    "cert-manager.io",
    "argoproj.io",
    "kustomize.toolkit.fluxcd.io",
    "monitoring.coreos.com",
}


@functools.cache
def _crd_validator(group: str, kind: str, version: str) -> jsonschema.protocols.Validator:
    path = CRD_SCHEMAS / group / f"{kind.lower()}_{version}.json"
    schema = json.loads(path.read_text())
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema)


def is_crd_kind(obj: dict[str, Any]) -> bool:
    group = str(obj.get("apiVersion", "")).partition("/")[0]
    return group in _CRD_GROUPS


def validate_object(obj: dict[str, Any]) -> list[str]:
    """Every problem of one rendered object (empty when it is valid)."""
    api_version = str(obj.get("apiVersion", ""))
    if is_crd_kind(obj):
        group, _, version = api_version.partition("/")
        validator = _crd_validator(group, str(obj["kind"]), version)
        return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(obj)]
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{list(exc.path)}: {exc.message}"]
    except kubernetes_validate.SchemaNotFoundError:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if labels.get("app.kubernetes.io/managed-by") == "kuberay-render":
            return [f"no schema for {api_version} {obj.get('kind')}"]
        return []  # a pass-through object of a kind we hold no schema for (e.g. a Kueue Queue)
    return []
