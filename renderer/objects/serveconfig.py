"""The ConfigMap `<gen>-serve-config`: one RayService generation's `serveConfigV2`.

Holds the text verbatim and as canonical JSON of the YAML read the way KubeRay reads it
(`yamltext`); the syncer sends the JSON to the Ray dashboard. Pure.
"""

from __future__ import annotations

import json
from typing import Any

from renderer import naming, yamltext
from renderer.manifest import Manifest
from renderer.model.rayservice import RayServicePlan
from schemas.intent import ROLE_SERVE_CONFIG, SERVE_CONFIG_JSON_KEY, SERVE_CONFIG_KEY


def build_serve_config(service: RayServicePlan) -> Manifest:
    """`<gen>-serve-config`: `serveConfigV2` verbatim and as canonical JSON."""
    text = service.serve_config
    parsed = yamltext.load(text) if text.strip() else {}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": naming.serve_config_name(service.cluster.name),
            "namespace": service.namespace,
            "labels": {naming.ROLE: ROLE_SERVE_CONFIG, **service.source_labels},
        },
        "data": {
            SERVE_CONFIG_KEY: text,
            # default=str: YAML values JSON lacks (!!binary, !!set) are sent as strings.
            SERVE_CONFIG_JSON_KEY: _canonical_json(parsed),
        },
    }


def _canonical_json(value: Any) -> str:
    """`naming.canonical_json`, except that YAML values JSON lacks (!!binary ...) become strings."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
