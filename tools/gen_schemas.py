"""Generate the project's JSON Schemas in `schemas/` from the KubeRay v1.7 CRDs.

Reads the upstream CRDs in place (`../shared/upstream/kuberay-v1.7/crds/`, or `--crds`) and
writes compact draft 2020-12 schemas of our own: field names, types, enums, `required`, limits
and defaults carry over; upstream descriptions do not. Embedded Kubernetes types are not
expanded: they become `{"x-kubernetes-type": "<OpenAPI definition name>"}` markers, which
`renderer.schemas` checks against the Kubernetes OpenAPI schemas of `kubernetes-validate`.

Usage: `python tools/gen_schemas.py [--crds DIR] [--out DIR] [--check]`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

Manifest = dict[str, Any]

REPO = Path(__file__).resolve().parents[1]
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
QUANTITY_EXPECTED = 'a quantity such as "10Gi" or 500'

# kind -> (CRD file, schema file, name of the spec definition)
KINDS = {
    "RayCluster": ("ray.io_rayclusters.yaml", "raycluster_v1.json", "RayClusterSpec"),
    "RayJob": ("ray.io_rayjobs.yaml", "rayjob_v1.json", "RayJobSpec"),
    "RayService": ("ray.io_rayservices.yaml", "rayservice_v1.json", "RayServiceSpec"),
    "RayCronJob": ("ray.io_raycronjobs.yaml", "raycronjob_v1.json", "RayCronJobSpec"),
}

# Fields whose CRD subtree is a Kubernetes type, by field name ("name[]" for array items).
# Each one is verified against the Kubernetes OpenAPI definitions before it is written.
EMBEDDED = {
    "template": "io.k8s.api.core.v1.PodTemplateSpec",
    "submitterPodTemplate": "io.k8s.api.core.v1.PodTemplateSpec",
    "headService": "io.k8s.api.core.v1.Service",
    "serveService": "io.k8s.api.core.v1.Service",
    "env[]": "io.k8s.api.core.v1.EnvVar",
    "envFrom[]": "io.k8s.api.core.v1.EnvFromSource",
    "resources": "io.k8s.api.core.v1.ResourceRequirements",
    "securityContext": "io.k8s.api.core.v1.SecurityContext",
    "volumeMounts[]": "io.k8s.api.core.v1.VolumeMount",
    "valueFrom": "io.k8s.api.core.v1.EnvVarSource",
    "tls[]": "io.k8s.api.networking.v1.IngressTLS",
    "ingressRules[]": "io.k8s.api.networking.v1.NetworkPolicyIngressRule",
    "egressRules[]": "io.k8s.api.networking.v1.NetworkPolicyEgressRule",
}

# Ray types that get a named entry in `$defs` (by field name, "name[]" for array items).
NAMED = {
    "rayClusterSpec": "RayClusterSpec",
    "rayClusterConfig": "RayClusterSpec",
    "headGroupSpec": "HeadGroupSpec",
    "workerGroupSpecs[]": "WorkerGroupSpec",
    "autoscalerOptions": "AutoscalerOptions",
    "gcsFaultToleranceOptions": "GcsFaultToleranceOptions",
    "jobTemplate": "RayJobSpec",
    "deletionStrategy": "DeletionStrategy",
    "upgradeStrategy": None,  # differs between RayCluster and RayService: keep inline
}

MANAGED_BY_RULE = "self in ['ray.io/kuberay-operator', 'kueue.x-k8s.io/multikueue']"
IMMUTABLE_RULE = "self == oldSelf"
DELETION_RULES = {
    "!((has(self.onSuccess) || has(self.onFailure)) && has(self.deletionRules))",
    "((has(self.onSuccess) && has(self.onFailure)) || has(self.deletionRules))",
}
CONDITION_RULES = {
    "!(has(self.jobStatus) && has(self.jobDeploymentStatus))",
    "has(self.jobStatus) || has(self.jobDeploymentStatus)",
}

DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
SERVER_SET = "is set by the API server; remove it from the manifest"


class GenerationError(Exception):
    """The CRDs contain something this generator does not know how to translate."""


def object_meta() -> Manifest:
    """Our own schema for the top-level `metadata` of a ray.io object kept in git."""
    string_map = {"type": "object", "additionalProperties": {"type": "string"}}
    return {
        "title": "metadata of an object kept in git",
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": {
                "type": "string",
                "minLength": 1,
                "maxLength": 253,
                "pattern": DNS1123_SUBDOMAIN,
                "x-expected": "a lower-case DNS-1123 name (a-z, 0-9, '-' and '.')",
            },
            "namespace": {
                "type": "string",
                "minLength": 1,
                "maxLength": 63,
                "pattern": DNS1123_LABEL,
                "x-expected": "a lower-case DNS-1123 label (a-z, 0-9 and '-')",
            },
            "labels": string_map,
            "annotations": string_map,
            "finalizers": {"type": "array", "items": {"type": "string"}},
            "generateName": {
                "not": {},
                "x-forbidden": "generateName is not supported: an object kept in git needs "
                'a fixed "name"',
            },
            "ownerReferences": {
                "not": {},
                "x-forbidden": "ownerReferences are set by controllers; remove them from the "
                "manifest",
            },
            "creationTimestamp": {"type": "null", "x-forbidden": SERVER_SET},
            "deletionGracePeriodSeconds": {"not": {}, "x-forbidden": SERVER_SET},
            "deletionTimestamp": {"not": {}, "x-forbidden": SERVER_SET},
            "generation": {"not": {}, "x-forbidden": SERVER_SET},
            "managedFields": {"not": {}, "x-forbidden": SERVER_SET},
            "resourceVersion": {"not": {}, "x-forbidden": SERVER_SET},
            "selfLink": {"not": {}, "x-forbidden": SERVER_SET},
            "uid": {"not": {}, "x-forbidden": SERVER_SET},
        },
        "additionalProperties": False,
    }


class Generator:
    """Translates one CRD's `v1` schema into our schema, collecting named `$defs`."""

    def __init__(self, kind: str, k8s_defs: Manifest) -> None:
        self.kind = kind
        self.k8s_defs = k8s_defs
        self.defs: dict[str, Manifest] = {}
        # Field sets of Kubernetes types, to notice an embedded type missing from EMBEDDED.
        self.k8s_shapes = {
            frozenset(d["properties"]): name
            for name, d in sorted(k8s_defs.items())
            if len(d.get("properties", {})) >= 3  # smaller shapes match by accident
        }

    def generate(self, crd: Manifest) -> Manifest:
        """Return the whole schema for the CRD document `crd`."""
        versions = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
        if len(versions) != 1:
            raise GenerationError(f"{self.kind}: no single v1 version in the CRD")
        root = versions[0]["schema"]["openAPIV3Schema"]
        extra = set(root["properties"]) - {"apiVersion", "kind", "metadata", "spec", "status"}
        if extra:
            raise GenerationError(f"{self.kind}: unexpected top-level fields {sorted(extra)}")
        spec_name = KINDS[self.kind][2]
        self.defs[spec_name] = self.convert(root["properties"]["spec"], "spec", None)
        self.defs["ObjectMeta"] = object_meta()
        file_name = KINDS[self.kind][1]
        return {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"urn:kuberay-gitops:schemas:{file_name.removesuffix('.json')}",
            "title": f"{self.kind} (ray.io/v1, KubeRay v1.7), as accepted by kuberay-gitops",
            "$comment": "Generated by tools/gen_schemas.py; edit the generator, not this file. "
            '"x-kubernetes-type" marks an embedded Kubernetes type, checked against the '
            "Kubernetes OpenAPI definition of that name.",
            "type": "object",
            "required": ["apiVersion", "kind", "metadata", "spec"],
            "properties": {
                "apiVersion": {"const": "ray.io/v1"},
                "kind": {"const": self.kind},
                "metadata": {"$ref": "#/$defs/ObjectMeta"},
                "spec": {"$ref": f"#/$defs/{spec_name}"},
                "status": {
                    "type": "object",
                    "$comment": "written by the cluster, not by users: accepted and ignored",
                },
            },
            "additionalProperties": False,
            "$defs": dict(sorted(self.defs.items())),
        }

    def convert(self, node: Manifest, path: str, key: str | None) -> Manifest:
        """Translate the CRD schema `node` found at `path` (field `key`, "x[]" for items)."""
        if key in EMBEDDED and (key != "resources" or "properties" in node):
            return self.embedded(node, path, EMBEDDED[key])
        out = self.convert_inline(node, path)
        name = NAMED.get(key) if key is not None else None
        if name is None:
            return out
        if name in self.defs and self.defs[name] != out:
            raise GenerationError(f"{path}: {name} differs from an earlier {name}")
        self.defs[name] = out
        return {"$ref": f"#/$defs/{name}"}

    def convert_inline(self, node: Manifest, path: str) -> Manifest:
        """Translate `node` without naming it."""
        out: Manifest = {}
        if node.get("x-kubernetes-int-or-string"):
            if node.get("anyOf") != [{"type": "integer"}, {"type": "string"}]:
                raise GenerationError(f"{path}: unexpected int-or-string form")
            out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
            out["x-kubernetes-int-or-string"] = True
            if "pattern" in node:
                out["pattern"] = node["pattern"]
                out["x-expected"] = QUANTITY_EXPECTED
            return self.finish(node, out, path, {"anyOf", "pattern", "x-kubernetes-int-or-string"})
        kind = node.get("type")
        if kind in ("string", "boolean", "number"):
            out["type"] = kind
        elif kind == "integer":
            out["type"] = "integer"
            fmt = node.get("format")
            if fmt not in ("int32", "int64"):
                raise GenerationError(f"{path}: integer with format {fmt!r}")
            low, high = INT32 if fmt == "int32" else INT64
            out["format"] = fmt
            out["minimum"] = max(low, node.get("minimum", low))
            out["maximum"] = min(high, node.get("maximum", high))
            return self.finish(node, out, path, {"type", "format", "minimum", "maximum"})
        elif kind == "array":
            out["type"] = "array"
            item_key = f"{path.rsplit('.', 1)[-1]}[]"
            out["items"] = self.convert(node["items"], f"{path}[]", item_key)
            return self.finish(node, out, path, {"type", "items"})
        elif kind == "object":
            return self.convert_object(node, path)
        else:
            raise GenerationError(f"{path}: unexpected type {kind!r}")
        return self.finish(node, out, path, {"type"})

    def convert_object(self, node: Manifest, path: str) -> Manifest:
        """Translate an object: fixed fields (closed) or a map of one value type."""
        out: Manifest = {"type": "object"}
        lookalike = self.k8s_shapes.get(frozenset(node.get("properties", {})))
        if lookalike is not None:
            raise GenerationError(f"{path}: has the fields of {lookalike}; add it to EMBEDDED")
        if "properties" in node:
            if "additionalProperties" in node:
                raise GenerationError(f"{path}: both properties and additionalProperties")
            # The API server applies defaults before it validates, so a required field with a
            # default may be left out (KubeRay samples leave out maxReplicas and minReplicas).
            required = [
                name
                for name in node.get("required", [])
                if "default" not in node["properties"].get(name, {})
            ]
            if required:
                out["required"] = required
            out["properties"] = {
                name: self.convert(child, f"{path}.{name}", name)
                for name, child in node["properties"].items()
            }
            out["additionalProperties"] = False
        elif isinstance(node.get("additionalProperties"), dict):
            out["additionalProperties"] = self.convert(
                node["additionalProperties"], f"{path}.*", None
            )
        else:
            raise GenerationError(f"{path}: an object with neither properties nor a value type")
        return self.finish(node, out, path, {"type", "properties", "required"})

    def finish(self, node: Manifest, out: Manifest, path: str, used: set[str]) -> Manifest:
        """Carry over enums, limits, defaults and CEL rules; refuse anything unknown."""
        for keyword in ("enum", "minimum", "maximum", "minItems", "maxItems", "minLength"):
            if keyword in node and keyword not in out:
                out[keyword] = node[keyword]
        if "maxLength" in node or ("pattern" in node and "pattern" not in out):
            raise GenerationError(f"{path}: unexpected maxLength or pattern")
        for keyword in ("x-kubernetes-list-type", "x-kubernetes-list-map-keys"):
            if keyword in node:
                out[keyword] = node[keyword]
        self.translate_rules(node.get("x-kubernetes-validations", []), out, path)
        if "default" in node:
            out["default"] = node["default"]
        known = used | {
            "description",
            "enum",
            "minimum",
            "maximum",
            "minItems",
            "maxItems",
            "minLength",
            "default",
            "additionalProperties",
            "x-kubernetes-validations",
            "x-kubernetes-list-type",
            "x-kubernetes-list-map-keys",
        }
        unknown = set(node) - known
        if unknown:
            raise GenerationError(f"{path}: unknown keywords {sorted(unknown)}")
        return out

    def translate_rules(self, rules: list[Manifest], out: Manifest, path: str) -> None:
        """Express the CRD's CEL rules as JSON Schema, with our own messages."""
        texts = {rule["rule"] for rule in rules}
        if IMMUTABLE_RULE in texts:
            # Only the API server can compare with the old object; record the fact.
            out["x-immutable"] = True
            texts.discard(IMMUTABLE_RULE)
        if MANAGED_BY_RULE in texts:
            out["enum"] = ["ray.io/kuberay-operator", "kueue.x-k8s.io/multikueue"]
            texts.discard(MANAGED_BY_RULE)
        if texts and texts == DELETION_RULES:
            out["anyOf"] = [
                {"required": ["onSuccess", "onFailure"], "not": {"required": ["deletionRules"]}},
                {
                    "required": ["deletionRules"],
                    "not": {"anyOf": [{"required": ["onSuccess"]}, {"required": ["onFailure"]}]},
                },
            ]
            out["x-messages"] = {
                "anyOf": 'set both "onSuccess" and "onFailure", or "deletionRules" alone',
            }
            texts = set()
        if texts and texts == CONDITION_RULES:
            out["oneOf"] = [{"required": ["jobStatus"]}, {"required": ["jobDeploymentStatus"]}]
            out["x-messages"] = {
                "oneOf": 'set exactly one of "jobStatus" and "jobDeploymentStatus"',
            }
            texts = set()
        if texts:
            raise GenerationError(f"{path}: untranslated CEL rules {sorted(texts)}")

    def embedded(self, node: Manifest, path: str, name: str) -> Manifest:
        """Mark an embedded Kubernetes type, after checking the CRD subtree really is one."""
        definition = self.k8s_defs.get(name)
        if definition is None:
            raise GenerationError(f"{path}: no Kubernetes definition {name}")
        ours = set(node.get("properties", {}))
        theirs = set(definition.get("properties", {}))
        if not ours or not ours <= theirs or len(ours) * 2 < len(theirs):
            raise GenerationError(f"{path}: does not look like {name}: {sorted(ours - theirs)}")
        if node.get("type") != "object":
            raise GenerationError(f"{path}: embedded type is not an object")
        return {"type": "object", "x-kubernetes-type": name}


def latest_k8s_definitions() -> Manifest:
    """The Kubernetes OpenAPI definitions of the newest version kubernetes-validate ships."""
    root = resources.files("kubernetes_validate").joinpath("kubernetes-json-schema")
    versions = [p.name for p in root.iterdir() if p.name.endswith("-local-strict")]

    def version_key(name: str) -> tuple[int, ...]:
        return tuple(int(part) for part in name[1:].split("-")[0].split("."))

    newest = max(versions, key=version_key)
    text = root.joinpath(newest, "_definitions.json").read_text(encoding="utf-8")
    defs: Manifest = json.loads(text)["$defs"]
    return defs


def render(schema: Manifest) -> str:
    """The file text: 2-space JSON, LF, one final newline."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def generate(crds: dict[str, Manifest], k8s_defs: Manifest) -> dict[str, str]:
    """Schema file name -> file text, from each kind's parsed CRD document."""
    return {
        KINDS[kind][1]: render(Generator(kind, k8s_defs).generate(crd))
        for kind, crd in crds.items()
    }


def main(argv: list[str] | None = None) -> int:
    """Generate (or with `--check`, compare) every schema file; return the exit code."""
    shared = Path(os.environ.get("KUBERAY_SHARED", REPO / ".." / "shared"))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crds", type=Path, default=shared / "upstream/kuberay-v1.7/crds")
    parser.add_argument("--out", type=Path, default=REPO / "schemas")
    parser.add_argument("--check", action="store_true", help="exit 1 if a file would change")
    args = parser.parse_args(argv)
    crds = {
        kind: yaml.load((args.crds / crd_file).read_text(encoding="utf-8"), Loader=yaml.CSafeLoader)
        for kind, (crd_file, _, _) in KINDS.items()
    }
    stale = []
    for schema_file, text in generate(crds, latest_k8s_definitions()).items():
        target = args.out / schema_file
        if args.check:
            if not target.exists() or target.read_text(encoding="utf-8") != text:
                stale.append(str(target))
        else:
            target.write_text(text, encoding="utf-8", newline="\n")
    if stale:
        sys.stderr.write("out of date: " + ", ".join(stale) + "\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
